"""The GRPO schedule (§4.11, §4 step 9): how many steps a run takes, its learning-rate warm-up, the
generator loss's weight ramp, and the paper's pace (the rollout tokens an hour its 4 GPUs went through, which
the preflight's and the baselines' time estimates scale from). Arithmetic only, so the preflight (notebook 00) counts a run's steps without
importing the trainer, torch and transformers (about 4.8 s on the 2-core CPU); `acesql_lib.train.grpo` uses them.
"""
from __future__ import annotations

import math
from typing import Callable

PAPER_PARAMS = 8.19e9  # Qwen3-8B, the model the paper's hours were measured with
# rollout tokens per hour in the paper's GRPO (training included) on its 4 GPUs: 728 steps of 16 questions x (8 + 8)
# rollouts of up to 2,048 tokens in 43 h; the estimates scale from it (by model size and GPU count)
ROLLOUT_TOKENS_PER_HOUR = 728 * 16 * (8 + 8) * 2048 / 43.0
PAPER_GPUS = 4


def total_steps(n_questions: int, batch: int, epochs: int, max_steps: int = 0) -> int:
    """§4.11: `epochs` passes of whole batches; an epoch's last partial batch is dropped, as the data
    cursor does (2,913 questions / 16 = 182 steps per epoch, 728 in all). `max_steps` > 0 wins."""
    return max_steps or epochs * max(1, n_questions // batch)


def gen_weight(step: int, total_steps: int, ramp_ratio: float, schedule: str = "authors") -> float:
    """§4 step 9: w_gen rises linearly 0 -> 1 over the first `ramp_ratio` of training; 0 at step 1.

    "authors" measures progress as (s - 1) / (T - 1) (RL/trainer/two_pass_ray_trainer.py), so the
    weight is full at step 183 of 728; "kit" divides by `ramp_ratio * T` (full at step 183 too, but a
    hair later on short runs). `ramp_ratio` 0 disables the schedule (w_gen = 1)."""
    if ramp_ratio <= 0:
        return 1.0
    ramp = ramp_ratio * (max(total_steps - 1, 1) if schedule == "authors" else total_steps)
    return min(1.0, max(step - 1, 0) / ramp)


def generator_loss_weight(step: int, total_steps: int, ramp_ratio: float, schedule: str, pcgrad: str) -> float:
    """The generator loss's weight at `step`: `gen_weight`'s ramp, except under the authors' norm-equalised PCGrad
    with their schedule, which sets both loss scales to 1.0 (RL/third_party/verl/workers/actor/dp_actor.py)."""
    if pcgrad == "norm_equalised" and schedule == "authors":
        return 1.0
    return gen_weight(step, total_steps, ramp_ratio, schedule)


def warmup_steps(warmup_ratio: float, total_steps: int, schedule: str = "authors") -> int:
    """§4.11 warm-up length: the authors' int(ratio x T) (verl: 36 of 728); the kit's ceil (37)."""
    return int(warmup_ratio * total_steps) if schedule == "authors" else math.ceil(warmup_ratio * total_steps)


def lr_lambda(warmup_steps: int, schedule: str = "authors") -> Callable[[int], float]:
    """§4.11: constant learning rate after a linear warm-up; `i` counts optimizer steps taken.

    "authors" is verl's constant schedule with warm-up: i / W while i < W, then 1, so the first update
    runs at lr 0 (W = 0: constant from the start); "kit" starts at 1/W: min(1, (i + 1) / W)."""
    if schedule == "authors":
        return lambda i: i / warmup_steps if i < warmup_steps else 1.0
    return lambda i: min(1.0, (i + 1) / warmup_steps) if warmup_steps > 0 else 1.0
