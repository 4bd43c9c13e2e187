"""Settings every test runs under, the suite's timing summary, and the fixtures several test modules share.
Shared helpers that are not fixtures live in tests/helpers_*.py, the paths in tests/repo_paths.py: no test
module imports another."""
import os
import time

import pytest

from helpers_bird import write_bird_dev

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("MPLBACKEND", "Agg")

_CALIBRATION: dict[str, float] = {}


@pytest.fixture(scope="session")
def rl_template(tmp_path_factory):
    """The small RL run (models/sft, the pool, the RL questions over a tiny world; tests/rl_setup.py),
    built once per session for test_grpo, test_grpo_vllm, test_launches and test_gpu. Read only: a test
    trains in a copy (helpers_rl.fresh_run)."""
    from rl_setup import build_rl_run

    return build_rl_run(tmp_path_factory.mktemp("rl"))


@pytest.fixture(scope="session")
def small_world(tmp_path_factory):
    """A tiny world (seed 0; 60 training questions, 20 dev) for the tests that read one: test_datasets,
    test_distill, test_rehearsal's layouts. Read only."""
    from acesql_lib.data.tinyworld import build_tinyworld

    return build_tinyworld(tmp_path_factory.mktemp("small_world") / "world", seed=0, n_train=60, n_dev=20)


@pytest.fixture(scope="session")
def tiny_profile_world(tmp_path_factory):
    """The tiny profile's world (configs/tiny.yaml's data block: 3,000 training questions, both dev splits; about
    5 s to build), built once per session for test_tinyworld, test_tinybase_prebuilt and the tiny smoke run, which
    copies it into its own folder. Read only."""
    from acesql_lib.config.profiles import load_config
    from acesql_lib.data.tinyworld import build_profile_world

    return build_profile_world(load_config("tiny").data, tmp_path_factory.mktemp("tiny_world") / "world")


@pytest.fixture(scope="module")
def bird_dir(tmp_path_factory):
    """A BIRD-layout dev set over a real SQLite database: dev.json (helpers_bird.QUESTIONS) +
    dev_databases/concerts/concerts.sqlite (test_evaluate, test_two_pass)."""
    return write_bird_dev(tmp_path_factory.mktemp("bird"))


# The longest test files (about 50-160 s each in one process), handed to the xdist workers first: the files
# left for the end are then short ones, and the two workers finish within seconds of each other instead of one
# waiting while the other runs a pipeline. A name missing here only costs balance, never a test.
LONGEST_FIRST = ("test_pipeline_smoke.py", "test_pipeline_rehearsal.py", "test_grpo.py", "test_launches.py",
                 "test_grpo_vllm.py", "test_vllm_parity.py", "test_gpu_env.py", "test_memory.py", "test_sft.py")


def pytest_collection_modifyitems(config, items):
    """In an xdist worker (each collects the whole suite, in the same order), the files of LONGEST_FIRST come
    first, in that order; every other file keeps its place after them. A run in one process keeps pytest's order."""
    if "PYTEST_XDIST_WORKER" in os.environ:
        rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
        items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: a file's tests keep their order


def _distributing(config) -> bool:
    """True in the pytest-xdist controller that hands the tests to worker processes (`make test`: -n 2)."""
    return getattr(config.option, "dist", "no") != "no" and "PYTEST_XDIST_WORKER" not in os.environ


def pytest_sessionstart(session):
    """The calibration workload before the tests (acesql_lib/runtime/calibration.py): the summary gives the suite's
    time in its units too, which compare across days where seconds do not. ACESQL_CALIBRATE=0 leaves it out.
    Measured once, by the process that prints the summary (never by an xdist worker), before any worker starts.

    Then, in an xdist controller, the workers it is about to start are told to wait passively
    (OMP_WAIT_POLICY=PASSIVE, inherited by every process a test starts): two workers of torch's two threads
    share two cores, and OpenMP's default spin-waiting between parallel sections burns the core the other
    worker needs. The controller's own OpenMP runtime
    has read its settings when the calibration imported torch, so the calibration keeps the default policy
    it has in `make reproduce` and benchmarks/pipeline_time.py."""
    worker = "PYTEST_XDIST_WORKER" in os.environ
    if os.environ.get("ACESQL_CALIBRATE", "1") != "0" and not worker:
        from acesql_lib.runtime.calibration import measure

        _CALIBRATION.update(start=measure().seconds, t0=time.time())
    if _distributing(session.config):
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def pytest_terminal_summary(terminalreporter):
    """The suite's wall time beside the calibration workload's (before and after), and an explicit vLLM
    opt-out (tests/vllm_env.py) said out loud, not hidden in `-q`'s count."""
    if _CALIBRATION:
        from acesql_lib.runtime.calibration import measure

        wall, end = time.time() - _CALIBRATION["t0"], measure().seconds
        unit = (_CALIBRATION["start"] + end) / 2
        terminalreporter.write_line(f"test suite: {wall:.0f} s = {wall / unit:.0f} x calibration ({unit:.2f} s: "
                                    f"{_CALIBRATION['start']:.2f} s before, {end:.2f} s after; "
                                    "python -m acesql_lib.runtime.calibration)")
    reason = os.environ.get("ACESQL_SKIP_VLLM", "").strip()
    skipped = [r for r in terminalreporter.stats.get("skipped", []) if "ACESQL_SKIP_VLLM" in str(r.longrepr)]
    if reason not in ("", "0") and skipped:
        terminalreporter.write_line(f"ACESQL_SKIP_VLLM={reason!r}: {len(skipped)} vLLM test(s) skipped on "
                                    "request; the vLLM engine (weight sync, GRPO rollouts, the rehearsal smoke run) was not checked")
