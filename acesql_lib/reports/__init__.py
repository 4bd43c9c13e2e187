"""Every table and figure of the paper, regenerated headless from what the stages logged.

Inputs are the files the notebooks write (`reports/<profile>/metrics/*.json`, the GRPO
`runs/<profile>/grpo/<variant>/metrics.jsonl`, the evaluation `predictions.jsonl`); the paper's
numbers come from `data/paper_results.yaml`. Each table puts the paper's numbers beside this run's,
with a column or header naming the profile. A missing input never crashes a report: the row,
cell or panel says "not run in profile <name>", so a partial pipeline still yields every artefact.
Malformed records are counted, skipped and listed in `ReportInputs.problems`.

Layout: `inputs` (what is read), `tables` (tables 1-5), `figures` (figures 2-6 and every stage's
own figure), `overview` (figure 1); this module builds them all. Every public name is importable
from `acesql_lib.reports`.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from ..config.profiles import load_config
from ..config.settings import Config
from ..config.paths import Paths, ReportDirs
from ..evaluation.stats import Interval, percent  # noqa: F401
# Re-exported: every public name (and the two helpers claims and tests use) lives in a submodule.
from .inputs import (  # noqa: F401
    FIGURES, NOT_REPORTED, PAPER_RESULTS, ROLES, SET_LABELS, STAGE_LABELS, STAGES, TABLES, ReportInputError,
    ReportInputs, _num, load_paper_results, not_run)
from .tables import (  # noqa: F401
    CI_NOTE, Table, dataset_label, ex_interval, fmt_ci, fmt_diff, fmt_p, hyperparameter_rows, paper_ci,
    primary_set, table_ablation, table_efficiency, table_hyperparameters, table_main, table_robustness, variant_stage,
    run_card_note)
from .figures import (  # noqa: F401
    VARIANT_ORDER, _variant_colors, fig_output_length, fig_pcgrad, fig_pool, fig_rewards, fig_routes, plot_data_routes,
    plot_distillation, plot_distributions, plot_sft_loss, save_figure, set_style)
from .overview import fig_overview  # noqa: F401
from .claims import build_tables, table_claims  # noqa: F401

log = logging.getLogger(__name__)


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


def build_all(cfg: Config | str, where: "Paths | ReportDirs | None" = None) -> dict[str, list[Path]]:
    """Every table and figure for one profile; returns artefact name -> written files."""
    cfg = load_config(cfg) if isinstance(cfg, str) else cfg
    dirs = ReportDirs.of(where, cfg)
    inputs, paper = ReportInputs(dirs.metrics, dirs.run), load_paper_results()
    tables = build_tables(cfg, inputs, paper)
    for t in tables:
        t.footer = run_card_note(cfg)
    out = {t.name: t.write(dirs.tables, cfg.reports.table_formats) for t in tables}
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
