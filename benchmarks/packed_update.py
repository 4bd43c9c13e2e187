"""The GRPO update's forward and backward passes: one sample per row beside samples packed by prompt.

`grpo.packed_prompts` (acesql_lib/train/packed.py) puts the samples of one prompt in one row. On the same
rollouts (a few real GRPO steps of the tiny profile), each role's micro-batch goes through the policy's
forward and backward pass and the reference's forward pass in both layouts, alternating layout by
layout within each round, so load from other processes hits both alike. Printed per role: the median
seconds of each layout, their ratio, and how far the packed values are from the per-row ones (the
largest log-probability difference, the gradient's relative difference).

    HF_HUB_OFFLINE=1 python benchmarks/packed_update.py [--steps 3] [--rounds 5]
    HF_HUB_OFFLINE=1 python benchmarks/packed_update.py --run runs/tiny --world data/tinyworld

Without --run, the small RL run folder of the test suite (rl_setup) is built in a temp folder
(about a minute); with it, a finished tiny run (notebooks 00-03) is read, its own prompts and settings.
Writes reports/benchmarks/packed_update.json.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]  # the kit, and the tests' RL run builder (rl_setup)

import torch  # noqa: E402

from acesql_lib.config.context import RunContext  # noqa: E402
from acesql_lib.train.grpo_run import build_trainer  # noqa: E402
from acesql_lib.train.policy_loss import logprob_fn, role_batch  # noqa: E402
from rl_setup import build_rl_run, rl_overrides  # noqa: E402

LAYOUTS = (False, True)  # grpo.packed_prompts


def trainer_for(run: Path | None, world: Path | None, scratch: Path):
    if run is None:
        fixture = build_rl_run(scratch)
        overrides = rl_overrides(fixture, **{"grpo.max_steps": 100})
    else:  # a copy without its GRPO and evaluation folders: the run itself is never touched
        copy = scratch / "run"
        shutil.copytree(run, copy, ignore=lambda d, names: [n for n in names if Path(d) == run and
                                                          n in ("grpo", "eval", "eval_cache")])
        overrides = {"run_dir": str(copy), "reports_dir": str(scratch / "reports"), "grpo.val_every": 1000,
                     **({"data.tinyworld_dir": str(world)} if world else {})}
    ctx = RunContext.create("tiny", overrides)
    return build_trainer(ctx.cfg, ctx.paths, "full", progress=False)


def role_pass(trainer, batch, packed: bool) -> tuple[float, torch.Tensor, list[torch.Tensor]]:
    """Seconds of the policy's forward + backward and the reference's forward; the log-probs and gradients."""
    trainer.grpo = dataclasses.replace(trainer.grpo, packed_prompts=packed)
    model = trainer.model
    model.zero_grad(set_to_none=True)
    start = time.perf_counter()
    logprobs, cmask = logprob_fn(batch.prompt_ids, batch.completion_ids, trainer.tokenizer.pad_token_id,
                                 trainer.acc.device, trainer.grpo)
    logp = logprobs(model)
    if trainer.reference is not None:
        with torch.no_grad():
            logprobs(trainer.reference)
    (logp * cmask).sum().backward()
    seconds = time.perf_counter() - start
    return seconds, (logp * cmask).detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", type=Path, default=None, help="a finished tiny run folder (default: the test fixture)")
    ap.add_argument("--world", type=Path, default=None, help="its tiny world (data.tinyworld_dir)")
    ap.add_argument("--steps", type=int, default=3, help="GRPO steps whose rollouts are measured")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", type=Path, default=REPO / "reports" / "benchmarks" / "packed_update.json")
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        trainer = trainer_for(args.run, args.world, Path(tmp))
        trainer.model.train()
        batches = []
        for _ in range(args.steps):
            rolls = trainer.collect().rollouts
            for role in ("retriever", "generator"):
                n = len(getattr(rolls[0], role).completions)
                batches.append((role, role_batch(rolls, role, torch.zeros(len(rolls), n), trainer.tokenizer)))
        times = {(role, p): [] for role in ("retriever", "generator") for p in LAYOUTS}
        worst_logp = {"retriever": 0.0, "generator": 0.0}
        worst_grad = {"retriever": 0.0, "generator": 0.0}
        for r in range(args.rounds):
            for role, batch in batches:
                out = {}
                for packed in (LAYOUTS if r % 2 == 0 else LAYOUTS[::-1]):
                    seconds, logp, grads = role_pass(trainer, batch, packed)
                    times[(role, packed)].append(seconds)
                    out[packed] = (logp, grads)
                (a, ga), (b, gb) = out[False], out[True]
                worst_logp[role] = max(worst_logp[role], float((a - b).abs().max()))
                rel = max(float((x - y).norm() / x.norm()) for x, y in zip(ga, gb) if float(x.norm()) > 0)
                worst_grad[role] = max(worst_grad[role], rel)
    rows = {}
    for role in ("retriever", "generator"):
        per_row, packed = (statistics.median(times[(role, p)]) for p in LAYOUTS)
        tokens = [(len(b.prompt_ids), len({tuple(p) for p in b.prompt_ids}),
                   statistics.mean(len(p) for p in b.prompt_ids), statistics.mean(len(c) for c in b.completion_ids))
                  for ro, b in batches if ro == role]
        rows[role] = {"per_row_s": per_row, "packed_s": packed, "packed_over_per_row": packed / per_row,
                      "max_logprob_diff": worst_logp[role], "max_grad_rel_diff": worst_grad[role],
                      "samples": tokens[0][0], "prompts": tokens[0][1],
                      "mean_prompt_tokens": statistics.mean(t[2] for t in tokens),
                      "mean_completion_tokens": statistics.mean(t[3] for t in tokens)}
        print(f"{role:9s}: one sample per row {per_row:.3f} s, packed {packed:.3f} s, ratio {packed / per_row:.2f} "
              f"({rows[role]['samples']} samples, {rows[role]['prompts']} prompts, prompt "
              f"{rows[role]['mean_prompt_tokens']:.0f} and completion {rows[role]['mean_completion_tokens']:.0f} "
              f"tokens on average); max |d logp| {worst_logp[role]:.2e}, gradient rel. diff {worst_grad[role]:.2e}")
    result = {"steps": args.steps, "rounds": args.rounds, "run": str(args.run or "test fixture"),
              "torch_threads": torch.get_num_threads(), "roles": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()
