"""The parent's side of the executor's worker processes: pools that hand out tasks and enforce the hard deadline.

A pool keeps each worker (`workers._Worker`) a few task groups ahead, reads its answers in batches, kills and
replaces (lazily) a worker still inside an SQL phase past its hard limit or silent past a backstop, marks the
item it was running failed and hands the rest of its tasks to others; workers that die before running
anything, STARTUP_DEATHS in a row, raise WorkerStartupError. `POOLS` holds every pool of this process, safe
from any number of threads: one per `score_batch` size, and one-worker pools for `execute()`.
"""
from __future__ import annotations

import atexit
import contextlib
import pickle
import threading
import time
from collections import deque

from . import workers
from .tasks import Score, _Task
from .workers import _Worker

QUEUE_DEPTH = 4  # groups assigned to a worker ahead of its answers, so it never waits for the parent
STARTUP_DEATHS = 3  # workers in a row that die before starting any item: the pool cannot work, so it says why


class WorkerStartupError(RuntimeError):
    """Executor workers die before they run anything (N in a row); the message names cause and fix."""


def _startup_message(n: int, exitcode, method: str) -> str:
    return (f"acesql executor: {n} worker processes in a row died at start-up (exit code {exitcode}, start "
            f"method '{method}') before running any SQL, so the call cannot complete. A worker imports only "
            "the executor (never the calling script), so the cause is in the worker's environment: it could not "
            "import the executor, or it was killed at start (out of memory; a hard address-space limit below "
            "what it needs). Its traceback, if any, is on stderr above.")


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
            self.ctx.set_forkserver_preload([workers.__name__])  # a replacement worker starts in milliseconds
        self.workers = [_Worker(self.ctx) for _ in range(n_workers)]
        self.lock = threading.Lock()
        self.startup_deaths = 0  # consecutive workers gone before starting any item

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
        """Run every task, calling on_gold(task, status, error) and on_pred(index, Score); returns deaths.
        One call at a time per pool (others wait for the lock); a call that raises (Ctrl-C, a pool that
        cannot start) stops the workers before it lets go of them, as they may hold its half-sent tasks."""
        with self.lock:
            try:
                return self._run(tasks, on_gold, on_pred)
            except BaseException:
                self._stop_workers()
                raise

    def _run(self, tasks: list[_Task], on_gold, on_pred) -> int:
        from multiprocessing.connection import wait
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
                if w.answered:
                    self.startup_deaths = 0
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
                                                 "that SQLite cannot interrupt, or the comparison of results)")
                elif time.monotonic() - w.last_seen > backstop:
                    w.proc.kill()
                    w.proc.join(timeout=5)
                    reason = f"worker killed: no answer within {backstop:g} s"
                else:
                    continue
                deaths += 1
                if w.cursor.value == 0 and w.answered == 0:  # gone before it started anything
                    self.startup_deaths += 1
                    if self.startup_deaths >= STARTUP_DEATHS:
                        w.proc.join(timeout=1)
                        raise WorkerStartupError(_startup_message(self.startup_deaths, w.proc.exitcode,
                                                                  self.ctx.get_start_method()))
                else:
                    self.startup_deaths = 0
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

    def _stop_workers(self) -> None:
        for w in self.workers:
            if w is not None:
                w.stop()
        self.workers = [None] * len(self.workers)

    def shutdown(self, wait_s: float | None = None) -> None:
        """Stop the workers once no call runs on them; with `wait_s`, wait at most that long for a call
        to end and leave a pool still in use as it is. The pool keeps its size: a later `run` starts
        fresh workers."""
        if not self.lock.acquire(timeout=-1 if wait_s is None else wait_s):
            return
        try:
            self._stop_workers()
        finally:
            self.lock.release()


EXECUTE_WORKERS = 8  # execute() calls that run at once, each on a worker of its own; more wait their turn


class _Pools:
    """Every pool of this process, safe to use from any number of threads.

    score_batch: one pool per pool size, kept between calls; calls with the same size take turns on
    it (first come, first served), calls with different sizes run at once on their own pools; a
    pool no call is using is stopped when a call asks for another size (at most one idle size is
    kept warm). execute(): one-worker pools, one per call running, up to EXECUTE_WORKERS; a call
    beyond that waits, first come first served, for one to come free (its deadline counts from
    when its worker starts it)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.batch: dict[int, _Pool] = {}
        self.users: dict[int, int] = {}  # pool size -> score_batch calls holding it now
        self.free: list[_Pool] = []  # idle one-worker pools for execute()
        self.singles = 0  # one-worker pools in existence (idle or in use)
        self.waiting: deque[list] = deque()  # [event, pool] per execute() call waiting its turn
        self.last_batch: _Pool | None = None  # inspected by tests and benchmarks
        self.last_single: _Pool | None = None

    @contextlib.contextmanager
    def batch_pool(self, n_workers: int):
        with self.lock:
            pool = self.batch.get(n_workers)
            if pool is None:
                for size, idle in list(self.batch.items()):
                    if not self.users.get(size):
                        del self.batch[size]
                        idle.shutdown(wait_s=0)
                pool = self.batch[n_workers] = _Pool(n_workers)
            self.users[n_workers] = self.users.get(n_workers, 0) + 1
            self.last_batch = pool
        try:
            yield pool
        finally:
            with self.lock:
                self.users[n_workers] -= 1

    @contextlib.contextmanager
    def single_pool(self):
        ticket = None
        with self.lock:
            if self.free:
                pool = self.free.pop()
            elif self.singles < EXECUTE_WORKERS:
                self.singles += 1
                pool = None
            else:
                ticket = [threading.Event(), None]
                self.waiting.append(ticket)
        if ticket is not None:
            try:
                ticket[0].wait()
            except BaseException:
                self._leave_queue(ticket)
                raise
            pool = ticket[1]
        if pool is None:  # a slot of our own: start its worker outside the lock
            try:
                pool = _Pool(1)
            except BaseException:
                self._hand_on(None)  # the slot's pool is gone
                raise
        self.last_single = pool
        try:
            yield pool
        finally:  # after a call that raised, its pool's worker is stopped (run) and starts afresh when used
            self._hand_on(pool)

    def _hand_on(self, pool: _Pool | None) -> None:
        """A slot set free goes to the first caller waiting, with its one-worker pool (None: the pool is gone,
        the caller starts one); with no one waiting the pool goes back to the free list, or the slot is given up."""
        with self.lock:
            if self.waiting:
                ticket = self.waiting.popleft()
                ticket[1] = pool
                ticket[0].set()
            elif pool is not None:
                self.free.append(pool)
            else:
                self.singles -= 1

    def _leave_queue(self, ticket: list) -> None:
        with self.lock:
            if ticket in self.waiting:
                self.waiting.remove(ticket)
                return
        self._hand_on(ticket[1])  # handed a turn while leaving: pass it on

    def shutdown(self, wait_s: float | None = None) -> None:
        with self.lock:
            batch, free = list(self.batch.values()), self.free
            self.batch, self.free = {}, []
            self.singles -= len(free)
            self.last_batch = self.last_single = None
        for pool in batch + free:
            pool.shutdown(wait_s)


POOLS = _Pools()


def shared_pool(n_workers: int) -> _Pool:
    """The process-wide score_batch pool of this size, kept between calls so connections and gold
    caches stay warm (a call holding it runs with `POOLS.batch_pool`)."""
    with POOLS.batch_pool(n_workers) as pool:
        return pool


def shutdown_pool(wait_s: float | None = None) -> None:
    """Stop the workers of every pool of this process: a batch pool that a call in another thread
    is using once that call ends (or after `wait_s`); an execute() worker in use is kept."""
    POOLS.shutdown(wait_s)


def __getattr__(name: str):
    if name == "_POOL":  # the batch pool used last (tests and the benchmark inspect it)
        return POOLS.last_batch
    if name == "_SINGLE":  # the execute() pool used last
        return POOLS.last_single
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# multiprocessing registers its own exit handler (SIGTERM to daemon workers, then a wait for each) when
# multiprocessing.util is first imported; imported here first, that handler runs after the pools' own stop
# (atexit runs handlers last in, first out), which ends every worker the pools started.
import multiprocessing.util  # noqa: E402,F401

atexit.register(shutdown_pool, 5.0)
