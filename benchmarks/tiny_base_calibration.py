"""Tiny base model: two-pass greedy dev EX against SFT steps (what `model.tiny.steps` is set from).

One build of the tiny base model with the profile's settings, evaluated on the first `--questions`
dev questions every `--every` steps (retriever -> pruned schema -> generator, BIRD set EX, plus the
generator on the gold schema). The curve goes to <out>/calibration.jsonl and calibration.png; the
profile's design target for the base model is 10-60% EX.

    python benchmarks/tiny_base_calibration.py --steps 800 --every 100 --set model.tiny.num_layers=4
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="tiny")
    ap.add_argument("--steps", type=int, default=None, help="default: model.tiny.steps of the profile")
    ap.add_argument("--every", type=int, default=100)
    ap.add_argument("--questions", type=int, default=100)
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="config overrides")
    ap.add_argument("--out", type=Path, default=Path("reports/benchmarks/tiny_base_calibration"))
    args = ap.parse_args()

    from acesql_lib.config.profiles import parse_overrides
    from acesql_lib.config.context import RunContext
    from acesql_lib.evaluation.evaluate import EvalOptions, evaluate, load_eval_set
    from acesql_lib.evaluation.stats import SHARE_KEYS
    from acesql_lib.pipeline.tinybase import build_tiny_base
    from acesql_lib.data.tinyworld import build_profile_world

    overrides = parse_overrides(args.set)
    if args.steps:
        overrides["model.tiny.steps"] = args.steps
    tmp = tempfile.mkdtemp(prefix="tiny_base_cal_")
    # its own world too: a data.* override must not rebuild the shared data/tinyworld
    ctx = RunContext.create(args.profile, {**overrides, "run_dir": tmp, "data.tinyworld_dir": f"{tmp}/world"})
    cfg, paths = ctx.cfg, ctx.paths
    world = build_profile_world(cfg.data, paths.tinyworld)
    examples, schemas = load_eval_set(cfg, cfg.eval.sets[0])
    examples = examples[: args.questions]
    args.out.mkdir(parents=True, exist_ok=True)
    log = args.out / "calibration.jsonl"
    log.write_text("")
    start = time.perf_counter()

    def eval_fn(model, tokenizer):
        model.eval()
        m = evaluate(model, tokenizer, examples, schemas, cfg, EvalOptions(mode="set", stage="cal"),
                     progress=False).metrics
        row = {k: m[k] for k in ("ex", "generator_ability", "retriever_ability", "column_recall",
                                 "column_precision", "tokens_per_question")}
        row["elapsed_s"] = round(time.perf_counter() - start, 1)
        print(json.dumps(row), flush=True)
        return row

    path = build_tiny_base(cfg, paths, world, force=True, eval_fn=eval_fn, eval_every=args.every)
    manifest = json.loads((path / "tiny_base_manifest.json").read_text())
    with log.open("w") as f:
        for row in manifest["evals"]:
            f.write(json.dumps({**row, "overrides": overrides}) + "\n")
    print(json.dumps({k: manifest[k] for k in ("steps", "train_seconds", "parameters", "token_lengths")}, indent=1))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = manifest["evals"]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for key, label in [("ex", "two-pass EX"), ("generator_ability", "generator on gold schema"),
                       ("retriever_ability", "retriever ability")]:
        scale = 100.0 if key in SHARE_KEYS else 1.0  # shares are fractions in the metrics, percent on this axis
        ax.plot([r["step"] for r in rows], [scale * r[key] for r in rows], marker="o", label=label)
    ax.axhspan(10, 60, color="0.9", zorder=0, label="target band for the base model")
    ax.set(xlabel="SFT step", ylabel="% of dev questions", title=f"Tiny base model ({args.questions} dev questions)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.out / "calibration.png", dpi=120)


if __name__ == "__main__":
    main()
