"""How `make test` runs the suite (Makefile: `pytest -n 2 --dist loadfile --no-loadscope-reorder`,
tests/conftest.py): its xdist workers, and every process their tests start, wait passively between OpenMP
sections, while a run in one process keeps OpenMP's default; the summary's calibration line comes once, from
the controller; the files conftest.LONGEST_FIRST hands out first exist."""
import json
import os
import subprocess
import sys

from repo_paths import ROOT


def _pytest(tmp_path, *args: str, calibrate: bool) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_") and k != "OMP_WAIT_POLICY"}
    env.update(ACESQL_PROBE_OUT=str(tmp_path), ACESQL_CALIBRATE="1" if calibrate else "0")
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args, "tests/xdist_probe.py"]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def test_make_tests_workers_wait_passively_and_one_process_keeps_the_default(tmp_path):
    done = _pytest(tmp_path, "-n", "1", "--dist", "loadfile", calibrate=True)  # one worker is enough to ask
    written = {p.stem: json.loads(p.read_text()) for p in tmp_path.glob("*.json")}
    assert len(written) == 1 and next(iter(written)).startswith("gw"), written  # ran in a worker
    assert next(iter(written.values())) == {"OMP_WAIT_POLICY": "PASSIVE"}
    assert done.stdout.count("test suite: ") == 1, done.stdout  # the controller's calibrated summary, once

    for p in tmp_path.glob("*.json"):
        p.unlink()
    _pytest(tmp_path, "-n", "0", calibrate=False)
    assert json.loads((tmp_path / "main.json").read_text()) == {"OMP_WAIT_POLICY": None}


def test_the_files_handed_out_first_exist():
    """conftest.LONGEST_FIRST names test files; a renamed one would silently fall back to pytest's order."""
    from conftest import LONGEST_FIRST

    assert LONGEST_FIRST and all((ROOT / "tests" / name).is_file() for name in LONGEST_FIRST)


def test_a_worker_takes_the_longest_files_first_and_keeps_every_other_files_order(monkeypatch):
    """conftest.pytest_collection_modifyitems on items of real paths (only `.path` is read): in a worker the
    LONGEST_FIRST files come first in that order, the rest keep their order; one process keeps pytest's order."""
    from types import SimpleNamespace

    from conftest import LONGEST_FIRST, pytest_collection_modifyitems

    names = ["test_config.py", LONGEST_FIRST[1], "test_executor.py", LONGEST_FIRST[0], "test_config.py", "test_pool.py"]
    items = [SimpleNamespace(path=ROOT / "tests" / n, i=i) for i, n in enumerate(names)]
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    alone = list(items)
    pytest_collection_modifyitems(None, alone)
    assert alone == items
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    pytest_collection_modifyitems(None, items)
    assert [it.i for it in items] == [3, 1, 0, 2, 4, 5]
