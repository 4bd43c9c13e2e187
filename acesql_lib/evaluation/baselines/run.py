"""One evaluation set under a release's protocol (`protocols`), with the kit's executor and scoring rule.

`python -m acesql_lib.evaluation.evaluate --baseline NAME --model PATH_OR_HUB_ID [--sets NAME ...]` runs
`evaluate.evaluate_baseline`, which loads the checkpoint once (the release's context as `eval.max_model_len`,
`release_config`) and calls `evaluate_release` per set: the release's prompt for every question (its schema text
from the set's tables.json and SQLite file, `omnisql_schema`), one engine call with the release's budget,
temperature and sample count, the release's SQL extraction, its vote over samples where it samples several,
then the kit's scoring of the chosen SQL (`RolloutSpec.evaluation`: BIRD-format sets by `eval.scoring`,
Spider-format ones in the Spider compare mode; errors, timeouts and prompts over the context score 0).
"qwen3-8b" is the paper's own protocol: the kit's two-pass evaluation of the checkpoint (`kit_baseline_metrics`
adds the CI to its metrics).

Files: `runs/<profile>/eval/baselines/<name>/<set>/` holds `predictions.jsonl` (per question, with the first
sample's answer), the official BIRD file and `metrics.json` (EX in percent with its 95% Wilson CI, the protocol,
the decoding, the tokens of every sample); the reports read these (`reports.inputs.ReportInputs.baselines`).
"""
from __future__ import annotations

import dataclasses
import json
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from ...config.eval import EvalSet
from ...config.settings import Config
from ..records import EvalResult, ex_by_difficulty, write_outputs
from ...config.paths import Paths, resolve
from .omnisql_schema import db_details, db_info_from_schema, read_db_infos, sample_values
from .protocols import KIT_PROTOCOL, Decoding, Protocol, last_sql_block, protocol, release_question

BASELINES_DIR = "baselines"  # under the run's eval folder


def baseline_dir(paths: Paths, name: str, set_name: str) -> Path:
    return paths.eval_dir / BASELINES_DIR / name / set_name


def _db_infos(eval_set: EvalSet, schemas: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each database's tables.json entry (the releases' source), or one built from its SQLite schema."""
    tables = resolve(eval_set.tables) if eval_set.tables else None
    infos = read_db_infos(tables) if tables is not None and tables.is_file() else {}
    return {db: infos.get(db) or db_info_from_schema(schema) for db, schema in schemas.items()}


def release_prompts(cfg: Config, proto: Protocol, tokenizer: Any, examples: Sequence[Any],
                    db_infos: dict[str, dict[str, Any]], cache: Path) -> list[str]:
    """The prompt of every question as the release renders it; relevant values from the kit's BM25 index
    (kept in `cache`) when the protocol shows them and the profile builds the index (`data.relevant_values`)."""
    from ...data.values_index import open_index

    d = cfg.data
    sampled: dict[str, dict[str, list]] = {}
    prompts = []
    for ex in examples:
        info = db_infos[ex.db_id]
        if ex.db_id not in sampled:
            sampled[ex.db_id] = sample_values(ex.db_path, info["table_names_original"])
        question = release_question(ex.question, ex.evidence)
        relevant = None
        if proto.relevant_values and d.relevant_values:
            index = open_index(ex.db_path, cache, top_k=d.values_top_k, min_match=d.values_min_match,
                               max_hits=d.values_max_hits)
            relevant = index.relevant_values(question)
        prompts.append(proto.prompt(tokenizer, db_details(info, sampled[ex.db_id], relevant), question))
    return prompts


def majority_vote(sqls: Sequence[str], db_path: str, timeout_s: float, threads: int = 8) -> str:
    """The releases' major voting (`protocols` docstring): the first SQL of the result most runs return."""
    from ...executor import execute
    from ...executor.scoring import has_no_statement

    def result_of(sql: str) -> frozenset | None:
        if has_no_statement(sql):  # Python's sqlite3 runs it as no rows, no error: a valid empty result
            return frozenset()
        r = execute(db_path, sql, timeout_s=timeout_s, max_rows=0)  # no row cap, as the releases fetch all
        return frozenset(r.rows) if r.status == "ok" else None

    distinct = list(dict.fromkeys(sqls))
    with ThreadPoolExecutor(max_workers=max(1, min(threads, len(distinct)))) as pool:
        results = dict(zip(distinct, pool.map(result_of, distinct)))
    votes = Counter(results[s] for s in sqls if results[s] is not None)
    if not votes:
        return sqls[0]
    best = max(votes.values())
    return next(s for s in sqls if results[s] is not None and votes[results[s]] == best)


def _generate(cfg: Config, engine: Any, tokenizer: Any, prompts: list[str], decoding: Decoding, budget: int,
              context: int, progress: bool) -> list[list[Any]]:
    from ...train.rollouts import EngineCalls, SamplingSpec, _sample

    spec = SamplingSpec(1, decoding.n, decoding.temperature, decoding.top_p, budget, False,
                        cfg.seed if decoding.temperature > 0 else None, context=context)
    return _sample(engine, prompts, decoding.n, spec, "generator",
                   EngineCalls(cfg.engine.hf_greedy_batch_size, "baseline", progress), tokenizer)


def _score(cfg: Config, examples: Sequence[Any], schemas: dict[str, Any], prompts: list[str],
           outs: list[list[Any]], chosen: list[str], mode: str) -> list[Any]:
    """The kit's scoring of each chosen SQL, exactly as `evaluate` scores its generator pass."""
    from ...executor.scoring import rule as scoring_rule
    from ...roles.answers import GeneratorParse
    from ...train.rollouts import QuestionRollout, RoleSamples, RolloutSpec
    from ...data.task import Task

    scoring = cfg.eval.scoring if mode == "set" else "kit"
    timeout_s = scoring_rule(scoring).timeout_s or cfg.eval.exec_timeout_s
    rolls = []
    for ex, prompt, samples, sql in zip(examples, prompts, outs, chosen):
        parse = GeneratorParse(sql, False, bool(sql), any(c.truncated for c in samples))
        rolls.append(QuestionRollout(Task(ex, schemas[ex.db_id]), RoleSamples([], [], []), frozenset(),
                                     RoleSamples([prompt], [samples[0]], [parse])))
    asked = [r for r, samples in zip(rolls, outs) if not samples[0].overlong]
    RolloutSpec.evaluation(cfg, mode, timeout_s, scoring).execute(asked, workers=cfg.eval.workers, progress=False)
    for r, samples in zip(rolls, outs):
        if samples[0].overlong:
            r.matches, r.exec_status = [False], ["overlong"]
    return rolls


def _record(ex: Any, roll: Any, samples: list[Any], sqls: list[str], chosen: str) -> dict[str, Any]:
    return {"id": ex.id, "db_id": ex.db_id, "difficulty": ex.difficulty or "", "question": ex.question,
            "pred_sql": chosen, "correct": bool(roll.matches[0]), "exec_status": roll.exec_status[0],
            "gold_sql": ex.sql, "answer": samples[0].text, "retriever_tokens": 0,
            "generator_tokens": sum(c.n_tokens for c in samples),
            "sample_sqls": sqls if len(sqls) > 1 else None, "truncated": any(c.truncated for c in samples),
            "overlong": "generator" if samples[0].overlong else None}


def baseline_metrics(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """EX (percent) with its 95% Wilson CI (percent), per difficulty, and the tokens of every sample."""
    from .. import stats

    by_diff = ex_by_difficulty(records)
    ci = stats.ex_ci([r["correct"] for r in records]) if records else None
    n = len(records) or 1
    return {"n": len(records), "ex": by_diff["overall"]["ex"], "ex_by_difficulty": by_diff,
            "ex_ci_low": 100 * ci.low if ci else None, "ex_ci_high": 100 * ci.high if ci else None,
            "ex_ci_level": ci.level if ci else None,
            "tokens_per_question": sum(r["retriever_tokens"] + r["generator_tokens"] for r in records) / n,
            "retriever_tokens": sum(r["retriever_tokens"] for r in records) / n,
            "generator_tokens": sum(r["generator_tokens"] for r in records) / n,
            "truncated": sum(bool(r.get("truncated") or r.get("generator_truncated")) for r in records) / n,
            "n_overlong": sum(bool(r.get("overlong")) for r in records)}


def _describe(name: str, model_path: str | Path, proto: Protocol | None, decoding_name: str, decoding: Decoding | None,
              budget: int | None, context: int | None) -> dict[str, Any]:
    out: dict[str, Any] = {"baseline": name, "model": str(model_path)}
    if proto is not None:
        out.update({"protocol_source": proto.source, "checkpoint_released": proto.checkpoint,
                    "decoding": decoding_name, "n_samples": decoding.n, "temperature": decoding.temperature,
                    "max_new_tokens": budget, "release_max_new_tokens": proto.max_new_tokens,
                    "release_decoding": budget == proto.max_new_tokens, "max_model_len": context})
    else:
        out.update({"protocol_source": "the kit's two-pass evaluation (evaluate.py, §5)", "decoding": "greedy"})
    return out


def _write(out_dir: Path, set_name: str, metrics: dict[str, Any], records: list[dict[str, Any]]) -> dict[str, Path]:
    return write_outputs(EvalResult(metrics, records, out_dir), set_name)


def kit_baseline_metrics(result: EvalResult, model_path: str | Path) -> dict[str, Any]:
    """The paper's own protocol (the kit's evaluation, `evaluate`): its metrics joined by the EX's CI and the
    baseline's description, written back to its metrics.json."""
    ci = {k: v for k, v in baseline_metrics(result.records).items() if k.startswith("ex_ci")}
    metrics = {**result.metrics, **ci, **_describe(KIT_PROTOCOL, model_path, None, "greedy", None, None, None)}
    result.files["metrics"].write_text(json.dumps(metrics, indent=2, sort_keys=True) + "\n")
    return metrics


def release_config(cfg: Config, name: str) -> Config:
    """The profile's settings with the release's engine context (`eval.max_model_len`)."""
    return dataclasses.replace(cfg, eval=dataclasses.replace(cfg.eval, max_model_len=protocol(name).max_model_len))


@dataclass(frozen=True)
class ReleaseRun:
    """Which release is evaluated and how it decodes, as the CLI asks (`--baseline`, `--decoding`,
    `--max-new-tokens`): its name (`protocols.BASELINES`), one of its decodings (None: its own default) and a
    budget replacing its own (None: the release's; a smaller one is a CPU check, and the metrics say so)."""

    name: str
    decoding: str | None = None
    max_new_tokens: int | None = None


def evaluate_release(cfg: Config, paths: Paths, release: ReleaseRun, checkpoint: Any, eval_set: EvalSet,
                     examples: Sequence[Any], schemas: dict[str, Any], progress: bool = True) -> dict[str, Any]:
    """One set under the protocol of `release` (`ReleaseRun`) with the loaded `checkpoint`
    (`evaluate.LoadedCheckpoint` of `release_config`); its metrics, files in `baseline_dir`."""
    proto = protocol(release.name)
    decoding_name = release.decoding or proto.default_decoding
    decoding = proto.decoding(decoding_name)
    budget = release.max_new_tokens or proto.max_new_tokens
    start = time.perf_counter()
    _, tokenizer, engine = checkpoint.get()
    context = min(proto.max_model_len, getattr(engine, "max_model_len", None) or proto.max_model_len)
    prompts = release_prompts(cfg, proto, tokenizer, examples, _db_infos(eval_set, schemas), paths.run / "values_index")
    outs = _generate(cfg, engine, tokenizer, prompts, decoding, budget, context, progress)
    sqls = [[last_sql_block(c.text) for c in samples] for samples in outs]
    chosen = [majority_vote(s, ex.db_path, proto.vote_timeout_s) if decoding.voted else s[0]
              for s, ex in zip(sqls, examples)]
    mode = "set" if eval_set.format == "bird" else "spider"
    rolls = _score(cfg, examples, schemas, prompts, outs, chosen, mode)
    records = [_record(ex, r, o, s, c) for ex, r, o, s, c in zip(examples, rolls, outs, sqls, chosen)]
    metrics = {"set": eval_set.name, "mode": mode, "scoring": cfg.eval.scoring if mode == "set" else "kit",
               "engine": engine.kind, **baseline_metrics(records),
               **_describe(release.name, checkpoint.model_path, proto, decoding_name, decoding, budget, context),
               "relevant_values": proto.relevant_values and cfg.data.relevant_values,
               "seconds": time.perf_counter() - start}
    _write(baseline_dir(paths, release.name, eval_set.name), eval_set.name, metrics, records)
    return metrics


def add_baseline_arguments(ap: Any) -> None:
    """`python -m acesql_lib.evaluation.evaluate`'s options for a baseline."""
    from .protocols import BASELINES

    ap.add_argument("--baseline", choices=BASELINES, help="evaluate a released checkpoint under its own protocol")
    ap.add_argument("--decoding", help="with --baseline: one of the release's decodings (default: its own)")
    ap.add_argument("--max-new-tokens", type=int, help="with --baseline: replace the release's budget (CPU checks)")


def print_baseline_results(paths: Paths, name: str, results: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The CLI's line per set: EX, its CI, n and the folder of the files."""
    for set_name, m in results.items():
        print(json.dumps({"baseline": name, "set": set_name, "ex": round(m["ex"], 2),
                          "ci": [round(m["ex_ci_low"], 2), round(m["ex_ci_high"], 2)], "n": m["n"],
                          "out_dir": str(baseline_dir(paths, name, set_name))}))
    return results
