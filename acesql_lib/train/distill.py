"""Paired self-distillation (§3.2) and RL data selection (§3.4).

The base model plays both roles on each filtered question: n retriever samples, a majority vote,
N generator samples on the voted schema, execution against the gold. From the correct rollouts
come (1) SFT samples for both roles, (2) the initial column-set pool, (3) per-question pass counts,
which choose the RL questions (neither trivial nor hopeless) and a held-out validation split.

Distillation writes one shard per `distill.shard_size` questions as it goes; a rerun skips the
shards already on disk, so a killed run loses at most one shard.
"""
from __future__ import annotations

import dataclasses
import json
import random
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from ..runtime.progress import tqdm

from ..config.settings import Config
from ..runtime.reuse_keys import settings_hash
from ..data.datasets import Example
from ..executor import execute
from ..roles.pool import ColumnSetPool
from ..roles.answers import parse_think
from ..roles.prompts import generator_messages, retriever_messages, retriever_target
from .rollouts import QuestionRollout, RolloutSpec, SamplingSpec, rollout
from ..data.task import Task, build_tasks
from ..data.routes import route_share
from ..data.schema import Schema
from ..runtime.timing import PHASES_LOG, append_phases, totals


def usable(tasks: Sequence[Task], timeout_s: float) -> tuple[list[Task], Counter]:
    """Drop (and count) questions whose database is missing or whose gold SQL fails or is unresolvable."""
    kept, skipped = [], Counter()
    for t in tasks:
        if not Path(t.example.db_path).is_file():
            skipped["missing database"] += 1
        elif execute(t.example.db_path, t.example.sql, timeout_s=timeout_s).status != "ok":
            skipped["gold fails"] += 1
        elif not t.gold_columns:
            skipped["gold column set unresolvable"] += 1
        else:
            kept.append(t)
    return kept, skipped


# ---------------------------------------------------------------------------------------------
# Distillation with shards


def _record(r: QuestionRollout) -> dict[str, Any]:
    return {
        "qid": r.task.qid,
        "gold_columns": sorted(r.task.gold_columns or ()),
        "selected": sorted(r.selected),
        "retriever": [{"text": c.text, "columns": sorted(p.columns), "n_tokens": c.n_tokens, "well_formed": p.well_formed}
                      for c, p in zip(r.retriever.completions, r.retriever.parses)],
        "generator": [{"text": c.text, "sql": p.sql, "n_tokens": c.n_tokens, "well_formed": p.well_formed,
                       "format_ok": p.format_ok, "match": m, "columns": sorted(s) if s is not None else None}
                      for c, p, m, s in zip(r.generator.completions, r.generator.parses, r.matches, r.match_sets)],
    }


def shard_settings(cfg: Config, model: str = "") -> dict[str, Any]:
    """What shapes a shard's rollouts; shards live in a folder named after its hash."""
    d = cfg.distill
    sampling = dataclasses.asdict(SamplingSpec.distill(cfg))
    sampling["seed"] = cfg.seed  # the run's seed: each shard derives its own from it (SamplingSpec.distill)
    keys = ("vote_threshold", "compare_mode", "exec_timeout_s", "shard_size")
    spec = RolloutSpec.distill(cfg)  # the rules stage 1 judges by are GRPO's (run_distillation)
    rules = {k: getattr(spec, k) for k in RolloutSpec.JUDGING}
    return {**sampling, **{k: getattr(d, k) for k in keys}, "model": model, "rules": rules}


def run_distillation(cfg: Config, tasks: Sequence[Task], engine: Any, tokenizer: Any, out_dir: str | Path,
                     progress: bool = True, model_tag: str = "") -> list[dict[str, Any]]:
    """Roll out every task in shards under `out_dir/shards/<settings hash>/`; finished shards are read,
    not redone. Other settings or another model (`model_tag`, `models.model_tag` of the model `engine` serves)
    write a new folder; none is deleted. Each shard has its own seed, so a shard's rollouts do not depend on which
    shards were finished before."""
    if cfg.data.stage1_source == "authors":
        raise RuntimeError("data.stage1_source is 'authors': stage 1 comes from the authors' release, so there is "
                           "nothing to distil; run the notebooks from 03 on (ONLY=\"03 04 05 06 07\")")
    d = cfg.distill
    settings = shard_settings(cfg, model_tag)
    shard_dir = Path(out_dir) / "shards" / settings_hash(settings, 12)
    shard_dir.mkdir(parents=True, exist_ok=True)
    (shard_dir / "settings.json").write_text(json.dumps(settings, indent=1, sort_keys=True, default=str) + "\n")
    shards = {k: tasks[s:s + d.shard_size] for k, s in enumerate(range(0, len(tasks), d.shard_size))}
    t0, phases_before = time.perf_counter(), totals()
    done = {k: lines for k in shards if (lines := _finished_shard(shard_dir, k, shards[k])) is not None}
    missing = [k for k in shards if k not in done]
    bar = tqdm(total=len(tasks), desc="distillation", unit="question", disable=not progress)
    bar.update(sum(len(shards[k]) for k in done))
    for k in missing:
        done[k] = _rollout_shard(cfg, k, shards[k], engine, tokenizer, shard_dir)
        bar.update(len(shards[k]))
    bar.close()
    append_phases(Path(out_dir) / PHASES_LOG, "distill", phases_before, time.perf_counter() - t0,
                  questions=len(tasks))
    return [line for k in shards for line in done[k]]


def _finished_shard(shard_dir: Path, k: int, chunk: Sequence[Task]) -> list[dict[str, Any]] | None:
    """Shard k's records when its file holds exactly `chunk`'s questions, else None (to roll out)."""
    path = shard_dir / f"shard-{k:05d}.jsonl"
    if not path.exists():
        return None
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return lines if [r["qid"] for r in lines] == [t.qid for t in chunk] else None


def _rollout_shard(cfg: Config, k: int, chunk: Sequence[Task], engine: Any, tokenizer: Any,
                   shard_dir: Path) -> list[dict[str, Any]]:
    # prompted and sampled as SamplingSpec.distill says; judged as GRPO rewards (RolloutSpec.distill: grpo.*'s
    # parsers, truncation, SQL text and column sets)
    rollouts = rollout(chunk, engine, tokenizer, SamplingSpec.distill(cfg, k), RolloutSpec.distill(cfg))
    lines = [_record(r) for r in rollouts]
    path = shard_dir / f"shard-{k:05d}.jsonl"
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(x) + "\n" for x in lines))
    tmp.replace(path)  # a shard exists whole or not at all
    return lines


def sampling_engine(cfg: Config, model_path: str | Path) -> tuple[Any, Any]:
    """The engine distillation samples `model_path` with, and its tokenizer: the model in the inference dtype
    on `model.device` (on the CPU when the engine is vLLM: `policy_load_device`), the profile's engine (as notebook 02
    builds them). Close the engine when done."""
    from ..models.engines import make_engine, policy_load_device
    from ..models.loading import load_policy

    model, tokenizer = load_policy(str(model_path), dtype=cfg.model.dtype, device=policy_load_device(cfg))
    engine = make_engine(cfg.engine, model, tokenizer, model_path=str(model_path), dtype=cfg.model.dtype, seed=cfg.seed)
    return engine, tokenizer


# ---------------------------------------------------------------------------------------------
# Products of distillation


def choose_trace(candidates: list[dict[str, Any]], how: str, rng: random.Random) -> dict[str, Any]:
    """UNKNOWN in the paper (§3.2) how one trace per question is kept; the kit's options."""
    if how == "shortest":
        return min(candidates, key=lambda c: (c["n_tokens"], c["text"]))
    if how == "first":
        return candidates[0]
    return rng.choice(candidates)


def _retriever_think(record: dict[str, Any], target: set[str]) -> str:
    """The think text of the retriever sample whose list is closest to the target (Jaccard): the
    retriever target keeps the model's own reasoning and replaces only its list (§3.2)."""
    best, score = "", -1.0
    for r in record["retriever"]:
        cols = set(r["columns"])
        j = len(cols & target) / max(len(cols | target), 1)
        think = parse_think(r["text"]).think
        if think and j > score:
            best, score = think, j
    return best or "Select the columns the query needs."


def _pool_set(cfg: Config, task: Task, gen: dict[str, Any]) -> list[str] | None:
    """The column set a distillation rollout gives the initial pool, by the same rules as GRPO's
    pool additions (`grpo.pool_add_gate`, `grpo.bare_table_columns`; authors' code by default):
    a match that passes the format gate, its set as the authors' extractor reads it."""
    g = cfg.grpo
    if not gen["match"] or not gen["columns"]:
        return None
    if g.pool_add_gate == "format" and not gen.get("format_ok", gen["well_formed"]):
        return None
    if g.bare_table_columns == "anchor" or not gen.get("sql"):
        return gen["columns"]
    cols = task.columns_of(gen["sql"], g.bare_table_columns)
    if cols is None:  # not resolvable again here: the recorded set stands
        return gen["columns"]
    return sorted(cols) or None  # empty: `SELECT count(*) FROM t` adds nothing (authors' extractor)


def rollout_counts(cfg: Config, by_id: dict[str, Task], records: Sequence[dict[str, Any]]
                   ) -> tuple[dict[str, int], dict[str, list[list[str]]], dict[str, list[str]]]:
    """Per question: correct generator rollouts (the pass count), the column sets they give the
    initial pool, and the gold column set."""
    pass_counts, correct_sets, gold = {}, {}, {}
    for rec in records:
        pass_counts[rec["qid"]] = sum(g["match"] for g in rec["generator"])
        gold[rec["qid"]] = rec["gold_columns"]
        correct_sets[rec["qid"]] = [s for s in (_pool_set(cfg, by_id[rec["qid"]], g) for g in rec["generator"]) if s]
    return pass_counts, correct_sets, gold


def pass_histogram(pass_counts: dict[str, int], n_generator: int) -> dict[str, int]:
    """Questions per number of correct generator rollouts, 0..N (the distillation figure's bars)."""
    hist = Counter(pass_counts.values())
    return {str(k): hist.get(k, 0) for k in range(n_generator + 1)}


def select_rl(pass_counts: dict[str, int], d: Any, rng: random.Random, validation: Sequence[str] | None = None
              ) -> tuple[list[str], list[str]]:
    """(validation, train) question ids: correct between rl_min and rl_max times out of N (§3.4).
    Validation is held out first, never more than half of the eligible questions, so a small run still
    has questions to train on; a given `validation` is kept as it is and only left out of the training set."""
    eligible = sorted(q for q, k in pass_counts.items() if d.rl_min_correct <= k <= d.rl_max_correct)
    if validation is None:
        rng.shuffle(eligible)
        n_val = min(d.n_validation, len(eligible) // 2)
        return sorted(eligible[:n_val]), sorted(eligible[n_val:n_val + d.n_rl_train])
    held = set(validation)
    rest = [q for q in eligible if q not in held]
    rng.shuffle(rest)
    return sorted(validation), sorted(rest[:d.n_rl_train])


@dataclass
class DistillProducts:
    sft_samples: list[dict[str, Any]]  # {"role", "qid", "prompt": [messages], "completion": [messages]}
    pool: ColumnSetPool
    pass_counts: dict[str, int]
    rl_train: list[str]
    rl_validation: list[str]
    alt_route_share: float | None  # `routes.route_share` of the correct rollouts; None when none resolves
    summary: dict[str, Any]


def build_products(cfg: Config, tasks: Sequence[Task], records: Sequence[dict[str, Any]]) -> DistillProducts:
    """SFT samples, the initial pool and the RL question set; the samples' prompts are the ones the rollouts saw
    (`SamplingSpec.distill`'s style)."""
    d = cfg.distill
    style = SamplingSpec.distill(cfg).prompt_style
    by_id = {t.qid: t for t in tasks}
    rng = random.Random(cfg.seed)
    samples, routes = [], []
    pass_counts, correct_sets, gold = rollout_counts(cfg, by_id, records)
    for rec in records:
        # `_record` writes an unresolved gold set as []: unresolved, as in every route record
        routes += [{"correct": g["match"], "pred_columns": g["columns"], "gold_columns": rec["gold_columns"] or None}
                   for g in rec["generator"]]
    rl_validation, rl_train = select_rl(pass_counts, d, rng)
    held_out = set(rl_validation) if d.sft_excludes_validation else set()
    for rec in records:
        t = by_id[rec["qid"]]
        ex = t.example
        good = [g for g in rec["generator"] if g["match"] and g["well_formed"]]
        if not good or rec["qid"] in held_out:
            continue
        trace = choose_trace([g for g in good if g["columns"]] or good, d.trace_choice, rng)
        target = set(trace["columns"] or rec["gold_columns"])
        gen_prompt = generator_messages(t.schema_text(rec["selected"]), ex.question, ex.evidence, style=style)
        ret_prompt = retriever_messages(t.full_ddl, ex.question, ex.evidence, style=style)
        samples.append({"role": "generator", "qid": rec["qid"], "prompt": gen_prompt,
                        "completion": [{"role": "assistant", "content": trace["text"].strip()}]})
        samples.append({"role": "retriever", "qid": rec["qid"], "prompt": ret_prompt,
                        "completion": [{"role": "assistant",
                                        "content": retriever_target(target, _retriever_think(rec, target))}]})
    pool = ColumnSetPool.from_rollouts(correct_sets, gold, gamma=cfg.grpo.gamma)
    route = route_share(routes)  # the one definition of an alternative route (routes module)
    summary = {
        "questions": len(records), "n_generator": d.n_generator, "n_retriever": d.n_retriever,
        "pass_rate_hist": pass_histogram(pass_counts, d.n_generator),
        "questions_with_correct": sum(1 for k in pass_counts.values() if k > 0),
        "sft_samples": dict(Counter(s["role"] for s in samples)),
        "correct_rollouts": route["n_correct"], "route_resolved": route["n_resolved"],
        "alt_route_share": None if route["n_resolved"] == 0 else route["share"],  # None: no correct set resolves
        "rl_train": len(rl_train), "rl_validation": len(rl_validation), "pool": pool.stats(),
    }
    return DistillProducts(samples, pool, pass_counts, rl_train, rl_validation, summary["alt_route_share"], summary)


def save_products(p: DistillProducts, tasks: Sequence[Task], out_dir: str | Path) -> None:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with (out / "sft_samples.jsonl").open("w") as f:
        for s in p.sft_samples:
            f.write(json.dumps(s) + "\n")
    p.pool.save(out / "pool.json")
    by_id = {t.qid: t.example for t in tasks}
    rl = {"pass_counts": p.pass_counts,
          "train": [dataclasses.asdict(by_id[q]) for q in p.rl_train],
          "validation": [dataclasses.asdict(by_id[q]) for q in p.rl_validation]}
    (out / "rl_questions.json").write_text(json.dumps(rl, indent=1))
    (out / "summary.json").write_text(json.dumps(p.summary, indent=2, default=str))


def load_sft_samples(out_dir: str | Path, cfg: Config | None = None) -> list[dict[str, Any]]:
    if cfg is not None and cfg.data.stage1_source == "authors":  # the authors' released SFT files
        from ..authors.release import release_sft_samples

        return release_sft_samples(cfg)
    path = Path(out_dir) / "sft_samples.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"{path}: no SFT samples; run the self-distillation notebook (02) first")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def load_rl_tasks(cfg: Config, paths: Any, folder: str | Path | None = None) -> tuple[list[Task], list[Task]]:
    """The RL question set and its validation split, as written by `save_products` or `select_by_model`
    (`paths.rl_data`; `folder` another), or the authors' rows."""
    if cfg.data.stage1_source == "authors":
        from ..authors.release import release_tasks

        return release_tasks(cfg, paths)
    path = Path(folder or paths.rl_data) / "rl_questions.json"
    if not path.exists():
        step = ("the self-distillation notebook (02)" if Path(path.parent) == Path(paths.distill)
                else "the RL selection by the SFT model (notebook 03, `distill.select_by_model`)")
        raise FileNotFoundError(f"{path}: no RL question set; run {step} first")
    data = json.loads(path.read_text())
    cache = Path(paths.run) / "values_index"
    train = build_tasks([Example(**e) for e in data["train"]], cfg.data, cache)
    val = build_tasks([Example(**e) for e in data["validation"]], cfg.data, cache)
    if not train:
        raise ValueError(f"{path}: the RL question set is empty; widen distill.rl_min_correct/rl_max_correct")
    return train, val


# ---------------------------------------------------------------------------------------------
# RL questions by the SFT model's own rollouts (distill.rl_selection "sft_model")


def rl_candidates(cfg: Config, paths: Any) -> list[Example]:
    """The questions the SFT model rolls out: the filtered (distilled) pool, or with distill.rl_candidates
    > 0 that many training questions filtered by the same rules (a larger draw of the same pool)."""
    from ..data.datasets import train_db_root, training_pool
    from ..data.filtering import filter_pool, load_pool

    if not cfg.distill.rl_candidates:
        return load_pool(paths.filtered_pool, train_db_root(cfg, paths))
    from ..data.datasets import schemas_for

    pool = training_pool(cfg, paths, progress=False)
    schemas = schemas_for(pool.examples, cfg.data.n_example_values, cfg.data.example_max_chars)
    wider = dataclasses.replace(cfg.filtering, target_size=cfg.distill.rl_candidates)
    return filter_pool(pool.examples, wider, schemas, seed=cfg.seed).kept


def select_by_model(cfg: Config, paths: Any, model_path: str | Path | None = None, progress: bool = True
                    ) -> dict[str, Any]:
    """§3.4 read as "the SFT model's rollouts": roll the SFT model out on `rl_candidates` with the
    distillation's sampling (shards, resumable), count its correct generator rollouts per question and keep
    those correct rl_min..rl_max times out of N; stage 1's validation split stays as it is (so it stays out
    of the SFT data) and out of the training set. The initial pool is built from these rollouts, as stage 1
    builds it from its own. Writes `rl_questions.json`, `pool.json` and `summary.json` to `paths.rl_data`;
    a rerun with the same settings and model reads the finished products back."""
    from ..models.loading import model_tag

    if cfg.data.stage1_source == "authors":
        raise ValueError("distill.rl_selection 'sft_model' needs the kit's own stage 1 (data.stage1_source: ours); "
                         "the authors' release fixes its RL rows")
    out = Path(paths.rl_data)
    model_path = Path(model_path or paths.sft_model)
    d = cfg.distill
    stage1 = json.loads((Path(paths.distill) / "rl_questions.json").read_text())
    validation = [e["id"] for e in stage1["validation"]]
    record = {"shards": shard_settings(cfg, model_tag(model_path)),
              "rl_candidates": d.rl_candidates, "bounds": [d.rl_min_correct, d.rl_max_correct],
              "n_rl_train": d.n_rl_train, "validation": validation, "pool_rules": [cfg.grpo.pool_add_gate,
                                                                                   cfg.grpo.bare_table_columns]}
    settings = out / "selection_settings.json"
    text = json.dumps(record, indent=1, sort_keys=True, default=str) + "\n"
    if settings.is_file() and settings.read_text() == text and (out / "rl_questions.json").is_file():
        return json.loads((out / "summary.json").read_text())
    tasks, skipped = usable(build_tasks(rl_candidates(cfg, paths), cfg.data, Path(paths.run) / "values_index"),
                            d.exec_timeout_s)
    engine, tokenizer = sampling_engine(cfg, model_path)
    try:
        records = run_distillation(cfg, tasks, engine, tokenizer, out, progress=progress,
                                   model_tag=model_tag(model_path))
    finally:
        engine.close()
    by_id = {t.qid: t for t in tasks}
    pass_counts, correct_sets, gold = rollout_counts(cfg, by_id, records)
    val_ids, train_ids = select_rl(pass_counts, d, random.Random(cfg.seed), validation)
    # the training questions' pool from these rollouts; validation keeps stage 1's entries (and questions)
    pool = ColumnSetPool.from_rollouts({q: correct_sets[q] for q in train_ids}, {q: gold[q] for q in train_ids},
                                       gamma=cfg.grpo.gamma)
    pool.copy_questions(ColumnSetPool.load(Path(paths.distill) / "pool.json", gamma=cfg.grpo.gamma), val_ids)
    stage1_val = {e["id"]: e for e in stage1["validation"]}
    stage1_ids = set(stage1["pass_counts"])
    summary = {"selection": "sft_model", "model": str(model_tag(model_path)), "candidates": len(records),
               "skipped": dict(skipped), "n_generator": d.n_generator,
               "pass_rate_hist": pass_histogram(pass_counts, d.n_generator),
               "rl_train": len(train_ids), "rl_validation": len(val_ids),
               "rl_train_in_stage1": sum(q in stage1_ids for q in train_ids),
               "stage1_rl_train": len(stage1["train"]), "pool": pool.stats()}
    out.mkdir(parents=True, exist_ok=True)
    pool.save(out / "pool.json")
    examples = {t.qid: t.example for t in tasks}
    rl = {"pass_counts": pass_counts, "train": [dataclasses.asdict(examples[q]) for q in train_ids],
          "validation": [stage1_val[q] for q in val_ids]}
    (out / "rl_questions.json").write_text(json.dumps(rl, indent=1))
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    settings.write_text(text)
    return summary
