"""A launched command closes its process group before Python tears down (acesql_lib/runtime/process_group.py):
on return and on a coordinated SystemExit, not after another error; sft.main and grpo_run.main end inside it."""
from __future__ import annotations

import pytest
import torch.distributed as dist

from acesql_lib.train import grpo_run, sft
from acesql_lib.runtime.process_group import closed_at_the_end


@pytest.fixture
def group(tmp_path):
    """A one-rank gloo group in this process, as a launched rank holds one; destroyed if a test left it."""
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    yield
    if dist.is_initialized():
        dist.destroy_process_group()


def test_the_group_is_closed_when_the_body_returns(group):
    with closed_at_the_end():
        assert dist.is_initialized()
    assert not dist.is_initialized()


def test_a_coordinated_stop_closes_the_group_and_still_exits(group):
    with pytest.raises(SystemExit, match="checkpoint saved"):
        with closed_at_the_end():
            raise SystemExit("SIGTERM: checkpoint saved")
    assert not dist.is_initialized()


def test_after_another_error_the_group_is_left_alone(group):
    """Another rank may still be in a collective: the error surfaces as it is, the group untouched."""
    with pytest.raises(RuntimeError, match="boom"):
        with closed_at_the_end():
            raise RuntimeError("boom")
    assert dist.is_initialized()


def test_no_group_no_error():
    with closed_at_the_end():
        pass
    assert not dist.is_initialized()


def test_sft_main_closes_the_group(group, monkeypatch):
    monkeypatch.setattr(sft, "_main", lambda argv: "trained")
    assert sft.main([]) == "trained"
    assert not dist.is_initialized()


def test_grpo_main_closes_the_group_after_training_and_after_a_sigterm_stop(group, monkeypatch, tmp_path):
    stops = []

    class Trainer:
        def train(self, stop_after=None):
            stops.append(stop_after)
            raise SystemExit("SIGTERM: checkpoint of step 1 saved")

    monkeypatch.setattr(grpo_run, "build_trainer", lambda cfg, paths, variant: Trainer())
    with pytest.raises(SystemExit):
        grpo_run.main(["--config", "tiny", "--stop-after", "1", "--set", f"run_dir={tmp_path / 'run'}"])
    assert stops == [1] and not dist.is_initialized()
