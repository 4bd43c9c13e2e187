"""The profiles (configs/*.yaml) and how a `Config` is loaded from them: a profile inherits another's keys
(`inherits:`), command-line overrides go on top (`parse_overrides`), and the data roots in eval-set paths are
filled in (`load_config`); `written_config` is a profile as its files write it.
"""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import yaml

from .checks import ConfigError, build_section
from .paths import REPO_ROOT
from .settings import Config

CONFIG_DIR = REPO_ROOT / "configs"


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _dotted_to_nested(overrides: dict[str, Any]) -> dict[str, Any]:
    nested: dict[str, Any] = {}
    for key, value in overrides.items():
        node = nested
        *parents, leaf = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return nested


def parse_overrides(items: list[str] | None) -> dict[str, Any]:
    """`KEY=VALUE` command-line overrides (values parsed as YAML) -> {dotted key: value}."""
    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"override {item!r}: expected KEY=VALUE, e.g. grpo.max_steps=4")
        parsed = yaml.safe_load(value)
        if isinstance(parsed, str) and re.fullmatch(r"[-+]?\d+(\.\d*)?[eE][-+]?\d+", parsed.strip()):
            parsed = float(parsed)  # YAML 1.1 reads "2e-6" (no dot) as a string
        out[key.strip()] = parsed
    return out


def profile_path(profile: str) -> Path:
    """A profile name (`tiny`) or a path to a YAML file."""
    p = Path(profile)
    if p.suffix in (".yaml", ".yml"):
        return p if p.is_absolute() else (Path.cwd() / p if (Path.cwd() / p).exists() else REPO_ROOT / p)
    return CONFIG_DIR / f"{profile}.yaml"


def _read_profile(path: Path) -> dict[str, Any]:
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: top level must be a mapping")
    return raw


def _inherited(raw: dict[str, Any], path: Path, chain: list[Path]) -> dict[str, Any]:
    """`inherits: paper` (a profile name or YAML path): that profile's keys, then this file's on top.
    Mappings merge key by key; a list (eval.sets) is replaced whole."""
    base = raw.pop("inherits", None)
    if base is None:
        return raw
    if not isinstance(base, str) or not base.strip():
        raise ConfigError(f"{path}: inherits: expected a profile name, got {base!r}")
    base_path = profile_path(base)
    if not base_path.exists():
        raise ConfigError(f"{path}: inherits {base!r}: profile not found at {base_path}")
    if base_path.resolve() in [p.resolve() for p in chain]:
        raise ConfigError(f"{path}: inherits {base!r}: circular ({' -> '.join(str(p) for p in chain + [base_path])})")
    parent = _inherited(_read_profile(base_path), base_path, chain + [base_path])
    parent.pop("profile", None)
    return _merge(parent, raw)


def written_config(profile: str) -> Config:
    """A profile as its files write it: the paper's defaults, the profiles it inherits, then its own keys, with
    the data roots in eval-set paths still in braces and `engine.kind: auto` unresolved (`load_config` resolves
    both)."""
    path = profile_path(profile)
    if not path.exists():
        raise ConfigError(f"{path}: profile not found (profiles: {', '.join(sorted(p.stem for p in CONFIG_DIR.glob('*.yaml')))})")
    raw = _read_profile(path)
    raw = _inherited(raw, path, [path])
    raw.setdefault("profile", path.stem)
    return build_section(Config, raw, "", str(path))


def load_config(profile: str = "tiny", overrides: dict[str, Any] | None = None) -> Config:
    """Paper defaults, then the profile's YAML, then `overrides` ({"grpo.gamma": 0.7} or nested)."""
    cfg = written_config(profile)
    if overrides:
        nested = _dotted_to_nested(overrides) if any("." in k for k in overrides) else overrides
        cfg = build_section(Config, _merge(cfg.to_dict(), nested), "", "overrides")
    return _with_world_paths(cfg)


DATA_ROOTS = ("tinyworld_dir", "synsql_dir", "bird_dev_dir", "spider_dir", "spider_dk_dir", "spider_syn_dir",
              "spider_realistic_dir")


def _with_world_paths(cfg: Config) -> Config:
    """Eval-set paths may start with a data root in braces: `{tinyworld_dir}`, `{spider_dir}`, ... (data.<root>),
    so a profile that moves the data (rehearsal) changes the roots, not the sets; `engine.kind: auto` is resolved."""
    def sub(text: str) -> str:
        for root in DATA_ROOTS:
            text = text.replace("{" + root + "}", getattr(cfg.data, root))
        return text

    sets = [dataclasses.replace(s, path=sub(s.path), tables=sub(s.tables), db_root=sub(s.db_root)) for s in cfg.eval.sets]
    cfg = dataclasses.replace(cfg, eval=dataclasses.replace(cfg.eval, sets=sets))
    if cfg.engine.kind == "auto":
        import importlib.util

        kind = "vllm" if importlib.util.find_spec("vllm") is not None else "hf"
        cfg = dataclasses.replace(cfg, engine=dataclasses.replace(cfg.engine, kind=kind))
    return cfg
