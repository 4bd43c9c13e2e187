"""The column set of a SQL query: every `table.column` it references, in any scope (§4 step 5).

The pool (§4 step 5) keys on these sets, and the retriever is rewarded for naming exactly one of
them, so two SQLs that read the same columns must give the same set. The query is parsed and
qualified with sqlglot (dialect "sqlite") against the Schema, then every scope (CTEs, derived
tables, subqueries, set-operation branches) is walked; a column counts wherever it appears
(select list, function arguments, JOIN ... ON, WHERE, GROUP BY, HAVING, ORDER BY). Names come
back in the schema's canonical (original) case.

Rules the rest of the kit relies on:

- **SQLite double-quoted strings (DQS).** A double-quoted identifier that names no column the
  query could see is a string literal, as SQLite reads it (`WHERE name = "JetBlue Airways"`;
  213 of Spider dev's gold queries do this). Backtick- and bracket-quoted names are always
  identifiers.
- **Bare tables (KIT RULE).** A table that appears in a FROM/JOIN but has no referenced column
  (`SELECT count(*) FROM singer`) contributes its primary-key columns (all of a composite key),
  or its first column when it has no key, so the pruned schema still shows the table.
  `cover_bare_tables` applies the rule to any column set; `anchor_columns` names the columns.
  `bare_tables="none"` is the authors' extractor (RL/utils/Schema_From_SQL.py): such a table
  contributes nothing, so `SELECT count(*) FROM singer` has the empty set (which the pool never
  adds); the paper profile uses it for pool additions (`grpo.bare_table_columns`).
- **Stars.** `SELECT *` and `t.*` expand to every column of the tables they cover (what SQLite
  reads); `count(*)` reads no column.
- **Output aliases** used in ORDER BY / HAVING / GROUP BY are not table columns.

A query that cannot be resolved (parse error, several statements, unknown table, unknown or
ambiguous column, nesting too deep for the parser, any other failure of the parser on odd text)
raises `ColumnResolutionError` with the reason, and nothing else: model output reaches this on
every scored SQL, so no text can raise out of a rollout or an evaluation. An empty set is never
returned silently.
"""
from __future__ import annotations

import re
from collections import OrderedDict
from typing import Iterable

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.optimizer.qualify import qualify
from sqlglot.optimizer.scope import Scope, traverse_scope
from sqlglot.schema import MappingSchema

from .schema import Schema

DIALECT = "sqlite"
_MAX_SCHEMAS = 256  # schemas whose sqlglot mapping is kept
_MAX_RESULTS_PER_SCHEMA = 20_000  # cached (sql -> set or error) per schema; RL revisits the same SQLs


class ColumnResolutionError(ValueError):
    """A SQL whose column set cannot be determined; the message says why."""


# rule helpers ------------------------------------------------------------------------------
def anchor_columns(schema: Schema, table: str) -> frozenset[str]:
    """The columns that stand for `table` when a query reads none of its columns (KIT RULE)."""
    t = schema.table(table)
    if t.primary_key:
        names = t.primary_key
    else:
        names = [t.columns[0].name] if t.columns else []
    return frozenset(schema.canonical(t.name, n) or f"{t.name}.{n}" for n in names)


def cover_bare_tables(columns: Iterable[str], tables: Iterable[str], schema: Schema) -> frozenset[str]:
    """`columns` plus the anchor columns of each table in `tables` that has none of its columns there."""
    result = set(columns)
    covered = {c.partition(".")[0].lower() for c in result}
    for table in tables:
        if table.lower() not in covered:
            result |= anchor_columns(schema, table)
            covered.add(table.lower())
    return frozenset(result)


# cache -------------------------------------------------------------------------------------
class _SchemaEntry:
    """What one Schema needs for resolution, built once: the sqlglot mapping and a result cache."""

    def __init__(self, schema: Schema) -> None:
        self.schema = schema  # held so that id(schema) cannot be reused while cached
        # Types do not matter for resolution; one valid type avoids parsing odd declared types.
        self.mapping = MappingSchema({t.name: {c.name: "TEXT" for c in t.columns} for t in schema.tables},
                                     dialect=DIALECT)
        self.table_names = {t.name.lower() for t in schema.tables}
        self.columns_by_table = {t.name.lower(): {c.name.lower() for c in t.columns} for t in schema.tables}
        self.results: dict[str, tuple[frozenset[str], tuple[str, ...]] | str] = {}  # sql -> (columns, tables) or error


_ENTRIES: OrderedDict[int, _SchemaEntry] = OrderedDict()


def _entry(schema: Schema) -> _SchemaEntry:
    entry = _ENTRIES.get(id(schema))
    if entry is None or entry.schema is not schema:
        entry = _SchemaEntry(schema)
        _ENTRIES[id(schema)] = entry
        if len(_ENTRIES) > _MAX_SCHEMAS:
            _ENTRIES.popitem(last=False)
    else:
        _ENTRIES.move_to_end(id(schema))
    return entry


# resolution --------------------------------------------------------------------------------
BARE_TABLE_RULES = ("anchor", "none")


def column_set(sql: str, schema: Schema, cache: bool = True, bare_tables: str = "anchor") -> frozenset[str]:
    """Every canonical `table.column` that `sql` references (module doc); raises ColumnResolutionError.

    `bare_tables`: "anchor" (kit rule: a table read through no column stands as its key) or
    "none" (authors' extractor: it adds nothing). Results (and errors) are cached per Schema
    object and SQL text; `cache=False` recomputes.
    """
    if bare_tables not in BARE_TABLE_RULES:
        raise ValueError(f"bare_tables must be one of {BARE_TABLE_RULES}, got {bare_tables!r}")
    entry = _entry(schema)
    cached = entry.results.get(sql) if cache else None
    if cached is None:
        try:
            cached = _resolve(sql, entry)
        except ColumnResolutionError as e:
            cached = str(e)
        except RecursionError:  # sqlglot recurses once per nesting level: 50 parentheses reach Python's limit
            cached = "too deeply nested for the SQL parser (nested parentheses, calls or casts)"
        except Exception as e:  # noqa: BLE001 - model output: sqlglot failing in any way is a verdict, not a crash
            cached = f"the SQL parser failed: {type(e).__name__}: {_first_line(e)[:200]}"
        if len(entry.results) >= _MAX_RESULTS_PER_SCHEMA:
            entry.results.clear()
        entry.results[sql] = cached
    if isinstance(cached, str):
        raise ColumnResolutionError(cached)
    columns, tables = cached
    return cover_bare_tables(columns, tables, schema) if bare_tables == "anchor" else columns


def _resolve(sql: str, entry: _SchemaEntry) -> tuple[frozenset[str], tuple[str, ...]]:
    """(referenced columns, tables read), before any bare-table rule."""
    schema = entry.schema
    try:
        statements = [s for s in sqlglot.parse(sql, read=DIALECT) if s is not None]
    except SqlglotError as e:
        raise ColumnResolutionError(f"parse error: {_first_line(e)}") from None
    if len(statements) != 1:
        raise ColumnResolutionError(f"expected one SQL statement, found {len(statements)}")
    tree = statements[0]
    if not isinstance(tree, exp.Query):
        raise ColumnResolutionError(f"not a query: {tree.key.upper()} statement")

    cte_names = {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}
    base_tables = set()
    for table in tree.find_all(exp.Table):
        name = table.name.lower()
        if not name:
            raise ColumnResolutionError(f"unsupported FROM item: {table.sql(DIALECT)[:80]}")
        if name in cte_names:
            continue
        if name not in entry.columns_by_table:
            raise ColumnResolutionError(f"unknown table {table.name!r} in database {schema.db_id!r}")
        base_tables.add(name)
    _double_quoted_strings_to_literals(tree, sql, entry, base_tables)

    try:
        tree = qualify(tree, schema=entry.mapping, dialect=DIALECT, quote_identifiers=False, identify=False)
        scopes = traverse_scope(tree)
    except SqlglotError as e:
        raise ColumnResolutionError(_qualify_reason(e, entry, base_tables)) from None

    columns: set[str] = set()
    tables: list[str] = []
    for scope in scopes:
        for source in scope.sources.values():  # CTE references are Scopes; an exp.Table is a real table
            if isinstance(source, exp.Table):
                if source.name.lower() not in entry.columns_by_table:  # e.g. a recursive CTE's self-reference
                    raise ColumnResolutionError(f"unsupported table reference {source.name!r}")
                tables.append(schema.table(source.name).name)
        for col in scope.columns:
            if not col.table:
                if _is_output_alias(col, scope):
                    continue
                raise ColumnResolutionError(f"column {col.name!r} could not be resolved (unknown or ambiguous)")
            source = _find_source(scope, col.table)
            if isinstance(source, Scope):
                continue  # a derived table / CTE output: its own scope reports the base columns
            if not isinstance(source, exp.Table):
                raise ColumnResolutionError(f"column {col.sql(DIALECT)!r} refers to unknown source {col.table!r}")
            name = schema.canonical(source.name, col.name)
            if name is None:
                raise ColumnResolutionError(f"unknown column {col.name!r} in table {source.name!r}")
            columns.add(name)
    if not columns and not tables:
        raise ColumnResolutionError("query reads no table")
    return frozenset(columns), tuple(tables)


def _double_quoted_strings_to_literals(tree: exp.Expr, sql: str, entry: _SchemaEntry, tables: set[str]) -> None:
    """SQLite's DQS fallback: `"x"` naming no column the query can see is the string 'x'.

    "Can see" is approximated by: a column of a table the query reads anywhere, or an alias
    defined anywhere in the query; SQLite's own rule is per scope, which differs only when a
    name is a column of a table that another scope of the same query reads.
    """
    visible = set().union(*(entry.columns_by_table[t] for t in tables))
    visible |= {a.alias.lower() for a in tree.find_all(exp.Alias) if a.alias}
    for table_alias in tree.find_all(exp.TableAlias):
        visible |= {c.name.lower() for c in table_alias.columns}
    for col in list(tree.find_all(exp.Column)):
        ident = col.this
        if col.table or not isinstance(ident, exp.Identifier) or not ident.quoted:
            continue
        start = (ident.meta or {}).get("start")
        if start is None or start >= len(sql) or sql[start] != '"':
            continue
        if ident.name.lower() not in visible:
            col.replace(exp.Literal.string(ident.name))


def _find_source(scope: Scope, name: str) -> exp.Table | Scope | None:
    """The source called `name` in this scope or, for correlated references, an enclosing one."""
    current: Scope | None = scope
    while current is not None:
        if name in current.sources:
            return current.sources[name]
        current = current.parent
    return None


def _is_output_alias(col: exp.Column, scope: Scope) -> bool:
    outputs = {s.alias_or_name.lower() for s in getattr(scope.expression, "selects", [])}
    if isinstance(scope.expression, exp.SetOperation):
        outputs |= {s.alias_or_name.lower() for s in scope.expression.left.selects}
    return col.name.lower() in outputs


def _qualify_reason(error: Exception, entry: _SchemaEntry, tables: set[str]) -> str:
    """sqlglot's message, with 'ambiguous' named when the column exists in several query tables."""
    reason = _first_line(error)
    match = re.search(r"Column '([^']+)' could not be resolved\.", reason)
    if match:
        owners = sorted(t for t in tables if match.group(1).lower() in entry.columns_by_table[t])
        kind = f"ambiguous column (in {', '.join(owners)})" if len(owners) > 1 else "unknown column"
        return f"{kind} {match.group(1)!r}: {reason}"
    return f"cannot qualify: {reason}"


def _first_line(error: Exception) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
