"""The README's two `accelerate launch` commands, 2 CPU processes over gloo, on the rehearsal profile:
mixed SFT (`-m acesql_lib.sft`) and joint GRPO (`-m acesql_lib.grpo`), each with the accelerate
config the rehearsal names (`sft.accelerate_config`, `grpo.accelerate_config`); GRPO is killed after
a checkpoint and resumed by the same command. The policy is the small RL fixture policy, so a step
takes seconds; the launch, the process group, the sharding and the checkpoints are the real ones."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from acesql_lib.config import load_config
from acesql_lib.datasets import load_synsql, schemas_for
from acesql_lib.rl_fixture import build_rl_run, rl_overrides
from acesql_lib.tinybase import gold_samples
from acesql_lib.tinyworld import TinyWorld
from launching import accelerate_launch
from repo_paths import ROOT as REPO

CFG = load_config("rehearsal")


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    return build_rl_run(tmp_path_factory.mktemp("launch"))


def first_errors(stderr: str, width: int = 2500) -> str:
    """The first traceback of the launch's stderr (the rank that failed first) and its end: the tail alone
    shows only the other ranks' broken-connection errors that follow a crash."""
    start = stderr.find("Traceback")
    head = stderr[start:start + width] if start >= 0 else ""
    return f"{head}\n...\n{stderr[-width:]}"


def launch(accelerate_config: str, module: str, *args: str) -> list[str]:
    return accelerate_launch(accelerate_config, "-m", module, *args)


def test_sft_launch_runs_two_processes(run, tmp_path):
    world = TinyWorld(run.parent / "world")
    examples = list(load_synsql(world.train_json, world.train_db_root))[:16]
    samples, _ = gold_samples(examples, schemas_for(examples, n_values=0), style="paper")
    path = tmp_path / "samples.jsonl"
    path.write_text("".join(json.dumps(s) + "\n" for s in samples))
    out = tmp_path / "sft"
    cmd = launch(CFG.sft.accelerate_config, "acesql_lib.sft", "--config", "rehearsal", "--samples", str(path),
                 "--output", str(out), "--model", str(run / "models" / "sft"), "--max-steps", "2")
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["steps"] == 2
    assert (out / "config.json").exists() and list(out.glob("*.safetensors"))


def test_grpo_launch_two_processes_resumes_after_a_kill(run, tmp_path):
    import shutil

    work = tmp_path / "run"
    shutil.copytree(run, work)
    sets = [f"{k}={v}" for k, v in rl_overrides(work, **{"grpo.max_steps": 2, "grpo.save_every": 1}).items()]
    cmd = launch(CFG.grpo.accelerate_config, "acesql_lib.grpo", "--config", "rehearsal", "--set", *sets)
    out = work / "grpo" / "full"
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    marker = out / "checkpoint-1" / "COMPLETE"
    deadline = time.time() + 400
    while not marker.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    if not marker.exists():
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        _, err = proc.communicate()
        pytest.fail(f"no checkpoint-1 before the kill (exit {proc.returncode}): {first_errors(err)}")
    os.killpg(proc.pid, signal.SIGKILL)  # a crash of the whole launch: no handler runs on any rank
    proc.wait()
    assert not (out / "final").exists()
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, first_errors(done.stderr)
    assert (out / "checkpoint-2" / "COMPLETE").exists() and (out / "final" / "config.json").exists()
    steps = [json.loads(x)["step"] for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2]  # step 1 from before the kill, step 2 after the resume, each logged once

