"""What a worker runs: one (db, gold) group of predictions, or one statement whose rows come back,
each SQL phase (a gold's execution; a prediction's shape probe, execution and comparison) under one
deadline published through `_Clock`, so the parent can stop a worker that overruns it (pools.py)."""
from __future__ import annotations

import dataclasses
import os
import re
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Iterator

from .compare import ComparisonTimeout, rows_match
from .sandbox import ExecResult, ResultReading, execute_here, result_width

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
    reading: ResultReading  # the caps, and whether invalid UTF-8 is an error (scoring.ScoringRule)
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


def _execute(task: _Task, sql: str, deadline: float, probe_width: int | None = None, role: str = "pred") -> ExecResult:
    """The optional shape probe (a compile) and the execution, both before `deadline`."""
    if probe_width is not None:
        got = result_width(task.db_path, sql)
        if got is not None and got != probe_width:
            return ExecResult("wrong_shape", error=f"returns {got} column(s), not as many as the gold: cannot "
                                                   "match, so it was compiled but not run")
    return execute_here(task.db_path, sql, task.timeout_s, task.reading, deadline=deadline, role=role,
                        held=task.kind == "rows")


def _timed_execute(task: _Task, sql: str, clock: _Clock, role: str = "pred") -> ExecResult:
    """One SQL phase (an execution) under one deadline."""
    deadline = clock.begin(task.timeout_s)
    try:
        return _execute(task, sql, deadline, role=role)
    finally:
        clock.end()


def _gold_result(task: _Task, clock: _Clock) -> ExecResult:
    """The gold's result, run on the gold's own connection (role "gold"), never a prediction's."""
    try:
        st = os.stat(task.db_path)
        key = (os.path.abspath(task.db_path), st.st_ino, st.st_mtime_ns, task.gold_sql, task.reading)
    except OSError:
        key = None
    if key is not None and key in _GOLD_CACHE:
        _GOLD_CACHE.move_to_end(key)
        return _GOLD_CACHE[key]
    result = _timed_execute(task, task.gold_sql, clock, role="gold")
    if key is not None and result.status == "ok" and len(result.rows) <= _GOLD_CACHE_MAX_ROWS:
        _GOLD_CACHE[key] = result
        while len(_GOLD_CACHE) > _GOLD_CACHE_SIZE:
            _GOLD_CACHE.popitem(last=False)
    return result


def _verdict(task: _Task, sql, gold: ExecResult | None, gold_status: str, width: int | None,
             clock: _Clock) -> tuple[ExecResult, bool]:
    """One prediction's verdict under ONE deadline: shape probe, execution and comparison (the
    column permutation search included) share it, and a verdict not reached by then is `timeout`
    (the parent's hard stop covers all three as one SQL phase)."""
    deadline = clock.begin(task.timeout_s)
    start = deadline - task.timeout_s
    try:
        result = _execute(task, sql, deadline, probe_width=width if isinstance(sql, str) else None)
        if gold is None or gold_status != "ok" or result.status != "ok":
            return result, False
        correct = rows_match(result.rows, gold.rows, task.mode, permute_columns=task.permute_columns,
                             order_matters=task.order_matters, deadline=deadline)
        if time.monotonic() > deadline:
            raise ComparisonTimeout("the comparison finished past the deadline")
        return result, correct
    except ComparisonTimeout as e:
        return ExecResult("timeout", error=f"timeout after {task.timeout_s:g} s: comparing the results ({e})",
                          elapsed_s=time.monotonic() - start), False
    except MemoryError:
        return ExecResult("too_large", error="too large: comparing the results ran out of memory",
                          elapsed_s=time.monotonic() - start), False
    finally:
        clock.end()


def _run_task(task: _Task, clock: _Clock | None = None) -> Iterator[tuple]:
    """Messages ("gold", status, error) then ("pred", index, Score) per prediction, in order
    (kind "rows": one ("pred", index, ExecResult)).

    A prediction textually equal to the gold takes the gold's result (a read-only database answers
    a deterministic query the same way twice), and one equal to an earlier prediction of the same
    group its verdict. When the gold returned rows, a prediction with another number of columns
    cannot match in any mode: it is compiled but not run, status "wrong_shape" (a slow or runaway
    wrong query costs a prepare).
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
    verdicts: dict[str, Score] = {}
    if gold is not None:
        verdicts[task.gold_sql] = Score(gold_status == "ok", gold.status, gold.error, gold_status, gold_error,
                                        gold.elapsed_s)
    width = len(gold.columns) if gold is not None and gold_status == "ok" and gold.rows else None
    for idx, sql in task.preds:
        known = verdicts.get(sql) if isinstance(sql, str) else None
        if known is not None:
            yield ("pred", idx, dataclasses.replace(known))
            continue
        result, correct = _verdict(task, sql, gold, gold_status, width, clock)
        score = Score(correct, result.status, result.error, gold_status, gold_error, result.elapsed_s)
        if isinstance(sql, str) and not _NONDETERMINISTIC.search(sql):
            verdicts[sql] = score
        yield ("pred", idx, score)



def _task_items(seq: int, task: _Task) -> list[tuple]:
    """The order in which a worker answers a task: ("gold", seq) then ("pred", seq, index)."""
    head = [("gold", seq)] if task.gold_known is None and task.kind == "score" else []
    return head + [("pred", seq, idx) for idx, _ in task.preds]
