"""Checks only a CUDA GPU can make: the paper profile's precision on the notebooks' one-GPU path (fp32
master weights under bf16 autocast, in GRPO and in SFT), the preflight's GRPO memory formula against the
allocator's exact peak, and the rehearsal pipeline with every model on the GPU.

Not part of `make test` (CI has no GPU): `make test-gpu`, or `scripts/gpu_checks.sh` on a GPU box, which
also writes the measured figures. Without a CUDA device these tests FAIL, they do not skip: asking for
them on a machine without one is a mistake worth hearing about.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rl_setup import rl_overrides
from repo_paths import ROOT as REPO

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module", autouse=True)
def cuda_device():
    assert torch.cuda.is_available(), "tests/test_gpu.py needs a CUDA GPU (torch.cuda.is_available() is False)"


def _bf16_matmuls(model: torch.nn.Module) -> tuple[list[torch.dtype], list]:
    """Output dtypes of every Linear's forward while the hooks are in place (autocast shows as bf16)."""
    seen: list[torch.dtype] = []
    hooks = [m.register_forward_hook(lambda _m, _i, o: seen.append(o.dtype))
             for m in model.modules() if isinstance(m, torch.nn.Linear)]
    return seen, hooks


@pytest.mark.parametrize("train_dtype", ["float32", "bfloat16"])
def test_grpo_on_one_gpu_trains_fp32_masters_under_bf16_autocast(rl_template, tmp_path, train_dtype):
    """`build_trainer` as the notebook calls it (its own Accelerator) with model.device=cuda: the policy's
    weights stay fp32 on the GPU, its matmuls run in bf16, and a 1e-6 AdamW step moves the weights; the same
    step on a bf16-held policy rounds nearly all of them away."""
    from accelerate.state import AcceleratorState

    from acesql_lib.config.context import RunContext
    from acesql_lib.train.grpo_run import build_trainer

    run = tmp_path / "run"
    shutil.copytree(rl_template, run)
    ctx = RunContext.create("tiny", rl_overrides(run, **{
        "grpo.max_steps": 1, "grpo.learning_rate": 1e-6, "grpo.bf16": True, "model.device": "cuda",
        "model.train_dtype": train_dtype}))
    AcceleratorState._reset_state(True)
    try:
        trainer = build_trainer(ctx.cfg, ctx.paths, progress=False)
        assert trainer.acc.mixed_precision == "bf16" and trainer.acc.device.type == "cuda"
        assert {(p.device.type, p.dtype) for p in trainer.params} == {("cuda", getattr(torch, train_dtype))}
        before = [p.detach().clone() for p in trainer.params]
        seen, hooks = _bf16_matmuls(trainer.unwrapped)
        reports = []
        trainer.train(on_step=reports.append)
        for h in hooks:
            h.remove()
        assert seen and set(seen) == {torch.bfloat16}, set(seen)
        assert reports[0].metrics["lr"] == pytest.approx(1e-6) and reports[0].metrics["grad_norm"] > 0
        moved = sum(int((a != p.detach()).sum()) for a, p in zip(before, trainer.params))
        total = sum(a.numel() for a in before)
    finally:
        AcceleratorState._reset_state(True)
    print(f"GRPO on CUDA, {train_dtype} policy: {moved / total:.4f} of {total} weights moved by one 1e-6 step")
    if train_dtype == "float32":
        assert moved / total > 0.9
    else:
        assert moved / total < 0.05


def test_sft_on_one_gpu_trains_fp32_masters_under_bf16_autocast(rl_template, tmp_path):
    """Mixed SFT as notebook 03 runs it on a GPU (TRL, sft.bf16 on an fp32-loaded policy): fp32 weights on
    the GPU after training, bf16 matmuls, and a 1e-6 step moves nearly every weight."""
    from accelerate.state import AcceleratorState

    from acesql_lib.config.train import SFTConfig
    from acesql_lib.data.datasets import load_synsql, schemas_for
    from acesql_lib.models.loading import load_policy
    from acesql_lib.pipeline.tinybase import gold_samples
    from acesql_lib.data.tinyworld import build_tinyworld
    from acesql_lib.train.sft import SFTRun, train_sft

    world = build_tinyworld(tmp_path / "world", seed=0, n_train=80, n_dev=8)
    examples = load_synsql(world.train_json, world.train_db_root).examples
    samples, _ = gold_samples(examples[:32], schemas_for(examples[:32], n_values=0), style="tiny")
    model, tokenizer = load_policy(str(rl_template / "models" / "sft"), dtype="float32", device="cpu")
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    cfg = SFTConfig(learning_rate=1e-6, per_device_batch_size=8, gradient_accumulation_steps=1, num_epochs=1,
                    max_length=1024, bf16=True, gradient_checkpointing=False, logging_steps=1, save_steps=0,
                    warmup_ratio=0.0, lr_scheduler_type="constant")
    seen, hooks = _bf16_matmuls(model)
    AcceleratorState._reset_state(True)
    try:
        result = train_sft(model, tokenizer, samples, cfg, tmp_path / "sft", SFTRun(max_steps=1, seed=0))
    finally:
        AcceleratorState._reset_state(True)
        for h in hooks:
            h.remove()
    trained = result.model
    params = dict(trained.named_parameters())
    assert {(p.device.type, p.dtype) for p in params.values()} == {("cuda", torch.float32)}
    assert seen and set(seen) == {torch.bfloat16}, set(seen)
    moved = sum(int((before[k] != params[k].detach().cpu()).sum()) for k in before)
    total = sum(v.numel() for v in before.values())
    print(f"SFT on CUDA: {moved / total:.4f} of {total} weights moved by one 1e-6 step")
    assert moved / total > 0.9


def test_the_grpo_memory_formula_matches_the_allocator_peak():
    """benchmarks/grpo_memory.py on CUDA: torch's exact allocator peak of a GRPO update of a scaled-down Qwen3
    (the real vocabulary) against `acesql_lib.train.memory.grpo_step_bytes`, with and without activation
    checkpointing and chunked log-probabilities: within 20% on every shape. The records go to
    $ACESQL_GPU_OUT/grpo_memory_cuda.json when that is set (scripts/gpu_checks.sh)."""
    import os

    sys.path.insert(0, str(REPO / "benchmarks"))
    from grpo_memory import GPU_GRID, GRID, grid

    records = grid("cuda", GRID + GPU_GRID)
    if os.environ.get("ACESQL_GPU_OUT"):
        Path(os.environ["ACESQL_GPU_OUT"], "grpo_memory_cuda.json").write_text(json.dumps(records, indent=1))
    for r in records:
        print(f"L{r['layers']} h{r['hidden']} b{r['micro_batch']} p{r['prompt']} c{r['completion']} "
              f"ckpt {int(r['checkpointing'])} chunk {r['logprob_chunk_tokens']}: measured "
              f"{r['measured_bytes'] / 2**30:.2f} GiB, estimate x{r['ratio']:.3f}")
    off = [r for r in records if not 0.8 <= r["ratio"] <= 1.2]
    assert not off, off


def test_the_rehearsal_pipeline_runs_on_the_gpu(tmp_path):
    """Notebooks 00-07 of the rehearsal at the smoke size of tests/test_pipeline_rehearsal.py, every model on
    the GPU (model.device=cuda, bf16 engine, transformers generate: vLLM is checked by scripts/gpu_rehearsal.sh)."""
    roots = ("synsql_dir", "bird_dev_dir", "spider_dir", "spider_dk_dir", "spider_syn_dir", "spider_realistic_dir")
    data = {f"data.{r}": str(tmp_path / "data" / r.replace("_dir", "") / ("dev_20240627" if r == "bird_dev_dir" else ""))
            for r in roots}
    over = {"run_dir": str(tmp_path / "run"), "reports_dir": str(tmp_path / "reports"),
            "data.tinyworld_dir": str(tmp_path / "world"), **data, "grpo.max_steps": 2, "grpo.val_every": 2,
            "grpo.save_every": 2, "eval.max_examples": 2, "engine.kind": "hf", "model.device": "cuda",
            "model.dtype": "bfloat16", "sft.bf16": True}
    done = subprocess.run([sys.executable, "-m", "acesql_lib.pipeline", "--profile", "rehearsal", "--no-progress",
                           "--set", *(f"{k}={v}" for k, v in over.items())],
                          cwd=REPO, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    m = json.loads((tmp_path / "reports" / "metrics" / "04_joint_grpo.json").read_text())
    assert m["steps"] == 2
