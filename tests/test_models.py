"""The tiny tokenizer and model (digits, special tokens, chat template, save/reload), loading and LoRA."""
from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from acesql_lib.config.model import ModelConfig, TinyBaseConfig
from acesql_lib.models.loading import (IM_END, QWEN3_CHAT_TEMPLATE, SPECIAL_TOKENS, THINK_TOKENS, LoraSpec, apply_lora,
                               build_tiny_from_config, build_tiny_model, load_policy, load_reference, save_tiny,
                               train_tiny_tokenizer)

# Numbers repeat on purpose: without digit splitting, BPE would merge "1987" into one token.
TEXTS = [f"SELECT name FROM singer WHERE year = 1987 AND age > {20 + i % 50}; which singers were born in 1987?"
         for i in range(200)] + ["<think>the question asks for names</think> SELECT count(*) FROM concert"] * 20


@pytest.fixture(scope="module")
def tokenizer():
    return train_tiny_tokenizer(TEXTS, vocab_size=600)


@pytest.fixture(scope="module")
def tiny(tokenizer):
    return build_tiny_model(tokenizer, hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=1,
                            intermediate_size=128, max_position=256)


def test_digits_are_single_tokens(tokenizer):
    tokens = tokenizer.tokenize("year = 1987 and id = 20450")
    digit_tokens = [t for t in tokens if any(ch.isdigit() for ch in t)]
    assert "".join(digit_tokens) == "198720450"
    assert all(len(t) == 1 for t in digit_tokens)
    assert tokenizer.decode(tokenizer("year = 1987", add_special_tokens=False)["input_ids"]) == "year = 1987"


def test_a_value_reads_the_same_in_the_question_and_in_the_sql():
    # Values the tokenizer has seen as words ("Mexico") and never as SQL literals.
    tok = train_tiny_tokenizer(TEXTS + ["authors from Mexico and Hungry Kettle, blood type A-"] * 50, vocab_size=600)
    question = tok.tokenize("whose nationality is Mexico or Hungry Kettle and type A-?")
    sql = tok.tokenize("WHERE nationality = 'Mexico' OR name = 'Hungry Kettle' AND type = 'A-'")
    for value in (["Mexico"], tok.tokenize("Hungry Kettle")):
        n = len(value)
        assert any(question[i:i + n] == value for i in range(len(question))), (value, question)
        assert any(sql[i:i + n] == value for i in range(len(sql))), (value, sql)
    assert "ĠWHERE" in tok.tokenize("x WHERE y")  # all-caps keywords keep their leading space
    text = "SELECT a FROM t WHERE b = 'Hungry Kettle' AND c = 'A-'"
    assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text


def test_special_tokens_are_single_and_think_tags_survive_decoding(tokenizer):
    for token in SPECIAL_TOKENS + THINK_TOKENS:
        ids = tokenizer(f"a{token}b", add_special_tokens=False)["input_ids"]
        assert tokenizer.convert_tokens_to_ids(token) in ids
        assert len(tokenizer(token, add_special_tokens=False)["input_ids"]) == 1
    ids = tokenizer(f"<think>x</think> SELECT 1{IM_END}", add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids, skip_special_tokens=True) == "<think>x</think> SELECT 1"
    assert tokenizer.eos_token == IM_END and tokenizer.pad_token == "<|endoftext|>"


def test_chat_template_matches_qwen3_shape(tokenizer):
    messages = [{"role": "user", "content": "How many singers?"}]
    with_thinking = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert with_thinking == "<|im_start|>user\nHow many singers?<|im_end|>\n<|im_start|>assistant\n"
    no_thinking = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                                enable_thinking=False)
    assert no_thinking == with_thinking + "<think>\n\n</think>\n\n"
    assert tokenizer.apply_chat_template(messages, tokenize=False) == "<|im_start|>user\nHow many singers?<|im_end|>\n"


def test_tiny_model_shape(tokenizer, tiny):
    cfg = tiny.config
    assert cfg.model_type == "qwen3" and cfg.tie_word_embeddings and cfg.head_dim == 32
    assert tiny.get_input_embeddings().weight.data_ptr() == tiny.get_output_embeddings().weight.data_ptr()
    assert cfg.vocab_size == len(tokenizer) and next(tiny.parameters()).dtype == torch.float32
    assert set(tiny.generation_config.eos_token_id) == {tokenizer.eos_token_id, tokenizer.pad_token_id}
    with pytest.raises(ValueError, match="num_kv_heads"):
        build_tiny_model(tokenizer, hidden_size=64, num_heads=4, num_kv_heads=3)


def test_save_reload_round_trip(tokenizer, tiny, tmp_path):
    folder = save_tiny(tiny, tokenizer, tmp_path / "tiny")
    model2 = AutoModelForCausalLM.from_pretrained(folder)
    tok2 = AutoTokenizer.from_pretrained(folder)
    text = "<|im_start|>user\nyear = 1987<|im_end|>\n<|im_start|>assistant\n<think>"
    ids = tokenizer(text, return_tensors="pt", add_special_tokens=False)["input_ids"]
    assert tok2(text, return_tensors="pt", add_special_tokens=False)["input_ids"].tolist() == ids.tolist()
    with torch.no_grad():
        assert torch.equal(tiny(ids).logits, model2(ids).logits)
    messages = [{"role": "user", "content": "q 12"}]
    for thinking in (True, False):
        assert tok2.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, enable_thinking=thinking) \
            == tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, enable_thinking=thinking)
    assert tok2.chat_template == QWEN3_CHAT_TEMPLATE
    assert (tok2.eos_token, tok2.pad_token) == (tokenizer.eos_token, tokenizer.pad_token)


def test_load_policy_and_frozen_reference(tokenizer, tiny, tmp_path):
    folder = save_tiny(tiny, tokenizer, tmp_path / "tiny")
    policy, tok = load_policy(folder, dtype="float32", device="cpu")
    reference, _ = load_reference(str(folder), dtype="bfloat16", device="cpu")
    assert policy.training and all(p.requires_grad for p in policy.parameters())
    assert not reference.training and not any(p.requires_grad for p in reference.parameters())
    assert next(reference.parameters()).dtype == torch.bfloat16
    assert tok.padding_side == "left"
    assert load_policy(folder, dtype="float32", device="cpu", padding_side="right")[1].padding_side == "right"


def test_missing_local_folder_names_the_path(tmp_path):
    missing = tmp_path / "no_such_model"
    with pytest.raises(FileNotFoundError, match="no_such_model"):
        load_policy(missing, device="cpu")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="config.json"):
        load_policy(tmp_path / "empty", device="cpu")


def test_lora_leaves_only_adapters_trainable(tokenizer):
    model = build_tiny_model(tokenizer, hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=1,
                             intermediate_size=128, max_position=256)
    peft_model = apply_lora(model, LoraSpec(r=4, alpha=8, dropout=0.0))
    trainable = [n for n, p in peft_model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    wrapped = {n.split(".lora_")[0].rsplit(".", 1)[-1] for n in trainable}
    assert {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"} <= wrapped
    assert LoraSpec.from_config(ModelConfig(lora=False)) is None
    assert LoraSpec.from_config(ModelConfig(lora=True, lora_r=8)) == LoraSpec(8, 128, 0.05)


def test_build_tiny_from_config_uses_the_sizes():
    cfg = ModelConfig(tiny=TinyBaseConfig(vocab_size=500, hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1,
                                          intermediate_size=64, max_position=128))
    model, tok = build_tiny_from_config(cfg, TEXTS)
    c = model.config
    assert (c.hidden_size, c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads) == (32, 1, 2, 1)
    assert (c.intermediate_size, c.max_position_embeddings) == (64, 128)
    assert len(tok) <= 500
