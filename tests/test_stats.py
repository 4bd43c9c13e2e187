"""stats: intervals and tests against values computed by hand or by the other library."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from acesql_lib.evaluation import stats as S

Z95 = 1.959963984540054


def _wilson_by_hand(k: int, n: int) -> tuple[float, float]:
    p, z2 = k / n, Z95 ** 2
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = Z95 * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return centre - half, centre + half


@pytest.mark.parametrize("k,n", [(3, 10), (0, 7), (1002, 1534), (535, 535)])
def test_wilson_interval_matches_the_formula_and_scipy(k, n):
    ci = S.binomial_ci(k, n)
    lo, hi = _wilson_by_hand(k, n)
    assert (ci.low, ci.high) == pytest.approx((lo, hi), abs=1e-9)
    ref = sps.binomtest(k, n).proportion_ci(0.95, method="wilson")
    assert (ci.low, ci.high) == pytest.approx((ref.low, ref.high), abs=1e-9)
    assert ci.estimate == k / n


def test_exact_interval_matches_scipy_clopper_pearson():
    ci = S.binomial_ci(3, 10, method="exact")
    ref = sps.binomtest(3, 10).proportion_ci(0.95, method="exact")
    assert (ci.low, ci.high) == pytest.approx((ref.low, ref.high), abs=1e-9)
    assert ci.high - ci.low > S.binomial_ci(3, 10).high - S.binomial_ci(3, 10).low  # exact is wider


def test_bad_counts_and_methods_are_refused():
    with pytest.raises(ValueError, match="k=5, n=4"):
        S.binomial_ci(5, 4)
    with pytest.raises(ValueError, match="method"):
        S.binomial_ci(1, 4, method="normal")


def test_ex_ci_counts_correct_answers_in_a_mapping():
    ci = S.ex_ci({"q1": True, "q2": False, "q3": True, "q4": True})
    assert ci.estimate == 0.75 and (ci.low, ci.high) == pytest.approx(_wilson_by_hand(3, 4), abs=1e-12)


def test_published_number_becomes_the_nearest_count():
    ci = S.reported_ci(65.3, 1534)  # 1001.7 -> 1002 of 1534
    assert ci.estimate == pytest.approx(0.653)
    assert (ci.low, ci.high) == (S.binomial_ci(1002, 1534).low, S.binomial_ci(1002, 1534).high)
    lo, hi = _wilson_by_hand(1002, 1534)
    assert (ci.high - ci.low) / 2 == pytest.approx((hi - lo) / 2, abs=1e-12)  # 0.0238: about +-2.4 points at BIRD dev's size


def test_mcnemar_exact_is_the_two_sided_binomial_on_discordant_pairs():
    # 1 question only a gets right, 6 only b: p = 2 * P(X <= 1 | Bin(7, 1/2)) = 2 * 8 / 128
    a = np.array([1, 0, 0, 0, 0, 0, 0, 1, 1, 0], bool)
    b = np.array([0, 1, 1, 1, 1, 1, 1, 1, 1, 0], bool)
    p, a_only, b_only = S.mcnemar_exact(a, b)
    assert (a_only, b_only) == (1, 6)
    assert p == pytest.approx(0.125)
    assert S.mcnemar_exact(a, a) == (1.0, 0, 0)


def test_sign_flip_test_is_exact_for_few_questions():
    # 2^6 sign patterns; |sum| >= 4 in 1 + 6 + 6 + 1 of them
    assert S.sign_flip_p(np.array([1, 1, 1, 1, 1, -1.0])) == pytest.approx(14 / 64)
    assert S.sign_flip_p(np.zeros(5)) == 1.0


def test_pairing_by_id_ignores_order_and_names_missing_ids():
    ids, a, b = S.pair_up({"q2": 1, "q1": 0}, {"q1": 1, "q2": 1})
    assert ids == ["q1", "q2"] and list(a) == [0, 1] and list(b) == [1, 1]
    with pytest.raises(S.PairingError, match=r"sft and rl .*1 id\(s\) only in sft \(first \['q3'\]\)"):
        S.pair_up({"q1": 1, "q3": 0}, {"q1": 1}, ("sft", "rl"))


def test_paired_bootstrap_is_seeded_and_agrees_with_the_normal_approximation():
    rng = np.random.default_rng(1)
    a = {i: bool(rng.random() < 0.6) for i in range(400)}
    b = {i: bool(rng.random() < 0.5) for i in range(400)}
    c1, c2 = S.compare(a, b, seed=3), S.compare(a, b, seed=3)
    assert c1 == c2
    d = np.array([a[i] - b[i] for i in range(400)], float)
    half = Z95 * d.std(ddof=1) / math.sqrt(len(d))
    assert c1.diff.estimate == pytest.approx(d.mean())
    assert c1.diff.low == pytest.approx(d.mean() - half, abs=0.01)
    assert c1.diff.high == pytest.approx(d.mean() + half, abs=0.01)
    assert c1.test == "exact McNemar" and c1.n == 400 and c1.seeds is None
    assert c1.p_value == pytest.approx(S.mcnemar_exact(np.array(list(a.values())), np.array(list(b.values())))[0])


def test_identical_systems_give_a_zero_interval_and_p_one():
    a = {i: i % 3 == 0 for i in range(30)}
    c = S.compare(a, a)
    assert (c.diff.estimate, c.diff.low, c.diff.high, c.p_value) == (0.0, 0.0, 0.0, 1.0)
    assert S.verdict(c.diff) == S.UNCLEAR


def test_seed_summary_is_the_t_test_over_seeds():
    s = S.seed_summary({0: 0.1, 1: 0.2, 2: 0.3})
    assert (s.mean, s.sd, s.n) == (pytest.approx(0.2), pytest.approx(0.1), 3)
    t = 0.2 / (0.1 / math.sqrt(3))
    assert s.p_value == pytest.approx(1 - t / math.sqrt(t * t + 2))  # two-sided t with 2 df, closed form
    assert math.isnan(S.seed_summary({0: 0.4}).p_value)


def test_several_seeds_pair_by_seed_and_report_each_seeds_difference():
    ids = range(50)
    a = {s: {i: (i + s) % 2 == 0 for i in ids} for s in (0, 1, 2)}  # 50% each seed
    b = {s: {i: (i + s) % 5 == 0 for i in ids} for s in (0, 1, 2)}  # 20% each seed
    c = S.compare(a, b, ("rl", "sft"))
    assert c.seeds is not None and c.seeds.n == 3
    assert c.seeds.per_seed == {0: pytest.approx(0.3), 1: pytest.approx(0.3), 2: pytest.approx(0.3)}
    d = np.mean([[int(a[s][i]) - int(b[s][i]) for i in ids] for s in (0, 1, 2)], axis=0)  # per question
    assert (d > 0).sum() == 35 and (d == 0).sum() == 15
    # The bootstrap interval's ends depend on its (seeded) draws; its side of 0 does not: no difference is
    # negative, so a resample's mean is 0 only if all 50 draws are among the 15 zeros ((15/50)^50 ~ 1e-26).
    assert c.diff.estimate == pytest.approx(0.3) and c.diff.low > 0
    # Only the two all-same-sign patterns of the 35 positive differences reach |mean|: the exact sign-flip
    # p is 2 / 2^35 (5.8e-11). The Monte Carlo test meets none in its N_RESAMPLES draws and reports its
    # floor, 2 / (N + 1) (scipy's two-sided p: twice (hits + 1) / (N + 1)).
    assert c.test.startswith("sign-flip") and c.p_value == pytest.approx(2 / (S.N_RESAMPLES + 1), rel=1e-12)
    assert S.verdict(c.diff) == S.HOLDS and S.verdict(c.diff, -1) == S.REVERSED
    b[1] = {i: False for i in range(49)}
    with pytest.raises(S.PairingError, match="rl seed 1 and sft seed 1"):
        S.compare(a, b, ("rl", "sft"))


def test_one_run_against_several_seeds_uses_the_seed_average():
    base = {i: i < 10 for i in range(40)}  # 25%
    rl = {s: {i: i < 20 for i in range(40)} for s in (0, 1)}  # 50% both seeds
    c = S.compare(rl, base)
    assert c.diff.estimate == pytest.approx(0.25) and c.test == "sign-flip permutation"


def test_wilcoxon_on_token_counts_matches_scipy():
    sft = {f"q{i}": 200.0 + 7 * i for i in range(12)}
    rl = {f"q{i}": 150.0 + 3 * i + (i % 4) for i in range(12)}
    ids = sorted(sft)
    assert S.wilcoxon_p(rl, sft) == pytest.approx(sps.wilcoxon([rl[i] for i in ids], [sft[i] for i in ids]).pvalue)
    c = S.compare(rl, sft, binary=False)
    assert c.diff.high < 0 and S.verdict(c.diff, -1) == S.HOLDS


def test_range_verdict():
    assert S.interval_verdict(S.Interval(0.3, 0.25, 0.35), 0.191, 0.423) == S.HOLDS
    assert S.interval_verdict(S.Interval(0.05, 0.01, 0.09), 0.191, 0.423) == S.OUTSIDE
    assert S.interval_verdict(S.Interval(0.2, 0.1, 0.3), 0.191, 0.423) == S.UNCLEAR
