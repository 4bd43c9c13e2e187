"""Hostile SQL against the executor: status, wall time and peak worker memory per class.

Each class of the adversarial cases runs through `execute` (a worker process under the hard
deadline) with a 1 s deadline, on a small real SQLite file. A thread samples the resident memory
of every executor worker (/proc/<pid>/status VmRSS) every 10 ms, so the peak of a worker that is
killed at its deadline is still seen. The caller's own peak (ru_maxrss) is printed at the end:
untrusted rows never reach it. The database's hash is checked after every case.

    python benchmarks/executor_hostile.py [--timeout 1.0] [--json reports/benchmarks/executor_hostile.json]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import resource
import sqlite3
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from acesql_lib import executor  # noqa: E402
from acesql_lib.executor import execute, pools, shutdown_pool  # noqa: E402


def cte_chain(levels: int) -> str:
    parts = ["c0(x) AS NOT MATERIALIZED (SELECT 1)"]
    parts += [f"c{i}(x) AS NOT MATERIALIZED (SELECT x FROM c{i - 1} UNION ALL SELECT x FROM c{i - 1})"
              for i in range(1, levels + 1)]
    return "WITH " + ", ".join(parts) + f" SELECT count(*) FROM c{levels}"


CASES = {
    "compile: 18 NOT MATERIALIZED CTEs": cte_chain(18),
    "one function call: printf width 1e9": "SELECT printf('%.*c', 1000000000, 'x')",
    "huge rows: zeroblob(99 MB) per row": "SELECT zeroblob(99000000) FROM t",
    "huge rows: printf(99 MB) per row": "SELECT printf('%.*c', 99000000, 'x') FROM t",
    "huge rows: 3 x 99 MB per row": "SELECT zeroblob(99000000), zeroblob(99000000), zeroblob(99000000) FROM t",
    "huge sort: 3-way cross join ORDER BY random()": "SELECT a.b, b.b, c.b FROM t a, t b, t c ORDER BY random()",
    "VM runaway: recursive CTE": "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT count(*) FROM c",
    "pointer function: fts3_tokenizer": "SELECT fts3_tokenizer('simple')",
    "pointer overwrite: fts3_tokenizer/2": "SELECT fts3_tokenizer('simple', x'0000000000000000')",
    "load_extension": "SELECT load_extension('libx')",
    "REINDEX (no index)": "REINDEX",
    "ANALYZE": "ANALYZE",
    "write: DELETE": "DELETE FROM t",
    "write: VACUUM INTO": "VACUUM INTO 'copy.sqlite'",
}


class PeakSampler(threading.Thread):
    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak_kb, self.stop = 0, threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            pool = pools._SINGLE
            for w in (pool.workers if pool else []):
                if w is None:  # a slot emptied by a hard stop, refilled on the next call
                    continue
                try:
                    with open(f"/proc/{w.proc.pid}/status") as f:
                        rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
                    self.peak_kb = max(self.peak_kb, rss)
                except (OSError, StopIteration, ValueError):
                    pass
            time.sleep(0.01)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--timeout", type=float, default=1.0)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "h.sqlite"
        con = sqlite3.connect(db)
        con.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, a INTEGER, b TEXT)")
        con.executemany("INSERT INTO t (a, b) VALUES (?, ?)", [(i % 5, f"v{i}") for i in range(200)])
        con.commit()
        con.close()
        digest = hashlib.sha256(db.read_bytes()).hexdigest()
        execute(db, "SELECT 1")  # the worker is started; what is timed is the statement
        rows = []
        print(f"deadline {args.timeout:g} s, hard stop at {executor.HARD_FACTOR:g} x deadline + {executor.HARD_MARGIN_S:g} s")
        print(f"{'class':48}{'status':>11}{'wall s':>8}{'peak MB':>9}  database unchanged")
        for name, sql in CASES.items():
            sampler = PeakSampler()
            sampler.start()
            start = time.perf_counter()
            r = execute(db, sql, timeout_s=args.timeout)
            wall = time.perf_counter() - start
            sampler.stop.set()
            sampler.join()
            same = hashlib.sha256(db.read_bytes()).hexdigest() == digest
            rows.append({"class": name, "status": r.status, "wall_s": round(wall, 3),
                         "worker_peak_mb": round(sampler.peak_kb / 1024, 1), "db_unchanged": same})
            print(f"{name:48}{r.status:>11}{wall:8.3f}{sampler.peak_kb / 1024:9.1f}  {same}")
        caller = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        alive = execute(db, "SELECT count(*) FROM t").rows == [(200,)]
        print(f"caller peak RSS {caller:.1f} MB; caller alive and the executor answering afterwards: {alive}")
        shutdown_pool()
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"timeout_s": args.timeout, "cases": rows, "caller_peak_mb": caller}, indent=1))


if __name__ == "__main__":
    main()
