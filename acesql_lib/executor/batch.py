"""Untrusted SQL in worker processes, under a hard deadline and a memory bound: `execute` (one
statement, rows back) and `score_batch` (pred/gold triples, verdicts back).

Why processes: SQLite compiles a statement, and runs one function call, without calling the
progress handler that enforces the deadline (sandbox.py), and Python's copies of a result are
outside SQLite's heap limit. So every untrusted statement runs in a worker that
- caps its own address space (`resource.setrlimit(RLIMIT_AS)`, WORKER_MEMORY_BYTES above what it
  held at start): an allocation past it fails with MemoryError and the statement is `too_large`;
- publishes when each SQL phase (a gold's execution; a prediction's shape probe + execution +
  comparison, one budget) started and its hard limit, HARD_FACTOR x the deadline + HARD_MARGIN_S,
  and the parent kills and replaces a worker that overruns it: a runaway compile, function call or
  comparison returns `timeout` within 1.5x the deadline.
Workers start from the executor's module alone, never the caller's script or `-m` module (which
`multiprocessing` would otherwise run in each). Workers that die before running anything,
STARTUP_DEATHS in a row, raise WorkerStartupError instead of being respawned without end.
The caller's process never runs untrusted SQL unless it asks (`in_process=True`).
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Sequence

from ..runtime.progress import tqdm

from . import pools
from .compare import MODES, gold_has_order_by
from .pools import POOLS
from .sandbox import DEFAULT_MAX_ROWS, DEFAULT_RESULT_BYTES, ExecResult, ResultReading, execute_here
from .tasks import Score, ScoreList, _run_task, _Task


def execute(db_path: str | Path, sql: str, timeout_s: float = 30.0, max_rows: int = DEFAULT_MAX_ROWS,
            max_result_bytes: int = DEFAULT_RESULT_BYTES, conn=None, in_process: bool = False) -> ExecResult:
    """Run one untrusted SQL statement on `db_path` (read-only) and never raise.

    Runs in a worker process under a hard deadline (every phase, compile included, returns within
    HARD_FACTOR x timeout_s + HARD_MARGIN_S) and the worker memory bound; statuses as
    `sandbox.execute_here`; raises WorkerStartupError when workers cannot start at all.
    `in_process=True` (or a `conn` from `open_readonly`) runs it in this
    process instead: faster for trusted SQL, but then a runaway compile or a huge result is this
    process's problem. `max_rows` 0 means no row cap; the byte cap still holds, counted as this
    process will hold the rows (sandbox.HELD_ROW_BYTES a row and HELD_VALUE_BYTES a value beyond text
    and blob lengths), so it bounds the caller's memory and, at 64 bytes or more a row, the row count.
    Safe from any number of threads: each call runs on a worker of its own, up to
    pools.EXECUTE_WORKERS at once; a call beyond that waits, first come first served, for one to
    come free, and its deadline counts from when its worker starts it.
    """
    reading = ResultReading(max_rows, max_result_bytes)
    if in_process or conn is not None:
        return execute_here(db_path, sql, timeout_s, reading, conn=conn, held=True)
    start = time.monotonic()
    task = _Task(str(db_path), "", [(0, sql)], "multiset", False, False, timeout_s, reading, kind="rows")
    got: list = []
    with pools.POOLS.single_pool() as pool:  # a worker of this call's own (pools.EXECUTE_WORKERS at once)
        pool.run([task], lambda *_: None, lambda _idx, r: got.append(r))
    r = got[0]
    if isinstance(r, Score):  # the worker died or was stopped at the hard deadline
        return ExecResult(r.pred_status, error=r.pred_error, elapsed_s=time.monotonic() - start)
    return r


def score_batch(items: Sequence[tuple[str, str, str | Path]], mode: str = "multiset", timeout_s: float = 30.0,
                workers: int = 0, progress: bool = True, reading: ResultReading = ResultReading(),
                permute_columns: bool = False, in_process: bool = False) -> ScoreList:
    """Score (pred_sql, gold_sql, db_path) triples; `ScoreList` of `Score` in input order.

    Triples are grouped by (db, gold): a worker executes the gold once, then that group's
    predictions, and compares in place, so gold rows never cross a process boundary and the 8
    rollouts of an RL question cost 9 executions, not 16. Workers persist between calls (warm
    connections, a small gold-result cache); a dead worker is replaced and only its in-flight
    triple is marked "worker died"; one past its hard deadline is killed and that triple is a
    "timeout". A failed gold scores 0 and is counted in `gold_failures`. workers=0 means
    os.cpu_count(). `in_process=True` runs everything in this process (trusted SQL only: no hard
    deadline, no memory bound). `reading`: each result's row cap (0: none) and byte cap, and whether
    invalid UTF-8 text in a result makes that SQL an error (the official BIRD evaluators' reading)
    instead of U+FFFD (`ResultReading`). From several threads: calls with the same `workers` take
    turns on that pool, calls with different ones run at once on pools of their own.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    groups: dict[tuple[str, str], list[tuple[int, str]]] = {}
    for i, (pred, gold, db) in enumerate(items):
        groups.setdefault((str(db), gold), []).append((i, pred))
    tasks = [_Task(db, gold, preds, mode, permute_columns,
                   mode == "spider" and isinstance(gold, str) and gold_has_order_by(gold), timeout_s, reading)
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

    try:
        if in_process:
            for task in tasks:
                for msg in _run_task(task):
                    on_gold(task, *msg[1:]) if msg[0] == "gold" else on_pred(*msg[1:])
        elif tasks:
            with POOLS.batch_pool(workers or os.cpu_count() or 1) as pool:
                out.worker_deaths = pool.run(tasks, on_gold, on_pred)
    finally:
        bar.close()
    return out
