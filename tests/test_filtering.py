"""Source filtering (§3.1) on hand-made SynSQL-format pools over small real SQLite databases."""
from __future__ import annotations

import json
import sqlite3
from collections import Counter
from pathlib import Path

import pytest

from acesql_lib.config.data import FilteringConfig
from acesql_lib.data.datasets import Example
from acesql_lib.data.filtering import (_complexity_quotas, distributions, filter_pool, load_pool, normalize_question,
                                  normalize_sql, save_pool)
from acesql_lib.reports import plot_distributions
from acesql_lib.data.schema import Schema
from acesql_lib.data.sqlcolumns import column_set

LEVELS = ("Simple", "Moderate", "Complex", "Highly Complex")
N_CUSTOMERS = 60


def _make_shop(path: Path) -> Path:
    """3 tables, 10 columns: big enough for the default-ish thresholds used below."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path)
    conn.executescript("""
        CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT, city TEXT);
        CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER REFERENCES customers(id),
                             amount REAL, day TEXT);
        CREATE TABLE products (id INTEGER PRIMARY KEY, title TEXT, price REAL);
    """)
    conn.executemany("INSERT INTO customers VALUES (?, ?, ?)",
                     [(i, f"name{i}", ["Paris", "Lyon", "Nice"][i % 3]) for i in range(1, N_CUSTOMERS + 1)])
    conn.executemany("INSERT INTO orders VALUES (?, ?, ?, ?)",
                     [(i, 1 + i % N_CUSTOMERS, 5.0 * i, f"2024-01-{1 + i % 28:02d}") for i in range(1, 121)])
    conn.executemany("INSERT INTO products VALUES (?, ?, ?)", [(i, f"p{i}", 1.5 * i) for i in range(1, 11)])
    conn.commit()
    conn.close()
    return path


def _make_small(path: Path) -> Path:
    """One table, two columns: below min_tables."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path)
    conn.executescript("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT); INSERT INTO notes VALUES (1, 'x');")
    conn.commit()
    conn.close()
    return path


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """SynSQL layout: databases/<db_id>/<db_id>.sqlite; shop_a and shop_b are copies of one shape."""
    root = tmp_path_factory.mktemp("synsql")
    dbs = {db: _make_shop(root / "databases" / db / f"{db}.sqlite") for db in ("shop_a", "shop_b")}
    dbs["small"] = _make_small(root / "databases" / "small" / "small.sqlite")
    schemas = {db: Schema.from_sqlite(p) for db, p in dbs.items()}
    return root, dbs, schemas


def _ex(dbs: dict, idx: int, db: str, question: str, sql: str, level: str = "Simple") -> Example:
    return Example(id=str(idx), db_id=db, question=question, evidence="", sql=sql, difficulty=level,
                   question_style="Formal", source="synsql", db_path=str(dbs.get(db, Path("missing.sqlite"))))


def _cfg(**kw) -> FilteringConfig:
    base = dict(per_db_cap=10_000, min_tables=2, min_columns=4, target_size=10_000, exec_timeout_s=5.0,
                complexity_mix={lvl: 0.25 for lvl in LEVELS})
    base.update(kw)
    return FilteringConfig(**base)


def _valid_pool(dbs: dict, n_per_level: int, db_ids=("shop_a", "shop_b")) -> list[Example]:
    """Distinct, valid, non-empty questions: one customer id per question."""
    out, i = [], 0
    for db in db_ids:
        for level in LEVELS:
            for k in range(n_per_level):
                cid = 1 + (i % N_CUSTOMERS)
                out.append(_ex(dbs, i, db, f"Name of customer {i} ({level})?",
                               f"SELECT name FROM customers WHERE id = {cid} AND {i} = {i}", level))
                i += 1
    return out


# ---------------------------------------------------------------------------- each rule

def _rule_pool(dbs: dict, start: int = 0) -> tuple[list[Example], dict[str, str]]:
    """Good examples plus one offender per rule; returns (pool, expected drop reason by id)."""
    rows = [
        ("shop_a", "How many customers are there?", "SELECT count(*) FROM customers", None),
        ("shop_a", "  how many CUSTOMERS are there ", "SELECT count(id) FROM customers", "duplicate_question"),
        ("shop_a", "Which customers spent more than 10?",
         "SELECT T1.name FROM customers AS T1 JOIN orders AS T2 ON T1.id = T2.customer_id WHERE T2.amount > 10", None),
        ("shop_a", "List the big spenders.",
         "select t1.NAME\n  from Customers t1 join orders t2 on t1.id=t2.customer_id where t2.amount>10;",
         "duplicate_sql"),
        ("shop_a", "Names in Paris?", "SELECT name FROM customers WHERE city = 'Paris'", None),
        ("shop_a", "Names in lower-case paris?", "SELECT name FROM customers WHERE city = 'paris'", "sql_empty_result"),
        ("shop_a", "Broken query?", "SELECT name FROM customers WHERE", "sql_unparseable"),
        ("shop_a", "Nicknames?", "SELECT nickname FROM customers", "sql_unresolved"),
        ("shop_a", "Made-up function?", "SELECT made_up_fn(name) FROM customers", "sql_error"),
        ("shop_b", "How many customers are there?", "SELECT count(*) FROM customers", None),  # other db: no dup
        ("small", "How many notes?", "SELECT count(*) FROM notes", "schema_too_small"),
        ("ghost", "Unknown database?", "SELECT 1", "unknown_database"),
    ]
    pool = [_ex(dbs, i, db, q, sql) for i, (db, q, sql, _) in enumerate(rows, start)]
    expected = {str(i): reason for i, (*_, reason) in enumerate(rows, start)}
    return pool, expected


def test_each_rule_drops_exactly_its_offender(world):
    _, dbs, schemas = world
    pool, expected = _rule_pool(dbs)
    result = filter_pool(pool, _cfg(), schemas, seed=0)
    assert [e.id for e in result.kept] == [i for i, r in expected.items() if r is None]
    assert result.dropped == dict(Counter(r for r in expected.values() if r is not None))


def test_switches_turn_rules_off(world):
    _, dbs, schemas = world
    pool, expected = _rule_pool(dbs)
    keep_empty = filter_pool(pool, _cfg(drop_empty_results=False), schemas, seed=0)
    assert "sql_empty_result" not in keep_empty.dropped
    assert {e.id for e in keep_empty.kept} == {i for i, r in expected.items() if r in (None, "sql_empty_result")}

    lax = filter_pool(pool, _cfg(require_execution=False, dedup_questions=False, dedup_sql=False), schemas, seed=0)
    assert set(lax.dropped) == {"schema_too_small", "unknown_database"}
    assert [name for name, _ in lax.funnel] == ["input", "known_database", "schema_size", "per_db_cap",
                                                "complexity_mix"]


def test_annotations_hold_the_gold_column_sets(world):
    _, dbs, schemas = world
    pool, _ = _rule_pool(dbs)
    result = filter_pool(pool, _cfg(), schemas, seed=0)
    assert set(result.annotations) == {e.id for e in result.kept}
    for e in result.kept:
        ann = result.annotations[e.id]
        assert ann.columns == column_set(e.sql, schemas[e.db_id])
        assert ann.n_tables == len({c.split(".")[0] for c in ann.columns})
    join = next(e for e in result.kept if "JOIN" in e.sql)
    assert result.annotations[join.id].n_tables == 2


def test_schema_thresholds(world):
    _, dbs, schemas = world
    pool = _valid_pool(dbs, 1)
    assert len(filter_pool(pool, _cfg(min_tables=4), schemas).kept) == 0  # shops have 3 tables
    assert len(filter_pool(pool, _cfg(min_columns=11), schemas).kept) == 0  # and 10 columns
    assert len(filter_pool(pool, _cfg(min_tables=3, min_columns=10), schemas).kept) == len(pool)


# ---------------------------------------------------------------------------- sampling

def test_per_db_cap(world):
    _, dbs, schemas = world
    pool = _valid_pool(dbs, 10)  # 40 per database
    result = filter_pool(pool, _cfg(per_db_cap=7), schemas, seed=3)
    assert Counter(e.db_id for e in result.kept) == {"shop_a": 7, "shop_b": 7}
    assert result.dropped == {"per_db_cap": len(pool) - 14}


def test_complexity_mix_proportions(world):
    _, dbs, schemas = world
    pool = _valid_pool(dbs, 30, db_ids=("shop_a",))  # 30 per level
    mix = {"Simple": 0.5, "Moderate": 0.25, "Complex": 0.25, "Highly Complex": 0.0}
    result = filter_pool(pool, _cfg(complexity_mix=mix, target_size=40, require_execution=False), schemas, seed=1)
    assert Counter(e.difficulty for e in result.kept) == {"Simple": 20, "Moderate": 10, "Complex": 10}
    assert result.dropped == {"complexity_mix": 50, "complexity_not_in_mix": 30}


def test_complexity_quotas_share_a_shortfall():
    available = Counter({"Simple": 10, "Moderate": 100, "Complex": 100, "Highly Complex": 3})
    mix = {"Simple": 0.5, "Moderate": 0.25, "Complex": 0.25}
    assert _complexity_quotas(available, mix, 100) == {"Simple": 10, "Moderate": 45, "Complex": 45}
    assert _complexity_quotas(available, mix, 1000) == {"Simple": 10, "Moderate": 100, "Complex": 100}
    quotas = _complexity_quotas(Counter({"Simple": 50, "Moderate": 50, "Complex": 50}),
                                {"Simple": 1, "Moderate": 1, "Complex": 1}, 10)
    assert sum(quotas.values()) == 10 and sorted(quotas.values()) == [3, 3, 4]


def test_funnel_is_consistent_and_deterministic(world):
    _, dbs, schemas = world
    pool = _valid_pool(dbs, 12) + _rule_pool(dbs, start=1000)[0]
    cfg = _cfg(per_db_cap=30, target_size=40)
    a = filter_pool(pool, cfg, schemas, seed=5)
    counts = [n for _, n in a.funnel]
    assert a.funnel[0] == ("input", len(pool))
    assert all(x >= y for x, y in zip(counts, counts[1:]))
    assert counts[-1] == len(a.kept) == 40
    assert sum(a.dropped.values()) == len(pool) - len(a.kept)
    assert [e.id for e in filter_pool(pool, cfg, schemas, seed=5).kept] == [e.id for e in a.kept]
    assert [e.id for e in filter_pool(pool, cfg, schemas, seed=6).kept] != [e.id for e in a.kept]


# ---------------------------------------------------------------------------- normalisation

def test_normalisers():
    assert normalize_question("How many  users?") == normalize_question("how many users") == "how many users"
    assert normalize_question("Who's first?") != normalize_question("Who is first?")
    a = "SELECT T1.name FROM customers AS T1 WHERE T1.id = 3"
    assert normalize_sql(a) == normalize_sql("select t1.NAME from `Customers` t1 where t1.id=3 ;")
    assert normalize_sql("SELECT a FROM c WHERE city = 'Paris'") != normalize_sql("SELECT a FROM c WHERE city = 'paris'")
    assert normalize_sql("SELECT name FROM c WHERE id = 1") != normalize_sql("SELECT name FROM c WHERE id = 2")
    unparseable = normalize_sql("SELECT (  broken\nFROM ;")
    assert unparseable == normalize_sql("select (  BROKEN   from") == "select ( broken from"


# ---------------------------------------------------------------------------- outputs

def test_save_and_load_pool_round_trip(world, tmp_path):
    root, dbs, schemas = world
    pool, _ = _rule_pool(dbs)
    kept = filter_pool(pool, _cfg(), schemas, seed=0).kept
    path = save_pool(tmp_path / "pool" / "filtered.json", kept)
    records = json.loads(path.read_text())
    assert {"db_id", "sql_complexity", "question_style", "question", "external_knowledge", "sql"} <= set(records[0])
    back = load_pool(path, root / "databases")
    assert [(e.db_id, e.question, e.sql, e.difficulty) for e in back] == \
        [(e.db_id, e.question, e.sql, e.difficulty) for e in kept]
    assert all(Path(e.db_path).is_file() for e in back)


def test_distributions_and_plot(world, tmp_path):
    _, dbs, schemas = world
    pool, _ = _rule_pool(dbs)
    result = filter_pool(pool, _cfg(), schemas, seed=0)
    before = distributions(pool, schemas)
    after = distributions(result.kept, schemas, result.annotations)
    assert len(before) == len(pool) and len(after) == len(result.kept)
    join = after[after["id"] == next(e.id for e in result.kept if "JOIN" in e.sql)].iloc[0]
    assert (join["sql_columns"], join["sql_tables"], join["schema_tables"]) == (4, 2, 3)
    assert before.loc[before["id"] == "7", "sql_columns"].isna().all()  # unresolved SQL
    paths = plot_distributions(before, after, tmp_path / "figures")
    assert {p.suffix for p in paths} == {".png", ".pdf"}
    assert all(p.is_file() and p.stat().st_size > 1000 for p in paths)
