"""Run the ordered notebooks headless with papermill: the engine of `make reproduce`.

Each notebook receives the profile and overrides through its `parameters` cell, is written
executed to `reports/<profile>/executed/`, and the run stops at the first failure naming the
notebook and the cell that failed (the executed copy keeps the traceback).

While a notebook runs, its kernel's progress bars (tqdm on stderr) are relayed to the terminal as
one line per bar every `progress_every_s` seconds, e.g.
`02_self_distillation: base model, step 420/1000, ~6 min left`, together with the library's own
`[stage] ...` messages. At the end the runner prints a per-notebook wall-time table and writes it
to `reports/<profile>/pipeline_times.json`, then the run card (`run_card.json` and `run_card.md`:
commit, settings, environment, machine and data digests, times, metrics; acesql_lib/pipeline/run_card.py).

Each notebook runs in a fresh kernel, as papermill starts it.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from ..config.checks import ConfigError
from ..config.profiles import load_config, parse_overrides
from ..config.paths import Paths, REPO_ROOT, TIMES_NAME

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


def pipeline_notebooks(only: list[str] | None = None, notebook_dir: Path = NOTEBOOK_DIR) -> list[Path]:
    """The numbered notebooks in order; `only` selects by prefix (`00`) or stem (`00_data`)."""
    books = sorted(Path(notebook_dir).glob("[0-9][0-9]_*.ipynb"))
    if only:
        chosen = [b for b in books if any(b.stem == o or b.stem.startswith(o) for o in only)]
        missing = [o for o in only if not any(b.stem == o or b.stem.startswith(o) for b in books)]
        if missing:
            raise FileNotFoundError(f"no notebook matches {missing} in {notebook_dir} (have: {[b.stem for b in books]})")
        return chosen
    return books


# tqdm's default text: "desc: 42%|####      | 420/1000 [02:10<03:00,  3.2step/s, postfix]"
_BAR = re.compile(r"^(?:(?P<desc>.*?): ?)?\s*(?P<pct>\d+)%\|[^|]*\|\s*(?P<n>[\d.]+[kMG]?)/(?P<total>[\d.]+[kMG]?)"
                  r"\s*\[(?P<elapsed>[\d:]+)<(?P<left>[\d:?]+)(?:,\s*(?P<rate>[^,\]]*))?")
_UNIT = re.compile(r"(?:[\d.]+)?\s*(?:s/(?P<a>[A-Za-z_ ]+)|(?P<b>[A-Za-z_ ]+)/s)")


def _clock_seconds(clock: str) -> float | None:
    """tqdm's "1:02:03" / "02:03" as seconds; None for "?"."""
    if "?" in clock:
        return None
    secs = 0.0
    for part in clock.split(":"):
        secs = secs * 60 + float(part)
    return secs


def _time_left(seconds: float | None) -> str:
    if seconds is None:
        return "time left unknown"
    if seconds < 90:
        return f"~{seconds:.0f} s left"
    return f"~{seconds / 60:.0f} min left"


def progress_line(notebook: str, text: str) -> tuple[str, str, bool] | None:
    """A tqdm line of a kernel as (bar name, `notebook: what, unit i/n, ~m min left`, finished); None if not a bar."""
    m = _BAR.match(text.strip())
    if not m:
        return None
    unit_m = _UNIT.search(m["rate"] or "")
    unit = (unit_m["a"] or unit_m["b"]).strip() if unit_m else ""
    unit = "" if unit == "it" else unit  # tqdm's default unit says nothing
    desc = (m["desc"] or "").strip() or "working"
    count = f"{unit} {m['n']}/{m['total']}".strip()
    done = m["n"] == m["total"]
    tail = f"done in {m['elapsed']}" if done else _time_left(_clock_seconds(m["left"]))
    return desc, f"{notebook}: {desc}, {count}, {tail}", done


class ProgressRelay:
    """A file-like sink for a kernel's stdout/stderr (papermill's `stdout_file`/`stderr_file`).

    tqdm redraws its bar with carriage returns; the relay keeps the latest state of each bar and
    prints it through `emit` at most every `every_s` seconds per bar (and when the bar finishes or
    a new bar starts). Lines starting with "[" (the library's `[stage] message` convention) are
    passed on; with `echo_all` every line is.
    """

    def __init__(self, notebook: str, emit: Any = None, every_s: float = 10.0, echo_all: bool = False):
        self.notebook, self.every_s, self.echo_all = notebook, every_s, echo_all
        self.emit = emit or tqdm.write
        self._buffer = ""
        self._last: dict[str, float] = {}
        self._finished: set[str] = set()
        self.lines: list[str] = []  # everything emitted, in order

    def write(self, text: str) -> int:
        self._buffer += text
        *pieces, self._buffer = re.split(r"[\r\n]", self._buffer)
        for piece in pieces:
            self._take(piece)
        return len(text)

    def flush(self) -> None:  # papermill flushes after every message; a partial tqdm line is kept for later
        pass

    def close(self) -> None:
        if self._buffer:
            self._take(self._buffer)
            self._buffer = ""

    def _take(self, piece: str) -> None:
        if not piece.strip():
            return
        parsed = progress_line(self.notebook, piece)
        if parsed is None:
            if self.echo_all or piece.lstrip().startswith("["):
                self._say(f"{self.notebook}: {piece.strip()[:200]}")
            return
        name, line, done = parsed
        now = time.monotonic()
        first = name not in self._last
        if done and name in self._finished:
            return
        if first or done or now - self._last[name] >= self.every_s:
            self._last[name] = now
            if done:
                self._finished.add(name)
            else:
                self._finished.discard(name)
            self._say(line)

    def _say(self, line: str) -> None:
        self.lines.append(line)
        self.emit(line)


def _failed_cell(exc: Exception) -> str:
    """papermill's error carries the cell index and the exception; say it in one line."""
    parts = [f"cell {getattr(exc, 'exec_count', '?')}"]
    for attr in ("ename", "evalue"):
        if getattr(exc, attr, None):
            parts.append(str(getattr(exc, attr)))
    return ": ".join(parts)


KERNEL_PROGRESS = "text"  # a notebook's kernel draws text bars, which the relay reads (acesql_lib/runtime/progress.py)


def run_notebook(nb: Path, out: Path, parameters: dict[str, Any], kernel: str = "python3",
                 progress: bool = True, timeout_s: int | None = None, relay: ProgressRelay | None = None
                 ) -> NotebookRun:
    """Execute one notebook in a fresh kernel; with `relay` its kernel's output streams go through it as they
    arrive."""
    import papermill as pm

    t0 = time.perf_counter()
    before = os.environ.get("ACESQL_PROGRESS")
    os.environ["ACESQL_PROGRESS"] = KERNEL_PROGRESS
    try:
        pm.execute_notebook(str(nb), str(out), parameters=parameters, kernel_name=kernel, cwd=str(nb.parent),
                            progress_bar=progress, log_output=False, stdout_file=relay, stderr_file=relay,
                            request_save_on_cell_execute=True, execution_timeout=timeout_s)
    except Exception as exc:  # papermill wraps the kernel's exception; keep the executed copy
        return NotebookRun(nb.stem, time.perf_counter() - t0, "failed", str(out), _failed_cell(exc))
    finally:
        if before is None:
            os.environ.pop("ACESQL_PROGRESS", None)
        else:
            os.environ["ACESQL_PROGRESS"] = before
        if relay is not None:
            relay.close()
    return NotebookRun(nb.stem, time.perf_counter() - t0, "ok", str(out))


@dataclass(frozen=True)
class PipelineOptions:
    """How `run_pipeline` runs the notebooks, never what they compute.

    `kernel` names the Jupyter kernel; the kernels' progress is relayed (`ProgressRelay`, a line per bar every
    `progress_every_s` seconds through `emit`, every printed line with `echo_all`) unless `progress` is off.
    `reports_dir` replaces the profile's reports folder, `notebook_dir` the notebooks' folder. With `calibrate`,
    the wall times are written beside the calibration workload's time before and after the run (a few seconds;
    `acesql_lib.runtime.calibration`).
    """

    kernel: str = "python3"
    progress: bool = True
    reports_dir: Path | None = None
    notebook_dir: Path = NOTEBOOK_DIR
    progress_every_s: float = 10.0
    echo_all: bool = False
    emit: Any = None
    calibrate: bool = True


def run_pipeline(profile: str = "tiny", only: list[str] | None = None, overrides: dict[str, Any] | None = None,
                 options: PipelineOptions = PipelineOptions()) -> list[NotebookRun]:
    """Run the notebooks of `profile` (with `overrides`) in order, all or those `only` names, the way `options`
    says (`PipelineOptions`). The per-notebook wall times go to `pipeline_times.json` (and a line each to
    `pipeline.jsonl`) under the reports folder, also when a notebook fails, then the run card.
    """
    cfg = load_config(profile, overrides)  # fail fast on a bad profile, before any kernel starts
    paths = Paths.from_config(cfg)
    reports = options.reports_dir or paths.reports
    executed = reports / "executed"
    executed.mkdir(parents=True, exist_ok=True)
    log_path = reports / "pipeline.jsonl"
    books = pipeline_notebooks(only, options.notebook_dir)
    runs: list[NotebookRun] = []
    started = time.time()
    cal_start = _calibration() if options.calibrate else None
    bar = tqdm(books, desc=f"pipeline[{cfg.profile}]", unit="notebook", disable=not options.progress)
    try:
        for nb in bar:
            bar.set_postfix_str(nb.stem)
            params = {"profile": profile, "overrides": overrides or {}}
            relay = ProgressRelay(nb.stem, options.emit, options.progress_every_s, options.echo_all) \
                if options.progress else None
            run = run_notebook(nb, executed / nb.name, params, kernel=options.kernel, progress=options.progress,
                               relay=relay)
            runs.append(run)
            with log_path.open("a") as f:
                f.write(json.dumps({"time": time.time(), "profile": cfg.profile, **run.__dict__}) + "\n")
            if run.status != "ok":
                raise NotebookFailed(f"{nb.name} failed at {run.error}; executed notebook kept at {run.output}")
    finally:
        calibration = None
        if cal_start is not None:
            end = _calibration()
            calibration = {"seconds": round((cal_start + end) / 2, 3), "start": cal_start, "end": end}
        write_times(reports / TIMES_NAME, runs, cfg.profile, started, calibration)
        status = "ok" if len(runs) == len(books) and all(r.status == "ok" for r in runs) else "stopped"
        write_run_card(cfg, reports, overrides, status)
    return runs


def write_run_card(cfg: Any, reports: Path, overrides: dict[str, Any] | None, status: str) -> Path | None:
    """reports/run_card.json and run_card.md (acesql_lib/pipeline/run_card.py); a card that cannot be written is said,
    never allowed to hide the run's own outcome."""
    from .run_card import write_card

    try:
        return write_card(cfg, reports, overrides, status=status)
    except Exception as e:  # noqa: BLE001 (the notebooks' results stand without their card)
        print(f"[run card] not written: {type(e).__name__}: {e}", file=sys.stderr)
        return None


def _calibration() -> float:
    from ..runtime.calibration import measure

    return measure().seconds


def read_calibration(reports: Path) -> dict[str, float] | None:
    """The calibration of the last run written under `reports` (pipeline_times.json), if it took one."""
    path = reports / TIMES_NAME
    return json.loads(path.read_text()).get("calibration") if path.is_file() else None


def write_times(path: Path, runs: list[NotebookRun], profile: str, started: float,
                calibration: dict[str, float] | None = None) -> Path:
    """The per-notebook wall-time table as JSON: {profile, started, total_seconds, notebooks: [...]}, with the
    calibration workload's seconds at the start and the end of the run (`acesql_lib.runtime.calibration`) when taken."""
    table = {"profile": profile, "started": started, "total_seconds": round(sum(r.seconds for r in runs), 1),
             "notebooks": [{"name": r.name, "seconds": round(r.seconds, 1), "status": r.status} for r in runs]}
    if calibration:
        table["calibration"] = calibration
        table["total_units"] = round(table["total_seconds"] / calibration["seconds"], 1)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(table, indent=1) + "\n")
    return path


def time_table(runs: list[NotebookRun], calibration: dict[str, float] | None = None) -> str:
    """The per-notebook wall times as an aligned text table with each notebook's share of the total, and in
    units of the run's calibration workload when there is one (times that compare across days)."""
    total = sum(r.seconds for r in runs) or 1.0
    unit = (calibration or {}).get("seconds") or 0.0
    cal = lambda s: f" {s / unit:8.0f}" if unit else ""  # noqa: E731
    rows = [f"  {'notebook':<28} {'seconds':>8} {'share':>6}" + (f" {'x cal':>8}" if unit else "") + "  status"]
    rows += [f"  {r.name:<28} {r.seconds:8.1f} {r.seconds / total:6.0%}{cal(r.seconds)}  {r.status}" for r in runs]
    rows.append(f"  {'total':<28} {sum(r.seconds for r in runs):8.1f} {'':>6}{cal(total)}  ({total / 60:.1f} min)")
    if unit:
        rows.append(f"  x cal: seconds / {unit:.2f} s, the calibration workload's time in this run (mean of "
                    f"{calibration['start']:.2f} s before and {calibration['end']:.2f} s after; python -m "
                    "acesql_lib.runtime.calibration): compare these across days, not the seconds")
    return "\n".join(rows)


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
    ap.add_argument("--progress-every", type=float, default=10.0, metavar="S",
                    help="seconds between two progress lines of the same bar")
    ap.add_argument("--log-output", action="store_true", help="relay every line the notebooks print")
    args = ap.parse_args(argv)
    try:
        overrides = parse_overrides(args.set)
    except ConfigError as e:
        ap.error(str(e))
    os.environ.setdefault("MPLBACKEND", "Agg")
    reports = Paths.from_config(load_config(args.profile, overrides)).reports
    t0 = time.perf_counter()
    try:
        runs = run_pipeline(args.profile, args.only, overrides, PipelineOptions(
            kernel=args.kernel, progress=not args.no_progress, progress_every_s=args.progress_every,
            echo_all=args.log_output))
    except NotebookFailed as e:
        print(f"\nFAILED: {e}", file=sys.stderr)
        print(f"wall times so far in {reports / TIMES_NAME}", file=sys.stderr)
        return 1
    print(f"\n{len(runs)} notebook(s) in {time.perf_counter() - t0:.0f} s:")
    print(time_table(runs, read_calibration(reports)))
    files = artefacts(reports)
    print(f"\n{len(files)} artefact(s) under {reports.relative_to(REPO_ROOT) if reports.is_relative_to(REPO_ROOT) else reports}:")
    for p in files:
        print(f"  {p.relative_to(reports)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
