"""The tiny world: determinism, real formats, sizes, gold execution and verified alternative routes."""
from __future__ import annotations

import csv
import hashlib
import json
import random
import re
import sqlite3
from collections import Counter
from pathlib import Path

import pytest

from acesql_lib.data.datasets import load_bird, load_synsql
from acesql_lib.data.schema import Schema, load_tables_json
from acesql_lib.data.sqlcolumns import column_set
from acesql_lib.data.tinyworld import (CATEGORICAL_MAX_DISTINCT, DB_SPECS, KIND, Attr, Cand, DbContext, Join, Route,
                                  TinyWorld, build_profile_world, build_tinyworld, categorical_values, expr,
                                  from_clause, main, realise, string_values, world_text)


@pytest.fixture(scope="module")
def world(tiny_profile_world) -> TinyWorld:
    """The tiny profile's world: seed 0, 3,000 training questions, 300 + 400 dev (tests/conftest.py)."""
    m = tiny_profile_world.read_manifest()
    assert (m["seed"], m["n_train"], m["n_dev"], m["n_dev_id"]) == (0, 3000, 300, 400), m  # what the tests below read
    return tiny_profile_world


@pytest.fixture(scope="module")
def train(world) -> list[dict]:
    return json.loads(world.train_json.read_text())


@pytest.fixture(scope="module")
def dev(world) -> list[dict]:
    return json.loads(world.dev_json.read_text())


def _hashes(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _rows(db: Path, sql: str) -> Counter:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = con.execute(sql).fetchall()
    finally:
        con.close()
    return Counter(tuple(round(v, 6) if isinstance(v, float) else v for v in r) for r in rows)


# determinism and caching -------------------------------------------------------------------
def test_same_seed_gives_byte_identical_files(world, tmp_path):
    again = build_tinyworld(tmp_path / "again", seed=0, n_dev_id=400)
    first, second = _hashes(world.root), _hashes(again.root)
    assert len(first) > 40 and first == second
    assert any(name.endswith(".sqlite") for name in first)


def test_other_seed_changes_data_but_not_sizes(world, tmp_path):
    small0 = build_tinyworld(tmp_path / "s0", seed=0, n_train=40, n_dev=12)
    small1 = build_tinyworld(tmp_path / "s1", seed=1, n_train=40, n_dev=12)
    assert small0.db_path("retail").read_bytes() == world.db_path("retail").read_bytes()  # DBs do not depend on n
    assert small0.db_path("retail").read_bytes() != small1.db_path("retail").read_bytes()
    assert small0.train_json.read_text() != small1.train_json.read_text()
    assert len(json.loads(small1.train_json.read_text())) == 40 and len(json.loads(small1.dev_json.read_text())) == 12


def test_matching_manifest_is_reused_and_force_rebuilds(tmp_path):
    out = tmp_path / "w"
    w = build_tinyworld(out, seed=3, n_train=30, n_dev=10)
    stamp = w.train_json.stat().st_mtime_ns
    w.train_json.write_text("[]")  # a reuse must not touch the files
    build_tinyworld(out, seed=3, n_train=30, n_dev=10)
    assert w.train_json.read_text() == "[]"
    build_tinyworld(out, seed=3, n_train=30, n_dev=10, force=True)
    assert len(json.loads(w.train_json.read_text())) == 30
    build_tinyworld(out, seed=3, n_train=31, n_dev=10)  # other size: rebuilt
    assert w.read_manifest()["n_train"] == 31 and w.train_json.stat().st_mtime_ns != stamp
    assert not (tmp_path / "w.building").exists()


def test_refuses_to_overwrite_a_foreign_folder(tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match="not a tiny world"):
        build_tinyworld(tmp_path / "mine", n_train=10, n_dev=5)
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"


def test_cli_builds_and_reports(tmp_path, capsys):
    assert main(["--out", str(tmp_path / "cli"), "--seed", "2", "--n-train", "25", "--n-dev", "8", "--n-dev-id", "6"]) == 0
    out = capsys.readouterr().out
    assert "25 train" in out and "8 dev" in out and "6 in-distribution dev" in out
    assert TinyWorld(tmp_path / "cli").read_manifest()["kind"] == KIND


# formats and sizes -------------------------------------------------------------------------
def test_databases_have_declared_keys_and_match_tables_json(world):
    schemas = load_tables_json(world.tables_json)
    assert len(schemas) >= 6
    spaced = 0
    for db_id, s in schemas.items():
        db = world.db_path(db_id)
        assert db.stat().st_size < 1_000_000
        assert 3 <= len(s.tables) <= 6
        live = Schema.from_sqlite(db)
        assert [(t.name, [c.name for c in t.columns], t.primary_key) for t in s.tables] == \
               [(t.name, [c.name for c in t.columns], t.primary_key) for t in live.tables]
        for a, b in zip(s.tables, live.tables):
            key = lambda t: sorted((f.column, f.ref_table, f.ref_column) for f in t.foreign_keys)  # noqa: E731
            assert key(a) == key(b)
        con = sqlite3.connect(db)
        n_fk = sum(len(con.execute(f'PRAGMA foreign_key_list("{t.name}")').fetchall()) for t in s.tables)
        sizes = [con.execute(f'SELECT COUNT(*) FROM "{t.name}"').fetchone()[0] for t in s.tables]
        con.close()
        assert n_fk >= 2 and max(sizes) >= 500
        spaced += sum(" " in c for c in s.columns())
    assert spaced >= 3  # BIRD-style names that need quoting
    by_id = {e["db_id"]: e for e in json.loads(world.tables_json.read_text())}
    for sub in (world.train_tables, world.dev_tables):
        for entry in json.loads(sub.read_text()):
            assert entry == by_id[entry["db_id"]]
            assert entry["column_names_original"][0] == [-1, "*"]


def test_train_pool_is_synsql_format(world, train):
    result = load_synsql(world.train_json, world.train_db_root)
    assert not result.skipped and len(result) == len(train) >= 3000
    assert all(Path(e.db_path).is_file() for e in result)
    assert set(train[0]) == {"db_id", "sql_complexity", "question_style", "question", "external_knowledge", "cot", "sql"}
    levels = Counter(r["sql_complexity"] for r in train)
    assert set(levels) == {"Simple", "Moderate", "Complex", "Highly Complex"} and min(levels.values()) > 300
    assert len({r["question_style"] for r in train}) >= 5
    assert len({r["question"] for r in train}) == len(train)


def test_part_of_the_train_pool_is_read_with_evidence_as_dev_is(train, dev):
    with_evidence = [r for r in train if r["external_knowledge"]]
    assert 0.4 * len(train) <= len(with_evidence) <= 0.6 * len(train)
    # BIRD's style: "a high price" in the question, the number only in the evidence; without
    # evidence the question names the number itself
    vague = [r for r in with_evidence if re.search(r"with a (high|low) ", r["question"])]
    assert vague and all(re.search(r"(high|low) .* refers to .* [<>] ", r["external_knowledge"]) for r in vague)
    assert not any(re.search(r"with a (high|low) ", r["question"]) for r in train if not r["external_knowledge"])
    assert any(re.search(r"with a (high|low) ", r["question"]) for r in dev)


def test_dev_set_is_bird_format_with_unseen_databases(world, train, dev):
    result = load_bird(world.dev_json, world.dev_db_root)
    assert not result.skipped and len(result) == len(dev) >= 300
    assert all(Path(e.db_path).is_file() for e in result)
    assert set(dev[0]) == {"question_id", "db_id", "question", "evidence", "SQL", "difficulty"}
    assert {r["difficulty"] for r in dev} == {"simple", "moderate", "challenging"}
    assert sum(bool(r["evidence"]) for r in dev) >= 0.9 * len(dev)
    unseen = {r["db_id"] for r in dev} - {r["db_id"] for r in train}
    assert len(unseen) >= 2
    for db_id in unseen:
        assert not (world.train_db_root / db_id).exists()
        assert sum(r["db_id"] == db_id for r in dev) >= 20
    assert world.read_manifest()["dev_only_databases"] == sorted(unseen)


@pytest.fixture(scope="module")
def dev_id(world) -> list[dict]:
    return json.loads(world.dev_id_json.read_text())


def test_in_distribution_dev_asks_new_questions_on_training_databases(world, train, dev, dev_id):
    result = load_bird(world.dev_id_json, world.dev_db_root, tables=world.dev_tables)
    assert not result.skipped and len(result) == len(dev_id) == 400
    assert set(dev_id[0]) == set(dev[0]) and [r["question_id"] for r in dev_id] == list(range(400))
    assert {r["db_id"] for r in dev_id} == {r["db_id"] for r in train}  # every training database, no other
    for split, records, key in (("train", train, "sql"), ("dev", dev, "SQL")):
        texts = {(r["db_id"], r["question"].lower()) for r in records}
        sqls = {(r["db_id"], r[key]) for r in records}
        assert not any((r["db_id"], r["question"].lower()) in texts for r in dev_id), split
        assert not any((r["db_id"], r["SQL"]) in sqls for r in dev_id), split
    for r in dev_id:
        rows = _rows(world.db_path(r["db_id"]), r["SQL"])
        assert 0 < sum(rows.values()) <= 50, r["SQL"]
    # the mix of difficulties follows the pool's, not only the easy questions
    share = Counter(r["difficulty"] for r in dev_id)
    assert min(share.values()) >= 0.1 * len(dev_id), share


def test_in_distribution_dev_values_are_new_unless_categorical(world, train, dev_id):
    seen = {(r["db_id"], v) for r in train for v in string_values(r["sql"])}
    vocabulary = {}
    for db in {r["db_id"] for r in train}:
        con = sqlite3.connect(f"file:{world.db_path(db)}?mode=ro", uri=True)
        try:
            vocabulary[db] = categorical_values(con, CATEGORICAL_MAX_DISTINCT)
        finally:
            con.close()
    open_values = [(r["db_id"], v) for r in dev_id for v in string_values(r["SQL"]) if v not in vocabulary[r["db_id"]]]
    assert len(set(open_values)) >= 50 and not [x for x in open_values if x in seen]
    # and the rule is not vacuous: most of the same questions' values drawn for training are seen ones
    assert sum((r["db_id"], v) in seen for r in dev_id for v in string_values(r["SQL"])) > 0
    manifest = world.read_manifest()["dev_id"]
    assert manifest["questions"] == 400 and manifest["open_values_seen_in_training"] == 0
    assert manifest["open_values"] == len(set(open_values))


def test_categorical_values_are_the_small_text_columns(tmp_path):
    con = sqlite3.connect(tmp_path / "c.sqlite")
    con.execute("CREATE TABLE t (k TEXT, name TEXT, n INTEGER)")
    con.executemany("INSERT INTO t VALUES (?, ?, ?)", [("a" if i % 2 else "b", f"name {i}", i) for i in range(30)])
    assert categorical_values(con, 2) == {"a", "b"}
    assert categorical_values(con, 30) == {"a", "b"} | {f"name {i}" for i in range(30)}
    assert categorical_values(con, 1) == set()


def test_without_the_split_the_world_writes_no_dev_id(tmp_path):
    small = build_tinyworld(tmp_path / "w", seed=0, n_train=30, n_dev=10)
    assert not small.dev_id_json.exists() and small.read_manifest()["dev_id"]["questions"] == 0


def test_profile_world_follows_the_data_block(tmp_path):
    from acesql_lib.config.profiles import load_config

    cfg = load_config("tiny", {"data.tiny_n_train": 30, "data.tiny_n_dev": 10, "data.tiny_n_dev_id": 7})
    w = build_profile_world(cfg.data, tmp_path / "w")
    m = w.read_manifest()
    assert (m["n_train"], m["n_dev"], m["n_dev_id"]) == (30, 10, 7)
    assert len(json.loads(w.dev_id_json.read_text())) == 7
    assert load_config("tiny").data.tiny_n_dev_id >= 400


def test_description_csvs_follow_bird(world):
    for entry in json.loads(world.dev_tables.read_text()):
        for t_idx, table in enumerate(entry["table_names_original"]):
            path = world.db_path(entry["db_id"]).parent / "database_description" / f"{table}.csv"
            with path.open(newline="") as f:
                rows = list(csv.DictReader(f))
            assert list(rows[0]) == ["original_column_name", "column_name", "column_description", "data_format",
                                     "value_description"]
            assert [r["original_column_name"] for r in rows] == \
                   [c for t, c in entry["column_names_original"] if t == t_idx]


# questions, gold and routes ----------------------------------------------------------------
def test_every_gold_executes_with_a_small_nonempty_result(world, train, dev, dev_id):
    for split, records, key in (("train", train, "sql"), ("dev", dev, "SQL"), ("dev_id", dev_id, "SQL")):
        for r in records:
            rows = _rows(world.db_path(r["db_id"]), r[key])
            assert 0 < sum(rows.values()) <= 50, (split, r[key])


def test_values_are_shared_verbatim_by_question_and_sql(train, dev):
    for r in train:
        for value in re.findall(r"'((?:[^']|'')*)'", r["sql"]):
            assert value.replace("''", "'") in r["question"] + r["external_knowledge"], (r["question"], r["sql"])
        for number in re.findall(r"\d+(?:\.\d+)?", r["question"]):  # thresholds are copied, not rephrased
            assert number in r["sql"], (r["question"], r["sql"])
    for r in dev:
        for value in re.findall(r"'((?:[^']|'')*)'", r["SQL"]):
            assert value.replace("''", "'") in r["question"] + r["evidence"], (r["question"], r["SQL"])


def _verified_share(world, records, routes, sql_key, id_of) -> float:
    """Share of questions whose re-executed alternatives give >= 2 distinct column sets."""
    multi = 0
    for i, r in enumerate(records):
        entries = routes.get(str(id_of(i, r)), [])
        if not entries:
            continue
        assert entries[0]["sql"] == r[sql_key]  # the gold comes first
        db = world.db_path(r["db_id"])
        gold = _rows(db, r[sql_key])
        sets = {tuple(e["columns"]) for e in entries if _rows(db, e["sql"]) == gold}
        multi += len(sets) >= 2
    return multi / len(records)


def test_route_share_measured_by_reexecution(world, train, dev):
    routes = json.loads(world.routes_json.read_text())
    manifest = world.read_manifest()
    share_train = _verified_share(world, train, routes["train"], "sql", lambda i, r: i)
    share_dev = _verified_share(world, dev, routes["dev"], "SQL", lambda i, r: r["question_id"])
    assert share_train >= 0.20 and share_dev >= 0.20
    # every question annotated with routes re-executes into >= 2 column sets: the shares are the manifest's
    assert share_train == len(routes["train"]) / len(train) and round(share_train, 4) == manifest["train"]["route_share"]
    assert share_dev == len(routes["dev"]) / len(dev) and round(share_dev, 4) == manifest["dev"]["route_share"]
    kinds = Counter()
    for entries in routes["train"].values():
        cols = [set(e["columns"]) for e in entries]
        kinds["derived"] += any("birth_year" in c or "Quantity" in c or "nights" in c for c in map(str, cols))
        kinds["join_vs_copy"] += len({len({c.split(".")[0] for c in s}) for s in cols}) > 1
    assert kinds["derived"] > 50 and kinds["join_vs_copy"] > 50  # both kinds of route are present


def test_annotated_column_sets_equal_sqlcolumns(world, train, dev, dev_id):
    schemas = load_tables_json(world.tables_json)
    routes = json.loads(world.routes_json.read_text())
    by_split = {"train": {str(i): r["db_id"] for i, r in enumerate(train)},
                "dev": {str(r["question_id"]): r["db_id"] for r in dev},
                "dev_id": {str(r["question_id"]): r["db_id"] for r in dev_id}}
    assert len(routes["dev_id"]) >= 0.2 * len(dev_id)  # the split has alternative routes as the others do
    checked = 0
    for split, table in routes.items():
        for key, entries in table.items():
            for e in entries:
                assert sorted(column_set(e["sql"], schemas[by_split[split][key]])) == e["columns"], e["sql"]
                checked += 1
    assert checked > 1500


def test_world_text_covers_questions_sql_schema_and_values(world, train, dev):
    text = set(world_text(world))
    assert train[0]["question"] in text and dev[0]["evidence"] in text and dev[0]["SQL"] in text
    assert "Unit Price" in text and "OrderItems" in text and "order items" in text
    con = sqlite3.connect(world.db_path("library"))
    city, genre = con.execute("SELECT city, genre FROM members, books LIMIT 1").fetchone()
    con.close()
    assert city in text and genre in text


def test_generator_drops_alternatives_that_return_other_rows(world):
    """realise() keeps an alternative only when its rows equal the gold's (a wrong route is dropped)."""
    db = next(d for d in DB_SPECS if d.db_id == "library")
    con = sqlite3.connect(f"file:{world.db_path('library')}?mode=ro", uri=True)
    ctx = DbContext(db, con)
    join = Join("loans", "member_id", "members", "member_id")
    good = Attr("loans", "cat", "member city", (Route((join,), "members", "city"), Route((), "loans", "member_city")),
                "members")
    wrong = Attr("loans", "cat", "member city", (Route((join,), "members", "city"), Route((), "loans", "book_genre")),
                 "members")
    city = con.execute("SELECT city FROM members LIMIT 1").fetchone()[0]

    def cand(attr: Attr) -> Cand:
        def render(q, ch):
            r = attr.routes[ch[0]]
            return f"SELECT COUNT(*) FROM {from_clause(q, 'loans', [r])} WHERE {expr(q, r)} = '{city}'"
        return Cand(0, "n", [attr], render, [])

    kept = [realise(ctx, cand(good), random.Random(s)) for s in range(6)]
    dropped = [realise(ctx, cand(wrong), random.Random(s)) for s in range(6)]
    con.close()
    assert all(len(q.routes) == 2 for q in kept)
    assert {tuple(q.routes[1]["columns"]) for q in kept} >= {("loans.member_city",)}
    survivors = [q for q in dropped if q is not None]  # a gold on the wrong route counts 0 rows: rejected
    assert survivors and all(len(q.routes) == 1 for q in survivors)
