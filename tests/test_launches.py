"""The README's two `accelerate launch` commands, 2 CPU processes over gloo, on the rehearsal profile:
mixed SFT (`-m acesql_lib.train.sft`) and joint GRPO (`-m acesql_lib.train.grpo_run`), each from the paper's own launch
file (`sft.accelerate_config`, `grpo.accelerate_config`) with only its CPU keys replaced; GRPO is killed after
a checkpoint and resumed by the same command. The policy is the small RL fixture policy, so a step
takes seconds; the launch, the process group, the sharding and the checkpoints are the real ones."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch

from acesql_lib.config.profiles import load_config
from acesql_lib.data.datasets import load_synsql, schemas_for
from rl_setup import rl_overrides
from acesql_lib.pipeline.tinybase import gold_samples
from acesql_lib.data.tinyworld import TinyWorld
from launching import accelerate_launch
from repo_paths import ROOT as REPO

CFG = load_config("rehearsal")


@pytest.fixture(scope="module")
def run(rl_template) -> Path:
    return rl_template  # read only: every launch below works on its own copy


def first_errors(stderr: str, width: int = 9000) -> str:
    """The first traceback of the launch's stderr (the rank that failed first) and its end: the tail alone
    shows only the other ranks' broken-connection errors that follow a crash."""
    start = stderr.find("Traceback")
    head = stderr[start:start + width] if start >= 0 else ""
    return f"{head}\n...\n{stderr[-width:]}"


def launch(accelerate_config: str, module: str, *args: str) -> list[str]:
    return accelerate_launch(accelerate_config, "-m", module, *args)


def test_sft_launch_runs_two_processes_and_reaches_its_effective_batch_by_accumulation(run, tmp_path):
    world = TinyWorld(run.parent / "world")
    examples = list(load_synsql(world.train_json, world.train_db_root))[:16]
    samples, _ = gold_samples(examples, schemas_for(examples, n_values=0), style="paper")
    path = tmp_path / "samples.jsonl"
    path.write_text("".join(json.dumps(s) + "\n" for s in samples))
    out = tmp_path / "sft"
    config = tmp_path / "sft.yaml"  # the accumulation derived from the effective batch, as the paper profile does
    config.write_text("inherits: rehearsal\nsft:\n  effective_batch_size: 16\n  gradient_accumulation_steps: 0\n")
    cmd = launch(CFG.sft.accelerate_config, "acesql_lib.train.sft", "--config", str(config), "--samples", str(path),
                 "--output", str(out), "--model", str(run / "models" / "sft"), "--max-steps", "2")
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["steps"] == 2
    assert result["batch"] == 16  # 4 per device x 2 accumulated x 2 ranks
    assert (out / "config.json").exists() and list(out.glob("*.safetensors"))


LAUNCH_STEPS = {"grpo.max_steps": 3, "grpo.save_every": 1, "grpo.warmup_ratio": 1.0}  # LR 0, 1/3, 2/3 of its peak


def grpo_launch(run: Path, work: Path, accelerate_config: str) -> tuple[list[str], Path]:
    """A copy of the small RL run and the README's GRPO launch on it (3 steps, a checkpoint after each)."""
    import shutil

    shutil.copytree(run, work)
    sets = [f"{k}={v}" for k, v in rl_overrides(work, **LAUNCH_STEPS).items()]
    command = launch(accelerate_config, "acesql_lib.train.grpo_run", "--config", "rehearsal", "--set", *sets)
    return command, work / "grpo" / "full"


def killed_and_resumed(cmd: list[str], out: Path) -> subprocess.CompletedProcess:
    """The launch killed (SIGKILL to every rank) once checkpoint-1 is complete, then the same command again."""
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
    return done


def metrics(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]


def final_weights(out: Path) -> dict:
    from safetensors.torch import load_file

    return {k: v for f in sorted((out / "final").glob("*.safetensors")) for k, v in load_file(str(f)).items()}


TRAINED = ("loss/retriever", "loss/generator", "kl/retriever", "kl/generator", "grad_norm", "pcgrad/cosine")


@pytest.fixture(scope="module")
def fsdp2_straight(run, tmp_path_factory) -> Path:
    """The paper's launch (FSDP2) rehearsed on 2 CPU processes, 3 steps without a stop."""
    cmd, out = grpo_launch(run, tmp_path_factory.mktemp("fsdp2") / "run", CFG.grpo.accelerate_config)
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, first_errors(done.stderr)
    assert "policy and reference: FSDP2 (accelerate)" in done.stdout  # not DDP, not one process
    return out


def test_the_rehearsal_launches_the_papers_own_launch_files_with_only_the_cpu_keys_replaced(tmp_path):
    import yaml

    from acesql_lib.train.launch import cpu_launch_config

    paper = load_config("paper")
    assert CFG.grpo.accelerate_config == paper.grpo.accelerate_config == "configs/accelerate/fsdp.yaml"
    assert CFG.sft.accelerate_config == paper.sft.accelerate_config == "configs/accelerate/zero3.yaml"
    for name, changed in (("fsdp.yaml", {"use_cpu", "num_processes", "mixed_precision"}),
                          ("zero3.yaml", {"use_cpu", "num_processes", "mixed_precision", "distributed_type",
                                          "deepspeed_config"})):
        own = yaml.safe_load((REPO / "configs" / "accelerate" / name).read_text())
        (tmp_path / name).parent.mkdir(exist_ok=True)
        cpu = yaml.safe_load(cpu_launch_config(REPO / "configs" / "accelerate" / name, tmp_path).read_text())
        differ = {k for k in own.keys() | cpu.keys() if own.get(k) != cpu.get(k)}
        assert differ == changed, name
        assert cpu["use_cpu"] is True and cpu["num_processes"] == 2 and cpu["mixed_precision"] == "no"
    fsdp = yaml.safe_load((REPO / "configs/accelerate/fsdp.yaml").read_text())
    assert fsdp["fsdp_config"]["fsdp_version"] == 2 and fsdp["fsdp_config"]["fsdp_cpu_ram_efficient_loading"] is True


def test_fsdp2_launch_steps_the_schedule_once_per_step_and_writes_sharded_checkpoints_and_a_whole_model(run, fsdp2_straight):
    from acesql_lib.train.schedule import lr_lambda, warmup_steps

    cfg = load_config("rehearsal", rl_overrides(fsdp2_straight.parent.parent, **LAUNCH_STEPS))
    schedule = lr_lambda(warmup_steps(cfg.grpo.warmup_ratio, 3, cfg.grpo.schedule), cfg.grpo.schedule)
    logged = metrics(fsdp2_straight)
    assert [m["step"] for m in logged] == [1, 2, 3]
    # the learning rate each step used: a one-process run's schedule, not one stepped once per process
    # (logged after the step: the rate of the next one)
    assert [m["lr"] for m in logged] == pytest.approx([cfg.grpo.learning_rate * schedule(s) for s in (1, 2, 3)])
    assert len({m["lr"] for m in logged}) == 3
    assert (fsdp2_straight / "checkpoint-3" / "COMPLETE").exists()
    # the final model gathered to full tensors: every weight at the SFT model's shape, and trained
    from safetensors.torch import load_file

    sft = {k: v for f in (run / "models" / "sft").glob("*.safetensors") for k, v in load_file(str(f)).items()}
    final = final_weights(fsdp2_straight)
    assert set(final) == set(sft)
    assert all(final[k].shape == v.shape for k, v in sft.items())
    assert any(not torch.equal(final[k], v) for k, v in sft.items())
    # each rank wrote its own shards of the model and of Adam's moments (torch's distributed checkpoint)
    shards = {p.name for p in (fsdp2_straight / "checkpoint-3" / "sharded").glob("*.distcp")}
    assert shards == {"__0_0.distcp", "__1_0.distcp"}


def test_fsdp2_launch_killed_and_resumed_equals_the_straight_run(run, fsdp2_straight, tmp_path):
    cmd, out = grpo_launch(run, tmp_path / "run", CFG.grpo.accelerate_config)
    killed_and_resumed(cmd, out)
    straight, resumed = metrics(fsdp2_straight), metrics(out)
    assert [m["step"] for m in resumed] == [1, 2, 3]  # step 1 before the kill, 2-3 after, each logged once
    for a, b in zip(straight, resumed):
        for key in ("lr", "w_gen", "reward/retriever", "reward/generator", "pool/sets_per_question_mean", *TRAINED):
            assert b[key] == pytest.approx(a[key], rel=1e-5, abs=1e-9), (a["step"], key)
    want, got = final_weights(fsdp2_straight), final_weights(out)
    for k, v in want.items():
        assert torch.allclose(got[k], v, atol=1e-6), k
    assert (out / "final" / "pool.json").read_text() == (fsdp2_straight / "final" / "pool.json").read_text()


def test_ddp_launch_resumes_after_a_kill_and_its_first_update_is_fsdp2s(run, fsdp2_straight, tmp_path):
    cmd, out = grpo_launch(run, tmp_path / "run", "configs/accelerate/cpu_2proc.yaml")
    done = killed_and_resumed(cmd, out)
    assert "policy and reference: replicated (MULTI_CPU, DDP)" in done.stdout
    assert (out / "checkpoint-3" / "COMPLETE").exists() and (out / "final" / "config.json").exists()
    ddp, fsdp2 = metrics(out), metrics(fsdp2_straight)
    assert [m["step"] for m in ddp] == [1, 2, 3]
    # step 1 (w_gen 0, so PCGrad has one loss): the sharded update is the replicated one. Later steps may
    # differ: under FSDP2 PCGrad's per-tensor products run on each rank's shard (the authors' setup).
    assert ddp[0]["w_gen"] == 0
    for key in TRAINED[:-1]:
        assert ddp[0][key] == pytest.approx(fsdp2[0][key], rel=1e-5, abs=1e-9), key


START_CHECK = Path(__file__).with_name("fsdp2_start_check.py")


def test_every_rank_of_the_fsdp2_launch_starts_from_rank_0s_weights_and_keeps_only_its_gradient_shard(run, tmp_path):
    """The paper's GRPO launch file (fsdp_cpu_ram_efficient_loading: true: transformers loads zeros on every local
    rank but 0) on 2 CPU ranks: after build_trainer each rank's policy and reference equal the model files, its
    engine decodes the SFT model's greedy tokens before step 1, and through a step of several micro-batches no rank
    holds more gradient than its own shard (FSDP2's no_sync would keep the whole unsharded gradient)."""
    import shutil

    work = tmp_path / "run"
    shutil.copytree(run, work)
    cmd = accelerate_launch(CFG.grpo.accelerate_config, str(START_CHECK), str(work))
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, first_errors(done.stderr)
    reports = [json.loads((work / f"start_check_rank{rank}.json").read_text()) for rank in (0, 1)]
    for r in reports:
        assert r["fsdp2"], r
        assert r["policy_equals_disk"] and r["reference_equals_disk"], r
        assert r["engine_decodes_the_policy"], r
        assert r["micro_batches"] >= 4, r  # both roles, two or more micro-batches each
        assert max(r["gradient_bytes"]) <= r["shard_bytes"], r


def test_fsdp2_launch_sent_sigterm_mid_step_saves_and_resumes_to_the_straight_run(run, fsdp2_straight, tmp_path):
    """SIGTERM to the launcher (as a scheduler stops a job) while step 2 runs, with no periodic checkpoint due:
    torchrun sends it to each rank's whole process group (the executor's forkserver and SQL workers too), the
    ranks give up the step in progress after its rollouts (or finish its update) and write the last finished
    step's checkpoint inside torchrun's shutdown timeout; the same command then resumes, at most one step lost,
    to the straight run's metrics and weights."""
    from acesql_lib.train.launch import launch_env

    cmd, out = grpo_launch(run, tmp_path / "run", CFG.grpo.accelerate_config)
    cmd[cmd.index("grpo.save_every=1")] = "grpo.save_every=1000"  # only the stop and the end save
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=launch_env(), start_new_session=True)
    log, deadline = out / "metrics.jsonl", time.time() + 400
    while not (log.exists() and log.read_text().strip()) and proc.poll() is None and time.time() < deadline:
        time.sleep(0.1)
    assert proc.poll() is None, "the launch ended before its first step was logged"
    proc.send_signal(signal.SIGTERM)  # step 2 is under way
    try:
        _, err = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, err = proc.communicate()
        pytest.fail(f"the stopped launch did not end within 300 s: {first_errors(err)}")
    assert proc.returncode != 0 and "SIGTERM" in err, first_errors(err)
    saved = sorted(int(p.name.split("-")[1]) for p in out.glob("checkpoint-*") if (p / "COMPLETE").exists())
    assert saved and saved[-1] >= 1 and not (out / "final").exists(), saved  # at most step 2 lost
    assert [m["step"] for m in metrics(out)][-1] <= saved[-1] + 1
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600, env=launch_env())
    assert done.returncode == 0, first_errors(done.stderr)
    straight, resumed = metrics(fsdp2_straight), metrics(out)
    assert [m["step"] for m in resumed] == [1, 2, 3]
    for a, b in zip(straight, resumed):
        for key in ("lr", "reward/retriever", "reward/generator", *TRAINED):
            assert b[key] == pytest.approx(a[key], rel=1e-5, abs=1e-9), (a["step"], key)
    want, got = final_weights(fsdp2_straight), final_weights(out)
    for k, v in want.items():
        assert torch.allclose(got[k], v, atol=1e-6), k


def test_the_kits_launcher_gives_a_stopped_rank_time_to_save():
    from acesql_lib.train.launch import SHUTDOWN_TIMEOUT_S, launch_env

    assert launch_env({})["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"] == str(SHUTDOWN_TIMEOUT_S) and SHUTDOWN_TIMEOUT_S > 30
    assert launch_env({"TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "90"})["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"] == "90"
