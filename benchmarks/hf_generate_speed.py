"""Tokens/s of the HF engine on the pipeline's own generation work, one lever at a time, side by side.

Two workloads on the tiny profile's real prompts (its world and its base model, the shipped
`data/tiny_base/` unless --model says otherwise):

- greedy: the evaluation (`evaluate.evaluate`: retriever, generator, generator on the gold schema)
  of the first --questions questions of the first eval set;
- sampled: distillation-shaped rollouts (`distill.n_retriever` and `distill.n_generator` samples at
  `distill.temperature`, seeded) of as many training-pool questions.

Variants, each adding one lever to the one before (`engine.hf_*` settings of HFEngine):
`before` (transformers' `generate` with its dynamic KV cache, key/value heads copied per query head, as
transformers' "sdpa" does with a padding mask), `+grouped_kv`; `+shared_prefix` adds one prefill per distinct
prompt for its n samples, and `+drop_finished` decodes in the kit's loop, greedy and sampled, which drops a row
from the batch once it has ended; `no_openings` the defaults with every prompt prefilled whole (prompts that open
with one database's schema do not share one prefill of it); `torch_noise` the defaults with the sampler's noise drawn
by torch's `exponential_`; `default` is what `EngineConfig` sets. (`+shared_prefix` and `+drop_finished` share
only a prompt's own samples' prefill, so each adds one lever to the one before it.)
Greedy calls take `--greedy-batch` rows (the profile's `engine.hf_greedy_batch_size`). Variants run in rounds (A B
C D, A B C D, ...) so a load change on a shared machine hits them alike; the table gives the median seconds,
tokens/s and the ratio to the first variant, and whether the outputs equal the first variant's: greedy, every
pass's parsed output and token count; sampled, every sample's tokens.

    python benchmarks/hf_generate_speed.py --questions 64 --rounds 2
    -> reports/benchmarks/hf_generate_speed.json
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from acesql_lib.config.paths import REPO_ROOT  # noqa: E402

VARIANTS = {  # name: HFOptions replaced in the profile's engine options (HFOptions.from_config)
    "before": dict(grouped_kv=False, share_prefix=False, drop_finished=False),
    "+grouped_kv": dict(grouped_kv=True, share_prefix=False, drop_finished=False),
    # +grouped_kv with one prefill per distinct prompt for its n samples
    "+shared_prefix": dict(grouped_kv=True, share_prefix=True, drop_finished=False, shared_opening_min=0),
    # + decoding (greedy and sampled) in the kit's loop, a row dropped from the batch once it has ended
    "+drop_finished": dict(grouped_kv=True, share_prefix=True, drop_finished=True, shared_opening_min=0),
    # the defaults but every prompt prefilled whole: prompts that open alike (one database's schema) do not share
    # one prefill of their opening (`engine.hf_shared_opening_min` 0)
    "no_openings": dict(shared_opening_min=0),
    # the defaults with the sampler's noise drawn by torch's `exponential_` (scalar code) instead of
    # `hf_engine.exponential_noise` (the same draws)
    "torch_noise": {},
    "default": {},  # EngineConfig's defaults
}
TORCH_NOISE = {"torch_noise"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="tiny")
    ap.add_argument("--model", default="data/tiny_base", help="save_pretrained folder (relative to the repository)")
    ap.add_argument("--questions", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS)[:4], choices=list(VARIANTS))
    ap.add_argument("--workloads", nargs="+", default=["greedy", "sampled"], choices=["greedy", "sampled"])
    ap.add_argument("--greedy-batch", type=int, default=None,
                    help="rows per greedy call (default: the profile's engine.hf_greedy_batch_size)")
    ap.add_argument("--out", type=Path, default=REPO_ROOT / "reports" / "benchmarks" / "hf_generate_speed.json")
    args = ap.parse_args()

    import torch

    from acesql_lib.models import hf_engine
    from acesql_lib.config.context import RunContext
    from acesql_lib.data.datasets import schemas_for, training_pool
    from acesql_lib.models.hf_engine import HFEngine, HFOptions
    from acesql_lib.evaluation.evaluate import EvalOptions, evaluate, load_eval_set
    from acesql_lib.models.loading import load_policy
    from acesql_lib.train.rollouts import RolloutSpec, SamplingSpec, Task, rollout
    from acesql_lib.runtime.timing import totals
    from acesql_lib.data.values_index import attach

    ctx = RunContext.create(args.profile)
    cfg, paths = ctx.cfg, ctx.paths
    model, tokenizer = load_policy(str(REPO_ROOT / args.model), cfg.model.dtype, cfg.model.device)
    examples, schemas = load_eval_set(cfg, cfg.eval.sets[0])
    examples = examples[: args.questions]
    pool = list(training_pool(cfg, paths, progress=False))[: args.questions]
    pool_schemas = schemas_for(pool, cfg.data.n_example_values, cfg.data.example_max_chars)
    for ex in pool:
        attach(pool_schemas[ex.db_id], ex.db_path, cfg.data, paths.run / "values_index")
    pool_tasks = [Task(ex, pool_schemas[ex.db_id]) for ex in pool]
    spec = SamplingSpec.distill(cfg, 0)
    greedy_batch = args.greedy_batch or cfg.engine.hf_greedy_batch_size
    engine_cfg = dataclasses.replace(cfg.engine, hf_greedy_batch_size=greedy_batch)

    def run(variant: str, workload: str) -> dict:
        # the profile's engine options, then the variant's levers (an unknown one is a TypeError naming it)
        options = dataclasses.replace(HFOptions.from_config(engine_cfg), **VARIANTS[variant])
        engine = HFEngine(model, tokenizer, options)
        noise = hf_engine.exponential_noise
        if variant in TORCH_NOISE:
            hf_engine.exponential_noise = lambda shape, dtype, device: torch.empty(shape, dtype=dtype,
                                                                                    device=device).exponential_(1)
        before = totals()
        start = time.perf_counter()
        if workload == "greedy":
            result = evaluate(model, tokenizer, examples, schemas, cfg, EvalOptions(stage="bench"), engine=engine,
                              progress=False)
            outputs = [(r["retrieved_columns"], r["pred_sql"], r["gold_schema_sql"], r["retriever_tokens"],
                        r["generator_tokens"]) for r in result.records]
            tokens = sum(r["retriever_tokens"] + r["generator_tokens"] for r in result.records)  # gold pass not counted
            score = result.ex
        else:
            rolls = rollout(pool_tasks, engine, tokenizer, spec, RolloutSpec.distill(cfg))
            outputs = [c.token_ids for r in rolls for c in [*r.retriever.completions, *r.generator.completions]]
            tokens = sum(c.n_tokens for r in rolls for c in [*r.retriever.completions, *r.generator.completions])
            score = 100.0 * sum(sum(r.matches) for r in rolls) / max(1, sum(len(r.matches) for r in rolls))
        seconds = time.perf_counter() - start
        generation = totals().get("generation", 0.0) - before.get("generation", 0.0)
        hf_engine.exponential_noise = noise
        return dict(seconds=seconds, generation_s=generation, tokens=tokens, score=score, outputs=outputs)

    torch.manual_seed(0)
    raw: dict[str, dict[str, list[dict]]] = {w: {v: [] for v in args.variants} for w in args.workloads}
    for r in range(args.rounds):
        for workload in args.workloads:
            for variant in args.variants:
                res = run(variant, workload)
                raw[workload][variant].append(res)
                print(f"round {r + 1} {workload:7s} {variant:12s} {res['generation_s']:7.2f} s generation, "
                      f"{res['tokens']} tokens, score {res['score']:.1f}", flush=True)

    table = {"profile": args.profile, "model": args.model, "questions": args.questions, "rounds": args.rounds,
             "torch_threads": torch.get_num_threads(), "hf_batch_size": cfg.engine.hf_batch_size,
             "greedy_batch": greedy_batch, "workloads": {}}
    for workload, by_variant in raw.items():
        rows = {}
        base = by_variant[args.variants[0]]
        base_s = statistics.median(x["generation_s"] for x in base)
        for variant, runs in by_variant.items():
            med = statistics.median(x["generation_s"] for x in runs)
            rows[variant] = {
                "generation_s_median": round(med, 2), "tokens": runs[0]["tokens"],
                "tokens_per_s": round(runs[0]["tokens"] / med, 1), "speedup": round(base_s / med, 2),
                "score": round(runs[0]["score"], 2),  # greedy: EX %, sampled: correct-sample share %
                "same_outputs_as_first": runs[0]["outputs"] == base[0]["outputs"],
            }
        table["workloads"][workload] = rows
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(table, indent=2) + "\n")
    for workload, rows in table["workloads"].items():
        print(f"\n{workload}: variant, generation s (median), tokens/s, speedup, score, same outputs")
        for variant, row in rows.items():
            print(f"  {variant:12s} {row['generation_s_median']:8.2f} {row['tokens_per_s']:9.1f} {row['speedup']:6.2f}x "
                  f"{row['score']:6.2f} {row['same_outputs_as_first']}")
    print(f"-> {args.out.relative_to(REPO_ROOT) if args.out.is_relative_to(REPO_ROOT) else args.out}")


if __name__ == "__main__":
    main()
