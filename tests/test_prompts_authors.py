"""The authors' prompts byte for byte (issue 27, point 2), and the kit's own styles unchanged.

References:
- `fixtures/authors/validation.parquet`: the authors' 40 RL validation rows; each row's user message
  is their whole training retriever prompt.
- `fixtures/authors/reference_prompts.json.gz`: for the same 40 rows, the prompts the authors' released
  code builds (see fixtures/authors/SOURCES.md): their training generator prompt and their evaluation
  retriever and generator prompts, for two column selections per row.
- `fixtures/prompts_golden_kit.json`: the kit's "tiny" and "paper" prompts as the code before this
  change built them (12 tiny-world questions through the tiny profile's task path, rendered with the
  shipped tiny base's chat template, and a Spider schema); those styles must not move by a byte.
"""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest

from acesql_lib.config import load_config
from acesql_lib.prompts import generator_messages, retriever_messages
from acesql_lib.rollouts import generator_prompt, retriever_prompt
from acesql_lib.schema import load_tables_json

FIXTURES = Path(__file__).parent / "fixtures"
GOLDEN_KIT = FIXTURES / "prompts_golden_kit.json"


# --- the kit's own styles: unchanged ----------------------------------------------------------------


@pytest.fixture(scope="module")
def golden() -> dict:
    return json.loads(GOLDEN_KIT.read_text(encoding="utf-8"))


def test_tiny_profile_prompts_are_unchanged(golden):
    from transformers import AutoTokenizer

    from acesql_lib.datasets import load_synsql
    from acesql_lib.distill import make_tasks
    from acesql_lib.tinyworld import build_tinyworld

    cfg = load_config("tiny")
    assert cfg.model.prompt_style == "tiny"
    tok = AutoTokenizer.from_pretrained(str(Path(__file__).parent.parent / "data" / "tiny_base"))
    with tempfile.TemporaryDirectory() as d:
        world = build_tinyworld(Path(d) / "world", seed=0, n_train=40, n_dev=10)
        tasks = make_tasks(load_synsql(world.train_json, world.train_db_root).examples[:12],
                           cfg.data.n_example_values, cfg.data.example_max_chars, data_cfg=cfg.data)
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
