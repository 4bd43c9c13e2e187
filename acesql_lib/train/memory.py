"""What one GRPO update holds in memory at its peak, term by term (bytes per process).

The preflight (acesql_lib/pipeline/preflight.py) judges a profile's GPUs with it. The formula is checked against
measured updates of scaled-down Qwen3s (the real vocabulary, the trainer's own `JointGRPO.optimize`):
on an H200 with the allocator's exact peak (benchmarks/results/grpo_memory_h200.json, 24 settings,
estimate / measured 0.99-1.03), and on CPU in CI (tests/test_memory.py, within 20%).

Notation: P parameters (V·h of them in the input embedding and as many in an untied LM head), b sequences
of p prompt + c completion tokens in a micro-batch (tok = b·(p + c) tokens, R = b·c completion
positions), L layers of hidden size h and MLP width I, N processes sharing the state (FSDP/ZeRO-3),
m bytes per trained weight (`model.train_dtype`: 4, fp32 masters), w bytes per compute and reference
weight (`model.dtype`: 2, bf16).

The peak is at the start of the generator's backward pass (the second role's): the weights, AdamW's two
moments, the retriever's gradient PCGrad keeps aside (m·P/N each, 2 for Adam) and the frozen reference
(w·P, or w·P/N when FSDP2 shards it as the policy: acesql_lib/models/sharding.py), plus what the forward pass left for the backward pass:
  logits   the completion's logits over the vocabulary, taken whole: 16 bytes per position and token
           (the logits in fp32, a copy of them under FSDP2's bf16, and the log-softmax's three fp32 buffers in
           its backward pass); in chunks of k positions (`grpo.logprob_chunk_tokens`): the logits and, by the
           last chunk, the other chunks' gradients in the logits' dtype plus one chunk's fp32 work, 8·R·V + 8·k·V
           where accelerate hands the logits back in fp32 (one process, DDP), 4·R·V + 14·k·V under FSDP2 in
           bf16, whose path neither autocasts nor converts them (bf16 logits and gradients, and the chunk's fp32
           copy; tests/test_fsdp2.py)
  layers   with activation checkpointing, each layer's input: fp32 under autocast (4·tok·h·L), in the compute
           dtype under FSDP2, whose mixed precision casts the residual stream (w·tok·h·L); without, every layer's
           activations (6·h + 18·I bytes per token and layer, measured: Qwen3's I = 3h) and autocast's
           bf16 copies of the layers' matrices (w · their parameters)
  head     the LM head's gradient, the first one the backward pass makes (m·V·h/N)
  units    under FSDP2 (N > 1) the most its gathered units hold at once in the backward pass (measured per rank,
           tests/test_fsdp2.py), the largest of: accelerate's head unit (LM head and final norm) while its
           gradient is reduced, the bf16 gradient and the fp32 copy it is reduce-scattered from, (w + 4)·(V·h + h)
           (its weights, gathered from its forward on, are freed just before), with the last decoder layer
           prefetched (w per layer parameter); the last layer's backward, two decoder layers gathered (the one
           computing with its gradient, the one prefetched: 3·w per layer parameter) while the head's fp32 copy
           waits for the next reduce (4·(V·h + h)); any other layer's, the same two layers and the previous
           layer's fp32 copy (3·w + 4 per layer parameter). They come after the logits' backward, which has
           only the head unit's weights gathered: summed with the logits, the total is an upper bound there
  runtime  what no tensor of the model holds: the CUDA context, cuBLAS workspaces and the allocator's slack
           (`CUDA_RUNTIME`), and NCCL's buffers when N > 1 (`NCCL_BUFFERS`); round figures, not measured here
Later in the backward pass the activations are freed as the gradients appear, so the update never holds
less than the full state: weights, Adam, gradients and PCGrad's copy (5·m·P/N) and the reference.
LoRA trains adapters only: the frozen base is held in `model.dtype`; each adapter parameter holds 20 bytes
(fp32 weight, gradient, Adam's two moments, PCGrad's copy; `lora_params` counts them), and a LoRA policy
from the SFT model needs no reference of its own (its base with the adapters off: `reference=False`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

GIB = 1024 ** 3
CUDA_RUNTIME = 1.5 * GIB  # the CUDA context (~0.5 GiB on Hopper), cuBLAS workspaces, the caching allocator's slack
NCCL_BUFFERS = 1.0 * GIB  # NCCL's communicator buffers and FSDP2's all-gather / reduce-scatter staging
ADAPTER_BYTES = 20  # per LoRA parameter: fp32 weight, gradient, Adam's two moments, PCGrad's saved gradient
LOGITS_WHOLE = 16  # bytes per completion position and vocabulary entry, log-softmax taken whole
CHUNK_WORK = 12  # per position of one chunk and vocabulary entry: the log-softmax's three fp32 buffers
LAYER_H, LAYER_I = 6, 18  # bytes per token and layer without checkpointing, per unit of h and of I


def n_params(shape: dict[str, Any]) -> float:
    """Parameters of a Qwen3-style decoder from its config.json fields."""
    h, L, V = shape["hidden_size"], shape["num_hidden_layers"], shape["vocab_size"]
    heads = shape["num_attention_heads"]
    kv = shape.get("num_key_value_heads", heads)
    hd = shape.get("head_dim") or h // heads
    attn = h * heads * hd * 2 + h * kv * hd * 2
    mlp = 3 * h * shape["intermediate_size"]
    embed = V * h * (1 if shape.get("tie_word_embeddings", False) else 2)
    return float(embed + L * (attn + mlp + 2 * h + 2 * hd) + h)


def lora_params(shape: dict[str, Any], r: int) -> float:
    """LoRA parameters of rank `r` on every linear layer of the decoder (PEFT's "all-linear": q, k, v, o, gate,
    up, down; the LM head is left out): r·(inputs + outputs) per layer."""
    h, L, I = shape["hidden_size"], shape["num_hidden_layers"], shape["intermediate_size"]
    heads = shape["num_attention_heads"]
    kv = shape.get("num_key_value_heads", heads)
    hd = shape.get("head_dim") or h // heads
    q, k = heads * hd, kv * hd
    per_layer = (h + q) + 2 * (h + k) + (q + h) + 2 * (h + I) + (I + h)
    return float(r * per_layer * L)


def logits_bytes(rows: int, vocab: int, chunk_tokens: int, logit_bytes: int = 4) -> float:
    """What the completion's log-probabilities hold for the backward pass (`rows` = b·c positions) with logits of
    `logit_bytes` (4: accelerate's fp32 outputs; the compute dtype's under FSDP2). Chunked: the logits and the
    other chunks' gradients (2·logit_bytes·rows less one chunk's gradient) and one chunk's fp32 work (its copy
    of logits held in less than fp32, and the log-softmax's buffers)."""
    if chunk_tokens and rows > chunk_tokens:
        work = CHUNK_WORK + (4 if logit_bytes < 4 else 0) - logit_bytes
        return 2 * logit_bytes * rows * vocab + work * chunk_tokens * vocab
    return LOGITS_WHOLE * rows * vocab


@dataclass(frozen=True)
class UpdateLayout:
    """How a GRPO update lies in memory, as the settings and the launch decide it."""

    checkpointing: bool = True  # grpo.gradient_checkpointing
    logprob_chunk_tokens: int = 1024  # grpo.logprob_chunk_tokens
    processes: int = 1  # the processes sharing the state (FSDP2 or ZeRO-3; 1 for data parallel, which replicates it)
    ranks: int | None = None  # the launch's processes (NCCL's buffers); None: `processes`
    train_bytes: int = 4  # m: bytes per trained weight (model.train_dtype)
    compute_bytes: int = 2  # w: bytes per compute and reference weight (model.dtype)
    lora: bool = False  # model.lora
    lora_rank: int = 64  # model.lora_r
    reference: bool = True  # the update holds a reference model of its own
    reference_sharded: bool = False  # ... sharded like the policy
    fsdp: bool = False  # FSDP2 shards the policy (its gathered units count)
    runtime: bool = True  # False: no CUDA and NCCL figures (a measured allocator peak holds tensors only)


def grpo_step_bytes(shape: dict[str, Any], micro_batch: int, prompt_tokens: int, completion_tokens: int,
                    layout: UpdateLayout = UpdateLayout()) -> dict[str, float]:
    """Peak bytes of one GRPO update in one of `layout.processes` processes, for its worst forward pass of
    `micro_batch` rows of `prompt_tokens` + `completion_tokens`: `total`, the larger of the start of the second
    backward pass (state + reference + logits + layers + gathered units + runtime) and its end
    (`end_of_backward`: the full state, the reference and the runtime, the activations gone)."""
    checkpointing, lora, fsdp, ranks = layout.checkpointing, layout.lora, layout.fsdp, layout.ranks
    h, L, V = shape["hidden_size"], shape["num_hidden_layers"], shape["vocab_size"]
    P, m, w, n = n_params(shape), layout.train_bytes, layout.compute_bytes, layout.processes
    head = V * h
    layer_params = P - head * (1 if shape.get("tie_word_embeddings", False) else 2)
    tokens = micro_batch * (prompt_tokens + completion_tokens)
    rows = micro_batch * completion_tokens
    if lora:
        adapters = lora_params(shape, layout.lora_rank)
        state_backward = w * P / n + (ADAPTER_BYTES - 4) * adapters / n  # frozen base; adapters without gradients
        state_end = w * P / n + ADAPTER_BYTES * adapters / n
        head_grad = 0.0
    else:
        state_backward = (m + 2 * m + m) * P / n  # weights, Adam's moments, PCGrad's saved gradient
        state_end = (m + 2 * m + m + m) * P / n  # ... and every gradient of this role
        head_grad = m * head / n
    ref = (w * P / (n if layout.reference_sharded else 1)) if layout.reference else 0.0
    sharded = fsdp and n > 1  # FSDP2's mixed precision: the residual stream and the logits in the compute dtype
    if checkpointing:
        layers = (w if sharded else 4) * tokens * h * L
    else:
        layers = tokens * L * (LAYER_H * h + LAYER_I * shape["intermediate_size"]) + w * layer_params
    logits = logits_bytes(rows, V, layout.logprob_chunk_tokens, w if sharded else 4)
    units = 0.0
    if sharded:
        t = 0 if lora else 1  # a frozen base gathers no gradient and reduces none
        unit, layer = head + h, layer_params / L
        units = max((w + 4 * t) * unit + w * layer,  # the head's gradient reduced, the last layer prefetched
                    4 * t * unit + (2 + t) * w * layer,  # the last layer's backward: two layers, the head's fp32 copy
                    ((2 + t) * w + 4 * t) * layer)  # another layer's: two layers, the previous layer's fp32 copy
    run = (CUDA_RUNTIME + (NCCL_BUFFERS if (ranks or n) > 1 else 0.0)) if layout.runtime else 0.0
    at_logits = state_backward + ref + head_grad + logits + layers + units + run
    at_end = state_end + ref + run
    terms = {"state": state_backward + head_grad, "reference": ref, "logits": logits, "layers": layers,
             "units": units, "runtime": run, "end_of_backward": at_end, "total": max(at_logits, at_end)}
    return terms
