"""What every generation engine gives and takes: the `Engine` interface, the `Completion` it returns, the stop
tokens, and the output tokens a role spent per question.

Prompts come in already chat-templated (text); completions come back with their token ids, the
number of generated tokens (up to and including the stop token: the length penalty of §4 step 6 and
the efficiency table count these) and whether the token budget ran out before a stop token.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from .loading import END_OF_TEXT, IM_END


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


def check_args(prompts: Sequence[str], n: int, temperature: float, top_p: float, max_new_tokens: int) -> None:
    if isinstance(prompts, str):
        raise TypeError("prompts must be a list of strings, got a single string")
    if n < 1 or max_new_tokens < 1:
        raise ValueError(f"n ({n}) and max_new_tokens ({max_new_tokens}) must be >= 1")
    if temperature < 0 or not 0 < top_p <= 1:
        raise ValueError(f"temperature ({temperature}) must be >= 0 and top_p ({top_p}) in (0, 1]")


def make_completion(ids: Sequence[int], stops: set[int], max_new_tokens: int, tokenizer: Any) -> Completion:
    ids = list(ids)
    end = next((i for i, t in enumerate(ids) if t in stops), None)
    if end is not None:
        ids = ids[: end + 1]
    text = tokenizer.decode(ids, skip_special_tokens=True)
    return Completion(text, ids, len(ids), truncated=end is None and len(ids) >= max_new_tokens)


def within_context(c: Completion, room: int, stops: set[int], tokenizer: Any) -> Completion:
    """`c` as an engine whose context leaves `room` new tokens after its prompt gives it: its first `room` tokens
    (vLLM stops a request whose prompt and output fill `max_model_len`), truncated unless one is a stop token."""
    return c if c.n_tokens < room else make_completion(c.token_ids[:room], stops, room, tokenizer)


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
