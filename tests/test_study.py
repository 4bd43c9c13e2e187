"""The study's bookkeeping: which seeds are finished, links to the shared stages, per-seed overrides."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from acesql_lib.pipeline import study
from acesql_lib.config.profiles import load_config


def test_finished_seeds_are_skipped_and_others_rerun(tmp_path):
    root = tmp_path / "runs" / "tiny-study"
    study.mark_done(root / "seed-0", study.part_settings("tiny", {}, 0, "sft-abc"), 12.0)
    study.mark_done(root / "seed-1", study.part_settings("tiny", {"grpo.max_steps": 2}, 1, "sft-abc"), 3.0)
    (root / "seed-2").mkdir(parents=True)
    (root / "seed-2" / study.DONE).write_text("{broken")  # a record cut short is not a finished seed
    assert study.pending_seeds(root, [0, 1, 2, 3], "tiny", {}, "sft-abc") == [1, 2, 3]
    assert study.pending_seeds(root, [0], "tiny", {}, "sft-other") == [0]  # the SFT model was rebuilt
    study.mark_done(root / "seed-1", study.part_settings("tiny", {}, 1, "sft-abc"), 9.0)
    assert study.pending_seeds(root, [3, 1, 0], "tiny", {}, "sft-abc") == [3]


def test_seeds_link_the_shared_stages(tmp_path):
    root = tmp_path / "study"
    for name in study.SHARED_DIRS:
        (root / name).mkdir(parents=True)
    (root / "models" / "sft").mkdir()
    seed = root / "seed-4"
    study.link_shared(seed, root)
    study.link_shared(seed, root)  # idempotent
    assert (seed / "models" / "sft").is_dir() and os.readlink(seed / "distill") == "../distill"
    assert (root / "eval_cache").is_dir() and os.readlink(seed / "eval_cache") == "../eval_cache"  # made, shared
    other = root / "seed-5"
    (other / "models").mkdir(parents=True)  # a real folder where a link belongs is not overwritten
    with pytest.raises(FileExistsError, match="seed-5/models: exists and is not a link"):
        study.link_shared(other, root)


def test_seed_overrides_change_only_the_rl_seed_and_the_folders(tmp_path):
    o = study.seed_overrides({"grpo.max_steps": 6}, tmp_path / "runs", tmp_path / "reports", 2)
    cfg = load_config("tiny", o)
    base = load_config("tiny", {"grpo.max_steps": 6})
    assert (cfg.grpo.seed, cfg.seed, cfg.grpo.max_steps) == (2, base.seed, 6)
    assert Path(cfg.run_dir) == tmp_path / "runs" / "seed-2" and Path(cfg.reports_dir) == tmp_path / "reports" / "seed-2"
    assert cfg.model == base.model and cfg.distill == base.distill and cfg.sft == base.sft  # shared stages unchanged
    with pytest.raises(ValueError, match="distinct"):
        study.run_study("tiny", [1, 1])
