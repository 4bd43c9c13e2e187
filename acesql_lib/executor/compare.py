"""Result comparison in the modes the kit scores with: BIRD's official EX (sets), the paper's
training match (§4 step 4, multisets with floats rounded to 6 places) and Spider's test-suite
evaluator (bags, ordered when the gold has a top-level ORDER BY, optional column permutations)."""
from __future__ import annotations

import functools
import time
from collections import Counter
from typing import Sequence

MODES = ("set", "multiset", "spider")

def _round_floats(row: tuple) -> tuple:
    return tuple(round(v, 6) if type(v) is float else v for v in row)


@functools.lru_cache(maxsize=4096)
def gold_has_order_by(gold_sql: str) -> bool:
    """True when the outermost query (or set operation) of `gold_sql` has ORDER BY (sqlglot)."""
    import sqlglot  # imported here so worker processes that never need it stay light
    try:
        tree = sqlglot.parse_one(gold_sql, read="sqlite")
    except Exception:  # unparsable gold: test-suite-sql-eval's own rule
        return "order by" in gold_sql.lower()
    while isinstance(tree, sqlglot.exp.Subquery) and not tree.args.get("order"):
        tree = tree.this
    return tree is not None and tree.args.get("order") is not None


class ComparisonTimeout(Exception):
    """The comparison ran past its deadline or its permutation budget; the verdict is `timeout`."""


MAX_PERMUTATION_NODES = 20_000  # partial column assignments the permutation search may try (UNKNOWN (kit))


def _value_key(v) -> tuple:
    """A total order on SQLite values in which equal values (1 == 1.0) have equal keys."""
    t = type(v)
    return (0, v) if t is int or t is float else (1, v) if t is str else (2, v) if t is bytes else (-1, 0)


def _unordered(row: tuple) -> tuple:
    """The row's values in a canonical order (test-suite-sql-eval `unorder_row`, with an order in
    which 1 and 1.0 sort alike, so equal rows always unorder alike)."""
    return tuple(sorted(row, key=_value_key))


def _permuted_match(pred: list[tuple], gold: list[tuple], order_matters: bool, deadline: float | None) -> bool:
    """Whether some order of pred's columns makes pred equal gold (a bag of rows, or a sequence when
    `order_matters`), with the search bounded.

    As test-suite-sql-eval: first the quick rejection (the rows with their values unordered must
    match), then candidate columns pruned by column contents before any permutation is tried (here
    exactly: a gold column can only be a pred column with the same multiset of values, or the same
    sequence when order matters). The rest is a depth-first search that assigns gold columns one by
    one, most constrained first, and drops a partial assignment as soon as the rows projected on
    the columns assigned so far differ as bags; it tries at most MAX_PERMUTATION_NODES partial
    assignments and checks `deadline` (monotonic) as it goes, raising ComparisonTimeout past either.
    """
    width = len(gold[0])
    if order_matters:
        if [_unordered(r) for r in pred] != [_unordered(r) for r in gold]:
            return False
        # Rows aligned: gold column i must equal some pred column as a sequence; equal columns are
        # interchangeable, so a match exists iff the columns are the same multiset of sequences.
        return Counter(zip(*pred)) == Counter(zip(*gold))
    if Counter(map(_unordered, pred)) != Counter(map(_unordered, gold)):
        return False
    if deadline is not None and time.monotonic() > deadline:
        raise ComparisonTimeout("comparison past the deadline")
    gold_cols, pred_cols = list(zip(*gold)), list(zip(*pred))
    gold_sig, pred_sig = [Counter(c) for c in gold_cols], [Counter(c) for c in pred_cols]
    allowed = [[j for j in range(width) if pred_sig[j] == gold_sig[i]] for i in range(width)]
    if any(not a for a in allowed):
        return False
    order = sorted(range(width), key=lambda i: len(allowed[i]))  # most constrained gold column first
    gold_prefix: dict[int, Counter] = {}  # k -> bag of gold rows projected on order[:k + 1], built on demand
    nodes = 0
    used = [False] * width
    chosen: list[int] = []

    def extend(k: int) -> bool:
        nonlocal nodes
        if k == width:
            return True
        for j in allowed[order[k]]:
            if used[j]:
                continue
            nodes += 1
            if nodes > MAX_PERMUTATION_NODES:
                raise ComparisonTimeout(f"column permutation search over {MAX_PERMUTATION_NODES} candidates")
            if deadline is not None and time.monotonic() > deadline:  # each candidate costs a pass over the rows
                raise ComparisonTimeout("column permutation search past the deadline")
            chosen.append(j)
            if k and k not in gold_prefix:
                gold_prefix[k] = Counter(zip(*(gold_cols[i] for i in order[:k + 1])))
            if k == 0 or Counter(zip(*(pred_cols[c] for c in chosen))) == gold_prefix[k]:
                used[j] = True
                if extend(k + 1):
                    return True
                used[j] = False
            chosen.pop()
        return False

    try:
        return extend(0)
    except RecursionError:  # one level per column: wider than Python's stack allows
        raise ComparisonTimeout(f"column permutation search over {width} columns") from None


def rows_match(pred_rows: Sequence[tuple], gold_rows: Sequence[tuple], mode: str = "multiset",
               gold_sql: str | None = None, permute_columns: bool = False, order_matters: bool | None = None,
               deadline: float | None = None) -> bool:
    """Whether a prediction's rows count as the gold's.

    - "set": official BIRD EX (evaluation.py): `set(pred) == set(gold)`; column order counts,
      duplicates and row order do not, values compared raw (1 == 1.0, '1' != 1).
    - "multiset": the paper's training match (§4 step 4): equal bags of rows, floats rounded to 6 places.
    - "spider": test-suite-sql-eval `result_eq`: equal bags of raw rows; row order compared only when
      the gold SQL has a top-level ORDER BY (or `order_matters` says so); with `permute_columns`,
      any order of pred columns that makes the results equal counts (test-suite always permutes),
      found by a bounded search (`_permuted_match`).

    `deadline` (monotonic clock): past it, or past the permutation budget, ComparisonTimeout is
    raised (the executor reports the prediction as `timeout`).
    """
    if mode == "set":
        return set(pred_rows) == set(gold_rows)
    if mode == "multiset":
        return Counter(map(_round_floats, pred_rows)) == Counter(map(_round_floats, gold_rows))
    if mode != "spider":
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if order_matters is None:
        order_matters = bool(gold_sql) and gold_has_order_by(gold_sql)
    pred, gold = list(pred_rows), list(gold_rows)
    if not pred and not gold:
        return True
    if len(pred) != len(gold) or len(pred[0]) != len(gold[0]):
        return False

    def same(candidate: list[tuple]) -> bool:
        return candidate == gold if order_matters else Counter(candidate) == Counter(gold)

    if same(pred):
        return True
    if not permute_columns or len(pred[0]) == 1:
        return False
    return _permuted_match(pred, gold, order_matters, deadline)
