"""Launched by tests/test_fsdp2_launch_start.py from configs/accelerate/fsdp.yaml (its CPU keys replaced), as each of
two ranks: `grpo_run.build_trainer` as the paper's GRPO launch runs it, with `fsdp_cpu_ram_efficient_loading: true`
(transformers loads zeros on every local rank but 0). Each rank writes RUN_DIR/start_check_rank<N>.json:
- whether its policy and reference, gathered to full tensors, equal the model files on disk (rank 0's weights);
- whether its engine decodes greedily the tokens an unsharded copy of the SFT model decodes, before step 1;
- the bytes of every gradient tensor that exists after each micro-batch's backward of one GRPO step (the sharded
  `.grad` and any unsharded gradient FSDP2 holds back for accumulation), against the bytes of its own shard.

    python -m accelerate.commands.launch --config_file CPU_FSDP_YAML tests/fsdp2_start_check.py RUN_DIR
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch


def _full(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter as a full tensor on this rank (a collective per sharded parameter)."""
    from torch.distributed.tensor import DTensor

    return {name: (p.full_tensor() if isinstance(p, DTensor) else p).detach().float().clone()
            for name, p in model.named_parameters()}


def _equal_to_disk(model: torch.nn.Module, folder: Path) -> bool:
    from safetensors.torch import load_file

    disk = {k: v.float() for f in sorted(folder.glob("*.safetensors")) for k, v in load_file(str(f)).items()}
    full = _full(model)
    return bool(full) and all(name in disk and torch.equal(t, disk[name]) for name, t in full.items())


def gradient_bytes(model: torch.nn.Module) -> tuple[int, int]:
    """(bytes of the gradients that exist on this rank, bytes of this rank's shard of the parameters' gradients)."""
    from torch.distributed.fsdp import FSDPModule
    from torch.distributed.tensor import DTensor

    held, shard = 0, 0
    for p in model.parameters():
        local = p.to_local() if isinstance(p, DTensor) else p
        shard += local.numel() * 4
        if p.grad is not None:
            g = p.grad.to_local() if isinstance(p.grad, DTensor) else p.grad
            held += g.numel() * g.element_size()
    for unit in model.modules():
        if isinstance(unit, FSDPModule):
            for group in unit._get_fsdp_state()._fsdp_param_groups:
                for fp in group.fsdp_params:
                    for t in (getattr(fp, "unsharded_accumulated_grad", None),
                              getattr(getattr(fp, "_unsharded_param", None), "grad", None)):
                        if t is not None:
                            held += t.numel() * t.element_size()
    return held, shard


def main(run: Path) -> dict:
    from acesql_lib.config.context import RunContext
    from acesql_lib.models.hf_engine import HFEngine
    from acesql_lib.train.grpo_run import build_trainer
    from acesql_lib.models.loading import load_policy
    from acesql_lib.train.rollouts import SamplingSpec
    from rl_setup import rl_overrides

    over = rl_overrides(run, **{"grpo.micro_batch_tokens": 160, "grpo.max_steps": 1, "grpo.save_every": 1000})
    ctx = RunContext.create("rehearsal", over)
    trainer = build_trainer(ctx.cfg, ctx.paths, progress=False)
    acc = trainer.acc
    report: dict = {"rank": acc.process_index, "fsdp2": bool(getattr(acc, "is_fsdp2", False))}
    report["policy_equals_disk"] = _equal_to_disk(trainer.model, ctx.paths.sft_model)
    report["reference_equals_disk"] = _equal_to_disk(trainer.reference, Path(ctx.cfg.grpo.reference_model))

    spec = SamplingSpec.grpo(trainer.cfg, step=1)  # the run's own prompts
    prompts = [spec.retriever_prompt(t, trainer.tokenizer) for t in trainer.tasks[:3]]
    with trainer._generating():
        served = [g[0].token_ids for g in trainer.engine.generate(prompts, n=1, temperature=0.0, max_new_tokens=16)]
    saved = os.environ.pop("FSDP_CPU_RAM_EFFICIENT_LOADING")  # a whole copy read from disk on this rank too
    plain, tok = load_policy(str(ctx.paths.sft_model), dtype="float32", device="cpu")
    os.environ["FSDP_CPU_RAM_EFFICIENT_LOADING"] = saved
    plain.eval()
    reference_engine = HFEngine.from_config(ctx.cfg.engine, plain, tok)  # the same engine settings, unsharded
    expected = [g[0].token_ids for g in reference_engine.generate(prompts, n=1, temperature=0.0, max_new_tokens=16)]
    report["engine_decodes_the_policy"] = served == expected

    seen: list[tuple[int, int]] = []
    backward = acc.backward

    def counted(loss, **kwargs):
        backward(loss, **kwargs)
        seen.append(gradient_bytes(trainer.model))

    acc.backward = counted
    trainer.step()
    report["micro_batches"] = len(seen)
    report["gradient_bytes"] = [h for h, _ in seen]
    report["shard_bytes"] = seen[0][1] if seen else 0
    return report


if __name__ == "__main__":
    from acesql_lib.runtime.process_group import closed_at_the_end

    with closed_at_the_end():
        found = main(Path(sys.argv[1]))
        (Path(sys.argv[1]) / f"start_check_rank{found['rank']}.json").write_text(json.dumps(found))
