"""Reuse keys follow the code that builds an artefact, and one machine's rerun with a seed repeats itself."""
from __future__ import annotations

import json

import pytest
import torch

from acesql_lib import tinybase
from acesql_lib.config import load_config
from acesql_lib.reuse_keys import code_hash, settings_hash, source_digest
from acesql_lib.datasets import load_bird, schemas_for
from acesql_lib.evaluate import evaluate
from acesql_lib.models import build_tiny_model, train_tiny_tokenizer
from acesql_lib.tinyworld import TinyWorld
from helpers_db import sqlite_db

SOURCE = '''"""Module doc."""
import math


def steps(n):
    """How many steps."""
    return math.ceil(n / 4)  # a comment
'''


def test_source_digest_follows_code_not_comments_or_docstrings(tmp_path):
    f = tmp_path / "recipe.py"
    f.write_text(SOURCE)
    before = source_digest([f])
    f.write_text(SOURCE.replace("# a comment", "# another comment").replace("How many steps.", "Steps.")
                 .replace("return math", "return  math"))
    assert source_digest([f]) == before
    f.write_text(SOURCE.replace("n / 4", "n / 8"))  # what the build does changed
    assert source_digest([f]) != before


def test_code_hash_names_package_modules():
    assert code_hash("tinybase", "sft") == code_hash("tinybase", "sft")
    assert code_hash("tinybase", "sft") != code_hash("tinybase")
    with pytest.raises(FileNotFoundError):
        code_hash("no_such_module")


def test_base_model_key_holds_the_building_code(tmp_path, monkeypatch):
    cfg, world = load_config("tiny"), TinyWorld(tmp_path / "world")
    settings = tinybase.base_settings(cfg, world)
    assert settings["code"] == code_hash(*tinybase.BUILD_MODULES)
    assert {"transformers", "trl"} <= set(settings["libraries"])
    key = settings_hash(settings)
    assert settings_hash(tinybase.base_settings(cfg, world)) == key  # stable across calls
    monkeypatch.setattr(tinybase, "code_hash", lambda *m: "edited-recipe")  # e.g. sft.py changed
    assert settings_hash(tinybase.base_settings(cfg, world)) != key
    monkeypatch.undo()
    threads = torch.get_num_threads()
    try:  # the thread count orders CPU float sums, so it shapes the trained weights
        torch.set_num_threads(threads + 1)
        assert settings_hash(tinybase.base_settings(cfg, world)) != key
    finally:
        torch.set_num_threads(threads)


def test_tokenizer_training_is_deterministic():
    texts = ["SELECT name FROM singer WHERE age > 30", "How many singers are from France?"] * 20
    a, b = train_tiny_tokenizer(texts, vocab_size=300), train_tiny_tokenizer(texts, vocab_size=300)
    assert a.get_vocab() == b.get_vocab()


def test_two_greedy_evaluations_give_identical_predictions(tmp_path):
    sqlite_db(tmp_path / "dev_databases" / "concerts" / "concerts.sqlite",
              "CREATE TABLE singer (singer_id INTEGER PRIMARY KEY, name TEXT, age INTEGER);"
              "INSERT INTO singer VALUES (1, 'Joe', 52), (2, 'Ann', 25);")
    qs = [("How many singers are older than 30?", "SELECT count(*) FROM singer WHERE age > 30"),
          ("Name the singers.", "SELECT name FROM singer")]
    (tmp_path / "dev.json").write_text(json.dumps([{"question_id": i, "db_id": "concerts", "question": q,
                                                     "evidence": "", "SQL": s, "difficulty": "simple"}
                                                    for i, (q, s) in enumerate(qs)]))
    examples = list(load_bird(tmp_path / "dev.json", tmp_path / "dev_databases"))
    schemas = schemas_for(examples)
    cfg = load_config("tiny", {"eval.max_new_tokens": 32, "engine.hf_batch_size": 4, "eval.workers": 1})
    tok = train_tiny_tokenizer([q for q, _ in qs] * 3 + [s for _, s in qs] * 3 + [schemas["concerts"].to_ddl()], 300)
    runs = []
    for _ in range(2):
        model = build_tiny_model(tok, hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1,
                                 intermediate_size=64, max_position=1024, seed=0)
        runs.append(evaluate(model, tok, examples, schemas, cfg, mode="set", progress=False).records)
    assert runs[0] == runs[1]
    assert any(r["retriever_tokens"] > 1 for r in runs[0])  # something was generated, not two empty runs


def test_code_hash_covers_a_package_module_by_module(tmp_path, monkeypatch):
    """`executor` and `tinyworld` are packages: their key is every file of theirs, so an edit to one
    of their modules changes it (a study keyed on "executor" once failed: no executor.py)."""
    import acesql_lib.reuse_keys as reuse_keys

    assert len(code_hash("executor", "tinyworld", "reports")) == 16  # the real packages
    pkg = tmp_path / "acesql_lib"
    (pkg / "executor").mkdir(parents=True)
    (pkg / "reuse_keys.py").write_text("")
    (pkg / "executor" / "__init__.py").write_text("")
    (pkg / "executor" / "sandbox.py").write_text("LIMIT = 1\n")
    (pkg / "executor" / "batch.py").write_text("def f():\n    return 1\n")
    monkeypatch.setattr(reuse_keys, "__file__", str(pkg / "reuse_keys.py"))
    before = reuse_keys.code_hash("executor")
    (pkg / "executor" / "sandbox.py").write_text("LIMIT = 2\n")
    assert reuse_keys.code_hash("executor") != before


def test_engine_workers_is_in_no_reuse_key_and_every_other_engine_setting_is(tmp_path):
    """How many processes share the work changes no number (acesql_lib/workers.py), so a GRPO run and an
    evaluation keep their keys when `engine.workers` changes; any other engine setting still changes them."""
    from acesql_lib.evaluate import eval_key
    from acesql_lib.grpo import run_settings
    from acesql_lib.paths import Paths

    def keys(**overrides):
        cfg = load_config("tiny", {"run_dir": str(tmp_path / "run"), **overrides})
        paths = Paths.from_config(cfg)
        return run_settings(cfg, paths), eval_key(cfg, tmp_path / "model", cfg.eval.sets[0])

    one, two = keys(**{"engine.workers": 1}), keys(**{"engine.workers": 3})
    assert one == two
    other = keys(**{"engine.workers": 1, "engine.hf_batch_size": 7})
    assert other[0] != one[0] and other[1] != one[1]
