"""Model output that breaks the caller's own steps (column sets, retriever parsing) gets a verdict,
never an exception: deep nesting that sqlglot recurses into past Python's stack, and a JSON answer
nested past it, run through a GRPO step's rollout, pool and rewards and through an evaluation."""
import pytest

from acesql_lib.config.profiles import load_config
from acesql_lib.data.datasets import load_bird, schemas_for
from acesql_lib.models.completions import Completion, Engine
from acesql_lib.roles.parsers import parse_retriever_eval
from acesql_lib.evaluation.evaluate import EvalOptions, evaluate
from acesql_lib.models.loading import train_tiny_tokenizer
from acesql_lib.roles.pool import pool_additions
from acesql_lib.roles.rewards import LengthPenalty, generator_reward
from acesql_lib.data.routes import is_alternative_route, route_share, rollout_route_records
from acesql_lib.train.rollouts import RolloutSpec, SamplingSpec, rollout
from acesql_lib.data.sqlcolumns import ColumnResolutionError, column_set
from acesql_lib.data.task import Task

GOLD = "SELECT count(*) FROM singer WHERE age > 30"  # helpers_bird.QUESTIONS[0]: 2 rows match


def _nested(open_, close, inner, n):
    return open_ * n + inner + close * n


# Each returns the gold's answer; SQLite runs the parentheses (the executor scores them correct) and
# stops the 60 nested calls with "parser stack overflow" (an error, 0).
DEEP = {
    "parentheses_50": f"SELECT {_nested('(', ')', 'count(*)', 50)} FROM singer WHERE age > 30",
    "abs_60": f"SELECT {_nested('abs(', ')', 'count(*)', 60)} FROM singer WHERE age > 30",
    "coalesce_60": f"SELECT {_nested('coalesce(', ')', 'count(*)', 60)} FROM singer WHERE age > 30",
    "cast_60": f"SELECT {_nested('cast(', ' AS INTEGER)', 'count(*)', 60)} FROM singer WHERE age > 30",
}
DEEP_JSON = "```json\n" + _nested('{"a": ', "}", "1", 100_000) + "\n```"


@pytest.fixture(scope="module")
def world(bird_dir):
    examples = list(load_bird(bird_dir / "dev.json", bird_dir / "dev_databases"))
    return examples, schemas_for(examples)


@pytest.mark.parametrize("name", DEEP)
def test_a_deep_sql_has_an_unparseable_column_set_not_an_exception(world, name):
    examples, schemas = world
    task = Task(examples[0], schemas["concerts"])
    assert task.columns_of(DEEP[name]) is None and task.columns_of(DEEP[name], "none") is None
    with pytest.raises(ColumnResolutionError, match="too deeply nested"):
        column_set(DEEP[name], schemas["concerts"])
    assert is_alternative_route(DEEP[name], GOLD, schemas["concerts"]) is None
    gold_side = Task(examples[0].__class__(**{**examples[0].__dict__, "sql": DEEP[name]}), schemas["concerts"])
    assert gold_side.gold_columns is None


def test_a_json_answer_nested_past_the_stack_is_no_list(world):
    _examples, schemas = world
    parse = parse_retriever_eval(DEEP_JSON, schemas["concerts"], parser="authors")
    assert parse.columns == frozenset()


class Scripted(Engine):
    """Retriever prompts get `retriever`; generator prompts (they ask for a ```sql block) the SQLs
    of `sqls` in turn, one completion each, well formed."""

    def __init__(self, retriever, sqls):
        self.retriever, self.sqls = retriever, sqls

    def generate(self, prompts, n=1, temperature=1.0, top_p=1.0, max_new_tokens=256, seed=None):
        def text(prompt, j):
            if "```sql" not in prompt:
                return self.retriever
            return f"<think>\nnested\n</think>\n```sql\n{self.sqls[j % len(self.sqls)]}\n```"
        return [[Completion(text(p, j), [1] * 8, 8, False) for j in range(n)] for p in prompts]


def _tokenizer(examples, schemas):
    return train_tiny_tokenizer([e.question for e in examples] * 3 + [schemas["concerts"].to_ddl()] * 3,
                                vocab_size=400)


def test_deep_sql_goes_through_a_grpo_step_and_is_scored_by_the_rule(world):
    """Rollout (retriever, vote, generator, execution), pool additions, rewards and the step's
    metrics: the correct deep SQLs are matches with no column set, so they add nothing to the pool,
    earn the generator reward the rule gives a match, and are counted as unresolved routes."""
    examples, schemas = world
    cfg = load_config("tiny", {"grpo.n_generator": len(DEEP) + 1, "grpo.n_retriever": 2})
    task = Task(examples[0], schemas["concerts"])
    sqls = list(DEEP.values()) + [GOLD]
    engine = Scripted("<think>\nx\n</think>\n[singer.age, singer.name]", sqls)
    rolls = rollout([task], engine, _tokenizer(examples, schemas), SamplingSpec.grpo(cfg, 1), RolloutSpec.grpo(cfg))
    r = rolls[0]
    assert [p.sql for p in r.generator.parses] == sqls and all(p.format_ok for p in r.generator.parses)
    assert r.exec_status == ["ok", "error", "error", "error", "ok"]
    assert r.matches == [True, False, False, False, True]
    assert r.match_sets[:-1] == [None] * len(DEEP) and r.match_sets[-1] == frozenset({"singer.age"})
    assert pool_additions(r.generator.parses, r.matches, r.match_sets, cfg.grpo.pool_add_gate) == [r.match_sets[-1]]
    penalty = LengthPenalty.from_config(cfg.grpo)
    rewards = [generator_reward(p, m, c.n_tokens, penalty) for p, m, c in
               zip(r.generator.parses, r.matches, r.generator.completions)]
    assert rewards == [1.0 - penalty(8), 0.0, 0.0, 0.0, 1.0 - penalty(8)]
    share = route_share(rollout_route_records(rolls))
    assert share["n_correct"] == 2 and share["n_unresolved"] == 1  # the deep one: counted, in neither bucket


def test_deep_sql_and_deep_json_go_through_an_evaluation(world, bird_dir, tmp_path):
    examples, schemas = world

    # the retriever answers with JSON nested past Python's stack, the generator with a correct deep SQL
    engine = Scripted(DEEP_JSON, [DEEP["parentheses_50"]])

    for scoring in ("kit", "authors"):
        cfg = load_config("tiny", {"eval.scoring": scoring, "eval.workers": 1})
        result = evaluate(None, _tokenizer(examples, schemas), examples, schemas, cfg,
                          EvalOptions(mode="set", stage="s", out_dir=tmp_path / scoring, set_name="dev"), engine=engine,
                          progress=False)
        first = result.records[0]
        assert first["pred_sql"] == DEEP["parentheses_50"] and first["correct"] and first["pred_columns"] is None
        assert first["alt_route"] is None
        assert [r["correct"] for r in result.records] == [True, False, False]
        assert first["retrieved_columns"] == []  # the nested JSON is no list
        assert result.metrics["ex"] == pytest.approx(100 / 3)
