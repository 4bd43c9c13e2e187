"""What every notebook and command starts with: the resolved config, its paths, and seeds."""
from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .profiles import load_config
from .settings import Config
from .paths import Paths


def seed_everything(seed: int) -> None:
    random.seed(seed)
    try:
        import numpy as np

        np.random.seed(seed)
    except ImportError:  # pragma: no cover - numpy ships with the pinned environment
        pass
    try:
        import torch

        torch.manual_seed(seed)
    except ImportError:  # pragma: no cover
        pass


@dataclass
class RunContext:
    cfg: Config
    paths: Paths

    @classmethod
    def create(cls, profile: str = "tiny", overrides: dict[str, Any] | None = None) -> "RunContext":
        cfg = load_config(profile, overrides)
        if cfg.profile == "tiny":  # the tiny profile never reaches a hub
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        seed_everything(cfg.seed)
        return cls(cfg, Paths.from_config(cfg).ensure())

    def write_metrics(self, notebook: str, metrics: dict[str, Any]) -> Path:
        """Headline numbers of one notebook, read back by the reports stage and the smoke tests."""
        path = self.paths.metrics / f"{notebook}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        payload = {"profile": self.cfg.profile, "notebook": notebook, **metrics}
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(payload, indent=2, sort_keys=True, default=_jsonable) + "\n")
        tmp.replace(path)
        return path

    def read_metrics(self, notebook: str) -> dict[str, Any]:
        path = self.paths.metrics / f"{notebook}.json"
        if not path.exists():
            raise FileNotFoundError(f"{path}: metrics of notebook {notebook!r} not found; run it first")
        return json.loads(path.read_text())


def _jsonable(o: Any) -> Any:
    if isinstance(o, (set, frozenset)):
        return sorted(o)
    if isinstance(o, Path):
        return str(o)
    if hasattr(o, "item"):
        return o.item()
    raise TypeError(f"cannot write {type(o).__name__} to metrics JSON")
