"""The shipped tiny base (`model.tiny.prebuilt`, e.g. `data/tiny_base/`): when a run may use it, how it is
copied in, written (`ship`) and carried over to a refactor that does not change what a build makes (`rekey`).

A build is keyed by its settings and by the code of `tinybase.build_modules` (`tinybase.base_settings`).
This module is left out of them: what it does decides whether a base is copied or built, never what a build
makes, so an edit here keeps every shipped base usable. It imports nothing of `tinybase`; the command line
that builds, ships and re-keys is `python -m acesql_lib.pipeline.tinybase`.
"""
from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

MANIFEST = "tiny_base_manifest.json"
MACHINE_SETTINGS = ("torch_threads",)  # what a build records of the machine; a shipped base is used across them
BUILD_LOG = "sft_log.jsonl"
# what a build makes (compared byte for byte by `rekey`), then what a shipped copy carries besides
BUILD_FILES = ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
               "tokenizer_config.json", "chat_template.jinja")
PREBUILT_FILES = BUILD_FILES + (BUILD_LOG, MANIFEST)
OPTIONAL_FILES = ("chat_template.jinja",)  # older tokenizers keep the template inside tokenizer_config.json


def read_manifest(folder: Path) -> dict[str, Any]:
    return json.loads((Path(folder) / MANIFEST).read_text())


def portable(settings: Mapping[str, Any]) -> dict[str, Any]:
    """A base's settings without the machine's: the thread count, and torch's local build suffix
    (2.13.0+cpu and 2.13.0 are the same release)."""
    out = {k: v for k, v in settings.items() if k not in MACHINE_SETTINGS}
    out["torch"] = str(out.get("torch", "")).split("+")[0]
    return out


def prebuilt_matches(folder: Path, settings: Mapping[str, Any]) -> list[str]:
    """[] when the shipped base in `folder` was built from `settings` (machine aside), else what differs
    (the top-level settings keys, or why the folder is unusable)."""
    manifest = Path(folder) / MANIFEST
    missing = [f for f in PREBUILT_FILES if f not in OPTIONAL_FILES and not (Path(folder) / f).is_file()]
    if missing:
        return [f"missing {', '.join(missing)}"]
    try:
        shipped = portable(json.loads(manifest.read_text())["settings"])
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise ValueError(f"{manifest}: not a base-model manifest ({e})") from None
    here = json.loads(json.dumps(portable(settings), default=str))
    return sorted(k for k in set(here) | set(shipped) if here.get(k) != shipped.get(k))


def use_prebuilt(prebuilt: str, out: Path, settings: Mapping[str, Any], digest: str) -> bool:
    """Copy the shipped base named by `model.tiny.prebuilt` into `out` when it matches `settings`, under this
    machine's key `digest`; say why not when it does not (the caller then builds)."""
    from ..config.paths import resolve

    folder = resolve(prebuilt)
    if not folder.is_dir():
        print(f"[tiny base] no shipped base at {prebuilt}: building one")
        return False
    differs = prebuilt_matches(folder, settings)
    if differs:
        print(f"[tiny base] the shipped base ({prebuilt}) was built from other settings or code "
              f"(differs in: {', '.join(differs)}): building one (about 11 minutes on 2 cores)")
        return False
    work = out.with_name(out.name + ".copying")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    for name in PREBUILT_FILES:
        if (folder / name).is_file():
            shutil.copy2(folder / name, work / name)
    manifest = read_manifest(work)
    manifest.update({"prebuilt_from": prebuilt, "prebuilt_config_hash": manifest["config_hash"],
                     "config_hash": digest})  # this machine's key, under which later stages reuse it
    (work / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True, default=str) + "\n")
    if out.exists():
        shutil.rmtree(out)
    work.rename(out)
    print(f"[tiny base] using the shipped base ({prebuilt}, built from these settings)")
    return True


def _a_build(folder: Path, manifest: Mapping[str, Any]) -> None:
    if "prebuilt_from" in manifest:
        raise ValueError(f"{folder}: a copy of a shipped base, not a build; build it afresh with --force")


def ship(built: Path, dest: Path) -> Path:
    """Write a built base's files to `dest` (the shipped copy, `model.tiny.prebuilt`)."""
    _a_build(built, read_manifest(built))
    dest = Path(dest)
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    for name in PREBUILT_FILES:
        if (Path(built) / name).is_file():
            shutil.copy2(Path(built) / name, dest / name)
    return dest


def rekey(shipped: Path, old_build: Path, new_build: Path) -> dict[str, Any]:
    """Carry the shipped base over to a change that does not alter what a build makes (code moved, settings
    renamed): `old_build` and `new_build` are builds on one machine from the shipped copy's code and settings and
    from the current ones. When their files are byte for byte the same, the shipped manifest takes the current
    settings and key and records the change under "rekeyed"; its weights are untouched, so every number a run
    computes from them stays as it was. A build's float sums differ across machines, so a fresh build is compared
    with a fresh build, never with the shipped weights. Returns the new manifest."""
    here, old, new = read_manifest(shipped), read_manifest(old_build), read_manifest(new_build)
    _a_build(old_build, old)
    _a_build(new_build, new)
    if portable(old["settings"]) != portable(here["settings"]):
        differs = sorted(k for k in set(old["settings"]) | set(here["settings"])
                         if portable(old["settings"]).get(k) != portable(here["settings"]).get(k))
        raise ValueError(f"{old_build}: not built from the shipped copy's settings and code (differs in: {', '.join(differs)})")
    if old["settings"].get("torch_threads") != new["settings"].get("torch_threads"):
        raise ValueError("the two builds ran at different thread counts: build both on one machine alike")
    a, b = Path(old_build), Path(new_build)
    changed = [f for f in BUILD_FILES if (a / f).is_file() != (b / f).is_file()
               or (a / f).is_file() and (a / f).read_bytes() != (b / f).read_bytes()]
    if changed or old["train_loss"] != new["train_loss"]:
        raise ValueError(f"the change alters the build ({', '.join(changed) or 'train_loss'} differ): ship a new build")
    here.setdefault("rekeyed", []).append({"from_config_hash": here["config_hash"], "from_code": here["settings"]["code"],
                                           "to_code": new["settings"]["code"], "train_loss_both_builds": new["train_loss"]})
    here["settings"], here["config_hash"] = new["settings"], new["config_hash"]
    (Path(shipped) / MANIFEST).write_text(json.dumps(here, indent=2, sort_keys=True, default=str) + "\n")
    return here
