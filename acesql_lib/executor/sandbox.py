"""One untrusted SQL statement on a read-only SQLite file, in THIS process, with every bound SQLite
itself can enforce.

The database opens read-only (`mode=ro`, `query_only`, a private cache), an authorizer allows reads
of the database's own tables and an allowlist of documented SQL functions only, every statement kind
that is not a read (REINDEX, ANALYZE, VACUUM, ATTACH, writes, pragmas other than the schema ones...)
is refused by its parsed kind before SQLite sees it (an authorizer is not asked about a REINDEX with
nothing to reindex), a gold and the predictions scored against it never share a connection,
one statement per call, a deadline inside SQLite's VM (progress handler), limits on SQL length,
expression depth, compound selects, program size and value length, a heap limit with temporary
tables kept in that heap (`temp_store=MEMORY`, so a huge sort cannot fill the disk), and caps on
rows and result bytes counted row by row.

What this process cannot bound by itself: SQLite compiles a statement without calling the progress
handler, and one function call (`printf('%.*c', 1e9, 'x')`) runs without it, and an interrupt
(`Connection.interrupt`) is only noticed between VM steps (measured on SQLite 3.40: neither a
compile nor that call stops early). So untrusted SQL runs in worker processes (`batch.py`) that
the parent kills at a hard deadline; `execute_here` is what a worker (or a caller that asks for it
explicitly) runs.
"""
from __future__ import annotations

import functools
import os
import re
import sqlite3
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

STATUSES = ("ok", "error", "timeout", "too_large", "blocked", "wrong_shape")  # wrong_shape: see batch._run_task
VALID_STATUSES = ("ok", "wrong_shape")  # a prediction that compiled and has a verdict (not an execution failure)
MAX_SQL_BYTES = 2_000_000  # UNKNOWN (kit): longer SQL is refused before SQLite parses it
MAX_VALUE_BYTES = 100_000_000  # SQLITE_LIMIT_LENGTH: randomblob(1e9) fails "string or blob too big"
MAX_EXPR_DEPTH = 500  # SQLITE_LIMIT_EXPR_DEPTH (SQLite default 1000)
MAX_COMPOUND_SELECT = 200  # SQLITE_LIMIT_COMPOUND_SELECT (default 500)
MAX_VDBE_OPS = 1_000_000  # SQLITE_LIMIT_VDBE_OP: compiled program size (a 160,000-value IN list fits)
HARD_HEAP_BYTES = 512 << 20  # PRAGMA hard_heap_limit (SQLite's own memory, temp tables included); process-wide
DEFAULT_RESULT_BYTES = 256_000_000  # UNKNOWN (kit): result-size cap, counted per row
DEFAULT_MAX_ROWS = 100_000  # UNKNOWN (kit): result-row cap (0 = none; the BIRD command uses none)
# Rows that go back to the caller (`execute`) are counted as the caller will hold them, so the byte
# cap bounds its memory and, at HELD_ROW_BYTES or more a row, its row count: per row the tuple and
# its slot in the list, per value its pointer and a number's object, plus each text's or blob's length.
HELD_ROW_BYTES = 64
HELD_VALUE_BYTES = 32
MAX_ERROR_CHARS = 1000  # an error message is cut to this many characters (and says how long it was)
PROGRESS_STEPS = 5000  # VM instructions between two deadline checks (well under 1 ms apart)
CACHE_SIZE = 64  # cached connections per process (a gold and a prediction connection per database)

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

# Every statement kind of SQLite's grammar (lang.html) that is not a read, refused by its parsed
# kind (statement_kind: past semicolons, comments, byte-order marks and whitespace of every kind,
# through WITH to the main statement and through EXPLAIN to the explained one) before SQLite sees
# it, whatever the database holds: REINDEX and ANALYZE are authorized per index or table, so on a
# database without one the authorizer would not be asked at all. Writes reach the authorizer too.
_STATEMENT_NEEDS = {"REINDEX": "REINDEX", "ANALYZE": "ANALYZE", "VACUUM": "VACUUM (a maintenance write)",
                    "BEGIN": "TRANSACTION", "COMMIT": "TRANSACTION", "END": "TRANSACTION",
                    "ROLLBACK": "TRANSACTION", "SAVEPOINT": "SAVEPOINT", "RELEASE": "SAVEPOINT", "DETACH": "DETACH",
                    "ATTACH": "ATTACH", "INSERT": "INSERT", "REPLACE": "INSERT", "UPDATE": "UPDATE",
                    "DELETE": "DELETE", "CREATE": "CREATE", "DROP": "DROP", "ALTER": "ALTER TABLE"}
_WRITES = ("may not be modified", "attempt to write a readonly database")  # caught below the authorizer
_DECODE_REPLACE = functools.partial(str, encoding="utf-8", errors="replace")  # invalid UTF-8 -> U+FFFD
_CORRUPT = ("file is not a database", "database disk image is malformed", "unable to open database")


@dataclass
class ExecResult:
    status: str  # one of STATUSES
    rows: list[tuple] = field(default_factory=list)
    error: str = ""
    elapsed_s: float = 0.0
    columns: list[str] = field(default_factory=list)


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


class SandboxConnection(sqlite3.Connection):
    guard: _Guard


class DatabaseOpenError(RuntimeError):
    """The database file is missing or unreadable; the message names the path."""


def open_readonly(db_path: str | Path) -> SandboxConnection:
    """Open `db_path` read-only with every limit installed; never creates a file (mode=ro), and
    never shares a page cache with another connection (cache=private).

    The tables a statement may read are the schema's as of this call (`cached_connection` opens a
    fresh connection when the file changes on disk).

    `PRAGMA hard_heap_limit` is process-wide (all SQLite connections in this process share it), so
    it is only ever lowered to HARD_HEAP_BYTES, never raised, and set before the authorizer (which
    denies PRAGMA writes) is installed.
    """
    path = Path(db_path)
    if not path.is_file():
        raise DatabaseOpenError(f"database not found: {path}")
    try:
        conn = sqlite3.connect(path.resolve().as_uri() + "?mode=ro&cache=private", uri=True, isolation_level=None,
                               check_same_thread=False, factory=SandboxConnection)
    except sqlite3.Error as e:
        raise DatabaseOpenError(f"cannot open database {path}: {e}") from e
    try:
        if hasattr(conn, "enable_load_extension"):  # absent when Python's sqlite3 cannot load extensions at all
            conn.enable_load_extension(False)
        for limit, value in ((sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES),
                             (sqlite3.SQLITE_LIMIT_SQL_LENGTH, MAX_SQL_BYTES),
                             (sqlite3.SQLITE_LIMIT_ATTACHED, 0),
                             (sqlite3.SQLITE_LIMIT_EXPR_DEPTH, MAX_EXPR_DEPTH),
                             (sqlite3.SQLITE_LIMIT_COMPOUND_SELECT, MAX_COMPOUND_SELECT),
                             (sqlite3.SQLITE_LIMIT_VDBE_OP, MAX_VDBE_OPS),
                             (sqlite3.SQLITE_LIMIT_WORKER_THREADS, 0)):
            conn.setlimit(limit, value)
        current = conn.execute("PRAGMA hard_heap_limit").fetchone()[0]
        if current == 0 or current > HARD_HEAP_BYTES:
            conn.execute(f"PRAGMA hard_heap_limit={HARD_HEAP_BYTES}")
        conn.execute("PRAGMA temp_store=MEMORY")  # sorts and temp b-trees stay under the heap limit, off the disk
        conn.execute("PRAGMA trusted_schema=OFF")
        conn.execute("PRAGMA query_only=1")
        tables = frozenset(name.lower() for (name,) in conn.execute(  # fails now on a corrupt file
            "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')") if isinstance(name, str))
    except sqlite3.Error as e:
        conn.close()
        raise DatabaseOpenError(f"cannot read database {path}: {e}") from e
    conn.guard = _Guard(tables, _module_names())
    conn.set_authorizer(conn.guard.authorize)
    return conn


_CACHE: OrderedDict[tuple[str, str], tuple[tuple, SandboxConnection]] = OrderedDict()
_CACHE_LOCK = threading.Lock()
ROLES = ("pred", "gold")  # the gold never shares a connection (statements, page cache, state) with a prediction


def cached_connection(db_path: str | Path, role: str = "pred") -> SandboxConnection:
    """LRU of read-only connections keyed by path and role; a file changed on disk gets a fresh one.

    A gold runs on the "gold" connection and predictions on the "pred" one, so nothing a prediction
    can read through its connection (prepared statements, cached pages, connection state) comes
    from a gold."""
    if role not in ROLES:
        raise ValueError(f"role must be one of {ROLES}, got {role!r}")
    key = (os.path.abspath(db_path), role)
    try:
        st = os.stat(key[0])
    except OSError:
        raise DatabaseOpenError(f"database not found: {db_path}") from None
    signature = (st.st_ino, st.st_size, st.st_mtime_ns)
    with _CACHE_LOCK:
        hit = _CACHE.pop(key, None)
        if hit is not None and hit[0] == signature:
            _CACHE[key] = hit
            return hit[1]
        if hit is not None:
            hit[1].close()
    conn = open_readonly(db_path)
    with _CACHE_LOCK:
        _CACHE[key] = (signature, conn)
        while len(_CACHE) > CACHE_SIZE:
            _CACHE.popitem(last=False)[1][1].close()
    return conn


def _evict(db_path: str | Path) -> None:
    with _CACHE_LOCK:
        hits = [_CACHE.pop((os.path.abspath(db_path), role), None) for role in ROLES]
    for hit in hits:
        if hit is not None:
            hit[1].close()


_TOKEN = re.compile(r"""'(?:[^']|'')*(?:'|\Z)|"(?:[^"]|"")*(?:"|\Z)|`[^`]*(?:`|\Z)|\[[^\]]*(?:\]|\Z)"""
                    r"""|--[^\n]*|/\*.*?(?:\*/|\Z)|;|\s+|[^'"`\[\-/;\s]+|.""", re.DOTALL)


def count_statements(sql: str) -> int:
    """Number of non-empty statements, scanning quotes, identifiers and comments (linear time)."""
    if ";" not in sql and "--" not in sql and "/*" not in sql:  # the common case, without the scan
        return int(bool(sql.strip()))
    count, has_content = 0, False
    for m in _TOKEN.finditer(sql):
        tok = m.group()
        if tok == ";":
            count += has_content
            has_content = False
        elif not (tok[0].isspace() or tok.startswith("--") or tok.startswith("/*")):
            has_content = True
    return count + has_content


# Characters SQLite never reads as part of a keyword and that the check steps over: whitespace of
# every kind (str.isspace: ASCII, NBSP, U+2000-U+200A, U+2028/9, U+3000...) and invisible format
# characters (byte-order mark, zero-width space/joiners, word joiner, bidi marks, soft hyphen).
_INVISIBLE = "\u00ad\u061c\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff"
_KIND_TOKEN = re.compile(r"""(?P<skip>--[^\n]*|/\*.*?(?:\*/|\Z)|[;\s""" + _INVISIBLE + r"""]+)"""
                         r"""|'(?:[^']|'')*(?:'|\Z)|"(?:[^"]|"")*(?:"|\Z)|`[^`]*(?:`|\Z)|\[[^\]]*(?:\]|\Z)"""
                         r"""|[A-Za-z_][A-Za-z0-9_$]*|.""", re.DOTALL)


def _significant(sql: str):
    """Tokens past whitespace of every kind, invisible characters, comments and semicolons."""
    for m in _KIND_TOKEN.finditer(sql):
        if m.lastgroup != "skip":
            yield m.group()


def statement_kind(sql: str) -> tuple[str, str]:
    """(kind, detail) of the statement SQLite would run, read from its tokens rather than its first
    characters: leading semicolons, comments, byte-order marks and whitespace of every kind are
    skipped, `WITH ...` is the kind of its main statement (the first word after a CTE's closing
    body's closing parenthesis), `EXPLAIN [QUERY PLAN] x` the kind of x, `PRAGMA [schema.]name` has the name as
    detail. kind is the upper-cased keyword ("" when the SQL has no word: SQLite reports why)."""
    toks = _significant(sql)
    word = next(toks, "").upper()
    while word == "EXPLAIN":
        word = next(toks, "").upper()
        if word == "QUERY":
            next(toks, "")  # PLAN
            word = next(toks, "").upper()
    if word == "WITH":
        depth, after_body = 0, False
        for tok in toks:
            if tok == "(":
                depth += 1
            elif tok == ")":
                depth -= 1
                after_body = depth == 0
                continue
            elif depth == 0 and after_body and tok != "," and tok.upper() != "AS":  # AS: after a column list
                return tok.upper()[:40], ""
            after_body = False
        return "WITH", ""
    if word == "PRAGMA":
        name = next(toks, "")
        if next(toks, "") == ".":
            name = next(toks, "")
        return word, name.strip('"`[]').lower()[:60]
    return word[:40], ""


def first_word(sql: str) -> str:
    """The statement's kind (`statement_kind`), kept under its old name for callers and messages."""
    return statement_kind(sql)[0]


def _refusal(sql: str) -> str | None:
    """Why the parsed statement is not a read the sandbox runs, or None."""
    kind, detail = statement_kind(sql)
    if kind in _STATEMENT_NEEDS:
        return f"{kind} statement needs {_STATEMENT_NEEDS[kind]}"
    if kind == "PRAGMA" and detail not in _READ_PRAGMAS:
        return f"PRAGMA statement needs PRAGMA {detail} (the schema pragmas are the only ones read here)"
    return None


def check_sql(sql: object) -> tuple[str, str] | None:
    """(status, message) when the SQL must not reach SQLite, else None."""
    if not isinstance(sql, str):
        return "error", f"SQL must be a string, got {type(sql).__name__}"
    if "\x00" in sql:
        return "error", "SQL contains a NUL byte"
    if len(sql) > MAX_SQL_BYTES or len(sql.encode("utf-8", "surrogatepass")) > MAX_SQL_BYTES:
        return "error", f"SQL too long: over {MAX_SQL_BYTES} bytes"
    n = count_statements(sql)
    if n == 0:
        return "error", "empty SQL"
    if n > 1:
        return "blocked", f"blocked: {n} statements; only one statement per call is allowed"
    why = _refusal(sql)
    if why:
        head = " ".join(sql.split())[:80]
        return "blocked", f"blocked: {why}, which the read-only sandbox does not allow (only reads run): {head}"
    return None


class _TooLarge(Exception):
    pass


def truncate_message(msg: str) -> str:
    """`msg` cut to MAX_ERROR_CHARS characters, saying how long it was (an identifier of megabytes
    in an error never travels whole)."""
    if len(msg) <= MAX_ERROR_CHARS:
        return msg
    return f"{msg[:MAX_ERROR_CHARS]}... [message cut: {len(msg)} characters]"


def _fetch(conn: SandboxConnection, sql: str, max_rows: int, max_result_bytes: int,
           held: bool = False) -> tuple[list, list]:
    """Rows and column names, or raise _TooLarge; both caps are checked after every row, so the
    rows held never exceed a cap by more than one row (itself bounded by MAX_VALUE_BYTES a value).
    Size = 8 bytes a value plus the length of each str/bytes value (characters for str); `held`:
    HELD_ROW_BYTES a row and HELD_VALUE_BYTES a value instead (what the caller holds)."""
    cur = conn.execute(sql)
    per_row, per_value = (HELD_ROW_BYTES, HELD_VALUE_BYTES) if held else (0, 8)
    try:
        columns = [d[0] for d in cur.description or ()]
        rows: list[tuple] = []
        append, size, row_cap = rows.append, 0, max_rows or float("inf")
        for row in cur:
            size += per_row + per_value * len(row)
            for v in row:
                if type(v) is str or type(v) is bytes:
                    size += len(v)
            append(row)
            if size > max_result_bytes:
                rows.clear()
                raise _TooLarge(f"result larger than about {max_result_bytes} bytes"
                                + (" as the caller would hold it" if held else ""))
            if len(rows) > row_cap:
                rows.clear()
                raise _TooLarge(f"result has more than {max_rows} rows")
        return rows, columns
    finally:
        cur.close()


def execute_here(db_path: str | Path, sql: str, timeout_s: float = 30.0, max_rows: int = DEFAULT_MAX_ROWS,
                 max_result_bytes: int = DEFAULT_RESULT_BYTES, conn: SandboxConnection | None = None,
                 deadline: float | None = None, role: str = "pred", strict_utf8: bool = False,
                 held: bool = False) -> ExecResult:
    """Run one untrusted SQL statement on `db_path` (read-only) in this process and never raise.

    status: ok | error | timeout (deadline hit inside SQLite's VM, the query is stopped) | too_large
    (row, byte, string/blob or heap cap) | blocked (a write, schema change, maintenance statement,
    ATTACH, PRAGMA, a function off the allowlist, or several statements). `deadline` (monotonic
    clock) overrides start + timeout_s, so phases before this one (a shape probe) share one budget;
    `elapsed_s` then counts from that budget's start (deadline - timeout_s), so a `timeout` has
    always spent at least `timeout_s`.
    `role` picks the cached connection ("gold" for a gold, so no prediction shares its connection).
    Text that is not valid UTF-8 is read as U+FFFD, or with `strict_utf8` is an error (as Python's
    sqlite3 without a text_factory, the official BIRD evaluators' reading).
    `held`: the rows go back to a caller, so the byte cap counts them as it will hold them
    (HELD_ROW_BYTES, HELD_VALUE_BYTES). Messages are cut to MAX_ERROR_CHARS characters.
    Compilation and single long function calls are NOT bounded here: see the module docstring.
    """
    if deadline is None:
        deadline = time.monotonic() + timeout_s
    start = deadline - timeout_s  # the budget's start: a phase before this call may have spent part of it

    def done(status: str, error: str = "", rows: list | None = None, columns: list | None = None) -> ExecResult:
        return ExecResult(status, rows or [], truncate_message(error), time.monotonic() - start, columns or [])

    problem = check_sql(sql)
    if problem:
        return done(*problem)
    try:
        conn = conn if conn is not None else cached_connection(db_path, role)
    except DatabaseOpenError as e:
        return done("error", str(e))
    hit = [False]

    def past_deadline() -> int:  # called by SQLite every PROGRESS_STEPS VM instructions; 1 = interrupt
        if time.monotonic() > deadline:
            hit[0] = True
            return 1
        return 0

    with conn.guard.lock:
        conn.guard.denied = ""
        conn.set_progress_handler(past_deadline, PROGRESS_STEPS)
        try:
            try:
                rows, columns = _fetch(conn, sql, max_rows, max_result_bytes, held)
            except sqlite3.OperationalError as e:
                if "Could not decode to UTF-8" not in str(e) or hit[0] or strict_utf8:
                    raise
                # Rare invalid UTF-8: run again decoding with U+FFFD (the default str decoder is 4x faster).
                conn.text_factory = _DECODE_REPLACE
                try:
                    rows, columns = _fetch(conn, sql, max_rows, max_result_bytes, held)
                finally:
                    conn.text_factory = str
            if time.monotonic() > deadline:
                return done("timeout", f"timeout after {timeout_s:g} s")
            return done("ok", rows=rows, columns=columns)
        except _TooLarge as e:
            return done("too_large", str(e))
        except Exception as e:  # untrusted SQL: every failure becomes a status, never an exception
            msg = str(e)
            denied = conn.guard.denied
            if denied.startswith("FUNCTION "):
                return done("blocked", f"blocked: the function {denied[9:]}() is not on the sandbox's allowlist "
                                       "of SQLite's documented functions")
            if denied:
                return done("blocked", f"blocked: {first_word(sql)} statement needs {denied}, "
                                       "which the read-only sandbox does not allow")
            if hit[0]:
                return done("timeout", f"timeout after {timeout_s:g} s")
            if (isinstance(e, sqlite3.ProgrammingError) and "one statement" in msg) or any(w in msg for w in _WRITES):
                return done("blocked", f"blocked: {msg}")
            if isinstance(e, MemoryError) or "string or blob too big" in msg or "out of memory" in msg:
                return done("too_large", f"too large: {msg or type(e).__name__}")
            if isinstance(e, sqlite3.Error) and not msg:  # SQLITE_NOMEM from the program-size limit has no text
                return done("too_large", f"too large: the compiled program exceeds {MAX_VDBE_OPS} instructions")
            if any(c in msg for c in _CORRUPT):
                _evict(db_path)
                return done("error", f"cannot read database {db_path}: {msg}")
            return done("error", f"{type(e).__name__}: {msg}")
        finally:
            conn.set_progress_handler(None, PROGRESS_STEPS)


def result_width(db_path: str | Path, sql: str, conn: SandboxConnection | None = None) -> int | None:
    """How many columns `sql` returns, read from its compiled program (EXPLAIN: prepared, never
    run), so a query whose answer cannot match is known wrong before it spends its deadline.
    None when it does not compile here; `execute` then reports why. In a worker, the compile
    counts against the same hard deadline as the execution that may follow it."""
    if check_sql(sql):
        return None
    try:
        conn = conn if conn is not None else cached_connection(db_path)
    except DatabaseOpenError:
        return None
    with conn.guard.lock:  # a denial noted here is reset by execute_here() before it runs anything
        try:
            cur = conn.execute("EXPLAIN " + sql)
            try:
                return next((row[3] for row in cur if row[1] == "ResultRow"), None)
            finally:
                cur.close()
        except Exception:  # noqa: BLE001 - untrusted SQL; execute_here() classifies the failure
            return None
