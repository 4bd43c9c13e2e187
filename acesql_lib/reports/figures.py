"""The paper's figures 2-6 and every stage's own figure (data, filtering, distillation, SFT), one style.

Every plot of the kit lives here, beside the tables: notebooks call these functions and
`save_figure`, they do not draw by hand.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Iterable, Sequence

import matplotlib
import matplotlib.ticker

if "ipykernel" not in sys.modules:  # headless everywhere except a live notebook, whose inline backend is headless too
    matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from ..config.settings import Config  # noqa: E402
from .inputs import ROLES, STAGE_LABELS, STAGES, ReportInputs, _num, not_run  # noqa: E402
from .tables import dataset_label, primary_set  # noqa: E402


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
                 ylabel: str, scale: float = 1.0, smooth: bool = False) -> bool:
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
            ax.plot(x, y, "-", color=c, alpha=0.25, lw=0.8)
            y = np.convolve(np.pad(y, (w // 2, w - 1 - w // 2), mode="edge"), np.ones(w) / w, mode="valid")
        marker = "o" if not w else None
        ax.plot(x, y, "-", color=c, lw=1.5, marker=marker, ms=3, label=f"{variant}{note}{label_suffix_seeds}")
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
    _plot_curves(axes[3], logs, "val/retriever_exact", profile, "(d) validation retriever exact match", "%",
                 scale=100.0)  # logged as a fraction
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


def _pass_count_panel(ax: plt.Axes, hist: dict[int, float], n_generator: int,
                      rl_range: tuple[int, int] | None) -> None:
    """Questions per number of correct distillation samples, with the RL selection band (§3.4)."""
    ks = sorted(hist)
    ax.bar(ks, [hist[k] for k in ks], color=sns.color_palette("colorblind")[0], width=0.8)
    if rl_range:
        lo, hi = rl_range
        ax.axvspan(lo - 0.5, hi + 0.5, color="0.85", zorder=0, label=f"RL selection {lo}..{hi} (§3.4)")
    ax.set(xlabel=f"correct of N = {n_generator}", ylabel="questions")
    _legend(ax)


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
        _pass_count_panel(ax, hist, cfg.distill.n_generator, (cfg.distill.rl_min_correct, cfg.distill.rl_max_correct))
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
# Each stage's own figure (notebooks 00-03)


def plot_data_routes(route_share: dict[str, float], figures_dir: str | Path,
                     formats: Sequence[str] = ("png", "pdf")) -> list[Path]:
    """Notebook 00: share (a fraction) of questions per split annotated with two or more routes."""
    fig, ax = plt.subplots(figsize=(5, 3))
    ax.bar(list(route_share), [100 * v for v in route_share.values()], color="#4C72B0")
    ax.axhspan(19.1, 42.3, color="0.85", zorder=0, label="paper: 19.1-42.3% of correct predictions")
    ax.set(ylabel="% questions with ≥ 2 routes", title="Annotated alternative routes")
    ax.legend(fontsize=8)
    return save_figure(fig, "data_routes", figures_dir, formats)


def plot_distributions(before: pd.DataFrame, after: pd.DataFrame, figures_dir: str | Path,
                       formats: Sequence[str] = ("png", "pdf"), name: str = "filtering_distributions") -> list[Path]:
    """Four panels, before vs after filtering: complexity, question style, tables per schema, columns per SQL."""
    from ..data.filtering import SQL_COMPLEXITY_LEVELS

    set_style()
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5))
    both = pd.concat([before.assign(pool="before"), after.assign(pool="after")], ignore_index=True)
    per_db = both.drop_duplicates(["pool", "db_id"])  # schema size counts each database once
    panels = ((both, "complexity", "SQL complexity", "share of questions"),
              (both, "question_style", "Question style", "share of questions"),
              (per_db, "schema_tables", "Tables per schema", "share of databases"),
              (both, "sql_columns", "Columns per gold SQL", "share of questions"))
    for ax, (frame, col, title, ylabel) in zip(axes.flat, panels):
        share = frame.dropna(subset=[col]).groupby("pool")[col].value_counts(normalize=True).unstack(0)
        share = share.reindex(columns=["before", "after"])
        if col == "complexity":  # SynSQL's order, not the alphabet's
            share = share.reindex([lvl for lvl in SQL_COMPLEXITY_LEVELS if lvl in share.index] +
                                  [lvl for lvl in share.index if lvl not in SQL_COMPLEXITY_LEVELS])
        elif col in ("schema_tables", "sql_columns"):
            share.index = share.index.astype(int)
            share = share.sort_index()
        sizes = frame.groupby("pool").size()
        share.columns = [f"{p} (n={int(sizes.get(p, 0))})" for p in share.columns]
        share.plot.bar(ax=ax, rot=30 if share.index.dtype == object else 0)
        top = 1.25 * float(share.max().max() or 1)  # head room for the legend
        ax.set(title=title, xlabel="", ylabel=ylabel, ylim=(0, top))
    fig.tight_layout()
    return save_figure(fig, name, figures_dir, formats)


def plot_distillation(summary: dict[str, Any], figures_dir: str | Path, formats: Sequence[str] = ("png", "pdf"),
                      rl_range: tuple[int, int] | None = None) -> list[Path]:
    """Pass counts per question (with the RL selection band) and the alternative-route share."""
    set_style()
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.6), gridspec_kw={"width_ratios": [3, 1]})
    _pass_count_panel(a, _pass_rate_hist(summary), summary["n_generator"], rl_range)
    a.set_title("Self-distillation pass counts")
    share = summary.get("alt_route_share")
    share = None if share is None else 100 * share  # a fraction; None when no correct set resolves
    if share is None:
        _message(b, "no correct rollout\nwith a resolvable set")
    else:
        b.bar(["this run"], [share], color="#55A868")
    b.axhspan(19.1, 42.3, color="0.85", zorder=0, label="paper range")
    b.set(ylabel="% of correct rollouts", title="Alternative routes", ylim=(0, max(50, (share or 0) * 1.2)))
    b.legend(fontsize=8)
    fig.tight_layout()
    return save_figure(fig, "distill_pass_rates", figures_dir, formats)


def plot_sft_loss(steps: Sequence[float], losses: Sequence[float], figures_dir: str | Path,
                  formats: Sequence[str] = ("png", "pdf")) -> list[Path]:
    """Notebook 03: the mixed-SFT training loss per logged step."""
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(list(steps), list(losses), marker="o", ms=3)
    ax.set(xlabel="step", ylabel="training loss (completion tokens)", title="Mixed SFT")
    return save_figure(fig, "sft_loss", figures_dir, formats)
