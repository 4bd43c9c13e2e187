"""One vLLM engine carried from one model to the next, where a stage would shut one engine down and start
another with the same settings: notebook 05's three checkpoints, and notebook 06's variants (each variant's
training engine, then its evaluation's, then the next variant's).

A vLLM engine costs time to start and to stop: on the 2-core CPU about 1 s and 1.4 s for the tiny models (the
first start in a process also imports vLLM, about 5 s); on a GPU an 8B model's start also loads 16 GB of weights,
profiles memory and captures CUDA graphs. Inside `reused_engines()`, `close()` on an engine made by
`engines.make_engine` keeps it, and the next `make_engine` whose settings (`serving_key`: dtype, context length,
seed, memory share, parallel size) and model (`model_fingerprint`: its configuration, generation configuration
and tokenizer files) are the same gets it back. `make_engine` then loads the new model's weights into it in
place: the same `sync_weights` every new engine gets right after its start, since the folder it starts from may
predate the live weights. Any other `make_engine` shuts the kept engine down first, so there is never more than
one (one engine at a time, as on a GPU). The end of the outermost block shuts the kept one down.

What a reused engine carries over from its earlier use: nothing that enters what it draws. The sync resets its
prefix cache (KV blocks computed with the old weights); sampled requests carry their own seeds (rollouts.py)
and greedy ones draw nothing, so the engine's own random state is not read. Outside a block, `close()` shuts
the engine down.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# What a vLLM engine reads from a model folder besides the weights; the weights themselves are loaded in place.
MODEL_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
               "special_tokens_map.json", "added_tokens.json", "vocab.json", "merges.txt", "tokenizer.model",
               "chat_template.jinja", "chat_template.json")
# Keys transformers writes that describe where and how a folder was saved or loaded, not the model or its
# tokenizer: the engine's dtype is its own setting (part of `serving_key`), and tokenizer.json's "padding" and
# "truncation" hold the fast tokenizer's state at its last call, which transformers sets again on every call.
SAVE_KEYS = frozenset({"_name_or_path", "name_or_path", "_commit_hash", "transformers_version", "torch_dtype",
                       "dtype", "is_local", "local_files_only", "padding", "truncation"})

_depth = 0  # how many `reused_engines` blocks are open
_kept: tuple[tuple, Any] | None = None  # (key, engine) of the engine kept for the next make_engine


def model_fingerprint(model_path: str | Path) -> str:
    """A hash of what an engine reads from `model_path` besides the weights (MODEL_FILES, JSON without
    SAVE_KEYS): equal for two checkpoints of one model that differ only in their weights. A path that is not a
    folder here (a hub name such as Qwen/Qwen3-8B) is its own fingerprint: only the same name matches it."""
    folder = Path(model_path)
    if not folder.is_dir():
        return "name:" + str(model_path)
    digest = hashlib.sha256()
    for name in MODEL_FILES:
        path = folder / name
        data = path.read_bytes() if path.is_file() else b"<absent>"
        if name.endswith(".json") and path.is_file():
            try:
                obj = json.loads(data)
            except ValueError:
                obj = None  # hashed as bytes; a malformed file is the engine's to report
            if isinstance(obj, dict):
                data = json.dumps({k: v for k, v in obj.items() if k not in SAVE_KEYS}, sort_keys=True).encode()
        digest.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    return digest.hexdigest()


def serving_key(model_path: str | Path, settings: Mapping[str, Any]) -> tuple:
    """What must match for a kept engine to serve a new model: its constructor settings and the model's
    fingerprint."""
    return (tuple(sorted((k, repr(v)) for k, v in settings.items())), model_fingerprint(model_path))


def active() -> bool:
    """Whether a `reused_engines()` block is open (outside one, engines are neither kept nor keyed)."""
    return _depth > 0


@contextmanager
def reused_engines() -> Iterator[None]:
    """Keep closed engines for the next `make_engine` of the same settings until the outermost block ends."""
    global _depth
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        if _depth == 0:
            release()


def keep(key: tuple | None, engine: Any) -> bool:
    """Keep `engine` (True) inside a block when it has a key; else False, and the caller shuts it down."""
    global _kept
    if _depth == 0 or key is None:
        return False
    if _kept is not None and _kept[1] is engine:
        return True  # closed twice
    release()
    _kept = (key, engine)
    return True


def take(key: tuple) -> Any | None:
    """The kept engine when its key is `key` (no longer kept); otherwise None, the kept one shut down first."""
    global _kept
    if _kept is not None and _kept[0] == key:
        engine, _kept = _kept[1], None
        return engine
    release()
    return None


def kept() -> Any | None:
    """The engine kept now, if any."""
    return None if _kept is None else _kept[1]


def release() -> None:
    """Shut the kept engine down, if any."""
    global _kept
    if _kept is not None:
        engine, _kept = _kept[1], None
        engine.shutdown()
