"""The empirical column-set pool (§4 step 5)."""
import json

import pytest

from acesql_lib.roles.pool import ColumnSetPool, pool_additions

A = frozenset({"t.a", "t.id"})
B = frozenset({"t.b", "t.id"})
C = frozenset({"t.a", "t.b", "t.c"})
GOLD = frozenset({"t.a", "t.c"})


def sft_pool(**kw) -> ColumnSetPool:
    # q1: 3 correct rollouts used A, 2 used B; q2: 1 used A, 1 used C (a tie); q3: none correct
    return ColumnSetPool.from_rollouts({"q1": [A, A, B, A, B], "q2": [A, C], "q3": []},
                                       gold={"q1": GOLD, "q2": C, "q3": GOLD}, **kw)


def test_sft_rollout_init_counts_exact_sets():
    pool = sft_pool()
    assert pool.weights("q1") == {A: 3.0, B: 2.0}
    assert pool.question_ids() == ["q1", "q2", "q3"]
    assert GOLD not in pool.weights("q1")  # the gold SQL's own set is not seeded


def test_visit_decays_then_reads_targets_before_adding():
    pool = sft_pool()
    assert pool.visit("q1") == [A]
    assert pool.weights("q1") == {A: 1.5, B: 1.0}
    # this step: two matching rollouts used B, one used the gold set
    assert pool.add_matches("q1", [B, B, GOLD]) == 3
    assert pool.weights("q1") == {A: 1.5, B: 3.0, GOLD: 1.0}  # a rollout on the gold route IS added
    assert pool.targets("q1") == [B]
    # next epoch: 0.75, 1.5, 0.5 -> B is still the target
    assert pool.visit("q1") == [B]
    assert pool.weights("q1") == {A: 0.75, B: 1.5, GOLD: 0.5}


def test_ties_are_all_returned_in_a_fixed_order():
    pool = sft_pool()
    targets = pool.visit("q2")
    assert targets == [A, C]  # smaller set first
    pool2 = ColumnSetPool.from_rollouts({"q": [C, A]})
    assert pool2.visit("q") == [A, C]


def test_question_without_correct_rollouts_has_no_target_until_a_match():
    pool = sft_pool()
    assert pool.visit("q3") == []
    pool.add_matches("q3", [B])
    assert pool.visit("q3") == [B]


def test_empty_sets_are_not_added():
    pool = ColumnSetPool()
    assert pool.add_matches("q", [frozenset(), A]) == 1
    assert pool.weights("q") == {A: 1.0}


def test_union_init_is_one_high_recall_set_with_the_rollout_mass():
    pool = sft_pool(mode="union")
    assert pool.weights("q1") == {A | B: 5.0}
    assert pool.weights("q3") == {}
    assert pool.visit("q2") == [A | C]
    # fresh matches compete with the union as they do with SFT sets
    pool.add_matches("q2", [A, A])
    assert pool.visit("q2") == [A]  # A: 2 * 0.5 = 1.0 > union: 2 * 0.25 = 0.5


def test_static_gold_ignores_rollouts():
    pool = sft_pool(mode="static_gold")
    assert pool.visit("q1") == [GOLD] and pool.visit("q1") == [GOLD]
    assert pool.add_matches("q1", [A, A, A]) == 0
    assert pool.targets("q1") == [GOLD]
    assert pool.visit("unknown") == []


def test_with_mode_converts_a_fresh_pool_only():
    fresh = sft_pool()
    assert fresh.with_mode("union").weights("q1") == sft_pool(mode="union").weights("q1")
    assert fresh.with_mode("static_gold").visit("q2") == [C]
    fresh.visit("q1")
    with pytest.raises(ValueError, match="never-visited"):
        fresh.with_mode("union")


def test_stats():
    pool = sft_pool()
    s = pool.stats()
    assert s["questions"] == 3
    assert s["sets_per_question_mean"] == pytest.approx((2 + 2 + 0) / 3)
    assert s["sets_per_question_max"] == 2
    assert s["questions_without_target"] == 1
    # q1 target A != gold; q2 targets [A, C] include gold C -> 1 of 2 differ
    assert s["target_differs_from_gold_share"] == pytest.approx(0.5)
    assert sft_pool(mode="static_gold").stats()["target_differs_from_gold_share"] == 0.0


def test_save_load_round_trip_is_exact(tmp_path):
    pool = ColumnSetPool.from_rollouts({"q1": [A, B, B], "q2": [C]}, gold={"q1": GOLD, "q2": C}, gamma=0.7)
    for _ in range(3):
        pool.visit("q1")
        pool.add_matches("q1", [A])
    path = tmp_path / "sub" / "pool.json"
    pool.save(path)
    loaded = ColumnSetPool.load(path, gamma=0.7)
    assert loaded.to_dict() == pool.to_dict()
    assert loaded.weights("q1") == pool.weights("q1")  # floats bit-exact (0.7 ** 3 etc.)
    assert loaded.gamma == 0.7 and loaded.mode == "sft_rollouts" and loaded.gold("q1") == GOLD
    assert loaded.visit("q1") == pool.visit("q1")
    assert [p.name for p in path.parent.iterdir()] == ["pool.json"]  # no temporary file left
    data = json.loads(path.read_text())
    assert "gamma" not in data  # the decay lives in grpo.gamma only
    assert data["version"] == 1 and data["questions"]["q2"] == {"gold": ["t.a", "t.b", "t.c"], "visits": 0,
                                                               "sets": [[["t.a", "t.b", "t.c"], 1.0]]}


def test_load_converts_mode(tmp_path):
    path = tmp_path / "pool.json"
    sft_pool().save(path)
    assert ColumnSetPool.load(path, mode="union", gamma=0.5).weights("q1") == {A | B: 5.0}


@pytest.mark.parametrize("data,field", [
    ({"version": 2, "gamma": 0.5, "questions": {}}, "version"),
    ({"version": 1, "gamma": 0.5, "mode": "odd", "questions": {}}, "mode"),
    ({"version": 1, "gamma": 0.5, "questions": []}, "questions"),
    ({"version": 1, "gamma": 0.5, "questions": {"q9": {"gold": [], "sets": [[["t.a"], -1]]}}}, "q9"),
    ({"version": 1, "gamma": 0.5, "questions": {"q9": {"gold": [], "sets": [[["t.a"], 1], [["t.a"], 2]]}}}, "repeats"),
])
def test_load_rejects_malformed_files_naming_the_field(tmp_path, data, field):
    path = tmp_path / "pool.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=field):
        ColumnSetPool.load(path, gamma=0.5)


def test_gamma_comes_from_the_loader_not_the_file(tmp_path):
    """A pool written with one gamma and loaded for a run with another decays by the run's value."""
    path = tmp_path / "pool.json"
    ColumnSetPool.from_rollouts({"q1": [A, A]}, gold={"q1": GOLD}, gamma=0.5).save(path)
    legacy = json.loads(path.read_text()) | {"gamma": 0.5}  # older files carried their own gamma
    path.write_text(json.dumps(legacy))
    pool = ColumnSetPool.load(path, gamma=0.25)
    assert pool.gamma == 0.25
    pool.visit("q1")
    assert pool.weights("q1") == {A: 0.5}  # 2 * 0.25, not 2 * 0.5


def test_bad_arguments():
    with pytest.raises(ValueError, match="mode"):
        ColumnSetPool(mode="dense")
    with pytest.raises(ValueError, match="gamma"):
        ColumnSetPool(gamma=0.0)
    pool = sft_pool()
    with pytest.raises(ValueError, match="already"):
        pool.add_question("q1")


def test_pool_additions_follow_the_format_gate():
    from acesql_lib.roles.answers import parse_generator

    good = parse_generator("<think>t</think>\n```sql\nSELECT a FROM t\n```")
    no_think = parse_generator("```sql\nSELECT a FROM t\n```")  # executes and may match, but reward 0
    parses, matches, sets = [good, no_think, good, good], [True, True, False, True], [A, B, C, frozenset()]
    # authors (format): only the well-formed match; an unmatched or empty set never joins
    assert pool_additions(parses, matches, sets, gate="format") == [A]
    assert pool_additions(parses, matches, sets, gate="match") == [A, B]  # kit: any match
    assert pool_additions([good], [True], [None], gate="format") == []  # unresolved SQL
    with pytest.raises(ValueError, match="grpo.pool_add_gate.*'reward'"):
        pool_additions(parses, matches, sets, gate="reward")


def test_every_pool_add_gate_the_config_offers_is_one_the_pool_applies():
    import typing

    from acesql_lib.config.choices import PoolAddGate
    from acesql_lib.roles.answers import parse_generator

    good = parse_generator("<think>t</think>\n```sql\nSELECT a FROM t\n```")
    for gate in typing.get_args(PoolAddGate):
        assert pool_additions([good], [True], [A], gate=gate) == [A]


@pytest.mark.parametrize("pool_init", ["sft_rollouts", "sft_rollouts_plus_gold"])
def test_distilled_pool_file_holds_no_gamma_and_grpo_reads_the_config(tmp_path, pool_init):
    """Gamma lives in grpo.gamma only: distillation's pool.json does not carry it, and the GRPO
    stage's starting pool decays by the config's value (also after gold seeding)."""
    from types import SimpleNamespace

    from acesql_lib.config.profiles import load_config
    from acesql_lib.train.pool_init import initial_pool

    ColumnSetPool.from_rollouts({"q1": [A, A]}, gold={"q1": GOLD}, gamma=0.5).save(tmp_path / "pool.json")
    assert "gamma" not in json.loads((tmp_path / "pool.json").read_text())
    cfg = load_config("tiny", {"grpo.gamma": 0.25, "grpo.pool_init": pool_init})
    pool = initial_pool(cfg, SimpleNamespace(distill=tmp_path, rl_data=tmp_path), [])
    assert pool.gamma == 0.25
    pool.visit("q1")
    assert pool.weights("q1")[A] == 0.5


def test_ties_are_absolute_as_the_authors_so_long_unvisited_sets_all_become_targets():
    """RL/rewards/joint_reward.py ties weights within an absolute 1e-9: after 30 decays without additions
    3 x 0.5^30 and 2 x 0.5^30 are both below 1e-9 apart, so both are targets (a relative tie keeps one)."""
    pool = sft_pool()
    for _ in range(29):
        pool.visit("q1")
    assert pool.targets("q1") == [A]  # 3 x 0.5^29 - 2 x 0.5^29 = 1.86e-9: still apart
    pool.visit("q1")
    assert pool.targets("q1") == sorted([A, B], key=lambda s: sorted(s))
