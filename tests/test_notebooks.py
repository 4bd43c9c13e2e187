"""Notebook smoke tests: the real notebooks, run headless through the pipeline runner on the tiny profile."""
import json

import nbformat
import pytest

from acesql_lib.pipeline import NotebookFailed, pipeline_notebooks, run_pipeline

pytestmark = pytest.mark.notebook


def test_notebooks_are_stripped_and_parameterised():
    books = pipeline_notebooks()
    assert books, "no notebooks found"
    for path in books:
        nb = nbformat.read(path, as_version=4)
        assert nb.metadata["kernelspec"]["name"] == "python3", path
        tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
        assert len(tagged) == 1, f"{path.name}: needs exactly one cell tagged 'parameters'"
        for c in nb.cells:
            if c.cell_type == "code":
                assert not c.outputs and c.execution_count is None, f"{path.name}: commit notebooks stripped"
        assert nb.cells[0].cell_type == "markdown" and nb.cells[0].source.startswith("# "), path.name


def test_notebooks_00_and_01_through_the_runner(tmp_path):
    overrides = {"run_dir": str(tmp_path / "run"), "reports_dir": str(tmp_path / "reports")}
    runs = run_pipeline("tiny", only=["00", "01"], overrides=overrides, progress=False)
    assert [(r.name, r.status) for r in runs] == [("00_data", "ok"), ("01_source_filtering", "ok")]
    metrics = json.loads((tmp_path / "reports" / "metrics" / "00_data.json").read_text())
    assert metrics["train_questions"] >= 3000 and metrics["train_skipped"] == 0
    assert metrics["eval_questions"]["tiny_dev"] >= 300
    assert all(v >= 0.2 for v in metrics["annotated_route_share"].values())
    assert (tmp_path / "reports" / "figures" / "data_routes.png").stat().st_size > 0
    assert (tmp_path / "reports" / "executed" / "00_data.ipynb").exists()
    filtering = json.loads((tmp_path / "reports" / "metrics" / "01_source_filtering.json").read_text())
    n_in = filtering["funnel"]["input"]
    assert n_in == metrics["train_questions"] and filtering["kept"] == 600  # configs/tiny.yaml target_size
    assert sum(filtering["dropped"].values()) == n_in - filtering["kept"]
    assert (tmp_path / "run" / "data" / "filtered_pool.json").exists()
    assert (tmp_path / "reports" / "figures" / "filtering_distributions.png").stat().st_size > 0


def test_runner_stops_at_a_failing_notebook_and_names_the_cell(tmp_path):
    with pytest.raises(NotebookFailed) as e:
        run_pipeline("tiny", only=["00"], overrides={"run_dir": str(tmp_path / "run"),
                                                     "reports_dir": str(tmp_path / "reports"),
                                                     "data.world": "synsql",
                                                     "data.synsql_dir": str(tmp_path / "nowhere")}, progress=False)
    assert "00_data.ipynb" in str(e.value) and "FileNotFoundError" in str(e.value)
    assert (tmp_path / "reports" / "executed" / "00_data.ipynb").exists()  # kept, with the traceback
