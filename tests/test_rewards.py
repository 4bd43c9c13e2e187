"""Rewards (§4 step 6), TRL-shaped wrappers and group advantages (§4 step 7)."""

import pytest
import torch

from acesql_lib.config.train import GRPOConfig
from acesql_lib.roles.answers import parse_generator, parse_retriever
from acesql_lib.roles.prompts import generator_target, retriever_target
from acesql_lib.roles.rewards import (
    LengthPenalty, authors_dense_retriever_reward, dense_retriever_reward, generator_reward, group_advantages, length_penalty,
    make_generator_reward_fn, make_retriever_reward_fn, retriever_reward,
)
from acesql_lib.data.schema import load_tables_json
from repo_paths import REAL


@pytest.fixture(scope="module")
def schemas():
    return load_tables_json(REAL / "spider_tables.json")


@pytest.fixture(scope="module")
def singer(schemas):
    return schemas["concert_singer"]


NAME_AGE = frozenset({"singer.Name", "singer.Age"})


def ret_parse(singer, cols, truncated=False):
    return parse_retriever(retriever_target(cols, "t"), singer, truncated=truncated)


# ---------------------------------------------------------------- length penalty

@pytest.mark.parametrize("n,expected", [(0, 0.0), (512, 0.0), (1280, 0.25), (2048, 0.5), (5000, 0.5), (896, 0.125)])
def test_length_penalty_paper_curve(n, expected):
    assert length_penalty(n) == pytest.approx(expected)
    assert LengthPenalty()(n) == pytest.approx(expected)


def test_length_penalty_from_config_and_validation():
    pen = LengthPenalty.from_config(GRPOConfig(len_penalty_start=100, len_penalty_end=200, len_penalty_max=1.0))
    assert pen(150) == pytest.approx(0.5)
    with pytest.raises(ValueError):
        LengthPenalty(start=10, end=10)


# ---------------------------------------------------------------- generator

def test_generator_reward_gates():
    good = parse_generator(generator_target("SELECT 1", "t"))
    assert generator_reward(good, True, 100) == 1.0
    assert generator_reward(good, True, 1280) == pytest.approx(0.75)
    assert generator_reward(good, False, 100) == 0.0
    assert generator_reward(parse_generator("```sql\nSELECT 1\n```"), True, 100) == 0.0  # no think
    assert generator_reward(parse_generator("<think>t</think> SELECT 1"), True, 100) == 0.0  # no sql block
    cut = parse_generator(generator_target("SELECT 1", "t"), truncated=True)
    assert generator_reward(cut, True, 100, truncation_gate=True) == 0.0  # kit: truncated outputs earn 0


def test_generator_reward_is_not_gated_on_truncation_by_default():
    # authors' joint_reward.py: a well-formed matching SQL at the 2,048-token limit earns 1 - 0.5
    cut = parse_generator(generator_target("SELECT 1", "t"), truncated=True)
    assert generator_reward(cut, True, 2048) == 0.5
    assert generator_reward(cut, True, 2048, truncation_gate=True) == 0.0
    assert generator_reward(cut, False, 2048) == 0.0


# ---------------------------------------------------------------- retriever (sparse)

def test_retriever_reward_exact_match_to_any_target(singer):
    other = frozenset({"singer.Name", "singer.Song_Name"})
    p = ret_parse(singer, NAME_AGE)
    assert retriever_reward(p, [other, NAME_AGE], 100) == 1.0
    assert retriever_reward(p, [NAME_AGE], 2048) == pytest.approx(0.5)
    assert retriever_reward(p, [other], 100) == 0.0
    assert retriever_reward(ret_parse(singer, NAME_AGE | {"singer.Country"}), [NAME_AGE], 100) == 0.0  # superset
    assert retriever_reward(ret_parse(singer, {"singer.Name"}), [NAME_AGE], 100) == 0.0  # subset


def test_retriever_reward_zero_cases(singer):
    assert retriever_reward(ret_parse(singer, NAME_AGE), [], 100) == 0.0  # no target yet
    assert retriever_reward(ret_parse(singer, NAME_AGE, truncated=True), [NAME_AGE], 100) == 0.0
    assert retriever_reward(ret_parse(singer, []), [frozenset()], 100) == 0.0  # empty selection
    no_think = parse_retriever("[singer.Name, singer.Age]", singer)
    assert retriever_reward(no_think, [NAME_AGE], 100) == 0.0


# ---------------------------------------------------------------- retriever (dense ablation)

def test_dense_reward_coverage_minus_noise(singer):
    target = frozenset({"singer.Name", "singer.Age", "singer.Country", "singer.Song_Name"})
    # exact: recall 1, noise 0
    assert dense_retriever_reward(ret_parse(singer, target), target, 100) == 1.0
    # half covered, no noise: 0.5
    assert dense_retriever_reward(ret_parse(singer, NAME_AGE), target, 100) == pytest.approx(0.5)
    # full cover plus 4 extras: recall 1, noise 4/8 -> 1 - 0.5 * 0.5 = 0.75
    padded = target | {"stadium.Name", "stadium.Location", "concert.Year", "concert.Theme"}
    assert dense_retriever_reward(ret_parse(singer, padded), target, 100) == pytest.approx(0.75)
    assert dense_retriever_reward(ret_parse(singer, padded), target, 100, noise_weight=1.0) == pytest.approx(0.5)
    # length penalty scales it: 0.75 * (1 - 0.25)
    assert dense_retriever_reward(ret_parse(singer, padded), target, 1280) == pytest.approx(0.5625)


def test_dense_reward_clips_at_zero_and_gates_on_format(singer):
    target = frozenset({"singer.Name"})
    wrong = ret_parse(singer, {"stadium.Name", "concert.Year"})  # recall 0, noise 1 -> -0.5 -> 0
    assert dense_retriever_reward(wrong, target, 100) == 0.0
    assert dense_retriever_reward(ret_parse(singer, target, truncated=True), target, 100) == 0.0
    assert dense_retriever_reward(ret_parse(singer, []), target, 100) == 0.0


# ---------------------------------------------------------------- TRL-shaped wrappers

def test_generator_reward_fn_shape():
    fn = make_generator_reward_fn()
    assert fn.__name__ == "generator_reward"
    completions = [generator_target("SELECT 1", "t"), "no format", [{"role": "assistant",
                                                                     "content": generator_target("SELECT 2", "t")}]]
    out = fn(completions, matches=[True, True, True], completion_ids=[[0] * 10, [0] * 10, [0] * 1280],
             prompts=["p"] * 3)
    assert out == pytest.approx([1.0, 0.0, 0.75])
    assert fn(completions[:1], matches=[True], n_tokens=[10], truncated=[True]) == [1.0]  # authors: no gate
    gated = make_generator_reward_fn(truncation_gate=True)
    assert gated(completions[:1], matches=[True], n_tokens=[10], truncated=[True]) == [0.0]
    with pytest.raises(ValueError, match="n_tokens"):
        fn(completions[:1], matches=[True])
    with pytest.raises(ValueError, match="matches"):
        fn(completions[:1], n_tokens=[1], matches=[True, False])


def test_retriever_reward_fn_with_db_ids_and_schema_objects(schemas, singer):
    sparse = make_retriever_reward_fn(schemas)
    dense = make_retriever_reward_fn(schemas, kind="dense_kit")
    assert sparse.__name__ == "retriever_reward_sparse" and dense.__name__ == "retriever_reward_dense_kit"
    completions = [retriever_target(NAME_AGE, "t"), retriever_target({"singer.Name"}, "t")]
    targets = [[sorted(NAME_AGE)], [sorted(NAME_AGE), ["singer.Country"]]]
    kw = dict(targets=targets, db_id=["concert_singer"] * 2, n_tokens=[10, 10])
    assert sparse(completions, **kw) == [1.0, 0.0]
    assert dense(completions, **kw) == pytest.approx([1.0, 0.5])  # best of the two targets
    assert sparse(completions, targets=targets, schema=[singer, singer], n_tokens=[10, 10]) == [1.0, 0.0]
    with pytest.raises(KeyError, match="nope"):
        sparse(completions, targets=targets, db_id=["nope", "nope"], n_tokens=[1, 1])
    with pytest.raises(ValueError, match="schema"):
        make_retriever_reward_fn()(completions, targets=targets, n_tokens=[1, 1])


def test_authors_dense_reward_by_hand(singer):
    # pool after the adds: A = {Name, Age} 1.5, B = {Name, Country} 1.0; total 2.5 -> best set A,
    # column weights Name 1.0, Age 0.6, Country 0.4 (useful: > 0.1), Song_Name 0 (irrelevant)
    pool = {NAME_AGE: 1.5, frozenset({"singer.Name", "singer.Country"}): 1.0}
    r = lambda cols, **kw: authors_dense_retriever_reward(ret_parse(singer, cols, **kw), pool)  # noqa: E731
    assert r(NAME_AGE) == pytest.approx(4.0)
    assert r({"singer.Name", "singer.Country"}) == pytest.approx(2.0 + 0.4 * 4)  # half covered + useful noise
    assert r({"singer.Name", "singer.Song_Name"}) == pytest.approx(2.0 - 6 * 1 / 2)  # irrelevant noise
    assert r(NAME_AGE | {"singer.Country", "singer.Song_Name"}) == pytest.approx(4 - 6 / 4 + 0.4 * 0.5 * 4)
    assert r(NAME_AGE, truncated=True) == pytest.approx(4.0)  # no truncation gate, no length penalty
    assert authors_dense_retriever_reward(parse_retriever("[singer.Name, singer.Age]", singer), pool) == 0.0
    assert r(()) == 0.0  # empty selection


def test_authors_dense_reward_empty_pool_uses_gold_and_ties_take_the_smallest_set(singer):
    gold = {"singer.Name"}
    assert authors_dense_retriever_reward(ret_parse(singer, gold), {}, gold) == 4.0
    assert authors_dense_retriever_reward(ret_parse(singer, NAME_AGE), {}, gold) == pytest.approx(4 - 3)
    assert authors_dense_retriever_reward(ret_parse(singer, NAME_AGE), {}, ()) == 0.0  # no best set
    tie = {frozenset({"singer.Age", "singer.Country"}): 1.0, frozenset(gold): 1.0}
    assert authors_dense_retriever_reward(ret_parse(singer, gold), tie) == 4.0


def test_authors_dense_reward_fn_reads_pool_weights(schemas, singer):
    fn = make_retriever_reward_fn(schemas, kind="dense")
    completions = [retriever_target(NAME_AGE, "t")] * 2
    pools = [{NAME_AGE: 1.0}, {}]
    assert fn(completions, pool_weights=pools, gold=[[], ["singer.Name"]], db_id=["concert_singer"] * 2,
              n_tokens=[10, 10]) == pytest.approx([4.0, 1.0])
    with pytest.raises(ValueError, match="pool_weights"):
        fn(completions, db_id=["concert_singer"] * 2, n_tokens=[10, 10])


# ---------------------------------------------------------------- advantages

def test_group_advantages_fixed_matrix():
    rewards = torch.tensor([[1.0, 0.0, 0.0, 0.0],
                            [1.0, 1.0, 1.0, 1.0],
                            [0.5, 0.0, 1.0, 0.5]])
    adv = group_advantages(rewards, eps=1e-6)
    # row 0: mean 0.25, unbiased var = (0.5625 + 3 * 0.0625) / 3 = 0.25, std 0.5
    assert adv[0].tolist() == pytest.approx([1.5, -0.5, -0.5, -0.5], abs=1e-5)
    assert adv[1].tolist() == [0.0, 0.0, 0.0, 0.0]
    # row 2: mean 0.5, var = (0 + 0.25 + 0.25 + 0) / 3 = 1/6
    s = (1 / 6) ** 0.5
    assert adv[2].tolist() == pytest.approx([0.0, -0.5 / s, 0.5 / s, 0.0], abs=1e-5)
    assert adv.sum(dim=1).abs().max() < 1e-5


def test_group_advantages_edge_cases():
    assert group_advantages(torch.tensor([[0.7], [0.1]])).tolist() == [[0.0], [0.0]]
    assert group_advantages(torch.tensor([[1, 0]])).dtype == torch.float32
    with pytest.raises(ValueError, match="n_groups"):
        group_advantages(torch.tensor([1.0, 0.0]))
