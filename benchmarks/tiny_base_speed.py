"""Tokens/s of the tiny base-model build: one padded pass per batch against length-split passes.

Side by side in one run, on the tiny profile's real training data (both roles, made-up values):
the same seed, the same batches and the same number of optimizer steps for every variant, so the
per-step losses must agree (up to float summation order) and only the time differs. Variants run
in rounds (A B C, A B C, ...) so a load change on a shared machine hits all of them alike.

Also reports the padding share of the batches (how much of a padded batch is pad), the time TRL
spends preparing (tokenising) the data, and `torch.set_num_threads` settings.

    python benchmarks/tiny_base_speed.py --steps 20 --splits 1 2 4 --threads 0
    -> reports/benchmarks/tiny_base_speed.json
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

from acesql_lib.context import RunContext  # noqa: E402
from acesql_lib.models import build_tiny_model  # noqa: E402
from acesql_lib.sft import _train, padding_share  # noqa: E402
from acesql_lib.tinybase import base_sft_config, base_training_data  # noqa: E402
from acesql_lib.tinyworld import build_tinyworld  # noqa: E402


def run_variant(cfg, samples, tokenizer, split: int, threads: int, steps: int, out: Path) -> dict:
    if threads:
        torch.set_num_threads(threads)
    m = cfg.model
    model = build_tiny_model(tokenizer, m.tiny_hidden_size, m.tiny_num_layers, m.tiny_num_heads, m.tiny_num_kv_heads,
                             m.tiny_intermediate_size, m.tiny_max_position, cfg.seed)
    sft_cfg = replace(base_sft_config(cfg), length_split=split, logging_steps=1)
    t0 = time.perf_counter()
    trainer, result = _train(model, tokenizer, samples, sft_cfg, out, max_steps=steps, seed=cfg.seed,
                             completion_only=not m.tiny_base_full_loss, group_by_length=m.tiny_base_group_by_length)
    total = time.perf_counter() - t0
    batches = []
    for i, batch in enumerate(trainer.get_train_dataloader()):  # the same seeded order the steps saw
        if i == steps:
            break
        batches.append(batch)
    whole, cut = padding_share(batches, 1), padding_share(batches, split)
    losses = [r["loss"] for r in result.log_history if "loss" in r]
    return {"split": split, "threads": threads or torch.get_num_threads(), "steps": result.steps,
            "train_seconds": round(result.seconds, 2), "prepare_seconds": round(total - result.seconds, 2),
            "seconds_per_step": round(result.seconds / max(result.steps, 1), 3),
            "real_tokens_per_s": round(whole["real_tokens"] / result.seconds),
            "pad_share_whole_batch": round(whole["pad_share"], 3), "pad_share_after_split": round(cut["pad_share"], 3),
            "losses": losses}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="tiny")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--splits", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--threads", type=int, nargs="+", default=[0], help="torch threads per variant; 0 = as is")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", default="reports/benchmarks/tiny_base_speed.json")
    args = ap.parse_args(argv)
    ctx = RunContext.create(args.profile, {})
    cfg, paths = ctx.cfg, ctx.paths
    world = build_tinyworld(paths.tinyworld, cfg.data.seed, cfg.data.tiny_n_train, cfg.data.tiny_n_dev)
    samples, _, tokenizer = base_training_data(cfg, world)
    work = Path(paths.run) / "bench_tiny_base_speed"
    runs, load_start = [], os.getloadavg()[0]
    for r in range(args.rounds):
        for threads in args.threads:
            for split in args.splits:
                row = run_variant(cfg, samples, tokenizer, split, threads, args.steps, work / f"s{split}_t{threads}")
                row["round"] = r
                runs.append(row)
                print(json.dumps({k: v for k, v in row.items() if k != "losses"}), flush=True)
    summary = {}
    for threads in args.threads:
        for split in args.splits:
            rows = [x for x in runs if x["split"] == split and x["threads"] == (threads or runs[0]["threads"])]
            if rows:
                summary[f"split{split}_threads{rows[0]['threads']}"] = {
                    "seconds_per_step_median": statistics.median(x["seconds_per_step"] for x in rows),
                    "real_tokens_per_s_median": statistics.median(x["real_tokens_per_s"] for x in rows)}
    base = runs[0]
    loss_gap = max((abs(a - b) for x in runs for a, b in zip(x["losses"], base["losses"])), default=0.0)
    ref = summary.get(f"split1_threads{base['threads']}", {}).get("seconds_per_step_median")
    for v in summary.values():
        v["speedup_vs_split1"] = round(ref / v["seconds_per_step_median"], 2) if ref else None
    report = {"profile": cfg.profile, "steps": args.steps, "batch_size": cfg.model.tiny_base_batch_size,
              "samples": len(samples), "cpu_count": os.cpu_count(), "load_avg_start_end": [load_start, os.getloadavg()[0]],
              "max_loss_gap_vs_first_run": loss_gap, "summary": summary, "runs": runs}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({"summary": summary, "max_loss_gap": loss_gap}, indent=1))
    return report


if __name__ == "__main__":
    main()
