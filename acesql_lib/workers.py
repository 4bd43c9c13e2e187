"""Independent jobs run side by side in worker processes, with the numbers of one process.

Why processes: a small model decodes at the speed of Python, one decoding step at a time, so a second process
uses the cores that the first leaves idle between its short parallel sections (two ablation variants at once on
2 cores: 68 s against 88 s one after the other). Each worker keeps this process's torch thread count, because the
numbers depend on it: a reduction over a long vector (PCGrad's dot products and norms) splits its sum by thread,
so a variant trained at one thread differs from one trained at two in the last bits of its gradients. At the same
thread count a job run in its own process gives, bit for bit, what it gives after other jobs in one process. The
workers' OpenMP threads wait passively (`OMP_WAIT_POLICY=PASSIVE`), which changes how they idle, not what they
compute: spinning, two workers of two threads on 2 cores took 182 s where passive ones took 68 s.

A job is a function of the kit named `module:function` and its keyword arguments; the worker is
`python -m acesql_lib.workers JOB_FILE` (a pickle of both), writes the function's result beside it, and sends
its output to the job's log, which a failure quotes. An error or an interrupt stops the other workers.
"""
from __future__ import annotations

import importlib
import os
import pickle
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from .progress import tqdm


@dataclass
class Job:
    name: str  # shown on the bar
    func: str  # "acesql_lib.module:function", called with **kwargs in the worker
    log: Path  # the worker's output; the job file and its result live beside it
    kwargs: dict[str, Any] = field(default_factory=dict)


def run_jobs(jobs: Sequence[Job], workers: int, desc: str = "jobs", progress: bool = True) -> list[Any]:
    """Each job's result, in the order of `jobs`, at most `workers` processes at a time."""
    import torch

    threads = torch.get_num_threads()  # this process's: a reduction's sums depend on the thread count
    pending = list(enumerate(jobs))
    running: dict[int, subprocess.Popen] = {}
    results: dict[int, Any] = {}
    bar = tqdm(total=len(jobs), desc=desc, unit="job", disable=not progress)
    try:
        while pending or running:
            while pending and len(running) < max(1, workers):
                i, job = pending.pop(0)
                running[i] = _start(job, threads)
            time.sleep(0.2)
            for i, proc in list(running.items()):
                if proc.poll() is None:
                    continue
                del running[i]
                job = jobs[i]
                if proc.returncode != 0:
                    tail = job.log.read_text(errors="replace")[-3000:] if job.log.exists() else ""
                    raise RuntimeError(f"{desc}: job {job.name!r} failed (exit {proc.returncode}); "
                                       f"its log is {job.log}:\n{tail}")
                out = _result_file(job.log)
                results[i] = pickle.loads(out.read_bytes())
                out.unlink()
                _job_file(job.log).unlink(missing_ok=True)
                bar.update(1)
                bar.set_postfix_str(job.name)
    finally:
        for proc in running.values():
            proc.terminate()
        for proc in running.values():
            proc.wait()
        bar.close()
    return [results[i] for i in range(len(jobs))]


def _job_file(log: Path) -> Path:
    return log.with_name(log.name + ".job")


def _result_file(log: Path) -> Path:
    return log.with_name(log.name + ".result")


def _start(job: Job, threads: int) -> subprocess.Popen:
    job.log.parent.mkdir(parents=True, exist_ok=True)
    _result_file(job.log).unlink(missing_ok=True)
    _job_file(job.log).write_bytes(pickle.dumps({"func": job.func, "kwargs": job.kwargs, "threads": threads}))
    kit = str(Path(__file__).resolve().parents[1])  # the worker imports the kit this process runs
    path = os.pathsep.join(p for p in (kit, os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path, "ACESQL_PROGRESS": "text", "OMP_WAIT_POLICY": "PASSIVE"}
    with open(job.log, "w", encoding="utf-8") as f:  # the child keeps its own copy of the handle
        return subprocess.Popen([sys.executable, "-m", "acesql_lib.workers", str(_job_file(job.log))],
                                stdout=f, stderr=subprocess.STDOUT, env=env)


def probe(value: Any = None, fail: bool = False, sleep_s: float = 0.0) -> dict[str, Any]:
    """A job that reports the process it ran in (pid, torch threads, OpenMP wait policy): the tests' job, and a
    quick look at what a machine's workers get."""
    import torch

    time.sleep(sleep_s)
    if fail:
        raise ValueError(f"probe asked to fail on {value!r}")
    return {"value": value, "pid": os.getpid(), "threads": torch.get_num_threads(),
            "wait_policy": os.environ.get("OMP_WAIT_POLICY")}


def call(func: str, kwargs: dict[str, Any]) -> Any:
    module, name = func.split(":")
    if not module.startswith("acesql_lib."):
        raise ValueError(f"{func}: a worker runs only the kit's functions")
    return getattr(importlib.import_module(module), name)(**kwargs)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        raise SystemExit("usage: python -m acesql_lib.workers JOB_FILE")
    job_file = Path(args[0])
    job = pickle.loads(job_file.read_bytes())
    import torch

    torch.set_num_threads(job["threads"])
    result = call(job["func"], job["kwargs"])
    out = job_file.with_name(job_file.name[:-len(".job")] + ".result")
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_bytes(pickle.dumps(result))
    tmp.replace(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
