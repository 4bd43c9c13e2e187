"""Sandboxed SQLite execution, result comparison and parallel scoring.

Every reward, filter and metric of the kit runs model-written SQL through `execute`, so the SQL
is treated as untrusted: the database opens read-only, an authorizer allows reads only, one
statement per call, a deadline enforced inside SQLite's VM (progress handler), and caps on rows,
result bytes, string/blob length and heap. `rows_match` compares results in the named modes of
BIRD (§5 EX, sets), the paper's training reward (§4 step 4, multisets, floats to 6 places) and
Spider's test-suite evaluator. `score_batch` scores (pred, gold, db) triples in worker processes,
executing each distinct gold once. `python -m acesql_lib.executor` scores a BIRD prediction file.
"""
from __future__ import annotations

import argparse
import atexit
import functools
import json
import os
import pickle
import re
import sqlite3
import threading
import time
from collections import Counter, OrderedDict, deque
from dataclasses import dataclass, field
from itertools import permutations
from pathlib import Path
from typing import Iterator, Sequence

from tqdm.auto import tqdm

STATUSES = ("ok", "error", "timeout", "too_large", "blocked", "wrong_shape")  # wrong_shape: see _run_task
VALID_STATUSES = ("ok", "wrong_shape")  # a prediction that compiled and has a verdict (not an execution failure)
MODES = ("set", "multiset", "spider")
BIRD_SEPARATOR = "\t----- bird -----\t"  # official BIRD prediction format
MAX_SQL_BYTES = 2_000_000  # UNKNOWN (kit): longer SQL is refused before SQLite parses it
MAX_VALUE_BYTES = 100_000_000  # SQLITE_LIMIT_LENGTH: randomblob(1e9) fails "string or blob too big"
HARD_HEAP_BYTES = 1 << 30  # PRAGMA hard_heap_limit; process-wide, see _open_readonly
DEFAULT_RESULT_BYTES = 256_000_000  # UNKNOWN (kit): approximate result-size cap
PROGRESS_STEPS = 5000  # VM instructions between two deadline checks (well under 1 ms apart)
CACHE_SIZE = 32  # cached connections per process

# Authorizer action codes (sqlite3.h) -> names, for the "blocked" message.
_ACTIONS = {1: "CREATE INDEX", 2: "CREATE TABLE", 3: "CREATE TEMP INDEX", 4: "CREATE TEMP TABLE",
            5: "CREATE TEMP TRIGGER", 6: "CREATE TEMP VIEW", 7: "CREATE TRIGGER", 8: "CREATE VIEW",
            9: "DELETE", 10: "DROP INDEX", 11: "DROP TABLE", 12: "DROP TEMP INDEX", 13: "DROP TEMP TABLE",
            14: "DROP TEMP TRIGGER", 15: "DROP TEMP VIEW", 16: "DROP TRIGGER", 17: "DROP VIEW",
            18: "INSERT", 19: "PRAGMA", 20: "READ", 21: "SELECT", 22: "TRANSACTION", 23: "UPDATE",
            24: "ATTACH", 25: "DETACH", 26: "ALTER TABLE", 27: "REINDEX", 28: "ANALYZE",
            29: "CREATE VTABLE", 30: "DROP VTABLE", 31: "FUNCTION", 32: "SAVEPOINT", 33: "RECURSIVE"}
_READ_ACTIONS = frozenset({sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_RECURSIVE})
_READ_PRAGMAS = frozenset({"table_info", "table_xinfo", "table_list", "index_list", "index_info",
                           "index_xinfo", "foreign_key_list", "database_list", "collation_list"})
_SCHEMA_TABLES = frozenset({"sqlite_master", "sqlite_schema", "sqlite_temp_master", "sqlite_temp_schema"})
_DENIED_FUNCTIONS = frozenset({"load_extension"})
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

    def __init__(self) -> None:
        self.denied = ""
        self.lock = threading.Lock()

    def authorize(self, action: int, arg1, arg2, _db, _source) -> int:
        if action in _READ_ACTIONS:
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() not in _DENIED_FUNCTIONS:
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_PRAGMA and (arg1 or "").lower() in _READ_PRAGMAS:
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_UPDATE and arg1 in _SCHEMA_TABLES:
            # SQLite asks this while binding an eponymous virtual table (json_each, pragma_table_info);
            # IGNORE means "leave these columns unchanged", so nothing can be written through it.
            return sqlite3.SQLITE_IGNORE
        what = " ".join(str(a) for a in (arg1, arg2) if a)
        self.denied = f"{_ACTIONS.get(action, action)} {what}".strip()
        return sqlite3.SQLITE_DENY


class _SandboxConnection(sqlite3.Connection):
    guard: _Guard


class DatabaseOpenError(RuntimeError):
    """The database file is missing or unreadable; the message names the path."""


def _open_readonly(db_path: str | Path) -> _SandboxConnection:
    """Open `db_path` read-only with every limit installed; never creates a file (mode=ro).

    `PRAGMA hard_heap_limit` is process-wide (all SQLite connections in this process share it), so
    it is only ever lowered to HARD_HEAP_BYTES, never raised, and set before the authorizer (which
    denies PRAGMA writes) is installed.
    """
    path = Path(db_path)
    if not path.is_file():
        raise DatabaseOpenError(f"database not found: {path}")
    try:
        conn = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True, isolation_level=None,
                               check_same_thread=False, factory=_SandboxConnection)
    except sqlite3.Error as e:
        raise DatabaseOpenError(f"cannot open database {path}: {e}") from e
    try:
        if hasattr(conn, "enable_load_extension"):  # absent when Python's sqlite3 cannot load extensions at all
            conn.enable_load_extension(False)
        conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES)
        conn.setlimit(sqlite3.SQLITE_LIMIT_SQL_LENGTH, MAX_SQL_BYTES)
        conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
        current = conn.execute("PRAGMA hard_heap_limit").fetchone()[0]
        if current == 0 or current > HARD_HEAP_BYTES:
            conn.execute(f"PRAGMA hard_heap_limit={HARD_HEAP_BYTES}")
        conn.execute("PRAGMA query_only=1")
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # fails now on a corrupt file
    except sqlite3.Error as e:
        conn.close()
        raise DatabaseOpenError(f"cannot read database {path}: {e}") from e
    conn.guard = _Guard()
    conn.set_authorizer(conn.guard.authorize)
    return conn


_CACHE: OrderedDict[str, tuple[tuple, _SandboxConnection]] = OrderedDict()
_CACHE_LOCK = threading.Lock()


def _cached_connection(db_path: str | Path) -> _SandboxConnection:
    """LRU of read-only connections keyed by path; a file changed on disk gets a fresh one."""
    key = os.path.abspath(db_path)
    try:
        st = os.stat(key)
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
    conn = _open_readonly(db_path)
    with _CACHE_LOCK:
        _CACHE[key] = (signature, conn)
        while len(_CACHE) > CACHE_SIZE:
            _CACHE.popitem(last=False)[1][1].close()
    return conn


def _evict(db_path: str | Path) -> None:
    with _CACHE_LOCK:
        hit = _CACHE.pop(os.path.abspath(db_path), None)
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


def _first_word(sql: str) -> str:
    for m in _TOKEN.finditer(sql):
        tok = m.group()
        if not (tok[0].isspace() or tok.startswith("--") or tok.startswith("/*")):
            return tok.upper()[:40]
    return ""


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
    return None


def _approx_bytes(rows: list[tuple]) -> int:
    """Pickled size: C-level, about 4x faster than summing value lengths in Python."""
    return len(pickle.dumps(rows, protocol=pickle.HIGHEST_PROTOCOL))


class _TooLarge(Exception):
    pass


def _fetch(conn: _SandboxConnection, sql: str, max_rows: int, max_result_bytes: int) -> tuple[list, list]:
    """Rows and column names, or raise; caps are checked every 1024 rows."""
    cur = conn.execute(sql)
    try:
        columns = [d[0] for d in cur.description or ()]
        rows: list[tuple] = []
        size = 0
        while batch := cur.fetchmany(1024):
            rows.extend(batch)
            size += _approx_bytes(batch)
            if len(rows) > max_rows:
                raise _TooLarge(f"result has more than {max_rows} rows")
            if size > max_result_bytes:
                raise _TooLarge(f"result larger than about {max_result_bytes} bytes")
        return rows, columns
    finally:
        cur.close()


def execute(db_path: str | Path, sql: str, timeout_s: float = 30.0, max_rows: int = 100_000,
            max_result_bytes: int = DEFAULT_RESULT_BYTES, conn: _SandboxConnection | None = None) -> ExecResult:
    """Run one untrusted SQL statement on `db_path` (read-only) and never raise.

    status: ok | error | timeout (deadline hit inside SQLite, the query is stopped) | too_large (row,
    byte, string/blob or heap cap) | blocked (a write, schema change, ATTACH, PRAGMA, load_extension
    or several statements). `conn` is a connection from `open_readonly`; by default a per-process
    cached one is used.
    """
    start = time.monotonic()

    def done(status: str, error: str = "", rows: list | None = None, columns: list | None = None) -> ExecResult:
        return ExecResult(status, rows or [], error, time.monotonic() - start, columns or [])

    problem = check_sql(sql)
    if problem:
        return done(*problem)
    try:
        conn = conn if conn is not None else _cached_connection(db_path)
    except DatabaseOpenError as e:
        return done("error", str(e))
    deadline = start + timeout_s
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
                rows, columns = _fetch(conn, sql, max_rows, max_result_bytes)
            except sqlite3.OperationalError as e:
                if "Could not decode to UTF-8" not in str(e) or hit[0]:
                    raise
                # Rare invalid UTF-8: run again decoding with U+FFFD (the default str decoder is 4x faster).
                conn.text_factory = _DECODE_REPLACE
                try:
                    rows, columns = _fetch(conn, sql, max_rows, max_result_bytes)
                finally:
                    conn.text_factory = str
            if time.monotonic() > deadline:
                return done("timeout", f"timeout after {timeout_s:g} s")
            return done("ok", rows=rows, columns=columns)
        except _TooLarge as e:
            return done("too_large", str(e))
        except Exception as e:  # untrusted SQL: every failure becomes a status, never an exception
            msg = str(e)
            if conn.guard.denied:
                return done("blocked", f"blocked: {_first_word(sql)} statement needs {conn.guard.denied}, "
                                       "which the read-only sandbox does not allow")
            if hit[0]:
                return done("timeout", f"timeout after {timeout_s:g} s")
            if (isinstance(e, sqlite3.ProgrammingError) and "one statement" in msg) or any(w in msg for w in _WRITES):
                return done("blocked", f"blocked: {msg}")
            if isinstance(e, MemoryError) or "string or blob too big" in msg or "out of memory" in msg:
                return done("too_large", f"too large: {msg or type(e).__name__}")
            if any(c in msg for c in _CORRUPT):
                _evict(db_path)
                return done("error", f"cannot read database {db_path}: {msg}")
            return done("error", f"{type(e).__name__}: {msg}")
        finally:
            conn.set_progress_handler(None, PROGRESS_STEPS)


def result_width(db_path: str | Path, sql: str, conn: _SandboxConnection | None = None) -> int | None:
    """How many columns `sql` returns, read from its compiled program (EXPLAIN: prepared, never
    run), so a query whose answer cannot match is known wrong before it spends its deadline.
    None when it does not compile here; `execute` then reports why."""
    if check_sql(sql):
        return None
    try:
        conn = conn if conn is not None else _cached_connection(db_path)
    except DatabaseOpenError:
        return None
    with conn.guard.lock:  # a denial noted here is reset by execute() before it runs anything
        try:
            cur = conn.execute("EXPLAIN " + sql)
            try:
                return next((row[3] for row in cur if row[1] == "ResultRow"), None)
            finally:
                cur.close()
        except Exception:  # noqa: BLE001 - untrusted SQL; execute() classifies the failure
            return None


open_readonly = _open_readonly


# --------------------------------------------------------------------------- comparison

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


# --------------------------------------------------------------------------- batches

@dataclass
class Score:
    correct: bool
    pred_status: str
    pred_error: str = ""
    gold_status: str = "ok"
    gold_error: str = ""
    pred_elapsed_s: float = 0.0


class ScoreList(list):
    """`list[Score]` in input order, plus what went wrong outside the predictions."""

    def __init__(self, n: int) -> None:
        super().__init__([None] * n)
        self.gold_failures = 0  # distinct (db, gold SQL) that did not run; their triples score 0 (BIRD)
        self.failed_golds: list[tuple[str, str, str, str]] = []  # (db_path, gold_sql, status, error)
        self.worker_deaths = 0


@dataclass
class _Task:
    """One distinct (db, gold) and the predictions scored against it, run by one worker."""

    db_path: str
    gold_sql: str
    preds: list[tuple[int, str]]
    mode: str
    permute_columns: bool
    order_matters: bool
    timeout_s: float
    max_rows: int
    gold_known: tuple[str, str] | None = None  # (status, error) when the gold already failed


_GOLD_CACHE: OrderedDict[tuple, ExecResult] = OrderedDict()  # per process, "ok" results only
_GOLD_CACHE_SIZE, _GOLD_CACHE_MAX_ROWS = 256, 20_000
_NONDETERMINISTIC = re.compile(r"random|changes\s*\(|last_insert_rowid|'now'", re.IGNORECASE)


def _gold_result(task: _Task) -> ExecResult:
    try:
        st = os.stat(task.db_path)
        key = (os.path.abspath(task.db_path), st.st_ino, st.st_mtime_ns, task.gold_sql, task.max_rows)
    except OSError:
        key = None
    if key is not None and key in _GOLD_CACHE:
        _GOLD_CACHE.move_to_end(key)
        return _GOLD_CACHE[key]
    result = execute(task.db_path, task.gold_sql, task.timeout_s, task.max_rows)
    if key is not None and result.status == "ok" and len(result.rows) <= _GOLD_CACHE_MAX_ROWS:
        _GOLD_CACHE[key] = result
        while len(_GOLD_CACHE) > _GOLD_CACHE_SIZE:
            _GOLD_CACHE.popitem(last=False)
    return result


def _run_task(task: _Task) -> Iterator[tuple]:
    """Messages ("gold", status, error) then ("pred", index, Score) per prediction, in order.

    A prediction textually equal to the gold or to an earlier prediction of the same group reuses
    that result (a read-only database answers a deterministic query the same way twice). When the
    gold returned rows, a prediction with another number of columns cannot match in any mode: it is
    compiled but not run, status "wrong_shape" (a slow or runaway wrong query costs a prepare).
    """
    if task.gold_known is None:
        gold = _gold_result(task)
        gold_status, gold_error = gold.status, gold.error
        yield ("gold", gold_status, gold_error)
    else:
        gold, (gold_status, gold_error) = None, task.gold_known
    seen: dict[str, ExecResult] = {task.gold_sql: gold} if gold is not None else {}
    width = len(gold.columns) if gold is not None and gold_status == "ok" and gold.rows else None
    for idx, sql in task.preds:
        result = seen.get(sql) if isinstance(sql, str) else None
        if result is None and width is not None and isinstance(sql, str):
            got = result_width(task.db_path, sql)
            if got is not None and got != width:
                result = ExecResult("wrong_shape", error=f"returns {got} column(s), the gold's rows have {width}: "
                                                         "cannot match, so it was compiled but not run")
        if result is None:
            result = execute(task.db_path, sql, task.timeout_s, task.max_rows)
        if isinstance(sql, str) and sql not in seen and not _NONDETERMINISTIC.search(sql):
            seen[sql] = result
        correct = (gold is not None and gold_status == "ok" and result.status == "ok"
                   and rows_match(result.rows, gold.rows, task.mode, permute_columns=task.permute_columns,
                                  order_matters=task.order_matters))
        yield ("pred", idx, Score(correct, result.status, result.error, gold_status, gold_error, result.elapsed_s))


FLUSH_S = 0.01  # a busy worker sends its answers at least this often
QUEUE_DEPTH = 4  # groups assigned to a worker ahead of its answers, so it never waits for the parent


def _task_items(seq: int, task: _Task) -> list[tuple]:
    """The order in which a worker answers a task: ("gold", seq) then ("pred", seq, index)."""
    head = [("gold", seq)] if task.gold_known is None else []
    return head + [("pred", seq, idx) for idx, _ in task.preds]


def _worker_main(conn, cursor) -> None:
    """Worker process loop: run the tasks the parent streams in, answering in batches (every
    FLUSH_S, and whenever it would otherwise wait for work), until the parent sends None or goes
    away. `cursor` (shared memory) counts the items started so far, so after a crash the parent
    knows exactly which item was running."""
    import signal
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    started, out, last = 0, [], time.monotonic()
    while True:
        if out and not conn.poll():  # about to wait for work: send what is done first
            conn.send(out)
            out, last = [], time.monotonic()
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        seq, task = msg
        answers = _run_task(task)
        while True:
            cursor.value = started + 1  # set before the item runs
            try:
                answer = next(answers)
            except StopIteration:
                cursor.value = started
                break
            started += 1
            out.append(("gold", seq, *answer[1:]) if answer[0] == "gold" else answer)
            if time.monotonic() - last > FLUSH_S:
                conn.send(out)
                out, last = [], time.monotonic()


class _Worker:
    def __init__(self, ctx) -> None:
        self.conn, child = ctx.Pipe()
        self.cursor = ctx.RawValue("q", 0)
        self.proc = ctx.Process(target=_worker_main, args=(child, self.cursor), daemon=True, name="acesql-executor")
        self.proc.start()
        child.close()
        self.tasks: dict[int, _Task] = {}  # assigned and not fully answered, by sequence number
        self.pending: deque[tuple] = deque()  # their items in answer order; the first is next to answer
        self.answered = 0  # items answered since the worker started (the cursor counts items started)
        self.gold: dict[int, tuple[str, str]] = {}  # task seq -> gold outcome once known
        self.seq = 0
        self.last_seen = time.monotonic()

    @property
    def busy(self) -> bool:
        return bool(self.tasks)

    def assign(self, task: _Task) -> None:
        seq, self.seq = self.seq, self.seq + 1
        if not self.tasks:
            self.last_seen = time.monotonic()
        self.tasks[seq] = task
        if task.gold_known is not None:
            self.gold[seq] = task.gold_known
        self.pending.extend(_task_items(seq, task))
        try:
            self.conn.send((seq, task))
        except OSError:  # the worker is gone; the pool sees it dead and hands the task to another
            pass

    def answer(self) -> None:
        """Pop the next pending item; forget its task once all of it is answered."""
        item = self.pending.popleft()
        self.answered += 1
        if not self.pending or self.pending[0][1] != item[1]:
            self.tasks.pop(item[1], None)
            self.gold.pop(item[1], None)

    def in_flight(self) -> tuple | None:
        """The item running now (or when the worker died): started but not answered."""
        ahead = self.cursor.value - 1 - self.answered
        return self.pending[ahead] if 0 <= ahead < len(self.pending) else None

    def stop(self) -> None:
        try:
            self.conn.send(None)
        except OSError:
            pass
        self.proc.join(timeout=1.0)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()
        self.conn.close()


class _Pool:
    """Worker processes with one pipe each. Each worker is kept QUEUE_DEPTH groups ahead and answers
    in batches, so neither the pipes nor the parent hold it up on fast queries, while groups are
    still handed out one by one (a slow group does not hold others back). Messages go over an
    unbuffered Pipe (not a Queue with a feeder thread), so after a death every answer the worker
    sent can still be read, and a shared cursor tells which item was running."""

    def __init__(self, n_workers: int) -> None:
        import multiprocessing as mp
        # forkserver: fork-safe in threaded parents (torch, tokenizers) and starts fast after the first.
        self.ctx = mp.get_context("forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn")
        self.workers = [_Worker(self.ctx) for _ in range(n_workers)]
        self.lock = threading.Lock()

    def busy_items(self) -> dict[int, tuple[str, int]]:
        """pid -> ("gold", first index of its group) or ("pred", index) for what each worker runs now."""
        out = {}
        for w in list(self.workers):
            try:
                item = w.in_flight()
                if item is not None:
                    out[w.proc.pid] = ("gold", w.tasks[item[1]].preds[0][0]) if item[0] == "gold" else ("pred", item[2])
            except (IndexError, KeyError, RuntimeError):  # read while the parent updates it
                continue
        return out

    def run(self, tasks: list[_Task], on_gold, on_pred) -> int:
        """Run every task, calling on_gold(task, status, error) and on_pred(index, Score); returns deaths."""
        from multiprocessing.connection import wait
        with self.lock:
            queue, deaths = deque(tasks), 0
            while queue or any(w.busy for w in self.workers):
                for w in self.workers:
                    while queue and len(w.tasks) < QUEUE_DEPTH:
                        w.assign(queue.popleft())
                busy = [w for w in self.workers if w.busy]
                wait([w.conn for w in busy] + [w.proc.sentinel for w in busy], timeout=0.5)
                for w in busy:
                    dead = not w.proc.is_alive()  # checked before draining: nothing sent after it is missed
                    dead = not self._drain(w, on_gold, on_pred) or dead
                    if not w.busy:
                        continue
                    limit = 2 * max(t.timeout_s for t in w.tasks.values()) + 5  # the deadline lives in SQLite
                    if dead:
                        reason = "worker died"
                    elif time.monotonic() - w.last_seen > limit:
                        w.proc.kill()
                        w.proc.join(timeout=5)
                        reason = f"worker killed: no answer within {limit:g} s"
                    else:
                        continue
                    deaths += 1
                    queue.extendleft(reversed(self._salvage(w, reason, on_gold, on_pred)))
                    w.proc.join(timeout=5)
                    w.conn.close()
                    self.workers[self.workers.index(w)] = _Worker(self.ctx)
            return deaths

    @staticmethod
    def _drain(w: _Worker, on_gold, on_pred) -> bool:
        """Handle every batch waiting from `w`; False when its pipe is closed (worker gone)."""
        while w.busy:
            try:
                if not w.conn.poll():
                    return True
                batch = w.conn.recv()
            except (EOFError, OSError, pickle.UnpicklingError):  # closed, or a message cut short by the death
                return False
            w.last_seen = time.monotonic()
            for msg in batch:
                task = w.tasks[w.pending[0][1]]
                if msg[0] == "gold":
                    w.gold[msg[1]] = (msg[2], msg[3])
                    on_gold(task, msg[2], msg[3])
                else:
                    on_pred(msg[1], msg[2])
                w.answer()
        return True

    @staticmethod
    def _salvage(w: _Worker, reason: str, on_gold, on_pred) -> list[_Task]:
        """Mark the in-flight item failed; return what is left of the worker's tasks for others
        (answers it computed but had not sent yet are simply run again)."""
        item = w.in_flight()
        if item is not None and item[0] == "gold":  # died on the gold: the group scores 0, preds still run
            w.gold[item[1]] = ("error", f"{reason} while executing the gold SQL")
            on_gold(w.tasks[item[1]], *w.gold[item[1]])
        elif item is not None:
            on_pred(item[2], Score(False, "error", reason, *w.gold.get(item[1], ("ok", ""))))
        left: dict[int, set[int]] = {}
        for it in w.pending:
            if it[0] == "pred" and it != item:
                left.setdefault(it[1], set()).add(it[2])
        rest = []
        for seq, indexes in left.items():
            task, known = w.tasks[seq], w.gold.get(seq)  # a failed gold stays failed; one that ran fine runs again
            rest.append(_Task(**{**task.__dict__, "preds": [p for p in task.preds if p[0] in indexes],
                                 "gold_known": known if known and known[0] != "ok" else None}))
        w.tasks.clear()
        w.pending.clear()
        return rest

    def shutdown(self) -> None:
        for w in self.workers:
            w.stop()
        self.workers = []


_POOL: _Pool | None = None


def shared_pool(n_workers: int) -> _Pool:
    """The process-wide worker pool, kept between calls so connections and gold caches stay warm."""
    global _POOL
    if _POOL is None or len(_POOL.workers) != n_workers:
        shutdown_pool()
        _POOL = _Pool(n_workers)
    return _POOL


def shutdown_pool() -> None:
    global _POOL
    if _POOL is not None:
        _POOL.shutdown()
        _POOL = None


atexit.register(shutdown_pool)


def score_batch(items: Sequence[tuple[str, str, str | Path]], mode: str = "multiset", timeout_s: float = 30.0,
                workers: int = 0, progress: bool = True, max_rows: int = 100_000,
                permute_columns: bool = False) -> ScoreList:
    """Score (pred_sql, gold_sql, db_path) triples; `ScoreList` of `Score` in input order.

    Triples are grouped by (db, gold): a worker executes the gold once, then that group's
    predictions, and compares in place, so gold rows never cross a process boundary and the 8
    rollouts of an RL question cost 9 executions, not 16. Workers persist between calls (warm
    connections, a small gold-result cache); a dead worker is replaced and only its in-flight
    triple is marked "worker died". A failed gold scores 0 and is counted in `gold_failures`.
    workers=0 means os.cpu_count(); fewer than 16 triples run in this process.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    groups: dict[tuple[str, str], list[tuple[int, str]]] = {}
    for i, (pred, gold, db) in enumerate(items):
        groups.setdefault((str(db), gold), []).append((i, pred))
    tasks = [_Task(db, gold, preds, mode, permute_columns,
                   mode == "spider" and isinstance(gold, str) and gold_has_order_by(gold), timeout_s, max_rows)
             for (db, gold), preds in groups.items()]
    # Largest groups first so one long group does not finish last on its own.
    tasks.sort(key=lambda t: -len(t.preds))
    out = ScoreList(len(items))
    reported: set[tuple[str, str]] = set()
    bar = tqdm(total=len(items), desc=f"score ({mode})", disable=not progress, leave=False)

    def on_gold(task: _Task, status: str, error: str) -> None:
        key = (task.db_path, task.gold_sql)
        if status != "ok" and key not in reported:
            reported.add(key)
            out.gold_failures += 1
            out.failed_golds.append((task.db_path, task.gold_sql, status, error))

    def on_pred(idx: int, score: Score) -> None:
        out[idx] = score
        bar.update(1)

    n_workers = workers or os.cpu_count() or 1
    if len(items) < 16 or n_workers == 1:
        for task in tasks:
            for msg in _run_task(task):
                on_gold(task, *msg[1:]) if msg[0] == "gold" else on_pred(*msg[1:])
    else:
        try:
            out.worker_deaths = shared_pool(n_workers).run(tasks, on_gold, on_pred)
        except BaseException:  # e.g. Ctrl-C: workers may hold half-sent tasks, so start afresh next time
            shutdown_pool()
            raise
        finally:
            bar.close()
    bar.close()  # closing twice is harmless
    return out


# --------------------------------------------------------------------------- BIRD files and CLI

def write_bird_predictions(path: str | Path, sqls: Sequence[str], db_ids: Sequence[str]) -> None:
    """Write predictions in BIRD's official format: {"0": "SQL\\t----- bird -----\\tdb_id", ...}."""
    if len(sqls) != len(db_ids):
        raise ValueError(f"{len(sqls)} SQLs but {len(db_ids)} db_ids")
    for i, sql in enumerate(sqls):
        if BIRD_SEPARATOR in sql:
            raise ValueError(f"prediction {i} contains the BIRD separator {BIRD_SEPARATOR!r}")
    data = {str(i): f"{sql}{BIRD_SEPARATOR}{db}" for i, (sql, db) in enumerate(zip(sqls, db_ids))}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(data, indent=1, ensure_ascii=False), encoding="utf-8")


def read_bird_predictions(path: str | Path) -> dict[int, tuple[str, str]]:
    """Index -> (SQL, db_id) from an official BIRD prediction file; bad entries raise naming the key."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object of index -> 'SQL\\t----- bird -----\\tdb_id'")
    out = {}
    for key, value in data.items():
        if not isinstance(value, str) or BIRD_SEPARATOR not in value or not key.isdigit():
            raise ValueError(f"{path}: entry {key!r} is not 'SQL{BIRD_SEPARATOR!r}db_id'")
        sql, db_id = value.rsplit(BIRD_SEPARATOR, 1)
        out[int(key)] = (sql, db_id.strip())
    return out


def bird_ex_by_difficulty(scores: Sequence[Score], difficulties: Sequence[str]) -> dict[str, tuple[float, int]]:
    """{level: (EX %, count)} for simple / moderate / challenging / total, as BIRD's script prints."""
    table = {}
    for level in ("simple", "moderate", "challenging", "total"):
        hits = [s.correct for s, d in zip(scores, difficulties) if level == "total" or d == level]
        table[level] = (100.0 * sum(hits) / len(hits) if hits else 0.0, len(hits))
    return table


def main(argv: Sequence[str] | None = None) -> dict[str, tuple[float, int]]:
    ap = argparse.ArgumentParser(description="Score a BIRD prediction file (execution accuracy).")
    ap.add_argument("--pred", required=True, help="predict_dev.json (official BIRD format)")
    ap.add_argument("--gold", required=True, help="dev.json (records with SQL, db_id, difficulty)")
    ap.add_argument("--db-root", required=True, help="folder holding <db_id>/<db_id>.sqlite")
    ap.add_argument("--mode", default="set", choices=MODES, help="set = official BIRD EX")
    ap.add_argument("--timeout", type=float, default=30.0)
    ap.add_argument("--workers", type=int, default=0)
    args = ap.parse_args(argv)
    gold = json.loads(Path(args.gold).read_text(encoding="utf-8"))
    preds = read_bird_predictions(args.pred)
    items = []
    for i, rec in enumerate(gold):
        if not isinstance(rec, dict) or not isinstance(rec.get("SQL"), str) or not isinstance(rec.get("db_id"), str):
            raise ValueError(f"{args.gold}: record {i} needs string fields 'SQL' and 'db_id'")
        sql, _ = preds.get(i, ("", rec["db_id"]))  # a missing prediction scores 0 ("empty SQL")
        items.append((sql, rec["SQL"], Path(args.db_root) / rec["db_id"] / f"{rec['db_id']}.sqlite"))
    scores = score_batch(items, mode=args.mode, timeout_s=args.timeout, workers=args.workers)
    table = bird_ex_by_difficulty(scores, [rec.get("difficulty", "") for rec in gold])
    levels = list(table)
    print("{:20} {:20} {:20} {:20} {:20}".format("", *levels))
    print("{:20} {:<20} {:<20} {:<20} {:<20}".format("count", *(table[k][1] for k in levels)))
    print("======================================    ACCURACY    =====================================")
    print("{:20} {:<20.2f} {:<20.2f} {:<20.2f} {:<20.2f}".format("accuracy", *(table[k][0] for k in levels)))
    missing = len(gold) - sum(1 for i in range(len(gold)) if i in preds)
    print(f"missing predictions: {missing}; failed gold queries: {scores.gold_failures}; "
          f"worker deaths: {scores.worker_deaths}")
    return table


if __name__ == "__main__":
    main()
