"""Phase timing: blocks add their wall time to a named phase, a stage logs what it spent since a
snapshot, and the pipeline benchmark reads those logs back per stage."""
from __future__ import annotations

import json
import time

from acesql_lib.timing import PHASES_LOG, append_phases, as_metrics, phase, since, totals


def test_phases_add_up_and_a_stage_logs_its_share(tmp_path):
    before = totals()
    with phase("generation"):
        time.sleep(0.05)
    with phase("generation"):
        time.sleep(0.05)
    with phase("execution"):
        time.sleep(0.02)
    spent = since(before)
    assert 0.09 <= spent["generation"] < 1.0 and 0.015 <= spent["execution"] < spent["generation"]
    assert set(as_metrics(spent)) == {"time/generation_s", "time/execution_s"}
    rec = append_phases(tmp_path / PHASES_LOG, "distill", before, 0.2, questions=3)
    line = json.loads((tmp_path / PHASES_LOG).read_text())
    assert line["stage"] == "distill" and line["questions"] == 3 and line["phases"] == rec["phases"]
    assert since(totals()) == {}  # nothing spent after the last snapshot


def test_pipeline_benchmark_reads_the_stage_logs(tmp_path):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    from pipeline_time import collect_phases

    run = tmp_path / "run"
    (run / "models" / "base").mkdir(parents=True)
    (run / "models" / "base" / "tiny_base_manifest.json").write_text(json.dumps({"train_seconds": 300.0,
                                                                                 "build_seconds": 330.0}))
    (run / "distill").mkdir()
    (run / "distill" / PHASES_LOG).write_text(json.dumps({"stage": "distill", "phases": {"generation": 40.0,
                                                                                          "execution": 5.0}}) + "\n")
    (run / "grpo" / "full").mkdir(parents=True)
    steps = [{"step": i, "time/step_s": 10.0, "time/rollout_s": 7.0, "time/generation_s": 6.0,
              "time/execution_s": 1.0} for i in (1, 2)]
    (run / "grpo" / "full" / "metrics.jsonl").write_text("".join(json.dumps(s) + "\n" for s in steps))
    (run / "grpo" / "full" / PHASES_LOG).write_text(json.dumps(  # what JointGRPO.train writes at its end
        {"stage": "grpo (full)", "phases": {"validation": 4.0, "checkpoints": 0.5}}) + "\n")
    evals = {"sft": {"seconds": 9.0, "time/generation_s": 8.0, "time/execution_s": 0.5},
             "rl": {"seconds": 3.0, "time/generation_s": 2.0, "time/execution_s": 0.5},
             "rl_full": {"seconds": 3.0, "time/generation_s": 2.0, "time/execution_s": 0.5, "reused": True}}
    for stage, m in evals.items():
        for split in ("dev", "dev_id"):
            (run / "eval" / stage / split).mkdir(parents=True)
            (run / "eval" / stage / split / "metrics.json").write_text(json.dumps({"stage": stage, **m}))
    phases = collect_phases(run)
    assert phases["base model"] == {"optimizer steps": 300.0, "data, tokenizer, tokenising, saving": 30.0}
    assert phases["distill"] == {"generation": 40.0, "execution": 5.0}
    assert phases["grpo (full)"] == {"generation": 12.0, "execution": 2.0, "update": 6.0, "validation": 4.0,
                                     "checkpoints": 0.5}
    assert phases["evaluation (sft)"] == {"generation": 16.0, "execution": 1.0, "other": 1.0}  # both splits
    assert phases["evaluation (rl)"] == {"generation": 4.0, "execution": 1.0, "other": 1.0}
    assert phases["evaluation (rl_full)"] == {"read back": 0.0}  # copied from the cache: no time of this run

    # a base copied from the shipped folder took no build time in this run
    (run / "models" / "base" / "tiny_base_manifest.json").write_text(json.dumps(
        {"train_seconds": 786.0, "build_seconds": 818.0, "prebuilt_from": "data/tiny_base"}))
    assert collect_phases(run)["base model"] == {"copied from data/tiny_base": 0.0}
