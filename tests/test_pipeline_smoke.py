"""The whole tiny pipeline, notebooks 00-07, headless through the runner (what `make reproduce`
does), at smoke size: every expected table and figure must exist and the metrics must be in range.

Smoke size keeps the code paths and the world of configs/tiny.yaml and shrinks the counts: the
profile's world (built in the test's own folder) and therefore its shipped base model, copied in as
`make reproduce` copies it (the one base every tiny run shares; the rehearsal smoke run and
tests/test_tinybase_prebuilt.py build theirs); 64 filtered questions; 2 RL steps per variant; 40
eval questions. Its numbers exercise the plumbing, not the method (`make reproduce` runs the
profile's sizes).
"""
import json

import pytest

from acesql_lib.config import load_config
from acesql_lib.pipeline import run_pipeline
from acesql_lib.reports import FIGURES, TABLES
from pipeline_checks import NOTEBOOKS, assert_every_artefact

pytestmark = pytest.mark.notebook

SMOKE = {"filtering.target_size": 64, "distill.n_validation": 4, "distill.shard_size": 32, "grpo.max_steps": 2,
         "grpo.val_every": 2, "grpo.save_every": 2, "eval.max_examples": 40}


def test_tiny_pipeline_end_to_end(tmp_path):
    reports = tmp_path / "reports"
    runs = run_pipeline("tiny", overrides={"run_dir": str(tmp_path / "run"), "reports_dir": str(reports),
                                           "data.tinyworld_dir": str(tmp_path / "world"), **SMOKE}, progress=False)
    assert [r.name for r in runs] == NOTEBOOKS
    assert all(r.status == "ok" for r in runs)
    for nb in runs:
        assert (reports / "executed" / f"{nb.name}.ipynb").exists()
    assert_every_artefact(reports)

    m = lambda nb: json.loads((reports / "metrics" / f"{nb}.json").read_text())  # noqa: E731
    n_train = load_config("tiny").data.tiny_n_train
    base = json.loads((tmp_path / "run" / "models" / "base" / "tiny_base_manifest.json").read_text())
    assert base["prebuilt_from"] == "data/tiny_base"  # the shipped base, not a build
    data = m("00_data")
    assert data["train_questions"] == n_train and data["train_skipped"] == 0
    assert data["eval_questions"]["tiny_dev"] >= 300 and data["eval_questions"]["tiny_dev_id"] >= 400
    assert all(v >= 0.2 for v in data["annotated_route_share"].values())
    filtering = m("01_source_filtering")
    assert filtering["kept"] == SMOKE["filtering.target_size"]
    assert filtering["funnel"]["input"] == n_train
    assert sum(filtering["dropped"].values()) == filtering["funnel"]["input"] - filtering["kept"]
    assert (tmp_path / "run" / "data" / "filtered_pool.json").exists()
    for fig in ("data_routes", "filtering_distributions", "distill_pass_rates", "sft_loss"):
        assert (reports / "figures" / f"{fig}.png").stat().st_size > 0, fig
    distill = m("02_self_distillation")
    assert distill["questions"] == SMOKE["filtering.target_size"]
    assert sum(distill["pass_rate_hist"].values()) == distill["questions"]
    # one SFT pair per question with a correct rollout, except the validation questions (held out of SFT)
    assert distill["sft_samples"]["retriever"] == distill["sft_samples"]["generator"] == \
        distill["questions_with_correct"] - distill["rl_validation"] > 0
    assert distill["rl_train"] > 0 and 0.0 <= distill["alt_route_share"] <= 1.0
    sft = m("03_mixed_sft")
    assert sft["steps"] > 0 and 0 <= sft["validation_ex_base"] <= 100 and 0 <= sft["validation_ex_sft"] <= 100
    grpo = m("04_joint_grpo")
    assert grpo["steps"] == SMOKE["grpo.max_steps"] and 0 <= grpo["pool_target_differs_from_gold_share"] <= 1
    stages = m("05_evaluation")["stages"]
    assert set(stages) == {"base", "sft", "rl"}
    for stage in stages.values():
        assert set(stage) == {"tiny_dev", "tiny_dev_id"}  # both dev splits
        for res in stage.values():
            assert res["n"] == SMOKE["eval.max_examples"] and 0 <= res["ex"] <= 100
            assert 0 <= res["retriever_ability"] <= 1 and res["tokens_per_question"] > 0  # shares are fractions
    claims = (reports / "tables" / "claims.md").read_text()
    assert "| RL > SFT |" in claims and "Verdict" in claims  # every claim with a CI and a verdict
    rl_rows = [line for line in claims.splitlines() if line.startswith("| RL > SFT |")]
    assert len(rl_rows) == 2 and any("tiny_dev_id" in line for line in rl_rows)  # the claim on each split
    variants = m("06_ablations")["variants"]
    assert set(variants) == {"full", "no_pcgrad", "no_schedule", "static_gold", "dense_reward"}
    assert all(set(v) == {"tiny_dev", "tiny_dev_id"} for v in variants.values())  # eval.ablation_sets
    # the full variant is notebook 05's RL model: its evaluation is read back, not redone
    assert all(variants["full"][s]["reused"] and not stages["rl"][s]["reused"] for s in ("tiny_dev", "tiny_dev_id"))
    assert all(variants["full"][s]["ex"] == stages["rl"][s]["ex"] for s in ("tiny_dev", "tiny_dev_id"))
    assert not any(variants[v][s]["reused"] for v in variants if v != "full" for s in ("tiny_dev", "tiny_dev_id"))
    assert m("07_tables_and_figures")["n_artefacts"] >= len(TABLES) * 3 + len(FIGURES) * 2
    main_table = (reports / "tables" / "table1_main.md").read_text()
    assert "paper" in main_table.lower() and "tiny" in main_table.lower()
