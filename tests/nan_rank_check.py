"""Run by test_grpo.py under `accelerate launch` (2 processes, gloo): rank 1's reference model is broken
(NaN), so only rank 1 sees a non-finite loss; every rank must stop at the same step with the checkpoint
of the last good step (before: rank 1 alone entered the checkpoint's barrier, rank 0 PCGrad's all-reduce)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import torch

from acesql_lib.config.context import RunContext
from acesql_lib.train.grpo import NonFiniteLoss
from acesql_lib.train.grpo_run import build_trainer
from acesql_lib.runtime.process_group import closed_at_the_end
from rl_setup import rl_overrides


def main() -> None:
    run = Path(os.environ["ACESQL_RUN"])
    ctx = RunContext.create("tiny", rl_overrides(run, **{"grpo.max_steps": 3, "grpo.val_every": 100}))
    trainer = build_trainer(ctx.cfg, ctx.paths, progress=False)
    if trainer.acc.num_processes != 2:
        raise SystemExit(f"expected 2 processes, the launch started {trainer.acc.num_processes}")
    if trainer.acc.process_index == 1:
        with torch.no_grad():
            next(trainer.reference.parameters()).fill_(float("nan"))
    try:
        trainer.train()
    except NonFiniteLoss as e:
        print(f"rank {trainer.acc.process_index} stopped: {e}", flush=True)
        sys.exit(3)
    sys.exit(0)


if __name__ == "__main__":
    with closed_at_the_end():
        main()
