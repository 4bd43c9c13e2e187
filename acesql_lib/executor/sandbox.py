"""One untrusted SQL statement on a read-only SQLite file, in THIS process, with every bound SQLite
itself can enforce.

The statement is checked before SQLite sees it (`statements.check_sql`: one statement, a read by its
parsed kind), runs on a read-only connection with SQLite's limits, heap bound and authorizer
(`connections`, `authorizer`), a gold never on the connection of the predictions scored against it,
under a deadline inside SQLite's VM (progress handler), with caps on rows and result bytes counted
row by row (`ResultReading`). This module runs it and turns every outcome into a status
(`execute_here`), and reads a statement's result width without running it (`result_width`).

What this process cannot bound by itself: SQLite compiles a statement without calling the progress
handler, and one function call (`printf('%.*c', 1e9, 'x')`) runs without it, and an interrupt
(`Connection.interrupt`) is only noticed between VM steps (measured on SQLite 3.40: neither a
compile nor that call stops early). So untrusted SQL runs in worker processes (`batch.py`) that
the parent kills at a hard deadline; `execute_here` is what a worker (or a caller that asks for it
explicitly) runs.
"""
from __future__ import annotations

import functools
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path

from .connections import MAX_VDBE_OPS, DatabaseOpenError, SandboxConnection, _evict, cached_connection
from .statements import check_sql, first_word

STATUSES = ("ok", "error", "timeout", "too_large", "blocked", "wrong_shape")  # wrong_shape: see tasks._run_task
VALID_STATUSES = ("ok", "wrong_shape")  # a prediction that compiled and has a verdict (not an execution failure)
DEFAULT_RESULT_BYTES = 256_000_000  # UNKNOWN (kit): result-size cap, counted per row
DEFAULT_MAX_ROWS = 100_000  # UNKNOWN (kit): result-row cap (0 = none; the BIRD command uses none)
# Rows that go back to the caller (`execute`) are counted as the caller will hold them, so the byte
# cap bounds its memory and, at HELD_ROW_BYTES or more a row, its row count: per row the tuple and
# its slot in the list, per value its pointer and a number's object, plus each text's or blob's length.
HELD_ROW_BYTES = 64
HELD_VALUE_BYTES = 32
MAX_ERROR_CHARS = 1000  # an error message is cut to this many characters (and says how long it was)
PROGRESS_STEPS = 5000  # VM instructions between two deadline checks (well under 1 ms apart)
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


@dataclass(frozen=True)
class ResultReading:
    """How a statement's result is read: at most `max_rows` rows (0: no cap) and about `max_result_bytes`
    bytes (counted row by row, `_fetch`), text that is not valid UTF-8 read as U+FFFD, or with
    `strict_utf8` an error (as Python's sqlite3 without a text_factory, the official BIRD evaluators'
    reading). The values travel together from a scoring call to the worker that runs each statement."""

    max_rows: int = DEFAULT_MAX_ROWS
    max_result_bytes: int = DEFAULT_RESULT_BYTES
    strict_utf8: bool = False


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


def _fetch_decoded(conn: SandboxConnection, sql: str, reading: ResultReading, held: bool,
                   hit: list[bool]) -> tuple[list, list]:
    """`_fetch` under `reading`; rows holding text that is not valid UTF-8 are read again decoding it as
    U+FFFD, unless the deadline was hit (`hit[0]`) or `reading.strict_utf8` makes it an error."""
    try:
        return _fetch(conn, sql, reading.max_rows, reading.max_result_bytes, held)
    except sqlite3.OperationalError as e:
        if "Could not decode to UTF-8" not in str(e) or hit[0] or reading.strict_utf8:
            raise
        # Rare invalid UTF-8: run again decoding with U+FFFD (the default str decoder is 4x faster).
        conn.text_factory = _DECODE_REPLACE
        try:
            return _fetch(conn, sql, reading.max_rows, reading.max_result_bytes, held)
        finally:
            conn.text_factory = str


def _failure(e: Exception, sql: str, db_path: str | Path, denied: str, timed_out: bool,
             timeout_s: float) -> tuple[str, str]:
    """(status, message) of a statement that raised `e`: what the authorizer `denied` first, then a deadline
    hit inside the VM, a write, a cap, a corrupt file (its cached connections are dropped), any other error."""
    msg = str(e)
    if denied.startswith("FUNCTION "):
        return "blocked", (f"blocked: the function {denied[9:]}() is not on the sandbox's allowlist "
                           "of SQLite's documented functions")
    if denied:
        return "blocked", (f"blocked: {first_word(sql)} statement needs {denied}, "
                           "which the read-only sandbox does not allow")
    if timed_out:
        return "timeout", f"timeout after {timeout_s:g} s"
    if (isinstance(e, sqlite3.ProgrammingError) and "one statement" in msg) or any(w in msg for w in _WRITES):
        return "blocked", f"blocked: {msg}"
    if isinstance(e, MemoryError) or "string or blob too big" in msg or "out of memory" in msg:
        return "too_large", f"too large: {msg or type(e).__name__}"
    if isinstance(e, sqlite3.Error) and not msg:  # SQLITE_NOMEM from the program-size limit has no text
        return "too_large", f"too large: the compiled program exceeds {MAX_VDBE_OPS} instructions"
    if any(c in msg for c in _CORRUPT):
        _evict(db_path)
        return "error", f"cannot read database {db_path}: {msg}"
    return "error", f"{type(e).__name__}: {msg}"


def execute_here(db_path: str | Path, sql: str, timeout_s: float = 30.0, reading: ResultReading = ResultReading(),
                 conn: SandboxConnection | None = None, deadline: float | None = None, role: str = "pred",
                 held: bool = False) -> ExecResult:
    """Run one untrusted SQL statement on `db_path` (read-only) in this process and never raise.

    status: ok | error | timeout (deadline hit inside SQLite's VM, the query is stopped) | too_large
    (row, byte, string/blob or heap cap) | blocked (a write, schema change, maintenance statement,
    ATTACH, PRAGMA, a function off the allowlist, or several statements). `deadline` (monotonic
    clock) overrides start + timeout_s, so phases before this one (a shape probe) share one budget;
    `elapsed_s` then counts from that budget's start (deadline - timeout_s), so a `timeout` has
    always spent at least `timeout_s`.
    `reading`: the row and byte caps and how text that is not valid UTF-8 is read (`ResultReading`).
    `role` picks the cached connection ("gold" for a gold, so no prediction shares its connection).
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
            rows, columns = _fetch_decoded(conn, sql, reading, held, hit)
            if time.monotonic() > deadline:
                return done("timeout", f"timeout after {timeout_s:g} s")
            return done("ok", rows=rows, columns=columns)
        except _TooLarge as e:
            return done("too_large", str(e))
        except Exception as e:  # untrusted SQL: every failure becomes a status, never an exception
            return done(*_failure(e, sql, db_path, conn.guard.denied, hit[0], timeout_s))
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
