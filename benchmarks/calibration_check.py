"""Do times in calibration units compare across days? The same work on a quiet and on a busy machine.

Runs the tiny pipeline's first notebooks (`--only`, default 00 01: they need nothing before them)
through the runner `--rounds` times, alternating a quiet machine and one kept busy by `--busy` processes
spinning on the CPU (a slow day, made on purpose), each run into a fresh folder. The runner measures the
calibration workload before and after every run (acesql_lib/calibration.py). Prints, per condition, the
median wall time and the median time in calibration units, and the busy/quiet ratio of each: the
normalised time should move far less than the wall time.

    python benchmarks/calibration_check.py [--rounds 2 --busy 2 --only 00 01]
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


def one_run(only: list[str], busy: int) -> dict:
    from acesql_lib.pipeline import read_calibration, run_pipeline

    work = Path(tempfile.mkdtemp(prefix="calcheck_"))
    stop = mp.Event()
    hogs = [mp.Process(target=_spin, args=(stop,), daemon=True) for _ in range(busy)]
    for h in hogs:
        h.start()
    try:
        runs = run_pipeline("tiny", only, {"run_dir": str(work / "run"), "reports_dir": str(work / "reports"),
                                           "data.tinyworld_dir": str(work / "world")}, progress=False)
        cal = read_calibration(work / "reports")
    finally:
        stop.set()
        for h in hogs:
            h.join()
        shutil.rmtree(work, ignore_errors=True)
    wall = sum(r.seconds for r in runs)
    return {"busy": busy, "wall_s": round(wall, 1), "calibration_s": cal["seconds"], "units": round(wall / cal["seconds"], 1)}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--busy", type=int, default=2, help="processes spinning on the CPU in the busy runs")
    ap.add_argument("--only", nargs="*", default=["00", "01"])
    ap.add_argument("--out", default="reports/benchmarks/calibration_check.json")
    args = ap.parse_args(argv)
    rows = []
    for _ in range(args.rounds):
        for busy in (0, args.busy):
            rows.append(one_run(args.only, busy))
            print(json.dumps(rows[-1]), flush=True)
    med = {b: {k: statistics.median(r[k] for r in rows if r["busy"] == b) for k in ("wall_s", "units", "calibration_s")}
           for b in (0, args.busy)}
    summary = {"rows": rows, "quiet": med[0], "busy": med[args.busy],
               "wall_ratio": round(med[args.busy]["wall_s"] / med[0]["wall_s"], 2),
               "units_ratio": round(med[args.busy]["units"] / med[0]["units"], 2)}
    print(f"busy / quiet: wall x{summary['wall_ratio']}, calibration units x{summary['units_ratio']}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(summary, indent=1) + "\n")
    return summary


if __name__ == "__main__":
    main()
