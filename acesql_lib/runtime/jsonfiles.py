"""The one reader of the kit's JSON inputs (questions, tables, predictions, pools) and the check of a
record's database name. It imports nothing of the kit, so every loader (datasets, schema, the BIRD
command, the preflight) reads through it without an import circle.

Every error is a `DatasetError` naming the file: missing, invalid UTF-8 (with the byte offset),
invalid JSON (line and column), nesting too deep to parse, a key twice in one object (when asked),
or not the JSON list a loader expects.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


class DatasetError(ValueError):
    """A questions file that cannot be used at all; the message names the file."""


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict:
    """json's object_pairs_hook: an object that names one key twice is an error, not "last one wins"."""
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


class _DuplicateKey(ValueError):
    pass


def parse_json_text(text: str, path: str | Path, strict_keys: bool = False) -> Any:
    """`json.loads(text)` whose every error is a DatasetError naming `path`: invalid JSON (line and
    column), nesting too deep for the parser (a file of 200,000 `[`: RecursionError inside json) and,
    with `strict_keys`, an object naming one key twice."""
    try:
        return json.loads(text, object_pairs_hook=_no_duplicate_keys if strict_keys else None)
    except json.JSONDecodeError as e:
        raise DatasetError(f"{path}: not valid JSON: {e}") from None
    except RecursionError:
        raise DatasetError(f"{path}: JSON nested too deeply to read (more levels of [ or {{ than the parser "
                           "allows); not a questions, tables or predictions file") from None
    except _DuplicateKey as e:
        raise DatasetError(f"{path}: the key {e.args[0]!r} appears twice in one JSON object; each key must "
                           "appear once (a JSON reader would silently keep only the last)") from None


def read_json_file(path: str | Path, what: str = "questions file", strict_keys: bool = False) -> Any:
    """The JSON value in `path`, read as UTF-8 (a leading BOM is read and dropped); every error names
    the file: missing, invalid UTF-8 (with the byte offset), invalid JSON (with line and column),
    nesting too deep to parse, and (`strict_keys`) a key twice in one object."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{what} not found: {path}")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise DatasetError(f"{path}: not valid UTF-8 at byte {e.start} ({e.reason}: {raw[e.start:e.start + 4]!r}); "
                           "re-save the file as UTF-8") from None
    return parse_json_text(text, path, strict_keys)


def read_json_list(path: str | Path, what: str = "questions file") -> list:
    """The JSON list in `path`; errors name the file (see read_json_file)."""
    data = read_json_file(path, what)
    if not isinstance(data, list):
        raise DatasetError(f"{path}: expected a JSON list of records, got {type(data).__name__}")
    return data


MAX_DB_ID_BYTES = 240  # "<db_id>.sqlite" must fit one file name (255 bytes on common file systems)


def db_id_problem(db_id: object) -> str | None:
    """Why `db_id` is not a plain database name (None when it is): the kit opens
    `<db_root>/<db_id>/<db_id>.sqlite`, so a db_id must name one folder inside db_root: a non-empty
    string of at most MAX_DB_ID_BYTES UTF-8 bytes, without path separators, NUL or control
    characters, not "." or "..", not absolute and without surrounding spaces."""
    if not isinstance(db_id, str) or isinstance(db_id, bool):
        return f"db_id must be a string, got {type(db_id).__name__}"
    if not db_id.strip():
        return "db_id is empty"
    if db_id != db_id.strip():
        return f"db_id {db_id[:60]!r} has leading or trailing spaces"
    if len(db_id.encode("utf-8", "surrogatepass")) > MAX_DB_ID_BYTES:
        return f"db_id is {len(db_id)} characters long (at most {MAX_DB_ID_BYTES} UTF-8 bytes: it names a file)"
    if any(c in "/\\" + os.sep for c in db_id) or any(ord(c) < 32 or ord(c) == 127 for c in db_id):
        return f"db_id {db_id[:60]!r} contains a path separator or a control character (a plain name is required)"
    if db_id in (".", "..") or Path(db_id).is_absolute() or Path(db_id).drive:
        return f"db_id {db_id!r} is not a plain folder name inside db_root"
    return None
