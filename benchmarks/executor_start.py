"""The executor's first call from a process like `python -m acesql_lib.train.grpo_run`: workers started without
the caller's main module (the kit's way) beside workers that run it first (multiprocessing's default).

A caller module that imports what the GRPO entry point imports (torch, transformers, the kit's trainer)
runs `score_batch` on a few trivial pairs twice, as `python -m <caller>`; the first call starts the
workers. Measured per start mode, in fresh processes alternating the modes (`--rounds`): the first
call's seconds, the second call's, and the workers' resident memory (VmRSS) after it. "main module"
reproduces the default by switching off `acesql_lib.executor.workers._without_main` in the caller.

    python benchmarks/executor_start.py [--rounds 3] [--workers 2]

Figures: benchmarks/README.md ("Executor workers without the caller's main module").
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

CALLER = '''
import contextlib, json, sqlite3, sys, time
import torch, transformers  # noqa: F401  what the GRPO entry point holds
import acesql_lib.train.grpo_run  # noqa: F401
from acesql_lib.executor import pools, score_batch, workers

if __name__ == "__main__":
    db, n_workers, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    if mode == "main module":
        workers._without_main = contextlib.nullcontext  # multiprocessing's default: each worker runs this module
    pairs = [("SELECT count(*) FROM t", "SELECT count(*) FROM t", db)] * 16
    t0 = time.perf_counter()
    first = score_batch(pairs, timeout_s=5, workers=n_workers, progress=False)
    t1 = time.perf_counter()
    score_batch(pairs, timeout_s=5, workers=n_workers, progress=False)
    t2 = time.perf_counter()
    rss = []
    for w in pools._POOL.workers:
        status = open(f"/proc/{w.proc.pid}/status").read()
        rss.append(int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:"))) / 1024)
    assert all(s.correct for s in first)
    print(json.dumps({"first_s": t1 - t0, "second_s": t2 - t1, "worker_rss_mib": rss}))
'''


def run_once(folder: Path, db: Path, n_workers: int, mode: str) -> dict:
    env = {**os.environ, "PYTHONPATH": f"{folder}{os.pathsep}{REPO}", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-m", "executor_start_caller", str(db), str(n_workers), mode],
                          cwd=folder, env=env, capture_output=True, text=True, timeout=600)
    if done.returncode:
        raise RuntimeError(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    import sqlite3

    folder = Path(tempfile.mkdtemp(prefix="executor_start_"))
    (folder / "executor_start_caller.py").write_text(CALLER)
    db = folder / "t.sqlite"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE t (a INTEGER)")
    con.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(100)])
    con.commit()
    con.close()
    modes = ("executor only", "main module")
    runs: dict[str, list[dict]] = {m: [] for m in modes}
    for r in range(args.rounds):  # alternating, the order flipped each round
        for mode in (modes if r % 2 == 0 else modes[::-1]):
            runs[mode].append(run_once(folder, db, args.workers, mode))
    print(f"{args.workers} workers, {args.rounds} fresh processes per mode (alternating)")
    print("| workers start with | first call (s) | second call (s) | worker RSS (MiB) |")
    print("|---|---:|---:|---:|")
    for mode in modes:
        rs = runs[mode]
        first = [x["first_s"] for x in rs]
        print(f"| {mode} | {statistics.median(first):.2f} ({min(first):.2f}-{max(first):.2f}) | "
              f"{statistics.median(x['second_s'] for x in rs):.3f} | "
              f"{statistics.median(v for x in rs for v in x['worker_rss_mib']):.0f} |")


if __name__ == "__main__":
    main()
