"""Regenerate the README's results section from what a run wrote under `reports/<profile>/tables/`.

The README never carries hand-copied numbers: each block between `<!-- results:<block> -->` and
`<!-- /results:<block> -->` is replaced by a run's tables (Markdown, as `acesql_lib.reports` writes
them, every EX with its 95% CI). The front page holds the tiny run's main table and its claims on the first
evaluation set (`claims:first_set`); the efficiency and ablation tables of the same run, its claims on every
set, and the multi-seed study live in docs/results.md.
`--check` exits 1 when a file differs from what the reports say (the docs drifted from the kit's output), or
when the run card of a profile's run (`reports/<profile>/run_card.json`) has other settings or code digests than
the profile and code of this checkout (the block came from another run). Each table file's run-card line
(`acesql_lib.reports.tables.run_card_note`) names that run's own card and is left out of the blocks.

    python scripts/readme_results.py --profile tiny            # after `make reproduce`
    python scripts/readme_results.py --profile tiny-study      # after `make study`
    python scripts/readme_results.py --profile tiny --check
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's acesql_lib (the run card's digests)
ALL_TABLES = ("table1_main", "table2_efficiency", "table4_ablation", "claims")
SECTION_TABLES = ("table1_main", "claims:first_set")  # a profile's front-page block; "name:view" (VIEWS)


class ReadmeError(ValueError):
    """The README or the reports folder cannot be used; the message names the file and what is missing."""


# block name -> (file holding it, the reports/<profile>/ it is generated from, its tables in order)
BLOCKS = {"tiny": ("README.md", "tiny", SECTION_TABLES),
          "tiny-details": ("docs/results.md", "tiny", ("table2_efficiency", "table4_ablation", "claims")),
          "tiny-study": ("docs/results.md", "tiny-study", ALL_TABLES)}


def blocks_of(profile: str) -> list[tuple[str, Path, tuple[str, ...]]]:
    """(block, file, tables) of every block generated from reports/<profile>/ (the README's for others)."""
    found = [(name, ROOT / f, tables) for name, (f, p, tables) in BLOCKS.items() if p == profile]
    return found or [(profile, ROOT / "README.md", SECTION_TABLES)]


def block_file(profile: str) -> Path:
    return blocks_of(profile)[0][1]


def markers(profile: str) -> tuple[str, str]:
    return f"<!-- results:{profile} -->", f"<!-- /results:{profile} -->"


def first_set_rows(markdown: str) -> str:
    """A table's rows measured on its first evaluation set (the "Measured on" column), with a line that says
    where every row is; the text around the table kept."""
    lines = markdown.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith("|")), None)
    if start is None or start + 2 >= len(lines):
        return markdown
    header = [c.strip() for c in lines[start].strip("|").split("|")]
    if "Measured on" not in header:
        return markdown
    col = header.index("Measured on")
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    rows = lines[start + 2:end]
    first = rows[0].strip("|").split("|")[col].strip() if rows else ""
    kept = [r for r in rows if r.strip("|").split("|")[col].strip() == first]
    note = [] if len(kept) == len(rows) else \
        ["", f"_The rows measured on {first}; this table with every set's rows is `tables/claims.md` of the run._"]
    return "\n".join(lines[:start + 2] + kept + note + lines[end:])


VIEWS = {"first_set": first_set_rows}  # table spec "name:view" -> the view of its Markdown


def without_run_card_line(markdown: str) -> str:
    """A table file without its run-card line (a block names no one run's card: `--check` compares the card)."""
    from acesql_lib.reports.tables import RUN_CARD_NOTE

    lead = RUN_CARD_NOTE.split(":")[0]
    lines = markdown.splitlines()
    kept = [ln for ln in lines if not ln.startswith(lead)]
    while len(kept) < len(lines) and kept and not kept[-1].strip():  # the blank line before it
        kept.pop()
    return "\n".join(kept) + "\n"


def run_card_problems(reports_dir: Path, profile: str) -> list[str]:
    """Why reports_dir's run is not this checkout's run of `profile` ([] when its card's digests match); a
    profile without its own configs/<profile>.yaml (a multi-seed study) has no run card to compare."""
    from acesql_lib.config.profiles import CONFIG_DIR, load_config
    from acesql_lib.pipeline.run_card import CARD_JSON, card_problems

    if not (CONFIG_DIR / f"{profile}.yaml").is_file():
        return []
    return card_problems(Path(reports_dir) / CARD_JSON, load_config(profile), ROOT)


def results_section(reports_dir: Path, profile: str, tables_wanted: tuple[str, ...] = SECTION_TABLES) -> str:
    """The generated Markdown of one block: a provenance line, then each table's Markdown file."""
    tables = Path(reports_dir) / "tables"
    names = [spec.partition(":")[0] for spec in tables_wanted]
    missing = [n for n in names if not (tables / f"{n}.md").is_file()]
    if len(missing) == len(names):
        raise ReadmeError(f"{tables}: none of {', '.join(n + '.md' for n in names)}; "
                          f"run the pipeline for profile {profile} first")
    parts = [f"_Generated by `scripts/readme_results.py` from `reports/{profile}/tables/` "
             "(do not edit by hand; rerun the script after a run)._"]
    for spec in tables_wanted:
        name, _, view = spec.partition(":")
        path = tables / f"{name}.md"
        if not path.is_file():
            parts.append(f"_{name}: not written by this run._")
            continue
        text = without_run_card_line(path.read_text(encoding="utf-8")).strip()
        parts.append(VIEWS[view](text) if view else text)
    return "\n\n".join(parts)


def replace_section(text: str, profile: str, body: str, where: str = "README.md") -> str:
    begin, end = markers(profile)
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.DOTALL)
    found = pattern.findall(text)
    if len(found) != 1:
        raise ReadmeError(f"{where}: expected one block {begin} ... {end}, found {len(found)}")
    return pattern.sub(lambda _: f"{begin}\n{body}\n{end}", text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="tiny", help="reports/<profile>/, and every block generated from it")
    ap.add_argument("--reports", type=Path, default=None, help="reports folder (default reports/<profile>)")
    ap.add_argument("--readme", type=Path, default=None,
                    help="one file to update instead of the repository's (its blocks of this profile only)")
    ap.add_argument("--check", action="store_true", help="exit 1 if a file differs, change nothing")
    args = ap.parse_args(argv)
    reports_dir = args.reports or ROOT / "reports" / args.profile
    blocks = blocks_of(args.profile)
    if args.readme is not None:  # the blocks of this profile that file holds (all of them missing: an error)
        text = args.readme.read_text(encoding="utf-8")
        held = [(name, args.readme, t) for name, _, t in blocks if markers(name)[0] in text]
        blocks = held or [(blocks[0][0], args.readme, blocks[0][2])]
    stale = []
    for name, path, tables in blocks:
        old = path.read_text(encoding="utf-8")
        new = replace_section(old, name, results_section(reports_dir, args.profile, tables), str(path))
        if new == old:
            print(f"{path}: results block {name} already current")
        elif args.check:
            stale.append(f"{path}: results block {name} differs from {reports_dir}")
        else:
            path.write_text(new, encoding="utf-8")
            print(f"{path}: results block {name} updated")
    if args.check:
        stale += run_card_problems(reports_dir, args.profile)
    for line in stale:
        print(line, file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except ReadmeError as e:
        sys.exit(f"readme_results: {e}")
