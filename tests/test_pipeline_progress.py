"""The runner relays each notebook's progress bars and `[stage]` messages while it runs, and writes
the per-notebook wall-time table: real notebooks written here, executed by papermill in a kernel."""
from __future__ import annotations

import json

import pytest

from acesql_lib.pipeline.runner import (NotebookFailed, PipelineOptions, ProgressRelay, progress_line, run_pipeline,
                                        time_table)
from pipeline_checks import stub_notebook

WORK = """\
import sys, time
from acesql_lib.runtime.progress import tqdm  # text under the runner, a widget in JupyterLab
print("[stub] warming up")
print("a plain print stays in the notebook")
for _ in tqdm(range(4), desc="stub work", unit="step", mininterval=0, file=sys.stderr):
    time.sleep(0.05)
"""




def test_progress_is_streamed_and_the_time_table_written(tmp_path):
    books = tmp_path / "notebooks"
    books.mkdir()
    stub_notebook(books / "00_stub.ipynb", WORK)
    stub_notebook(books / "01_second.ipynb", "print('[second] done')")
    lines: list[str] = []
    runs = run_pipeline("tiny", options=PipelineOptions(reports_dir=tmp_path / "reports", notebook_dir=books,
                                                        progress=True, progress_every_s=0, emit=lines.append))
    assert [r.name for r in runs] == ["00_stub", "01_second"] and all(r.status == "ok" for r in runs)
    assert "00_stub: [stub] warming up" in lines
    assert not any("plain print" in line for line in lines)  # only bars and [stage] messages by default
    bars = [line for line in lines if line.startswith("00_stub: stub work, step ")]
    assert bars[0].startswith("00_stub: stub work, step 0/4")
    assert bars[-1].startswith("00_stub: stub work, step 4/4, done in")
    assert any(" left" in line for line in bars[1:-1])  # an estimate while it runs
    assert lines.index("01_second: [second] done") > lines.index(bars[-1])  # streamed in order, per notebook

    table = json.loads((tmp_path / "reports" / "pipeline_times.json").read_text())
    assert [n["name"] for n in table["notebooks"]] == ["00_stub", "01_second"]
    assert all(n["seconds"] > 0 and n["status"] == "ok" for n in table["notebooks"])
    # the table holds the runs' own seconds, to a tenth of a second: its total is theirs, rounded once
    assert [n["seconds"] for n in table["notebooks"]] == [round(r.seconds, 1) for r in runs]
    assert table["total_seconds"] == round(sum(r.seconds for r in runs), 1)
    cal = table["calibration"]  # the calibration workload before and after the run: times that compare across days
    assert cal["seconds"] == round((cal["start"] + cal["end"]) / 2, 3) and cal["start"] > 0
    assert table["total_units"] == round(table["total_seconds"] / cal["seconds"], 1)
    text = time_table(runs, cal)
    assert "00_stub" in text and "01_second" in text and "total" in text and "x cal" in text


def test_a_failing_notebook_still_leaves_its_time(tmp_path):
    books = tmp_path / "notebooks"
    books.mkdir()
    stub_notebook(books / "00_fails.ipynb", "raise RuntimeError('stub failure')")
    with pytest.raises(NotebookFailed, match="00_fails.ipynb failed at cell .*stub failure"):
        run_pipeline("tiny", options=PipelineOptions(reports_dir=tmp_path / "reports", notebook_dir=books,
                                                     progress=True, emit=lambda s: None, calibrate=False))
    table = json.loads((tmp_path / "reports" / "pipeline_times.json").read_text())
    assert [(n["name"], n["status"]) for n in table["notebooks"]] == [("00_fails", "failed")]


def test_relay_throttles_a_bar_and_reads_trainer_bars():
    lines: list[str] = []
    relay = ProgressRelay("02_self_distillation", lines.append, every_s=3600)
    for i in range(0, 1001, 10):  # one bar redrawn a hundred times with carriage returns
        relay.write(f"\rbase model: {i // 10:3d}%|#   | {i}/1000 [00:{i // 100:02d}<06:00,  2.80step/s]")
    relay.close()
    assert lines == ["02_self_distillation: base model, step 0/1000, ~6 min left",
                     "02_self_distillation: base model, step 1000/1000, done in 00:10"]
    # a bar without a description or unit (transformers' Trainer) still reads as a count and an estimate
    assert progress_line("03_mixed_sft", " 42%|####      | 420/1000 [08:10<11:18,  1.17s/it]")[1] == \
        "03_mixed_sft: working, 420/1000, ~11 min left"
    assert progress_line("03_mixed_sft", "no bar here") is None
