"""The authors' released RL rows (verl parquet: `prompt`, `reward_model.ground_truth`, `extra_info` with
`db_info`): `read_rl_rows` gives `AuthorsRow`s, and `rl_tasks` turns them into the kit's `Task`s, whose schema
comes from the row's `db_info` with its `sampled_values` as example values. A task's id is the pool key.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from ..data.datasets import Example
from ..data.schema import Schema
from ..data.task import Task, build_tasks
from .release_files import ReadReport, column_names, names_of, pool_key, read_records


@dataclass
class AuthorsRow:
    """One released RL row (verl format) in the kit's terms."""

    example: Example  # id = the pool key
    db_info: dict[str, Any]
    gold_indices: tuple[int, ...]
    prompt: list[dict[str, str]]  # the authors' chat messages (their retriever prompt)
    sampled_values: dict[str, list]  # "table.column" -> example values
    relevant_values: dict[str, list]  # "table.column" -> values BM25 found for the question
    pool_stats: dict[str, float]  # pool_correct_sum, pool_denominator, pool_num_sets, pool_pass_rate
    split: str = ""

    @property
    def key(self) -> str:
        return self.example.id

    @property
    def column_names(self) -> list[str | None]:
        return column_names(self.db_info, f"db_info of {self.example.db_id!r}")

    @property
    def gold_columns(self) -> frozenset[str]:
        return names_of(self.gold_indices, self.column_names, f"gold_column_indices of {self.key[:60]!r}")


def _json_field(value: Any, name: str) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value) if value.strip() else {}
        except json.JSONDecodeError:
            raise ValueError(f"field {name!r} is not valid JSON") from None
    return value


def _row(raw: Any, db_root: Path | None) -> AuthorsRow:
    """One parquet row -> AuthorsRow; ValueError names the field that is wrong."""
    if not isinstance(raw, dict):
        raise ValueError(f"row is a {type(raw).__name__}, not a record")
    gt = (raw.get("reward_model") or {}).get("ground_truth") if isinstance(raw.get("reward_model"), dict) else None
    extra = raw.get("extra_info")
    if not isinstance(gt, dict):
        raise ValueError("field 'reward_model.ground_truth' is missing")
    if not isinstance(extra, dict):
        raise ValueError("field 'extra_info' is missing")
    for name in ("db_id", "question", "sql"):
        if not isinstance(gt.get(name), str) or not gt[name].strip():
            raise ValueError(f"field 'reward_model.ground_truth.{name}' is missing or empty")
    idx = gt.get("gold_column_indices")
    if not isinstance(idx, (list, tuple)) or not idx or not all(isinstance(i, int) and not isinstance(i, bool)
                                                                 for i in idx):
        raise ValueError("field 'reward_model.ground_truth.gold_column_indices' must be a non-empty list of integers")
    db_info = _json_field(extra.get("db_info"), "extra_info.db_info")
    if not isinstance(db_info, dict) or not db_info:
        raise ValueError("field 'extra_info.db_info' is missing")
    db_id, question = gt["db_id"], gt["question"]
    if db_info.get("db_id", db_id) != db_id:
        raise ValueError(f"field 'extra_info.db_info.db_id' is {db_info.get('db_id')!r}, the row's db_id is {db_id!r}")
    names = column_names(db_info, "field 'extra_info.db_info'")
    names_of(idx, names, "field 'reward_model.ground_truth.gold_column_indices'")
    key = pool_key(db_id, question)
    if extra.get("pool_key", key) != key:
        raise ValueError(f"field 'extra_info.pool_key' is {extra.get('pool_key')!r}, expected {key!r}")
    prompt = raw.get("prompt")
    if not isinstance(prompt, (list, tuple)) or not all(isinstance(m, dict) and isinstance(m.get("content"), str)
                                                        for m in prompt):
        raise ValueError("field 'prompt' must be a list of chat messages")
    db_path = str(db_root / db_id / f"{db_id}.sqlite") if db_root is not None else str(gt.get("db_path") or "")
    ex = Example(key, db_id, question, str(gt.get("evidence") or ""), gt["sql"], "", "", "synsql", db_path)
    stats = {k: float(extra[k]) for k in ("pool_correct_sum", "pool_denominator", "pool_num_sets", "pool_pass_rate")
             if isinstance(extra.get(k), (int, float)) and not isinstance(extra.get(k), bool)}
    return AuthorsRow(ex, db_info, tuple(idx), [dict(m) for m in prompt],
                      _json_field(extra.get("sampled_values") or {}, "extra_info.sampled_values"),
                      _json_field(extra.get("relavant_values") or {}, "extra_info.relavant_values"),
                      stats, str(extra.get("mainexp_split") or ""))


def read_rl_rows(path: str | Path, db_root: str | Path | None = None) -> tuple[list[AuthorsRow], ReadReport]:
    """The released RL rows of one parquet file. With `db_root`, each database is expected at
    `<db_root>/<db_id>/<db_id>.sqlite` (the SynSQL layout); else their own relative `db_path` is kept."""
    data = read_records(path)
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected rows, got {type(data).__name__}")
    report = ReadReport(str(path), total=len(data))
    rows, seen = [], set()
    root = Path(db_root) if db_root is not None else None
    for i, raw in enumerate(data):
        try:
            row = _row(raw, root)
        except ValueError as e:
            report.skip(str(i), str(e))
            continue
        if row.key in seen:
            report.skip(str(i), f"question {row.key[:60]!r} appears twice")
            continue
        seen.add(row.key)
        rows.append(row)
    return rows, report


def row_schema(row: AuthorsRow, data: Any) -> Schema:
    """The row's database schema from its `db_info`, with up to `data.n_example_values` of its sampled values
    per column as examples (strings cut to `data.example_max_chars`, as the kit's SQLite reader does); its text
    is the profile's (`task.profile_schema`): under the paper profile the authors' text, which their prompts
    show byte for byte."""
    schema = Schema.from_tables_json(row.db_info, source=f"db_info of {row.example.db_id!r}")
    schema.text_style = data.schema_style  # its descriptions are the row's own: none to adopt from a tables.json
    n_values, max_chars = data.n_example_values, data.example_max_chars
    if n_values > 0:
        by_lower = {k.lower(): v for k, v in row.sampled_values.items() if isinstance(v, list)}
        for t in schema.tables:
            for c in t.columns:
                values = by_lower.get(f"{t.name}.{c.name}".lower(), [])
                c.examples = [v[:max_chars] if isinstance(v, str) else v for v in values[:n_values] if v is not None]
    return schema


def rl_tasks(rows: Sequence[AuthorsRow], data: Any) -> list[Task]:
    """Kit tasks for the released rows under the profile's `data` settings (`task.build_tasks`); one schema
    object per database, from its rows' `db_info`. With `data.relevant_values` each task has the
    question-relevant values its row carries (`relavant_values`, which the authors' prompts show first in
    `example:`): their prompts, rebuilt from the row, byte for byte."""
    schemas: dict[str, Schema] = {}
    for r in rows:
        if r.example.db_id not in schemas:
            schemas[r.example.db_id] = row_schema(r, data)
    given = {r.example.id: r.relevant_values for r in rows} if data.relevant_values else None
    return build_tasks([r.example for r in rows], data, None, schemas=schemas, given_values=given)
