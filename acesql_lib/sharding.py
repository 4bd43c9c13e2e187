"""The frozen KL reference sharded like the policy under FSDP2, so no process holds a whole copy of it.

`accelerator.prepare` shards the policy (it needs an optimizer to); the reference has none, so GRPO
shards it here the same way: every decoder layer its own FSDP2 unit, then the root, on the accelerator's
device mesh with its mixed-precision and offload policies (what TRL does for its reference model, with
per-layer units so a forward pass gathers one layer at a time instead of the whole model). Each process
then keeps 1/N of the reference (w·P/N bytes instead of w·P; acesql_lib/memory.py) and its log-probabilities
are unchanged. Under DDP or on one process the reference stays as it is (DDP would refuse a model with
nothing to train).

`reduce_gradients_in_fp32` sets the FSDP mixed-precision policy the policy is prepared with to bf16 compute and
fp32 gradient reduction, as the authors' verl (accelerate's bf16 default reduces in bf16, losing the low bits
of the averaged gradient); DDP already reduces the fp32 masters' gradients in fp32.

**FSDP2 on CPU processes** (the paper launch rehearsed without GPUs): accelerate's FSDP needs GPUs, so a
launch with an FSDP2 config on CPU (`configs/accelerate/fsdp2_cpu.yaml`) reaches the processes as MULTI_CPU
with the launcher's `ACCELERATE_USE_FSDP`/`FSDP_VERSION` still set. `kit_fsdp2` recognises it and the trainer
then shards the policy and the reference itself with the same `fully_shard` units on a CPU mesh over gloo, so
the sharded code paths (checkpoints, the final gather, the engine sync, PCGrad's local shards) run as on GPUs.
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


def shard_frozen(model: torch.nn.Module, mesh: Any, mp_policy: Any = None, offload_policy: Any = None,
                 reshard_after_forward: bool = True) -> torch.nn.Module:
    """`fully_shard` each decoder layer, then the root, on `mesh`; the model stays frozen in eval mode."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, OffloadPolicy, fully_shard

    kwargs = {"mesh": mesh, "reshard_after_forward": reshard_after_forward,
              "mp_policy": mp_policy or MixedPrecisionPolicy(), "offload_policy": offload_policy or OffloadPolicy()}
    for layer in decoder_layers(model):
        fully_shard(layer, **kwargs)
    fully_shard(model, **kwargs)
    model.eval()
    model.requires_grad_(False)
    return model


def kit_fsdp2(accelerator: Any) -> bool:
    """The launch asked for FSDP2 but accelerate runs its processes as MULTI_CPU (its FSDP needs GPUs): the
    kit shards with `fully_shard` itself (module docstring)."""
    return (accelerator.distributed_type.name == "MULTI_CPU" and accelerator.num_processes > 1
            and os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true"
            and os.environ.get("FSDP_VERSION", "1") == "2")


_MESHES: dict[int, Any] = {}


def cpu_mesh(accelerator: Any) -> Any:
    """One 1-D CPU device mesh over the launch's processes (made once: making it is a collective)."""
    if accelerator.num_processes not in _MESHES:
        from torch.distributed.device_mesh import init_device_mesh

        _MESHES[accelerator.num_processes] = init_device_mesh("cpu", (accelerator.num_processes,))
    return _MESHES[accelerator.num_processes]


def _reshard_after_forward() -> bool:
    return os.environ.get("FSDP_RESHARD_AFTER_FORWARD", "true").lower() == "true"


def shard_policy(model: torch.nn.Module, accelerator: Any) -> torch.nn.Module:
    """Under `kit_fsdp2`: the trainable policy as accelerate's FSDP2 prepares it (each decoder layer a unit,
    then the root); build the optimizer on its parameters afterwards. As it is otherwise."""
    if not kit_fsdp2(accelerator):
        return model
    from torch.distributed.fsdp import fully_shard

    mesh, reshard = cpu_mesh(accelerator), _reshard_after_forward()
    for layer in decoder_layers(model):
        fully_shard(layer, mesh=mesh, reshard_after_forward=reshard)
    return fully_shard(model, mesh=mesh, reshard_after_forward=reshard)


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
    if accelerator.is_fsdp2:
        state = accelerator.get_state_dict(model)
    else:
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
    through any number of forward passes, then resharded; a model FSDP does not manage passes through."""
    from torch.distributed.fsdp import FSDPModule

    units = [m for m in model.modules() if isinstance(m, FSDPModule)]
    for unit in units:
        unit.set_reshard_after_forward(False, recurse=False)
        unit.unshard()
    try:
        yield model
    finally:
        for unit in units:
            unit.reshard()
            unit.set_reshard_after_forward(_reshard_after_forward(), recurse=False)


def shard_reference(model: torch.nn.Module | None, accelerator: Any) -> torch.nn.Module | None:
    """The reference sharded on `accelerator`'s mesh under FSDP2 (accelerate's, or the kit's on CPU); as it is
    otherwise."""
    if model is not None and kit_fsdp2(accelerator):
        return shard_frozen(model, cpu_mesh(accelerator), reshard_after_forward=_reshard_after_forward())
    if model is None or not getattr(accelerator, "is_fsdp2", False):
        return model
    plugin = accelerator.state.fsdp_plugin
    mesh = getattr(accelerator, "torch_device_mesh", None)
    if mesh is not None and getattr(accelerator, "parallelism_config", None) is not None:
        mesh = mesh[tuple(accelerator.parallelism_config.fsdp_dim_names)]
    return shard_frozen(model, mesh, plugin.mixed_precision_policy, plugin.cpu_offload or None,
                        bool(plugin.reshard_after_forward))


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
