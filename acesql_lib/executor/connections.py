"""Read-only SQLite connections with every bound SQLite itself enforces, and the per-process cache of them.

`open_readonly` opens a file read-only (`mode=ro`, `query_only`, a private cache), never creating one, with
limits on SQL length, expression depth, compound selects, program size and value length, a process-wide heap
limit with temporary tables kept in that heap (`temp_store=MEMORY`, so a huge sort cannot fill the disk), and
the authorizer (`authorizer._Guard`). `cached_connection` keeps them by path and role, so a gold and the
predictions scored against it never share a connection.
"""
from __future__ import annotations

import os
import sqlite3
import threading
from collections import OrderedDict
from pathlib import Path

from .authorizer import _Guard, _module_names
from .statements import MAX_SQL_BYTES

MAX_VALUE_BYTES = 100_000_000  # SQLITE_LIMIT_LENGTH: randomblob(1e9) fails "string or blob too big"
MAX_EXPR_DEPTH = 500  # SQLITE_LIMIT_EXPR_DEPTH (SQLite default 1000)
MAX_COMPOUND_SELECT = 200  # SQLITE_LIMIT_COMPOUND_SELECT (default 500)
MAX_VDBE_OPS = 1_000_000  # SQLITE_LIMIT_VDBE_OP: compiled program size (a 160,000-value IN list fits)
HARD_HEAP_BYTES = 512 << 20  # PRAGMA hard_heap_limit (SQLite's own memory, temp tables included); process-wide
CACHE_SIZE = 64  # cached connections per process (a gold and a prediction connection per database)


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
