"""Alternative executable routes (§1, §5): correct SQL that reads other columns than the gold SQL.

The paper reports that 19.1% to 42.3% of execution-correct predictions use "alternative
executable routes" (the breakdown behind the range is UNKNOWN). KIT DEFINITION: a prediction is
on an alternative route when it is execution-correct and its column set (`sqlcolumns.column_set`,
every `table.column` it reads in any scope) differs from the gold SQL's column set. The share is
taken over execution-correct predictions whose two column sets both resolve; correct predictions
with an unresolvable set are counted apart (`n_unresolved`), never silently in either bucket.
Column names are compared case-insensitively, so sets read back from JSON compare like fresh ones.

This module is the one home of both rules the kit applies to a scored SQL: `is_match` (execution
Match) and `alternative_route` / `route_share` (alternative route). Evaluation records, GRPO's
rollout metrics and distillation's summary all call them.
"""
from __future__ import annotations

import math
import sys
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

from .schema import Schema
from .sqlcolumns import ColumnResolutionError, column_set

if TYPE_CHECKING:  # pandas is imported where a table is asked for: the training and evaluation processes
    import pandas as pd  # that only score SQL start without it (0.36 s each)

ROUTE_FIELDS = ("n", "n_correct", "n_resolved", "n_unresolved", "n_alternative", "share")


def _columns_or_none(sql: str, schema: Schema) -> frozenset[str] | None:
    try:
        return column_set(sql, schema)
    except ColumnResolutionError:
        return None


def _key(columns: Iterable[str] | None) -> frozenset[str] | None:
    """A column set as a case-insensitive key; None (or NaN from a DataFrame) stays None."""
    if columns is None or (isinstance(columns, float) and math.isnan(columns)):
        return None
    if isinstance(columns, str):
        raise TypeError(f"a column set must be a collection of 'table.column', got the string {columns!r}")
    return frozenset(str(c).lower() for c in columns)


def is_match(correct: Any, sql: str | None) -> bool:
    """Execution Match of one prediction: the executor says correct AND a SQL was written.

    Unparseable output (no SQL) never matches, whatever the executor says of an empty string.
    """
    return bool(correct) and bool(sql)


def alternative_route(correct: Any, pred_columns: Iterable[str] | None,
                      gold_columns: Iterable[str] | None) -> bool | None:
    """Whether one prediction is on an alternative route (module doc): None unless it is correct
    and both column sets resolve; names compare case-insensitively."""
    if not bool(correct):
        return None
    pred, gold = _key(pred_columns), _key(gold_columns)
    if pred is None or gold is None:
        return None
    return pred != gold


def is_alternative_route(pred_sql: str, gold_sql: str, schema: Schema) -> bool | None:
    """Whether the two SQLs read different column sets; None when either set cannot be resolved.

    Says nothing about correctness: callers ask it of execution-correct predictions.
    """
    pred, gold = _columns_or_none(pred_sql, schema), _columns_or_none(gold_sql, schema)
    if pred is None or gold is None:
        return None
    return _key(pred) != _key(gold)


def route_record(pred_sql: str, gold_sql: str, schema: Schema, correct: bool, **extra: Any) -> dict[str, Any]:
    """One prediction as a record for `route_share` / `route_table` (sets as sorted lists, JSON-ready)."""
    pred, gold = _columns_or_none(pred_sql, schema), _columns_or_none(gold_sql, schema)
    return {**extra, "correct": bool(correct),
            "pred_columns": sorted(pred) if pred is not None else None,
            "gold_columns": sorted(gold) if gold is not None else None}


def route_share(records: Iterable[Mapping[str, Any]] | pd.DataFrame) -> dict[str, float]:
    """Share of execution-correct predictions whose column set differs from the gold's (module doc).

    Each record has `correct`, `pred_columns` and `gold_columns` (a collection, or None when it
    could not be resolved). `share` is NaN when no correct prediction has both sets.
    """
    pandas = sys.modules.get("pandas")  # a DataFrame exists only if pandas was imported
    if pandas is not None and isinstance(records, pandas.DataFrame):
        records = records.to_dict("records")
    n = n_correct = n_resolved = n_alternative = 0
    for i, r in enumerate(records):
        try:
            correct, pred, gold = r["correct"], _key(r["pred_columns"]), _key(r["gold_columns"])
        except KeyError as e:
            raise KeyError(f"route record {i}: missing field {e}") from None
        n += 1
        n_correct += bool(correct)
        alt = alternative_route(correct, pred, gold)
        if alt is None:
            continue
        n_resolved += 1
        n_alternative += alt
    return {"n": n, "n_correct": n_correct, "n_resolved": n_resolved, "n_unresolved": n_correct - n_resolved,
            "n_alternative": n_alternative, "share": n_alternative / n_resolved if n_resolved else float("nan")}


def rollout_route_records(rollouts: Iterable[Any]) -> list[dict[str, Any]]:
    """One route record per generator sample of `rollouts.QuestionRollout`s (its Match and the
    column set of a matching SQL, against the task's gold set), for `route_share`."""
    return [{"correct": m, "pred_columns": s, "gold_columns": r.task.gold_columns}
            for r in rollouts for m, s in zip(r.matches, r.match_sets)]


def route_table(df: pd.DataFrame, by: Sequence[str] = ("stage", "dataset")) -> pd.DataFrame:
    """`route_share` per group (by default per training stage and evaluation set), one row each."""
    import pandas as pd

    by = [c for c in by]
    missing = [c for c in by if c not in df.columns]
    if missing:
        raise KeyError(f"route_table: grouping columns {missing} not in the records (have {list(df.columns)})")
    if not by:
        return pd.DataFrame([route_share(df)], columns=list(ROUTE_FIELDS))
    rows = []
    for keys, group in df.groupby(by, sort=False, dropna=False):
        keys = keys if isinstance(keys, tuple) else (keys,)
        rows.append({**dict(zip(by, keys)), **route_share(group)})
    return pd.DataFrame(rows, columns=[*by, *ROUTE_FIELDS])
