"""The whole tiny pipeline, notebooks 00-07, headless through the runner (what `make reproduce`
does), at smoke size: every expected table and figure must exist and the metrics must be in range.

Smoke size keeps the code paths and the world of configs/tiny.yaml and shrinks the counts: the profile's world
(built once per test session, tests/conftest.py, and copied into the test's folder, so notebook 00 finds it
ready as a second `make reproduce` does; the rehearsal smoke run builds its world in its notebook 00) and
therefore its shipped base model, copied in as `make reproduce` copies it (the one base every tiny run shares;
the rehearsal smoke run and tests/test_tinybase_prebuilt.py build theirs); 64 filtered questions; 2 RL steps
per variant; 40 eval questions. Its numbers exercise the plumbing, not the method (`make reproduce` runs the
profile's sizes).
"""
import json
import shutil

import pytest

from acesql_lib.config.profiles import load_config
from acesql_lib.pipeline.runner import PipelineOptions, run_pipeline
from acesql_lib.reports import FIGURES, TABLES
from pipeline_checks import NOTEBOOKS, assert_every_artefact

pytestmark = pytest.mark.notebook

SMOKE = {"filtering.target_size": 64, "distill.n_validation": 4, "distill.shard_size": 32, "grpo.max_steps": 2,
         "grpo.val_every": 2, "grpo.save_every": 2, "eval.max_examples": 40}


def _overrides(folder) -> dict:
    return {"run_dir": str(folder / "run"), "reports_dir": str(folder / "reports"),
            "data.tinyworld_dir": str(folder / "world"), **SMOKE}


@pytest.fixture(scope="module")
def smoke(tmp_path_factory, tiny_profile_world):
    """One smoke-size run of the whole pipeline, shared by the tests below (each reads it or runs on top of it)."""
    folder = tmp_path_factory.mktemp("smoke")
    shutil.copytree(tiny_profile_world.root, folder / "world")  # notebook 00 finds it ready, as a second run does
    return folder, run_pipeline("tiny", overrides=_overrides(folder), options=PipelineOptions(progress=False))


def test_tiny_pipeline_end_to_end(smoke):
    tmp_path, runs = smoke
    reports = tmp_path / "reports"
    assert [r.name for r in runs] == NOTEBOOKS
    assert all(r.status == "ok" for r in runs)
    for nb in runs:
        assert (reports / "executed" / f"{nb.name}.ipynb").exists()
    assert_every_artefact(reports)

    m = lambda nb: json.loads((reports / "metrics" / f"{nb}.json").read_text())  # noqa: E731
    n_train = load_config("tiny").data.tiny_n_train
    base = json.loads((tmp_path / "run" / "models" / "base" / "tiny_base_manifest.json").read_text())
    assert base["prebuilt_from"] == "data/tiny_base"  # the shipped base, not a build
    data = m("00_data")
    assert data["train_questions"] == n_train and data["train_skipped"] == 0
    assert data["eval_questions"]["tiny_dev"] >= 300 and data["eval_questions"]["tiny_dev_id"] >= 400
    assert all(v >= 0.2 for v in data["annotated_route_share"].values())
    filtering = m("01_source_filtering")
    assert filtering["kept"] == SMOKE["filtering.target_size"]
    assert filtering["funnel"]["input"] == n_train
    assert sum(filtering["dropped"].values()) == filtering["funnel"]["input"] - filtering["kept"]
    assert (tmp_path / "run" / "data" / "filtered_pool.json").exists()
    for fig in ("data_routes", "filtering_distributions", "distill_pass_rates", "sft_loss"):
        assert (reports / "figures" / f"{fig}.png").stat().st_size > 0, fig
    distill = m("02_self_distillation")
    assert distill["questions"] == SMOKE["filtering.target_size"]
    assert sum(distill["pass_rate_hist"].values()) == distill["questions"]
    # one SFT pair per question with a correct rollout, except the validation questions (held out of SFT)
    assert distill["sft_samples"]["retriever"] == distill["sft_samples"]["generator"] == \
        distill["questions_with_correct"] - distill["rl_validation"] > 0
    assert distill["rl_train"] > 0 and 0.0 <= distill["alt_route_share"] <= 1.0
    sft = m("03_mixed_sft")
    assert sft["steps"] > 0 and 0 <= sft["validation_ex_base"] <= 100 and 0 <= sft["validation_ex_sft"] <= 100
    grpo = m("04_joint_grpo")
    assert grpo["steps"] == SMOKE["grpo.max_steps"] and 0 <= grpo["pool_target_differs_from_gold_share"] <= 1
    stages = m("05_evaluation")["stages"]
    assert set(stages) == {"base", "sft", "rl"}
    for stage in stages.values():
        assert set(stage) == {"tiny_dev", "tiny_dev_id"}  # both dev splits
        for res in stage.values():
            assert res["n"] == SMOKE["eval.max_examples"] and 0 <= res["ex"] <= 100
            assert 0 <= res["retriever_ability"] <= 1 and res["tokens_per_question"] > 0  # shares are fractions
    claims = (reports / "tables" / "claims.md").read_text()
    assert "| RL > SFT |" in claims and "Verdict" in claims  # every claim with a CI and a verdict
    rl_rows = [line for line in claims.splitlines() if line.startswith("| RL > SFT |")]
    assert len(rl_rows) == 2 and any("tiny_dev_id" in line for line in rl_rows)  # the claim on each split
    variants = m("06_ablations")["variants"]
    assert set(variants) == {"full", "no_pcgrad", "no_schedule", "static_gold", "dense_reward"}
    assert all(set(v) == {"tiny_dev", "tiny_dev_id"} for v in variants.values())  # eval.ablation_sets
    # the full variant is notebook 05's RL model: its evaluation is read back, not redone
    assert all(variants["full"][s]["reused"] and not stages["rl"][s]["reused"] for s in ("tiny_dev", "tiny_dev_id"))
    assert all(variants["full"][s]["ex"] == stages["rl"][s]["ex"] for s in ("tiny_dev", "tiny_dev_id"))
    assert not any(variants[v][s]["reused"] for v in variants if v != "full" for s in ("tiny_dev", "tiny_dev_id"))
    assert m("07_tables_and_figures")["n_artefacts"] >= len(TABLES) * 3 + len(FIGURES) * 2
    main_table = (reports / "tables" / "table1_main.md").read_text()
    assert "paper" in main_table.lower() and "tiny" in main_table.lower()
    assert main_table.rstrip().splitlines()[-1].startswith("_Run card: `run_card.md`")  # every table names the card


def test_the_run_writes_its_card_with_commit_settings_and_data_digests(smoke):
    from acesql_lib.pipeline.run_card import code_digest, git_state, settings_digest

    folder, _ = smoke
    card = json.loads((folder / "reports" / "run_card.json").read_text())
    assert card["status"] == "ok" and card["git"]["commit"] == git_state()["commit"]
    assert card["settings"]["digest"] == settings_digest(load_config("tiny", _overrides(folder)))
    assert card["code"]["digest"] == code_digest()["digest"] and len(card["environment"]["digest"]) == 64
    read = {(d["name"], d["role"]): d for d in card["data"]}
    assert read[("tiny_dev", "eval questions")]["present"] and len(read[("tiny_dev", "eval databases")]["sha256"]) == 64
    assert read[("shipped tiny base", "model")]["path"] == "data/tiny_base"
    assert [n["name"] for n in card["times"]["notebooks"]] == NOTEBOOKS and card["times"]["calibration"]["seconds"] > 0
    assert card["metrics"]["evaluation"]["rl"]["tiny_dev"]["n"] == SMOKE["eval.max_examples"]
    assert (folder / "reports" / "run_card.md").read_text().startswith("# Run card: profile tiny")


def _stream_text(cells) -> str:
    return "\n".join(o.get("text", "") for c in cells for o in c.get("outputs", []) if o.get("output_type") == "stream")


def test_stepping_through_notebook_04_in_a_live_kernel_rerun_cells_and_a_restart(smoke):
    """As a person in JupyterLab: notebook 04's cells one at a time in one kernel, the "one step" cells run
    again (a second step of the same trainer), then the kernel is gone halfway and a new one runs the notebook
    from the top: it resumes from the checkpoint on disk, steps once more and trains to the end. Every step is
    logged once; the bars are widgets, without tqdm's IProgress warning."""
    import nbformat
    from nbclient import NotebookClient
    from papermill.iorw import load_notebook_node
    from papermill.parameterize import parameterize_notebook

    from acesql_lib.pipeline.runner import NOTEBOOK_DIR

    folder, _ = smoke
    over = {**_overrides(folder), "grpo.max_steps": 4}  # its own variant: the pipeline's runs stay as they are
    book = parameterize_notebook(load_notebook_node(str(NOTEBOOK_DIR / "04_joint_grpo.ipynb")),
                                 {"profile": "tiny", "overrides": over, "variant": "stepped"})
    step_cell = next(i for i, c in enumerate(book.cells) if "trainer.collect()" in c.source)
    train_md = next(i for i, c in enumerate(book.cells) if c.cell_type == "markdown" and c.source.startswith("## Train"))
    train_cell = next(i for i, c in enumerate(book.cells) if "trainer.train()" in c.source)

    def session(plan: list[int]) -> tuple[list, list[str]]:
        nb = nbformat.from_dict(book.copy())
        client = NotebookClient(nb, kernel_name="python3", timeout=600,
                                resources={"metadata": {"path": str(NOTEBOOK_DIR)}})
        ran, mimes = [], []
        with client.setup_kernel():
            for i in plan:
                if nb.cells[i].cell_type != "code":
                    continue
                cell = nbformat.from_dict(nb.cells[i].copy())  # a re-run cell keeps its own outputs
                client.execute_cell(cell, i)
                ran.append(cell)
                mimes += [m for o in cell.get("outputs", []) for m in o.get("data", {})]
        return ran, mimes

    first = list(range(train_md))  # the parameters (injected ones too) and every cell before "## Train"
    cells, mimes = session(first + list(range(step_cell, train_md)))  # ... and the step cells once more
    text = _stream_text(cells)
    assert "Step 1 of 4" in text and "Step 2 of 4" in text, text[-3000:]
    run = folder / "run" / "grpo" / "stepped"
    assert (run / "checkpoint-2" / "COMPLETE").exists()  # grpo.save_every = 2
    # a new kernel, from the top: state comes from disk
    cells, mimes2 = session([*range(train_md), train_cell])
    text2 = _stream_text(cells)
    assert "resuming at step 2" in text2 and "Step 3 of 4" in text2, text2[-3000:]
    text += text2
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4]
    assert (run / "final" / "config.json").exists()
    assert "TqdmWarning" not in text and "IProgress not found" not in text
    assert "application/vnd.jupyter.widget-view+json" in mimes + mimes2  # progress bars drawn as widgets


def test_notebook_05_opens_alone_on_a_finished_run(smoke):
    """After a full run, notebook 05 runs by itself (its first cell says what it reads from disk): every
    evaluation is read back from the run folder, none redone."""
    folder, _ = smoke
    (run,) = run_pipeline("tiny", only=["05"], overrides=_overrides(folder),
                          options=PipelineOptions(progress=False, calibrate=False))
    assert run.name == "05_evaluation" and run.status == "ok"
    stages = json.loads((folder / "reports" / "metrics" / "05_evaluation.json").read_text())["stages"]
    assert set(stages) == {"base", "sft", "rl"}
    assert all(res["reused"] for stage in stages.values() for res in stage.values())
