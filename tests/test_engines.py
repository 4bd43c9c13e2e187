"""HFEngine: greedy determinism, n samples, seeds, truncation, left padding; token counts; weight names."""
from __future__ import annotations

import pytest
import torch

from acesql_lib.config.model import EngineConfig
from acesql_lib.models.completions import Completion, count_tokens, stop_token_ids
from acesql_lib.models.engines import make_engine
from acesql_lib.models.hf_engine import HFEngine, HFOptions
from acesql_lib.models.vllm_engine import policy_weights
from acesql_lib.models.loading import IM_END, LoraSpec, apply_lora, build_tiny_model, train_tiny_tokenizer

ANSWERS = ["SELECT name FROM singer", "SELECT count(*) FROM concert", "SELECT age FROM singer WHERE year = 1987"]


def _chat(tokenizer, question: str) -> str:
    return tokenizer.apply_chat_template([{"role": "user", "content": question}], tokenize=False,
                                         add_generation_prompt=True)


@pytest.fixture(scope="module")
def trained():
    """A tiny model trained a little on chat turns ending in <|im_end|>, so it sometimes stops."""
    torch.manual_seed(0)
    dialogues = [(f"question {i} about singer {i % 7}", ANSWERS[i % 3]) for i in range(60)]
    tokenizer = train_tiny_tokenizer([q + " " + a for q, a in dialogues], vocab_size=400)
    model = build_tiny_model(tokenizer, hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=1,
                             intermediate_size=128, max_position=256)
    texts = [_chat(tokenizer, q) + a + IM_END for q, a in dialogues]
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    tokenizer.padding_side = "right"
    for step in range(25):
        batch = tokenizer(texts[(step * 16) % 60:][:16], return_tensors="pt", padding=True, add_special_tokens=False)
        labels = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
        model(**batch, labels=labels).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    tokenizer.padding_side = "left"
    return model, tokenizer


@pytest.fixture(scope="module")
def prompts(trained):
    _, tokenizer = trained
    return [_chat(tokenizer, q) for q in ["question 3 about singer 3", "how many",
                                          "question 10 about singer 3 and a much longer tail to pad the others"]]


def test_greedy_is_deterministic_and_n_copies_agree(trained, prompts):
    engine = HFEngine(*trained, HFOptions(batch_size=4))
    first = engine.generate(prompts, n=2, temperature=0.0, max_new_tokens=12)
    second = engine.generate(prompts, n=2, temperature=0.0, max_new_tokens=12)
    assert [len(g) for g in first] == [2, 2, 2]
    assert [[c.token_ids for c in g] for g in first] == [[c.token_ids for c in g] for g in second]
    assert all(g[0].token_ids == g[1].token_ids for g in first)
    assert all(isinstance(c, Completion) and c.n_tokens == len(c.token_ids) for g in first for c in g)


def test_left_padding_matches_single_prompt_generation(trained, prompts):
    engine = HFEngine(*trained)
    batched = engine.generate(prompts, temperature=0.0, max_new_tokens=16)
    single = [engine.generate([p], temperature=0.0, max_new_tokens=16)[0] for p in prompts]
    assert [g[0].token_ids for g in batched] == [g[0].token_ids for g in single]


def test_seeded_sampling_is_reproducible_and_leaves_global_rng(trained, prompts):
    engine = HFEngine(*trained, HFOptions(batch_size=5))
    state = torch.get_rng_state()
    a = engine.generate(prompts, n=4, temperature=1.5, max_new_tokens=10, seed=7)
    assert torch.equal(torch.get_rng_state(), state)
    b = engine.generate(prompts, n=4, temperature=1.5, max_new_tokens=10, seed=7)
    c = engine.generate(prompts, n=4, temperature=1.5, max_new_tokens=10, seed=8)
    ids = lambda out: [[x.token_ids for x in g] for g in out]  # noqa: E731
    assert ids(a) == ids(b)
    assert ids(a) != ids(c)
    assert len({tuple(x.token_ids) for g in a for x in g}) > 1  # samples differ from one another


def test_stop_token_ends_and_truncated_flags(trained, prompts):
    model, tokenizer = trained
    engine = HFEngine(model, tokenizer)
    stops = set(stop_token_ids(tokenizer))
    assert {tokenizer.convert_tokens_to_ids(IM_END), tokenizer.pad_token_id} <= stops
    long = engine.generate(prompts, n=3, temperature=1.0, max_new_tokens=40, seed=0)
    for c in (c for g in long for c in g):
        ended = c.token_ids[-1] in stops
        assert c.truncated == (not ended)
        assert ended or c.n_tokens == 40
        assert not any(t in stops for t in c.token_ids[:-1])  # nothing kept after the stop token
        assert IM_END not in c.text and "<|endoftext|>" not in c.text
    assert any(not c.truncated for g in long for c in g), "the trained model never stopped"
    short = engine.generate(prompts, temperature=0.0, max_new_tokens=2)
    assert all(c.n_tokens <= 2 and c.truncated == (c.token_ids[-1] not in stops) for g in short for c in g)
    assert any(c.truncated for g in short for c in g)


def test_generation_restores_training_mode(trained, prompts):
    model, tokenizer = trained
    model.train()
    HFEngine(model, tokenizer).generate(prompts[:1], temperature=0.0, max_new_tokens=2)
    assert model.training


def test_bad_arguments_are_rejected(trained, prompts):
    engine = HFEngine(*trained)
    with pytest.raises(TypeError):
        engine.generate(prompts[0])
    with pytest.raises(ValueError, match="n"):
        engine.generate(prompts, n=0)
    with pytest.raises(ValueError, match="top_p"):
        engine.generate(prompts, top_p=0.0)


def test_count_tokens_per_question_and_role():
    def c(n: int) -> Completion:
        return Completion("x", list(range(n)), n, False)

    rows = count_tokens({"retriever": [[c(3), c(5)], [c(1)]], "generator": [[c(10)], [c(2), c(2)]]})
    assert rows == [{"retriever": 8, "generator": 10, "total": 18}, {"retriever": 1, "generator": 4, "total": 5}]
    with pytest.raises(ValueError, match="different numbers"):
        count_tokens({"retriever": [[c(1)]], "generator": []})


def test_policy_weights_use_checkpoint_names_with_lora_merged(trained):
    model, tokenizer = trained
    base_names = set(model.state_dict())
    with policy_weights(model) as weights:
        plain = dict(weights)
    assert set(plain) == base_names

    fresh = build_tiny_model(tokenizer, hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=1,
                             intermediate_size=128, max_position=256)
    peft_model = apply_lora(fresh, LoraSpec(r=4, alpha=8, dropout=0.0))
    lora_b = next(p for n, p in peft_model.named_parameters() if "lora_B" in n and "q_proj" in n)
    with torch.no_grad():
        lora_b.normal_()  # a non-zero adapter, so merging changes q_proj
    q_name = "model.layers.0.self_attn.q_proj.weight"
    base_q = fresh.model.layers[0].self_attn.q_proj.base_layer.weight.detach().clone()
    with policy_weights(peft_model) as weights:
        merged = {n: t.clone() for n, t in weights}
    assert set(merged) == base_names
    assert not torch.allclose(merged[q_name], base_q)
    assert torch.allclose(fresh.model.layers[0].self_attn.q_proj.base_layer.weight, base_q, atol=1e-5)  # unmerged


def test_make_engine(trained):
    model, tokenizer = trained
    engine = make_engine(EngineConfig(kind="hf", hf_batch_size=3, hf_share_prefix=False, hf_drop_finished=False),
                         model, tokenizer)
    assert isinstance(engine, HFEngine) and engine.options.batch_size == 3
    assert not engine.options.share_prefix and not engine.options.drop_finished
    with pytest.raises(ValueError, match="model_path"):
        make_engine(EngineConfig(kind="vllm"), model, tokenizer)


# ---------------------------------------------------------------------------------------------
# The HF engine's speed levers (benchmarks/hf_generate_speed.py): same tokens, less time


def _ids(out):
    return [[c.token_ids for c in g] for g in out]


def test_grouped_kv_attention_gives_transformers_logits_and_is_switched_back(trained, prompts):
    from acesql_lib.models.gqa_attention import gqa_attention

    model, tokenizer = trained
    assert model.config.num_key_value_heads < model.config.num_attention_heads  # grouped heads to keep grouped
    batch = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)  # left padded
    assert (batch["attention_mask"] == 0).any()
    model.eval()
    with torch.no_grad():
        reference = model(**batch).logits
        with gqa_attention(model):
            assert model.config._attn_implementation != "sdpa"
            grouped = model(**batch).logits
    assert model.config._attn_implementation == "sdpa"
    real = batch["attention_mask"].bool()
    assert torch.allclose(grouped[real], reference[real], atol=1e-5)
    with pytest.raises(RuntimeError), gqa_attention(model):  # switched back on the way out of an error too
        raise RuntimeError("boom")
    assert model.config._attn_implementation == "sdpa"


@pytest.mark.parametrize("levers", [dict(grouped_kv=True), dict(share_prefix=True), dict(grouped_kv=True, share_prefix=True),
                                    dict(drop_finished=True), dict(drop_finished=True, share_prefix=True),
                                    {}])
def test_the_decoding_levers_keep_greedy_and_seeded_tokens(trained, prompts, levers):
    # n=2 and n=3 with batches of 4: a prompt's copies also fall on both sides of a batch's edge; `plain` is
    # transformers' `generate` itself, {} the engine's defaults
    plain = HFEngine(*trained, HFOptions(batch_size=4, grouped_kv=False, share_prefix=False, drop_finished=False))
    fast = HFEngine(*trained, HFOptions(batch_size=4, **({"grouped_kv": False, "share_prefix": False,
                                                          "drop_finished": False, **levers} if levers else {})))
    assert _ids(fast.generate(prompts, n=2, temperature=0.0, max_new_tokens=20)) == \
        _ids(plain.generate(prompts, n=2, temperature=0.0, max_new_tokens=20))
    # same batches, same seed: the same draws, so the same samples
    assert _ids(fast.generate(prompts, n=3, temperature=1.2, max_new_tokens=20, seed=3)) == \
        _ids(plain.generate(prompts, n=3, temperature=1.2, max_new_tokens=20, seed=3))


def test_batches_return_in_prompt_order(trained, prompts):
    model, tokenizer = trained
    mixed = [prompts[2], prompts[1], prompts[0], prompts[1] + " more words here"]
    engine = HFEngine(model, tokenizer, HFOptions(batch_size=2))
    assert engine._batches(len(mixed), n=2) == [[0, 1], [2, 3], [4, 5], [6, 7]]  # a prompt's copies share a batch
    one_by_one = [HFEngine(model, tokenizer).generate([p], temperature=0.0, max_new_tokens=16)[0] for p in mixed]
    assert _ids(engine.generate(mixed, temperature=0.0, max_new_tokens=16)) == _ids(one_by_one)
    a = engine.generate(mixed, n=2, temperature=1.0, max_new_tokens=12, seed=5)
    assert _ids(a) == _ids(engine.generate(mixed, n=2, temperature=1.0, max_new_tokens=12, seed=5))
    assert engine.generate([], n=2) == []


def test_grouped_kv_on_a_lora_model(trained, prompts):
    from acesql_lib.models.gqa_attention import gqa_attention

    _, tokenizer = trained
    torch.manual_seed(1)
    peft_model = apply_lora(build_tiny_model(tokenizer, hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=1,
                                             intermediate_size=128, max_position=256), LoraSpec(r=4, alpha=8, dropout=0.0))
    base = peft_model.get_base_model()
    with gqa_attention(peft_model):
        assert base.config._attn_implementation != "sdpa"
    assert base.config._attn_implementation == "sdpa"
    fast = HFEngine(peft_model, tokenizer, HFOptions(drop_finished=False)).generate(prompts, temperature=0.0,
                                                                                     max_new_tokens=8)
    plain = HFEngine(peft_model, tokenizer, HFOptions(drop_finished=False, grouped_kv=False)).generate(
        prompts, temperature=0.0, max_new_tokens=8)
    assert _ids(fast) == _ids(plain)
    shared, unshared = (HFEngine(peft_model, tokenizer, HFOptions(share_prefix=share)).generate(
        prompts, n=3, temperature=1.0, max_new_tokens=8, seed=2) for share in (True, False))
    assert _ids(shared) == _ids(unshared)


def test_a_shared_prefix_is_prefilled_once_per_distinct_prompt(trained, prompts):
    """The n samples of a prompt prefill it once: the policy's forward sees one row per distinct prompt of the
    batch, its length but the last token; the engine without the lever prefills every copy."""
    model, tokenizer = trained
    widths: list[tuple[int, int]] = []
    hook = model.register_forward_pre_hook(lambda m, a, kw: widths.append(tuple(kw["input_ids"].shape)),
                                           with_kwargs=True)
    try:
        for share in (True, False):
            widths.clear()
            HFEngine(model, tokenizer, HFOptions(batch_size=8, share_prefix=share)).generate(
                prompts[:2], n=4, temperature=1.0, max_new_tokens=3, seed=0)
            full = max(len(tokenizer(p, add_special_tokens=False)["input_ids"]) for p in prompts[:2])
            assert widths[0] == ((2, full - 1) if share else (8, full))
            assert widths[1] == (8, 1)  # then the last prompt token (shared) or the first new one
    finally:
        hook.remove()
    # two distinct prompts, one copy each, nothing in common: nothing to share
    assert HFEngine(model, tokenizer)._shared_prefix([[5, 6, 7, 8], [9, 10, 11, 12]], [0, 1], 1,
                                                     torch.device("cpu")) is None


def test_prefix_groups_share_long_openings_only():
    from acesql_lib.models.hf_prefix import prefix_groups

    schema_a, schema_b = [5] * 40, [5] * 12 + [6] * 30  # b shares 12 tokens with a: a chat header, not a schema
    prompts = [schema_a + [7, 8], schema_b + [9], schema_a + [10, 11, 12], [3, 4], schema_b + [13, 14],
               schema_a + [7]]
    groups = {tuple(sorted(members)): opening for members, opening in prefix_groups(prompts, 32)}
    assert groups == {(0, 2, 5): 40, (1, 4): 42, (3,): 1}
    assert prefix_groups(prompts, 50) == [([d], len(prompts[d]) - 1) for d in (3, 5, 0, 2, 1, 4)]  # in token order
    # an opening stops before a member's last token, however much more the others share
    short, long_ = [5] * 33 + [6], [5] * 33 + [6, 7, 8]
    assert [(sorted(m), k) for m, k in prefix_groups([long_, short], 32)] == [([0, 1], 33)]
    # a prompt that would halve the group's opening starts its own group
    assert len(prefix_groups([[1] * 100 + [2], [1] * 40 + [3] * 70], 32)) == 2


@pytest.mark.parametrize("drop_finished", [True, False])
def test_prompts_that_open_alike_share_one_prefill_of_the_opening(trained, drop_finished):
    """Questions on one schema: the policy's first forward sees the common opening once, the second each prompt's
    rest; greedy tokens and seeded samples are those of the engine that prefills every prompt whole."""
    model, tokenizer = trained
    schema = " ".join(f"question {i} about singer {i % 7}" for i in range(12))
    asks = [_chat(tokenizer, f"{schema} {q}") for q in ["how many", "question 3 about singer 3", "name", "age"]]
    encoded = tokenizer(asks, add_special_tokens=False)["input_ids"]
    opening = len(__import__("os").path.commonprefix(encoded))
    assert opening >= 32 and min(map(len, encoded)) - 1 > opening
    shapes: list[tuple[int, int]] = []
    hook = model.register_forward_pre_hook(lambda m, a, kw: shapes.append(tuple(kw["input_ids"].shape)),
                                           with_kwargs=True)
    try:
        shared = HFEngine(model, tokenizer, HFOptions(batch_size=64, drop_finished=drop_finished))
        greedy = shared.generate(asks, temperature=0.0, max_new_tokens=12)
        assert shapes[:2] == [(1, opening), (4, max(map(len, encoded)) - 1 - opening)]
        sampled = shared.generate(asks, n=3, temperature=1.0, max_new_tokens=12, seed=4)
    finally:
        hook.remove()
    for whole in (HFEngine(model, tokenizer, HFOptions(batch_size=64, share_prefix=False, drop_finished=False)),
                  HFEngine(model, tokenizer, HFOptions(batch_size=64, shared_opening_min=0, drop_finished=drop_finished))):
        assert _ids(greedy) == _ids(whole.generate(asks, temperature=0.0, max_new_tokens=12))
        assert _ids(sampled) == _ids(whole.generate(asks, n=3, temperature=1.0, max_new_tokens=12, seed=4))


def test_openings_are_shared_only_where_that_is_less_work(trained):
    """A long prompt that shares nothing beside three that share a short opening but have long rests: the second
    prefill would attend over the long prompt's width and the longest rest, more work than one prefill of each
    prompt whole, so each is prefilled whole."""
    from acesql_lib.models.hf_prefix import prefill_work, prefix_groups, token_work

    model, tokenizer = trained
    opening = [5] * 64
    encoded = [[3] * 300, opening + [6], opening + [8] * 250, opening + [9] * 200]
    groups = prefix_groups(encoded, 32)
    assert sorted(sorted(m) for m, _ in groups) == [[0], [1, 2, 3]]
    alone = [([d], len(p) - 1) for d, p in enumerate(encoded)]
    assert prefill_work(token_work(model), groups, encoded) > prefill_work(token_work(model), alone, encoded)
    shapes: list[tuple[int, int]] = []
    hook = model.register_forward_pre_hook(lambda m, a, kw: shapes.append(tuple(kw["input_ids"].shape)),
                                           with_kwargs=True)
    try:
        HFEngine(model, tokenizer)._shared_prefix(encoded, list(range(8)), 2, torch.device("cpu"))
    finally:
        hook.remove()
    assert shapes == [(4, 313)]  # the four distinct prompts, each whole but its last token, for their two copies


def test_exponential_noise_is_torchs_draw():
    """The sampler's noise: torch's exponential draws, value for value, and the generator left where torch's
    leaves it."""
    from acesql_lib.models.hf_engine import exponential_noise

    ours, torchs = torch.Generator().manual_seed(11), torch.Generator().manual_seed(11)
    for shape in [(64, 1024)] * 40 + [(3, 7), (1, 1)]:
        state = torch.random.get_rng_state()
        torch.random.set_rng_state(ours.get_state())
        noise = exponential_noise(shape, torch.float32, torch.device("cpu"))
        ours.set_state(torch.random.get_rng_state())
        torch.random.set_rng_state(state)
        assert torch.equal(noise, torch.empty(shape).exponential_(1, generator=torchs))
    assert torch.equal(ours.get_state(), torchs.get_state())
    assert exponential_noise((2, 3), torch.float64, torch.device("cpu")).dtype == torch.float64


def test_engine_settings_are_checked():
    from acesql_lib.config.checks import ConfigError

    with pytest.raises(ConfigError, match="engine.kind"):
        EngineConfig(kind="paged")
    with pytest.raises(ConfigError, match="engine.hf_batch_size"):
        EngineConfig(hf_batch_size=0)
    with pytest.raises(ValueError, match="batch sizes"):
        HFEngine(torch.nn.Linear(1, 1), None, HFOptions(batch_size=0))


def test_greedy_batches_have_their_own_size_and_keep_the_tokens(trained, prompts, monkeypatch):
    """`greedy_batch_size` sizes the greedy calls only: the greedy tokens are the same in one call or in many,
    and sampling keeps `batch_size`'s batches (its seeded draws run on from batch to batch)."""
    model, tokenizer = trained
    many = [prompts[i % 3] + " " * (i // 3) for i in range(7)]
    calls: list[int] = []
    decode = HFEngine._decode
    monkeypatch.setattr(HFEngine, "_decode",
                        lambda self, ids, *a, **kw: calls.append(ids.shape[0]) or decode(self, ids, *a, **kw))
    one = HFEngine(model, tokenizer, HFOptions(batch_size=2, greedy_batch_size=16))
    split = HFEngine(model, tokenizer, HFOptions(batch_size=2, greedy_batch_size=3))
    assert _ids(one.generate(many, temperature=0.0, max_new_tokens=16)) == \
        _ids(split.generate(many, temperature=0.0, max_new_tokens=16))
    assert calls == [7, 3, 3, 1]
    calls.clear()
    sampled = one.generate(many[:3], n=2, temperature=1.0, max_new_tokens=8, seed=1)
    assert calls == [2, 2, 2]  # batch_size rows per call when sampling
    assert _ids(sampled) == _ids(HFEngine(model, tokenizer, HFOptions(batch_size=2)).generate(
        many[:3], n=2, temperature=1.0, max_new_tokens=8, seed=1))


def _stopping_prompts(tokenizer) -> list[str]:
    """Prompts whose greedy answers end at different steps, some not within 24 tokens."""
    return [_chat(tokenizer, q) for q in [f"question {i} about singer {i % 7}" for i in range(0, 60, 7)]
            + ["how many", "question 10 about singer 3 and a much longer tail to pad the others"]]


def test_dropping_ended_rows_keeps_the_greedy_tokens(trained):
    """The kit's greedy loop (`drop_finished`) returns what `generate` returns, token for token, for rows
    that end early, late and never (truncated), with n copies, on a LoRA model too; and ended rows do leave
    the batch: the policy's forward sees fewer rows than the batch before the longest answer ends."""
    model, tokenizer = trained
    ask = _stopping_prompts(tokenizer)
    ours, theirs = (HFEngine(model, tokenizer, HFOptions(drop_finished=drop)).generate(
        ask, n=2, temperature=0.0, max_new_tokens=24) for drop in (True, False))
    assert _ids(ours) == _ids(theirs)
    assert [[(c.text, c.truncated) for c in g] for g in ours] == [[(c.text, c.truncated) for c in g] for g in theirs]
    lengths = sorted({c.n_tokens for g in ours for c in g})
    assert len(lengths) >= 3 and any(c.truncated for g in ours for c in g), lengths  # ends spread, some run on
    assert _ids(HFEngine(model, tokenizer, HFOptions(drop_finished=False)).generate(
        ask, temperature=0.0, max_new_tokens=24)) == [g[:1] for g in _ids(ours)]

    rows: list[int] = []
    hook = model.register_forward_pre_hook(lambda m, a, kw: rows.append(kw["input_ids"].shape[0]), with_kwargs=True)
    try:
        HFEngine(model, tokenizer).generate(ask, temperature=0.0, max_new_tokens=24)
    finally:
        hook.remove()
    assert rows[0] == len(ask) and len(rows) == max(lengths)  # one forward per step, until the longest ends
    assert rows == sorted(rows, reverse=True) and rows[-1] < len(ask) / 2 + 1  # half the rows gone at least once

    torch.manual_seed(3)
    peft_model = apply_lora(build_tiny_model(tokenizer, hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=1,
                                             intermediate_size=128, max_position=256), LoraSpec(r=4, alpha=8, dropout=0.0))
    assert _ids(HFEngine(peft_model, tokenizer).generate(ask, temperature=0.0, max_new_tokens=10)) == \
        _ids(HFEngine(peft_model, tokenizer, HFOptions(drop_finished=False)).generate(
            ask, temperature=0.0, max_new_tokens=10))


def test_dropping_ended_rows_keeps_the_sampled_tokens(trained):
    """Sampled decoding in the kit's loop draws what `generate` draws: the same samples for rows that end early,
    late and never, with temperature and top-p, with and without the shared prefill, over several batches of one
    seeded call; and an unseeded call leaves the caller's generator where `generate` leaves it. Ended rows do leave
    the batch meanwhile."""
    model, tokenizer = trained
    ask = _stopping_prompts(tokenizer)
    for temperature, top_p, share in ((0.7, 0.9, True), (1.3, 1.0, False), (1.0, 0.5, True)):
        ours, theirs = (HFEngine(model, tokenizer, HFOptions(batch_size=12, drop_finished=drop, share_prefix=share))
                        .generate(ask, n=4, temperature=temperature, top_p=top_p, max_new_tokens=24, seed=11) for drop in (True, False))
        assert [[(c.token_ids, c.text, c.truncated) for c in g] for g in ours] == \
            [[(c.token_ids, c.text, c.truncated) for c in g] for g in theirs], (temperature, top_p, share)
        lengths = {c.n_tokens for g in ours for c in g}
        assert len(lengths) >= 3 and any(c.truncated for g in ours for c in g), lengths
        assert len({tuple(c.token_ids) for g in ours for c in g}) > len(ask)  # the samples of a prompt differ

    after = []
    for drop in (True, False):
        torch.manual_seed(5)
        samples = HFEngine(model, tokenizer, HFOptions(drop_finished=drop)).generate(ask[:4], n=3, temperature=1.0,
                                                                          max_new_tokens=12)
        after.append((_ids(samples), torch.rand(4).tolist()))
    assert after[0] == after[1]

    rows: list[int] = []
    hook = model.register_forward_pre_hook(lambda m, a, kw: rows.append(kw["input_ids"].shape[0]), with_kwargs=True)
    try:
        HFEngine(model, tokenizer, HFOptions(batch_size=64, share_prefix=False)).generate(ask, n=2, temperature=1.0,
                                                                               max_new_tokens=24, seed=0)
    finally:
        hook.remove()
    assert rows[0] == 2 * len(ask) and rows == sorted(rows, reverse=True) and rows[-1] < len(ask) + 1


def test_sampling_from_non_finite_logits_fails_as_generate_does(trained, prompts):
    """A policy whose logits are not finite stops the sampled call with an error, in the kit's loop as in
    `generate` (torch.multinomial's check), instead of drawing arbitrary tokens."""
    model, tokenizer = trained
    broken = type(model)(model.config)
    broken.load_state_dict(model.state_dict())
    with torch.no_grad():
        broken.lm_head.weight[0, 0] = float("nan")
    for drop in (True, False):
        with pytest.raises(RuntimeError, match="inf.*nan"):
            HFEngine(broken, tokenizer, HFOptions(drop_finished=drop)).generate(prompts, n=2, temperature=1.0,
                                                                                max_new_tokens=4, seed=0)


def test_syncing_a_lora_policy_adds_the_adapters_into_new_tensors_and_never_moves_the_frozen_base(trained):
    """50 syncs of a bf16 base with non-zero adapters: every weight handed over is base + scaling * B @ A summed in
    fp32 and rounded once, and the frozen base stays bit for bit as loaded (merging into bf16 and unmerging
    again would round twice per sync)."""
    _, tokenizer = trained
    fresh = build_tiny_model(tokenizer, hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=1,
                             intermediate_size=128, max_position=256).to(torch.bfloat16)
    peft_model = apply_lora(fresh, LoraSpec(r=4, alpha=8, dropout=0.0))
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.3)
    frozen = {n: p.detach().clone() for n, p in peft_model.named_parameters() if "lora_" not in n}
    q = peft_model.base_model.model.model.layers[0].self_attn.q_proj
    expected_q = (q.base_layer.weight.float() + q.scaling["default"] * q.lora_B["default"].weight.float()
                  @ q.lora_A["default"].weight.float()).to(torch.bfloat16)
    for _ in range(50):
        with policy_weights(peft_model) as weights:
            handed = {n: t.clone() for n, t in weights}
    assert all(torch.equal(frozen[n], p) for n, p in peft_model.named_parameters() if "lora_" not in n)
    assert torch.equal(handed["model.layers.0.self_attn.q_proj.weight"], expected_q)
    assert not torch.equal(handed["model.layers.0.self_attn.q_proj.weight"], q.base_layer.weight)
    plain = build_tiny_model(tokenizer, hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=1,
                             intermediate_size=128, max_position=256)
    assert set(handed) == set(plain.state_dict())  # the checkpoint names, no adapter tensors


def test_vllm_sleep_mode_on_a_cpu_is_refused_before_the_engine_starts():
    """vLLM's sleep mode needs CUDA (vLLM raises "Sleep mode is not supported on current platform" after
    loading); the kit says so, naming the setting, before anything loads."""
    import torch

    from acesql_lib.models.vllm_engine import VLLMEngine, VLLMSettings

    assert not torch.cuda.is_available()
    with pytest.raises(ValueError, match="engine.sleep_during_update"):
        VLLMEngine("no-model-is-read", VLLMSettings(sleep_during_update=True))
