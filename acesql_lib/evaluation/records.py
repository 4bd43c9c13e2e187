"""What one evaluation leaves: its per-question records and metrics (`EvalResult`), EX by difficulty, and its
files (predictions.jsonl, the official BIRD file, metrics.json). Shared by the kit's evaluation (`evaluate`) and
the released checkpoints' (`baselines`)."""
from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..executor import write_bird_predictions

DIFFICULTY_ORDER = ("simple", "moderate", "challenging")  # BIRD's levels first, others after in sorted order


@dataclass
class EvalResult:
    metrics: dict[str, Any]
    records: list[dict[str, Any]]
    out_dir: Path | None = None
    files: dict[str, Path] = field(default_factory=dict)

    @property
    def ex(self) -> float:
        return self.metrics["ex"]


def _pct(hits: Iterable[bool]) -> tuple[float, int]:
    hits = [bool(h) for h in hits]
    return (100.0 * sum(hits) / len(hits) if hits else 0.0), len(hits)


def ex_by_difficulty(records: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """{"overall": {"ex": %, "n": n}, "<level>": {...}} over every level present in the records."""
    out = {}
    ex, n = _pct(r["correct"] for r in records)
    out["overall"] = {"ex": ex, "n": n}
    levels = {str(r.get("difficulty") or "") for r in records} - {""}
    for level in [lv for lv in DIFFICULTY_ORDER if lv in levels] + sorted(levels - set(DIFFICULTY_ORDER)):
        ex, n = _pct(r["correct"] for r in records if r.get("difficulty") == level)
        out[level] = {"ex": ex, "n": n}
    return out


def write_outputs(result: EvalResult, set_name: str) -> dict[str, Path]:
    """predictions.jsonl (per question), predict_<set>.json (official BIRD format), metrics.json."""
    out = result.out_dir
    out.mkdir(parents=True, exist_ok=True)
    files = {"predictions": out / "predictions.jsonl", "bird": out / f"predict_{set_name}.json",
             "metrics": out / "metrics.json"}
    with files["predictions"].open("w", encoding="utf-8") as f:
        for r in result.records:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    write_bird_predictions(files["bird"], [r["pred_sql"] for r in result.records], [r["db_id"] for r in result.records])
    files["metrics"].write_text(json.dumps(result.metrics, indent=2, sort_keys=True) + "\n")
    return files
