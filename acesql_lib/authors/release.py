"""The authors' released data as the kit's inputs: their initial pool, RL rows and SFT files.

The authors published their stage-1 products (GitHub xbchen1/ACE-SQL, MIT; Hugging Face dataset
xiaobing11/ACE-SQL, `downloads.download_acesql_release`). This module is the one place that knows
their formats and turns them into the kit's own records:

- `initial_pool.json`: `{"<db_id>||<question>": {"<comma-separated sorted column indices>": weight}}`.
  A column index points into the database's tables.json-style `column_names_original` list, `*`
  included at index 0 (checked: the 40 validation rows' `gold_column_indices` name exactly the gold
  SQL's column set on 40/40 rows). `pool_from_release` maps the indices to the kit's canonical
  `table.column` names and builds a `ColumnSetPool` keyed by the kit's question ids.
- RL rows (verl parquet: `prompt`, `reward_model.ground_truth`, `extra_info` with `db_info`):
  `read_rl_rows` gives `AuthorsRow`s; `rl_tasks` turns them into `Task`s whose schema comes from the
  row's `db_info` with its `sampled_values` as example values. A task's id is the pool key.
- SFT files (Alpaca: `instruction`, `input`, `output` with a `<think>` block; optional `system`,
  `history`): `read_sft` gives the kit's SFT samples (`{"role", "qid", "prompt", "completion"}`).

Malformed records are reported (file, record, field), counted in a `ReadReport` and skipped; a file
that cannot be read at all raises an error naming it.

How gold enters the released pool, and the GRPO pool built from it, is in `pool_init`.
"""
from __future__ import annotations

import argparse
import json
import logging
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from ..data.datasets import Example
from ..roles.pool import ColumnSetPool
from ..data.task import Task
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


# ---------------------------------------------------------------------------------------------
# The initial pool


RawPool = dict[str, dict[frozenset[int], float]]


def _weight_ok(w: Any) -> bool:
    return isinstance(w, (int, float)) and not isinstance(w, bool) and w >= 0 and w == w


def _parse_sets(sets: Any) -> dict[frozenset[int], float] | str:
    """One question's {"i,j,k": weight} mapping, or the reason it is malformed."""
    if isinstance(sets, str):
        try:
            sets = json.loads(sets)
        except json.JSONDecodeError:
            return "column sets are not a JSON object"
    if not isinstance(sets, dict):
        return f"column sets must be an object {{\"i,j,k\": weight}}, got {type(sets).__name__}"
    out: dict[frozenset[int], float] = {}
    for text, w in sets.items():
        parts = str(text).split(",")
        if not all(p.strip().isdigit() for p in parts):
            return f"column set {text!r} is not comma-separated column indices"
        if not _weight_ok(w):
            return f"column set {text!r} has weight {w!r} (must be a number >= 0)"
        key = frozenset(int(p) for p in parts)
        if key in out:
            return f"column set {text!r} repeats an earlier set"
        out[key] = float(w)
    return out


_KEY_FIELDS = ("pool_key", "question_key", "key")
_SETS_FIELDS = ("column_sets", "col_sets", "sets", "pool", "weights", "freq")
_SET_FIELDS, _WEIGHT_FIELDS = ("column_set", "col_set", "set", "columns"), ("weight", "freq", "frequency", "count")


def _pool_items(rows: list[Any], path: Path) -> list[tuple[str, Any]]:
    """(key, sets) from parquet rows: one row per question (a mapping, a JSON string or a parquet
    map of set -> weight) or one row per (question, set, weight)."""
    items: dict[str, Any] = {}
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise ValueError(f"{path}: row {i} is a {type(row).__name__}, not a record")
        key = next((row[k] for k in _KEY_FIELDS if isinstance(row.get(k), str)), None)
        sets = next((row[k] for k in _SETS_FIELDS if row.get(k) is not None), None)
        one = next((row[k] for k in _SET_FIELDS if row.get(k) is not None), None)
        weight = next((row[k] for k in _WEIGHT_FIELDS if row.get(k) is not None), None)
        if key is not None and isinstance(sets, list):  # a parquet map reads as [(set, weight), ...]
            sets = dict(sets) if all(isinstance(x, (list, tuple)) and len(x) == 2 for x in sets) else sets
        if key is not None and sets is not None:
            items[key] = sets
        elif key is not None and one is not None and weight is not None:
            text = ",".join(str(x) for x in sorted(one)) if isinstance(one, (list, tuple)) else str(one)
            bucket = items.setdefault(key, {})
            if isinstance(bucket, dict):
                bucket[text] = weight
        else:
            raise ValueError(f"{path}: row {i}: no question key with its column sets among fields {sorted(row)}")
    return list(items.items())


def read_pool(path: str | Path) -> tuple[RawPool, ReadReport]:
    """The released initial pool as {pool key: {frozenset of column indices: weight}}.

    Reads `initial_pool.json` (the tested format), or a parquet copy whose rows hold a question
    key (`pool_key`/`question_key`/`key`) with its sets, as one mapping per question or one row per set."""
    data = read_records(path)
    report = ReadReport(str(path))
    if isinstance(data, list):  # parquet rows
        items = _pool_items(data, Path(path))
    elif isinstance(data, dict):
        items = list(data.items())
    else:
        raise ValueError(f"{path}: expected a JSON object keyed by 'db_id||question', got {type(data).__name__}")
    raw: RawPool = {}
    for key, sets in items:
        report.total += 1
        if KEY_SEP not in key or not key.partition(KEY_SEP)[0]:
            report.skip(repr(key[:80]), f"key is not 'db_id{KEY_SEP}question'")
            continue
        parsed = _parse_sets(sets)
        if isinstance(parsed, str):
            report.skip(repr(key[:80]), parsed)
        elif key in raw:
            report.skip(repr(key[:80]), "question appears twice")
        else:
            raw[key] = parsed
    return raw, report


def pool_from_release(raw: RawPool, questions: Mapping[str, tuple[str, Sequence[str | None], Iterable[str]]],
                      gamma: float = 0.5) -> tuple[ColumnSetPool, dict[str, Any]]:
    """A kit pool from the released one, for the questions given as
    {pool key: (kit question id, index -> name list of its database, gold column set)}.

    Weights are kept exactly. Released questions outside `questions` are left out and counted; a
    question without a released entry starts with no sets (counted); a set naming an index that is
    not a column drops the question's entry (reported)."""
    pool = ColumnSetPool(gamma, "sft_rollouts")
    counts = Counter()
    data = pool.to_dict()
    for key, (qid, names, gold) in sorted(questions.items(), key=lambda kv: kv[1][0]):
        entry = raw.get(key)
        sets: list[list[Any]] = []
        if entry is None:
            counts["questions_without_entry"] += 1
        else:
            try:
                sets = [[sorted(names_of(s, names, f"pool entry {key[:60]!r}")), w] for s, w in entry.items()]
                counts["questions_loaded"] += 1
            except ValueError as e:
                log.warning("%s; its released sets are not used", e)
                counts["questions_with_bad_index"] += 1
        data["questions"][qid] = {"gold": sorted(gold), "visits": 0, "sets": sets}
    counts["released_questions_not_used"] = len(set(raw) - set(questions))
    return ColumnSetPool.from_dict(data, "authors' pool", gamma=gamma), dict(counts)


# ---------------------------------------------------------------------------------------------
# RL rows


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


def row_schema(row: AuthorsRow, n_values: int = 2, max_chars: int = 40, data_cfg: Any = None) -> Schema:
    """The row's database schema from its `db_info`, with up to `n_values` of its sampled values
    per column as examples (strings cut to `max_chars`, as the kit's SQLite reader does). With
    `data_cfg`, the schema text is the profile's (`data.schema_style`, `data.max_example_values`):
    under the paper profile the authors' text, which their prompts show byte for byte."""
    schema = Schema.from_tables_json(row.db_info, source=f"db_info of {row.example.db_id!r}")
    if data_cfg is not None:
        schema.text_style, schema.max_values = data_cfg.schema_style, data_cfg.max_example_values
    if n_values > 0:
        by_lower = {k.lower(): v for k, v in row.sampled_values.items() if isinstance(v, list)}
        for t in schema.tables:
            for c in t.columns:
                values = by_lower.get(f"{t.name}.{c.name}".lower(), [])
                c.examples = [v[:max_chars] if isinstance(v, str) else v for v in values[:n_values] if v is not None]
    return schema


def rl_tasks(rows: Sequence[AuthorsRow], n_values: int = 2, max_chars: int = 40, data_cfg: Any = None) -> list[Task]:
    """Kit tasks for the released rows; one schema object per database. With `data_cfg` (the profile's
    `data` section) the schemas get its text style and, with `data.relevant_values`, each task the
    question-relevant values its row carries (`relavant_values`, which the authors' prompts show
    first in `example:`): their prompts, rebuilt from the row, byte for byte."""
    schemas: dict[str, Schema] = {}
    tasks = []
    for r in rows:
        if r.example.db_id not in schemas:
            schemas[r.example.db_id] = row_schema(r, n_values, max_chars, data_cfg)
        given = r.relevant_values if data_cfg is not None and data_cfg.relevant_values else None
        tasks.append(Task(r.example, schemas[r.example.db_id], given_values=given))
    return tasks


# ---------------------------------------------------------------------------------------------
# SFT files


def _alpaca_messages(rec: Any) -> tuple[list[dict[str, str]], str]:
    if not isinstance(rec, dict):
        raise ValueError(f"record is a {type(rec).__name__}, not an object")
    for name in ("instruction", "output"):
        if not isinstance(rec.get(name), str) or not rec[name].strip():
            raise ValueError(f"field {name!r} is missing or empty")
    extra = rec.get("input") or ""
    if not isinstance(extra, str):
        raise ValueError("field 'input' must be a string")
    messages: list[dict[str, str]] = []
    if rec.get("system"):
        if not isinstance(rec["system"], str):
            raise ValueError("field 'system' must be a string")
        messages.append({"role": "system", "content": rec["system"]})
    for turn in rec.get("history") or []:
        if not (isinstance(turn, (list, tuple)) and len(turn) == 2 and all(isinstance(x, str) for x in turn)):
            raise ValueError("field 'history' must be a list of [user, assistant] string pairs")
        messages += [{"role": "user", "content": turn[0]}, {"role": "assistant", "content": turn[1]}]
    # LLaMA-Factory's Alpaca reading: the user turn is the instruction, a newline, then the input
    messages.append({"role": "user", "content": rec["instruction"] + ("\n" + extra if extra else "")})
    return messages, rec["output"]


def read_sft(path: str | Path, role: str) -> tuple[list[dict[str, Any]], ReadReport]:
    """The kit's SFT samples for one role from an Alpaca file (JSON list, or the hub's parquet)."""
    if role not in ("retriever", "generator"):
        raise ValueError(f"role must be retriever or generator, got {role!r}")
    data = read_records(path)
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a list of Alpaca records, got {type(data).__name__}")
    report = ReadReport(str(path), total=len(data))
    samples = []
    for i, rec in enumerate(data):
        try:
            prompt, output = _alpaca_messages(rec)
        except ValueError as e:
            report.skip(str(i), str(e))
            continue
        samples.append({"role": role, "qid": f"authors-{role}-{i}", "prompt": prompt,
                        "completion": [{"role": "assistant", "content": output.strip()}]})
    return samples, report


# ---------------------------------------------------------------------------------------------
# The profile's inputs when data.stage1_source is "authors"


def release_dir(cfg: Any) -> Path:
    from ..config.paths import resolve

    return resolve(cfg.data.authors_release_dir)


def release_tasks(cfg: Any, paths: Any = None) -> tuple[list[Task], list[Task]]:
    """The released RL train and validation questions as kit tasks (databases under the SynSQL folder)."""
    from ..data.datasets import train_db_root

    root, db_root = release_dir(cfg), train_db_root(cfg, paths)
    out = []
    for what in ("rl_train", "rl_validation"):
        rows, report = read_rl_rows(release_file(root, what), db_root)
        print(f"[authors] {report.summary()}")
        out.append(rl_tasks(rows, cfg.data.n_example_values, cfg.data.example_max_chars, cfg.data))
    if not out[0]:
        raise ValueError(f"{release_file(root, 'rl_train')}: no usable RL rows")
    return out[0], out[1]


def release_sft_samples(cfg: Any) -> list[dict[str, Any]]:
    """Both roles' released SFT samples: the retriever file's, then the generator file's."""
    samples = []
    for role in ("retriever", "generator"):
        part, report = read_sft(release_file(release_dir(cfg), f"sft_{role}"), role)
        print(f"[authors] {report.summary()}")
        samples += part
    return samples


def release_names(cfg: Any) -> dict[str, list[str | None]]:
    """db_id -> index -> name, from the db_info of the released RL rows."""
    names: dict[str, list[str | None]] = {}
    for what in ("rl_train", "rl_validation"):
        for r in read_rl_rows(release_file(release_dir(cfg), what))[0]:
            names.setdefault(r.example.db_id, r.column_names)
    return names


def pool_statistics(raw: RawPool, rows: Sequence[AuthorsRow] = ()) -> dict[str, Any]:
    """How the released pool is made up (README evidence): weight kinds, per-question totals and,
    on the given RL rows, where the gold set sits."""
    weights = [w for sets in raw.values() for w in sets.values()]
    halves = [q for q, sets in raw.items() if any(w == 0.5 for w in sets.values())]
    fractional = [q for q, sets in raw.items() if any(w != 0.5 and not w.is_integer() for w in sets.values())]
    out: dict[str, Any] = {
        "questions": len(raw), "entries": len(weights),
        "integer_weights": sum(w.is_integer() for w in weights), "half_weights": sum(w == 0.5 for w in weights),
        "fractional_weights": sum(not w.is_integer() and w != 0.5 for w in weights),
        "questions_with_a_half_weight": len(halves),
        "questions_with_two_half_weights": sum(sum(w == 0.5 for w in raw[q].values()) > 1 for q in halves),
        "questions_rescaled": len(fractional), "rescaled_with_a_half_weight": len(set(fractional) & set(halves)),
    }
    gold_absent = gold_half = gold_counted = gold_max = total_ok = 0
    for r in rows:
        sets = raw.get(r.key, {})
        w = sets.get(frozenset(r.gold_indices))
        if w is None:
            gold_absent += 1
        elif w == 0.5:
            gold_half += 1
        else:
            gold_counted += 1
            gold_max += w == max(sets.values())
        total_ok += abs(sum(sets.values()) - r.pool_stats.get("pool_correct_sum", float("nan"))) <= 1e-6
    if rows:
        out.update({"rows": len(rows), "rows_gold_absent": gold_absent, "rows_gold_at_half": gold_half,
                    "rows_gold_at_rollout_count": gold_counted, "rows_gold_is_a_top_set": gold_max,
                    "rows_total_is_pool_correct_sum": total_ok})
    return out


def main(argv: Sequence[str] | None = None) -> None:
    from ..config.profiles import load_config, parse_overrides

    ap = argparse.ArgumentParser(description="Read the authors' released data into the kit's formats.")
    ap.add_argument("--config", default="paper", help="profile name or YAML path")
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="config overrides")
    ap.add_argument("--write-sft", metavar="JSONL", help="write both roles' SFT samples here (for acesql_lib.train.sft)")
    ap.add_argument("--pool-stats", action="store_true", help="print how the released pool is made up")
    args = ap.parse_args(argv)
    cfg = load_config(args.config, parse_overrides(args.set))
    if args.write_sft:
        samples = release_sft_samples(cfg)
        out = Path(args.write_sft)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text("".join(json.dumps(s) + "\n" for s in samples))
        print(f"wrote {len(samples)} samples to {out}")
    if args.pool_stats:
        root = release_dir(cfg)
        raw, _ = read_pool(release_file(root, "pool"))
        rows, _ = read_rl_rows(release_file(root, "rl_validation"))
        print(json.dumps(pool_statistics(raw, rows), indent=1))


if __name__ == "__main__":
    main()
