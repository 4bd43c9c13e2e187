"""One rollout spec per stage, built from the config: self-distillation (stage 1) judges a completion exactly as
GRPO and its validation reward it, under every profile (the parsers' rules, truncation, the SQL's text before
it runs, the column set a match adds to the pool); evaluation judges by its own spec, from `eval.*`."""
from __future__ import annotations


import pytest

from acesql_lib.config.paths import REPO_ROOT as REPO
from acesql_lib.config.profiles import load_config
from acesql_lib.models.loading import load_tokenizer
from acesql_lib.data.datasets import Example
from acesql_lib.models.completions import Completion, Engine
from acesql_lib.train.rollouts import RolloutSpec, SamplingSpec, Task, rollout
from acesql_lib.data.schema import Schema
from helpers_db import sqlite_db

GOLD = "SELECT count(*) FROM t"
ANSWERS = {  # what the scripted generator writes, one per sample: each stresses one rule
    "commented": "<think>\nx\n</think>\n\n```sql\n-- your SQL query\nSELECT count(*) FROM t\n```",
    "bare": "<think>\nx\n</think>\n\n```sql\nSELECT COUNT(*) FROM t\n```",
    "spaced": "<think>\nx\n</think>\n\n```sql\nSELECT count(*)\n   FROM   t\n```",
    "late_think": "```sql\nSELECT a FROM t\n```\n</think>\n\n```sql\nSELECT count(*) FROM t WHERE b > 0\n```",
    "truncated": "<think>\nx\n</think>\n\n```sql\nSELECT count(*) FROM t",
}


class _Scripted(Engine):
    """The retriever pass (the first call) lists two columns; the generator pass writes ANSWERS in order."""

    kind = "scripted"

    def __init__(self):
        self.calls = 0

    def generate(self, prompts, n=1, temperature=1.0, top_p=1.0, max_new_tokens=256, seed=None):
        self.calls += 1
        if self.calls == 1:
            text = "<think>\nx\n</think>\n\n```\n[t.a, t.b]\n```"
            return [[Completion(text, [1, 2, 3], 3, False) for _ in range(n)] for _ in prompts]
        done = lambda t: Completion(t, [1, 2, 3], 3, False)  # noqa: E731
        cut = lambda t: Completion(t, list(range(max_new_tokens)), max_new_tokens, True)  # noqa: E731
        return [[cut(t) if k == "truncated" else done(t) for k, t in list(ANSWERS.items())[:n]] for _ in prompts]


@pytest.fixture()
def task(tmp_path) -> Task:
    db = sqlite_db(tmp_path / "db" / "club" / "club.sqlite",
                   "CREATE TABLE t (a TEXT, b INTEGER); INSERT INTO t VALUES ('x', 1), ('y', 2);")
    ex = Example("q1", "club", "How many rows?", "", GOLD, "simple", "", "bird", str(db))
    return Task(ex, Schema.from_sqlite(db))


@pytest.mark.parametrize("profile", ["tiny", "rehearsal", "paper"])
def test_stage_1_judges_a_completion_as_grpo_and_its_validation_reward_it(profile, task):
    cfg = load_config(profile)
    stage1, grpo = RolloutSpec.distill(cfg), RolloutSpec.grpo(cfg)
    judging = lambda spec: {k: getattr(spec, k) for k in RolloutSpec.JUDGING}  # noqa: E731
    assert judging(stage1) == judging(grpo)
    n = len(ANSWERS)
    sampling = SamplingSpec(1, n, 1.0, max_new_tokens=64, prompt_style=cfg.model.prompt_style)
    tokenizer = load_tokenizer(REPO / "data" / "tiny_base")
    runs = {}
    for name, rules in (("stage 1", stage1), ("grpo", grpo)):
        (r,) = rollout([task], _Scripted(), tokenizer, sampling, rules, workers=1)
        runs[name] = ([(p.sql, p.well_formed) for p in r.generator.parses], r.matches, r.match_sets)
    assert runs["stage 1"] == runs["grpo"]
    sqls, matches, sets = runs["grpo"]
    assert matches[1:4] == [True, True, True] and not matches[4]  # the truncated answer has no SQL
    assert sets[3] == frozenset({"t.b"})
    # the column-set rule: the authors' (tiny and paper profiles alike) add nothing for SELECT count(*) FROM t
    assert sets[1] == (frozenset() if grpo.bare_table_columns == "none" else frozenset({"t.a"}))
    # the SQL's text: collapsed whitespace (paper, the authors' reward) lets the template's comment swallow
    # the query; kept as written (tiny) it runs
    assert matches[0] == (grpo.sql_whitespace == "keep")


@pytest.mark.parametrize("profile", ["tiny", "paper"])
def test_evaluation_judges_by_its_own_spec_built_from_eval_settings(profile, task):
    """The fourth stage: evaluation's spec carries `eval.*`'s parsers, runs the SQL as written and scores by the
    set's rule; its parsers are evalparse's (the authors' EVAL extraction keeps the last SQL block of the late
    think answer, which the training parsers under the authors' think rule also read)."""
    from acesql_lib.roles.parsers import parse_generator_eval, parse_retriever_eval

    cfg = load_config(profile, {"eval.generator_parser": "kit"} if profile == "tiny" else {})
    spec = RolloutSpec.evaluation(cfg, "set", 7.0, "authors")
    assert (spec.parsing, spec.retriever_parser, spec.generator_parser) == \
        ("evaluation", cfg.eval.retriever_parser, cfg.eval.generator_parser)
    assert (spec.sql_whitespace, spec.compare_mode, spec.timeout_s, spec.scoring) == ("keep", "set", 7.0, "authors")
    r_parse, g_parse = spec.parsers(64)
    retr = Completion("<think>\nx\n</think>\n\n```\n[t.a, t.b]\n```", [1, 2, 3], 3, False)
    assert r_parse(retr, task) == parse_retriever_eval(retr.text, task.schema, parser=cfg.eval.retriever_parser)
    for text in ANSWERS.values():
        c = Completion(text, [1, 2, 3], 3, text == ANSWERS["truncated"])
        assert g_parse(c, task) == parse_generator_eval(text, c.truncated, cfg.eval.generator_parser)
    assert RolloutSpec.grpo(cfg).parsing == RolloutSpec.distill(cfg).parsing == "training"
