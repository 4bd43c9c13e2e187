"""The paper's `accelerate launch` files, and their CPU rehearsal from the same files.

    python -m acesql_lib.train.launch configs/accelerate/fsdp.yaml -m acesql_lib.train.grpo_run --config paper  # 4 GPUs
    python -m acesql_lib.train.launch --cpu configs/accelerate/fsdp.yaml -m acesql_lib.train.grpo_run --config rehearsal

The first is `accelerate launch --config_file configs/accelerate/fsdp.yaml -m acesql_lib.train.grpo_run --config paper`
with torchrun's shutdown timeout raised (`launch_env`): a stopped run (SIGTERM to the launcher, as a scheduler
sends it) then has the time to write its checkpoint before torchrun's SIGKILL.

A GPU box runs the launch files as they are. The rehearsal on CPU runs the same file with only the keys a
CPU cannot honour replaced (`cpu_overrides`, also listed in each file's comments), written to a temporary
copy that `accelerate launch` reads; everything else (FSDP2, its units, `cpu_ram_efficient_loading`, the
state-dict type, reshard after forward) reaches the processes as on the GPU box, and accelerate's own FSDP2
code runs there (acesql_lib/models/sharding.py, `fsdp2_on_cpu`).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

CPU_PROCESSES = 2  # one process per core of a 2-core machine; the launch files name 4 (one per GPU)
# Seconds torchrun gives its workers between a SIGTERM and a SIGKILL (its default: 30). A GRPO rank that is
# stopped gives up the step in progress after its rollouts and writes the last finished step's checkpoint
# (grpo.JointGRPO.step); at the paper's sizes the rollouts take up to about 3 minutes and a sharded checkpoint
# of the fp32 policy with Adam's moments (about 24 GB a rank on 4 GPUs) a few more.
SHUTDOWN_TIMEOUT_S = 600


def launch_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a launch: torchrun's shutdown timeout set to `SHUTDOWN_TIMEOUT_S` unless given."""
    env = dict(os.environ if environ is None else environ)
    env.setdefault("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", str(SHUTDOWN_TIMEOUT_S))
    return env


def cpu_overrides(launch: dict[str, Any], processes: int = CPU_PROCESSES) -> dict[str, Any]:
    """The keys of a launch file a CPU rehearsal replaces, with their CPU values (None: the key is dropped).

    - `use_cpu: true`: there is no GPU; accelerate's launcher still starts the processes with torchrun.
    - `num_processes`: the cores, not the GPUs.
    - `mixed_precision: "no"`: fp32 throughout, as the CPU profiles compute (bf16 autocast on CPU would
      give other numbers than the one-process rehearsal it is compared with).
    - DeepSpeed only: `distributed_type: MULTI_GPU` and no `deepspeed_config`. DeepSpeed's ZeRO-3 needs
      CUDA (and is not in the CPU environment); torchrun then starts the processes, which run data parallel
      over gloo. FSDP2 needs no such change: torch's `fully_shard` runs on CPU.
    """
    out: dict[str, Any] = {"use_cpu": True, "num_processes": processes, "mixed_precision": "no"}
    if launch.get("distributed_type") == "DEEPSPEED":
        out.update(distributed_type="MULTI_GPU", deepspeed_config=None)
    return out


def cpu_launch_config(path: str | Path, folder: str | Path, processes: int = CPU_PROCESSES) -> Path:
    """`path` with `cpu_overrides` applied, written into `folder` (same file name); the copy to launch on CPU."""
    path = Path(path)
    try:
        launch = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as e:
        raise ValueError(f"{path}: cannot read the accelerate launch file: {e}") from e
    if not isinstance(launch, dict) or "distributed_type" not in launch:
        raise ValueError(f"{path}: not an accelerate launch file (no distributed_type)")
    for key, value in cpu_overrides(launch, processes).items():
        if value is None:
            launch.pop(key, None)
        else:
            launch[key] = value
    out = Path(folder) / path.name
    out.write_text(yaml.safe_dump(launch, sort_keys=False), encoding="utf-8")
    return out


def command(config: str | Path, target: list[str], port: int | None = None) -> list[str]:
    """`accelerate launch --config_file CONFIG [--main_process_port PORT] TARGET...` for this interpreter."""
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(config)]
    if port is not None:
        cmd += ["--main_process_port", str(port)]
    return cmd + list(target)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="accelerate launch of a launch file, on GPUs or rehearsed on CPU.")
    ap.add_argument("--cpu", action="store_true", help="rehearse on CPU processes (cpu_overrides)")
    ap.add_argument("--processes", type=int, default=CPU_PROCESSES, help="CPU processes (with --cpu)")
    ap.add_argument("--main-process-port", type=int, default=None)
    ap.add_argument("config", help="an accelerate launch file, e.g. configs/accelerate/fsdp.yaml")
    ap.add_argument("target", nargs=argparse.REMAINDER, help="what accelerate launch runs: -m MODULE ARGS...")
    args = ap.parse_args(argv)
    if not args.cpu:
        return subprocess.call(command(args.config, args.target, args.main_process_port), env=launch_env())
    with tempfile.TemporaryDirectory(prefix="acesql-launch-") as tmp:
        config = cpu_launch_config(args.config, tmp, args.processes)
        env = launch_env({"HF_HUB_OFFLINE": "1", **os.environ})
        return subprocess.call(command(config, args.target, args.main_process_port), env=env)


if __name__ == "__main__":
    raise SystemExit(main())
