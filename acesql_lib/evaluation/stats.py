"""Uncertainty for every comparison the kit prints: binomial CIs, paired tests, seeds.

Units: proportions and differences are fractions here (0.653, not 65.3); tables turn them into
percent when they print. Per-question outcomes are always keyed by question id, so two systems
evaluated on the same questions pair up whatever order their files list them in, and a pair whose
ids differ is refused (`PairingError` names both sides and the first ids that do not match).

Library choices: Wilson and Clopper-Pearson intervals and the exact McNemar test come from
statsmodels (`proportion_confint`, `mcnemar(exact=True)`); the paired bootstrap, the sign-flip
permutation test, the Wilcoxon signed-rank test and the t test over seeds from scipy.stats. Every
resampling method takes a seed, so a rerun prints the same interval.

Several seeds (the study): each seed gives one per-question outcome vector per system. The
difference of two systems is the mean over seeds of the per-seed differences; its CI is a paired
bootstrap over questions of the per-question differences averaged over the seeds both systems share,
and its p-value is a sign-flip permutation test on those same per-question averages (one seed: the
exact McNemar test instead). Per-seed differences, their mean, sd and a one-sample t test over seeds
are reported beside it (`SeedSummary`), so training noise between seeds is visible too.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Hashable

import numpy as np
from scipy import stats as sps
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.proportion import proportion_confint

LEVEL = 0.95  # every interval the kit prints is a 95% interval
Z95 = 1.959963984540054  # its normal quantile (unpaired intervals of published numbers)
N_RESAMPLES = 10_000  # bootstrap and permutation resamples; the seed fixes them
HOLDS, REVERSED, UNCLEAR = "holds", "reversed", "not distinguishable at this scale"
OUTSIDE = "outside the paper's range"  # a claimed range (not a direction) that the CI misses entirely

# Metrics that are shares: fractions in every file the stages write (evaluate, distill, grpo); a table
# prints them in percent with `percent`. EX-type accuracies (ex, generator_ability) are percent already.
SHARE_KEYS = ("retriever_ability", "column_precision", "column_recall", "column_exact_match", "alt_route_share",
              "retriever_well_formed", "generator_well_formed", "truncated")

Outcomes = Mapping[Hashable, Any]  # question id -> outcome (bool for correctness, float for token counts)


class PairingError(ValueError):
    """Two systems' outcomes are not over the same questions; the message names both and the ids."""


@dataclass(frozen=True)
class Interval:
    estimate: float
    low: float
    high: float
    level: float = LEVEL

    def excludes_zero(self) -> bool:
        return self.low > 0 or self.high < 0


@dataclass(frozen=True)
class Comparison:
    """System a minus system b on the same questions (pooled over seeds when several)."""
    diff: Interval
    p_value: float
    test: str  # the test behind p_value, in words
    n: int  # paired questions
    seeds: "SeedSummary | None" = None  # per-seed differences, when more than one seed
    a_mean: float = float("nan")  # mean outcome of each system over the paired questions (and seeds)
    b_mean: float = float("nan")


@dataclass(frozen=True)
class SeedSummary:
    """One quantity over seeds: the values per seed, their mean, sd (ddof 1) and a t test of mean = 0."""
    per_seed: dict[Any, float]
    mean: float
    sd: float
    p_value: float  # one-sample t test against 0 (NaN below 2 seeds or at sd 0)
    n: int = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "n", len(self.per_seed))


def percent(share: Any) -> float | None:
    """A share (fraction) in percent for printing; None for anything that is not a finite number."""
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not math.isfinite(share):
        return None
    return 100.0 * float(share)


# ---------------------------------------------------------------------------------------------
# One system


def binomial_ci(k: int, n: int, level: float = LEVEL, method: str = "wilson") -> Interval:
    """CI for a proportion k / n: "wilson" (default) or "exact" (Clopper-Pearson)."""
    if n <= 0 or not 0 <= k <= n:
        raise ValueError(f"binomial_ci: need 0 <= k <= n and n > 0, got k={k}, n={n}")
    sm_method = {"wilson": "wilson", "exact": "beta"}.get(method)
    if sm_method is None:
        raise ValueError(f"binomial_ci: method must be 'wilson' or 'exact', got {method!r}")
    low, high = proportion_confint(k, n, alpha=1 - level, method=sm_method)
    return Interval(k / n, float(low), float(high), level)


def ex_ci(correct: Outcomes | Sequence[bool], level: float = LEVEL, method: str = "wilson") -> Interval:
    """EX of one evaluation (a fraction) with its binomial CI, from per-question correctness."""
    values = list(correct.values()) if isinstance(correct, Mapping) else list(correct)
    return binomial_ci(sum(bool(v) for v in values), len(values), level, method)


def reported_ci(percent: float, n: int, level: float = LEVEL) -> Interval:
    """A published EX (in percent) on n questions: the Wilson CI of the nearest count k, around the
    published value itself (k / n can differ from it in the last printed digit)."""
    ci = binomial_ci(int(round(percent / 100.0 * n)), n, level)
    return Interval(percent / 100.0, ci.low, ci.high, level)


# ---------------------------------------------------------------------------------------------
# Two systems on the same questions


def pair_up(a: Outcomes, b: Outcomes, names: tuple[str, str] = ("a", "b")) -> tuple[list, np.ndarray, np.ndarray]:
    """(ids, a values, b values) over the common ids, sorted; PairingError when the id sets differ."""
    only_a, only_b = set(a) - set(b), set(b) - set(a)
    if only_a or only_b:
        raise PairingError(
            f"{names[0]} and {names[1]} are not over the same questions: {len(only_a)} id(s) only in {names[0]} "
            f"(first {sorted(map(str, only_a))[:3]}), {len(only_b)} only in {names[1]} (first {sorted(map(str, only_b))[:3]})")
    ids = sorted(a, key=str)
    return ids, np.array([float(a[i]) for i in ids]), np.array([float(b[i]) for i in ids])


def bootstrap_mean_ci(d: np.ndarray, level: float = LEVEL, seed: int = 0,
                      n_resamples: int = N_RESAMPLES) -> Interval:
    """Percentile bootstrap CI of the mean of d (paired differences), seeded."""
    d = np.asarray(d, float)
    if d.size == 0:
        raise ValueError("bootstrap_mean_ci: no values")
    est = float(d.mean())
    if np.ptp(d) == 0:  # every resample has the same mean
        return Interval(est, est, est, level)
    res = sps.bootstrap((d,), np.mean, confidence_level=level, n_resamples=n_resamples, method="percentile",
                        rng=np.random.default_rng(seed))
    return Interval(est, float(res.confidence_interval.low), float(res.confidence_interval.high), level)


def mcnemar_exact(a: np.ndarray, b: np.ndarray) -> tuple[float, int, int]:
    """Exact McNemar test of two paired correctness vectors: (p-value, a-only correct, b-only correct)."""
    a, b = np.asarray(a, bool), np.asarray(b, bool)
    a_only, b_only = int(np.sum(a & ~b)), int(np.sum(~a & b))
    if a_only + b_only == 0:
        return 1.0, 0, 0
    table = [[int(np.sum(a & b)), a_only], [b_only, int(np.sum(~a & ~b))]]
    return float(mcnemar(table, exact=True).pvalue), a_only, b_only


def sign_flip_p(d: np.ndarray, seed: int = 0, n_resamples: int = N_RESAMPLES) -> float:
    """Two-sided permutation p-value of mean(d) = 0 by random sign flips of the paired differences."""
    d = np.asarray(d, float)
    if not np.any(d):
        return 1.0
    res = sps.permutation_test((d,), np.mean, permutation_type="samples", n_resamples=n_resamples,
                               alternative="two-sided", rng=np.random.default_rng(seed))
    return float(res.pvalue)


def seed_summary(per_seed: Mapping[Any, float]) -> SeedSummary:
    """Mean, sd and a one-sample t test (mean = 0) of one quantity over seeds."""
    vals = np.array([float(v) for v in per_seed.values()])
    if vals.size == 0:
        raise ValueError("seed_summary: no seeds")
    sd = float(vals.std(ddof=1)) if vals.size > 1 else float("nan")
    p = float(sps.ttest_1samp(vals, 0.0).pvalue) if vals.size > 1 and sd > 1e-12 else float("nan")  # sd 0: no test
    return SeedSummary(dict(per_seed), float(vals.mean()), sd, p)


def _seeded(runs: Outcomes | Mapping[Any, Outcomes]) -> dict[Any, Outcomes]:
    """{seed: outcomes}: a plain id -> outcome mapping is one run (seed None)."""
    if runs and all(isinstance(v, Mapping) for v in runs.values()):
        return dict(runs)
    return {None: runs}


def compare(a: Outcomes | Mapping[Any, Outcomes], b: Outcomes | Mapping[Any, Outcomes],
            names: tuple[str, str] = ("a", "b"), binary: bool = True, level: float = LEVEL,
            seed: int = 0) -> Comparison:
    """a minus b, paired by question id (and by seed when both give several seeds).

    `binary`: outcomes are correctness (one seed: exact McNemar p); else numbers such as token
    counts (p from a sign-flip permutation test). Seeds only one side has are left out; with no
    seed in common the two sides are compared as one run each (pooled over their own seeds).
    """
    ra, rb = _seeded(a), _seeded(b)
    common = [s for s in ra if s in rb]
    if not common:  # e.g. base (one build) against RL (several seeds): average each side over its seeds
        ra, rb, common = {None: seed_mean(ra, names[0])}, {None: seed_mean(rb, names[1])}, [None]
        binary = False  # averages over seeds are no longer 0/1
    diffs, per_seed, a_means, b_means = [], {}, [], []
    for s in common:
        label = names if s is None else (f"{names[0]} seed {s}", f"{names[1]} seed {s}")
        _, va, vb = pair_up(ra[s], rb[s], label)
        if diffs and len(va) != len(diffs[0]):
            raise PairingError(f"{label[0]}: {len(va)} questions, other seeds have {len(diffs[0])}")
        diffs.append(va - vb)
        per_seed[s] = float((va - vb).mean())
        a_means.append(va.mean())
        b_means.append(vb.mean())
    if len(diffs) > 1:
        ids0 = pair_up(ra[common[0]], rb[common[0]])[0]
        for s in common[1:]:
            if pair_up(ra[s], rb[s])[0] != ids0:
                raise PairingError(f"{names[0]} seed {s} is over other questions than seed {common[0]}")
    d = np.mean(diffs, axis=0)  # per-question difference averaged over seeds
    ci = bootstrap_mean_ci(d, level, seed)
    if binary and len(diffs) == 1:
        _, va, vb = pair_up(ra[common[0]], rb[common[0]])
        p, test = mcnemar_exact(va, vb)[0], "exact McNemar"
    else:
        p, test = sign_flip_p(d, seed), "sign-flip permutation, seed-averaged per question" if len(diffs) > 1 \
            else "sign-flip permutation"
    seeds = seed_summary(per_seed) if len(diffs) > 1 else None
    return Comparison(ci, p, test, len(d), seeds, float(np.mean(a_means)), float(np.mean(b_means)))


def seed_mean(runs: Mapping[Any, Outcomes], name: str = "system") -> dict[Hashable, float]:
    """Per-question mean outcome over a system's seeds (all seeds must be over the same questions)."""
    seeds = list(runs)
    ids = set(runs[seeds[0]])
    for s in seeds[1:]:
        if set(runs[s]) != ids:
            raise PairingError(f"{name}: seed {s} is over other questions than seed {seeds[0]}")
    return {i: float(np.mean([float(runs[s][i]) for s in seeds])) for i in ids}


def wilcoxon_p(a: Outcomes, b: Outcomes, names: tuple[str, str] = ("a", "b")) -> float:
    """Two-sided Wilcoxon signed-rank p-value of paired numbers (e.g. tokens per question)."""
    _, va, vb = pair_up(a, b, names)
    if not np.any(va - vb):
        return 1.0
    return float(sps.wilcoxon(va, vb).pvalue)


def verdict(ci: Interval, direction: int = 1, p_value: float | None = None, alpha: float = 1 - LEVEL) -> str:
    """holds: the CI excludes 0 on the claimed side (direction +1: a > b, -1: a < b); reversed: it
    excludes 0 on the other side; else not distinguishable at this scale. Given `p_value`, the test
    must agree (p < alpha): with a handful of discordant questions a percentile bootstrap can exclude
    0 while the exact test does not, and a verdict never rests on the looser of the two."""
    if direction not in (1, -1):
        raise ValueError(f"verdict: direction must be +1 or -1, got {direction}")
    if not ci.excludes_zero() or any(math.isnan(x) for x in (ci.low, ci.high)):
        return UNCLEAR
    if p_value is not None and not p_value < alpha:
        return UNCLEAR
    return HOLDS if (ci.low > 0) == (direction > 0) else REVERSED


def interval_verdict(ci: Interval, low: float, high: float) -> str:
    """A claimed range [low, high]: holds when the CI lies inside it, outside the paper's range when
    it misses it entirely, else not distinguishable (the CI straddles a bound)."""
    if ci.low >= low and ci.high <= high:
        return HOLDS
    if ci.high < low or ci.low > high:
        return OUTSIDE
    return UNCLEAR
