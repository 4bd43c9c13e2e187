"""The runner starts each notebook's kernel while the notebook before it runs, with that notebook's modules
imported (acesql_lib/runtime/warm_kernel.py): the notebook then runs as in a cold kernel, its imports already done.
Real notebooks written here, executed by papermill in real kernels."""
from __future__ import annotations

import json
import os

import nbformat
import pytest

from acesql_lib.pipeline.runner import NotebookFailed, PipelineOptions, run_pipeline
from acesql_lib.runtime.warm_kernel import WarmKernel, modules_imported, warm_code

# `email.mime.text` is imported by no module the runner or the kernel loads on their own
PROBE = """\
import json, os, sys
before = "email.mime.text" in sys.modules
import email.mime.text
from pathlib import Path
Path(os.environ["PROBE_OUT"]).write_text(json.dumps({"before": before, "cwd": os.getcwd(),
    "progress": os.environ.get("ACESQL_PROGRESS"), "history": len(In)}))
"""


def _notebook(path, *bodies: str) -> None:
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell('profile = "tiny"\noverrides = {}')
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, *(nbformat.v4.new_code_cell(b) for b in bodies)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)


def test_the_pre_import_leaves_no_name_in_the_kernel_even_with_no_modules():
    for modules in ([], ["json"]):
        space: dict = {}
        exec(warm_code(modules), space)
        assert set(space) == {"__builtins__"}


def test_modules_imported_reads_every_import_statement_once_in_order(tmp_path):
    _notebook(tmp_path / "nb.ipynb", "import pandas as pd\nfrom acesql_lib.config.context import RunContext",
              "%matplotlib inline\nimport not_read",  # a magic: not Python, skipped
              "def f():\n    from acesql_lib.evaluation.stats import paired_bootstrap\n    import json, os.path\n    from . import x",
              "import pandas")
    assert modules_imported(tmp_path / "nb.ipynb") == ["pandas", "acesql_lib.config.context", "acesql_lib.evaluation.stats", "json",
                                                       "os.path"]


@pytest.mark.parametrize("warm_next", [True, False])
def test_the_next_notebook_runs_in_a_kernel_that_has_imported_its_modules_and_nothing_else(tmp_path, monkeypatch,
                                                                                            warm_next):
    books = tmp_path / "notebooks"
    books.mkdir()
    _notebook(books / "00_first.ipynb", "print('first')")
    _notebook(books / "01_probe.ipynb", PROBE)
    monkeypatch.setenv("PROBE_OUT", str(tmp_path / "probe.json"))
    runs = run_pipeline("tiny", options=PipelineOptions(reports_dir=tmp_path / "reports", notebook_dir=books,
                                                        progress=False, calibrate=False, warm_next=warm_next))
    assert [r.status for r in runs] == ["ok", "ok"]
    probe = json.loads((tmp_path / "probe.json").read_text())
    assert probe["before"] is warm_next  # imported ahead only in the warm kernel
    assert probe["cwd"] == str(books) and probe["progress"] == "text"  # the same folder and environment
    executed = nbformat.read(tmp_path / "reports" / "executed" / "01_probe.ipynb", as_version=4)
    counts = [c.execution_count for c in executed.cells if c.cell_type == "code"]
    assert counts == [1, 2, 3]  # the pre-import left no history: the parameters, then the injected ones, then ours
    assert probe["history"] == 4  # In[0] and the three cells


def test_a_module_that_fails_to_import_fails_in_the_notebooks_own_cell(tmp_path):
    books = tmp_path / "notebooks"
    books.mkdir()
    _notebook(books / "00_first.ipynb", "print('first')")
    _notebook(books / "01_missing.ipynb", "x = 1", "import acesql_no_such_module")
    with pytest.raises(NotebookFailed, match="01_missing.ipynb failed at cell .*ModuleNotFoundError"):
        run_pipeline("tiny", options=PipelineOptions(reports_dir=tmp_path / "reports", notebook_dir=books,
                                                     progress=False, calibrate=False))
    executed = nbformat.read(tmp_path / "reports" / "executed" / "01_missing.ipynb", as_version=4)
    assert [c.execution_count for c in executed.cells if c.cell_type == "code"][:3] == [1, 2, 3]


def test_a_warm_kernel_left_unused_is_shut_down(tmp_path):
    _notebook(tmp_path / "00_x.ipynb", "import json")
    warm = WarmKernel(tmp_path / "00_x.ipynb", "python3", dict(os.environ))
    from jupyter_core.utils import run_sync

    assert run_sync(warm.km.is_alive)()
    warm.shutdown()
    assert not run_sync(warm.km.is_alive)()


def test_a_kernel_that_dies_while_importing_fails_its_notebook_instead_of_hanging(tmp_path):
    books = tmp_path / "notebooks"
    books.mkdir()
    (books / "acesql_dies_on_import.py").write_text("import os\nos._exit(3)\n")  # the kernel's folder is on its path
    _notebook(books / "00_first.ipynb", "print('first')")
    _notebook(books / "01_dies.ipynb", "import acesql_dies_on_import")
    with pytest.raises(NotebookFailed, match="01_dies.ipynb failed"):
        run_pipeline("tiny", options=PipelineOptions(reports_dir=tmp_path / "reports", notebook_dir=books,
                                                     progress=False, calibrate=False))


def test_a_notebook_that_is_not_json_fails_by_its_name(tmp_path):
    books = tmp_path / "notebooks"
    books.mkdir()
    _notebook(books / "00_first.ipynb", "print('first')")
    (books / "01_broken.ipynb").write_text('{"cells": [')  # the kernel started ahead of it imports nothing
    assert modules_imported(books / "01_broken.ipynb") == []
    with pytest.raises(NotebookFailed, match="01_broken.ipynb failed"):
        run_pipeline("tiny", options=PipelineOptions(reports_dir=tmp_path / "reports", notebook_dir=books,
                                                     progress=False, calibrate=False))
