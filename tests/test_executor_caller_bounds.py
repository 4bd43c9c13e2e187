"""What a prediction can make the caller hold: rows counted as the caller will hold them (a result
of 16,000,000 one-value rows is `too_large`, not a gigabyte in the caller), error messages cut to
MAX_ERROR_CHARS, and messages that state what the prediction did, never what the gold is."""
import json
import subprocess
import sys
import textwrap

import pytest

from acesql_lib.executor import execute, score_batch
from acesql_lib.executor.sandbox import HELD_ROW_BYTES, MAX_ERROR_CHARS, ResultReading
from helpers_db import sqlite_db
from repo_paths import ROOT as REPO

MANY_TINY_ROWS = ("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 16000000) "
                  "SELECT 1 FROM c")


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    rows = ", ".join(f"({i}, 'v{i}')" for i in range(20))
    return str(sqlite_db(tmp_path_factory.mktemp("bounds") / "b.sqlite",
                         f"CREATE TABLE t (a INTEGER, b TEXT); INSERT INTO t VALUES {rows};"))


def test_sixteen_million_tiny_rows_never_reach_the_caller(db):
    """Measured in a fresh process: its peak resident memory stays far below what the whole result
    would cost it (about 1 GB as Python rows), and the verdict says the result was too large."""
    child = textwrap.dedent(f"""
        import json, resource, sys
        sys.path.insert(0, {str(REPO)!r})
        from acesql_lib.executor import execute
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        r = execute({db!r}, {MANY_TINY_ROWS!r}, timeout_s=120, max_rows=0)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        print(json.dumps({{"status": r.status, "rows": len(r.rows), "error": r.error, "before": before,
                          "peak": peak}}))
    """)
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=300, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["status"] == "too_large" and got["rows"] == 0, got
    assert "as the caller would hold it" in got["error"]
    whole = 16_000_000 * HELD_ROW_BYTES  # the least the whole result would cost the caller
    assert got["peak"] - got["before"] < whole / 8, got


def test_the_byte_cap_counts_rows_as_the_caller_holds_them(db):
    """One row more than a 1 MB cap allows at HELD_ROW_BYTES + a value's cost is too_large, one row
    fewer is ok; the same rows scored in a worker (never sent back) are counted by their values alone and compared."""
    cap = 1_000_000
    n = cap // (HELD_ROW_BYTES + 32) + 1
    many = f"WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < {n}) SELECT 1 FROM c"
    assert execute(db, many, timeout_s=60, max_rows=0, max_result_bytes=cap).status == "too_large"
    assert execute(db, many.replace(f"< {n}", f"< {n - 1}"), timeout_s=60, max_rows=0, max_result_bytes=cap).rows \
        == [(1,)] * (n - 1)
    scored = score_batch([(many, many.replace("SELECT 1 FROM c", "SELECT 1 FROM c WHERE 1"), db)], mode="multiset",
                         timeout_s=60, reading=ResultReading(max_rows=0, max_result_bytes=cap), workers=1,
                         progress=False)
    assert scored[0].correct


def test_an_error_message_is_cut_to_its_documented_length(db):
    sql = f"SELECT {'x' * 1_900_000} FROM t"
    r = execute(db, sql, timeout_s=10)
    assert r.status == "error" and "no such column" in r.error
    assert len(r.error) <= MAX_ERROR_CHARS + 60 and "1900000" not in r.error and "characters]" in r.error
    s = score_batch([(sql, "SELECT a FROM t", db)], workers=1, progress=False)[0]
    assert s.pred_status == "error" and len(s.pred_error) <= MAX_ERROR_CHARS + 60


def test_a_wrong_shape_message_names_the_predictions_width_only(db):
    s = score_batch([("SELECT a, b, a FROM t", "SELECT a, b FROM t", db)], workers=1, progress=False)[0]
    assert s.pred_status == "wrong_shape" and s.pred_error.startswith("returns 3 column(s)")
    assert "2" not in s.pred_error
