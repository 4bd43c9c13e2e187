"""Loaders on real fixtures, on the tiny world and on malformed files; download helpers offline."""
from __future__ import annotations

import json
import logging
import sqlite3
import zipfile
from pathlib import Path

import pytest

from acesql_lib.data.datasets import DatasetError, load_bird, load_spider, load_synsql, load_tables
from acesql_lib.data.downloads import (OfflineError, download_acesql_release, download_bird_dev, download_spider,
                                       download_synsql)
from repo_paths import REAL


@pytest.fixture(scope="module")
def world(small_world):
    return small_world  # conftest: seed 0, 60 training and 20 dev questions


def _write(path: Path, obj) -> Path:
    path.write_text(json.dumps(obj))
    return path


# real fixtures -----------------------------------------------------------------------------
def test_spider_dev_fixture_loads_all_records():
    raw = json.loads((REAL / "spider_dev.json").read_text())
    result = load_spider(REAL / "spider_dev.json", check_db=False)
    assert len(result) == len(raw) == 1034 and result.skipped == []
    e = result.examples[5]
    assert (e.id, e.db_id, e.question, e.sql, e.source) == ("5", raw[5]["db_id"], raw[5]["question"],
                                                           raw[5]["query"], "spider")
    assert e.prompt_question == e.question and e.evidence == "" and e.db_path == ""


def test_bird_subset_fixture_keeps_ids_evidence_and_difficulty():
    raw = json.loads((REAL / "bird_subset.json").read_text())
    result = load_bird(REAL / "bird_subset.json", check_db=False)
    assert len(result) == 147 and result.skipped == []
    assert [e.id for e in result] == [str(r["question_id"]) for r in raw]
    assert sorted({e.difficulty for e in result}) == ["challenging", "moderate", "simple"]
    with_evidence = [e for e in result if e.evidence]
    assert len(with_evidence) == sum(bool(r["evidence"]) for r in raw) > 100
    e = with_evidence[0]
    assert e.prompt_question == e.evidence + "\n" + e.question  # §2


def test_missing_database_names_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"california_schools\.sqlite"):
        load_bird(REAL / "bird_subset.json", tmp_path)
    with pytest.raises(ValueError, match="needs db_root"):
        load_spider(REAL / "spider_dev.json")


def test_load_tables_reads_fixture_schemas():
    schemas = load_tables(REAL / "bird_subset_tables.json")
    assert len(schemas) == 11 and "financial" in schemas


# tiny world --------------------------------------------------------------------------------
def test_tiny_world_loads_with_every_database_present(world):
    train = load_synsql(world.train_json, world.train_db_root)
    dev = load_bird(world.dev_json, world.dev_db_root)
    assert len(train) == 60 and len(dev) == 20
    for e in list(train) + list(dev):
        assert Path(e.db_path).is_file() and e.db_path.endswith(f"{e.db_id}/{e.db_id}.sqlite")
    assert {e.source for e in train} == {"synsql"} and all(e.difficulty and e.question_style for e in train)
    assert all(e.prompt_question.startswith(e.evidence) for e in dev)
    con = sqlite3.connect(dev.examples[0].db_path)
    assert con.execute(dev.examples[0].sql).fetchall()
    con.close()


def test_synsql_keeps_kit_ids_and_external_knowledge(tmp_path, world):
    rec = {"id": "pool-7", "db_id": "retail", "sql_complexity": "Simple", "question_style": "Formal",
           "question": "How many customers?", "external_knowledge": "customers are rows of Customers", "cot": "",
           "sql": "SELECT COUNT(*) FROM Customers"}
    result = load_synsql(_write(tmp_path / "data.json", [rec, {**rec, "id": None}]), world.train_db_root)
    assert [e.id for e in result] == ["pool-7", "1"]
    assert result.examples[0].prompt_question == "customers are rows of Customers\nHow many customers?"


# malformed input ---------------------------------------------------------------------------
def test_malformed_records_are_reported_counted_and_skipped(tmp_path, caplog):
    good = {"question_id": 1, "db_id": "db", "question": "q?", "evidence": "", "SQL": "SELECT 1",
            "difficulty": "simple"}
    records = [good, ["not", "a", "dict"], {**good, "SQL": None}, {k: v for k, v in good.items() if k != "db_id"},
               {**good, "question": "   "}, {**good, "SQL": 42}, {**good, "evidence": ["x"]}, {**good, "question_id": 9}]
    path = _write(tmp_path / "dev.json", records)
    with caplog.at_level(logging.WARNING, logger="acesql_lib.data.datasets"):
        result = load_bird(path, check_db=False)
    assert [e.id for e in result] == ["1", "9"]
    assert [i for i, _ in result.skipped] == [1, 2, 3, 4, 5, 6]
    reasons = dict(result.skipped)
    assert "not an object" in reasons[1] and "'SQL' is missing" in reasons[2] and "'db_id' is missing" in reasons[3]
    assert "'question' is empty" in reasons[4] and "'SQL' must be str" in reasons[5] and "'evidence'" in reasons[6]
    logged = [r.getMessage() for r in caplog.records]
    assert any(str(path) in m and "record 5" in m and "'SQL'" in m for m in logged)
    assert any("6 of 8 records skipped" in m for m in logged)


def test_spider_and_synsql_check_their_own_fields(tmp_path):
    spider = load_spider(_write(tmp_path / "s.json", [{"db_id": "a", "question": "q", "SQL": "x"},
                                                      {"db_id": "a", "question": "q", "query": "SELECT 1"}]),
                         check_db=False)
    assert len(spider) == 1 and spider.skipped == [(0, "field 'query' is missing")]
    syn = load_synsql(_write(tmp_path / "d.json", [{"db_id": "a", "question": "q", "sql": "SELECT 1",
                                                    "sql_complexity": 3}]), check_db=False)
    assert len(syn) == 0 and "sql_complexity" in syn.skipped[0][1]


def test_unusable_files_raise_errors_naming_the_file(tmp_path):
    missing = tmp_path / "nope.json"
    with pytest.raises(FileNotFoundError, match="nope.json"):
        load_bird(missing, check_db=False)
    broken = tmp_path / "broken.json"
    broken.write_text('[{"db_id": ')
    with pytest.raises(DatasetError, match="broken.json.*not valid JSON"):
        load_spider(broken, check_db=False)
    with pytest.raises(DatasetError, match="obj.json.*expected a JSON list"):
        load_synsql(_write(tmp_path / "obj.json", {"db_id": "a"}), check_db=False)


# downloads ---------------------------------------------------------------------------------
@pytest.mark.parametrize("fn, layout", [
    (download_synsql, "databases/<db_id>/<db_id>.sqlite"),
    (download_bird_dev, "dev_databases/<db_id>/database_description"),
    (download_spider, "database/<db_id>/<db_id>.sqlite"),
    (download_acesql_release, "xiaobing11/ACE-SQL"),
])
def test_downloads_offline_explain_the_manual_layout(fn, layout, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(OfflineError) as err:
        fn(tmp_path / "data")
    message = str(err.value)
    assert "offline" in message and layout in message and str(tmp_path / "data") in message


def test_downloads_return_files_already_in_place(world, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert download_synsql(world.train_json.parent) == world.train_json.parent
    assert download_bird_dev(world.dev_json.parent) == world.dev_json.parent
    with pytest.raises(OfflineError):
        download_bird_dev(world.dev_json.parent, force=True)


def test_download_arguments_are_checked(tmp_path):
    with pytest.raises(TypeError, match="folder path"):
        download_synsql(None)
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotADirectoryError, match="file"):
        download_spider(tmp_path / "file")


def test_bird_archive_is_unpacked_into_the_bird_layout(world, tmp_path, monkeypatch):
    """The unpacking path, fed a local file:// archive shaped like BIRD's (a zip inside the zip)."""
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    records = json.loads(world.dev_json.read_text())
    db_id = records[0]["db_id"]
    inner = tmp_path / "dev_databases.zip"
    with zipfile.ZipFile(inner, "w") as z:
        z.write(world.db_path(db_id), f"dev_databases/{db_id}/{db_id}.sqlite")
    outer = tmp_path / "dev.zip"
    same_db = [r for r in records if r["db_id"] == db_id]
    with zipfile.ZipFile(outer, "w") as z:
        z.writestr("dev_20240627/dev.json", json.dumps(same_db))
        z.write(world.dev_tables, "dev_20240627/dev_tables.json")
        z.write(inner, "dev_20240627/dev_databases.zip")
    dest = download_bird_dev(tmp_path / "bird", url=outer.as_uri())
    result = load_bird(dest / "dev.json", dest / "dev_databases")
    assert len(result) == len(same_db) > 0 and not list(dest.rglob("*.zip"))
