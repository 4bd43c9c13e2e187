"""One way for the tests to start `accelerate launch`: each launch gets a free TCP port for its
process group, so a launch never meets the rendezvous port of the one before it (still in
TIME_WAIT, or held by a rank that has not exited yet); the default 29500 shared by every launch
made the first barrier fail now and then under load. And one way for a rank the tests spawn themselves
(torch.multiprocessing) to end: `rank_finished` once its results are written."""
from __future__ import annotations

import faulthandler
import os
import socket
import sys
import tempfile
from pathlib import Path

from repo_paths import ROOT as REPO


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def accelerate_launch(accelerate_config: str | Path, *target: str) -> list[str]:
    """The command line of `accelerate launch --config_file CONFIG --main_process_port PORT TARGET...` on 2 CPU
    processes: CONFIG is the launch file itself with only the keys a CPU cannot honour replaced
    (`acesql_lib.train.launch.cpu_launch_config`, written to a folder of its own)."""
    from acesql_lib.train.launch import command, cpu_launch_config

    config = cpu_launch_config(REPO / accelerate_config, tempfile.mkdtemp(prefix="acesql-launch-"))
    return command(config, list(target), port=free_port())


def rank_started() -> None:
    """At the top of a spawned rank: a fatal signal (gloo's SIGABRT) prints the rank's Python stack."""
    faulthandler.enable()


def rank_finished() -> None:
    """The end of a spawned rank whose group is closed and whose results are on disk: the process leaves
    without the interpreter's teardown. A gloo rank can still die there with `terminate called without an
    active exception` (SIGABRT: torch's gloo work objects freed while Python is torn down), rarely (0 of 40
    repeats here, once in a clean-clone suite run), and the test would then fail a rank that did all its work.
    Not for the launched commands: they close their group (acesql_lib/runtime/process_group.py) and exit normally."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
