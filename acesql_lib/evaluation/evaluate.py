"""Two-pass greedy evaluation (§5): retriever on the full schema, generator on the pruned schema.

The passes are `rollouts`' phases (retrieve, select, generate, execute) run greedily with one
sample per role, plus a generate pass on the gold column sets. For every question: the retriever
reads the full schema and lists columns; its parsed list prunes the schema
(`Schema.to_ddl(selected)`); the generator reads the pruned schema and writes SQL; the last sql
block is executed against the gold SQL. Greedy decoding (temperature 0), one sample per
role, the same checkpoint for both roles. Compare modes (§5): BIRD compares rows as sets
(`mode="set"`), Spider as in the test-suite evaluator (`mode="spider"`: multiset, ordered when the
gold has ORDER BY). Errors and timeouts score 0. BIRD-format sets are scored by the rule
`eval.scoring` names (`executor.scoring`: paper "authors", their EVAL/evaluation_maj.py, where a
prediction without SQL runs as no rows and matches an empty gold result and invalid UTF-8 text
scores 0; tiny "kit"). Which SQL is executed and which columns prune the
schema follow `eval.generator_parser` / `eval.retriever_parser` (paper profile: the authors'
evaluation scripts, `prompts.parse_generator_eval` / `parse_retriever_eval`; "kit": the last closed
sql block after the think block, so an output without one scores 0).

The engine's context is `eval.max_model_len` (prompt + answer; `metrics["max_model_len"]`). An answer stops where
prompt and answer fill it, as vLLM stops it, on both engines (`rollouts._sample`). A prompt that leaves no room for
one new token is not generated (vLLM would refuse the whole call) and its question scores 0, under every scoring
rule: an over-long retriever prompt leaves the question without a generator pass. Such questions are counted per
pass (`n_overlong`: retriever, generator, gold_schema) and named (`overlong_ids`, the records' `overlong` and
`gold_schema_overlong`, one printed line); the authors' scripts stop there instead (docs/deviations.md).

The metrics (`metrics`: Generator Ability from the third pass, Retriever Ability, tokens per question, the
alternative-route share, where §5 is silent the kit's choices, and their units) are all reported in `metrics.json`.
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config.eval import EvalSet
from ..config.settings import Config
from ..runtime.reuse_keys import code_hash, engine_key, settings_hash
from ..models.completions import Engine
from ..models.engines import make_engine, policy_load_device
from ..models.hf_engine import HFEngine
from .metrics import overlong_line, summarize
from .records import EvalResult, write_outputs
from ..config.paths import Paths, resolve
from ..roles.prompts import evaluation_style
from ..train.rollouts import (EngineCalls, QuestionRollout, RoleSamples, RolloutSpec, SamplingSpec, generate,
                              retrieve, select, unanswered)
from ..data.task import Task, build_tasks
from ..data.routes import alternative_route
from ..data.schema import Schema
from ..runtime.timing import as_metrics, since, totals

# ---------------------------------------------------------------------------------------------
# Running the passes

OVERLONG = "overlong"  # exec_status of a question whose prompt left no room in the engine's context


@dataclass(frozen=True)
class EvalOptions:
    """What one evaluation is, beside the model, its questions and the settings: the checkpoint's label
    (`stage`) and the set's (`set_name`, which names the files), the executor's compare mode ("set" for BIRD,
    "spider" for Spider), the scoring rule (`executor.scoring`; None: `eval.scoring` in BIRD's set mode, "kit"
    otherwise; its timeout replaces `eval.exec_timeout_s` when the rule has one, authors: 300 s), whether the
    prompts show question-relevant values (`EvalSet.relevant_values`), whether the third pass behind Generator
    Ability runs, and the folder the files go to (None: nothing written)."""

    stage: str = ""
    set_name: str = "dev"
    mode: str = "set"
    scoring: str | None = None
    relevant_values: bool = True
    gold_schema_pass: bool = True
    out_dir: str | Path | None = None


def evaluate(model: Any, tokenizer: Any, examples: Sequence[Any], schemas: Mapping[str, Schema], cfg: Config,
             options: EvalOptions = EvalOptions(), engine: Engine | None = None, progress: bool = True) -> EvalResult:
    """Two-pass greedy EX of `model` (or of `engine`, when given) on `examples`, as `options` says (`EvalOptions`:
    the labels, compare mode, scoring rule, relevant values, the gold-schema pass and the output folder).

    `schemas` maps db_id to its Schema. The steps: the retriever and the generator passes (`_two_passes`), the
    generator on the gold column sets (`_gold_schema_pass`), one execution batch (`_execute`), the records."""
    from ..executor.scoring import rule as scoring_rule

    scoring = options.scoring if options.scoring is not None else (cfg.eval.scoring if options.mode == "set" else "kit")
    timeout_s = scoring_rule(scoring).timeout_s or cfg.eval.exec_timeout_s
    missing = sorted({ex.db_id for ex in examples} - set(schemas))
    if missing:
        raise KeyError(f"evaluate: no schema for db_id {missing[:5]} ({len(missing)} missing)")
    start, phases_before = time.perf_counter(), totals()
    engine = engine or HFEngine.from_config(cfg.engine, model, tokenizer)
    # prompts per engine call (the progress bar moves per call): greedy calls take engine.hf_greedy_batch_size
    chunk = cfg.engine.hf_greedy_batch_size
    tasks = _tasks(examples, schemas, cfg, options.relevant_values)

    # the engine's context: eval.max_model_len, or the engine's own where it is smaller (a vLLM engine handed in)
    context = min(cfg.eval.max_model_len, getattr(engine, "max_model_len", None) or cfg.eval.max_model_len)
    # prompts in evaluation's style: the authors' evaluation templates under "authors"
    spec = SamplingSpec.greedy(cfg.eval.max_new_tokens, cfg.engine.enable_thinking, cfg.eval.retriever_max_new_tokens,
                               context=context, prompt_style=evaluation_style(cfg.model.prompt_style))
    # eval.*'s parsers: the authors' EVAL rules or the kit's
    rules = RolloutSpec.evaluation(cfg, options.mode, timeout_s, scoring)
    r_parse, g_parse = rules.parsers(spec.max_new_tokens)
    run = dict(engine=engine, tokenizer=tokenizer, spec=spec)
    calls = EngineCalls(chunk, progress=progress)  # each pass names its bar

    rolls = _two_passes(tasks, run, calls, r_parse, g_parse, options.stage)
    gold_idx = [i for i, t in enumerate(tasks) if options.gold_schema_pass and t.gold_columns]
    gold_rolls = _gold_schema_pass(tasks, [r.generator for r in rolls], gold_idx, run, calls, g_parse, options.stage)
    _execute(rules, [*rolls, *gold_rolls], cfg.eval.workers, progress)
    records = _records(rolls, gold_idx, gold_rolls)
    metrics = {"stage": options.stage, "set": options.set_name, "mode": options.mode, "scoring": scoring,
               "engine": engine.kind, "max_model_len": context, **summarize(records),
               "seconds": time.perf_counter() - start, **as_metrics(since(phases_before))}
    if any(metrics["n_overlong"].values()):
        print(overlong_line(options.set_name, context, metrics["overlong_ids"]))
    result = EvalResult(metrics, records)
    if options.out_dir is not None:
        result.out_dir = Path(options.out_dir)
        result.files = write_outputs(result, options.set_name)
    return result


def _tasks(examples: Sequence[Any], schemas: Mapping[str, Schema], cfg: Config, relevant_values: bool) -> list[Task]:
    """The questions as tasks: the profile's schema text and question-relevant values (§2); a set whose prompts
    show no question-relevant values (EvalSet.relevant_values false): none, no index."""
    data_cfg = cfg.data if relevant_values else dataclasses.replace(cfg.data, relevant_values=False)
    given = None if relevant_values else {ex.id: {} for ex in examples}
    return build_tasks(examples, data_cfg, Paths.from_config(cfg).run / "values_index", schemas, given)


def _two_passes(tasks: list[Task], run: dict[str, Any], calls: EngineCalls, r_parse: Any, g_parse: Any,
                stage: str) -> list[QuestionRollout]:
    """Steps 1-3 per question: the retriever on the full schema, its one list the pruned schema (a vote of one
    sample), then the generator on the pruned schema, for the questions whose retriever prompt fit the context
    (the others score 0). `run`: the engine call's arguments (engine, tokenizer, spec); `calls`: how each
    pass calls the engine (its chunk and progress; the bar named per pass)."""
    retrieved = retrieve(tasks, parse=r_parse, calls=dataclasses.replace(calls, desc=f"{stage} retriever"), **run)
    voted, seen = select(retrieved, n_generator=1)
    asked = [i for i, r in enumerate(retrieved) if not r.completions[0].overlong]
    generated = [RoleSamples([""], [c := unanswered()], [g_parse(c, t)]) for t in tasks]
    for i, g in zip(asked, generate([tasks[i] for i in asked], [seen[i] for i in asked], parse=g_parse,
                                    calls=dataclasses.replace(calls, desc=f"{stage} generator"), **run)):
        generated[i] = g
    return [QuestionRollout(t, r, sel, g) for t, r, sel, g in zip(tasks, retrieved, voted, generated)]


def _gold_schema_pass(tasks: list[Task], generated: list[RoleSamples], gold_idx: list[int], run: dict[str, Any],
                      calls: EngineCalls, g_parse: Any, stage: str) -> list[QuestionRollout]:
    """Step 3b: the generator on the gold column set of each question of `gold_idx` (Generator Ability; kit's
    definition). Where the voted set gives the same prompt, the answer is the one step 3 decoded from it
    (greedy, `generated`), not decoded again."""
    gold_tasks = [tasks[i] for i in gold_idx]
    on_gold = [RoleSamples(list(generated[i].prompts), list(generated[i].completions), list(generated[i].parses))
               for i in gold_idx]
    tokenizer, spec = run["tokenizer"], run["spec"]
    fresh = [k for k, i in enumerate(gold_idx)
             if spec.generator_prompt(tasks[i], tasks[i].gold_columns, tokenizer) != generated[i].prompts[0]]
    gold_calls = dataclasses.replace(calls, desc=f"{stage} generator (gold schema)")
    for k, g in zip(fresh, generate([gold_tasks[k] for k in fresh], [[gold_tasks[k].gold_columns] for k in fresh],
                                    parse=g_parse, calls=gold_calls, **run)):
        on_gold[k] = g
    return [QuestionRollout(t, RoleSamples([], [], []), t.gold_columns, g) for t, g in zip(gold_tasks, on_gold)]


def _execute(rules: RolloutSpec, every: list[QuestionRollout], workers: int, progress: bool) -> None:
    """Step 4: every generator answer against its gold in one batch; a prompt over the context scores 0 (never
    run: the authors' scoring would match its empty prediction to an empty gold result)."""
    rules.execute([r for r in every if not r.generator.completions[0].overlong], workers=workers, progress=progress)
    for r in every:
        if r.generator.completions[0].overlong:
            r.matches, r.exec_status, r.match_sets = [False], [OVERLONG], [None]


def _records(rolls: list[QuestionRollout], gold_idx: list[int],
             gold_rolls: list[QuestionRollout]) -> list[dict[str, Any]]:
    """One record per question (predictions.jsonl): both passes, the execution, the column sets and the
    gold-schema pass where it ran."""
    o_sql = {i: r.generator.parses[0].sql for i, r in zip(gold_idx, gold_rolls)}
    gold_correct = {i: r.matches[0] for i, r in zip(gold_idx, gold_rolls)}
    gold_over = {i: r.generator.completions[0].overlong for i, r in zip(gold_idx, gold_rolls)}

    records = []
    for i, r in enumerate(rolls):
        t, rc, rp, gc, gp = r.task, r.retriever.completions[0], r.retriever.parses[0], \
            r.generator.completions[0], r.generator.parses[0]
        correct = r.matches[0]
        pred_cols = t.columns_of(gp.sql)
        gold_cols = t.gold_columns
        ex = t.example
        records.append({
            "id": ex.id, "db_id": ex.db_id, "difficulty": ex.difficulty or "", "question": ex.question,
            "retrieved_columns": sorted(rp.columns), "pred_sql": gp.sql, "correct": correct,
            "exec_status": r.exec_status[0], "gold_sql": ex.sql,
            "retriever_tokens": rc.n_tokens, "generator_tokens": gc.n_tokens,
            "retriever_truncated": rc.truncated, "generator_truncated": gc.truncated,
            "retriever_well_formed": rp.well_formed, "generator_well_formed": gp.well_formed,
            "gold_columns": sorted(gold_cols) if gold_cols is not None else None,
            "pred_columns": sorted(pred_cols) if pred_cols is not None else None,
            "alt_route": alternative_route(correct, pred_cols, gold_cols),
            "gold_schema_sql": o_sql.get(i), "gold_schema_correct": gold_correct.get(i),
            "overlong": "retriever" if rc.overlong else "generator" if gc.overlong else None,
            "gold_schema_overlong": gold_over.get(i),
        })
    return records


# ---------------------------------------------------------------------------------------------
# One configured evaluation set, and the CLI


def load_eval_set(cfg: Config, eval_set: EvalSet) -> tuple[list[Any], dict[str, Schema]]:
    """Questions of one `eval.sets` entry (BIRD or Spider layout) and their schemas read from SQLite.

    Schemas carry example values (§2) and, when the database folder has BIRD's
    `database_description/`, column descriptions. Malformed records are reported and skipped.
    """
    from ..data.datasets import eval_examples, schemas_for

    loaded = eval_examples(eval_set)
    if loaded.skipped:
        print(f"[evaluate] {eval_set.name}: skipped {len(loaded.skipped)} malformed records, first: {loaded.skipped[:3]}")
    examples = list(loaded)
    if cfg.eval.max_examples:
        examples = examples[: cfg.eval.max_examples]
    return examples, schemas_for(examples, cfg.data.n_example_values, cfg.data.example_max_chars)


# What an evaluation's outputs depend on besides settings: this module's code and every module it imports
# (reuse_keys.imported_modules), which load, prompt, generate, parse, execute and score; a change to any of them
# evaluates afresh
EVAL_CODE = ("evaluation.evaluate",)


def eval_key(cfg: Config, model_path: str | Path, eval_set: EvalSet) -> dict[str, Any]:
    """Everything one evaluation's records depend on: the model (`models.model_tag`), the set and the
    bytes of its questions file, the evaluation, engine, schema-text and prompt settings, the seed and
    the code (`EVAL_CODE` and what it imports). Two evaluations with equal keys give the same records (greedy
    decoding)."""
    from ..models.loading import model_tag

    questions = resolve(eval_set.path)  # relative to the repository, as `datasets.eval_examples` reads it
    digest = hashlib.sha256(questions.read_bytes()).hexdigest()[:16] if questions.is_file() else None
    db_root = resolve(eval_set.db_root)
    databases = sorted((str(f.relative_to(db_root)), f.stat().st_size, f.stat().st_mtime_ns)
                       for f in db_root.rglob("*.sqlite")) if db_root.is_dir() else []  # a rebuilt database: afresh
    ev = {k: v for k, v in dataclasses.asdict(cfg.eval).items() if k not in ("sets", "ablation_sets", "workers", "reuse")}
    return {"model": model_tag(model_path), "set": dataclasses.asdict(eval_set), "questions": digest,
            "databases": settings_hash(databases), "eval": ev, "engine": engine_key(cfg.engine),
            "data": settings_hash(dataclasses.asdict(cfg.data)), "style": cfg.model.prompt_style,
            "dtype": cfg.model.dtype, "device": cfg.model.device, "seed": cfg.seed, "code": code_hash(*EVAL_CODE)}


def _cached(folder: Path, key_text: str) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
    try:
        if (folder / "key.json").read_text() != key_text:
            return None
        metrics = json.loads((folder / "metrics.json").read_text())
        records = [json.loads(line) for line in (folder / "predictions.jsonl").read_text().splitlines() if line.strip()]
    except (OSError, json.JSONDecodeError):
        return None  # missing or half written: evaluate afresh
    return (metrics, records) if len(records) == metrics.get("n") else None


def _store(folder: Path, key_text: str, result: EvalResult) -> None:
    """Write the cache entry whole or not at all (a temporary folder renamed into place)."""
    tmp = folder.with_name(folder.name + f".tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    shutil.copy2(result.files["metrics"], tmp / "metrics.json")
    shutil.copy2(result.files["predictions"], tmp / "predictions.jsonl")
    (tmp / "key.json").write_text(key_text)
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)


def eval_engine_config(cfg: Config) -> Any:
    """The engine settings of evaluation: the training engine's, with the evaluation context (`eval.max_model_len`)."""
    return dataclasses.replace(cfg.engine, max_model_len=cfg.eval.max_model_len)


class LoadedCheckpoint:
    """One checkpoint's model, tokenizer and evaluation engine, loaded at the first `get()` and shared by
    every set evaluated from it (`evaluate_sets`): a vLLM engine starts once per checkpoint, not once per set."""

    def __init__(self, cfg: Config, model_path: str | Path):
        self.cfg, self.model_path, self._loaded = cfg, model_path, None

    def get(self) -> tuple[Any, Any, Any]:
        if self._loaded is None:
            from ..models.loading import load_policy

            model, tokenizer = load_policy(self.model_path, self.cfg.model.dtype, policy_load_device(self.cfg))
            model.eval()
            engine = make_engine(eval_engine_config(self.cfg), model, tokenizer, model_path=self.model_path,
                                 dtype=self.cfg.model.dtype, seed=self.cfg.seed)
            self._loaded = (model, tokenizer, engine)
        return self._loaded

    def close(self) -> None:
        if self._loaded is not None:
            self._loaded[2].close()
            self._loaded = None


def evaluate_sets(cfg: Config, paths: Paths, model_path: str | Path, eval_sets: Sequence[EvalSet | str], stage: str,
                  progress: bool = True) -> dict[str, EvalResult]:
    """`evaluate_set` for each of `eval_sets`, with one model and one engine for all of them (loaded only if
    some set is not read back from the evaluation cache); results by set name, in the order given."""
    checkpoint = LoadedCheckpoint(cfg, model_path)
    try:
        return {s if isinstance(s, str) else s.name: evaluate_set(cfg, paths, model_path, s, stage, progress,
                                                                    checkpoint=checkpoint) for s in eval_sets}
    finally:
        checkpoint.close()


def evaluate_checkpoints(cfg: Config, paths: Paths, checkpoints: Mapping[str, str | Path],
                         eval_sets: Sequence[EvalSet | str], progress: bool = True
                         ) -> dict[tuple[str, str], EvalResult]:
    """`evaluate_sets` for each checkpoint ({stage: model folder}, e.g. base, SFT, RL), one after another, with one
    vLLM engine carried from each checkpoint to the next (`engine_reuse`: its weights replaced in place, where the
    checkpoints share their configuration and tokenizer); results by (stage, set name)."""
    from ..models.engine_reuse import reused_engines

    with reused_engines():
        return {(stage, name): result for stage, path in checkpoints.items()
                for name, result in evaluate_sets(cfg, paths, path, eval_sets, stage, progress).items()}


def evaluate_set(cfg: Config, paths: Paths, model_path: str | Path, eval_set: EvalSet | str, stage: str,
                 progress: bool = True, checkpoint: LoadedCheckpoint | None = None) -> EvalResult:
    """Evaluate the checkpoint at `model_path` on one configured set; files under runs/<profile>/eval/<stage>/<set>.

    With `eval.reuse` (default) an evaluation whose `eval_key` matches one already made in this run folder
    (`runs/<profile>/eval_cache/`, shared by a study's seeds) is read back instead of redone: notebook 06's
    full variant is notebook 05's RL model, and every seed of a study evaluates the same base and SFT models.
    The metrics then say `"reused": true`; their times are those of the evaluation that ran."""
    if isinstance(eval_set, str):
        names = {s.name: s for s in cfg.eval.sets}
        if eval_set not in names:
            raise KeyError(f"eval set {eval_set!r} not in eval.sets ({', '.join(names)})")
        eval_set = names[eval_set]
    out_dir = paths.eval_dir / stage / eval_set.name
    key = eval_key(cfg, model_path, eval_set)
    key_text = json.dumps(key, indent=1, sort_keys=True, default=str) + "\n"
    entry = paths.eval_cache / settings_hash(key, 16)
    hit = _cached(entry, key_text) if cfg.eval.reuse and key["questions"] else None  # no file: the loader says so
    if hit is not None:
        metrics, records = hit
        result = EvalResult({**metrics, "stage": stage, "reused": True}, records, Path(out_dir))
        result.files = write_outputs(result, eval_set.name)
        return result
    examples, schemas = load_eval_set(cfg, eval_set)
    own = checkpoint is None  # a checkpoint handed in is the caller's to close
    checkpoint = checkpoint or LoadedCheckpoint(cfg, model_path)
    mode = "set" if eval_set.format == "bird" else "spider"  # §5
    try:
        model, tokenizer, engine = checkpoint.get()
        options = EvalOptions(stage=stage, set_name=eval_set.name, mode=mode, relevant_values=eval_set.relevant_values,
                              out_dir=out_dir)
        result = evaluate(model, tokenizer, examples, schemas, cfg, options=options, engine=engine, progress=progress)
    finally:
        if own:
            checkpoint.close()
    result.metrics["reused"] = False
    result.files["metrics"].write_text(json.dumps(result.metrics, indent=2, sort_keys=True) + "\n")
    _store(entry, key_text, result)
    return result


def evaluate_baseline(cfg: Config, paths: Paths, name: str, model_path: str | Path, eval_sets: Sequence[EvalSet],
                      decoding: str | None = None, max_new_tokens: int | None = None,
                      progress: bool = True) -> dict[str, dict[str, Any]]:
    """A released checkpoint under its own protocol (`acesql_lib.evaluation.baselines`), metrics by set name, files under
    runs/<profile>/eval/baselines/<name>/<set>. The paper's own protocol ("qwen3-8b") is this module's two-pass
    evaluation; a release's runs its prompts, decoding and extraction with one engine for every set."""
    from .baselines import (BASELINES_DIR, KIT_PROTOCOL, ReleaseRun, evaluate_release, kit_baseline_metrics,
                            release_config)

    if name == KIT_PROTOCOL:
        results = evaluate_sets(cfg, paths, model_path, eval_sets, f"{BASELINES_DIR}/{name}", progress)
        return {s: kit_baseline_metrics(r, model_path) for s, r in results.items()}
    checkpoint = LoadedCheckpoint(release_config(cfg, name), model_path)
    try:
        release = ReleaseRun(name, decoding, max_new_tokens)
        return {s.name: evaluate_release(cfg, paths, release, checkpoint, s, *load_eval_set(cfg, s), progress)
                for s in eval_sets}
    finally:
        checkpoint.close()


def main(argv: Sequence[str] | None = None) -> dict[str, EvalResult]:
    from ..config.context import RunContext

    ap = argparse.ArgumentParser(description="Two-pass greedy evaluation (§5) of one checkpoint, or (--baseline) a "
                                             "released checkpoint under its own published protocol.")
    ap.add_argument("--profile", default="tiny")
    ap.add_argument("--model", required=True, help="save_pretrained folder of the checkpoint (or a hub id)")
    ap.add_argument("--stage", help="label for the outputs (base, sft, grpo, ...); not with --baseline")
    ap.add_argument("--set", "--sets", action="extend", nargs="+", default=None,
                    help="eval set name(s) (default: every configured set)")
    from .baselines import add_baseline_arguments, print_baseline_results

    add_baseline_arguments(ap)
    args = ap.parse_args(argv)
    if not args.baseline and not args.stage:
        ap.error("--stage is required (or --baseline NAME)")
    ctx = RunContext.create(args.profile)
    chosen = [s for s in ctx.cfg.eval.sets if not args.set or s.name in args.set]
    unknown = sorted(set(args.set or []) - {s.name for s in ctx.cfg.eval.sets})
    if unknown:
        ap.error(f"eval set(s) {', '.join(unknown)} not in eval.sets ({', '.join(s.name for s in ctx.cfg.eval.sets)})")
    if args.baseline:
        results = evaluate_baseline(ctx.cfg, ctx.paths, args.baseline, args.model, chosen, args.decoding,
                                    args.max_new_tokens)
        return print_baseline_results(ctx.paths, args.baseline, results)
    results = evaluate_sets(ctx.cfg, ctx.paths, args.model, chosen, args.stage)
    for s in chosen:
        r = results[s.name]
        print(json.dumps({"set": s.name, "ex": round(r.ex, 2), "n": r.metrics["n"],
                          "tokens_per_question": round(r.metrics["tokens_per_question"], 1),
                          "out_dir": str(r.out_dir)}))
    return results


if __name__ == "__main__":
    main()
