"""What the ranks of a GRPO launch agree on: the few collectives the step runs (every rank must call each one
together). In one process each returns the value itself, without touching torch.distributed.
"""
from __future__ import annotations

from typing import Any

import torch


def gather_objects(acc: Any, items: list) -> list:
    """Every rank's `items`, concatenated in rank order (one process: a copy of its own)."""
    if acc.num_processes == 1:
        return list(items)
    from accelerate.utils import gather_object

    return gather_object(items)


def sum_over_ranks(acc: Any, value: int) -> int:
    if acc.num_processes == 1:
        return value
    t = torch.tensor([value], device=acc.device, dtype=torch.long)
    return int(acc.reduce(t, reduction="sum").item())


def any_rank(acc: Any, flag: bool) -> bool:
    """True on every rank when it is true on any."""
    return sum_over_ranks(acc, int(bool(flag))) > 0


def mean_over_ranks(acc: Any, metrics: dict[str, float]) -> dict[str, float]:
    """The numeric entries averaged over the ranks (in float64), the step number kept as it is."""
    if acc.num_processes == 1:
        return metrics
    keys = sorted(k for k, v in metrics.items() if isinstance(v, (int, float)))
    t = torch.tensor([float(metrics[k]) for k in keys], device=acc.device, dtype=torch.float64)
    t = acc.reduce(t, reduction="mean")
    return {**metrics, **{k: float(v) for k, v in zip(keys, t.tolist())}, "step": metrics["step"]}
