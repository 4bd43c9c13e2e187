"""Run the ordered notebooks headless with papermill: the engine of `make reproduce`.

Each notebook receives the profile and overrides through its `parameters` cell, is written
executed to `reports/<profile>/executed/`, and the run stops at the first failure naming the
notebook and the cell that failed (the executed copy keeps the traceback).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from .config import REPO_ROOT, ConfigError, load_config, parse_overrides
from .paths import Paths

NOTEBOOK_DIR = REPO_ROOT / "notebooks"


class NotebookFailed(RuntimeError):
    """A pipeline notebook raised; the message names the notebook, the cell and the error."""


@dataclass
class NotebookRun:
    name: str
    seconds: float
    status: str  # "ok" or "failed"
    output: str
    error: str = ""


def pipeline_notebooks(only: list[str] | None = None) -> list[Path]:
    """The numbered notebooks in order; `only` selects by prefix (`00`) or stem (`00_data`)."""
    books = sorted(NOTEBOOK_DIR.glob("[0-9][0-9]_*.ipynb"))
    if only:
        chosen = [b for b in books if any(b.stem == o or b.stem.startswith(o) for o in only)]
        missing = [o for o in only if not any(b.stem == o or b.stem.startswith(o) for b in books)]
        if missing:
            raise FileNotFoundError(f"no notebook matches {missing} in {NOTEBOOK_DIR} (have: {[b.stem for b in books]})")
        return chosen
    return books


def _failed_cell(exc: Exception) -> str:
    """papermill's error carries the cell index and the exception; say it in one line."""
    parts = [f"cell {getattr(exc, 'exec_count', '?')}"]
    for attr in ("ename", "evalue"):
        if getattr(exc, attr, None):
            parts.append(str(getattr(exc, attr)))
    return ": ".join(parts)


def run_notebook(nb: Path, out: Path, parameters: dict[str, Any], kernel: str = "python3",
                 progress: bool = True, timeout_s: int | None = None) -> NotebookRun:
    import papermill as pm

    t0 = time.perf_counter()
    try:
        pm.execute_notebook(str(nb), str(out), parameters=parameters, kernel_name=kernel, cwd=str(nb.parent),
                            progress_bar=progress, log_output=False, request_save_on_cell_execute=True,
                            execution_timeout=timeout_s)
    except Exception as exc:  # papermill wraps the kernel's exception; keep the executed copy
        return NotebookRun(nb.stem, time.perf_counter() - t0, "failed", str(out), _failed_cell(exc))
    return NotebookRun(nb.stem, time.perf_counter() - t0, "ok", str(out))


def run_pipeline(profile: str = "tiny", only: list[str] | None = None, overrides: dict[str, Any] | None = None,
                 kernel: str = "python3", progress: bool = True, reports_dir: Path | None = None) -> list[NotebookRun]:
    cfg = load_config(profile, overrides)  # fail fast on a bad profile, before any kernel starts
    paths = Paths.from_config(cfg)
    reports = reports_dir or paths.reports
    executed = reports / "executed"
    executed.mkdir(parents=True, exist_ok=True)
    log_path = reports / "pipeline.jsonl"
    books = pipeline_notebooks(only)
    runs: list[NotebookRun] = []
    bar = tqdm(books, desc=f"pipeline[{cfg.profile}]", unit="notebook", disable=not progress)
    for nb in bar:
        bar.set_postfix_str(nb.stem)
        params = {"profile": profile, "overrides": overrides or {}}
        run = run_notebook(nb, executed / nb.name, params, kernel=kernel, progress=progress)
        runs.append(run)
        with log_path.open("a") as f:
            f.write(json.dumps({"time": time.time(), "profile": cfg.profile, **run.__dict__}) + "\n")
        if run.status != "ok":
            raise NotebookFailed(f"{nb.name} failed at {run.error}; executed notebook kept at {run.output}")
    return runs


def artefacts(reports: Path) -> list[Path]:
    return sorted(p for p in reports.rglob("*") if p.is_file() and "executed" not in p.parts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Run the ACE-SQL notebooks headless with papermill.")
    ap.add_argument("--profile", default="tiny", help="configs/<profile>.yaml or a path to a YAML file")
    ap.add_argument("--only", nargs="*", help="notebook prefixes to run, e.g. 00 01")
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                    help="config overrides, e.g. grpo.max_steps=4 (values parsed as YAML)")
    ap.add_argument("--kernel", default="python3")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    try:
        overrides = parse_overrides(args.set)
    except ConfigError as e:
        ap.error(str(e))
    os.environ.setdefault("MPLBACKEND", "Agg")
    t0 = time.perf_counter()
    try:
        runs = run_pipeline(args.profile, args.only, overrides, args.kernel, progress=not args.no_progress)
    except NotebookFailed as e:
        print(f"\nFAILED: {e}", file=sys.stderr)
        return 1
    reports = Paths.from_config(load_config(args.profile, overrides)).reports
    print(f"\n{len(runs)} notebook(s) in {time.perf_counter() - t0:.0f} s:")
    for r in runs:
        print(f"  {r.name:<28} {r.seconds:7.1f} s  {r.status}")
    files = artefacts(reports)
    print(f"\n{len(files)} artefact(s) under {reports.relative_to(REPO_ROOT) if reports.is_relative_to(REPO_ROOT) else reports}:")
    for p in files:
        print(f"  {p.relative_to(reports)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
