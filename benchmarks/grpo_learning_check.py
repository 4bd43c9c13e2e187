"""GRPO learning check: does joint GRPO from the SFT checkpoint raise the generator's reward and
validation EX within the profile's steps? Run over several seeds, because one 40-question
validation moves by a few points from sampling alone.

Needs a finished SFT stage (notebooks 00-03, or `make reproduce ONLY="00 01 02 03"`). Each seed
trains in a copy of the run folder (the profile's own GRPO runs are left alone) and reports the
generator and retriever rewards over the first and last third of the steps, validation EX before
any update and at every check, and the share of pool targets that differ from the gold set.

    python benchmarks/grpo_learning_check.py --seeds 0 1 2 [--set grpo.max_steps=24]
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
from pathlib import Path


def run_seed(profile: str, overrides: dict, seed: int, source: Path, work: Path) -> dict:
    from acesql_lib.context import RunContext
    from acesql_lib.grpo import build_trainer, run_summary

    run = work / f"seed{seed}"
    shutil.copytree(source, run, ignore=shutil.ignore_patterns("grpo", "eval", "sft_trainer", "shards", "base"))
    ctx = RunContext.create(profile, {**overrides, "run_dir": str(run), "grpo.seed": seed})
    trainer = build_trainer(ctx.cfg, ctx.paths, progress=False)
    trainer.train()
    trainer.engine.close()
    return {"seed": seed, **run_summary(ctx.paths.grpo_run("full") / "metrics.jsonl")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="tiny")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="config overrides")
    ap.add_argument("--out", type=Path, default=Path("reports/benchmarks/grpo_learning_check.json"))
    args = ap.parse_args()

    from acesql_lib.config import parse_overrides
    from acesql_lib.context import RunContext

    overrides = parse_overrides(args.set)
    paths = RunContext.create(args.profile, overrides).paths
    if not (paths.sft_model / "config.json").exists():
        raise SystemExit(f"{paths.sft_model}: no SFT model; run notebooks 00-03 of profile {args.profile} first")
    results = []
    with tempfile.TemporaryDirectory(prefix="grpo_learning_check_") as work:
        for seed in args.seeds:
            r = run_seed(args.profile, overrides, seed, paths.run, Path(work))
            results.append(r)
            checks = ", ".join(f"{e:.2f} @{s}" for s, e in zip(r["val_ex_steps"], r["val_ex"]))
            print(f"seed {seed}: {r['steps']} steps | generator reward {r['reward_generator_first_third']:.3f} -> "
                  f"{r['reward_generator_last_third']:.3f} (first -> last third) | retriever "
                  f"{r['reward_retriever_first_third']:.3f} -> {r['reward_retriever_last_third']:.3f} | val EX "
                  f"{r['val_ex_start']:.2f} before, {checks} | pool targets != gold "
                  f"{100 * r['pool_target_differs_from_gold_share']:.1f}%", flush=True)
    gen = [r["reward_generator_last_third"] - r["reward_generator_first_third"] for r in results]
    val = [r["val_ex"][-1] - r["val_ex_start"] for r in results]
    best = [max(r["val_ex"]) - r["val_ex_start"] for r in results]
    print(f"generator reward change (last - first third): mean {statistics.fmean(gen):+.3f}, "
          f"rose in {sum(x > 0 for x in gen)}/{len(gen)} seeds")
    print(f"validation EX change (last check - before): mean {statistics.fmean(val):+.2f} points, "
          f"rose in {sum(x > 0 for x in val)}/{len(val)} seeds; best check above start in "
          f"{sum(x > 0 for x in best)}/{len(best)}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"profile": args.profile, "overrides": overrides, "runs": results}, indent=1))
    print(f"written: {args.out}")


if __name__ == "__main__":
    main()
