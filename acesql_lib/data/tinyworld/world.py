"""The world on disk: `TinyWorld` (where each file lies), `build_tinyworld` (build or reuse),
`world_text` (the tokenizer's corpus), `route_stats` and the command line.
"""
from __future__ import annotations

import argparse
import json
import random
import shutil
import sqlite3
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from ..schema import quote_identifier as qi
from .databases import create_sqlite, description_csv, generate_rows, tables_entry
from .questions import Question, generate_questions, string_values
from .specs import DB_SPECS
from .templates import DbContext

# Cached worlds are reused when their manifest names this version: bump it by hand whenever the output
# changes (tests/test_tinyworld_golden.py pins the output, so a change that forgets the bump fails there).
GENERATOR_VERSION = "3b1f2d7c9e0a4d55"
DESCRIPTION = "The tiny benchmark world: a deterministic stand-in for SynSQL + BIRD that CPUs can train on."
KIND = "acesql-tinyworld"

# UNKNOWN mapping (BIRD labels difficulty by hand): nested queries are "challenging".
BIRD_DIFFICULTY = {"Simple": "simple", "Moderate": "moderate", "Complex": "moderate", "Highly Complex": "challenging"}
# UNKNOWN: share of training questions that carry evidence (SynSQL's `external_knowledge`). BIRD dev
# questions all do; a pool without any left the tiny base model unable to read an evidence line.
TRAIN_EVIDENCE_SHARE = 0.5


# A text column with at most this many distinct values (positions, segments, buildings) is the
# schema's own vocabulary: its values occur in training by design, and the in-distribution dev
# split may ask about them. Every other value it asks about (names, titles, dates, cities) is new.
CATEGORICAL_MAX_DISTINCT = 12


def categorical_values(con: sqlite3.Connection, max_distinct: int) -> set[str]:
    """String values of the database's text columns that hold at most `max_distinct` distinct ones."""
    out: set[str] = set()
    tables = [t for (t,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
    for table in tables:
        for col in [row[1] for row in con.execute(f"PRAGMA table_info({qi(table)})")]:
            values = [v for (v,) in con.execute(f"SELECT DISTINCT {qi(col)} FROM {qi(table)}") if isinstance(v, str)]
            if len(values) <= max_distinct:
                out.update(values)
    return out


@dataclass(frozen=True)
class TinyWorld:
    root: Path

    @property
    def manifest(self) -> Path: return self.root / "manifest.json"
    @property
    def tables_json(self) -> Path: return self.root / "tables.json"
    @property
    def routes_json(self) -> Path: return self.root / "routes.json"
    @property
    def train_json(self) -> Path: return self.root / "train" / "data.json"
    @property
    def train_tables(self) -> Path: return self.root / "train" / "tables.json"
    @property
    def train_db_root(self) -> Path: return self.root / "train" / "databases"
    @property
    def dev_json(self) -> Path: return self.root / "dev" / "dev.json"
    @property
    def dev_tables(self) -> Path: return self.root / "dev" / "dev_tables.json"
    @property
    def dev_db_root(self) -> Path: return self.root / "dev" / "dev_databases"
    @property
    def dev_id_json(self) -> Path: return self.root / "dev_id" / "dev.json"  # read with dev_tables / dev_db_root

    def db_path(self, db_id: str, split: str = "dev") -> Path:
        root = self.dev_db_root if split == "dev" else self.train_db_root
        return root / db_id / f"{db_id}.sqlite"

    def read_manifest(self) -> dict:
        return json.loads(self.manifest.read_text(encoding="utf-8"))


def _dump(path: Path, obj: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def _bird_rows(questions: list[tuple[str, str, Question, bool]], routes: dict[str, list[dict]]) -> list[dict]:
    """BIRD dev.json records of `questions`; `routes` receives each multi-route question's routes."""
    rows = []
    for i, (_, text, q, _) in enumerate(questions):
        rows.append({"question_id": i, "db_id": q.db_id, "question": text, "evidence": q.evidence,
                     "SQL": q.sql, "difficulty": BIRD_DIFFICULTY[q.level]})
        if len(q.routes) > 1:
            routes[str(i)] = q.routes
    return rows


def _split_stats(rows: list[dict], routes: dict[str, list[dict]]) -> dict:
    return {"questions": len(rows), "route_share": round(len(routes) / max(1, len(rows)), 4),
            "by_difficulty": dict(sorted(Counter(r["difficulty"] for r in rows).items())),
            "by_db": dict(sorted(Counter(r["db_id"] for r in rows).items()))}


def _in_distribution_dev(ctxs: list[DbContext], train: list[tuple[str, str, Question, bool]], n: int,
                         rng: random.Random, seen: set[tuple[str, str]]) -> tuple[list, dict]:
    """`n` new questions on the training databases whose open-domain values (names, titles, dates,
    cities) occur in no training SQL of their database, and the manifest's counts of those values."""
    if not n:
        return [], {"open_values": 0, "open_values_seen_in_training": 0,
                    "categorical_max_distinct": CATEGORICAL_MAX_DISTINCT}
    train_values = {(q.db_id, v) for _, _, q, _ in train for v in string_values(q.sql)}
    vocabulary = {(c.db.db_id, v) for c in ctxs for v in categorical_values(c.con, CATEGORICAL_MAX_DISTINCT)}

    def open_values(q: Question) -> set[tuple[str, str]]:
        return {(q.db_id, v) for v in string_values(q.sql) if (q.db_id, v) not in vocabulary}

    questions = generate_questions(ctxs, n, rng, 1.0, seen, accept=lambda q: not open_values(q) & train_values)
    values = [x for _, _, q, _ in questions for x in open_values(q)]
    return questions, {"open_values": len(set(values)),
                       "open_values_seen_in_training": sum(x in train_values for x in values),
                       "categorical_max_distinct": CATEGORICAL_MAX_DISTINCT}


def _write_world(root: Path, seed: int, n_train: int, n_dev: int, n_dev_id: int = 0) -> dict:
    """Write every file of the world under `root`; returns the manifest."""
    world = TinyWorld(root)
    db_info: dict[str, dict] = {}
    for db in DB_SPECS:
        rows = generate_rows(db, seed)
        path = world.db_path(db.db_id, "dev")
        create_sqlite(path, db, rows)
        if not db.dev_only:  # the same bytes in the SynSQL layout
            world.db_path(db.db_id, "train").parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, world.db_path(db.db_id, "train"))
        for t in db.tables:
            desc = path.parent / "database_description" / f"{t.name}.csv"
            desc.parent.mkdir(parents=True, exist_ok=True)
            desc.write_text(description_csv(db, t), encoding="utf-8")
        db_info[db.db_id] = {"split": "dev" if db.dev_only else "train+dev", "tables": len(db.tables),
                             "rows": {t.name: len(rows[t.name]) for t in db.tables}, "bytes": path.stat().st_size}
    _dump(world.tables_json, [tables_entry(db) for db in DB_SPECS])
    _dump(world.train_tables, [tables_entry(db) for db in DB_SPECS if not db.dev_only])
    _dump(world.dev_tables, [tables_entry(db) for db in DB_SPECS])

    cons = {db.db_id: sqlite3.connect(f"file:{world.db_path(db.db_id, 'dev')}?mode=ro", uri=True) for db in DB_SPECS}
    try:
        ctxs = [DbContext(db, cons[db.db_id]) for db in DB_SPECS]
        seen: set[tuple[str, str]] = set()
        train = generate_questions([c for c in ctxs if not c.db.dev_only], n_train,
                                   random.Random(f"{seed}:train"), TRAIN_EVIDENCE_SHARE, seen)
        dev = generate_questions(ctxs, n_dev, random.Random(f"{seed}:dev"), 1.0, seen)
        # drawn last, so train and dev keep their bytes
        dev_id, dev_id_values = _in_distribution_dev([c for c in ctxs if not c.db.dev_only], train, n_dev_id,
                                                     random.Random(f"{seed}:dev_id"), seen)
    finally:
        for con in cons.values():
            con.close()

    data, routes = [], {"train": {}, "dev": {}, "dev_id": {}}
    for i, (style, text, q, with_evidence) in enumerate(train):
        data.append({"db_id": q.db_id, "sql_complexity": q.level, "question_style": style, "question": text,
                     "external_knowledge": q.evidence if with_evidence else "", "cot": "", "sql": q.sql})
        if len(q.routes) > 1:
            routes["train"][str(i)] = q.routes
    dev_rows = _bird_rows(dev, routes["dev"])
    dev_id_rows = _bird_rows(dev_id, routes["dev_id"])
    _dump(world.train_json, data)
    _dump(world.dev_json, dev_rows)
    if n_dev_id:
        _dump(world.dev_id_json, dev_id_rows)
    _dump(world.routes_json, routes)
    manifest = {
        "kind": KIND, "generator_version": GENERATOR_VERSION, "seed": seed, "n_train": n_train, "n_dev": n_dev,
        "n_dev_id": n_dev_id,
        "databases": db_info,
        "dev_only_databases": sorted(db.db_id for db in DB_SPECS if db.dev_only),
        "train": {"questions": len(data), "route_share": round(len(routes["train"]) / max(1, len(data)), 4),
                  "by_complexity": dict(sorted(Counter(r["sql_complexity"] for r in data).items())),
                  "by_style": dict(sorted(Counter(r["question_style"] for r in data).items())),
                  "with_evidence": sum(bool(r["external_knowledge"]) for r in data),
                  "by_db": dict(sorted(Counter(r["db_id"] for r in data).items()))},
        "dev": _split_stats(dev_rows, routes["dev"]),
        "dev_id": {**_split_stats(dev_id_rows, routes["dev_id"]), **dev_id_values},
    }
    _dump(world.manifest, manifest)
    return manifest


def build_tinyworld(out_dir: str | Path, seed: int = 0, n_train: int = 3000, n_dev: int = 300,
                    force: bool = False, n_dev_id: int = 0) -> TinyWorld:
    """Build (or reuse) the tiny world in `out_dir`; `n_dev_id` > 0 adds the in-distribution dev
    split (`dev_id/dev.json`: the training databases, new questions, values no training SQL holds).

    An existing world whose manifest has the same seed, sizes and generator version is returned
    as is; `force` rebuilds. A folder that is not empty and holds no tiny-world manifest is never
    overwritten. The world is written beside `out_dir` first and moved in when complete.
    """
    out = Path(out_dir)
    world = TinyWorld(out)
    want = {"kind": KIND, "seed": seed, "n_train": n_train, "n_dev": n_dev, "n_dev_id": n_dev_id,
            "generator_version": GENERATOR_VERSION}
    old: dict = {}
    if world.manifest.is_file():
        try:
            old = world.read_manifest()
        except (json.JSONDecodeError, OSError):
            old = {}
    if not force and all(old.get(k) == v for k, v in want.items()):
        return world
    if out.exists() and any(out.iterdir()) and old.get("kind") != KIND:
        raise FileExistsError(f"{out}: not empty and not a tiny world (no {world.manifest.name} of kind {KIND!r}); "
                              "choose an empty folder")
    tmp = out.with_name(out.name + ".building")
    if tmp.exists():
        shutil.rmtree(tmp)
    _write_world(tmp, seed, n_train, n_dev, n_dev_id)
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    return world


def build_profile_world(data: Any, root: str | Path) -> TinyWorld:
    """The tiny world a profile's `data` block describes (seed and sizes), built in `root` or reused."""
    return build_tinyworld(root, data.seed, data.tiny_n_train, data.tiny_n_dev, n_dev_id=data.tiny_n_dev_id)


def world_text(world: TinyWorld) -> Iterator[str]:
    """Every string the tiny model will read or write: questions, evidence, SQL, schema names and
    the databases' distinct values (the tokenizer is trained on these)."""
    for rec in json.loads(world.train_json.read_text(encoding="utf-8")):
        yield rec["question"]
        yield rec["sql"]
    for rec in json.loads(world.dev_json.read_text(encoding="utf-8")):
        yield rec["question"]
        if rec["evidence"]:
            yield rec["evidence"]
        yield rec["SQL"]
    for entry in json.loads(world.tables_json.read_text(encoding="utf-8")):
        yield from entry["table_names_original"]
        yield from entry["table_names"]
        yield from (name for _, name in entry["column_names_original"])
        yield from (name for _, name in entry["column_names"])
        con = sqlite3.connect(f"file:{world.db_path(entry['db_id'], 'dev')}?mode=ro", uri=True)
        try:
            for table, (_, col) in ((entry["table_names_original"][t], (t, c))
                                    for t, c in entry["column_names_original"] if t >= 0):
                for (v,) in con.execute(f"SELECT DISTINCT {qi(col)} FROM {qi(table)} ORDER BY 1"):
                    if v is not None:
                        yield str(v)
        finally:
            con.close()


def route_stats(world: TinyWorld) -> dict[str, dict[str, float]]:
    """Per split: questions, questions with two or more verified column sets, and their share."""
    routes = json.loads(world.routes_json.read_text(encoding="utf-8"))
    sizes = {"train": len(json.loads(world.train_json.read_text(encoding="utf-8"))),
             "dev": len(json.loads(world.dev_json.read_text(encoding="utf-8")))}
    if world.dev_id_json.is_file():
        sizes["dev_id"] = len(json.loads(world.dev_id_json.read_text(encoding="utf-8")))
    out = {}
    for split, n in sizes.items():
        multi = [alts for alts in routes.get(split, {}).values() if len({tuple(a["columns"]) for a in alts}) >= 2]
        out[split] = {"questions": n, "multi_route": len(multi), "share_multi_route": len(multi) / n if n else 0.0,
                      "routes_per_multi_route_question": sum(len(m) for m in multi) / len(multi) if multi else 0.0}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m acesql_lib.data.tinyworld", description=DESCRIPTION)
    parser.add_argument("--out", required=True, help="folder to write the world into")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--n-train", type=int, default=3000)
    parser.add_argument("--n-dev", type=int, default=300)
    parser.add_argument("--n-dev-id", type=int, default=400, help="in-distribution dev questions (0: none)")
    parser.add_argument("--force", action="store_true", help="rebuild even when the manifest matches")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    world = build_tinyworld(args.out, args.seed, args.n_train, args.n_dev, args.force, args.n_dev_id)
    m = world.read_manifest()
    print(f"tiny world in {world.root} ({time.perf_counter() - start:.1f} s): {len(m['databases'])} databases, "
          f"{m['train']['questions']} train (route share {m['train']['route_share']:.1%}), "
          f"{m['dev']['questions']} dev (route share {m['dev']['route_share']:.1%}), "
          f"{m['dev_id']['questions']} in-distribution dev (route share {m['dev_id']['route_share']:.1%})")
    return 0
