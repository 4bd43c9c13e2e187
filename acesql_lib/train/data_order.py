"""The order a GRPO run takes its questions in (`grpo.data_order`), epoch by epoch: a function of the epoch alone,
so the data cursor of a resumed run needs only (epoch, position).
"""
from __future__ import annotations

import functools
import random

import torch


@functools.lru_cache(maxsize=4)
def _authors_epochs(n: int, batch: int, data_seed: int, upto: int) -> tuple[tuple[int, ...], ...]:
    sampler = torch.utils.data.RandomSampler(range(n), generator=torch.Generator().manual_seed(data_seed))
    batches = torch.utils.data.BatchSampler(sampler, batch, drop_last=True)
    return tuple(tuple(i for chunk in batches for i in chunk) for _ in range(upto + 1))


def epoch_order(n: int, batch: int, epoch: int, data_order: str = "authors", data_seed: int = 1,
                seed: int = 0) -> list[int]:
    """The question order of `epoch` (0-based).

    "authors": verl's sampler, one torch generator seeded `data_seed` drawn epoch after epoch
    (RandomSampler under a drop-last BatchSampler, as RL/trainer/main_two_pass.py builds it), so a
    run sees the authors' order of the same rows. "kit": a fresh Python shuffle per epoch from `seed`."""
    if data_order == "authors":
        if n < batch:  # the cursor takes the whole (short) list each step; keep the sampler's order
            return list(torch.randperm(n, generator=torch.Generator().manual_seed(data_seed)).tolist())
        return list(_authors_epochs(n, batch, data_seed, epoch)[epoch])
    order = list(range(n))
    random.Random(seed * 1_000_003 + epoch).shuffle(order)
    return order
