"""The executor called from many threads at once: each execute() call gets a worker of its own (up
to pools.EXECUTE_WORKERS) and keeps its own deadline, and score_batch calls on one pool or on
pools of different sizes all return every verdict. Bounds are generous hang guards, not timings."""
import threading
import time

import pytest

from helpers_db import sqlite_db
from acesql_lib.executor import execute, pools, score_batch

RUNAWAY = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"
HANG_GUARD_S = 120


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    rows = ", ".join(f"({i}, 'v{i % 7}')" for i in range(300))
    return str(sqlite_db(tmp_path_factory.mktemp("threads") / "t.sqlite",
                         f"CREATE TABLE t (a INTEGER, b TEXT); INSERT INTO t VALUES {rows};"))


def _in_threads(n, fn):
    """fn(i) in n threads started together; their results in order (an exception is a result)."""
    results, start = [None] * n, threading.Barrier(n)

    def run(i):
        start.wait()
        try:
            results[i] = fn(i)
        except BaseException as e:  # noqa: BLE001 - reported as the thread's result
            results[i] = e
    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(HANG_GUARD_S)
    assert not any(t.is_alive() for t in threads), "a call hung"
    return results


def test_eight_threads_each_get_a_worker_and_keep_their_own_deadline(db):
    execute(db, "SELECT 1")  # the worker machinery started once, as in a long-running caller

    def call(i):
        start = time.monotonic()
        r = execute(db, RUNAWAY, timeout_s=1.0)
        return r.status, time.monotonic() - start

    results = _in_threads(8, call)
    assert [r[0] for r in results] == ["timeout"] * 8, results
    # one worker for all would return the eighth after about 8 s; each has its own, so none is near that
    assert max(r[1] for r in results) < 5.0, results
    assert len({w.proc.pid for p in pools.POOLS.free for w in p.workers if w is not None}) >= 2


def test_calls_beyond_the_worker_count_wait_their_turn_and_all_return(db):
    n = pools.EXECUTE_WORKERS + 3
    results = _in_threads(n, lambda i: execute(db, RUNAWAY if i % 4 else f"SELECT {i}", timeout_s=0.5))
    assert [r.status for r in results] == ["ok" if i % 4 == 0 else "timeout" for i in range(n)]
    assert [r.rows for r in results[::4]] == [[(i,)] for i in range(0, n, 4)]
    assert pools.POOLS.singles <= pools.EXECUTE_WORKERS


def _batch(db, i, n_workers):
    """A batch of its own per thread: copies of a gold, then right and wrong answers."""
    gold = f"SELECT a FROM t WHERE a % {i + 2} = 0"
    items = [(gold, gold, db)] * 5 + [(f"SELECT {k}", f"SELECT {k + (k % 3 == 0)}", db) for k in range(30)]
    return [s.correct for s in score_batch(items, timeout_s=10, workers=n_workers, progress=False)]


WANT = [True] * 5 + [k % 3 != 0 for k in range(30)]


def test_eight_threads_score_batch_on_one_pool(db):
    results = _in_threads(8, lambda i: _batch(db, i, 2))
    assert results == [WANT] * 8, [r for r in results if isinstance(r, BaseException)]


def test_eight_threads_score_batch_on_pools_of_different_sizes(db):
    for _round in range(2):
        results = _in_threads(8, lambda i: _batch(db, i, 1 + i % 4))
        assert results == [WANT] * 8, [r for r in results if isinstance(r, BaseException)]
    one = score_batch([("SELECT 1", "SELECT 1", db)], workers=3, progress=False)  # the pools still work after
    assert one[0].correct
