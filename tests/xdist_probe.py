"""Run by test_suite_workers.py as `pytest tests/xdist_probe.py` (named on the command line, never collected
by `make test`): writes the OpenMP wait policy this test's process was started with, as <worker>.json
(gw0, gw1, ... under pytest-xdist; main.json without it) in the folder ACESQL_PROBE_OUT names."""
import json
import os
from pathlib import Path


def test_write_the_settings_this_process_was_started_with():
    name = os.environ.get("PYTEST_XDIST_WORKER", "main")
    (Path(os.environ["ACESQL_PROBE_OUT"]) / f"{name}.json").write_text(
        json.dumps({"OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY")}))
