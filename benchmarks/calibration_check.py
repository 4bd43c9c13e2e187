"""Do times in calibration units compare across days? The same work on a quiet and on a busy machine.

Runs the tiny pipeline's first notebooks (`--only`, default 00 01 02: the data, the filtering and the
distillation, whose generation is the kind of work that dominates the pipeline) through the runner
`--rounds` times, alternating a quiet machine and a slow one, each run into a fresh folder. The slow day
is made on purpose, one of two ways:
- `--quota Q` (Linux cgroup v1, root): the run and everything it starts get Q CPUs' worth of time in all
  (0.7 of this 2-core machine's 2), as when the machine's host gives it less time on a busy day;
- `--busy K`: K processes spin beside the run (they take time from multi-threaded torch far more than
  from the notebooks' single-threaded Python, so the two slow down unlike each other).
The runner measures the calibration workload before and after every run (acesql_lib/runtime/calibration.py).
Prints, per condition, the median wall time and the median time in calibration units, and the slow/quiet
ratio of each: the normalised time should move far less than the wall time.

    python benchmarks/calibration_check.py [--rounds 1 --quota 0.7 --only 00 01 02]
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("MPLBACKEND", "Agg")


def _spin(stop) -> None:
    x = 0
    while not stop.is_set():
        for _ in range(100_000):
            x = (x * 1_103_515_245 + 12_345) % 2_147_483_648


CGROUP = Path("/sys/fs/cgroup/cpu")


def _enter_quota(cpus: float) -> None:
    """This process (and what it starts from now on) into a cgroup with `cpus` CPUs' worth of time."""
    group = CGROUP / "acesql_slowday"
    group.mkdir(exist_ok=True)
    (group / "cpu.cfs_period_us").write_text("100000")
    (group / "cpu.cfs_quota_us").write_text(str(int(cpus * 100000)))
    (group / "cgroup.procs").write_text(str(os.getpid()))


def _leave_quota() -> None:
    (CGROUP / "cgroup.procs").write_text(str(os.getpid()))


def one_run(only: list[str], busy: int, quota: float = 0.0) -> dict:
    from acesql_lib.pipeline.runner import PipelineOptions, read_calibration, run_pipeline

    work = Path(tempfile.mkdtemp(prefix="calcheck_"))
    stop = mp.Event()
    hogs = [mp.Process(target=_spin, args=(stop,), daemon=True) for _ in range(busy)]
    for h in hogs:
        h.start()
    if quota:
        _enter_quota(quota)
    try:
        runs = run_pipeline("tiny", only, {"run_dir": str(work / "run"), "reports_dir": str(work / "reports"),
                                           "data.tinyworld_dir": str(work / "world")},
                            options=PipelineOptions(progress=False))
        cal = read_calibration(work / "reports")
    finally:
        if quota:
            _leave_quota()
        stop.set()
        for h in hogs:
            h.join()
        shutil.rmtree(work, ignore_errors=True)
    wall = sum(r.seconds for r in runs)
    return {"slow": bool(busy or quota), "busy": busy, "quota": quota, "wall_s": round(wall, 1),
            "calibration_s": cal["seconds"], "units": round(wall / cal["seconds"], 1)}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--quota", type=float, default=0.7, help="CPUs' worth of time in the slow runs (cgroup)")
    ap.add_argument("--busy", type=int, default=0, help="processes spinning beside the slow runs")
    ap.add_argument("--only", nargs="*", default=["00", "01", "02"])
    ap.add_argument("--out", default="reports/benchmarks/calibration_check.json")
    args = ap.parse_args(argv)
    rows = []
    for _ in range(args.rounds):
        for slow in (False, True):
            rows.append(one_run(args.only, args.busy if slow else 0, args.quota if slow else 0.0))
            print(json.dumps(rows[-1]), flush=True)
    med = {s: {k: statistics.median(r[k] for r in rows if r["slow"] == s) for k in ("wall_s", "units", "calibration_s")}
           for s in (False, True)}
    summary = {"only": args.only, "quota": args.quota, "busy": args.busy, "rows": rows, "quiet": med[False],
               "slow": med[True], "wall_ratio": round(med[True]["wall_s"] / med[False]["wall_s"], 2),
               "units_ratio": round(med[True]["units"] / med[False]["units"], 2)}
    print(f"slow / quiet: wall x{summary['wall_ratio']}, calibration units x{summary['units_ratio']}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(summary, indent=1) + "\n")
    return summary


if __name__ == "__main__":
    main()
