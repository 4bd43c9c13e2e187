"""Jobs in worker processes (acesql_lib/runtime/workers.py): results in order, each worker at this process's torch
thread count with passive OpenMP waits, a failure named with its log, the other workers stopped."""
from __future__ import annotations

import os
import time

import pytest
import torch

from acesql_lib.runtime.workers import Job, call, run_jobs

PROBE = "acesql_lib.runtime.workers:probe"


@pytest.fixture
def one_thread():
    """This process at one torch thread (not torch's default here), so a worker at the default would show."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_results_come_back_in_job_order_from_other_processes_at_this_thread_count(tmp_path, one_thread):
    jobs = [Job(f"probe {i}", PROBE, tmp_path / f"p{i}.log", {"value": i, "sleep_s": 0.5 * (3 - i)}) for i in range(3)]
    out = run_jobs(jobs, workers=2, progress=False)
    assert [r["value"] for r in out] == [0, 1, 2]  # job 0 sleeps longest and finishes last
    pids = [r["pid"] for r in out]
    assert os.getpid() not in pids and len(set(pids)) == 2  # two workers; the first to finish took job 2
    assert pids[2] == pids[1] != pids[0]  # job 1 (1 s) ended before job 0 (1.5 s)
    assert {r["threads"] for r in out} == {1} and {r["wait_policy"] for r in out} == {"PASSIVE"}
    assert {r["decode_threads"] for r in out} == {"1"}  # two workers share this process's one thread: one each
    assert not list(tmp_path.glob("*.job")) and not list(tmp_path.glob("*.result"))  # logs stay, nothing else
    for i, r in enumerate(out):  # each job's output in its own log, also for a worker's second job
        log = (tmp_path / f"p{i}.log").read_text()
        assert f"probe {i} in process {r['pid']}" in log and all(f"probe {j} " not in log for j in range(3) if j != i)


def test_a_failed_job_names_itself_and_its_log_and_stops_the_others(tmp_path):
    jobs = [Job("slow", PROBE, tmp_path / "slow.log", {"value": "slow", "sleep_s": 60}),
            Job("broken", PROBE, tmp_path / "broken.log", {"value": "b", "fail": True})]
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=r"job 'broken' failed \(exit 1\).*broken\.log") as err:
        run_jobs(jobs, workers=2, progress=False)
    assert "probe asked to fail on 'b'" in str(err.value)  # the log's tail: the worker's traceback
    assert time.monotonic() - start < 30  # the slow worker was stopped, not waited for


def test_a_job_failing_in_a_workers_second_job_is_named_with_its_own_log(tmp_path):
    jobs = [Job("first", PROBE, tmp_path / "first.log", {"value": "first"}),
            Job("second", PROBE, tmp_path / "second.log", {"value": "second", "fail": True})]
    with pytest.raises(RuntimeError, match=r"job 'second' failed \(exit 1\).*second\.log") as err:
        run_jobs(jobs, workers=1, progress=False)
    assert "probe asked to fail on 'second'" in str(err.value) and "'first'" not in str(err.value)
    assert "probe 'first'" in (tmp_path / "first.log").read_text()


def test_a_worker_runs_only_the_kits_functions():
    with pytest.raises(ValueError, match="only the kit's functions"):
        call("os:system", {"command": "true"})


def test_workers_decode_at_their_share_of_the_threads_and_a_lone_worker_at_the_process_count(tmp_path):
    before = torch.get_num_threads()
    torch.set_num_threads(4)
    try:
        two = run_jobs([Job(f"p{i}", PROBE, tmp_path / f"two{i}.log", {"value": i}) for i in range(2)], workers=2,
                       progress=False)
        one = run_jobs([Job(f"p{i}", PROBE, tmp_path / f"one{i}.log", {"value": i}) for i in range(2)], workers=1,
                       progress=False)
    finally:
        torch.set_num_threads(before)
    assert [(r["threads"], r["decode_threads"]) for r in two] == [(4, "2"), (4, "2")]
    assert [(r["threads"], r["decode_threads"]) for r in one] == [(4, None), (4, None)]  # unset: its own count
