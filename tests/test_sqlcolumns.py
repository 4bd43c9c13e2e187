"""Column sets of real gold SQL (Spider dev, BIRD dev subset), the kit's rules, and failures."""
from __future__ import annotations

import json

import pytest

from acesql_lib.data.schema import Column, Schema, Table, load_tables_json
from acesql_lib.data.sqlcolumns import ColumnResolutionError, anchor_columns, column_set, cover_bare_tables
from repo_paths import REAL

SPIDER_DEV = json.loads((REAL / "spider_dev.json").read_text(encoding="utf-8"))
BIRD_SUBSET = json.loads((REAL / "bird_subset.json").read_text(encoding="utf-8"))
SPIDER = load_tables_json(REAL / "spider_tables.json")
BIRD = load_tables_json(REAL / "bird_subset_tables.json")

# (record index, expected set), each written by reading the SQL and the schema.
SPIDER_CASES = [
    (0, {"singer.Singer_ID"}),  # SELECT count(*) FROM singer: bare table -> its PK
    (5, {"singer.Age", "singer.Country"}),  # avg/min/max args + WHERE
    (20, {"concert.Year"}),  # count(*) plus a WHERE column: no anchor added
    (25, {"stadium.Name", "stadium.Capacity", "stadium.Stadium_ID", "concert.Stadium_ID", "concert.Year"}),
    (28, {"stadium.Name", "stadium.Stadium_ID", "concert.Stadium_ID"}),  # NOT IN subquery
    (31, {"stadium.Name", "stadium.Stadium_ID", "concert.Stadium_ID", "concert.Year"}),  # EXCEPT
    (50, {"Pets.weight", "Pets.PetType"}),  # GROUP BY, canonical case from the schema
    (61, {"Student.Major", "Student.Age", "Student.StuID", "Has_Pet.StuID", "Has_Pet.PetID",
          "Pets.PetID", "Pets.PetType"}),  # subquery with a three-way join
    (90, {"continents.ContId", "continents.Continent", "countries.Continent"}),  # upper-case table names
    (150, {"car_makers.FullName", "car_makers.Id", "model_list.Maker"}),  # HAVING count(*)
    (200, {"airports.AirportName", "airports.AirportCode"}),  # DQS literal "AKO"
    (291, {"hiring.Shop_ID", "hiring.Employee_ID", "hiring.Start_from", "hiring.Is_full_time"}),  # SELECT *
    (520, {"Degree_Programs.degree_summary_name"}),  # count(DISTINCT col)
    (600, {"TV_Channel.Content", "TV_Channel.series_name"}),  # DQS "Sky Radio"
    (640, {"TV_Channel.Pixel_aspect_ratio_PAR", "TV_Channel.Country", "TV_Channel.Language"}),  # keyword-like name
    (700, {"AREA_CODE_STATE.area_code", "AREA_CODE_STATE.state", "CONTESTANTS.contestant_number",
           "CONTESTANTS.contestant_name", "VOTES.contestant_number", "VOTES.state"}),  # INTERSECT of joins
    (755, {f"country.{c}" for c in ("Code", "Name", "Continent", "Region", "SurfaceArea", "IndepYear",
                                    "Population", "LifeExpectancy", "GNP", "GNPOld", "LocalName",
                                    "GovernmentForm", "HeadOfState", "Capital", "Code2")}
     | {"countrylanguage.CountryCode", "countrylanguage.Language", "countrylanguage.IsOfficial",
        "countrylanguage.Percentage"}),  # SELECT * over a join, UNION, DQS "English"/"T"/"Dutch"
    (796, {"country.Population", "country.GovernmentForm", "country.LifeExpectancy"}),  # HAVING avg(...)
    (850, {"orchestra.Major_Record_Format"}),  # ORDER BY COUNT(*)
    (900, {"Friend.student_id", "Highschooler.ID", "Highschooler.name", "Likes.liked_id"}),  # same alias T1 twice
]
BIRD_CASES = [
    (0, {"frpm.School Code", "frpm.CDSCode", "frpm.Charter Funding Type", "satscores.cds", "satscores.AvgScrMath"}),
    (1, {"frpm.CDSCode", "frpm.County Name", "frpm.Free Meal Count (K-12)"}),  # backticks, spaces, parens
    (2, {"satscores.sname", "satscores.cds", "satscores.AvgScrMath", "frpm.CDSCode", "frpm.Charter Funding Type",
         "frpm.District Name"}),  # GROUP BY backticked column, HAVING on aggregates
    (14, {"district.district_id", "account.account_id", "account.district_id", "order.account_id",
          "order.order_id"}),  # `order`, a keyword table
    (18, {"bond.bond_type", "bond.molecule_id"}),  # derived table with ORDER BY COUNT(col)
    (22, {"bond.bond_type", "bond.bond_id"}),  # CASE inside COUNT, table alias T
    (36, {"cards.id", "cards.colors", "set_translations.id", "set_translations.setCode"}),  # same name in subquery
    (43, {"cards.power", "cards.setCode", "cards.convertedManaCost", "sets.code", "sets.name"}),
    (65, {"users.DisplayName", "users.Id", "posts.OwnerUserId", "posts.ViewCount"}),  # scalar subquery ORDER BY
    (90, {"results.positionOrder", "results.time", "results.raceId", "races.raceId", "races.name",
          "races.year"}),  # three CTEs, CTE column aliases, nested scalar subqueries
    (97, {"results.raceId", "results.fastestLapTime", "races.raceId", "races.circuitId", "races.name",
          "circuits.circuitId"}),  # CTE joined to tables; FastestLapTime in another case
    (101, {"Player.player_name", "Player.player_api_id", "Player.height", "Player.id",
           "Player_Attributes.player_api_id", "Player_Attributes.heading_accuracy",
           "Player_Attributes.player_fifa_api_id"}),  # ORDER BY expression over both tables
    (112, {"Laboratory.ID", "Laboratory.Date", "Patient.ID", "Patient.First Date", "Patient.Diagnosis"}),
    (119, {"Patient.Diagnosis", "Patient.ID", "Laboratory.ID", "Laboratory.U-PRO"}),  # `U-PRO`
]


@pytest.mark.parametrize("index, expected", SPIDER_CASES, ids=[f"spider{i}" for i, _ in SPIDER_CASES])
def test_spider_gold_column_sets(index, expected):
    rec = SPIDER_DEV[index]
    assert column_set(rec["query"], SPIDER[rec["db_id"]]) == frozenset(expected)


@pytest.mark.parametrize("index, expected", BIRD_CASES, ids=[f"bird{i}" for i, _ in BIRD_CASES])
def test_bird_gold_column_sets(index, expected):
    rec = BIRD_SUBSET[index]
    assert column_set(rec["SQL"], BIRD[rec["db_id"]]) == frozenset(expected)


def _share(records, schemas, field) -> tuple[float, list]:
    failures = []
    for rec in records:
        try:
            cols = column_set(rec[field], schemas[rec["db_id"]])
            assert cols and all(c in schemas[rec["db_id"]].columns() for c in cols)  # canonical names only
        except ColumnResolutionError as e:
            failures.append((rec[field], str(e)))
    return 1 - len(failures) / len(records), failures


def test_whole_spider_dev_resolves():
    share, failures = _share(SPIDER_DEV, SPIDER, "query")
    assert (share, failures) == (1.0, [])  # every one of the fixture's 1,034 gold queries


def test_whole_bird_subset_resolves():
    share, failures = _share(BIRD_SUBSET, BIRD, "SQL")
    assert (share, failures) == (1.0, [])  # every one of the fixture's 147 gold queries


# rules on real schemas, hand-written queries ------------------------------------------------
CONCERT = SPIDER["concert_singer"]
SCHOOLS = BIRD["california_schools"]


@pytest.mark.parametrize("sql, expected", [
    ("SELECT count(*) AS cnt, Country FROM singer GROUP BY Country ORDER BY cnt DESC", {"singer.Country"}),
    ("SELECT Country, count(*) AS n FROM singer GROUP BY Country HAVING n > 1", {"singer.Country"}),
    ("SELECT max(Age) AS Name FROM singer ORDER BY Name", {"singer.Age"}),  # output alias wins, as in SQLite
    ("SELECT Name FROM singer WHERE Country = \"Name\"", {"singer.Name", "singer.Country"}),  # DQS: a real column
    ("SELECT Name FROM singer WHERE Country = \"Theme\"", {"singer.Name", "singer.Country"}),  # other table's col
    ("SELECT T1.Name FROM singer AS T1, concert AS T2", {"singer.Name", "concert.concert_ID"}),  # bare joined table
    ("SELECT T2.* FROM singer AS T1 JOIN singer_in_concert AS T2 ON T1.Singer_ID = T2.Singer_ID",
     {"singer.Singer_ID", "singer_in_concert.Singer_ID", "singer_in_concert.concert_ID"}),
    ("SELECT name FROM SINGER AS s WHERE EXISTS (SELECT 1 FROM singer_in_concert AS x "
     "WHERE x.singer_id = s.singer_id)", {"singer.Name", "singer.Singer_ID", "singer_in_concert.Singer_ID"}),
    ("SELECT Name FROM singer UNION SELECT Name FROM stadium ORDER BY Name", {"singer.Name", "stadium.Name"}),
])
def test_rules_on_concert_singer(sql, expected):
    assert column_set(sql, CONCERT) == frozenset(expected)


def test_bird_double_quoted_identifiers_with_spaces_and_mixed_case():
    sql = 'SELECT "Percent (%) Eligible Free (K-12)" FROM FRPM WHERE "County Name" = \'Alameda\''
    assert column_set(sql, SCHOOLS) == {"frpm.Percent (%) Eligible Free (K-12)", "frpm.County Name"}
    sql = "SELECT T.`Free Meal Count (K-12)` FROM Frpm AS T JOIN schools AS s ON T.cdscode = s.CDSCode"
    assert column_set(sql, SCHOOLS) == {"frpm.Free Meal Count (K-12)", "frpm.CDSCode", "schools.CDSCode"}


def test_composite_and_missing_primary_key_anchors():
    assert column_set("SELECT count(*) FROM yearmonth", BIRD["debit_card_specializing"]) == {
        "yearmonth.CustomerID", "yearmonth.Date"}
    assert column_set("SELECT count(*) FROM Examination", BIRD["thrombosis_prediction"]) == {"Examination.ID"}


def test_anchor_helpers():
    assert anchor_columns(BIRD["formula_1"], "laptimes") == {"lapTimes.raceId", "lapTimes.driverId", "lapTimes.lap"}
    assert anchor_columns(SPIDER["orchestra"], "show") == {"show.Show_ID"}  # no PK: first column
    covered = cover_bare_tables({"singer.Name"}, ["singer", "CONCERT"], CONCERT)
    assert covered == {"singer.Name", "concert.concert_ID"}


def test_cache_is_per_schema_object():
    small = Schema("concert_singer", [Table("singer", [Column("Name", "TEXT")])])
    assert column_set("SELECT * FROM singer", small) == {"singer.Name"}
    assert len(column_set("SELECT * FROM singer", CONCERT)) == 7  # same db_id, other schema object
    assert column_set("SELECT * FROM singer", CONCERT, cache=False) == column_set("SELECT * FROM singer", CONCERT)


# failures ----------------------------------------------------------------------------------
@pytest.mark.parametrize("sql, reason", [
    ("SELEC Name FROM singer", "parse error"),
    ("SELECT Name FROM singer WHERE (", "parse error"),
    ("SELECT Name FROM singers", "unknown table 'singers'"),
    ("SELECT nonexist FROM singer", "unknown column 'nonexist'"),
    ("SELECT s.nope FROM singer AS s", "nope"),
    ("SELECT `Theme` FROM singer", "unknown column 'Theme'"),  # backticks are never string literals
    ("SELECT Singer_ID FROM singer JOIN singer_in_concert", "ambiguous column (in singer, singer_in_concert)"),
    ("SELECT q.Name FROM singer AS s", "'q'"),
    ("SELECT 1", "reads no table"),
    ("SELECT Name FROM singer; SELECT Age FROM singer", "one SQL statement"),
    ("DELETE FROM singer", "not a query"),
    ("", "one SQL statement"),
])
def test_unresolvable_sql_raises_with_reason(sql, reason):
    with pytest.raises(ColumnResolutionError) as err:
        column_set(sql, CONCERT)
    assert reason.lower() in str(err.value).lower()
    with pytest.raises(ColumnResolutionError, match="."):  # cached errors raise again
        column_set(sql, CONCERT)


def test_authors_bare_table_rule_adds_no_column():
    # the authors' extractor (RL/utils/Schema_From_SQL.py) finds no column in a bare table
    assert column_set("SELECT count(*) FROM singer", CONCERT, bare_tables="none") == frozenset()
    assert column_set("SELECT count(*) FROM singer", CONCERT) == {"singer.Singer_ID"}  # kit rule (default)
    join = "SELECT T1.Name FROM singer AS T1 JOIN concert AS T2"
    assert column_set(join, CONCERT, bare_tables="none") == {"singer.Name"}
    assert column_set(join, CONCERT) == {"singer.Name", "concert.concert_ID"}
    # the cache holds one resolution for both rules; errors stay errors under either rule
    assert column_set("SELECT count(*) FROM singer", CONCERT, bare_tables="none") == frozenset()
    with pytest.raises(ColumnResolutionError):
        column_set("SELECT nope FROM singer", CONCERT, bare_tables="none")
    with pytest.raises(ValueError, match="bare_tables"):
        column_set("SELECT 1", CONCERT, bare_tables="pk")
