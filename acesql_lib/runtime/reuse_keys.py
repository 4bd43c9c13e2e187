"""Reuse keys: the fingerprints that decide whether saved work (a base model, distillation shards, an
evaluation, a study's parts) is reused or built again. `settings_hash` covers the settings an artefact was
made with, `code_hash` the code that made it (syntax trees without docstrings: a comment or a docstring does
not change it, a code edit does). Each artefact's builder names its settings and the entry modules of its
code; the modules hashed are what those import, transitively (`imported_modules`, read from the import
statements), so a key never leaves out a module the code runs.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any, Iterable


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


def _package_dir() -> Path:
    return Path(__file__).resolve().parents[1]  # acesql_lib/runtime/reuse_keys.py -> acesql_lib


def _module_files(root: Path) -> dict[str, Path]:
    """Every module of the package at `root` by name ("grpo", "executor.batch"; a package: its `__init__.py`
    under the package's name), its own `__init__` under ""."""
    files = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root).with_suffix("").parts
        files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return files


ImportRecord = tuple[int, str, tuple[str, ...]]  # (relative level, module named, names imported from it)
_IMPORTS: dict[tuple[str, bytes], tuple[ImportRecord, ...]] = {}  # by a file's name and a hash of its bytes


def _import_records(path: Path) -> tuple[ImportRecord, ...]:
    """Every import statement of a file, at module level or inside a function, class or `try`; the
    imports under `if TYPE_CHECKING:` never run and are left out. A process parses a given text once."""
    import ast

    text = path.read_bytes()
    key = (str(path), hashlib.sha256(text).digest())
    if key not in _IMPORTS:
        records: list[ImportRecord] = []
        todo = list(ast.parse(text, filename=str(path)).body)
        while todo:
            node = todo.pop()
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                todo += node.orelse
                continue
            if isinstance(node, ast.Import):
                records += [(0, alias.name, ()) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                records.append((node.level, node.module or "", tuple(alias.name for alias in node.names)))
            todo += ast.iter_child_nodes(node)
        _IMPORTS[key] = tuple(records)
    return _IMPORTS[key]


def _lazy_names(init: Path | None) -> dict[str, str]:
    """The package's lazy public names and the module each is loaded from (`PUBLIC` in its `__init__`)."""
    import ast

    for node in ast.parse(init.read_text()).body if init else []:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "PUBLIC" for t in node.targets):
            return ast.literal_eval(node.value)
    return {}


def _imported_by(name: str, files: dict[str, Path], package: str, lazy: dict[str, str]) -> set[str]:
    """The modules of `package` (its modules' `files`, its `lazy` public names) that module `name` imports,
    and the packages above them (which run first)."""
    path = files[name]
    here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]  # the module's package
    found: set[str] = set()
    for level, module, names in _import_records(path):
        if level:
            if level - 1 > len(here):
                continue
            base = ".".join([*here[:len(here) - (level - 1)], *([module] if module else [])])
        elif module == package or module.startswith(package + "."):
            base = module[len(package) + 1:]
        else:
            continue  # another library
        found |= {base} if base else set()
        for imported in names:
            sub = f"{base}.{imported}" if base else imported
            if sub in files:
                found.add(sub)
            elif not base and imported in lazy:  # `from acesql_lib import RunContext`
                found.add(lazy[imported])
    parents = {".".join(m.split(".")[:i]) for m in found for i in range(1, m.count(".") + 1)}
    return {m for m in found | parents if m in files}


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def imported_modules(*entry: str, leave_out: Iterable[str] = (), root: Path | None = None) -> tuple[str, ...]:
    """The package's modules that the `entry` modules import, directly or through one another, themselves
    included: every import statement read from the syntax trees (module level and inside functions, relative
    and absolute, `from . import x` and `from .x import y`; a name of the package's lazy public API counts as
    its module). An entry that is a package counts with every module in it; a package reached by an import
    counts with its `__init__` and what that imports. The package's own `__init__` counts for none: it maps the
    public names to their modules and sets how progress bars draw. `leave_out` names modules (or packages)
    that are neither counted nor followed."""
    root = Path(root) if root is not None else _package_dir()
    files = _module_files(root)
    cut = tuple(leave_out)
    for name in (*entry, *cut):
        if not name or name not in files:
            raise FileNotFoundError(f"reuse_keys: no module or package {name!r} in {root}")
    todo = [m for e in entry for m in ([e] if files[e].name != "__init__.py" else [m for m in files if _within(m, e)])]
    lazy, seen = _lazy_names(files.get("")), set()
    while todo:
        name = todo.pop()
        if name in seen or any(_within(name, c) for c in cut):
            continue
        seen.add(name)
        todo += _imported_by(name, files, root.name, lazy) - seen
    return tuple(sorted(seen))


def code_hash(*entry: str, leave_out: Iterable[str] = (), length: int = 16, root: Path | None = None) -> str:
    """`source_digest` of the package's modules that the `entry` modules ("tinybase", "grpo", ...) import
    (`imported_modules`): part of the reuse key of an artefact that code builds, so a fresh clone of newer code
    never reuses an older build, and no module the code runs can be forgotten in the key."""
    root = Path(root) if root is not None else _package_dir()
    files = _module_files(root)
    return source_digest([files[m] for m in imported_modules(*entry, leave_out=leave_out, root=root)], length)


def engine_key(engine: Any) -> dict[str, Any]:
    """The engine settings a run's or an evaluation's key holds: every one of them."""
    return dataclasses.asdict(engine)
