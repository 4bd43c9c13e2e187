"""The paper's tables (1-5) beside this run's numbers: cells, formatting, CSV/Markdown/LaTeX output."""
from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from ..evaluation import stats
from ..evaluation.baselines.protocols import KIT_PROTOCOL
from ..config.eval import BIRD_DEV_VERSION
from ..config.settings import Config
from ..evaluation.stats import Interval
from .inputs import NOT_REPORTED, SET_LABELS, ReportInputs, _num, load_paper_results, not_run


@dataclass
class Table:
    name: str
    caption: str
    columns: list[str]
    rows: list[list[str]]
    notes: list[str] = field(default_factory=list)
    footer: str = ""  # a last line of the Markdown and LaTeX files (`run_card_note`: the run card, BIRD dev's version)

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
        lines += ["", self.footer] if self.footer else []
        return "\n".join(lines) + "\n"

    def to_latex(self) -> str:
        lines = ["\\begin{table}[t]", "\\centering", "\\small", f"\\caption{{{_tex(self.caption)}}}",
                 f"\\label{{tab:{self.name}}}", "\\begin{tabular}{" + "l" * len(self.columns) + "}", "\\toprule",
                 " & ".join(_tex(c) for c in self.columns) + " \\\\", "\\midrule"]
        lines += [" & ".join(_tex(c) for c in r) + " \\\\" for r in self.rows]
        lines += ["\\bottomrule", "\\end{tabular}"]
        lines += [f"\\par\\footnotesize {_tex(n)}" for n in self.notes + ([self.footer.strip("_")] if self.footer else [])]
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


RUN_CARD_NOTE = "_Run card: `run_card.md` in this run's reports folder (commit, settings, environment and data digests)."


def run_card_note(cfg: Config) -> str:
    """The tables' last line: where the run card is, and which BIRD dev release this run and the paper's rows
    were measured on (eval.sets[].version)."""
    bird = next((s for s in cfg.eval.sets if s.name == "bird_dev"), None)
    here = f"this run {bird.version}" if bird is not None else f"not measured in profile {cfg.profile}"
    return f"{RUN_CARD_NOTE} BIRD dev version: {here}; the paper's rows {BIRD_DEV_VERSION}._"


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


MEASURED = "measured by the kit"  # the Source of a released checkpoint's row evaluated by `acesql_lib.evaluation.baselines`


def measured_ci(m: dict[str, Any] | None) -> Interval | None:
    """A baseline measurement's EX with its 95% CI (fractions), from its metrics file."""
    ex, low, high = (_num((m or {}).get(k)) for k in ("ex", "ex_ci_low", "ex_ci_high"))
    return None if None in (ex, low, high) else Interval(ex / 100, low / 100, high / 100)


def _baseline_rows(inputs: ReportInputs, sets: list[str], paper_rows: list[dict[str, Any]], row: Any) -> list[list[str]]:
    """The paper's rows, each followed by the kit's measurement of the same checkpoint on some of `sets` when one
    exists (`row(paper_row, baseline, by_set)`, paper_row None for a measured baseline the paper's table lacks)."""
    from ..evaluation.baselines import PAPER_METHODS

    measured = {name: by_set for name, by_set in inputs.baselines().items() if set(by_set) & set(sets)}
    of_method = {m: name for name, methods in PAPER_METHODS.items() for m in methods}
    rows, shown = [], set()
    for r in paper_rows:
        rows.append(row(r, None, None))
        name = of_method.get(r["method"])
        if name in measured and name not in shown:
            rows.append(row(r, name, measured[name]))
            shown.add(name)
    rows += [row(None, name, measured[name]) for name in sorted(set(measured) - shown)]
    return rows


def _has_measured(rows: list[list[str]]) -> bool:
    return any(str(cell).startswith(MEASURED) for r in rows for cell in r)


def _source(by_set: dict[str, dict[str, Any]], sets: list[str]) -> str:
    """"measured by the kit, <decoding> (<folder>/<set>/metrics.json)": who measured, how it decoded, where."""
    found = [by_set[s] for s in sets if s in by_set]
    if not found:
        return MEASURED
    folder = Path(found[0]["results_file"]).parent.parent
    return f"{MEASURED}, {found[0].get('decoding', 'greedy')} ({folder}/<set>/metrics.json)"


CI_NOTE = ("[a, b]: 95% CI. Paper numbers: Wilson interval at the benchmark's size (BIRD dev 1,534, Spider dev "
           "1,034, Spider test 2,147, DK 535, Syn 1,034, Realistic 508); this run: Wilson over its questions (several "
           "seeds: bootstrap over questions of the seed mean).")


BASELINE_NOTE = (f"Rows '{MEASURED}': the released checkpoint evaluated by `python -m acesql_lib.evaluation.evaluate --baseline` "
                 "under its own published protocol (prompt, chat template, decoding, SQL extraction) with the kit's "
                 "executor and scoring rule; the file named holds the protocol, the decoding and the CI (Wilson over "
                 "its questions).")


def _baseline_label(name: str) -> str:
    from ..evaluation.baselines import PAPER_METHODS

    return PAPER_METHODS[name][-1]


def table_main(cfg: Config, inputs: ReportInputs, paper: dict[str, Any]) -> Table:
    prof = cfg.profile
    paper_sets = ["bird_dev", "spider_dev", "spider_test"]
    extra = [s.name for s in cfg.eval.sets if s.name not in SET_LABELS]
    extra += [s for s in inputs.evaluation().get("rl", {}) if s not in SET_LABELS and s not in extra]
    cols = ["Method", "Base", "Source"] + [SET_LABELS[s] for s in paper_sets] + [dataset_label(s, cfg) for s in extra]

    def row(r: dict[str, Any] | None, name: str | None, by_set: dict[str, dict[str, Any]] | None) -> list[str]:
        if name is None:
            return [r["method"], r["base"], "paper"] + [_paper_cell(paper, r.get(s), s) for s in paper_sets] \
                + [NOT_REPORTED] * len(extra)
        model = str(next(iter(by_set.values())).get("model", NOT_REPORTED))
        model = Path(model).name if Path(model).is_absolute() else model  # a hub id, or the local folder's name
        return [r["method"] if r else _baseline_label(name), model, _source(by_set, paper_sets + extra)] \
            + [fmt_ci(measured_ci(by_set.get(s)), "not measured") for s in paper_sets + extra]

    rows = _baseline_rows(inputs, paper_sets + extra, paper["main_results"], row)
    rl = inputs.evaluation().get("rl", {})
    base = "tiny Qwen3 (trained from scratch)" if cfg.model.build_tiny else cfg.model.base_model
    rows.append(["ACE-SQL (this kit)", base, f"profile {prof}"]
                + [fmt_ci(ex_interval(inputs, "rl", s, rl.get(s)), not_run(prof)) for s in paper_sets + extra])
    notes = ["Greedy EX (%), one sample, two passes (retriever then generator), same checkpoint (§5).", CI_NOTE]
    if _has_measured(rows):
        notes.append(BASELINE_NOTE)
    if extra:
        notes.append(f"{', '.join(dataset_label(s, cfg) for s in extra)}: the kit's own dev set, not a paper benchmark; "
                     "its numbers are not comparable with BIRD/Spider.")
    return Table("table1_main", "Main results, greedy EX (%): paper vs this run", cols, rows, notes)


def table_efficiency(cfg: Config, inputs: ReportInputs, paper: dict[str, Any]) -> Table:
    prof, ps = cfg.profile, primary_set(cfg, inputs)
    cols = ["Method", "Source", "Dataset", "EX", "Output tokens / query", "Retriever tokens", "Generator tokens"]

    def row(r: dict[str, Any] | None, name: str | None, by_set: dict[str, dict[str, Any]] | None) -> list[str]:
        if name is None:
            return [r["method"], "paper", "BIRD dev", _paper_cell(paper, r["ex"], "bird_dev"),
                    _fmt(r["output_tokens"]), NOT_REPORTED, NOT_REPORTED]
        m = by_set.get(ps)
        two_pass = name == KIT_PROTOCOL  # the kit's evaluation has a retriever pass; the releases are single-pass
        return [r["method"] if r else _baseline_label(name), _source(by_set, [ps]), dataset_label(ps, cfg),
                fmt_ci(measured_ci(m), "not measured"), _fmt((m or {}).get("tokens_per_question"), "not measured"),
                _fmt((m or {}).get("retriever_tokens"), "not measured") if two_pass else NOT_REPORTED,
                _fmt((m or {}).get("generator_tokens"), "not measured")]

    rows = _baseline_rows(inputs, [ps], paper["efficiency"], row)
    for stage, label in (("sft", "ACE-SQL SFT (this kit)"), ("rl", "ACE-SQL SFT + RL (this kit)")):
        m = inputs.evaluation().get(stage, {}).get(ps)
        tot, ret, gen = _tokens(inputs, m, stage, ps)
        nr = not_run(prof)
        rows.append([label, f"profile {prof}", dataset_label(ps, cfg), fmt_ci(ex_interval(inputs, stage, ps, m), nr),
                     _fmt(tot, nr), _fmt(ret, nr), _fmt(gen, nr)])
    notes = ["Output tokens / query: retriever + generator generated tokens per question, counted with the policy's "
             "tokenizer (kit's choice; the paper's counting is UNKNOWN, §5).", CI_NOTE]
    if _has_measured(rows):
        notes.append(BASELINE_NOTE + " Their output tokens count every sample (a voted decoding: all n).")
    return Table("table2_efficiency", "Efficiency: EX (%) and output tokens per query, paper vs this run", cols, rows, notes)


def table_robustness(cfg: Config, inputs: ReportInputs, paper: dict[str, Any]) -> Table:
    sets = ["spider_dk", "spider_syn", "spider_realistic"]
    cols = ["Method", "Source"] + [SET_LABELS[s] for s in sets]

    def row(r: dict[str, Any] | None, name: str | None, by_set: dict[str, dict[str, Any]] | None) -> list[str]:
        if name is None:
            return [r["method"], "paper"] + [_paper_cell(paper, r.get(s), s) for s in sets]
        return [r["method"] if r else _baseline_label(name), _source(by_set, sets)] \
            + [fmt_ci(measured_ci(by_set.get(s)), "not measured") for s in sets]

    rows = _baseline_rows(inputs, sets, paper["robustness"], row)
    rl = inputs.evaluation().get("rl", {})
    rows.append(["ACE-SQL (this kit)", f"profile {cfg.profile}"]
                + [fmt_ci(ex_interval(inputs, "rl", s, rl.get(s)), not_run(cfg.profile)) for s in sets])
    return Table("table3_robustness", "Robustness, greedy EX (%): paper vs this run", cols, rows,
                 [CI_NOTE] + ([BASELINE_NOTE] if _has_measured(rows) else []))


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
