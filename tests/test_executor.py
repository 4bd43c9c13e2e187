"""Sandboxed execution, comparison modes, batches and the BIRD command, on real SQLite files."""
import hashlib
import json
import os
import signal
import sqlite3
import threading
import time

import pytest

from acesql_lib import executor
from acesql_lib.executor import (count_statements, execute, execute_here, gold_has_order_by, read_bird_predictions,
                                 result_width, rows_match, score_batch, write_bird_predictions)

N_ROWS = 2000
RUNAWAY = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT count(*) FROM c"
RUNAWAY_2COLS = RUNAWAY.replace("SELECT count(*)", "SELECT 1, count(*)")


def make_db(path, n_rows=N_ROWS):
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, a INTEGER, b TEXT, f REAL)")
    conn.execute("CREATE TABLE u (id INTEGER PRIMARY KEY, t_id INTEGER REFERENCES t(id), g TEXT)")
    conn.executemany("INSERT INTO t (a, b, f) VALUES (?, ?, ?)", [(i % 7, f"s{i}", i / 10) for i in range(n_rows)])
    conn.executemany("INSERT INTO u (t_id, g) VALUES (?, ?)", [(i % 50 + 1, "g%d" % (i % 3)) for i in range(300)])
    conn.execute("INSERT INTO t (a, b, f) VALUES (99, CAST(x'ff41' AS TEXT), 0.5)")  # invalid UTF-8
    conn.commit()
    conn.close()
    return path


def sha256(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    return str(make_db(tmp_path_factory.mktemp("exec") / "world.sqlite"))


# --------------------------------------------------------------------------- execute

def test_select_returns_rows_and_columns(db):
    r = execute(db, "SELECT a, count(*) AS n FROM t WHERE a < 99 GROUP BY a ORDER BY a;")
    assert r.status == "ok" and r.error == ""
    assert r.columns == ["a", "n"]
    assert r.rows == [(a, len([i for i in range(N_ROWS) if i % 7 == a])) for a in range(7)]


@pytest.mark.parametrize("sql, needle", [
    ("INSERT INTO t (a) VALUES (1)", "INSERT"),
    ("UPDATE t SET a = 0", "UPDATE"),
    ("DELETE FROM t", "DELETE"),
    ("DROP TABLE t", "DROP"),
    ("CREATE TABLE x (y)", "CREATE"),
    ("ALTER TABLE t ADD COLUMN z", "ALTER"),
    ("ATTACH DATABASE 'other.sqlite' AS o", "ATTACH"),
    ("PRAGMA writable_schema=1", "PRAGMA writable_schema"),
    ("PRAGMA journal_mode=WAL", "PRAGMA journal_mode"),
    ("SELECT load_extension('x')", "load_extension"),
    ("BEGIN", "TRANSACTION"),
    ("SAVEPOINT s1", "SAVEPOINT"),
    ("WITH d AS (SELECT 1) DELETE FROM t", "DELETE"),
    ("SELECT 1; DROP TABLE t", "2 statements"),
    ("SELECT 1; SELECT 2;", "2 statements"),
    ("UPDATE sqlite_master SET sql = 'x'", "sqlite_master"),
])
def test_writes_and_unsafe_statements_are_blocked(db, sql, needle):
    before = sha256(db)
    r = execute(db, sql)
    assert r.status == "blocked", r
    assert r.error.startswith("blocked") and needle in r.error
    assert sha256(db) == before
    assert execute(db, "SELECT count(*) FROM t").rows == [(N_ROWS + 1,)]  # connection still usable


def test_vacuum_into_cannot_write_a_file(db, tmp_path):
    target = tmp_path / "copy.sqlite"
    r = execute(db, f"VACUUM INTO '{target}'")
    assert r.status == "blocked" and "VACUUM" in r.error
    assert not target.exists()


def test_read_pragmas_are_allowed(db):
    r = execute(db, "PRAGMA table_info(t)")
    assert r.status == "ok" and [row[1] for row in r.rows] == ["id", "a", "b", "f"]
    assert execute(db, "PRAGMA foreign_key_list(u)").rows[0][2] == "t"
    # table-valued functions make SQLite ask for UPDATE on sqlite_master, answered IGNORE (no write)
    assert execute(db, "SELECT name FROM pragma_table_info('u')").rows == [("id",), ("t_id",), ("g",)]
    assert execute(db, "SELECT value FROM json_each('[3, 4]')").rows == [(3,), (4,)]


def test_missing_database_is_an_error_naming_the_path_and_is_not_created(tmp_path):
    path = tmp_path / "nope.sqlite"
    r = execute(path, "SELECT 1")
    assert r.status == "error" and str(path) in r.error
    assert not path.exists()


def test_corrupt_database_is_an_error_naming_the_path(tmp_path):
    path = tmp_path / "corrupt.sqlite"
    path.write_bytes(b"this is not a database" * 200)
    r = execute(path, "SELECT 1")
    assert r.status == "error" and str(path) in r.error and "not a database" in r.error


@pytest.mark.parametrize("sql", ["", "   \n\t", "-- only a comment", "/* c */ ;", ";"])
def test_empty_sql(db, sql):
    r = execute(db, sql)
    assert (r.status, r.error) == ("error", "empty SQL")


def test_nul_byte_and_non_string_sql(db):
    assert execute(db, "SELECT 1\x00; DROP TABLE t").error == "SQL contains a NUL byte"
    assert execute(db, None).status == "error"


@pytest.mark.parametrize("kind, status", [("padded", "ok"), ("in_list", "ok"), ("deep", "error"), ("3mb", "error")])
def test_huge_sql_returns_quickly(db, kind, status):
    sql = {"padded": "SELECT 1" + " " * 1_000_000,
           "in_list": "SELECT count(*) FROM t WHERE id IN (" + ",".join(map(str, range(160_000))) + ")",
           "deep": "SELECT " + "1+" * 500_000 + "1",
           "3mb": "SELECT 1" + " " * 3_000_000}[kind]
    assert len(sql) >= 900_000
    r = execute(db, sql, timeout_s=10)
    assert r.status == status, r.error
    assert r.elapsed_s < 10
    if kind == "3mb":
        assert "too long" in r.error


def test_runaway_query_stops_at_its_deadline(db):
    r = execute(db, RUNAWAY, timeout_s=0.5)
    assert r.status == "timeout" and "0.5" in r.error
    assert r.elapsed_s < 1.5  # safety bound; precision is measured in benchmarks/executor_bench.py
    assert execute(db, "SELECT 42").rows == [(42,)]  # the same cached connection works afterwards


def test_cross_joins_hit_the_row_cap_or_the_deadline(db):
    before = sha256(db)
    wide = execute(db, "SELECT * FROM t a, t b", timeout_s=5)
    assert wide.status == "too_large" and "100000 rows" in wide.error and wide.rows == []
    counted = execute(db, "SELECT count(*) FROM t a, t b, t c", timeout_s=0.5)
    assert counted.status == "timeout"
    assert sha256(db) == before


def test_row_and_byte_caps(db):
    assert execute(db, "SELECT * FROM t", max_rows=100).status == "too_large"
    assert execute(db, "SELECT * FROM t LIMIT 100", max_rows=100).status == "ok"
    big = execute(db, "SELECT b FROM t", max_result_bytes=1000)
    assert big.status == "too_large" and "bytes" in big.error


def test_huge_blob_is_refused(db):
    r = execute(db, "SELECT randomblob(1000000000)")
    assert r.status == "too_large" and "string or blob too big" in r.error


def test_invalid_utf8_decodes_with_replacement(db):
    r = execute(db, "SELECT b FROM t WHERE a = 99")
    assert r.status == "ok" and r.rows == [("\ufffdA",)]


def test_changed_file_gets_a_fresh_connection(tmp_path):
    path = tmp_path / "w.sqlite"
    make_db(path, n_rows=10)
    assert execute(path, "SELECT count(*) FROM t").rows == [(11,)]
    path.unlink()
    make_db(path, n_rows=20)
    assert execute(path, "SELECT count(*) FROM t").rows == [(21,)]


@pytest.mark.parametrize("sql, n", [
    ("SELECT 1", 1), ("SELECT 1;", 1), ("SELECT 1; -- trailing", 1), ("SELECT ';' , \"a;b\", [c;d], `e;f`", 1),
    ("SELECT 'it''s; fine'", 1), ("SELECT 1 /* ; */", 1), ("SELECT 1;;", 1), ("SELECT 1; SELECT 2", 2),
    ("SELECT 1 -- x\n; SELECT 2", 2), ("", 0), ("-- a\n/* b */", 0), ("SELECT 'unterminated; x", 1),
])
def test_count_statements(sql, n):
    assert count_statements(sql) == n
    if sql.strip() and n <= 1 and "unterminated" not in sql:
        assert sqlite3.complete_statement(sql.rstrip().rstrip(";") + ";")  # agrees with SQLite's own scanner


# --------------------------------------------------------------------------- comparison

def test_set_mode_is_birds_rule():
    assert rows_match([(1,), (1,), (2,)], [(2,), (1,)], "set")  # duplicates and order ignored
    assert rows_match([(1,)], [(1.0,)], "set")  # Python: 1 == 1.0
    assert not rows_match([("1",)], [(1,)], "set")
    assert not rows_match([(0.1 + 0.2,)], [(0.3,)], "set")  # BIRD does not round
    assert not rows_match([(1, 2)], [(2, 1)], "set")  # column order counts
    assert rows_match([(None,)], [(None,)], "set") and rows_match([], [], "set")
    assert not rows_match([], [(None,)], "set")


def test_multiset_mode_is_the_training_reward():
    assert not rows_match([(1,), (1,), (2,)], [(2,), (1,)], "multiset")  # duplicates count
    assert rows_match([(1,), (2,), (1,)], [(1,), (2,), (1,)][::-1], "multiset")
    assert rows_match([(0.1 + 0.2, "x")], [(0.3, "x")], "multiset")  # rounded to 6 places
    assert not rows_match([(0.3000011,)], [(0.3,)], "multiset")
    assert rows_match([(1, None)], [(1.0, None)], "multiset")
    assert not rows_match([("1",)], [(1,)], "multiset")


def test_order_by_detection():
    assert gold_has_order_by("SELECT a FROM t ORDER BY a DESC LIMIT 3")
    assert gold_has_order_by("WITH c AS (SELECT a FROM t) SELECT a FROM c ORDER BY a")
    assert gold_has_order_by("SELECT a FROM t UNION SELECT a FROM u ORDER BY 1")
    assert not gold_has_order_by("SELECT a FROM (SELECT a FROM t ORDER BY a) AS s")
    assert not gold_has_order_by("SELECT a FROM t WHERE a IN (SELECT a FROM t ORDER BY a LIMIT 2)")


def test_spider_mode_order_and_permutations():
    gold_ordered, gold_plain = "SELECT a, b FROM t ORDER BY a", "SELECT a, b FROM t"
    gold, pred_reordered = [(1, "x"), (1, "y"), (2, "z")], [(1, "y"), (1, "x"), (2, "z")]
    assert rows_match(pred_reordered, gold, "spider", gold_sql=gold_plain)
    assert not rows_match(pred_reordered, gold, "spider", gold_sql=gold_ordered)  # ties broken differently
    assert rows_match(gold, gold, "spider", gold_sql=gold_ordered)
    assert not rows_match([(1,), (1,), (2,)], [(1,), (2,), (2,)], "spider", gold_sql=gold_plain)
    swapped = [(b, a) for a, b in gold]
    assert not rows_match(swapped, gold, "spider", gold_sql=gold_plain)
    assert rows_match(swapped, gold, "spider", gold_sql=gold_plain, permute_columns=True)
    assert not rows_match([("x", 1), ("y", 1), ("q", 2)], gold, "spider", gold_sql=gold_plain, permute_columns=True)
    wide_gold = [tuple(range(i, i + 8)) for i in range(5)]
    wide_pred = [tuple(reversed(r)) for r in wide_gold]
    assert rows_match(wide_pred, wide_gold, "spider", gold_sql=gold_plain, permute_columns=True)
    assert rows_match([], [], "spider") and not rows_match([(None,)], [], "spider")
    with pytest.raises(ValueError, match="mode"):
        rows_match([], [], "exact")


# --------------------------------------------------------------------------- batches

def batch_items(db, broken_db):
    """Mixed verdicts: 3 golds x 8 preds plus a failing gold and a missing database."""
    items, expect = [], []
    for g in range(3):
        gold = f"SELECT a, count(*) FROM t WHERE id > {g * 100} AND a < 99 GROUP BY a"
        same = f"SELECT a, COUNT(id) FROM t WHERE {g * 100} < id AND a < 99 GROUP BY 1"
        for pred, ok in [(gold, True), (same, True), (same + " ORDER BY 2", True), (gold.replace("a < 99", "a < 6"), False),
                         ("SELECT nope FROM t", False), ("DELETE FROM t", False), (RUNAWAY_2COLS, False), (same, True)]:
            items.append((pred, gold, db))
            expect.append(ok)
    items += [("SELECT 1", "SELECT missing_col FROM t", db), ("SELECT 1", "SELECT 1", broken_db)]
    expect += [False, False]
    return items, expect


def test_a_prediction_that_cannot_match_the_golds_shape_is_not_run(db):
    gold = "SELECT a, count(*) FROM t WHERE a < 99 GROUP BY a"  # 2 columns, 7 rows
    items = [(RUNAWAY, gold, db), ("SELECT a FROM t", gold, db), (RUNAWAY_2COLS, gold, db),
             ("SELECT nope FROM t", gold, db),  # does not compile: execute() reports it
             (RUNAWAY, "SELECT a, a FROM t WHERE 0", db)]  # empty gold: any width may match, so it runs
    scores = score_batch(items * 4, timeout_s=0.5, workers=2, progress=False)
    got = [(s.pred_status, s.correct) for s in scores[:5]]
    assert got == [("wrong_shape", False), ("wrong_shape", False), ("timeout", False), ("error", False),
                   ("timeout", False)]
    assert "1 column(s)" in scores[0].pred_error and "2" not in scores[0].pred_error  # the gold's width is not told
    assert scores[0].pred_elapsed_s == 0.0 and scores[2].pred_elapsed_s >= 0.5
    assert [(s.pred_status, s.correct) for s in scores] == got * 4
    assert result_width(db, RUNAWAY) == 1 and result_width(db, "SELECT * FROM t") == 4
    assert result_width(db, "DELETE FROM t") is None and result_width(db, "SELECT 1; SELECT 2") is None


def test_a_timeout_counts_the_whole_budget_it_shared_with_a_shape_probe(db):
    # The budget began 0.3 s before the execution (a shape probe spent it): the runaway stops at the
    # shared deadline, and its elapsed time counts from the budget's start, never only its own share.
    started = time.monotonic()
    r = execute_here(db, RUNAWAY, timeout_s=0.5, deadline=started - 0.3 + 0.5)
    wall = time.monotonic() - started
    assert r.status == "timeout" and wall < 0.5 and r.elapsed_s >= 0.5  # stopped at the shared deadline
    assert wall + 0.3 - 0.05 < r.elapsed_s <= wall + 0.3


def test_score_batch_in_process_and_pool_agree(db, tmp_path):
    items, expect = batch_items(db, str(tmp_path / "absent.sqlite"))
    inline = score_batch(items[:15], timeout_s=0.3, progress=False, in_process=True)  # asked for explicitly
    pooled = score_batch(items, timeout_s=0.3, workers=2, progress=False)
    assert [s.correct for s in pooled] == expect
    assert [s.correct for s in inline] == expect[:15]
    assert [(s.pred_status, s.correct) for s in inline] == [(s.pred_status, s.correct) for s in pooled[:15]]
    statuses = [s.pred_status for s in pooled[:8]]
    assert statuses == ["ok", "ok", "ok", "ok", "error", "blocked", "timeout", "ok"]
    assert pooled.gold_failures == 2 and pooled.worker_deaths == 0
    failed = {(db_path, sql): status for db_path, sql, status, _ in pooled.failed_golds}
    assert failed[(db, "SELECT missing_col FROM t")] == "error"
    assert pooled[-1].gold_status == "error" and "absent.sqlite" in pooled[-1].gold_error
    assert pooled[-2].pred_status == "ok" and not pooled[-2].correct  # the pred ran, the gold did not


def test_score_batch_set_mode_ignores_duplicates(db):
    gold = "SELECT a FROM t WHERE a < 99"
    items = [("SELECT DISTINCT a FROM t WHERE a < 99", gold, db)] * 2
    assert [s.correct for s in score_batch(items, mode="set", progress=False)] == [True, True]
    assert [s.correct for s in score_batch(items, mode="multiset", progress=False)] == [False, False]


def _kill_when(kind_wanted, idx_wanted, sig, stop):
    """Send `sig` to the worker running triple `idx_wanted` (real process, real signal)."""
    while not stop.is_set():
        pool = executor._POOL
        for pid, (kind, idx) in (pool.busy_items() if pool else {}).items():
            if (kind, idx) == (kind_wanted, idx_wanted):
                time.sleep(0.05)
                os.kill(pid, sig)
                return
        time.sleep(0.01)


def _run_with_killer(items, kind, idx, sig, timeout_s):
    stop = threading.Event()
    killer = threading.Thread(target=_kill_when, args=(kind, idx, sig, stop), daemon=True)
    killer.start()
    start = time.monotonic()
    try:
        scores = score_batch(items, timeout_s=timeout_s, workers=2, progress=False)
    finally:
        stop.set()
        killer.join()
    return scores, time.monotonic() - start


def test_a_killed_worker_costs_only_its_triple(db):
    gold = "SELECT a, count(*) FROM t GROUP BY a"
    items = [(gold, gold, db)] * 6 + [(RUNAWAY_2COLS, gold, db)] + [(gold, gold, db)] * 6
    items += [(f"SELECT {i}", f"SELECT {i}", db) for i in range(12)]
    scores, wall = _run_with_killer(items, "pred", 6, signal.SIGKILL, timeout_s=20)
    assert scores.worker_deaths == 1 and wall < 15  # the 20 s query did not run out its clock
    assert scores[6].pred_status == "error" and scores[6].pred_error == "worker died"
    assert all(s.correct for i, s in enumerate(scores) if i != 6)
    assert score_batch(items[:20], workers=2, progress=False, timeout_s=0.2).worker_deaths == 0  # replaced


def test_a_worker_killed_on_the_gold_fails_that_gold_only(db):
    items = [("SELECT 1", RUNAWAY, db)] * 3 + [(f"SELECT {i}", f"SELECT {i}", db) for i in range(20)]
    scores, _ = _run_with_killer(items, "gold", 0, signal.SIGKILL, timeout_s=20)
    assert scores.gold_failures == 1 and "worker died" in scores.failed_golds[0][3]
    assert [(s.correct, s.pred_status, s.gold_status) for s in scores[:3]] == [(False, "ok", "error")] * 3
    assert all(s.correct for s in scores[3:])


def test_a_worker_that_died_while_idle_is_replaced_on_the_next_batch(db):
    items = [(f"SELECT {i}", f"SELECT {i}", db) for i in range(40)]
    assert all(s.correct for s in score_batch(items, workers=2, progress=False))
    victim = executor._POOL.workers[0].proc
    os.kill(victim.pid, signal.SIGKILL)
    victim.join(timeout=5)
    scores = score_batch(items, workers=2, progress=False)
    assert scores.worker_deaths == 1 and all(s.correct for s in scores)


def test_a_stopped_worker_is_killed_at_the_hard_deadline(db):
    """A stopped worker (SIGSTOP) never answers; the pool kills it once its SQL phase is past
    HARD_FACTOR x the deadline, and only that triple is lost (as a timeout)."""
    gold = "SELECT a FROM t"
    items = [(RUNAWAY, gold, db)] + [(f"SELECT {i}", f"SELECT {i}", db) for i in range(16)]
    scores, wall = _run_with_killer(items, "pred", 0, signal.SIGSTOP, timeout_s=1.0)
    assert scores.worker_deaths == 1
    assert scores[0].pred_status == "timeout" and "hard deadline" in scores[0].pred_error
    assert all(s.correct for s in scores[1:]) and wall < 20


# --------------------------------------------------------------------------- BIRD files and command

def test_bird_prediction_file_round_trip_and_errors(tmp_path):
    path = tmp_path / "predict_dev.json"
    write_bird_predictions(path, ["SELECT 1", "SELECT\n'a\tb'"], ["db_a", "db_b"])
    raw = json.loads(path.read_text())
    assert raw["0"] == "SELECT 1\t----- bird -----\tdb_a"
    assert read_bird_predictions(path) == {0: ("SELECT 1", "db_a"), 1: ("SELECT\n'a\tb'", "db_b")}
    path.write_text(json.dumps({"0": "SELECT 1", "1": "SELECT 2\t----- bird -----\tx"}))
    with pytest.raises(ValueError, match="entry '0'"):
        read_bird_predictions(path)
    with pytest.raises(ValueError, match="2 SQLs"):
        write_bird_predictions(path, ["a", "b"], ["x"])


def test_bird_command_prints_ex_by_difficulty(tmp_path, capsys):
    root = tmp_path / "dev_databases"
    (root / "shop").mkdir(parents=True)
    make_db(root / "shop" / "shop.sqlite", n_rows=50)
    gold = [{"question_id": i, "db_id": "shop", "SQL": sql, "difficulty": d} for i, (sql, d) in enumerate([
        ("SELECT count(*) FROM t", "simple"), ("SELECT max(a) FROM t WHERE a < 99", "simple"),
        ("SELECT b FROM t WHERE id = 3", "moderate"), ("SELECT g, count(*) FROM u GROUP BY g", "challenging")])]
    (tmp_path / "dev.json").write_text(json.dumps(gold))
    # right, wrong, right (rows duplicated: a set match), missing prediction
    write_bird_predictions(tmp_path / "predict_dev.json", ["SELECT COUNT(id) FROM t", "SELECT min(a) FROM t",
                                                           "SELECT b FROM t WHERE id IN (3, 3) UNION ALL SELECT 's2'"],
                           ["shop"] * 3)
    table = executor.main(["--pred", str(tmp_path / "predict_dev.json"), "--gold", str(tmp_path / "dev.json"),
                           "--db-root", str(root)])
    assert table == {"simple": (50.0, 2), "moderate": (100.0, 1), "challenging": (0.0, 1), "total": (50.0, 4)}
    out = capsys.readouterr().out
    assert "ACCURACY" in out and "missing predictions: 1" in out
