"""Policy and reference models: load a causal LM (optionally with LoRA), or build the tiny one offline.

§1: one model plays both roles (retriever and generator); §3.3 fine-tunes it in full, the kit also
offers LoRA through PEFT. The `tiny` profile cannot download Qwen3-8B, so it builds a model with the
same architecture (Qwen3), the same chat template shape and the same special tokens, trained from
scratch on the tiny world's text. Its tokenizer splits digits one by one, as Qwen's does, so that
copying a value from the question (`... where year = 1987`) is a sequence of single-digit copies a
small model can learn.
"""
from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import (AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase,
                          PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM)

from ..config.model import ModelConfig

IM_START, IM_END, END_OF_TEXT = "<|im_start|>", "<|im_end|>", "<|endoftext|>"
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
SPECIAL_TOKENS = [END_OF_TEXT, IM_START, IM_END]  # control tokens, dropped by skip_special_tokens
THINK_TOKENS = [THINK_OPEN, THINK_CLOSE]  # single tokens but kept in decoded text (as in Qwen3)

# Qwen3's chat template, reduced to what the kit uses: one user turn per role (§2), no tools.
# `enable_thinking=False` pre-fills an empty think block, exactly as Qwen3's template does.
QWEN3_CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- endif %}"
    "{%- endif %}"
)

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class LoraSpec:
    """LoRA hyper-parameters (UNKNOWN in the paper, which fine-tunes in full; kit defaults)."""

    r: int = 64
    alpha: int = 128
    dropout: float = 0.05

    @classmethod
    def from_config(cls, cfg: ModelConfig) -> "LoraSpec | None":
        return cls(cfg.lora_r, cfg.lora_alpha, cfg.lora_dropout) if cfg.lora else None


# ---------------------------------------------------------------------------------------------
# Loading


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device not in ("cpu", "cuda") and not re.fullmatch(r"cuda:\d+", device):
        raise ValueError(f"device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {device!r}")
    return torch.device(device)


def _looks_like_path(name: str) -> bool:
    """Hub ids are `org/name`; anything else with a path shape is meant as a local folder."""
    return (name.startswith((".", "/", "~")) or name.count("/") > 1 or name.endswith("/")
            or os.sep != "/" and os.sep in name)


def _check_source(name_or_path: str | Path) -> str:
    name = str(name_or_path)
    if Path(name).expanduser().exists():
        path = Path(name).expanduser()
        if not (path / "config.json").exists():
            raise FileNotFoundError(f"{path}: model folder has no config.json (expected a save_pretrained folder)")
        return str(path)
    if _looks_like_path(name):
        raise FileNotFoundError(f"{name}: model folder not found")
    return name


def load_tokenizer(name_or_path: str | Path, padding_side: str = "left") -> PreTrainedTokenizerBase:
    """Left padding by default: batched generation appends to the right end of every row."""
    source = _check_source(name_or_path)
    try:
        tok = AutoTokenizer.from_pretrained(source)
    except OSError as e:
        offline = " (HF_HUB_OFFLINE is set: the id must already be in the local cache)" if os.environ.get("HF_HUB_OFFLINE") else ""
        raise OSError(f"{source}: cannot load tokenizer{offline}: {e}") from e
    tok.padding_side = padding_side
    if tok.pad_token is None:  # Qwen3 pads with <|endoftext|>; fall back to eos for other models
        tok.pad_token = tok.eos_token
    return tok


def _load_model(name_or_path: str | Path, dtype: str, device: str) -> PreTrainedModel:
    if dtype not in _DTYPES:
        raise ValueError(f"dtype must be one of {sorted(_DTYPES)}, got {dtype!r}")
    source = _check_source(name_or_path)
    try:
        model = AutoModelForCausalLM.from_pretrained(source, dtype=_DTYPES[dtype])
    except OSError as e:
        offline = " (HF_HUB_OFFLINE is set: the id must already be in the local cache)" if os.environ.get("HF_HUB_OFFLINE") else ""
        raise OSError(f"{source}: cannot load model{offline}: {e}") from e
    from transformers.integrations import is_deepspeed_zero3_enabled

    if is_deepspeed_zero3_enabled():  # partitioned by deepspeed.zero.Init as it loaded: DeepSpeed places it
        return model
    return model.to(resolve_device(device))


def apply_lora(model: PreTrainedModel, lora: LoraSpec) -> PreTrainedModel:
    """Wrap with PEFT LoRA on every linear layer; only the adapters stay trainable."""
    from peft import LoraConfig, TaskType, get_peft_model

    config = LoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                        target_modules="all-linear", task_type=TaskType.CAUSAL_LM)
    return get_peft_model(model, config)


def load_policy(name_or_path: str | Path, dtype: str = "bfloat16", device: str = "auto",
                lora: LoraSpec | None = None, padding_side: str = "left",
                ) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """The trainable policy (§1: one model, two roles) and its tokenizer."""
    model = _load_model(name_or_path, dtype, device)
    if lora is not None:
        model = apply_lora(model, lora)
    model.train()
    return model, load_tokenizer(name_or_path, padding_side)


def load_reference(name_or_path: str | Path, dtype: str = "bfloat16", device: str = "auto",
                   padding_side: str = "left") -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """The frozen reference for the KL term (§4 step 8): eval mode, no gradients."""
    model = _load_model(name_or_path, dtype, device)
    model.eval()
    model.requires_grad_(False)
    return model, load_tokenizer(name_or_path, padding_side)


def training_dtype(cfg: ModelConfig) -> str:
    """The dtype the trained policy is loaded in: fp32 master weights (`model.train_dtype`) for a full fine-tune;
    under LoRA the frozen base in `model.dtype`, PEFT holding the adapters it trains in fp32."""
    return cfg.dtype if cfg.lora else cfg.train_dtype


def load_policy_from_config(cfg: ModelConfig, name_or_path: str | Path | None = None,
                            ) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    return load_policy(name_or_path or cfg.base_model, cfg.dtype, cfg.device, LoraSpec.from_config(cfg))


# ---------------------------------------------------------------------------------------------
# The tiny model (offline)


def train_tiny_tokenizer(texts: Iterable[str], vocab_size: int = 2048) -> PreTrainedTokenizerFast:
    """Byte-level BPE trained on `texts`, with Qwen3's special tokens and digit-by-digit splitting."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    # Digits are isolated before the byte-level split, like Qwen's pre-tokenizer, so no merge ever
    # joins two digits: every number is spelled one digit per token. The space before a capitalised
    # word is isolated too, so a value reads the same in the question (" Mexico") and in the SQL
    # ("'Mexico'"): copying it is then a plain token copy, which a model trained from scratch learns,
    # instead of a per-value " Mexico" -> "Mexico" mapping it can only memorise (and the tiny dev set's
    # values never occur in training SQL). All-caps SQL keywords keep their leading space.
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"\d"), behavior="isolated"),
        pre_tokenizers.Split(Regex(r"\s(?=\p{Lu}(?:\p{Ll}|[^\p{L}]|$))"), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS + THINK_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator((t for t in texts), trainer=trainer)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in THINK_TOKENS])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=IM_END, pad_token=END_OF_TEXT,
                                   padding_side="left")
    fast.chat_template = QWEN3_CHAT_TEMPLATE
    return fast


def build_tiny_model(tokenizer: PreTrainedTokenizerBase, hidden_size: int = 256, num_layers: int = 4,
                     num_heads: int = 4, num_kv_heads: int = 2, intermediate_size: int = 512,
                     max_position: int = 2048, seed: int = 0) -> Qwen3ForCausalLM:
    """A freshly initialised Qwen3 (float32, tied embeddings) sized for CPU training."""
    if hidden_size % num_heads or num_heads % num_kv_heads:
        raise ValueError(f"hidden_size {hidden_size}, num_heads {num_heads}, num_kv_heads {num_kv_heads}: "
                         "need hidden_size % num_heads == 0 and num_heads % num_kv_heads == 0")
    eos_ids = [tokenizer.convert_tokens_to_ids(IM_END), tokenizer.convert_tokens_to_ids(END_OF_TEXT)]
    config = Qwen3Config(
        vocab_size=len(tokenizer), hidden_size=hidden_size, intermediate_size=intermediate_size,
        num_hidden_layers=num_layers, num_attention_heads=num_heads, num_key_value_heads=num_kv_heads,
        head_dim=hidden_size // num_heads, max_position_embeddings=max_position, tie_word_embeddings=True,
        eos_token_id=eos_ids, pad_token_id=tokenizer.pad_token_id, bos_token_id=None, dtype="float32",
    )
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(config).to(torch.float32)
    # Qwen3's generation_config stops on both <|im_end|> and <|endoftext|>; so does the tiny one.
    model.generation_config.eos_token_id = eos_ids
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.bos_token_id = None
    return model


def build_tiny_from_config(cfg: ModelConfig, texts: Iterable[str], seed: int = 0,
                           ) -> tuple[Qwen3ForCausalLM, PreTrainedTokenizerFast]:
    tokenizer = train_tiny_tokenizer(texts, cfg.tiny.vocab_size)
    model = build_tiny_model(tokenizer, cfg.tiny.hidden_size, cfg.tiny.num_layers, cfg.tiny.num_heads,
                             cfg.tiny.num_kv_heads, cfg.tiny.intermediate_size, cfg.tiny.max_position, seed)
    return model, tokenizer


def save_tiny(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, directory: str | Path) -> Path:
    """A `save_pretrained` folder that AutoModelForCausalLM, AutoTokenizer and vLLM all load."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def model_tag(path: str | Path) -> str:
    """A model's identity for resumable work (distillation shards, GRPO runs): a hub id as is; a local
    folder by the names, sizes and modification times of its config and weight files."""
    folder = Path(path)
    if not folder.is_dir():
        return str(path)
    h = hashlib.sha256()
    for f in sorted(folder.iterdir()):
        if f.suffix in (".json", ".safetensors", ".bin", ".jinja") and f.is_file():
            st = f.stat()
            h.update(f"{f.name}:{st.st_size}:{st.st_mtime_ns}".encode())
    return f"{folder.name}-{h.hexdigest()[:12]}"
