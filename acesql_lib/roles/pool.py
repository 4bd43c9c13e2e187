"""The empirical column-set pool (§4 step 5): the retriever's moving target.

Per question the pool maps a column set (frozenset of canonical "table.column") to a weight.
On each visit of a question (once per epoch) all its weights are multiplied by gamma = 0.5, the
targets are read (every set tied at the maximum weight), and only then are this step's
execution-correct generator rollouts added, +1 for each rollout's column set.

Readings of the spec (documented choices):
- "The gold SQL's set is never added": the gold SQL is the reference the rollouts are executed
  against, not a rollout, so its own column set is neither seeded at initialisation nor added on
  a visit. A generator rollout that matches and happens to use exactly the gold columns IS added,
  like any other matching rollout: `add_matches` has no special case for gold. The gold set is
  stored only for statistics and for the static-gold ablation.
- Initialisation "sft_rollouts" (default, §4 step 5): weight = number of execution-correct SFT
  distillation rollouts whose SQL used exactly that set.
- Initialisation "union" (UNKNOWN: the paper's summary speaks of a "high-recall union"): one
  initial set per question, the union of the column sets of all its correct SFT rollouts, with
  weight = number of those rollouts. The union covers every route the generator has walked
  (high recall); giving it the same total mass as the default keeps the two initialisations
  equally strong against fresh rollouts, so an ablation compares their shape only. The gold set
  is not part of the union (it is never added).
- "static_gold" (ablation of §6): the target is always the gold set; visits do not decay and
  matches are not added.
- A column set that is empty (a matching SQL that reads no column, e.g. `SELECT 1`) is not added:
  the retriever reward requires a non-empty selection, so such a target could never be reached.

- Which rollouts add (`pool_additions`, `grpo.pool_add_gate`): "format" (paper profile, the
  authors' RL/rewards/joint_reward.py) adds a matching rollout's set only when its output passes
  the generator reward's format gate (think block, sql block after the last `</think>`); "match"
  (kit) adds every execution match, even one whose reward is 0 for its format.

Ties are returned in a fixed order (smaller sets first, then by sorted names), so runs are
deterministic.
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterable, Mapping

POOL_MODES = ("sft_rollouts", "union", "static_gold")
POOL_FORMAT_VERSION = 1

ColumnSet = frozenset[str]


def _set_key(s: ColumnSet) -> tuple[int, list[str]]:
    return (len(s), sorted(s))


def pool_additions(parses: Iterable[Any], matches: Iterable[bool], sets: Iterable[Iterable[str] | None],
                   gate: str) -> list[ColumnSet]:
    """The column sets one visit adds: one per matching generator rollout whose set resolved and
    is non-empty; with `gate` (`grpo.pool_add_gate`, its choices declared in config.PoolAddGate) "format" only
    rollouts whose parse passes the format gate (`format_ok`), with "match" every one."""
    if gate == "format":
        passes = lambda parse: parse.format_ok  # noqa: E731
    elif gate == "match":
        passes = lambda parse: True  # noqa: E731
    else:
        raise ValueError(f"grpo.pool_add_gate: no pool add gate {gate!r} (config.PoolAddGate)")
    out = []
    for parse, match, s in zip(parses, matches, sets):
        if match and s and passes(parse):
            out.append(frozenset(s))
    return out


TIE_ABS = 1e-9  # weights within this of the maximum are tied targets (authors' joint_reward.py)


class ColumnSetPool:
    def __init__(self, gamma: float = 0.5, mode: str = "sft_rollouts") -> None:
        if mode not in POOL_MODES:
            raise ValueError(f"pool mode must be one of {POOL_MODES}, got {mode!r}")
        if not 0 < gamma <= 1:
            raise ValueError(f"pool gamma must be in (0, 1], got {gamma}")
        self.gamma = float(gamma)
        self.mode = mode
        self._weights: dict[str, dict[ColumnSet, float]] = {}
        self._gold: dict[str, ColumnSet] = {}
        self._visits: dict[str, int] = {}

    # construction ------------------------------------------------------------------------------
    @classmethod
    def from_rollouts(cls, correct_sets: Mapping[str, Iterable[Iterable[str]]],
                      gold: Mapping[str, Iterable[str]] | None = None, gamma: float = 0.5,
                      mode: str = "sft_rollouts") -> "ColumnSetPool":
        """A pool from the SFT stage: per question id, the column set of each execution-correct
        rollout (one entry per rollout, repeats allowed), and the gold SQL's set."""
        pool = cls(gamma, mode)
        gold = gold or {}
        for qid in sorted(set(correct_sets) | set(gold)):
            pool.add_question(qid, gold.get(qid, ()), correct_sets.get(qid, ()))
        return pool

    def add_question(self, qid: str, gold: Iterable[str] = (), correct_sets: Iterable[Iterable[str]] = ()) -> None:
        """Initialise one question according to the pool's mode (see module docstring)."""
        qid = str(qid)
        if qid in self._weights:
            raise ValueError(f"pool: question {qid!r} is already initialised")
        self._gold[qid] = frozenset(gold)
        self._visits[qid] = 0
        sets = [frozenset(s) for s in correct_sets]
        sets = [s for s in sets if s]
        weights: dict[ColumnSet, float] = {}
        if self.mode == "sft_rollouts":
            for s in sets:
                weights[s] = weights.get(s, 0.0) + 1.0
        elif self.mode == "union" and sets:
            weights[frozenset().union(*sets)] = float(len(sets))
        self._weights[qid] = weights

    def copy_questions(self, other: "ColumnSetPool", qids: Iterable[str]) -> None:
        """Take questions' entries (weights, gold set, visits) from another pool as they are."""
        for qid in map(str, qids):
            if qid in self._weights:
                raise ValueError(f"pool: question {qid!r} is already initialised")
            if qid not in other._weights:
                raise KeyError(f"pool: question {qid!r} is not in the pool to copy from")
            self._weights[qid] = dict(other._weights[qid])
            self._gold[qid] = other._gold[qid]
            self._visits[qid] = other._visits[qid]

    def with_mode(self, mode: str) -> "ColumnSetPool":
        """The same initial pool under another initialisation (for ablations that load the pool
        the distillation stage wrote). Only a pool in "sft_rollouts" mode that was never visited
        holds the per-rollout counts needed for the conversion."""
        if mode == self.mode:
            return self
        if self.mode != "sft_rollouts" or any(self._visits.values()):
            raise ValueError(f"pool: can only convert a never-visited 'sft_rollouts' pool, this one is {self.mode!r}"
                             f" with {sum(self._visits.values())} visits")
        out = ColumnSetPool(self.gamma, mode)
        for qid, weights in self._weights.items():
            sets = [s for s, w in weights.items() for _ in range(int(w))]
            out.add_question(qid, self._gold[qid], sets)
        return out

    # the two operations of a training step ------------------------------------------------------
    def visit(self, qid: str) -> list[ColumnSet]:
        """Decay the question's weights by gamma and return its targets (before this step's adds)."""
        qid = str(qid)
        weights = self._weights.setdefault(qid, {})
        self._gold.setdefault(qid, frozenset())
        self._visits[qid] = self._visits.get(qid, 0) + 1
        if self.mode == "static_gold":  # the ablation's target never moves
            return self.targets(qid)
        for s in weights:
            weights[s] *= self.gamma
        return self.targets(qid)

    def add_matches(self, qid: str, sets: Iterable[Iterable[str]]) -> int:
        """+1 for the column set of each matching rollout; returns how many were added."""
        if self.mode == "static_gold":
            return 0
        qid = str(qid)
        weights = self._weights.setdefault(qid, {})
        self._gold.setdefault(qid, frozenset())
        self._visits.setdefault(qid, 0)
        added = 0
        for s in sets:
            s = frozenset(s)
            if s:
                weights[s] = weights.get(s, 0.0) + 1.0
                added += 1
        return added

    # reading ------------------------------------------------------------------------------------
    def targets(self, qid: str) -> list[ColumnSet]:
        """Every set tied at the maximum weight, without decaying (empty if none)."""
        qid = str(qid)
        if self.mode == "static_gold":
            gold = self._gold.get(qid, frozenset())
            return [gold] if gold else []
        weights = {s: w for s, w in self._weights.get(qid, {}).items() if w > 0}
        if not weights:
            return []
        top = max(weights.values())
        # The authors' absolute tie (RL/rewards/joint_reward.py, _target_sets_from_pool): within 1e-9 of the
        # top. It also absorbs last-bit differences of equal histories; after ~30 decays without additions
        # every remaining set is within 1e-9 and all of them are targets, as in the authors' run.
        return sorted((s for s, w in weights.items() if abs(w - top) < TIE_ABS), key=_set_key)

    def weights(self, qid: str) -> dict[ColumnSet, float]:
        return dict(self._weights.get(str(qid), {}))

    def gold(self, qid: str) -> ColumnSet:
        return self._gold.get(str(qid), frozenset())

    def question_ids(self) -> list[str]:
        return sorted(self._gold)

    def __len__(self) -> int:
        return len(self._gold)

    def stats(self) -> dict[str, float]:
        """Pool statistics logged per step (§6 figures): sets per question, share of questions
        whose targets leave out the gold set, questions with no target. Keys carry no prefix:
        the caller logs them under its own (e.g. "pool/")."""
        qids = self.question_ids()
        n_sets = [sum(1 for w in self._weights.get(q, {}).values() if w > 0) for q in qids]
        differ = with_target = no_target = 0
        for q in qids:
            tg = self.targets(q)
            if not tg:
                no_target += 1
                continue
            with_target += 1
            differ += self._gold[q] not in tg
        return {
            "questions": float(len(qids)),
            "sets_per_question_mean": sum(n_sets) / len(n_sets) if n_sets else 0.0,
            "sets_per_question_max": float(max(n_sets, default=0)),
            "target_differs_from_gold_share": differ / with_target if with_target else 0.0,
            "questions_without_target": float(no_target),
        }

    # persistence --------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        questions = {}
        for qid in self.question_ids():
            items = sorted(self._weights.get(qid, {}).items(), key=lambda kv: (-kv[1], _set_key(kv[0])))
            questions[qid] = {"gold": sorted(self._gold[qid]), "visits": self._visits.get(qid, 0),
                              "sets": [[sorted(s), w] for s, w in items]}
        # No gamma: the decay is an RL setting (`grpo.gamma`), given again by whoever loads the pool.
        return {"version": POOL_FORMAT_VERSION, "mode": self.mode, "questions": questions}

    @classmethod
    def from_dict(cls, data: Any, source: str = "pool", *, gamma: float) -> "ColumnSetPool":
        """A pool from `to_dict`'s form; `gamma` comes from the GRPO config (a file's own 'gamma',
        written by older versions, is ignored)."""
        if not isinstance(data, dict):
            raise ValueError(f"{source}: expected a JSON object, got {type(data).__name__}")
        if data.get("version") != POOL_FORMAT_VERSION:
            raise ValueError(f"{source}: field 'version' must be {POOL_FORMAT_VERSION}, got {data.get('version')!r}")
        mode = data.get("mode", "sft_rollouts")
        try:
            pool = cls(float(gamma), mode)
        except ValueError as e:
            raise ValueError(f"{source}: {e}") from None
        questions = data.get("questions")
        if not isinstance(questions, dict):
            raise ValueError(f"{source}: field 'questions' must be an object keyed by question id")
        for qid, q in questions.items():
            where = f"{source}: question {qid!r}"
            if not isinstance(q, dict) or not isinstance(q.get("gold", []), list) \
                    or not isinstance(q.get("sets", []), list):
                raise ValueError(f"{where}: expected {{'gold': [...], 'sets': [[[cols], weight], ...]}}")
            weights: dict[ColumnSet, float] = {}
            for i, item in enumerate(q.get("sets", [])):
                ok = (isinstance(item, list) and len(item) == 2 and isinstance(item[0], list)
                      and all(isinstance(c, str) for c in item[0])
                      and isinstance(item[1], (int, float)) and not isinstance(item[1], bool) and item[1] >= 0)
                if not ok:
                    raise ValueError(f"{where}: sets[{i}] must be [[column names], weight >= 0], got {item!r}")
                s = frozenset(item[0])
                if s in weights:
                    raise ValueError(f"{where}: sets[{i}] repeats an earlier set")
                weights[s] = float(item[1])
            visits = q.get("visits", 0)
            if not isinstance(visits, int) or visits < 0:
                raise ValueError(f"{where}: field 'visits' must be an integer >= 0, got {visits!r}")
            pool._gold[str(qid)] = frozenset(str(c) for c in q.get("gold", []))
            pool._weights[str(qid)] = weights
            pool._visits[str(qid)] = visits
        return pool

    def save(self, path: str | Path) -> None:
        """Write pool.json atomically (temporary file in the same folder, then rename)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(self.to_dict(), f, indent=1)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    @classmethod
    def load(cls, path: str | Path, mode: str | None = None, *, gamma: float) -> "ColumnSetPool":
        """Read pool.json with the run's `grpo.gamma`; `mode` converts a fresh SFT-rollout pool to
        another initialisation."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"pool file not found: {path}")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: not valid JSON: {e}") from None
        pool = cls.from_dict(data, str(path), gamma=gamma)
        return pool.with_mode(mode) if mode else pool
