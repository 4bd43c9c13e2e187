"""Sandboxed SQLite execution, result comparison and parallel scoring.

Every reward, filter and metric of the kit runs model-written SQL through this package, so the
SQL is treated as untrusted:
- `sandbox`: one statement in this process with every bound SQLite enforces, on a read-only
  connection (`connections`: limits, heap, the gold on a connection of its own) whose authorizer
  allows reads of the schema's tables and a function allowlist only (`authorizer`), statements
  refused by their parsed kind first (`statements`), a VM deadline and per-row result caps;
- `compare`: `rows_match` in the modes of BIRD (§5 EX, sets), the paper's training reward (§4 step
  4, multisets, floats to 6 places) and Spider's test-suite evaluator;
- `batch`: `execute` and `score_batch` run that SQL in worker processes (`workers`, running
  `tasks`, handed out by `pools`) under a hard deadline (a compile, a single function call or a
  comparison that cannot be interrupted is stopped by killing the worker) and an address-space cap,
  each distinct gold once;
- `bird`: the official prediction format and `python -m acesql_lib.executor`, BIRD's scoring rule;
- `scoring`: the BIRD scoring rules by name (kit, authors, bird_original, bird_minidev).
"""
from . import authorizer, batch, bird, compare, connections, pools, sandbox, scoring, statements, tasks, workers
from .authorizer import ALLOWED_FUNCTIONS
from .batch import execute, score_batch
from .tasks import HARD_FACTOR, HARD_MARGIN_S, WORKER_MEMORY_BYTES, Score, ScoreList
from .pools import WorkerStartupError, shared_pool, shutdown_pool
from .bird import (BIRD_SEPARATOR, BirdFiles, BirdReport, bird_ex_by_difficulty, score_bird, load_bird_gold,
                   load_bird_predictions, main, read_bird_predictions, write_bird_predictions)
from .compare import MODES, ComparisonTimeout, gold_has_order_by, rows_match
from .connections import HARD_HEAP_BYTES, MAX_VALUE_BYTES, DatabaseOpenError, open_readonly
from .scoring import SCORINGS
from .sandbox import (DEFAULT_MAX_ROWS, DEFAULT_RESULT_BYTES, STATUSES, VALID_STATUSES, ExecResult, ResultReading,
                      execute_here, result_width)
from .statements import MAX_SQL_BYTES, check_sql, count_statements, statement_kind

__all__ = ["ALLOWED_FUNCTIONS", "BIRD_SEPARATOR", "BirdFiles", "BirdReport", "ComparisonTimeout", "DEFAULT_MAX_ROWS",
           "DEFAULT_RESULT_BYTES", "DatabaseOpenError", "ExecResult", "HARD_FACTOR", "HARD_HEAP_BYTES",
           "HARD_MARGIN_S", "MAX_SQL_BYTES", "MAX_VALUE_BYTES", "MODES", "ResultReading", "SCORINGS", "STATUSES",
           "Score", "ScoreList", "VALID_STATUSES", "WORKER_MEMORY_BYTES", "bird_ex_by_difficulty",
           "check_sql", "count_statements", "execute", "execute_here", "gold_has_order_by", "load_bird_gold",
           "load_bird_predictions", "main", "open_readonly", "read_bird_predictions", "result_width", "rows_match",
           "score_batch", "score_bird", "shared_pool", "shutdown_pool", "statement_kind", "WorkerStartupError",
           "write_bird_predictions"]


def __getattr__(name: str):
    if name == "_POOL":  # the live batch pool (tests and the benchmark inspect it)
        return pools._POOL
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
