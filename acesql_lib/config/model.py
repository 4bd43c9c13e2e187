"""The model sections: the base model and its dtypes, LoRA and prompt style (`ModelConfig`, §1-§3.3), the tiny
profiles' own base model (`TinyBaseConfig`), and the generation engine (`EngineConfig`, §4.11).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import NonNegativeInt, PositiveFloat, PositiveInt

from .checks import check, validate_fields
from .choices import DType, Device, EngineKind, OpenShare, PromptStyle, Ratio, Share, ThinkFiller


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
        validate_fields(self, "model.tiny")
        check(self.hidden_size % self.num_heads == 0, "model.tiny.hidden_size", "must be divisible by model.tiny.num_heads")
        check(self.num_heads % self.num_kv_heads == 0, "model.tiny.num_kv_heads", "must divide model.tiny.num_heads")


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
        validate_fields(self, "model")


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

    def __post_init__(self) -> None:
        validate_fields(self, "engine")
