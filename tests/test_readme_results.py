"""scripts/readme_results.py: the README's results block is the run's tables, nothing hand-copied."""
from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

from acesql_lib import reports
from acesql_lib.pipeline import run_card
from acesql_lib.config.profiles import load_config
from helpers_reports import write_inputs  # the reports fixture, written by evaluate's own functions
from repo_paths import ROOT

SCRIPT = ROOT / "scripts" / "readme_results.py"


def _script():
    spec = importlib.util.spec_from_file_location("readme_results", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def reports_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("run")
    dirs = write_inputs(root)
    cfg = load_config("tiny")
    for t in reports.build_tables(cfg, reports.ReportInputs(dirs.metrics, dirs.run)):
        t.footer = reports.run_card_note(cfg)  # as build_all writes them
        t.write(dirs.tables, ["md"])
    run_card.write_card(cfg, dirs.tables.parent)  # the run's card: this checkout's code, profile tiny's settings
    return dirs.tables.parent


def test_block_is_replaced_by_the_run_tables_and_the_rest_is_kept(reports_dir, tmp_path):
    rr = _script()
    readme = tmp_path / "README.md"
    readme.write_text("# Kit\n\nintro\n\n<!-- results:tiny -->\nbase 15.0, SFT 15.5 (hand-copied)\n"
                      "<!-- /results:tiny -->\n\n## Later\ntext\n")
    assert rr.main(["--profile", "tiny", "--reports", str(reports_dir), "--readme", str(readme), "--check"]) == 1
    assert rr.main(["--profile", "tiny", "--reports", str(reports_dir), "--readme", str(readme)]) == 0
    text = readme.read_text()
    assert "hand-copied" not in text and text.startswith("# Kit\n\nintro\n\n") and text.endswith("## Later\ntext\n")
    claims = rr.without_run_card_line((reports_dir / "tables" / "claims.md").read_text()).strip()
    main_table = rr.without_run_card_line((reports_dir / "tables" / "table1_main.md").read_text()).strip()
    assert rr.first_set_rows(claims) in text and main_table in text
    assert "| RL > SFT |" in text and "[" in text  # the claims with their CIs
    assert rr.main(["--profile", "tiny", "--reports", str(reports_dir), "--readme", str(readme), "--check"]) == 0
    before = readme.read_text()
    rr.main(["--profile", "tiny", "--reports", str(reports_dir), "--readme", str(readme)])
    assert readme.read_text() == before  # idempotent


def test_the_block_leaves_out_the_tables_run_card_line(reports_dir, tmp_path):
    rr = _script()
    table = (reports_dir / "tables" / "table1_main.md").read_text()
    assert table.rstrip().endswith(reports.run_card_note(load_config("tiny")))
    body = rr.results_section(reports_dir, "tiny")
    assert "Run card:" not in body and table.split("\n\n_Run card:")[0].strip() in body


def test_check_fails_when_the_run_card_is_from_other_settings_or_missing(reports_dir, tmp_path):
    rr = _script()
    readme = tmp_path / "README.md"
    readme.write_text("<!-- results:tiny -->\nold\n<!-- /results:tiny -->\n")
    assert rr.main(["--profile", "tiny", "--reports", str(reports_dir), "--readme", str(readme)]) == 0
    run = tmp_path / "run"
    shutil.copytree(reports_dir, run)
    assert rr.main(["--profile", "tiny", "--reports", str(run), "--readme", str(readme), "--check"]) == 0
    card = json.loads((run / "run_card.json").read_text())
    card["settings"]["digest"] = "f" * 64
    (run / "run_card.json").write_text(json.dumps(card))
    assert rr.run_card_problems(run, "tiny") == [
        f"{run / 'run_card.json'}: settings digest ffffffffffff is not profile tiny's "
        f"{run_card.settings_digest(load_config('tiny'))[:12]} (overrides none)"]
    assert rr.main(["--profile", "tiny", "--reports", str(run), "--readme", str(readme), "--check"]) == 1
    (run / "run_card.json").unlink()
    assert "no readable run card" in rr.run_card_problems(run, "tiny")[0]
    assert rr.run_card_problems(run, "tiny-study") == []  # a study has no card of its own


def test_missing_block_or_reports_are_named(reports_dir, tmp_path):
    rr = _script()
    readme = tmp_path / "README.md"
    readme.write_text("# no markers\n")
    with pytest.raises(rr.ReadmeError, match=r"README.md: expected one block <!-- results:tiny -->"):
        rr.main(["--profile", "tiny", "--reports", str(reports_dir), "--readme", str(readme)])
    with pytest.raises(rr.ReadmeError, match="run the pipeline for profile tiny first"):
        rr.main(["--profile", "tiny", "--reports", str(tmp_path / "nothing"), "--readme", str(readme)])


def test_the_repository_has_one_block_per_profile_in_its_file():
    rr = _script()
    root = ROOT
    for block, name, tables in (("tiny", "README.md", ("table1_main", "claims:first_set")),
                                ("tiny-details", "docs/results.md", ("table2_efficiency", "table4_ablation", "claims")),
                                ("tiny-study", "docs/results.md", rr.ALL_TABLES)):
        assert (block, root / name, tables) in rr.blocks_of(rr.BLOCKS[block][1])
        text = (root / name).read_text()
        begin, end = rr.markers(block)
        assert text.count(begin) == 1 and text.count(end) == 1 and text.index(begin) < text.index(end)
    assert rr.block_file("tiny") == root / "README.md"


def test_the_front_page_block_and_the_details_block_come_from_one_run(reports_dir, tmp_path):
    """`--profile tiny` writes the main table and the claims on the first set into the README's block, and the
    efficiency and ablation tables and every claim into docs/results.md's, both from the same reports."""
    rr = _script()
    readme, status = tmp_path / "README.md", tmp_path / "status.md"
    readme.write_text("<!-- results:tiny -->\nold\n<!-- /results:tiny -->\n")
    status.write_text("x\n<!-- results:tiny-details -->\nold\n<!-- /results:tiny-details -->\n")
    saved = dict(rr.BLOCKS)
    rr.BLOCKS.update({"tiny": (str(readme), "tiny", rr.SECTION_TABLES),
                      "tiny-details": (str(status), "tiny", ("table2_efficiency", "table4_ablation", "claims"))})
    try:
        assert rr.main(["--profile", "tiny", "--reports", str(reports_dir)]) == 0
        assert rr.main(["--profile", "tiny", "--reports", str(reports_dir), "--check"]) == 0
    finally:
        rr.BLOCKS.clear()
        rr.BLOCKS.update(saved)
    tables = reports_dir / "tables"
    front, details = readme.read_text(), status.read_text()
    claims = rr.without_run_card_line((tables / "claims.md").read_text()).strip()
    main_table = rr.without_run_card_line((tables / "table1_main.md").read_text()).strip()
    assert rr.first_set_rows(claims) in front and main_table in front
    assert rr.without_run_card_line((tables / "table4_ablation.md").read_text()).strip() in details
    assert claims in details
    assert rr.without_run_card_line((tables / "table2_efficiency.md").read_text()).strip() not in front


def test_the_front_page_shows_the_claims_measured_on_the_first_set_and_says_where_the_rest_are():
    rr = _script()
    table = ("**Claims**\n\n| Claim | Measured on | Verdict |\n|---|---|---|\n| A | dev | holds |\n| B | dev | reversed |\n"
             "| A | dev_id | holds |\n| B | dev_id | not distinguishable |\n\n- a footnote")
    view = rr.first_set_rows(table)
    assert "| A | dev | holds |" in view and "| B | dev | reversed |" in view and "dev_id" not in view
    assert view.startswith("**Claims**\n\n| Claim | Measured on | Verdict |\n|---|---|---|\n")
    assert "The rows measured on dev;" in view and view.endswith("- a footnote")
    one_set = table.replace("dev_id", "dev")
    assert rr.first_set_rows(one_set) == one_set  # nothing left out, nothing to say
    assert rr.first_set_rows("| x | y |\n|---|---|\n| 1 | 2 |") == "| x | y |\n|---|---|\n| 1 | 2 |"
