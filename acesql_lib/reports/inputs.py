"""What reports read: the paper's numbers and this run's logged metrics, GRPO logs and predictions.

A missing input never crashes a report; malformed records are counted, skipped and listed in
`ReportInputs.problems`.
"""
from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import yaml

from ..config.paths import MAIN_VARIANT, REPO_ROOT, grpo_metrics_name
from ..evaluation.stats import percent

log = logging.getLogger(__name__)

PAPER_RESULTS = REPO_ROOT / "data" / "paper_results.yaml"
NOT_REPORTED = "—"  # a cell the paper (or this kit) has no number for
STAGES = ("base", "sft", "rl")
STAGE_LABELS = {"distill": "self-distillation", "base": "base", "sft": "SFT", "rl": "SFT + RL"}
SET_LABELS = {"bird_dev": "BIRD dev", "spider_dev": "Spider dev", "spider_test": "Spider test",
              "spider_dk": "Spider-DK", "spider_syn": "Spider-Syn", "spider_realistic": "Spider-Realistic"}
ROLES = ("retriever", "generator")
TABLES = ("table1_main", "table2_efficiency", "table3_robustness", "table4_ablation", "table5_hyperparameters", "claims")
FIGURES = ("fig1_overview", "fig2_rewards", "fig3_output_length", "fig4_pool", "fig5_pcgrad", "fig6_routes")


class ReportInputError(ValueError):
    """The paper-results file is unusable; the message names the file and the key."""


def not_run(profile: str) -> str:
    return f"not run in profile {profile}"


def load_paper_results(path: Path | str = PAPER_RESULTS) -> dict[str, Any]:
    """The paper's numbers; fails loudly (file + key) because every table depends on them."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise ReportInputError(f"{path}: cannot read paper results: {e}") from None
    for key in ("main_results", "efficiency", "robustness", "ablation", "text", "hyperparameters", "set_sizes"):
        if not isinstance(data, dict) or key not in data:
            raise ReportInputError(f"{path}: missing section {key!r}")
    return data


def _num(value: Any) -> float | None:
    """A finite float, or None for anything else (missing, null, NaN, text)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


class ReportInputs:
    """Reads what the stages wrote, tolerating absence and reporting malformed records."""

    def __init__(self, metrics_dir: Path | str, run_dir: Path | str):
        self.metrics_dir = Path(metrics_dir)
        self.run_dir = Path(run_dir)
        self.problems: list[str] = []
        self._metrics: dict[str, dict[str, Any] | None] = {}
        self._logs: dict[str, list[dict[str, Any]]] | None = None
        self._preds: dict[tuple[str, str], list[dict[str, Any]]] | None = None
        self._seed_preds: dict[tuple[str, str, str], list[dict[str, Any]]] | None = None
        self._outcomes: dict[tuple[str, str, str], dict[Any, dict[str, Any]]] = {}
        self._baselines: dict[str, dict[str, dict[str, Any]]] | None = None

    def _problem(self, msg: str) -> None:
        self.problems.append(msg)
        log.warning(msg)

    def metrics(self, notebook: str) -> dict[str, Any] | None:
        """`<metrics_dir>/<notebook>.json`, or None when absent or unreadable."""
        if notebook not in self._metrics:
            path = self.metrics_dir / f"{notebook}.json"
            data = None
            if path.exists():
                try:
                    data = json.loads(path.read_text())
                except (OSError, json.JSONDecodeError) as e:
                    self._problem(f"{path}: not valid JSON, ignored ({e})")
                if data is not None and not isinstance(data, dict):
                    self._problem(f"{path}: top level is not an object, ignored")
                    data = None
            self._metrics[notebook] = data
        return self._metrics[notebook]

    def _nested(self, notebook: str, key: str) -> dict[str, dict[str, dict[str, Any]]]:
        """`{key: {group: {set: {...}}}}` from one metrics file, dropping groups of the wrong shape."""
        data = (self.metrics(notebook) or {}).get(key) or {}
        out: dict[str, dict[str, dict[str, Any]]] = {}
        if not isinstance(data, dict):
            self._problem(f"{self.metrics_dir / notebook}.json: field {key!r} is not an object, ignored")
            return out
        for group, sets in data.items():
            if not isinstance(sets, dict):
                self._problem(f"{self.metrics_dir / notebook}.json: {key}.{group} is not an object, skipped")
                continue
            out[group] = {s: m for s, m in sets.items() if isinstance(m, dict)}
        return out

    def evaluation(self) -> dict[str, dict[str, dict[str, Any]]]:
        """stage ("base", "sft", "rl") -> set name -> metrics, from `05_evaluation.json`."""
        return self._nested("05_evaluation", "stages")

    def ablations(self) -> dict[str, dict[str, dict[str, Any]]]:
        """variant ("full", "no_pcgrad", ...) -> set name -> metrics, from `06_ablations.json`."""
        return self._nested("06_ablations", "variants")

    def baselines(self) -> dict[str, dict[str, dict[str, Any]]]:
        """baseline -> set name -> metrics of a released checkpoint measured by the kit (`acesql_lib.evaluation.baselines`),
        from `<run_dir>/eval/baselines/<baseline>/<set>/metrics.json`; each carries `results_file`, that file's
        path from the repository (or from the run folder's parent). Unreadable files are reported and skipped."""
        from ..evaluation.baselines import BASELINES_DIR

        if self._baselines is not None:
            return self._baselines
        out: dict[str, dict[str, dict[str, Any]]] = {}
        for path in sorted((self.run_dir / "eval" / BASELINES_DIR).glob("*/*/metrics.json")):
            try:
                m = json.loads(path.read_text())
            except (OSError, json.JSONDecodeError) as e:
                self._problem(f"{path}: not valid JSON, ignored ({e})")
                continue
            if not isinstance(m, dict) or _num(m.get("ex")) is None:
                self._problem(f"{path}: no numeric 'ex', ignored")
                continue
            base = REPO_ROOT if path.resolve().is_relative_to(REPO_ROOT) else self.run_dir.resolve().parent
            m["results_file"] = str(path.resolve().relative_to(base))
            out.setdefault(path.parent.parent.name, {})[path.parent.name] = m
        self._baselines = out
        return out

    def grpo_run(self, variant: str = MAIN_VARIANT) -> dict[str, Any] | None:
        """Notebook 04's summary of the GRPO run `variant`, from that variant's own metrics file
        (`paths.grpo_metrics_name`); None when that run was not summarised. A file that names another
        variant is reported and ignored."""
        name = grpo_metrics_name(variant)
        data = self.metrics(name)
        if data is not None and data.get("variant") != variant:
            self._problem(f"{self.metrics_dir / name}.json: the summary of variant {data.get('variant')!r}, "
                          f"not {variant!r}; ignored")
            return None
        return data

    def grpo_logs(self) -> dict[str, list[dict[str, Any]]]:
        """variant -> step records (sorted by step) from `<run_dir>/grpo/<variant>/metrics.jsonl`;
        runs set aside as `<variant>.stale-N` (started from other settings) are not this run's.

        A multi-seed study (`<run_dir>/seed-<k>/grpo/...`, no run of its own) gives per step the
        mean over the seeds that logged it, with `<key>@lo` / `<key>@hi` (min and max over seeds)
        and `@seeds` (how many), which the figures draw as a band around the mean."""
        if self._logs is None:
            self._logs = self._read_logs(self.run_dir)
            if not self._logs:
                per_seed = {d.name: self._read_logs(d) for d in sorted(self.run_dir.glob("seed-*")) if d.is_dir()}
                self._logs = _pool_seed_logs({k: v for k, v in per_seed.items() if v})
        return self._logs

    def _read_logs(self, run_dir: Path) -> dict[str, list[dict[str, Any]]]:
        logs = {}
        for path in sorted((run_dir / "grpo").glob("*/metrics.jsonl")):
            if ".stale-" in path.parent.name:
                continue
            rows = []
            for line_no, rec in self._jsonl(path):
                if _num(rec.get("step")) is None:
                    self._problem(f"{path}: line {line_no} has no numeric 'step', skipped")
                    continue
                rows.append(rec)
            if rows:
                logs[path.parent.name] = sorted(rows, key=lambda r: r["step"])
        return logs

    def predictions(self) -> dict[tuple[str, str], list[dict[str, Any]]]:
        """(stage, set) -> per-question rows from `<run_dir>/eval/<stage>/<set>/predictions.jsonl`; a
        multi-seed study without its own files shows its first seed's here (token means, route shares;
        EX and the claims pool every seed through `outcomes`)."""
        if self._preds is None:
            self._preds = {}
            found = sorted((self.run_dir / "eval").glob("*/*/predictions.jsonl"))
            if not found:
                seeds = sorted(d for d in self.run_dir.glob("seed-*") if (d / "eval").is_dir())
                found = sorted((seeds[0] / "eval").glob("*/*/predictions.jsonl")) if seeds else []
            for path in found:
                self._preds[(path.parent.parent.name, path.parent.name)] = [rec for _, rec in self._jsonl(path)]
        return self._preds

    def seed_predictions(self) -> dict[tuple[str, str, str], list[dict[str, Any]]]:
        """(seed, stage, set) -> rows from `<run_dir>/seed-<k>/eval/<stage>/<set>/predictions.jsonl`: a
        multi-seed study keeps one full run per seed under `seed-<k>/` (`study.py`)."""
        if self._seed_preds is None:
            self._seed_preds = {}
            for path in sorted(self.run_dir.glob("seed-*/eval/*/*/predictions.jsonl")):
                seed = path.parents[3].name.removeprefix("seed-")
                self._seed_preds[(seed, path.parent.parent.name, path.parent.name)] = [
                    rec for _, rec in self._jsonl(path)]
        return self._seed_preds

    def outcomes(self, stage: str, set_name: str, key: str = "correct") -> dict[Any, dict[str, Any]]:
        """{seed: {question id: value}} for one stage and set: the seeds' files when a study wrote them,
        else this run's file (seed None); {} when neither exists. `key` is "correct" (a bool per
        question) or "tokens" (retriever + generator tokens). A row without an id or with a value of
        the wrong type, or a repeated id, is reported and skipped."""
        memo = (stage, set_name, key)
        if memo in self._outcomes:
            return self._outcomes[memo]
        sources = {seed: rows for (seed, st, s), rows in self.seed_predictions().items() if (st, s) == (stage, set_name)}
        if not sources and (stage, set_name) in self.predictions():
            sources = {None: self.predictions()[(stage, set_name)]}
        out: dict[Any, dict[str, Any]] = {}
        for seed, rows in sorted(sources.items(), key=lambda kv: str(kv[0])):
            where = self.run_dir / ("" if seed is None else f"seed-{seed}") / "eval" / stage / set_name / "predictions.jsonl"
            got: dict[str, Any] = {}
            bad, dup = 0, 0
            for r in rows:
                qid = r.get("id")
                if key == "tokens":
                    a, b = _num(r.get("retriever_tokens")), _num(r.get("generator_tokens"))
                    value = None if a is None or b is None else a + b
                else:
                    value = r.get(key) if isinstance(r.get(key), bool) else None
                if key == "alt_route" and value is None and r.get(key) is None and isinstance(qid, (str, int)):
                    continue  # not correct, or its route did not resolve: no flag, not an error
                if not isinstance(qid, (str, int)) or isinstance(qid, bool) or value is None:
                    bad += 1
                elif str(qid) in got:
                    dup += 1
                else:
                    got[str(qid)] = value
            if bad:
                self._problem(f"{where}: {bad} row(s) without an id or a valid {key!r}, skipped")
            if dup:
                self._problem(f"{where}: {dup} repeated question id(s), later rows skipped")
            if got:
                out[seed] = got
        self._outcomes[memo] = out
        return out

    def _jsonl(self, path: Path) -> Iterable[tuple[int, dict[str, Any]]]:
        """(line number, object) per JSON-object line; other lines are counted and reported once."""
        bad = 0
        with path.open() as f:
            for line_no, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    rec = None
                if isinstance(rec, dict):
                    yield line_no, rec
                else:
                    bad += 1
        if bad:
            self._problem(f"{path}: {bad} malformed line(s) skipped")

    def role_tokens(self, stage: str, set_name: str) -> list[tuple[float, float]]:
        """(retriever, generator) generated tokens per question, from the predictions file."""
        pairs = [(_num(r.get("retriever_tokens")), _num(r.get("generator_tokens")))
                 for r in self.predictions().get((stage, set_name), [])]
        return [(a, b) for a, b in pairs if a is not None and b is not None]

    def output_tokens(self, stage: str, set_name: str) -> list[float]:
        """Retriever + generator tokens per question (§5: both passes count)."""
        return [a + b for a, b in self.role_tokens(stage, set_name)]

    def share(self, value: Any, where: str) -> float | None:
        """A share (a fraction in every file the stages write) in percent for a table. A value outside
        [0, 1] is not a share: reported (a file written in percent by an older version of the kit)
        and not shown, never rescaled by guessing."""
        v = _num(value)
        if v is not None and not 0.0 <= v <= 1.0:
            self._problem(f"{where}: share {v:g} is outside [0, 1] (written in percent by an older version? "
                          "rerun the notebook that wrote it); not shown")
            return None
        return percent(v)

    def alt_route_share(self, stage: str, set_name: str) -> float | None:
        """Percent of execution-correct predictions on an alternative route: metrics first, else predictions."""
        v = self.share(self.evaluation().get(stage, {}).get(set_name, {}).get("alt_route_share"),
                       f"{self.metrics_dir / '05_evaluation.json'}: stages.{stage}.{set_name}.alt_route_share")
        if v is not None:
            return v
        flags = [bool(r["alt_route"]) for r in self.predictions().get((stage, set_name), [])
                 if r.get("correct") is True and isinstance(r.get("alt_route"), bool)]
        return 100.0 * sum(flags) / len(flags) if flags else None


def _pool_seed_logs(per_seed: dict[str, dict[str, list[dict[str, Any]]]]) -> dict[str, list[dict[str, Any]]]:
    """{seed: {variant: rows}} -> {variant: rows of the mean over seeds, with @lo, @hi and @seeds}."""
    out: dict[str, list[dict[str, Any]]] = {}
    for variant in sorted({v for logs in per_seed.values() for v in logs}):
        by_step: dict[float, list[dict[str, Any]]] = {}
        for logs in per_seed.values():
            for r in logs.get(variant, []):
                by_step.setdefault(float(r["step"]), []).append(r)
        rows = []
        for step in sorted(by_step):
            recs, row = by_step[step], {"step": step, "@seeds": len(by_step[step])}
            for key in sorted({k for r in recs for k in r} - {"step"}):
                vals = [v for v in (_num(r.get(key)) for r in recs) if v is not None]
                if vals:
                    row.update({key: float(np.mean(vals)), f"{key}@lo": min(vals), f"{key}@hi": max(vals)})
            rows.append(row)
        out[variant] = rows
    return out
