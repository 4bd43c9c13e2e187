"""The official release layouts, written from the tiny world, so a rehearsal reads what a GPU user downloads.

`write_layouts(world, roots)` lays the tiny world out exactly as the six releases of §7 are laid
out on disk (file names and record fields taken from the released files):

    SynSQL-2.5M        data.json, tables.json, databases/<db>/<db>.sqlite
    BIRD dev_20240627  dev.json, dev_tables.json, dev_databases/<db>/<db>.sqlite,
                       dev_databases/<db>/database_description/<table>.csv
    Spider             dev.json, test.json, tables.json, test_tables.json, database/, test_database/
    Spider-DK          Spider-DK.json (type, db_id, query, question), its own tables.json, database/
                       (Spider's database folder merged with Spider-DK's modified ones, as its README asks)
    Spider-Syn         dev.json (db_id, SpiderQuestion, SpiderSynQuestion, query); Spider's databases
    Spider-Realistic   spider-realistic.json (db_id, question, query); Spider's databases

Which tiny questions go where: the SynSQL pool is the world's training pool; BIRD dev is the world's
dev set; Spider dev and test are the even and odd dev questions without their evidence (Spider has
none); Spider-DK, Spider-Syn and Spider-Realistic are derived from Spider dev as the real sets are.
Spider-Syn's question is a word-level synonym rewrite (`SYNONYMS`, the kit's own small list; the
real set was rewritten by hand). A real Spider-DK folder (tests/fixtures/real/spider_dk) can be
merged into the Spider-DK layout, so the robustness row also runs on real questions and databases.

Every folder written carries `.acesql-layout.json` (what wrote it, with a settings hash); a folder
that is not empty and has no such marker is never written into (it may hold a real download).
"""
from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..runtime.reuse_keys import settings_hash
from .tinyworld import TinyWorld

MARKER = ".acesql-layout.json"
LAYOUT_VERSION = 1
# The kit's synonym list for the Spider-Syn stand-in: whole words, case kept for the first letter.
SYNONYMS = {"show": "display", "list": "enumerate", "find": "locate", "number": "count", "average": "mean",
            "highest": "greatest", "lowest": "smallest", "largest": "biggest", "total": "overall",
            "each": "every", "name": "title", "names": "titles", "city": "town", "price": "cost",
            "members": "participants", "member": "participant", "customers": "clients", "customer": "client"}


class LayoutError(RuntimeError):
    """A destination that must not be written into; the message names the folder."""


@dataclass(frozen=True)
class LayoutRoots:
    synsql: Path
    bird_dev: Path
    spider: Path
    spider_dk: Path
    spider_syn: Path
    spider_realistic: Path

    @classmethod
    def from_config(cls, cfg: Any) -> "LayoutRoots":
        from ..config.paths import resolve

        d = cfg.data
        return cls(resolve(d.synsql_dir), resolve(d.bird_dev_dir), resolve(d.spider_dir), resolve(d.spider_dk_dir),
                   resolve(d.spider_syn_dir), resolve(d.spider_realistic_dir))

    def items(self) -> list[tuple[str, Path]]:
        return [(k, getattr(self, k)) for k in ("synsql", "bird_dev", "spider", "spider_dk", "spider_syn",
                                                 "spider_realistic")]


def _dump(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _read(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _copy_db(src: Path, root: Path, db_id: str, with_descriptions: bool = False) -> None:
    """`src` (<db>.sqlite) to `root/<db_id>/<db_id>.sqlite`, with BIRD's database_description/ if asked."""
    dest = root / db_id
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dest / f"{db_id}.sqlite")
    desc = src.parent / "database_description"
    if with_descriptions and desc.is_dir():
        shutil.copytree(desc, dest / "database_description", dirs_exist_ok=True)


def synonym_rewrite(question: str) -> str:
    """Spider-Syn stand-in: each listed word replaced by its synonym (first letter's case kept)."""
    def swap(m: re.Match) -> str:
        word = m.group(0)
        new = SYNONYMS.get(word.lower())
        if new is None:
            return word
        return new[0].upper() + new[1:] if word[0].isupper() else new
    return re.sub(r"[A-Za-z]+", swap, question)


def _prepare(dest: Path, settings: dict[str, Any], force: bool) -> bool:
    """True when dest must be (re)written; raises when it holds files the kit did not write."""
    marker = dest / MARKER
    if marker.is_file():
        try:
            old = _read(marker)
        except (OSError, json.JSONDecodeError):
            old = {}
        if not force and old.get("hash") == settings_hash(settings):
            return False
        shutil.rmtree(dest)
    elif dest.exists() and any(dest.iterdir()):
        raise LayoutError(f"{dest}: not empty and not written by the kit (no {MARKER}); it may hold a real "
                          "download, so it is left alone. Point the profile's data root elsewhere or empty it.")
    dest.mkdir(parents=True, exist_ok=True)
    return True


def _finish(dest: Path, settings: dict[str, Any], counts: dict[str, int]) -> None:
    _dump(dest / MARKER, {"kind": "acesql-layout", "version": LAYOUT_VERSION, "hash": settings_hash(settings),
                          "settings": settings, "counts": counts})


@dataclass(frozen=True)
class _Sources:
    """What every layout is written from: the world, the settings all layouts' markers share (`base`), the dev
    databases' tables.json entries, the dev records, Spider's dev and test halves of them, the dev databases,
    and a real Spider-DK folder to merge in (None: none)."""

    world: TinyWorld
    base: dict[str, Any]
    tables: dict[str, dict[str, Any]]
    dev: list[dict[str, Any]]
    spider_dev: list[dict[str, Any]]
    spider_test: list[dict[str, Any]]
    dev_dbs: list[str]
    real: Path | None


def _sources(world: TinyWorld, manifest: dict[str, Any], real: Path | None) -> _Sources:
    base = {"world": {k: manifest.get(k) for k in ("generator_version", "seed", "n_train", "n_dev")},
            "version": LAYOUT_VERSION}
    tables = {e["db_id"]: e for e in _read(world.tables_json)}
    dev = _read(world.dev_json)
    spider_rows = [{"db_id": r["db_id"], "query": r["SQL"], "question": r["question"]} for r in dev]
    dev_dbs = sorted({r["db_id"] for r in dev} | set(manifest.get("databases", {})))
    return _Sources(world, base, tables, dev, spider_rows[0::2], spider_rows[1::2], dev_dbs, real)


def write_layouts(world: TinyWorld, roots: LayoutRoots, real_spider_dk: str | Path | None = None,
                  force: bool = False) -> dict[str, dict[str, int]]:
    """Write (or reuse) the six release layouts from `world`; returns {layout: {what: count}}."""
    manifest = world.read_manifest()
    real = Path(real_spider_dk) if real_spider_dk else None
    if real is not None and not (real / "Spider-DK.json").is_file():
        raise FileNotFoundError(f"{real}: no Spider-DK.json (data.layouts_real_spider_dk must name a Spider-DK folder)")
    src = _sources(world, manifest, real)
    out: dict[str, dict[str, int]] = {}
    for name, dest in roots.items():  # in LayoutRoots order: synsql, bird_dev, spider, spider_dk, spider_syn, ...
        _WRITERS[name](src, dest, force)
        out[name] = _read(dest / MARKER)["counts"]
    return out


def _synsql(src: _Sources, dest: Path, force: bool) -> None:
    world, base = src.world, src.base
    if _prepare(dest, {**base, "layout": "synsql"}, force):
        shutil.copyfile(world.train_json, dest / "data.json")
        shutil.copyfile(world.train_tables, dest / "tables.json")
        train_dbs = sorted(p.name for p in world.train_db_root.iterdir() if p.is_dir())
        for db in train_dbs:
            _copy_db(world.db_path(db, "train"), dest / "databases", db)
        _finish(dest, {**base, "layout": "synsql"}, {"questions": len(_read(dest / "data.json")),
                                                     "databases": len(train_dbs)})


def _bird_dev(src: _Sources, dest: Path, force: bool) -> None:
    world, base = src.world, src.base
    if _prepare(dest, {**base, "layout": "bird_dev"}, force):
        shutil.copyfile(world.dev_json, dest / "dev.json")
        shutil.copyfile(world.dev_tables, dest / "dev_tables.json")
        for db in src.dev_dbs:
            _copy_db(world.db_path(db, "dev"), dest / "dev_databases", db, with_descriptions=True)
        _finish(dest, {**base, "layout": "bird_dev"}, {"questions": len(src.dev), "databases": len(src.dev_dbs)})


def _spider(src: _Sources, dest: Path, force: bool) -> None:
    base, tables, dev_dbs = src.base, src.tables, src.dev_dbs
    if _prepare(dest, {**base, "layout": "spider"}, force):
        _dump(dest / "dev.json", src.spider_dev)
        _dump(dest / "test.json", src.spider_test)
        _dump(dest / "tables.json", [tables[db] for db in dev_dbs])
        _dump(dest / "test_tables.json", [tables[db] for db in dev_dbs])
        for folder in ("database", "test_database"):
            for db in dev_dbs:
                _copy_db(src.world.db_path(db, "dev"), dest / folder, db)
        _finish(dest, {**base, "layout": "spider"}, {"dev": len(src.spider_dev), "test": len(src.spider_test),
                                                     "databases": len(dev_dbs)})


def _spider_dk(src: _Sources, dest: Path, force: bool) -> None:
    real = src.real
    dk_settings = {**src.base, "layout": "spider_dk", "real": str(real) if real else "",
                   "real_hash": settings_hash((real / "Spider-DK.json").read_text()) if real else ""}
    if _prepare(dest, dk_settings, force):
        rows = [{"type": 0, **r} for r in src.spider_dev]  # type 0: no domain knowledge (Spider-DK's README)
        dk_tables = [src.tables[db] for db in src.dev_dbs]
        for db in src.dev_dbs:  # Spider's database folder merged in, as Spider-DK's README asks
            _copy_db(src.world.db_path(db, "dev"), dest / "database", db)
        n_real = 0
        if real is not None:
            real_rows = _read(real / "Spider-DK.json")
            real_tables = _read(real / "tables.json")
            for entry in real_tables:
                _copy_db(real / "database" / entry["db_id"] / f"{entry['db_id']}.sqlite", dest / "database",
                         entry["db_id"])
            rows, dk_tables, n_real = real_rows + rows, real_tables + dk_tables, len(real_rows)
        _dump(dest / "Spider-DK.json", rows)
        _dump(dest / "tables.json", dk_tables)
        _finish(dest, dk_settings, {"questions": len(rows), "real_questions": n_real, "databases": len(dk_tables)})


def _spider_syn(src: _Sources, dest: Path, force: bool) -> None:
    base = src.base
    if _prepare(dest, {**base, "layout": "spider_syn", "synonyms": SYNONYMS}, force):
        rows = [{"db_id": r["db_id"], "SpiderQuestion": r["question"],
                 "SpiderSynQuestion": synonym_rewrite(r["question"]), "query": r["query"]} for r in src.spider_dev]
        _dump(dest / "dev.json", rows)
        _finish(dest, {**base, "layout": "spider_syn", "synonyms": SYNONYMS},
                {"questions": len(rows), "rewritten": sum(r["SpiderQuestion"] != r["SpiderSynQuestion"] for r in rows)})


def _spider_realistic(src: _Sources, dest: Path, force: bool) -> None:
    base = src.base
    if _prepare(dest, {**base, "layout": "spider_realistic"}, force):
        _dump(dest / "spider-realistic.json", src.spider_dev)
        _finish(dest, {**base, "layout": "spider_realistic"}, {"questions": len(src.spider_dev)})


# Each layout's writer, by its LayoutRoots field: (sources, destination folder, force) -> None.
_WRITERS: dict[str, Callable[[_Sources, Path, bool], None]] = {
    "synsql": _synsql, "bird_dev": _bird_dev, "spider": _spider, "spider_dk": _spider_dk, "spider_syn": _spider_syn,
    "spider_realistic": _spider_realistic}


def ensure_layouts(cfg: Any, progress: bool = True) -> dict[str, dict[str, int]] | None:
    """The profile's layouts when `data.layouts_from` is "tinyworld" (built if missing); None otherwise."""
    if cfg.data.layouts_from != "tinyworld":
        return None
    from ..config.paths import Paths, resolve
    from .tinyworld import build_profile_world

    paths = Paths.from_config(cfg)
    world = build_profile_world(cfg.data, paths.tinyworld)
    real = resolve(cfg.data.layouts_real_spider_dk) if cfg.data.layouts_real_spider_dk else None
    counts = write_layouts(world, LayoutRoots.from_config(cfg), real)
    if progress:
        print("[layouts] " + "; ".join(f"{k}: {', '.join(f'{n} {w}' for w, n in v.items())}" for k, v in counts.items()))
    return counts


def main(argv: list[str] | None = None) -> int:
    import argparse

    from ..config.profiles import load_config, parse_overrides

    ap = argparse.ArgumentParser(description="Write the official release layouts from the tiny world (rehearsal).")
    ap.add_argument("--profile", default="rehearsal")
    ap.add_argument("overrides", nargs="*", help="KEY=VALUE config overrides")
    args = ap.parse_args(argv)
    cfg = load_config(args.profile, parse_overrides(args.overrides))
    if ensure_layouts(cfg) is None:
        print(f"profile {cfg.profile}: data.layouts_from is empty; it reads the downloaded releases")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
