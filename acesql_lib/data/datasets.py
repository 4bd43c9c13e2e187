"""Loaders for the three question formats the kit reads (BIRD, Spider, SynSQL) into one record, and the
profile's data read through them (its training pool, its evaluation sets, their schemas).

Every loader reads a JSON list, checks each record's fields, and returns a `LoadResult`: the
good `Example`s plus `skipped`, a list of (record index, reason) for malformed records, each also
logged as a warning naming the file, the index and the field. A file that is missing or not a
JSON list is an error naming the file. With `check_db=True` (the default) every database must
exist at `<db_root>/<db_id>/<db_id>.sqlite`, the layout all three releases share; a missing one
raises FileNotFoundError naming the path. Question-only fixtures pass `check_db=False`.

The files come from the download helpers of `downloads` (§7), or, for the CPU profiles, from the tiny world.
"""
from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from ..config.paths import REPO_ROOT
from ..runtime.jsonfiles import DatasetError, db_id_problem, read_json_list  # the one reader of JSON inputs
from .downloads import EVAL_DOWNLOADS

log = logging.getLogger(__name__)


@dataclass
class Example:
    id: str
    db_id: str
    question: str
    evidence: str
    sql: str
    difficulty: str  # BIRD difficulty, or SynSQL sql_complexity; "" for Spider
    question_style: str  # SynSQL question_style; "" elsewhere
    source: str  # bird, spider or synsql
    db_path: str

    @property
    def prompt_question(self) -> str:
        """§2: for BIRD the question the model reads is evidence + newline + question."""
        return f"{self.evidence}\n{self.question}" if self.evidence else self.question


@dataclass
class LoadResult:
    path: str
    examples: list[Example] = field(default_factory=list)
    skipped: list[tuple[int, str]] = field(default_factory=list)  # (record index, reason)
    unknown_values: dict[str, Counter] = field(default_factory=dict)  # enumerated field -> unknown value -> count

    def __iter__(self) -> Iterator[Example]:
        return iter(self.examples)

    def __len__(self) -> int:
        return len(self.examples)


# field specs: name -> (required, allowed types)
_STR, _ID = (str,), (int, str)
_BIRD = {"question_id": (False, _ID), "db_id": (True, _STR), "question": (True, _STR), "evidence": (False, _STR),
         "SQL": (True, _STR), "difficulty": (False, _STR)}
_SPIDER = {"db_id": (True, _STR), "question": (True, _STR), "query": (True, _STR)}
_SYNSQL = {"id": (False, _ID), "db_id": (True, _STR), "question": (True, _STR), "sql": (True, _STR),
           "sql_complexity": (False, _STR), "question_style": (False, _STR), "external_knowledge": (False, _STR),
           "cot": (False, _STR)}


def db_path_for(db_root: str | Path, db_id: str) -> Path:
    """`<db_root>/<db_id>/<db_id>.sqlite` for a plain db_id (ValueError naming the reason otherwise)."""
    problem = db_id_problem(db_id)
    if problem:
        raise ValueError(problem)
    return Path(db_root) / db_id / f"{db_id}.sqlite"


def tables_db_ids(tables_json: str | Path) -> set[str]:
    """The db_ids a Spider/BIRD tables.json describes; an entry whose db_id is not a plain name (a
    list, a number, a path) is a DatasetError naming the file and the entry (entries without a db_id
    are schema.py's to report)."""
    ids = set()
    for i, e in enumerate(read_json_list(tables_json, "tables.json")):
        if isinstance(e, dict) and "db_id" in e:
            problem = db_id_problem(e["db_id"])
            if problem:
                raise DatasetError(f"{tables_json}: entry {i}: {problem}")
            ids.add(e["db_id"])
    return ids


# Enumerated fields: a value outside these is kept but warned about and counted (LoadResult.unknown_values).
SYNSQL_LEVELS = ("Simple", "Moderate", "Complex", "Highly Complex")  # SynSQL sql_complexity (§3.1)
BIRD_DIFFICULTIES = ("simple", "moderate", "challenging")
_ENUMS = {"synsql": ("sql_complexity", SYNSQL_LEVELS), "bird": ("difficulty", BIRD_DIFFICULTIES)}
_ID_FIELD = {"synsql": "id", "bird": "question_id"}
DUPLICATE_RULES = ("error", "keep_first")


def _problem(record: Any, spec: dict[str, tuple[bool, tuple[type, ...]]]) -> str | None:
    if not isinstance(record, dict):
        return f"record is a {type(record).__name__}, not an object"
    for name, (required, types) in spec.items():
        if name not in record or record[name] is None:
            if required:
                return f"field {name!r} is missing"
            continue
        value = record[name]
        if not isinstance(value, types) or isinstance(value, bool):
            want = " or ".join(t.__name__ for t in types)
            return f"field {name!r} must be {want}, got {type(value).__name__}"
        if required and isinstance(value, str) and not value.strip():
            return f"field {name!r} is empty"
    problem = db_id_problem(record.get("db_id")) if "db_id" in spec else None
    return f"field 'db_id': {problem}" if problem else None


def _load(path: str | Path, db_root: str | Path | None, check_db: bool, spec: dict, source: str,
          make: Any, tables: str | Path | None = None, duplicates: str = "error") -> LoadResult:
    """Read, check and convert one questions file (see the module docstring).

    - Ids: two records with the same id (compared as text, so "7" and 7 collide) are reported with
      the file, the id and both record indexes; `duplicates="error"` (default) raises, "keep_first"
      keeps the first and lists the others in `skipped`. One id meaning one question is what the
      pool, the predictions and the paired statistics rely on.
    - Enumerated fields (SynSQL sql_complexity, BIRD difficulty): unknown, empty or null values are
      kept, counted in `unknown_values` and warned about once per file.
    - `tables`: a tables.json that must describe every database the questions use; one that does
      not is an error at load time naming the missing db_ids and a record that uses each.
    """
    if duplicates not in DUPLICATE_RULES:
        raise ValueError(f"duplicates must be one of {DUPLICATE_RULES}, got {duplicates!r}")
    records = read_json_list(path)
    result = LoadResult(str(path))
    if check_db and db_root is None:
        raise ValueError(f"{path}: check_db=True needs db_root (or pass check_db=False)")
    root = Path(db_root) if db_root is not None else None
    described = tables_db_ids(tables) if tables is not None else None
    checked: set[str] = set()
    first_seen: dict[str, int] = {}
    dupes: list[tuple[str, int, int]] = []
    missing_in_tables: dict[str, int] = {}
    enum = _ENUMS.get(source)
    for i, record in enumerate(records):
        problem = _problem(record, spec)
        if problem:
            log.warning("%s: record %d: %s; skipped", path, i, problem)
            result.skipped.append((i, problem))
            continue
        example = make(i, record, "")
        if example.id in first_seen:
            dupes.append((example.id, first_seen[example.id], i))
            if duplicates == "keep_first":
                result.skipped.append((i, f"duplicate id {example.id!r} (first at record {first_seen[example.id]})"))
            continue
        first_seen[example.id] = i
        db_id = record["db_id"]
        if described is not None and db_id not in described:
            missing_in_tables.setdefault(db_id, i)
        db_path = root / db_id / f"{db_id}.sqlite" if root is not None else None
        if check_db and db_id not in checked:
            if not db_path.is_file():
                raise FileNotFoundError(f"{path}: record {i} (db_id {db_id!r}): database not found at {db_path}")
            checked.add(db_id)
        if enum is not None and record.get(enum[0]) not in enum[1]:
            result.unknown_values.setdefault(enum[0], Counter())[record.get(enum[0])] += 1
        example.db_path = str(db_path) if db_path is not None else ""
        result.examples.append(example)
    if dupes:
        listed = "; ".join(f"id {d!r} at records {a} and {b}" for d, a, b in dupes[:10])
        more = f" (and {len(dupes) - 10} more)" if len(dupes) > 10 else ""
        if duplicates == "error":
            raise DatasetError(f"{path}: {len(dupes)} duplicate {_ID_FIELD.get(source, 'id')}(s): {listed}{more}; "
                               "ids must be unique (or load with duplicates='keep_first')")
        log.warning("%s: %d duplicate ids, later records skipped: %s%s", path, len(dupes), listed, more)
    if missing_in_tables:
        listed = ", ".join(f"{db!r} (record {i})" for db, i in sorted(missing_in_tables.items())[:10])
        raise DatasetError(f"{path}: {len(missing_in_tables)} database(s) used by the questions are not in "
                           f"{tables}: {listed}")
    for name, counts in result.unknown_values.items():
        shown = ", ".join(f"{v!r} x{n}" for v, n in counts.most_common(5))
        log.warning("%s: %d records have a %s outside %s (%s); kept, counted in unknown_values", path,
                    sum(counts.values()), name, enum[1], shown)
    if result.skipped:
        log.warning("%s: %d of %d records skipped", path, len(result.skipped), len(records))
    return result


def _id(record: dict, key: str, index: int) -> str:
    value = record.get(key)
    return str(index if value is None else value)


def load_bird(dev_json: str | Path, db_root: str | Path | None = None, check_db: bool = True,
              tables: str | Path | None = None, duplicates: str = "error") -> LoadResult:
    """BIRD dev.json (question_id, db_id, question, evidence, SQL, difficulty); DBs under dev_databases/."""
    return _load(dev_json, db_root, check_db, _BIRD, "bird", tables=tables, duplicates=duplicates,
                 make=lambda i, r, p: Example(
        _id(r, "question_id", i), r["db_id"], r["question"], r.get("evidence") or "", r["SQL"],
        r.get("difficulty") or "", "", "bird", p))


def load_spider(dev_json: str | Path, db_root: str | Path | None = None, check_db: bool = True,
                tables: str | Path | None = None, duplicates: str = "error") -> LoadResult:
    """Spider dev.json (db_id, question, query); DBs under database/. Ids are record indexes."""
    return _load(dev_json, db_root, check_db, _SPIDER, "spider", tables=tables, duplicates=duplicates,
                 make=lambda i, r, p: Example(
        str(i), r["db_id"], r["question"], "", r["query"], "", "", "spider", p))


def load_synsql(data_json: str | Path, db_root: str | Path | None = None, check_db: bool = True,
                tables: str | Path | None = None, duplicates: str = "error") -> LoadResult:
    """SynSQL data.json (db_id, sql_complexity, question_style, question, external_knowledge, cot, sql);
    DBs under databases/. `external_knowledge` is the evidence (empty in most SynSQL records, §2);
    an `id` field (written by the kit's filtered pools) is kept, else the record index is the id."""
    return _load(data_json, db_root, check_db, _SYNSQL, "synsql", tables=tables, duplicates=duplicates,
                 make=lambda i, r, p: Example(
        _id(r, "id", i), r["db_id"], r["question"], r.get("external_knowledge") or "", r["sql"],
        r.get("sql_complexity") or "", r.get("question_style") or "", "synsql", p))


def load_tables(path: str | Path) -> dict:
    """Every schema in a Spider/BIRD tables.json, keyed by db_id (schema.py owns the format)."""
    from .schema import load_tables_json

    return load_tables_json(path)


# The robustness sets (§5, Table 3) and Spider test

def load_spider_variant(path: str | Path, db_root: str | Path | None = None, check_db: bool = True,
                        question_field: str = "question") -> LoadResult:
    """A Spider-format file whose question is in another field: Spider-Syn's dev.json asks
    `SpiderSynQuestion` (its `SpiderQuestion` is the original wording); db_id and query as in Spider."""
    spec = {"db_id": (True, _STR), question_field: (True, _STR), "query": (True, _STR)}
    return _load(path, db_root, check_db, spec, "spider", lambda i, r, p: Example(
        str(i), r["db_id"], r[question_field], "", r["query"], "", "", "spider", p))


def load_spider_test(spider_dir: str | Path, check_db: bool = True) -> LoadResult:
    """Spider test (test.json; databases under test_database/, schemas in test_tables.json)."""
    root = Path(spider_dir)
    return load_spider(root / "test.json", root / "test_database", check_db=check_db)


def load_spider_dk(dk_dir: str | Path, check_db: bool = True) -> LoadResult:
    """Spider-DK.json (type, db_id, query, question); database/ is Spider's merged with Spider-DK's own."""
    root = Path(dk_dir)
    return load_spider(root / "Spider-DK.json", root / "database", check_db=check_db)


def load_spider_syn(syn_dir: str | Path, spider_db_root: str | Path | None = None, check_db: bool = True) -> LoadResult:
    """Spider-Syn dev.json; the question asked is SpiderSynQuestion; databases are Spider's."""
    return load_spider_variant(Path(syn_dir) / "dev.json", spider_db_root, check_db, "SpiderSynQuestion")


def load_spider_realistic(realistic_dir: str | Path, spider_db_root: str | Path | None = None,
                          check_db: bool = True) -> LoadResult:
    """spider-realistic.json (Spider fields); databases are Spider's."""
    return load_spider(Path(realistic_dir) / "spider-realistic.json", spider_db_root, check_db=check_db)


# ---------------------------------------------------------------------------------------------
# The profile's data: what notebooks ask for, whichever world the profile uses


def training_pool(cfg: Any, paths: Any, progress: bool = True) -> LoadResult:
    """The SynSQL-format training pool of the profile: the tiny world (built if missing) or SynSQL-2.5M."""
    if cfg.data.world == "tinyworld":
        from .tinyworld import build_profile_world

        return world_training_pool(build_profile_world(cfg.data, paths.tinyworld), cfg.data.max_train_examples)
    else:
        root = Path(cfg.data.synsql_dir)
        root = root if root.is_absolute() else REPO_ROOT / root
        if not (root / "data.json").exists():
            raise FileNotFoundError(f"{root / 'data.json'}: SynSQL-2.5M not found; run "
                                    f"acesql_lib.data.downloads.download_synsql({str(root)!r}) on a machine with internet")
        tables = root / "tables.json"
        result = load_synsql(root / "data.json", root / "databases", tables=tables if tables.is_file() else None)
    return _capped(result, cfg.data.max_train_examples)


def world_training_pool(world: Any, max_examples: int = 0) -> LoadResult:
    """A tiny world's training pool (`TinyWorld`), the first `max_examples` when that is not 0: what
    notebooks 00-01 read and what the tiny base model is trained on."""
    return _capped(load_synsql(world.train_json, world.train_db_root, tables=world.train_tables), max_examples)


def _capped(result: LoadResult, max_examples: int) -> LoadResult:
    if max_examples:
        result.examples = result.examples[:max_examples]
    return result


def eval_examples(eval_set: Any, check_db: bool = True) -> LoadResult:
    """One evaluation set of the profile (an `EvalSet` entry: BIRD or Spider format)."""
    path, db_root = (p if Path(p).is_absolute() else REPO_ROOT / p for p in (eval_set.path, eval_set.db_root))
    if not Path(path).exists():
        hint = EVAL_DOWNLOADS.get(eval_set.name, "download_bird_dev" if eval_set.format == "bird" else "download_spider")
        raise FileNotFoundError(f"{path}: evaluation set {eval_set.name!r} not found; run notebook 00 (tiny profile) "
                                f"or acesql_lib.data.downloads.{hint}(...) on a machine with internet")
    if getattr(eval_set, "question_field", ""):
        return load_spider_variant(path, db_root, check_db=check_db, question_field=eval_set.question_field)
    loader = load_bird if eval_set.format == "bird" else load_spider
    tables = (Path(eval_set.tables) if Path(eval_set.tables).is_absolute() else REPO_ROOT / eval_set.tables) \
        if getattr(eval_set, "tables", "") else None
    return loader(path, db_root, check_db=check_db, tables=tables if tables is not None and tables.is_file() else None)


def schema_for(db_path: str | Path, n_values: int = 2, max_chars: int = 40) -> Any:
    """The live schema of one database, with BIRD descriptions when its folder has them (§2)."""
    from .schema import Schema

    db_path = Path(db_path)
    desc = db_path.parent / "database_description"
    return Schema.from_sqlite(db_path, description_dir=desc if desc.is_dir() else None, n_values=n_values,
                              max_chars=max_chars)


def schemas_for(examples: Any, n_values: int = 2, max_chars: int = 40) -> dict[str, Any]:
    """db_id -> Schema for every database the examples use, each read once."""
    out: dict[str, Any] = {}
    for ex in examples:
        if ex.db_id not in out:
            out[ex.db_id] = schema_for(ex.db_path, n_values, max_chars)
    return out


def db_root_of(examples: Any) -> Path:
    """The folder holding <db_id>/<db_id>.sqlite for these examples (SynSQL, BIRD and Spider layouts)."""
    roots = {Path(ex.db_path).parent.parent for ex in examples}
    if len(roots) != 1:
        raise DatasetError(f"examples come from {len(roots)} database folders: {sorted(map(str, roots))[:3]}")
    return roots.pop()


def train_db_root(cfg: Any, paths: Any) -> Path:
    """Where the training pool's databases live (tiny world or SynSQL layout)."""
    if cfg.data.world == "tinyworld":
        from .tinyworld import TinyWorld

        return TinyWorld(Path(paths.tinyworld)).train_db_root
    root = Path(cfg.data.synsql_dir)
    return (root if root.is_absolute() else REPO_ROOT / root) / "databases"
