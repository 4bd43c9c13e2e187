"""The claims table: each comparison the paper draws, measured on this run with a CI, a p-value and a verdict.

One row per claim and evaluation set: the paper's figures, this run's, the paired difference with
its 95% CI, the p-value and the test behind it, the seeds, and a verdict (`stats.verdict`): holds
when the CI excludes 0 on the paper's side (and the test agrees, p < 0.05), reversed when both
point the other way, else not distinguishable at this scale. A claim whose runs are missing says which, never a bare number.

EX claims pair the two systems' per-question correctness by question id (`ReportInputs.outcomes`);
the output-length claim pairs per-question token counts (bootstrap CI of the mean difference,
sign-flip permutation p); the alternative-route claim is a share with a Wilson CI set against the
paper's range (pooled over seeds: counts summed). Several seeds: `stats.compare` (module doc).
The paper's own gaps get an unpaired 95% CI at BIRD dev's size (its per-question results are not
published, so the paired interval cannot be formed; the unpaired one is wider), so a reader sees
which of them are within noise.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..evaluation import stats
from ..config.settings import Config
from ..evaluation.stats import Interval
from .inputs import NOT_REPORTED, ReportInputs, _num, not_run
from .tables import Table, dataset_label, fmt_ci, fmt_diff, fmt_p, primary_set, variant_stage

PAPER_SET = "bird_dev"  # the paper's ablations and efficiency numbers are on BIRD dev


@dataclass(frozen=True)
class Claim:
    text: str
    a: str  # the variant the paper says is better (or shorter)
    b: str
    kind: str  # "ex": EX difference, a - b > 0; "tokens": a - b < 0; "share": a share within the paper's range
    paper_a: Any = None
    paper_b: Any = None


def paper_claims(paper: dict[str, Any]) -> list[Claim]:
    """The claims, with the paper's figures read from the paper-results file."""
    ab = {e["variant"]: e.get("bird_dev") for e in paper["ablation"]}
    eff = {e.get("stage"): e.get("output_tokens") for e in paper["efficiency"]}
    text = paper["text"]
    full = ab["full"]
    return [
        Claim("SFT > base", "sft", "base", "ex", ab["sft"], ab["base"]),
        Claim("RL > SFT", "full", "sft", "ex", full, ab["sft"]),
        Claim("full > w/o PCGrad", "full", "no_pcgrad", "ex", full, ab["no_pcgrad"]),
        Claim("full > w/o schedule", "full", "no_schedule", "ex", full, ab["no_schedule"]),
        Claim("empirical pool > static gold target", "full", "static_gold", "ex", full, text["static_gold_target"]["bird_dev"]),
        Claim("sparse > dense retriever reward", "full", "dense_reward", "ex", full, text["dense_reward"].get("bird_dev")),
        Claim("RL shortens outputs (tokens per question)", "full", "sft", "tokens", eff.get("rl"), eff.get("sft")),
        Claim("correct predictions on alternative routes (%)", "full", "", "share",
              text["alt_route_share"]["min"], text["alt_route_share"]["max"]),
    ]


def _paper_figures(c: Claim) -> str:
    if c.kind == "share":
        return f"{c.paper_a}-{c.paper_b}%"
    if c.kind == "tokens":
        a, b = _num(c.paper_a), _num(c.paper_b)
        return NOT_REPORTED if a is None or b is None else f"{a / 1000:.2f}k vs {b / 1000:.2f}k"
    return f"{c.paper_a} vs {'lower (not quantified)' if c.paper_b is None else c.paper_b}"


def paper_gap(c: Claim, n: int) -> tuple[str, str]:
    """(paper's difference with its unpaired 95% CI, its verdict) for an EX claim at n questions each."""
    a, b = _num(c.paper_a), _num(c.paper_b)
    if c.kind != "ex" or a is None or b is None:
        return NOT_REPORTED, NOT_REPORTED
    pa, pb = a / 100, b / 100
    half = stats.Z95 * math.sqrt(pa * (1 - pa) / n + pb * (1 - pb) / n)
    iv = Interval(pa - pb, pa - pb - half, pa - pb + half)
    words = {stats.HOLDS: "beyond noise", stats.REVERSED: "reversed", stats.UNCLEAR: "within noise"}
    return fmt_diff(iv), words[stats.verdict(iv)]


def _seeds_cell(cmp: stats.Comparison, scale: float, digits: int) -> str:
    s = cmp.seeds
    if s is None:
        return "1 run"
    vals = ", ".join(f"{scale * v:+.{digits}f}" for v in s.per_seed.values())
    return (f"{s.n} seeds: {vals}; mean {scale * s.mean:+.{digits}f}, sd {scale * s.sd:.{digits}f}, "
            f"t-test p {fmt_p(s.p_value)}")


def claim_row(c: Claim, cfg: Config, inputs: ReportInputs, set_name: str, paper_n: int) -> list[str]:
    prof, label = cfg.profile, dataset_label(set_name, cfg)
    p_diff, p_verdict = paper_gap(c, paper_n)
    head = [c.text, label, _paper_figures(c), p_diff, p_verdict]
    sa = variant_stage(inputs, c.a, set_name)
    if c.kind == "share":
        runs = inputs.outcomes(sa, set_name, "alt_route")
        flags = [v for run in runs.values() for v in run.values()]
        if not flags:
            return head + [not_run(prof) + f" ({sa} predictions with resolved routes)"] + [NOT_REPORTED] * 3 + [
                not_run(prof)]
        iv = stats.binomial_ci(sum(flags), len(flags))
        seeds = "1 run" if len(runs) == 1 else f"{len(runs)} seeds pooled ({len(flags)} correct predictions)"
        return head + [fmt_ci(iv), NOT_REPORTED, NOT_REPORTED, seeds,
                       stats.interval_verdict(iv, c.paper_a / 100, c.paper_b / 100)]
    key = "tokens" if c.kind == "tokens" else "correct"
    sb = variant_stage(inputs, c.b, set_name)
    ra, rb = inputs.outcomes(sa, set_name, key), inputs.outcomes(sb, set_name, key)
    missing = [st for st, r in ((sa, ra), (sb, rb)) if not r]
    if missing:
        msg = not_run(prof) + f" (no per-question predictions for {', '.join(missing)})"
        return head + [msg] + [NOT_REPORTED] * 3 + [not_run(prof)]
    try:
        cmp = stats.compare(ra, rb, (sa, sb), binary=key == "correct", seed=cfg.seed)
    except stats.PairingError as e:
        inputs.problems.append(f"claims: {c.text} on {set_name}: {e}")
        return head + [f"cannot pair: {e}"] + [NOT_REPORTED] * 3 + ["not comparable"]
    scale, digits = (100.0, 1) if key == "correct" else (1.0, 1)
    this = f"{scale * cmp.a_mean:.{digits}f} vs {scale * cmp.b_mean:.{digits}f}"
    direction = -1 if c.kind == "tokens" else 1
    return head + [this, fmt_diff(cmp.diff, scale=scale, digits=digits), f"{fmt_p(cmp.p_value)} ({cmp.test})",
                   _seeds_cell(cmp, scale, digits), stats.verdict(cmp.diff, direction, cmp.p_value)]


def claim_sets(cfg: Config, inputs: ReportInputs) -> list[str]:
    """The evaluation sets with per-question predictions (configured order), else the primary set."""
    names = [s.name for s in cfg.eval.sets]
    found = {s for (_, s) in inputs.predictions()} | {s for (_, _, s) in inputs.seed_predictions()}
    sets = [n for n in names if n in found] + sorted(found - set(names))
    return sets or [primary_set(cfg, inputs)]


def table_claims(cfg: Config, inputs: ReportInputs, paper: dict[str, Any]) -> Table:
    prof = cfg.profile
    paper_n = int((paper.get("set_sizes") or {}).get(PAPER_SET, 1534))
    cols = ["Claim", "Measured on", "Paper (BIRD dev)", "Paper Δ [unpaired 95% CI]", "Paper gap vs noise",
            f"This run (profile {prof})", "Δ [95% CI]", "p (test)", "Seeds", "Verdict"]
    rows = [claim_row(c, cfg, inputs, s, paper_n) for s in claim_sets(cfg, inputs) for c in paper_claims(paper)]
    notes = ["Verdict: holds if this run's 95% CI of the difference excludes 0 on the paper's side and p < 0.05, "
             "reversed if both point the other way, else not distinguishable at this scale (alternative routes: "
             "holds if the share's CI lies inside the paper's range).",
             "EX in %, differences in points, paired by question id: bootstrap CI (10,000 resamples, seeded), exact "
             "McNemar p for one run; over several seeds the difference is the mean of the per-seed differences, "
             "its CI a bootstrap over questions of the seed-averaged differences and its p a sign-flip permutation "
             "test on them; the Seeds column adds each seed's difference and a t-test over seeds.",
             "Output length: retriever + generator tokens per question, RL minus SFT (negative = shorter).",
             f"Paper Δ: an unpaired CI at {paper_n:,} questions per system (the paper publishes no per-question "
             "results); a paired CI would be narrower."]
    return Table("claims", f"The paper's claims, measured with 95% CIs (profile {prof})", cols, rows, notes)


def build_tables(cfg: Config, inputs: ReportInputs, paper: dict[str, Any] | None = None) -> list[Table]:
    """Every table of the paper in order, the claims table last (it reads the others' helpers)."""
    from .inputs import load_paper_results
    from .tables import table_ablation, table_efficiency, table_hyperparameters, table_main, table_robustness

    paper = paper or load_paper_results()
    return [table_main(cfg, inputs, paper), table_efficiency(cfg, inputs, paper), table_robustness(cfg, inputs, paper),
            table_ablation(cfg, inputs, paper), table_hyperparameters(cfg, paper), table_claims(cfg, inputs, paper)]
