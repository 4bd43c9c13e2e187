"""Preflight: before a multi-day run, check everything the profile will need and print it as one table.

    python -m acesql_lib.pipeline.preflight --profile paper        (also `preflight_table(cfg)` in notebook 00)

Checks, in order: every data folder the profile reads (present, version, record counts, a database
for every record) and its checksums, the model (local folder or the Hugging Face cache, never the network),
GPUs and their memory against an estimate of what SFT and GRPO need per GPU, every installed package against
its pin (requirements-gpu.lock for a GPU profile, requirements-dev.txt otherwise; each mismatch named),
on GPUs whether torch sees CUDA and whether vllm was built for torch's CUDA and release, free disk for
checkpoints, and the steps and an estimated duration per stage. Each group of checks is a module of its own
(`preflight_data`, `preflight_memory`, `preflight_packages`, `preflight_stages`, rows in `preflight_rows`);
this one runs them in that order and makes the table.
Exit status 1 names every MISSING piece and every FAIL (GRPO's memory above the card, with what to
change); WARN rows (a version off its pin, SFT's rough memory estimate above the card, a count unlike the
paper's) are printed but do not fail. No check raises: an unexpected error becomes a MISSING row that
says what failed.
"""
from __future__ import annotations

import argparse
import sys
from typing import Any, Callable

from ..config.checks import ConfigError
from ..config.paths import Paths
from ..config.profiles import load_config, parse_overrides
from ..config.settings import Config
from .preflight_data import check_eval_sets, check_model, check_training_data
from .preflight_memory import check_disk, check_hardware, gpu_info, model_shape
from .preflight_packages import check_cuda, check_packages
from .preflight_rows import FAIL, MISSING, Row, WARN
from .preflight_stages import steps_and_hours


def _guarded(area: str, item: str, fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 (a preflight never stops at a traceback)
        return [Row(area, item, MISSING, f"check failed: {type(e).__name__}: {e}")]


def run_checks(cfg: Config, gpus: list[tuple[str, int]] | None = None) -> list[Row]:
    """Every row of the preflight table for `cfg`; `gpus` overrides what torch reports (tests)."""
    from ..data.layouts import ensure_layouts

    paths = Paths.from_config(cfg)
    rows: list[Row] = []
    if cfg.data.layouts_from:
        made = _guarded("data", "layouts", lambda: ensure_layouts(cfg, progress=False))
        if isinstance(made, list):
            rows += made
    rows += _guarded("data", "training pool", lambda: check_training_data(cfg))
    eval_result = _guarded("data", "evaluation sets", lambda: check_eval_sets(cfg))
    sizes: dict[str, int] = {}
    if isinstance(eval_result, tuple):
        eval_rows, sizes = eval_result
        rows += eval_rows
    else:
        rows += eval_result
    from ..data.checksums import preflight_rows  # the benchmark files against data/benchmarks.json, a row per benchmark

    rows += _guarded("checksums", "files", lambda: [Row("checksums", *r) for r in preflight_rows(cfg)])
    rows.append(_guarded("model", cfg.model.base_model, lambda: check_model(cfg)))
    shape, origin = model_shape(cfg)
    gpus = gpu_info() if gpus is None else gpus
    rows += _guarded("hardware", "GPUs", lambda: check_hardware(cfg, shape, gpus))
    rows += _guarded("packages", "versions", lambda: check_packages(cfg))
    rows += _guarded("packages", "CUDA", lambda: check_cuda(cfg))
    rows.append(_guarded("disk", "free space", lambda: check_disk(cfg, shape, paths)))
    rows += _guarded("stages", "steps", lambda: steps_and_hours(cfg, shape, sizes))
    return [r for item in rows for r in (item if isinstance(item, list) else [item])]


def format_table(rows: list[Row]) -> str:
    widths = [max(len(getattr(r, f)) for r in rows + [Row("area", "item", "status", "")]) for f in ("area", "item", "status")]
    lines = [f"{'area':<{widths[0]}}  {'item':<{widths[1]}}  {'status':<{widths[2]}}  detail"]
    lines.append("-" * (sum(widths) + 14))
    lines += [f"{r.area:<{widths[0]}}  {r.item:<{widths[1]}}  {r.status:<{widths[2]}}  {r.detail}" for r in rows]
    return "\n".join(lines)


def preflight_table(cfg: Config, gpus: list[tuple[str, int]] | None = None) -> tuple[str, list[Row]]:
    """(printable table, rows); for notebook 00."""
    rows = run_checks(cfg, gpus)
    return format_table(rows), rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Check data, model, hardware, packages and disk before a run.")
    ap.add_argument("--profile", default="paper")
    ap.add_argument("overrides", nargs="*", help="KEY=VALUE config overrides")
    args = ap.parse_args(argv)
    try:
        cfg = load_config(args.profile, parse_overrides(args.overrides))
    except ConfigError as e:
        print(f"preflight: {e}", file=sys.stderr)
        return 2
    table, rows = preflight_table(cfg)
    print(f"preflight for profile {cfg.profile}\n{table}")
    missing = [r for r in rows if r.status == MISSING]
    failing = [r for r in rows if r.status == FAIL]
    for name, bad in (("missing", missing), ("failing", failing)):
        if bad:
            print(f"\n{len(bad)} {name}: " + "; ".join(f"{r.area}/{r.item}" for r in bad), file=sys.stderr)
    if missing or failing:
        return 1
    print(f"\nall checks passed ({sum(r.status == WARN for r in rows)} warning(s))")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
