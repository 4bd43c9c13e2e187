"""Which prompts of an HF generate call share one prefill, and what a prefill costs: prompts that open with the
same tokens (one database's schema before its questions) are grouped (`prefix_groups`), and the grouping is
used where its work, in query-key pairs of attention (`prefill_work`, `token_work`), is less than every
prompt's own prefill (`HFEngine._shared_prefix`).
"""
from __future__ import annotations

from collections.abc import Sequence

import torch


def token_work(model: torch.nn.Module) -> float:
    """A token's matrix products in query-key pairs of attention (`prefill_work`'s unit): a layer's weights over
    twice a query head's width (query times key and weight times value per pair); about 580 on the tiny model,
    23,000 on Qwen3-8B."""
    config = getattr(model, "config", None)
    layers = getattr(config, "num_hidden_layers", 1) or 1
    heads = getattr(config, "num_attention_heads", 1) or 1
    head_dim = getattr(config, "head_dim", None) or getattr(config, "hidden_size", heads) // heads
    embedding = model.get_input_embeddings().weight.numel() if hasattr(model, "get_input_embeddings") else 0
    return (sum(p.numel() for p in model.parameters()) - embedding) / layers / (2 * heads * head_dim)


def prefill_work(per_token: float, groups: Sequence[tuple[Sequence[int], int]],
                 prompts: Sequence[Sequence[int]]) -> float:
    """The work of `HFEngine._shared_prefix`'s prefills for `groups` (`prefix_groups`), in query-key pairs of
    attention, a token's matrix products counting `per_token` pairs (`token_work`): the groups' openings, padded
    to the longest, then every prompt's rest after its opening, padded to the longest rest and attending over the
    openings' width too."""
    width = max(length for _, length in groups)
    opening = {d: length for members, length in groups for d in members}
    rest = max(len(p) - 1 - opening[d] for d, p in enumerate(prompts))
    return len(groups) * width * (per_token + width) + len(prompts) * rest * (per_token + width + rest)


def prefix_groups(prompts: Sequence[Sequence[int]], least: int) -> list[tuple[list[int], int]]:
    """The prompts (indices into `prompts`) in groups that share an opening of `least` tokens or more, each with
    its opening's length. In token order, a prompt joins the group before it when they share `least` tokens and at
    least half of the group's opening (a group of one database's questions does not shrink to the chat header it
    shares with the next database's); a prompt that joins none is a group of its own whose opening is all of it but
    its last token. An opening never reaches a member's last token, which decoding starts from."""
    groups: list[tuple[list[int], int]] = []
    for d in sorted(range(len(prompts)), key=lambda i: list(prompts[i])):
        p = prompts[d]
        if groups:
            members, length = groups[-1]
            first, limit, k = prompts[members[0]], min(length, len(p) - 1), 0
            while k < limit and first[k] == p[k]:
                k += 1
            if k >= least and 2 * k >= length:
                members.append(d)
                groups[-1] = (members, k)
                continue
        groups.append(([d], len(p) - 1))
    return groups
