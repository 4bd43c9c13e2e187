"""Notebook 06's ablation runs: each variant trained from the SFT model and evaluated like notebook 05, one
after another in this process (the paper profile's four variants are separate multi-day launches anyway).
A vLLM engine is carried from each run to the next where the settings match (acesql_lib/models/engine_reuse.py): a
variant's training engine serves its evaluation and the next variant's training.
"""
from __future__ import annotations

from typing import Any, Sequence

Results = dict[tuple[str, str], dict[str, Any]]  # (variant, set name) -> that evaluation's metrics


def run_variant(profile: str, overrides: dict[str, Any], variant: str, eval_sets: Sequence[str],
                progress: bool = True) -> dict[str, dict[str, Any]]:
    """Train `variant` (grpo_run.ABLATIONS) to the profile's step count and evaluate its final model on
    `eval_sets`; metrics by set name. The full run is notebook 04's: already complete, it is only evaluated."""
    from ..config.context import RunContext
    from ..models.engine_reuse import reused_engines
    from .evaluate import evaluate_sets
    from ..train.grpo_run import ABLATIONS, build_trainer

    ctx = RunContext.create(profile, {**overrides, **ABLATIONS[variant]})
    with reused_engines():  # the training engine serves the evaluation when their settings match
        trainer = build_trainer(ctx.cfg, ctx.paths, variant=variant, progress=progress)
        final = trainer.train()
        trainer.engine.close()  # one engine at a time: kept for the evaluation, or released before its engine starts
        del trainer
        results = evaluate_sets(ctx.cfg, ctx.paths, final, list(eval_sets), f"rl_{variant}", progress=progress)
    return {name: result.metrics for name, result in results.items()}


def run_variants(profile: str, overrides: dict[str, Any], variants: Sequence[str], eval_sets: Sequence[str],
                 progress: bool = True) -> Results:
    """`run_variant` for each of `variants`, one after another; results in the order of `variants`."""
    from ..models.engine_reuse import reused_engines

    with reused_engines():  # one vLLM engine carried through every variant where the settings allow
        return {(v, s): m for v in variants for s, m in run_variant(profile, overrides, v, eval_sets, progress).items()}
