"""Figure 1: the method overview, drawn by code (paper settings from the `Config()` defaults), one function per
part of the diagram, drawn in a fixed order."""
from __future__ import annotations

import math

import numpy as np

from ..config.settings import Config, GRPOConfig
from .figures import plt  # the headless backend is chosen there
from .tables import _fmt_setting
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Polygon  # noqa: E402


_RET, _GEN, _SHARED, _OK = "#dbe8f6", "#fbe3cc", "#eeeeee", "#dcefdc"


def _box(ax: plt.Axes, rect: tuple[float, float, float, float], text: str = "", fc: str = _SHARED,
         fs: float = 8.5, weight: str = "normal", ls: str = "-") -> None:
    """A rounded box at `rect` (x, y, width, height), its text centred in it."""
    x, y, w, h = rect
    ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0,rounding_size=1.2", fc=fc, ec="0.3",
                                lw=0.9, ls=ls))
    if text:
        ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=fs,
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
    fig = plt.figure(figsize=(16, 10))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, 160)
    ax.set_ylim(0, 100)
    ax.axis("off")
    _stage1(ax)
    _rollouts(ax, g)
    # row 2: pool -> rewards -> losses -> w_gen -> PCGrad -> update (right to left)
    _pool(ax, g)
    _rewards(ax, g)
    _losses(ax, g)
    _schedule(ax, g)
    _pcgrad(ax)
    _update(ax, g)
    return fig


def _stage1(ax: plt.Axes) -> None:
    """(a) Stage 1: the SFT cold start by self-distillation, left to right."""
    _box(ax, (1, 66, 158, 33), fc="#f4f7fb")
    ax.text(2.5, 96, "(a) Stage 1: SFT cold start by self-distillation", fontsize=12, weight="bold", va="center")
    ax.add_patch(Polygon([(3, 91), (22, 85.5), (22, 74.5), (3, 69)], closed=True, fc="#e8e0f0", ec="0.3", lw=0.9))
    ax.text(11.5, 80, "SynSQL-2.5M\nsource filtering:\ncomplexity +\nschema diversity", ha="center", va="center",
            fontsize=8.5, linespacing=1.25)
    _box(ax, (26, 69, 94, 23.5), fc="white", ls="--")
    ax.text(27.5, 89.8, "self-consistency distillation with the base model", fontsize=9.5, style="italic", va="center")
    steps = [("retriever\nn samples\n(full schema)", _RET), ("majority\nvote", _RET), ("pruned\nschema", _SHARED),
             ("generator\nN samples", _GEN), ("execution\nfiltering\n(keep correct)", _OK)]
    for i, (text, fc) in enumerate(steps):
        x = 28 + i * 18.5
        _box(ax, (x, 72, 15.5, 13.5), text, fc)
        if i:
            _arrow(ax, (x - 3, 78.75), (x, 78.75))
    _arrow(ax, (22, 80), (28, 78.75))
    _box(ax, (124, 72, 17, 13.5), "mixed SFT\n7,092 retriever +\n7,092 generator\nsamples", _SHARED)
    _box(ax, (144.5, 72, 13.5, 13.5), "initial policy\n" + r"$\pi_{\mathrm{SFT}}$" + "\n(= RL reference)", _OK,
         weight="bold")
    _arrow(ax, (120, 78.75), (124, 78.75))
    _arrow(ax, (141, 78.75), (144.5, 78.75))


def _rollouts(ax: plt.Axes, g: GRPOConfig) -> None:
    """(b) Stage 2, row 1: one joint GRPO step's rollouts, vote, generation and verification, and the legend."""
    k = math.ceil(g.vote_threshold * g.n_retriever)
    _box(ax, (1, 1, 158, 62.5), fc="#fcf9f4")
    ax.text(2.5, 60.5, f"(b) Stage 2: joint GRPO, one step (B = {g.batch_questions} questions)", fontsize=12,
            weight="bold", va="center")
    row1 = [(3, 15, "policy " + r"$\pi_\theta$" + "\none model,\ntwo roles", _OK),
            (22, 21, f"retriever rollout\n×{g.n_retriever} per question, T = {g.temperature:g}\n(question + full schema)", _RET),
            (47, 20, f"majority vote\ncolumn kept if ≥ {k} of {g.n_retriever}\n→ one pruned schema", _RET),
            (71, 21, f"generator rollout\n×{g.n_generator} on the\npruned schema", _GEN),
            (96, 21, "execute & verify\nSQLite vs gold SQL\n(multiset match)", _OK)]
    for i, (x, w, text, fc) in enumerate(row1):
        _box(ax, (x, 45, w, 12), text, fc, weight="bold" if i == 0 else "normal")
        if i:
            prev = row1[i - 1]
            _arrow(ax, (prev[0] + prev[1], 51), (x, 51))
    for j, (label, fc) in enumerate((("retriever role", _RET), ("generator role", _GEN), ("both roles", _SHARED),
                                     ("model / verifier", _OK))):
        _box(ax, (96 + j * 16, 59.2, 3.5, 2.6), fc=fc)
        ax.text(100.5 + j * 16, 60.5, label, fontsize=8.5, va="center")


def _pool(ax: plt.Axes, g: GRPOConfig) -> None:
    """Row 2 (right to left) starts at the empirical column-set pool, its bar chart with the top set starred."""
    _box(ax, (128, 5, 29, 34), fc=_RET)
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


def _rewards(ax: plt.Axes, g: GRPOConfig) -> None:
    """The sparse, gated rewards with the length-penalty curve."""
    _box(ax, (96, 5, 26, 34), fc=_SHARED)
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


def _losses(ax: plt.Axes, g: GRPOConfig) -> None:
    """The two GRPO losses."""
    _box(ax, (71, 5, 21, 34), fc=_SHARED)
    ax.text(81.5, 36.3, "two GRPO losses", ha="center", va="center", fontsize=9, weight="bold")
    ax.text(81.5, 29.5, "group advantage\n(r − mean) / (std + ε)", ha="center", va="center", fontsize=7.5,
            linespacing=1.3)
    _box(ax, (73, 15.5, 17, 7), f"L_ret: PPO clip {g.clip_eps:g}\n+ KL {g.kl_coef:g}", _RET, fs=7.5)
    _box(ax, (73, 7, 17, 7), f"L_gen: PPO clip {g.clip_eps:g}\n+ KL {g.kl_coef:g}", _GEN, fs=7.5)
    _arrow(ax, (96, 22), (92, 22))


def _schedule(ax: plt.Axes, g: GRPOConfig) -> None:
    """The generator-weight ramp."""
    _box(ax, (47, 5, 20, 34), fc=_GEN)
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


def _pcgrad(ax: plt.Axes) -> None:
    """PCGrad aggregation, drawn on a conflicting pair of gradients."""
    _box(ax, (22, 5, 21, 34), fc=_SHARED)
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


def _update(ax: plt.Axes, g: GRPOConfig) -> None:
    """The update, then back to the policy."""
    _box(ax, (3, 5, 15, 34), f"update\n\nclip ‖g‖ ≤ {g.max_grad_norm:g}\nAdamW\nlr {_fmt_setting(g.learning_rate)}\n\nsync the\nrollout engine",
         _OK, fs=8.5)
    _arrow(ax, (22, 22), (18, 22))
    _arrow(ax, (10.5, 39), (10.5, 45))
