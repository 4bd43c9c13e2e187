"""The GRPO stage's starting pool (§4 step 5), by `grpo.pool_init`, and how gold enters it.

Modes: "sft_rollouts_plus_gold" (paper and tiny profiles) = the distilled SFT rollout counts plus
the gold SQL's column set at weight 0.5 for a question where no execution-correct rollout used
exactly that set (a set some rollout used keeps its count); "sft_rollouts" = the counts only;
"union" and "static_gold" as in `pool.py`; "authors_file" = the authors' released pool itself.
With `data.stage1_source: authors` every mode but "static_gold" reads the released pool.

The gold rule is read off the released `initial_pool.json` (`initial_pool.pool_statistics`): on the 40
released validation rows the gold set is present 40/40, at 0.5 on the 8 rows where it is not among
the rollout sets and at its integer rollout count on the other 32; 471 of the 2,953 questions hold
exactly one 0.5 weight, none two. A rollout-backed set (weight >= 1, decayed alike) therefore
always outweighs the seed: the gold set is a target only where no correct rollout set exists.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from ..authors.initial_pool import pool_from_release, read_pool
from ..authors.release import release_dir, release_names
from ..authors.release_files import index_names, pool_key, release_file
from ..config.paths import resolve
from ..roles.pool import ColumnSetPool
from ..data.task import Task

GOLD_SEED_WEIGHT = 0.5  # the weight the released pool gives a gold set no correct rollout used


def seed_gold(pool: ColumnSetPool, weight: float = GOLD_SEED_WEIGHT) -> tuple[ColumnSetPool, int]:
    """The released pool's construction: each question's gold column set enters with `weight`
    when no correct SFT rollout used it (a set already there keeps its count). Returns the new
    pool and how many questions were seeded. Only a never-visited pool can be seeded."""
    data = pool.to_dict()
    seeded = 0
    for qid, q in data["questions"].items():
        if q["visits"]:
            raise ValueError(f"pool: question {qid!r} was already visited; seed the gold set before training")
        gold = sorted(q["gold"])
        if gold and all(sorted(s) != gold for s, _ in q["sets"]):
            q["sets"].append([gold, float(weight)])
            seeded += 1
    return ColumnSetPool.from_dict(data, "pool", gamma=pool.gamma), seeded


def pool_questions(tasks: Sequence[Task], names_by_db: Mapping[str, list[str | None]] | None = None
               ) -> dict[str, tuple[str, list[str | None], frozenset[str]]]:
    """{pool key: (qid, index -> name, gold set)}; indices from the release's db_info where given,
    else from the task's schema in its own order (`index_names`)."""
    names_by_db = names_by_db or {}
    return {pool_key(t.example.db_id, t.example.question):
            (t.qid, names_by_db.get(t.example.db_id) or index_names(t.schema), t.gold_columns or frozenset())
            for t in tasks}


def initial_pool(cfg: Any, paths: Any, tasks: Sequence[Task]) -> ColumnSetPool:
    """The GRPO stage's starting pool for `tasks` (train and validation), by `grpo.pool_init`:
    the authors' file ("authors_file", or any mode but "static_gold" when data.stage1_source is
    "authors"), the distilled pool with the gold set seeded ("sft_rollouts_plus_gold"), or the
    distilled pool in the kit's other modes."""
    mode = cfg.grpo.pool_init
    from_release = mode == "authors_file" or (cfg.data.stage1_source == "authors" and mode != "static_gold")
    if from_release:
        if mode == "union":
            raise ValueError("grpo.pool_init 'union' needs per-rollout counts; the authors' pool holds "
                             "rescaled weights: use 'authors_file' (or 'static_gold') with their data")
        path = resolve(cfg.grpo.authors_pool_file) if cfg.grpo.authors_pool_file else \
            release_file(release_dir(cfg), "pool")
        raw, report = read_pool(path)
        names = release_names(cfg) if cfg.data.stage1_source == "authors" else None
        pool, counts = pool_from_release(raw, pool_questions(tasks, names), cfg.grpo.gamma)
        print(f"[authors] {report.summary()}; {counts}")
        if not counts.get("questions_loaded"):
            raise ValueError(f"{path}: none of the {len(tasks)} RL questions has an entry in the authors' pool "
                             "(keys are 'db_id||question'); train on their RL rows (data.stage1_source: authors)")
        return pool
    if cfg.data.stage1_source == "authors":  # static_gold on the released questions: only the gold sets matter
        gold = {t.qid: t.gold_columns or () for t in tasks}
        return ColumnSetPool.from_rollouts({}, gold, gamma=cfg.grpo.gamma, mode="static_gold")
    plus_gold = mode == "sft_rollouts_plus_gold"
    pool = ColumnSetPool.load(Path(paths.rl_data) / "pool.json", mode="sft_rollouts" if plus_gold else mode,
                              gamma=cfg.grpo.gamma)
    if plus_gold:
        pool, seeded = seed_gold(pool)
        print(f"[pool] gold set seeded at {GOLD_SEED_WEIGHT} for {seeded} of {len(pool)} questions")
    return pool
