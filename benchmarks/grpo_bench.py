"""GRPO step cost: the kit's joint two-role step beside TRL's GRPOTrainer, and PCGrad beside a plain sum.

1. Seconds per generated token. `JointGRPO.step()` (retriever + generator rollouts, execution, two
   backward passes, PCGrad, AdamW) against `trl.GRPOTrainer` doing generator-only GRPO on the same
   tiny policy: same questions per step, group size, max completion length, learning rate, KL
   coefficient (k3, reference = the SFT checkpoint), one PPO iteration, HF `generate` on CPU. TRL's
   reward is the kit's generator reward fed with execution matches from the kit's executor. The two
   trainers alternate step by step (TRL step, then ours), so load from other processes on a shared
   machine hits both alike; the first step of each is a warm-up and is not timed. Tokens: both
   roles' completion tokens for ours, the generator's for TRL (EOS included in both).
2. PCGrad on vs off. `JointGRPO.update` on the same pre-collected rollouts from the same restored
   state (weights, AdamW moments, scheduler, pool), modes interleaved, `symmetric` vs `none`. This
   trainer uses the test suite's untrained KL reference (coefficient 0.01) so that both roles have
   non-zero gradients even when no rollout earns a reward. Memory is measured per mode in a fresh
   subprocess: live CPU tensor bytes during one update (torch profiler memory events: the peak, the
   peak of each role's pass, what is held when the generator pass ends), the peak RSS, and the
   analytic size of one gradient copy. A third child, `accumulate`, lets the second backward add
   into the first's `.grad` (no saved copy): the baseline PCGrad's one extra copy is measured
   against. (The kit's `none` mode keeps the saved copy too; it differs from `symmetric` only in
   skipping the projection.)

    HF_HUB_OFFLINE=1 python benchmarks/grpo_bench.py [--steps 8] [--reps 8] [--run DIR] [--trl-no-kv-cache]

Without --run, the small RL run folder of the test suite (rl_setup) is built in a
temp folder (~1 min).
Writes reports/benchmarks/grpo.json.
"""
from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import os
import pickle
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]  # the kit, and the tests' RL run builder (rl_setup)

import torch  # noqa: E402

from acesql_lib.train import grpo as grpo_module  # noqa: E402
from acesql_lib.config.context import RunContext  # noqa: E402
from acesql_lib.models.completions import stop_token_ids  # noqa: E402
from acesql_lib.executor import score_batch  # noqa: E402
from acesql_lib.train.grpo import JointGRPO  # noqa: E402
from acesql_lib.train.grpo_run import build_trainer  # noqa: E402
from acesql_lib.train.pcgrad import combine_into_grads, save_grads  # noqa: E402
from acesql_lib.roles.answers import parse_generator  # noqa: E402
from acesql_lib.roles.prompts import generator_messages  # noqa: E402
from acesql_lib.roles.rewards import LengthPenalty, make_generator_reward_fn  # noqa: E402
from rl_setup import build_rl_run, rl_overrides  # noqa: E402

BATCH_QUESTIONS = 4  # questions per step, both trainers
GROUP = 4  # samples per question (per role for ours), TRL num_generations
MAX_TOKENS = 40  # max completion tokens per sample
LEARNING_RATE = 2e-3  # the test suite's RL rate (a tiny model needs a large one to move)
KL_COEF = 0.001  # §4 step 8, TRL beta


def kit_overrides(run: Path, pcgrad: str = "symmetric", reference: str = "sft") -> dict[str, Any]:
    """The test suite's CPU settings with w_gen = 1 from step 1 (the schedule would skip the generator backward at
    step 1 and make step costs unequal). reference "sft": the paper's KL coefficient against the SFT checkpoint,
    as TRL's reference. "untrained": the test suite's reference and coefficient; the tiny policy rarely earns a
    reward, and against its own checkpoint the KL gradient is then exactly zero, so PCGrad would combine zeros."""
    kl = {"grpo.kl_coef": KL_COEF, "grpo.reference_model": ""} if reference == "sft" else \
        {"grpo.kl_coef": 0.01, "grpo.reference_model": str(run / "models" / "reference")}
    return rl_overrides(run, **{
        "grpo.batch_questions": BATCH_QUESTIONS, "grpo.n_retriever": GROUP, "grpo.n_generator": GROUP,
        "grpo.max_response_tokens": MAX_TOKENS, "grpo.micro_batch_size": BATCH_QUESTIONS * GROUP,
        "grpo.learning_rate": LEARNING_RATE, "grpo.gen_schedule_ratio": 0.0, "grpo.pcgrad": pcgrad,
        "grpo.max_steps": 1000, "grpo.warmup_ratio": 0.0, **kl})


def make_ours(run: Path, pcgrad: str = "symmetric", reference: str = "sft") -> JointGRPO:
    ctx = RunContext.create("tiny", kit_overrides(run, pcgrad, reference))
    return build_trainer(ctx.cfg, ctx.paths, progress=False)


def completion_tokens(report: Any) -> dict[str, int]:
    return {role: sum(c.n_tokens for r in report.rollouts for c in getattr(r, role).completions)
            for role in ("retriever", "generator")}


# ---------------------------------------------------------------------------------------------
# TRL side


def trl_dataset(trainer: JointGRPO):
    """Generator prompts on the gold-pruned schema (full schema if the gold columns do not resolve)."""
    from datasets import Dataset

    rows = []
    for t in trainer.tasks:
        ex = t.example
        ddl = t.schema.to_ddl(t.gold_columns) if t.gold_columns else t.full_ddl
        rows.append({"prompt": generator_messages(ddl, ex.question, ex.evidence, style=trainer.style),
                     "gold_sql": ex.sql, "db_path": str(ex.db_path)})
    return Dataset.from_list(rows)


def execution_reward(penalty: LengthPenalty, stops: list[int], compare_mode: str, timeout_s: float,
                     tokens_per_step: dict[int, int]):
    """TRL reward function: parse each completion's SQL block, execute it against the gold with the kit's
    executor, and hand the matches to the kit's TRL-shaped generator reward (1 - p_len or 0)."""
    reward = make_generator_reward_fn(penalty)
    stop_set = set(stops)

    def generator_execution_reward(completions, completion_ids, gold_sql, db_path, trainer_state=None, **_):
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        truncated = [len(ids) >= MAX_TOKENS and (not ids or ids[-1] not in stop_set) for ids in completion_ids]
        parses = [parse_generator(t, truncated=tr) for t, tr in zip(texts, truncated)]
        scores = score_batch([(p.sql, g, d) for p, g, d in zip(parses, gold_sql, db_path)], mode=compare_mode,
                             timeout_s=timeout_s, progress=False)
        matches = [bool(s.correct) and bool(p.sql) for s, p in zip(scores, parses)]  # the kit's rule
        step = (trainer_state.global_step if trainer_state is not None else -1) + 1  # the step being run
        tokens_per_step[step] = tokens_per_step.get(step, 0) + sum(len(ids) for ids in completion_ids)
        return reward(completions, matches=matches, completion_ids=completion_ids, truncated=truncated)

    generator_execution_reward.__name__ = "generator_reward"
    return generator_execution_reward


def trl_config(out_dir: Path, steps: int, enable_thinking: bool, kv_cache: bool = True):
    from trl import GRPOConfig

    return GRPOConfig(
        output_dir=str(out_dir), use_cpu=True, bf16=False, fp16=False, report_to="none", seed=0,
        per_device_train_batch_size=BATCH_QUESTIONS * GROUP, gradient_accumulation_steps=1,
        num_generations=GROUP, generation_batch_size=BATCH_QUESTIONS * GROUP, max_completion_length=MAX_TOKENS,
        temperature=1.0, top_p=1.0, top_k=0, num_iterations=1, beta=KL_COEF, epsilon=0.2,
        delta=3.0,  # TRL's two-sided clip = the kit's dual clip c = 3 (§4 step 8)
        loss_type="dapo",  # token mean over the whole batch, as the kit's loss
        scale_rewards="group", learning_rate=LEARNING_RATE, lr_scheduler_type="constant", warmup_steps=0,
        weight_decay=0.0, max_grad_norm=1.0, optim="adamw_torch", gradient_checkpointing=False,
        # transformers' Trainer copies args.use_cache (default False) into model.config, and TRL's HF generation
        # then recomputes the whole sequence at every new token; the kit's engine decodes with the KV cache.
        use_cache=kv_cache,
        max_steps=steps, logging_steps=1, save_strategy="no", log_completions=False, disable_dropout=True,
        chat_template_kwargs={"enable_thinking": enable_thinking}, dataloader_num_workers=0)


def bench_steps(run: Path, steps: int, scratch: Path, kv_cache: bool = True) -> dict[str, Any]:
    """TRL step k, then our step k, for k = 1 (warm-up, untimed) .. 1 + steps."""
    from trl import GRPOTrainer
    from transformers import TrainerCallback

    from acesql_lib.models.loading import load_policy

    ours = make_ours(run)
    g = ours.grpo
    ours_rows: list[dict[str, float]] = []

    def our_step(timed: bool) -> None:
        t0, c0 = time.perf_counter(), time.process_time()
        report = ours.step()
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
        if timed:
            ours_rows.append({"seconds": seconds, "cpu_s": cpu, "rollout_s": report.metrics["time/rollout_s"],
                              **{f"tokens_{k}": v for k, v in completion_tokens(report).items()},
                              **{k.replace("/", "_"): report.metrics[k] for k in (
                                  "reward/retriever", "reward/generator", "well_formed/retriever",
                                  "well_formed/generator")}})

    trl_tokens: dict[int, int] = {}
    trl_seconds: dict[int, float] = {}
    trl_cpu: dict[int, float] = {}

    class Interleave(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            self.t0, self.c0 = time.perf_counter(), time.process_time()

        def on_step_end(self, args, state, control, **kw):
            trl_seconds[state.global_step] = time.perf_counter() - self.t0
            trl_cpu[state.global_step] = time.process_time() - self.c0
            our_step(timed=state.global_step > 1)

    policy, tokenizer = load_policy(str(run / "models" / "sft"), dtype="float32", device="cpu")
    trl = GRPOTrainer(model=policy, processing_class=tokenizer, train_dataset=trl_dataset(ours),
                      args=trl_config(scratch / "trl", steps + 1, ours.cfg.engine.enable_thinking, kv_cache),
                      reward_funcs=[execution_reward(ours.penalty, stop_token_ids(tokenizer), g.compare_mode,
                                                     g.exec_timeout_s, trl_tokens)],
                      callbacks=[Interleave()])
    stops_match = sorted(trl.eos_token_ids) == stop_token_ids(tokenizer)
    trl.train()
    history = [h for h in trl.state.log_history if "loss" in h]

    timed = range(2, steps + 2)
    trl_s, trl_tok = sum(trl_seconds[k] for k in timed), sum(trl_tokens.get(k, 0) for k in timed)
    our_s = sum(r["seconds"] for r in ours_rows)
    our_cpu, trl_cpu_s = sum(r["cpu_s"] for r in ours_rows), sum(trl_cpu[k] for k in timed)
    our_tok = sum(r["tokens_retriever"] + r["tokens_generator"] for r in ours_rows)
    result = {
        "timed_steps": steps,
        "ours": {"seconds": our_s, "tokens": our_tok, "s_per_token": our_s / max(our_tok, 1), "cpu_s": our_cpu,
                 "rollout_share": sum(r["rollout_s"] for r in ours_rows) / max(our_s, 1e-9), "per_step": ours_rows},
        "trl": {"seconds": trl_s, "tokens": trl_tok, "s_per_token": trl_s / max(trl_tok, 1), "cpu_s": trl_cpu_s,
                "per_step": [{"seconds": trl_seconds[k], "cpu_s": trl_cpu[k], "tokens": trl_tokens.get(k, 0),
                              "reward": history[k - 1].get("reward") if k - 1 < len(history) else None}
                             for k in timed]},
        "trl_ref_model": trl.ref_model is not None, "trl_kv_cache": kv_cache, "stop_tokens_match": stops_match,
    }
    result["ratio_ours_over_trl"] = result["ours"]["s_per_token"] / max(result["trl"]["s_per_token"], 1e-12)
    # Noise-robust views (other processes share the CPUs): the median of the paired per-step ratios, and the
    # ratio of each side's fastest step per token.
    ours_spt = [r["seconds"] / max(r["tokens_retriever"] + r["tokens_generator"], 1) for r in ours_rows]
    trl_spt = [trl_seconds[k] / max(trl_tokens.get(k, 0), 1) for k in timed]
    result["ratio_median_paired"] = statistics.median(a / b for a, b in zip(ours_spt, trl_spt))
    result["ratio_best_step"] = min(ours_spt) / min(trl_spt)
    # CPU seconds of this process (all its threads): waiting for a core does not count, so this is the least
    # sensitive to other processes; the executor's worker processes (a few ms of SQLite per step) are not in it.
    result["ratio_cpu"] = (our_cpu / max(our_tok, 1)) / max(trl_cpu_s / max(trl_tok, 1), 1e-12)
    return result


# ---------------------------------------------------------------------------------------------
# PCGrad: time on the same rollouts and state


def snapshot(trainer: JointGRPO) -> dict[str, Any]:
    return {"model": {k: v.detach().clone() for k, v in trainer.model.state_dict().items()},
            "optimizer": copy.deepcopy(trainer.optimizer.state_dict()),
            "scheduler": copy.deepcopy(trainer.scheduler.state_dict()),
            "pool": copy.deepcopy(trainer.pool), "state": copy.deepcopy(trainer.state)}


def restore(trainer: JointGRPO, snap: dict[str, Any]) -> None:
    trainer.model.load_state_dict(snap["model"])
    trainer.optimizer.load_state_dict(copy.deepcopy(snap["optimizer"]))
    trainer.scheduler.load_state_dict(copy.deepcopy(snap["scheduler"]))
    trainer.pool, trainer.state = copy.deepcopy(snap["pool"]), copy.deepcopy(snap["state"])
    trainer.optimizer.zero_grad(set_to_none=True)


def bench_pcgrad_time(trainer: JointGRPO, rolls: list, reps: int) -> dict[str, Any]:
    snap = snapshot(trainer)
    modes = ("symmetric", "none")
    seconds: dict[str, list[float]] = {m: [] for m in modes}
    cpu: dict[str, list[float]] = {m: [] for m in modes}
    finals: dict[str, list[dict[str, torch.Tensor]]] = {m: [] for m in modes}
    metrics: dict[str, dict[str, float]] = {}
    for rep in range(reps + 1):  # rep 0 is a warm-up of each mode
        for mode in (modes if rep % 2 == 0 else modes[::-1]):
            restore(trainer, snap)
            trainer.grpo = dataclasses.replace(trainer.grpo, pcgrad=mode)
            t0, c0 = time.perf_counter(), time.process_time()
            report = trainer.update(rolls)
            dt, dc = time.perf_counter() - t0, time.process_time() - c0
            if rep > 0:
                seconds[mode].append(dt)
                cpu[mode].append(dc)
            if rep < 2:
                finals[mode].append({k: v.detach().clone() for k, v in trainer.unwrapped.named_parameters()})
            metrics[mode] = {k: v for k, v in report.metrics.items() if k.startswith("pcgrad/")}
    restore(trainer, snap)

    def max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
        return max(float((a[k] - b[k]).abs().max()) for k in a)

    med = {m: statistics.median(s) for m, s in seconds.items()}
    fastest = {m: min(s) for m, s in seconds.items()}
    cpu_med = {m: statistics.median(s) for m, s in cpu.items()}
    combine = bench_combine(trainer, reps=30)
    extra_s = max(combine["symmetric_min_ms"] - combine["none_min_ms"], 0.0) / 1000
    return {"seconds": seconds, "median_s": med, "min_s": fastest, "cpu_s": cpu, "median_cpu_s": cpu_med,
            "time_ratio_symmetric_over_none": med["symmetric"] / med["none"],
            "time_ratio_min": fastest["symmetric"] / fastest["none"],
            "time_ratio_cpu": cpu_med["symmetric"] / cpu_med["none"],
            # the projection's own cost added to the plain-sum update: free of other processes' noise
            "time_ratio_from_combine": (fastest["none"] + extra_s) / fastest["none"],
            "pcgrad_metrics": metrics["symmetric"],
            "repeat_max_abs_diff": {m: max_diff(*finals[m][:2]) for m in modes},  # restore check: 0 expected
            "symmetric_vs_none_max_abs_diff": max_diff(finals["symmetric"][0], finals["none"][0]),
            "combine_only": combine}


def bench_combine(trainer: JointGRPO, reps: int) -> dict[str, float]:
    """The projection alone, on gradients of the policy's real shapes (forward/backward excluded)."""
    params = trainer.params
    gen = torch.Generator().manual_seed(0)
    times: dict[str, list[float]] = {"symmetric": [], "none": []}
    for i in range(reps):
        for mode in (("symmetric", "none") if i % 2 == 0 else ("none", "symmetric")):
            for p in params:
                p.grad = torch.randn(p.shape, generator=gen, dtype=p.dtype)
            saved = save_grads(params)
            for p in params:
                p.grad = torch.randn(p.shape, generator=gen, dtype=p.dtype)
            t0 = time.perf_counter()
            combine_into_grads(params, saved, mode)
            times[mode].append(time.perf_counter() - t0)
    trainer.optimizer.zero_grad(set_to_none=True)
    stats = (("min", min), ("median", statistics.median))
    return {f"{m}_{k}_ms": 1000 * f(t) for m, t in times.items() for k, f in stats}


# ---------------------------------------------------------------------------------------------
# PCGrad: memory, one fresh process per mode


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _accumulate_without_copy(params) -> list[None]:
    """Baseline for the memory child: leave p.grad in place so the generator backward adds into it."""
    return [None] * len(list(params))


def memory_child(mode: str, run: Path, rolls_path: Path, out: Path) -> None:
    from torch.profiler import ProfilerActivity, profile, record_function

    trainer = make_ours(run, "none" if mode == "accumulate" else mode, reference="untrained")
    if mode == "accumulate":
        grpo_module.save_grads = _accumulate_without_copy  # plain sum by gradient accumulation, no saved copy
    phases = iter(["retriever_backward", "generator_backward"] * 2)
    role_backward = trainer._backward

    def labelled_backward(batch, weight):  # marks each role's pass in the profiler trace
        with record_function(next(phases)):
            return role_backward(batch, weight)

    trainer._backward = labelled_backward
    rolls = pickle.loads(rolls_path.read_bytes())
    rss0 = _rss_bytes()
    trainer.update(rolls)  # warm-up: AdamW moments and allocator pools exist afterwards
    maxrss_first = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        with record_function("update"):
            trainer.update(rolls)
    trace = out.with_suffix(".trace.json")
    prof.export_chrome_trace(str(trace))
    events = json.loads(trace.read_text())["traceEvents"]
    trace.unlink()
    memory = [(e["ts"], e["args"]["Total Allocated"]) for e in events
              if e.get("name") == "[memory]" and e.get("args", {}).get("Device Type") == 0]
    spans = {e["name"]: (e["ts"], e["ts"] + e["dur"]) for e in events
             if e.get("name") in ("update", "retriever_backward", "generator_backward") and "dur" in e}
    # Live tensor bytes relative to the start of profiling (allocations minus frees since then).
    peaks = {f"peak_{name}_bytes": max((v for ts, v in memory if a <= ts <= b), default=0)
             for name, (a, b) in spans.items()}
    # Held when the generator pass ends: the combined-to-be gradients, plus the saved retriever copy under PCGrad.
    gen_end = spans["generator_backward"][1]
    held = [v for ts, v in memory if ts <= gen_end]
    out.write_text(json.dumps({
        "mode": mode, "peak_tensor_bytes": max((v for _, v in memory), default=0), **peaks,
        "held_after_generator_backward_bytes": held[-1] if held else 0,
        "net_tensor_bytes": memory[-1][1] if memory else 0, "memory_events": len(memory),
        "first_update_peak_rss_over_start": maxrss_first - rss0, "ru_maxrss_bytes": maxrss_first,
        "trainable_params": sum(p.numel() for p in trainer.params),
        "one_gradient_copy_bytes": sum(p.numel() * p.element_size() for p in trainer.params)}))


def bench_pcgrad_memory(run: Path, rolls: list, scratch: Path) -> dict[str, Any]:
    rolls_path = scratch / "rolls.pkl"
    rolls_path.write_bytes(pickle.dumps(rolls))
    results = {}
    for mode in ("symmetric", "none", "accumulate"):
        out = scratch / f"memory_{mode}.json"
        subprocess.run([sys.executable, __file__, "--memory-child", mode, "--run", str(run),
                        "--rolls", str(rolls_path), "--child-out", str(out)], check=True, cwd=REPO,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=600)
        results[mode] = json.loads(out.read_text())
    copy_bytes = results["symmetric"]["one_gradient_copy_bytes"]
    extra = results["symmetric"]["peak_tensor_bytes"] - results["accumulate"]["peak_tensor_bytes"]
    key = "held_after_generator_backward_bytes"  # both roles' gradients alive, before the combination
    extra_gen = results["symmetric"][key] - results["accumulate"][key]
    return {**results, "one_gradient_copy_bytes": copy_bytes,
            "extra_peak_bytes_symmetric_over_accumulate": extra,
            "extra_held_bytes_symmetric_over_accumulate": extra_gen,
            "extra_in_gradient_copies": extra / max(copy_bytes, 1),
            "extra_held_in_gradient_copies": extra_gen / max(copy_bytes, 1),
            "peak_ratio_symmetric_over_none": results["symmetric"]["peak_tensor_bytes"]
            / max(results["none"]["peak_tensor_bytes"], 1),
            "peak_ratio_symmetric_over_accumulate": results["symmetric"]["peak_tensor_bytes"]
            / max(results["accumulate"]["peak_tensor_bytes"], 1)}


# ---------------------------------------------------------------------------------------------


SETTINGS = {
    "matched": [
        f"questions per step {BATCH_QUESTIONS}; group size {GROUP} (ours: per role; TRL num_generations)",
        f"max completion tokens {MAX_TOKENS}; temperature 1.0, top_p 1.0, no top_k; HF generate, all "
        f"{BATCH_QUESTIONS * GROUP} sequences of a role in one call; same stop tokens",
        f"learning rate {LEARNING_RATE}, constant, no warmup; AdamW (torch), weight decay 0; grad-norm clip 1.0",
        f"KL: k3 estimator, coefficient {KL_COEF} (TRL beta), reference = the SFT checkpoint",
        "one PPO iteration, one optimizer step per batch (old log-probs = current, detached)",
        "PPO clip 0.2; dual clip 3 (TRL delta=3.0: same bound on negative-advantage ratios)",
        "token-mean loss over the batch (TRL loss_type='dapo'); advantages (r - mean) / std per group",
        "one forward/backward micro-batch of 16 sequences per role; float32 on CPU; no gradient checkpointing",
        "generator reward: the kit's 1 - p_len or 0 (same length penalty), matches from score_batch (multiset)",
    ],
    "unmatched": [
        "ours runs two roles per step (retriever then generator; two generate calls, two backward passes, "
        "PCGrad); TRL runs the generator only: the metric divides by each side's own generated tokens",
        "TRL's generator prompt uses the gold-pruned schema; ours the schema voted by the retriever samples",
        "question order: ours a seeded permutation, TRL its shuffled sampler (same 8 questions)",
        "advantage epsilon: ours 1e-6, TRL 1e-4",
        "TRL timing runs from on_step_begin to on_step_end (its logging after the step is excluded); ours is "
        "the whole JointGRPO.step()",
    ],
}


def print_table(res: dict[str, Any]) -> None:
    s, p, m = res["steps"], res["pcgrad_time"], res["pcgrad_memory"]
    print("\n=== GRPO step: ours (joint, two roles) vs TRL GRPOTrainer (generator only) ===")
    print(f"{'':<8}{'seconds':>10}{'tokens':>9}{'ms/token':>11}")
    for k in ("ours", "trl"):
        print(f"{k:<8}{s[k]['seconds']:>10.2f}{s[k]['tokens']:>9d}{1000 * s[k]['s_per_token']:>11.3f}")
    print(f"ratio ours/TRL (s per token): {s['ratio_ours_over_trl']:.3f}  (target <= 1.0); median of paired "
          f"steps {s['ratio_median_paired']:.3f}; best step of each {s['ratio_best_step']:.3f}; "
          f"CPU seconds per token {s['ratio_cpu']:.3f}")
    print(f"ours rollout share of step time: {s['ours']['rollout_share']:.2f}")
    rows = s["ours"]["per_step"]
    mean = lambda key: sum(r[key] for r in rows) / len(rows)  # noqa: E731
    print(f"mean rewards: ours retriever {mean('reward_retriever'):.3f}, generator {mean('reward_generator'):.3f} "
          f"(well formed {mean('well_formed_retriever'):.2f} / {mean('well_formed_generator'):.2f}); TRL "
          f"{sum(r['reward'] or 0.0 for r in s['trl']['per_step']) / len(s['trl']['per_step']):.3f}")
    print("\n=== PCGrad symmetric vs plain sum (none): JointGRPO.update on the same rollouts and state ===")
    print(f"median update s: symmetric {p['median_s']['symmetric']:.3f}, none {p['median_s']['none']:.3f}; "
          f"ratio {p['time_ratio_symmetric_over_none']:.3f}  (target < 1.3); fastest of each "
          f"{p['time_ratio_min']:.3f}; median CPU s {p['time_ratio_cpu']:.3f}; plain sum + projection cost "
          f"{p['time_ratio_from_combine']:.4f}")
    pm = p["pcgrad_metrics"]
    print(f"gradients: |g_ret| {pm['pcgrad/norm_ret']:.3g}, |g_gen| {pm['pcgrad/norm_gen']:.3g}, cosine "
          f"{pm['pcgrad/cosine']:.3f}, conflicting tensors "
          f"{pm['pcgrad/n_conflicts']:.0f}/{pm['pcgrad/n_tensors']:.0f}; "
          f"weights after symmetric vs none differ by {p['symmetric_vs_none_max_abs_diff']:.3g} (max abs)")
    c = p["combine_only"]
    print(f"combine only (ms, fastest of 30): symmetric {c['symmetric_min_ms']:.3f}, none {c['none_min_ms']:.3f}")
    print(f"{'mode':<12}{'peak tensor MB':>16}{'ret. pass MB':>14}{'gen. pass MB':>14}{'peak RSS over start MB':>25}")
    for k in ("symmetric", "none", "accumulate"):
        mb = {key: v / 2**20 for key, v in m[k].items() if key.endswith("_bytes") or key.endswith("_over_start")}
        print(f"{k:<12}{mb['peak_tensor_bytes']:>16.3f}{mb['peak_retriever_backward_bytes']:>14.3f}"
              f"{mb['peak_generator_backward_bytes']:>14.3f}{mb['first_update_peak_rss_over_start']:>25.1f}")
    print(f"one gradient copy: {m['one_gradient_copy_bytes']} bytes ({m['symmetric']['trainable_params']} params x 4); "
          f"extra peak symmetric - accumulate: {m['extra_peak_bytes_symmetric_over_accumulate']} bytes "
          f"= {m['extra_in_gradient_copies']:.3f} copies  (target <= 1)")
    print(f"extra held at the end of the generator pass: {m['extra_held_bytes_symmetric_over_accumulate']} bytes "
          f"= {m['extra_held_in_gradient_copies']:.3f} copies")
    print(f"peak ratio symmetric/none {m['peak_ratio_symmetric_over_none']:.3f}, "
          f"symmetric/accumulate {m['peak_ratio_symmetric_over_accumulate']:.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=8, help="timed steps per trainer (after one warm-up step)")
    ap.add_argument("--reps", type=int, default=8, help="timed updates per PCGrad mode (after one warm-up each)")
    ap.add_argument("--run", type=Path, default=None, help="an RL run folder from rl_setup (else built)")
    ap.add_argument("--trl-no-kv-cache", action="store_true",
                    help="leave TRL's generation as transformers' Trainer configures it (use_cache=False)")
    ap.add_argument("--out", type=Path, default=REPO / "reports" / "benchmarks" / "grpo.json")
    ap.add_argument("--memory-child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--rolls", type=Path, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--child-out", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.memory_child:
        memory_child(args.memory_child, args.run, args.rolls, args.child_out)
        return

    start, load_start = time.perf_counter(), os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="grpo_bench_") as tmp:
        scratch = Path(tmp)
        t0 = time.perf_counter()
        run = args.run if args.run is not None else build_rl_run(scratch / "fixture")
        build_s = time.perf_counter() - t0
        steps = bench_steps(run, args.steps, scratch, kv_cache=not args.trl_no_kv_cache)
        trainer = make_ours(run, reference="untrained")
        trainer.step()  # AdamW moments exist in the snapshot the timed updates restore
        rolls = trainer.collect()
        pc_time = bench_pcgrad_time(trainer, rolls, args.reps)
        pc_mem = bench_pcgrad_memory(run, rolls, scratch)
    res = {"steps": steps, "pcgrad_time": pc_time, "pcgrad_memory": pc_mem, "settings": SETTINGS,
           "machine": {"cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                       "loadavg_start": load_start, "loadavg_end": os.getloadavg(),
                       "fixture_build_s": build_s, "total_s": time.perf_counter() - start,
                       "torch": torch.__version__, "trl": __import__("trl").__version__}}
    print_table(res)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=2) + "\n")
    print(f"\nwritten {args.out} ({res['machine']['total_s']:.0f} s; load average {load_start[0]:.1f} -> "
          f"{res['machine']['loadavg_end'][0]:.1f} on {os.cpu_count()} CPUs)")


if __name__ == "__main__":
    main()
