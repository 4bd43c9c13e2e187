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

REPO = Path(__file__).resolve().parent.parent
CFG = load_config("rehearsal")


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    return build_rl_run(tmp_path_factory.mktemp("launch"))


def launch(accelerate_config: str, module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(REPO / accelerate_config),
            "-m", module, *args]


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
        err = proc.stderr.read() if proc.poll() is not None else ""
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail(f"no checkpoint-1 before the kill: {err[-3000:]}")
    os.killpg(proc.pid, signal.SIGKILL)  # a crash of the whole launch: no handler runs on any rank
    proc.wait()
    assert not (out / "final").exists()
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (out / "checkpoint-2" / "COMPLETE").exists() and (out / "final" / "config.json").exists()
    steps = [json.loads(x)["step"] for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2]  # step 1 from before the kill, step 2 after the resume, each logged once


def _rank_process(launcher: subprocess.Popen, rank: str, timeout: float = 120):
    """The worker process of `rank` under the launcher (its RANK variable)."""
    import psutil

    deadline = time.time() + timeout
    while time.time() < deadline:
        for child in psutil.Process(launcher.pid).children(recursive=True):
            try:
                if child.environ().get("RANK") == rank and "acesql_lib.grpo" in " ".join(child.cmdline()):
                    return child
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        time.sleep(0.2)
    raise AssertionError(f"no rank {rank} worker under the launcher")


def test_a_sigterm_to_one_rank_stops_every_rank_at_the_same_step_with_a_checkpoint(run, tmp_path):
    """A preemption signal reaching one rank only: the stop is decided by all ranks together, so both save
    the same step's checkpoint and exit (before: rank 1 waited in the checkpoint's barrier while rank 0
    went on into the next step's collectives, and the launch hung)."""
    import shutil

    work = tmp_path / "run"
    shutil.copytree(run, work)
    sets = [f"{k}={v}" for k, v in rl_overrides(work, **{"grpo.max_steps": 8, "grpo.save_every": 100,
                                                          "grpo.val_every": 100}).items()]
    cmd = launch(CFG.grpo.accelerate_config, "acesql_lib.grpo", "--config", "rehearsal", "--set", *sets)
    out = work / "grpo" / "full"
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        rank1 = _rank_process(proc, "1")
        log = out / "metrics.jsonl"
        deadline = time.time() + 400
        while not (log.is_file() and log.read_text().strip()) and proc.poll() is None and time.time() < deadline:
            time.sleep(0.2)
        assert proc.poll() is None, proc.stderr.read()[-3000:]
        rank1.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=300)  # a hang fails here
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    assert proc.returncode != 0 and "SIGTERM: checkpoint of step" in err
    steps = [json.loads(x)["step"] for x in (out / "metrics.jsonl").read_text().splitlines()]
    last = steps[-1]
    assert last < 8 and (out / f"checkpoint-{last}" / "COMPLETE").exists()
    assert not (out / "final").exists()
