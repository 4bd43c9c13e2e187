"""Code that runs inside vLLM's worker: a weight-sync method mixed into the worker class.

`VLLMEngine` passes `worker_extension_cls="acesql_lib.models.vllm_worker.WeightSyncExtension"`, so every
vLLM worker gains `acesql_reload_from_file`. It is used only when the engine runs workers in other
processes (multiprocessing or tensor parallel): a method named by string travels through
`collective_rpc` without pickling code, and a file path travels where tensors do not (vLLM's RPC
hands tensors to the worker as memoryviews, which cannot be pickled on to the next process).

Either way the weights go through the worker's `reload_weights` (vLLM's layer-wise in-place reload),
never a bare `model.load_weights`: on CPU vLLM repacks every linear weight for its GEMM kernels after
loading and leaves an empty `weight` parameter behind, so `load_weights` fails there (and on GPU it
would skip any post-load processing a layer needs). This module imports nothing from vLLM, so the
main environment can import it too.
"""
from __future__ import annotations

from pathlib import Path


class WeightSyncExtension:
    """Mixed into vLLM's worker class; `self` is the worker (it has `reload_weights`)."""

    def acesql_reload_from_file(self, path: str) -> int:
        from safetensors.torch import load_file

        if not Path(path).exists():
            raise FileNotFoundError(f"{path}: weight file for sync not found")
        weights = load_file(path)
        self.reload_weights(weights_iterator=list(weights.items()), is_checkpoint_format=True)  # type: ignore[attr-defined]
        return len(weights)
