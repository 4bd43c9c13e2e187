"""What a GRPO run logs: each step's metrics (TRL's names, per role), the run's `metrics.jsonl` and the tracker
that gets the same records (`grpo.report_to`), and the learning check's reading of that log (`run_summary`).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import torch

from ..data.routes import rollout_route_records, route_share
from ..executor import VALID_STATUSES
from .rollouts import QuestionRollout
from .tracking import Tracker, open_tracker

METRICS_LOG = "metrics.jsonl"  # in the run folder, one line per step


def role_metrics(role: str, rewards: torch.Tensor, rollouts: Sequence[QuestionRollout],
                 loss_stats: dict[str, float]) -> dict[str, float]:
    """TRL's metric names (reward, reward_std, frac_reward_zero_std, completion_length, kl), per role; `loss_stats`
    is the role's loss, KL and clipped share (`JointGRPO._backward`)."""
    samples = [r.retriever if role == "retriever" else r.generator for r in rollouts]
    lengths = [c.n_tokens for s in samples for c in s.completions]
    parses = [p for s in samples for p in s.parses]
    return {
        f"reward/{role}": float(rewards.mean()) if rewards.numel() else 0.0,
        f"reward_std/{role}": float(rewards.std(dim=1, correction=1).mean()) if rewards.shape[1] > 1 else 0.0,
        f"frac_reward_zero_std/{role}": float((rewards.std(dim=1, correction=1) < 1e-8).float().mean())
        if rewards.shape[1] > 1 else 1.0,
        f"completion_length/{role}": sum(lengths) / max(len(lengths), 1),
        f"truncated/{role}": sum(c.truncated for s in samples for c in s.completions) / max(len(lengths), 1),
        f"well_formed/{role}": sum(p.well_formed for p in parses) / max(len(parses), 1),
        f"loss/{role}": loss_stats["loss"], f"kl/{role}": loss_stats["kl"], f"clip_ratio/{role}": loss_stats["clipped"],
    }


def rollout_metrics(rollouts: Sequence[QuestionRollout]) -> dict[str, float]:
    """Execution (match and error rates), the routes of the correct SQL, and the voted schema's size."""
    matches = sum(r.n_correct for r in rollouts)
    n = sum(len(r.matches) for r in rollouts)
    errors = sum(1 for r in rollouts for st in r.exec_status if st not in VALID_STATUSES)
    return {"exec/match_rate": matches / max(n, 1), "exec/error_rate": errors / max(n, 1),
            "route/alt_share": route_share(rollout_route_records(rollouts))["share"],  # NaN: no correct set resolves
            "vote/columns": sum(len(r.selected) for r in rollouts) / max(len(rollouts), 1)}


def pcgrad_rows(model: torch.nn.Module, stats: Any) -> list[dict[str, Any]]:
    """The per-tensor PCGrad figures of a step (`PCGradStats.tensors`, when recorded), each named by its parameter."""
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    return [{"tensor": names[t.index] if t.index < len(names) else str(t.index), **t.as_row()} for t in stats.tensors]


class MetricsLog:
    """A run's `metrics.jsonl` and its tracker (`grpo.report_to`, opened at the first record, with the same names);
    one writer, the main process."""

    def __init__(self, out: Path, report_to: str) -> None:
        self.out, self.report_to = Path(out), report_to
        self.path = self.out / METRICS_LOG
        self._tracker: Tracker | None = None

    def write(self, metrics: dict[str, Any], step: int) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as f:
            f.write(json.dumps(metrics) + "\n")
        if self._tracker is None:
            self._tracker = open_tracker(self.report_to, self.out / "runs", run_name=self.out.name,
                                         setting="grpo.report_to")
        self._tracker.log(metrics, step)

    def close(self) -> None:
        if self._tracker is not None:
            self._tracker.close()
            self._tracker = None

    def keep_until(self, step: int) -> None:
        """After a resume: drop the lines of steps that the checkpoint does not contain."""
        if not self.path.exists():
            return
        keep = [ln for ln in self.path.read_text().splitlines() if ln.strip() and json.loads(ln).get("step", 0) <= step]
        self.path.write_text("".join(ln + "\n" for ln in keep))


def run_summary(log_path: str | Path) -> dict[str, Any]:
    """The learning check's reading of a run's metrics.jsonl: rewards over the first and last third
    of the steps, validation before any update and at every check, the pool and PCGrad."""
    rows = [json.loads(line) for line in Path(log_path).read_text().splitlines() if line.strip()]
    if not rows:
        raise ValueError(f"{log_path}: no logged steps")
    k = max(1, len(rows) // 3)

    def mean(key: str, part: list[dict]) -> float:
        return sum(r[key] for r in part) / len(part)

    checks = [r for r in rows if "val/ex" in r]
    return {
        "steps": max(r["step"] for r in rows),
        "reward_generator_first_third": mean("reward/generator", rows[:k]),
        "reward_generator_last_third": mean("reward/generator", rows[-k:]),
        "reward_retriever_first_third": mean("reward/retriever", rows[:k]),
        "reward_retriever_last_third": mean("reward/retriever", rows[-k:]),
        "val_ex_start": next((r["val/ex_start"] for r in rows if "val/ex_start" in r), None),
        "val_ex": [r["val/ex"] for r in checks], "val_ex_steps": [r["step"] for r in checks],
        "pool_target_differs_from_gold_share": rows[-1]["pool/target_differs_from_gold_share"],
        "pcgrad_conflict_ratio_mean": mean("pcgrad/conflict_ratio", rows),
    }
