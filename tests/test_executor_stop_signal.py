"""A stop signal to the executor's owner: torchrun stops a rank by sending SIGTERM to the rank's whole process
group, which holds the executor's forkserver and workers too. The rank handles the stop (GRPO finishes or gives
up its step and saves); its SQL must come back whole, with the right verdicts and no worker lost."""
from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from repo_paths import ROOT

OWNER = r'''
import json, signal, sys, time
from acesql_lib.executor import score_batch
stops = []
signal.signal(signal.SIGTERM, lambda *_: stops.append(1))  # as GRPO's handler: note the stop, go on
q = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < {}) SELECT count(*) FROM c"
items = [(q.format(1_500_000 + i), q.format(1_500_000 + i), sys.argv[1]) for i in range(10)]  # seconds of SQL
items += [("SELECT 1", "SELECT 2", sys.argv[1])]  # one wrong answer: verdicts are computed, not defaulted
print("start", flush=True)
scores = score_batch(items, workers=2, progress=False)
during = bool(stops)  # the stop came while the pool started or ran SQL (else the test proves nothing)
deadline = time.monotonic() + 60
while not stops and time.monotonic() < deadline:  # never end before the signal: at exit Python drops handlers
    time.sleep(0.05)
print(json.dumps({"stopped_during_sql": during, "correct": [s.correct for s in scores],
                  "deaths": scores.worker_deaths}))
'''


@pytest.mark.parametrize("delay_s", [0.0, 0.6], ids=["while-the-pool-starts", "while-sql-runs"])
def test_a_sigterm_to_the_owners_process_group_leaves_its_sql_whole(tmp_path, delay_s):
    db = tmp_path / "db.sqlite"
    sqlite3.connect(db).execute("CREATE TABLE t (x)").connection.close()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    owner = subprocess.Popen([sys.executable, "-c", OWNER, str(db)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, start_new_session=True, env=env)  # its own group, as torchrun starts a rank
    assert owner.stdout.readline().strip() == "start"
    time.sleep(delay_s)
    os.killpg(owner.pid, signal.SIGTERM)  # what torchrun's shutdown sends
    try:
        out, err = owner.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(owner.pid, signal.SIGKILL)
        out, err = owner.communicate()
        pytest.fail(f"the owner did not finish within 300 s of the SIGTERM: {err[-3000:]}")
    assert owner.returncode == 0, err[-3000:]
    result = json.loads(out.strip().splitlines()[-1])
    assert result == {"stopped_during_sql": True, "correct": [True] * 10 + [False], "deaths": 0}, err[-3000:]
