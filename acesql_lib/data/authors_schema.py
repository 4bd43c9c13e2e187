"""The authors' schema text (`data.schema_style: authors`): their released prompts, byte for byte.

Read from the 40 RL validation prompts the authors released and their prompt builder (facts, not
their code): see `table_ddl_authors` for the rules. `schema.Schema.to_ddl` calls it per table.
"""
from __future__ import annotations

import re
from typing import Any, Iterable, Protocol, Sequence


class Column(Protocol):
    """What the authors' text reads of a column (`schema.Column` has it)."""
    name: str
    type: str
    description: str
    examples: list
    source_type: str


class ForeignKey(Protocol):
    column: str
    ref_table: str
    ref_column: str


class Table(Protocol):
    """What the authors' text reads of a table (`schema.Table` has it); declared here so that this
    module needs nothing of `schema`, which imports it."""
    name: str
    columns: Sequence[Column]
    primary_key: Sequence[str]
    foreign_keys: Sequence[ForeignKey]

# The authors' schema text quotes a name that is one of these words (any case) or holds a character
# outside [A-Za-z0-9_] (read from their released prompts and prompt builder; MySQL/ANSI words, not
# SQLite's list: VALUE, ROLE, YEAR, DATE... are quoted, ACTION or ABORT are not).
AUTHORS_RESERVED_WORDS = frozenset("""
ACCESS ADD AFTER ALL ALTER ANALYZE AND AS ASC AVG BEFORE BEGIN BETWEEN BIGINT BINARY BIT BLOB BOOLEAN
BOTH BREAK BY CALL CASCADE CASE CAST CHAR CHARACTER CHECK CLOB COLLATE COLUMN COMMENT COMMIT
CONDITION CONNECT CONSTRAINT CONTINUE CONVERT COUNT CREATE CROSS CURRENT CURRENT_DATE CURRENT_TIME
CURRENT_TIMESTAMP CURSOR DATABASE DATE DAY DEC DECIMAL DECLARE DEFAULT DELETE DESC DESCRIBE DISTINCT
DO DOUBLE DROP EACH ELSE ELSEIF END ESCAPE EXCEPT EXEC EXECUTE EXISTS EXIT EXPLAIN EXTEND EXTERNAL
FALSE FETCH FILTER FLOAT FOR FOREIGN FROM FULL FUNCTION GENERATED GLOBAL GRANT GROUP HAVING HOLD
HOUR IDENTIFIED IF IGNORE ILIKE IN INDEX INNER INOUT INSENSITIVE INSERT INT INTEGER INTERSECT
INTERVAL INTO IS ITERATE JOIN KEY LANGUAGE LEADING LEAVE LEFT LIKE LIMIT LOCAL LOCALTIME
LOCALTIMESTAMP LOCK LOOP MATCH MAX MERGE MIN MINUTE MODIFIES MODULE MONTH NATURAL NCHAR NEW NO NOT
NULL NUMERIC OF OFFSET OLD ON ONLY OPEN OR ORDER OUT OUTER OVER PARTITION PERCENT PLACING POSITION
PRECISION PRIMARY PROCEDURE RANGE READS REAL RECURSIVE REFERENCES REGEXP RELEASE RENAME REPEAT
REPLACE RESIGNAL RESTRICT RETURN REVOKE RIGHT RLIKE ROLE ROLLBACK ROW ROWNUM ROWS SAVEPOINT SCHEMA
SELECT SENSITIVE SESSION SET SIGNAL SMALLINT SOME SPECIFIC SQL SQLEXCEPTION SQLSTATE SQLWARNING
START STATIC SUBSTRING SUM SYSDATE TABLE TERMINATED THEN TIME TIMESTAMP TO TOP TRAILING TRIGGER
TRUE UNDO UNION UNIQUE UNKNOWN UNLOCK UPDATE USAGE USER USING VALUE VALUES VARCHAR VARYING VIEW
WHEN WHERE WHILE WITH WITHIN YEAR ZONE""".split())
_AUTHORS_PLAIN = re.compile(r"[A-Za-z0-9_]*")


def authors_identifier(name: str) -> str:
    """`name` as the authors' schema text writes it: double-quoted (no escaping) when it is on
    `AUTHORS_RESERVED_WORDS` or holds a character outside [A-Za-z0-9_], else bare."""
    if name.upper() in AUTHORS_RESERVED_WORDS or not _AUTHORS_PLAIN.fullmatch(name):
        return f'"{name}"'
    return name


def merge_values(relevant: Iterable[Any], sampled: Iterable[Any], limit: int) -> list:
    """Question-relevant values first, then the sampled ones; first occurrence kept; at most `limit`."""
    return list(dict.fromkeys([*relevant, *sampled]))[:limit]


def examples_of(table: Table, col: Column, relevant: dict[str, list], limit: int,
                always_merge: bool = False) -> list:
    """The example list of one column. The authors always merge (so two samples that are equal once
    cut to 40 characters show once); the kit style keeps its samples as read unless relevant
    values join them."""
    extra = relevant.get(f"{table.name}.{col.name}".lower())
    return merge_values(extra or [], col.examples, limit) if (extra or always_merge) else list(col.examples)


def _authors_comment_hidden(name: str, comment: str) -> bool:
    """The authors print no description when it is blank or spells the name (case, `_` or no spaces)."""
    c = comment.lower()
    return comment.strip() == "" or name.lower() in (c, c.replace(" ", "_"), c.replace(" ", ""))


def table_ddl_authors(table: Table, keep: set[str] | None, relevant: dict[str, list] | None = None,
                       limit: int = 6) -> str:
    """One CREATE TABLE in the authors' text (their released prompts are the reference):

    - 4-space indent; every item ends in a comma, the last item's trailing comma is dropped (a
      final column line with a `--` comment keeps it, as theirs does);
    - column line `name type,` then ` -- description` and/or `example: [...]`, the list written as
      Python writes a list (`'a'`, `"you've"`, `1.5`), description text kept as is (trailing spaces);
    - `PRIMARY KEY (...)` lists the table's key columns in column order;
    - one `CONSTRAINT fk_<table>_<column> FOREIGN KEY (c) REFERENCES t (c)` per foreign key, in
      column order then declaration order (lower case, spaces as `_` in the constraint name);
      pruned: only when both ends are kept; a repeated line is written once;
    - names quoted by `authors_identifier`.
    """
    def kept(table_name: str, col: str) -> bool:
        return keep is None or f"{table_name}.{col}".lower() in keep

    cols = [c for c in table.columns if kept(table.name, c.name)]
    if not cols:
        return ""
    pk_names = {p.lower() for p in table.primary_key}
    col_lines, pk, fk_lines = [], [], []
    for c in cols:
        line = f"    {authors_identifier(c.name)} {c.source_type or c.type},"
        examples = examples_of(table, c, relevant or {}, limit, always_merge=True)
        if _authors_comment_hidden(c.name, c.description):
            line += f" -- example: {examples!r}" if examples else ""
        else:
            line += f" -- {c.description}" + (f", example: {examples!r}" if examples else "")
        col_lines.append(line)
        if c.name.lower() in pk_names and c.name not in pk:
            pk.append(c.name)
        for fk in table.foreign_keys:
            if fk.column.lower() == c.name.lower() and kept(fk.ref_table, fk.ref_column):
                name = f"fk_{table.name.lower().replace(' ', '_')}_{c.name.lower().replace(' ', '_')}"
                fk_line = (f"    CONSTRAINT {name} FOREIGN KEY ({authors_identifier(c.name)}) REFERENCES "
                           f"{authors_identifier(fk.ref_table)} ({authors_identifier(fk.ref_column)}),")
                if fk_line not in fk_lines:
                    fk_lines.append(fk_line)
    pk_lines = ["    PRIMARY KEY (" + ", ".join(authors_identifier(p) for p in pk) + "),"] if pk else []
    body = "\n".join(col_lines + pk_lines + fk_lines)
    return f"CREATE TABLE {authors_identifier(table.name)} (\n" + body.removesuffix(",") + "\n);"
