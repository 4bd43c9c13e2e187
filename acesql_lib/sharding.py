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
"""
from __future__ import annotations

from typing import Any

import torch


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The transformer blocks of a causal LM (`model.model.layers`), the units FSDP2 shards one by one."""
    inner = getattr(model, "model", None)
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


def shard_reference(model: torch.nn.Module | None, accelerator: Any) -> torch.nn.Module | None:
    """The reference sharded on `accelerator`'s mesh under FSDP2; as it is otherwise."""
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
