#!/usr/bin/env bash
# What only a CUDA GPU can check, in one go (a few minutes on one H100/H200), figures into $OUT:
#   scripts/gpu_checks.sh [PYTHON]        (default: .venv/bin/python, or python3 when there is no .venv)
# (1) the GPU and torch; (2) tests/test_gpu.py: fp32 master weights under bf16 autocast in GRPO and SFT on
# the one-GPU path, the GRPO memory formula against the allocator's peak, the rehearsal pipeline on the GPU
# (transformers engine), the memory records into $OUT/grpo_memory_cuda.json. vLLM on the GPU is
# scripts/gpu_rehearsal.sh's part (it needs the GPU lock's environment). Each part runs whatever the
# previous one did; the exit status is the first failure's.
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${1:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}"
OUT="${OUT:-reports/gpu_checks}"
mkdir -p "$OUT"
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false MPLBACKEND=Agg PYTHONUNBUFFERED=1
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
status=0
note() { echo "== $* ($(date +%T))"; }
note "GPU and torch"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
"$PY" -c "import torch, transformers, accelerate, trl; assert torch.cuda.is_available(), 'no CUDA GPU visible'; \
print('torch', torch.__version__, 'cuda', torch.version.cuda, 'transformers', transformers.__version__, \
'accelerate', accelerate.__version__, 'trl', trl.__version__)" | tee -a "$OUT/gpu.txt" || exit 1
note "tests/test_gpu.py"
ACESQL_GPU_OUT="$OUT" "$PY" -m pytest -q -s -m gpu tests/test_gpu.py -p no:cacheprovider --durations=0 ${PYTEST_K:+-k "$PYTEST_K"} 2>&1 | tee "$OUT/test_gpu.log"
[ "${PIPESTATUS[0]}" = 0 ] || status=1
note "done (status $status)"
exit $status
