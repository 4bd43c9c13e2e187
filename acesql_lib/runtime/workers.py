"""Independent jobs run side by side in worker processes, with the numbers of one process.

Why processes: a small model decodes at the speed of Python, one decoding step at a time, so a second process
uses the cores that the first leaves idle between its short parallel sections (benchmarks/README.md, "Pipeline
time"). Each worker keeps this process's torch thread count, because the numbers depend on it: a reduction over a
long vector (PCGrad's dot products and norms) splits its sum by thread, so a variant trained at one thread differs
from one trained at two in the last bits of its gradients. At the same thread count a job run in its own
process gives, bit for bit, what it gives after other jobs in one process. The workers' OpenMP threads wait
passively (`OMP_WAIT_POLICY=PASSIVE`), which changes how they idle, not what they compute: spinning, two workers
of two threads on 2 cores burn the cores each other needs and take longer than one process. Where several workers
share the cores, each decodes with the HF engine at its share of this process's threads (`DECODE_THREADS` in its
environment, read by `hf_engine.decode_threads`; decoded tokens do not depend on the thread count), so no worker
waits on a thread whose core another worker holds, and keeps them all for the rest; every result the same.

A job is a function of the kit named `module:function` and its keyword arguments, written to a job file (a pickle
of both). A worker, `python -m acesql_lib.runtime.workers`, reads job files' paths on its standard input, one per line,
and runs them one after another in the same process: it starts and imports torch and the kit once, not once per
job (the imports take seconds on a small CPU). For each job it sends its output to the job's log, which a failure
quotes, and writes the function's result beside the job file. An error or an interrupt stops the other workers.
`python -m acesql_lib.runtime.workers JOB_FILE` runs one job.
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

# A worker's torch threads for the HF engine's decoding (hf_engine.decode_threads), in its environment where several
# workers share the cores: two workers of two threads each on 2 cores wait on each other's threads.
DECODE_THREADS = "ACESQL_DECODE_THREADS"


@dataclass
class Job:
    name: str  # shown on the bar
    func: str  # "acesql_lib.module:function", called with **kwargs in the worker
    log: Path  # the worker's output; the job file and its result live beside it
    kwargs: dict[str, Any] = field(default_factory=dict)


def run_jobs(jobs: Sequence[Job], workers: int, desc: str = "jobs", progress: bool = True) -> list[Any]:
    """Each job's result, in the order of `jobs`, in at most `workers` processes, each taking the next job
    when it has finished one."""
    import torch

    threads = torch.get_num_threads()  # this process's: a reduction's sums depend on the thread count
    running = max(1, min(workers, len(jobs)))
    decode = max(1, threads // running) if running > 1 else 0  # each worker's share for decoding (module docstring)
    pending = list(enumerate(jobs))
    procs: list[subprocess.Popen] = []
    busy: dict[int, int] = {}  # worker -> the job it runs
    results: dict[int, Any] = {}
    bar = tqdm(total=len(jobs), desc=desc, unit="job", disable=not progress)
    try:
        while pending or busy:
            for w in range(running):  # hand each idle worker the next job
                if w in busy or not pending:
                    continue
                i, job = pending.pop(0)
                _write_job(job, threads)
                if w == len(procs):
                    procs.append(_start(job, decode))
                procs[w].stdin.write(f"{_job_file(job.log)}\n")
                procs[w].stdin.flush()
                busy[w] = i
            time.sleep(0.2)
            for w, i in list(busy.items()):
                job, out = jobs[i], _result_file(jobs[i].log)
                if not out.exists():
                    if procs[w].poll() is None:
                        continue
                    tail = job.log.read_text(errors="replace")[-3000:] if job.log.exists() else ""
                    raise RuntimeError(f"{desc}: job {job.name!r} failed (exit {procs[w].returncode}); "
                                       f"its log is {job.log}:\n{tail}")
                del busy[w]
                results[i] = pickle.loads(out.read_bytes())
                out.unlink()
                _job_file(job.log).unlink(missing_ok=True)
                bar.update(1)
                bar.set_postfix_str(job.name)
        for proc in procs:  # no more jobs: each worker leaves when its input ends
            proc.stdin.close()
            proc.wait()
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in procs:
            proc.wait()
        bar.close()
    return [results[i] for i in range(len(jobs))]


def _job_file(log: Path) -> Path:
    return log.with_name(log.name + ".job")


def _result_file(log: Path) -> Path:
    return log.with_name(log.name + ".result")


def _write_job(job: Job, threads: int) -> None:
    job.log.parent.mkdir(parents=True, exist_ok=True)
    _result_file(job.log).unlink(missing_ok=True)
    _job_file(job.log).write_bytes(pickle.dumps({"func": job.func, "kwargs": job.kwargs, "threads": threads,
                                                 "log": str(job.log)}))


def _start(first: Job, decode_threads: int = 0) -> subprocess.Popen:
    """A worker reading job files on its standard input, decoding at `decode_threads` (0: this process's setting);
    until its first job opens its own log, the worker's output goes to that job's log."""
    kit = str(Path(__file__).resolve().parents[2])  # the checkout: the worker imports the kit this process runs
    path = os.pathsep.join(p for p in (kit, os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path, "ACESQL_PROGRESS": "text", "OMP_WAIT_POLICY": "PASSIVE",
           **({DECODE_THREADS: str(decode_threads)} if decode_threads else {})}
    with open(first.log, "w", encoding="utf-8") as f:  # the child keeps its own copy of the handle
        return subprocess.Popen([sys.executable, "-m", "acesql_lib.runtime.workers"], stdin=subprocess.PIPE, text=True,
                                stdout=f, stderr=subprocess.STDOUT, env=env)


def probe(value: Any = None, fail: bool = False, sleep_s: float = 0.0) -> dict[str, Any]:
    """A job that reports the process it ran in (pid, torch threads, decoding threads, OpenMP wait policy): the
    tests' job, and a quick look at what a machine's workers get."""
    import torch

    print(f"probe {value!r} in process {os.getpid()}", flush=True)  # to this job's log
    time.sleep(sleep_s)
    if fail:
        raise ValueError(f"probe asked to fail on {value!r}")
    return {"value": value, "pid": os.getpid(), "threads": torch.get_num_threads(),
            "decode_threads": os.environ.get(DECODE_THREADS), "wait_policy": os.environ.get("OMP_WAIT_POLICY")}


def call(func: str, kwargs: dict[str, Any]) -> Any:
    module, name = func.split(":")
    if not module.startswith("acesql_lib."):
        raise ValueError(f"{func}: a worker runs only the kit's functions")
    return getattr(importlib.import_module(module), name)(**kwargs)


def run_job_file(job_file: Path, to_log: bool = False) -> None:
    """One job: its function called at the job's thread count, the result written beside the job file (whole or
    not at all). With `to_log`, this process's output (Python's and native code's) goes to the job's log."""
    job = pickle.loads(job_file.read_bytes())
    if to_log:
        sys.stdout.flush()
        sys.stderr.flush()
        fd = os.open(job["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
    import torch

    torch.set_num_threads(job["threads"])
    result = call(job["func"], job["kwargs"])
    out = _result_file(Path(job["log"]))
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_bytes(pickle.dumps(result))
    sys.stdout.flush()
    sys.stderr.flush()
    tmp.replace(out)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) > 1:
        raise SystemExit("usage: python -m acesql_lib.runtime.workers [JOB_FILE]  (without one: job files' paths on stdin)")
    if args:
        run_job_file(Path(args[0]))
        return 0
    for line in sys.stdin:
        if line.strip():
            run_job_file(Path(line.strip()), to_log=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
