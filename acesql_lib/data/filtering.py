"""Source filtering of a SynSQL-format pool (§3.1) into the questions that self-distillation reads.

The paper filters SynSQL-2.5M "by complexity and schema diversity" and gives no thresholds, so
every threshold is a `FilteringConfig` field (UNKNOWN in the paper; the kit's choices live there).
The rules run in this order, cheap ones first so that only survivors are executed:

1. known database: the example's `db_id` has a Schema (else nothing below can be checked);
2. schema size: databases with fewer than `min_tables` tables or `min_columns` columns go
   (schema diversity: tiny schemas teach no schema linking);
3. duplicate questions: case, whitespace and punctuation ignored;
4. duplicate SQL: sqlglot-normalised (parse, identifiers lower-cased and unquoted, canonical
   spacing, `AS` and keyword case; string literals keep their case), or lower-cased with
   whitespace collapsed when sqlglot cannot parse it;
5. gold SQL check (`require_execution`): it parses, resolves to a column set (`column_set`) and
   executes without error, timeout or size cap; with `drop_empty_results` an empty result goes too
   (UNKNOWN; kit choice: an empty gold is matched by any query that returns nothing, a weak signal);
6. per-database cap: at most `per_db_cap` questions per database, sampled under the seed;
7. complexity mix: sampled down to `target_size` with the `complexity_mix` shares.

KIT CHOICES (UNKNOWN in the paper): duplicates are keyed per database (the same question on two
databases is two tasks) and the first occurrence in pool order is kept. In the mix, a level
holding fewer questions than its quota gives all it has and the shortfall is shared among the
other levels in proportion to their shares, so the pool reaches `target_size` whenever it can;
levels absent from the mix (or with share 0) are dropped. Kept examples stay in pool order.
Drop reasons of the gold check are `sql_unparseable`, `sql_unresolved`, `sql_<executor status>`
(error, timeout, too_large, blocked), `sql_empty_result` and `sql_check_failed` (the emptiness probe
itself failed, e.g. a worker died).
"""
from __future__ import annotations

import json
import random
import re
import string
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import pandas as pd
import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.optimizer.normalize_identifiers import normalize_identifiers

from ..config.data import FilteringConfig
from ..executor import VALID_STATUSES, score_batch
from .schema import Schema
from .sqlcolumns import ColumnResolutionError, column_set

DIALECT = "sqlite"
# A query with no rows: scored as the "prediction" against each gold, it matches exactly when the
# gold's result is empty, so one batched gold execution also says whether the result is empty.
_EMPTY_PROBE = "SELECT 1 WHERE 0"
SQL_COMPLEXITY_LEVELS = ("Simple", "Moderate", "Complex", "Highly Complex")  # SynSQL sql_complexity (§3.1)
_PUNCTUATION = re.compile(f"[{re.escape(string.punctuation)}]")


@dataclass(frozen=True)
class Annotation:
    """What filtering learnt about one kept example's gold SQL."""

    columns: frozenset[str]  # canonical `table.column` of the gold SQL
    n_tables: int  # distinct tables among those columns


@dataclass
class FilterResult:
    kept: list  # list[Example], pool order
    funnel: list[tuple[str, int]]  # (stage, examples left after it), in rule order, starting with "input"
    dropped: dict[str, int]  # reason -> count
    annotations: dict[str, Annotation] = field(default_factory=dict)  # example id -> annotation (kept, resolvable)

    def funnel_frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.funnel, columns=["stage", "remaining"])


# normalisation ------------------------------------------------------------------------------
def normalize_question(text: str) -> str:
    """Lower case, punctuation removed, whitespace collapsed: the key for duplicate questions."""
    return " ".join(_PUNCTUATION.sub(" ", str(text).lower()).split())


def _parse_one(sql: str) -> exp.Expr | None:
    """The single statement `sql` holds, or None when sqlglot cannot parse it as one statement."""
    try:
        statements = [s for s in sqlglot.parse(sql, read=DIALECT) if s is not None]
    except (SqlglotError, ValueError, RecursionError):
        return None
    return statements[0] if len(statements) == 1 else None


def normalize_sql(sql: str) -> str:
    """A canonical text for duplicate detection; falls back to lower case + collapsed whitespace."""
    return _normal_form(sql)[0]


def _normal_form(sql: str) -> tuple[str, bool]:
    """`normalize_sql`'s text, and whether `sql` parses as one statement (`_parse_one`)."""
    tree = _parse_one(sql)
    if tree is not None:
        try:
            tree = normalize_identifiers(tree, dialect=DIALECT)
            for ident in tree.find_all(exp.Identifier):  # `name`, "name", [name] and name are one column
                ident.set("quoted", False)
            return tree.sql(dialect=DIALECT, normalize=True), True
        except (SqlglotError, ValueError, RecursionError):
            pass
    return " ".join(str(sql).strip().rstrip(";").lower().split()), tree is not None


# the filter ---------------------------------------------------------------------------------
def _complexity_quotas(available: Counter, mix: dict[str, float], target: int) -> dict[str, int]:
    """Questions to take per level: shares of `target`, a short level's shortfall redistributed."""
    levels = {lvl: share for lvl, share in mix.items() if share > 0 and available.get(lvl, 0) > 0}
    quotas: dict[str, int] = {}
    remaining = min(target, sum(available[lvl] for lvl in levels))
    while levels and remaining > 0:
        total = sum(levels.values())
        ideal = {lvl: remaining * share / total for lvl, share in levels.items()}
        short = [lvl for lvl in levels if available[lvl] - quotas.get(lvl, 0) <= ideal[lvl]]
        if short:  # these levels give everything they have; the rest is shared again
            for lvl in short:
                take = available[lvl] - quotas.get(lvl, 0)
                quotas[lvl] = quotas.get(lvl, 0) + take
                remaining -= take
                del levels[lvl]
            continue
        # Largest remainder rounding, ties broken by mix order: quotas sum exactly to `remaining`.
        floors = {lvl: int(v) for lvl, v in ideal.items()}
        order = sorted(levels, key=lambda lvl: -(ideal[lvl] - floors[lvl]))
        for i, lvl in enumerate(order):
            quotas[lvl] = quotas.get(lvl, 0) + floors[lvl] + (1 if i < remaining - sum(floors.values()) else 0)
        remaining = 0
    return quotas


def _sample_keep(items: list, k: int, rng: random.Random) -> list:
    """`k` of `items` chosen under `rng`, returned in their original order."""
    if len(items) <= k:
        return list(items)
    chosen = set(rng.sample(range(len(items)), k))
    return [x for i, x in enumerate(items) if i in chosen]


class _Funnel:
    """The pool as the rules leave it: the examples left, the funnel (stage, examples left after it) and the
    drop reasons counted so far."""

    def __init__(self, examples: Sequence) -> None:
        self.dropped: Counter = Counter()
        self.funnel: list[tuple[str, int]] = [("input", len(examples))]
        self.pool = list(examples)

    def stage(self, name: str, keep: list, reasons: Iterable[str] = ()) -> None:
        self.dropped.update(reasons)
        self.pool = keep
        self.funnel.append((name, len(self.pool)))


def filter_pool(examples: Sequence, cfg: FilteringConfig, schemas: dict[str, Schema], seed: int = 0,
                workers: int = 0, progress: bool = False) -> FilterResult:
    """Apply the rules of the module doc in order; deterministic for a given pool, config and seed."""
    f = _Funnel(examples)
    f.stage("known_database", [e for e in f.pool if e.db_id in schemas],
            ["unknown_database"] * sum(e.db_id not in schemas for e in f.pool))
    small = {db for db, s in schemas.items() if len(s.tables) < cfg.min_tables or len(s.columns()) < cfg.min_columns}
    f.stage("schema_size", [e for e in f.pool if e.db_id not in small],
            ["schema_too_small"] * sum(e.db_id in small for e in f.pool))
    if cfg.dedup_questions:
        f.stage("dedup_questions", *_first_of_each(f.pool, lambda e: (e.db_id, normalize_question(e.question)),
                                                   "duplicate_question"))
    parses: dict[str, bool] = {}  # sqlglot parses a query once here, not again for the gold check below
    if cfg.dedup_sql:
        def sql_key(e) -> tuple[str, str]:
            text, parses[e.sql] = _normal_form(e.sql)
            return e.db_id, text

        f.stage("dedup_sql", *_first_of_each(f.pool, sql_key, "duplicate_sql"))
    annotations: dict[str, Annotation] = {}
    if cfg.require_execution:
        f.stage("gold_resolves", *_gold_resolves(f.pool, schemas, parses, annotations))
        f.stage("gold_executes", *_gold_executes(f.pool, cfg, workers, progress))
    rng = random.Random(seed)  # one stream, consumed in a fixed order: databases sorted, then levels
    f.stage("per_db_cap", *_per_db_cap(f.pool, cfg.per_db_cap, rng))
    f.stage("complexity_mix", *_complexity_mix(f.pool, cfg, rng))
    _annotate(f.pool, schemas, annotations)
    return FilterResult(kept=f.pool, funnel=f.funnel, dropped=dict(f.dropped),
                        annotations={e.id: annotations[e.id] for e in f.pool if e.id in annotations})


def _first_of_each(pool: list, key: Callable[[Any], Any], reason: str) -> tuple[list, list[str]]:
    """The first example of each `key` in pool order; each later one is dropped for `reason`."""
    seen, keep, reasons = set(), [], []
    for e in pool:
        k = key(e)
        if k in seen:
            reasons.append(reason)
        else:
            seen.add(k)
            keep.append(e)
    return keep, reasons


def _gold_resolves(pool: list, schemas: dict[str, Schema], parses: dict[str, bool],
                   annotations: dict[str, Annotation]) -> tuple[list, list[str]]:
    """The examples whose gold SQL parses and resolves to a column set (annotated in `annotations`)."""
    keep, reasons = [], []
    for e in pool:
        if not (parses[e.sql] if e.sql in parses else _parse_one(e.sql) is not None):
            reasons.append("sql_unparseable")
            continue
        try:
            cols = column_set(e.sql, schemas[e.db_id])
        except ColumnResolutionError:
            reasons.append("sql_unresolved")
            continue
        annotations[e.id] = Annotation(cols, len({c.partition(".")[0] for c in cols}))
        keep.append(e)
    return keep, reasons


def _gold_executes(pool: list, cfg: FilteringConfig, workers: int, progress: bool) -> tuple[list, list[str]]:
    """The examples whose gold SQL executes (one executor batch, the empty probe scored against each gold);
    with `drop_empty_results`, those whose result has rows."""
    scores = score_batch([(_EMPTY_PROBE, e.sql, e.db_path) for e in pool], mode="multiset",
                         timeout_s=cfg.exec_timeout_s, workers=workers, progress=progress)
    keep, reasons = [], []
    for e, s in zip(pool, scores):
        if s.gold_status != "ok":
            reasons.append(f"sql_{s.gold_status}")  # sql_error, sql_timeout, sql_too_large, sql_blocked
        elif s.pred_status not in VALID_STATUSES:  # the probe itself failed (a worker died): emptiness unknown
            reasons.append("sql_check_failed")
        elif cfg.drop_empty_results and s.correct:
            reasons.append("sql_empty_result")
        else:
            keep.append(e)
    return keep, reasons


def _per_db_cap(pool: list, cap: int, rng: random.Random) -> tuple[list, list[str]]:
    """At most `cap` examples per database, sampled under `rng` database by database in sorted order. Sampling
    works on positions in the pool, so the kept examples stay in pool order (as in `_complexity_mix`)."""
    by_db: dict[str, list[int]] = defaultdict(list)
    for i, e in enumerate(pool):
        by_db[e.db_id].append(i)
    capped = {i for db in sorted(by_db) for i in _sample_keep(by_db[db], cap, rng)}
    return [e for i, e in enumerate(pool) if i in capped], ["per_db_cap"] * (len(pool) - len(capped))


def _complexity_mix(pool: list, cfg: FilteringConfig, rng: random.Random) -> tuple[list, list[str]]:
    """`target_size` examples in the `complexity_mix` shares (`_complexity_quotas`), sampled under `rng` level by
    level in sorted order; levels outside the mix are dropped."""
    by_level: dict[str, list[int]] = defaultdict(list)
    for i, e in enumerate(pool):
        by_level[e.difficulty].append(i)
    quotas = _complexity_quotas(Counter({k: len(v) for k, v in by_level.items()}), cfg.complexity_mix, cfg.target_size)
    chosen = {i for lvl in sorted(quotas) for i in _sample_keep(by_level[lvl], quotas[lvl], rng)}
    reasons = ["complexity_mix" if e.difficulty in quotas else "complexity_not_in_mix"
               for i, e in enumerate(pool) if i not in chosen]
    return [e for i, e in enumerate(pool) if i in chosen], reasons


def _annotate(pool: list, schemas: dict[str, Schema], annotations: dict[str, Annotation]) -> None:
    """Without the gold check, annotate what resolves (unresolvable SQL has none)."""
    for e in pool:
        if e.id not in annotations:
            try:
                cols = column_set(e.sql, schemas[e.db_id])
                annotations[e.id] = Annotation(cols, len({c.partition(".")[0] for c in cols}))
            except ColumnResolutionError:
                pass


# distributions ------------------------------------------------------------------------------
def distributions(examples: Iterable, schemas: dict[str, Schema],
                  annotations: dict[str, Annotation] | None = None) -> pd.DataFrame:
    """One row per example: complexity, question style, schema size, columns/tables the gold SQL reads.

    The before/after comparison of §3.1 ("reports the resulting distribution"). `sql_columns` and
    `sql_tables` are NaN where the gold SQL cannot be resolved; schema sizes are NaN for unknown
    databases. `annotations` (from `filter_pool`) saves resolving kept SQLs again.
    """
    rows = []
    for e in examples:
        schema = schemas.get(e.db_id)
        cols = annotations.get(e.id).columns if annotations and e.id in annotations else None
        if cols is None and schema is not None:
            try:
                cols = column_set(e.sql, schema)
            except ColumnResolutionError:
                cols = None
        rows.append({"id": e.id, "db_id": e.db_id, "complexity": e.difficulty, "question_style": e.question_style,
                     "schema_tables": len(schema.tables) if schema else float("nan"),
                     "schema_columns": len(schema.columns()) if schema else float("nan"),
                     "sql_columns": len(cols) if cols is not None else float("nan"),
                     "sql_tables": len({c.partition(".")[0] for c in cols}) if cols is not None else float("nan")})
    return pd.DataFrame(rows, columns=["id", "db_id", "complexity", "question_style", "schema_tables",
                                       "schema_columns", "sql_columns", "sql_tables"])


# persistence --------------------------------------------------------------------------------
def to_synsql_record(example) -> dict:
    """One SynSQL data.json record (the fields of §3.1) plus the kit's stable `id`."""
    return {"id": example.id, "db_id": example.db_id, "sql_complexity": example.difficulty,
            "question_style": example.question_style, "question": example.question,
            "external_knowledge": example.evidence or "", "cot": getattr(example, "cot", "") or "",
            "sql": example.sql}


def save_pool(path: str | Path, examples: Iterable) -> Path:
    """Write `examples` as a SynSQL-format JSON list, so later stages load it like data.json."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps([to_synsql_record(e) for e in examples], ensure_ascii=False, indent=1))
    return path


def load_pool(path: str | Path, db_root: str | Path) -> list:
    """Read a pool written by `save_pool` (databases under `db_root/<db_id>/<db_id>.sqlite`)."""
    from .datasets import load_synsql  # late: datasets is only needed when a pool is read back

    return list(load_synsql(path, db_root))
