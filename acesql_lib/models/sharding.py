"""FSDP2 for GRPO through accelerate's own code: the frozen KL reference sharded like the policy, so no process
holds a whole copy of it, and the same code on CPU process groups.

`accelerator.prepare` shards the policy (it needs an optimizer to); the reference has none, so GRPO prepares
it with accelerate's `fsdp2_prepare_model` itself (`shard_reference`): the same units (each decoder layer,
the embedding, the head with the final norm, the root) on the accelerator's mesh with its mixed-precision and
offload policies, and under `cpu_ram_efficient_loading` rank 0's weights broadcast to the ranks that loaded
zeros. Each process then keeps 1/N of the reference (w·P/N bytes instead of w·P; acesql_lib/train/memory.py) and its
log-probabilities are unchanged; its units free their gathered weights after every forward (it has no
backward). Under DDP or on one process the reference stays as it is (DDP would refuse a model with nothing to
train).

`reduce_gradients_in_fp32` sets the FSDP mixed-precision policy the policy is prepared with to bf16 compute and
fp32 gradient reduction, as the authors' verl (accelerate's bf16 default reduces in bf16, losing the low bits
of the averaged gradient); DDP already reduces the fp32 masters' gradients in fp32.

**FSDP2 on CPU processes** (the paper's launch rehearsed without GPUs): a launch from `configs/accelerate/fsdp.yaml`
with the CPU keys overridden (acesql_lib/train/launch.py) starts its processes through torchrun with accelerate's
FSDP variables set, but accelerate's state takes its FSDP branch only for GPU-like process groups and comes up
MULTI_CPU. `fsdp2_on_cpu` moves that state into the FSDP branch, with the plugin accelerate builds from the
same variables; from there accelerate's own code runs as on GPUs: `prepare` shards the policy with
`fsdp2_prepare_model` (its units, its rank-0 broadcast for `cpu_ram_efficient_loading`), `no_sync` is FSDP2's,
clipping is accelerate's DTensor-aware one. `full_state_dict` gathers the final model with torch's own full
state dict (accelerate's FSDP2 `get_state_dict` returned the DTensor shards on gloo).
`unsharded` gathers every unit of a sharded model once for generation (as ZeRO-3's gather for generation):
decoding then needs no collective per token, so ranks with different prompts never wait on each other.
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Any, Iterator

import torch


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The transformer blocks of a causal LM (`model.model.layers`, under PEFT the base model's), the units
    FSDP2 shards one by one."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    inner = getattr(base, "model", None)
    layers = getattr(inner, "layers", None)
    if layers is None:
        raise ValueError(f"{type(model).__name__}: no decoder layers at .model.layers to shard")
    return list(layers)


def fsdp2_on_cpu(accelerator: Any) -> bool:
    """On CPU processes launched for FSDP2 (torchrun, `ACCELERATE_USE_FSDP`, `FSDP_VERSION=2`): put accelerate's
    state into its FSDP branch, which it takes only for GPU-like process groups (accelerate/state.py), with the
    plugin accelerate reads from the launcher's `FSDP_*` variables. Returns whether the state is FSDP2 now.
    Call it before `prepare`; a second call changes nothing."""
    if getattr(accelerator, "is_fsdp2", False):
        return True
    if not (accelerator.distributed_type.name == "MULTI_CPU" and accelerator.num_processes > 1
            and os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true"
            and os.environ.get("FSDP_VERSION", "1") == "2"):
        return False
    from accelerate.state import PartialState
    from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin

    state = accelerator.state
    plugin = FullyShardedDataParallelPlugin()
    if state.mixed_precision != "no":
        plugin.set_mixed_precision(state.mixed_precision)
    state.fsdp_plugin = plugin
    state.distributed_type = DistributedType.FSDP
    # as accelerate's own FSDP set-up does: every later AcceleratorState() copies the process state's type back
    PartialState._shared_state["distributed_type"] = DistributedType.FSDP
    return accelerator.is_fsdp2


def is_sharded(model: torch.nn.Module) -> bool:
    """Whether FSDP2 shards `model` (its parameters are DTensors), whoever sharded it."""
    from torch.distributed.tensor import DTensor

    return any(isinstance(p, DTensor) for p in model.parameters())


def gathered_fsdp(model: torch.nn.Module) -> bool:
    """An FSDP2 model whose units are all gathered now (`unsharded`): its forward passes need no collective.
    (transformers' generate otherwise keeps an FSDP model's ranks decoding in lockstep, `synced_gpus`.)"""
    from torch.distributed.fsdp import FSDPModule

    return any(isinstance(m, FSDPModule) for m in model.modules()) and not is_sharded(model)


def full_state_dict(accelerator: Any, model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The model's full tensors on the main process (a collective under FSDP: every rank calls it). A tied
    parameter is kept under its first name only, as an unsharded model saves it: gathered tensors share no
    storage, so `save_pretrained` would not see the tie and would write the embedding twice."""
    if not is_sharded(model):
        return accelerator.get_state_dict(model)
    # torch's own full state dict: accelerate's FSDP2 `get_state_dict` asks it with broadcast_from_rank0 as well,
    # and with torch 2.13 on gloo that returned the DTensor shards unchanged
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    first: dict[int, str] = {}
    for name, p in accelerator.unwrap_model(model).named_parameters(remove_duplicate=False):
        if first.setdefault(id(p), name) != name:
            state.pop(name, None)
    return state


@contextmanager
def unsharded(model: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """Every FSDP2 unit of `model` gathered once (a collective: every rank enters together) and kept whole
    through any number of forward passes, then resharded, each unit's own reshard-after-forward setting
    restored; a model FSDP does not manage passes through."""
    from torch.distributed.fsdp import FSDPModule

    units = [m for m in model.modules() if isinstance(m, FSDPModule)]
    before = [_reshards_after_forward(unit) for unit in units]
    for unit in units:
        unit.set_reshard_after_forward(False, recurse=False)
        unit.unshard()
    try:
        yield model
    finally:
        for unit, reshard in zip(units, before):
            unit.reshard()
            if reshard is not None:
                unit.set_reshard_after_forward(reshard, recurse=False)


def _reshards_after_forward(unit: Any) -> bool | None:
    """Whether an FSDP2 unit frees its gathered parameters after forward (None: it holds none of its own)."""
    groups = unit._get_fsdp_state()._fsdp_param_groups
    return any(g.post_forward_mesh_info is not None for g in groups) if groups else None


def shard_reference(model: torch.nn.Module | None, accelerator: Any) -> torch.nn.Module | None:
    """Under FSDP2 the frozen reference sharded by accelerate's own `fsdp2_prepare_model`, as the policy: the same
    units and mixed-precision policy, and with `cpu_ram_efficient_loading` rank 0's weights broadcast to every
    rank (the others loaded zeros). As it is otherwise."""
    if model is None or not getattr(accelerator, "is_fsdp2", False):
        return model
    from accelerate.utils.fsdp_utils import fsdp2_prepare_model

    model.requires_grad_(False)  # frozen before preparing: accelerate upcasts only trainable parameters to fp32
    model = fsdp2_prepare_model(accelerator, model)
    model.set_reshard_after_forward(True)  # forward passes only: no unit keeps its gathered weights for a backward
    model.eval()
    return model


def reshard(model: torch.nn.Module) -> None:
    """Every FSDP2 unit of `model` back to its shard (a unit prepared to keep its gathered weights between the
    forward and the backward keeps them after a forward that has no backward); nothing for other models."""
    from torch.distributed.fsdp import FSDPModule

    for unit in model.modules():
        if isinstance(unit, FSDPModule):
            unit.reshard()


def reduce_gradients_in_fp32(accelerator: Any) -> bool:
    """Under FSDP2, before `prepare`: keep the bf16 parameters and outputs of accelerate's policy and reduce
    gradients in fp32. Returns whether the policy changed."""
    if not getattr(accelerator, "is_fsdp2", False):
        return False
    from torch.distributed.fsdp import MixedPrecisionPolicy

    plugin = accelerator.state.fsdp_plugin
    current = plugin.mixed_precision_policy
    if current is None or current.param_dtype is None or current.reduce_dtype == torch.float32:
        return False  # no mixed precision asked for, or fp32 reduction already
    plugin.mixed_precision_policy = MixedPrecisionPolicy(param_dtype=current.param_dtype, reduce_dtype=torch.float32,
                                                         output_dtype=current.output_dtype,
                                                         cast_forward_inputs=current.cast_forward_inputs)
    return True
