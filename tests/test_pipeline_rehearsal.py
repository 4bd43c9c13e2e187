"""The rehearsal pipeline, notebooks 00-07, headless through the runner (`make reproduce
PROFILE=rehearsal`), at smoke size: the paper profile's code paths (official release layouts, the
paper prompt style with example values, Spider mode, the six evaluation sets, the paper's GRPO
phases) on a tiny base model. Every table, the robustness table included, must carry this run's
numbers, every figure must exist and the preflight of notebook 00 must pass.

Smoke size is configs/rehearsal.yaml with fewer GRPO steps and evaluation questions; the base
model is the rehearsal's own (16 questions learnt by heart in 320 steps), so distillation finds
correct rollouts: the shipped `data/rehearsal_base/`, copied in as `make reproduce PROFILE=rehearsal`
copies it (tests/test_tinybase_prebuilt.py fails when it no longer matches the code). The data
roots move into the test's folder, so `make reproduce PROFILE=rehearsal` is never touched.

It runs as `make reproduce PROFILE=rehearsal` does: under .venv-vllm (tests/vllm_env.py) with
`engine.kind: vllm`, so distillation, GRPO (rollouts, in-place weight loads, validation) and evaluation
all draw from colocated vLLM engines, and the metrics of notebooks 02, 04 and 05 must say so.
"""
import json
import subprocess

import pytest

from acesql_lib.config.profiles import load_config
from acesql_lib.pipeline.preflight_rows import MISSING
from pipeline_checks import NOTEBOOKS, assert_every_artefact, table_rows
from vllm_env import REPO_ROOT, vllm_env, vllm_python

pytestmark = [pytest.mark.notebook, pytest.mark.vllm]

ROOTS = ("synsql_dir", "bird_dev_dir", "spider_dir", "spider_dk_dir", "spider_syn_dir", "spider_realistic_dir")
SMOKE = {"grpo.max_steps": 2, "grpo.val_every": 2, "grpo.save_every": 2, "eval.max_examples": 2}


def test_rehearsal_pipeline_end_to_end(tmp_path):
    reports = tmp_path / "reports"
    data = {f"data.{r}": str(tmp_path / "data" / r.replace("_dir", "") / ("dev_20240627" if r == "bird_dev_dir" else ""))
            for r in ROOTS}
    over = {"run_dir": str(tmp_path / "run"), "reports_dir": str(reports),
            "data.tinyworld_dir": str(tmp_path / "world"), **data, **SMOKE, "engine.kind": "vllm"}
    cfg = load_config("rehearsal", over)
    sets = [s.name for s in cfg.eval.sets]
    assert sets == ["bird_dev", "spider_dev", "spider_test", "spider_dk", "spider_syn", "spider_realistic"]
    python = vllm_python()
    done = subprocess.run([str(python), "-m", "acesql_lib.pipeline", "--profile", "rehearsal", "--no-progress",
                           "--set", *(f"{k}={v}" for k, v in over.items())],
                          cwd=REPO_ROOT, env=vllm_env(), capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert sorted(p.stem for p in (reports / "executed").glob("*.ipynb")) == NOTEBOOKS
    base = json.loads((tmp_path / "run" / "models" / "base" / "tiny_base_manifest.json").read_text())
    assert base["prebuilt_from"] == cfg.model.tiny.prebuilt == "data/rehearsal_base"  # shipped, not built

    m = lambda nb: json.loads((reports / "metrics" / f"{nb}.json").read_text())  # noqa: E731
    checks = m("00_data")["preflight"]
    assert checks and not [c for c in checks if c["status"] == MISSING], checks
    assert {c["area"] for c in checks} >= {"data", "model", "hardware", "packages", "disk", "stages"}
    distill = m("02_self_distillation")
    assert distill["engine"] == m("04_joint_grpo")["engine"] == "vllm"  # what drew the samples
    assert distill["questions"] == cfg.filtering.target_size and distill["questions_with_correct"] > 0
    assert distill["rl_train"] > 0
    assert m("04_joint_grpo")["steps"] == SMOKE["grpo.max_steps"]
    stages = m("05_evaluation")["stages"]
    assert set(stages) == {"base", "sft", "rl"}
    for stage in stages.values():
        assert set(stage) >= set(sets)
        for name in sets:
            assert stage[name]["n"] == SMOKE["eval.max_examples"] and 0 <= stage[name]["ex"] <= 100, (name, stage[name])
            assert stage[name]["engine"] == "vllm", (name, stage[name])

    assert_every_artefact(reports)
    # this run's rows: Table 1, the efficiency table and the robustness table (Table 3) hold the RL
    # model's EX of this run on each set, with its CI
    rl, sft = stages["rl"], stages["sft"]
    ours = lambda table: [r for r in table_rows(reports, table) if r.get("Source") == "profile rehearsal"]  # noqa: E731
    (main,) = ours("table1_main")
    for name, column in (("bird_dev", "BIRD dev"), ("spider_dev", "Spider dev"), ("spider_test", "Spider test")):
        assert main[column].startswith(f"{rl[name]['ex']:.1f} ["), (name, main)
    (robust,) = ours("table3_robustness")
    for name, column in (("spider_dk", "Spider-DK"), ("spider_syn", "Spider-Syn"),
                         ("spider_realistic", "Spider-Realistic")):
        assert robust[column].startswith(f"{rl[name]['ex']:.1f} ["), (name, robust)
    efficiency = {r["Method"]: r for r in ours("table2_efficiency")}
    assert efficiency["ACE-SQL SFT + RL (this kit)"]["EX"].startswith(f"{rl['bird_dev']['ex']:.1f} [")
    assert efficiency["ACE-SQL SFT (this kit)"]["EX"].startswith(f"{sft['bird_dev']['ex']:.1f} [")
    assert float(efficiency["ACE-SQL SFT + RL (this kit)"]["Output tokens / query"]) > 0
    ablation = table_rows(reports, "table4_ablation")
    column = "EX (profile rehearsal)"
    assert len(ablation) >= 5 and all(r[column][:1].isdigit() for r in ablation[:5]), ablation
