"""Untrusted SQL in worker processes, under a hard deadline and a memory bound: `execute` (one
statement, rows back) and `score_batch` (pred/gold triples, verdicts back).

Why processes: SQLite compiles a statement, and runs one function call, without calling the
progress handler that enforces the deadline (sandbox.py), and Python's copies of a result are
outside SQLite's heap limit. So every untrusted statement runs in a worker that
- caps its own address space (`resource.setrlimit(RLIMIT_AS)`, WORKER_MEMORY_BYTES above what it
  held at start): an allocation past it fails with MemoryError and the statement is `too_large`;
- publishes when each SQL phase (shape probe + execution, one budget) started and its hard limit,
  HARD_FACTOR x the deadline + HARD_MARGIN_S, and the parent kills and replaces a worker that
  overruns it: a runaway compile or function call returns `timeout` within 1.5x the deadline.
The caller's process never runs untrusted SQL unless it asks (`in_process=True`).
"""
from __future__ import annotations

import atexit
import os
import pickle
import re
import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

from tqdm.auto import tqdm

from .compare import MODES, gold_has_order_by, rows_match
from .sandbox import DEFAULT_MAX_ROWS, DEFAULT_RESULT_BYTES, ExecResult, execute_here, result_width

HARD_FACTOR = 1.1  # a worker still inside one SQL phase at 1.1 x its deadline (+ margin) is killed
HARD_MARGIN_S = 0.05
WORKER_MEMORY_BYTES = 2 << 30  # address space a worker may add to what it holds at start (RLIMIT_AS)


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
        self.worker_deaths = 0  # workers that died or were killed at a hard deadline


@dataclass
class _Task:
    """One distinct (db, gold) and the predictions scored against it, run by one worker.
    kind "rows": no gold; the one prediction's ExecResult (rows included) is the answer."""

    db_path: str
    gold_sql: str
    preds: list[tuple[int, str]]
    mode: str
    permute_columns: bool
    order_matters: bool
    timeout_s: float
    max_rows: int
    max_result_bytes: int = DEFAULT_RESULT_BYTES
    gold_known: tuple[str, str] | None = None  # (status, error) when the gold already failed
    kind: str = "score"


class _Clock:
    """When the current SQL phase started and its hard limit, in memory the parent reads."""

    def __init__(self, shared=None) -> None:
        self.shared = shared  # RawArray('d', 2): [monotonic start or 0, hard limit s]

    def begin(self, timeout_s: float) -> float:
        now = time.monotonic()
        if self.shared is not None:
            self.shared[1] = HARD_FACTOR * timeout_s + HARD_MARGIN_S
            self.shared[0] = now
        return now + timeout_s

    def end(self) -> None:
        if self.shared is not None:
            self.shared[0] = 0.0


_GOLD_CACHE: OrderedDict[tuple, ExecResult] = OrderedDict()  # per process, "ok" results only
_GOLD_CACHE_SIZE, _GOLD_CACHE_MAX_ROWS = 256, 20_000
_NONDETERMINISTIC = re.compile(r"random|changes\s*\(|last_insert_rowid|'now'", re.IGNORECASE)


def _timed_execute(task: _Task, sql: str, clock: _Clock, probe_width: int | None = None) -> ExecResult:
    """One SQL phase under one deadline: the optional shape probe (a compile) and the execution."""
    deadline = clock.begin(task.timeout_s)
    try:
        if probe_width is not None:
            got = result_width(task.db_path, sql)
            if got is not None and got != probe_width:
                return ExecResult("wrong_shape", error=f"returns {got} column(s), the gold's rows have {probe_width}: "
                                                       "cannot match, so it was compiled but not run")
        return execute_here(task.db_path, sql, task.timeout_s, task.max_rows, task.max_result_bytes, deadline=deadline)
    finally:
        clock.end()


def _gold_result(task: _Task, clock: _Clock) -> ExecResult:
    try:
        st = os.stat(task.db_path)
        key = (os.path.abspath(task.db_path), st.st_ino, st.st_mtime_ns, task.gold_sql, task.max_rows,
               task.max_result_bytes)
    except OSError:
        key = None
    if key is not None and key in _GOLD_CACHE:
        _GOLD_CACHE.move_to_end(key)
        return _GOLD_CACHE[key]
    result = _timed_execute(task, task.gold_sql, clock)
    if key is not None and result.status == "ok" and len(result.rows) <= _GOLD_CACHE_MAX_ROWS:
        _GOLD_CACHE[key] = result
        while len(_GOLD_CACHE) > _GOLD_CACHE_SIZE:
            _GOLD_CACHE.popitem(last=False)
    return result


def _run_task(task: _Task, clock: _Clock | None = None) -> Iterator[tuple]:
    """Messages ("gold", status, error) then ("pred", index, Score) per prediction, in order
    (kind "rows": one ("pred", index, ExecResult)).

    A prediction textually equal to the gold or to an earlier prediction of the same group reuses
    that result (a read-only database answers a deterministic query the same way twice). When the
    gold returned rows, a prediction with another number of columns cannot match in any mode: it is
    compiled but not run, status "wrong_shape" (a slow or runaway wrong query costs a prepare).
    """
    clock = clock or _Clock()
    if task.kind == "rows":
        idx, sql = task.preds[0]
        yield ("pred", idx, _timed_execute(task, sql, clock))
        return
    if task.gold_known is None:
        gold = _gold_result(task, clock)
        gold_status, gold_error = gold.status, gold.error
        yield ("gold", gold_status, gold_error)
    else:
        gold, (gold_status, gold_error) = None, task.gold_known
    seen: dict[str, ExecResult] = {task.gold_sql: gold} if gold is not None else {}
    width = len(gold.columns) if gold is not None and gold_status == "ok" and gold.rows else None
    for idx, sql in task.preds:
        result = seen.get(sql) if isinstance(sql, str) else None
        if result is None:
            result = _timed_execute(task, sql, clock, probe_width=width if isinstance(sql, str) else None)
        if isinstance(sql, str) and sql not in seen and not _NONDETERMINISTIC.search(sql):
            seen[sql] = result
        try:
            correct = (gold is not None and gold_status == "ok" and result.status == "ok"
                       and rows_match(result.rows, gold.rows, task.mode, permute_columns=task.permute_columns,
                                      order_matters=task.order_matters))
        except MemoryError:
            result, correct = ExecResult("too_large", error="too large: comparing the results ran out of memory"), False
        yield ("pred", idx, Score(correct, result.status, result.error, gold_status, gold_error, result.elapsed_s))


FLUSH_S = 0.01  # a busy worker sends its answers at least this often
QUEUE_DEPTH = 4  # groups assigned to a worker ahead of its answers, so it never waits for the parent


def _task_items(seq: int, task: _Task) -> list[tuple]:
    """The order in which a worker answers a task: ("gold", seq) then ("pred", seq, index)."""
    head = [("gold", seq)] if task.gold_known is None and task.kind == "score" else []
    return head + [("pred", seq, idx) for idx, _ in task.preds]


def _limit_address_space(extra_bytes: int) -> None:
    """Cap this process's address space at what it maps now plus `extra_bytes` (Linux; a no-op
    where RLIMIT_AS or /proc is missing)."""
    try:
        import resource
        with open("/proc/self/status") as f:
            vm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
        limit = vm + extra_bytes
        _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except (ImportError, OSError, ValueError, StopIteration):
        pass


def _worker_main(conn, cursor, clock_shared, memory_bytes) -> None:
    """Worker process loop: run the tasks the parent streams in, answering in batches (every
    FLUSH_S, and whenever it would otherwise wait for work), until the parent sends None or goes
    away. `cursor` (shared memory) counts the items started so far, so after a crash the parent
    knows exactly which item was running; `clock_shared` says since when its SQL has run."""
    import signal
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    _limit_address_space(memory_bytes)
    clock = _Clock(clock_shared)
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
        answers = _run_task(task, clock)
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
        self.clock = ctx.RawArray("d", 2)
        self.proc = ctx.Process(target=_worker_main, args=(child, self.cursor, self.clock, WORKER_MEMORY_BYTES),
                                daemon=True, name="acesql-executor")
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

    def overrun(self, now: float) -> float:
        """Seconds the SQL phase running now is past its hard limit (<= 0: within it, or none runs)."""
        start, limit = self.clock[0], self.clock[1]
        return now - start - limit if start else -1.0

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
        if self.ctx.get_start_method() == "forkserver":
            self.ctx.set_forkserver_preload([__name__])  # a replacement worker starts in milliseconds
        self.workers = [_Worker(self.ctx) for _ in range(n_workers)]
        self.lock = threading.Lock()

    def busy_items(self) -> dict[int, tuple[str, int]]:
        """pid -> ("gold", first index of its group) or ("pred", index) for what each worker runs now."""
        out = {}
        for w in list(self.workers):
            if w is None:
                continue
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
            while queue or any(w is not None and w.busy for w in self.workers):
                for i, w in enumerate(self.workers):
                    if w is None and queue:  # a slot emptied by a kill: refilled when there is work for it
                        w = self.workers[i] = _Worker(self.ctx)
                    while w is not None and queue and len(w.tasks) < QUEUE_DEPTH:
                        w.assign(queue.popleft())
                busy = [w for w in self.workers if w is not None and w.busy]
                now = time.monotonic()
                # wake up in time for the nearest hard deadline
                nap = min([0.5] + [-w.overrun(now) for w in busy if w.clock[0]])
                wait([w.conn for w in busy] + [w.proc.sentinel for w in busy], timeout=max(nap, 0.005))
                for w in busy:
                    dead = not w.proc.is_alive()  # checked before draining: nothing sent after it is missed
                    dead = not self._drain(w, on_gold, on_pred) or dead
                    if not w.busy:
                        continue
                    backstop = 2 * max(t.timeout_s for t in w.tasks.values()) + 5
                    status = "error"
                    if dead:
                        reason = "worker died"
                    elif w.overrun(time.monotonic()) > 0:
                        limit = w.clock[1]
                        w.proc.kill()
                        w.proc.join(timeout=5)
                        status, reason = "timeout", (f"timeout: still running at the hard deadline ({limit:g} s), "
                                                     "so the worker was stopped (a compile or one function call "
                                                     "that SQLite cannot interrupt)")
                    elif time.monotonic() - w.last_seen > backstop:
                        w.proc.kill()
                        w.proc.join(timeout=5)
                        reason = f"worker killed: no answer within {backstop:g} s"
                    else:
                        continue
                    deaths += 1
                    queue.extendleft(reversed(self._salvage(w, status, reason, on_gold, on_pred)))
                    w.conn.close()
                    self.workers[self.workers.index(w)] = None  # replaced lazily: the answer is not held up
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
    def _salvage(w: _Worker, status: str, reason: str, on_gold, on_pred) -> list[_Task]:
        """Mark the in-flight item failed (`status`: error for a death, timeout for a hard stop);
        return what is left of the worker's tasks for others (answers it computed but had not sent
        yet are simply run again)."""
        item = w.in_flight()
        if item is not None and item[0] == "gold":  # died on the gold: the group scores 0, preds still run
            w.gold[item[1]] = (status, f"{reason} while executing the gold SQL")
            on_gold(w.tasks[item[1]], *w.gold[item[1]])
        elif item is not None:
            on_pred(item[2], Score(False, status, reason, *w.gold.get(item[1], ("ok", ""))))
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
            if w is not None:
                w.stop()
        self.workers = []


_POOL: _Pool | None = None  # score_batch's workers
_SINGLE: _Pool | None = None  # execute()'s worker, apart so a batch's pool size never thrashes it
_SINGLE_LOCK = threading.Lock()


def shared_pool(n_workers: int) -> _Pool:
    """The process-wide worker pool, kept between calls so connections and gold caches stay warm."""
    global _POOL
    if _POOL is None or len(_POOL.workers) != n_workers:
        shutdown_pool()
        _POOL = _Pool(n_workers)
    return _POOL


def shutdown_pool() -> None:
    global _POOL, _SINGLE
    for pool in (_POOL, _SINGLE):
        if pool is not None:
            pool.shutdown()
    _POOL = _SINGLE = None


atexit.register(shutdown_pool)


def execute(db_path: str | Path, sql: str, timeout_s: float = 30.0, max_rows: int = DEFAULT_MAX_ROWS,
            max_result_bytes: int = DEFAULT_RESULT_BYTES, conn=None, in_process: bool = False) -> ExecResult:
    """Run one untrusted SQL statement on `db_path` (read-only) and never raise.

    Runs in a worker process under a hard deadline (every phase, compile included, returns within
    HARD_FACTOR x timeout_s + HARD_MARGIN_S) and the worker memory bound; statuses as
    `sandbox.execute_here`. `in_process=True` (or a `conn` from `open_readonly`) runs it in this
    process instead: faster for trusted SQL, but then a runaway compile or a huge result is this
    process's problem. `max_rows` 0 means no row cap (the byte cap still holds).
    """
    if in_process or conn is not None:
        return execute_here(db_path, sql, timeout_s, max_rows, max_result_bytes, conn=conn)
    global _SINGLE
    start = time.monotonic()
    task = _Task(str(db_path), "", [(0, sql)], "multiset", False, False, timeout_s, max_rows, max_result_bytes,
                 kind="rows")
    got: list = []
    with _SINGLE_LOCK:
        if _SINGLE is None:
            _SINGLE = _Pool(1)
        pool = _SINGLE
    try:
        pool.run([task], lambda *_: None, lambda _idx, r: got.append(r))
    except BaseException:
        with _SINGLE_LOCK:
            if _SINGLE is pool:
                pool.shutdown()
                _SINGLE = None
        raise
    r = got[0]
    if isinstance(r, Score):  # the worker died or was stopped at the hard deadline
        return ExecResult(r.pred_status, error=r.pred_error, elapsed_s=time.monotonic() - start)
    return r


def score_batch(items: Sequence[tuple[str, str, str | Path]], mode: str = "multiset", timeout_s: float = 30.0,
                workers: int = 0, progress: bool = True, max_rows: int = DEFAULT_MAX_ROWS,
                permute_columns: bool = False, max_result_bytes: int = DEFAULT_RESULT_BYTES,
                in_process: bool = False) -> ScoreList:
    """Score (pred_sql, gold_sql, db_path) triples; `ScoreList` of `Score` in input order.

    Triples are grouped by (db, gold): a worker executes the gold once, then that group's
    predictions, and compares in place, so gold rows never cross a process boundary and the 8
    rollouts of an RL question cost 9 executions, not 16. Workers persist between calls (warm
    connections, a small gold-result cache); a dead worker is replaced and only its in-flight
    triple is marked "worker died"; one past its hard deadline is killed and that triple is a
    "timeout". A failed gold scores 0 and is counted in `gold_failures`. workers=0 means
    os.cpu_count(). `in_process=True` runs everything in this process (trusted SQL only: no hard
    deadline, no memory bound). `max_rows` 0 means no row cap.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    groups: dict[tuple[str, str], list[tuple[int, str]]] = {}
    for i, (pred, gold, db) in enumerate(items):
        groups.setdefault((str(db), gold), []).append((i, pred))
    tasks = [_Task(db, gold, preds, mode, permute_columns,
                   mode == "spider" and isinstance(gold, str) and gold_has_order_by(gold), timeout_s, max_rows,
                   max_result_bytes)
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
            pool = shared_pool(workers or os.cpu_count() or 1)
            try:
                out.worker_deaths = pool.run(tasks, on_gold, on_pred)
            except BaseException:  # e.g. Ctrl-C: workers may hold half-sent tasks, so start afresh next time
                shutdown_pool()
                raise
    finally:
        bar.close()
    return out
