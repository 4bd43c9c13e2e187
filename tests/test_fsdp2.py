"""FSDP2 on two CPU processes over gloo, the real `fully_shard` on a small Qwen3:
- the weights a rank hands its colocated engine are full tensors equal to the unsharded model's (the sync
  streamed each rank's DTensor shards);
- a checkpoint holds the whole optimizer state (each rank's shards of Adam's moments) and the model, and
  restoring both into a fresh sharded model continues exactly as the run that never stopped."""
from __future__ import annotations

import collections
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from pathlib import Path

import pytest

from launching import rank_finished, rank_started


def _qwen3():
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen3Config(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, head_dim=8, max_position_embeddings=64, tie_word_embeddings=False)
    return Qwen3ForCausalLM(cfg)


def _step(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None, shift: int = 0) -> None:
    ids = (torch.arange(24).view(2, 12) + shift) % 64  # the same batch on every rank: the mean gradient is the batch's
    optimizer = optimizer or torch.optim.AdamW(model.parameters(), lr=1e-2)
    optimizer.zero_grad(set_to_none=True)
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()


def _rank(rank: int, world: int, folder: str) -> None:
    rank_started()
    dist.init_process_group("gloo", init_method=f"file://{folder}/init", rank=rank, world_size=world)
    try:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        from torch.distributed.tensor import DTensor

        from acesql_lib.models.vllm_engine import policy_weights

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
    rank_finished()


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


def _shard(model: torch.nn.Module, mesh) -> torch.nn.Module:
    from torch.distributed.fsdp import fully_shard

    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    return fully_shard(model, mesh=mesh)


def _teardown(acc) -> None:
    """End a launched rank: the ranks meet first, so none tears the gloo group down while the other still
    uses it (a rank aborted once), then accelerate and the group close."""
    if dist.is_initialized():
        dist.barrier()
    acc.end_training()
    if dist.is_initialized():
        dist.destroy_process_group()


def _checkpoint_rank(rank: int, world: int, folder: str, port: int) -> None:
    rank_started()
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank),
                      WORLD_SIZE=str(world))
    from accelerate import Accelerator
    from torch.distributed.device_mesh import init_device_mesh

    from acesql_lib.train import checkpoint as ckpt
    from acesql_lib.config.profiles import load_config
    from acesql_lib.roles.pool import ColumnSetPool

    acc = Accelerator(cpu=True)  # the process group over gloo, as a launched GRPO rank has it
    try:
        mesh = init_device_mesh("cpu", (world,))
        straight = _shard(_qwen3(), mesh)
        opt = torch.optim.AdamW(straight.parameters(), lr=1e-2)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: 1.0 / (i + 1))
        _step(straight, opt)
        sched.step()
        pool = ColumnSetPool(0.5)
        pool.add_question("q1", gold=["t.a"], correct_sets=[["t.a", "t.b"]])
        ckpt.save(Path(folder) / "run", ckpt.TrainState(step=1), ckpt.TrainingObjects(acc, straight, opt, sched), pool,
                  load_config("tiny"))
        _step(straight, opt, shift=5)  # the run that never stopped: step 2
        resumed = _shard(_qwen3(), mesh)  # a fresh launch
        opt2 = torch.optim.AdamW(resumed.parameters(), lr=1e-2)
        sched2 = torch.optim.lr_scheduler.LambdaLR(opt2, lambda i: 1.0 / (i + 1))
        resumed_objects = ckpt.TrainingObjects(acc, resumed, opt2, sched2)
        state, pool2 = ckpt.load_latest(Path(folder) / "run", resumed_objects, gamma=0.5)
        _step(resumed, opt2, shift=5)  # step 2 after the resume
        a = {k: v.full_tensor() for k, v in straight.state_dict().items()}
        b = {k: v.full_tensor() for k, v in resumed.state_dict().items()}
        local = next(iter(opt.state_dict()["state"].values()))["exp_avg"]
        torch.save({"straight": a, "resumed": b, "step": state.step, "same_pool": pool2.targets("q1") == pool.targets("q1") != [],
                    "lr": opt2.param_groups[0]["lr"], "local_rows": local.to_local().shape[0],
                    "full_rows": local.shape[0]}, f"{folder}/ckpt{rank}.pt")
    finally:
        _teardown(acc)
    rank_finished()


def test_a_sharded_checkpoint_is_written_by_every_rank_and_resumes_exactly(tmp_path):
    """checkpoint.save / load_latest under FSDP2 over 2 gloo processes: each rank writes and reads its own
    shards of the model and of Adam's moments (torch's distributed checkpoint; no process holds the whole
    optimizer state), and the resumed run's next step equals the straight run's. The same checkpoint
    then resumes on one process, into an unsharded model (resharded on load)."""
    from launching import free_port

    from acesql_lib.train import checkpoint as ckpt

    mp.start_processes(_checkpoint_rank, args=(2, str(tmp_path), free_port()), nprocs=2, start_method="spawn")
    for rank in range(2):
        got = torch.load(tmp_path / f"ckpt{rank}.pt")
        assert got["straight"].keys() == got["resumed"].keys()
        for name, tensor in got["straight"].items():
            assert torch.allclose(tensor, got["resumed"][name], atol=1e-6), name
        assert got["step"] == 1 and got["same_pool"] and got["lr"] == pytest.approx(5e-3)
        assert got["local_rows"] < got["full_rows"]  # a rank's own optimizer state is only its shard
    saved = tmp_path / "run" / "checkpoint-1"
    assert {p.name for p in (saved / ckpt.SHARDED).glob("*.distcp")} == {"__0_0.distcp", "__1_0.distcp"}
    assert not (saved / "optimizer.pt").exists()

    from accelerate import Accelerator

    model = _qwen3()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: 1.0)
    acc = Accelerator(cpu=True)
    ckpt.load_latest(tmp_path / "run", ckpt.TrainingObjects(acc, model, opt, sched), gamma=0.5)
    from acesql_lib.config.profiles import load_config
    from acesql_lib.roles.pool import ColumnSetPool

    # and the other way: one process's checkpoint (model/, optimizer.pt) resumes under FSDP2
    ckpt.save(tmp_path / "gathered", ckpt.TrainState(step=1), ckpt.TrainingObjects(acc, model, opt, sched),
              ColumnSetPool(0.5), load_config("tiny"))
    assert (tmp_path / "gathered" / "checkpoint-1" / "optimizer.pt").exists()
    _step(model, opt, shift=5)
    for name, tensor in model.state_dict().items():
        assert torch.allclose(tensor, got["straight"][name], atol=1e-6), name
    mp.start_processes(_gathered_rank, args=(2, str(tmp_path), free_port()), nprocs=2, start_method="spawn")
    for rank in range(2):
        resumed = torch.load(tmp_path / f"gathered{rank}.pt")
        for name, tensor in got["straight"].items():
            assert torch.allclose(resumed[name], tensor, atol=1e-6), name


def _gathered_rank(rank: int, world: int, folder: str, port: int) -> None:
    rank_started()
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank),
                      WORLD_SIZE=str(world))
    from accelerate import Accelerator
    from torch.distributed.device_mesh import init_device_mesh

    from acesql_lib.train import checkpoint as ckpt

    acc = Accelerator(cpu=True)
    try:
        model = _shard(_qwen3(), init_device_mesh("cpu", (world,)))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: 1.0)
        ckpt.load_latest(Path(folder) / "gathered", ckpt.TrainingObjects(acc, model, opt, sched), gamma=0.5)
        _step(model, opt, shift=5)
        torch.save({k: v.full_tensor() for k, v in model.state_dict().items()}, f"{folder}/gathered{rank}.pt")
    finally:
        _teardown(acc)
    rank_finished()


def _reference_rank(rank: int, world: int, folder: str, port: int) -> None:
    rank_started()
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank),
                      WORLD_SIZE=str(world), ACCELERATE_USE_FSDP="true", FSDP_VERSION="2",
                      FSDP_AUTO_WRAP_POLICY="TRANSFORMER_BASED_WRAP", FSDP_TRANSFORMER_CLS_TO_WRAP="Qwen3DecoderLayer",
                      FSDP_CPU_RAM_EFFICIENT_LOADING="true")
    from accelerate import Accelerator

    acc = Accelerator(cpu=True)  # as a rank of the FSDP2 launch has it on CPU
    try:
        from acesql_lib.train.policy_loss import completion_logprobs, pad_batch
        from acesql_lib.models.sharding import fsdp2_on_cpu, shard_reference

        assert fsdp2_on_cpu(acc)
        whole = _qwen3()
        if rank:  # cpu_ram_efficient_loading: only rank 0 reads the weights, the others hold zeros
            with torch.no_grad():
                for p in whole.parameters():
                    p.zero_()
        reference = shard_reference(whole.requires_grad_(False), acc)
        held = sum(p.to_local().numel() for p in reference.parameters())
        prompts = [[3, 5, 7, 9], [11, 13]]
        completions = [[2, 4, 6], [8, 10, 12, 14, 16]]
        ids, attn, pos, _, c_len = pad_batch(prompts, completions, 0, torch.device("cpu"))
        with torch.no_grad():
            logp = completion_logprobs(reference, ids, attn, pos, c_len, chunk_tokens=4)
        gathered_after = [type(p).__name__ for p in reference.parameters()]
        torch.save({"held": held, "logp": logp, "frozen": not any(p.requires_grad for p in reference.parameters()),
                    "training": reference.training, "sharded_after_forward": set(gathered_after) == {"DTensor"}},
                   f"{folder}/ref{rank}.pt")
    finally:
        _teardown(acc)
    rank_finished()


def test_the_reference_is_sharded_like_the_policy_and_scores_as_the_whole_model(tmp_path):
    """Each of 2 ranks holds about half of the frozen reference (accelerate's fsdp2_prepare_model, as the policy),
    rank 1 started from zeros gets rank 0's weights, the log-probabilities it gives are the unsharded model's, and
    after a forward pass every unit is back to its shard (no gathered weights held between steps)."""
    from acesql_lib.train.policy_loss import completion_logprobs, pad_batch
    from launching import free_port

    mp.start_processes(_reference_rank, args=(2, str(tmp_path), free_port()), nprocs=2, start_method="spawn")
    whole = _qwen3()
    ids, attn, pos, _, c_len = pad_batch([[3, 5, 7, 9], [11, 13]], [[2, 4, 6], [8, 10, 12, 14, 16]], 0,
                                          torch.device("cpu"))
    with torch.no_grad():
        expected = completion_logprobs(whole, ids, attn, pos, c_len)
    total = sum(p.numel() for p in whole.parameters())
    for rank in range(2):
        got = torch.load(tmp_path / f"ref{rank}.pt")
        assert got["frozen"] and not got["training"] and got["sharded_after_forward"]
        assert got["held"] <= total / 2 + 64  # its shard (dim-0 halves, up to one row of padding per tensor)
        assert torch.allclose(got["logp"], expected, atol=1e-6)


def test_fsdp2_reduces_gradients_in_fp32_with_bf16_compute():
    """accelerate's bf16 FSDP2 policy reduces gradients in bf16; the trainer asks for fp32 reduction (the
    authors' verl) and keeps bf16 parameters and outputs. DDP and single-process runs are left as they are."""
    from types import SimpleNamespace

    from accelerate.utils import FullyShardedDataParallelPlugin

    from acesql_lib.models.sharding import reduce_gradients_in_fp32

    plugin = FullyShardedDataParallelPlugin(fsdp_version=2, mixed_precision_policy="bf16")
    assert plugin.mixed_precision_policy.reduce_dtype == torch.bfloat16  # accelerate's default
    acc = SimpleNamespace(is_fsdp2=True, state=SimpleNamespace(fsdp_plugin=plugin))
    assert reduce_gradients_in_fp32(acc)
    mp = plugin.mixed_precision_policy
    assert (mp.param_dtype, mp.reduce_dtype, mp.output_dtype) == (torch.bfloat16, torch.float32, torch.bfloat16)
    assert not reduce_gradients_in_fp32(acc)  # already fp32
    assert not reduce_gradients_in_fp32(SimpleNamespace(is_fsdp2=False))


PROMPTS = ["select name from singer", "how many singers are there", "select age from singer where year = 1987"]


def _tiny_lm(folder: str):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(f"{folder}/model")
    tokenizer.padding_side = "left"
    return AutoModelForCausalLM.from_pretrained(f"{folder}/model"), tokenizer


def _generate_rank(rank: int, world: int, folder: str) -> None:
    rank_started()
    dist.init_process_group("gloo", init_method=f"file://{folder}/init", rank=rank, world_size=world)
    try:
        from torch.distributed.device_mesh import init_device_mesh

        from acesql_lib.models.hf_engine import HFEngine, HFOptions
        from acesql_lib.models.sharding import is_sharded, unsharded

        model, tokenizer = _tiny_lm(folder)
        model = _shard(model, init_device_mesh("cpu", (world,)))
        # one generate call per prompt
        engine = HFEngine(model, tokenizer, HFOptions(batch_size=1, greedy_batch_size=1))
        mine = PROMPTS[:1] if rank == 0 else PROMPTS  # rank 0 decodes once, rank 1 three times and longer
        with unsharded(model):
            whole = not is_sharded(model)
            out = engine.generate(mine, temperature=0.0, max_new_tokens=6 + 10 * rank)
        # still sharded: one call per rank, other lengths; the engine decodes in generate, which keeps the ranks'
        # collective forwards in lockstep (the kit's own loop would leave rank 1 waiting on a finished rank 0)
        lockstep = engine.generate(PROMPTS[rank:rank + 1], temperature=0.0, max_new_tokens=4 + 8 * rank)
        torch.save({"tokens": [g[0].token_ids for g in out], "whole": whole, "sharded_after": is_sharded(model),
                    "lockstep": lockstep[0][0].token_ids}, f"{folder}/gen{rank}.pt")
    finally:
        dist.destroy_process_group()
    rank_finished()


def test_ranks_generate_different_work_on_the_gathered_policy_without_waiting_on_each_other(tmp_path):
    """GRPO's HF engine decodes on the live policy; under FSDP2 its units are gathered once for generation
    (`sharding.unsharded`), so ranks with other prompt counts and lengths do not wait on each other (transformers
    would otherwise keep an FSDP model's ranks decoding in lockstep, a hang here), and the tokens are the
    unsharded model's. A model still sharded decodes in `generate`, whose ranks keep in lockstep."""
    import time

    from acesql_lib.models.hf_engine import HFEngine, HFOptions
    from acesql_lib.models.loading import build_tiny_model, save_tiny, train_tiny_tokenizer

    tokenizer = train_tiny_tokenizer(PROMPTS * 4, vocab_size=300)
    save_tiny(build_tiny_model(tokenizer, hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=1,
                               intermediate_size=64, max_position=128, seed=0), tokenizer, tmp_path / "model")
    ctx = mp.start_processes(_generate_rank, args=(2, str(tmp_path)), nprocs=2, start_method="spawn", join=False)
    deadline = time.time() + 180
    while not ctx.join(timeout=2):
        if time.time() > deadline:
            for p in ctx.processes:
                p.kill()
            raise AssertionError("the ranks did not finish generating: one waits on the other's decoding")
    model, tokenizer = _tiny_lm(str(tmp_path))
    engine = HFEngine(model, tokenizer, HFOptions(batch_size=1))
    for rank in range(2):
        got = torch.load(tmp_path / f"gen{rank}.pt")
        assert got["whole"] and got["sharded_after"]
        mine = PROMPTS[:1] if rank == 0 else PROMPTS
        expected = engine.generate(mine, temperature=0.0, max_new_tokens=6 + 10 * rank)
        assert got["tokens"] == [g[0].token_ids for g in expected]
        alone = engine.generate(PROMPTS[rank:rank + 1], temperature=0.0, max_new_tokens=4 + 8 * rank)
        assert got["lockstep"] == alone[0][0].token_ids


def test_the_units_fsdp2_shards_are_the_decoder_layers_with_or_without_lora_adapters():
    from acesql_lib.models.loading import LoraSpec, apply_lora
    from acesql_lib.models.sharding import decoder_layers

    plain = _qwen3()
    assert decoder_layers(plain) == list(plain.model.layers)
    adapted = apply_lora(_qwen3(), LoraSpec(r=4, alpha=8))  # model.lora: the policy is a PEFT model
    assert decoder_layers(adapted) == list(adapted.get_base_model().model.layers)
    with pytest.raises(ValueError, match="no decoder layers"):
        decoder_layers(torch.nn.Linear(2, 2))


def _state_rank(rank: int, world: int, folder: str, port: int) -> None:
    rank_started()
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank),
                      WORLD_SIZE=str(world), ACCELERATE_USE_FSDP="true", FSDP_VERSION="2",
                      FSDP_AUTO_WRAP_POLICY="TRANSFORMER_BASED_WRAP", FSDP_TRANSFORMER_CLS_TO_WRAP="Qwen3DecoderLayer")
    from accelerate import Accelerator

    acc = Accelerator(cpu=True)
    try:
        from torch.distributed.tensor import DTensor

        from acesql_lib.train.pcgrad import save_grads
        from acesql_lib.models.sharding import fsdp2_on_cpu

        assert fsdp2_on_cpu(acc)
        model = _qwen3()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        model, opt = acc.prepare(model, opt)

        def local_bytes(tensors) -> int:
            return sum((t.to_local() if isinstance(t, DTensor) else t).numel() * t.element_size()
                       for t in tensors if t is not None)

        ids = torch.arange(24).view(2, 12) % 64
        acc.backward(model(input_ids=ids, labels=ids).loss)
        opt.step()  # Adam's moments exist from here on
        params = list(model.parameters())
        acc.backward(model(input_ids=ids, labels=ids).loss)
        saved = save_grads(params)  # PCGrad's copy of the first role's gradient
        acc.backward(model(input_ids=ids, labels=ids).loss)  # the second role's gradient
        moments = [s[k] for s in opt.state.values() for k in ("exp_avg", "exp_avg_sq")]
        torch.save({"weights": local_bytes(params), "grads": local_bytes(p.grad for p in params),
                    "saved": local_bytes(saved), "adam": local_bytes(moments)}, f"{folder}/state{rank}.pt")
    finally:
        _teardown(acc)
    rank_finished()


def test_the_training_state_term_is_what_each_rank_of_accelerates_fsdp2_holds():
    """The memory formula's state at the end of the backward pass (`grpo_step_bytes`, 20 B per parameter over N
    processes: fp32 weights, gradients, Adam's two moments, PCGrad's saved gradient) against the tensors each of
    2 ranks holds under accelerate's own FSDP2 after an optimizer step and two backward passes: equal up to the
    rows FSDP2 pads a tensor with to split it evenly."""
    import tempfile

    from acesql_lib.train.memory import UpdateLayout, grpo_step_bytes
    from launching import free_port

    whole = _qwen3()
    cfg = whole.config
    shape = {"vocab_size": cfg.vocab_size, "hidden_size": cfg.hidden_size, "num_hidden_layers": cfg.num_hidden_layers,
             "num_attention_heads": cfg.num_attention_heads, "num_key_value_heads": cfg.num_key_value_heads,
             "head_dim": cfg.head_dim, "intermediate_size": cfg.intermediate_size, "tie_word_embeddings": False}
    P = sum(p.numel() for p in whole.parameters())
    terms = grpo_step_bytes(shape, 1, 1, 1, UpdateLayout(processes=2, fsdp=True, reference=False, runtime=False))
    assert terms["end_of_backward"] == pytest.approx(20 * P / 2)
    with tempfile.TemporaryDirectory() as folder:
        mp.start_processes(_state_rank, args=(2, folder, free_port()), nprocs=2, start_method="spawn")
        got = [torch.load(f"{folder}/state{rank}.pt") for rank in range(2)]
    for held in got:
        assert held["weights"] == held["grads"] == held["saved"] == held["adam"] / 2  # 4 B each, Adam 8 B
        assert 4 * P / 2 <= held["weights"] <= 4 * P / 2 + 4 * 2 * cfg.hidden_size * 16  # its shard, a few rows padded
        total = held["weights"] + held["grads"] + held["saved"] + held["adam"]
        assert total == pytest.approx(terms["end_of_backward"], rel=0.02)




# Two scaled-down Qwen3s (4 layers), each putting the largest moment of FSDP2's gathered units where the other does
# not: "head", a vocabulary whose LM head outweighs a decoder layer (as Qwen3-8B's 151,936 x 4,096 head outweighs its
# layers: the most is held while the head's gradient is reduced), and "layers", decoder layers outweighing the head
# (two layers gathered while the one before keeps its fp32 gradient copy). One micro-batch of 2 sequences of 8 prompt
# and 64 completion tokens: 128 positions of logits, in chunks of 32 (`grpo.logprob_chunk_tokens`) or whole.
_MEMORY_SHAPES = {"head": dict(vocab_size=4096, hidden_size=64, intermediate_size=192, head_dim=16),
                  "layers": dict(vocab_size=512, hidden_size=128, intermediate_size=384, head_dim=32)}
_MEMORY_BATCH = (2, 8, 64, 32)  # sequences, prompt tokens, completion tokens, logprob_chunk_tokens


def _memory_qwen3(name: str):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    return Qwen3ForCausalLM(Qwen3Config(num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                                        max_position_embeddings=128, tie_word_embeddings=False,
                                        **_MEMORY_SHAPES[name]))


def _held_in_backward(prof) -> dict:
    """What a profiled forward and backward pass of the policy held, from the profiler's record of every allocation
    and free of the CPU allocator (exact bytes, each with the scopes it happened in), sorted by what the memory
    formula counts it in:
    - units: FSDP2's all-gathers (`gathered`: the flat buffer and the unsharded parameters, per unit), the
      gradients autograd writes into the gathered parameters (`unsharded_grad`: freed by FSDP2's reduce) and the
      fp32 copies they are reduce-scattered from (`reduce`: FSDP2 keeps the last one until the next unit's reduce);
    - layers: the forward's allocations inside the embedding and the decoder layers still alive in the backward
      pass (under activation checkpointing, each layer's input);
    - logits: the forward's from the LM head on, and the backward's before the head unit's (the backward pass's
      first FSDP2 work);
    - not counted in these terms: `staging`, what gloo's collectives and the CPU kernel of FSDP2's gradient copy-in
      allocate inside themselves (NCCL's and CUDA's write in place; `NCCL_BUFFERS` holds the communicator's own);
      `sharded_grad`, the reduce-scatters' outputs (this rank's gradient shard: the state term); `other`.
    Returns each term's largest in the backward pass, the units gathered when it starts, the most decoder layers
    gathered at once, and the backward pass's peak with what it held."""
    events = []

    def walk(event, scopes):
        if type(event.extra_fields).__name__ == "_ExtraFields_Allocation":
            events.append((event.start_time_ns, event.extra_fields.ptr, event.extra_fields.alloc_size, scopes))
        for child in event.children:
            walk(child, scopes + (event.name,))

    for root in prof.profiler.kineto_results.experimental_event_tree():
        walk(root, ())
    events.sort(key=lambda e: e[0])
    live: dict[int, dict] = {}
    blocks = []
    for t, ptr, size, scopes in events:  # an address is reused once freed: pair them in time order
        if size > 0:
            live[ptr] = {"t": t, "size": size, "scopes": scopes, "freed_t": None, "freed": ()}
            blocks.append(live[ptr])
        elif ptr in live:
            live[ptr]["freed_t"], live[ptr]["freed"] = t, scopes
            del live[ptr]
    start = min(b["t"] for b in blocks if "policy backward" in b["scopes"])
    head_end = max(b["t"] for b in blocks if "logits" in b["scopes"] and "policy forward" in b["scopes"])
    unit_work = min(b["t"] for b in blocks if b["t"] > start and any(s.startswith("FSDP::") for s in b["scopes"]))
    for b in blocks:
        scopes, freed = " | ".join(b["scopes"]), " | ".join(b["freed"])
        b["unit"] = None
        if "c10d::" in scopes or "fsdp::chunk_cat" in scopes:
            b["kind"] = "staging"
        elif "FSDP::all_gather" in scopes:
            b["kind"] = "gathered"
            scope = next(s for s in reversed(b["scopes"]) if s.startswith("FSDP::all_gather"))
            b["unit"] = scope[scope.index("(") + 1:-1]  # "FSDP::all_gather (model.layers.3)", "..._copy_out (...)"
        elif "FSDP::post_backward_reduce" in scopes:
            b["kind"] = "reduce" if b["freed_t"] is not None else "sharded_grad"
        elif "FSDP::post_backward_reduce" in freed:
            b["kind"] = "unsharded_grad"
        elif "policy forward" in scopes:
            b["kind"] = ("layers" if "layer activations" in scopes else
                         "logits" if "logits" in scopes or b["t"] > head_end else "other")
        else:
            b["kind"] = "logits" if b["t"] < unit_work else "other"
    changes = sorted([(b["t"], b["size"], b) for b in blocks]
                     + [(b["freed_t"], -b["size"], b) for b in blocks if b["freed_t"] is not None],
                     key=lambda c: (c[0], c[1]))  # a free before an allocation at the same instant
    held: collections.Counter = collections.Counter()
    gathered: collections.Counter = collections.Counter()
    most: collections.Counter = collections.Counter()
    out: dict = {"gathered_at_start": None, "layers_gathered_at_once": 0, "peak": 0}
    for t, size, b in changes:
        if out["gathered_at_start"] is None and t >= start:
            out["gathered_at_start"] = {u: v for u, v in gathered.items() if v}
        held[b["kind"]] += size
        if b["unit"]:
            gathered[b["unit"]] += size
        if t < start:
            continue
        for kind, now in held.items():
            most[kind] = max(most[kind], now)
        units = held["gathered"] + held["unsharded_grad"] + held["reduce"]
        if units > most["units"]:
            most["units"] = units
            out["units_at_most"] = {**{k: held[k] for k in ("unsharded_grad", "reduce") if held[k]},
                                    **{u: v for u, v in gathered.items() if v}}
        layers = sum(1 for u, v in gathered.items() if v and ".layers." in f".{u}")
        out["layers_gathered_at_once"] = max(out["layers_gathered_at_once"], layers)
        if sum(held.values()) > out["peak"]:
            out["peak"], out["at_peak"] = sum(held.values()), {k: v for k, v in held.items() if v}
    return {**out, **{k: most[k] for k in ("logits", "layers", "units")}}


def _memory_rank(rank: int, world: int, folder: str, port: int) -> None:
    rank_started()
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank),
                      WORLD_SIZE=str(world), ACCELERATE_USE_FSDP="true", FSDP_VERSION="2",
                      FSDP_AUTO_WRAP_POLICY="TRANSFORMER_BASED_WRAP", FSDP_TRANSFORMER_CLS_TO_WRAP="Qwen3DecoderLayer")
    torch.set_num_threads(1)  # two ranks on two cores
    from accelerate import Accelerator

    acc = Accelerator(cpu=True, mixed_precision="bf16")  # the GPU launch's precision (configs/accelerate/fsdp.yaml)
    try:
        from torch.profiler import ProfilerActivity, profile, record_function

        from acesql_lib.train.policy_loss import completion_logprobs, pad_batch
        from acesql_lib.models.sharding import fsdp2_on_cpu, reduce_gradients_in_fp32

        assert fsdp2_on_cpu(acc) and reduce_gradients_in_fp32(acc)  # as JointGRPO sets its policy up
        b, p, c, chunk = _MEMORY_BATCH
        held = {}
        for name in _MEMORY_SHAPES:
            model = _memory_qwen3(name)
            # activation checkpointing as build_trainer turns it on
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            model, opt = acc.prepare(model, torch.optim.AdamW(model.parameters(), lr=1e-2))
            model.train()
            ids = torch.randint(1, model.config.vocab_size, (b, p + c), generator=torch.Generator().manual_seed(1))
            x, attn, pos, cmask, c_len = pad_batch([r[:p] for r in ids.tolist()], [r[p:] for r in ids.tolist()], 0,
                                                    torch.device("cpu"))

            def update(chunk_tokens: int) -> None:  # the policy's part of JointGRPO._backward, on one micro-batch
                with record_function("policy forward"):
                    logp = completion_logprobs(model, x, attn, pos, c_len, chunk_tokens)
                    loss = (logp * cmask).sum() / cmask.sum()
                with record_function("policy backward"):
                    acc.backward(loss)

            update(chunk)  # FSDP2's lazy initialisation
            opt.zero_grad(set_to_none=True)
            ranges = []

            def tagged(tag: str):
                def enter(module, args):
                    ranges.append(record_function(tag))
                    ranges[-1].__enter__()

                def leave(module, args, output):
                    ranges.pop().__exit__(None, None, None)
                return enter, leave

            for module, tag in [(model.model.embed_tokens, "layer activations"), (model.lm_head, "logits"),
                                *[(layer, "layer activations") for layer in model.model.layers]]:
                enter, leave = tagged(tag)
                module.register_forward_pre_hook(enter)
                module.register_forward_hook(leave)
            for chunk_tokens in ((chunk, 0) if name == "head" else (chunk,)):
                with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
                    update(chunk_tokens)
                held[(name, chunk_tokens)] = _held_in_backward(prof)
                opt.zero_grad(set_to_none=True)
        torch.save(held, f"{folder}/held{rank}.pt")
    finally:
        _teardown(acc)
    rank_finished()


def test_the_logits_layers_and_units_terms_are_what_each_rank_of_accelerates_fsdp2_holds_in_its_backward():
    """The memory formula's logits, layers and units terms (`grpo_step_bytes`, bf16 compute over fp32 masters,
    activation checkpointing) against the most each of 2 ranks holds of each in the backward pass of accelerate's
    own FSDP2 (bf16 parameters, fp32 gradient reduction, the trainer's `completion_logprobs`), counted from the
    profiler's exact record of the CPU allocator (`_held_in_backward`), within 5%:
    - accelerate's head unit (final norm and LM head) is gathered alone from its forward into the backward pass, its
      bf16 weights (w·(V·h + h)), and never more than two decoder layers are gathered at once;
    - units: the most the gathered units hold at once: with the larger head while its gradient is reduced (its bf16
      gradient and fp32 copy, the last layer prefetched), with the larger layers in a layer's backward (its weights
      and gradient, the next one prefetched, the previous one's fp32 gradient copy);
    - layers: each decoder layer's bf16 input (FSDP2 casts the residual stream to the compute dtype);
    - logits: bf16 under FSDP2 (accelerate's FSDP2 path neither autocasts nor hands the logits back in fp32):
      chunked, the logits, every other chunk's gradient and one chunk's fp32 work; whole, their fp32 copy and the
      log-softmax's three buffers."""
    import tempfile

    from acesql_lib.train.memory import UpdateLayout, grpo_step_bytes
    from launching import free_port

    b, p, c, chunk = _MEMORY_BATCH
    with tempfile.TemporaryDirectory() as folder:
        mp.start_processes(_memory_rank, args=(2, folder, free_port()), nprocs=2, start_method="spawn")
        got = [torch.load(f"{folder}/held{rank}.pt") for rank in range(2)]
    for name in _MEMORY_SHAPES:
        cfg = _memory_qwen3(name).config
        V, h = cfg.vocab_size, cfg.hidden_size
        shape = {"vocab_size": V, "hidden_size": h, "num_hidden_layers": cfg.num_hidden_layers,
                 "num_attention_heads": cfg.num_attention_heads, "num_key_value_heads": cfg.num_key_value_heads,
                 "head_dim": cfg.head_dim, "intermediate_size": cfg.intermediate_size, "tie_word_embeddings": False}

        def terms(chunk_tokens: int) -> dict:
            return grpo_step_bytes(shape, b, p, c, UpdateLayout(logprob_chunk_tokens=chunk_tokens, processes=2, fsdp=True,
                                                                reference=False, runtime=False))

        for rank, held in enumerate(got):
            m = held[(name, chunk)]
            print(f"{name} rank {rank}: " + ", ".join(f"{k} {m[k]:,} (formula {terms(chunk)[k]:,.0f})"
                                                      for k in ("units", "layers", "logits"))
                  + f"; units at their most {m['units_at_most']}; peak {m['peak']:,} {m['at_peak']}")
            (unit, weights), = m["gathered_at_start"].items()
            assert "lm_head" in unit and "norm" in unit and weights == 2 * (V * h + h)
            assert m["layers_gathered_at_once"] == 2
            assert m["units"] == pytest.approx(terms(chunk)["units"], rel=0.05)
            assert m["layers"] == pytest.approx(terms(chunk)["layers"], rel=0.05)
            if name == "head":
                assert m["logits"] == pytest.approx(terms(chunk)["logits"], rel=0.05)
                whole = held[(name, 0)]
                print(f"{name} rank {rank}, whole logits: {whole['logits']:,} (formula {terms(0)['logits']:,.0f})")
                assert whole["logits"] == pytest.approx(terms(0)["logits"], rel=0.05)
