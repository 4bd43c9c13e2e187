"""The preflight's stage rows: the steps of each stage and, for GPU profiles, an estimated duration.

Durations scale the paper's reported times (§3: SFT about 38 h; §4.11: GRPO 728 steps in about 43 h,
both on 4 x A100-80GB, Qwen3-8B) by parameters, work and GPU count; they are order-of-magnitude
guides for GPU profiles and are not given for CPU runs.
"""
from __future__ import annotations

import math
from typing import Any

from ..config.checks import ConfigError
from ..config.settings import Config
from ..train.memory import n_params
from ..train.schedule import PAPER_GPUS, PAPER_PARAMS, ROLLOUT_TOKENS_PER_HOUR, total_steps
from .preflight_data import PAPER_COUNTS
from .preflight_memory import accelerate_processes
from .preflight_rows import FAIL, INFO, WARN, Row


def sft_batch(s: Any, processes: int) -> tuple[Row, int]:
    """How SFT makes its batch (per device x accumulation x ranks) under its launch's `processes` and in one
    process (the notebooks), and the launch's accumulation: a FAIL when the paper's effective batch of 64 (§3.3)
    cannot be reached, a WARN when an explicit `sft.gradient_accumulation_steps` misses it."""
    parts, status, launch_accumulation = [], INFO, 1
    for n in dict.fromkeys((processes, 1)):
        try:
            accumulation = s.accumulation(n)
        except ConfigError as e:
            return Row("stages", "SFT batch", FAIL, str(e)), 1
        total = s.per_device_batch_size * accumulation * n
        parts.append(f"{s.per_device_batch_size} per device x {accumulation} accumulated x {n} process(es) = {total}")
        launch_accumulation = accumulation if n == processes else launch_accumulation
        status = status if total == s.effective_batch_size else WARN
    how = "; ".join(parts) + ("" if s.gradient_accumulation_steps else " (accumulation from sft.effective_batch_size)")
    if status == WARN:
        how += (f"; sft.effective_batch_size is {s.effective_batch_size}: leave sft.gradient_accumulation_steps "
                "at 0 to reach it")
    return Row("stages", "SFT batch", status, how), launch_accumulation


def steps_and_hours(cfg: Config, shape: dict[str, Any] | None, set_sizes: dict[str, int]) -> list[Row]:
    """Steps per stage and, for GPU profiles, hours on the GPUs their accelerate configs launch, scaled
    from the paper's (module docstring). Sets not on disk count with the paper's size."""
    d, s, g = cfg.distill, cfg.sft, cfg.grpo
    q = cfg.filtering.target_size
    n_sft, sft_cpu = accelerate_processes(s.accelerate_config, cfg)
    n_grpo, grpo_cpu = accelerate_processes(g.accelerate_config, cfg)
    sft_samples = 2 * q  # upper bound: every filtered question yields a retriever and a generator trace
    batch_row, accumulation = sft_batch(s, n_sft)
    sft_steps = s.max_steps if s.max_steps > 0 else math.ceil(
        sft_samples * s.num_epochs / (s.per_device_batch_size * accumulation * n_sft))
    grpo_steps = total_steps(d.n_rl_train, g.batch_questions, g.epochs, g.max_steps)
    sizes = {s.name: set_sizes.get(s.name, PAPER_COUNTS.get(s.name, 0)) for s in cfg.eval.sets}
    n_eval = sum(min(n, cfg.eval.max_examples) if cfg.eval.max_examples else n for n in sizes.values())
    scale = (n_params(shape) / PAPER_PARAMS) if shape else None
    gpu_run = not (sft_cpu and grpo_cpu)
    gpus = max(n_sft, n_grpo)
    rate = ROLLOUT_TOKENS_PER_HOUR

    def hours(value: float, bound: bool = False) -> str:
        if not gpu_run or scale is None:
            return "duration not estimated (CPU run or unknown model)"
        return f"{'at most ' if bound else ''}about {value * scale * PAPER_GPUS / max(gpus, 1):.1f} h on {gpus} GPU(s)"

    distill_tokens = q * (d.n_retriever + d.n_generator) * d.max_new_tokens
    return [
        Row("stages", "distillation", INFO, f"<= {q} questions x ({d.n_retriever} + {d.n_generator}) rollouts; "
            + hours(distill_tokens / rate, bound=True)),
        batch_row,
        Row("stages", "mixed SFT", INFO, f"{sft_steps} steps ({'max_steps' if s.max_steps > 0 else f'<= {sft_samples} samples x {s.num_epochs:g} epochs'}); "
            + hours(38.0 * sft_samples * s.num_epochs / (14184 * 2) * s.max_length / 4096, bound=s.max_steps <= 0)),
        Row("stages", "joint GRPO", INFO, f"{grpo_steps} steps of {g.batch_questions} questions, validation every "
            f"{g.val_every}, checkpoint every {g.save_every}; " + hours(
                43.0 * grpo_steps / 728 * g.batch_questions * (g.n_retriever + g.n_generator) * g.max_response_tokens
                / (16 * 16 * 2048))),
        Row("stages", "evaluation", INFO, f"{n_eval} questions x 2 passes over {len(sizes)} set(s); "
            + hours(n_eval * ((cfg.eval.retriever_max_new_tokens or cfg.eval.max_new_tokens) + cfg.eval.max_new_tokens) / rate)),
    ]
