"""Question-relevant values: the BM25 values index, its cache, and agreement with the authors' rows."""
from __future__ import annotations

import json
import os
import shutil
import sqlite3
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from acesql_lib.config.data import DataConfig
from acesql_lib.roles.prompts import question_text
from acesql_lib.data.schema import Schema
from acesql_lib.data.task import profile_schema
from acesql_lib.data.values_index import (ValuesIndex, database_values, match_share, open_index,
                                     question_queries)
from repo_paths import FIXTURES

ROWS = FIXTURES / "authors" / "validation.parquet"


def test_queries_and_match_share():
    q = question_queries("Who runs Site B?")
    assert q[:5] == ["Who", "runs", "Site", "B", "?"] and "Site B" in q and q[-1] == "Who runs Site B?"
    assert len(question_queries(" ".join(f"w{i}" for i in range(12)))) == sum(12 - n + 1 for n in range(1, 9)) + 1
    assert match_share("Site B", "sold at site b?") == 1.0
    assert match_share("Site A", "sold at Site B") == pytest.approx(5 / 6)
    # values made of stop words only ("A", "The") are never retrieved, though they occur in the text
    index = ValuesIndex.from_values({"t.a": ["A", "The", "Site B", 7, "12"]})
    assert index.doc_value == ["A", "The", "Site B"]  # non-strings and numbers as text are not indexed
    assert index.relevant_values("What is a site at the B?") == {}
    assert index.relevant_values("the sales at site b") == {"t.a": ["Site B"]}


def test_sparse_top_docs_equal_bm25s_retrieve():
    """Our per-query top-k reads bm25s's own scores: same documents as `BM25.retrieve` (no ties here)."""
    values = {"t.name": [f"red {w} box {i}" for i, w in enumerate(["apple", "pear", "fig", "plum"] * 25)],
              "t.city": ["red city", "blue town", "green apple farm"]}
    index = ValuesIndex.from_values(values)
    for tokens in (["red", "appl"], ["box", "plum", "town"], ["green"], ["nowher"]):
        known = [t for t in tokens if t in index.bm25.vocab_dict]
        ours = index.top_docs(tokens, 10)
        if not known:
            assert ours == []
            continue
        docs, scores = index.bm25.retrieve([known], k=10, show_progress=False)
        expect = [d for d, sc in zip(docs[0].tolist(), scores[0].tolist()) if sc > 0]
        got_scores = index.bm25.get_scores(known)
        assert sorted(got_scores[ours].round(5)) == sorted(got_scores[expect].round(5))
        assert all(got_scores[a] >= got_scores[b] for a, b in zip(ours, ours[1:]))


def _authors_rows() -> list[dict]:
    return pq.read_table(ROWS).to_pylist()


def test_agreement_with_the_authors_relevant_values():
    """Their databases are not shipped: index the values each row carries (sampled + relevant) and
    compare our relevant values with their `relavant_values` on the same question text."""
    exact = tp = fp = fn = 0
    rows = _authors_rows()
    for row in rows:
        info = row["extra_info"]
        theirs = json.loads(info["relavant_values"])
        values: dict[str, list] = {}
        for part in (json.loads(info["sampled_values"]), theirs):
            for k, v in part.items():
                values.setdefault(k.lower(), []).extend(v)
        ours = ValuesIndex.from_values(values).relevant_values(question_text(info["question"], info["evidence"]))
        pairs = lambda d: {(k, v) for k, vs in d.items() for v in vs}
        exact += ours == theirs
        tp += len(pairs(ours) & pairs(theirs))
        fp += len(pairs(ours) - pairs(theirs))
        fn += len(pairs(theirs) - pairs(ours))
    print(f"relevant values: {exact}/40 rows identical; pairs found {tp}, extra {fp}, missed {fn}")
    assert (exact, tp, fn) == (40, 31, 0) and fp == 0


@pytest.fixture()
def shop_db(tmp_path: Path) -> Path:
    path = tmp_path / "shop" / "shop.sqlite"
    path.parent.mkdir()
    conn = sqlite3.connect(path)
    conn.executescript("""
        CREATE TABLE stores (id INTEGER PRIMARY KEY, name TEXT, city TEXT, note TEXT);
        INSERT INTO stores VALUES (1, 'Site B', 'Lyon', ''), (2, 'Site A', 'Paris', NULL),
                                  (3, 'Site B', '1234567890123456789012345678901234567890X', 'open late');
        CREATE TABLE sales (id INTEGER, store_id INTEGER, channel TEXT, amount REAL);
        INSERT INTO sales VALUES (1, 1, 'online', 2.5), (2, 3, 'in store', 3.0), (3, 1, '10', 1.0);
    """)
    conn.commit()
    conn.close()
    return path


def test_database_values_reads_distinct_short_strings(shop_db):
    values = database_values(shop_db)
    assert values["stores.name"] == ["Site B", "Site A"]  # distinct
    assert values["stores.city"] == ["Lyon", "Paris"]  # the 41-character value is not indexed
    assert values["stores.note"] == ["open late"]  # '' and NULL are not indexed
    assert "sales.amount" not in values and "stores.id" not in values


def test_relevant_values_on_a_real_database(shop_db, tmp_path):
    index = open_index(shop_db, tmp_path / "cache")
    assert index.relevant_values("How much did Site B sell online?") == {"stores.name": ["Site B"],
                                                                        "sales.channel": ["online"]}
    assert index.relevant_values("nothing here") == {}
    assert index.relevant_values("top 10 sales in store") == {"sales.channel": ["in store"]}  # '10' not indexed


def test_cache_is_reused_and_rebuilt_when_the_database_changes(shop_db, tmp_path):
    cache = tmp_path / "cache"
    open_index(shop_db, cache)
    (folder,) = [p for p in cache.iterdir()]
    meta = folder / "meta.json"
    stamp = meta.stat().st_mtime_ns
    again = open_index(shop_db, cache)  # same file: loaded, not rebuilt
    assert meta.stat().st_mtime_ns == stamp and again.relevant_values("at Paris") == {"stores.city": ["Paris"]}
    assert list(shop_db.parent.iterdir()) == [shop_db]  # nothing written next to the database
    conn = sqlite3.connect(shop_db)
    conn.execute("INSERT INTO stores VALUES (4, 'Harbour Depot', 'Nantes', NULL)")
    conn.commit()
    conn.close()
    os.utime(shop_db, ns=(stamp + 10**9, stamp + 10**9))  # size or mtime changed -> rebuilt
    rebuilt = open_index(shop_db, cache)
    assert rebuilt.relevant_values("stock at Harbour Depot") == {"stores.name": ["Harbour Depot"]}
    (entry,) = [p for p in cache.iterdir()]  # the new version in an entry of its own, the old one removed
    assert entry != folder and json.loads((entry / "meta.json").read_text())["size"] == shop_db.stat().st_size
    (entry / "meta.json").write_text("{broken")  # a damaged cache entry is rebuilt, not fatal
    assert open_index(shop_db, cache).relevant_values("Nantes") == {"stores.city": ["Nantes"]}
    assert [p.name for p in cache.iterdir()] == [entry.name]


def test_an_entry_missing_its_bm25_folder_is_rebuilt_not_read_as_empty(shop_db, tmp_path):
    """A half-written or half-removed entry (another process's) must not load as an index that finds
    nothing: before, a missing `bm25` folder loaded as `bm25=None` and every question got no values."""
    cache = tmp_path / "cache"
    open_index(shop_db, cache)
    (folder,) = [p for p in cache.iterdir()]
    shutil.rmtree(folder / "bm25")
    assert open_index(shop_db, cache).relevant_values("at Paris") == {"stores.city": ["Paris"]}
    assert (folder / "bm25").is_dir()  # the damaged entry was replaced by a whole one


def test_a_late_build_never_replaces_a_whole_entry(shop_db, tmp_path):
    """The rank that finishes building last drops its own build: the entry other ranks may be reading
    stays where it is (before, the last rank moved it aside, and a rank reading it saw a missing folder)."""
    from acesql_lib.data.values_index import _place, _signature

    cache = tmp_path / "cache"
    open_index(shop_db, cache)
    (folder,) = [p for p in cache.iterdir()]
    inode = folder.stat().st_ino
    late = cache / f"{folder.name}.tmp-late"
    ValuesIndex.from_values(database_values(shop_db)).save(late)
    sig = _signature(shop_db)
    (late / "meta.json").write_text(json.dumps(sig))
    assert _place(late, folder, sig, "late") is False
    assert folder.stat().st_ino == inode and [p.name for p in cache.iterdir()] == [folder.name]


def test_missing_database_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.sqlite"):
        open_index(tmp_path / "nope.sqlite", tmp_path / "cache")


def test_the_profile_schema_puts_relevant_values_first_in_the_prompt(shop_db, tmp_path):
    schema = profile_schema(Schema.from_sqlite(shop_db), shop_db, DataConfig(), tmp_path / "cache")
    text = schema.text_for("Sales of Site A?")
    assert "    name TEXT, -- example: ['Site A', 'Site B']" in text  # authors' style, relevant value first
    assert "CONSTRAINT" not in text and text.startswith("CREATE TABLE stores (\n    id INTEGER,")
    assert "example: ['Site A'" not in schema.text_for("q", selected={"stores.name"}).replace(
        "['Site B', 'Site A']", "")  # no relevant value for this question: sampled order
    off = profile_schema(Schema.from_sqlite(shop_db), shop_db, DataConfig(schema_style="kit", relevant_values=False),
                 tmp_path / "cache2")
    assert off.values_index is None and off.text_for("Sales of Site A?") == off.to_ddl()
    assert not (tmp_path / "cache2").exists()


def test_the_profile_schema_in_the_authors_style_takes_descriptions_from_tables_json(shop_db, tmp_path):
    """SynSQL layout: <dir>/databases/<db>/<db>.sqlite beside <dir>/tables.json."""
    root = tmp_path / "synsql"
    db = root / "databases" / "shop" / "shop.sqlite"
    db.parent.mkdir(parents=True)
    db.write_bytes(shop_db.read_bytes())
    (root / "tables.json").write_text(json.dumps([{
        "db_id": "shop", "table_names_original": ["stores"], "table_names": ["stores"],
        "column_names_original": [[-1, "*"], [0, "id"], [0, "name"]],
        "column_names": [[-1, "*"], [0, "Store id "], [0, "name"]],
        "column_types": ["text", "integer", "TEXT"], "primary_keys": [1], "foreign_keys": []}]))
    schema = profile_schema(Schema.from_sqlite(db), db, DataConfig(relevant_values=False), None)
    text = schema.to_ddl({"stores.id", "stores.name"})
    assert text == ("CREATE TABLE stores (\n    id integer, -- Store id , example: [1, 2]\n"
                    "    name TEXT, -- example: ['Site B', 'Site A']\n    PRIMARY KEY (id)\n);")
    kit = profile_schema(Schema.from_sqlite(db), db, DataConfig(schema_style="kit", relevant_values=False), None)
    assert kit.table("stores").columns[0].description == ""  # the kit style reads the database only


def test_paper_profile_prompts_carry_the_authors_text_and_relevant_values(shop_db, tmp_path):
    from acesql_lib.config.profiles import load_config
    from acesql_lib.data.datasets import Example
    from acesql_lib.data.task import build_tasks
    from acesql_lib.roles.prompts import generator_messages, retriever_messages

    ex = Example("q1", "shop", "Total sales of Site A?", "", "SELECT 1", "", "", "synsql", str(shop_db))
    (task,) = build_tasks([ex], load_config("paper").data, tmp_path / "values_index")
    assert task.relevant_values == {"stores.name": ["Site A"]}
    retriever = retriever_messages(task.full_ddl, ex.question)[0]["content"]
    assert "    name TEXT, -- example: ['Site A', 'Site B']" in retriever
    pruned = task.schema_text(frozenset({"stores.name", "sales.amount"}))
    assert pruned == ("CREATE TABLE stores (\n    name TEXT, -- example: ['Site A', 'Site B']\n);\n\n"
                      "CREATE TABLE sales (\n    amount REAL, -- example: [2.5, 3.0]\n);")
    assert pruned in generator_messages(pruned, ex.question)[0]["content"]
    (tiny,) = build_tasks([ex], load_config("tiny").data, tmp_path / "tiny_index")
    assert tiny.relevant_values is None and tiny.full_ddl == tiny.schema.to_ddl()
    assert tiny.full_ddl.startswith("CREATE TABLE stores (\n  id INTEGER")


def _open_from_another_process(args) -> dict:
    db, cache, barrier = args
    barrier.wait()  # every process builds at the same moment, as every rank of a launch does
    return open_index(db, cache).relevant_values("at Paris")


def test_processes_building_one_cache_entry_at_once_all_succeed(shop_db, tmp_path):
    """Every rank of a launch opens the same values index on a fresh run folder: each builds it and renames
    its own build into place; none fails on another's half-written folder, none reads an empty index, one
    entry remains, no leftovers (one shared `.tmp` folder would let one rank's rename break another's save,
    and a late rank that moved the whole entry aside would leave a loading rank with no `bm25` folder and no
    values)."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    for attempt in range(3):  # fresh cache, then a stale entry (the database changed) rebuilt by all at once
        cache = tmp_path / "cache"
        if attempt == 2:
            conn = sqlite3.connect(shop_db)
            conn.execute("INSERT INTO stores VALUES (9, 'Dock', 'Paris', NULL)")
            conn.commit()
            conn.close()
        with ctx.Manager() as manager:
            barrier = manager.Barrier(6)
            with ctx.Pool(6) as pool:
                results = pool.map(_open_from_another_process, [(shop_db, cache, barrier)] * 6)
        assert results == [{"stores.city": ["Paris"]}] * 6
        (entry,) = [p for p in cache.iterdir()]  # one entry, no temporary or set-aside folder left
        assert entry.name.startswith("shop-") and ".tmp-" not in entry.name and ".old-" not in entry.name
        assert json.loads((entry / "meta.json").read_text())["size"] == shop_db.stat().st_size
