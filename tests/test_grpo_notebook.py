"""Notebook 04 as people step through it: a run under another variant name keeps its own metrics (the main
run's, which the reports read, stay as they were), and no wait of a step cell is silent: the step taken alone,
its closing validation and its checkpoint each draw a bar (a line under papermill, a widget in JupyterLab)."""
from __future__ import annotations

import json

import nbformat
import pytest

from acesql_lib.config.context import RunContext
from acesql_lib.train.grpo_run import build_trainer
from acesql_lib.config.paths import GRPO_METRICS, check_variant, grpo_metrics_name
from acesql_lib.pipeline.runner import NOTEBOOK_DIR, ProgressRelay, run_notebook
from acesql_lib.runtime.progress import PhaseBar
from acesql_lib.reports import ReportInputs
from rl_setup import N_VAL, rl_overrides
from helpers_rl import fresh_run


def _stderr(executed) -> str:
    nb = nbformat.read(executed, as_version=4)
    return "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", [])
                   if o.get("output_type") == "stream" and o.get("name") == "stderr")


@pytest.mark.notebook
def test_a_variant_stepped_through_notebook_04_keeps_its_own_metrics_and_the_main_run_s_unchanged(rl_template,
                                                                                                   tmp_path):
    run = fresh_run(rl_template, tmp_path, "run")
    overrides = rl_overrides(run, **{"grpo.max_steps": 2})
    book = NOTEBOOK_DIR / "04_joint_grpo.ipynb"
    main = run_notebook(book, tmp_path / "main.ipynb", {"profile": "tiny", "overrides": overrides}, progress=False)
    assert main.status == "ok", main.error
    metrics = run / "reports" / "metrics"
    main_file = metrics / f"{GRPO_METRICS}.json"
    before = main_file.read_bytes()
    assert json.loads(before)["variant"] == "full"

    other = run_notebook(book, tmp_path / "stepped.ipynb", {"profile": "tiny", "overrides": overrides,
                                                            "variant": "stepped"}, progress=False)
    assert other.status == "ok", other.error
    assert main_file.read_bytes() == before  # the main run's metrics, byte for byte
    stepped = json.loads((metrics / f"{GRPO_METRICS}_stepped.json").read_text())
    assert stepped["variant"] == "stepped" and stepped["steps"] == 2
    assert (run / "grpo" / "stepped" / "final" / "config.json").exists()

    inputs = ReportInputs(metrics, run)  # what the reports read, by the variant's name
    assert inputs.grpo_run() == json.loads(before) and inputs.grpo_run("stepped") == stepped
    assert inputs.grpo_run("no_pcgrad") is None and not inputs.problems

    # under papermill the bars are lines in the cell's stderr: the step cell's step alone, the run's closing
    # validation (step 2 of 2) and its checkpoints, and the final model's folder
    text = _stderr(tmp_path / "stepped.ipynb")
    for bar in ("step 1 rollouts: 100%", "step 1 update: 100%", f"validation ({N_VAL} questions): 100%",
                "checkpoint 2: 100%", "final model: 100%"):
        assert bar in text, f"{bar!r} not in the executed notebook's stderr:\n{text[-3000:]}"
    lines: list[str] = []  # and `make reproduce` relays them to the terminal
    relay = ProgressRelay("04_joint_grpo", lines.append, every_s=0)
    relay.write(text)
    relay.close()
    for line in (f"04_joint_grpo: validation ({N_VAL} questions), phase 3/3, done in",
                 "04_joint_grpo: checkpoint 2, 1/1, done in"):
        assert any(x.startswith(line) for x in lines), (line, lines)


def test_a_variant_s_summary_is_read_by_its_name_and_one_of_another_variant_is_ignored(tmp_path):
    metrics = tmp_path / "metrics"
    metrics.mkdir()
    (metrics / f"{GRPO_METRICS}.json").write_text(json.dumps({"variant": "full", "steps": 12}))
    (metrics / f"{GRPO_METRICS}_probe.json").write_text(json.dumps({"variant": "probe", "steps": 3}))
    (metrics / f"{GRPO_METRICS}_copied.json").write_text(json.dumps({"variant": "probe", "steps": 3}))
    inputs = ReportInputs(metrics, tmp_path / "run")
    assert inputs.grpo_run()["steps"] == 12 and inputs.grpo_run("probe")["steps"] == 3
    assert inputs.grpo_run("copied") is None
    assert len(inputs.problems) == 1 and f"{GRPO_METRICS}_copied.json" in inputs.problems[0]


def test_the_main_run_keeps_its_metrics_name_and_a_variant_name_that_is_no_file_name_is_refused():
    assert grpo_metrics_name() == grpo_metrics_name("full") == "04_joint_grpo"
    assert grpo_metrics_name("no_pcgrad") == "04_joint_grpo_no_pcgrad"
    for bad in ("", "../full", "a/b", " full", None):
        with pytest.raises(ValueError, match="variant"):
            check_variant(bad)


def test_the_step_that_ends_a_run_shows_bars_for_its_closing_validation_and_checkpoint(rl_template, tmp_path,
                                                                                        capfd):
    """Notebook 04's step cell on the run's last step: collect(), update(), record(), as the cell calls them."""
    run = fresh_run(rl_template, tmp_path, "run")
    ctx = RunContext.create("tiny", rl_overrides(run, **{"grpo.max_steps": 1}))
    trainer = build_trainer(ctx.cfg, ctx.paths, variant="last")
    capfd.readouterr()
    step = trainer.update(trainer.collect())
    trainer.record(step)
    err = capfd.readouterr().err
    assert step.step == trainer.total_steps == 1
    for bar in ("step 1 rollouts: 100%", "step 1 update: 100%", f"validation ({N_VAL} questions): 100%",
                "checkpoint 1: 100%"):
        assert bar in err, f"{bar!r} not shown:\n{err[-3000:]}"
    assert (run / "grpo" / "last" / "checkpoint-1").is_dir()


def test_a_phase_bar_names_the_phase_under_way_and_refuses_an_unknown_one(capfd):
    bar = PhaseBar("work", ["load", "run"])
    bar.done("load")
    bar.bar.refresh()
    assert "1/2" in capfd.readouterr().err.split("\r")[-1]
    with pytest.raises(ValueError, match="unknown phase 'save'"):
        bar.done("save")
    bar.bar.close()
