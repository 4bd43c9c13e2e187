"""Every path the kit reads or writes, resolved in one place from the profile.

Relative paths in a profile are relative to the repository root, so notebooks (which papermill
runs from `notebooks/`) and modules see the same files.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from .settings import Config

REPO_ROOT = Path(__file__).resolve().parents[2]  # acesql_lib/config/paths.py -> the checkout


def resolve(path: str | Path) -> Path:
    p = Path(path)
    return p if p.is_absolute() else REPO_ROOT / p


EVAL_CACHE = "eval_cache"  # a run folder's (or a study's shared) cache of finished evaluations
TIMES_NAME = "pipeline_times.json"  # under a run's reports folder: each notebook's wall time, the calibration

MAIN_VARIANT = "full"  # the GRPO run of the full method (grpo_run.ABLATIONS), the one notebooks 05-07 read as "rl"
GRPO_METRICS = "04_joint_grpo"  # notebook 04's metrics, the main run's; every other variant's beside it
_RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def check_variant(variant: str) -> str:
    """`variant` when it can name a run folder and a metrics file (letters, digits, `_`, `-`, `.`), else a ValueError."""
    if not isinstance(variant, str) or not _RUN_NAME.fullmatch(variant):
        raise ValueError(f"variant {variant!r}: a GRPO run's name is letters, digits, '_', '-' and '.', "
                         "starting with a letter or digit")
    return variant


def grpo_metrics_name(variant: str = MAIN_VARIANT) -> str:
    """The metrics name notebook 04 writes for the GRPO run `variant` (`<reports>/metrics/<name>.json`): the
    main run's is `GRPO_METRICS`, any other variant's `<GRPO_METRICS>_<variant>`, so a variant stepped through
    notebook 04 never overwrites the main run's metrics."""
    return GRPO_METRICS if check_variant(variant) == MAIN_VARIANT else f"{GRPO_METRICS}_{variant}"


@dataclass(frozen=True)
class Paths:
    profile: str
    run: Path  # runs/<profile>: models, checkpoints, rollouts, logs (not in git)
    reports: Path  # reports/<profile>: tables, figures, metrics, executed notebooks (generated)

    @classmethod
    def from_config(cls, cfg: Config) -> "Paths":
        run = resolve(cfg.run_dir) if cfg.run_dir else REPO_ROOT / "runs" / cfg.profile
        reports = resolve(cfg.reports_dir) if cfg.reports_dir else REPO_ROOT / "reports" / cfg.profile
        return cls(profile=cfg.profile, run=run, reports=reports,
                   tinyworld=resolve(cfg.data.tinyworld_dir), rl_selection=cfg.distill.rl_selection)

    # data ------------------------------------------------------------------------------------
    @property
    def data(self) -> Path:
        return self.run / "data"

    tinyworld: Path = REPO_ROOT / "data" / "tinyworld"  # shared by profiles that use it; rebuilt only when its manifest changes
    rl_selection: str = "stage1"  # distill.rl_selection: which folder holds the RL questions and their pool

    @property
    def filtered_pool(self) -> Path:
        return self.data / "filtered_pool.json"

    # stage 1 ---------------------------------------------------------------------------------
    @property
    def base_model(self) -> Path:
        return self.run / "models" / "base"

    @property
    def distill(self) -> Path:
        return self.run / "distill"

    @property
    def rl_data(self) -> Path:
        """Where `rl_questions.json` and the initial `pool.json` live: stage 1's folder, or with
        distill.rl_selection "sft_model" the folder of the SFT model's own rollouts."""
        return self.run / "rl_select" if self.rl_selection == "sft_model" else self.distill

    @property
    def sft_model(self) -> Path:
        return self.run / "models" / "sft"

    # stage 2 ---------------------------------------------------------------------------------
    def grpo_run(self, name: str = MAIN_VARIANT) -> Path:
        return self.run / "grpo" / check_variant(name)

    # reports ---------------------------------------------------------------------------------
    @property
    def metrics(self) -> Path:
        return self.reports / "metrics"

    @property
    def figures(self) -> Path:
        return self.reports / "figures"

    @property
    def tables(self) -> Path:
        return self.reports / "tables"

    @property
    def report_dirs(self) -> "ReportDirs":
        """Where this profile's reports read (metrics, run) and write (tables, figures)."""
        return ReportDirs(self.metrics, self.run, self.tables, self.figures)

    @property
    def executed(self) -> Path:
        return self.reports / "executed"

    @property
    def eval_dir(self) -> Path:
        return self.run / "eval"

    @property
    def eval_cache(self) -> Path:
        """Finished evaluations by key (`evaluate.eval_key`), read back instead of redone."""
        return self.run / EVAL_CACHE

    def ensure(self) -> "Paths":
        for d in (self.run, self.data, self.metrics, self.figures, self.tables, self.executed):
            d.mkdir(parents=True, exist_ok=True)
        return self


@dataclass(frozen=True)
class ReportDirs:
    """The four folders reports read from and write to: a profile's (`Paths.report_dirs`), or any
    four (tests use tmp dirs; a multi-seed study reads one seed's metrics beside its own outputs)."""

    metrics: Path
    run: Path
    tables: Path
    figures: Path

    @classmethod
    def of(cls, where: "Paths | ReportDirs | None", cfg: Config) -> "ReportDirs":
        if isinstance(where, ReportDirs):
            return where
        return (where or Paths.from_config(cfg)).report_dirs
