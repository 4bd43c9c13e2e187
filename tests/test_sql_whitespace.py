"""How generated SQL is written before it runs (`grpo.sql_whitespace`): the paper profile collapses every
whitespace run to one space, as the authors' training reward does (RL/rewards/joint_reward.py), so a
`-- comment` line comments out the rest of the query; `keep` runs the SQL as written."""
from __future__ import annotations

import re
import sqlite3

import pytest

from acesql_lib.config.checks import ConfigError
from acesql_lib.config.profiles import load_config
from acesql_lib.data.datasets import Example
from acesql_lib.models.completions import Completion
from acesql_lib.roles.answers import GeneratorParse
from acesql_lib.train.rollouts import QuestionRollout, RoleSamples, Task, execute_rollouts, normalise_sql
from acesql_lib.data.schema import Schema


def authors_rule(sql: str) -> str:
    """The authors' normalisation, written from their reward function: applied to the gold and the prediction."""
    return re.sub(r"\s+", " ", sql)


# Each case: the generated SQL, and whether it matches the gold `SELECT name FROM pet WHERE id = 1` when run as
# written (keep) and when collapsed as the authors do.
CASES = {
    "comment line swallows the filter": ("SELECT name FROM pet -- the pet\nWHERE id = 1", True, False),
    "comment at the end": ("SELECT name FROM pet WHERE id = 1 -- done", True, True),
    "block comment": ("SELECT name /* keep\nthis */ FROM pet WHERE id = 1", True, True),
    "newline inside a string literal": ("SELECT name FROM pet WHERE note = 'first\nline'", True, False),
    "two spaces inside a literal": ("SELECT name FROM pet WHERE tag = 'a  b'", True, False),
    "tabs and newlines between tokens": ("SELECT\tname\n\nFROM   pet\r\nWHERE id = 1", True, True),
    "unicode spaces": ("SELECT\u00a0name FROM pet\u2003WHERE id = 1", False, True),
}


@pytest.fixture(scope="module")
def pets(tmp_path_factory):
    db = tmp_path_factory.mktemp("ws") / "pets.sqlite"
    with sqlite3.connect(db) as c:
        c.execute("CREATE TABLE pet (id INTEGER PRIMARY KEY, name TEXT, note TEXT, tag TEXT)")
        c.executemany("INSERT INTO pet VALUES (?, ?, ?, ?)",
                      [(1, "Rex", "first\nline", "a  b"), (2, "Tom", "first line", "a b")])
    return db, Schema.from_sqlite(db)


def run(pets, sqls: list[str], rule: str, gold: str = "SELECT name FROM pet WHERE id = 1") -> QuestionRollout:
    db, schema = pets
    ex = Example("q0", "pets", "q", "", gold, "", "", "bird", str(db))
    roll = QuestionRollout(Task(ex, schema), RoleSamples([], [], []), frozenset(),
                           RoleSamples([""] * len(sqls), [Completion(s, [1], 1, False) for s in sqls],
                                       [GeneratorParse(s, True, True, False) for s in sqls]))
    execute_rollouts([roll], compare_mode="multiset", timeout_s=5.0, workers=1, sql_whitespace=rule)
    return roll


@pytest.mark.parametrize("name", CASES)
def test_collapse_is_the_authors_rule_and_keep_is_the_text(name):
    sql = CASES[name][0]
    assert normalise_sql(sql, "collapse") == authors_rule(sql)
    assert normalise_sql(sql, "keep") == sql


def test_each_rule_decides_what_executes(pets):
    sqls = [case[0] for case in CASES.values()]
    for rule, column in (("keep", 1), ("collapse", 2)):
        roll = run(pets, sqls, rule)
        assert dict(zip(CASES, roll.matches)) == {name: case[column] for name, case in CASES.items()}, rule
    # the column set of a correct prediction is read from the SQL as written, under either rule
    assert run(pets, [sqls[1]], "collapse").match_sets[0] == run(pets, [sqls[1]], "keep").match_sets[0]


def test_the_gold_is_collapsed_too(pets):
    gold = "SELECT name FROM pet WHERE note = 'first\nline'"  # collapsed, it selects Tom, not Rex
    assert run(pets, ["SELECT name FROM pet WHERE id = 2"], "collapse", gold).matches == [True]
    assert run(pets, ["SELECT name FROM pet WHERE id = 2"], "keep", gold).matches == [False]


def test_the_paper_profile_collapses_and_the_tiny_profile_keeps():
    assert load_config("paper").grpo.sql_whitespace == "collapse"
    assert load_config("tiny").grpo.sql_whitespace == "keep"
    with pytest.raises(ConfigError, match="grpo.sql_whitespace"):
        load_config("tiny", {"grpo.sql_whitespace": "squash"})
    with pytest.raises(ValueError, match="sql_whitespace"):
        normalise_sql("SELECT 1", "squash")

