"""The authors' prompts byte for byte, and the kit's own styles unchanged.

References:
- `fixtures/authors/validation.parquet`: the authors' 40 RL validation rows; each row's user message
  is their whole training retriever prompt.
- `fixtures/authors/reference_prompts.json.gz`: for the same 40 rows, the prompts the authors' released
  code builds (see fixtures/authors/SOURCES.md): their training generator prompt and their evaluation
  retriever and generator prompts, for two column selections per row.
- `fixtures/prompts_golden_kit.json`: the kit's "tiny" and "paper" prompts as recorded when the authors'
  style was added (12 tiny-world questions through the tiny profile's task path, rendered with the
  shipped tiny base's chat template, and a Spider schema); those styles must not move by a byte.
"""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest

from acesql_lib.config.profiles import load_config
from acesql_lib.roles.prompts import generator_messages, retriever_messages
from acesql_lib.train.rollouts import generator_prompt, retriever_prompt
from acesql_lib.data.schema import load_tables_json
from repo_paths import FIXTURES, ROOT
from helpers_db import sqlite_db

GOLDEN_KIT = FIXTURES / "prompts_golden_kit.json"


# --- the kit's own styles: unchanged ----------------------------------------------------------------


@pytest.fixture(scope="module")
def golden() -> dict:
    return json.loads(GOLDEN_KIT.read_text(encoding="utf-8"))


def test_tiny_profile_prompts_are_unchanged(golden):
    from transformers import AutoTokenizer

    from acesql_lib.data.datasets import load_synsql
    from acesql_lib.data.task import build_tasks
    from acesql_lib.data.tinyworld import build_tinyworld

    cfg = load_config("tiny")
    assert cfg.model.prompt_style == "tiny"
    tok = AutoTokenizer.from_pretrained(str(ROOT / "data" / "tiny_base"))
    with tempfile.TemporaryDirectory() as d:
        world = build_tinyworld(Path(d) / "world", seed=0, n_train=40, n_dev=10)
        tasks = build_tasks(load_synsql(world.train_json, world.train_db_root).examples[:12], cfg.data)
        assert len(tasks) == len(golden["tiny_world"]) == 12
        for t, want in zip(tasks, golden["tiny_world"]):
            ex, gold = t.example, t.gold_columns
            assert (t.qid, t.full_ddl, sorted(gold), t.schema_text(gold)) == (
                want["qid"], want["full_ddl"], want["selected"], want["pruned_ddl"])
            for style in ("tiny", "paper"):
                w = want[style]
                assert retriever_messages(t.full_ddl, ex.question, ex.evidence, style=style) == w["retriever_messages"]
                assert generator_messages(t.schema_text(gold), ex.question, ex.evidence,
                                          style=style) == w["generator_messages"]
                assert retriever_prompt(t, tok, style, cfg.engine.enable_thinking) == w["retriever_rendered"]
                assert generator_prompt(t, gold, tok, style, cfg.engine.enable_thinking) == w["generator_rendered"]


def test_kit_styles_on_a_spider_schema_are_unchanged(golden):
    singer = load_tables_json(FIXTURES / "real" / "spider_tables.json")["concert_singer"]
    ddl, pruned = singer.to_ddl(), singer.to_ddl({"singer.Name", "singer.Age"})
    for style in ("tiny", "paper"):
        want = golden["spider_singer"][style]
        assert retriever_messages(ddl, "How many singers?", style=style) == want["retriever"]
        assert generator_messages(pruned, "Oldest singer?", evidence="age is Age", style=style) == want["generator"]


# --- the authors' prompts, 40 of 40 -----------------------------------------------------------------

AUTHORS = FIXTURES / "authors"


@pytest.fixture(scope="module")
def paper():
    return load_config("paper")


@pytest.fixture(scope="module")
def raw_rows() -> list[dict]:
    import pyarrow.parquet as pq

    return pq.read_table(AUTHORS / "validation.parquet").to_pylist()


@pytest.fixture(scope="module")
def reference(raw_rows) -> list[dict]:
    import gzip

    ref = json.loads(gzip.decompress((AUTHORS / "reference_prompts.json.gz").read_bytes()))
    assert [r["pool_key"] for r in ref] == [r["extra_info"]["pool_key"] for r in raw_rows]
    return ref


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(ROOT / "data" / "tiny_base"))  # Qwen3's template


class _GivenValues:
    """A values index that returns the row's question-relevant values for the question text it must be asked."""

    def __init__(self, question: str, values: dict):
        self.question, self.values = question, values

    def relevant_values(self, text: str) -> dict:
        assert text == self.question
        return self.values


def _kit_tasks(raw_rows, cfg):
    """The kit's own path: the schema read from the database's tables.json entry (the row's `db_info`), its
    sampled values as the examples the SQLite reader gives, the profile's text style, and the values index
    answering with the question's relevant values."""
    from acesql_lib.data.datasets import Example
    from acesql_lib.roles.prompts import question_text
    from acesql_lib.train.rollouts import Task
    from acesql_lib.data.schema import Schema
    from acesql_lib.data.task import profile_schema

    tasks = []
    for r in raw_rows:
        x, gt = r["extra_info"], r["reward_model"]["ground_truth"]
        ex = Example(x["pool_key"], x["db_id"], x["question"], x["evidence"], gt["sql"], "", "", "synsql", "")
        schema = Schema.from_tables_json(json.loads(x["db_info"]), source="db_info")
        schema.set_examples(json.loads(x["sampled_values"]), source="sampled_values")
        profile_schema(schema, f"/nonexistent/databases/{ex.db_id}/{ex.db_id}.sqlite", cfg.data, values_cache=None)
        schema.values_index = _GivenValues(question_text(ex.question, ex.evidence), json.loads(x["relavant_values"]))
        tasks.append(Task(ex, schema))
    return tasks


def _authors_tasks(cfg, tmp_path):
    """The `data.stage1_source: authors` path: the profile's reader of the released RL files."""
    import shutil

    from acesql_lib.authors.release import release_tasks

    for name in ("train.parquet", "validation.parquet"):
        shutil.copy(AUTHORS / "validation.parquet", tmp_path / name)
    cfg = load_config("paper", {"data.authors_release_dir": str(tmp_path), "data.stage1_source": "authors"})
    train, val = release_tasks(cfg)
    assert [t.qid for t in train] == [t.qid for t in val]
    return val


@pytest.fixture(scope="module", params=["kit", "authors"])
def tasks(request, paper, raw_rows, tmp_path_factory):
    if request.param == "kit":
        return _kit_tasks(raw_rows, paper)
    return _authors_tasks(paper, tmp_path_factory.mktemp("release"))


def _names(raw_row: dict, indices) -> frozenset[str]:
    info = json.loads(raw_row["extra_info"]["db_info"])
    tables, cols = info["table_names_original"], info["column_names_original"]
    return frozenset(f"{tables[cols[i][0]]}.{cols[i][1]}" for i in indices)


def _authors_chat(tokenizer, content: str) -> str:
    """The authors' chat call (RL/trainer/two_pass_ray_trainer.py, verl's dataset, EVAL/retriever_infer.py,
    EVAL/sql_infer.py): one user turn, no system turn, generation prompt, no thinking flag."""
    return tokenizer.apply_chat_template([{"role": "user", "content": content}], tokenize=False,
                                         add_generation_prompt=True)


def test_profiles_choose_the_prompt_style():
    from acesql_lib.config.checks import ConfigError
    from acesql_lib.config.model import ModelConfig

    assert (load_config("paper").model.prompt_style, load_config("rehearsal").model.prompt_style) == ("authors",) * 2
    assert load_config("tiny").model.prompt_style == "tiny" and ModelConfig().prompt_style == "authors"
    with pytest.raises(ConfigError, match="model.prompt_style"):
        ModelConfig(prompt_style="omnisql")


def test_training_retriever_prompts_are_the_authors_40_of_40(tasks, raw_rows, paper, tokenizer):
    differ = []
    for t, r in zip(tasks, raw_rows):
        ex = t.example
        theirs = [{"role": m["role"], "content": m["content"]} for m in r["prompt"]]
        ok = retriever_messages(t.full_ddl, ex.question, ex.evidence, style=paper.model.prompt_style) == theirs
        ok &= retriever_prompt(t, tokenizer, paper.model.prompt_style, paper.engine.enable_thinking) == _authors_chat(
            tokenizer, theirs[0]["content"])
        if not ok:
            differ.append(ex.db_id)
    assert len(tasks) == 40 and differ == [], f"{len(differ)} of 40 retriever prompts differ: {differ}"


def test_training_generator_prompts_are_the_authors_40_of_40(tasks, raw_rows, reference, paper, tokenizer):
    differ = []
    for t, r, ref in zip(tasks, raw_rows, reference):
        for name, indices in ref["selections"].items():
            cols, want = _names(r, indices), ref["train_generator"][name]
            ex = t.example
            ok = generator_messages(t.schema_text(cols), ex.question, ex.evidence,
                                    style=paper.model.prompt_style) == [{"role": "user", "content": want}]
            ok &= generator_prompt(t, cols, tokenizer, paper.model.prompt_style,
                                   paper.engine.enable_thinking) == _authors_chat(tokenizer, want)
            if not ok:
                differ.append((ex.db_id, name))
    assert differ == [], f"{len(differ)} of 80 generator prompts differ: {differ}"


def test_evaluation_prompts_are_the_authors_40_of_40(tasks, raw_rows, reference, paper, tokenizer):
    from acesql_lib.roles.prompts import AUTHORS_EVAL, evaluation_style

    style = evaluation_style(paper.model.prompt_style)
    assert style == AUTHORS_EVAL and evaluation_style("tiny") == "tiny" and evaluation_style("paper") == "paper"
    differ = []
    for t, r, ref in zip(tasks, raw_rows, reference):
        if retriever_prompt(t, tokenizer, style, paper.engine.enable_thinking) != _authors_chat(
                tokenizer, ref["eval_retriever"]):
            differ.append((t.example.db_id, "retriever"))
        for name, indices in ref["selections"].items():
            cols = _names(r, indices)
            if generator_prompt(t, cols, tokenizer, style, paper.engine.enable_thinking) != _authors_chat(
                    tokenizer, ref["eval_generator"][name]):
                differ.append((t.example.db_id, name))
    assert differ == [], f"{len(differ)} of 120 evaluation prompts differ: {differ}"


def test_training_and_evaluation_templates_differ_as_theirs(paper):
    """Their evaluation templates drop the line asking for a <think> block and end in a newline; the evaluation
    question keeps its spaces (EVAL/prepare_eval_data.py does not strip it), training strips it."""
    from acesql_lib.roles.prompts import AUTHORS_EVAL

    ask = "- Include a <think>...</think> reasoning block"
    for build in (retriever_messages, generator_messages):
        train = build("CREATE TABLE t (\n    a TEXT\n);", " How many? ", " e ", style="authors")[0]["content"]
        ev = build("CREATE TABLE t (\n    a TEXT\n);", " How many? ", " e ", style=AUTHORS_EVAL)[0]["content"]
        assert ask in train and ask not in ev and ev.endswith("\n") and not train.endswith("\n")
        assert "\ne\nHow many?\n" in train and "\ne\n How many? \n" in ev
        assert train.startswith("Task Overview:\n") and "Database Engine:\nSQLite\n" in ev
    # an empty selection prunes to no schema at all, as their obtain_db_details gives for no columns
    assert "Database Schema:\n\nThis schema describes" in generator_messages("", "q", style="authors")[0]["content"]
    # one pass for the generator: a question naming a placeholder stays as written
    text = generator_messages("S", "{schema}?", style="authors")[0]["content"]
    assert "Database Schema:\nS\n" in text and "Question:\n{schema}?\n" in text
    # their evaluation retriever replaces the question first, then the schema, in the filled text
    text = retriever_messages("S", "{schema}?", style=AUTHORS_EVAL)[0]["content"]
    assert "Question: \nS?\n" in text


def test_the_chat_template_is_applied_as_theirs(tokenizer, paper):
    """No system turn, the generation prompt, thinking on (Qwen3: enable_thinking=True is its default, so the
    kit's explicit flag renders what the authors' call without it renders)."""
    from acesql_lib.train.rollouts import render

    msgs = retriever_messages("S", "q", style="authors")
    ours = render(tokenizer, msgs, paper.engine.enable_thinking)
    assert paper.engine.enable_thinking is True and ours == _authors_chat(tokenizer, msgs[0]["content"])
    assert ours == f"<|im_start|>user\n{msgs[0]['content']}<|im_end|>\n<|im_start|>assistant\n"
    calls = []

    class Recording:
        def apply_chat_template(self, messages, **kw):
            calls.append((messages, kw))
            return ""

    render(Recording(), msgs, paper.engine.enable_thinking)
    assert calls == [(msgs, {"tokenize": False, "add_generation_prompt": True, "enable_thinking": True})]



class _Recording:
    """An engine that records its prompts and answers each role with one well-formed completion."""

    kind = "recording"  # what evaluate() writes as the engine that drew the samples

    def __init__(self):
        self.prompts: list[str] = []

    def generate(self, prompts, n=1, **kw):
        from acesql_lib.models.completions import Completion

        self.prompts += prompts
        out = []
        for p in prompts:
            text = ("<think>\nx\n</think>\n\n```\n[t.a]\n```" if "database schema specialist" in p
                    else "<think>\nx\n</think>\n\n```sql\nSELECT a FROM t WHERE a = 'Site B'\n```")
            out.append([Completion(text, [1, 2], 2, False) for _ in range(n)])
        return out

    def close(self):
        pass


def test_evaluation_builds_the_evaluation_templates_and_rollouts_the_training_ones(tmp_path, tokenizer):
    """Through the kit's code paths: `evaluate` prompts with the authors' evaluation templates (question as
    read), a training rollout (self-distillation, GRPO, its validation) with their training templates."""

    from acesql_lib.data.datasets import Example
    from acesql_lib.evaluation.evaluate import EvalOptions, evaluate
    from acesql_lib.roles.prompts import AUTHORS_EVAL
    from acesql_lib.train.rollouts import RolloutSpec, SamplingSpec, Task, rollout
    from acesql_lib.data.schema import Schema

    db = sqlite_db(tmp_path / "db" / "club" / "club.sqlite",
                   "CREATE TABLE t (a TEXT, b INTEGER); INSERT INTO t VALUES ('x', 1), ('y', 2), ('Site B', 3);")
    cfg = load_config("paper", {"run_dir": str(tmp_path / "run"), "eval.workers": 1})
    ex = Example("q1", "club", " Which a at Site B? ", "site means a", "SELECT a FROM t WHERE a = 'Site B'",
                 "simple", "", "bird", str(db))
    schema = Schema.from_sqlite(db)
    engine = _Recording()
    result = evaluate(None, tokenizer, [ex], {"club": schema}, cfg, engine=engine, progress=False)
    task = Task(ex, schema)
    assert schema.text_style == "authors" and "example: ['Site B', 'x', 'y']" in task.full_ddl  # BIRD: values first
    want = [retriever_prompt(task, tokenizer, AUTHORS_EVAL), generator_prompt(task, frozenset({"t.a"}), tokenizer,
                                                                              AUTHORS_EVAL)]
    assert engine.prompts[:2] == want and "Question: \nsite means a\n Which a at Site B? \n\n" in want[0]
    assert "reasoning block" not in want[0] + want[1] and result.records[0]["correct"]

    engine.prompts = []
    rollout([task], engine, tokenizer, SamplingSpec(1, 1, 1.0, prompt_style=cfg.model.prompt_style),
            RolloutSpec.grpo(cfg), workers=1)
    assert engine.prompts == [retriever_prompt(task, tokenizer, "authors"),
                              generator_prompt(task, frozenset({"t.a"}), tokenizer, "authors")]
    assert "Question: \nsite means a\nWhich a at Site B?\n\n" in engine.prompts[0]
    assert all("reasoning block before the final" in p for p in engine.prompts)

    # their Spider dev/test prompts show no question-relevant values (EvalSet.relevant_values), BIRD's and the
    # robustness sets' do
    assert {s.name: s.relevant_values for s in cfg.eval.sets} == {
        "bird_dev": True, "spider_dev": False, "spider_test": False, "spider_dk": True, "spider_syn": True,
        "spider_realistic": True}
    assert [s.relevant_values for s in load_config("rehearsal").eval.sets] == [s.relevant_values for s in cfg.eval.sets]
    from acesql_lib.config.eval import EvalConfig

    assert [s.relevant_values for s in EvalConfig().sets] == [s.relevant_values for s in cfg.eval.sets]
    engine.prompts = []
    spider = Schema.from_sqlite(db)
    evaluate(None, tokenizer, [ex], {"club": spider}, cfg,
             EvalOptions(mode="spider", set_name="spider_dev", relevant_values=False), engine=engine, progress=False)
    bare = Task(ex, spider, given_values={})
    assert "example: ['x', 'y']" in bare.full_ddl and spider.values_index is None
    assert engine.prompts[0] == retriever_prompt(bare, tokenizer, AUTHORS_EVAL)
