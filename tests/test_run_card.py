"""The run card: a real pipeline run (papermill, a kernel) writes it; its commit, settings, code and environment
digests are the checkout's; a dirty tree is flagged in a git repository made here."""
from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from acesql_lib.pipeline import run_card
from acesql_lib.config.profiles import load_config
from acesql_lib.pipeline.runner import PipelineOptions, run_pipeline
from acesql_lib.reports.tables import Table, run_card_note
from pipeline_checks import stub_notebook
from repo_paths import ROOT




def _git(root, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture(scope="module")
def piped(tmp_path_factory):
    """A two-notebook pipeline run of profile tiny, with its reports folder; the second notebook writes metrics."""
    tmp = tmp_path_factory.mktemp("card")
    books, reports = tmp / "notebooks", tmp / "reports"
    books.mkdir()
    stub_notebook(books / "00_first.ipynb", "print('[first] done')")
    metrics = {"stages": {"rl": {"tiny_dev": {"ex": 15.5, "n": 200, "tokens_per_question": 93.1}}}}
    stub_notebook(books / "01_metrics.ipynb", f"import json, pathlib\np = pathlib.Path({str(reports)!r}) / 'metrics'\n"
              f"p.mkdir(parents=True, exist_ok=True)\n(p / '05_evaluation.json').write_text(json.dumps({metrics!r}))")
    run_pipeline("tiny", overrides={"grpo.gamma": 0.7},
                 options=PipelineOptions(reports_dir=reports, notebook_dir=books, progress=False, calibrate=False))
    return reports


def test_a_pipeline_run_writes_a_card_naming_its_commit_and_settings_digest(piped):
    card = json.loads((piped / run_card.CARD_JSON).read_text())
    assert card["git"]["commit"] == _git(ROOT, "rev-parse", "HEAD")
    cfg = load_config("tiny", {"grpo.gamma": 0.7})
    assert card["settings"]["digest"] == run_card.settings_digest(cfg)
    assert card["settings"]["overrides"] == {"grpo.gamma": 0.7} and card["settings"]["values"]["grpo"]["gamma"] == 0.7
    assert card["code"]["digest"] == run_card.code_digest(ROOT)["digest"] and card["status"] == "ok"
    from acesql_lib import __version__

    assert card["kit_version"] == __version__
    assert card["environment"]["lock"] == "requirements-dev.txt" and len(card["environment"]["digest"]) == 64
    assert [n["name"] for n in card["times"]["notebooks"]] == ["00_first", "01_metrics"]
    assert card["times"]["gpu_hours"] == 0 or card["hardware"]["gpus"]  # GPU-hours only where there are GPUs
    assert card["metrics"]["evaluation"]["rl"]["tiny_dev"] == {"ex": 15.5, "n": 200, "tokens_per_question": 93.1}
    model = next(d for d in card["data"] if d["role"] == "model")
    assert model["path"] == "data/tiny_base" and model["files"] >= 6 and len(model["sha256"]) == 64
    text = (piped / run_card.CARD_MD).read_text()
    assert card["git"]["commit"][:12] in text and card["settings"]["digest"][:12] in text and "EX, rl" in text


def test_changing_a_setting_changes_the_settings_digest():
    base = run_card.settings_digest(load_config("tiny"))
    assert run_card.settings_digest(load_config("tiny")) == base
    assert run_card.settings_digest(load_config("tiny", {"grpo.gamma": 0.7})) != base
    assert run_card.settings_digest(load_config("tiny", {"eval.max_examples": 5})) != base


def test_a_dirty_tree_is_flagged_and_a_folder_outside_git_says_unknown(tmp_path):
    repo = tmp_path / "repo"
    (repo / "acesql_lib" / "pipeline").mkdir(parents=True)
    shutil.copy(ROOT / "acesql_lib" / "pipeline" / "run_card.py", repo / "acesql_lib" / "pipeline" / "run_card.py")
    _git(tmp_path, "init", "-q", str(repo))
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    clean = run_card.git_state(repo)
    assert clean == {"commit": _git(repo, "rev-parse", "HEAD"), "dirty": False, "changed": []}
    before = run_card.code_digest(repo)["digest"]
    with (repo / "acesql_lib" / "pipeline" / "run_card.py").open("a") as f:
        f.write("# edited\n")
    dirty = run_card.git_state(repo)
    assert dirty["dirty"] is True and dirty["changed"] == ["acesql_lib/pipeline/run_card.py"]
    assert dirty["commit"] == clean["commit"] and run_card.code_digest(repo)["digest"] != before
    plain = tmp_path / "plain"
    plain.mkdir()
    assert run_card.git_state(plain) == {"commit": "unknown", "dirty": "unknown", "changed": []}


def test_the_environment_lists_each_pin_it_misses(tmp_path):
    lock = tmp_path / "lock.txt"
    import importlib.metadata as md

    lock.write_text(f"pyyaml=={md.version('pyyaml')}\nsqlglot==0.0.1\nno-such-distribution==1.0\n")
    env = run_card.environment(load_config("tiny"), lock)
    assert env["pinned"] == 3 and env["at_pin"] == 1
    assert env["mismatches"] == [{"name": "no-such-distribution", "pinned": "1.0", "installed": None},
                                 {"name": "sqlglot", "pinned": "0.0.1", "installed": md.version("sqlglot")}]


def test_a_card_from_other_settings_or_code_is_named_by_the_check(piped):
    card_path = piped / run_card.CARD_JSON
    assert run_card.card_problems(card_path, load_config("tiny", {"grpo.gamma": 0.7})) == []
    problems = run_card.card_problems(card_path, load_config("tiny"))
    assert len(problems) == 1 and "run_card.json: settings digest" in problems[0] and "grpo.gamma" in problems[0]
    card = json.loads(card_path.read_text())
    card["code"]["digest"] = "0" * 64
    other = piped / "other_card.json"
    other.write_text(json.dumps(card))
    assert any("code digest 000000000000 is not this checkout's" in p
               for p in run_card.card_problems(other, load_config("tiny", {"grpo.gamma": 0.7})))
    assert "no readable run card" in run_card.card_problems(piped / "absent.json", load_config("tiny"))[0]


def test_every_table_file_names_the_run_card_and_the_bird_dev_version():
    table = Table("t", "Caption", ["a"], [["1"]], ["a note"], footer=run_card_note(load_config("paper")))
    md, tex = table.to_markdown(), table.to_latex()
    assert md.rstrip().endswith("BIRD dev version: this run 20240627; the paper's rows 20240627._")
    assert "run\\_card.md" in tex and "20240627" in tex
    assert "not measured in profile tiny" in run_card_note(load_config("tiny"))
    newer = load_config("paper", {"eval.sets": [{"name": "bird_dev", "path": "x", "version": "20251106"}]})
    assert "this run 20251106" in run_card_note(newer)
