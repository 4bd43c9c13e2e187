"""Install packages into a virtual environment with uv, from pip's own package sources; pip when uv cannot.

    python scripts/install_requirements.py VENV_PYTHON PIP_INSTALL_ARGS...
    python scripts/install_requirements.py --uv-pin        the uv release this script installs

`make venv` and scripts/setup_vllm_cpu.sh install through this script. PIP_INSTALL_ARGS are those of
`pip install` that `uv pip install` shares (-r FILE, -c FILE, --extra-index-url URL, NAME==VERSION).

Why uv: it installs the same packages as pip in less time (benchmarks/README.md, "Environments installed by
uv"), and installing is most of `make test`'s set-up on a fresh clone.

What makes it install what pip would: uv does not read pip's configuration, so the sources pip is configured
with (`pip config list`: its files and PIP_* variables) are handed over. Those are the find-links folders,
the index and extra-index URLs, the constraint files and the CA bundle: a machine whose pip finds a local
CPU build of torch gets that build from uv too. pip picks the best version across every source, and so does uv
here (`--index-strategy unsafe-best-match`). A local folder or file:// index that does not exist is left
out, as pip leaves it out with a warning. What uv installs is byte-compiled (`--compile-bytecode`), as pip
does, so that no process compiles torch again where PYTHONDONTWRITEBYTECODE is set.

uv itself (UV_PIN) is installed into the environment by its pip. ACESQL_INSTALLER=pip installs with pip
alone. When uv cannot be installed or its install fails, pip installs, after a line that says why.
"""
from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urlparse

UV_PIN = "uv==0.13.9"
# pip's settings that name where packages come from, and the uv option each one becomes
SOURCES = {"find-links": "--find-links", "index-url": "--index-url", "extra-index-url": "--extra-index-url",
           "constraint": "--constraint"}
KEYS = (*SOURCES, "cert", "no-index")  # what `pip_settings` reads
ENV_KEYS = {"PIP_" + key.upper().replace("-", "_"): key for key in KEYS}


def pip_settings(config_lines: list[str], environ: dict[str, str]) -> dict[str, str]:
    """pip's effective value of each source setting: `pip config list` lines (`section.key='value'`),
    the `install` section over `global`, PIP_* variables over both (pip's order)."""
    found: dict[str, dict[str, str]] = {}
    for line in config_lines:
        name, sep, value = line.partition("=")
        if not sep or "." not in name:
            continue
        section, key = name.rsplit(".", 1)
        found.setdefault(section, {})[key] = value.strip().strip("'\"")
    settings = {**found.get("global", {}), **found.get("install", {})}
    settings.update({key: environ[var] for var, key in ENV_KEYS.items() if environ.get(var, "").strip()})
    return {k: v for k, v in settings.items() if k in KEYS}


def _exists(location: str) -> bool:
    """False for a local folder, file or file:// URL that is not there (pip skips those); True for the rest."""
    if "://" not in location:
        return Path(location).exists()
    url = urlparse(location)
    return url.scheme != "file" or Path(unquote(url.path)).exists()


def uv_source_args(settings: dict[str, str]) -> list[str]:
    """uv's options for pip's sources (`pip_settings`), with pip's best-version rule across them."""
    args: list[str] = []
    for key, option in SOURCES.items():
        for value in settings.get(key, "").split():
            if _exists(value):
                args += [option, value]
    if settings.get("no-index", "").lower() in ("1", "true", "yes", "on"):
        args.append("--no-index")
    return args + ["--index-strategy", "unsafe-best-match"]


def _pip_config(python: str) -> list[str]:
    done = subprocess.run([python, "-m", "pip", "config", "list"], capture_output=True, text=True)
    return done.stdout.splitlines() if done.returncode == 0 else []


def install_with_uv(python: str, args: list[str]) -> str:
    """'' when uv installed `args` into `python`'s environment, else why it did not."""
    uv = Path(python).parent / "uv"
    if not uv.exists():
        got = subprocess.run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check", UV_PIN],
                             capture_output=True, text=True)
        if got.returncode != 0 or not uv.exists():
            return f"pip could not install {UV_PIN} (exit {got.returncode}): {got.stderr.strip()[-500:]}"
    settings = pip_settings(_pip_config(python), dict(os.environ))
    env = dict(os.environ)
    if settings.get("cert") and not env.get("SSL_CERT_FILE"):
        env["SSL_CERT_FILE"] = settings["cert"]
    command = [str(uv), "pip", "install", "--quiet", "--python", python, "--compile-bytecode",
               *uv_source_args(settings), *args]
    done = subprocess.run(command, env=env)
    return "" if done.returncode == 0 else f"`{shlex.join(command)}` exited {done.returncode}"


def install(python: str, args: list[str]) -> int:
    if os.environ.get("ACESQL_INSTALLER", "uv").strip().lower() != "pip":
        why = install_with_uv(python, args)
        if not why:
            return 0
        print(f"install_requirements: uv did not install ({why}); installing with pip", file=sys.stderr)
    return subprocess.run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check", *args]).returncode


def main(argv: list[str]) -> int:
    if argv == ["--uv-pin"]:
        print(UV_PIN)
        return 0
    if len(argv) < 2:
        print(__doc__.split("\n\n")[0], file=sys.stderr)
        return 2
    return install(argv[0], argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
