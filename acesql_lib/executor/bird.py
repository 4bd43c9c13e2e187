"""BIRD's official prediction files and a scoring command with the official evaluators' semantics.

`python -m acesql_lib.executor --pred predict_dev.json --gold dev.json --db-root dev_databases/ [--mode M]`

A prediction entry is `SQL\\t----- bird -----\\tdb_id` under the key "0", "1", ... (keys read strictly:
ASCII digits without leading zeros, each once). The verdict is `set(pred_rows) == set(gold_rows)` with
no row cap (a result of any size, within the executor's memory bound; hitting it is reported); an
error or a timeout scores 0; EX is printed per difficulty as the official scripts print it.
`--mode` names the rule for everything else (`scoring.py` says which release does what, with the
file and line of each):
- `kit` (default): null, non-string and separator-less entries score 0, each counted and warned
  about; a blank SQL scores 0; both SQLs run on the database the entry names; invalid UTF-8 is read
  as U+FFFD; `--timeout` 30 s per SQL;
- `authors`: the authors' EVAL/evaluation_maj.py, the paper's numbers;
- `bird_original`: the original BIRD release's evaluation.py;
- `bird_minidev`: the mini-dev release's evaluation_ex.py.
A db_id is a plain name inside `--db-root`: an entry naming a path (`..`, `/`, absolute) is never
opened; it scores 0 and is counted as malformed.
"""
from __future__ import annotations

import argparse
import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from ..runtime.jsonfiles import DatasetError, db_id_problem, parse_json_text, read_json_file
from .batch import Score, score_batch
from .compare import MODES
from .sandbox import DEFAULT_MAX_ROWS, DEFAULT_RESULT_BYTES, ResultReading
from .scoring import RULES, SCORINGS, ScoringRule, rule, sql_to_run

log = logging.getLogger(__name__)
BIRD_SEPARATOR = "\t----- bird -----\t"  # official BIRD prediction format
LEVELS = ("simple", "moderate", "challenging")
_KEY = re.compile(r"0|[1-9][0-9]*")  # a question index as the kit writes it: ASCII digits, no leading zero


def write_bird_predictions(path: str | Path, sqls: Sequence[str], db_ids: Sequence[str]) -> None:
    """Write predictions in BIRD's official format: {"0": "SQL\\t----- bird -----\\tdb_id", ...}.

    A model's SQL may itself contain the separator: it is written as it is, and it cannot collide,
    because a db_id is a plain name (checked here) that never contains the separator, so the last
    separator of an entry is always the one before the db_id; the kit's reader splits there and
    reads the SQL back unchanged. The mini-dev evaluator runs such an entry whole (the separator
    begins with `--`, so the db_id after the last one is a trailing comment); the original BIRD
    evaluator stops on it (evaluation.py:58 unpacks exactly two parts): they are warned about."""
    if len(sqls) != len(db_ids):
        raise ValueError(f"{len(sqls)} SQLs but {len(db_ids)} db_ids")
    for i, (sql, db) in enumerate(zip(sqls, db_ids)):
        if not isinstance(sql, str):
            raise ValueError(f"prediction {i}: the SQL must be a string, got {type(sql).__name__}")
        problem = db_id_problem(db)
        if problem:
            raise ValueError(f"prediction {i}: {problem}")
    clashes = [i for i, sql in enumerate(sqls) if BIRD_SEPARATOR in sql]
    if clashes:
        log.warning("%s: %d prediction(s) contain the BIRD separator %r in their SQL (first: %s); written as "
                    "they are (the kit and the mini-dev evaluator read them; the original BIRD evaluation.py "
                    "stops on them)", path, len(clashes), BIRD_SEPARATOR, clashes[:5])
    data = {str(i): f"{sql}{BIRD_SEPARATOR}{db}" for i, (sql, db) in enumerate(zip(sqls, db_ids))}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(data, indent=1, ensure_ascii=False), encoding="utf-8")


@dataclass
class BirdPredictions:
    """Index -> (SQL or None, db_id or None) as one scoring rule reads the file, plus the entries it
    could not read in the official form (each scores 0). SQL None never runs (an error, 0); db_id
    None means the gold's database."""

    path: str
    entries: dict[int, tuple[str | None, str | None]] = field(default_factory=dict)
    malformed: list[tuple[str, str]] = field(default_factory=list)  # (key, reason); each scores 0
    scoring: str = "kit"
    order: list[str] = field(default_factory=list)  # the keys in file order


def _read_entries(path: str | Path) -> dict:
    """The prediction file's object; every error names the file (strict keys, duplicates, depth)."""
    data = read_json_file(path, "predictions file", strict_keys=True)
    if not isinstance(data, dict):
        raise DatasetError(f"{path}: expected a JSON object of index -> 'SQL\\t----- bird -----\\tdb_id', "
                           f"got {type(data).__name__}")
    bad = [k for k in data if not _KEY.fullmatch(k)]
    if bad:
        raise DatasetError(f"{path}: {len(bad)} key(s) are not question indexes (ASCII digits without leading "
                           f"zeros: \"0\", \"7\", \"12\"): {', '.join(repr(k) for k in bad[:5])}")
    return data


def _stop(path: str | Path, key: str, what: str, sc: ScoringRule) -> DatasetError:
    return DatasetError(f"{path}: entry {key!r} {what}: {sc.source} stops here with a traceback, so it cannot "
                        "be scored in this mode (--mode kit scores it 0 and counts it)")


def load_bird_predictions(path: str | Path, scoring: str = "kit") -> BirdPredictions:
    """Read a prediction file as the scoring rule `scoring` reads it (`scoring.RULES`).

    Under every rule the keys are strict and the file must be one JSON object (errors name the
    file). Under "kit" entries that are null, not strings, lack the separator or name a db_id that
    is not a plain name are kept as malformed (scored 0), never fatal; the other rules read them as
    their release does, and where the release stops with a traceback this raises naming the entry."""
    sc = rule(scoring)
    data = _read_entries(path)
    out = BirdPredictions(str(path), scoring=scoring, order=list(data))
    for key, value in data.items():
        i = int(key)
        if not isinstance(value, str):
            what = "null" if value is None else f"a {type(value).__name__}, not a string"
            if sc.null == "blank_financial":  # evaluation.py:59-60
                out.entries[i] = (" ", "financial")
            elif sc.null == "blank":  # evaluation_utils.py:90-92
                out.entries[i] = (" ", None)
            else:
                out.malformed.append((key, f"prediction is {what}"))
                out.entries[i] = (None, None)
            continue
        parts = value.split(BIRD_SEPARATOR)
        if len(parts) == 1 or (len(parts) > 2 and sc.two_separators != "last"):
            handling = sc.no_separator if len(parts) == 1 else sc.two_separators
            what = "has no '\\t----- bird -----\\t' separator" if len(parts) == 1 else \
                f"has the separator {len(parts) - 1} times"
            if handling == "stop":
                raise _stop(path, key, what, sc)
            if handling == "whole":  # the entry is the SQL (minidev strips it, utils:88)
                out.entries[i] = (value.strip() if sc.name == "bird_minidev" else value, None)
            else:
                out.malformed.append((key, f"prediction {what}"))
                out.entries[i] = (None, None)
            continue
        sql, db_id = value.rsplit(BIRD_SEPARATOR, 1)
        if sc.database == "gold":
            out.entries[i] = (sql, None)
            continue
        db_id = db_id.strip() if sc.name == "kit" else db_id
        if sc.name == "kit" and not db_id:
            out.entries[i] = (sql, None)  # no database named: the gold's
            continue
        problem = db_id_problem(db_id)
        if problem:  # never opened: the kit reads databases inside db_root only
            out.malformed.append((key, f"prediction names no database inside db_root ({problem})"))
            out.entries[i] = (None, None)
        else:
            out.entries[i] = (sql, db_id)
    return out


def read_bird_predictions(path: str | Path) -> dict[int, tuple[str, str]]:
    """Index -> (SQL, db_id) from an official BIRD prediction file; bad entries raise naming the key
    (strict: for files the kit wrote, which it reads back exactly, separator in the SQL included;
    the scoring command reads leniently, see load_bird_predictions)."""
    preds = load_bird_predictions(path)
    if preds.malformed:
        key, reason = preds.malformed[0]
        raise ValueError(f"{path}: entry {key!r} is not 'SQL{BIRD_SEPARATOR!r}db_id' ({reason})")
    return {i: (sql, db or "") for i, (sql, db) in preds.entries.items()}


def _read_difficulties(path: str | Path) -> list:
    """dev.json (a JSON list) or the mini-dev release's `mini_dev_sqlite.jsonl` (one record a line)."""
    if Path(path).suffix == ".jsonl":
        try:
            lines = Path(path).read_text(encoding="utf-8-sig").splitlines()
        except FileNotFoundError:
            raise FileNotFoundError(f"file not found: {path}") from None
        return [parse_json_text(line, f"{path}: line {n}") for n, line in enumerate(lines, 1) if line.strip()]
    return read_json_file(path, "difficulty file")


def load_bird_gold(path: str | Path, diff_json: str | Path | None = None) -> list[dict]:
    """Gold records {SQL, db_id, difficulty}: a dev.json, or the official `dev_gold.sql` (one
    `SQL\\tdb_id` a line) with difficulties from `diff_json` (dev.json, or a .jsonl as mini-dev
    ships). Bad records name the file and the line or record; a db_id must be a plain name."""
    path = Path(path)
    if path.suffix == ".sql":
        try:
            lines = path.read_text(encoding="utf-8-sig").splitlines()
        except FileNotFoundError:
            raise FileNotFoundError(f"file not found: {path}") from None
        except UnicodeDecodeError as e:
            raise DatasetError(f"{path}: not valid UTF-8 at byte {e.start}") from None
        gold = []
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            if "\t" not in line:
                raise DatasetError(f"{path}: line {n} is not 'SQL<TAB>db_id'")
            sql, db_id = line.strip().rsplit("\t", 1)
            problem = db_id_problem(db_id.strip())
            if problem:
                raise DatasetError(f"{path}: line {n}: {problem}")
            gold.append({"SQL": sql, "db_id": db_id.strip()})
        if diff_json is not None:
            levels = _read_difficulties(diff_json)
            if not isinstance(levels, list) or len(levels) != len(gold):
                raise DatasetError(f"{diff_json}: expected a list of {len(gold)} records with 'difficulty'")
            for g, rec in zip(gold, levels):
                g["difficulty"] = rec.get("difficulty", "") if isinstance(rec, dict) else ""
        return gold
    gold = read_json_file(path, "gold file")
    if not isinstance(gold, list):
        raise DatasetError(f"{path}: expected a JSON list of records")
    for i, rec in enumerate(gold):
        if not isinstance(rec, dict) or not isinstance(rec.get("SQL"), str) or not isinstance(rec.get("db_id"), str):
            raise DatasetError(f"{path}: record {i} needs string fields 'SQL' and 'db_id'")
        problem = db_id_problem(rec["db_id"])
        if problem:
            raise DatasetError(f"{path}: record {i}: {problem}")
    return gold


def bird_ex_by_difficulty(scores: Sequence[Score], difficulties: Sequence[str]) -> dict[str, tuple[float, int]]:
    """{level: (EX %, count)} for simple / moderate / challenging / total, as BIRD's script prints."""
    table = {}
    for level in (*LEVELS, "total"):
        hits = [s.correct for s, d in zip(scores, difficulties) if level == "total" or d == level]
        table[level] = (100.0 * sum(hits) / len(hits) if hits else 0.0, len(hits))
    return table


@dataclass(frozen=True)
class BirdFiles:
    """What one scoring reads: the prediction file (predict_dev.json), the gold (dev.json records, or a .sql
    file of `SQL\\tdb_id` lines with the difficulties from `diff_json`) and the folder of `<db_id>/<db_id>.sqlite`."""

    pred: str | Path
    gold: str | Path
    db_root: str | Path
    diff_json: str | Path | None = None


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
    scoring: str = "kit"
    timeout_s: float = 30.0


def _paired(preds: BirdPredictions, n_gold: int, sc: ScoringRule) -> list[tuple[str | None, str | None] | None]:
    """The entry each gold question is scored with (None: missing), as the rule pairs them."""
    if sc.pairing == "order":  # the i-th entry of the file, whatever its key (the official zip)
        if preds.order != [str(i) for i in range(len(preds.order))]:
            log.warning("%s: keys are not 0, 1, 2, ... in file order; %s pairs entries with the gold by their "
                        "order in the file, so this does too", preds.path, sc.source)
        ordered = [preds.entries[int(k)] for k in preds.order]
        paired = ordered[:n_gold] + [None] * (n_gold - len(ordered))
    else:
        paired = [preds.entries.get(i) for i in range(n_gold)]
    missing = [i for i, e in enumerate(paired) if e is None]
    if missing and sc.missing == "stop":
        raise DatasetError(f"{preds.path}: no prediction for {len(missing)} of {n_gold} gold questions (first: "
                           f"{missing[:5]}); {sc.source} stops on a file with fewer entries than gold questions "
                           "(--mode kit scores each missing one 0 and counts it)")
    return paired


def score_bird(files: BirdFiles, mode: str = "set", timeout_s: float | None = None, max_rows: int | None = None,
               max_result_bytes: int = DEFAULT_RESULT_BYTES, workers: int = 0, progress: bool = True,
               scoring: str = "kit") -> BirdReport:
    """Score `files.pred` against the gold (see the module docstring). `mode` is the row
    comparison ("set": BIRD's); `scoring` the rule for everything else (`scoring.RULES`).
    `timeout_s` None: the rule's (authors 300 s, official releases 30 s, kit 30 s). `max_rows`
    None: no row cap in set mode (official), DEFAULT_MAX_ROWS otherwise; 0: none."""
    sc = rule(scoring)
    gold = load_bird_gold(files.gold, files.diff_json)
    preds = load_bird_predictions(files.pred, scoring)
    timeout_s = timeout_s if timeout_s is not None else (sc.timeout_s or 30.0)
    if max_rows is None:
        max_rows = 0 if mode == "set" else DEFAULT_MAX_ROWS
    for key, reason in preds.malformed:
        log.warning("%s: entry %r: %s; scored 0", files.pred, key, reason)
    items, other_db = [], 0
    paired = _paired(preds, len(gold), sc)
    for rec, entry in zip(gold, paired):
        sql, db_id = entry if entry is not None else ("", None)  # a missing prediction scores 0 ("empty SQL")
        if db_id and db_id != rec["db_id"]:
            other_db += 1  # original release and kit: both SQLs run on the database the prediction names
        db_id = db_id or rec["db_id"]
        items.append((sql_to_run(sql, sc) if entry is not None else "", rec["SQL"],
                      Path(files.db_root) / db_id / f"{db_id}.sqlite"))
    scores = score_batch(items, mode=mode, timeout_s=timeout_s, workers=workers, progress=progress,
                         reading=ResultReading(max_rows, max_result_bytes, sc.strict_utf8))
    table = bird_ex_by_difficulty(scores, [rec.get("difficulty", "") for rec in gold])
    return BirdReport(list(scores), table, missing=sum(1 for e in paired if e is None),
                      malformed=len(preds.malformed), other_db=other_db,
                      too_large=sum(1 for s in scores if s.pred_status == "too_large"),
                      gold_failures=scores.gold_failures, worker_deaths=scores.worker_deaths, scoring=scoring,
                      timeout_s=timeout_s)


def main(argv: Sequence[str] | None = None) -> dict[str, tuple[float, int]]:
    ap = argparse.ArgumentParser(description="Score a BIRD prediction file (execution accuracy, official semantics).")
    ap.add_argument("--pred", required=True, help="predict_dev.json (official BIRD format)")
    ap.add_argument("--gold", required=True, help="dev.json (records with SQL, db_id, difficulty) or dev_gold.sql")
    ap.add_argument("--diff-json", default=None,
                    help="dev.json (or mini-dev's .jsonl) for the difficulties when --gold is a .sql file")
    ap.add_argument("--db-root", required=True, help="folder holding <db_id>/<db_id>.sqlite")
    ap.add_argument("--mode", default="kit", choices=SCORINGS,
                    help="scoring rule: kit (nulls, blanks and malformed entries 0, counted), authors (the "
                         "authors' EVAL/evaluation_maj.py, the paper's numbers), bird_original (BIRD's "
                         "evaluation.py), bird_minidev (BIRD mini-dev's evaluation_ex.py); see executor/scoring.py")
    ap.add_argument("--compare", default="set", choices=MODES, help="row comparison; set = official BIRD EX")
    ap.add_argument("--timeout", type=float, default=None,
                    help="seconds per SQL; default the mode's: " + ", ".join(
                        f"{n} {r.timeout_s or 30.0:g}" for n, r in RULES.items()))
    ap.add_argument("--max-rows", type=int, default=None,
                    help=f"row cap per result (0 = none); default none in set mode (official), {DEFAULT_MAX_ROWS} otherwise")
    ap.add_argument("--max-result-mb", type=float, default=DEFAULT_RESULT_BYTES / 1e6,
                    help="result-size bound per query (the memory bound; hitting it is an error that scores 0)")
    ap.add_argument("--workers", type=int, default=0)
    args = ap.parse_args(argv)
    try:
        report = score_bird(BirdFiles(args.pred, args.gold, args.db_root, args.diff_json), args.compare, args.timeout,
                            args.max_rows, int(args.max_result_mb * 1e6), args.workers, scoring=args.mode)
    except (OSError, ValueError) as e:  # an unusable input file: its name and the reason, no traceback
        raise SystemExit(f"error: {e}") from None
    table = report.table
    levels = list(table)
    print(f"scoring: {report.scoring} ({RULES[report.scoring].source}); timeout {report.timeout_s:g} s per SQL")
    print("{:20} {:20} {:20} {:20} {:20}".format("", *levels))
    print("{:20} {:<20} {:<20} {:<20} {:<20}".format("count", *(table[k][1] for k in levels)))
    print("======================================    ACCURACY    =====================================")
    print("{:20} {:<20.2f} {:<20.2f} {:<20.2f} {:<20.2f}".format("accuracy", *(table[k][0] for k in levels)))
    print(f"missing predictions: {report.missing}; malformed predictions (scored 0): {report.malformed}; "
          f"predictions naming another database: {report.other_db}; results over the memory bound: "
          f"{report.too_large}; failed gold queries: {report.gold_failures}; worker deaths: {report.worker_deaths}")
    return table
