"""GRPO sequences packed by prompt (`grpo.packed_prompts`): the samples of one prompt share one row.

A GRPO step scores every sample of a question under the same prompt: the retriever's samples share its
schema prompt, the generator's share the voted schema's. Padded one sample per row (`policy_loss.pad_batch`),
the model runs each prompt once per sample. Packed, a row holds the prompt once and then every
completion of it one after the other:

    [pad ... pad | prompt | completion 1 | completion 2 | ...]

A completion token sees the prompt and its own earlier tokens only (a 4-D attention mask), and its
position ids continue from the prompt's end as in generation, so each token's log-probability is the
one the padded layout gives, up to float rounding (the sums run over other lengths). Each prompt is
computed once instead of once per sample, so the forward and backward passes take less time, most for
the retriever, whose schema prompts are long beside its completions (benchmarks/README.md).

The mask is dense: a row of length L costs L x L per attention head, so the layout suits short
completions (the tiny and CPU profiles). At the paper's lengths (a 4,096-token prompt and 8 x 2,048
completion tokens) one row's mask alone would be 20,480^2 entries; the paper profile keeps the
authors' one sample per row.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch


@dataclass
class PackedBatch:
    """A role's micro-batch packed by prompt, with where each completion token's log-probability goes."""

    ids: torch.Tensor  # [rows, L]
    positions: torch.Tensor  # [rows, L]
    mask: torch.Tensor  # [rows, 1, L, L] bool: True where a query position may attend to a key position
    keep: int  # logits kept from the right end of each row (logits_to_keep)
    row: torch.Tensor  # [tokens]: packed row of each completion token's predicting position
    column: torch.Tensor  # [tokens]: its column inside the kept logits
    target: torch.Tensor  # [tokens]: the completion token
    sample: torch.Tensor  # [tokens]: the sample (input order) the token belongs to
    offset: torch.Tensor  # [tokens]: its index inside that sample's completion
    cmask: torch.Tensor  # [samples, c_len]: 1 on completion tokens, as policy_loss.pad_batch's
    c_len: int

    @property
    def n_samples(self) -> int:
        return self.cmask.shape[0]


def pack_by_prompt(prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]], pad_id: int,
                   device: torch.device | str = "cpu") -> PackedBatch:
    """One row per distinct prompt (in order of first appearance), its samples' completions after it."""
    if len(prompts) != len(completions) or not prompts:
        raise ValueError(f"pack_by_prompt: {len(prompts)} prompts and {len(completions)} completions")
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, p in enumerate(prompts):
        groups.setdefault(tuple(p), []).append(i)
    lengths = [len(p) + sum(len(completions[i]) for i in rows) for p, rows in groups.items()]
    width, n_rows = max(lengths), len(groups)
    ids = torch.full((n_rows, width), pad_id, dtype=torch.long)
    positions = torch.zeros((n_rows, width), dtype=torch.long)
    segment = torch.full((n_rows, width), -2, dtype=torch.long)  # -2 padding, -1 prompt, k: the row's k-th completion
    keep = max(length - len(p) for length, p in zip(lengths, groups)) + 1
    base = width - keep  # the first column whose logits are kept
    row, column, target, sample, offset = [], [], [], [], []
    for r, ((prompt, members), length) in enumerate(zip(groups.items(), lengths)):
        start, n_prompt = width - length, len(prompt)
        ids[r, start:start + n_prompt] = torch.tensor(prompt, dtype=torch.long)
        positions[r, start:start + n_prompt] = torch.arange(n_prompt)
        segment[r, start:start + n_prompt] = -1
        last_prompt, at = start + n_prompt - 1, start + n_prompt
        for k, i in enumerate(members):
            c = list(completions[i])
            if not c:
                continue
            ids[r, at:at + len(c)] = torch.tensor(c, dtype=torch.long)
            positions[r, at:at + len(c)] = torch.arange(n_prompt, n_prompt + len(c))
            segment[r, at:at + len(c)] = k
            predictors = [last_prompt, *range(at, at + len(c) - 1)]  # token t is predicted at the position before it
            row += [r] * len(c)
            column += [x - base for x in predictors]
            target += c
            sample += [i] * len(c)
            offset += range(len(c))
            at += len(c)
    query, key = segment.unsqueeze(2), segment.unsqueeze(1)
    causal = torch.ones((width, width), dtype=torch.bool).tril()
    mask = causal & (key != -2) & ((key == -1) | (key == query))
    mask |= torch.eye(width, dtype=torch.bool)  # a padding position attends to itself: no row of the mask is empty
    c_len = max(max((len(c) for c in completions), default=0), 1)
    cmask = torch.zeros((len(prompts), c_len), dtype=torch.float32)
    for i, c in enumerate(completions):
        cmask[i, :len(c)] = 1

    def as_tensor(xs: list[int]) -> torch.Tensor:
        return torch.tensor(xs, dtype=torch.long, device=device)

    return PackedBatch(ids.to(device), positions.to(device), mask.unsqueeze(1).to(device), keep, as_tensor(row),
                       as_tensor(column), as_tensor(target), as_tensor(sample), as_tensor(offset), cmask.to(device),
                       c_len)


def token_logprobs(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[target] per row, in fp32 whatever the logits' dtype (both layouts' last step)."""
    logits = logits.float()
    return logits.gather(-1, target.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, dim=-1)


def _attention_mask(model: torch.nn.Module, mask: torch.Tensor) -> torch.Tensor:
    """The mask as the model's attention takes a prepared 4-D one: boolean for SDPA, additive for eager."""
    impl = getattr(getattr(model, "config", None), "_attn_implementation", "sdpa")
    if impl == "sdpa":
        return mask
    if impl == "eager":
        dtype = next(model.parameters()).dtype
        return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, torch.finfo(dtype).min)
    raise ValueError(f"grpo.packed_prompts needs the sdpa or eager attention, not {impl!r} (set grpo.packed_prompts: false)")


def packed_logprobs(model: torch.nn.Module, batch: PackedBatch, chunk_tokens: int = 0) -> torch.Tensor:
    """Log-probability of each completion token, [samples, c_len] as policy_loss.completion_logprobs returns it
    (zeros past each completion's end). `chunk_tokens` > 0: the fp32 log-softmax taken that many tokens at a
    time and recomputed in the backward pass (`grpo.logprob_chunk_tokens`)."""
    inner = getattr(model, "module", model)  # DDP keeps the config on the wrapped model
    logits = model(input_ids=batch.ids, attention_mask=_attention_mask(inner, batch.mask),
                   position_ids=batch.positions, logits_to_keep=batch.keep).logits

    # A prompt's last position predicts the first token of each of its samples, so positions repeat. Advanced
    # indexing (logits[row, column]) would sum their gradients with parallel atomic adds, in an order that
    # changed a run's last bits when another process shared the cores; index_select's gradient adds them in
    # index order.
    flat = logits.flatten(0, 1)
    where = batch.row * logits.shape[1] + batch.column

    def scored(lg: torch.Tensor, at: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return token_logprobs(lg.index_select(0, at), target)  # inside a checkpoint: the rows are gathered again

    n = where.numel()
    if chunk_tokens <= 0 or n <= chunk_tokens:
        values = scored(flat, where, batch.target)
    else:
        parts = [(where[s:s + chunk_tokens], batch.target[s:s + chunk_tokens]) for s in range(0, n, chunk_tokens)]
        if torch.is_grad_enabled() and logits.requires_grad:
            from torch.utils.checkpoint import checkpoint

            values = torch.cat([checkpoint(scored, flat, *p, use_reentrant=False) for p in parts])
        else:
            values = torch.cat([scored(flat, *p) for p in parts])
    out = torch.zeros((batch.n_samples, batch.c_len), dtype=values.dtype, device=values.device)
    return out.index_put((batch.sample, batch.offset), values)
