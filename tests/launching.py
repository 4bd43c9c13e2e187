"""One way for the tests to start `accelerate launch`: each launch gets a free TCP port for its
process group, so a launch never meets the rendezvous port of the one before it (still in
TIME_WAIT, or held by a rank that has not exited yet); the default 29500 shared by every launch
made the first barrier fail now and then under load."""
from __future__ import annotations

import socket
import sys
from pathlib import Path

from repo_paths import ROOT as REPO


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def accelerate_launch(accelerate_config: str | Path, *target: str) -> list[str]:
    """The command line of `accelerate launch --config_file CONFIG --main_process_port PORT TARGET...`."""
    return [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(REPO / accelerate_config),
            "--main_process_port", str(free_port()), *target]
