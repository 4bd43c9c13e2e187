"""acesql_lib/models/engine_reuse.py without vLLM: which checkpoints one engine may serve (`model_fingerprint`) and
the rules of a `reused_engines()` block. That a kept vLLM engine serving a second checkpoint decodes it as a
fresh engine would is tests/test_vllm_parity.py's (`run_reuse`); notebooks 05 and 06 run through it in
tests/test_pipeline_rehearsal.py."""
from __future__ import annotations

import json

import pytest
import torch

from acesql_lib.models import engine_reuse
from acesql_lib.models.engine_reuse import kept, keep, model_fingerprint, release, reused_engines, serving_key, take
from acesql_lib.models.loading import build_tiny_model, load_policy, save_tiny, train_tiny_tokenizer

TEXTS = [f"SELECT name FROM t{i} WHERE id = {i}; how many rows in t{i}?" for i in range(40)]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    tokenizer = train_tiny_tokenizer(TEXTS, vocab_size=300)
    torch.manual_seed(0)
    model = build_tiny_model(tokenizer, hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1,
                             intermediate_size=64, max_position=128)
    return save_tiny(model, tokenizer, tmp_path_factory.mktemp("reuse") / "a")


def test_checkpoints_that_differ_only_in_weights_and_save_details_share_a_fingerprint(checkpoint, tmp_path):
    model, tokenizer = load_policy(checkpoint, dtype="float32", device="cpu")
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.5)  # other weights
    tokenizer(TEXTS[:3], padding=True, truncation=True, max_length=8)  # the fast tokenizer's call state
    other = save_tiny(model, tokenizer, tmp_path / "b")
    assert (other / "model.safetensors").read_bytes() != (checkpoint / "model.safetensors").read_bytes()
    assert model_fingerprint(other) == model_fingerprint(checkpoint)
    config = json.loads((other / "config.json").read_text())
    config.update(_name_or_path="/somewhere/else", transformers_version="0.0.1", dtype="bfloat16")
    (other / "config.json").write_text(json.dumps(config))
    assert model_fingerprint(other) == model_fingerprint(checkpoint)
    settings = {"dtype": "float32", "max_model_len": 512, "seed": 0}
    assert serving_key(other, settings) == serving_key(checkpoint, dict(reversed(settings.items())))
    assert serving_key(other, settings) != serving_key(checkpoint, {**settings, "max_model_len": 256})


@pytest.mark.parametrize("change", ["layers", "eos", "added_token", "chat_template", "tokenizer_file_missing"])
def test_a_checkpoint_an_engine_would_read_differently_has_another_fingerprint(checkpoint, tmp_path, change):
    model, tokenizer = load_policy(checkpoint, dtype="float32", device="cpu")
    other = save_tiny(model, tokenizer, tmp_path / "b")
    assert model_fingerprint(other) == model_fingerprint(checkpoint)
    if change == "layers":
        config = json.loads((other / "config.json").read_text())
        config["num_hidden_layers"] += 1
        (other / "config.json").write_text(json.dumps(config))
    elif change == "eos":  # vLLM adds the generation configuration's eos ids to a request's stop tokens
        gen = json.loads((other / "generation_config.json").read_text())
        gen["eos_token_id"] = [1, 2]
        (other / "generation_config.json").write_text(json.dumps(gen))
    elif change == "added_token":
        tokenizer.add_tokens(["<extra_token>"])
        save_tiny(model, tokenizer, other)
    elif change == "chat_template":
        (other / "chat_template.jinja").write_text("{{ messages[0]['content'] }}")
    else:
        (other / "tokenizer.json").unlink()
    assert model_fingerprint(other) != model_fingerprint(checkpoint), change


def test_a_hub_name_matches_only_itself(checkpoint):
    assert model_fingerprint("Qwen/Qwen3-8B") == model_fingerprint("Qwen/Qwen3-8B")
    assert len({model_fingerprint("Qwen/Qwen3-8B"), model_fingerprint("Qwen/Qwen3-4B"),
                model_fingerprint(checkpoint)}) == 3


def test_a_malformed_json_file_is_hashed_as_bytes(tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    first = model_fingerprint(tmp_path)
    (tmp_path / "config.json").write_text("{not json either")
    assert model_fingerprint(tmp_path) != first


class Stand:
    """What the block needs of an engine: `shutdown()`."""

    def __init__(self, name: str, log: list[str]):
        self.name, self.log = name, log

    def shutdown(self) -> None:
        self.log.append(self.name)


def test_an_engine_is_kept_only_inside_a_block_and_served_to_its_own_key():
    log: list[str] = []
    a, b = Stand("a", log), Stand("b", log)
    assert not keep(("k",), a) and kept() is None  # outside a block: the caller shuts it down
    with reused_engines():
        assert not keep(None, a)  # an engine without a key (not made by make_engine) is never kept
        assert keep(("k",), a) and keep(("k",), a) and kept() is a and log == []  # closed twice: kept once
        assert take(("k",)) is a and kept() is None  # served once
        assert keep(("k",), a)
        assert take(("other",)) is None and log == ["a"] and kept() is None  # another key: shut down first
        assert keep(("k",), b) and keep(("j",), a) and log == ["a", "b"] and kept() is a  # one engine at a time
    assert log == ["a", "b", "a"] and kept() is None  # the block's end shuts the kept one down


def test_nested_blocks_keep_until_the_outermost_ends_and_an_error_still_releases():
    log: list[str] = []
    a = Stand("a", log)
    with pytest.raises(RuntimeError, match="variant failed"):
        with reused_engines():
            with reused_engines():  # run_variant inside run_variants
                keep(("k",), a)
            assert kept() is a and log == []
            raise RuntimeError("variant failed")
    assert log == ["a"] and kept() is None and engine_reuse._depth == 0
    release()  # nothing kept: nothing happens
    assert log == ["a"]
