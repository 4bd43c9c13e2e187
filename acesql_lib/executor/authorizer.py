"""What a statement on a sandboxed connection may touch: the SQLite authorizer of `connections.open_readonly`.

It allows reads of the database's own tables and views (and of a few eponymous virtual tables that compute
from their arguments only), an allowlist of the SQL functions SQLite documents, and the schema pragmas; it
denies everything else (writes, schema changes, ATTACH, other pragmas, connection-state tables, functions off
the allowlist) and notes what it denied, so the sandbox can say why a statement was blocked.
"""
from __future__ import annotations

import functools
import sqlite3
import threading

# Authorizer action codes (sqlite3.h) -> names, for the "blocked" message.
_ACTIONS = {1: "CREATE INDEX", 2: "CREATE TABLE", 3: "CREATE TEMP INDEX", 4: "CREATE TEMP TABLE",
            5: "CREATE TEMP TRIGGER", 6: "CREATE TEMP VIEW", 7: "CREATE TRIGGER", 8: "CREATE VIEW",
            9: "DELETE", 10: "DROP INDEX", 11: "DROP TABLE", 12: "DROP TEMP INDEX", 13: "DROP TEMP TABLE",
            14: "DROP TEMP TRIGGER", 15: "DROP TEMP VIEW", 16: "DROP TRIGGER", 17: "DROP VIEW",
            18: "INSERT", 19: "PRAGMA", 20: "READ", 21: "SELECT", 22: "TRANSACTION", 23: "UPDATE",
            24: "ATTACH", 25: "DETACH", 26: "ALTER TABLE", 27: "REINDEX", 28: "ANALYZE",
            29: "CREATE VTABLE", 30: "DROP VTABLE", 31: "FUNCTION", 32: "SAVEPOINT", 33: "RECURSIVE"}
_READ_ACTIONS = frozenset({sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_RECURSIVE})
_SCHEMA_TABLES = frozenset({"sqlite_master", "sqlite_schema", "sqlite_temp_master", "sqlite_temp_schema"})
# What a READ may name: the tables and views of the database's own schema (sqlite_master's rows,
# sqlite_sequence and sqlite_stat* included: they are rows of the file, the same for every
# connection), sqlite_master itself, and these eponymous virtual tables, which compute from their
# arguments only. Everything else is refused, whatever this SQLite build compiles in: eponymous
# tables that reveal this connection's or this process's state (sqlite_stmt lists the prepared
# statements, dbstat and sqlite_dbpage the raw pages, pragma_* tables other than the schema reads
# below), the temp schema (sqlite_temp_master, temp.*), and any the build adds later.
_READ_PRAGMAS = frozenset({"table_info", "table_xinfo", "table_list", "index_list", "index_info",
                           "index_xinfo", "foreign_key_list", "database_list", "collation_list"})
_HARMLESS_EPONYMOUS = frozenset({"json_each", "json_tree"} | {f"pragma_{p}" for p in _READ_PRAGMAS})
_ALWAYS_READABLE = frozenset({"sqlite_master", "sqlite_schema"}) | _HARMLESS_EPONYMOUS
# Named in messages (and kept for callers): connection-state tables this build may hold.
_HIDDEN_TABLES = frozenset({"sqlite_stmt", "sqlite_dbpage", "sqlite_dbdata", "sqlite_dbptr", "dbstat",
                            "sqlite_temp_master", "sqlite_temp_schema"})

# The SQL functions SQLite documents (lang_corefunc, lang_aggfunc, lang_windowfunc, lang_datefunc,
# json1, lang_mathfunc, percentile); anything else (fts3_tokenizer, which hands out a raw pointer,
# load_extension, FTS auxiliaries, functions an application registered) is denied by name.
ALLOWED_FUNCTIONS = frozenset("""
abs changes char coalesce concat concat_ws format glob hex ifnull iif if instr last_insert_rowid length
like likelihood likely lower ltrim max min nullif octet_length printf quote random randomblob replace
round rtrim sign soundex sqlite_compileoption_get sqlite_compileoption_used sqlite_offset
sqlite_source_id sqlite_version substr substring total_changes trim typeof unhex unicode unistr
unistr_quote unlikely upper zeroblob
avg count group_concat string_agg sum total median percentile percentile_cont percentile_disc
row_number rank dense_rank percent_rank cume_dist ntile lag lead first_value last_value nth_value
date time datetime julianday unixepoch strftime timediff current_date current_time current_timestamp
json jsonb json_array jsonb_array json_array_length json_error_position json_extract jsonb_extract
json_insert jsonb_insert json_object jsonb_object json_patch jsonb_patch json_pretty json_remove
jsonb_remove json_replace jsonb_replace json_set jsonb_set json_type json_valid json_quote
json_group_array jsonb_group_array json_group_object jsonb_group_object json_each json_tree -> ->>
acos acosh asin asinh atan atan2 atanh ceil ceiling cos cosh degrees exp floor ln log log10 log2 mod
pi pow power radians sin sinh sqrt tan tanh trunc
""".split())


class _Guard:
    """Per-connection state the authorizer writes to (no reference back to the connection)."""

    def __init__(self, tables: frozenset[str] = frozenset(), modules: frozenset[str] = frozenset()) -> None:
        self.denied = ""
        self.lock = threading.Lock()
        self.readable = _ALWAYS_READABLE | tables  # lower-cased names a READ may touch
        self.foreign = (modules | _HIDDEN_TABLES) - self.readable  # virtual-table modules of this build

    def authorize(self, action: int, arg1, arg2, db, _source) -> int:
        if action == sqlite3.SQLITE_READ:
            name = (arg1 or "").lower()
            # db is "main" for the database's tables and eponymous virtual tables, "temp" for the
            # temp schema, None for a CTE's reference to itself and for count(*) of a whole table
            if name not in self.readable and (db is not None or name in self.foreign
                                              or name.startswith(("pragma_", "sqlite_"))) or db == "temp":
                self.denied = f"READ {arg1} (not a table of the database's schema: connection state or an internal table)"
                return sqlite3.SQLITE_DENY
        if action in _READ_ACTIONS:
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_FUNCTION:
            name = (arg2 or "").lower()
            if name in ALLOWED_FUNCTIONS:
                return sqlite3.SQLITE_OK
            self.denied = f"FUNCTION {arg2}"
            return sqlite3.SQLITE_DENY
        if action == sqlite3.SQLITE_PRAGMA and (arg1 or "").lower() in _READ_PRAGMAS:
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_UPDATE and arg1 in _SCHEMA_TABLES:
            # SQLite asks this while binding an eponymous virtual table (json_each, pragma_table_info);
            # IGNORE means "leave these columns unchanged", so nothing can be written through it.
            return sqlite3.SQLITE_IGNORE
        what = " ".join(str(a) for a in (arg1, arg2) if a)
        self.denied = f"{_ACTIONS.get(action, action)} {what}".strip()
        return sqlite3.SQLITE_DENY


@functools.lru_cache(maxsize=1)
def _module_names() -> frozenset[str]:
    """The virtual-table modules this SQLite build registers (eponymous ones can be read by name)."""
    con = sqlite3.connect(":memory:")
    try:
        return frozenset(n.lower() for (n,) in con.execute("SELECT name FROM pragma_module_list"))
    except sqlite3.Error:  # a build without the introspection pragmas
        return frozenset()
    finally:
        con.close()

