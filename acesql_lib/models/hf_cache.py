"""The HF engine's KV cache: transformers' dynamic cache for the kit's decoding loop, and its columns rearranged
along the sequence (a shared prefill laid out as left-padded rows).
"""
from __future__ import annotations

from typing import Any

import torch


def new_cache(model: torch.nn.Module) -> Any:
    """An empty `DynamicCache` for `model`."""
    from transformers import DynamicCache

    return DynamicCache(config=model.config)


def plain_layers(cache: Any) -> bool:
    """Whether every layer of `cache` keeps all its columns in the order written (no sliding window)."""
    from transformers.cache_utils import DynamicLayer

    return all(type(layer) is DynamicLayer for layer in cache.layers)


def gather_columns(cache: Any, index: torch.Tensor) -> None:
    """Every layer's keys and values rearranged along the sequence: row b's column j becomes its column
    index[b, j]."""
    for layer in cache.layers:
        at = index[:, None, :, None].expand(-1, layer.keys.shape[1], -1, layer.keys.shape[-1])
        layer.keys, layer.values = layer.keys.gather(2, at), layer.values.gather(2, at)
