"""A GRPO run from a profile: its trainer built from the config and the run's paths (`build_trainer`: the
models, the engine, the RL questions and their pool), what its checkpoints depend on (`run_settings`), the
ablation variants of §6, and the command line:

    accelerate launch -m acesql_lib.train.grpo_run --config configs/<profile>.yaml [--variant no_pcgrad]

The trainer itself, the step in phases, is `grpo.JointGRPO`.
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import warnings
from pathlib import Path
from typing import Any

import torch

from ..config.settings import Config
from ..data.task import Task
from ..models.sharding import fsdp2_on_cpu
from ..runtime.reuse_keys import engine_key
from .grpo import JointGRPO, RLQuestions, accelerator_precision

# The ablations of §6, as config overrides of the full method
ABLATIONS: dict[str, dict[str, Any]] = {
    "full": {},
    "no_pcgrad": {"grpo.pcgrad": "none"},  # "w/o PCGrad": plain sum of the two gradients
    "no_schedule": {"grpo.gen_schedule_ratio": 0.0},  # "w/o schedule": w_gen = 1 from step 1
    "static_gold": {"grpo.pool_init": "static_gold"},  # retriever target = gold SQL's column set, never updated
    "dense_reward": {"grpo.retriever_reward": "dense"},  # the authors' dense retriever reward (their V6 formula)
}


RUN_SETTINGS = "run_settings.json"


def run_settings(cfg: Config, paths: Any) -> dict[str, Any]:
    """What a run's checkpoints depend on: RL settings, the starting model and the distilled data."""
    from ..models.loading import model_tag

    def digest(path: Path) -> str | None:
        return hashlib.sha256(path.read_bytes()).hexdigest()[:16] if path.is_file() else None

    return {"grpo": dataclasses.asdict(cfg.grpo), "engine": engine_key(cfg.engine), "seed": cfg.seed,
            "start_model": model_tag(paths.sft_model), "reference": cfg.grpo.reference_model,
            "pool": digest(paths.rl_data / "pool.json"), "rl_questions": digest(paths.rl_data / "rl_questions.json"),
            **({"stage1_source": "authors"} if cfg.data.stage1_source == "authors" else {})}


def retire_stale_run(out: Path, settings: dict[str, Any]) -> Path | None:
    """Resume only a run started from the same settings, model and data: a run folder written from
    others is renamed `<name>.stale-<n>` (kept, never deleted) and the run starts afresh."""
    out = Path(out)
    record = out / RUN_SETTINGS
    text = json.dumps(settings, indent=1, sort_keys=True, default=str) + "\n"
    moved = None
    if out.exists() and any(out.iterdir()) and (not record.is_file() or record.read_text() != text):
        n = 1
        while out.with_name(f"{out.name}.stale-{n}").exists():
            n += 1
        moved = out.with_name(f"{out.name}.stale-{n}")
        out.rename(moved)
        print(f"[grpo] {out} was started from other settings, model or data: kept as {moved.name}, starting afresh")
    out.mkdir(parents=True, exist_ok=True)
    record.write_text(text)
    return moved


def _without_overlong(tasks: list[Task], tokenizer: Any, cfg: Config, name: str) -> list[Task]:
    """The authors' loader drops questions whose retriever prompt exceeds the prompt limit; say how many."""
    from .rollouts import SamplingSpec, drop_overlong

    kept, dropped = drop_overlong(tasks, tokenizer, cfg.grpo.max_prompt_tokens, SamplingSpec.grpo(cfg, step=0))
    if dropped:
        ids = f"{[t.qid for t in dropped][:5]}{' ...' if len(dropped) > 5 else ''}"
        warnings.warn(f"{len(dropped)} of {len(tasks)} {name} questions dropped: retriever prompt over "
                      f"grpo.max_prompt_tokens = {cfg.grpo.max_prompt_tokens} tokens (ids {ids})", stacklevel=2)
    if name == "RL" and not kept:
        raise ValueError(f"every RL question's retriever prompt is over grpo.max_prompt_tokens = "
                         f"{cfg.grpo.max_prompt_tokens} tokens; raise it")
    return kept


def load_device(accelerator: Any, device: str) -> str:
    """Where GRPO loads its models: this rank's device (`model.device` auto or cuda), or the CPU under FSDP2,
    whose preparation shards them onto the GPU (no rank holds a whole copy there)."""
    if device not in ("auto", "cuda"):
        return device
    return "cpu" if getattr(accelerator, "is_fsdp2", False) else str(accelerator.device)


def select_rl_questions_by_sft_model(cfg: Config, paths: Any, accelerator: Any, progress: bool) -> None:
    """§3.4 by the SFT model's rollouts (`distill.rl_selection` "sft_model"): the main process rolls the SFT model
    out and writes the chosen questions once (a rerun reads them back); every rank waits for them."""
    from .distill import select_by_model

    if accelerator.is_main_process:
        select_by_model(cfg, paths, progress=progress)
    accelerator.wait_for_everyone()


def load_models(cfg: Config, paths: Any, device: str) -> tuple[torch.nn.Module, Any, torch.nn.Module | None]:
    """(policy, tokenizer, reference) from the SFT model: the policy in fp32 master weights (`model.train_dtype`),
    with fresh LoRA adapters under `model.lora`; the KL reference frozen in the inference dtype, as verl's, or None
    where it needs no copy of its own (no KL term, or LoRA without `grpo.reference_model`: the policy's frozen base
    with its adapters switched off is the SFT model already, `JointGRPO._reference_logprobs`)."""
    from ..models.loading import LoraSpec, apply_lora, load_policy, load_reference, training_dtype

    policy, tokenizer = load_policy(str(paths.sft_model), dtype=training_dtype(cfg.model), device=device)
    if cfg.grpo.gradient_checkpointing:  # the authors' actor recomputes layer activations in the backward pass
        policy.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    lora = LoraSpec.from_config(cfg.model)
    if lora is not None:  # model.lora: only fresh adapters on the (merged) SFT model train, as in SFT
        policy = apply_lora(policy, lora)
    own_reference = cfg.grpo.kl_coef > 0 and (lora is None or bool(cfg.grpo.reference_model))
    ref_path = cfg.grpo.reference_model or str(paths.sft_model)
    reference = load_reference(ref_path, dtype=cfg.model.dtype, device=device)[0] if own_reference else None
    return policy, tokenizer, reference


def load_questions(cfg: Config, paths: Any, tokenizer: Any) -> RLQuestions:
    """The RL and validation questions (their retriever prompts within `grpo.max_prompt_tokens`) and the pool
    they start from (`grpo.pool_init`; the authors' pool with their data)."""
    from .distill import load_rl_tasks
    from .pool_init import initial_pool

    tasks, val_tasks = load_rl_tasks(cfg, paths)
    tasks, val_tasks = (_without_overlong(ts, tokenizer, cfg, name)
                        for ts, name in ((tasks, "RL"), (val_tasks, "validation")))
    return RLQuestions(tasks, initial_pool(cfg, paths, [*tasks, *val_tasks]), val_tasks)


def build_trainer(cfg: Config, paths: Any, variant: str = "full", accelerator: Any = None,
                  progress: bool = True) -> JointGRPO:
    """Everything the notebook and the launcher share: models, engine, RL questions, pool.

    The `Accelerator` comes first: under a launcher it sets up the process group and each rank's device,
    so the models load onto that rank's device, and only the main process writes shared files while
    every rank waits."""
    from accelerate import Accelerator

    from ..config.paths import check_variant
    from ..models.engines import make_engine

    check_variant(variant)  # before minutes of loading: the run folder's and metrics file's name

    accelerator = accelerator or Accelerator(**accelerator_precision(cfg.grpo.bf16, torch.cuda.is_available()))
    fsdp2_on_cpu(accelerator)  # before loading: the models load where the FSDP2 preparation expects them
    if cfg.distill.rl_selection == "sft_model":  # chosen once, then read back
        select_rl_questions_by_sft_model(cfg, paths, accelerator, progress)
    policy, tokenizer, reference = load_models(cfg, paths, load_device(accelerator, cfg.model.device))
    questions = load_questions(cfg, paths, tokenizer)
    out = paths.grpo_run(variant)
    if accelerator.is_main_process:
        retire_stale_run(out, run_settings(cfg, paths))
    accelerator.wait_for_everyone()
    trainer = JointGRPO(cfg, policy, reference, tokenizer, questions, out, accelerator=accelerator, progress=progress)
    # the engine starts after the policy is prepared: under FSDP2 every rank then holds rank 0's weights (the
    # others loaded zeros with cpu_ram_efficient_loading) and the models are sharded before vLLM takes its share
    trainer.engine = make_engine(cfg.engine, trainer.unwrapped, tokenizer, model_path=str(paths.sft_model),
                                 dtype=cfg.model.dtype, seed=cfg.seed, progress=trainer.progress)
    trainer.policy_source = str(paths.sft_model)
    trainer.resume()
    return trainer


def main(argv: list[str] | None = None) -> None:
    from ..config.context import RunContext

    ap = argparse.ArgumentParser(description="Joint two-role GRPO (spec §4).")
    ap.add_argument("--config", default="tiny", help="profile name or YAML path")
    ap.add_argument("--variant", default="full", choices=sorted(ABLATIONS), help="run name under runs/<profile>/grpo/")
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="config overrides")
    ap.add_argument("--stop-after", type=int, default=None, help="stop after this many steps (a resumable pause)")
    args = ap.parse_args(argv)
    from ..config.profiles import parse_overrides

    overrides = {**ABLATIONS[args.variant], **parse_overrides(args.set)}
    ctx = RunContext.create(args.config, overrides)
    from ..runtime.process_group import closed_at_the_end

    with closed_at_the_end():
        trainer = build_trainer(ctx.cfg, ctx.paths, args.variant)
        trainer.train(stop_after=args.stop_after)


if __name__ == "__main__":
    main()
