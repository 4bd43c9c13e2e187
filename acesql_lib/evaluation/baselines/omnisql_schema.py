"""The schema text OmniSQL's evaluation prompts show (its `db_details`), rebuilt from the database.

OmniSQL, Arctic-Text2SQL-R1 and SQL-R1 all print a database the same way (RUCKBReasoning/OmniSQL
`train_and_evaluate/process_dataset.py`, `obtain_db_details` and `sample_table_values` in evaluation
mode; snowflakedb/ArcticTraining `projects/arctic_text2sql_r1/data_preprocessing/process_dataset.py` and
IDEA-FinAI/SQL-R1 `src/utils/prepare_input_seq.py` keep the same rules). The facts this module follows:

- The source is the set's tables.json entry (`table_names_original`, `column_names_original`,
  `column_names` as the comment, `column_types` as spelled, `primary_keys`, `foreign_keys`), in its
  order; a set without one is described from the SQLite file (`db_info_from_schema`).
- One `CREATE TABLE name (` per table that keeps a column, tables joined by a blank line, `);` last.
- A column line: four spaces, the name, a space, the type, a comma; then ` -- comment` when the comment
  differs from the name (compared lower-cased, also with the comment's spaces as `_` or removed) and is
  not blank; then the values as Python prints a list (`example: ['a', 'b']`), after `, ` when a comment
  precedes, else after ` -- `. The values are the question's relevant values first, then the sampled
  ones, duplicates dropped in order, at most six.
- Sampled values: the first `limit` distinct values of the column that are neither NULL nor '' (SQLite's
  order), strings cut to 40 characters; blobs are kept (they print as b'...').
- `PRIMARY KEY (a, b),` lists the table's key columns in column order; one
  `CONSTRAINT fk_<table>_<column> FOREIGN KEY (c) REFERENCES t (r),` per foreign key, grouped by source
  column in column order (table and column lower-cased with spaces as `_` in the constraint name);
  duplicates dropped. The table's last line loses its trailing comma.
- Identifiers go in backticks when they are one of OmniSQL's reserved words (upper-cased) or hold a
  character outside `[A-Za-z0-9_]`.
"""
from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from typing import Any, Mapping, Sequence

from ...runtime.jsonfiles import DatasetError, read_json_list

MAX_VALUES = 6  # values shown per column
VALUE_CHARS = 40  # sampled strings are cut to this length
SAMPLED_VALUES = 2  # `--value_limit_num 2` in every release's evaluation data preparation

RESERVED_WORDS = frozenset("""
IDENTIFIED FOREIGN CONSTRAINT USER POSITION DESCRIBE CHECK RECURSIVE REAL CONTINUE GLOBAL RLIKE INSENSITIVE
BOOLEAN CHAR ROLE CASE SCHEMA CLOB RESIGNAL ROW DEC TOP EXCEPT SENSITIVE OUT RENAME READS BLOB INT EXTERNAL
LOCALTIMESTAMP DECLARE DO AS OVER CONDITION SELECT SAVEPOINT WITHIN ELSEIF UNLOCK DATABASE TRIGGER ACCESS FALSE
BREAK ITERATE SMALLINT ASC YEAR DELETE ROLLBACK ON ESCAPE CREATE MONTH SPECIFIC SESSION SQLSTATE HOLD SET EXPLAIN
RETURN ROWNUM BINARY SYSDATE SQLWARNING EXTEND CAST FOR TERMINATED VIEW TRAILING HOUR VARYING RESTRICT RIGHT
DISTINCT JOIN UNKNOWN VALUES TABLE OR DOUBLE DROP COMMIT PRECISION LANGUAGE START INTERSECT IGNORE NULL
CURRENT_DATE LOCK INTO NEW DESC STATIC MODIFIES GRANT VALUE LIMIT MODULE DATE LOCALTIME PERCENT REPEAT FULL USAGE
ORDER WHEN PRIMARY BETWEEN CURSOR DECIMAL HAVING IF FILTER INDEX ILIKE VARCHAR EXEC USING ROWS PLACING WHILE
EXECUTE EACH LEFT FLOAT COLLATE CURRENT_TIME OPEN RANGE CROSS FUNCTION TIME BOTH NOT CONVERT NCHAR KEY DEFAULT
LIKE ANALYZE EXISTS IN BIT INOUT SUM NUMERIC AFTER LEAVE INSERT TO COUNT THEN BEFORE OUTER COLUMN ONLY END
PROCEDURE OFFSET ADD INNER RELEASE FROM DAY NO CALL BY LOCAL ZONE TRUE EXIT LEADING INTEGER MERGE OLD AVG MIN SQL
LOOP SIGNAL REFERENCES MINUTE UNIQUE GENERATED ALL MATCH CASCADE UNION COMMENT FETCH UNDO UPDATE WHERE ELSE
PARTITION BIGINT CHARACTER CURRENT_TIMESTAMP ALTER INTERVAL REVOKE CONNECT WITH TIMESTAMP GROUP BEGIN CURRENT
REGEXP NATURAL SOME SQLEXCEPTION MAX SUBSTRING OF AND REPLACE IS""".split())
_SPECIAL = re.compile(r"[^a-zA-Z0-9_]")
_DB_INFO_FIELDS = ("table_names_original", "column_names_original", "column_names", "column_types",
                   "primary_keys", "foreign_keys")


def identifier(name: str) -> str:
    """`name` in backticks when OmniSQL's rule asks for them (module docstring)."""
    return f"`{name}`" if name.upper() in RESERVED_WORDS or _SPECIAL.search(name) else name


def read_db_infos(path: str | Path) -> dict[str, dict[str, Any]]:
    """The entries of a tables.json by db_id, each checked for the fields the schema text reads."""
    out = {}
    for i, entry in enumerate(read_json_list(path, "tables.json")):
        db_id = entry.get("db_id") if isinstance(entry, dict) else None
        missing = [f for f in _DB_INFO_FIELDS if not isinstance(entry, dict) or not isinstance(entry.get(f), list)]
        if not isinstance(db_id, str) or missing:
            raise DatasetError(f"{path}: entry {i} (db_id {db_id!r}): missing or non-list field(s) "
                               f"{', '.join(missing) or 'db_id'}")
        n = len(entry["column_names_original"])
        if len(entry["column_names"]) != n or len(entry["column_types"]) != n:
            raise DatasetError(f"{path}: db_id {db_id!r}: column_names and column_types need {n} items "
                               "like column_names_original")
        out[db_id] = entry
    return out


def db_info_from_schema(schema: Any) -> dict[str, Any]:
    """A tables.json-shaped entry for a kit `Schema` (a set without tables.json): the description is the
    comment, the declared type the type."""
    tables = [t.name for t in schema.tables]
    columns: list[list] = [[-1, "*"]]
    comments: list[list] = [[-1, "*"]]
    types, pks, fks = ["text"], [], []
    index: dict[tuple[str, str], int] = {}
    for t_idx, table in enumerate(schema.tables):
        for col in table.columns:
            index[(table.name.lower(), col.name.lower())] = len(columns)
            columns.append([t_idx, col.name])
            comments.append([t_idx, col.description or ""])
            types.append(col.source_type or col.type)
    for table in schema.tables:
        key = [index[(table.name.lower(), c.lower())] for c in table.primary_key]
        pks.extend(key if len(key) == 1 else [key] if key else [])
        for fk in table.foreign_keys:
            ref = index.get((fk.ref_table.lower(), fk.ref_column.lower()))
            if ref is not None:
                fks.append([index[(table.name.lower(), fk.column.lower())], ref])
    return {"db_id": schema.db_id, "table_names_original": tables, "column_names_original": columns,
            "column_names": comments, "column_types": types, "primary_keys": pks, "foreign_keys": fks}


def sample_values(db_path: str | Path, tables: Sequence[str], limit: int = SAMPLED_VALUES) -> dict[str, list]:
    """{"table.column" lower-cased: the first `limit` distinct values that are neither NULL nor ''}."""
    path = Path(db_path)
    if not path.is_file():
        raise FileNotFoundError(f"SQLite database not found: {path}")
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    conn.text_factory = lambda b: b.decode("utf-8", errors="replace")
    out: dict[str, list] = {}
    try:
        for table in tables:
            for row in conn.execute(f"PRAGMA table_info(`{table}`)").fetchall():
                col = row[1]
                values = [v for (v,) in conn.execute(
                    f"SELECT `{col}` FROM (SELECT DISTINCT `{col}` FROM `{table}` WHERE `{col}` IS NOT NULL "
                    f"AND `{col}` != '') LIMIT {int(limit)}").fetchall()]
                values = [v[:VALUE_CHARS] if isinstance(v, str) else v for v in values]
                if values:
                    out[f"{table}.{col}".lower()] = values
    finally:
        conn.close()
    return out


def _comment_is_name(name: str, comment: str) -> bool:
    c = comment.lower()
    return comment.strip() == "" or name.lower() in (c, c.replace(" ", "_"), c.replace(" ", ""))


def _column_line(name: str, type_: str, comment: str, values: list) -> str:
    line = f"    {identifier(name)} {type_},"
    if _comment_is_name(name, comment):
        return line + (f" -- example: {values}" if values else "")
    return line + f" -- {comment}" + (f", example: {values}" if values else "")


def _key_lines(db_info: Mapping[str, Any], t_idx: int, kept: list[int]) -> list[str]:
    cols, tables = db_info["column_names_original"], db_info["table_names_original"]
    keys = {i for pk in db_info["primary_keys"] for i in (pk if isinstance(pk, list) else [pk])}
    pk_names = list(dict.fromkeys(cols[i][1] for i in kept if i in keys))
    lines = [f"    PRIMARY KEY ({', '.join(identifier(c) for c in pk_names)}),"] if pk_names else []
    fk_lines = []
    for i in kept:
        for src, dst in db_info["foreign_keys"]:
            if src == i:
                s_table, s_col = tables[cols[src][0]], cols[src][1]
                d_table, d_col = tables[cols[dst][0]], cols[dst][1]
                name = f"fk_{s_table.lower().replace(' ', '_')}_{s_col.lower().replace(' ', '_')}"
                fk_lines.append(f"    CONSTRAINT {name} FOREIGN KEY ({identifier(s_col)}) "
                                f"REFERENCES {identifier(d_table)} ({identifier(d_col)}),")
    return lines + list(dict.fromkeys(fk_lines))


def db_details(db_info: Mapping[str, Any], sampled: Mapping[str, list],
               relevant: Mapping[str, list] | None = None) -> str:
    """The whole schema as OmniSQL's evaluation prompts print it (module docstring)."""
    relevant = relevant or {}
    cols, comments, types = db_info["column_names_original"], db_info["column_names"], db_info["column_types"]
    ddls = []
    for t_idx, table in enumerate(db_info["table_names_original"]):
        kept = [i for i, (owner, _) in enumerate(cols) if owner == t_idx]
        lines = []
        for i in kept:
            key = f"{table}.{cols[i][1]}".lower()
            values = list(dict.fromkeys([*relevant.get(key, []), *sampled.get(key, [])]))[:MAX_VALUES]
            lines.append(_column_line(cols[i][1], types[i], comments[i][1], values))
        if not lines:
            continue
        body = f"CREATE TABLE {identifier(table)} (\n" + "\n".join(lines + _key_lines(db_info, t_idx, kept))
        ddls.append(body.removesuffix(",") + "\n);")
    return "\n\n".join(ddls)
