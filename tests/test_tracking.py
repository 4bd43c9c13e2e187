"""Experiment tracking offline: TensorBoard event files written by the tracker adapter (GRPO's
path) and by TRL's own integration (SFT's path) are read back and hold the logged values."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest

from acesql_lib.train.tracking import open_tracker, scalars
from helpers_tensorboard import read_events


def test_tensorboard_tracker_writes_the_metrics_under_their_names(tmp_path):
    tracker = open_tracker("tensorboard", tmp_path / "runs")
    tracker.log({"reward/retriever": 0.25, "step": 1, "val/ex": float("nan"), "note": "text"}, step=1)
    tracker.log({"reward/retriever": 0.75, "step": 2}, step=2)
    tracker.close()
    events = read_events(tmp_path / "runs")
    assert events["reward/retriever"] == [(1, 0.25), (2, 0.75)]
    assert "val/ex" not in events and "note" not in events  # non-finite and non-numeric values are left out


def test_none_tracks_nothing_and_a_bad_name_is_named(tmp_path):
    open_tracker("none", tmp_path / "runs").log({"x": 1.0}, 1)
    assert not (tmp_path / "runs").exists()
    with pytest.raises(ValueError, match="grpo.report_to: unknown tracker 'mlflow'"):
        open_tracker("mlflow", tmp_path, setting="grpo.report_to")
    assert scalars({"a": 1, "b": True, "c": 2.5}) == {"a": 1.0, "c": 2.5}


def test_config_rejects_an_unknown_tracker():
    from acesql_lib.config.checks import ConfigError
    from acesql_lib.config.profiles import load_config

    with pytest.raises(ConfigError, match="sft.report_to"):
        load_config("tiny", {"sft.report_to": "mlflow"})
    assert load_config("tiny").sft.report_to == "none" and load_config("tiny").grpo.report_to == "none"


def test_sft_reports_its_loss_to_tensorboard(tmp_path):
    from helpers_sft import CFG, SAMPLES, TEXTS, tiny_model

    from acesql_lib.models.loading import train_tiny_tokenizer
    from acesql_lib.train.sft import LOG_NAME, SFTRun, train_sft

    tokenizer = train_tiny_tokenizer(TEXTS, vocab_size=300)
    train_sft(tiny_model(tokenizer), tokenizer, SAMPLES, replace(CFG, report_to="tensorboard"), tmp_path,
              SFTRun(max_steps=3))
    logged = [json.loads(line) for line in (tmp_path / LOG_NAME).read_text().splitlines()]
    losses = [(r["step"], r["loss"]) for r in logged if "loss" in r]
    events = read_events(tmp_path / "runs")
    assert [s for s, _ in events["train/loss"]] == [s for s, _ in losses] == [1, 2, 3]
    assert [v for _, v in events["train/loss"]] == pytest.approx([v for _, v in losses], rel=1e-6)
