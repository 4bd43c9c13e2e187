"""The weights a rank hands its colocated engine under FSDP2 are full tensors equal to the unsharded
model's (issue: the sync streamed each rank's DTensor shards). Two CPU processes over gloo, the real
`fully_shard` on a small Qwen3, one AdamW step, then `engines.policy_weights` on every rank."""
from __future__ import annotations

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _qwen3():
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen3Config(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, head_dim=8, max_position_embeddings=64, tie_word_embeddings=False)
    return Qwen3ForCausalLM(cfg)


def _step(model: torch.nn.Module) -> None:
    ids = torch.arange(24).view(2, 12) % 64  # the same batch on every rank: the mean gradient is the batch's
    model(input_ids=ids, labels=ids).loss.backward()
    torch.optim.AdamW(model.parameters(), lr=1e-2).step()


def _rank(rank: int, world: int, folder: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{folder}/init", rank=rank, world_size=world)
    try:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        from torch.distributed.tensor import DTensor

        from acesql_lib.engines import policy_weights

        mesh = init_device_mesh("cpu", (world,))
        model = _qwen3()
        for layer in model.model.layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        _step(model)
        assert any(isinstance(v, DTensor) for v in model.state_dict().values())  # really sharded
        with policy_weights(model) as weights:
            handed = {name: t.clone() for name, t in weights}
        torch.save(handed, f"{folder}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def test_each_rank_hands_its_engine_the_full_weights_of_the_sharded_model(tmp_path):
    mp.start_processes(_rank, args=(2, str(tmp_path)), nprocs=2, start_method="spawn")
    reference = _qwen3()
    _step(reference)
    expected = reference.state_dict()
    for rank in range(2):
        handed = torch.load(tmp_path / f"rank{rank}.pt")
        assert set(handed) == set(expected)  # the checkpoint names vLLM's load_weights reads
        for name, tensor in expected.items():
            assert handed[name].shape == tensor.shape, name
            assert torch.allclose(handed[name], tensor, atol=1e-6), name
