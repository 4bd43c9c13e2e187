"""The kit's pins, one source for both environments, and the check that the GPU lock resolves.

    requirements.txt, requirements-dev.txt   the CPU environment (`make venv` installs them as they are)
    requirements-gpu.in                      -r requirements-dev.txt + vllm + deepspeed
    requirements-gpu.lock                    every package of the GPU environment pinned, compiled from
                                             requirements-gpu.in by uv for Linux x86_64 / Python 3.11
                                             (`make lock`); environment.yml installs it

    python -m acesql_lib.pipeline.pins                  packages pinned in both sets that differ (exit 1 if any)
    python -m acesql_lib.pipeline.pins --resolve        the lock resolved by pip's resolver for the GPU boxes

`resolve_lock` asks pip (this interpreter's, `--dry-run`, nothing installed) two things at once:
- the user's own line, as environment.yml runs it: `pip install --dry-run --ignore-installed -r LOCK`, the
  file's own options included (its `--only-binary :all:` and `--no-binary deepspeed`, in their order); pip
  builds the metadata of the one source package (deepspeed) and checks its requirements against the pins.
  pip must choose exactly the lock's versions and nothing else. It resolves for this machine, a Linux
  x86_64 CPython 3.11 like the GPU boxes;
- the wheels for the oldest GPU box the lock allows: Linux x86_64 with manylinux up to glibc `GLIBC`,
  CPython 3.11, wheels only (`--platform`), every package but the source ones, dependencies included.
pip's configuration files are not read (they can point at local wheel folders, such as a CPU torch, that a
GPU box does not have): pip asks PyPI, or PIP_INDEX_URL / PIP_EXTRA_INDEX_URL when set.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from ..config.paths import REPO_ROOT

CPU_REQUIREMENTS = REPO_ROOT / "requirements-dev.txt"
GPU_IN = REPO_ROOT / "requirements-gpu.in"
GPU_LOCK = REPO_ROOT / "requirements-gpu.lock"
PYTHON_VERSION = "3.11"
GLIBC = 31  # manylinux_2_31 (`make lock`): llguidance 1.7, which vllm 0.32 needs, has no older x86_64 wheel
_PIN = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*==\s*([^\s;#]+)")


def canonical(name: str) -> str:
    """PEP 503 name: PyStemmer and pystemmer, PyYAML and pyyaml are one package."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read_pins(path: Path | str, _seen: set[Path] | None = None) -> dict[str, str]:
    """{canonical name: version} of every `name==version` line of a requirements file, following `-r`."""
    path = Path(path).resolve()
    seen = _seen if _seen is not None else set()
    if path in seen:
        return {}
    seen.add(path)
    pins: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split(" #", 1)[0].strip()
        if line.startswith(("-r ", "--requirement ")):
            for name, version in read_pins(path.parent / line.split(None, 1)[1], seen).items():
                pins.setdefault(name, version)
        elif (m := _PIN.match(line)):
            pins.setdefault(canonical(m.group(1)), m.group(2))
    return pins


def no_binary(path: Path | str) -> set[str]:
    """Packages a lock lets pip build from source (its `--no-binary` lines)."""
    found: set[str] = set()
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.startswith("--no-binary"):
            found |= {canonical(n) for n in re.split(r"[\s,=]+", line.split(None, 1)[1].strip()) if n and n != ":none:"}
    return found


def shared_mismatches(cpu: dict[str, str], gpu: dict[str, str]) -> list[tuple[str, str, str]]:
    """(name, CPU pin, GPU pin) for every package pinned in both sets at different versions."""
    return sorted((n, cpu[n], gpu[n]) for n in cpu.keys() & gpu.keys() if cpu[n] != gpu[n])


def pin_mismatches(cpu_file: Path | str = CPU_REQUIREMENTS, gpu_in: Path | str = GPU_IN,
                   lock: Path | str = GPU_LOCK) -> list[str]:
    """Every way the lock disagrees with the pins it was compiled from, one line each ([] when it agrees)."""
    lock_pins = read_pins(lock)
    lines = [f"{n}: {cpu_v} in {Path(cpu_file).name} (CPU), {gpu_v} in {Path(lock).name} (GPU)"
             for n, cpu_v, gpu_v in shared_mismatches(read_pins(cpu_file), lock_pins)]
    for name, version in sorted(read_pins(gpu_in).items()):
        if name not in lock_pins:
            lines.append(f"{name}: {version} in {Path(gpu_in).name}, not in {Path(lock).name}")
        elif lock_pins[name] != version and not any(line.startswith(f"{name}:") for line in lines):
            lines.append(f"{name}: {version} in {Path(gpu_in).name}, {lock_pins[name]} in {Path(lock).name}")
    return lines


# ---------------------------------------------------------------------------------------------
# resolving the lock with pip


@dataclass
class Resolution:
    ok: bool
    problems: list[str] = field(default_factory=list)  # what did not resolve, one line each
    chosen: dict[str, str] = field(default_factory=dict)  # {name: version} pip chose
    log: str = ""


def pip_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """pip's environment for the check: no configuration files, no local wheel folders or constraints."""
    env = dict(os.environ if environ is None else environ)
    for key in ("PIP_FIND_LINKS", "PIP_CONSTRAINT", "PIP_REQUIRE_VIRTUALENV", "PIP_NO_INDEX", "PIP_TARGET",
                "PIP_PREFIX", "PIP_USER"):
        env.pop(key, None)
    env["PIP_CONFIG_FILE"] = os.devnull
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def platform_args(glibc: int = GLIBC, python_version: str = PYTHON_VERSION) -> list[str]:
    """pip's target options for a Linux x86_64 box with glibc 2.`glibc` (pip does not widen one
    manylinux tag to the older ones a box also runs, so every one is named)."""
    tags = [f"manylinux_2_{v}_x86_64" for v in range(glibc, 4, -1)]
    tags += ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"]
    abi = "cp" + python_version.replace(".", "")
    return [a for t in tags for a in ("--platform", t)] + [
        "--python-version", python_version, "--implementation", "cp", "--abi", abi, "--only-binary=:all:"]


def _pip(args: list[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True, env=env,
                          timeout=timeout)


_NOISE = ("Collecting ", "Would install", "  Using cached", "  Downloading", "  Obtaining", "  Installing build",
          "  Getting requirements", "  Preparing metadata", "  File was already", "Requirement already")


def _errors(proc: subprocess.CompletedProcess) -> str:
    """pip's output without the progress lines (what conflicted, when something did)."""
    lines = [ln for ln in (proc.stdout + proc.stderr).splitlines()
             if ln.strip() and not ln.startswith(_NOISE) and "is ignored: it is neither" not in ln]
    return "\n".join(lines[-40:])


def _chosen(report: Path) -> dict[str, str]:
    return {canonical(item["metadata"]["name"]): item["metadata"]["version"]
            for item in json.loads(report.read_text())["install"]}


def _against_pins(what: str, chosen: dict[str, str], pins: dict[str, str], expected: set[str]) -> list[str]:
    """What pip chose that the lock does not say: packages it added or left out, other versions."""
    problems = []
    extra = sorted(set(chosen) - set(pins))
    if extra:
        problems.append(f"{what}: pip added packages the lock does not pin: "
                        + ", ".join(f"{n}=={chosen[n]}" for n in extra))
    missing = sorted(expected - set(chosen))
    if missing:
        problems.append(f"{what}: pip would not install " + ", ".join(f"{n}=={pins[n]}" for n in missing))
    off = sorted(n for n in chosen.keys() & pins.keys() if chosen[n].split("+")[0] != pins[n])
    if off:
        problems.append(f"{what}: pip chose other versions than the lock: "
                        + ", ".join(f"{n} {chosen[n]} (lock {pins[n]})" for n in off))
    return problems


def install_line(lock: Path | str) -> list[str]:
    """The user's line of environment.yml, as pip arguments: the lock installed as written."""
    return ["install", "--dry-run", "--ignore-installed", "-r", str(lock)]


def resolve_lock(lock: Path | str = GPU_LOCK, timeout: float = 900, environ: dict[str, str] | None = None) -> Resolution:
    """The lock resolved by pip as a GPU box installs it, from this machine (module docstring); nothing installed."""
    lock = Path(lock)
    pins, sources = read_pins(lock), no_binary(lock)
    env = pip_env(environ)
    problems: list[str] = []
    chosen: dict[str, str] = {}
    logs: list[str] = []
    quiet = ["--progress-bar", "off"]
    with tempfile.TemporaryDirectory(prefix="acesql-lock-") as tmp, ThreadPoolExecutor() as pool:
        as_written, oldest = Path(tmp) / "as_written.json", Path(tmp) / "oldest.json"
        # --report only writes down what the resolution chose; the resolution is the user's line's
        installing = pool.submit(_pip, [*install_line(lock), *quiet, "--report", str(as_written)], env, timeout)
        wheels = [f"{n}=={v}" for n, v in sorted(pins.items()) if n not in sources]  # on the command line, so
        resolving = pool.submit(_pip, ["install", "--dry-run", "--ignore-installed", *quiet,  # pip names them
                                       "--report", str(oldest), "--target", str(Path(tmp) / "target"),
                                       *platform_args(), *wheels], env, timeout)
        for what, job, report, expected in (
                (f"pip install -r {lock.name}", installing, as_written, set(pins)),
                (f"wheels for glibc 2.{GLIBC}", resolving, oldest, set(pins) - sources)):
            proc = job.result()
            logs.append(_errors(proc))
            if proc.returncode != 0:
                problems.append(f"{what}: pip could not resolve {lock.name} for Linux x86_64 / Python "
                                f"{PYTHON_VERSION} (exit {proc.returncode}):\n{_errors(proc)}")
                continue
            found = _chosen(report)
            problems += _against_pins(what, found, pins, expected)
            for name, version in found.items():
                chosen.setdefault(name, version)
    return Resolution(ok=not problems, problems=problems, chosen=chosen, log="\n".join(logs))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Check the CPU pins against the GPU lock, or resolve the lock with pip.")
    ap.add_argument("--resolve", action="store_true", help="resolve the GPU lock with pip (needs the registry)")
    ap.add_argument("--lock", default=str(GPU_LOCK))
    args = ap.parse_args(argv)
    if args.resolve:
        res = resolve_lock(args.lock)
        if res.ok:
            print(f"{Path(args.lock).name}: pip resolves all {len(res.chosen)} packages for Linux x86_64 / "
                  f"Python {PYTHON_VERSION}")
            return 0
        print("\n".join(res.problems), file=sys.stderr)
        return 1
    lines = pin_mismatches(lock=args.lock)
    if lines:
        print("pins differ between the CPU set and the GPU lock (run `make lock`):\n  " + "\n  ".join(lines),
              file=sys.stderr)
        return 1
    print(f"{Path(args.lock).name} agrees with requirements-dev.txt and requirements-gpu.in")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
