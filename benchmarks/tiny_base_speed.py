"""Tokens/s of the tiny base-model build: one padded pass per batch with TRL's fused head, against
length-split passes (`sft.length_split`) and the head on completion positions (`sft.completion_head`).

Side by side in one run, on the tiny profile's real training data (both roles, made-up values):
the same seed, the same batches and the same number of optimizer steps for every variant, so the
per-step losses must agree (up to float summation order) and only the time differs. Variants run
in rounds (A B C, A B C, ...) so a load change on a shared machine hits all of them alike.

Also reports the padding share of the batches (how much of a padded batch is pad) and the time
TRL spends preparing (tokenising) the data, which the variants then share.

A variant's optional fourth field tries a CPU setting on top: `bf16` (bfloat16 autocast around the
loss, which this CPU's AMX units run; the losses then differ by rounding) or `compile`
(`torch.compile` of the decoder, dynamic shapes). The per-step time is the median of the steps
after the first, so a compilation or warm-up is not counted in it (`first_step_seconds` shows it).

    python benchmarks/tiny_base_speed.py --steps 4 --rounds 4 --variants 1,0 1,1 2,1 4,1 8,1 4,1,1
    python benchmarks/tiny_base_speed.py --steps 12 --rounds 3 --variants 4,1 4,1,1 4,1,2,bf16 4,1,2,compile
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

from acesql_lib.config.context import RunContext  # noqa: E402
from acesql_lib.models.loading import build_tiny_model  # noqa: E402
from acesql_lib.train.sft import SFTRun, check_samples, make_trainer, padding_share  # noqa: E402
from transformers import TrainerCallback, set_seed  # noqa: E402
from acesql_lib.pipeline.tinybase import base_sft_config, base_training_data, compiled_decoder  # noqa: E402
from acesql_lib.data.tinyworld import build_profile_world  # noqa: E402


NUMERICS = ("fp32", "bf16", "compile")


class _StepTimes(TrainerCallback):
    """Wall time of every optimizer step (from the previous step's end, the first from train begin)."""

    def __init__(self):
        self.times: list[float] = []
        self._last = 0.0

    def on_train_begin(self, args, state, control, **kwargs):
        self._last = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        now = time.perf_counter()
        self.times.append(now - self._last)
        self._last = now


def run_variant(cfg, data, tokenizer, split: int, head: bool, threads: int, steps: int, out: Path,
                numerics: str = "fp32") -> dict:
    """`steps` optimizer steps from the seed's fresh model on the already tokenised `data`."""
    if numerics not in NUMERICS:
        raise ValueError(f"numerics must be one of {NUMERICS}, got {numerics!r}")
    torch.set_num_threads(threads)
    m = cfg.model
    torch.manual_seed(cfg.seed)
    model = build_tiny_model(tokenizer, m.tiny.hidden_size, m.tiny.num_layers, m.tiny.num_heads, m.tiny.num_kv_heads,
                             m.tiny.intermediate_size, m.tiny.max_position, cfg.seed)
    sft_cfg = replace(base_sft_config(cfg), length_split=split, completion_head=head, logging_steps=1)
    set_seed(cfg.seed)
    timer = _StepTimes()
    run = SFTRun(steps, cfg.seed, group_by_length=m.tiny.group_by_length, completion_only=not m.tiny.full_loss,
                 desc=f"split {split}, head {'on' if head else 'off'}, {numerics}")
    trainer = make_trainer(model, tokenizer, data, sft_cfg, out, run, callbacks=[timer])
    if numerics == "bf16":  # the Trainer runs every loss inside this context manager
        trainer.compute_loss_context_manager = lambda: torch.autocast("cpu", dtype=torch.bfloat16)
    t0 = time.perf_counter()
    with compiled_decoder(model, numerics == "compile"):
        trainer.train()
    seconds = time.perf_counter() - t0
    batches = []
    for i, batch in enumerate(trainer.get_train_dataloader()):  # the same seeded order the steps saw
        if i == steps:
            break
        batches.append(batch)
    whole, cut = padding_share(batches, 1), padding_share(batches, split)
    losses = [r["loss"] for r in trainer.state.log_history if "loss" in r]
    later = timer.times[1:] or timer.times
    return {"split": split, "completion_head": head, "threads": threads, "numerics": numerics,
            "steps": trainer.state.global_step, "train_seconds": round(seconds, 2),
            "first_step_seconds": round(timer.times[0], 3) if timer.times else None,
            "seconds_per_step": round(statistics.median(later), 3) if later else None,
            "real_tokens_per_s": round(whole["real_tokens"] / seconds),
            "pad_share_whole_batch": round(whole["pad_share"], 3), "pad_share_after_split": round(cut["pad_share"], 3),
            "losses": losses}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="tiny")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--variants", nargs="+", default=["1,0", "1,1", "4,1", "8,1"],
                    help="SPLIT,HEAD[,THREADS[,NUMERICS]]: sft.length_split, sft.completion_head (0/1), torch "
                         "threads (default: as started) and fp32 | bf16 | compile; the first is the baseline")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", default="reports/benchmarks/tiny_base_speed.json")
    args = ap.parse_args(argv)
    default_threads = torch.get_num_threads()
    variants = [(int(p[0]), bool(int(p[1])), int(p[2]) if len(p) > 2 and p[2] else default_threads,
                 p[3] if len(p) > 3 else "fp32") for p in (v.split(",") for v in args.variants)]
    ctx = RunContext.create(args.profile, {})
    cfg, paths = ctx.cfg, ctx.paths
    world = build_profile_world(cfg.data, paths.tinyworld)
    samples, _, tokenizer = base_training_data(cfg, world)
    work = Path(paths.run) / "bench_tiny_base_speed"
    t0 = time.perf_counter()  # TRL tokenises once; every variant reuses the tokenised set
    m = cfg.model
    first = make_trainer(build_tiny_model(tokenizer, m.tiny.hidden_size, m.tiny.num_layers, m.tiny.num_heads,
                                          m.tiny.num_kv_heads, m.tiny.intermediate_size, m.tiny.max_position, cfg.seed),
                         tokenizer, check_samples(samples), base_sft_config(cfg), work / "prepare", SFTRun(1, cfg.seed))
    prepare_seconds = time.perf_counter() - t0
    data = first.train_dataset
    runs, load_start = [], os.getloadavg()[0]
    for r in range(args.rounds):
        for split, head, threads, numerics in variants:
            row = run_variant(cfg, data, tokenizer, split, head, threads, args.steps,
                              work / f"s{split}_h{int(head)}_t{threads}_{numerics}", numerics)
            row["round"] = r
            runs.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "losses"}), flush=True)
    base = runs[0]
    gap = lambda rows: max((abs(a - b) for x in rows for a, b in zip(x["losses"], base["losses"])),  # noqa: E731
                           default=0.0)
    summary = {}
    for split, head, threads, numerics in variants:
        rows = [x for x in runs if (x["split"], x["completion_head"], x["threads"], x["numerics"])
                == (split, head, threads, numerics)]
        summary[f"split{split}_head{'On' if head else 'Off'}_threads{threads}_{numerics}"] = {
            "seconds_per_step_median": statistics.median(x["seconds_per_step"] for x in rows),
            "real_tokens_per_s_median": statistics.median(x["real_tokens_per_s"] for x in rows),
            "pad_share": rows[0]["pad_share_after_split"], "max_loss_gap_vs_first_run": gap(rows)}
    ref = next(iter(summary.values()))["seconds_per_step_median"]
    for v in summary.values():
        v["speedup_vs_first"] = round(ref / v["seconds_per_step_median"], 2)
    loss_gap = gap([x for x in runs if x["numerics"] == "fp32"])  # bf16 changes the rounding on purpose
    report = {"profile": cfg.profile, "steps": args.steps, "batch_size": cfg.model.tiny.batch_size,
              "samples": len(samples), "cpu_count": os.cpu_count(),
              "load_avg_start_end": [load_start, os.getloadavg()[0]],
              "trl_prepare_seconds": round(prepare_seconds, 1), "max_loss_gap_vs_first_run": loss_gap,
              "summary": summary, "runs": runs}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({k: report[k] for k in ("trl_prepare_seconds", "max_loss_gap_vs_first_run", "summary",
                                              "load_avg_start_end")}, indent=1))
    return report


if __name__ == "__main__":
    main()
