"""Schema model: tables.json and live SQLite sources, DDL text and pruning (§2), item resolution."""
from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from acesql_lib.data.schema import Column, ForeignKey, Schema, Table, load_tables_json, quote_identifier
from repo_paths import REAL


@pytest.fixture(scope="module")
def spider() -> dict[str, Schema]:
    return load_tables_json(REAL / "spider_tables.json")


@pytest.fixture(scope="module")
def bird() -> dict[str, Schema]:
    return load_tables_json(REAL / "bird_subset_tables.json")


# tables.json -------------------------------------------------------------------------------
def test_spider_entry_tables_columns_keys(spider):
    s = spider["concert_singer"]
    assert [t.name for t in s.tables] == ["stadium", "singer", "concert", "singer_in_concert"]
    singer = s.table("SINGER")
    assert [c.name for c in singer.columns][:3] == ["Singer_ID", "Name", "Country"]
    assert singer.columns[0].type == "NUMBER" and singer.columns[1].type == "TEXT"
    assert singer.primary_key == ["Singer_ID"]
    assert ForeignKey("Stadium_ID", "stadium", "Stadium_ID") in s.table("concert").foreign_keys
    assert "*" not in {c.split(".")[1] for c in s.columns()}
    assert len(s.columns()) == 21  # 22 entries in column_names_original minus '*'


def test_spider_world_1_skips_sqlite_sequence(spider):
    names = [t.name.lower() for t in spider["world_1"].tables]
    assert "sqlite_sequence" not in names and {"city", "country", "countrylanguage"} <= set(names)


def test_bird_nested_composite_primary_keys(bird):
    assert bird["debit_card_specializing"].table("yearmonth").primary_key == ["CustomerID", "Date"]
    assert bird["formula_1"].table("lapTimes").primary_key == ["raceId", "driverId", "lap"]
    assert bird["formula_1"].table("pitstops").primary_key == ["raceId", "driverId", "stop"]
    # readable names become descriptions
    assert bird["debit_card_specializing"].table("customers").columns[1].description == "client segment"


def _write(tmp_path: Path, entries) -> Path:
    path = tmp_path / "my_tables.json"
    path.write_text(json.dumps(entries))
    return path


def _entry(**overrides) -> dict:
    entry = {"db_id": "shop", "table_names_original": ["a", "b"],
             "column_names_original": [[-1, "*"], [0, "id"], [1, "id"], [1, "a_id"]],
             "column_names": [[-1, "*"], [0, "id"], [1, "id"], [1, "a id"]],
             "column_types": ["text", "number", "number", "number"],
             "primary_keys": [1, 2], "foreign_keys": [[3, 1]]}
    entry.update(overrides)
    return entry


def test_load_tables_json_good_entry(tmp_path):
    s = load_tables_json(_write(tmp_path, [_entry()]))["shop"]
    assert s.table("b").foreign_keys == [ForeignKey("a_id", "a", "id")]


@pytest.mark.parametrize("bad, needle", [
    ({"foreign_keys": [[3, 99]]}, "column index 99"),
    ({"primary_keys": [[1, 42]]}, "column index 42"),
    ({"column_types": ["text"]}, "column_types"),
    ({"column_names_original": [[-1, "*"], [5, "x"]], "column_names": [[-1, "*"], [5, "x"]],
      "column_types": ["text", "text"], "primary_keys": [], "foreign_keys": []}, "points at table 5"),
    ({"foreign_keys": [[3]]}, "pair"),
])
def test_load_tables_json_malformed_entry_names_file_and_db(tmp_path, bad, needle):
    path = _write(tmp_path, [_entry(**bad)])
    with pytest.raises(ValueError) as err:
        load_tables_json(path)
    assert "my_tables.json" in str(err.value) and "'shop'" in str(err.value) and needle in str(err.value)


def test_load_tables_json_duplicate_and_missing(tmp_path):
    with pytest.raises(ValueError, match="appears twice"):
        load_tables_json(_write(tmp_path, [_entry(), _entry()]))
    missing = {k: v for k, v in _entry().items() if k != "column_types"}
    with pytest.raises(ValueError, match="shop.*column_types"):
        load_tables_json(_write(tmp_path, [missing]))
    with pytest.raises(FileNotFoundError, match="nope.json"):
        load_tables_json(tmp_path / "nope.json")


# SQLite ------------------------------------------------------------------------------------
def _build_db(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.executescript("""
        CREATE TABLE orders (id INTEGER PRIMARY KEY AUTOINCREMENT, note TEXT, Price REAL);
        CREATE TABLE "order items" (
            id INTEGER PRIMARY KEY, name TEXT, order_id INTEGER REFERENCES orders(id),
            owner INTEGER REFERENCES orders, picture BLOB, untyped);
        CREATE TABLE enrolment (student_id INTEGER, course_id INTEGER, grade REAL,
            PRIMARY KEY (course_id, student_id));
        INSERT INTO orders (note, Price) VALUES (NULL, 1.5), ('first', 1.5), ('first', 2.0),
            ('second', NULL), ('third', 3.0);
        INSERT INTO "order items" VALUES (1, 'x' || printf('%.60c', 'y'), 1, 1, x'00ff', NULL);
        INSERT INTO "order items" VALUES (2, CAST(x'66ff6f' AS TEXT), 1, 2, x'01', NULL);
        INSERT INTO enrolment VALUES (1, 10, 3.5);
    """)
    conn.commit()
    conn.close()


@pytest.fixture()
def live_db(tmp_path) -> Path:
    path = tmp_path / "shop.sqlite"
    _build_db(path)
    return path


def test_from_sqlite_structure(live_db):
    s = Schema.from_sqlite(live_db)
    assert s.db_id == "shop"
    assert [t.name for t in s.tables] == ["orders", "order items", "enrolment"]  # sqlite_sequence skipped
    items = s.table("ORDER ITEMS")
    assert [(c.name, c.type) for c in items.columns] == [
        ("id", "INTEGER"), ("name", "TEXT"), ("order_id", "INTEGER"), ("owner", "INTEGER"),
        ("picture", "BLOB"), ("untyped", "")]
    assert items.primary_key == ["id"]
    assert s.table("enrolment").primary_key == ["course_id", "student_id"]  # declaration order
    fks = {(fk.column, fk.ref_table, fk.ref_column) for fk in items.foreign_keys}
    assert fks == {("order_id", "orders", "id"), ("owner", "orders", "id")}  # bare REFERENCES -> PK


def test_from_sqlite_example_values(live_db):
    s = Schema.from_sqlite(live_db)
    orders = {c.name: c.examples for c in s.table("orders").columns}
    assert orders["note"] == ["first", "second"]  # 2 distinct, NULL skipped
    assert orders["Price"] == [1.5, 2.0]
    names = s.table("order items").columns[1].examples
    assert len(names[0]) == 40 and names[0].startswith("xyyy")  # cut to 40 characters
    assert names[1] == "f\ufffdo"  # invalid UTF-8 replaced, no crash
    assert s.table("order items").columns[4].examples == []  # blobs are not examples
    assert s.table("order items").columns[5].examples == []  # all NULL
    s3 = Schema.from_sqlite(live_db, n_values=3, max_chars=5)
    assert s3.table("orders").columns[1].examples == ["first", "secon", "third"]
    assert Schema.from_sqlite(live_db, n_values=0).table("orders").columns[1].examples == []


def test_from_sqlite_missing_file_names_path(tmp_path):
    missing = tmp_path / "ghost.sqlite"
    with pytest.raises(FileNotFoundError, match="ghost.sqlite"):
        Schema.from_sqlite(missing)
    assert not missing.exists()  # nothing created


def test_from_sqlite_opens_read_only(live_db):
    before = live_db.read_bytes()
    Schema.from_sqlite(live_db)
    assert live_db.read_bytes() == before


def test_from_sqlite_bird_description_csvs(live_db, tmp_path):
    folder = tmp_path / "database_description"
    folder.mkdir()
    header = "original_column_name,column_name,column_description,data_format,value_description\n"
    # cp1252 bytes (not valid UTF-8) and a file name in another case than the table
    (folder / "ORDERS.csv").write_bytes((header + "note ,order note,Caf\xe9 remark,text,\n"
                                         "Price,price,,real,in dollars\n").encode("cp1252"))
    (folder / "order items.csv").write_bytes(("\ufeff" + header + "name,item name,,text,\n").encode("utf-8"))
    s = Schema.from_sqlite(live_db, description_dir=folder)
    orders = {c.name: c.description for c in s.table("orders").columns}
    assert orders == {"id": "", "note": "Café remark", "Price": "price"}  # empty description -> column_name
    assert s.table("order items").columns[1].description == "item name"
    assert all(c.description == "" for c in s.table("enrolment").columns)  # no CSV for it


# DDL ---------------------------------------------------------------------------------------
@pytest.fixture()
def shop() -> Schema:
    return Schema("shop", [
        Table("orders", [Column("id", "INTEGER", "id", [1, 2]), Column("Note", "TEXT", "order note", ["it's", "b"])],
              ["id"]),
        Table("order items", [Column("id", "INTEGER", "unique id of the item", [1, 2]),
                              Column("name", "TEXT", "", ["apple", "pear"]),
                              Column("order_id", "INTEGER", "Order ID"),
                              Column("select", "TEXT")],
              ["id"], [ForeignKey("order_id", "orders", "id")]),
        Table("pairs", [Column("a", "INTEGER"), Column("b", "INTEGER"), Column("c", "TEXT")], ["a", "b"]),
    ])


EXPECTED_FULL = """\
CREATE TABLE orders (
  id INTEGER, -- example: [1, 2]
  Note TEXT, -- order note, example: ['it''s', 'b']
  PRIMARY KEY (id)
);

CREATE TABLE "order items" (
  id INTEGER, -- unique id of the item, example: [1, 2]
  name TEXT, -- example: ['apple', 'pear']
  order_id INTEGER,
  "select" TEXT,
  PRIMARY KEY (id),
  FOREIGN KEY (order_id) REFERENCES orders(id)
);

CREATE TABLE pairs (
  a INTEGER,
  b INTEGER,
  c TEXT,
  PRIMARY KEY (a, b)
);"""


def test_ddl_full(shop):
    assert shop.to_ddl() == EXPECTED_FULL


def test_ddl_is_valid_sqlite(shop, spider, bird):
    for schema in (shop, spider["concert_singer"], bird["california_schools"], bird["formula_1"]):
        conn = sqlite3.connect(":memory:")
        conn.executescript(schema.to_ddl())
        assert len(conn.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall()) == len(schema.tables)


def test_ddl_pruned_keeps_only_selected_columns(shop):
    ddl = shop.to_ddl(["order items.name", "orders.Note"])
    assert "  name TEXT" in ddl and "  Note TEXT" in ddl
    assert "unique id" not in ddl and "order_id" not in ddl and '"select"' not in ddl


def test_ddl_pruned_table_without_selection_vanishes(shop):
    assert "pairs" not in shop.to_ddl(["orders.id"]) and "order items" not in shop.to_ddl(["orders.id"])


def test_ddl_pruned_no_automatic_keys(shop):
    ddl = shop.to_ddl(["order items.name"])
    assert "PRIMARY KEY" not in ddl and "FOREIGN KEY" not in ddl and "  id " not in ddl


def test_ddl_pruned_pk_lists_only_selected_pk_columns(shop):
    assert "PRIMARY KEY (b)" in shop.to_ddl(["pairs.b", "pairs.c"])
    assert "PRIMARY KEY (a, b)" in shop.to_ddl(["pairs.a", "pairs.b"])


def test_ddl_pruned_fk_only_when_both_ends_selected(shop):
    assert "FOREIGN KEY" not in shop.to_ddl(["order items.order_id"])
    assert "FOREIGN KEY" not in shop.to_ddl(["orders.id", "order items.name"])
    assert "FOREIGN KEY (order_id) REFERENCES orders(id)" in shop.to_ddl(["order items.order_id", "orders.id"])


def test_ddl_pruned_empty_selection_is_empty(shop):
    assert shop.to_ddl([]) == ""


def test_ddl_pruned_matches_case_insensitively_and_rejects_unknown(shop):
    assert shop.to_ddl(["ORDERS.NOTE"]) == shop.to_ddl(["orders.Note"])
    with pytest.raises(ValueError, match="orders.ghost"):
        shop.to_ddl(["orders.Note", "orders.ghost"])
    with pytest.raises(ValueError, match="pairs"):
        shop.to_ddl(["pairs"])


def test_ddl_pruned_keeps_schema_order(shop):
    ddl = shop.to_ddl(["pairs.c", "order items.name", "orders.id"])
    assert ddl.index("orders") < ddl.index('"order items"') < ddl.index("pairs")


def test_ddl_comment_only_when_description_differs(spider):
    ddl = spider["concert_singer"].to_ddl()
    assert "Singer_ID NUMBER," in ddl and "--" not in ddl  # 'singer id' == 'Singer_ID' ignoring case/punctuation


@pytest.mark.parametrize("name, quoted", [
    ("plain_name1", "plain_name1"), ("order items", '"order items"'), ("select", '"select"'),
    ("Order", '"Order"'), ("1st", '"1st"'), ('say "hi"', '"say ""hi"""'), ("Free Meal Count (K-12)",
                                                                              '"Free Meal Count (K-12)"'),
])
def test_quote_identifier(name, quoted):
    assert quote_identifier(name) == quoted


# resolve -----------------------------------------------------------------------------------
def test_resolve_rules(bird, shop):
    s = bird["california_schools"]
    assert s.resolve("frpm.CDSCode") == "frpm.CDSCode"
    assert s.resolve("FRPM.cdscode") == "frpm.CDSCode"  # case-insensitive exact
    assert s.resolve("frpm.`Free Meal Count (K-12)`") == "frpm.Free Meal Count (K-12)"  # quotes stripped
    assert s.resolve('"frpm"."Free Meal Count (K-12)"') == "frpm.Free Meal Count (K-12)"
    assert s.resolve("[frpm].[School Name]") == "frpm.School Name"
    assert s.resolve(" 'schools'.'City' ") == "schools.City"
    assert s.resolve("frpm.free_meal_count_k12") == "frpm.Free Meal Count (K-12)"  # ignoring non-alphanumerics
    assert s.resolve("frpm") is None  # bare table
    assert s.resolve("frpm.*") is None
    assert s.resolve("frpm.nothing") is None and s.resolve("nowhere.CDSCode") is None
    assert s.resolve("") is None
    assert shop.resolve("order items.order_id") == "order items.order_id"
    assert shop.resolve("orderitems.orderid") == "order items.order_id"


def test_resolve_prefers_exact_and_drops_ambiguous_fuzzy():
    s = Schema("x", [Table("t", [Column("a_b", "TEXT"), Column("ab", "TEXT"), Column("c-d", "TEXT"),
                                 Column("c d", "TEXT")])])
    assert s.resolve("t.ab") == "t.ab" and s.resolve("t.A_B") == "t.a_b"  # exact wins over fuzzy
    assert s.resolve("t.cd") is None  # 'c-d' and 'c d' both fit: dropped


def test_columns_and_table_lookup(shop):
    assert shop.columns()[:3] == ["orders.id", "orders.Note", "order items.id"]
    assert shop.table("Order Items").name == "order items"
    with pytest.raises(KeyError, match="shop.*ghost"):
        shop.table("ghost")
