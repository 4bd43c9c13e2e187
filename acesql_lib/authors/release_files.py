"""The authors' release files: where each lies (the GitHub layout, the hub dataset's, a flat folder), their
records read (parquet or JSON), what one file gave (`ReadReport`: malformed records reported and skipped), the
authors' question key (`db_id||question`) and the column indices their files name (a database's
tables.json-style `column_names_original` list, `*` included at index 0).
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from ..data.schema import Schema

log = logging.getLogger(__name__)

KEY_SEP = "||"
# Where each file lies: the GitHub layout, the hub dataset's layout, and a flat folder (fixtures).
RELEASE_FILES: dict[str, tuple[str, ...]] = {
    "rl_train": ("RL/data/train.parquet", "data/rl/train.parquet", "train.parquet"),
    "rl_validation": ("RL/data/validation.parquet", "data/rl/validation.parquet", "validation.parquet"),
    "pool": ("RL/data/initial_pool.json", "data/initial_pool/train.parquet", "initial_pool.json"),
    "sft_retriever": ("SFT/data/domain1_alpaca_think.json", "data/sft_retriever/train.parquet",
                      "domain1_alpaca_think.json"),
    "sft_generator": ("SFT/data/domain2_alpaca_think.json", "data/sft_generator/train.parquet",
                      "domain2_alpaca_think.json"),
}


def pool_key(db_id: str, question: str) -> str:
    """The authors' question key, `db_id||question`."""
    return f"{db_id}{KEY_SEP}{question}"


@dataclass
class ReadReport:
    """What one file gave: records read, and (record, reason) for each malformed one skipped."""

    path: str
    total: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)

    @property
    def kept(self) -> int:
        return self.total - len(self.skipped)

    def skip(self, record: str, reason: str) -> None:
        log.warning("%s: record %s: %s; skipped", self.path, record, reason)
        self.skipped.append((record, reason))

    def summary(self) -> str:
        head = f"{self.path}: {self.kept} of {self.total} records read"
        return head + (f", {len(self.skipped)} skipped (first: {self.skipped[0][0]}: {self.skipped[0][1]})"
                       if self.skipped else "")


def release_file(root: str | Path, what: str) -> Path:
    """The path of one release file under `root` (any of the known layouts)."""
    if what not in RELEASE_FILES:
        raise KeyError(f"unknown release file {what!r} (known: {', '.join(RELEASE_FILES)})")
    root = Path(root)
    for rel in RELEASE_FILES[what]:
        if (root / rel).is_file():
            return root / rel
    raise FileNotFoundError(
        f"{root}: the authors' release has no {what} file (looked for {', '.join(RELEASE_FILES[what])}); "
        f"download it with acesql_lib.data.downloads.download_acesql_release({str(root)!r}) on a machine with internet")


def read_records(path: str | Path) -> list[Any]:
    """The rows of a parquet file (pyarrow) or the items of a JSON list / JSON object."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"authors' release file not found: {path}")
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            return pq.read_table(path).to_pylist()
        except Exception as e:  # pyarrow raises several types for a damaged file
            raise ValueError(f"{path}: not a readable parquet file: {e}") from None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: not valid JSON: {e}") from None


# ---------------------------------------------------------------------------------------------
# Column indices


def column_names(db_info: Mapping[str, Any], where: str = "db_info") -> list[str | None]:
    """Index -> canonical `table.column` for a tables.json-style entry (None for `*`)."""
    try:
        tables = list(db_info["table_names_original"])
        cols = list(db_info["column_names_original"])
    except (KeyError, TypeError) as e:
        raise ValueError(f"{where}: missing or malformed field {e}") from None
    names: list[str | None] = []
    for i, item in enumerate(cols):
        try:
            t, c = int(item[0]), str(item[1])
        except (TypeError, ValueError, IndexError):
            raise ValueError(f"{where}: column_names_original[{i}] is not [table_index, name]: {item!r}") from None
        if t == -1:
            names.append(None)
        elif 0 <= t < len(tables):
            names.append(f"{tables[t]}.{c}")
        else:
            raise ValueError(f"{where}: column_names_original[{i}] points at table {t}, have {len(tables)}")
    return names


def index_names(schema: Schema) -> list[str | None]:
    """Index -> name for a schema read in tables.json order (`*` first), when no db_info is at hand."""
    return [None, *schema.columns()]


def names_of(indices: Iterable[int], names: Sequence[str | None], where: str) -> frozenset[str]:
    out = []
    for i in indices:
        if not 0 <= i < len(names) or names[i] is None:
            raise ValueError(f"{where}: column index {i} is not a column of the database ({len(names)} indices)")
        out.append(names[i])
    return frozenset(out)
