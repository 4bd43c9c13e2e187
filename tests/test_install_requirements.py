"""scripts/install_requirements.py: uv installs from pip's configured sources what pip would install, byte-compiled;
pip installs when asked to or when uv fails. The install test is offline: wheels made here, in local folders."""
import base64
import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

from repo_paths import ROOT as REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "scripts"))
import install_requirements as ir  # noqa: E402

SCRIPT = REPO_ROOT / "scripts" / "install_requirements.py"


def test_pip_settings_take_install_over_global_and_variables_over_both():
    lines = ["global.find-links='/a'", "global.constraint='/etc/c.txt'", "install.find-links='/b /c'",
             ":env:.find-links='/ignored'", "global.cert='/etc/ca.pem'", "global.timeout='60'", "not a setting"]
    assert ir.pip_settings(lines, {}) == {"find-links": "/b /c", "constraint": "/etc/c.txt", "cert": "/etc/ca.pem"}
    env = {"PIP_FIND_LINKS": "/d", "PIP_EXTRA_INDEX_URL": "https://x/simple https://y/simple", "PIP_NO_INDEX": "1",
           "PIP_INDEX_URL": "  "}
    assert ir.pip_settings(lines, env) == {"find-links": "/d", "constraint": "/etc/c.txt", "cert": "/etc/ca.pem",
                                           "extra-index-url": "https://x/simple https://y/simple", "no-index": "1"}


def test_uv_gets_every_source_that_exists_and_pips_best_version_rule(tmp_path):
    here, gone = tmp_path / "wheels", tmp_path / "gone"
    here.mkdir()
    settings = {"find-links": f"{here} {gone}", "index-url": "https://mirror.example/simple",
                "extra-index-url": f"file://{here} file://{gone} https://extra.example/simple",
                "constraint": str(tmp_path / "c.txt"), "cert": "/etc/ca.pem"}
    (tmp_path / "c.txt").write_text("torch<=2.14.1\n")
    assert ir.uv_source_args(settings) == [
        "--find-links", str(here), "--index-url", "https://mirror.example/simple",
        "--extra-index-url", f"file://{here}", "--extra-index-url", "https://extra.example/simple",
        "--constraint", str(tmp_path / "c.txt"), "--index-strategy", "unsafe-best-match"]
    assert ir.uv_source_args({"no-index": "true"}) == ["--no-index", "--index-strategy", "unsafe-best-match"]


def _wheel(folder: Path, version: str) -> None:
    """A pure-Python wheel of `demo_pkg` at `version`, with its RECORD (what pip and uv check)."""
    folder.mkdir(exist_ok=True)
    info = f"demo_pkg-{version}.dist-info"
    files = {"demo_pkg/__init__.py": f"VERSION = {version!r}\n",
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: demo-pkg\nVersion: {version}\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b'=').decode()},"
                     f"{len(text.encode())}\n" for name, text in files.items()) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(folder / f"demo_pkg-{version}-py3-none-any.whl", "w") as z:
        for name, text in {**files, f"{info}/RECORD": record}.items():
            z.writestr(name, text)


def test_uv_installs_what_pip_would_from_pips_configuration_and_pip_on_request(tmp_path):
    """Two find-links folders and a constraint, set only in a pip configuration file: the best version across
    both folders that the constraint allows (1.5), by uv and then by pip, and uv's copy byte-compiled."""
    _wheel(tmp_path / "a", "1.0")
    _wheel(tmp_path / "b", "1.5")
    _wheel(tmp_path / "b", "2.0")
    (tmp_path / "constraints.txt").write_text("demo-pkg<2\n")
    (tmp_path / "pip.conf").write_text(f"[global]\nfind-links = {tmp_path / 'a'} {tmp_path / 'b'}\n"
                                       f"constraint = {tmp_path / 'constraints.txt'}\nno-index = true\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    env.update(PIP_CONFIG_FILE=str(tmp_path / "pip.conf"), PYTHONDONTWRITEBYTECODE="1")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    uv = Path(sys.executable).parent / "uv"  # the one `make venv` installed; without it the script installs its own
    if uv.exists():
        (venv / "bin" / "uv").symlink_to(uv)

    def install(**extra) -> tuple[str, str]:
        done = subprocess.run([sys.executable, str(SCRIPT), str(python), "demo-pkg"], capture_output=True, text=True,
                              env={**env, **extra}, timeout=300)
        assert done.returncode == 0, done.stderr
        site = next((venv / "lib").glob("python3*/site-packages"))
        (info,) = site.glob("demo_pkg-*.dist-info")
        return info.name, (info / "INSTALLER").read_text().strip()

    assert install() == ("demo_pkg-1.5.dist-info", "uv")
    site = next((venv / "lib").glob("python3*/site-packages"))
    assert list((site / "demo_pkg" / "__pycache__").glob("__init__.*.pyc"))
    subprocess.run([str(python), "-m", "pip", "uninstall", "-q", "-y", "demo-pkg"], check=True, env=env, timeout=120)
    assert install(ACESQL_INSTALLER="pip") == ("demo_pkg-1.5.dist-info", "pip")


def test_a_failing_uv_falls_back_to_pip_and_says_why(tmp_path):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    calls = tmp_path / "calls"
    for name, code in (("uv", 3), ("python", 0)):  # a uv that fails, a "python" that logs its pip call
        (venv / "bin" / name).write_text(f"#!/bin/sh\necho \"{name} $*\" >> {calls}\nexit {code}\n")
        (venv / "bin" / name).chmod(0o755)
    done = subprocess.run([sys.executable, str(SCRIPT), str(venv / "bin" / "python"), "-r", "req.txt"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    assert "uv did not install" in done.stderr and "exited 3" in done.stderr and "installing with pip" in done.stderr
    logged = calls.read_text().splitlines()
    assert logged[-1].startswith("python -m pip install") and logged[-1].endswith("-r req.txt")
    assert any(line.startswith("uv pip install") for line in logged)
