"""Checks shared by the two pipeline smoke tests (tiny and rehearsal): the notebooks the runner must
run, every table and figure file, and a table's rows as its CSV gives them."""
from __future__ import annotations

import csv
from pathlib import Path

from acesql_lib.reports import FIGURES, TABLES

NOTEBOOKS = ["00_data", "01_source_filtering", "02_self_distillation", "03_mixed_sft", "04_joint_grpo",
             "05_evaluation", "06_ablations", "07_tables_and_figures"]


def assert_every_artefact(reports: Path) -> None:
    """Every table in csv/md/tex and every figure in png/pdf exists under `reports` and is not empty."""
    for name in TABLES:
        for ext in ("csv", "md", "tex"):
            assert (reports / "tables" / f"{name}.{ext}").stat().st_size > 0, (name, ext)
    for name in FIGURES:
        for ext in ("png", "pdf"):
            assert (reports / "figures" / f"{name}.{ext}").stat().st_size > 0, (name, ext)


def table_rows(reports: Path, table: str) -> list[dict[str, str]]:
    """The rows of reports/tables/<table>.csv, one dict per row keyed by the header."""
    with open(reports / "tables" / f"{table}.csv", newline="") as f:
        return list(csv.DictReader(f))


def stub_notebook(path, body: str) -> None:
    """A two-cell notebook for the pipeline's own tests: a `parameters` cell (profile, overrides), then `body`."""
    import nbformat

    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell('profile = "tiny"\noverrides = {}')
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell(body)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)
