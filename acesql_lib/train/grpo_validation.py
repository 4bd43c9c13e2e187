"""GRPO's validation (§4.11): how its rollouts are scored, and the validation before any update kept for reuse.

`JointGRPO.validate` rolls out the held-out questions (every `grpo.val_every` steps, at `grpo.val_temperature`);
`validation_scores` and `validation_metrics` turn its rollouts into val/ex and val/retriever_exact. The validation
before step 1 depends only on the starting model, the questions, the pool's targets, the settings and the code
(`start_key`), so the ablation variants, which start alike, read it back from one file (`SavedStartValidation`)
instead of rolling out again.
"""
from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from ..config.settings import Config
from ..data.task import Task
from ..roles.pool import ColumnSetPool
from ..runtime.reuse_keys import engine_key, settings_hash
from .rollouts import QuestionRollout, RolloutSpec, SamplingSpec

# where a validation's numbers come from (`start_key`): its key hashes these modules and every module they import
# (reuse_keys.imported_modules): the scoring here, the trainer that rolls it out, and the building of the policy
# and the engine it samples with
START_VALIDATION_CODE = ("train.grpo_validation", "train.grpo", "train.grpo_run")
START_VALIDATION_DIR = "start_validation"  # beside the run folders of a profile's variants


def validation_scores(rollouts: Sequence[QuestionRollout], pool: ColumnSetPool) -> list[tuple[float, float]]:
    """Per question: the share of its generator samples that match, and the share of its retriever samples whose
    column set is one of the pool's targets (its gold set when it has none; the pool is only read)."""
    def exact(parse: Any, r: QuestionRollout) -> int:
        return int(bool(parse.columns) and parse.columns in (pool.targets(r.task.qid) or [r.task.gold_columns]))

    return [(r.n_correct / len(r.generator.parses),
             sum(exact(p, r) for p in r.retriever.parses) / len(r.retriever.parses)) for r in rollouts]


def validation_metrics(scores: Sequence[tuple[float, float]]) -> dict[str, float]:
    """The mean over questions: EX in percent, the retriever's exact-match share a fraction (README, "Units")."""
    n = max(len(scores), 1)
    return {"val/ex": 100.0 * sum(a for a, _ in scores) / n, "val/retriever_exact": sum(b for _, b in scores) / n}


def start_key(cfg: Config, rules: RolloutSpec, questions: Sequence[Task], tokenizer: Any, pool: ColumnSetPool,
              policy_source: str | None, processes: int) -> dict[str, Any] | None:
    """Everything the validation before any update depends on, or None where it is not read back (switched
    off, several processes, a policy of unknown source): the SFT model (`models.model_tag`; fresh LoRA adapters
    add nothing yet), its settings and the engine's, the validation's sampling and judging rules, every
    question's retriever prompt (schema text, values, template), gold SQL and database file, the pool's
    targets for the questions, and the code."""
    if not cfg.grpo.reuse_start_validation or processes != 1 or not policy_source:
        return None
    from ..models.loading import model_tag
    from ..runtime.reuse_keys import code_hash

    spec = SamplingSpec.validation(cfg)
    rows = []
    for t in questions:
        db = Path(t.example.db_path)
        st = db.stat() if db.is_file() else None
        rows.append([t.qid, spec.retriever_prompt(t, tokenizer),
                     t.example.sql, str(db), st and st.st_size, st and st.st_mtime_ns,
                     sorted(sorted(s) for s in pool.targets(t.qid) or [])])
    return {"model": model_tag(policy_source), "settings": dataclasses.asdict(cfg.model),
            "engine": engine_key(cfg.engine), "sampling": dataclasses.asdict(spec),
            "rules": dataclasses.asdict(rules), "questions": settings_hash(rows),
            "code": code_hash(*START_VALIDATION_CODE)}


@dataclass(frozen=True)
class SavedStartValidation:
    """The file that holds the validation before any update for one `start_key` (none when the key is None),
    in `folder/start_validation/`, where every variant of the profile looks."""

    folder: Path
    key: dict[str, Any] | None

    @property
    def path(self) -> Path | None:
        return self.folder / START_VALIDATION_DIR / f"{settings_hash(self.key)}.json" if self.key else None

    def _key_text(self) -> str:
        return json.dumps(self.key, sort_keys=True, default=str)

    def read(self) -> dict[str, float] | None:
        """The saved metrics of this key; None when there is none, or it is half written or of another key."""
        if self.path is None:
            return None
        try:
            stored = json.loads(self.path.read_text())
        except (OSError, json.JSONDecodeError):
            return None
        if stored.get("key") == self._key_text() and isinstance(stored.get("metrics"), dict):
            return stored["metrics"]
        return None

    def write(self, metrics: dict[str, float]) -> None:
        """Saved whole or not at all (one writer: the main process)."""
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f"{self.path.name}.tmp-{os.getpid()}")
        tmp.write_text(json.dumps({"key": self._key_text(), "metrics": metrics}, sort_keys=True))
        tmp.replace(self.path)
