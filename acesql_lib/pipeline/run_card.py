"""The run card: what produced a run's numbers, written beside them as `reports/<profile>/run_card.json` and
a short `run_card.md`.

A card names the kit's version and git commit (and whether the tree had uncommitted changes), a digest of the
code that shapes results (`code_digest`), the installed environment against the profile's lock (a digest of
every installed distribution's version, the pins it misses), the resolved settings and their digest, the
machine (CPU, memory, GPUs with driver and CUDA versions), the digest and version of every dataset and model the
profile reads, each notebook's time with the run's calibration figure and, on GPUs, the GPU-hours per notebook,
and the headline metrics. `run_pipeline` writes it at the end of every run; `scripts/readme_results.py --check`
compares a card's settings and code digests with the checkout's.

    python -m acesql_lib.pipeline.run_card --profile tiny     # (re)write the card of the last run of a profile
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.metadata as md
import json
import os
import platform
import shutil
import subprocess
from pathlib import Path
from typing import Any

from ..data.checksums import (SET_BENCHMARKS, DigestCache, default_cache, digest_of, load_manifest, preflight_rows,
                              profile_benchmarks)
from ..config.profiles import load_config, parse_overrides
from ..config.settings import Config
from ..config.paths import Paths, REPO_ROOT, TIMES_NAME, resolve

CARD_JSON, CARD_MD = "run_card.json", "run_card.md"
UNKNOWN = "unknown"
# The files whose content shapes a run's numbers and tables (their digest is the card's `code.digest`)
CODE_GLOBS = ("acesql_lib/**/*.py", "notebooks/[0-9][0-9]_*.ipynb", "configs/**/*.yaml", "data/paper_results.yaml")
METRIC_FILES = {"evaluation": ("05_evaluation", "stages"), "ablations": ("06_ablations", "variants")}


def _sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# ---------------------------------------------------------------------------------------------
# code, settings, environment


def git_state(root: Path = REPO_ROOT) -> dict[str, Any]:
    """{commit, dirty, changed}: the checked-out commit and the uncommitted changes git reports (untracked files
    that git does not ignore count); "unknown" for both without git or outside a repository."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True,
                              timeout=60).stdout
    try:
        commit = git("rev-parse", "HEAD").strip()
        changed = [line[3:] for line in git("status", "--porcelain").splitlines() if line.strip()]
    except (OSError, subprocess.SubprocessError):
        return {"commit": UNKNOWN, "dirty": UNKNOWN, "changed": []}
    return {"commit": commit, "dirty": bool(changed), "changed": changed[:50]}


def code_digest(root: Path = REPO_ROOT) -> dict[str, Any]:
    """{digest, files}: the SHA-256 of every `CODE_GLOBS` file's path and content under `root`, in path order."""
    files = sorted({p for pattern in CODE_GLOBS for p in Path(root).glob(pattern) if p.is_file()})
    h = hashlib.sha256()
    for p in files:
        h.update(p.relative_to(root).as_posix().encode() + b"\0" + hashlib.sha256(p.read_bytes()).digest())
    return {"digest": h.hexdigest(), "files": len(files), "covers": list(CODE_GLOBS)}


def settings_digest(cfg: Config) -> str:
    """The SHA-256 of the resolved settings (every section of `cfg`, keys sorted)."""
    return _sha256_text(json.dumps(cfg.to_dict(), sort_keys=True, default=str))


def environment(cfg: Config, lock: Path | None = None) -> dict[str, Any]:
    """The installed distributions against the profile's lock (`preflight.pin_file`): a digest of every installed
    `name==version`, and each pinned package installed at another version or not at all."""
    from .pins import canonical, read_pins
    from .preflight_packages import pin_file

    lock = Path(lock) if lock is not None else pin_file(cfg)
    installed: dict[str, str] = {}
    for dist in md.distributions():
        name = dist.metadata["Name"]
        if name:
            installed.setdefault(canonical(name), dist.version)
    pins = read_pins(lock) if lock.is_file() else {}
    mismatches = [{"name": n, "pinned": v, "installed": installed.get(n)} for n, v in sorted(pins.items())
                  if installed.get(n, "").split("+")[0] != v]
    lines = "".join(f"{n}=={v}\n" for n, v in sorted(installed.items()))
    return {"digest": _sha256_text(lines), "distributions": len(installed), "python": platform.python_version(),
            "lock": lock.name, "lock_sha256": hashlib.sha256(lock.read_bytes()).hexdigest() if lock.is_file() else None,
            "pinned": len(pins), "at_pin": len(pins) - len(mismatches), "mismatches": mismatches}


# ---------------------------------------------------------------------------------------------
# hardware


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or UNKNOWN


def _nvidia_driver() -> str:
    if not shutil.which("nvidia-smi"):
        return UNKNOWN
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30, check=True).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return UNKNOWN
    return out[0] if out else UNKNOWN


def hardware() -> dict[str, Any]:
    """CPU model and counts, memory, and each CUDA device (name, memory) with the driver and torch's CUDA version."""
    from .preflight_memory import gpu_info, ram_bytes

    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    gpus = gpu_info()
    card: dict[str, Any] = {"cpu": _cpu_model(), "cpu_count": os.cpu_count(), "cpus_usable": usable,
                            "memory_gib": round(ram_bytes() / 1024 ** 3, 1), "machine": platform.machine(),
                            "system": platform.platform(), "gpus": [{"name": n, "memory_gib": round(b / 1024 ** 3, 1)}
                                                                    for n, b in gpus]}
    if gpus:
        import torch

        card.update(cuda=torch.version.cuda or UNKNOWN, driver=_nvidia_driver())
    return card


# ---------------------------------------------------------------------------------------------
# data and models read


def _entry(role: str, name: str, path: Path, version: str, cache: DigestCache) -> dict[str, Any]:
    where = str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else str(path)
    if not path.exists():
        return {"role": role, "name": name, "path": where, "version": version, "present": False}
    return {"role": role, "name": name, "path": where, "version": version, "present": True, **digest_of(path, cache)}


def _hub_snapshot(repo_id: str) -> tuple[Path | None, str]:
    """The hub cache's snapshot folder of a model and its revision, when the model is there."""
    try:
        from huggingface_hub.constants import HF_HUB_CACHE
    except ImportError:
        return None, UNKNOWN
    repo = Path(HF_HUB_CACHE) / f"models--{repo_id.replace('/', '--')}"
    ref = repo / "refs" / "main"
    if not ref.is_file():
        return None, UNKNOWN
    revision = ref.read_text().strip()
    return repo / "snapshots" / revision, revision


def _model_entry(cfg: Config, cache: DigestCache) -> dict[str, Any]:
    if cfg.model.build_tiny:
        folder = resolve(cfg.model.tiny.prebuilt) if cfg.model.tiny.prebuilt else None
        if folder is None:
            return {"role": "model", "name": "tiny base", "version": "built by the run", "present": False}
        manifest = folder / "tiny_base_manifest.json"
        key = json.loads(manifest.read_text()).get("config_hash", UNKNOWN) if manifest.is_file() else UNKNOWN
        return _entry("model", "shipped tiny base", folder, f"key {key}", cache)
    local = resolve(cfg.model.base_model)
    if local.is_dir():
        return _entry("model", cfg.model.base_model, local, "local folder", cache)
    snapshot, revision = _hub_snapshot(cfg.model.base_model)
    if snapshot is None:
        return {"role": "model", "name": cfg.model.base_model, "version": UNKNOWN, "present": False}
    return _entry("model", cfg.model.base_model, snapshot, f"hub revision {revision}", cache)


def data_read(cfg: Config, cache: DigestCache | None = None) -> list[dict[str, Any]]:
    """Digest, size and version of every dataset and model `cfg` reads: each evaluation set's questions, schema
    file and databases, the training data (SynSQL-2.5M or the tiny world), the authors' release when used, the
    base model; and each benchmark's check against data/benchmarks.json."""
    cache = cache or default_cache()
    out, seen = [], set()

    def add(role: str, name: str, path: Path, version: str) -> None:
        if path not in seen:
            seen.add(path)
            out.append(_entry(role, name, path, version, cache))

    world = resolve(cfg.data.tinyworld_dir) / "manifest.json"
    world_version = json.loads(world.read_text()).get("generator_version", UNKNOWN) if world.is_file() else UNKNOWN
    manifest = load_manifest()
    for s in cfg.eval.sets:
        published = manifest["benchmarks"].get(SET_BENCHMARKS.get(s.name, ""), {}).get("version")
        version = s.version or published or (f"tiny world {world_version}" if cfg.data.world == "tinyworld" else UNKNOWN)
        for what, p in (("questions", s.path), ("schema", s.tables), ("databases", s.db_root)):
            if p:
                add(f"eval {what}", s.name, resolve(p), version)
    if cfg.data.world == "synsql":
        add("training", "SynSQL-2.5M", resolve(cfg.data.synsql_dir), "seeklhy/SynSQL-2.5M")
    else:
        add("training", "tiny world", resolve(cfg.data.tinyworld_dir), f"generator {world_version}")
    if cfg.data.stage1_source == "authors":
        add("training", "ACE-SQL release", resolve(cfg.data.authors_release_dir), "xiaobing11/ACE-SQL")
    out.append(_model_entry(cfg, cache))
    checks = {item: (status, detail) for item, status, detail in preflight_rows(cfg, manifest, cache)}
    out += [{"role": "benchmark check", "name": n, "status": checks[n][0], "detail": checks[n][1]}
            for n in profile_benchmarks(cfg) if n in checks]
    cache.save()
    return out


# ---------------------------------------------------------------------------------------------
# times and metrics


def times(reports: Path, gpus: int) -> dict[str, Any]:
    """pipeline_times.json with each notebook in calibration units and, on `gpus` GPUs, its GPU-hours."""
    path = reports / TIMES_NAME
    if not path.is_file():
        return {}
    table = json.loads(path.read_text())
    unit = (table.get("calibration") or {}).get("seconds")
    for nb in table.get("notebooks", []):
        if unit:
            nb["units"] = round(nb["seconds"] / unit, 1)
        nb["gpu_hours"] = round(nb["seconds"] * gpus / 3600, 3)
    table["gpus"], table["gpu_hours"] = gpus, round(sum(nb["gpu_hours"] for nb in table.get("notebooks", [])), 3)
    return table


def headline_metrics(reports: Path) -> dict[str, Any]:
    """EX (%) and questions per stage (base, SFT, RL) and per ablation variant on each set, from metrics/."""
    out: dict[str, Any] = {}
    for key, (stem, field) in METRIC_FILES.items():
        path = reports / "metrics" / f"{stem}.json"
        try:
            nested = json.loads(path.read_text()).get(field) or {}
        except (OSError, json.JSONDecodeError, AttributeError):
            continue
        out[key] = {stage: {s: {k: m.get(k) for k in ("ex", "n", "tokens_per_question") if k in m}
                            for s, m in sets.items() if isinstance(m, dict)}
                    for stage, sets in nested.items() if isinstance(sets, dict)}
    return out


# ---------------------------------------------------------------------------------------------
# the card


def build_card(cfg: Config, reports: Path, overrides: dict[str, Any] | None = None, root: Path = REPO_ROOT,
               status: str = "ok") -> dict[str, Any]:
    from .. import __version__

    hw = hardware()
    return {"profile": cfg.profile, "status": status, "kit_version": __version__, "git": git_state(root),
            "code": code_digest(root), "environment": environment(cfg),
            "settings": {"digest": settings_digest(cfg), "overrides": overrides or {}, "values": cfg.to_dict()},
            "hardware": hw, "data": data_read(cfg), "times": times(reports, len(hw["gpus"])),
            "metrics": headline_metrics(reports)}


def _short(value: Any, n: int = 12) -> str:
    return str(value)[:n] if value not in (None, UNKNOWN) else UNKNOWN


def card_markdown(card: dict[str, Any]) -> str:
    """The card's summary as Markdown: provenance, environment, machine, data, times and metrics."""
    g, env, hw, t = card["git"], card["environment"], card["hardware"], card.get("times") or {}
    dirty = {True: " (uncommitted changes)", False: "", UNKNOWN: " (tree state unknown)"}[g["dirty"]]
    gpus = ", ".join(x["name"] for x in hw["gpus"]) or "none"
    cuda = f"; CUDA {hw.get('cuda')}, driver {hw.get('driver')}" if hw["gpus"] else ""
    lines = [f"# Run card: profile {card['profile']}", "",
             f"- Kit {card['kit_version']}, commit {_short(g['commit'])}{dirty}; code digest "
             f"{_short(card['code']['digest'])} ({card['code']['files']} files); run status {card['status']}",
             f"- Settings digest {_short(card['settings']['digest'])}; overrides: "
             f"{json.dumps(card['settings']['overrides']) if card['settings']['overrides'] else 'none'}",
             f"- Environment digest {_short(env['digest'])} ({env['distributions']} distributions, Python "
             f"{env['python']}); {env['at_pin']} of {env['pinned']} pins of {env['lock']} met"
             + (": " + ", ".join(f"{m['name']} {m['installed'] or 'absent'} (pin {m['pinned']})"
                                 for m in env["mismatches"][:10]) if env["mismatches"] else ""),
             f"- Machine: {hw['cpu']}, {hw['cpus_usable']} of {hw['cpu_count']} CPUs, {hw['memory_gib']} GiB; "
             f"GPUs: {gpus}{cuda}", "", "| Data or model | Role | Version | Files | SHA-256 |", "|---|---|---|---|---|"]
    for d in card["data"]:
        if d["role"] == "benchmark check":
            continue
        files = d.get("files", 1 if d.get("present") else 0)
        lines.append(f"| {d['name']} | {d['role']} | {d.get('version', '')} | {files} | "
                     f"{_short(d.get('sha256')) if d.get('present') else 'not present'} |")
    checks = [d for d in card["data"] if d["role"] == "benchmark check"]
    if checks:
        lines += [""] + [f"- Checksums, {d['name']}: {d['status']}" for d in checks]
    if t:
        unit = (t.get("calibration") or {}).get("seconds")
        lines += ["", f"Notebook times (calibration {unit} s)" if unit else "Notebook times", "",
                  "| Notebook | Seconds | x calibration | GPU-hours |", "|---|---|---|---|"]
        lines += [f"| {nb['name']} | {nb['seconds']} | {nb.get('units', '—')} | {nb['gpu_hours']} |"
                  for nb in t.get("notebooks", [])]
    for stage, sets in (card.get("metrics") or {}).get("evaluation", {}).items():
        lines.append(f"- EX, {stage}: " + ", ".join(f"{s} {m.get('ex')} (n={m.get('n')})" for s, m in sets.items()))
    return "\n".join(lines) + "\n"


def write_card(cfg: Config, reports: Path | None = None, overrides: dict[str, Any] | None = None,
               root: Path = REPO_ROOT, status: str = "ok") -> Path:
    """Write run_card.json and run_card.md under the run's reports folder; returns the JSON's path."""
    reports = Path(reports) if reports is not None else Paths.from_config(cfg).reports
    card = build_card(cfg, reports, overrides, root, status)
    reports.mkdir(parents=True, exist_ok=True)
    (reports / CARD_JSON).write_text(json.dumps(card, indent=1, default=str) + "\n")
    (reports / CARD_MD).write_text(card_markdown(card))
    return reports / CARD_JSON


def card_problems(card_path: Path, cfg: Config, root: Path = REPO_ROOT) -> list[str]:
    """Why the run behind `card_path` is not this checkout's run of `cfg`: [] when its settings and code digests
    match."""
    try:
        card = json.loads(Path(card_path).read_text())
        settings, code = card["settings"]["digest"], card["code"]["digest"]
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as e:
        return [f"{card_path}: no readable run card ({type(e).__name__}: {e}); run the pipeline"]
    problems = []
    if settings != settings_digest(cfg):
        problems.append(f"{card_path}: settings digest {settings[:12]} is not profile {cfg.profile}'s "
                        f"{settings_digest(cfg)[:12]} (overrides {card['settings'].get('overrides') or 'none'})")
    if code != code_digest(root)["digest"]:
        problems.append(f"{card_path}: code digest {code[:12]} is not this checkout's {code_digest(root)['digest'][:12]} "
                        f"(the run was made from commit {_short(card.get('git', {}).get('commit'))}); rerun the pipeline")
    return problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Write the run card of a profile's last run (reports/<profile>/).")
    ap.add_argument("--profile", default="tiny")
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="the run's config overrides")
    args = ap.parse_args(argv)
    overrides = parse_overrides(args.set)
    path = write_card(load_config(args.profile, overrides), overrides=overrides)
    print(f"{path}\n{path.with_name(CARD_MD)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
