"""The reports tests' stage outputs (test_reports, test_readme_results): what notebooks 02, 04, 05 and 06
of the tiny profile write, synthetic but plausible, written through the producers' own functions
(`records.write_outputs`, `metrics.summarize`)."""
from __future__ import annotations

import json
from pathlib import Path

from acesql_lib import reports
from acesql_lib.evaluation.metrics import summarize
from acesql_lib.evaluation.records import EvalResult, write_outputs

N_DEV = 200  # questions in the fixture's dev set
# Per stage/variant: (k, offset) = questions (i - offset) % N_DEV < k are correct
CORRECT = {"base": (45, 0), "sft": (84, 0), "rl": (95, 0), "rl_full": (95, 0), "rl_no_pcgrad": (95, 10),
           "rl_static_gold": (120, 0)}
RL_EX, SFT_EX, BASE_EX = 47.5, 42.0, 22.5


def question_tokens(stage: str, i: int) -> tuple[int, int]:
    """(retriever, generator) tokens of question i: RL writes shorter outputs than SFT on every question."""
    return (40 + i % 7, 200 + i % 13) if stage in ("base", "sft") else (30 + i % 5, 120 + i % 11)


def eval_records(stage: str, n_exact: int = 0, n_alt: int = 0) -> list[dict]:
    """Per-question records in `evaluate`'s format; the first n_exact retrieve exactly the gold set and
    the first n_alt correct predictions read another column set than the gold SQL."""
    k, off = CORRECT[stage]
    rows, alt_left = [], n_alt
    for i in range(N_DEV):
        correct = (i - off) % N_DEV < k
        alt = correct and alt_left > 0
        alt_left -= alt
        r_tok, g_tok = question_tokens(stage, i)
        gold = ["t.a", "t.b"]
        rows.append({
            "id": f"dev_{i:03d}", "db_id": "db", "difficulty": ("simple", "moderate", "challenging")[i % 3],
            "question": f"q{i}", "retrieved_columns": gold if i < n_exact else gold + ["t.c"],
            "pred_sql": "SELECT a FROM t", "correct": correct, "exec_status": "ok", "gold_sql": "SELECT a FROM t",
            "retriever_tokens": r_tok, "generator_tokens": g_tok, "retriever_truncated": False,
            "generator_truncated": False, "retriever_well_formed": True, "generator_well_formed": True,
            "gold_columns": gold, "pred_columns": (["t.c"] if alt else gold) if correct else None,
            "alt_route": (bool(alt) if correct else None), "gold_schema_sql": "SELECT a FROM t",
            "gold_schema_correct": correct or i % 2 == 0})
    return rows


def write_eval(run_dir: Path, stage: str, set_name: str = "tiny_dev", **kw) -> dict:
    """One evaluation's files written by `records.write_outputs`; returns its metrics (`summarize`)."""
    records = eval_records(stage, **kw)
    metrics = {"stage": stage, "set": set_name, "mode": "set", **summarize(records), "seconds": 1.0}
    write_outputs(EvalResult(metrics, records, run_dir / "eval" / stage / set_name), set_name)
    return metrics


def grpo_step_record(step: int, variant: str) -> dict:
    rec = {"step": step, "reward/retriever": 0.1 + 0.04 * step, "reward/generator": 0.3 + 0.03 * step,
           "reward_std/retriever": 0.2, "reward_std/generator": 0.25, "frac_reward_zero_std/retriever": 0.5,
           "frac_reward_zero_std/generator": 0.4, "completion_length/retriever": 60 - step,
           "completion_length/generator": 90 - 2 * step, "kl/retriever": 0.001 * step, "kl/generator": 0.002 * step,
           "loss/retriever": 0.01, "loss/generator": 0.02, "w_gen": min(1.0, step / 3), "grad_norm": 0.8,
           "pool/sets_per_question_mean": 1.5 + 0.1 * step, "pool/target_differs_from_gold_share": 0.2 + 0.01 * step,
           "route/alt_share": 0.25, "lr": 1e-4}
    if variant == "full":  # the w/o PCGrad variant logs no projection statistics
        rec.update({"pcgrad/conflict_ratio": 0.3, "pcgrad/cosine": -0.05 + 0.01 * step, "pcgrad/norm_ret": 1.2,
                    "pcgrad/norm_gen": 0.9})
    if step % 4 == 0 or step == 10:
        rec.update({"val/ex": 30.0 + step, "val/retriever_exact": 0.2 + step / 100})
    return rec


def write_inputs(root: Path) -> reports.ReportDirs:
    """What notebooks 02, 04, 05 and 06 of the tiny profile write, through the producers' own functions."""
    dirs = reports.ReportDirs(root / "reports" / "metrics", root / "runs", root / "reports" / "tables",
                              root / "reports" / "figures")
    dirs.metrics.mkdir(parents=True)
    # rl: 1 of 200 questions retrieves the gold set exactly (0.5%), 1 of 95 correct on another route
    stages = {"base": write_eval(dirs.run, "base", n_alt=3), "sft": write_eval(dirs.run, "sft", n_exact=30),
              "rl": write_eval(dirs.run, "rl", n_exact=1, n_alt=1)}
    evaluation = {"profile": "tiny", "notebook": "05_evaluation", "stages": {k: {"tiny_dev": m} for k, m in stages.items()}}
    (dirs.metrics / "05_evaluation.json").write_text(json.dumps(evaluation))
    variants = {v: write_eval(dirs.run, f"rl_{v}", n_exact=1, n_alt=1) for v in ("full", "no_pcgrad", "static_gold")}
    ablations = {"profile": "tiny", "notebook": "06_ablations", "variants": {v: {"tiny_dev": m} for v, m in variants.items()}}
    (dirs.metrics / "06_ablations.json").write_text(json.dumps(ablations))
    (dirs.metrics / "02_self_distillation.json").write_text(json.dumps(  # distill writes shares as fractions
        {"alt_route_share": 0.274, "pass_rate_hist": {str(k): 40 - 4 * k for k in range(9)}}))
    for variant in ("full", "no_pcgrad", "full.stale-1"):  # a run set aside (other settings) is not plotted
        log = dirs.run / "grpo" / variant / "metrics.jsonl"
        log.parent.mkdir(parents=True)
        lines = [json.dumps(grpo_step_record(s, variant)) for s in range(1, 11)]
        if variant == "full":
            lines += ["{not json", json.dumps({"reward/retriever": 0.5})]  # one malformed line, one without a step
        log.write_text("\n".join(lines) + "\n")
    return dirs
