"""Build and query time of the question-relevant values index: bm25s (the kit's choice) beside
SQLite FTS5 with its bm25() ranking, on the tiny world and on a synthetic 1M-row table.

    python benchmarks/values_index_bench.py [--rows 1000000] [--questions 50]

Both sides index the same documents (`database_values`: distinct string values, 1-40 chars) and
answer the same queries (`question_queries`: word n-grams up to 8 + the question, top 10 each);
"query" is one question's full n-gram batch. The FTS5 index is a separate SQLite file (not the
database). Figures are wall-clock seconds on this machine, one run, side by side.
"""
from __future__ import annotations

import argparse
import json
import random
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from acesql_lib.data.tinyworld import build_tinyworld  # noqa: E402
from acesql_lib.data.values_index import ValuesIndex, database_values, question_queries  # noqa: E402


def fts5_build(values: dict[str, list[str]], path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path)
    conn.execute("CREATE VIRTUAL TABLE v USING fts5(col UNINDEXED, value, tokenize='porter unicode61')")
    conn.executemany("INSERT INTO v (col, value) VALUES (?, ?)",
                     ((k, x) for k, xs in values.items() for x in xs if not _is_num(x)))
    conn.commit()
    return conn


def _is_num(x: str) -> bool:
    try:
        float(x)
        return True
    except ValueError:
        return False


def fts5_hits(conn: sqlite3.Connection, queries: list[str], k: int = 10) -> list[int]:
    seen: dict[int, None] = {}
    for q in queries:
        words = [w for w in "".join(ch if ch.isalnum() else " " for ch in q).split()]
        if not words:
            continue
        match = " OR ".join('"' + w.replace('"', '""') + '"' for w in words)
        for (rowid,) in conn.execute("SELECT rowid FROM v WHERE v MATCH ? ORDER BY bm25(v) LIMIT ?", (match, k)):
            seen.setdefault(rowid, None)
    return list(seen)


def measure(name: str, values: dict[str, list[str]], questions: list[str], tmp: Path) -> None:
    n_docs = sum(len(v) for v in values.values())
    t0 = time.perf_counter()
    index = ValuesIndex.from_values(values)
    t_b = time.perf_counter() - t0
    t0 = time.perf_counter()
    for q in questions:
        index.relevant_values(q)
    q_b = (time.perf_counter() - t0) / len(questions)
    fts_path = tmp / f"{name}.fts.sqlite"
    fts_path.unlink(missing_ok=True)
    t0 = time.perf_counter()
    conn = fts5_build(values, fts_path)
    t_f = time.perf_counter() - t0
    t0 = time.perf_counter()
    for q in questions:
        fts5_hits(conn, question_queries(q))
    q_f = (time.perf_counter() - t0) / len(questions)
    conn.close()
    print(f"{name:<24} {n_docs:>9,} docs | build  bm25s {t_b:8.3f} s  fts5 {t_f:8.3f} s  (bm25s/fts5 {t_b / t_f:5.2f}x)"
          f" | query  bm25s {q_b * 1e3:8.1f} ms  fts5 {q_f * 1e3:8.1f} ms  (bm25s/fts5 {q_b / q_f:5.2f}x)")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--questions", type=int, default=50)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        world = build_tinyworld(tmp / "world", n_train=300, n_dev=30)
        data = json.loads(Path(world.train_json).read_text())
        by_db: dict[str, list[str]] = {}
        for ex in data:
            by_db.setdefault(ex["db_id"], []).append(ex["question"])
        t0 = time.perf_counter()
        for db_id, qs in sorted(by_db.items()):
            values = database_values(Path(world.train_db_root) / db_id / f"{db_id}.sqlite")
            measure(f"tiny:{db_id}", values, qs[:args.questions], tmp)
        print(f"(tiny world: {len(by_db)} databases in {time.perf_counter() - t0:.1f} s)")

        rng = random.Random(0)
        words = [f"w{i}" for i in range(5000)]
        names = [f"{rng.choice(words)} {rng.choice(words)} {i}" for i in range(args.rows)]
        db = tmp / "big.sqlite"
        conn = sqlite3.connect(db)
        conn.execute("CREATE TABLE t (id INTEGER, name TEXT, city TEXT)")
        conn.executemany("INSERT INTO t VALUES (?, ?, ?)",
                         ((i, n, rng.choice(words)) for i, n in enumerate(names)))
        conn.commit()
        conn.close()
        t0 = time.perf_counter()
        values = database_values(db)
        print(f"(1M-row table: distinct string values read in {time.perf_counter() - t0:.1f} s)")
        qs = [f"Which customers named {rng.choice(names)} live in {rng.choice(words)}?" for _ in range(10)]
        measure(f"synthetic:{args.rows:,} rows", values, qs, tmp)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
