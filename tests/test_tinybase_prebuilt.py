"""The shipped tiny base model (`data/tiny_base/`, `model.tiny.prebuilt`): a run copies it in
instead of building when it was built from the run's settings and code, machine aside; otherwise the
run builds as before. The shipped copy must match this code, or `make reproduce` silently builds."""
import json
from pathlib import Path

import pytest
import torch

import acesql_lib.pipeline.tinybase as tinybase
from acesql_lib.config.context import RunContext
from acesql_lib.config.paths import resolve
from acesql_lib.pipeline.shipped_base import BUILD_FILES, MANIFEST, prebuilt_matches, rekey, ship
from acesql_lib.pipeline.tinybase import base_settings, build_tiny_base
from acesql_lib.data.tinyworld import build_profile_world, build_tinyworld


@pytest.mark.parametrize("profile", ["tiny", "rehearsal"])
def test_the_shipped_base_is_built_from_this_code_and_the_profile(profile, tmp_path, request):
    ctx = RunContext.create(profile, {"run_dir": str(tmp_path / "run"), "data.tinyworld_dir": str(tmp_path / "world")})
    cfg = ctx.cfg
    # the tiny profile's world is the session's (tests/conftest.py); the rehearsal's is built here
    world = (request.getfixturevalue("tiny_profile_world") if profile == "tiny"
             else build_profile_world(cfg.data, ctx.paths.tinyworld))
    folder = resolve(cfg.model.tiny.prebuilt)
    differs = prebuilt_matches(folder, base_settings(cfg, world))
    assert differs == [], (f"{cfg.model.tiny.prebuilt} no longer matches the code or the {profile} profile "
                           f"(differs in: {differs}); rebuild it: make ship-base PROFILE={profile}")
    manifest = json.loads((folder / MANIFEST).read_text())
    assert manifest["steps"] == cfg.model.tiny.steps and "prebuilt_from" not in manifest


class Trained(Exception):
    pass


def test_a_matching_shipped_base_is_copied_and_any_other_is_built(tmp_path, monkeypatch):
    over = {"data.tinyworld_dir": str(tmp_path / "world"), "data.tiny_n_train": 40, "data.tiny_n_dev": 10,
            "model.tiny.steps": 4, "model.tiny.batch_size": 8}

    def ctx(name, **extra):
        return RunContext.create("tiny", {**over, "run_dir": str(tmp_path / name), **extra})

    first = ctx("built", **{"model.tiny.prebuilt": ""})
    world = build_tinyworld(first.paths.tinyworld, first.cfg.data.seed, 40, 10)
    built = build_tiny_base(first.cfg, first.paths, world, progress=False)
    shipped = ship(built, tmp_path / "shipped")
    weights = (built / "model.safetensors").read_bytes()

    def no_training(*a, **k):
        raise Trained
    monkeypatch.setattr(tinybase, "train_sft", no_training)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 7)  # another machine: a thread count is no reason to build
    run = ctx("copied", **{"model.tiny.prebuilt": str(shipped)})
    path = build_tiny_base(run.cfg, run.paths, world, progress=False)
    assert (path / "model.safetensors").read_bytes() == weights
    manifest = json.loads((path / MANIFEST).read_text())
    assert manifest["prebuilt_from"] == str(shipped) and manifest["settings"]["torch_threads"] != 7
    assert build_tiny_base(run.cfg, run.paths, world, progress=False) == path  # reused under this machine's key
    with pytest.raises(ValueError, match="a copy of a shipped base"):
        ship(path, tmp_path / "again")
    with pytest.raises(Trained):  # a forced build never copies
        build_tiny_base(run.cfg, ctx("forced", **{"model.tiny.prebuilt": str(shipped)}).paths, world,
                        force=True, progress=False)

    other = ctx("other", **{"model.tiny.prebuilt": str(shipped), "model.tiny.lr": 1e-3})
    assert prebuilt_matches(shipped, base_settings(other.cfg, world)) == ["model", "sft"]
    with pytest.raises(Trained):  # other settings: built, never the shipped copy
        build_tiny_base(other.cfg, other.paths, world, progress=False)
    stale = json.loads((shipped / MANIFEST).read_text())
    stale["settings"]["code"] = "0" * 16  # shipped before a change to the building code
    (shipped / MANIFEST).write_text(json.dumps(stale))
    fresh = ctx("fresh", **{"model.tiny.prebuilt": str(shipped)})
    assert prebuilt_matches(shipped, base_settings(fresh.cfg, world)) == ["code"]
    with pytest.raises(Trained):
        build_tiny_base(fresh.cfg, fresh.paths, world, progress=False)
    (shipped / "model.safetensors").unlink()
    assert prebuilt_matches(shipped, base_settings(fresh.cfg, world)) == ["missing model.safetensors"]


def _fake_build(folder: Path, code: str, weights: bytes, loss: float = 0.5, **extra) -> Path:
    """A base folder as a build leaves it (the files `rekey` compares, and a manifest)."""
    folder.mkdir(parents=True)
    for name in BUILD_FILES:
        (folder / name).write_bytes(weights if name == "model.safetensors" else b"{}")
    (folder / "sft_log.jsonl").write_text("")
    settings = {"code": code, "model": {"tiny": {"steps": 4}}, "torch": "2.13.0", "torch_threads": 2}
    (folder / MANIFEST).write_text(json.dumps({"settings": settings, "config_hash": f"key-{code}", "steps": 4,
                                               "train_loss": loss, **extra}))
    return folder


def test_rekey_carries_the_shipped_weights_to_new_code_only_when_both_builds_are_the_same(tmp_path):
    shipped = _fake_build(tmp_path / "shipped", "old", b"weights built on another machine")
    old = _fake_build(tmp_path / "old", "old", b"weights built here")
    new = _fake_build(tmp_path / "new", "new", b"weights built here")
    other = _fake_build(tmp_path / "other", "new", b"weights built here, changed")
    with pytest.raises(ValueError, match="alters the build .model.safetensors differ"):
        rekey(shipped, old, other)
    with pytest.raises(ValueError, match="not built from the shipped copy's settings and code .differs in: code"):
        rekey(shipped, new, new)
    copy = _fake_build(tmp_path / "copy", "new", b"weights built here", prebuilt_from="data/tiny_base")
    with pytest.raises(ValueError, match="a copy of a shipped base"):
        rekey(shipped, old, copy)
    assert json.loads((shipped / MANIFEST).read_text())["config_hash"] == "key-old"  # a refusal changes nothing

    out = rekey(shipped, old, new)
    assert out["settings"]["code"] == "new" and out["config_hash"] == "key-new"
    assert out["rekeyed"] == [{"from_config_hash": "key-old", "from_code": "old", "to_code": "new",
                               "train_loss_both_builds": 0.5}]
    assert (shipped / "model.safetensors").read_bytes() == b"weights built on another machine"
    assert prebuilt_matches(shipped, new_settings := json.loads((new / MANIFEST).read_text())["settings"]) == []
    assert prebuilt_matches(shipped, {**new_settings, "code": "old"}) == ["code"]
