"""The authors' schema text style (data.schema_style: authors) against their released prompts.

The reference is the 40 RL validation rows the authors released (tests/fixtures/authors/,
MIT): each row's user message holds their full-schema text, built from the row's `db_info`
(tables.json fields), `sampled_values` and question-relevant `relavant_values`.
"""
from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from acesql_lib.data.authors_schema import authors_identifier, merge_values
from acesql_lib.data.schema import Column, ForeignKey, Schema, Table
from repo_paths import FIXTURES

ROWS = FIXTURES / "authors" / "validation.parquet"
HEAD, TAIL = "Database Schema: \n", " \nThis schema describes"


def _rows() -> list[dict]:
    return pq.read_table(ROWS).to_pylist()


def _their_schema_text(row: dict) -> str:
    text = row["prompt"][0]["content"]
    start = text.index(HEAD) + len(HEAD)
    return text[start:text.index(TAIL, start)]


def _our_schema(row: dict) -> Schema:
    info = row["extra_info"]
    schema = Schema.from_tables_json(json.loads(info["db_info"]), source=f"validation row {info['pool_key']!r}")
    schema.set_examples(json.loads(info["sampled_values"]), source="sampled_values")
    return schema


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return _rows()


def test_all_40_schema_texts_are_byte_identical(rows):
    assert len(rows) == 40
    differ = []
    for row in rows:
        relevant = json.loads(row["extra_info"]["relavant_values"])
        ours = _our_schema(row).to_ddl(relevant_values=relevant, style="authors")
        if ours != _their_schema_text(row):
            differ.append(row["extra_info"]["db_id"])
    assert differ == [], f"{len(differ)} of 40 schema texts differ: {differ}"


def _column_line(text: str, key: str) -> str:
    table, column = key.split(".", 1)
    for block in text.split("\n\n"):
        head, *lines = block.split("\n")
        if head.lower().strip('"') in (f"create table {table} (", f'create table "{table}" ('):
            return next(l for l in lines if l.lower().lstrip().removeprefix('"').startswith(column + " ")
                        or l.lower().lstrip().startswith(f'"{column}" '))
    raise AssertionError(f"{key} not in the text")


def test_relevant_values_come_first(rows):
    with_relevant = changed = 0
    for row in rows:
        relevant = json.loads(row["extra_info"]["relavant_values"])
        schema = _our_schema(row)
        text = schema.to_ddl(relevant_values=relevant, style="authors")
        with_relevant += bool(relevant)
        changed += text != schema.to_ddl(style="authors")
        for key, values in relevant.items():
            line = _column_line(text, key)
            assert "example: " + repr(values)[:-1] in line, (key, line)
    # 15 rows carry relevant values; on 7 of them the values were already the first samples
    assert (with_relevant, changed) == (15, 8)


def test_without_relevant_values_8_texts_differ(rows):
    same = sum(_our_schema(r).to_ddl(style="authors") == _their_schema_text(r) for r in rows)
    assert same == 32


def _toy() -> Schema:
    people = Table("people", [Column("id", "INTEGER", "Unique id", [1, 2], "INTEGER"),
                              Column("value", "TEXT", "The value ", ["you've", "a"], "TEXT"),
                              Column("home town", "TEXT", "Home town", ["x" * 40, "x" * 40], "text")],
                   primary_key=["id"])
    pets = Table("Pets", [Column("pet_id", "INTEGER", "", [], "INTEGER"),
                          Column("owner_id", "INTEGER", "owner id", [], "INTEGER")],
                 primary_key=["pet_id"], foreign_keys=[ForeignKey("owner_id", "people", "id"),
                                                       ForeignKey("owner_id", "people", "id")])
    return Schema("toy", [people, pets], text_style="authors")


def test_authors_format_rules_on_a_hand_built_schema():
    assert _toy().to_ddl() == (
        "CREATE TABLE people (\n"
        "    id INTEGER, -- Unique id, example: [1, 2]\n"
        "    \"value\" TEXT, -- The value , example: [\"you've\", 'a']\n"  # reserved word quoted; comment kept as is
        "    \"home town\" text, -- example: ['" + "x" * 40 + "']\n"  # comment spells the name: hidden; dedup
        "    PRIMARY KEY (id)\n"
        ");\n\n"
        "CREATE TABLE Pets (\n"
        "    pet_id INTEGER,\n"
        "    owner_id INTEGER,\n"  # "owner id" spells owner_id: no comment
        "    PRIMARY KEY (pet_id),\n"
        "    CONSTRAINT fk_pets_owner_id FOREIGN KEY (owner_id) REFERENCES people (id)\n"  # repeated FK once
        ");")


def test_authors_pruned_form():
    toy = _toy()
    # FK only when its target is kept; PK only from kept columns; unselected tables vanish
    assert toy.to_ddl({"Pets.owner_id"}) == "CREATE TABLE Pets (\n    owner_id INTEGER\n);"
    assert "CONSTRAINT" in toy.to_ddl({"Pets.owner_id", "people.id"})
    assert toy.to_ddl({"people.value"}) == ("CREATE TABLE people (\n"
                                            "    \"value\" TEXT, -- The value , example: [\"you've\", 'a']\n);")
    assert toy.to_ddl(set()) == ""
    with pytest.raises(ValueError, match="not in the schema"):
        toy.to_ddl({"people.nope"})


def test_pruned_text_is_the_full_text_restricted(rows):
    """Pruning to the gold columns keeps exactly the kept columns' lines of the full text."""
    for row in rows[:10]:
        schema = _our_schema(row)
        info = json.loads(row["extra_info"]["db_info"])
        gold = row["reward_model"]["ground_truth"]["gold_column_indices"]
        names = info["column_names_original"]
        selected = {f"{info['table_names_original'][names[i][0]]}.{names[i][1]}" for i in gold}
        full, pruned = schema.to_ddl(style="authors"), schema.to_ddl(selected, style="authors")
        full_lines = {l.rstrip(",") for l in full.split("\n")}
        col_lines = [l for l in pruned.split("\n") if l.startswith("    ") and " -- " in l]
        assert len(col_lines) == len(selected)
        assert all(l.rstrip(",") in full_lines or l + "," in full for l in col_lines)


def test_identifier_and_merge_rules():
    assert authors_identifier("year") == '"year"' and authors_identifier("abort") == "abort"
    assert authors_identifier("naïve") == '"naïve"' and authors_identifier("a b") == '"a b"'
    assert merge_values(["B"], ["A", "B", "C"], 2) == ["B", "A"]
    with pytest.raises(ValueError, match="unknown schema style"):
        _toy().to_ddl(style="fancy")
    with pytest.raises(ValueError, match="sampled_values: database 'toy' has no column 'people.nope'"):
        _toy().set_examples({"people.nope": [1]}, source="sampled_values")


def test_kit_style_is_unchanged_by_default():
    toy = _toy()
    toy.text_style = "kit"
    text = toy.to_ddl()
    assert text.startswith("CREATE TABLE people (\n  id INTEGER, -- Unique id, example: [1, 2]")
    assert "CONSTRAINT" not in text and "FOREIGN KEY (owner_id) REFERENCES people(id)" in text
    # relevant values go first in the kit style too
    assert "example: ['b', 'you''ve', 'a']" in toy.to_ddl(relevant_values={"PEOPLE.value": ["b"]})


def test_authors_text_from_a_live_sqlite_file(tmp_path):
    import sqlite3

    path = tmp_path / "club.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript("""
        CREATE TABLE members (id INTEGER, name varchar(20), "year" INTEGER, PRIMARY KEY (id));
        CREATE TABLE fees (member_id INTEGER, season INTEGER, paid REAL,
                           PRIMARY KEY (season, member_id), FOREIGN KEY (member_id) REFERENCES members (id));
        INSERT INTO members VALUES (1, '', 2020), (2, 'Ann', 2021), (3, 'Bo', NULL);
        INSERT INTO fees VALUES (1, 2020, 10.5);
    """)
    conn.commit()
    conn.close()
    schema = Schema.from_sqlite(path)
    schema.text_style = "authors"
    assert schema.to_ddl() == (
        "CREATE TABLE members (\n"
        "    id INTEGER, -- example: [1, 2]\n"
        "    name varchar(20), -- example: ['Ann', 'Bo']\n"  # declared type as spelt; '' is no example
        "    \"year\" INTEGER, -- example: [2020, 2021]\n"
        "    PRIMARY KEY (id)\n"
        ");\n\n"
        "CREATE TABLE fees (\n"
        "    member_id INTEGER, -- example: [1]\n"
        "    season INTEGER, -- example: [2020]\n"
        "    paid REAL, -- example: [10.5]\n"
        "    PRIMARY KEY (member_id, season),\n"  # column order, not declaration order
        "    CONSTRAINT fk_fees_member_id FOREIGN KEY (member_id) REFERENCES members (id)\n"
        ");")


def test_profiles_choose_the_schema_style():
    from acesql_lib.config.checks import ConfigError
    from acesql_lib.config.data import DataConfig
    from acesql_lib.config.profiles import load_config

    paper, tiny = load_config("paper").data, load_config("tiny").data
    assert (paper.schema_style, paper.relevant_values, paper.max_example_values) == ("authors", True, 6)
    assert (paper.values_top_k, paper.values_min_match, paper.values_max_hits) == (10, 0.85, 20)
    keys = ("schema_style", "relevant_values", "max_example_values", "values_top_k", "values_min_match",
            "values_max_hits")
    assert {k: getattr(DataConfig(), k) for k in keys} == {k: getattr(paper, k) for k in keys}  # defaults = paper
    assert (tiny.schema_style, tiny.relevant_values) == ("kit", False)
    with pytest.raises(ConfigError, match="data.schema_style"):
        DataConfig(schema_style="omnisql")
    with pytest.raises(ConfigError, match="data.values_min_match"):
        DataConfig(values_min_match=1.5)
