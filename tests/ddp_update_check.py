"""Run by test_grpo.py: the same global batch of rollouts updated by one process, then by two
(`accelerate launch`, gloo). Saves parameters and combined gradients for the test to compare."""
from __future__ import annotations

import dataclasses
import os
import pickle
import sys
from pathlib import Path

import torch

from acesql_lib.config.context import RunContext
from acesql_lib.train.grpo_run import build_trainer
from acesql_lib.runtime.process_group import closed_at_the_end
from rl_setup import rl_overrides


def main(mode: str) -> None:
    run = Path(os.environ["ACESQL_RUN"])
    # w_gen = 1 from the first step, so both role gradients and PCGrad take part
    ctx = RunContext.create("tiny", rl_overrides(run, **{"grpo.gen_schedule_ratio": 0.0}))
    trainer = build_trainer(ctx.cfg, ctx.paths, progress=False)
    trainer.record_grads = True
    names = [n for n, p in trainer.unwrapped.named_parameters() if p.requires_grad]
    if mode == "collect-and-single":
        before = {n: p.detach().clone() for n, p in trainer.unwrapped.named_parameters()}
        collected = trainer.collect()
        (run / "rolls.pkl").write_bytes(pickle.dumps(collected))
        trainer.update(collected)
        after = {n: p.detach().clone() for n, p in trainer.unwrapped.named_parameters()}
        torch.save({"before": before, "after": after, "grads": dict(zip(names, trainer.last_grads))},
                   run / "single.pt")
    else:
        collected = pickle.loads((run / "rolls.pkl").read_bytes())
        acc = trainer.acc
        if acc.num_processes != 2:  # the launcher must really start two ranks (a simple launcher starts one)
            raise SystemExit(f"expected 2 processes, the launch started {acc.num_processes}")
        share = collected.rollouts[acc.process_index::acc.num_processes]  # the rank's share, as collect() takes it
        trainer.update(dataclasses.replace(collected, rollouts=share))
        if acc.is_main_process:
            after = {n: p.detach().clone() for n, p in trainer.unwrapped.named_parameters()}
            torch.save({"after": after, "grads": dict(zip(names, trainer.last_grads))}, run / "distributed.pt")
        acc.wait_for_everyone()


if __name__ == "__main__":
    with closed_at_the_end():
        main(sys.argv[1])
