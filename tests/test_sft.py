"""SFT on chat prompt/completion pairs: the training text equals the inference text, the loss
covers only the completion, every trainable parameter moves, LoRA moves only adapters, and a seed
fixes the result."""
from __future__ import annotations

import json
import os
from dataclasses import replace

import pytest
import torch

from acesql_lib.models.loading import IM_END, LoraSpec, train_tiny_tokenizer
from acesql_lib.train.sft import LOG_NAME, SFTRun, _train, check_samples, train_sft
from helpers_sft import CFG, SAMPLES, TEXTS, tiny_model


@pytest.fixture(scope="module")
def tokenizer():
    return train_tiny_tokenizer(TEXTS, vocab_size=300)


def test_training_sequence_is_generation_prompt_plus_completion_and_only_completion_is_trained(tokenizer, tmp_path):
    trainer, _ = _train(tiny_model(tokenizer), tokenizer, SAMPLES[:4], CFG, tmp_path, SFTRun(max_steps=1))
    im_end = tokenizer.convert_tokens_to_ids(IM_END)
    for sample, row in zip(SAMPLES[:4], trainer.train_dataset):
        prompt_ids = tokenizer.apply_chat_template(sample["prompt"], add_generation_prompt=True, tokenize=True,
                                                   return_dict=True)["input_ids"]
        completion_ids = tokenizer(sample["completion"][0]["content"], add_special_tokens=False)["input_ids"]
        ids, labels = row["input_ids"], row["labels"]
        # What the engine is fed at inference, then exactly the completion and the stop token.
        assert ids[: len(prompt_ids)] == prompt_ids
        assert ids[len(prompt_ids): len(prompt_ids) + len(completion_ids) + 1] == completion_ids + [im_end]
        # The loss mask: nothing of the prompt, all of the completion.
        assert all(label == -100 for label in labels[: len(prompt_ids)])
        assert labels[len(prompt_ids):] == ids[len(prompt_ids):]


def test_every_parameter_changes_and_loss_is_logged(tokenizer, tmp_path):
    model = tiny_model(tokenizer)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    result = train_sft(model, tokenizer, SAMPLES, CFG, tmp_path, SFTRun(max_steps=3, seed=0))
    assert result.steps == 3 and result.n_samples == len(SAMPLES)
    for name, param in model.named_parameters():
        assert not torch.equal(param, before[name]), f"{name} did not change"
    records = [json.loads(line) for line in (tmp_path / LOG_NAME).read_text().splitlines()]
    losses = [r["loss"] for r in records if "loss" in r]
    assert len(losses) == 3 and all(loss > 0 for loss in losses)


def test_lora_changes_only_adapters(tokenizer, tmp_path):
    model = tiny_model(tokenizer)
    base_before = {n: p.detach().clone() for n, p in model.named_parameters()}
    result = train_sft(model, tokenizer, SAMPLES, replace(CFG, learning_rate=5e-2), tmp_path,
                       SFTRun(max_steps=2, lora=LoraSpec(r=4, alpha=8, dropout=0.0)))
    trained = result.model
    lora_params = {n: p for n, p in trained.named_parameters() if "lora_" in n}
    assert lora_params and all(p.requires_grad for p in lora_params.values())
    # lora_B starts at zero: after training it is not, so the adapters learned something.
    assert any(p.abs().sum() > 0 for n, p in lora_params.items() if "lora_B" in n)
    for name, param in trained.named_parameters():
        if "lora_" in name:
            continue
        base_name = name.replace("base_model.model.", "").replace(".base_layer", "")
        assert torch.equal(param, base_before[base_name]), f"{base_name} changed under LoRA"


def test_same_seed_same_parameters(tokenizer, tmp_path):
    finals = []
    for run in range(2):
        model = tiny_model(tokenizer, seed=1)
        train_sft(model, tokenizer, SAMPLES, CFG, tmp_path / str(run), SFTRun(max_steps=2, seed=3))
        finals.append({n: p.detach().clone() for n, p in model.named_parameters()})
    other = tiny_model(tokenizer, seed=1)
    train_sft(other, tokenizer, SAMPLES, CFG, tmp_path / "other", SFTRun(max_steps=2, seed=4))
    assert all(torch.equal(finals[0][n], finals[1][n]) for n in finals[0])
    assert any(not torch.equal(finals[0][n], p) for n, p in other.named_parameters())


def test_malformed_samples_are_reported_and_skipped(capsys):
    bad = [{"prompt": "not a list", "completion": SAMPLES[0]["completion"]},
           {"prompt": SAMPLES[0]["prompt"], "completion": [{"role": "user", "content": "x"}]}]
    kept = check_samples(SAMPLES[:2] + bad)
    assert len(kept) == 2
    out = capsys.readouterr().out
    assert "skipped 2" in out and "sample 2" in out and "'prompt'" in out
    with pytest.raises(ValueError, match="no usable SFT samples"):
        check_samples(bad)


# ---------------------------------------------------------------------------------------------
# The tiny base model's recipe (the build itself is the slow test below)


def test_tiny_gold_samples_cover_both_roles(tmp_path):
    import sqlite3

    from acesql_lib.config.profiles import load_config
    from acesql_lib.data.datasets import Example
    from acesql_lib.data.schema import Schema
    from acesql_lib.pipeline.tinybase import base_settings, gold_samples, settings_hash, tiny_think
    from acesql_lib.data.tinyworld import TinyWorld

    db = tmp_path / "club.sqlite"
    conn = sqlite3.connect(db)
    conn.executescript("CREATE TABLE member (id INTEGER PRIMARY KEY, name TEXT, age INTEGER);"
                       "CREATE TABLE fee (id INTEGER PRIMARY KEY, member_id INTEGER REFERENCES member(id), amount REAL);"
                       "INSERT INTO member VALUES (1, 'Ana', 31); INSERT INTO fee VALUES (1, 1, 9.5);")
    conn.close()
    schema = Schema.from_sqlite(db)
    ok = Example("0", "club", "Fees of members older than 30?", "", "SELECT sum(amount) FROM fee JOIN member ON "
                 "fee.member_id = member.id WHERE member.age > 30", "Moderate", "", "synsql", str(db))
    broken = Example("1", "club", "?", "", "SELECT nickname FROM member", "Simple", "", "synsql", str(db))
    samples, skipped = gold_samples([ok, broken], {"club": schema})
    assert skipped == 1 and len(samples) == 2
    retriever, generator = samples
    assert schema.to_ddl() in retriever["prompt"][0]["content"]
    assert retriever["completion"][0]["content"] == (
        "<think>\nColumns of fee, member.\n</think>\n\n```\n[fee.amount, fee.member_id, member.age, member.id]\n```")
    assert "name TEXT" not in generator["prompt"][0]["content"]  # pruned to the gold column set
    assert generator["completion"][0]["content"] == f"<think>\nQuery over fee, member.\n</think>\n\n```sql\n{ok.sql}\n```"
    assert tiny_think(["b.x", "a.y", "a.z"], "generator") == "Query over a, b."
    with pytest.raises(ValueError, match="role"):
        tiny_think(["a.x"], "judge")
    # Reuse is keyed on every setting that shapes the model: the step count changes the key.
    world = TinyWorld(tmp_path / "no_world")
    a, b = load_config("tiny"), load_config("tiny", {"model.tiny.steps": 7})
    assert settings_hash(base_settings(a, world)) == settings_hash(base_settings(load_config("tiny"), world))
    assert settings_hash(base_settings(a, world)) != settings_hash(base_settings(b, world))
    # ...while a stage-1 SFT setting that the base recipe does not use leaves it alone
    c = load_config("tiny", {"sft.num_epochs": 5, "sft.logging_steps": 3, "distill.temperature": 0.2})
    assert settings_hash(base_settings(a, world)) == settings_hash(base_settings(c, world))
    # the base build's speed settings are its own: the paper profile's stage-1 GPU settings (one padded
    # pass, full LM head) do not reach it, the model.tiny_base_* ones do
    from acesql_lib.pipeline.tinybase import base_sft_config

    paper = load_config("paper")
    assert (paper.sft.length_split, paper.sft.completion_head) == (1, False)
    assert (base_sft_config(paper).length_split, base_sft_config(paper).completion_head) == (4, True)
    slow = load_config("paper", {"model.tiny.length_split": 1, "model.tiny.completion_head": False})
    assert (base_sft_config(slow).length_split, base_sft_config(slow).completion_head) == (1, False)


def test_think_extra_varies_think_length_and_nothing_else(tmp_path):
    """`model.tiny.think_extra`: each target's think sentence goes on with 0..k filler sentences,
    drawn per sample, so the outputs the base (and the SFT traces distilled from it) write vary in
    length; prompts, answers and the value swaps are those of k = 0, and k is in the reuse key."""
    from acesql_lib.config.checks import ConfigError
    from acesql_lib.config.profiles import load_config
    from acesql_lib.data.datasets import load_synsql, schemas_for
    from acesql_lib.pipeline.tinybase import THINK_FILLER, base_settings, gold_samples, tiny_think
    from acesql_lib.data.tinyworld import TinyWorld, build_tinyworld

    assert tiny_think(["a.x"], "retriever", 2) == "Columns of a. " + " ".join(THINK_FILLER[:2])
    with pytest.raises(ValueError, match="filler"):
        tiny_think(["a.x"], "retriever", len(THINK_FILLER) + 1)
    world = build_tinyworld(tmp_path / "world", n_train=80, n_dev=10)
    pool = list(load_synsql(world.train_json, world.train_db_root))
    schemas = schemas_for(pool, 0)
    plain, _ = gold_samples(pool, schemas, value_swap=0.75, seed=3)
    varied, _ = gold_samples(pool, schemas, value_swap=0.75, seed=3, think_extra=3)
    assert [s["prompt"] for s in varied] == [s["prompt"] for s in plain]  # same questions, same swapped values

    def split(sample):
        think, answer = sample["completion"][0]["content"].split("</think>")
        return think, answer
    assert [split(s)[1] for s in varied] == [split(s)[1] for s in plain]
    extras = [sum(f in split(s)[0] for f in THINK_FILLER) for s in varied]
    assert set(extras) == {0, 1, 2, 3}  # every count 0..3 occurs, none above
    assert all(split(v)[0].startswith(split(p)[0].rstrip("\n")) for v, p in zip(varied, plain))
    assert gold_samples(pool, schemas, value_swap=0.75, seed=3, think_extra=3) == (varied, 0)  # seeded
    a, b = (load_config("tiny", {"model.tiny.think_extra": k}) for k in (0, 3))
    assert base_settings(a, TinyWorld(tmp_path / "w")) != base_settings(b, TinyWorld(tmp_path / "w"))
    with pytest.raises(ConfigError, match=r"model\.tiny\.think_extra: 7 is out of bounds \(must be >= 0 and <= 6\)"):
        load_config("tiny", {"model.tiny.think_extra": 7})


def test_value_swap_makes_up_the_same_value_in_question_evidence_and_sql():
    import random
    import re

    from acesql_lib.pipeline.tinybase import swap_values

    question = "How many members whose city is Oslo and whose team is Blue Owls, with a high age?"
    evidence = "Oslo refers to city = 'Oslo'; high age refers to age > 30"
    sql = ("SELECT COUNT(*) FROM members WHERE members.city = 'Oslo' AND members.team = 'Blue Owls' "
           "AND members.age > 30 AND members.note = 'Osloish' AND members.id > 2024")
    q, e, s = swap_values(question, evidence, sql, random.Random(1))
    assert "Oslo" not in q + e and "Blue Owls" not in q and "'Oslo'" not in s and "'Blue Owls'" not in s
    fakes = re.findall(r"'([^']*)'", s)[:2]
    assert all(f in q for f in fakes) and len(set(fakes)) == 2 and f"city = '{fakes[0]}'" in e
    # the compared number is made up too, with as many digits, the same in evidence and SQL
    new_age = re.search(r"age > (\d+)", s).group(1)
    assert new_age != "30" and len(new_age) == 2 and e.endswith(f"age > {new_age}")
    # literals the text does not spell out stay as they are
    assert "'Osloish'" in s and "id > 2024" in s
    assert swap_values("How many members?", "", "SELECT COUNT(*) FROM members", random.Random(1)) is None
    assert swap_values(question, evidence, sql, random.Random(1)) == (q, e, s)  # seeded


def test_value_swap_draws_the_same_stand_ins_whatever_the_process_hash_seed():
    """Two values of one length: their order once followed Python's per-process string hashing, so two
    builds of the same settings made other samples (the base builds that did not repeat bit for bit)."""
    import subprocess
    import sys

    code = ("import random; from acesql_lib.pipeline.tinybase import swap_values; print(swap_values("
            "'Teams Oslo and Bergen and Narvik and Tromso', '', \"SELECT * FROM t WHERE a = 'Oslo' OR a = 'Bergen' "
            "OR a = 'Narvik' OR a = 'Tromso' OR n > 12 OR n < 34\", random.Random(3)))")
    outs = {subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONHASHSEED": str(seed)},
                           capture_output=True, text=True, check=True).stdout for seed in (1, 2)}
    assert len(outs) == 1, outs


def test_base_tokenizer_spells_held_out_text_with_pieces_seen_in_training(tmp_path):
    from acesql_lib.config.profiles import load_config
    from acesql_lib.data.datasets import load_synsql, schemas_for
    from acesql_lib.pipeline.tinybase import _sample_text, base_tokenizer, gold_samples
    from acesql_lib.data.tinyworld import build_tinyworld

    world = build_tinyworld(tmp_path / "world", n_train=300, n_dev=60)
    pool = list(load_synsql(world.train_json, world.train_db_root))
    samples, _ = gold_samples(pool, schemas_for(pool, 0))
    dev = json.loads(world.dev_json.read_text())
    held_out = [r["evidence"] + "\n" + r["question"] + "\n" + r["SQL"] for r in dev]

    def unseen_share(vocab_size: int) -> float:
        """Share of held-out tokens that never occur in the training text (their embeddings stay random)."""
        tok = base_tokenizer(samples, vocab_size)
        seen = {i for s in samples for i in tok(_sample_text(s), add_special_tokens=False).input_ids}
        ids = [i for text in held_out for i in tok(text, add_special_tokens=False).input_ids]
        return sum(i not in seen for i in ids) / len(ids)

    ours = unseen_share(load_config("tiny").model.tiny.vocab_size)
    # a vocabulary too large for the training text is full of intermediate merges that never occur
    # whole in it, and held-out words are cut into exactly those
    assert ours < 0.02 and unseen_share(2048) > 5 * ours


def test_length_split_and_completion_head_keep_the_loss_and_gradient_of_the_padded_batch(tokenizer, tmp_path):
    """One batch of mixed lengths: the old single padded pass with TRL's fused head, against the
    batch cut into length-sorted passes and the head applied to completion positions only."""
    from acesql_lib.train.sft import SFTRun, check_samples, make_trainer, padding_share

    mixed = [{"prompt": [{"role": "user", "content": s["prompt"][0]["content"] + " Tables used: singer." * (3 * i)}],
              "completion": s["completion"]} for i, s in enumerate(SAMPLES)]
    model = tiny_model(tokenizer)
    trainer = make_trainer(model, tokenizer, check_samples(mixed), replace(CFG, per_device_batch_size=8), tmp_path,
                           SFTRun(max_steps=1))
    batch = next(iter(trainer.get_train_dataloader()))
    n_items = batch["labels"][..., 1:].ne(-100).sum()

    def loss_and_grad(split: int, head: bool):
        trainer.length_split, trainer.completion_head = split, head
        loss = float(trainer.training_step(model, dict(batch), n_items))
        grad = torch.cat([p.grad.flatten() for p in model.parameters()])
        model.zero_grad()
        return loss, grad

    ref_loss, ref_grad = loss_and_grad(1, False)
    assert ref_grad.abs().max() > 0
    for split, head in ((1, True), (3, False), (3, True), (8, True)):
        loss, grad = loss_and_grad(split, head)
        assert loss == pytest.approx(ref_loss, abs=1e-5), (split, head)
        assert (grad - ref_grad).abs().max() < 1e-5, (split, head)
    whole, cut = padding_share([batch], 1), padding_share([batch], 3)
    assert whole["real_tokens"] == cut["real_tokens"] and cut["pad_share"] < whole["pad_share"] / 2


def test_compiled_base_build_trains_the_same_model_with_plain_weight_names(tmp_path):
    """`model.tiny.compile` compiles the decoder for the build only: the same seed's build with and
    without it ends at the same loss and weights (up to float summation order), and the saved files
    are those of the eager model (no `_orig_mod` names), so every later stage loads them as usual."""
    from safetensors.torch import load_file

    from acesql_lib.config.context import RunContext
    from acesql_lib.pipeline.shipped_base import MANIFEST
    from acesql_lib.pipeline.tinybase import build_tiny_base
    from acesql_lib.data.tinyworld import build_tinyworld

    def build(compiled: bool):
        ctx = RunContext.create("tiny", {"run_dir": str(tmp_path / f"run{int(compiled)}"),
                                         "data.tinyworld_dir": str(tmp_path / "world"), "data.tiny_n_train": 40,
                                         "data.tiny_n_dev": 10, "model.tiny.steps": 6,
                                         "model.tiny.batch_size": 8, "model.tiny.compile": compiled})
        world = build_tinyworld(ctx.paths.tinyworld, ctx.cfg.data.seed, 40, 10)
        path = build_tiny_base(ctx.cfg, ctx.paths, world, progress=False)
        return json.loads((path / MANIFEST).read_text()), load_file(str(path / "model.safetensors"))

    eager_manifest, eager = build(False)
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    compiled_manifest, compiled = build(True)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] > 0  # the build really ran compiled
    assert compiled_manifest["config_hash"] != eager_manifest["config_hash"]  # the setting is in the reuse key
    assert compiled_manifest["steps"] == eager_manifest["steps"] == 6
    assert abs(compiled_manifest["train_loss"] - eager_manifest["train_loss"]) < 1e-4
    assert set(compiled) == set(eager) and not any("_orig_mod" in k for k in compiled)
    for name, tensor in eager.items():
        assert torch.allclose(compiled[name], tensor, atol=1e-4), name


def test_base_holdout_leaves_out_exactly_stage_one_questions(tmp_path):
    """`model.tiny.holdout_stage1`: the base trains on the gold of every training question except
    the ones filtering hands to stage 1 (so distillation and RL meet questions new to the base, as the
    paper's do); the hold-out and the filtering settings are in the base model's reuse key."""
    from acesql_lib.config.context import RunContext
    from acesql_lib.data.datasets import schemas_for, training_pool
    from acesql_lib.data.filtering import filter_pool
    from acesql_lib.runtime.reuse_keys import code_hash
    from acesql_lib.pipeline.tinybase import BUILD_ENTRY, BUILD_LEAVES_OUT, base_settings, base_training_data, build_modules
    from acesql_lib.data.tinyworld import build_profile_world

    def ctx(**over):
        return RunContext.create("tiny", {"run_dir": str(tmp_path / "run"), "data.tinyworld_dir": str(tmp_path / "w"),
                                          "data.tiny_n_train": 120, "data.tiny_n_dev": 10, "data.tiny_n_dev_id": 0,
                                          "filtering.target_size": 30, "filtering.per_db_cap": 40,
                                          "model.tiny.value_swap": 0.0, **over})  # questions read verbatim

    on, off = ctx(**{"model.tiny.holdout_stage1": True}), ctx()
    world = build_profile_world(on.cfg.data, on.paths.tinyworld)
    pool = training_pool(on.cfg, on.paths, progress=False)  # notebook 01's own steps
    schemas = schemas_for(pool.examples, on.cfg.data.n_example_values, on.cfg.data.example_max_chars)
    kept = filter_pool(pool.examples, on.cfg.filtering, schemas, seed=on.cfg.seed).kept
    assert len(kept) == 30
    held_questions = {e.question for e in kept}
    samples_on, skipped_on, _ = base_training_data(on.cfg, world, on.paths)
    samples_off, skipped_off, _ = base_training_data(off.cfg, world, off.paths)
    assert len(samples_off) == 2 * (120 - skipped_off) and len(samples_on) == 2 * (90 - skipped_on)
    text = lambda s: s["prompt"][-1]["content"]  # noqa: E731
    assert not any(q in text(s) for s in samples_on for q in held_questions)
    assert sum(any(q in text(s) for q in held_questions) for s in samples_off) >= 2 * 25
    key_on, key_off = base_settings(on.cfg, world), base_settings(off.cfg, world)
    assert key_off["filtering"] is None and key_on["filtering"]["target_size"] == 30
    # filtering's code keys the base only when it chooses the questions left out
    assert "data.filtering" in build_modules(on.cfg) and "data.filtering" not in build_modules(off.cfg)
    assert key_on["code"] == code_hash(*BUILD_ENTRY, leave_out=BUILD_LEAVES_OUT)
    assert key_off["code"] == code_hash(*BUILD_ENTRY, leave_out=(*BUILD_LEAVES_OUT, "data.filtering"))
    assert base_settings(ctx(**{"model.tiny.holdout_stage1": True, "filtering.target_size": 20}).cfg,
                         world)["filtering"] != key_on["filtering"]


def _sft_command(tmp_path, tokenizer) -> tuple[list[str], "Path"]:
    """`python -m acesql_lib.train.sft` (the launched entry point, one process) on a saved tiny model, 8 steps, a
    checkpoint every 2."""
    import sys
    from pathlib import Path

    from acesql_lib.models.loading import save_tiny

    model_dir = save_tiny(tiny_model(tokenizer), tokenizer, tmp_path / "base")
    samples = tmp_path / "samples.jsonl"
    samples.write_text("".join(json.dumps(s) + "\n" for s in SAMPLES * 4))
    config = tmp_path / "sft.yaml"
    config.write_text("inherits: tiny\nsft:\n  save_steps: 2\n  logging_steps: 1\n  max_length: 256\n"
                      "  per_device_batch_size: 4\n  gradient_accumulation_steps: 1\n  learning_rate: 0.01\n"
                      "  warmup_ratio: 0.0\n  report_to: none\nmodel:\n  lora: false\n")
    return [sys.executable, "-m", "acesql_lib.train.sft", "--config", str(config), "--samples", str(samples),
            "--model", str(model_dir), "--max-steps", "8", "--output"], Path(tmp_path)


def _losses(folder) -> list[tuple[int, float]]:
    return [(r["step"], r["loss"]) for r in map(json.loads, (folder / LOG_NAME).read_text().splitlines())
            if "loss" in r]


def test_a_killed_sft_run_rerun_resumes_from_its_last_checkpoint_and_equals_the_straight_run(tokenizer, tmp_path):
    import signal
    import subprocess
    import time

    from safetensors.torch import load_file

    cmd, root = _sft_command(tmp_path, tokenizer)
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    straight, stopped = root / "straight", root / "stopped"
    done = subprocess.run(cmd + [str(straight)], capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    proc = subprocess.Popen(cmd + [str(stopped)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=env)
    marker, deadline = stopped / "checkpoint-4" / "trainer_state.json", time.time() + 300
    while not marker.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before its checkpoint at step 4"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not list(stopped.glob("*.safetensors"))  # no final model: the run did not finish
    again = subprocess.run(cmd + [str(stopped)], capture_output=True, text=True, timeout=600, env=env)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "[sft] resuming from" in again.stdout
    want, got = _losses(straight), _losses(stopped)
    assert [s for s, _ in got] == list(range(1, 9))  # each step logged once: the log appended, not restarted
    assert [loss for _, loss in got] == pytest.approx([loss for _, loss in want], rel=1e-6)
    a = {k: v for f in straight.glob("*.safetensors") for k, v in load_file(str(f)).items()}
    b = {k: v for f in stopped.glob("*.safetensors") for k, v in load_file(str(f)).items()}
    assert a.keys() == b.keys() and all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)


def test_checkpoints_of_a_run_with_other_settings_are_moved_aside_not_resumed(tmp_path):
    from acesql_lib.train.sft import resumable_checkpoint

    (tmp_path / "checkpoint-4").mkdir()
    assert resumable_checkpoint(tmp_path, {"lr": 1}) is None  # no record of what wrote it: not resumed
    assert (tmp_path / "retired-1" / "checkpoint-4").is_dir()
    (tmp_path / "checkpoint-2").mkdir()
    assert resumable_checkpoint(tmp_path, {"lr": 1}) == tmp_path / "checkpoint-2"  # same settings: resumed
    assert resumable_checkpoint(tmp_path, {"lr": 2}) is None
    assert (tmp_path / "retired-2" / "checkpoint-2").is_dir()
