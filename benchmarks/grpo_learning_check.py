"""GRPO learning check: does joint GRPO from the SFT checkpoint raise the generator's reward and
validation EX within the profile's steps? Run over several seeds, because one 40-question
validation moves by a few points from sampling alone.

Needs a finished SFT stage (notebooks 00-03, or `make reproduce ONLY="00 01 02 03"`). Each seed
trains in a copy of the run folder (the profile's own GRPO runs are left alone) and reports the
generator and retriever rewards over the first and last third of the steps, validation EX before
any update and at every check, and the share of pool targets that differ from the gold set.

    python benchmarks/grpo_learning_check.py --seeds 0 1 2 [--set grpo.max_steps=24] [--evaluate]

`--evaluate` adds the held-out test of two claims, "RL > SFT" and "RL shortens outputs": the SFT
model and each seed's final model are evaluated (two-pass greedy, §5) on every configured eval set,
and each seed's EX difference and output-token difference from SFT is paired by question (bootstrap
CI; exact McNemar p for EX, sign-flip permutation p for tokens), then pooled over seeds
(`stats.compare`, as the claims table).
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
from pathlib import Path


_NOT_COPIED = ("grpo", "eval", "sft_trainer", "shards", "seed-*")  # RL runs and evaluations start afresh


def run_seed(profile: str, overrides: dict, seed: int, source: Path, work: Path, evaluate: bool = False) -> dict:
    from acesql_lib.config.context import RunContext
    from acesql_lib.train.grpo_metrics import run_summary
    from acesql_lib.train.grpo_run import build_trainer

    run = work / f"seed{seed}"
    shutil.copytree(source, run, ignore=shutil.ignore_patterns(*_NOT_COPIED, "base"))
    ctx = RunContext.create(profile, {**overrides, "run_dir": str(run), "grpo.seed": seed})
    trainer = build_trainer(ctx.cfg, ctx.paths, progress=False)
    trainer.train()
    trainer.engine.close()
    out = {"seed": seed, **run_summary(ctx.paths.grpo_run("full") / "metrics.jsonl")}
    if evaluate:
        out["held_out"] = held_out(ctx, ctx.paths.grpo_run("full") / "final", "rl")
    return out


HELD_OUT_KEYS = ("correct", "tokens")  # the two claims the check tests: RL > SFT, RL shortens outputs


def held_out(ctx, model: Path, stage: str) -> dict[str, dict[str, dict[str, object]]]:
    """{eval set: {"correct" | "tokens": {question id: value}}} of `model` on every configured eval
    set, read back the way the reports read predictions (`ReportInputs.outcomes`)."""
    from acesql_lib.evaluation.evaluate import evaluate_set
    from acesql_lib.reports.inputs import ReportInputs

    for eval_set in ctx.cfg.eval.sets:
        evaluate_set(ctx.cfg, ctx.paths, model, eval_set, stage, progress=False)
    inputs = ReportInputs(ctx.paths.metrics, ctx.paths.run)
    out = {s.name: {key: inputs.outcomes(stage, s.name, key).get(None, {}) for key in HELD_OUT_KEYS}
           for s in ctx.cfg.eval.sets}
    if inputs.problems:
        raise SystemExit(f"{stage} predictions: " + "; ".join(inputs.problems))
    return out


def _compared(runs: dict, base: dict, key: str, seed: int) -> dict:
    """RL minus SFT for one quantity: each seed paired by question, then pooled over the seeds."""
    from acesql_lib.evaluation import stats

    binary, scale = key == "correct", 100.0 if key == "correct" else 1.0
    per_seed = {k: stats.compare(v, base, ("rl", "sft"), binary=binary, seed=seed) for k, v in runs.items()}
    pooled = stats.compare(runs, {k: base for k in runs}, ("rl", "sft"), binary=binary, seed=seed) \
        if len(runs) > 1 else None

    def row(c):
        return {"diff": scale * c.diff.estimate, "low": scale * c.diff.low, "high": scale * c.diff.high,
                "p": c.p_value, "test": c.test, "rl": scale * c.a_mean, "sft": scale * c.b_mean}
    return {"per_seed": {k: row(c) for k, c in per_seed.items()}, "pooled": None if pooled is None else row(pooled)}


def report_held_out(sft: dict[str, dict[str, dict]], results: list[dict], seed: int) -> dict[str, dict]:
    """RL minus SFT per eval set, EX (points) and output tokens per question, printed and returned."""
    out = {}
    for name, base in sft.items():
        out[name] = {}
        for key, unit in (("correct", "EX points"), ("tokens", "tokens/question")):
            got = _compared({r["seed"]: r["held_out"][name][key] for r in results}, base[key], key, seed)
            out[name][key] = got
            first = next(iter(got["per_seed"].values()))
            print(f"{name} {unit}: SFT {first['sft']:.1f}; RL " + ", ".join(
                f"seed {k}: {v['rl']:.1f} ({v['diff']:+.1f} [{v['low']:+.1f}, {v['high']:+.1f}], p {v['p']:.3f})"
                for k, v in got["per_seed"].items()))
            if got["pooled"] is not None:
                v = got["pooled"]
                print(f"{name} {unit}: RL - SFT over {len(results)} seeds {v['diff']:+.1f} "
                      f"[{v['low']:+.1f}, {v['high']:+.1f}], p {v['p']:.3f} ({v['test']})")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="tiny")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="config overrides")
    ap.add_argument("--evaluate", action="store_true", help="also test RL > SFT on every configured eval set")
    ap.add_argument("--out", type=Path, default=Path("reports/benchmarks/grpo_learning_check.json"))
    args = ap.parse_args()

    from acesql_lib.config.profiles import parse_overrides
    from acesql_lib.config.context import RunContext

    overrides = parse_overrides(args.set)
    ctx = RunContext.create(args.profile, overrides)
    paths = ctx.paths
    if not (paths.sft_model / "config.json").exists():
        raise SystemExit(f"{paths.sft_model}: no SFT model; run notebooks 00-03 of profile {args.profile} first")
    if ctx.cfg.distill.rl_selection == "sft_model":  # chosen once in the source run, then copied to every seed
        from acesql_lib.train.distill import select_by_model

        print("RL questions by the SFT model's rollouts:", select_by_model(ctx.cfg, paths), flush=True)
    results = []
    with tempfile.TemporaryDirectory(prefix="grpo_learning_check_") as work:
        sft = None
        if args.evaluate:
            sft_run = Path(work) / "sft"
            shutil.copytree(paths.run, sft_run, ignore=shutil.ignore_patterns(*_NOT_COPIED))
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
        r.pop("held_out", None)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"profile": args.profile, "overrides": overrides, "runs": results,
                                    "held_out": held}, indent=1))
    print(f"written: {args.out}")


if __name__ == "__main__":
    main()
