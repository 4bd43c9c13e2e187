"""The HF engine's KV cache that grows in place: `InPlaceLayer` keeps a layer's keys and values in buffers with
room for more tokens, so a decoding step writes its token where transformers' `DynamicLayer` copies the whole
cache; and the cache's columns rearranged along the sequence (a shared prefill laid out as left-padded rows).
"""
from __future__ import annotations

import functools
from typing import Any

import torch


@functools.cache
def _in_place_layer() -> type:
    """`InPlaceLayer`, built on first use (transformers is imported lazily)."""
    from transformers.cache_utils import DynamicLayer

    class InPlaceLayer(DynamicLayer):
        """A `DynamicLayer` whose keys and values sit in buffers with room for `room` more tokens: a decoding step
        writes its token in place, where `DynamicLayer` copies the whole cache into a new tensor at every step.
        Attention reads the filled part, a view of the buffer."""

        def __init__(self, room: int):
            super().__init__()
            self.room, self.filled = room, 0
            self.k_buffer: torch.Tensor | None = None
            self.v_buffer: torch.Tensor | None = None

        def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
                   ) -> tuple[torch.Tensor, torch.Tensor]:
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            n, new = self.filled, key_states.shape[-2]
            if self.k_buffer is None or n + new > self.k_buffer.shape[-2]:
                k = key_states.new_empty((*key_states.shape[:-2], n + new + self.room, key_states.shape[-1]))
                v = value_states.new_empty((*value_states.shape[:-2], n + new + self.room, value_states.shape[-1]))
                if n:
                    k[..., :n, :], v[..., :n, :] = self.k_buffer[..., :n, :], self.v_buffer[..., :n, :]
                self.k_buffer, self.v_buffer = k, v
            self.k_buffer[..., n:n + new, :] = key_states
            self.v_buffer[..., n:n + new, :] = value_states
            self.filled = n + new
            self._views()
            return self.keys, self.values

        def _views(self) -> None:
            self.keys, self.values = self.k_buffer[..., :self.filled, :], self.v_buffer[..., :self.filled, :]

        def gather_columns(self, index: torch.Tensor) -> None:
            at = index[:, None, :, None].expand(-1, self.keys.shape[1], -1, self.keys.shape[-1])
            keys, values = self.keys.gather(2, at), self.values.gather(2, at)
            self.k_buffer = self.v_buffer = None
            self.filled = 0
            self.update(keys, values)

        def batch_select_indices(self, indices: torch.Tensor) -> None:
            if self.filled:
                self.k_buffer, self.v_buffer = self.k_buffer[indices], self.v_buffer[indices]
                self._views()

    return InPlaceLayer


def in_place_cache(model: torch.nn.Module, room: int | None) -> Any:
    """A `DynamicCache` for `model` whose layers grow in place (`InPlaceLayer`), with room for `room` tokens after
    what is first written; transformers' own layers where `room` is None, or where they are not all plain dynamic
    ones (sliding windows)."""
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    cache = DynamicCache(config=model.config)
    if room is not None and all(type(layer) is DynamicLayer for layer in cache.layers):
        cache.layers = [_in_place_layer()(room) for _ in cache.layers]
    return cache


def plain_layers(cache: Any) -> bool:
    """Whether every layer of `cache` keeps all its columns in the order written (no sliding window)."""
    from transformers.cache_utils import DynamicLayer

    return all(type(layer) is DynamicLayer or type(layer) is _in_place_layer() for layer in cache.layers)


def gather_columns(cache: Any, index: torch.Tensor) -> None:
    """Every layer's keys and values rearranged along the sequence: row b's column j becomes its column
    index[b, j]."""
    for layer in cache.layers:
        if hasattr(layer, "gather_columns"):
            layer.gather_columns(index)
        else:
            at = index[:, None, :, None].expand(-1, layer.keys.shape[1], -1, layer.keys.shape[-1])
            layer.keys, layer.values = layer.keys.gather(2, at), layer.values.gather(2, at)
