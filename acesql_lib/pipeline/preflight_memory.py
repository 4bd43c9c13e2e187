"""The preflight's hardware rows: GPUs and their memory against an estimate of what SFT and GRPO need per GPU,
which cards fit which of the profile's paths, and free disk for checkpoints.

Memory per GPU (bytes; P parameters, N processes of the stage's accelerate config, w = 2 for bf16,
4 for float32; m = 4 for fp32 master weights, `model.train_dtype`):
  GRPO = acesql_lib.train.memory.grpo_step_bytes: the peak of one update, term by term (weights, Adam, PCGrad's
         gradient copy, the reference, the worst micro-batch's logits and layer activations, FSDP2's gathered
         units, the CUDA and NCCL runtime), checked against measured updates (benchmarks/grpo_memory.py);
         with a colocated vLLM engine's share (`engine.gpu_memory_utilization`, which must hold its copy of
         the weights, w·P / tensor_parallel_size, with room for the KV cache) it must leave `HEADROOM` of
         the card free, the card's capacity as torch reports it (`CARDS` where no GPU is visible).
         The worst micro-batch of "micro_token_mean": a forward pass pads its rows to its longest prompt and
         completion within `grpo.micro_batch_tokens` (policy_loss.forward_passes), so the most completion
         positions are floor(budget / (c + 1)) rows of the longest completion c, or one row of the longest
         prompt and completion where that is over the budget.
  SFT  = 4·m·P / N (sharded weights, gradients, Adam) + b·s·h·L·w (checkpointed layer inputs) + b·s·V·4
         (fp32 logits), b = per_device_batch_size, s = sft.max_length; a rough guide (not measured).
GRPO's memory above the card is a FAIL (with what to change); SFT's rough estimate above it is a WARN.
"""
from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path
from typing import Any

import yaml

from ..config.paths import Paths, resolve
from ..config.settings import Config
from ..train.memory import UpdateLayout, grpo_step_bytes, n_params
from .preflight_data import hub_cached
from .preflight_rows import FAIL, GIB, INFO, MISSING, OK, WARN, Row, count_text, size_text

# Shapes of hub models the kit knows, for estimates when the model is not on this machine yet.
KNOWN_MODELS = {"Qwen/Qwen3-8B": {"vocab_size": 151936, "hidden_size": 4096, "num_hidden_layers": 36,
                                  "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
                                  "intermediate_size": 12288, "tie_word_embeddings": False}}


def model_shape(cfg: Config) -> tuple[dict[str, Any] | None, str]:
    """(config.json-like shape, where it came from) of the profile's model, without the network."""
    m = cfg.model
    if m.build_tiny:
        return ({"vocab_size": m.tiny.vocab_size, "hidden_size": m.tiny.hidden_size,
                 "num_hidden_layers": m.tiny.num_layers, "num_attention_heads": m.tiny.num_heads,
                 "num_key_value_heads": m.tiny.num_kv_heads, "head_dim": m.tiny.hidden_size // m.tiny.num_heads,
                 "intermediate_size": m.tiny.intermediate_size, "tie_word_embeddings": True}, "model.tiny settings")
    local = resolve(m.base_model)
    if (local / "config.json").is_file():
        return json.loads((local / "config.json").read_text()), str(local / "config.json")
    cached = hub_cached(m.base_model, "config.json")
    if cached:
        return json.loads(Path(cached).read_text()), "the Hugging Face cache"
    if m.base_model in KNOWN_MODELS:
        return KNOWN_MODELS[m.base_model], "the kit's table of known models"
    return None, "unknown (model not on this machine)"


def accelerate_processes(path: str, cfg: Config | None = None) -> tuple[int, bool]:
    """(num_processes, use_cpu) of an accelerate config file; a CPU profile whose config is a GPU one
    trains in one process (the notebooks), so it counts as (1, True)."""
    data = yaml.safe_load(resolve(path).read_text()) or {}
    n, cpu = int(data.get("num_processes", 1)), bool(data.get("use_cpu", False))
    if cfg is not None and cfg.model.device == "cpu" and not cpu:
        return 1, True
    return n, cpu


# Cards a one-GPU (notebook) run is judged against: name -> bytes
# What torch reports as each card's total memory (torch.cuda.get_device_properties(i).total_memory), the capacity
# the estimates are held against where no GPU is visible; a visible GPU's own figure is used where there is one.
CARDS = {"A100 80 GB": 79.2 * GIB, "H100 80 GB": 79.2 * GIB, "H200": 139.8 * GIB}
HEADROOM = 0.10  # of the card left free on every path the preflight calls fitting (fragmentation, spikes)


def fsdp_sharded(path: str) -> bool:
    """True when the accelerate config launches FSDP (GRPO then shards its reference too)."""
    data = yaml.safe_load(resolve(path).read_text()) or {}
    return str(data.get("distributed_type", "")).upper() == "FSDP"


def grpo_micro_batch(cfg: Config) -> list[tuple[int, int, int]]:
    """(sequences, prompt tokens, completion tokens) of the forward passes that can hold the most memory: the
    longest prompts and responses the profile allows, padded as the update pads them (module docstring)."""
    g = cfg.grpo
    c = g.max_response_tokens
    p = g.max_prompt_tokens or max(cfg.engine.max_model_len - c, 1)
    if g.loss_agg != "micro_token_mean":
        return [(g.micro_batch_size, p, c)]
    if g.packed_prompts:  # one row per prompt, its samples after it (acesql_lib/train/packed.py)
        return [(max(math.ceil(g.micro_batch_tokens / (p + c)), 1), p, c)]
    rows = max(1, g.micro_batch_tokens // (c + 1))
    return [(rows, max(1, g.micro_batch_tokens // rows - c), c), (1, p, c)]


def dtype_bytes(dtype: str) -> int:
    """Bytes per value of a dtype named in the config (`model.dtype`, `model.train_dtype`)."""
    return 2 if dtype in ("bfloat16", "float16") else 4


def compute_bytes(cfg: Config) -> int:
    """Bytes per value of the model's compute dtype (`model.dtype`): the weights the engine holds, activations."""
    return dtype_bytes(cfg.model.dtype)


def memory_estimates(cfg: Config, shape: dict[str, Any], processes: int | None = None) -> dict[str, float]:
    """Bytes per process for SFT and GRPO training and for the colocated vLLM weights (module docstring).

    GRPO's is `acesql_lib.train.memory.grpo_step_bytes` (fp32 masters, Adam, PCGrad's copy, the reference, the
    largest micro-batch's activations and logits; checked against measured updates). `processes` overrides
    the accelerate configs' process counts (1 = the notebooks' one-GPU path). With `model.lora` only the
    adapters train: the frozen base is held in `model.dtype` and the adapters' optimizer state is small."""
    P = n_params(shape)
    w = compute_bytes(cfg)
    m = dtype_bytes(cfg.model.train_dtype)
    h, L, V = shape["hidden_size"], shape["num_hidden_layers"], shape["vocab_size"]

    def act(b: int, s: int, t: int) -> float:
        return b * s * h * L * w + b * t * V * 4

    def state(n: int) -> float:  # LoRA: a frozen base in model.dtype, fp32 adapters (PEFT upcasts them)
        return w * P if cfg.model.lora else 4 * m * P / n

    n_sft = processes or accelerate_processes(cfg.sft.accelerate_config, cfg)[0]
    n_grpo = processes or accelerate_processes(cfg.grpo.accelerate_config, cfg)[0]
    fsdp = n_grpo > 1 and fsdp_sharded(cfg.grpo.accelerate_config)
    g = cfg.grpo
    own_reference = g.kl_coef > 0 and (not cfg.model.lora or bool(g.reference_model))  # grpo_run.load_models
    layout = UpdateLayout(checkpointing=g.gradient_checkpointing, logprob_chunk_tokens=g.logprob_chunk_tokens,
                          processes=n_grpo if fsdp or n_grpo == 1 else 1,  # data parallel replicates the state
                          ranks=n_grpo, train_bytes=m, compute_bytes=w, lora=cfg.model.lora, lora_rank=cfg.model.lora_r,
                          reference=own_reference, reference_sharded=fsdp, fsdp=fsdp)
    grpo = max((grpo_step_bytes(shape, b, p, c, layout) for b, p, c in grpo_micro_batch(cfg)),
               key=lambda terms: terms["total"])
    return {"params": P, "sft": state(n_sft) + act(cfg.sft.per_device_batch_size, cfg.sft.max_length, cfg.sft.max_length),
            "grpo": grpo["total"], "grpo_terms": grpo,
            "vllm_weights": w * P / cfg.engine.tensor_parallel_size,
            "checkpoint": 12 * P,  # fp32 weights + Adam m and v: what a resumable checkpoint holds
            "weights": w * P}


def over_budget_advice(cfg: Config) -> str:
    """What lowers GRPO's memory, for a FAIL row."""
    g = cfg.grpo
    steps = [f"grpo.micro_batch_tokens (now {g.micro_batch_tokens})" if g.loss_agg == "micro_token_mean"
             else f"grpo.micro_batch_size (now {g.micro_batch_size})"]
    if not g.gradient_checkpointing:
        steps.append("grpo.gradient_checkpointing: true")
    if not g.logprob_chunk_tokens:
        steps.append("grpo.logprob_chunk_tokens: 1024")
    if not cfg.model.lora:
        steps.append("model.lora: true")
    if cfg.engine.kind == "vllm" and not cfg.engine.sleep_during_update:
        steps.append("engine.sleep_during_update: true (CUDA)")
    steps.append(f"more GPUs in {g.accelerate_config}")
    return "lower " + steps[0] + ", or " + ", ".join(steps[1:])


# What a sleeping vLLM engine keeps on the card (its CUDA graphs and the buffers outside its sleep pool): an
# allowance, not a measurement, until a GPU run measures it.
ENGINE_ASLEEP_BYTES = 2 * GIB


def grpo_room(cfg: Config, card: float) -> float:
    """Bytes of a card GRPO's update may use: the card less `HEADROOM` and a colocated vLLM engine's share, or,
    with `engine.sleep_during_update`, less what the sleeping engine keeps (`ENGINE_ASLEEP_BYTES`)."""
    if cfg.engine.kind != "vllm":
        return card * (1 - HEADROOM)
    if cfg.engine.sleep_during_update:
        return card * (1 - HEADROOM) - ENGINE_ASLEEP_BYTES
    return card * (1 - HEADROOM - cfg.engine.gpu_memory_utilization)


def rollout_need(cfg: Config, est: dict[str, Any]) -> float:
    """Bytes the training keeps on a card while the awake engine samples, when the engine sleeps during the update
    (the update's own peak is checked against `grpo_room`): the state, the reference and the runtime; 0 otherwise,
    as the update's check beside the engine's share covers the rollouts."""
    if cfg.engine.kind != "vllm" or not cfg.engine.sleep_during_update:
        return 0.0
    t = est["grpo_terms"]
    return t["state"] + t["reference"] + t["runtime"]


def path_fits(cfg: Config, shape: dict[str, Any], card: float, processes: int | None = None) -> tuple[float, bool]:
    """(GRPO's bytes per GPU, whether SFT, GRPO's update in its room (`grpo_room`), the rollouts beside the awake
    engine and the engine's weights in its share fit on a card of `card` bytes with `HEADROOM` free), with
    `processes` GPUs (None: the accelerate configs')."""
    est = memory_estimates(cfg, shape, processes=processes)
    util = cfg.engine.gpu_memory_utilization if cfg.engine.kind == "vllm" else 0.0
    ok = (est["sft"] <= card * (1 - HEADROOM) and est["grpo"] <= grpo_room(cfg, card)
          and rollout_need(cfg, est) <= card * (1 - HEADROOM - util)
          and (not util or est["vllm_weights"] <= util * card))
    return est["grpo"], ok


def card_paths(cfg: Config, shape: dict[str, Any]) -> Row:
    """Which of the profile's paths fit on which card (`CARDS`): the multi-GPU launch of its accelerate configs
    (full fine-tune), and one GPU with the full fine-tune or with LoRA."""
    import dataclasses

    n = accelerate_processes(cfg.grpo.accelerate_config, cfg)[0]
    lora = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, lora=True))
    full = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, lora=False))
    paths = [(f"{n} GPUs, full fine-tune", full, None), ("1 GPU, full fine-tune", full, 1), ("1 GPU, LoRA", lora, 1)]
    parts = []
    for name, card in CARDS.items():
        ok = [label for label, c, procs in paths if path_fits(c, shape, card, procs)[1]]
        parts.append(f"{name} ({size_text(card)}): {', '.join(ok) or 'none'}")
    util = cfg.engine.gpu_memory_utilization if cfg.engine.kind == "vllm" else 0.0
    beside = f" beside the engine's {util:g} of the card" if util else ""
    return Row("hardware", "paths per card", INFO, f"with {HEADROOM:.0%} of the card free{beside}: " + "; ".join(parts))


def one_gpu_verdict(cfg: Config, shape: dict[str, Any]) -> Row:
    """Which cards can run the profile's SFT and GRPO in one process (the notebooks, `pipeline`), with the
    colocated vLLM engine holding `engine.gpu_memory_utilization` of the card and `HEADROOM` free, and what to
    do where none can: LoRA, or the multi-GPU launch."""
    import dataclasses

    util = cfg.engine.gpu_memory_utilization if cfg.engine.kind == "vllm" else 0.0

    def cards(c: Config) -> tuple[float, list[str]]:
        found = {name: path_fits(c, shape, b, processes=1) for name, b in CARDS.items()}
        return next(iter(found.values()))[0], [name for name, (_, ok) in found.items() if ok]

    need, fits = cards(cfg)
    what = "LoRA" if cfg.model.lora else "full fine-tune"
    share = f" beside the engine's {util:g} of the card" if util else ""
    if fits:
        return Row("hardware", "one GPU (notebooks)", OK, f"{what}: GRPO needs about {size_text(need)}{share} with "
                   f"{HEADROOM:.0%} of the card free; fits on {', '.join(fits)}")
    advice = ""
    if not cfg.model.lora:
        need_lora, fits_lora = cards(dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, lora=True)))
        advice = (f"set model.lora: true (GRPO about {size_text(need_lora)}: "
                  f"{', '.join(fits_lora) or 'no listed card'}) or ")
    return Row("hardware", "one GPU (notebooks)", WARN,
               f"{what}: GRPO needs about {size_text(need)} in one process{share} ({train_dtype_note(cfg)}), more than "
               f"{', '.join(CARDS)} hold with {HEADROOM:.0%} free; on one GPU {advice}launch SFT and GRPO on several "
               f"GPUs (accelerate launch --config_file {cfg.grpo.accelerate_config})")


def train_dtype_note(cfg: Config) -> str:
    return f"{cfg.model.train_dtype} master weights, Adam and gradients, PCGrad's copy, a {cfg.model.dtype} reference"


def gpu_info() -> list[tuple[str, int]]:
    """(name, total bytes) per visible CUDA device; [] without torch CUDA."""
    try:
        import torch

        if not torch.cuda.is_available():
            return []
        return [(torch.cuda.get_device_name(i), torch.cuda.get_device_properties(i).total_memory)
                for i in range(torch.cuda.device_count())]
    except Exception:  # noqa: BLE001
        return []


def ram_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def check_hardware(cfg: Config, shape: dict[str, Any] | None, gpus: list[tuple[str, int]]) -> list[Row]:
    rows = []
    need = {"sft": accelerate_processes(cfg.sft.accelerate_config, cfg),
            "grpo": accelerate_processes(cfg.grpo.accelerate_config, cfg)}
    est = memory_estimates(cfg, shape) if shape else None
    want_gpus = max(n for n, cpu in need.values() if not cpu) if any(not cpu for _, cpu in need.values()) else 0
    if want_gpus:
        detail = ", ".join(f"{n} ({b / GIB:.0f} GiB)" for n, b in gpus) if gpus else "none visible"
        ok = len(gpus) >= want_gpus
        rows.append(Row("hardware", "GPUs", OK if ok else MISSING,
                        f"{len(gpus)} CUDA GPU(s): {detail}; the accelerate configs launch {want_gpus} processes"
                        + ("" if ok else " (torch.cuda.is_available() is "
                           f"{bool(gpus)}; run this profile on a GPU machine)")))
    else:
        ram = ram_bytes()
        rows.append(Row("hardware", "CPU", OK, f"CPU run (model.device cpu or accelerate use_cpu); {os.cpu_count()} cores, "
                        f"{ram / GIB:.0f} GiB RAM"))
    if est is None:
        rows.append(Row("hardware", "memory", WARN, "no estimate: the model's shape is unknown"))
        return rows
    card = min((b for _, b in gpus), default=0) if want_gpus else ram_bytes() // max(1, max(n for n, _ in need.values()))
    where = "per GPU" if want_gpus else "per process (RAM share)"
    util = cfg.engine.gpu_memory_utilization
    room = (grpo_room(cfg, card) if want_gpus else card * (1 - HEADROOM)) if card else None
    checks = [(f"SFT ({need['sft'][0]} process(es), sharded)", est["sft"], card * (1 - HEADROOM) if card else None),
              (f"GRPO training ({need['grpo'][0]} process(es), sharded)", est["grpo"], room)]
    if cfg.engine.kind == "vllm" and want_gpus:
        checks.append((f"vLLM weights at gpu_memory_utilization {util}", est["vllm_weights"], card * util if card else None))
        if cfg.engine.sleep_during_update:  # the update has the engine's share; the rollouts still share the card
            checks.append(("GRPO rollouts beside the awake engine (state, reference, runtime)", rollout_need(cfg, est),
                           card * (1 - HEADROOM - util) if card else None))
    for label, value, cap in checks:
        if cap is None:
            rows.append(Row("hardware", label, INFO, f"needs about {size_text(value)} {where} (no device to compare)"))
            continue
        fits = value <= cap
        status = OK if fits else (FAIL if label.startswith("GRPO") else WARN)
        advice = "" if fits or status != FAIL else f"; {over_budget_advice(cfg)}"
        terms = (" (" + ", ".join(f"{k} {size_text(v)}" for k, v in est["grpo_terms"].items()
                                  if k in ("state", "reference", "logits", "layers", "units", "runtime") and v)
                 + ")") if label.startswith("GRPO training") else ""
        asleep = cfg.engine.sleep_during_update and label.startswith("GRPO training")
        beside = (f" and the sleeping engine's {size_text(ENGINE_ASLEEP_BYTES)}" if asleep else f" and the engine's {util:g}")
        room_note = f" (with {HEADROOM:.0%} of {size_text(card)} free" + (beside if label.startswith("GRPO") and want_gpus
                                                                   and cfg.engine.kind == "vllm" else "") + ")"
        rows.append(Row("hardware", label, status, f"needs about {size_text(value)} {where}{terms}, has {size_text(cap)}"
                        f"{room_note} ({count_text(n_params(shape))} parameters){advice}"))
    if cfg.grpo.packed_prompts:
        rows.append(packed_rows_check(cfg, shape))
    if want_gpus:
        rows.append(one_gpu_verdict(cfg, shape))
        rows.append(card_paths(cfg, shape))
    return rows


def packed_rows_check(cfg: Config, shape: dict[str, Any]) -> Row:
    """`grpo.packed_prompts`: a packed row holds a prompt and all its samples' completions, and its dense
    mask and attention scores grow with the square of that length (acesql_lib/train/packed.py), outside the GRPO
    estimate above. A WARN where one row's scores would take over 1 GiB."""
    g = cfg.grpo
    prompt = g.max_prompt_tokens or cfg.engine.max_model_len  # no prompt limit: the engine's context bounds it
    length = prompt + max(g.n_retriever, g.n_generator) * g.max_response_tokens
    w = compute_bytes(cfg)
    scores = length * length * (shape["num_attention_heads"] * w + 1)  # one layer's scores and the bool mask
    detail = (f"grpo.packed_prompts: a packed row holds up to {length:,} positions (prompt {prompt:,} + "
              f"{max(g.n_retriever, g.n_generator)} x {g.max_response_tokens:,}); its attention mask and one "
              f"layer's scores take about {size_text(scores)} per row, not in the GRPO estimate")
    if scores > GIB:
        return Row("hardware", "packed GRPO rows", WARN, detail + "; set grpo.packed_prompts: false at these lengths")
    return Row("hardware", "packed GRPO rows", INFO, detail)


def wants_gpus(cfg: Config) -> bool:
    """True when an accelerate config of the profile launches on GPUs (the GPU lock applies)."""
    return any(not accelerate_processes(path, cfg)[1] for path in (cfg.sft.accelerate_config, cfg.grpo.accelerate_config))


def check_disk(cfg: Config, shape: dict[str, Any] | None, paths: Paths) -> Row:
    where = paths.run
    while not where.exists() and where != where.parent:
        where = where.parent
    free = shutil.disk_usage(where).free
    if shape is None:
        return Row("disk", "checkpoints", INFO, f"{free / GIB:.0f} GiB free; no estimate (model shape unknown)")
    est = memory_estimates(cfg, shape)
    # SFT keeps 2 trainer checkpoints (save_total_limit) + its model; GRPO keeps keep_checkpoints (+1 being written)
    need = 2 * est["checkpoint"] + est["weights"] + (cfg.grpo.keep_checkpoints + 1) * est["checkpoint"] + est["weights"]
    status = OK if free >= need else MISSING
    return Row("disk", "checkpoints", status, f"{where}: {size_text(free)} free, checkpoints need about {size_text(need)} "
               f"(GRPO every {cfg.grpo.save_every} steps, keep {cfg.grpo.keep_checkpoints}; SFT keeps 2)")
