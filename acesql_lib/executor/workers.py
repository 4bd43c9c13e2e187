"""Worker processes for untrusted SQL: the process that runs the tasks, and the parent's handle on one.

Each worker caps its own address space (`resource.setrlimit(RLIMIT_AS)`, WORKER_MEMORY_BYTES above
what it held at start), leaves its owner's process group, and publishes when its current SQL phase
started and its hard limit, so the parent (`pools`) can kill and replace a worker still inside a
phase past that limit. Pipes, not queues, so after a death every answer sent can still be read, and
a shared cursor names the item that was running. A worker starts from this module alone, never the
caller's main module (`_without_main`).
"""
from __future__ import annotations

import contextlib
import threading
import time
from collections import deque

from .tasks import WORKER_MEMORY_BYTES, _Clock, _run_task, _Task, _task_items

FLUSH_S = 0.01  # a busy worker sends its answers at least this often


_BARE_START = threading.local()  # set while this module starts a worker (`_without_main`)


def _preparation_data_without_main(real):
    """`multiprocessing.spawn.get_preparation_data`, less the main module's name and path while this
    thread starts an executor worker: a started process otherwise runs the parent's main module (a
    script, or `python -m acesql_lib.train.grpo_run`: torch and transformers, 3-5 s and a few hundred MB per worker)
    before its target, which lives here. Other processes, and other threads', start as multiprocessing starts them."""
    def get_preparation_data(name):
        data = real(name)
        if getattr(_BARE_START, "on", False):
            data.pop("init_main_from_name", None)
            data.pop("init_main_from_path", None)
        return data
    get_preparation_data.acesql_without_main = True
    return get_preparation_data


@contextlib.contextmanager
def _without_main():
    """The processes this thread starts inside the block skip the parent's main module (see above)."""
    from multiprocessing import spawn
    if not getattr(spawn.get_preparation_data, "acesql_without_main", False):
        spawn.get_preparation_data = _preparation_data_without_main(spawn.get_preparation_data)
    _BARE_START.on = True
    try:
        yield
    finally:
        _BARE_START.on = False


def _own_group() -> None:
    """This worker in a process group of its own, out of reach of a signal sent to its owner's group, and SIGTERM
    back to its default, so that one sent to the worker itself (multiprocessing's exit, the owner's stop) ends it."""
    import os
    import signal
    os.setpgid(0, 0)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


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
    # Ctrl-C and a stop are the parent's to handle. A terminal's SIGINT reaches the workers too, and torchrun stops
    # a rank with SIGTERM to its whole process group: a worker that died of it would cut the parent's SQL short
    # (wrong scores, replaced workers) while the parent finishes its step and saves. So a worker ignores SIGINT and
    # leaves the parent's process group (`_own_group`; from the forkserver, already at the fork).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _own_group()
    _limit_address_space(memory_bytes)
    clock = _Clock(clock_shared)
    started, out, last = 0, [], time.monotonic()
    while True:
        try:
            if out and not conn.poll():  # about to wait for work: send what is done first
                conn.send(out)
                out, last = [], time.monotonic()
            msg = conn.recv()
        except (EOFError, OSError):  # the parent is gone
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
                try:
                    conn.send(out)
                except OSError:  # the parent is gone
                    return
                out, last = [], time.monotonic()


class _Worker:
    def __init__(self, ctx) -> None:
        self.conn, child = ctx.Pipe()
        self.cursor = ctx.RawValue("q", 0)
        self.clock = ctx.RawArray("d", 2)
        def process():
            return ctx.Process(target=_worker_main, args=(child, self.cursor, self.clock, WORKER_MEMORY_BYTES),
                               daemon=True, name="acesql-executor")
        self.proc = process()
        with _without_main():  # the worker needs this module only, not the caller's script
            try:
                self.proc.start()
            except (EOFError, ConnectionError):  # the forkserver died (a stop signal before it ignored one):
                self.proc = process()
                self.proc.start()  # multiprocessing starts a new one
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



def _in_forkserver() -> bool:
    """True in the forkserver process, which imports this module before it serves (`set_forkserver_preload`):
    multiprocessing starts it as `python -c "from multiprocessing.forkserver import main; ..."`."""
    import sys
    return sys.argv == ["-c"] and "multiprocessing.forkserver" in sys.modules


if _in_forkserver():
    # The forkserver sits in its owner's process group, which torchrun's SIGTERM to a rank reaches: killed, it would
    # fail the next worker's start (EOFError in multiprocessing) and with it the rank's SQL. The stop is the owner's
    # to handle; the forkserver leaves when its owner closes its end (multiprocessing's own rule). A worker it forks
    # leaves the owner's group at the fork, before its first line runs (`_own_group`), and with it the ignored SIGTERM.
    import os as _os
    import signal as _signal

    _signal.signal(_signal.SIGTERM, _signal.SIG_IGN)
    _os.register_at_fork(after_in_child=_own_group)
