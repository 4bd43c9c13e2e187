"""Experiment tracking for long runs: the metrics a stage logs to JSONL, also sent to a tracker.

`sft.report_to` goes to TRL/transformers as `report_to` (their own integrations); `grpo.report_to`
goes through `open_tracker` here, so the GRPO curves carry exactly the names of `metrics.jsonl`
(`reward/retriever`, `kl/generator`, `val/ex`, ...). Both write TensorBoard event files into the
stage's output folder under `runs/`; wandb and trackio keep their own local stores (offline unless
the user has logged in to them). "none" (the tiny profile's default) tracks nothing.
"""
from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..config.choices import TRACKERS

PROJECT = "acesql"


class Tracker:
    """No tracking: the interface the trackers below share."""

    kind = "none"

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        pass

    def close(self) -> None:
        pass


def scalars(metrics: Mapping[str, Any]) -> dict[str, float]:
    """The finite numeric entries of a metrics record (booleans and text are left out)."""
    out = {}
    for k, v in metrics.items():
        if isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(float(v)):
            out[k] = float(v)
    return out


class TensorBoardTracker(Tracker):
    kind = "tensorboard"

    def __init__(self, log_dir: Path):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(log_dir))

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        for k, v in scalars(metrics).items():
            self.writer.add_scalar(k, v, step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandbTracker(Tracker):
    kind = "wandb"

    def __init__(self, log_dir: Path, run_name: str, config: Mapping[str, Any] | None):
        import wandb

        self.wandb = wandb
        self.run = wandb.init(project=PROJECT, name=run_name or None, dir=str(log_dir), config=dict(config or {}))

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        self.run.log(scalars(metrics), step=step)

    def close(self) -> None:
        self.run.finish()


class TrackioTracker(Tracker):
    kind = "trackio"

    def __init__(self, run_name: str, config: Mapping[str, Any] | None):
        import trackio

        self.trackio = trackio
        trackio.init(project=PROJECT, name=run_name or None, config=dict(config or {}))

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        self.trackio.log(scalars(metrics), step=step)

    def close(self) -> None:
        self.trackio.finish()


_PACKAGES = {"tensorboard": "tensorboard", "wandb": "wandb", "trackio": "trackio"}


def open_tracker(kind: str, log_dir: str | Path, run_name: str = "", config: Mapping[str, Any] | None = None,
                 setting: str = "report_to") -> Tracker:
    """The tracker named by `kind` (one of config.TRACKERS); `setting` names the config key in errors."""
    if kind not in TRACKERS:
        raise ValueError(f"{setting}: unknown tracker {kind!r}; use one of {TRACKERS}")
    if kind == "none":
        return Tracker()
    log_dir = Path(log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    try:
        if kind == "tensorboard":
            return TensorBoardTracker(log_dir)
        if kind == "wandb":
            return WandbTracker(log_dir, run_name, config)
        return TrackioTracker(run_name, config)
    except ImportError as e:
        raise ImportError(f"{setting}={kind} needs the {_PACKAGES[kind]!r} package (pip install {_PACKAGES[kind]}): "
                          f"{e}") from e
