"""Reuse keys: the fingerprints that decide whether saved work (a base model, distillation shards, an
evaluation, a study's parts) is reused or built again. `settings_hash` covers the settings an artefact was
made with, `code_hash` the code that made it (syntax trees without docstrings: a comment or a docstring does
not change it, a code edit does). Each artefact's builder names its own settings and modules.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any


def settings_hash(settings: Any, length: int = 16) -> str:
    """A short, stable fingerprint of JSON-able settings: what decides whether saved work is reused."""
    return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:length]


_DIGESTS: dict[tuple, str] = {}  # source_digest's results in this process, by the files' names and bytes


def source_digest(files: "list[Path] | tuple[Path, ...]", length: int = 16) -> str:
    """A fingerprint of Python source files' code: their syntax trees without docstrings, so editing
    how an artefact is built changes it while a comment, a docstring or reformatting does not.

    Parsing and dumping the trees takes about 0.12 s for an evaluation's modules, and every evaluated set, run and
    shard asks: a process parses a given text of the files once (keyed by each file's name and a hash of its
    bytes, which reading and hashing cost about a millisecond)."""
    texts = [Path(path).read_bytes() for path in files]
    key = (tuple((str(path), hashlib.sha256(t).digest()) for path, t in zip(files, texts)), length)
    if key not in _DIGESTS:
        _DIGESTS[key] = _source_digest(files, texts, length)
    return _DIGESTS[key]


def _source_digest(files: "list[Path] | tuple[Path, ...]", texts: list[bytes], length: int) -> str:
    import ast

    h = hashlib.sha256()
    for path, text in zip(files, texts):
        source = text.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")  # as read_text reads it
        tree = ast.parse(source, filename=str(path))
        for node in ast.walk(tree):
            body = getattr(node, "body", None)
            if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body
                    and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                    and isinstance(body[0].value.value, str)):
                node.body = body[1:] or [ast.Pass()]
        h.update(Path(path).name.encode() + b"\0" + ast.dump(tree).encode() + b"\0")
    return h.hexdigest()[:length]


def code_hash(*modules: str, length: int = 16) -> str:
    """`source_digest` of this package's modules by name ("tinybase", "sft", ...): part of the reuse key
    of an artefact those modules build, so a fresh clone of newer code never reuses an older build."""
    here = Path(__file__).resolve().parent
    files: list[Path] = []
    for m in modules:  # a module file, or every file of a package (executor/, tinyworld/, reports/)
        if (here / f"{m}.py").is_file():
            files.append(here / f"{m}.py")
        elif (here / m / "__init__.py").is_file():
            files += sorted((here / m).glob("*.py"))
        else:
            raise FileNotFoundError(f"code_hash: no module or package {m!r} in {here}")
    return source_digest(files, length)


def engine_key(engine: Any) -> dict[str, Any]:
    """The engine settings a run's or an evaluation's key holds: all but `workers`, which decides how many
    processes share the work, not what any of them computes (acesql_lib/workers.py)."""
    return {k: v for k, v in dataclasses.asdict(engine).items() if k != "workers"}
