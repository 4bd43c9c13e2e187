"""Rewards (§4 step 6) and GRPO group advantages (§4 step 7).

Both roles get sparse, gated rewards: a well-formed output that is right earns 1 - p_len(L),
anything else earns 0. p_len(L) = 0.5 * clip((L - 512) / (2048 - 512), 0, 1) on the number of
generated tokens L. The dense retriever rewards exist only for the ablation the paper reports
("dense rewards let the retriever dominate the gradient and invite reward hacking").

Gates, as the authors' RL/rewards/joint_reward.py applies them (paper profile): the retriever
reward needs a think block, a list, no truncation, a non-empty selection and a target; the
generator reward needs a think block, a sql block and a match, and is NOT gated on truncation
(`truncation_gate=False`; the kit's stricter reading, `grpo.generator_truncation_gate: true`,
also voids a truncated generator output). The `dense` ablation is the authors' formula
(`authors_dense_retriever_reward`), the kit's own stays as `dense_kit`.

The `make_*_reward_fn` factories return TRL-shaped reward functions (completions in, one float
each out, extra dataset columns as keyword arguments) so the curves sit beside TRL's.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

import torch

from .answers import GeneratorParse, RetrieverParse, parse_generator, parse_retriever


@dataclass(frozen=True)
class LengthPenalty:
    """p_len(L) = max_penalty * clip((L - start) / (end - start), 0, 1) (§4 step 6)."""

    start: int = 512
    end: int = 2048
    max_penalty: float = 0.5

    def __post_init__(self) -> None:
        if self.end <= self.start:
            raise ValueError(f"length penalty: end ({self.end}) must exceed start ({self.start})")

    def __call__(self, n_tokens: int) -> float:
        return length_penalty(n_tokens, self.start, self.end, self.max_penalty)

    @classmethod
    def from_config(cls, grpo_cfg: Any) -> "LengthPenalty":
        return cls(grpo_cfg.len_penalty_start, grpo_cfg.len_penalty_end, grpo_cfg.len_penalty_max)


PAPER_PENALTY = LengthPenalty()


def length_penalty(n_tokens: int, start: int = 512, end: int = 2048, max_penalty: float = 0.5) -> float:
    frac = (n_tokens - start) / (end - start)
    return max_penalty * min(max(frac, 0.0), 1.0)


def generator_reward(parse: GeneratorParse, match: bool, n_tokens: int,
                     penalty: LengthPenalty = PAPER_PENALTY, truncation_gate: bool = False) -> float:
    """1 - p_len(L) when the output has a think block and a sql block (and, with
    `truncation_gate`, is not truncated) and its SQL matches the gold result; else 0."""
    gate = parse.well_formed if truncation_gate else parse.format_ok
    if not (gate and match):
        return 0.0
    return 1.0 - penalty(n_tokens)


def retriever_reward(parse: RetrieverParse, targets: Sequence[frozenset[str]], n_tokens: int,
                     penalty: LengthPenalty = PAPER_PENALTY) -> float:
    """1 - p_len(L) when well formed, not truncated, non-empty and EXACTLY one of the pool's
    targets; else 0 (also 0 when the pool has no target yet)."""
    if not (parse.well_formed and parse.columns):
        return 0.0
    if not any(parse.columns == frozenset(t) for t in targets):
        return 0.0
    return 1.0 - penalty(n_tokens)


def dense_retriever_reward(parse: RetrieverParse, target: frozenset[str], n_tokens: int,
                           noise_weight: float = 0.5, penalty: LengthPenalty = PAPER_PENALTY) -> float:
    """The kit's ablation reward (`dense_kit`; the paper gives no formula): coverage minus noise.

    r = max(0, recall - noise_weight * noise) * (1 - p_len(L)), where recall = |S & T| / |T|
    (1.0 for an empty target) and noise = |S - T| / |S| is the share of selected columns
    outside the target. Partial credit for covering the target, a price for padding the list.
    Gated on format like the sparse reward (well formed, not truncated); an empty selection
    earns 0 unless the target is empty too. Clipped at 0 so that the length penalty always
    lowers the reward (scaling a negative value by 1 - p_len would reward longer outputs).
    """
    if not parse.well_formed:
        return 0.0
    selected, target = parse.columns, frozenset(target)
    if not selected:
        return (1.0 - penalty(n_tokens)) if not target else 0.0
    recall = len(selected & target) / len(target) if target else 1.0
    noise = len(selected - target) / len(selected)
    return max(0.0, recall - noise_weight * noise) * (1.0 - penalty(n_tokens))


def _best_set(weights: Mapping[frozenset[str], float], gold: frozenset[str]) -> frozenset[str]:
    """The heaviest set (ties: fewest columns, then sorted names); the gold set when none."""
    if not weights:
        return frozenset(gold)
    top = max(weights.values())
    tied = [s for s, w in weights.items() if abs(w - top) < 1e-9]
    return min(tied, key=lambda s: (len(s), sorted(s)))


def authors_dense_retriever_reward(parse: RetrieverParse, pool_weights: Mapping[Iterable[str], float],
                                   gold: Iterable[str] = (), useful_noise_bar: float = 0.1) -> float:
    """The authors' dense retriever reward (their "V6", RL/rewards/joint_reward.py), the `dense` ablation.

    On the question's pool after this step's additions (weights W, total mass M): best set B = the
    heaviest set (the gold set when the pool is empty); column weight w(c) = sum of W over the sets
    holding c, / M. With S the selection and noise N = S - B, a noise column is useful when
    w(c) > useful_noise_bar, irrelevant otherwise (I):
        r = 4 |S & B| / |B|  -  6 |I| / |S|  +  4 mean_{useful}(w) |useful| / |N|
    in [-6, 8]. 0 without a think block or a list, for an empty selection and for an empty B.
    No length penalty and no truncation gate (the authors' formula has neither).
    """
    if not parse.format_ok or not parse.columns:
        return 0.0
    weights = {frozenset(s): float(w) for s, w in pool_weights.items()}
    best = _best_set(weights, frozenset(gold))
    if not best:
        return 0.0
    selected = parse.columns
    total = sum(weights.values())
    col_w: dict[str, float] = {}
    if total > 0:
        for s, w in weights.items():
            for c in s:
                col_w[c] = col_w.get(c, 0.0) + w / total
    noise = selected - best
    useful = {c for c in noise if col_w.get(c, 0.0) > useful_noise_bar}
    irrelevant = noise - useful
    reward = 4.0 * len(selected & best) / len(best) - 6.0 * len(irrelevant) / len(selected)
    if useful:
        reward += 4.0 * (sum(col_w[c] for c in useful) / len(useful)) * len(useful) / len(noise)
    return reward


# ------------------------------------------------------------------------------------------
# TRL-shaped wrappers


def _completion_text(completion: Any) -> str:
    """TRL passes plain strings or, for conversational data, a list of messages."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        return str(completion[-1].get("content", ""))
    raise TypeError(f"completion must be a string or a list of chat messages, got {type(completion).__name__}")


def _token_counts(n: int, n_tokens: Sequence[int] | None, completion_ids: Sequence[Sequence[int]] | None) -> list[int]:
    if n_tokens is not None:
        counts = [int(x) for x in n_tokens]
    elif completion_ids is not None:
        counts = [len(ids) for ids in completion_ids]
    else:
        raise ValueError("reward function needs `n_tokens` or `completion_ids` to apply the length penalty")
    if len(counts) != n:
        raise ValueError(f"reward function: {n} completions but {len(counts)} token counts")
    return counts


def _column(name: str, values: Sequence | None, n: int, default: Any = None) -> list:
    if values is None:
        if default is None:
            raise ValueError(f"reward function: missing keyword column {name!r}")
        return [default] * n
    values = list(values)
    if len(values) != n:
        raise ValueError(f"reward function: {n} completions but {len(values)} values in {name!r}")
    return values


def _lengths(n: int, columns: Mapping[str, Any]) -> tuple[list[int], list[bool]]:
    """The completions' token counts (keyword column `n_tokens`, or the lengths of `completion_ids`) and whether
    each was truncated (`truncated`, default False): what the length rules read."""
    return (_token_counts(n, columns.get("n_tokens"), columns.get("completion_ids")),
            _column("truncated", columns.get("truncated"), n, False))


def _schema_column(n: int, schema: Sequence[Any] | None, db_id: Sequence[str] | None,
                   schemas: Mapping[str, Any] | None) -> list:
    """A schema per completion: the `schema` column, or each `db_id` looked up in the factory's `schemas`."""
    if schema is not None:
        return _column("schema", schema, n)
    if db_id is not None and schemas is not None:
        missing = sorted({d for d in db_id if d not in schemas})
        if missing:
            raise KeyError(f"retriever reward: no schema for db_id {missing}")
        return [schemas[d] for d in _column("db_id", db_id, n)]
    raise ValueError("retriever reward needs a `schema` column, or `db_id` plus schemas given to the factory")


def make_generator_reward_fn(penalty: LengthPenalty = PAPER_PENALTY, prefilled_think: bool = False,
                             rules: str = "authors", truncation_gate: bool = False) -> Callable[..., list[float]]:
    """Reward function over generator completions; keyword column `matches` (bools, from the
    executor), token counts from `n_tokens` or `completion_ids`, optional `truncated`."""
    def generator_reward_fn(completions: Sequence[Any], matches: Sequence[bool] | None = None,
                            n_tokens: Sequence[int] | None = None, completion_ids: Sequence | None = None,
                            truncated: Sequence[bool] | None = None, **_: Any) -> list[float]:
        n = len(completions)
        counts = _token_counts(n, n_tokens, completion_ids)
        match_col, trunc_col = _column("matches", matches, n), _column("truncated", truncated, n, False)
        return [generator_reward(parse_generator(_completion_text(c), bool(t), prefilled_think, rules), bool(m), k,
                                 penalty, truncation_gate)
                for c, m, k, t in zip(completions, match_col, counts, trunc_col)]

    generator_reward_fn.__name__ = "generator_reward"
    return generator_reward_fn


def make_retriever_reward_fn(schemas: Mapping[str, Any] | None = None, kind: str = "sparse",
                             penalty: LengthPenalty = PAPER_PENALTY, noise_weight: float = 0.5,
                             prefilled_think: bool = False, rules: str = "authors",
                             think_rules: str | None = None) -> Callable[..., list[float]]:
    """Reward function over retriever completions.

    Keyword columns: `targets` (per completion, the pool's target sets: lists of column names
    or frozensets), a schema per completion as `schema` (Schema objects) or `db_id` (looked up
    in `schemas`), token counts from `n_tokens` or `completion_ids`, optional `truncated`.
    kind "sparse" is the paper's reward; "dense_kit" the kit's ablation reward, scored against
    the best of the targets (0 when there is none); "dense" the authors' ablation reward, which
    needs the keyword column `pool_weights` (per completion, the question's {set: weight} after
    this step's additions) and reads `gold` (column lists) when the pool is empty.
    """
    if kind not in ("sparse", "dense", "dense_kit"):
        raise ValueError(f"retriever reward kind must be 'sparse', 'dense' or 'dense_kit', got {kind!r}")

    def retriever_reward_fn(completions: Sequence[Any], targets: Sequence[Iterable] | None = None,
                            schema: Sequence[Any] | None = None, db_id: Sequence[str] | None = None,
                            pool_weights: Sequence[Mapping] | None = None, gold: Sequence[Iterable[str]] | None = None,
                            **columns: Any) -> list[float]:
        n = len(completions)
        counts, trunc_col = _lengths(n, columns)
        if kind == "dense":
            weight_col, target_col = _column("pool_weights", pool_weights, n), [()] * n
            gold_col = _column("gold", gold, n, ())
        else:
            target_col = _column("targets", targets, n)
        schema_col = _schema_column(n, schema, db_id, schemas)
        rewards = []
        for i, (c, tgts, sch, k, t) in enumerate(zip(completions, target_col, schema_col, counts, trunc_col)):
            parse = parse_retriever(_completion_text(c), sch, bool(t), prefilled_think, rules, think_rules)
            sets = [frozenset(x) for x in tgts]
            if kind == "sparse":
                rewards.append(retriever_reward(parse, sets, k, penalty))
            elif kind == "dense":
                rewards.append(authors_dense_retriever_reward(parse, weight_col[i], frozenset(gold_col[i])))
            else:
                rewards.append(max((dense_retriever_reward(parse, s, k, noise_weight, penalty) for s in sets),
                                   default=0.0))
        return rewards

    retriever_reward_fn.__name__ = f"retriever_reward_{kind}"
    return retriever_reward_fn


# ------------------------------------------------------------------------------------------
# Advantages


def group_advantages(rewards: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """GRPO advantages (§4 step 7): per group (row), (r - mean) / (std + eps), unbiased std.

    `rewards` is [n_groups, group_size]. A group of one has no spread: its advantage is 0. A
    group whose rewards are all equal gets 0 too (r - mean = 0).
    """
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be [n_groups, group_size], got shape {tuple(rewards.shape)}")
    if not rewards.is_floating_point():
        rewards = rewards.float()
    if rewards.shape[1] < 2:
        return torch.zeros_like(rewards)
    mean = rewards.mean(dim=1, keepdim=True)
    std = rewards.std(dim=1, keepdim=True, correction=1)
    return (rewards - mean) / (std + eps)
