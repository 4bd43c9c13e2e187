"""Which statement a predicted text holds, as the released evaluators run it: each calls Python's
sqlite3 `cursor.execute(sql)` on the raw text, which runs the first non-empty statement (empty ones
and comments before it skipped), runs nothing for a text of comments, semicolons and whitespace,
and raises on anything after the first statement but whitespace and comments. The kit's official
scoring rules must give the same rows or the same failure for every text."""
import itertools
import json
import sqlite3

import pytest

from acesql_lib.executor import BirdFiles, score_bird
from acesql_lib.executor.sandbox import ResultReading, execute_here
from acesql_lib.executor.scoring import RULES, has_no_statement, sql_to_run

OFFICIAL = [name for name, r in RULES.items() if r.blank_runs]
COMMENT_LED = ["/* note */ SELECT count(*) FROM t", "/**/SELECT count(*) FROM t", ";/* x */ SELECT count(*) FROM t",
               "/* a */ -- b\nSELECT count(*) FROM t", "-- a\n/* b */;; SELECT count(*) FROM t"]
NO_STATEMENT = ["", " ", ";", "-- x", "/* x */", "/* x", "/* a */ -- b\n;", ";/**/;", "\n\t\f\r;"]


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    root = tmp_path_factory.mktemp("statements")
    path = root / "shop" / "shop.sqlite"
    path.parent.mkdir()
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE t (n INTEGER, a TEXT)")
    con.executemany("INSERT INTO t VALUES (?, ?)", [(i, f"v{i}") for i in range(5)])
    con.commit()
    con.close()
    return path


def _python_sqlite3(db, text):
    """What a released evaluator gets: ("rows", rows) or ("error", None)."""
    con = sqlite3.connect(db)
    try:
        return "rows", sorted(con.execute(text).fetchall())
    except (sqlite3.Error, sqlite3.Warning):
        return "error", None
    finally:
        con.close()


def _kit(db, text, scoring):
    r = execute_here(db, sql_to_run(text, RULES[scoring]), timeout_s=5.0, reading=ResultReading(strict_utf8=True))
    return ("rows", sorted(r.rows)) if r.status == "ok" else ("error", None)


def test_a_comment_never_hides_the_statement_after_it():
    assert not any(has_no_statement(s) for s in COMMENT_LED)
    assert all(has_no_statement(s) for s in NO_STATEMENT)
    assert not has_no_statement("SELECT '/* not a comment'") and not has_no_statement("\v")


FRAGMENTS = ["", " ", "\n", ";", "-- c\n", "-- c", "/* c */", "/**/", "/* c", "SELECT n FROM t",
             "SELECT 'a;b', \"a\" FROM t /* ; */"]


@pytest.mark.parametrize("scoring", OFFICIAL)
def test_every_text_runs_as_pythons_sqlite3_runs_it(db, scoring):
    """Differential: three fragments in every order and combination (comments, empty statements,
    statements, unterminated comments) give the same rows, or both a failure, as `cursor.execute`."""
    differ = []
    for parts in itertools.product(FRAGMENTS, repeat=3):
        text = "".join(parts)
        want, got = _python_sqlite3(db, text), _kit(db, text, scoring)
        if want != got:
            differ.append((text, want, got))
    assert differ == []


@pytest.mark.parametrize("scoring", OFFICIAL)
def test_comment_led_sql_scores_as_the_released_evaluators_score_it(db, tmp_path, scoring):
    """Through the BIRD command's files: a comment-led correct SQL scores 1, comment-led wrong SQL
    on an empty gold 0, a text of comments alone 1 on an empty gold (as `cursor.execute` runs it)."""
    empty_gold = "SELECT n FROM t WHERE n > 100"
    gold, preds = [], []
    for sql in COMMENT_LED:
        gold += [{"SQL": "SELECT count(*) FROM t", "db_id": "shop"}, {"SQL": empty_gold, "db_id": "shop"}]
        preds += [sql, sql]
    for sql in NO_STATEMENT[1:]:  # a blank entry is read by each release's own rule; these all run
        gold.append({"SQL": empty_gold, "db_id": "shop"})
        preds.append(sql)
    (tmp_path / "dev.json").write_text(json.dumps(gold))
    sep = "\t----- bird -----\t"
    (tmp_path / "pred.json").write_text(json.dumps({str(i): f"{p}{sep}shop" for i, p in enumerate(preds)}))
    report = score_bird(BirdFiles(tmp_path / "pred.json", tmp_path / "dev.json", db.parent.parent), workers=1,
                        progress=False, scoring=scoring)
    want = [_python_sqlite3(db, p) == _python_sqlite3(db, g["SQL"]) for p, g in zip(preds, gold)]
    assert [s.correct for s in report.scores] == want
    assert want == [True, False] * len(COMMENT_LED) + [True] * (len(NO_STATEMENT) - 1)
