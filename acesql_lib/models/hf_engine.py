"""The HF engine: batched `generate` (or the kit's own decoding loop) on the live policy, with the levers that
make it faster and keep every token and seeded draw `generate`'s (`HFOptions`).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..config.model import EngineConfig
from .completions import Completion, Engine, check_args, make_completion, stop_token_ids
from .gqa_attention import gqa_attention
from .hf_cache import gather_columns, new_cache, plain_layers
from .hf_prefix import prefill_work, prefix_groups, token_work
from .sharding import gathered_fsdp, is_sharded


@dataclass(frozen=True)
class HFOptions:
    """How an `HFEngine` batches, caches and decodes; `from_config` reads a profile's (`engine.hf_*`), and the levers
    the profile does not set (`grouped_kv`) are on.

    `batch_size` counts sequences (prompt copies) per sampling `generate` call, n samples of one prompt included,
    which bounds memory whatever n is; `greedy_batch_size` the same for greedy calls (None: `batch_size`), where
    larger batches mean fewer Python-bound decoding steps and the same tokens. With `grouped_kv`, on CPU, the
    grouped key/value heads go to torch's attention as they are (`gqa_attention`) instead of being copied per query
    head: the same numbers, less memory traffic. With `share_prefix`, the n samples of a prompt share one prefill of
    it, and prompts that open alike (one database's schema) one prefill of their opening of `shared_opening_min`
    tokens or more, where that is less work (`HFEngine._shared_prefix`). With `drop_finished`, decoding runs the
    kit's own loop (`HFEngine._decode`, a dynamic cache) that drops a row from the batch once it has ended, where
    `generate` decodes every row until the longest ends: the same tokens (a row's logits do not depend on the
    batch's other rows, and a sampled step draws its noise for the whole batch, as `generate` does), fewer rows per
    step.
    """

    batch_size: int = 64
    grouped_kv: bool = True
    greedy_batch_size: int | None = None
    share_prefix: bool = True
    drop_finished: bool = True
    shared_opening_min: int = 32

    @classmethod
    def from_config(cls, cfg: EngineConfig) -> "HFOptions":
        """The options `engine.hf_*` describes."""
        return cls(batch_size=cfg.hf_batch_size, greedy_batch_size=cfg.hf_greedy_batch_size,
                   share_prefix=cfg.hf_share_prefix, drop_finished=cfg.hf_drop_finished,
                   shared_opening_min=cfg.hf_shared_opening_min)


def _padded_positions(mask: torch.Tensor) -> torch.Tensor:
    """The position of each token of a left-padded batch, as `generate` gives them: the attention mask's running
    count (padding at 1; masked out, so its value never reaches a real token)."""
    return (mask.long().cumsum(-1) - 1).masked_fill(mask == 0, 1)



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


class HFEngine(Engine):
    """Batched `model.generate` with left padding on the live policy (so syncing is a no-op); how it batches,
    caches and decodes is its `HFOptions`. Each prompt is tokenised once, and results come back in prompt order.
    """

    kind = "hf"

    def __init__(self, model: torch.nn.Module, tokenizer: Any, options: HFOptions = HFOptions()):
        if options.greedy_batch_size is None:
            options = dataclasses.replace(options, greedy_batch_size=options.batch_size)
        if min(options.batch_size, options.greedy_batch_size) < 1:
            raise ValueError(f"HFEngine: batch sizes ({options.batch_size}, greedy {options.greedy_batch_size}) must be "
                             ">= 1")
        self.model, self.tokenizer, self.options = model, tokenizer, options
        if tokenizer.pad_token_id is None:
            raise ValueError("tokenizer has no pad token; set tokenizer.pad_token before generating")
        self.stops = stop_token_ids(tokenizer)

    @classmethod
    def from_config(cls, cfg: EngineConfig, model: torch.nn.Module, tokenizer: Any) -> "HFEngine":
        """The engine `engine.hf_*` describes."""
        return cls(model, tokenizer, HFOptions.from_config(cfg))

    def sync_weights(self, model: torch.nn.Module) -> None:
        self.model = model  # the live model is used directly

    def _batches(self, prompts: int, n: int, size: int | None = None) -> list[list[int]]:
        """Row indices (row r = copy r % n of prompt r // n) per `generate` call, `size` rows at most, in order."""
        size = size or self.options.batch_size
        rows = list(range(prompts * n))
        return [rows[i: i + size] for i in range(0, len(rows), size)]

    def _shared_prefix(self, encoded: Sequence[Sequence[int]], batch: Sequence[int], n: int, device: torch.device,
) -> Any:
        """The KV cache of a batch's prompts but their last token, with prefills shared, or None when none is.
        Row r is copy r % n of prompt `encoded[r // n]` (a prompt's copies are adjacent). The n copies of a prompt
        share one prefill of it; prompts that open with the same `shared_opening_min` tokens or more (one
        database's schema before its questions) also share one prefill of their common opening
        (`prefix_groups`), each prompt's rest then prefilled after it, where that is less work
        (`prefill_work`). The cache comes back laid out as the batch's left-padded rows, so `generate` runs only
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
        cache = new_cache(self.model)
        groups = alone
        if self.options.shared_opening_min and plain_layers(cache):  # sliding windows keep their own column order
            groups = prefix_groups(prompts, self.options.shared_opening_min)
            per_token = token_work(self.model) if len(groups) < len(prompts) else None
            if per_token is None or prefill_work(per_token, groups, prompts) >= prefill_work(per_token, alone,
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
            gather_columns(cache, index)
        if len(firsts) != len(batch):
            cache.batch_select_indices(torch.tensor(owners, device=device))
        return cache

    def _decode(self, input_ids: torch.Tensor, mask: torch.Tensor, max_new_tokens: int, cache: Any = None,
                temperature: float = 0.0, top_p: float = 1.0) -> list[list[int]]:
        """Decoding of a left-padded batch, each row's new tokens up to its stop token: what `generate` returns
        (greedy at temperature 0, sampled otherwise), but ended rows leave the batch (their KV cache, mask and
        position rows dropped) once they are half of the rows held, so a step costs about the rows still decoding,
        not the whole batch until its longest answer ends (dropping at every end was no faster on the tiny
        evaluation: each drop copies the cache). `cache` holds the prompts but their last token
        (`_shared_prefix`), or None for a new one. Positions and masks are those
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
            cache, step_ids = new_cache(self.model), input_ids
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
        check_args(prompts, n, temperature, top_p, max_new_tokens)
        if not prompts:
            return []
        greedy = temperature == 0
        sampling = dict(do_sample=False, temperature=None, top_p=None, top_k=None) if greedy else \
            dict(do_sample=True, temperature=temperature, top_p=top_p, top_k=0)  # top_k off, as vLLM's -1
        device = next(self.model.parameters()).device
        # A sharded FSDP2 policy's forward is a collective: `generate` keeps the ranks decoding in lockstep
        # (synced_gpus), the kit's loop would not, so such a model decodes in `generate` (GRPO gathers it first).
        sharded = is_sharded(self.model)
        own_loop = self.options.drop_finished and not sharded
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
                    gqa_attention(self.model, enabled=self.options.grouped_kv and device.type == "cpu"):
                if seed is not None:
                    torch.manual_seed(seed)
                size = self.options.greedy_batch_size if greedy else self.options.batch_size
                for batch in self._batches(len(encoded), n, size):
                    ids = [encoded[r // n] for r in batch]
                    width = max(len(x) for x in ids)
                    input_ids, mask = _left_padded(ids, width, pad, device)
                    shared = self._shared_prefix(encoded, batch, n, device) if self.options.share_prefix else None
                    if own_loop:
                        new_ids = self._decode(input_ids, mask, max_new_tokens, cache=shared,
                                               temperature=temperature, top_p=top_p)
                        for r, new in zip(batch, new_ids):
                            outputs[r] = make_completion(new, stops, max_new_tokens, self.tokenizer)
                        continue
                    out = self.model.generate(input_ids=input_ids, attention_mask=mask, **sampling,
                                              max_new_tokens=max_new_tokens, eos_token_id=self.stops,
                                              pad_token_id=pad,
                                              **({"past_key_values": shared} if shared is not None else {}))
                    for r, new in zip(batch, out[:, width:].tolist()):
                        outputs[r] = make_completion(new, stops, max_new_tokens, self.tokenizer)
        finally:
            self.model.train(was_training)
        return [outputs[i * n: (i + 1) * n] for i in range(len(prompts))]  # type: ignore[misc]
