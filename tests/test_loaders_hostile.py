"""Loaders that report instead of trusting: encodings, duplicate ids, unknown enumerated values,
databases missing from tables.json. Each error names the file (and the record or id)."""
from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from acesql_lib.datasets import DatasetError, load_bird, load_spider, load_synsql, load_tables
from acesql_lib.schema import load_tables_json

REAL = Path(__file__).parent / "fixtures" / "real"
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
    with caplog.at_level(logging.WARNING, logger="acesql_lib.datasets"):
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
