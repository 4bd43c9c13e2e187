"""Run under .venv-vllm by tests/test_grpo_vllm.py, as each of two torchrun ranks (gloo): the colocated vLLM
engine a launched rank builds (`engines.make_engine`, as `grpo_run.build_trainer` does) runs through vLLM's external
launcher inside the launch's process group, decodes greedily what this rank's policy decodes, and after the
policy changes and the engine is synced in place, still does; the group stays usable for the training's
collectives. Prints one JSON line per rank.

    python -m torch.distributed.run --nproc_per_node 2 tests/vllm_ranks_check.py MODEL_DIR
"""
from __future__ import annotations

import json
import sys

import torch
import torch.distributed as dist


def main(model_dir: str) -> dict:
    from acesql_lib.config.model import EngineConfig
    from acesql_lib.models.engines import make_engine
    from acesql_lib.models.hf_engine import HFEngine
    from acesql_lib.models.loading import load_policy

    dist.init_process_group("gloo")  # as accelerate's launcher does before the trainer builds its engine
    rank = dist.get_rank()
    policy, tok = load_policy(model_dir, dtype="float32", device="cpu")
    policy.eval()
    torch.manual_seed(rank)  # each rank's policy moves its own way below: the engines are not shared
    prompts = [f"<|im_start|>user\nWhich club has id {rank}{i}?<|im_end|>\n<|im_start|>assistant\n" for i in range(3)]

    def greedy(engine) -> list[list[int]]:
        return [g[0].token_ids for g in engine.generate(prompts, temperature=0.0, max_new_tokens=16)]

    engine = make_engine(EngineConfig(kind="vllm", max_model_len=512), policy, tok, model_path=model_dir,
                         dtype="float32")
    before, hf_before = greedy(engine), greedy(HFEngine(policy, tok))
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(0.05 * torch.randn_like(p))
    engine.sync_weights(policy)
    after, hf_after = greedy(engine), greedy(HFEngine(policy, tok))
    total = torch.tensor([1.0])
    dist.all_reduce(total)  # the launch's group still serves the training's collectives
    out = {"rank": rank, "world": dist.get_world_size(), "external": engine.external, "before": before == hf_before,
           "after": after == hf_after, "moved": before != after, "all_reduce": float(total)}
    dist.barrier()
    dist.destroy_process_group()
    return out


if __name__ == "__main__":
    sys.stdout.write(json.dumps(main(sys.argv[1])) + "\n")  # one write: the two ranks share torchrun's stdout
    sys.stdout.flush()
