"""Run under .venv-vllm by tests/test_grpo_vllm.py: joint GRPO on the RL fixture with the colocated vLLM
engine (`engine.kind: vllm`), checking after every optimizer step that the engine, synced in place,
decodes greedily exactly the tokens the live HF policy decodes. Prints one JSON line.

    python tests/grpo_vllm_check.py RUN_DIR STEPS
"""
from __future__ import annotations

import json
import sys
from pathlib import Path


def main(run: Path, steps: int) -> dict:
    from acesql_lib.config.context import RunContext
    from acesql_lib.models.hf_engine import HFEngine
    from acesql_lib.models.vllm_engine import VLLMEngine
    from acesql_lib.train.grpo_run import build_trainer
    from rl_setup import rl_overrides
    from acesql_lib.train.rollouts import SamplingSpec

    over = rl_overrides(run, **{"engine.kind": "vllm", "grpo.max_steps": steps, "grpo.val_every": 2})
    ctx = RunContext.create("tiny", over)
    trainer = build_trainer(ctx.cfg, ctx.paths, progress=False)
    assert isinstance(trainer.engine, VLLMEngine), type(trainer.engine)
    spec = SamplingSpec.grpo(trainer.cfg, step=1)  # the run's own prompts
    prompts = [spec.retriever_prompt(t, trainer.tokenizer) for t in trainer.tasks[:8]]

    def greedy(engine) -> list[list[int]]:
        return [g[0].token_ids for g in engine.generate(prompts, n=1, temperature=0.0, max_new_tokens=24)]

    def compare(step: int) -> None:
        trainer.unwrapped.eval()
        hf, vllm = greedy(HFEngine(trainer.unwrapped, trainer.tokenizer)), greedy(trainer.engine)
        trainer.unwrapped.train()
        rows.append({"step": step, "hf": hf, "vllm": vllm})

    rows: list[dict] = []
    compare(0)
    trainer.train(on_step=lambda report: compare(report.step))
    log = [json.loads(x) for x in (trainer.out / "metrics.jsonl").read_text().splitlines()]
    return {"rows": rows, "validated": [m["step"] for m in log if any(k.startswith("val/") for k in m)],
            "final": (trainer.out / "final" / "config.json").is_file()}


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]), int(sys.argv[2]))), flush=True)
