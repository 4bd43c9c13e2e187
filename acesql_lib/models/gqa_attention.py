"""transformers' "sdpa" attention with the grouped key/value heads handed to torch as they are (`gqa_attention`):
the same numbers as transformers' own, without the copy of every key/value head per query head.
"""
from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch


GQA_ATTENTION = "acesql_sdpa_gqa"


def _sdpa_gqa(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
              attention_mask: torch.Tensor | None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers' "sdpa" attention, with the key/value heads left grouped (`enable_gqa`).

    transformers copies every key/value head once per query head in its group before calling torch
    (`repeat_kv`) whenever a mask is given, which is every padded batch; on CPU that copy costs about
    as much as the attention itself. torch's kernel reads the groups directly and gives the same numbers.
    The keywords are those transformers passes an attention function: `dropout` (0.0), `scaling` (None: the
    head width's), `is_causal` (None: the module's); the others are not used.
    """
    dropout, scaling, is_causal = kwargs.get("dropout", 0.0), kwargs.get("scaling"), kwargs.get("is_causal")
    is_causal = getattr(module, "is_causal", True) if is_causal is None else is_causal
    q_len = query.shape[2]
    is_causal = bool(q_len > 1 and attention_mask is None and is_causal)
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling, is_causal=is_causal,
        enable_gqa=query.shape[1] != key.shape[1])
    return out.transpose(1, 2).contiguous(), None


@functools.cache
def _register_gqa_attention() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(GQA_ATTENTION, _sdpa_gqa)
    AttentionMaskInterface.register(GQA_ATTENTION, sdpa_mask)  # the masks "sdpa" gets


@contextmanager
def gqa_attention(model: torch.nn.Module, enabled: bool = True) -> Iterator[None]:
    """Run `model` (a transformers model, or a PEFT model around one) with `_sdpa_gqa` while inside.

    Only a model whose attention is "sdpa" is switched, and it is switched back on the way out, so
    training forwards keep transformers' own attention.
    """
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    config = getattr(base, "config", None)
    if not enabled or getattr(config, "_attn_implementation", None) != "sdpa" or \
            not hasattr(base, "set_attn_implementation"):
        yield
        return
    _register_gqa_attention()
    base.set_attn_implementation(GQA_ATTENTION)
    try:
        yield
    finally:
        base.set_attn_implementation("sdpa")
