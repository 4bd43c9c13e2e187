"""For tests and benchmarks: a small, real RL run folder (tiny world questions, a
briefly trained tiny policy so outputs are well formed and rewards vary, an initial pool and the RL question
set, laid out exactly as notebooks 02-03 write them) and the overrides that make a GRPO step take seconds
on CPU.

One builder for the GRPO tests (tests/conftest.py's `rl_template`, the launch checks under tests/) and the
GRPO benchmarks (benchmarks/grpo_bench.py, benchmarks/engines_in_loop.py), so they measure the same run.
The launch checks run as scripts from tests/ (on their path); the benchmarks put tests/ on theirs."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import torch

from acesql_lib.config.train import SFTConfig
from acesql_lib.data.datasets import load_synsql, schemas_for
from acesql_lib.models.loading import build_tiny_model, save_tiny, train_tiny_tokenizer
from acesql_lib.roles.pool import ColumnSetPool
from acesql_lib.train.sft import SFTRun, train_sft
from acesql_lib.data.sqlcolumns import column_set
from acesql_lib.pipeline.tinybase import gold_samples
from acesql_lib.data.tinyworld import build_tinyworld, world_text

N_TRAIN, N_VAL = 8, 2  # RL training and validation questions


# Overrides that make a GRPO step take seconds on CPU; every test run uses them.
def rl_overrides(run_dir: Path, **extra) -> dict:
    return {"run_dir": str(run_dir), "reports_dir": str(run_dir / "reports"),
            "grpo.batch_questions": 4, "grpo.n_retriever": 4, "grpo.n_generator": 4,
            "grpo.max_response_tokens": 40, "grpo.micro_batch_size": 16, "grpo.learning_rate": 2e-3,
            "grpo.warmup_ratio": 0.0, "grpo.max_steps": 4, "grpo.save_every": 2, "grpo.val_every": 1000,
            "grpo.len_penalty_start": 16, "grpo.len_penalty_end": 40, "grpo.kl_coef": 0.01, "grpo.exec_timeout_s": 5,
            "grpo.temperature": 1.0, "engine.kind": "hf", "data.n_example_values": 0,
            "grpo.reference_model": str(run_dir / "models" / "reference"), **extra}


def build_rl_run(root: Path) -> Path:
    """Write <root>/run with models/sft, distill/pool.json and distill/rl_questions.json; returns the run dir."""
    world = build_tinyworld(root / "world", seed=0, n_train=240, n_dev=40)
    loaded = load_synsql(world.train_json, world.train_db_root)
    examples = loaded.examples
    schemas = schemas_for(examples, n_values=0)  # no example values: shorter prompts, faster CPU steps
    samples, _ = gold_samples(examples[N_TRAIN + N_VAL:N_TRAIN + N_VAL + 160], schemas, style="tiny")
    torch.manual_seed(0)
    tokenizer = train_tiny_tokenizer(list(world_text(world)) + [m["content"] for s in samples[:200] for m in s["prompt"]],
                                     vocab_size=2048)
    model = build_tiny_model(tokenizer, hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=1,
                             intermediate_size=128, max_position=2048, seed=0)
    run = root / "run"
    # The KL reference is the untrained model, so the KL term moves every parameter even when no
    # rollout earns a reward: updates are never trivially zero in these tests.
    save_tiny(model, tokenizer, run / "models" / "reference")
    sft = SFTConfig(learning_rate=5e-3, per_device_batch_size=16, gradient_accumulation_steps=1, num_epochs=1,
                    max_length=2048, bf16=False, gradient_checkpointing=False, logging_steps=10, save_steps=0,
                    warmup_ratio=0.0, lr_scheduler_type="constant")
    train_sft(model, tokenizer, samples, sft, root / "sft_work", SFTRun(max_steps=30, seed=0, group_by_length=True))
    save_tiny(model, tokenizer, run / "models" / "sft")
    chosen = examples[:N_TRAIN + N_VAL]
    gold = {e.id: column_set(e.sql, schemas[e.db_id]) for e in chosen}
    pool = ColumnSetPool.from_rollouts({q: [s] for q, s in gold.items()}, gold)
    (run / "distill").mkdir(parents=True, exist_ok=True)
    pool.save(run / "distill" / "pool.json")
    (run / "distill" / "rl_questions.json").write_text(json.dumps({
        "pass_counts": {e.id: 1 for e in chosen},
        "train": [dataclasses.asdict(e) for e in chosen[:N_TRAIN]],
        "validation": [dataclasses.asdict(e) for e in chosen[N_TRAIN:]]}))
    return run
