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
