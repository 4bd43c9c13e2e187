"""Wall time by phase (generation, execution, optimizer, I/O), for the pipeline benchmark.

The long stages wrap their phases in `with phase("generation"):`; the seconds add up in this
process. A stage reads the totals before and after (`totals`, `since`) and writes the difference
to the log it already keeps: GRPO's metrics.jsonl (`time/generation_s`, ...), the evaluation
metrics, the distillation's `phases.jsonl`. benchmarks/pipeline_time.py collects them per notebook.
"""
from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

PHASES_LOG = "phases.jsonl"
_TOTALS: defaultdict[str, float] = defaultdict(float)


@contextmanager
def phase(name: str) -> Iterator[None]:
    """Add the wall time of the block to phase `name` (nesting counts the inner time in both)."""
    t0 = time.perf_counter()
    try:
        yield
    finally:
        _TOTALS[name] += time.perf_counter() - t0


def totals() -> dict[str, float]:
    """Seconds per phase since the process started."""
    return dict(_TOTALS)


def since(before: Mapping[str, float]) -> dict[str, float]:
    """Seconds per phase spent after `before` (a `totals()` snapshot); phases with no time left out."""
    return {k: round(v - before.get(k, 0.0), 3) for k, v in _TOTALS.items() if v - before.get(k, 0.0) > 0}


def as_metrics(seconds: Mapping[str, float]) -> dict[str, float]:
    """`{"generation": 3.2}` -> `{"time/generation_s": 3.2}`, the JSONL logs' naming."""
    return {f"time/{k}_s": v for k, v in seconds.items()}


def append_phases(path: str | Path, stage: str, before: Mapping[str, float], seconds: float,
                  only: tuple[str, ...] = (), **extra: Any) -> dict[str, Any]:
    """One line {"stage", "seconds", "phases": {...}, ...} appended to the JSONL at `path`; with `only`,
    just those phases (a stage whose other phases another log already holds)."""
    spent = {k: v for k, v in since(before).items() if not only or k in only}
    record = {"time": time.time(), "stage": stage, "seconds": round(seconds, 3), "phases": spent, **extra}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(json.dumps(record) + "\n")
    return record
