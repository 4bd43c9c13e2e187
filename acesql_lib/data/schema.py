"""The database schema model, its two sources (tables.json, a live SQLite file) and its DDL text.

Column sets everywhere in the kit are `frozenset[str]` of `"table.column"` written with the
schema's ORIGINAL-case names (the canonical form); `Schema.resolve` and `Schema.canonical` map
other spellings onto it.

DDL format (§2; close to OmniSQL's). One `CREATE TABLE` per table, tables separated by a blank
line, schema order throughout:

    CREATE TABLE "order items" (
      id INTEGER, -- unique id of the item, example: [1, 2]
      name TEXT, -- example: ['apple', 'pear']
      order_id INTEGER,
      PRIMARY KEY (id),
      FOREIGN KEY (order_id) REFERENCES orders(id)
    );

- A column line is the name, the declared type (omitted when there is none), a comma unless it
  is the last item, then a `-- ` comment holding the description (only when it differs from the
  name ignoring case, spaces and punctuation) and `example: [...]` (strings in single quotes,
  `'` doubled). No comment when there is neither. The text is therefore valid SQLite DDL.
- Identifiers that are not plain `[A-Za-z_][A-Za-z0-9_]*`, or that are SQLite keywords, are
  double-quoted (`"` doubled inside).
- Pruning (§2): only the selected columns; a table with none vanishes; the PK line lists only
  selected PK columns (omitted if none); an FK line only when both ends are selected; PK/FK
  columns are NOT added; an empty selection gives "".

Two text styles (`data.schema_style`): "kit" is the format above; "authors" reproduces the text
of the authors' released prompts byte for byte (`authors_schema.table_ddl_authors`). Both put
question-relevant values (`relevant_values`, from `values_index`) before the sampled examples,
up to `max_values`.
"""
from __future__ import annotations

import csv
import io
import re
import sqlite3
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any, Iterable

from .authors_schema import examples_of, table_ddl_authors
from ..runtime.jsonfiles import DatasetError, db_id_problem, read_json_list  # one reader for every JSON input

# SQLite's keyword list (sqlite.org/lang_keywords.html); such names are quoted in the DDL.
SQLITE_KEYWORDS = frozenset("""
ABORT ACTION ADD AFTER ALL ALTER ALWAYS ANALYZE AND AS ASC ATTACH AUTOINCREMENT BEFORE BEGIN
BETWEEN BY CASCADE CASE CAST CHECK COLLATE COLUMN COMMIT CONFLICT CONSTRAINT CREATE CROSS CURRENT
CURRENT_DATE CURRENT_TIME CURRENT_TIMESTAMP DATABASE DEFAULT DEFERRABLE DEFERRED DELETE DESC
DETACH DISTINCT DO DROP EACH ELSE END ESCAPE EXCEPT EXCLUDE EXCLUSIVE EXISTS EXPLAIN FAIL FILTER
FIRST FOLLOWING FOR FOREIGN FROM FULL GENERATED GLOB GROUP GROUPS HAVING IF IGNORE IMMEDIATE IN
INDEX INDEXED INITIALLY INNER INSERT INSTEAD INTERSECT INTO IS ISNULL JOIN KEY LAST LEFT LIKE
LIMIT MATCH MATERIALIZED NATURAL NO NOT NOTHING NOTNULL NULL NULLS OF OFFSET ON OR ORDER OTHERS
OUTER OVER PARTITION PLAN PRAGMA PRECEDING PRIMARY QUERY RAISE RANGE RECURSIVE REFERENCES REGEXP
REINDEX RELEASE RENAME REPLACE RESTRICT RETURNING RIGHT ROLLBACK ROW ROWS SAVEPOINT SELECT SET
TABLE TEMP TEMPORARY THEN TIES TO TRANSACTION TRIGGER UNBOUNDED UNION UNIQUE UPDATE USING VACUUM
VALUES VIEW VIRTUAL WHEN WHERE WINDOW WITH WITHOUT""".split())
_PLAIN_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
SCHEMA_STYLES = ("kit", "authors")
_ITEM_QUOTES = "\"'`[] \t"
# UNKNOWN (BIRD CSV encodings are undocumented): utf-8 (BOM tolerated), then cp1252, then latin-1.
_CSV_ENCODINGS = ("utf-8-sig", "cp1252", "latin-1")


def quote_identifier(name: str) -> str:
    """`name` as it must be written in SQL: bare when plain and not a keyword, else double-quoted."""
    if _PLAIN_IDENTIFIER.fullmatch(name) and name.upper() not in SQLITE_KEYWORDS:
        return name
    return '"' + name.replace('"', '""') + '"'


def _alnum(text: str) -> str:
    return "".join(ch for ch in text.lower() if ch.isalnum())


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


@dataclass
class Column:
    name: str
    type: str
    description: str = ""
    examples: list = field(default_factory=list)
    source_type: str = ""  # the type as the source spelled it ("number", "INTEGER"); the authors' style prints it


@dataclass
class ForeignKey:
    column: str  # a column of the owning table
    ref_table: str
    ref_column: str


@dataclass
class Table:
    name: str
    columns: list[Column]
    primary_key: list[str] = field(default_factory=list)
    foreign_keys: list[ForeignKey] = field(default_factory=list)


@dataclass
class Schema:
    """One database. Treated as immutable once built (lookups are cached on first use)."""

    db_id: str
    tables: list[Table]
    text_style: str = "kit"  # default style of `to_ddl` (data.schema_style)
    max_values: int = 6  # values per column when relevant values join the examples (data.max_example_values)
    values_index: Any = field(default=None, repr=False, compare=False)  # values_index.ValuesIndex, or None

    # construction --------------------------------------------------------------------------
    @classmethod
    def from_tables_json(cls, entry: dict, source: str = "tables.json") -> "Schema":
        """A Spider/BIRD tables.json entry. `column_names` (the readable names) become descriptions.

        Tables named `sqlite_*` (Spider's world_1 lists `sqlite_sequence`) are skipped: SQLite
        reserves them and no question is about them.
        """
        db_id = entry.get("db_id", "?") if isinstance(entry, dict) else "?"
        where = f"{source}: db_id {db_id!r}"
        try:
            tnames = list(entry["table_names_original"])
            cols = list(entry["column_names_original"])
            readable = list(entry.get("column_names", cols))
            types = list(entry["column_types"])
            pks, fks = list(entry.get("primary_keys", [])), list(entry.get("foreign_keys", []))
        except (KeyError, TypeError) as e:
            raise ValueError(f"{where}: missing or malformed field {e}") from None
        if len(types) != len(cols) or len(readable) != len(cols):
            raise ValueError(f"{where}: column_types/column_names must have {len(cols)} items like column_names_original")
        tables = [Table(name=t, columns=[]) for t in tnames]
        located: dict[int, tuple[Table, str]] = {}  # column index -> (table, column name)
        for i, item in enumerate(cols):
            try:
                t_idx, name = int(item[0]), str(item[1])
            except (TypeError, ValueError, IndexError):
                raise ValueError(f"{where}: column_names_original[{i}] is not [table_index, name]: {item!r}") from None
            if t_idx == -1:  # the '*' pseudo-column
                continue
            if not 0 <= t_idx < len(tables):
                raise ValueError(f"{where}: column_names_original[{i}] points at table {t_idx}, have {len(tables)}")
            desc = str(readable[i][1]) if isinstance(readable[i], (list, tuple)) and len(readable[i]) > 1 else ""
            tables[t_idx].columns.append(Column(name, str(types[i]).upper(), desc, source_type=str(types[i])))
            located[i] = (tables[t_idx], name)

        def at(idx: Any, what: str) -> tuple[Table, str]:
            if not isinstance(idx, int) or idx not in located:
                raise ValueError(f"{where}: {what} refers to column index {idx!r}, which is not a table column")
            return located[idx]

        for pk in pks:  # BIRD nests composite keys: [1, 4, [19, 20]]
            group = pk if isinstance(pk, list) else [pk]
            for idx in group:
                table, name = at(idx, "primary_keys")
                table.primary_key.append(name)
        for pair in fks:
            if not isinstance(pair, (list, tuple)) or len(pair) != 2:
                raise ValueError(f"{where}: foreign_keys item is not a [column, ref_column] pair: {pair!r}")
            (table, name), (ref_table, ref_name) = at(pair[0], "foreign_keys"), at(pair[1], "foreign_keys")
            table.foreign_keys.append(ForeignKey(name, ref_table.name, ref_name))
        return cls(db_id=str(db_id), tables=[t for t in tables if not t.name.lower().startswith("sqlite_")])

    @classmethod
    def from_sqlite(cls, db_path: str | Path, description_dir: str | Path | None = None,
                    n_values: int = 2, max_chars: int = 40) -> "Schema":
        """Read a live SQLite file (read-only): tables, declared types, PK, FK, example values (§2).

        Example values: up to `n_values` distinct non-null, non-blob, non-empty values per column in
        the order SQLite returns them (deterministic for a given file); strings cut to `max_chars`.
        The authors' sampling skips '' too; it keeps blobs (printed as b'...'), the kit does not.
        `description_dir` is BIRD's `database_description/` (one `<table>.csv` per table).
        """
        path = Path(db_path)
        if not path.is_file():
            raise FileNotFoundError(f"SQLite database not found: {path}")
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        conn.text_factory = lambda b: b.decode("utf-8", errors="replace")  # bad bytes must not crash
        try:
            names = [r[0] for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'")]
            by_lower = {n.lower(): n for n in names}
            tables = []
            for name in names:
                q = quote_identifier(name)
                info = conn.execute(f"PRAGMA table_info({q})").fetchall()  # cid, name, type, notnull, dflt, pk
                columns = [Column(r[1], r[2] or "", source_type=r[2] or "") for r in info]
                pk = [r[1] for r in sorted((r for r in info if r[5]), key=lambda r: r[5])]
                fks = []
                for r in conn.execute(f"PRAGMA foreign_key_list({q})").fetchall():  # id, seq, table, from, to, ...
                    ref_table = by_lower.get(str(r[2]).lower(), str(r[2]))
                    ref_col = r[4]
                    if ref_col is None:  # "REFERENCES t" without a column means t's primary key
                        ref_pk = [x[1] for x in sorted((x for x in conn.execute(
                            f"PRAGMA table_info({quote_identifier(ref_table)})") if x[5]), key=lambda x: x[5])]
                        ref_col = ref_pk[r[1]] if r[1] < len(ref_pk) else "?"
                    fks.append(ForeignKey(r[3], ref_table, ref_col))
                for col in columns:
                    if n_values > 0:
                        c = quote_identifier(col.name)
                        rows = conn.execute(
                            f"SELECT DISTINCT {c} FROM {q} WHERE {c} IS NOT NULL AND {c} != '' AND typeof({c}) != 'blob' "
                            f"LIMIT {int(n_values)}").fetchall()
                        col.examples = [v[:max_chars] if isinstance(v, str) else v for (v,) in rows]
                tables.append(Table(name, columns, pk, fks))
        finally:
            conn.close()
        schema = cls(db_id=path.stem, tables=tables)
        if description_dir is not None:
            schema._read_descriptions(Path(description_dir))
        return schema

    def _read_descriptions(self, folder: Path) -> None:
        if not folder.is_dir():
            return
        files = {p.stem.lower(): p for p in folder.glob("*.csv")}
        for table in self.tables:
            csv_path = files.get(table.name.lower())
            if csv_path is None:
                continue
            by_name = {c.name.strip().lower(): c for c in table.columns}
            for row in _read_csv_rows(csv_path):
                col = by_name.get((row.get("original_column_name") or "").strip().lower())
                if col is None:
                    continue
                # UNKNOWN which CSV field the authors show: column_description, else column_name.
                desc = _one_line(row.get("column_description") or "") or _one_line(row.get("column_name") or "")
                if desc:
                    col.description = desc

    # lookups ---------------------------------------------------------------------------------
    @cached_property
    def _tables_by_lower(self) -> dict[str, Table]:
        return {t.name.lower(): t for t in self.tables}

    @cached_property
    def _columns_by_lower(self) -> dict[str, str]:
        return {c.lower(): c for c in self.columns()}

    @cached_property
    def _columns_by_alnum(self) -> dict[tuple[str, str], str | None]:
        index: dict[tuple[str, str], str | None] = {}
        for t in self.tables:
            for c in t.columns:
                key = (_alnum(t.name), _alnum(c.name))
                index[key] = None if key in index else f"{t.name}.{c.name}"  # None = ambiguous
        return index

    def columns(self) -> list[str]:
        """Every `table.column`, canonical case, schema order."""
        return [f"{t.name}.{c.name}" for t in self.tables for c in t.columns]

    def table(self, name: str) -> Table:
        """The table called `name`, case-insensitively; KeyError naming the database if absent."""
        try:
            return self._tables_by_lower[name.lower()]
        except KeyError:
            raise KeyError(f"database {self.db_id!r} has no table {name!r}") from None

    def canonical(self, table: str, column: str) -> str | None:
        """`table.column` in canonical case if the pair exists (case-insensitive), else None."""
        return self._columns_by_lower.get(f"{table}.{column}".lower())

    def resolve(self, item: str) -> str | None:
        """Match one retriever item to a canonical `table.column` (§2), or None to drop it.

        Quotes, backticks and brackets around each part are stripped. Case-insensitive exact
        match first, then ignoring non-alphanumeric characters (an ambiguous match is dropped).
        Bare table names, `t.*` and unknown items give None.
        """
        text = item.strip()
        splits = [i for i, ch in enumerate(text) if ch == "."]
        pairs = [(text[:i].strip(_ITEM_QUOTES), text[i + 1:].strip(_ITEM_QUOTES)) for i in splits]
        pairs = [(t, c) for t, c in pairs if t and c]
        for t, c in pairs:
            hit = self.canonical(t, c)
            if hit:
                return hit
        for t, c in pairs:
            hit = self._columns_by_alnum.get((_alnum(t), _alnum(c)))
            if hit and _alnum(c):
                return hit
        return None

    # DDL -------------------------------------------------------------------------------------
    def adopt_descriptions(self, other: "Schema") -> int:
        """Take each column's description and spelled type from `other` (same database read from its
        tables.json, the authors' source for both), matching `table.column` case-insensitively; the
        structure (tables, keys, order) stays this schema's. Returns the number of columns matched."""
        theirs = {f"{t.name}.{c.name}".lower(): c for t in other.tables for c in t.columns}
        n = 0
        for t in self.tables:
            for c in t.columns:
                hit = theirs.get(f"{t.name}.{c.name}".lower())
                if hit is not None:
                    c.description, c.source_type, n = hit.description, hit.source_type or c.source_type, n + 1
        return n

    def set_examples(self, values: dict[str, list], source: str = "values") -> None:
        """Replace every column's examples from `{"table.column" (any case): [values]}`; columns not
        in `values` get none. A key naming no column raises, naming `source`."""
        by_lower = {k.lower(): v for k, v in values.items()}
        unknown = sorted(set(by_lower) - {c.lower() for c in self.columns()})
        if unknown:
            raise ValueError(f"{source}: database {self.db_id!r} has no column {unknown[0]!r}")
        for t in self.tables:
            for c in t.columns:
                c.examples = list(by_lower.get(f"{t.name}.{c.name}".lower(), []))

    def text_for(self, question: str, selected: Iterable[str] | None = None) -> str:
        """The schema text a prompt about `question` shows: `to_ddl` with the question's relevant
        values from `values_index` (none when no index is attached)."""
        relevant = self.values_index.relevant_values(question) if self.values_index is not None else None
        return self.to_ddl(selected, relevant_values=relevant)

    def to_ddl(self, selected: Iterable[str] | None = None, relevant_values: dict[str, list] | None = None,
               style: str | None = None) -> str:
        """The schema text of §2; with `selected`, pruned to those `table.column` (see module doc).

        `relevant_values` (`{"table.column" lower-cased: [values]}`, e.g. from `values_index`) go
        before each column's sampled examples, `self.max_values` in all. `style` defaults to
        `self.text_style`.
        """
        style = style or self.text_style
        if style not in SCHEMA_STYLES:
            raise ValueError(f"unknown schema style {style!r} (known: {', '.join(SCHEMA_STYLES)})")
        if selected is None:
            keep = None
        else:
            keep, unknown = set(), []
            for item in selected:
                t, _, c = item.partition(".")
                hit = self.canonical(t, c) if c else None
                if hit:
                    keep.add(hit)
                else:
                    unknown.append(item)
            if unknown:
                raise ValueError(f"database {self.db_id!r}: not in the schema: {sorted(unknown)}")
            if not keep:
                return ""
            keep = {k.lower() for k in keep}
        relevant = {k.lower(): v for k, v in (relevant_values or {}).items()}
        render = table_ddl_authors if style == "authors" else _table_ddl
        blocks = [b for t in self.tables if (b := render(t, keep, relevant, self.max_values))]
        return "\n\n".join(blocks)


def _table_ddl(table: Table, keep: set[str] | None, relevant: dict[str, list] | None = None,
               limit: int = 6) -> str:
    """One CREATE TABLE; `keep` holds lower-cased `table.column` (None = everything)."""
    def kept(table_name: str, col: str) -> bool:
        return keep is None or f"{table_name}.{col}".lower() in keep

    cols = [c for c in table.columns if kept(table.name, c.name)]
    if not cols:
        return ""
    pk = [p for p in table.primary_key if kept(table.name, p)]
    fks = [fk for fk in table.foreign_keys if kept(table.name, fk.column) and kept(fk.ref_table, fk.ref_column)]
    items: list[tuple[str, str]] = []  # (sql text, trailing comment)
    for c in cols:
        head = f"{quote_identifier(c.name)} {c.type}".rstrip()
        notes = []
        if c.description and _alnum(c.description) != _alnum(c.name):
            notes.append(_one_line(c.description))
        examples = examples_of(table, c, relevant or {}, limit)
        if examples:
            notes.append("example: [" + ", ".join(_format_value(v) for v in examples) + "]")
        items.append((head, ", ".join(notes)))
    if pk:
        items.append(("PRIMARY KEY (" + ", ".join(quote_identifier(p) for p in pk) + ")", ""))
    for fk in fks:
        items.append((f"FOREIGN KEY ({quote_identifier(fk.column)}) REFERENCES "
                      f"{quote_identifier(fk.ref_table)}({quote_identifier(fk.ref_column)})", ""))
    lines = [f"CREATE TABLE {quote_identifier(table.name)} ("]
    for i, (text, note) in enumerate(items):
        sep = "," if i < len(items) - 1 else ""
        lines.append(f"  {text}{sep}" + (f" -- {note}" if note else ""))
    lines.append(");")
    return "\n".join(lines)


def _format_value(value: Any) -> str:
    if isinstance(value, str):
        return "'" + _one_line(value).replace("'", "''") + "'"
    if isinstance(value, bytes):
        return "'" + _one_line(value.decode("utf-8", errors="replace")).replace("'", "''") + "'"
    return str(value)


def _read_csv_rows(path: Path) -> list[dict[str, str]]:
    """Rows of a BIRD description CSV with lower-case, stripped header names."""
    raw = path.read_bytes()
    for encoding in _CSV_ENCODINGS:
        try:
            text = raw.decode(encoding)
            break
        except UnicodeDecodeError:
            continue
    reader = csv.DictReader(io.StringIO(text))
    return [{(k or "").strip().lower(): (v or "") for k, v in row.items() if isinstance(v, str) or v is None}
            for row in reader]


# Where a database's tables.json sits: SynSQL `<dir>/databases/<db>/<db>.sqlite` + `<dir>/tables.json`,
# Spider `database/` + `tables.json`, BIRD `dev_databases/` + `dev_tables.json` (tiny world alike).
_TABLES_JSON_NAMES = ("tables.json", "dev_tables.json", "train_tables.json")


def find_tables_json(db_path: str | Path) -> Path | None:
    """The tables.json describing `db_path` in the SynSQL, Spider or BIRD layout, or None."""
    root = Path(db_path).resolve().parent.parent.parent
    return next((root / n for n in _TABLES_JSON_NAMES if (root / n).is_file()), None)


@lru_cache(maxsize=4)
def _cached_tables_json(path: str, mtime_ns: int) -> dict[str, "Schema"]:
    return load_tables_json(path)


def tables_json_schemas(path: str | Path) -> dict[str, "Schema"]:
    """`load_tables_json`, read once per file version (SynSQL's file is large and shared by all DBs)."""
    path = Path(path)
    return _cached_tables_json(str(path), path.stat().st_mtime_ns)


def load_tables_json(path: str | Path) -> dict[str, Schema]:
    """Every entry of a Spider/BIRD tables.json file, keyed by db_id."""
    path = Path(path)
    entries = read_json_list(path, "tables.json")
    schemas: dict[str, Schema] = {}
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or "db_id" not in entry:
            raise ValueError(f"{path}: entry {i} has no db_id")
        problem = db_id_problem(entry["db_id"])  # a list or a path is not a database name
        if problem:
            raise DatasetError(f"{path}: entry {i}: {problem}")
        schema = Schema.from_tables_json(entry, source=str(path))
        if schema.db_id in schemas:
            raise ValueError(f"{path}: db_id {schema.db_id!r} appears twice")
        schemas[schema.db_id] = schema
    return schemas
