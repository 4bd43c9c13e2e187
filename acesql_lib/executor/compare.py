"""Result comparison in the modes the kit scores with: BIRD's official EX (sets), the paper's
training match (§4 step 4, multisets with floats rounded to 6 places) and Spider's test-suite
evaluator (bags, ordered when the gold has a top-level ORDER BY, optional column permutations)."""
from __future__ import annotations

import functools
from collections import Counter
from itertools import permutations
from typing import Iterator, Sequence

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


def _column_permutations(pred: list[tuple], gold: list[tuple], limit: int = 1000) -> Iterator[tuple[int, ...]]:
    """Orders of pred columns whose value multisets equal gold's column by column (bounded).

    test-suite-sql-eval samples rows to prune permutations; comparing whole columns as multisets is
    an exact necessary condition and deterministic.
    """
    width = len(gold[0])
    gold_cols = [Counter(r[i] for r in gold) for i in range(width)]
    pred_cols = [Counter(r[j] for r in pred) for j in range(width)]
    allowed = [[j for j in range(width) if pred_cols[j] == gold_cols[i]] for i in range(width)]
    if width <= 6:
        yield from (p for p in permutations(range(width)) if all(p[i] in allowed[i] for i in range(width)))
        return
    found = 0

    def extend(prefix: list[int]) -> Iterator[tuple[int, ...]]:
        nonlocal found
        if found >= limit:
            return
        if len(prefix) == width:
            found += 1
            yield tuple(prefix)
            return
        for j in allowed[len(prefix)]:
            if j not in prefix:
                yield from extend(prefix + [j])

    yield from extend([])


def rows_match(pred_rows: Sequence[tuple], gold_rows: Sequence[tuple], mode: str = "multiset",
               gold_sql: str | None = None, permute_columns: bool = False, order_matters: bool | None = None) -> bool:
    """Whether a prediction's rows count as the gold's.

    - "set": official BIRD EX (evaluation.py): `set(pred) == set(gold)`; column order counts,
      duplicates and row order do not, values compared raw (1 == 1.0, '1' != 1).
    - "multiset": the paper's training match (§4 step 4): equal bags of rows, floats rounded to 6 places.
    - "spider": test-suite-sql-eval `result_eq`: equal bags of raw rows; row order compared only when
      the gold SQL has a top-level ORDER BY (or `order_matters` says so); with `permute_columns`,
      any order of pred columns that makes the results equal counts (test-suite always permutes).
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
    if not permute_columns:
        return False
    return any(same([tuple(r[j] for j in perm) for r in pred]) for perm in _column_permutations(pred, gold))
