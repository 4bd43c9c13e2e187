"""The small RL run the GRPO tests share (conftest's session fixture `rl_template`, built once by
tests/rl_setup.py): each test trains in its own copy and never writes into the template."""
from __future__ import annotations

import shutil
from pathlib import Path


def fresh_run(template: Path, tmp_path: Path, name: str) -> Path:
    """A copy of the template run folder (its models, pool and RL questions) under `tmp_path / name`."""
    run = tmp_path / name
    shutil.copytree(template, run)
    return run
