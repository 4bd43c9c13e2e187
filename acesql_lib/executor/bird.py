"""BIRD's official prediction files and a scoring command with the official evaluator's semantics.

`python -m acesql_lib.executor --pred predict_dev.json --gold dev.json --db-root dev_databases/`

As BIRD's `evaluation.py`: a prediction is `SQL\\t----- bird -----\\tdb_id`; both the prediction and
the gold run on the database the prediction names; the verdict is `set(pred_rows) == set(gold_rows)`
with no row cap (a result of any size, within the executor's memory bound; hitting it is reported);
an error or a timeout scores 0; a `null` prediction scores 0 (the official script substitutes a
blank SQL), and so does an entry without the separator (where the official script stops with a
traceback), each counted and warned about; EX is printed per difficulty as the official script does.
"""
from __future__ import annotations

import argparse
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from .batch import Score, score_batch
from .compare import MODES
from .sandbox import DEFAULT_MAX_ROWS, DEFAULT_RESULT_BYTES

log = logging.getLogger(__name__)
BIRD_SEPARATOR = "\t----- bird -----\t"  # official BIRD prediction format
LEVELS = ("simple", "moderate", "challenging")


def write_bird_predictions(path: str | Path, sqls: Sequence[str], db_ids: Sequence[str]) -> None:
    """Write predictions in BIRD's official format: {"0": "SQL\\t----- bird -----\\tdb_id", ...}."""
    if len(sqls) != len(db_ids):
        raise ValueError(f"{len(sqls)} SQLs but {len(db_ids)} db_ids")
    for i, sql in enumerate(sqls):
        if BIRD_SEPARATOR in sql:
            raise ValueError(f"prediction {i} contains the BIRD separator {BIRD_SEPARATOR!r}")
    data = {str(i): f"{sql}{BIRD_SEPARATOR}{db}" for i, (sql, db) in enumerate(zip(sqls, db_ids))}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(data, indent=1, ensure_ascii=False), encoding="utf-8")


@dataclass
class BirdPredictions:
    """Index -> (SQL, db_id or None) plus the entries that were not in the official form."""

    path: str
    entries: dict[int, tuple[str, str | None]] = field(default_factory=dict)
    malformed: list[tuple[str, str]] = field(default_factory=list)  # (key, reason); each scores 0


def _load_json(path: str | Path) -> object:
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8-sig"))
    except FileNotFoundError:
        raise FileNotFoundError(f"file not found: {path}") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not valid UTF-8 at byte {e.start}") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON: {e}") from None


def load_bird_predictions(path: str | Path) -> BirdPredictions:
    """Read a prediction file leniently, as the official evaluator must be matched: entries that are
    null, not strings, or lack the separator are kept as malformed (scored 0), never fatal."""
    data = _load_json(path)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object of index -> 'SQL\\t----- bird -----\\tdb_id'")
    out = BirdPredictions(str(path))
    for key, value in data.items():
        if not str(key).strip().isdigit():
            out.malformed.append((key, "key is not a question index"))
        elif value is None:
            out.malformed.append((key, "prediction is null"))
            out.entries[int(key)] = ("", None)
        elif not isinstance(value, str):
            out.malformed.append((key, f"prediction is a {type(value).__name__}, not a string"))
            out.entries[int(key)] = ("", None)
        elif BIRD_SEPARATOR not in value:
            out.malformed.append((key, "prediction has no '\\t----- bird -----\\t' separator"))
            out.entries[int(key)] = ("", None)
        else:
            sql, db_id = value.rsplit(BIRD_SEPARATOR, 1)
            out.entries[int(key)] = (sql, db_id.strip() or None)
    return out


def read_bird_predictions(path: str | Path) -> dict[int, tuple[str, str]]:
    """Index -> (SQL, db_id) from an official BIRD prediction file; bad entries raise naming the key
    (strict: for files the kit wrote; the scoring command reads leniently, see load_bird_predictions)."""
    preds = load_bird_predictions(path)
    if preds.malformed:
        key, reason = preds.malformed[0]
        raise ValueError(f"{path}: entry {key!r} is not 'SQL{BIRD_SEPARATOR!r}db_id' ({reason})")
    return {i: (sql, db or "") for i, (sql, db) in preds.entries.items()}


def load_bird_gold(path: str | Path, diff_json: str | Path | None = None) -> list[dict]:
    """Gold records {SQL, db_id, difficulty}: a dev.json, or the official `dev_gold.sql` (one
    `SQL\\tdb_id` a line) with difficulties from `diff_json` (dev.json). Bad records name the line."""
    path = Path(path)
    if path.suffix == ".sql":
        try:
            lines = path.read_text(encoding="utf-8-sig").splitlines()
        except FileNotFoundError:
            raise FileNotFoundError(f"file not found: {path}") from None
        gold = []
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            if "\t" not in line:
                raise ValueError(f"{path}: line {n} is not 'SQL<TAB>db_id'")
            sql, db_id = line.strip().rsplit("\t", 1)
            gold.append({"SQL": sql, "db_id": db_id.strip()})
        if diff_json is not None:
            levels = _load_json(diff_json)
            if not isinstance(levels, list) or len(levels) != len(gold):
                raise ValueError(f"{diff_json}: expected a list of {len(gold)} records with 'difficulty'")
            for g, rec in zip(gold, levels):
                g["difficulty"] = rec.get("difficulty", "") if isinstance(rec, dict) else ""
        return gold
    gold = _load_json(path)
    if not isinstance(gold, list):
        raise ValueError(f"{path}: expected a JSON list of records")
    for i, rec in enumerate(gold):
        if not isinstance(rec, dict) or not isinstance(rec.get("SQL"), str) or not isinstance(rec.get("db_id"), str):
            raise ValueError(f"{path}: record {i} needs string fields 'SQL' and 'db_id'")
    return gold


def bird_ex_by_difficulty(scores: Sequence[Score], difficulties: Sequence[str]) -> dict[str, tuple[float, int]]:
    """{level: (EX %, count)} for simple / moderate / challenging / total, as BIRD's script prints."""
    table = {}
    for level in (*LEVELS, "total"):
        hits = [s.correct for s, d in zip(scores, difficulties) if level == "total" or d == level]
        table[level] = (100.0 * sum(hits) / len(hits) if hits else 0.0, len(hits))
    return table


@dataclass
class BirdReport:
    """What the scoring command computed: verdicts in gold order, the EX table and the counts."""

    scores: list[Score]
    table: dict[str, tuple[float, int]]
    missing: int = 0
    malformed: int = 0
    other_db: int = 0
    too_large: int = 0
    gold_failures: int = 0
    worker_deaths: int = 0


def score_bird(pred_path: str | Path, gold_path: str | Path, db_root: str | Path, mode: str = "set",
               timeout_s: float = 30.0, max_rows: int | None = None, max_result_bytes: int = DEFAULT_RESULT_BYTES,
               workers: int = 0, diff_json: str | Path | None = None, progress: bool = True) -> BirdReport:
    """Score a prediction file against the gold with the official rule (see the module docstring).
    `max_rows` None: no row cap in set mode (official), DEFAULT_MAX_ROWS otherwise; 0: none."""
    gold = load_bird_gold(gold_path, diff_json)
    preds = load_bird_predictions(pred_path)
    if max_rows is None:
        max_rows = 0 if mode == "set" else DEFAULT_MAX_ROWS
    for key, reason in preds.malformed:
        log.warning("%s: entry %r: %s; scored 0", pred_path, key, reason)
    items, other_db = [], 0
    for i, rec in enumerate(gold):
        sql, db_id = preds.entries.get(i, ("", None))  # a missing prediction scores 0 ("empty SQL")
        if db_id and db_id != rec["db_id"]:
            other_db += 1  # the official evaluator runs both SQLs on the database the prediction names
        db_id = db_id or rec["db_id"]
        items.append((sql, rec["SQL"], Path(db_root) / db_id / f"{db_id}.sqlite"))
    scores = score_batch(items, mode=mode, timeout_s=timeout_s, workers=workers, max_rows=max_rows,
                         max_result_bytes=max_result_bytes, progress=progress)
    table = bird_ex_by_difficulty(scores, [rec.get("difficulty", "") for rec in gold])
    return BirdReport(list(scores), table, missing=sum(1 for i in range(len(gold)) if i not in preds.entries),
                      malformed=len(preds.malformed), other_db=other_db,
                      too_large=sum(1 for s in scores if s.pred_status == "too_large"),
                      gold_failures=scores.gold_failures, worker_deaths=scores.worker_deaths)


def main(argv: Sequence[str] | None = None) -> dict[str, tuple[float, int]]:
    ap = argparse.ArgumentParser(description="Score a BIRD prediction file (execution accuracy, official semantics).")
    ap.add_argument("--pred", required=True, help="predict_dev.json (official BIRD format)")
    ap.add_argument("--gold", required=True, help="dev.json (records with SQL, db_id, difficulty) or dev_gold.sql")
    ap.add_argument("--diff-json", default=None, help="dev.json for the difficulties when --gold is a .sql file")
    ap.add_argument("--db-root", required=True, help="folder holding <db_id>/<db_id>.sqlite")
    ap.add_argument("--mode", default="set", choices=MODES, help="set = official BIRD EX")
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds per SQL (official meta_time_out: 30)")
    ap.add_argument("--max-rows", type=int, default=None,
                    help=f"row cap per result (0 = none); default none in set mode (official), {DEFAULT_MAX_ROWS} otherwise")
    ap.add_argument("--max-result-mb", type=float, default=DEFAULT_RESULT_BYTES / 1e6,
                    help="result-size bound per query (the memory bound; hitting it is an error that scores 0)")
    ap.add_argument("--workers", type=int, default=0)
    args = ap.parse_args(argv)
    try:
        report = score_bird(args.pred, args.gold, args.db_root, args.mode, args.timeout, args.max_rows,
                            int(args.max_result_mb * 1e6), args.workers, args.diff_json)
    except (OSError, ValueError) as e:  # an unusable input file: its name and the reason, no traceback
        raise SystemExit(f"error: {e}") from None
    table = report.table
    levels = list(table)
    print("{:20} {:20} {:20} {:20} {:20}".format("", *levels))
    print("{:20} {:<20} {:<20} {:<20} {:<20}".format("count", *(table[k][1] for k in levels)))
    print("======================================    ACCURACY    =====================================")
    print("{:20} {:<20.2f} {:<20.2f} {:<20.2f} {:<20.2f}".format("accuracy", *(table[k][0] for k in levels)))
    print(f"missing predictions: {report.missing}; malformed predictions (scored 0): {report.malformed}; "
          f"predictions naming another database: {report.other_db}; results over the memory bound: "
          f"{report.too_large}; failed gold queries: {report.gold_failures}; worker deaths: {report.worker_deaths}")
    return table
