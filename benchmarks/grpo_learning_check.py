"""GRPO learning check: does joint GRPO from the SFT checkpoint raise the generator's reward and
validation EX within the profile's steps? Run over several seeds, because one 40-question
validation moves by a few points from sampling alone.

Needs a finished SFT stage (notebooks 00-03, or `make reproduce ONLY="00 01 02 03"`). Each seed
trains in a copy of the run folder (the profile's own GRPO runs are left alone) and reports the
generator and retriever rewards over the first and last third of the steps, validation EX before
any update and at every check, and the share of pool targets that differ from the gold set.

    python benchmarks/grpo_learning_check.py --seeds 0 1 2 [--set grpo.max_steps=24] [--evaluate]

`--evaluate` adds the held-out test of the claim "RL > SFT": the SFT model and each seed's final
model are evaluated (two-pass greedy, §5) on every configured eval set, and each seed's EX
difference from SFT is paired by question (bootstrap CI, exact McNemar p), then pooled over seeds
(`stats.compare`).
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
from pathlib import Path


def run_seed(profile: str, overrides: dict, seed: int, source: Path, work: Path, evaluate: bool = False) -> dict:
    from acesql_lib.context import RunContext
    from acesql_lib.grpo import build_trainer, run_summary

    run = work / f"seed{seed}"
    shutil.copytree(source, run, ignore=shutil.ignore_patterns("grpo", "eval", "sft_trainer", "shards", "base"))
    ctx = RunContext.create(profile, {**overrides, "run_dir": str(run), "grpo.seed": seed})
    trainer = build_trainer(ctx.cfg, ctx.paths, progress=False)
    trainer.train()
    trainer.engine.close()
    out = {"seed": seed, **run_summary(ctx.paths.grpo_run("full") / "metrics.jsonl")}
    if evaluate:
        out["correct"] = held_out(ctx, ctx.paths.grpo_run("full") / "final", "rl")
    return out


def held_out(ctx, model: Path, stage: str) -> dict[str, dict[str, bool]]:
    """{eval set: {question id: correct}} of `model` on every configured eval set."""
    from acesql_lib.evaluate import evaluate_set

    out = {}
    for eval_set in ctx.cfg.eval.sets:
        evaluate_set(ctx.cfg, ctx.paths, model, eval_set, stage, progress=False)
        lines = (ctx.paths.eval_dir / stage / eval_set.name / "predictions.jsonl").read_text().splitlines()
        out[eval_set.name] = {(r := json.loads(ln))["id"]: bool(r["correct"]) for ln in lines if ln.strip()}
    return out


def report_held_out(sft: dict[str, dict[str, bool]], results: list[dict], seed: int) -> dict[str, dict]:
    """RL minus SFT EX per eval set: each seed paired by question, then pooled over the seeds."""
    from acesql_lib import stats

    out = {}
    for name, base in sft.items():
        runs = {r["seed"]: r["correct"][name] for r in results}
        per_seed = {k: stats.compare(v, base, ("rl", "sft"), seed=seed) for k, v in runs.items()}
        pooled = stats.compare(runs, {k: base for k in runs}, ("rl", "sft"), seed=seed) if len(runs) > 1 else None
        ex = {k: 100 * sum(v.values()) / len(v) for k, v in runs.items()}
        print(f"{name}: SFT EX {100 * sum(base.values()) / len(base):.1f} on {len(base)} questions; RL EX "
              + ", ".join(f"{v:.1f} (seed {k}: {100 * per_seed[k].diff.estimate:+.1f} "
                          f"[{100 * per_seed[k].diff.low:+.1f}, {100 * per_seed[k].diff.high:+.1f}], "
                          f"p {per_seed[k].p_value:.3f})" for k, v in ex.items()))
        if pooled is not None:
            print(f"{name}: RL - SFT over {len(runs)} seeds {100 * pooled.diff.estimate:+.1f} "
                  f"[{100 * pooled.diff.low:+.1f}, {100 * pooled.diff.high:+.1f}] points, p {pooled.p_value:.3f} "
                  f"({pooled.test})")
        out[name] = {"sft_ex": 100 * sum(base.values()) / len(base), "rl_ex": ex,
                     "per_seed": {k: {"diff": c.diff.estimate, "low": c.diff.low, "high": c.diff.high,
                                      "p": c.p_value} for k, c in per_seed.items()},
                     "pooled": None if pooled is None else {"diff": pooled.diff.estimate, "low": pooled.diff.low,
                                                            "high": pooled.diff.high, "p": pooled.p_value,
                                                            "test": pooled.test}}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="tiny")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="config overrides")
    ap.add_argument("--evaluate", action="store_true", help="also test RL > SFT on every configured eval set")
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
        sft = None
        if args.evaluate:
            sft_run = Path(work) / "sft"
            shutil.copytree(paths.run, sft_run, ignore=shutil.ignore_patterns("grpo", "eval", "sft_trainer", "shards"))
            sft_ctx = RunContext.create(args.profile, {**overrides, "run_dir": str(sft_run)})
            sft = held_out(sft_ctx, sft_ctx.paths.sft_model, "sft")
        for seed in args.seeds:
            r = run_seed(args.profile, overrides, seed, paths.run, Path(work), args.evaluate)
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
    held = report_held_out(sft, results, args.seeds[0]) if sft is not None else None
    for r in results:
        r.pop("correct", None)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"profile": args.profile, "overrides": overrides, "runs": results,
                                    "held_out": held}, indent=1))
    print(f"written: {args.out}")


if __name__ == "__main__":
    main()
