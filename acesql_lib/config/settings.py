"""Typed configuration, one dataclass per stage.

Defaults are the paper's values (section of ../spec noted as "§" beside each field); where the
paper is silent the field says UNKNOWN and names the kit's choice. Profiles in `configs/*.yaml`
override these defaults with the same keys, each stating only what differs from what it inherits (the paper
profile states nothing; tests/test_config.py fails on a repeated value). Every field's type says what it accepts: a choice is a
`Literal`, a bound is pydantic's `Field` constraint (`PositiveInt`, `Share`, ...), and pydantic checks
each value against its type in strict mode (nothing coerced but an int for a float) whenever a section
is built, from a profile or in code; the few rules that tie two settings together stay in the section's
`__post_init__`. An unknown key, a value of the wrong type or out of bounds raises a `ConfigError` that
names the key, the value, what is allowed, and the file.
"""
from __future__ import annotations

import dataclasses
import functools
import re
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import Field, NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt

from ..roles.prompts import PROMPT_STYLES

REPO_ROOT = Path(__file__).resolve().parents[2]  # acesql_lib/config/settings.py -> the checkout
CONFIG_DIR = REPO_ROOT / "configs"


# Every choice a setting offers, declared once as a Literal: the dataclass fields below use these types,
# `_check_choices` validates them (pydantic), and the modules that act on a choice read their values from here.
World = Literal["synsql", "tinyworld"]
SchemaStyle = Literal["kit", "authors"]
Stage1Source = Literal["ours", "authors"]
LayoutsFrom = Literal["", "tinyworld"]
Complexity = Literal["Simple", "Moderate", "Complex", "Highly Complex"]  # SynSQL's sql_complexity levels
DType = Literal["float32", "bfloat16", "float16"]
Device = Literal["auto", "cpu", "cuda"]
PromptStyle = Literal[PROMPT_STYLES]  # prompts.PROMPT_STYLES (its module docstring says what each is)
EngineKind = Literal["vllm", "hf", "auto"]
HFCache = Literal["auto", "static", "dynamic"]
TraceChoice = Literal["shortest", "first", "random"]
RLSelection = Literal["stage1", "sft_model"]  # whose rollouts choose the RL questions (DistillConfig.rl_selection)
CompareMode = Literal["set", "multiset", "spider"]
Tracker = Literal["none", "tensorboard", "wandb", "trackio"]  # experiment trackers that SFT and GRPO can report to
Vote = Literal["majority", "union", "per_retriever"]
PoolInit = Literal["sft_rollouts_plus_gold", "sft_rollouts", "union", "static_gold", "authors_file"]
RetrieverReward = Literal["sparse", "dense", "dense_kit"]
PCGradMode = Literal["symmetric", "generator_dominant", "norm_equalised", "norm_mean", "none", "global"]
Truncation = Literal["length", "no_stop"]
AuthorsOrKit = Literal["authors", "kit"]  # think rule, parsers, schedule, question order: the authors' or the kit's
PoolAddGate = Literal["format", "match"]
BareTableColumns = Literal["none", "anchor"]
SQLWhitespace = Literal["collapse", "keep"]
LossAgg = Literal["micro_token_mean", "global_token_mean"]
SetFormat = Literal["bird", "spider"]
BirdDevVersion = Literal["", "20240627", "20251106"]  # BIRD dev's releases (data/benchmarks.json pins each one's files)
Scoring = Literal["kit", "authors", "bird_original", "bird_minidev"]  # executor/scoring.py says what each rule does
TableFormat = Literal["csv", "md", "tex"]
FigureFormat = Literal["png", "pdf", "svg"]

TRACKERS = typing.get_args(Tracker)
RL_SELECTIONS = typing.get_args(RLSelection)
POOL_INITS = typing.get_args(PoolInit)

# Bounds, declared in the field's type (pydantic's PositiveInt / NonNegativeInt / PositiveFloat / NonNegativeFloat
# and these shares).
Share = Annotated[float, Field(ge=0, le=1)]  # [0, 1]
OpenShare = Annotated[float, Field(gt=0, le=1)]  # (0, 1]
Ratio = Annotated[float, Field(ge=0, lt=1)]  # [0, 1)
ThinkFiller = Annotated[int, Field(ge=0, le=6)]  # filler sentences after the think sentence (tinybase.THINK_FILLER)


class ConfigError(ValueError):
    """A profile or override that cannot be used; the message names the key and the source."""


def _check(ok: bool, name: str, msg: str) -> None:
    if not ok:
        raise ConfigError(f"{name}: {msg}")


def _is_section(tp: Any) -> bool:
    """A field type that holds config sections (a dataclass class, or a list of them): they validate themselves."""
    return (isinstance(tp, type) and dataclasses.is_dataclass(tp)) or any(_is_section(a) for a in typing.get_args(tp))


_BOUNDS = {"gt": ">", "ge": ">=", "lt": "<", "le": "<="}


def field_bounds(hint: Any) -> dict[str, Any]:
    """The bounds a field's type declares ({"gt": 0, "le": 1}), from its annotated_types metadata."""
    found = {}
    for meta in getattr(hint, "__metadata__", ()):
        for m in getattr(meta, "metadata", [meta]):  # a pydantic Field(...) holds its bounds in .metadata
            found.update({k: getattr(m, k) for k in _BOUNDS if hasattr(m, k)})
    return found


def _bounds(hint: Any) -> str:
    """The bounds a field's type declares in words ("> 0 and <= 1")."""
    return " and ".join(f"{_BOUNDS[k]} {v}" for k, v in field_bounds(hint).items())


@functools.cache
def _field_adapters(cls: type) -> dict[str, tuple[Any, str]]:
    """For each field of `cls` that holds a value (not a section): a pydantic validator of its type (its
    Literal choices, its Field bounds) and its bounds in words."""
    from pydantic import TypeAdapter

    hints, plain = typing.get_type_hints(cls, include_extras=True), typing.get_type_hints(cls)
    return {f.name: (TypeAdapter(hints[f.name]), _bounds(hints[f.name]))
            for f in dataclasses.fields(cls) if not _is_section(plain[f.name])}


def _validate_fields(obj: Any, section: str) -> None:
    """Every value of a config section against its field's type (pydantic, strict: nothing is coerced, an int
    is read as a float); the validated value replaces the given one (1 -> 1.0). The error names the key, the
    value and what is allowed."""
    from pydantic import ValidationError

    for name, (adapter, bounds) in _field_adapters(type(obj)).items():
        value = getattr(obj, name)
        try:
            setattr(obj, name, adapter.validate_python(value, strict=True))
        except ValidationError as e:
            err = e.errors()[0]
            where = "".join(f"[{p!r}]" for p in err["loc"] if p != "[key]")  # a list index or a mapping key
            if err["type"] == "literal_error":
                problem = f"is not allowed (allowed: {err['ctx']['expected']})"
            elif err["type"] in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
                ctx = err.get("ctx", {})  # a bound inside a list or mapping: the one it broke
                problem = f"is out of bounds (must be {bounds or ' and '.join(f'{_BOUNDS[k]} {ctx[k]}' for k in ctx)})"
            else:
                problem = err["msg"].replace("Input should be", "is not")
            raise ConfigError(f"{section}.{name}{where}: {err['input']!r} {problem}") from None


@dataclass
class DataConfig:
    world: World = "synsql"  # "synsql" (paper, §3.1) or "tinyworld" (CPU/CI world generated by the kit)
    seed: int = 0  # seed for every sampled choice in data preparation
    synsql_dir: str = "data/synsql"  # SynSQL-2.5M layout: data.json + databases/<db_id>/<db_id>.sqlite (§7)
    bird_dev_dir: str = "data/bird/dev_20240627"  # BIRD dev layout: dev.json, dev_tables.json, dev_databases/ (§7)
    spider_dir: str = "data/spider"  # Spider layout: dev.json, test.json, tables.json, test_tables.json, database/, test_database/ (§7)
    spider_dk_dir: str = "data/spider_dk"  # Spider-DK layout (ygan/Spider-DK): Spider-DK.json, its own tables.json, database/ (§7)
    spider_syn_dir: str = "data/spider_syn"  # Spider-Syn layout (ygan/Spider-Syn): dev.json (SpiderSynQuestion); Spider's databases (§7)
    spider_realistic_dir: str = "data/spider_realistic"  # Spider-Realistic (Zenodo 5205322): spider-realistic.json; Spider's databases (§7)
    layouts_from: LayoutsFrom = ""  # "" = the downloaded releases (paper); "tinyworld" = write every layout above from the tiny world (rehearsal)
    layouts_real_spider_dk: str = ""  # with layouts_from: a real Spider-DK folder (Spider-DK.json, tables.json, database/) merged into the Spider-DK layout
    max_train_examples: NonNegativeInt = 0  # 0 = all; a cap for quick runs
    n_example_values: NonNegativeInt = 2  # §2: up to 2 sampled distinct non-null values per column
    example_max_chars: PositiveInt = 40  # §2: example strings cut to 40 characters
    schema_style: SchemaStyle = "authors"  # §2, authors' code: their schema text byte for byte; "kit" = the kit's own DDL format
    relevant_values: bool = True  # §2: question-relevant values (BM25 over every string value, after OmniSQL) first in example:
    max_example_values: PositiveInt = 6  # §2: relevant + sampled values shown per column, at most
    values_top_k: PositiveInt = 10  # authors' code (OmniSQL): BM25 hits kept per query (question n-grams up to 8 words + the question)
    values_min_match: Share = 0.85  # authors' code: a hit is kept when > this share of it occurs in the question
    values_max_hits: PositiveInt = 20  # authors' code: best-matching values kept per question (all columns together)
    tiny_n_train: NonNegativeInt = 3000  # tiny world: SynSQL-format training questions
    tiny_n_dev: NonNegativeInt = 300  # tiny world: BIRD-format dev questions (8 databases, 2 never trained on)
    tiny_n_dev_id: NonNegativeInt = 0  # tiny world: in-distribution dev questions (training databases, new values); 0 = none
    tinyworld_dir: str = "data/tinyworld"  # where the tiny world is generated (git-ignored)
    stage1_source: Stage1Source = "ours"  # "ours": stage 1 (§3) run by the kit; "authors": their released SFT/RL rows and pool (§7)
    authors_release_dir: str = "data/acesql_release"  # the downloaded release (datasets.download_acesql_release)

    def __post_init__(self) -> None:
        _validate_fields(self, "data")
        _check(self.stage1_source == "ours" or self.world == "synsql", "data.stage1_source",
               "'authors' needs data.world 'synsql' (their questions are on SynSQL databases)")


@dataclass
class FilteringConfig:
    # §3.1: "by complexity and schema diversity"; every threshold is UNKNOWN in the paper.
    complexity_mix: dict[Complexity, NonNegativeFloat] = field(default_factory=lambda: {
        "Simple": 0.2, "Moderate": 0.3, "Complex": 0.3, "Highly Complex": 0.2})  # UNKNOWN: target share per SynSQL level
    per_db_cap: PositiveInt = 50  # UNKNOWN: at most this many questions per database (schema diversity)
    min_tables: NonNegativeInt = 2  # UNKNOWN: databases with fewer tables are dropped
    min_columns: NonNegativeInt = 6  # UNKNOWN: databases with fewer columns are dropped
    dedup_questions: bool = True  # drop repeated questions (case/space-normalised)
    dedup_sql: bool = True  # drop repeated normalised gold SQL
    require_execution: bool = True  # gold SQL must parse, resolve to a column set and execute
    drop_empty_results: bool = True  # UNKNOWN: gold SQL returning no rows is dropped (an empty result matches too easily to teach)
    target_size: PositiveInt = 20000  # UNKNOWN: questions kept for distillation (paper keeps 7,092 SFT pairs after it)
    exec_timeout_s: PositiveFloat = 30.0  # §4 step 4 timeout, reused for gold checks

    def __post_init__(self) -> None:
        _validate_fields(self, "filtering")
        _check(sum(self.complexity_mix.values()) > 0, "filtering.complexity_mix", "shares must not all be 0")


@dataclass
class TinyBaseConfig:
    """The tiny profiles' own base model (`model.build_tiny`): a small Qwen3 architecture and the SFT on gold
    outputs that trains it from scratch (tinybase.py). Every field but `prebuilt` is in the base's reuse key."""

    vocab_size: PositiveInt = 1024  # small enough for the training text that every token occurs in it whole
    hidden_size: PositiveInt = 256
    num_layers: PositiveInt = 4
    num_heads: PositiveInt = 4
    num_kv_heads: PositiveInt = 2
    intermediate_size: PositiveInt = 512
    max_position: PositiveInt = 2048
    steps: PositiveInt = 150  # SFT steps on gold outputs that build the base (by steps, not wall time)
    batch_size: PositiveInt = 32
    lr: PositiveFloat = 3e-3
    value_swap: Share = 0.0  # share of questions whose values are made up (forces copying over memorising)
    scheduler: str = "cosine"  # decaying the LR to 0 at the last step sharpens the small model
    warmup_ratio: Share = 0.05
    group_by_length: bool = False  # True batches the roles apart (less padding) but the loss oscillates
    length_split: PositiveInt = 4  # forward passes per batch, rows sorted by length (same loss; CPU speed)
    completion_head: bool = True  # LM head on completion positions only (same loss; CPU speed)
    compile: bool = False  # torch.compile the decoder (same loss to 1e-6; CPU speed)
    full_loss: bool = False  # True: the base also learns the prompts' text (measured worse: prompt tokens swamp the loss)
    think_extra: ThinkFiller = 0  # up to this many filler sentences after a target's think sentence (0..6, uniform per sample); 0 = one sentence
    holdout_stage1: bool = False  # True: the base never sees the gold of stage 1's pool (filtering's output), as Qwen3-8B never saw SynSQL's
    # A base model the kit ships, used instead of a build when it was built from these settings and this code
    # (shipped_base.prebuilt_matches), as the paper profile downloads Qwen3-8B; "" always builds. Not in the reuse key.
    prebuilt: str = ""

    def __post_init__(self) -> None:
        _validate_fields(self, "model.tiny")
        _check(self.hidden_size % self.num_heads == 0, "model.tiny.hidden_size", "must be divisible by model.tiny.num_heads")
        _check(self.num_heads % self.num_kv_heads == 0, "model.tiny.num_kv_heads", "must divide model.tiny.num_heads")


@dataclass
class ModelConfig:
    base_model: str = "Qwen/Qwen3-8B"  # §1: one model, two roles; a hub id or a local folder
    dtype: DType = "bfloat16"  # §3.3 bf16: inference (distillation, evaluation, the engine) and the frozen reference
    # The trained policy's weights in SFT and GRPO: fp32 masters with bf16 compute (sft.bf16, grpo.bf16), as the
    # authors' actor (RL/scripts/train_rl_pcgrad.sh: model_dtype fp32, mixed precision bf16). A bf16 policy would
    # lose every 1e-6 AdamW update to rounding (bf16 keeps 8 bits of mantissa).
    train_dtype: DType = "float32"
    device: Device = "auto"  # "auto", "cpu" or "cuda"
    lora: bool = False  # §3.3 full fine-tune; LoRA through PEFT is an option
    lora_r: PositiveInt = 64
    lora_alpha: int = 128
    lora_dropout: Ratio = 0.05
    # The tiny profile builds its own base model offline (a Qwen3 architecture trained from scratch).
    build_tiny: bool = False
    # §2 prompt texts (prompts.PROMPT_STYLES): "authors" = the authors' prompts byte for byte, their training templates
    # (RL/prompts/*.txt) for SFT samples and rollouts, their evaluation templates (EVAL/prompt_templates.py,
    # EVAL/prompts/retriever_prompt.txt) for evaluation; "paper" = the kit's own wording; "tiny" shortens the kit's
    # instructions for CPU sequences
    prompt_style: PromptStyle = "authors"
    tiny: TinyBaseConfig = field(default_factory=TinyBaseConfig)  # the tiny profiles' own base model

    def __post_init__(self) -> None:
        _validate_fields(self, "model")


@dataclass
class EngineConfig:
    kind: EngineKind = "vllm"  # §4.11 vLLM rollouts; "hf" uses transformers generate; "auto" = vllm when importable, else hf
    gpu_memory_utilization: OpenShare = 0.4  # colocated with training
    # vLLM's sleep mode (CUDA only) while the policy updates: the engine's KV cache freed and its weights in host
    # memory, so the update has the engine's share too (the authors' verl frees its cache engine likewise). Kit's
    # option, off: the paper's 4-GPU launch on 80 GB cards needs it (docs/gpu.md)
    sleep_during_update: bool = False
    tensor_parallel_size: PositiveInt = 1
    enable_thinking: bool = True  # §2: thinking on
    max_model_len: PositiveInt = 6144  # prompt 4096 + response 2048 (§4.11)
    hf_batch_size: PositiveInt = 64  # sequences per HF generate call when sampling (each batch draws on from the last)
    # sequences per HF generate call when greedy (evaluation): greedy tokens do not depend on the batching, so larger
    # calls change no prediction and spend less time per question (benchmarks/README.md)
    hf_greedy_batch_size: PositiveInt = 64
    # HF generate's KV cache when `hf_drop_finished` is off: "static" (preallocated, no copy per token), "dynamic"
    # (transformers' default), "auto" = static for greedy decoding on CPU, where it is faster, else dynamic. The
    # kit's loop (`hf_drop_finished`) keeps its own cache, which grows in place (`engines.in_place_cache`)
    hf_cache: HFCache = "auto"
    # batch prompts of similar token length together (less left padding; faster sampling, greedy unchanged:
    # benchmarks/hf_generate_speed.py); it changes which seeded draw each row gets, so it is off and a run's
    # samples do not depend on it
    hf_sort_by_length: bool = False
    # the n samples of a prompt share one prefill of it (its KV cache copied to each sample) instead of n: the same
    # tokens, less prefill work for sampled rollouts (benchmarks/hf_generate_speed.py)
    hf_share_prefix: bool = True
    # with `hf_share_prefix`, prompts of one call that open with the same tokens, this many or more (one database's
    # schema before its questions), also share one prefill of that opening where it is less work
    # (`HFEngine._shared_prefix`); 0 = only a prompt's own samples share. Every prediction and sample the same; the
    # retriever's prompts, which open with their database's schema, gain most (benchmarks/README.md)
    hf_shared_opening_min: NonNegativeInt = 32
    # decoding, greedy and sampled, drops a row from the batch once it has ended (the kit's loop, `HFEngine._decode`)
    # instead of decoding every row until the longest ends: the same tokens and draws as `generate`, fewer rows
    # decoded per step (benchmarks/hf_generate_speed.py)
    hf_drop_finished: bool = True
    # Independent jobs that sample run this many at a time in worker processes, each job with its own model and engine
    # (acesql_lib/runtime/workers.py): the distillation's shards and notebook 06's variants. The same numbers bit for bit;
    # faster where decoding is bound by Python (small models on CPU cores: a second process uses the cores the
    # first leaves idle); 1 = in the notebook's process (GPUs, vLLM engines). Not part of any reuse key. Greedy
    # evaluation is bound by memory instead, so it runs in one process
    workers: PositiveInt = 1

    def __post_init__(self) -> None:
        _validate_fields(self, "engine")




@dataclass
class DistillConfig:
    n_retriever: PositiveInt = 8  # UNKNOWN (§3.2): retriever samples per question; kit uses the RL value
    n_generator: PositiveInt = 16  # UNKNOWN (§3.2): generator samples; the pool denominator of 16 suggests 16
    vote_threshold: OpenShare = 0.5  # §4 step 2 majority vote
    temperature: NonNegativeFloat = 1.0  # UNKNOWN (§3.2): kit uses the RL rollout temperature
    top_p: OpenShare = 1.0
    max_new_tokens: PositiveInt = 2048  # §4.11 max response per role
    trace_choice: TraceChoice = "shortest"  # UNKNOWN (§3.2): one correct trace per question: shortest, first or random
    rl_min_correct: NonNegativeInt = 2  # §3.4: RL questions correct 2..14 times out of 16
    rl_max_correct: NonNegativeInt = 14
    n_validation: NonNegativeInt = 40  # §3.4: held-out validation pairs (at most half of the eligible questions)
    n_rl_train: NonNegativeInt = 2913  # §3.4: RL training pairs (cap)
    # §3.4 "whose SFT rollouts were correct 2..14 times": "stage1" counts the self-distillation rollouts, as the
    # authors' release does (their RL rows and pool share stage 1's counts); "sft_model" rolls the SFT model out
    # again on `rl_candidates` filtered training questions and counts those (`distill.select_by_model`)
    rl_selection: RLSelection = "stage1"
    rl_candidates: NonNegativeInt = 0  # rl_selection "sft_model": questions the SFT model rolls out; 0: the distilled ones
    sft_excludes_validation: bool = True  # UNKNOWN (§3.4 "held-out"): keep the validation pairs out of the SFT data
    shard_size: PositiveInt = 256  # questions per distillation shard; a killed run loses at most one
    exec_timeout_s: PositiveFloat = 30.0
    compare_mode: CompareMode = "multiset"  # §4 step 4: training match is a multiset, floats rounded to 6 places

    def __post_init__(self) -> None:
        _validate_fields(self, "distill")
        _check(0 <= self.rl_min_correct <= self.rl_max_correct <= self.n_generator, "distill.rl_min_correct",
               "need 0 <= rl_min_correct <= rl_max_correct <= n_generator")


@dataclass
class SFTConfig:
    learning_rate: PositiveFloat = 2e-5  # §3.3
    lr_scheduler_type: str = "cosine"  # §3.3
    warmup_ratio: Ratio = 0.05  # §3.3
    per_device_batch_size: PositiveInt = 4
    effective_batch_size: PositiveInt = 64  # §3.3: samples per optimizer step, over all processes
    gradient_accumulation_steps: NonNegativeInt = 0  # 0: derived from effective_batch_size (`accumulation`)
    num_epochs: PositiveFloat = 2.0  # §3.3
    max_length: PositiveInt = 4096  # §3.3 cutoff
    bf16: bool = True  # §3.3
    gradient_checkpointing: bool = True
    max_steps: int = -1  # -1 = derived from epochs
    logging_steps: PositiveInt = 10
    report_to: Tracker = "none"  # experiment tracker for the SFT runs: none, tensorboard, wandb or trackio (kit's option)
    length_split: PositiveInt = 1  # forward passes per batch, rows sorted by length (same loss, less padding; CPU speed)
    completion_head: bool = False  # LM head on completion positions only (same loss, ~1/6 of the head's work; CPU speed)
    save_steps: NonNegativeInt = 500  # 0 = no checkpoints
    accelerate_config: str = "configs/accelerate/zero3.yaml"  # §3.3 DeepSpeed ZeRO-3, 4 x A100

    def __post_init__(self) -> None:
        _validate_fields(self, "sft")

    def accumulation(self, processes: int) -> int:
        """Micro-batches per optimizer step on `processes` ranks: `gradient_accumulation_steps` when set, else
        what reaches `effective_batch_size` (4 per device: 4 on 4 GPUs, 16 on one GPU, both 64 samples)."""
        if self.gradient_accumulation_steps:
            return self.gradient_accumulation_steps
        per_step = self.per_device_batch_size * processes
        if self.effective_batch_size % per_step:
            raise ConfigError(f"sft.effective_batch_size: {self.effective_batch_size} is not a multiple of "
                              f"sft.per_device_batch_size x processes = {self.per_device_batch_size} x {processes}; "
                              f"change one, or set sft.gradient_accumulation_steps")
        return self.effective_batch_size // per_step




@dataclass
class GRPOConfig:
    batch_questions: PositiveInt = 16  # §4: B = 16 questions per step
    n_retriever: PositiveInt = 8  # §4 step 1
    n_generator: PositiveInt = 8  # §4 step 3
    temperature: NonNegativeFloat = 1.0  # §4 step 1
    top_p: OpenShare = 1.0
    vote: Vote = "majority"  # §4 step 2; variants "union" and "per_retriever" (authors' code)
    vote_threshold: OpenShare = 0.5  # §4 step 2: ceil(0.5 * N_ret)
    exec_timeout_s: PositiveFloat = 30.0  # §4 step 4
    compare_mode: CompareMode = "multiset"  # §4 step 4
    gamma: OpenShare = 0.5  # §4 step 5 pool decay
    # §4 step 5; authors' released pool: SFT rollout counts plus the gold set at 0.5 when no rollout used it.
    # Also "sft_rollouts" (counts only), "union" (UNKNOWN reading), "static_gold" (ablation), "authors_file".
    pool_init: PoolInit = "sft_rollouts_plus_gold"
    authors_pool_file: str = ""  # pool_init "authors_file": their initial_pool.json; "" = the one in data.authors_release_dir
    len_penalty_start: NonNegativeInt = 512  # §4 step 6: p_len = 0.5 * clip((L - 512) / (2048 - 512), 0, 1)
    len_penalty_end: int = 2048
    len_penalty_max: NonNegativeFloat = 0.5
    retriever_reward: RetrieverReward = "sparse"  # §4 step 6; "dense" = authors' dense formula (ablation), "dense_kit" = kit's coverage minus noise
    generator_truncation_gate: bool = False  # §4 step 6 silent; authors' joint_reward.py gates only the retriever on truncation; true = kit
    truncation: Truncation = "length"  # authors: response length >= max_response_tokens; "no_stop" = kit (no stop token)
    think_rule: AuthorsOrKit = "authors"  # §2 silent; authors: both tags anywhere, answer after the last </think>; "kit" = stricter
    retriever_parser: AuthorsOrKit = "authors"  # training list parsing, authors' RL/rewards/retriever_utils.py; "kit" = own parser
    pool_add_gate: PoolAddGate = "format"  # §4 step 5 silent; authors: add a match only if it passes the format gate; "match" = kit
    bare_table_columns: BareTableColumns = "none"  # authors' extractor: SELECT count(*) FROM t adds no set; "anchor" = kit's PK rule
    sql_whitespace: SQLWhitespace = "collapse"  # authors' joint_reward.py: whitespace runs -> one space before execution; "keep" = as written
    adv_eps: NonNegativeFloat = 1e-6  # §4 step 7
    clip_eps: PositiveFloat = 0.2  # §4 step 8
    dual_clip: float = 3.0  # §4 step 8
    kl_coef: NonNegativeFloat = 0.001  # §4 step 8, k3 estimator
    kl_clamp: NonNegativeFloat = 10.0  # authors (verl low_var_kl): log-ratio in [-20, 20], k3 clamped to [-10, 10]; 0 = unclamped (kit)
    reference_model: str = ""  # §4 step 8: "" = the frozen SFT checkpoint; a folder to use another reference
    gen_schedule_ratio: Share = 0.25  # §4 step 9: w_gen 0 -> 1 over the first 25% of steps; 0 disables
    # §4.11 silent on the rounding; authors (verl): warm-up int(5% x T) from lr 0, w_gen progress (s-1)/(T-1).
    # "kit": warm-up ceil(5% x T) from lr 1/W, w_gen (s-1)/(ratio x T)
    schedule: AuthorsOrKit = "authors"
    pcgrad: PCGradMode = "symmetric"  # §4 step 10; "generator_dominant", "norm_equalised" (authors'), "norm_mean" (kit), "none", "global"
    pcgrad_eps: NonNegativeFloat = 1e-12  # authors' dp_actor.py: no projection onto a gradient with squared norm <= eps; 0 = kit
    pcgrad_max_ratio: PositiveFloat = 0.3  # authors' norm_equalised: retriever gradient capped at 0.3 x generator norm
    max_grad_norm: PositiveFloat = 1.0  # §4 step 10
    learning_rate: PositiveFloat = 1e-6  # §4.11
    warmup_ratio: Share = 0.05  # §4.11 (1.0: the LR warms up over the whole run)
    weight_decay: NonNegativeFloat = 0.0  # §4.11
    epochs: PositiveInt = 4  # §4.11: 4 epochs x 182 steps = 728
    max_steps: NonNegativeInt = 0  # 0 = epochs x floor(questions / batch): an epoch's last partial batch is dropped (728)
    max_prompt_tokens: NonNegativeInt = 4096  # §4.11; authors: longer retriever prompts are dropped, generator prompts keep their last 4,096 tokens; 0 = no limit
    max_response_tokens: PositiveInt = 2048  # §4.11
    # §4 step 8 "token-mean"; authors (verl dynamic batching, ppo_max_token_len_per_gpu 12,000): a token mean per
    # micro-batch of about `micro_batch_tokens` tokens, weighted by its share of sequences. "global_token_mean" (kit):
    # one token mean over the role's tokens on all ranks, in chunks of `micro_batch_size` sequences
    loss_agg: LossAgg = "micro_token_mean"
    micro_batch_tokens: PositiveInt = 12000  # prompt + completion tokens per micro-batch ("micro_token_mean")
    micro_batch_size: PositiveInt = 8  # sequences per forward/backward pass ("global_token_mean"; memory, not maths)
    bf16: bool = True  # authors: bf16 compute on the fp32 policy (accelerate mixed precision); GPU only, CPU runs fp32
    gradient_checkpointing: bool = True  # authors (RL/trainer/config/model/hf_model.yaml): layer activations recomputed
    # memory, not maths: the loss's fp32 log-softmax over the vocabulary taken this many completion positions at a
    # time and recomputed in the backward pass (0 = the whole micro-batch at once); the values are the same
    logprob_chunk_tokens: NonNegativeInt = 1024
    # speed, not maths (kit's option): the samples of one prompt in one row, the prompt computed once and each
    # completion masked to it and itself (acesql_lib/train/packed.py); false = one sample per row, as the authors' actor.
    # Its dense mask grows with the square of prompt + all completions, so it suits short completions (the CPU
    # profiles); the preflight's "packed GRPO rows" says what a row costs at the profile's lengths
    packed_prompts: bool = False
    val_every: NonNegativeInt = 40  # §4.11
    val_temperature: NonNegativeFloat = 0.8  # §4.11
    # §4.11 silent; authors (RL/trainer/validation_correct.py): validation runs the training rollout, 8 retriever
    # samples, the vote, 8 generator samples per question at val_temperature; EX is the share of matching samples
    val_retriever_samples: PositiveInt = 8
    val_samples: PositiveInt = 8  # generator samples per validation question
    # the validation before the first update read back where the run folder holds one of the same SFT model,
    # questions, pool targets, settings and code (JointGRPO.validate_start): the ablation variants start where the
    # full run did, and validate the same rollouts. Single-process runs; the same numbers either way
    reuse_start_validation: bool = True
    save_every: NonNegativeInt = 80  # §4.11
    keep_checkpoints: NonNegativeInt = 3
    report_to: Tracker = "none"  # tracker for metrics.jsonl's metrics: none, tensorboard, wandb or trackio (kit's option)
    seed: int = 0
    # question order: "authors" = verl's seeded torch sampler (RL/trainer/main_two_pass.py, data.seed 1 in
    # RL/scripts/train_rl_pcgrad.sh); "kit" = a Python shuffle per epoch from grpo.seed
    data_order: AuthorsOrKit = "authors"
    data_seed: int = 1
    accelerate_config: str = "configs/accelerate/fsdp.yaml"

    def __post_init__(self) -> None:
        _validate_fields(self, "grpo")
        _check(self.len_penalty_end > self.len_penalty_start, "grpo.len_penalty_end", "must exceed len_penalty_start")


BIRD_DEV_VERSION = "20240627"  # the BIRD dev release the paper measured on (EvalSet.version)


@dataclass
class EvalSet:
    name: str = "bird_dev"
    format: SetFormat = "bird"  # "bird" (set EX, §5) or "spider" (order-aware multiset, §5)
    # The three paths may start with a data root in braces, `{spider_dir}` = data.spider_dir (`DATA_ROOTS`), filled in
    # when a profile is loaded (`load_config`): a profile that moves the data changes the roots, never the sets
    path: str = ""  # questions file (dev.json)
    tables: str = ""  # tables.json
    db_root: str = ""  # folder with <db_id>/<db_id>.sqlite
    question_field: str = ""  # "" = the format's own ("question"); Spider-Syn asks "SpiderSynQuestion" (§5)
    # The prompts show question-relevant values when data.relevant_values is on; false: never. The authors' Spider
    # dev/test prompts have none (EVAL/prepare_spider_data.py, EVAL/generate_spider_sql_prompts.py pass {}),
    # their BIRD ones do (EVAL/prepare_eval_data.py, EVAL/generate_sql_prompts.py)
    relevant_values: bool = True
    # The benchmark release the set is (data/benchmarks.json); "" = not a versioned benchmark. BIRD dev: the paper's
    # is 20240627 (§7 names dev_20240627; its baseline rows are published dev_20240627 numbers; the authors' EVAL
    # code names no version), the default of a set named bird_dev; 20251106 is BIRD's corrected re-release.
    version: BirdDevVersion = ""

    def __post_init__(self) -> None:
        if isinstance(self.version, int) and not isinstance(self.version, bool):
            self.version = str(self.version)  # YAML reads an unquoted 20251106 as a number
        _validate_fields(self, f"eval.sets[{self.name}]")
        if self.name == "bird_dev" and not self.version:
            self.version = BIRD_DEV_VERSION


@dataclass
class EvalConfig:
    sets: list[EvalSet] = field(default_factory=lambda: [
        EvalSet("bird_dev", "bird", "{bird_dev_dir}/dev.json", "{bird_dev_dir}/dev_tables.json",
                "{bird_dev_dir}/dev_databases"),
        EvalSet("spider_dev", "spider", "{spider_dir}/dev.json", "{spider_dir}/tables.json", "{spider_dir}/database",
                relevant_values=False),  # the authors' Spider prompts show no relevant values
        EvalSet("spider_test", "spider", "{spider_dir}/test.json", "{spider_dir}/test_tables.json",
                "{spider_dir}/test_database", relevant_values=False),
        EvalSet("spider_dk", "spider", "{spider_dk_dir}/Spider-DK.json", "{spider_dk_dir}/tables.json",
                "{spider_dk_dir}/database"),
        EvalSet("spider_syn", "spider", "{spider_syn_dir}/dev.json", "{spider_dir}/tables.json", "{spider_dir}/database",
                "SpiderSynQuestion"),
        EvalSet("spider_realistic", "spider", "{spider_realistic_dir}/spider-realistic.json", "{spider_dir}/tables.json",
                "{spider_dir}/database"),
    ])  # §5: Table 1 (BIRD dev, Spider dev/test) and Table 3 (Spider-DK/Syn/Realistic)
    # §5 silent; the authors' evaluation scripts (EVAL/single_eval_maj.py, EVAL/spider_config.py): 8,192 new SQL
    # tokens, 4,096 retriever tokens, vLLM max_model_len 8,192 (training rollouts: 2,048 per role, 6,144)
    max_new_tokens: PositiveInt = 8192  # the generator (SQL) pass
    retriever_max_new_tokens: NonNegativeInt = 4096  # 0 = max_new_tokens
    max_model_len: PositiveInt = 8192  # the evaluation engine's context (prompt + output); engine.max_model_len is training's
    exec_timeout_s: PositiveFloat = 30.0  # seconds per SQL: Spider-format sets, and BIRD-format sets under scoring "kit"
    # How BIRD-format sets are scored (executor/scoring.py): "authors" (paper: their EVAL/evaluation_maj.py; a
    # prediction without SQL runs as no rows and matches an empty gold result, invalid UTF-8 text scores 0,
    # 300 s per SQL), "bird_original" / "bird_minidev" (the BIRD releases' evaluators, 30 s), "kit" (no SQL
    # scores 0, invalid UTF-8 read as U+FFFD, exec_timeout_s; the tiny profile)
    scoring: Scoring = "authors"
    max_examples: NonNegativeInt = 0  # 0 = whole set
    workers: NonNegativeInt = 0  # executor processes; 0 = number of CPU cores
    retriever_parser: AuthorsOrKit = "authors"  # §5 silent; the authors' EVAL parser (first list, table expansion, JSON); "kit"
    generator_parser: AuthorsOrKit = "authors"  # §5 silent; the authors' EVAL/sql_infer.py SQL extraction (fallbacks); "kit"
    ablation_sets: list[str] = field(default_factory=list)  # sets the ablation variants are evaluated on; [] = the first (§6: BIRD dev)
    reuse: bool = True  # an evaluation of the same model, set, settings and code is read back, not redone (evaluate.eval_key)

    def ablation_eval_sets(self) -> list[EvalSet]:
        """The sets notebook 06 evaluates each ablation variant on (`ablation_sets`, else the first)."""
        by_name = {s.name: s for s in self.sets}
        return [by_name[n] for n in self.ablation_sets] if self.ablation_sets else self.sets[:1]

    def __post_init__(self) -> None:
        _validate_fields(self, "eval")
        _check(isinstance(self.sets, list), "eval.sets", f"expected a list of sets, got {type(self.sets).__name__}")
        self.sets = [s if isinstance(s, EvalSet) else _build(EvalSet, s, f"eval.sets[{i}]", "<profile>")
                     for i, s in enumerate(self.sets)]
        unknown = [n for n in self.ablation_sets if n not in {s.name for s in self.sets}]
        _check(not unknown, "eval.ablation_sets", f"names not in eval.sets: {unknown}")


@dataclass
class ReportsConfig:
    table_formats: list[TableFormat] = field(default_factory=lambda: ["csv", "md", "tex"])
    figure_formats: list[FigureFormat] = field(default_factory=lambda: ["png", "pdf"])
    style: str = "whitegrid"  # seaborn style used for every figure
    dpi: PositiveInt = 150

    def __post_init__(self) -> None:
        _validate_fields(self, "reports")


@dataclass
class Config:
    profile: str = "paper"
    run_dir: str = ""  # "" = runs/<profile>: models, checkpoints, rollouts (not in git)
    reports_dir: str = ""  # "" = reports/<profile>: tables, figures, metrics, executed notebooks
    seed: int = 0
    data: DataConfig = field(default_factory=DataConfig)
    filtering: FilteringConfig = field(default_factory=FilteringConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    distill: DistillConfig = field(default_factory=DistillConfig)
    sft: SFTConfig = field(default_factory=SFTConfig)
    grpo: GRPOConfig = field(default_factory=GRPOConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    reports: ReportsConfig = field(default_factory=ReportsConfig)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# ---------------------------------------------------------------------------------------------
# Loading and validation


def _build(cls: type, values: dict[str, Any], prefix: str, source: str) -> Any:
    """A config section from a mapping: unknown keys are refused here, sections inside it are built from their
    mappings, and the section validates its own values (`_validate_fields`, its `__post_init__`)."""
    if not isinstance(values, dict):
        raise ConfigError(f"{source}: {prefix}: expected a mapping, got {type(values).__name__}")
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in values.items():
        name = f"{prefix}.{key}" if prefix else key
        if key not in known:
            raise ConfigError(f"{source}: unknown key {name!r} (known: {', '.join(sorted(known))})")
        kwargs[key] = _build(hints[key], value, name, source) if dataclasses.is_dataclass(hints[key]) else value
    try:
        return cls(**kwargs)
    except ConfigError as e:
        raise ConfigError(f"{source}: {e}") from None


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _dotted_to_nested(overrides: dict[str, Any]) -> dict[str, Any]:
    nested: dict[str, Any] = {}
    for key, value in overrides.items():
        node = nested
        *parents, leaf = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return nested


def parse_overrides(items: list[str] | None) -> dict[str, Any]:
    """`KEY=VALUE` command-line overrides (values parsed as YAML) -> {dotted key: value}."""
    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"override {item!r}: expected KEY=VALUE, e.g. grpo.max_steps=4")
        parsed = yaml.safe_load(value)
        if isinstance(parsed, str) and re.fullmatch(r"[-+]?\d+(\.\d*)?[eE][-+]?\d+", parsed.strip()):
            parsed = float(parsed)  # YAML 1.1 reads "2e-6" (no dot) as a string
        out[key.strip()] = parsed
    return out


def profile_path(profile: str) -> Path:
    """A profile name (`tiny`) or a path to a YAML file."""
    p = Path(profile)
    if p.suffix in (".yaml", ".yml"):
        return p if p.is_absolute() else (Path.cwd() / p if (Path.cwd() / p).exists() else REPO_ROOT / p)
    return CONFIG_DIR / f"{profile}.yaml"


def _read_profile(path: Path) -> dict[str, Any]:
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: top level must be a mapping")
    return raw


def _inherited(raw: dict[str, Any], path: Path, chain: list[Path]) -> dict[str, Any]:
    """`inherits: paper` (a profile name or YAML path): that profile's keys, then this file's on top.
    Mappings merge key by key; a list (eval.sets) is replaced whole."""
    base = raw.pop("inherits", None)
    if base is None:
        return raw
    if not isinstance(base, str) or not base.strip():
        raise ConfigError(f"{path}: inherits: expected a profile name, got {base!r}")
    base_path = profile_path(base)
    if not base_path.exists():
        raise ConfigError(f"{path}: inherits {base!r}: profile not found at {base_path}")
    if base_path.resolve() in [p.resolve() for p in chain]:
        raise ConfigError(f"{path}: inherits {base!r}: circular ({' -> '.join(str(p) for p in chain + [base_path])})")
    parent = _inherited(_read_profile(base_path), base_path, chain + [base_path])
    parent.pop("profile", None)
    return _merge(parent, raw)


def written_config(profile: str) -> Config:
    """A profile as its files write it: the paper's defaults, the profiles it inherits, then its own keys, with
    the data roots in eval-set paths still in braces and `engine.kind: auto` unresolved (`load_config` resolves
    both)."""
    path = profile_path(profile)
    if not path.exists():
        raise ConfigError(f"{path}: profile not found (profiles: {', '.join(sorted(p.stem for p in CONFIG_DIR.glob('*.yaml')))})")
    raw = _read_profile(path)
    raw = _inherited(raw, path, [path])
    raw.setdefault("profile", path.stem)
    return _build(Config, raw, "", str(path))


def load_config(profile: str = "tiny", overrides: dict[str, Any] | None = None) -> Config:
    """Paper defaults, then the profile's YAML, then `overrides` ({"grpo.gamma": 0.7} or nested)."""
    cfg = written_config(profile)
    if overrides:
        nested = _dotted_to_nested(overrides) if any("." in k for k in overrides) else overrides
        cfg = _build(Config, _merge(cfg.to_dict(), nested), "", "overrides")
    return _with_world_paths(cfg)


DATA_ROOTS = ("tinyworld_dir", "synsql_dir", "bird_dev_dir", "spider_dir", "spider_dk_dir", "spider_syn_dir",
              "spider_realistic_dir")


def _with_world_paths(cfg: Config) -> Config:
    """Eval-set paths may start with a data root in braces: `{tinyworld_dir}`, `{spider_dir}`, ... (data.<root>),
    so a profile that moves the data (rehearsal) changes the roots, not the sets; `engine.kind: auto` is resolved."""
    def sub(text: str) -> str:
        for root in DATA_ROOTS:
            text = text.replace("{" + root + "}", getattr(cfg.data, root))
        return text

    sets = [dataclasses.replace(s, path=sub(s.path), tables=sub(s.tables), db_root=sub(s.db_root)) for s in cfg.eval.sets]
    cfg = dataclasses.replace(cfg, eval=dataclasses.replace(cfg.eval, sets=sets))
    if cfg.engine.kind == "auto":
        import importlib.util

        kind = "vllm" if importlib.util.find_spec("vllm") is not None else "hf"
        cfg = dataclasses.replace(cfg, engine=dataclasses.replace(cfg.engine, kind=kind))
    return cfg
