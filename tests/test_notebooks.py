"""Notebook conventions and the runner's failure path (the whole pipeline runs in test_pipeline_smoke.py)."""

import nbformat
import pytest

from acesql_lib.pipeline.runner import NotebookFailed, PipelineOptions, pipeline_notebooks, run_pipeline

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


def test_runner_stops_at_a_failing_notebook_and_names_the_cell(tmp_path):
    with pytest.raises(NotebookFailed) as e:
        run_pipeline("tiny", only=["00"], overrides={"run_dir": str(tmp_path / "run"),
                                                     "reports_dir": str(tmp_path / "reports"),
                                                     "data.world": "synsql",
                                                     "data.synsql_dir": str(tmp_path / "nowhere")},
                     options=PipelineOptions(progress=False, calibrate=False))
    assert "00_data.ipynb" in str(e.value) and "FileNotFoundError" in str(e.value)
    assert (tmp_path / "reports" / "executed" / "00_data.ipynb").exists()  # kept, with the traceback
