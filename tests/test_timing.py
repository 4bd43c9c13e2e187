"""Phase timing: blocks add their wall time to a named phase, a stage logs what it spent since a
snapshot, and the pipeline benchmark reads those logs back per stage."""
from __future__ import annotations

import json

import pytest

from acesql_lib.runtime import timing
from acesql_lib.runtime.timing import PHASES_LOG, append_phases, as_metrics, phase, since, totals
from repo_paths import ROOT


class FakeClock:
    """Stands in for the `time` module acesql_lib.runtime.timing reads (perf_counter for the phases, time for the
    log's timestamp): it moves only when the test advances it, so the seconds are exact under any load."""

    def __init__(self, now: float = 1000.0, wall: float = 1.7e9):
        self.now, self.wall = now, wall

    def perf_counter(self) -> float:
        return self.now

    def time(self) -> float:
        return self.wall

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock(monkeypatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(timing, "time", fake)
    return fake


def test_phases_add_up_and_a_stage_logs_its_share(tmp_path, clock):
    before = totals()
    with phase("generation"):
        clock.advance(0.05)
    with phase("generation"):
        clock.advance(0.05)
    with phase("execution"):
        clock.advance(0.02)
    clock.advance(7.0)  # time outside any phase is nobody's
    spent = since(before)
    assert spent == {"generation": 0.1, "execution": 0.02}  # since() rounds to the millisecond
    assert as_metrics(spent) == {"time/generation_s": 0.1, "time/execution_s": 0.02}
    rec = append_phases(tmp_path / PHASES_LOG, "distill", before, 0.2, questions=3)
    line = json.loads((tmp_path / PHASES_LOG).read_text())
    assert line == rec == {"time": clock.wall, "stage": "distill", "seconds": 0.2, "phases": spent, "questions": 3}
    assert append_phases(tmp_path / PHASES_LOG, "grpo", before, 1.0, only=("execution",))["phases"] == {
        "execution": 0.02}
    assert since(totals()) == {}  # nothing spent after the last snapshot


def test_nested_phases_count_the_inner_time_in_both_and_a_raising_block_still_counts(clock):
    before = totals()
    with phase("rollout"):
        clock.advance(1.0)
        with phase("generation"):
            clock.advance(2.5)
        clock.advance(0.25)
    with pytest.raises(RuntimeError):
        with phase("execution"):
            clock.advance(0.5)
            raise RuntimeError("a failing block")
    assert since(before) == {"rollout": 3.75, "generation": 2.5, "execution": 0.5}


def test_pipeline_benchmark_reads_the_stage_logs(tmp_path):
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks"))
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
