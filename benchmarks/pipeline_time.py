"""Where the pipeline's wall time goes: per notebook and per phase, from a clean run folder.

Runs the notebooks (all, or `--only 00 01`) through the same runner as `make reproduce`, into a
fresh folder (run, reports and, unless `--keep-world`, the tiny world), then reads the phase
times the library logged on the way:

- base model: the build's manifest (`train_seconds` = optimizer steps, the rest = data, tokenizer,
  TRL's tokenisation and saving);
- distillation: `phases.jsonl` beside the shards (generation, execution);
- GRPO: `metrics.jsonl` per step (`time/generation_s`, `time/execution_s`, `time/step_s`; the update
  is the step minus the rollout) and the run's `phases.jsonl` (validation, checkpoints);
- evaluation: each `eval/<stage>/<set>/metrics.json` (`time/generation_s`, `time/execution_s`, the
  rest of its `seconds`); one read back from the evaluation cache is listed as such.

A base model copied from the shipped folder is listed as copied, with no build time.

Writes reports/benchmarks/pipeline_time.json and .md, so a speed-up is read against the same
breakdown. Example: python benchmarks/pipeline_time.py --only 00 01
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("MPLBACKEND", "Agg")

from acesql_lib.config.paths import REPO_ROOT  # noqa: E402
from acesql_lib.config.profiles import parse_overrides  # noqa: E402
from acesql_lib.pipeline.runner import PipelineOptions, read_calibration, run_pipeline, time_table  # noqa: E402
from acesql_lib.runtime.timing import PHASES_LOG  # noqa: E402


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def collect_phases(run_dir: Path) -> dict[str, dict[str, float]]:
    """Seconds per phase per stage, from the logs the library wrote under the run folder."""
    out: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for manifest in run_dir.rglob("tiny_base_manifest.json"):
        m = json.loads(manifest.read_text())
        if "prebuilt_from" in m:  # the shipped base copied in: its build times are the shipping run's
            out["base model"]["copied from " + m["prebuilt_from"]] += 0.0
            continue
        out["base model"]["optimizer steps"] += m.get("train_seconds", 0.0)
        out["base model"]["data, tokenizer, tokenising, saving"] += m.get("build_seconds", 0.0) - m.get(
            "train_seconds", 0.0)
    for log in run_dir.rglob(PHASES_LOG):
        for rec in _jsonl(log):
            for k, v in rec.get("phases", {}).items():
                out[rec["stage"]][k] += v
    for log in run_dir.rglob("metrics.jsonl"):  # GRPO runs (one per variant)
        for rec in _jsonl(log):
            if "time/step_s" not in rec:
                continue
            stage = f"grpo ({log.parent.name})"
            out[stage]["generation"] += rec.get("time/generation_s", 0.0)
            out[stage]["execution"] += rec.get("time/execution_s", 0.0)
            out[stage]["update"] += rec["time/step_s"] - rec.get("time/rollout_s", 0.0)
    # evaluations: one metrics.json per stage and set under the run's eval/ folder; one read back from
    # the evaluation cache says "reused" and cost no generation in this run
    for f in sorted((run_dir / "eval").glob("*/*/metrics.json")):
        r = json.loads(f.read_text())
        stage = f"evaluation ({r.get('stage') or f.parent.parent.name})"
        if r.get("reused"):
            out[stage]["read back"] += 0.0
            continue
        out[stage]["generation"] += r.get("time/generation_s", 0.0)
        out[stage]["execution"] += r.get("time/execution_s", 0.0)
        out[stage]["other"] += r.get("seconds", 0.0) - r.get("time/generation_s", 0.0) - r.get("time/execution_s", 0.0)
    return {k: {p: round(v, 1) for p, v in d.items()} for k, d in out.items()}


def markdown(report: dict) -> str:
    cal = (report.get("calibration") or {}).get("seconds") or 0.0
    unit = (lambda s: f" {s / cal:.0f} |") if cal else (lambda s: "")  # noqa: E731
    lines = [f"# Pipeline wall time ({report['profile']}, {report['date']})", ""]
    if cal:
        lines += [f"Calibration workload (`python -m acesql_lib.runtime.calibration`) in this run: {cal:.2f} s; "
                  "\"x cal\" = seconds / calibration, the figure to compare across days.", ""]
    lines += ["| notebook | seconds | share |" + (" x cal |" if cal else ""), "|---|---:|---:|" + ("---:|" if cal else "")]
    total = report["total_seconds"] or 1.0
    for n in report["notebooks"]:
        lines.append(f"| {n['name']} | {n['seconds']:.1f} | {n['seconds'] / total:.0%} |{unit(n['seconds'])}")
    lines += [f"| total | {report['total_seconds']:.1f} | |{unit(report['total_seconds'])}", "",
              "| stage | phase | seconds |", "|---|---|---:|"]
    for stage, phases in report["phases"].items():
        for p, v in phases.items():
            lines.append(f"| {stage} | {p} | {v:.1f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="tiny")
    ap.add_argument("--only", nargs="*", help="notebook prefixes, e.g. 00 01 (default: all)")
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="config overrides")
    ap.add_argument("--work", default="runs/bench_pipeline", help="the clean folder (emptied first)")
    ap.add_argument("--keep-world", action="store_true", help="reuse the profile's tiny world instead of a fresh one")
    ap.add_argument("--out", default="reports/benchmarks/pipeline_time")
    args = ap.parse_args(argv)
    work = Path(args.work) if Path(args.work).is_absolute() else REPO_ROOT / args.work
    if work.exists():
        shutil.rmtree(work)
    run_dir, reports_dir = work / "run", work / "reports"
    overrides = {"run_dir": str(run_dir), "reports_dir": str(reports_dir), **parse_overrides(args.set)}
    if not args.keep_world:
        overrides.setdefault("data.tinyworld_dir", str(work / "tinyworld"))
    t0 = time.perf_counter()
    runs = run_pipeline(args.profile, args.only, overrides, options=PipelineOptions())
    wall = time.perf_counter() - t0
    calibration = read_calibration(reports_dir)
    print(time_table(runs, calibration))
    report = {"calibration": calibration, "profile": args.profile, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "only": args.only or "all", "overrides": parse_overrides(args.set), "fresh_world": not args.keep_world,
              "cpu_count": os.cpu_count(), "load_avg_end": os.getloadavg()[0], "wall_seconds": round(wall, 1),
              "total_seconds": round(sum(r.seconds for r in runs), 1),
              "notebooks": [{"name": r.name, "seconds": round(r.seconds, 1), "status": r.status} for r in runs],
              "phases": collect_phases(run_dir)}
    out = Path(args.out) if Path(args.out).is_absolute() else REPO_ROOT / args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n")
    out.with_suffix(".md").write_text(markdown(report))
    print(markdown(report))
    return report


if __name__ == "__main__":
    main()
