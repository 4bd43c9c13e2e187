"""The pieces of one role's policy loss (§4 step 8): the role's sampled sequences (`role_batch`), cut into
micro-batches with their tokens' loss weights (`micro_batches`, `grpo.loss_agg`) and those into forward passes
(`forward_passes`), their completion tokens' log-probabilities in the padded layout (one sample per row) or the
packed one (`packed.py`, one row per distinct prompt), and the PPO clipped surrogate with its KL term, per token.
`grpo.JointGRPO._backward` sums them into the role's loss.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, NamedTuple, Sequence

import torch

from .microbatches import balanced_partitions, micro_batch_count, padded_chunks
from .packed import pack_by_prompt, packed_logprobs, token_logprobs
from .ranks import gather_objects, sum_over_ranks
from .rollouts import QuestionRollout


def ppo_token_loss(logp: torch.Tensor, old_logp: torch.Tensor, ref_logp: torch.Tensor, adv: torch.Tensor,
                   clip_eps: float = 0.2, dual_clip: float = 3.0, kl_coef: float = 0.001, kl_clamp: float = 10.0
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """§4 step 8: PPO clipped surrogate with dual clip, plus the k3 ("low_var_kl") KL term, per token.

    `kl_clamp` > 0 is verl's low_var_kl as the authors ran it: the log-ratio clamped to [-20, 20] and the
    estimate to [-kl_clamp, kl_clamp] (no gradient from a clamped token); 0 leaves k3 unclamped.
    Returns (loss, kl, clipped) per token; `adv` is broadcast per sequence ([b, 1])."""
    ratio = torch.exp(logp - old_logp)
    pg = torch.maximum(-adv * ratio, -adv * ratio.clamp(1 - clip_eps, 1 + clip_eps))
    pg = torch.where(adv < 0, torch.minimum(pg, -adv * dual_clip), pg)  # dual clip bounds negative advantages
    delta = ref_logp - logp
    if kl_clamp > 0:
        delta = delta.clamp(-20.0, 20.0)
    kl = torch.exp(delta) - delta - 1  # k3: unbiased, always >= 0
    if kl_clamp > 0:
        kl = kl.clamp(-kl_clamp, kl_clamp)
    clipped = ((ratio < 1 - clip_eps) | (ratio > 1 + clip_eps)).float()
    return pg + kl_coef * kl, kl, clipped


@dataclass
class RoleBatch:
    """Every sampled sequence of one role in this rank's share of the step."""

    prompt_ids: list[list[int]]
    completion_ids: list[list[int]]
    advantages: torch.Tensor  # [n_seq]

    @property
    def n_tokens(self) -> int:
        return sum(len(c) for c in self.completion_ids)


def role_batch(rollouts: Sequence[QuestionRollout], role: str, adv: torch.Tensor, tokenizer: Any) -> RoleBatch:
    """`role`'s samples of every question, their prompts tokenised (each distinct prompt once), with their
    advantages (`adv`: [questions, samples])."""
    enc: dict[str, list[int]] = {}
    prompts, comps, advs = [], [], []
    for i, r in enumerate(rollouts):
        samples = r.retriever if role == "retriever" else r.generator
        for j, (p, c) in enumerate(zip(samples.prompts, samples.completions)):
            if p not in enc:
                enc[p] = tokenizer(p, add_special_tokens=False)["input_ids"]
            prompts.append(enc[p])
            comps.append(list(c.token_ids))
            advs.append(float(adv[i, j]))
    return RoleBatch(prompts, comps, torch.tensor(advs))


class MicroBatch(NamedTuple):
    """Sequences of a role's batch that one forward pass (or several) computes: each of their tokens weighs
    `scale / tokens` in the role's loss."""

    rows: list[int]
    scale: float
    tokens: int


def micro_batches(batch: RoleBatch, grpo: Any, acc: Any) -> list[MicroBatch]:
    """The micro-batches of this rank's share of a role (`grpo.loss_agg`), with their tokens' loss weights; every
    rank must call it (collectives inside).

    "global_token_mean": chunks of `micro_batch_size` sequences, every token weighted 1 / (the role's
    token count over all ranks), times the rank count that DDP's gradient average divides away.
    "micro_token_mean" (the authors' verl actor): k = ceil(tokens / `micro_batch_tokens`) micro-batches
    (the largest k of any rank) balanced by length, each a token mean weighted by its share of the
    rank's sequences; DDP's average over ranks is the authors' FSDP average."""
    n = len(batch.prompt_ids)
    if grpo.loss_agg == "global_token_mean":
        total_tokens = max(sum_over_ranks(acc, batch.n_tokens), 1)
        return [MicroBatch(list(range(s, min(s + grpo.micro_batch_size, n))), acc.num_processes, total_tokens)
                for s in range(0, n, grpo.micro_batch_size)]
    lengths = [len(p) + len(c) for p, c in zip(batch.prompt_ids, batch.completion_ids)]
    k = min(n, max(gather_objects(acc, [micro_batch_count(lengths, grpo.micro_batch_tokens)])))
    parts = balanced_partitions(lengths, k)
    return [MicroBatch(part, len(part) / n, max(sum(len(batch.completion_ids[i]) for i in part), 1)) for part in parts]


def forward_passes(batch: RoleBatch, micro: list[MicroBatch], grpo: Any) -> list[MicroBatch]:
    """Each "micro_token_mean" micro-batch in forward passes whose padded rows stay within
    `grpo.micro_batch_tokens` (`microbatches.padded_chunks`; the authors' verl packs without padding), each
    pass with its micro-batch's loss weights, so the loss and gradient are the same sums. Other layouts: one
    pass per micro-batch."""
    if grpo.loss_agg != "micro_token_mean" or grpo.packed_prompts:
        return micro
    p_len = [len(p) for p in batch.prompt_ids]
    c_len = [len(c) for c in batch.completion_ids]
    return [MicroBatch(part, mb.scale, mb.tokens) for mb in micro
            for part in padded_chunks(p_len, c_len, mb.rows, grpo.micro_batch_tokens)]


def pad_batch(prompts: Sequence[list[int]], completions: Sequence[list[int]], pad_id: int, device: torch.device):
    """Prompts left-padded, completions right-padded: completion tokens share columns, so the model
    only needs logits for the last C+1 positions (TRL's layout; big vocabularies stay affordable)."""
    p_len = max(len(p) for p in prompts)
    c_len = max(max(len(c) for c in completions), 1)
    n = len(prompts)
    ids = torch.full((n, p_len + c_len), pad_id, dtype=torch.long)
    attn = torch.zeros((n, p_len + c_len), dtype=torch.long)
    cmask = torch.zeros((n, c_len), dtype=torch.float32)
    for i, (p, c) in enumerate(zip(prompts, completions)):
        ids[i, p_len - len(p):p_len] = torch.tensor(p, dtype=torch.long)
        attn[i, p_len - len(p):p_len] = 1
        if c:
            ids[i, p_len:p_len + len(c)] = torch.tensor(c, dtype=torch.long)
            attn[i, p_len:p_len + len(c)] = 1
            cmask[i, :len(c)] = 1
    pos = (attn.cumsum(-1) - 1).clamp(min=0)  # positions as generation saw them (0 at the first real token)
    return ids.to(device), attn.to(device), pos.to(device), cmask.to(device), c_len


def completion_logprobs(model: torch.nn.Module, ids: torch.Tensor, attn: torch.Tensor, pos: torch.Tensor,
                        c_len: int, chunk_tokens: int = 0) -> torch.Tensor:
    """Log-probability of each completion token, [b, c_len].

    The model's logits (bf16 under mixed precision) are kept for the completion's positions only. With
    `chunk_tokens` > 0 their fp32 log-softmax is taken `chunk_tokens` positions at a time, each chunk
    recomputed in the backward pass instead of saved (`grpo.logprob_chunk_tokens`): the fp32 copy of the
    b x c_len x vocabulary logits, its softmax and its gradient never exist whole. Every row's value is the
    one the whole-tensor computation gives (the reduction runs along the vocabulary, row by row)."""
    logits = model(input_ids=ids, attention_mask=attn, position_ids=pos, logits_to_keep=c_len + 1).logits
    logits, target = logits[:, :-1], ids[:, -c_len:]
    if chunk_tokens <= 0 or logits.shape[0] * c_len <= chunk_tokens:
        return token_logprobs(logits, target)
    width = max(1, chunk_tokens // logits.shape[0])  # positions per chunk; split along them (its backward is one cat)
    pieces = zip(logits.split(width, dim=1), target.split(width, dim=1))
    if torch.is_grad_enabled() and logits.requires_grad:
        from torch.utils.checkpoint import checkpoint

        return torch.cat([checkpoint(token_logprobs, x, t, use_reentrant=False) for x, t in pieces], dim=1)
    return torch.cat([token_logprobs(x, t) for x, t in pieces], dim=1)


def logprob_fn(prompts: list[list[int]], completions: list[list[int]], pad_id: int, device: torch.device,
               grpo: Any) -> tuple[Callable[[torch.nn.Module], torch.Tensor], torch.Tensor]:
    """A pass's sequences laid out for the model (`grpo.packed_prompts`: one row per distinct prompt, else one
    padded row per sample), as a function of the model that returns the completion tokens' log-probabilities
    [samples, c_len] (`grpo.logprob_chunk_tokens` at a time), and the completion mask."""
    chunk = grpo.logprob_chunk_tokens
    if grpo.packed_prompts:
        packed = pack_by_prompt(prompts, completions, pad_id, device)
        return (lambda model: packed_logprobs(model, packed, chunk)), packed.cmask
    ids, attn, pos, cmask, c_len = pad_batch(prompts, completions, pad_id, device)
    return (lambda model: completion_logprobs(model, ids, attn, pos, c_len, chunk)), cmask
