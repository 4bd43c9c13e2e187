"""The multi-seed study behind `make study`: every RL variant over several seeds, claims pooled over seeds.

Layout (under `runs/<study>/` and `reports/<study>/`, default study name `<profile>-study`):

- the shared stages, once: notebooks 00-03 (data, filtering, base model, self-distillation, mixed
  SFT) write `runs/<study>/{data,distill,models}`; the RL seed does not touch them;
- per seed k: `runs/<study>/seed-<k>/` links those three folders and runs notebooks 04-06 with
  `grpo.seed = k` (joint GRPO, evaluation of base/SFT/RL, the ablation variants), so every RL
  variant is trained and evaluated once per seed; `reports/<study>/seed-<k>/` holds its notebooks;
- then `reports/<study>/tables/` (the claims pooled over seeds, `acesql_lib.reports.claims`) and
  `reports/<study>/figures/` (training curves as the mean over seeds with a min-max band).

Resumable: a finished part leaves `study_done.json` holding the settings it ran with; a rerun skips
the parts whose record matches and reruns the others (the notebooks themselves resume a killed
GRPO run). Progress: a bar over the parts, and each notebook's own bar.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from ..runtime.progress import tqdm

from ..config.profiles import load_config, parse_overrides
from ..runtime.reuse_keys import code_hash, settings_hash
from ..config.paths import EVAL_CACHE, REPO_ROOT

SHARED_NOTEBOOKS = ["00", "01", "02", "03"]
SEED_NOTEBOOKS = ["04", "05", "06"]
SHARED_DIRS = ("data", "distill", "models")  # what every seed reads from the shared stages
SHARED_CACHES = (EVAL_CACHE,)  # what every seed reuses: the base and SFT evaluations are the same for all (evaluate_set)
DONE = "study_done.json"
# the modules notebooks 04-06 run a seed's part from; its key hashes them and every module they import
PART_CODE = ("train.grpo_run", "evaluation.evaluate", "evaluation.variants", "pipeline.tinybase")


def part_settings(profile: str, overrides: dict[str, Any], seed: int | None, start: str = "") -> dict[str, Any]:
    """What a part's results depend on: profile, overrides, its RL seed, the kit's code and, for a
    seed, the SFT model it starts from (`models.model_tag`), so rebuilt shared stages redo every seed."""
    return {"profile": profile, "overrides": overrides, "seed": seed, "start": start,
            "code": code_hash(*PART_CODE)}


def is_done(folder: Path, settings: dict[str, Any]) -> bool:
    record = Path(folder) / DONE
    try:
        return json.loads(record.read_text()).get("settings_hash") == settings_hash(settings)
    except (OSError, json.JSONDecodeError, AttributeError):
        return False


def mark_done(folder: Path, settings: dict[str, Any], seconds: float) -> None:
    Path(folder).mkdir(parents=True, exist_ok=True)
    (Path(folder) / DONE).write_text(json.dumps({"settings_hash": settings_hash(settings), "settings": settings,
                                                 "seconds": round(seconds, 1), "finished": time.time()}, indent=1))


def pending_seeds(run_root: Path, seeds: list[int], profile: str, overrides: dict[str, Any],
                  start: str = "") -> list[int]:
    """The seeds whose part is not finished with these settings, in the order asked."""
    return [k for k in seeds
            if not is_done(Path(run_root) / f"seed-{k}", part_settings(profile, overrides, k, start))]


def link_shared(seed_dir: Path, shared: Path) -> None:
    """Point `seed_dir/{data,distill,models}` at the shared stages and `seed_dir/eval_cache` at the shared
    evaluation cache (relative links; idempotent)."""
    seed_dir.mkdir(parents=True, exist_ok=True)
    for name in SHARED_CACHES:
        (shared / name).mkdir(parents=True, exist_ok=True)
    for name in (*SHARED_DIRS, *SHARED_CACHES):
        link, target = seed_dir / name, Path(os.path.relpath(shared / name, seed_dir))
        if link.is_symlink() and Path(os.readlink(link)) == target:
            continue
        if link.exists() or link.is_symlink():
            raise FileExistsError(f"{link}: exists and is not a link to the shared {name}/; move it away")
        link.symlink_to(target, target_is_directory=True)


def seed_overrides(overrides: dict[str, Any], run_root: Path, reports_root: Path, k: int) -> dict[str, Any]:
    return {**overrides, "grpo.seed": k, "run_dir": str(run_root / f"seed-{k}"),
            "reports_dir": str(reports_root / f"seed-{k}")}


def run_study(profile: str = "tiny", seeds: list[int] | None = None, overrides: dict[str, Any] | None = None,
              name: str = "", progress: bool = True) -> Path:
    """Run (or resume) the study; returns `reports/<study>/`."""
    from ..models.loading import model_tag
    from .runner import PipelineOptions, run_pipeline
    from ..config.paths import ReportDirs
    from ..reports import ReportInputs, build_figures, build_tables

    seeds, overrides = list(seeds if seeds is not None else [0, 1, 2]), dict(overrides or {})
    if len(seeds) < 1 or len(set(seeds)) != len(seeds):
        raise ValueError(f"study: seeds must be distinct and at least one, got {seeds}")
    name = name or f"{load_config(profile, overrides).profile}-study"
    run_root, reports_root = REPO_ROOT / "runs" / name, REPO_ROOT / "reports" / name
    shared = {**overrides, "run_dir": str(run_root), "reports_dir": str(reports_root / "shared")}
    bar = tqdm(total=1 + len(seeds), desc=f"study[{name}]", unit="part", disable=not progress)
    settings = part_settings(profile, overrides, None)
    if not is_done(run_root, settings):
        t0 = time.perf_counter()
        run_pipeline(profile, SHARED_NOTEBOOKS, shared,
                     PipelineOptions(progress=progress, reports_dir=reports_root / "shared"))
        mark_done(run_root, settings, time.perf_counter() - t0)
    bar.update(1)
    start = model_tag(run_root / "models" / "sft")
    todo = pending_seeds(run_root, seeds, profile, overrides, start)
    bar.update(len(seeds) - len(todo))
    for k in todo:
        bar.set_postfix_str(f"seed {k}")
        seed_dir = run_root / f"seed-{k}"
        link_shared(seed_dir, run_root)
        t0 = time.perf_counter()
        run_pipeline(profile, SEED_NOTEBOOKS, seed_overrides(overrides, run_root, reports_root, k),
                     PipelineOptions(progress=progress, reports_dir=reports_root / f"seed-{k}"))
        mark_done(seed_dir, part_settings(profile, overrides, k, start), time.perf_counter() - t0)
        bar.update(1)
    bar.close()
    cfg = load_config(profile, overrides)
    first = reports_root / f"seed-{seeds[0]}" / "metrics"
    dirs = ReportDirs(first, run_root, reports_root / "tables", reports_root / "figures")
    inputs = ReportInputs(dirs.metrics, dirs.run)  # per-question outcomes of every seed under run_root/seed-*/
    for table in build_tables(cfg, inputs):
        table.write(dirs.tables, cfg.reports.table_formats)
    build_figures(cfg, inputs, dirs.figures)  # curves: mean over seeds with a min-max band
    return reports_root


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Every RL variant over several seeds; claims pooled over seeds.")
    ap.add_argument("--profile", default="tiny")
    ap.add_argument("--seeds", nargs="*", type=int, default=[0, 1, 2])
    ap.add_argument("--name", default="", help="study folder name (default <profile>-study)")
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="config overrides for every part")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    os.environ.setdefault("MPLBACKEND", "Agg")
    t0 = time.perf_counter()
    out = run_study(args.profile, args.seeds, parse_overrides(args.set), args.name, progress=not args.no_progress)
    print(f"study written to {out} in {time.perf_counter() - t0:.0f} s; claims: {out / 'tables' / 'claims.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
