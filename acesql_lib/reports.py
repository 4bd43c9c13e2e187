"""Every table and figure of the paper, regenerated headless from what the stages logged.

Inputs are the files the notebooks write (`reports/<profile>/metrics/*.json`, the GRPO
`runs/<profile>/grpo/<variant>/metrics.jsonl`, the evaluation `predictions.jsonl`); the paper's
numbers come from `data/paper_results.yaml`. Each table puts the paper's numbers beside this run's,
with a column or header naming the profile. A missing input never crashes a report: the row,
cell or panel says "not run in profile <name>", so a partial pipeline still yields every artefact.
Malformed records are counted, skipped and listed in `ReportInputs.problems`.
"""
from __future__ import annotations

import csv
import json
import logging
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import matplotlib
import matplotlib.ticker

if "ipykernel" not in sys.modules:  # headless everywhere except a live notebook, whose inline backend is headless too
    matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Polygon  # noqa: E402
import numpy as np  # noqa: E402
import seaborn as sns  # noqa: E402
import yaml  # noqa: E402

from . import stats  # noqa: E402
from .config import REPO_ROOT, Config, load_config  # noqa: E402
from .paths import Paths  # noqa: E402
from .stats import Interval, percent  # noqa: E402,F401

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


# ---------------------------------------------------------------------------------------------
# Inputs


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


@dataclass(frozen=True)
class ReportDirs:
    """Where reports read from and write to; tests point these at tmp dirs."""
    metrics: Path
    run: Path
    tables: Path
    figures: Path

    @classmethod
    def of(cls, where: "Paths | ReportDirs | None", cfg: Config) -> "ReportDirs":
        if isinstance(where, ReportDirs):
            return where
        p = where or Paths.from_config(cfg)
        return cls(p.metrics, p.run, p.tables, p.figures)


# ---------------------------------------------------------------------------------------------
# Tables


@dataclass
class Table:
    name: str
    caption: str
    columns: list[str]
    rows: list[list[str]]
    notes: list[str] = field(default_factory=list)

    def to_csv(self, path: Path) -> None:
        with path.open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(self.columns)
            w.writerows(self.rows)

    def to_markdown(self) -> str:
        esc = lambda s: str(s).replace("|", "\\|")  # noqa: E731
        lines = [f"**{self.caption}**", "", "| " + " | ".join(map(esc, self.columns)) + " |",
                 "|" + "|".join("---" for _ in self.columns) + "|"]
        lines += ["| " + " | ".join(map(esc, r)) + " |" for r in self.rows]
        lines += [""] + [f"- {n}" for n in self.notes] if self.notes else []
        return "\n".join(lines) + "\n"

    def to_latex(self) -> str:
        lines = ["\\begin{table}[t]", "\\centering", "\\small", f"\\caption{{{_tex(self.caption)}}}",
                 f"\\label{{tab:{self.name}}}", "\\begin{tabular}{" + "l" * len(self.columns) + "}", "\\toprule",
                 " & ".join(_tex(c) for c in self.columns) + " \\\\", "\\midrule"]
        lines += [" & ".join(_tex(c) for c in r) + " \\\\" for r in self.rows]
        lines += ["\\bottomrule", "\\end{tabular}"]
        lines += [f"\\par\\footnotesize {_tex(n)}" for n in self.notes]
        return "\n".join(lines + ["\\end{table}"]) + "\n"

    def write(self, out_dir: Path, formats: Iterable[str]) -> list[Path]:
        out_dir.mkdir(parents=True, exist_ok=True)
        paths = []
        for fmt in formats:
            path = out_dir / f"{self.name}.{fmt}"
            if fmt == "csv":
                self.to_csv(path)
            else:
                path.write_text(self.to_markdown() if fmt == "md" else self.to_latex())
            paths.append(path)
        return paths


_TEX_ESCAPES = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "—": "--",
                "≥": r"$\geq$", "×": r"$\times$", "§": r"\S{}", "≠": r"$\neq$", "Δ": r"$\Delta$", "±": r"$\pm$",
                "<": r"$<$", ">": r"$>$", "★": r"$\star$"}  # < and > print as other glyphs in LaTeX's default text font


def _tex(s: Any) -> str:
    return "".join(_TEX_ESCAPES.get(ch, ch) for ch in str(s))


def _fmt(v: Any, missing: str = NOT_REPORTED) -> str:
    """Percent and token numbers: one decimal for measured floats, integers as they are."""
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return str(v)
    n = _num(v)
    return missing if n is None else f"{n:.1f}"


def fmt_ci(iv: Interval | None, missing: str = NOT_REPORTED, scale: float = 100.0, digits: int = 1) -> str:
    """"47.3 [40.5, 54.2]": a fraction's estimate and 95% CI in percent (scale 100) or as counts (scale 1)."""
    if iv is None:
        return missing
    return f"{scale * iv.estimate:.{digits}f} [{scale * iv.low:.{digits}f}, {scale * iv.high:.{digits}f}]"


def fmt_diff(iv: Interval | None, missing: str = NOT_REPORTED, scale: float = 100.0, digits: int = 1) -> str:
    """"+5.4 [+1.2, +9.8]": a difference with its 95% CI, signed."""
    if iv is None:
        return missing
    return f"{scale * iv.estimate:+.{digits}f} [{scale * iv.low:+.{digits}f}, {scale * iv.high:+.{digits}f}]"


def fmt_p(p: float | None, missing: str = NOT_REPORTED) -> str:
    if p is None or not math.isfinite(p):
        return missing
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def paper_ci(paper: dict[str, Any], value: Any, set_name: str) -> Interval | None:
    """A published EX (%) as a Wilson CI at the set's size (`set_sizes` in the paper-results file)."""
    v, n = _num(value), (paper.get("set_sizes") or {}).get(set_name)
    return None if v is None or not n else stats.reported_ci(v, int(n))


def _paper_cell(paper: dict[str, Any], value: Any, set_name: str, missing: str = NOT_REPORTED) -> str:
    iv = paper_ci(paper, value, set_name)
    return fmt_ci(iv) if iv is not None else _fmt(value, missing)


def ex_interval(inputs: "ReportInputs", stage: str, set_name: str, m: dict[str, Any] | None = None) -> Interval | None:
    """EX (a fraction) with its 95% CI: from the per-question predictions (one run: Wilson; several
    seeds: the mean over seeds, bootstrap CI over questions of the seed-averaged correctness), else
    from the metrics' EX and n (Wilson at the nearest count); None when neither exists."""
    runs = inputs.outcomes(stage, set_name)
    if len(runs) == 1:
        return stats.ex_ci(next(iter(runs.values())))
    if runs:
        per_q = stats.seed_mean(runs, f"{stage} on {set_name}")
        return stats.bootstrap_mean_ci(np.array([per_q[k] for k in sorted(per_q)]))
    ex, n = _num((m or {}).get("ex")), _num((m or {}).get("n"))
    return stats.reported_ci(ex, int(n)) if ex is not None and n else None


def variant_stage(inputs: "ReportInputs", variant: str, set_name: str) -> str:
    """The evaluation folder of a variant: base and sft as named; RL variants as notebook 06 names them
    (`rl_<variant>`), the full method falling back to notebook 05's `rl`."""
    if variant in ("base", "sft"):
        return variant
    if variant == "full" and not inputs.outcomes("rl_full", set_name):
        return "rl"
    return f"rl_{variant}"


def dataset_label(name: str, cfg: Config) -> str:
    """Honest dataset names: a set that is not BIRD/Spider says so and names its format."""
    if name in SET_LABELS:
        return SET_LABELS[name]
    fmt = next((s.format for s in cfg.eval.sets if s.name == name), None)
    return f"{name} ({'BIRD' if fmt == 'bird' else 'Spider'} format)" if fmt else name


def primary_set(cfg: Config, inputs: ReportInputs) -> str:
    """The set that stands in for BIRD dev: BIRD dev itself, else the profile's first BIRD-format set."""
    names = [s.name for s in cfg.eval.sets]
    measured = [s for sets in inputs.evaluation().values() for s in sets]
    if "bird_dev" in names or "bird_dev" in measured:
        return "bird_dev"
    bird = [s.name for s in cfg.eval.sets if s.format == "bird"]
    return (bird or names or measured or ["bird_dev"])[0]


def _variant_metrics(inputs: ReportInputs, variant: str, set_name: str) -> dict[str, Any] | None:
    """Ablation rows: base/SFT come from the evaluation notebook; RL variants from the ablation notebook."""
    if variant in ("base", "sft"):
        return inputs.evaluation().get(variant, {}).get(set_name)
    found = inputs.ablations().get(variant, {}).get(set_name)
    if found is None and variant == "full":
        found = inputs.evaluation().get("rl", {}).get(set_name)
    return found


def _tokens(inputs: ReportInputs, m: dict[str, Any] | None, stage: str, set_name: str) -> tuple[Any, Any, Any]:
    """(total, retriever, generator) tokens per question: metrics first, else the predictions file."""
    m = m or {}
    ret, gen, tot = _num(m.get("retriever_tokens")), _num(m.get("generator_tokens")), _num(m.get("tokens_per_question"))
    pairs = inputs.role_tokens(stage, set_name)
    if pairs:
        ret = float(np.mean([a for a, _ in pairs])) if ret is None else ret
        gen = float(np.mean([b for _, b in pairs])) if gen is None else gen
    if tot is None and ret is not None and gen is not None:
        tot = ret + gen
    return tot, ret, gen


CI_NOTE = ("[a, b]: 95% CI. Paper numbers: Wilson interval at the benchmark's size (BIRD dev 1,534, Spider dev "
           "1,034, Spider test 2,147, DK 535, Syn 1,034, Realistic 508); this run: Wilson over its questions (several "
           "seeds: bootstrap over questions of the seed mean).")


def table_main(cfg: Config, inputs: ReportInputs, paper: dict[str, Any]) -> Table:
    prof = cfg.profile
    paper_sets = ["bird_dev", "spider_dev", "spider_test"]
    extra = [s.name for s in cfg.eval.sets if s.name not in SET_LABELS]
    extra += [s for s in inputs.evaluation().get("rl", {}) if s not in SET_LABELS and s not in extra]
    cols = ["Method", "Base", "Source"] + [SET_LABELS[s] for s in paper_sets] + [dataset_label(s, cfg) for s in extra]
    rows = [[r["method"], r["base"], "paper"] + [_paper_cell(paper, r.get(s), s) for s in paper_sets]
            + [NOT_REPORTED] * len(extra) for r in paper["main_results"]]
    rl = inputs.evaluation().get("rl", {})
    base = "tiny Qwen3 (trained from scratch)" if cfg.model.build_tiny else cfg.model.base_model
    rows.append(["ACE-SQL (this kit)", base, f"profile {prof}"]
                + [fmt_ci(ex_interval(inputs, "rl", s, rl.get(s)), not_run(prof)) for s in paper_sets + extra])
    notes = ["Greedy EX (%), one sample, two passes (retriever then generator), same checkpoint (§5).", CI_NOTE]
    if extra:
        notes.append(f"{', '.join(dataset_label(s, cfg) for s in extra)}: the kit's own dev set, not a paper benchmark; "
                     "its numbers are not comparable with BIRD/Spider.")
    return Table("table1_main", "Main results, greedy EX (%): paper vs this run", cols, rows, notes)


def table_efficiency(cfg: Config, inputs: ReportInputs, paper: dict[str, Any]) -> Table:
    prof, ps = cfg.profile, primary_set(cfg, inputs)
    cols = ["Method", "Source", "Dataset", "EX", "Output tokens / query", "Retriever tokens", "Generator tokens"]
    rows = [[r["method"], "paper", "BIRD dev", _paper_cell(paper, r["ex"], "bird_dev"), _fmt(r["output_tokens"]),
             NOT_REPORTED, NOT_REPORTED] for r in paper["efficiency"]]
    for stage, label in (("sft", "ACE-SQL SFT (this kit)"), ("rl", "ACE-SQL SFT + RL (this kit)")):
        m = inputs.evaluation().get(stage, {}).get(ps)
        tot, ret, gen = _tokens(inputs, m, stage, ps)
        nr = not_run(prof)
        rows.append([label, f"profile {prof}", dataset_label(ps, cfg), fmt_ci(ex_interval(inputs, stage, ps, m), nr),
                     _fmt(tot, nr), _fmt(ret, nr), _fmt(gen, nr)])
    notes = ["Output tokens / query: retriever + generator generated tokens per question, counted with the policy's "
             "tokenizer (kit's choice; the paper's counting is UNKNOWN, §5).", CI_NOTE]
    return Table("table2_efficiency", "Efficiency: EX (%) and output tokens per query, paper vs this run", cols, rows, notes)


def table_robustness(cfg: Config, inputs: ReportInputs, paper: dict[str, Any]) -> Table:
    sets = ["spider_dk", "spider_syn", "spider_realistic"]
    cols = ["Method", "Source"] + [SET_LABELS[s] for s in sets]
    rows = [[r["method"], "paper"] + [_paper_cell(paper, r.get(s), s) for s in sets] for r in paper["robustness"]]
    rl = inputs.evaluation().get("rl", {})
    rows.append(["ACE-SQL (this kit)", f"profile {cfg.profile}"]
                + [fmt_ci(ex_interval(inputs, "rl", s, rl.get(s)), not_run(cfg.profile)) for s in sets])
    return Table("table3_robustness", "Robustness, greedy EX (%): paper vs this run", cols, rows, [CI_NOTE])


def table_ablation(cfg: Config, inputs: ReportInputs, paper: dict[str, Any]) -> Table:
    prof, ps = cfg.profile, primary_set(cfg, inputs)
    nr = not_run(prof)
    cols = ["Variant", "Measured on", "BIRD dev (paper)", f"EX (profile {prof})", "Δ vs full (paper)",
            f"Δ vs full [95% CI] (profile {prof})", f"p vs full (profile {prof})", "Generator Ability (paper)",
            f"Generator Ability (profile {prof})", "Retriever Ability (paper)", f"Retriever Ability (profile {prof})",
            f"Retriever P / R / exact (profile {prof})"]
    text = paper["text"]
    entries = list(paper["ablation"]) + [text["static_gold_target"], text["dense_reward"]]
    rows = []
    paper_full = next((_num(e.get("bird_dev")) for e in entries if e["variant"] == "full"), None)
    full = inputs.outcomes(variant_stage(inputs, "full", ps), ps)
    for e in entries:
        m = _variant_metrics(inputs, e["variant"], ps)
        prf = NOT_REPORTED if m is None else " / ".join(
            _fmt(inputs.share(m.get(k), f"{e['variant']} on {ps}: {k}"), "?")
            for k in ("column_precision", "column_recall", "column_exact_match"))
        paper_ex = _paper_cell(paper, e.get("bird_dev"), "bird_dev",
                               "lower (not quantified)" if e["variant"] == "dense_reward" else NOT_REPORTED)
        stage = variant_stage(inputs, e["variant"], ps)
        pv = _num(e.get("bird_dev"))
        paper_d = NOT_REPORTED if e["variant"] == "full" or pv is None or paper_full is None else f"{pv - paper_full:+.1f}"
        mine = inputs.outcomes(stage, ps)
        if e["variant"] == "full":
            d_ci, d_p = NOT_REPORTED, NOT_REPORTED
        elif mine and full:
            c = stats.compare(mine, full, (e["variant"], "full"), seed=cfg.seed)
            d_ci, d_p = fmt_diff(c.diff), fmt_p(c.p_value)
        else:
            d_ci = d_p = nr if m is None else "no per-question predictions"
        rows.append([e["label"], dataset_label(ps, cfg), paper_ex, fmt_ci(ex_interval(inputs, stage, ps, m), nr),
                     paper_d, d_ci, d_p,
                     _fmt(e.get("generator_ability")), _fmt((m or {}).get("generator_ability"), nr),
                     _fmt(e.get("retriever_ability")),
                     _fmt(inputs.share((m or {}).get("retriever_ability"), f"{e['variant']} on {ps}: retriever_ability"), nr),
                     prf if m is not None else nr])
    alt = text["alt_route_share"]
    notes = ["Generator Ability = EX with the gold SQL's column set as the pruned schema; Retriever Ability = % of "
             "questions whose retrieved set covers the gold set (kit's definitions; the paper's are UNKNOWN, §5).",
             f"Last two rows are stated in the paper's text only: static gold target {text['static_gold_target']['bird_dev']} "
             f"vs {text['static_gold_target']['full_bird_dev']} ({text['static_gold_target']['claim']}); dense reward: "
             f"{text['dense_reward']['claim']}.",
             f"Paper: {alt['min']}% to {alt['max']}% of execution-correct predictions use alternative routes (fig6_routes).",
             "Δ vs full: the variant's EX minus the full method's, in points; this run's is paired by question id "
             "(bootstrap 95% CI, exact McNemar p; over seeds: see the claims table). The paper's Δ has no CI: "
             "its per-question results are not published.", CI_NOTE]
    return Table("table4_ablation", "Ablation: paper vs this run", cols, rows, notes)


def _config_value(cfg: Config, dotted: str) -> Any:
    node: Any = cfg
    for part in dotted.split("."):
        node = getattr(node, part)
    return node


def _fmt_setting(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return f"{v:g}".replace("e-0", "e-")
    return str(v)


def _same(paper_value: Any, value: Any) -> bool:
    if isinstance(paper_value, bool) or isinstance(value, bool):
        return paper_value is value
    if isinstance(paper_value, (int, float)) and isinstance(value, (int, float)):
        return math.isclose(paper_value, value, rel_tol=1e-9, abs_tol=1e-12)
    return str(paper_value).strip().lower() == str(value).strip().lower()


def hyperparameter_rows(profile_cfg: Config, paper: dict[str, Any]) -> list[dict[str, Any]]:
    """Per setting: paper value, kit default (`Config()`), this profile's value, and whether they agree."""
    default = Config()
    out = []
    for h in paper["hyperparameters"]:
        keys = [h["key"]] if isinstance(h.get("key"), str) else (h.get("key") or [])
        pv = h["paper"]
        row = {"name": h["name"], "section": h["section"], "key": ", ".join(keys), "paper": pv,
               "default": [_config_value(default, k) for k in keys], "value": [_config_value(profile_cfg, k) for k in keys]}
        # Settings stated in words ("2 to 14", "UNKNOWN") are shown, not compared.
        comparable = len(keys) == 1 and not (isinstance(pv, str) and (" " in pv.strip() or "UNKNOWN" in pv.upper()))
        row["default_is_paper"] = _same(pv, row["default"][0]) if comparable else None
        row["profile_is_paper"] = _same(pv, row["value"][0]) if comparable else None
        out.append(row)
    return out


def table_hyperparameters(cfg: Config, paper: dict[str, Any]) -> Table:
    prof = cfg.profile
    cols = ["Hyperparameter", "§", "Config key", "Paper", "Kit default", f"Profile {prof}", f"Profile {prof} = paper"]
    rows = []
    for r in hyperparameter_rows(cfg, paper):
        fmt = lambda vals: " x ".join(_fmt_setting(v) for v in vals) if vals else "not a config setting"  # noqa: E731
        same = {True: "yes", False: "no", None: "n/a"}[r["profile_is_paper"]]
        rows.append([r["name"], r["section"], r["key"] or NOT_REPORTED, _fmt_setting(r["paper"]), fmt(r["default"]),
                     fmt(r["value"]), same])
    notes = ["Kit default = the `Config()` dataclass default; n/a where the paper gives no single comparable value."]
    return Table("table5_hyperparameters", f"Hyperparameters: paper vs profile {prof}", cols, rows, notes)


def build_tables(cfg: Config, inputs: ReportInputs, paper: dict[str, Any] | None = None) -> list[Table]:
    paper = paper or load_paper_results()
    from .claims import table_claims  # the claims table reads these helpers; imported here to avoid a cycle

    return [table_main(cfg, inputs, paper), table_efficiency(cfg, inputs, paper), table_robustness(cfg, inputs, paper),
            table_ablation(cfg, inputs, paper), table_hyperparameters(cfg, paper), table_claims(cfg, inputs, paper)]


# ---------------------------------------------------------------------------------------------
# Figures


def set_style(style: str = "whitegrid", dpi: int = 150) -> None:
    """One look for every figure of the kit (notebooks call this too)."""
    sns.set_theme(style=style, context="paper", palette="colorblind")
    plt.rcParams.update({"figure.dpi": dpi, "savefig.dpi": dpi, "savefig.bbox": "tight", "axes.titlesize": 10,
                         "axes.labelsize": 9, "legend.fontsize": 8, "xtick.labelsize": 8, "ytick.labelsize": 8})


def save_figure(fig: plt.Figure, name: str, figures_dir: Path | str, formats: Iterable[str] = ("png", "pdf"),
                dpi: int | None = None) -> list[Path]:
    """Write `<figures_dir>/<name>.<fmt>` for each format and close the figure."""
    figures_dir = Path(figures_dir)
    figures_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for fmt in formats:
        path = figures_dir / f"{name}.{fmt}"
        fig.savefig(path, dpi=dpi, metadata={"Creator": None} if fmt == "png" else None)
        paths.append(path)
    plt.close(fig)
    return paths


def _message(ax: plt.Axes, text: str) -> None:
    """An empty panel that says why it is empty (once, even when several series were missing)."""
    if ax.texts:
        return
    ax.set_xticks([])
    ax.set_yticks([])
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, fontsize=9, color="0.35", style="italic")


def _series(rows: list[dict[str, Any]], key: str) -> tuple[np.ndarray, np.ndarray]:
    pts = [(r["step"], _num(r.get(key))) for r in rows]
    pts = [(s, v) for s, v in pts if v is not None]
    return np.array([p[0] for p in pts], float), np.array([p[1] for p in pts], float)


VARIANT_ORDER = ("full", "no_pcgrad", "no_schedule", "static_gold", "dense_reward")  # fixed colours, in this order


def _variant_colors(variants: Iterable[str]) -> dict[str, Any]:
    """The same variant in the same colour in every figure, whichever other variants a figure shows."""
    palette = sns.color_palette("colorblind", 10)
    extra = sorted(set(variants) - set(VARIANT_ORDER))
    return {v: palette[i % len(palette)] for i, v in enumerate(list(VARIANT_ORDER) + extra)}


def _plot_curves(ax: plt.Axes, logs: dict[str, list[dict[str, Any]]], key: str, profile: str, title: str,
                 ylabel: str, scale: float = 1.0, style: str = "-", label_suffix: str = "",
                 smooth: bool = False) -> bool:
    """One line per GRPO variant (raw thin, moving average bold when long); says so when nothing was logged.

    `smooth`: a per-step quantity measured on a handful of samples (a share of a few rollouts jumps
    between 0 and 70%) is drawn as its moving mean over max(3, steps / 8) steps from 6 steps on,
    the raw values faint behind it, and the legend says over how many steps."""
    ax.set_title(title)
    ax.set_xlabel("RL step")
    ax.set_ylabel(ylabel)
    colors, drawn = _variant_colors(logs), False
    for variant, rows in logs.items():
        x, y = _series(rows, key)
        if not len(x):
            continue
        y = y * scale
        c = colors[variant]
        seeds = int(max((_num(r.get("@seeds")) or 1) for r in rows))
        lo_x, lo = _series(rows, f"{key}@lo")
        _, hi = _series(rows, f"{key}@hi")
        if seeds > 1 and len(lo_x) == len(x):  # several seeds: min-max band behind their mean
            ax.fill_between(x, lo * scale, hi * scale, color=c, alpha=0.18, lw=0)
            label_suffix_seeds = f" (mean of {seeds} seeds, band min-max)"
        else:
            label_suffix_seeds = ""
        w, note = 0, ""
        if len(x) > 30:
            w = max(3, len(x) // 25)
        if smooth and len(x) >= 6:
            w = max(w, 3, len(x) // 8)
            note = f" (mean of {w} steps)"
        if w:
            ax.plot(x, y, style, color=c, alpha=0.25, lw=0.8)
            y = np.convolve(np.pad(y, (w // 2, w - 1 - w // 2), mode="edge"), np.ones(w) / w, mode="valid")
        marker = "o" if not w else None
        ax.plot(x, y, style, color=c, lw=1.5, marker=marker, ms=3,
                label=f"{variant}{label_suffix}{note}{label_suffix_seeds}")
        drawn = True
    if drawn and ax.texts:  # an earlier series of this panel was missing: the panel is not empty after all
        for t in list(ax.texts):
            t.remove()
        ax.xaxis.set_major_locator(matplotlib.ticker.AutoLocator())
        ax.yaxis.set_major_locator(matplotlib.ticker.AutoLocator())
    if not drawn and not ax.lines:
        _message(ax, not_run(profile) if not logs else f"not logged in profile {profile}")
    return drawn


def _legend(ax: plt.Axes) -> None:
    """A panel's own legend (not the variants'), below the panel, off the data."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncols=2)


def _figure_legend(fig: plt.Figure, axes: Iterable[plt.Axes]) -> None:
    """One legend for the whole figure, right of every panel: each variant once, never over a curve."""
    seen: dict[str, Any] = {}
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(lab, h)
    if seen:
        fig.legend(list(seen.values()), list(seen), loc="outside right upper", frameon=False)


def fig_rewards(logs: dict[str, list[dict[str, Any]]], profile: str) -> plt.Figure:
    fig, axes = plt.subplots(1, 4, figsize=(16, 3.6), constrained_layout=True)
    for ax, role in zip(axes, ROLES):
        _plot_curves(ax, logs, f"reward/{role}", profile, f"({'ab'[ROLES.index(role)]}) {role} reward", "mean reward")
    _plot_curves(axes[2], logs, "val/ex", profile, "(c) validation EX", "%")
    _plot_curves(axes[3], logs, "val/retriever_exact", profile, "(d) validation retriever exact match", "%")
    _figure_legend(fig, axes)
    fig.suptitle(f"Rewards per role and validation vs RL step (profile {profile})")
    return fig


def fig_output_length(logs: dict[str, list[dict[str, Any]]], inputs: ReportInputs, cfg: Config) -> plt.Figure:
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6), constrained_layout=True)
    for ax, role in zip(axes, ROLES):
        _plot_curves(ax, logs, f"completion_length/{role}", cfg.profile,
                     f"({'ab'[ROLES.index(role)]}) {role} completion length", "tokens")
    _figure_legend(fig, axes[:2])
    ax, ps = axes[2], primary_set(cfg, inputs)
    sets = [ps] + sorted({s for _, s in inputs.predictions()} - {ps})
    ps = next((s for s in sets if inputs.output_tokens("sft", s) or inputs.output_tokens("rl", s)), ps)
    ax.set_title(f"(c) output tokens per question, {dataset_label(ps, cfg)}")
    drawn = False
    for stage, color in (("sft", sns.color_palette("colorblind")[7]), ("rl", sns.color_palette("colorblind")[2])):
        toks = inputs.output_tokens(stage, ps)
        if toks:
            sns.histplot(toks, ax=ax, stat="density", element="step", fill=True, alpha=0.3, color=color,
                         label=f"{STAGE_LABELS[stage]} (mean {np.mean(toks):.0f})")
            ax.axvline(float(np.mean(toks)), color=color, ls="--", lw=1)
            drawn = True
    if drawn:
        ax.set_xlabel("retriever + generator tokens")
        _legend(ax)
    else:
        _message(ax, not_run(cfg.profile))
    fig.suptitle(f"Output length before (SFT) and after RL (profile {cfg.profile})")
    return fig


def _pass_rate_hist(distill: dict[str, Any] | None) -> dict[int, float]:
    hist = (distill or {}).get("pass_rate_hist")
    out: dict[int, float] = {}
    if isinstance(hist, dict):
        for k, v in hist.items():
            try:
                if _num(v) is not None:
                    out[int(k)] = float(v)
            except (TypeError, ValueError):
                continue
    return out


def fig_pool(logs: dict[str, list[dict[str, Any]]], inputs: ReportInputs, cfg: Config) -> plt.Figure:
    fig, axes = plt.subplots(1, 4, figsize=(16, 3.6), constrained_layout=True)
    _plot_curves(axes[0], logs, "pool/sets_per_question_mean", cfg.profile, "(a) distinct column sets per question", "sets")
    _plot_curves(axes[1], logs, "pool/target_differs_from_gold_share", cfg.profile,
                 "(b) pool targets ≠ gold set", "% of questions", scale=100.0, smooth=True)
    _plot_curves(axes[2], logs, "route/alt_share", cfg.profile, "(c) correct rollouts on an alt. route",
                 "% of correct rollouts", scale=100.0, smooth=True)
    _figure_legend(fig, axes[:3])
    ax, hist = axes[3], _pass_rate_hist(inputs.metrics("02_self_distillation"))
    ax.set_title("(d) distillation: correct SQLs per question")
    if hist:
        ks = sorted(hist)
        ax.bar(ks, [hist[k] for k in ks], color=sns.color_palette("colorblind")[0], width=0.8)
        lo, hi = cfg.distill.rl_min_correct, cfg.distill.rl_max_correct
        ax.axvspan(lo - 0.5, hi + 0.5, color="0.85", zorder=0, label=f"RL selection {lo}..{hi} (§3.4)")
        ax.set_xlabel(f"correct of N = {cfg.distill.n_generator}")
        ax.set_ylabel("questions")
        _legend(ax)
    else:
        _message(ax, not_run(cfg.profile))
    fig.suptitle(f"Empirical column-set pool (profile {cfg.profile})")
    return fig


def fig_pcgrad(logs: dict[str, list[dict[str, Any]]], profile: str) -> plt.Figure:
    fig, axes = plt.subplots(1, 4, figsize=(16, 3.6), constrained_layout=True)
    _plot_curves(axes[0], logs, "pcgrad/conflict_ratio", profile, "(a) conflicting tensors", "share of tensors")
    _plot_curves(axes[1], logs, "pcgrad/cosine", profile, "(b) cos(g_ret, g_gen)", "cosine")
    if axes[1].lines:
        axes[1].axhline(0, color="0.4", lw=0.8)
    _plot_curves(axes[2], logs, "pcgrad/norm_ret", profile, "(c) retriever gradient norm", "norm")
    _plot_curves(axes[3], logs, "pcgrad/norm_gen", profile, "(d) generator gradient norm", "norm")
    _figure_legend(fig, axes)
    fig.suptitle(f"PCGrad statistics vs RL step (profile {profile})")
    return fig


def fig_routes(inputs: ReportInputs, paper: dict[str, Any], cfg: Config) -> plt.Figure:
    fig, ax = plt.subplots(figsize=(7.5, 3.8), constrained_layout=True)
    alt = paper["text"]["alt_route_share"]
    ax.axhspan(alt["min"], alt["max"], color="0.88", zorder=0, label=f"paper: {alt['min']}-{alt['max']}%")
    bars: list[tuple[str, str, float]] = []
    d = inputs.share((inputs.metrics("02_self_distillation") or {}).get("alt_route_share"),
                     f"{inputs.metrics_dir / '02_self_distillation.json'}: alt_route_share")
    if d is not None:
        bars.append(("training pool", STAGE_LABELS["distill"], d))
    sets = sorted({s for st in inputs.evaluation().values() for s in st} | {s for _, s in inputs.predictions()})
    for s in sets:
        for stage in STAGES:
            v = inputs.alt_route_share(stage, s)
            if v is not None:
                bars.append((dataset_label(s, cfg), STAGE_LABELS[stage], v))
    if bars:
        groups = list(dict.fromkeys(b[0] for b in bars))
        hues = [h for h in STAGE_LABELS.values() if any(b[1] == h for b in bars)]
        colors = dict(zip(STAGE_LABELS.values(), sns.color_palette("colorblind", 4)))
        width, labelled = 0.8 / len(hues), set()
        for g, group in enumerate(groups):
            here = [(hue, v) for hue in hues for grp, h, v in bars if grp == group and h == hue]
            for i, (hue, v) in enumerate(here):  # bars of one group centred on its tick
                x = g + (i - (len(here) - 1) / 2) * width
                ax.bar(x, v, width=width * 0.95, color=colors[hue], label=None if hue in labelled else hue)
                labelled.add(hue)
                ax.text(x, v + 0.5, f"{v:.1f}", ha="center", va="bottom", fontsize=7)
        ax.set_xticks(range(len(groups)), groups)
        ax.set_ylim(0, max(alt["max"], max(b[2] for b in bars)) * 1.2)
    else:
        _message(ax, not_run(cfg.profile))
        ax.set_ylim(0, 60)
    ax.set_ylabel("% of correct predictions on an alternative route")
    ax.set_title(f"Alternative executable routes (profile {cfg.profile})")
    _legend(ax)
    return fig


# ---------------------------------------------------------------------------------------------
# Figure 1: the method overview, drawn by code (paper settings from the `Config()` defaults)

_RET, _GEN, _SHARED, _OK = "#dbe8f6", "#fbe3cc", "#eeeeee", "#dcefdc"


def _box(ax: plt.Axes, x: float, y: float, w: float, h: float, text: str = "", fc: str = _SHARED,
         fs: float = 8.5, weight: str = "normal", ls: str = "-", text_y: float | None = None) -> None:
    ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0,rounding_size=1.2", fc=fc, ec="0.3",
                                lw=0.9, ls=ls))
    if text:
        ax.text(x + w / 2, y + h / 2 if text_y is None else text_y, text, ha="center", va="center", fontsize=fs,
                weight=weight, linespacing=1.25)


def _arrow(ax: plt.Axes, start: tuple[float, float], end: tuple[float, float], rad: float = 0.0,
           color: str = "0.25", label: str = "", label_xy: tuple[float, float] | None = None) -> None:
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=11, lw=1.1, color=color,
                                 connectionstyle=f"arc3,rad={rad}", shrinkA=1, shrinkB=1))
    if label:
        lx, ly = label_xy or ((start[0] + end[0]) / 2, (start[1] + end[1]) / 2)
        ax.text(lx, ly, label, ha="center", va="center", fontsize=7.5, style="italic", color="0.2")


def _inset(ax: plt.Axes, rect: tuple[float, float, float, float]) -> plt.Axes:
    sub = ax.inset_axes(list(rect), transform=ax.transData)
    sub.tick_params(labelsize=6.5, length=2, pad=1)
    sub.grid(False)
    return sub


def fig_overview(cfg: Config | None = None) -> plt.Figure:
    """Figure 1: (a) SFT cold start by self-distillation, (b) one joint GRPO step."""
    g = Config().grpo  # the diagram shows the paper's method, whatever the profile
    k = math.ceil(g.vote_threshold * g.n_retriever)
    fig = plt.figure(figsize=(16, 10))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, 160)
    ax.set_ylim(0, 100)
    ax.axis("off")

    # (a) stage 1 ---------------------------------------------------------------------------
    _box(ax, 1, 66, 158, 33, fc="#f4f7fb")
    ax.text(2.5, 96, "(a) Stage 1: SFT cold start by self-distillation", fontsize=12, weight="bold", va="center")
    ax.add_patch(Polygon([(3, 91), (22, 85.5), (22, 74.5), (3, 69)], closed=True, fc="#e8e0f0", ec="0.3", lw=0.9))
    ax.text(11.5, 80, "SynSQL-2.5M\nsource filtering:\ncomplexity +\nschema diversity", ha="center", va="center",
            fontsize=8.5, linespacing=1.25)
    _box(ax, 26, 69, 94, 23.5, fc="white", ls="--")
    ax.text(27.5, 89.8, "self-consistency distillation with the base model", fontsize=9.5, style="italic", va="center")
    steps = [("retriever\nn samples\n(full schema)", _RET), ("majority\nvote", _RET), ("pruned\nschema", _SHARED),
             ("generator\nN samples", _GEN), ("execution\nfiltering\n(keep correct)", _OK)]
    for i, (text, fc) in enumerate(steps):
        x = 28 + i * 18.5
        _box(ax, x, 72, 15.5, 13.5, text, fc)
        if i:
            _arrow(ax, (x - 3, 78.75), (x, 78.75))
    _arrow(ax, (22, 80), (28, 78.75))
    _box(ax, 124, 72, 17, 13.5, "mixed SFT\n7,092 retriever +\n7,092 generator\nsamples", _SHARED)
    _box(ax, 144.5, 72, 13.5, 13.5, "initial policy\n" + r"$\pi_{\mathrm{SFT}}$" + "\n(= RL reference)", _OK,
         weight="bold")
    _arrow(ax, (120, 78.75), (124, 78.75))
    _arrow(ax, (141, 78.75), (144.5, 78.75))

    # (b) stage 2, row 1: rollouts --------------------------------------------------------------
    _box(ax, 1, 1, 158, 62.5, fc="#fcf9f4")
    ax.text(2.5, 60.5, f"(b) Stage 2: joint GRPO, one step (B = {g.batch_questions} questions)", fontsize=12,
            weight="bold", va="center")
    row1 = [(3, 15, "policy " + r"$\pi_\theta$" + "\none model,\ntwo roles", _OK),
            (22, 21, f"retriever rollout\n×{g.n_retriever} per question, T = {g.temperature:g}\n(question + full schema)", _RET),
            (47, 20, f"majority vote\ncolumn kept if ≥ {k} of {g.n_retriever}\n→ one pruned schema", _RET),
            (71, 21, f"generator rollout\n×{g.n_generator} on the\npruned schema", _GEN),
            (96, 21, "execute & verify\nSQLite vs gold SQL\n(multiset match)", _OK)]
    for i, (x, w, text, fc) in enumerate(row1):
        _box(ax, x, 45, w, 12, text, fc, weight="bold" if i == 0 else "normal")
        if i:
            prev = row1[i - 1]
            _arrow(ax, (prev[0] + prev[1], 51), (x, 51))
    for j, (label, fc) in enumerate((("retriever role", _RET), ("generator role", _GEN), ("both roles", _SHARED),
                                     ("model / verifier", _OK))):
        _box(ax, 96 + j * 16, 59.2, 3.5, 2.6, fc=fc)
        ax.text(100.5 + j * 16, 60.5, label, fontsize=8.5, va="center")

    # row 2: pool -> rewards -> losses -> w_gen -> PCGrad -> update (right to left) ------------
    # column-set pool with its bar chart, top set starred
    _box(ax, 128, 5, 29, 34, fc=_RET)
    ax.text(142.5, 36.3, "empirical column-set pool\n(per question)", ha="center", va="center", fontsize=9, weight="bold")
    sub = _inset(ax, (132, 15.5, 22, 14))
    weights = [3.5, 2.0, 1.25, 0.5]
    sub.bar(range(4), weights, color=["#4c72b0", "#9bb7d9", "#9bb7d9", "#9bb7d9"], width=0.7)
    sub.plot(0, weights[0] + 0.6, marker="*", ms=11, color="gold", mec="0.2", mew=0.6)
    sub.set_xticks(range(4), ["{a,b}", "{a,c}", "{a,b,d}", "{c}"])
    sub.set_ylim(0, 5)
    sub.set_yticks([0, 2, 4])
    sub.set_ylabel("weight", fontsize=6.5, labelpad=1)
    ax.text(142.5, 9.2, f"visit: w ← γ·w (γ = {g.gamma:g}); target = top set ★\n+1 per execution-correct SQL's set",
            ha="center", va="center", fontsize=7.5, linespacing=1.3)
    _arrow(ax, (117, 51), (142.5, 39.2), rad=-0.3, label="+1: column sets of\ncorrect SQLs", label_xy=(146, 47.5))

    # rewards with the length penalty curve
    _box(ax, 96, 5, 26, 34, fc=_SHARED)
    ax.text(109, 36.3, "sparse, gated rewards", ha="center", va="center", fontsize=9, weight="bold")
    ax.text(109, 30.2, r"$r_{ret} = 1 - p_{len}(L)$ if set ∈ targets" + "\n"
            + r"$r_{gen} = 1 - p_{len}(L)$ if SQL matches" + "\n(else 0; needs think + answer)",
            ha="center", va="center", fontsize=7.5, linespacing=1.35)
    sub = _inset(ax, (100.5, 9, 19.5, 13))
    L = np.linspace(0, 2600, 300)
    span = g.len_penalty_end - g.len_penalty_start
    sub.plot(L, g.len_penalty_max * np.clip((L - g.len_penalty_start) / span, 0, 1), color="#c44e52", lw=1.5)
    sub.set_xticks([g.len_penalty_start, g.len_penalty_end])
    sub.set_yticks([0, g.len_penalty_max])
    sub.set_ylim(-0.03, 0.6)
    sub.set_xlabel("L (generated tokens)", fontsize=6.5, labelpad=1)
    sub.set_ylabel(r"$p_{len}(L)$", fontsize=7, labelpad=1)
    _arrow(ax, (106.5, 45), (106.5, 39), label="match?", label_xy=(111, 42))
    _arrow(ax, (128, 22), (122, 22))
    ax.text(125, 24, "targets", ha="center", fontsize=7, style="italic", color="0.2")

    # two losses
    _box(ax, 71, 5, 21, 34, fc=_SHARED)
    ax.text(81.5, 36.3, "two GRPO losses", ha="center", va="center", fontsize=9, weight="bold")
    ax.text(81.5, 29.5, "group advantage\n(r − mean) / (std + ε)", ha="center", va="center", fontsize=7.5,
            linespacing=1.3)
    _box(ax, 73, 15.5, 17, 7, f"L_ret: PPO clip {g.clip_eps:g}\n+ KL {g.kl_coef:g}", _RET, fs=7.5)
    _box(ax, 73, 7, 17, 7, f"L_gen: PPO clip {g.clip_eps:g}\n+ KL {g.kl_coef:g}", _GEN, fs=7.5)
    _arrow(ax, (96, 22), (92, 22))

    # generator-weight ramp
    _box(ax, 47, 5, 20, 34, fc=_GEN)
    ax.text(57, 35.5, "generator weight\nschedule", ha="center", va="center", fontsize=9, weight="bold")
    sub = _inset(ax, (51.5, 14.5, 13.5, 13))
    s = np.linspace(0, 1, 200)
    sub.plot(s, np.clip(s / g.gen_schedule_ratio, 0, 1), color="#dd8452", lw=1.5)
    sub.set_xticks([0, g.gen_schedule_ratio, 1], ["0", f"{g.gen_schedule_ratio:g}", "1"])
    sub.set_yticks([0, 1])
    sub.set_ylim(-0.05, 1.15)
    sub.set_xlabel("share of RL steps", fontsize=6.5, labelpad=1)
    sub.set_ylabel(r"$w_{gen}$", fontsize=7, labelpad=1)
    ax.text(57, 8.2, r"$w_{ret} = 1$", ha="center", va="center", fontsize=7.5)
    _arrow(ax, (71, 22), (67, 22))

    # PCGrad aggregation with a conflicting pair
    _box(ax, 22, 5, 21, 34, fc=_SHARED)
    ax.text(32.5, 35.5, "PCGrad aggregation\n(per parameter tensor)", ha="center", va="center", fontsize=9,
            weight="bold")
    sub = _inset(ax, (25, 14.5, 15, 14.5))
    gr, gg = np.array([1.0, 0.25]), np.array([-0.55, 0.85])
    pr, pg = gr - (gr @ gg) / (gg @ gg) * gg, gg - (gr @ gg) / (gr @ gr) * gr
    for v, c, ls in ((gr, "#4c72b0", ":"), (gg, "#dd8452", ":"), (pr, "#4c72b0", "-"), (pg, "#dd8452", "-"),
                     (pr + pg, "0.1", "-")):
        sub.annotate("", xy=v, xytext=(0, 0), arrowprops=dict(arrowstyle="-|>", color=c, ls=ls, lw=1.3))
    sub.text(1.02, 0.08, r"$g_{ret}$", fontsize=7, color="#4c72b0")
    sub.text(-0.85, 0.72, r"$g_{gen}$", fontsize=7, color="#dd8452")
    sub.text(0.62, 1.45, "sum", fontsize=7)
    sub.set_xlim(-0.9, 1.3)
    sub.set_ylim(-0.1, 1.65)
    sub.set_xticks([])
    sub.set_yticks([])
    ax.text(32.5, 9, r"if $\langle g_{ret}, g_{gen}\rangle < 0$: project each" + "\nonto the other's normal plane\n"
            "(dotted → solid), then sum",
            ha="center", va="center", fontsize=7.5, linespacing=1.3)
    _arrow(ax, (47, 22), (43, 22))

    # update, then back to the policy
    _box(ax, 3, 5, 15, 34, f"update\n\nclip ‖g‖ ≤ {g.max_grad_norm:g}\nAdamW\nlr {_fmt_setting(g.learning_rate)}\n\nsync the\nrollout engine",
         _OK, fs=8.5)
    _arrow(ax, (22, 22), (18, 22))
    _arrow(ax, (10.5, 39), (10.5, 45))
    return fig


def build_figures(cfg: Config, inputs: ReportInputs, figures_dir: Path,
                  paper: dict[str, Any] | None = None) -> dict[str, list[Path]]:
    paper = paper or load_paper_results()
    set_style(cfg.reports.style, cfg.reports.dpi)
    fmts, logs = cfg.reports.figure_formats, inputs.grpo_logs()
    makers = {
        "fig1_overview": lambda: fig_overview(cfg),
        "fig2_rewards": lambda: fig_rewards(logs, cfg.profile),
        "fig3_output_length": lambda: fig_output_length(logs, inputs, cfg),
        "fig4_pool": lambda: fig_pool(logs, inputs, cfg),
        "fig5_pcgrad": lambda: fig_pcgrad(logs, cfg.profile),
        "fig6_routes": lambda: fig_routes(inputs, paper, cfg),
    }
    return {name: save_figure(make(), name, figures_dir, fmts, cfg.reports.dpi) for name, make in makers.items()}


# ---------------------------------------------------------------------------------------------
# Entry points


def build_all(cfg: Config | str, where: "Paths | ReportDirs | None" = None) -> dict[str, list[Path]]:
    """Every table and figure for one profile; returns artefact name -> written files."""
    cfg = load_config(cfg) if isinstance(cfg, str) else cfg
    dirs = ReportDirs.of(where, cfg)
    inputs, paper = ReportInputs(dirs.metrics, dirs.run), load_paper_results()
    out = {t.name: t.write(dirs.tables, cfg.reports.table_formats) for t in build_tables(cfg, inputs, paper)}
    out.update(build_figures(cfg, inputs, dirs.figures, paper))
    if inputs.problems:
        log.warning("%d input problem(s) while building reports; see ReportInputs.problems", len(inputs.problems))
    return out


def summary_markdown(cfg: Config | str, where: "Paths | ReportDirs | ReportInputs | None" = None) -> str:
    """The main table (paper vs measured) as Markdown, for the README and the reports notebook."""
    cfg = load_config(cfg) if isinstance(cfg, str) else cfg
    if not isinstance(where, ReportInputs):
        dirs = ReportDirs.of(where, cfg)
        where = ReportInputs(dirs.metrics, dirs.run)
    return table_main(cfg, where, load_paper_results()).to_markdown()
