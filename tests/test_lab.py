"""`make lab` and `make strip` as people use them: JupyterLab started by the Makefile (as root too, with the
server options of LAB_ARGS), and the committed notebooks exactly as JupyterLab saves them, so that opening and
saving a notebook without running it leaves the working tree clean."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest

from repo_paths import ROOT

pytestmark = pytest.mark.notebook

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
TOKEN = "lab-test-token"


def make(*args: str, where: Path = ROOT, path_dir: Path | None = None, env: dict | None = None
         ) -> tuple[list[str], dict]:
    """`make <args>` in `where` (the repository, or a folder holding a copy of its Makefile) with this
    interpreter's environment as the kit's .venv, its install stamp taken as done (`-o`: nothing is
    installed); `path_dir` goes first on PATH."""
    env = {**os.environ, **(env or {})}
    if path_dir is not None:
        env["PATH"] = f"{path_dir}{os.pathsep}{env['PATH']}"
    return ["make", "--no-print-directory", "-C", str(where), "-o", f"{sys.prefix}/.installed",
            f"VENV={sys.prefix}", *args], env


def fake_id(folder: Path, uid: int) -> Path:
    """A folder holding an `id` that answers `id -u` with `uid`."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "id"
    script.write_text(f"#!/bin/sh\necho {uid}\n")
    script.chmod(0o755)
    return folder


@pytest.mark.parametrize("uid, allow_root", [(0, True), (1000, False)])
def test_make_lab_passes_allow_root_only_for_root_and_lab_args_always(tmp_path, uid, allow_root):
    cmd, env = make("-n", "lab", "LAB_ARGS=--no-browser --port=8890 --ip=0.0.0.0",
                    path_dir=fake_id(tmp_path / "bin", uid))
    line = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
    assert " -m jupyter lab --notebook-dir=notebooks" in line, line
    assert ("--allow-root" in line.split()) is allow_root, line
    assert line.endswith("--no-browser --port=8890 --ip=0.0.0.0"), line  # after the Makefile's own options


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def _put(url: str, body: dict) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="PUT",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """`make lab` started as this machine's user (root in most GPU containers) in a copy of the repository's
    Makefile and notebooks (a save writes there, never into the checkout), with LAB_ARGS for no browser, a free
    port and a known token; the server's base URL once it answers, the notebooks' folder and the server's
    output. Stopped (its process group) afterwards."""
    tmp = tmp_path_factory.mktemp("lab")
    books = tmp / "notebooks"
    books.mkdir()
    shutil.copy2(ROOT / "Makefile", tmp / "Makefile")
    for nb in NOTEBOOKS:
        shutil.copy2(nb, books / nb.name)
    cmd, env = make("lab", f"LAB_ARGS=--no-browser --port=0 --IdentityProvider.token={TOKEN}", where=tmp,
                    env={"JUPYTER_RUNTIME_DIR": str(tmp / "runtime"), "JUPYTER_CONFIG_DIR": str(tmp / "config")})
    log = tmp / "lab.log"
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline, url = time.monotonic() + 120, None
        while url is None:
            found = re.search(r"http://127\.0\.0\.1:(\d+)/", log.read_text())
            if found:
                url = f"http://127.0.0.1:{found.group(1)}"
            elif proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"make lab did not start a server (exit {proc.poll()}):\n{log.read_text()[-3000:]}")
            else:
                time.sleep(0.5)
        yield url, books, log
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)  # make and the server it started: this test's own process group
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def test_make_lab_starts_a_server_that_answers_as_this_user(lab):
    url, books, log = lab
    status = _get(f"{url}/api/status?token={TOKEN}")
    assert "started" in status
    listed = {c["name"] for c in _get(f"{url}/api/contents?token={TOKEN}")["content"]}
    assert listed == {nb.name for nb in NOTEBOOKS}  # the Makefile's notebooks/ folder
    command = log.read_text().splitlines()[0]  # make echoes the command it runs
    assert ("--allow-root" in command.split()) is (os.geteuid() == 0), command


def kernel_language_info() -> dict:
    """What the python3 kernel reports in its kernel_info reply, which JupyterLab copies into a notebook's
    `language_info` when the kernel is ready."""
    from jupyter_client.manager import start_new_kernel

    km, kc = start_new_kernel(kernel_name="python3")
    try:
        msg_id = kc.kernel_info()
        while True:
            msg = kc.get_shell_msg(timeout=60)
            if msg["parent_header"].get("msg_id") == msg_id:
                return msg["content"]["language_info"]
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def test_opening_and_saving_a_notebook_in_jupyterlab_leaves_it_byte_identical(lab):
    """Each notebook as JupyterLab saves it when opened with the python3 kernel and not run: its notebook panel
    sets the kernelspec (name, and the display name and language of the server's spec) and the kernel's
    language_info in the metadata (a value equal to the one there changes nothing, so leaves it unmodified);
    the notebook goes back through the server's contents API, which writes it to disk as every save does."""
    url, books, _ = lab
    spec = _get(f"{url}/api/kernelspecs?token={TOKEN}")["kernelspecs"]["python3"]["spec"]
    info = kernel_language_info()
    for nb in NOTEBOOKS:
        model = _get(f"{url}/api/contents/{nb.name}?token={TOKEN}&type=notebook&content=1")["content"]
        model["metadata"]["kernelspec"] = {"name": "python3", "display_name": spec["display_name"],
                                           "language": spec["language"]}
        model["metadata"]["language_info"] = info
        _put(f"{url}/api/contents/{nb.name}?token={TOKEN}", {"type": "notebook", "format": "json", "content": model})
        assert (books / nb.name).read_bytes() == nb.read_bytes(), f"{nb.name}: a JupyterLab save would change it"


def test_the_committed_notebooks_are_what_nbformat_writes(tmp_path):
    """The same bytes as nbformat writes them (jupyter_server's save and nbstripout both write through it):
    indent 1, sorted keys, a trailing newline, the cell ids and the `parameters` tag kept."""
    for nb in NOTEBOOKS:
        node = nbformat.read(nb, as_version=nbformat.NO_CONVERT)
        out = tmp_path / nb.name
        nbformat.write(node, out, version=nbformat.NO_CONVERT)
        assert out.read_bytes() == nb.read_bytes(), nb.name
        assert node.nbformat == 4 and node.nbformat_minor == nbformat.v4.nbformat_minor, nb.name
        assert all(c.get("id") for c in node.cells), nb.name


def test_make_strip_leaves_a_committed_notebook_byte_identical(tmp_path):
    for nb in NOTEBOOKS:
        shutil.copy2(nb, tmp_path / nb.name)
    cmd, env = make("strip", f"NOTEBOOKS={tmp_path}/*.ipynb")
    subprocess.run(cmd, env=env, check=True, capture_output=True)
    for nb in NOTEBOOKS:
        assert (tmp_path / nb.name).read_bytes() == nb.read_bytes(), f"{nb.name}: make strip changes it"


def test_make_strip_takes_out_outputs_and_counts_and_keeps_the_metadata(tmp_path):
    """A notebook with an output and an execution count, as a run in JupyterLab leaves it, comes back as committed."""
    nb = ROOT / "notebooks" / "00_data.ipynb"
    node = nbformat.read(nb, as_version=nbformat.NO_CONVERT)
    code = next(c for c in node.cells if c.cell_type == "code")
    code.execution_count = 3
    code.outputs = [nbformat.v4.new_output("stream", name="stdout", text="profile=tiny\n")]
    nbformat.write(node, tmp_path / nb.name, version=nbformat.NO_CONVERT)
    assert (tmp_path / nb.name).read_bytes() != nb.read_bytes()
    cmd, env = make("strip", f"NOTEBOOKS={tmp_path}/{nb.name}")
    subprocess.run(cmd, env=env, check=True, capture_output=True)
    assert (tmp_path / nb.name).read_bytes() == nb.read_bytes()
