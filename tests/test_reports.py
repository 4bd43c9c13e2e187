"""Reports: every paper table and figure from synthetic-but-plausible stage outputs, and from none."""
from __future__ import annotations

import csv
import json

import matplotlib.pyplot as plt
import pytest
import yaml
from PIL import Image

from scipy import stats as sps

from acesql_lib import reports
from acesql_lib.config.profiles import load_config
from acesql_lib.config.settings import Config
from helpers_reports import (BASE_EX, CORRECT, N_DEV, RL_EX, SFT_EX, grpo_step_record, question_tokens,
                             write_eval, write_inputs)


@pytest.fixture(scope="module")
def tiny_cfg() -> Config:
    return load_config("tiny")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    cfg = load_config("tiny", {"reports.dpi": 72})  # low resolution keeps the test fast; content is the same
    dirs = write_inputs(tmp_path_factory.mktemp("full"))
    return dirs, reports.build_all(cfg, dirs)


@pytest.fixture(scope="module")
def built_empty(tmp_path_factory):
    cfg = load_config("tiny", {"reports.figure_formats": ["png"], "reports.dpi": 72})
    root = tmp_path_factory.mktemp("empty")
    dirs = reports.ReportDirs(root / "metrics", root / "runs", root / "tables", root / "figures")
    return dirs, reports.build_all(cfg, dirs)


def _csv(dirs: reports.ReportDirs, name: str) -> list[dict[str, str]]:
    with (dirs.tables / f"{name}.csv").open() as f:
        return list(csv.DictReader(f))


def _row(rows: list[dict[str, str]], column: str, value: str) -> dict[str, str]:
    found = [r for r in rows if r[column] == value]
    assert len(found) == 1, f"{column}={value!r}: {len(found)} rows"
    return found[0]


def test_every_artefact_is_written_and_non_empty(built, tiny_cfg):
    dirs, out = built
    assert set(out) == set(reports.TABLES) | set(reports.FIGURES)
    for name in reports.TABLES:
        assert [p.suffix[1:] for p in out[name]] == tiny_cfg.reports.table_formats
    for name in reports.FIGURES:
        assert [p.suffix[1:] for p in out[name]] == tiny_cfg.reports.figure_formats
    for paths in out.values():
        for p in paths:
            assert p.exists() and p.stat().st_size > 0, p
            assert p.parent in (dirs.tables, dirs.figures)


def test_main_table_puts_paper_beside_measured_and_names_the_dataset_honestly(built):
    dirs, _ = built
    rows = _csv(dirs, "table1_main")
    assert _row(rows, "Method", "ACE-SQL")["BIRD dev"] == _wilson_cell(1002, 1534)  # 65.3% of BIRD dev's 1,534
    assert _row(rows, "Method", "ACE-SQL")["Spider test"] == _wilson_cell(1872, 2147)  # 87.2% of 2,147
    mine = _row(rows, "Source", "profile tiny")
    assert mine["tiny_dev (BIRD format)"] == _wilson_cell(95, N_DEV)
    assert mine["BIRD dev"] == mine["Spider test"] == "not run in profile tiny"
    assert _row(rows, "Method", "OmniSQL")["tiny_dev (BIRD format)"] == reports.NOT_REPORTED
    md = (dirs.tables / "table1_main.md").read_text()
    assert "65.3 [" in md and f"{RL_EX:.1f} [" in md and "not comparable with BIRD/Spider" in md
    assert "95% CI" in md


def _wilson_cell(k: int, n: int) -> str:
    ci = sps.binomtest(k, n).proportion_ci(0.95, method="wilson")
    return f"{100 * k / n:.1f} [{100 * ci.low:.1f}, {100 * ci.high:.1f}]"


def test_efficiency_table_reads_tokens_and_carries_ex_cis(built):
    dirs, _ = built
    rows = _csv(dirs, "table2_efficiency")
    paper_rl = _row(rows, "Method", "ACE-SQL SFT + RL")
    assert (paper_rl["Output tokens / query"], paper_rl["EX"]) == ("930", _wilson_cell(1002, 1534))
    rl = _row(rows, "Method", "ACE-SQL SFT + RL (this kit)")
    toks = [question_tokens("rl", i) for i in range(N_DEV)]
    assert (rl["EX"], rl["Output tokens / query"], rl["Dataset"]) == (
        _wilson_cell(95, N_DEV), f"{sum(r + g for r, g in toks) / N_DEV:.1f}", "tiny_dev (BIRD format)")
    sft = _row(rows, "Method", "ACE-SQL SFT (this kit)")
    toks = [question_tokens("sft", i) for i in range(N_DEV)]
    assert sft["Retriever tokens"] == f"{sum(r for r, _ in toks) / N_DEV:.1f}"


def test_ablation_rows_fill_from_both_notebooks_and_say_what_did_not_run(built):
    dirs, _ = built
    rows = _csv(dirs, "table4_ablation")
    full = _row(rows, "Variant", "+ ACE-SQL full")
    assert (full["BIRD dev (paper)"], full["EX (profile tiny)"]) == (_wilson_cell(1002, 1534), _wilson_cell(95, N_DEV))
    # precision 2/3 everywhere but the one exact question; recall 100%; exact match 1 of 200 = 0.5%
    assert full["Retriever P / R / exact (profile tiny)"] == f"{100 * (199 * 2 / 3 + 1) / 200:.1f} / 100.0 / 0.5"
    assert full["Retriever Ability (profile tiny)"] == "100.0" and full["Δ vs full (paper)"] == reports.NOT_REPORTED
    assert _row(rows, "Variant", "+ SFT")["Generator Ability (profile tiny)"] == f"{100 * (84 + 58) / 200:.1f}"
    sft = _row(rows, "Variant", "+ SFT")
    assert sft["Δ vs full (paper)"] == "-1.7" and sft["Δ vs full [95% CI] (profile tiny)"].startswith("-5.5 [")
    assert sft["p vs full (profile tiny)"] == "<0.001"  # 11 questions only the full method gets: p = 2 / 2^11
    assert _row(rows, "Variant", "+ ACE-SQL w/o schedule")["EX (profile tiny)"] == "not run in profile tiny"
    nopc = _row(rows, "Variant", "+ ACE-SQL w/o PCGrad")  # same EX, 10 questions won and 10 lost
    assert nopc["Δ vs full [95% CI] (profile tiny)"].startswith("+0.0 [-") and nopc["p vs full (profile tiny)"] == "1.000"
    static = _row(rows, "Variant", "static gold-column retriever target")
    assert (static["BIRD dev (paper)"], static["EX (profile tiny)"]) == (_wilson_cell(992, 1534), _wilson_cell(120, N_DEV))
    assert _row(rows, "Variant", "dense retriever reward")["BIRD dev (paper)"] == "lower (not quantified)"
    assert "19.1% to 42.3%" in (dirs.tables / "table4_ablation.md").read_text()


def test_robustness_row_is_not_run_in_tiny(built):
    dirs, _ = built
    mine = _row(_csv(dirs, "table3_robustness"), "Source", "profile tiny")
    assert mine["Spider-DK"] == mine["Spider-Realistic"] == "not run in profile tiny"
    assert _row(_csv(dirs, "table3_robustness"), "Method", "ACE-SQL")["Spider-Realistic"] == _wilson_cell(404, 508)


def test_hyperparameter_table_compares_paper_default_and_profile(built):
    dirs, _ = built
    rows = _csv(dirs, "table5_hyperparameters")
    gamma = _row(rows, "Config key", "grpo.gamma")
    assert (gamma["Paper"], gamma["Kit default"], gamma["Profile tiny"], gamma["Profile tiny = paper"]) == (
        "0.5", "0.5", "0.5", "yes")
    batch = _row(rows, "Config key", "grpo.batch_questions")
    assert (batch["Paper"], batch["Profile tiny"], batch["Profile tiny = paper"]) == ("16", "4", "no")
    assert _row(rows, "Config key", "grpo.learning_rate")["Paper"] == "1e-6"
    assert _row(rows, "Hyperparameter", "RL hardware and time")["Profile tiny"] == "not a config setting"
    assert _row(rows, "Config key", "distill.n_retriever")["Profile tiny = paper"] == "n/a"  # UNKNOWN in the paper


def test_config_defaults_equal_every_comparable_paper_setting():
    rows = reports.hyperparameter_rows(Config(), reports.load_paper_results())
    compared = [r for r in rows if r["default_is_paper"] is not None]
    assert len(compared) > 30
    assert [r["key"] for r in compared if not r["default_is_paper"]] == []


def test_latex_and_markdown_are_well_formed(built):
    dirs, _ = built
    for name in reports.TABLES:
        n_cols = len(next(csv.reader((dirs.tables / f"{name}.csv").open())))
        tex = (dirs.tables / f"{name}.tex").read_text()
        assert tex.count("\\begin{tabular}") == tex.count("\\end{tabular}") == 1
        assert "\\begin{tabular}{" + "l" * n_cols + "}" in tex
        body = tex.split("\\midrule\n")[1].split("\\bottomrule")[0].strip().splitlines()
        assert body and all(line.endswith("\\\\") for line in body)
        for line in body:  # every unescaped & separates a cell
            assert line.replace("\\&", "").count("&") == n_cols - 1, line
        assert "tiny_dev" not in tex and "%" not in tex.replace("\\%", "")
        text_mode = tex.replace("$<$", "").replace("$>$", "")
        assert not any(ch in text_mode for ch in "Δ±<>"), name  # written as math, not as raw text glyphs
        md = [ln for ln in (dirs.tables / f"{name}.md").read_text().splitlines() if ln.startswith("|")]
        assert md[1] == "|" + "|".join(["---"] * n_cols) + "|"
        assert all(ln.replace("\\|", "").count("|") == n_cols + 1 for ln in md), name


def test_figures_are_readable_images(built):
    dirs, _ = built
    for name in reports.FIGURES:
        with Image.open(dirs.figures / f"{name}.png") as im:
            im.verify()
        with Image.open(dirs.figures / f"{name}.png") as im:
            w, h = im.size
            assert w > 300 and h > 200
            assert len(set(im.convert("L").resize((64, 40)).getdata())) > 5, f"{name} looks blank"
        assert (dirs.figures / f"{name}.pdf").read_bytes().startswith(b"%PDF")


def test_missing_inputs_give_not_run_wording_not_a_crash(built_empty):
    dirs, out = built_empty
    assert set(out) == set(reports.TABLES) | set(reports.FIGURES)
    assert all(p.suffix == ".png" and p.stat().st_size > 0 for f in reports.FIGURES for p in out[f])
    main = _row(_csv(dirs, "table1_main"), "Source", "profile tiny")
    assert main["tiny_dev (BIRD format)"] == main["BIRD dev"] == "not run in profile tiny"
    for r in _csv(dirs, "table4_ablation"):
        assert r["EX (profile tiny)"] == "not run in profile tiny"
    assert "not run in profile tiny" in (dirs.tables / "table2_efficiency.md").read_text()


def test_malformed_records_are_counted_and_skipped(tmp_path):
    dirs = write_inputs(tmp_path)
    (dirs.metrics / "06_ablations.json").write_text("{truncated")
    inputs = reports.ReportInputs(dirs.metrics, dirs.run)
    logs = inputs.grpo_logs()
    assert sorted(logs) == ["full", "no_pcgrad"] and len(logs["full"]) == 10
    assert [r["step"] for r in logs["full"]] == list(range(1, 11))
    assert inputs.ablations() == {}
    text = "\n".join(inputs.problems)
    assert "1 malformed line(s)" in text and "line 12 has no numeric 'step'" in text
    assert "06_ablations.json: not valid JSON" in text


def test_alternative_route_share_prefers_metrics_then_predictions(tmp_path):
    inputs = reports.ReportInputs(write_inputs(tmp_path).metrics, tmp_path / "runs")
    assert inputs.alt_route_share("rl", "tiny_dev") == pytest.approx(100 / 95)  # metrics (fraction -> %)
    assert inputs.alt_route_share("base", "tiny_dev") == pytest.approx(100 * 3 / 45)
    assert inputs.alt_route_share("rl_no_pcgrad", "tiny_dev") == pytest.approx(100 / 95)  # predictions only
    assert inputs.alt_route_share("base", "bird_dev") is None


def test_summary_markdown_is_the_main_table(tmp_path, tiny_cfg):
    md = reports.summary_markdown(tiny_cfg, write_inputs(tmp_path))
    assert md.splitlines()[0].startswith("**Main results")
    assert f"| ACE-SQL | Qwen3-8B | paper | {_wilson_cell(1002, 1534)} | {_wilson_cell(862, 1034)} |" in md
    assert f"| {_wilson_cell(95, N_DEV)} |" in md


def test_paper_results_file_missing_a_section_is_named(tmp_path):
    data = yaml.safe_load(reports.PAPER_RESULTS.read_text())
    del data["ablation"]
    bad = tmp_path / "paper_results.yaml"
    bad.write_text(yaml.safe_dump(data))
    with pytest.raises(reports.ReportInputError, match="paper_results.yaml: missing section 'ablation'"):
        reports.load_paper_results(bad)


def test_runs_set_aside_as_stale_are_not_variants(built):
    dirs, _ = built
    assert (dirs.run / "grpo" / "full.stale-1" / "metrics.jsonl").exists()
    assert sorted(reports.ReportInputs(dirs.metrics, dirs.run).grpo_logs()) == ["full", "no_pcgrad"]


def test_a_small_share_prints_as_itself_not_times_100(tmp_path, tiny_cfg):
    """evaluate's shares are fractions and the tables print them in percent, whatever their size (a share
    guessed from its value would print 0.5% column exact match as 50%)."""
    run = tmp_path / "runs"
    m = write_eval(run, "rl", n_exact=1, n_alt=1)  # 1 of 200 exact (0.5%), 1 of 95 correct on another route
    metrics = tmp_path / "metrics"
    metrics.mkdir()
    (metrics / "05_evaluation.json").write_text(json.dumps({"stages": {"rl": {"tiny_dev": m}}}))
    inputs = reports.ReportInputs(metrics, run)
    table = reports.table_ablation(tiny_cfg, inputs, reports.load_paper_results())
    full = table.rows[[r[0] for r in table.rows].index("+ ACE-SQL full")]
    assert full[table.columns.index("Retriever P / R / exact (profile tiny)")].endswith(" / 100.0 / 0.5")
    assert inputs.alt_route_share("rl", "tiny_dev") == pytest.approx(100 / 95)


def _claims(dirs: reports.ReportDirs, cfg: Config) -> dict[str, dict[str, str]]:
    from acesql_lib.reports.claims import table_claims

    t = table_claims(cfg, reports.ReportInputs(dirs.metrics, dirs.run), reports.load_paper_results())
    return {r[0]: dict(zip(t.columns, r)) for r in t.rows}


def test_claims_table_is_written_with_verdicts_from_paired_tests(built):
    dirs, out = built
    assert [p.name for p in out["claims"]] == ["claims.csv", "claims.md", "claims.tex"]
    rows = {r["Claim"]: r for r in _csv(dirs, "claims")}
    assert len(rows) == 8
    sft = rows["SFT > base"]
    assert (sft["This run (profile tiny)"], sft["Verdict"]) == (f"{SFT_EX:.1f} vs {BASE_EX:.1f}", "holds")
    assert sft["Paper Δ [unpaired 95% CI]"].startswith("+9.4 [") and sft["Paper gap vs noise"] == "beyond noise"
    rl = rows["RL > SFT"]  # 11 questions only RL gets right, none the other way: McNemar p = 2 / 2^11
    assert rl["Δ [95% CI]"].startswith("+5.5 [+") and rl["p (test)"] == "<0.001 (exact McNemar)"
    assert rl["Verdict"] == "holds" and rl["Paper gap vs noise"] == "within noise"
    assert rows["full > w/o PCGrad"]["Verdict"] == "not distinguishable at this scale"  # 10 won, 10 lost
    assert rows["full > w/o PCGrad"]["p (test)"] == "1.000 (exact McNemar)"
    assert rows["empirical pool > static gold target"]["Verdict"] == "reversed"  # static gold is 25 questions better
    assert rows["full > w/o schedule"]["Verdict"] == "not run in profile tiny"
    tok = rows["RL shortens outputs (tokens per question)"]
    assert tok["Paper (BIRD dev)"] == "0.93k vs 1.90k" and tok["Verdict"] == "holds" and tok["Δ [95% CI]"].startswith("-")
    alt = rows["correct predictions on alternative routes (%)"]
    assert alt["This run (profile tiny)"] == _wilson_cell(1, 95) and alt["Verdict"] == "outside the paper's range"
    assert "not distinguishable at this scale" in (dirs.tables / "claims.md").read_text()


def test_claims_over_seeds_pair_each_seed_and_show_the_spread(tmp_path, tiny_cfg):
    dirs = reports.ReportDirs(tmp_path / "metrics", tmp_path / "runs", tmp_path / "tables", tmp_path / "figures")
    for seed, rl_k in ((0, 95), (1, 90), (2, 100)):  # nested correct sets: RL beats SFT (84) by 11, 6 and 16 questions
        CORRECT["rl_seed"] = (rl_k, 0)
        for stage in ("base", "sft"):
            write_eval(dirs.run / f"seed-{seed}", stage)
        m = write_eval(dirs.run / f"seed-{seed}", "rl_seed")
        (dirs.run / f"seed-{seed}" / "eval" / "rl_seed").rename(dirs.run / f"seed-{seed}" / "eval" / "rl")
    del CORRECT["rl_seed"]
    assert m["ex"] == 50.0
    rows = _claims(dirs, tiny_cfg)
    rl = rows["RL > SFT"]
    assert rl["Seeds"].startswith("3 seeds: +5.5, +3.0, +8.0; mean +5.5, sd 2.5")
    assert rl["Δ [95% CI]"].startswith("+5.5 [+") and "sign-flip" in rl["p (test)"] and rl["Verdict"] == "holds"
    assert rows["SFT > base"]["This run (profile tiny)"] == f"{SFT_EX:.1f} vs {BASE_EX:.1f}"


def test_outcomes_are_keyed_by_id_and_bad_rows_are_reported(tmp_path):
    run = tmp_path / "runs"
    write_eval(run, "sft")
    pred = run / "eval" / "sft" / "tiny_dev" / "predictions.jsonl"
    lines = pred.read_text().splitlines()
    rows = [json.loads(x) for x in lines]
    rows[1]["correct"] = "yes"  # wrong type
    del rows[2]["id"]
    rows.append(dict(rows[0]))  # a repeated id
    pred.write_text("".join(json.dumps(r) + "\n" for r in reversed(rows)))
    inputs = reports.ReportInputs(tmp_path / "metrics", run)
    got = inputs.outcomes("sft", "tiny_dev")
    assert list(got) == [None] and len(got[None]) == N_DEV - 2 and got[None]["dev_000"] is True
    text = "\n".join(inputs.problems)
    assert "2 row(s) without an id or a valid 'correct'" in text and "1 repeated question id(s)" in text
    assert "sft/tiny_dev/predictions.jsonl" in text


def test_figures_keep_one_quantity_per_panel_legends_off_the_data_and_colours_per_variant(tmp_path):
    dirs = write_inputs(tmp_path)
    logs = reports.ReportInputs(dirs.metrics, dirs.run).grpo_logs()
    colours = reports._variant_colors(["no_pcgrad"])
    assert colours["no_pcgrad"] == reports._variant_colors(["full", "no_pcgrad", "dense_reward", "x"])["no_pcgrad"]
    for make in (reports.fig_rewards, reports.fig_pcgrad):
        fig = make(logs, "tiny")
        fig.canvas.draw()
        data_axes = [ax for ax in fig.axes if ax.lines]
        assert len(data_axes) == 4
        for ax in data_axes:  # one quantity: one line (or one raw + one smoothed) per variant, not one per key
            assert len({ln.get_label() for ln in ax.lines if not ln.get_label().startswith("_")}) <= len(logs)
            assert ax.get_legend() is None
        assert len(fig.legends) == 1
        box = fig.legends[0].get_window_extent()
        assert not any(box.overlaps(ax.get_window_extent()) for ax in fig.axes), make.__name__
        plt.close(fig)
    fig = reports.fig_pool(logs, reports.ReportInputs(dirs.metrics, dirs.run), load_config("tiny"))
    labels = [ln.get_label() for ln in fig.axes[2].lines if not ln.get_label().startswith("_")]
    assert labels and all(lab.endswith("(mean of 3 steps)") for lab in labels)  # noisy route shares smoothed, said so
    plt.close(fig)


def test_seeds_are_drawn_as_a_band_around_their_mean(tmp_path):
    run = tmp_path / "runs"
    for seed, shift in ((0, 0.0), (1, 0.2)):
        log = run / f"seed-{seed}" / "grpo" / "full" / "metrics.jsonl"
        log.parent.mkdir(parents=True)
        log.write_text("".join(json.dumps({**grpo_step_record(s, "full"), "reward/retriever": 0.1 * s + shift}) + "\n"
                               for s in range(1, 6)))
    logs = reports.ReportInputs(tmp_path / "metrics", run).grpo_logs()
    row = logs["full"][2]  # step 3
    assert row["@seeds"] == 2 and row["reward/retriever"] == pytest.approx(0.4)
    assert (row["reward/retriever@lo"], row["reward/retriever@hi"]) == (pytest.approx(0.3), pytest.approx(0.5))
    fig = reports.fig_rewards(logs, "tiny")
    ax = fig.axes[0]
    assert len(ax.collections) == 1  # the band
    assert [ln.get_label() for ln in ax.lines] == ["full (mean of 2 seeds, band min-max)"]
    plt.close(fig)


def test_a_share_written_in_percent_is_reported_not_rescaled(tmp_path, tiny_cfg):
    m = write_eval(tmp_path / "runs", "rl")
    m["column_exact_match"] = 38.0  # an older file in percent: not a fraction, so not a share
    (tmp_path / "metrics").mkdir()
    (tmp_path / "metrics" / "05_evaluation.json").write_text(json.dumps({"stages": {"rl": {"tiny_dev": m}}}))
    inputs = reports.ReportInputs(tmp_path / "metrics", tmp_path / "runs")
    table = reports.table_ablation(tiny_cfg, inputs, reports.load_paper_results())
    full = table.rows[[r[0] for r in table.rows].index("+ ACE-SQL full")]
    assert full[table.columns.index("Retriever P / R / exact (profile tiny)")].endswith(" / ?")
    assert any("column_exact_match: share 38 is outside [0, 1]" in p for p in inputs.problems)


def test_stage_figures_live_in_reports_and_draw_what_the_stages_write(tmp_path):
    """Figures of notebooks 00-03 are drawn by `reports`; distillation's summary, written by its own
    function, may carry no route share (None: no correct set resolved) and still gets its figure."""
    import sqlite3

    from acesql_lib.train import distill
    from acesql_lib.data import filtering
    from acesql_lib.config.profiles import load_config
    from acesql_lib.data.datasets import Example
    from acesql_lib.train.distill import build_products
    from acesql_lib.train.rollouts import Task
    from acesql_lib.data.schema import Schema

    assert not hasattr(distill, "plot_distillation") and not hasattr(filtering, "plot_distributions")
    db = tmp_path / "t.sqlite"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE t (a INTEGER)")
    task = Task(Example("q0", "t", "q", "", "SELECT a FROM t", "", "", "bird", str(db)), Schema.from_sqlite(db))
    rec = {"qid": "q0", "gold_columns": [], "selected": [], "retriever": [],
           "generator": [{"text": "", "sql": "", "n_tokens": 1, "well_formed": False, "match": False, "columns": None}]}
    summary = build_products(load_config("tiny", {"distill.n_generator": 1, "distill.rl_max_correct": 1}),
                             [task], [rec]).summary
    assert summary["alt_route_share"] is None
    out = [*reports.plot_distillation(summary, tmp_path, ("png",), (1, 1)),
           *reports.plot_data_routes({"train": 0.3, "dev": 0.25}, tmp_path, ("png",)),
           *reports.plot_sft_loss([1, 2, 3], [2.0, 1.5, 1.2], tmp_path, ("png",))]
    assert [p.name for p in out] == ["distill_pass_rates.png", "data_routes.png", "sft_loss.png"]
    assert all(Image.open(p).size[0] > 100 for p in out)
