"""Executor verdicts under attack: a prediction cannot learn the gold, no call hangs,
one deadline covers the whole verdict, and statements are refused by their parsed kind. Each class
checks the database is unchanged where it runs SQL."""
import hashlib
import itertools
import os
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from acesql_lib import executor
from acesql_lib.executor import authorizer, compare, connections, score_batch, tasks
from acesql_lib.executor.connections import open_readonly
from acesql_lib.executor.sandbox import ResultReading, execute_here
from acesql_lib.executor.tasks import _run_task, _Task
from repo_paths import ROOT as REPO

SECRET = "gold-secret-7731"
GOLD = f"SELECT a FROM t WHERE a = '{SECRET}'"


def sha(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    """A database without indexes: an AUTOINCREMENT table (so sqlite_sequence exists) and a view."""
    path = tmp_path_factory.mktemp("verdicts") / "db.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE t (id INTEGER PRIMARY KEY AUTOINCREMENT, a TEXT, n INTEGER)")
    con.executemany("INSERT INTO t (a, n) VALUES (?, ?)", [(SECRET, 1)] + [(f"v{i}", i) for i in range(50)])
    con.execute("CREATE VIEW v AS SELECT a, n FROM t WHERE n > 10")
    con.commit()
    con.close()
    return str(path)


def task(db, gold, preds, **kw) -> _Task:
    args = dict(mode="multiset", permute_columns=False, order_matters=False, timeout_s=5.0,
                reading=ResultReading(max_rows=0))
    args.update(kw)
    return _Task(db, gold, list(enumerate(preds)), **args)


# --------------------------------------------------------------------------- prediction learns the gold

class TestPredictionLearnsTheGold:
    def test_the_gold_is_never_on_the_predictions_connection(self, db):
        """Statement lists: sqlite_stmt shows the prepared statements of the connection that reads
        it, so the gold must not be prepared on the connection predictions run on."""
        tasks._GOLD_CACHE.clear()  # the gold really runs here
        list(_run_task(task(db, GOLD, ["SELECT count(*) FROM t", "SELECT a FROM t WHERE n = 3"])))
        conn = connections.cached_connection(db)  # the connection a prediction gets
        with conn.guard.lock:
            conn.set_authorizer(None)  # a trusted look at what the connection holds
            try:
                prepared = [sql for (sql,) in conn.execute("SELECT sql FROM sqlite_stmt")]
            finally:
                conn.set_authorizer(conn.guard.authorize)
        assert any("n = 3" in s for s in prepared), prepared  # the list is real: the prediction is there
        assert not any(SECRET in s for s in prepared), prepared

    @pytest.mark.parametrize("sql", [
        "SELECT substr(sql, instr(sql, '''') + 1, 16) FROM sqlite_stmt WHERE sql LIKE '%secret%'",
        "SELECT count(*) FROM sqlite_stmt",
        "SELECT * FROM dbstat", "SELECT count(*) FROM dbstat",
        "SELECT * FROM sqlite_temp_master", "SELECT count(*) FROM sqlite_temp_schema",
        "SELECT * FROM temp.sqlite_master", "SELECT count(*) FROM temp.sqlite_master",
        "SELECT * FROM pragma_compile_options", "SELECT * FROM pragma_data_version",
        "SELECT * FROM pragma_module_list", "SELECT * FROM pragma_function_list"])
    def test_reads_of_connection_state_score_zero_and_show_nothing(self, db, sql):
        before = sha(db)
        scores = score_batch([(GOLD, GOLD, db), (sql, GOLD, db)], workers=1, progress=False, timeout_s=5)
        assert scores[0].correct and not scores[1].correct
        assert scores[1].pred_status == "blocked", scores[1]
        assert SECRET not in scores[1].pred_error
        assert sha(db) == before

    @pytest.mark.parametrize("name", ["sqlite_dbpage", "sqlite_dbdata", "sqlite_dbptr", "sqlite_memstat",
                                      "generate_series", "carray", "zipfile", "fsdir", "swarmvtab",
                                      "completion", "pragma_stats", "pragma_cache_size", "nosuch_vtab"])
    def test_a_read_outside_the_databases_schema_is_refused_whatever_the_build_holds(self, db, name):
        """An eponymous virtual table this SQLite build may not have (so no SQL can name it here)
        is refused by the authorizer because it is not in the schema, not because it is on a list.
        (SQLite names the schema "main" for a column read, and none for count(*) of a whole table,
        as for a CTE's reference to itself: then a module this build registers is refused.)"""
        guard = open_readonly(db).guard
        assert guard.authorize(sqlite3.SQLITE_READ, name, "c", "main", None) == sqlite3.SQLITE_DENY
        assert guard.authorize(sqlite3.SQLITE_READ, "t", "a", "main", None) == sqlite3.SQLITE_OK
        other_build = authorizer._Guard(frozenset({"t"}), frozenset({name}))
        assert other_build.authorize(sqlite3.SQLITE_READ, name, "", None, None) == sqlite3.SQLITE_DENY
        assert other_build.authorize(sqlite3.SQLITE_READ, "t", "", None, None) == sqlite3.SQLITE_OK

    @pytest.mark.parametrize("sql, rows", [
        ("SELECT name, seq FROM sqlite_sequence", [("t", 51)]),  # a table of the file (AUTOINCREMENT)
        ("SELECT count(*) FROM v", [(39,)]),
        ("SELECT count(*) FROM t", [(51,)]),
        ("SELECT type, name FROM sqlite_master WHERE name = 'v'", [("view", "v")]),
        ("SELECT value FROM json_each('[1, 2]')", [(1,), (2,)]),
        ("SELECT count(*) FROM json_tree('{\"a\": [1]}')", [(3,)]),
        ("SELECT name FROM pragma_table_info('t') WHERE pk", [("id",)]),
        ("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 3) SELECT count(*) FROM c", [(3,)]),
        ("WITH s AS (SELECT n FROM t) SELECT max(n) FROM s", [(49,)]),
    ])
    def test_ordinary_sql_on_the_schema_still_runs(self, db, sql, rows):
        r = execute_here(db, sql)
        assert (r.status, r.rows) == ("ok", rows), r

    def test_a_slow_gold_takes_nothing_from_the_predictions_deadline(self, db):
        """Timing: a prediction's deadline and reported time are its own, whatever the gold cost. The gold
        costs 3 units of work, the prediction 1, the deadline is 3.5: charged with the gold, the prediction
        would have half a unit left and time out; alone it has 3.5x its need (room for a machine that slows
        down after the unit is measured). Its reported time is a fraction of the call's."""
        slow = ("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < {n}) "
                "SELECT count(*) FROM c")
        conn = sqlite3.connect(":memory:")
        n = 200_000
        start = time.perf_counter()
        conn.execute(slow.format(n=n)).fetchall()
        unit_s = 0.4
        n = int(n * unit_s / max(time.perf_counter() - start, 1e-3))  # about 0.4 s of work
        gold, pred = slow.format(n=3 * n), slow.format(n=n)
        start = time.perf_counter()
        scores = score_batch([(pred, gold, db)], workers=1, progress=False, timeout_s=3.5 * unit_s)
        wall = time.perf_counter() - start
        assert scores[0].pred_status == "ok", scores[0]
        assert scores[0].pred_elapsed_s < 0.5 * wall, (scores[0], wall)  # the gold's time is not in it

    def test_no_error_returned_for_a_prediction_echoes_the_gold(self, db):
        """Errors that echo SQL: what a prediction gets back (status, error) never carries the gold's
        text, whether the prediction fails or the gold does."""
        preds = ["SELEC a FROM t", "SELECT nosuch FROM t", "SELECT a, n FROM t", "SELECT load_extension('x')",
                 "SELECT sql FROM sqlite_stmt", "REINDEX", "SELECT zeroblob(200000000)",
                 "SELECT a FROM t; SELECT 1", "SELECT a FROM t WHERE a = 'v1'"]
        broken_gold = f"SELECT a FROM t WHERE zz_{SECRET.replace('-', '_')} = 1"
        for gold in (GOLD, broken_gold):
            scores = score_batch([(p, gold, db) for p in preds], workers=1, progress=False, timeout_s=5)
            for p, s in zip(preds, scores):
                assert SECRET not in s.pred_error and SECRET.replace("-", "_") not in s.pred_error, (p, s)
                assert gold not in s.pred_error, (p, s)
        assert SECRET.replace("-", "_") in scores[0].gold_error  # the caller, not the prediction, sees it


# --------------------------------------------------------------------------- no call hangs

SCRIPT = """
import sys
sys.path.insert(0, {repo!r})
with open({marker!r}, "a") as f:  # each process that runs this script's top level leaves a line
    f.write("ran\\n")
from acesql_lib.executor import execute, score_batch
{body}
"""


def run_script(tmp_path, body: str, guard: bool, as_module: bool = False, timeout_s: float = 90):
    """`body` in a caller script (`python caller_script.py`, or `python -m caller_script`); returns the process,
    its wall time and how many processes ran the script's top level."""
    code = f"r = {body}\nprint('RESULT', r)"
    if guard:
        code = 'if __name__ == "__main__":\n' + textwrap.indent(code, "    ")
    path, marker = tmp_path / "caller_script.py", tmp_path / "top_level_runs.txt"
    path.write_text(SCRIPT.format(repo=str(REPO), marker=str(marker), body=code))
    command = [sys.executable, "-m", "caller_script"] if as_module else [sys.executable, str(path)]
    start = time.monotonic()
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s,
                              cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)})
    except subprocess.TimeoutExpired:
        pytest.fail(f"the script did not end within {timeout_s} s (the call hangs)")
    runs = marker.read_text().count("ran") if marker.exists() else 0
    return proc, time.monotonic() - start, runs


def _die_at_start(*_args) -> None:
    """A worker target that exits before it runs anything (imported by the child from this module)."""
    os._exit(3)


BODIES = ["execute({db!r}, 'SELECT 1').status",
          "score_batch([('SELECT 1', 'SELECT 1', {db!r})] * 8, progress=False, workers=2)[0].correct"]


class TestNoCallHangs:
    @pytest.mark.parametrize("body", BODIES)
    def test_a_script_without_the_main_guard_runs_its_call(self, db, tmp_path, body):
        """Workers import the executor only, never the calling script: no guard needed, nothing respawned."""
        proc, wall, runs = run_script(tmp_path, body.format(db=db), guard=False)
        assert proc.returncode == 0 and "RESULT" in proc.stdout, proc.stderr[-2000:]
        assert proc.stdout.split("RESULT ")[1].split()[0] in ("ok", "True"), proc.stdout
        assert runs == 1 and wall < 30, (runs, wall)

    @pytest.mark.parametrize("as_module", [False, True])
    @pytest.mark.parametrize("body", BODIES)
    def test_workers_never_run_the_callers_main_module(self, db, tmp_path, body, as_module):
        """A script or a `python -m` module (`python -m acesql_lib.train.grpo_run`: torch and transformers) runs in
        its own process only; the executor's workers start without it (before: once more in each worker)."""
        proc, _, runs = run_script(tmp_path, body.format(db=db), guard=True, as_module=as_module)
        assert proc.returncode == 0 and "RESULT" in proc.stdout, proc.stderr[-2000:]
        assert runs == 1, f"the caller's top level ran in {runs} processes"

    def test_workers_that_die_at_start_stop_the_call_naming_it(self, db, monkeypatch):
        from acesql_lib.executor import pools, workers

        monkeypatch.setattr(workers, "_worker_main", _die_at_start)
        pool = pools._Pool(1)
        try:
            start = time.monotonic()
            with pytest.raises(pools.WorkerStartupError, match="died at start-up"):
                pool.run([_Task(str(db), "SELECT 1", [(0, "SELECT 1")], "multiset", permute_columns=True,
                                order_matters=False, timeout_s=5.0, reading=ResultReading(max_rows=10))],
                         lambda *a: None, lambda *a: None)
            assert time.monotonic() - start < 30
        finally:
            pool.shutdown()


# --------------------------------------------------------------------------- one deadline for the verdict

def _pgl25() -> tuple[list[tuple], list[tuple]]:
    """PGL(2,5) acting on the 6 points of the projective line over F5 (sharply 3-transitive, so every
    projection on 3 columns is the same bag for it and for a relabelled copy), and that copy with
    the values 0 and 1 swapped: no order of columns maps one onto the other (PGL(2,5) is its own
    normalizer in S6), yet a column search must go 4 columns deep on every branch to see it."""
    def mob(a, b, c, d, z):
        if z == 5:
            return 5 if c == 0 else a * pow(c, -1, 5) % 5
        den = (c * z + d) % 5
        return 5 if den == 0 else (a * z + b) * pow(den, -1, 5) % 5
    group = sorted({tuple(mob(a, b, c, d, z) for z in range(6))
                    for a, b, c, d in itertools.product(range(5), repeat=4) if (a * d - b * c) % 5})
    swap = {0: 1, 1: 0}
    return group, sorted(tuple(swap.get(v, v) for v in r) for r in group)


def _values_sql(rows: list[tuple], repeat: int) -> str:
    values = ", ".join("(" + ", ".join(map(str, r)) + ")" for r in rows)
    return (f"WITH r(a, b, c, d, e, f) AS (VALUES {values}), k(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM k "
            f"WHERE x < {repeat}) SELECT a, b, c, d, e, f FROM r, k")


class TestOneDeadlineForTheVerdict:
    def test_the_pgl_construction_is_what_it_claims(self):
        gold, pred = _pgl25()
        assert len(gold) == 120 and len(set(gold)) == 120
        assert not compare.rows_match(pred, gold, "spider", permute_columns=True, order_matters=False)
        # a plain column permutation of it is found
        assert compare.rows_match([(r[3], r[0], r[5], r[1], r[4], r[2]) for r in gold], gold, "spider",
                                  permute_columns=True, order_matters=False)

    def test_a_comparison_past_the_deadline_raises(self):
        gold, pred = _pgl25()
        with pytest.raises(compare.ComparisonTimeout):
            compare.rows_match(pred * 50, gold * 50, "spider", permute_columns=True, order_matters=False,
                               deadline=time.monotonic() - 1)

    def test_the_permutation_search_is_bounded_by_a_budget(self, monkeypatch):
        gold, pred = _pgl25()
        monkeypatch.setattr(compare, "MAX_PERMUTATION_NODES", 10)
        with pytest.raises(compare.ComparisonTimeout, match="10 candidates"):
            compare.rows_match(pred, gold, "spider", permute_columns=True, order_matters=False)

    def test_a_long_permutation_search_ends_as_timeout_within_the_bound(self, db):
        """Execution takes milliseconds, the search seconds: the verdict is `timeout` within the
        prediction's hard bound, not an `error` from the backstop at 2 x deadline + 5 s."""
        gold_rows, pred_rows = _pgl25()
        gold, pred = _values_sql(gold_rows, 500), _values_sql(pred_rows, 500)
        deadline = 1.0
        start = time.monotonic()
        scores = score_batch([(pred, gold, db)], mode="spider", permute_columns=True, workers=1, progress=False,
                             timeout_s=deadline, reading=ResultReading(max_rows=0))
        wall = time.monotonic() - start
        assert scores.gold_failures == 0
        assert scores[0].pred_status == "timeout" and not scores[0].correct, scores[0]
        assert wall < executor.HARD_FACTOR * deadline + executor.HARD_MARGIN_S + 2.5, wall  # + gold, start-up

    @pytest.mark.parametrize("gold, pred", [
        # 1 row, width 12, equal values but one: a search over orders of 11 equal columns
        ("SELECT " + ", ".join(["1"] * 11 + ["2"]), "SELECT " + ", ".join(["1"] * 11 + ["3"])),
        # width 6 over 100,000 rows, every column the same multiset, no order of columns matching
        ("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 100000) "
         "SELECT x % 2, x % 2, x % 2, x % 2, x % 2, x % 2 FROM c",
         "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 100000) "
         "SELECT x % 2, (x + 1) % 2, x % 2, (x + 1) % 2, x % 2, (x + 1) % 2 FROM c"),
    ])
    def test_explosive_permutation_searches_are_pruned_before_any_order_is_tried(self, db, gold, pred):
        start = time.monotonic()
        scores = score_batch([(pred, gold, db), (gold, gold, db)], mode="spider", permute_columns=True,
                             workers=1, progress=False, timeout_s=2.0, reading=ResultReading(max_rows=0))
        assert [(s.pred_status, s.correct) for s in scores] == [("ok", False), ("ok", True)], list(scores)
        assert time.monotonic() - start < 4.0


# --------------------------------------------------------------------------- refusal by the parsed statement

PREFIXES = ["", ";", "; ;", "\ufeff", "\ufeff;", ";\ufeff", "/* c */", "-- c\n", "/* a */ -- b\n ; /* c */",
            "\t\n\r\f\v ", "\u00a0", "\u2003", "\u2028", "\u3000", "\u200b", "\u2060", "\u200b\ufeff ;\u00a0",
            "\n;\t/**/\ufeff--x\n\u3000"]
NOT_READS = ["REINDEX", "REINDEX t", "ANALYZE", "ANALYZE t", "ANALYZE main", "VACUUM", "VACUUM main",
             "VACUUM INTO '{tmp}/copy.sqlite'", "ATTACH DATABASE '{tmp}/other.sqlite' AS o", "DETACH main",
             "PRAGMA query_only = 0", "PRAGMA journal_mode = WAL", "PRAGMA user_version = 7",
             "PRAGMA writable_schema = ON", "PRAGMA main.cache_size = 10", "PRAGMA optimize", "PRAGMA wal_checkpoint",
             "PRAGMA compile_options", "BEGIN", "BEGIN IMMEDIATE", "COMMIT", "END", "ROLLBACK", "SAVEPOINT s",
             "RELEASE s", "INSERT INTO t (a) VALUES ('x')", "REPLACE INTO t (a) VALUES ('x')", "UPDATE t SET n = 0",
             "DELETE FROM t", "CREATE TABLE x (a)", "CREATE TEMP TABLE x (a)", "CREATE INDEX ix ON t (n)",
             "DROP TABLE t", "DROP VIEW v", "ALTER TABLE t RENAME TO u", "EXPLAIN REINDEX", "EXPLAIN ANALYZE",
             "EXPLAIN QUERY PLAN VACUUM", "explain query plan reindex t",
             "WITH c AS (SELECT 1) DELETE FROM t", "WITH c(x) AS (SELECT 1) INSERT INTO t (a) SELECT x FROM c"]


class TestRefusalByTheParsedStatement:
    @pytest.mark.parametrize("stmt", NOT_READS)
    def test_a_statement_that_is_not_a_read_is_refused_behind_any_prefix(self, db, tmp_path, stmt):
        before = sha(db)
        stmt = stmt.format(tmp=tmp_path)
        for prefix in PREFIXES:
            r = execute_here(db, prefix + stmt)
            assert r.status == "blocked", (prefix, stmt, r)
        assert sha(db) == before
        assert sorted(os.listdir(tmp_path)) == []  # VACUUM INTO / ATTACH wrote nothing
        assert execute_here(db, "SELECT count(*) FROM t").rows == [(51,)]

    @pytest.mark.parametrize("prefix", ["", ";", "\ufeff", "/* c */", "-- c\n", "\t\n\r\f ", ";\ufeff /**/"])
    @pytest.mark.parametrize("sql, rows", [
        ("SELECT count(*) FROM t", [(51,)]), ("VALUES (1)", [(1,)]),
        ("WITH c(x) AS (SELECT 2) SELECT x FROM c", [(2,)]),
        ("WITH replace AS (SELECT 3) SELECT * FROM replace", [(3,)]),
        ("WITH a(x) AS (SELECT 4), b AS MATERIALIZED (SELECT x FROM a) SELECT * FROM b", [(4,)]),
        ("select(5)", [(5,)])])
    def test_reads_behind_the_same_prefixes_still_run(self, db, prefix, sql, rows):
        r = execute_here(db, prefix + sql)
        assert (r.status, r.rows) == ("ok", rows), (prefix, r)

    def test_schema_pragmas_and_explained_reads_still_run(self, db):
        assert execute_here(db, "PRAGMA table_info(t)").rows[1][1] == "a"
        assert execute_here(db, ";\ufeff PRAGMA main.table_info(t)").status == "ok"
        assert execute_here(db, "EXPLAIN QUERY PLAN SELECT * FROM t WHERE n = 1").status == "ok"
