"""Micro-batches by token budget, balanced by length: the authors' dynamic batching.

The authors' actor (verl with `use_dynamic_bsz`, `ppo_max_token_len_per_gpu` 12,000) splits each rank's
sequences of one role into k = ceil(total tokens / budget) micro-batches (the largest k over the ranks),
balanced by the largest differencing method (Karmarkar-Karp), and weights each micro-batch's token-mean
loss by its share of the rank's sequences. `balanced_partitions` reproduces that partition, ties
included, so the same lengths give the same micro-batches and so the same loss weights.
"""
from __future__ import annotations

import heapq
import math
from typing import Sequence


class _Part:
    """A partition under construction: its items (index, length) and their sum."""

    __slots__ = ("total", "items")

    def __init__(self) -> None:
        self.total, self.items = 0, []

    def add(self, idx: int, length: int) -> None:
        self.items.append((idx, length))
        self.total += length

    def key(self) -> tuple:  # larger sum first, then more items, then the items themselves
        return self.total, len(self.items), self.items


class _State:
    """k partitions kept in decreasing order; the heap pops the state with the largest spread first."""

    __slots__ = ("parts",)

    def __init__(self, items: Sequence[tuple[int, int]], k: int) -> None:
        self.parts = [_Part() for _ in range(k)]
        for part, (idx, length) in zip(self.parts, items):
            part.add(idx, length)
        self.parts.sort(key=_Part.key, reverse=True)

    @property
    def spread(self) -> int:
        return self.parts[0].total - self.parts[-1].total

    def absorb(self, other: "_State") -> None:
        """Pair the largest of one with the smallest of the other (the differencing step)."""
        k = len(self.parts)
        for i in range(k):
            for idx, length in other.parts[k - 1 - i].items:
                self.parts[i].add(idx, length)
        self.parts.sort(key=_Part.key, reverse=True)

    def __lt__(self, other: "_State") -> bool:
        if self.spread != other.spread:
            return self.spread > other.spread
        return self.parts[0].key() > other.parts[0].key()


def balanced_partitions(lengths: Sequence[int], k: int) -> list[list[int]]:
    """`k` groups of indices of `lengths` with near-equal sums (largest differencing), each sorted."""
    if not 1 <= k <= len(lengths):
        raise ValueError(f"balanced_partitions: k = {k} must be in [1, {len(lengths)}] (one item per group at least)")
    heap: list[_State] = []
    for length, idx in sorted((length, i) for i, length in enumerate(lengths)):
        heapq.heappush(heap, _State([(idx, length)], k))
    while len(heap) > 1:
        first, second = heapq.heappop(heap), heapq.heappop(heap)
        first.absorb(second)
        heapq.heappush(heap, first)
    return [sorted(idx for idx, _ in part.items) for part in heap[0].parts]


def micro_batch_count(lengths: Sequence[int], max_tokens: int) -> int:
    """ceil(total tokens / budget), at least 1 and at most one sequence per micro-batch."""
    if max_tokens < 1:
        raise ValueError(f"micro_batch_count: max_tokens must be >= 1, got {max_tokens}")
    return max(1, min(len(lengths), math.ceil(sum(lengths) / max_tokens)))


def padded_chunks(prompt_lens: Sequence[int], completion_lens: Sequence[int], rows: Sequence[int],
                  max_tokens: int) -> list[list[int]]:
    """`rows` (indices into the lengths) in forward passes whose padded size stays within `max_tokens`: a pass of r
    rows pads every row to its longest prompt and longest completion, r * (max prompt + max completion) tokens,
    so a micro-batch of many short sequences and one long completion would hold many times its budget. Rows go
    in order of length, each pass as many as fit (at least one). The passes of a micro-batch share its loss
    weights, so its loss and gradient are the same sums, taken in parts."""
    if max_tokens < 1:
        raise ValueError(f"padded_chunks: max_tokens must be >= 1, got {max_tokens}")
    order = sorted(rows, key=lambda i: (prompt_lens[i] + completion_lens[i], i))
    chunks: list[list[int]] = []
    current: list[int] = []
    widest_p = widest_c = 0
    for i in order:
        p, c = max(widest_p, prompt_lens[i]), max(widest_c, completion_lens[i])
        if current and (len(current) + 1) * (p + c) > max_tokens:
            chunks.append(current)
            current, p, c = [], prompt_lens[i], completion_lens[i]
        current.append(i)
        widest_p, widest_c = p, c
    if current:
        chunks.append(current)
    return chunks
