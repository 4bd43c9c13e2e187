"""Reuse keys follow the code that builds an artefact, and one machine's rerun with a seed repeats itself."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

import acesql_lib
from acesql_lib.pipeline import tinybase
from acesql_lib.config.profiles import load_config
from acesql_lib.runtime.reuse_keys import code_hash, imported_modules, settings_hash, source_digest
from acesql_lib.data.datasets import load_bird, schemas_for
from acesql_lib.evaluation.evaluate import EvalOptions, evaluate
from acesql_lib.models.loading import build_tiny_model, train_tiny_tokenizer
from acesql_lib.data.tinyworld import TinyWorld
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


def test_code_hash_covers_what_the_entry_modules_import():
    assert "train.sft" in imported_modules("pipeline.tinybase")  # tinybase trains the base with sft.train_sft
    assert code_hash("pipeline.tinybase", "train.sft") == code_hash("pipeline.tinybase")  # naming an imported module again adds nothing
    assert code_hash("train.sft") != code_hash("pipeline.tinybase")
    assert code_hash("pipeline.tinybase", leave_out=["train.sft"]) != code_hash("pipeline.tinybase")
    with pytest.raises(FileNotFoundError, match="no_such_module"):
        code_hash("no_such_module")
    with pytest.raises(FileNotFoundError, match="no_such_module"):
        code_hash("pipeline.tinybase", leave_out=["no_such_module"])


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "acesql_lib"
    for name, text in {"__init__.py": "", **files}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_imported_modules_follow_every_kind_of_import_statement(tmp_path):
    """Relative and absolute imports, at module level and inside functions, a package's `__init__` and the
    package's lazy public names count; what another library or a `TYPE_CHECKING` block imports does not."""
    root = _package(tmp_path, {
        "__init__.py": 'PUBLIC = {"Context": "context"}\n',
        "entry.py": "import json\nfrom . import helper\nfrom .store.disk import save\n"
                    "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .typing_only import T\n"
                    "def run():\n    from .late import go\n    from acesql_lib import Context\n"
                    "    import acesql_lib.absolute\n",
        "helper.py": "X = 1\n", "late.py": "from .helper import X\n", "context.py": "", "absolute.py": "",
        "typing_only.py": "", "unused.py": "",
        "store/__init__.py": "from .index import build\n", "store/index.py": "from .. import deep\n",
        "store/disk.py": "", "store/spare.py": "", "deep.py": "",
    })
    assert imported_modules("entry", root=root) == (
        "absolute", "context", "deep", "entry", "helper", "late", "store", "store.disk", "store.index")
    # a module left out is neither counted nor followed: `deep` is reached only through `store.index`
    assert imported_modules("entry", leave_out=["store.index"], root=root) == (
        "absolute", "context", "entry", "helper", "late", "store", "store.disk")
    assert imported_modules("store", root=root) == ("deep", "store", "store.disk", "store.index", "store.spare")


def _copy_of_the_package(tmp_path: Path) -> Path:
    copy = tmp_path / "acesql_lib"
    shutil.copytree(Path(acesql_lib.__file__).parent, copy, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


def test_an_edit_to_routes_changes_the_start_validation_key(tmp_path):
    """The validation before step 1 is read back when its key matches; `rollouts` scores every sample with
    `routes.is_match`, so a code edit there must change the key and a comment must not."""
    from acesql_lib.train.grpo_validation import START_VALIDATION_CODE

    assert {"data.routes", "train.rollouts", "roles.pool", "executor.sandbox"} <= set(imported_modules(*START_VALIDATION_CODE))
    copy = _copy_of_the_package(tmp_path)
    key = code_hash(*START_VALIDATION_CODE, root=copy)
    assert key == code_hash(*START_VALIDATION_CODE)  # the copy is the package
    routes = copy / "data" / "routes.py"
    routes.write_text(routes.read_text() + "\n# a comment\n")
    assert code_hash(*START_VALIDATION_CODE, root=copy) == key
    routes.write_text(routes.read_text() + "ROUTE_LIMIT = 3\n")
    assert code_hash(*START_VALIDATION_CODE, root=copy) != key


def test_an_evaluations_key_follows_the_modules_it_runs(tmp_path):
    from acesql_lib.evaluation.evaluate import EVAL_CODE

    modules = imported_modules(*EVAL_CODE)
    assert {"evaluation.evaluate", "train.rollouts", "data.routes", "roles.parsers", "models.engines", "roles.prompts", "executor.compare"} <= set(modules)
    assert not {"train.grpo", "reports"} & set(modules)  # training and the reports shape no prediction
    copy = _copy_of_the_package(tmp_path)
    key = code_hash(*EVAL_CODE, root=copy)
    (copy / "roles" / "parsers.py").write_text((copy / "roles" / "parsers.py").read_text() + "\nPARSED = 1\n")
    assert code_hash(*EVAL_CODE, root=copy) != key


def test_base_model_key_holds_the_building_code(tmp_path, monkeypatch):
    cfg, world = load_config("tiny"), TinyWorld(tmp_path / "world")
    settings = tinybase.base_settings(cfg, world)
    assert settings["code"] == code_hash(*tinybase.BUILD_ENTRY, leave_out=tinybase.build_leaves_out(cfg))
    assert {"transformers", "trl"} <= set(settings["libraries"])
    key = settings_hash(settings)
    assert settings_hash(tinybase.base_settings(cfg, world)) == key  # stable across calls
    monkeypatch.setattr(tinybase, "code_hash", lambda *m, **k: "edited-recipe")  # e.g. sft.py changed
    assert settings_hash(tinybase.base_settings(cfg, world)) != key
    monkeypatch.undo()
    threads = torch.get_num_threads()
    try:  # the thread count orders CPU float sums, so it shapes the trained weights
        torch.set_num_threads(threads + 1)
        assert settings_hash(tinybase.base_settings(cfg, world)) != key
    finally:
        torch.set_num_threads(threads)


def test_the_base_models_key_holds_what_the_build_imports_and_not_what_only_loads_or_reads_it():
    modules = set(tinybase.build_modules(load_config("rehearsal")))
    # the rehearsal's prompts show the authors' schema text with question-relevant values
    assert {"pipeline.tinybase", "train.sft", "models.loading", "roles.prompts", "data.schema", "data.authors_schema", "data.values_index", "data.datasets",
            "data.tinyworld.world", "data.tinyworld.questions"} <= modules
    assert not {"config.settings", "config.data", "config.model", "config.train", "config.eval", "config.choices",
                "config.checks", "config.profiles", "evaluation.evaluate", "pipeline.shipped_base", "runtime.reuse_keys",
                "data.filtering"} & modules
    assert "data.filtering" in tinybase.build_modules(load_config("tiny", {"model.tiny.holdout_stage1": True}))


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
        runs.append(evaluate(model, tok, examples, schemas, cfg, EvalOptions(mode="set"), progress=False).records)
    assert runs[0] == runs[1]
    assert any(r["retriever_tokens"] > 1 for r in runs[0])  # something was generated, not two empty runs


def test_code_hash_covers_a_package_module_by_module(tmp_path, monkeypatch):
    """`executor` and `data.tinyworld` are packages: named as an entry, every file of theirs counts, so an edit
    to one of their modules changes the key, whether their `__init__` imports it or not."""
    import acesql_lib.runtime.reuse_keys as reuse_keys

    assert len(code_hash("executor", "data.tinyworld", "reports")) == 16  # the real packages
    pkg = tmp_path / "acesql_lib"
    (pkg / "executor").mkdir(parents=True)
    (pkg / "runtime").mkdir()
    (pkg / "runtime" / "reuse_keys.py").write_text("")
    (pkg / "executor" / "__init__.py").write_text("")
    (pkg / "executor" / "sandbox.py").write_text("LIMIT = 1\n")
    (pkg / "executor" / "batch.py").write_text("def f():\n    return 1\n")
    monkeypatch.setattr(reuse_keys, "__file__", str(pkg / "runtime" / "reuse_keys.py"))
    before = reuse_keys.code_hash("executor")
    (pkg / "executor" / "sandbox.py").write_text("LIMIT = 2\n")
    assert reuse_keys.code_hash("executor") != before


def test_every_engine_setting_is_in_the_runs_and_the_evaluations_reuse_key(tmp_path):
    """A GRPO run and an evaluation are keyed by every engine setting: changing any of its numbers or switches
    gives both a new key."""
    import dataclasses

    from acesql_lib.config.model import EngineConfig
    from acesql_lib.evaluation.evaluate import eval_key
    from acesql_lib.train.grpo_run import run_settings
    from acesql_lib.config.paths import Paths

    def keys(**overrides):
        cfg = load_config("tiny", {"run_dir": str(tmp_path / "run"), **overrides})
        paths = Paths.from_config(cfg)
        return run_settings(cfg, paths), eval_key(cfg, tmp_path / "model", cfg.eval.sets[0])

    base, engine = keys(), load_config("tiny").engine
    changed = 0
    for f in dataclasses.fields(EngineConfig):
        value = getattr(engine, f.name)
        if isinstance(value, bool):
            other = not value
        elif isinstance(value, int):
            other = value + 1
        else:
            continue
        run, ev = keys(**{f"engine.{f.name}": other})
        assert run != base[0] and ev != base[1], f.name
        changed += 1
    assert changed >= 8  # the switches and sizes of both engines