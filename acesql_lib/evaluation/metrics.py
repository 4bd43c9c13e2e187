"""The headline metrics of one evaluation, as pure functions of its per-question records (so they are tested on
fixed records): EX by difficulty, Retriever and Generator Ability, tokens per question, the alternative-route
share, the well-formed and truncation rates, and the questions whose prompt was over the engine's context.

Kit choices where §5 is silent (UNKNOWN in the paper), all reported in `metrics.json`:
- output tokens per question = retriever + generator generated tokens (stop token included),
  counted with the policy's tokenizer;
- Generator Ability = EX of a third greedy pass in which the generator is given the gold SQL's
  column set as the pruned schema (over questions whose gold column set resolves);
- Retriever Ability = share of questions whose retrieved set covers the gold column set; column
  precision, recall (macro means over questions) and exact-match share are reported beside it;
  precision of an empty retrieval is 0;
- alternative-route share = share of execution-correct predictions whose column set differs from
  the gold's (`routes.route_share`); None when no correct prediction resolves.

Units: EX-type accuracies (`ex`, `ex_by_difficulty`, `generator_ability`) are percent, as the paper
prints EX; every share (`stats.SHARE_KEYS`: the retrieval metrics, the alternative-route share, the
well-formed and truncation rates) is a fraction in [0, 1], like distillation's and GRPO's shares.
Tables turn shares into percent when they print (`reports`), never by guessing from the value.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from ..data.routes import route_share
from .records import _pct, ex_by_difficulty


def retrieval_metrics(records: Sequence[Mapping[str, Any]]) -> dict[str, float | int | None]:
    """Retriever Ability (coverage of the gold column set), column precision/recall/exact match, as fractions.

    Only questions whose gold column set resolves count (`n`); comparisons ignore case.
    """
    cover, precision, recall, exact = [], [], [], []
    for r in records:
        gold = r.get("gold_columns")
        if gold is None:
            continue
        gold = {c.lower() for c in gold}
        got = {c.lower() for c in r.get("retrieved_columns") or []}
        hit = len(gold & got)
        cover.append(gold <= got)
        precision.append(hit / len(got) if got else 0.0)
        recall.append(hit / len(gold) if gold else 1.0)
        exact.append(gold == got)
    n = len(cover)

    def mean(xs: list) -> float | None:
        return sum(xs) / n if n else None

    return {"retriever_ability": mean(cover), "column_precision": mean(precision), "column_recall": mean(recall),
            "column_exact_match": mean(exact), "n": n}


def generator_ability(records: Sequence[Mapping[str, Any]]) -> dict[str, float | int | None]:
    """EX (%) of the generator on the gold-column schema, over questions where that pass ran."""
    hits = [r["gold_schema_correct"] for r in records if r.get("gold_schema_correct") is not None]
    return {"generator_ability": _pct(hits)[0] if hits else None, "n": len(hits)}


def token_metrics(records: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Mean generated tokens per question: retriever, generator and their sum (§5, kit's counting)."""
    n = len(records) or 1
    ret = sum(r["retriever_tokens"] for r in records) / n
    gen = sum(r["generator_tokens"] for r in records) / n
    return {"tokens_per_question": ret + gen, "retriever_tokens": ret, "generator_tokens": gen}


def alt_route_metrics(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Share (a fraction) of correct predictions on an alternative route; None when none resolves."""
    share = route_share(records)
    value = None if math.isnan(share["share"]) else share["share"]
    return {"alt_route_share": value, **{f"alt_route_{k}": v for k, v in share.items() if k != "share"}}


def summarize(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Every headline metric of one evaluation, from its per-question records."""
    by_diff = ex_by_difficulty(records)
    retrieval = retrieval_metrics(records)
    gen = generator_ability(records)
    n = len(records) or 1
    return {
        "n": len(records), "ex": by_diff["overall"]["ex"], "ex_by_difficulty": by_diff,
        **token_metrics(records),
        "generator_ability": gen["generator_ability"], "generator_ability_n": gen["n"],
        **{k: v for k, v in retrieval.items() if k != "n"}, "retriever_n": retrieval["n"],
        **alt_route_metrics(records),
        "retriever_well_formed": sum(r["retriever_well_formed"] for r in records) / n,
        "generator_well_formed": sum(r["generator_well_formed"] for r in records) / n,
        "truncated": sum(r["retriever_truncated"] or r["generator_truncated"] for r in records) / n,
        **overlong_metrics(records),
    }


PASSES = ("retriever", "generator", "gold_schema")


def overlong_metrics(records: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per pass, the questions whose prompt left no room in the engine's context (scored 0): their number
    (`n_overlong`) and ids (`overlong_ids`). A question over in the retriever pass has no generator pass."""
    ids = {p: [str(r["id"]) for r in records if r.get("overlong") == p] for p in PASSES[:2]}
    ids["gold_schema"] = [str(r["id"]) for r in records if r.get("gold_schema_overlong")]
    return {"n_overlong": {p: len(v) for p, v in ids.items()}, "overlong_ids": ids}


def overlong_line(set_name: str, context: int, ids: Mapping[str, Sequence[str]], shown: int = 20) -> str:
    """The printed line naming the questions over the context, per pass (the first `shown` ids of each)."""
    def one(p: str) -> str:
        named = ", ".join(ids[p][:shown]) + (", ..." if len(ids[p]) > shown else "")
        return f"{p.replace('_', '-')} pass: {len(ids[p])}" + (f" ({named})" if ids[p] else "")

    return (f"[evaluate] {set_name}: prompts over the engine's {context}-token context, not generated and scored 0: "
            + "; ".join(one(p) for p in PASSES))
