"""Loaders that report instead of trusting: encodings, duplicate ids, unknown enumerated values,
databases missing from tables.json. Each error names the file (and the record or id)."""
from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from acesql_lib.data.datasets import DatasetError, load_bird, load_spider, load_synsql, load_tables
from acesql_lib.data.schema import load_tables_json
from repo_paths import REAL

BIRD = {"question_id": 0, "db_id": "shop", "question": "How many?", "evidence": "", "SQL": "SELECT 1",
        "difficulty": "simple"}
SYN = {"db_id": "shop", "sql_complexity": "Simple", "question_style": "Formal", "question": "q?", "sql": "SELECT 1"}


def _write(path: Path, obj, prefix: bytes = b"") -> Path:
    path.write_bytes(prefix + json.dumps(obj).encode("utf-8"))
    return path


def test_invalid_utf8_in_tables_json_names_the_file_and_the_byte(tmp_path):
    good = (REAL / "spider_tables.json").read_bytes()
    bad = tmp_path / "tables.json"
    bad.write_bytes(good[:500] + b"\xff\xfe" + good[500:])
    for read in (load_tables_json, load_tables):
        with pytest.raises(DatasetError, match=r"tables\.json: not valid UTF-8 at byte 500"):
            read(bad)


def test_invalid_utf8_in_a_questions_file_names_it(tmp_path):
    path = tmp_path / "dev.json"
    path.write_bytes(b'[{"db_id": "\xe9"}]')
    with pytest.raises(DatasetError, match=r"dev\.json: not valid UTF-8"):
        load_bird(path, check_db=False)


def test_a_utf8_bom_is_read(tmp_path):
    entries = json.loads((REAL / "spider_tables.json").read_text())[:2]
    schemas = load_tables_json(_write(tmp_path / "tables.json", entries, prefix=b"\xef\xbb\xbf"))
    assert sorted(schemas) == sorted(e["db_id"] for e in entries)
    dev = load_bird(_write(tmp_path / "dev.json", [BIRD], prefix=b"\xef\xbb\xbf"), check_db=False)
    assert [e.id for e in dev] == ["0"]


@pytest.mark.parametrize("loader, records, dup", [
    (load_bird, [BIRD, {**BIRD, "question": "Other?"}], "0"),
    (load_synsql, [{**SYN, "id": "7"}, {**SYN, "id": 7, "question": "Other?"}], "7"),
    (load_synsql, [SYN, SYN, {**SYN, "id": 1}], "1"),  # record 1 has no id (its index), record 2 says 1
])
def test_duplicate_ids_are_an_error_naming_the_file_id_and_records(tmp_path, loader, records, dup):
    path = _write(tmp_path / "data.json", records)
    with pytest.raises(DatasetError, match=rf"data\.json: 1 duplicate .*id {dup!r} at records \d and \d"):
        loader(path, check_db=False)
    kept = loader(path, check_db=False, duplicates="keep_first")
    assert len(kept) == len(records) - 1 and "duplicate id" in kept.skipped[0][1]
    assert len({e.id for e in kept}) == len(kept)


def test_unknown_enumerated_values_are_warned_and_counted(tmp_path, caplog):
    records = [{**SYN, "id": i, "sql_complexity": c} for i, c in enumerate(["Simple", "Trivial", "", None, "Trivial"])]
    with caplog.at_level(logging.WARNING, logger="acesql_lib.data.datasets"):
        result = load_synsql(_write(tmp_path / "data.json", records), check_db=False)
    assert len(result) == 5  # kept
    assert result.unknown_values == {"sql_complexity": {"Trivial": 2, "": 1, None: 1}}
    assert any("4 records have a sql_complexity outside" in r.getMessage() for r in caplog.records)
    bird = load_bird(_write(tmp_path / "dev.json", [{**BIRD, "question_id": i, "difficulty": d}
                                                   for i, d in enumerate(["simple", "hard", "challenging"])]),
                     check_db=False)
    assert bird.unknown_values == {"difficulty": {"hard": 1}}
    spider = load_spider(REAL / "spider_dev.json", check_db=False)
    assert spider.unknown_values == {}


def test_a_database_missing_from_tables_json_is_flagged_at_load_time(tmp_path):
    tables = json.loads((REAL / "spider_tables.json").read_text())
    path = _write(tmp_path / "tables.json", [t for t in tables if t["db_id"] != "pets_1"])
    with pytest.raises(DatasetError, match=r"1 database\(s\) used by the questions are not in .*tables\.json: "
                                           r"'pets_1' \(record \d+\)"):
        load_spider(REAL / "spider_dev.json", check_db=False, tables=path)
    assert len(load_spider(REAL / "spider_dev.json", check_db=False, tables=REAL / "spider_tables.json")) == 1034


# ---------------------------------------------------------------------------------------------
# Loaders: deep nesting, db_ids that are paths, list db_ids, prediction keys, the separator


def test_deeply_nested_json_is_an_error_naming_the_file_not_a_recursion_error(tmp_path):
    from acesql_lib.executor import load_bird_predictions

    deep = tmp_path / "deep.json"
    deep.write_text("[" * 200_000)
    for read in (lambda p: load_bird(p, check_db=False), load_tables, load_tables_json, load_bird_predictions,
                 lambda p: load_synsql(p, check_db=False)):
        with pytest.raises(DatasetError, match=r"deep\.json: JSON nested too deeply"):
            read(deep)


def _outside_db(tmp_path) -> Path:
    """A database outside db_root whose table answers the gold: opening it would score."""
    import sqlite3

    (tmp_path / "elsewhere").mkdir()
    path = tmp_path / "elsewhere" / "elsewhere.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE secret (x)")
    con.execute("INSERT INTO secret VALUES (42)")
    con.commit()
    con.close()
    return path


@pytest.mark.parametrize("db_id", ["ABSOLUTE", "../elsewhere", "shop/../shop", "a\\b", "..", ".", "x" * 300,
                                   "shop\x00", " shop"])
def test_a_db_id_that_is_not_a_plain_name_is_refused_naming_the_file_and_record(tmp_path, caplog, db_id):
    outside = _outside_db(tmp_path)
    db_id = str(outside.parent) if db_id == "ABSOLUTE" else db_id  # <root>/<abs>/<abs>.sqlite is <abs>.sqlite
    (tmp_path / "elsewhere.sqlite").write_bytes(outside.read_bytes())
    root = tmp_path / "dev_databases"
    (root / "shop").mkdir(parents=True)
    (root / "shop" / "shop.sqlite").write_bytes(outside.read_bytes())
    path = _write(tmp_path / "dev.json", [{**BIRD, "db_id": db_id}, {**BIRD, "question_id": 1}])
    with caplog.at_level(logging.WARNING, logger="acesql_lib.data.datasets"):
        result = load_bird(path, root)
    assert [e.db_id for e in result] == ["shop"]  # the plain one loads; the other never reaches the disk
    assert result.skipped[0][0] == 0 and "db_id" in result.skipped[0][1]
    assert any("dev.json: record 0: field 'db_id'" in r.getMessage() for r in caplog.records)


def test_a_list_db_id_in_tables_json_is_an_error_naming_the_file_and_entry(tmp_path):
    entries = json.loads((REAL / "spider_tables.json").read_text())[:2]
    entries[1] = {**entries[1], "db_id": ["alpha"]}
    tables = _write(tmp_path / "tables.json", entries)
    dev = _write(tmp_path / "dev.json", [{**BIRD, "db_id": entries[0]["db_id"]}])
    with pytest.raises(DatasetError, match=r"tables\.json: entry 1: db_id must be a string, got list"):
        load_bird(dev, check_db=False, tables=tables)
    for read in (load_tables, load_tables_json):
        with pytest.raises(DatasetError, match=r"tables\.json: entry 1: db_id must be a string, got list"):
            read(tables)


@pytest.mark.parametrize("text, bad", [
    ('{"7": "SELECT 1\\t----- bird -----\\tshop", "07": "SELECT 2\\t----- bird -----\\tshop"}', "'07'"),
    ('{"\u0663": "SELECT 1\\t----- bird -----\\tshop"}', "'\u0663'"),  # ARABIC-INDIC DIGIT THREE
    ('{"\u00b3": "SELECT 1\\t----- bird -----\\tshop"}', "'\u00b3'"),  # SUPERSCRIPT THREE
    ('{" 1": "SELECT 1\\t----- bird -----\\tshop"}', "' 1'"),
    ('{"-1": "SELECT 1\\t----- bird -----\\tshop"}', "'-1'"),
])
def test_prediction_keys_are_ascii_indexes_without_leading_zeros(tmp_path, text, bad):
    from acesql_lib.executor import load_bird_predictions, read_bird_predictions

    path = tmp_path / "predict_dev.json"
    path.write_text(text, encoding="utf-8")
    for read in (load_bird_predictions, read_bird_predictions):
        with pytest.raises(DatasetError, match=rf"predict_dev\.json: 1 key\(s\) are not question indexes .*{bad}"):
            read(path)


def test_a_duplicate_prediction_key_is_an_error_naming_the_file(tmp_path):
    from acesql_lib.executor import load_bird_predictions

    path = tmp_path / "predict_dev.json"
    path.write_text('{"0": "SELECT 1\\t----- bird -----\\tshop", "0": "SELECT 2\\t----- bird -----\\tshop"}')
    with pytest.raises(DatasetError, match=r"predict_dev\.json: the key '0' appears twice"):
        load_bird_predictions(path)


def test_sql_holding_the_bird_separator_is_written_and_read_back_unchanged(tmp_path):
    import sqlite3

    from acesql_lib.executor import (BIRD_SEPARATOR, BirdFiles, read_bird_predictions, score_bird,
                                     write_bird_predictions)

    sqls = [f"SELECT x FROM t -- a comment{BIRD_SEPARATOR}db", f"SELECT '{BIRD_SEPARATOR}' || x FROM t", "SELECT x FROM t"]
    path = tmp_path / "predict_dev.json"
    write_bird_predictions(path, sqls, ["shop"] * 3)  # raised ValueError before
    assert read_bird_predictions(path) == {i: (sql, "shop") for i, sql in enumerate(sqls)}
    root = tmp_path / "dev_databases"
    (root / "shop").mkdir(parents=True)
    con = sqlite3.connect(root / "shop" / "shop.sqlite")
    con.execute("CREATE TABLE t (x)")
    con.execute("INSERT INTO t VALUES ('v')")
    con.commit()
    con.close()
    gold = [{"question_id": i, "db_id": "shop", "SQL": g, "difficulty": "simple"}
            for i, g in enumerate(["SELECT x FROM t", f"SELECT '{BIRD_SEPARATOR}v'", "SELECT 'w'"])]
    _write(tmp_path / "dev.json", gold)
    for mode in ("kit", "authors", "bird_minidev"):
        report = score_bird(BirdFiles(path, tmp_path / "dev.json", root), progress=False, scoring=mode)
        assert [s.correct for s in report.scores] == [True, True, False], mode
    with pytest.raises(ValueError, match=r"prediction 0: db_id 'a/b'"):
        write_bird_predictions(path, ["SELECT 1"], ["a/b"])


def test_a_prediction_or_gold_naming_a_path_never_opens_it(tmp_path):
    from acesql_lib.executor import BIRD_SEPARATOR, BirdFiles, load_bird_gold, score_bird

    outside = _outside_db(tmp_path)
    root = tmp_path / "dev_databases"
    (root / "shop").mkdir(parents=True)
    (root / "shop" / "shop.sqlite").write_bytes(b"")
    gold = _write(tmp_path / "dev.json", [{"question_id": 0, "db_id": "shop", "SQL": "SELECT x FROM secret"}])
    pred = tmp_path / "predict_dev.json"
    pred.write_text(json.dumps({"0": f"SELECT x FROM secret{BIRD_SEPARATOR}{outside.parent}"}))
    report = score_bird(BirdFiles(pred, gold, root), progress=False)
    assert report.malformed == 1 and not report.scores[0].correct  # the official script would open it and score 1
    bad_gold = _write(tmp_path / "bad.json", [{"question_id": 0, "db_id": "../elsewhere", "SQL": "SELECT 1"}])
    with pytest.raises(DatasetError, match=r"bad\.json: record 0: db_id '\.\./elsewhere' contains a path separator"):
        load_bird_gold(bad_gold)
