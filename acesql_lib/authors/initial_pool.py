"""The authors' released initial pool (`initial_pool.json`, or a parquet copy) read, turned into a kit pool, and
described.

The file is `{"<db_id>||<question>": {"<comma-separated sorted column indices>": weight}}`; `pool_from_release`
maps the indices to the kit's canonical `table.column` names and builds a `ColumnSetPool` keyed by the kit's
question ids, weights kept exactly; `pool_statistics` says how the released pool is made up.
"""
from __future__ import annotations

import json
import logging
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from ..roles.pool import ColumnSetPool
from .release_files import KEY_SEP, ReadReport, names_of, read_records
from .rl_rows import AuthorsRow

log = logging.getLogger(__name__)


RawPool = dict[str, dict[frozenset[int], float]]


def _weight_ok(w: Any) -> bool:
    return isinstance(w, (int, float)) and not isinstance(w, bool) and w >= 0 and w == w


def _parse_sets(sets: Any) -> dict[frozenset[int], float] | str:
    """One question's {"i,j,k": weight} mapping, or the reason it is malformed."""
    if isinstance(sets, str):
        try:
            sets = json.loads(sets)
        except json.JSONDecodeError:
            return "column sets are not a JSON object"
    if not isinstance(sets, dict):
        return f"column sets must be an object {{\"i,j,k\": weight}}, got {type(sets).__name__}"
    out: dict[frozenset[int], float] = {}
    for text, w in sets.items():
        parts = str(text).split(",")
        if not all(p.strip().isdigit() for p in parts):
            return f"column set {text!r} is not comma-separated column indices"
        if not _weight_ok(w):
            return f"column set {text!r} has weight {w!r} (must be a number >= 0)"
        key = frozenset(int(p) for p in parts)
        if key in out:
            return f"column set {text!r} repeats an earlier set"
        out[key] = float(w)
    return out


_KEY_FIELDS = ("pool_key", "question_key", "key")
_SETS_FIELDS = ("column_sets", "col_sets", "sets", "pool", "weights", "freq")
_SET_FIELDS, _WEIGHT_FIELDS = ("column_set", "col_set", "set", "columns"), ("weight", "freq", "frequency", "count")


def _pool_items(rows: list[Any], path: Path) -> list[tuple[str, Any]]:
    """(key, sets) from parquet rows: one row per question (a mapping, a JSON string or a parquet
    map of set -> weight) or one row per (question, set, weight)."""
    items: dict[str, Any] = {}
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise ValueError(f"{path}: row {i} is a {type(row).__name__}, not a record")
        key = next((row[k] for k in _KEY_FIELDS if isinstance(row.get(k), str)), None)
        sets = next((row[k] for k in _SETS_FIELDS if row.get(k) is not None), None)
        one = next((row[k] for k in _SET_FIELDS if row.get(k) is not None), None)
        weight = next((row[k] for k in _WEIGHT_FIELDS if row.get(k) is not None), None)
        if key is not None and isinstance(sets, list):  # a parquet map reads as [(set, weight), ...]
            sets = dict(sets) if all(isinstance(x, (list, tuple)) and len(x) == 2 for x in sets) else sets
        if key is not None and sets is not None:
            items[key] = sets
        elif key is not None and one is not None and weight is not None:
            text = ",".join(str(x) for x in sorted(one)) if isinstance(one, (list, tuple)) else str(one)
            bucket = items.setdefault(key, {})
            if isinstance(bucket, dict):
                bucket[text] = weight
        else:
            raise ValueError(f"{path}: row {i}: no question key with its column sets among fields {sorted(row)}")
    return list(items.items())


def read_pool(path: str | Path) -> tuple[RawPool, ReadReport]:
    """The released initial pool as {pool key: {frozenset of column indices: weight}}.

    Reads `initial_pool.json` (the tested format), or a parquet copy whose rows hold a question
    key (`pool_key`/`question_key`/`key`) with its sets, as one mapping per question or one row per set."""
    data = read_records(path)
    report = ReadReport(str(path))
    if isinstance(data, list):  # parquet rows
        items = _pool_items(data, Path(path))
    elif isinstance(data, dict):
        items = list(data.items())
    else:
        raise ValueError(f"{path}: expected a JSON object keyed by 'db_id||question', got {type(data).__name__}")
    raw: RawPool = {}
    for key, sets in items:
        report.total += 1
        if KEY_SEP not in key or not key.partition(KEY_SEP)[0]:
            report.skip(repr(key[:80]), f"key is not 'db_id{KEY_SEP}question'")
            continue
        parsed = _parse_sets(sets)
        if isinstance(parsed, str):
            report.skip(repr(key[:80]), parsed)
        elif key in raw:
            report.skip(repr(key[:80]), "question appears twice")
        else:
            raw[key] = parsed
    return raw, report


def pool_from_release(raw: RawPool, questions: Mapping[str, tuple[str, Sequence[str | None], Iterable[str]]],
                      gamma: float = 0.5) -> tuple[ColumnSetPool, dict[str, Any]]:
    """A kit pool from the released one, for the questions given as
    {pool key: (kit question id, index -> name list of its database, gold column set)}.

    Weights are kept exactly. Released questions outside `questions` are left out and counted; a
    question without a released entry starts with no sets (counted); a set naming an index that is
    not a column drops the question's entry (reported)."""
    pool = ColumnSetPool(gamma, "sft_rollouts")
    counts = Counter()
    data = pool.to_dict()
    for key, (qid, names, gold) in sorted(questions.items(), key=lambda kv: kv[1][0]):
        entry = raw.get(key)
        sets: list[list[Any]] = []
        if entry is None:
            counts["questions_without_entry"] += 1
        else:
            try:
                sets = [[sorted(names_of(s, names, f"pool entry {key[:60]!r}")), w] for s, w in entry.items()]
                counts["questions_loaded"] += 1
            except ValueError as e:
                log.warning("%s; its released sets are not used", e)
                counts["questions_with_bad_index"] += 1
        data["questions"][qid] = {"gold": sorted(gold), "visits": 0, "sets": sets}
    counts["released_questions_not_used"] = len(set(raw) - set(questions))
    return ColumnSetPool.from_dict(data, "authors' pool", gamma=gamma), dict(counts)


def pool_statistics(raw: RawPool, rows: Sequence[AuthorsRow] = ()) -> dict[str, Any]:
    """How the released pool is made up (README evidence): weight kinds, per-question totals and,
    on the given RL rows, where the gold set sits."""
    weights = [w for sets in raw.values() for w in sets.values()]
    halves = [q for q, sets in raw.items() if any(w == 0.5 for w in sets.values())]
    fractional = [q for q, sets in raw.items() if any(w != 0.5 and not w.is_integer() for w in sets.values())]
    out: dict[str, Any] = {
        "questions": len(raw), "entries": len(weights),
        "integer_weights": sum(w.is_integer() for w in weights), "half_weights": sum(w == 0.5 for w in weights),
        "fractional_weights": sum(not w.is_integer() and w != 0.5 for w in weights),
        "questions_with_a_half_weight": len(halves),
        "questions_with_two_half_weights": sum(sum(w == 0.5 for w in raw[q].values()) > 1 for q in halves),
        "questions_rescaled": len(fractional), "rescaled_with_a_half_weight": len(set(fractional) & set(halves)),
    }
    gold_absent = gold_half = gold_counted = gold_max = total_ok = 0
    for r in rows:
        sets = raw.get(r.key, {})
        w = sets.get(frozenset(r.gold_indices))
        if w is None:
            gold_absent += 1
        elif w == 0.5:
            gold_half += 1
        else:
            gold_counted += 1
            gold_max += w == max(sets.values())
        total_ok += abs(sum(sets.values()) - r.pool_stats.get("pool_correct_sum", float("nan"))) <= 1e-6
    if rows:
        out.update({"rows": len(rows), "rows_gold_absent": gold_absent, "rows_gold_at_half": gold_half,
                    "rows_gold_at_rollout_count": gold_counted, "rows_gold_is_a_top_set": gold_max,
                    "rows_total_is_pool_correct_sum": total_ok})
    return out
