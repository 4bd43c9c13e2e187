"""The tiny world's output is pinned: a small world (seed 0, 40 train, 12 dev, 8 in-distribution dev questions) must hash
to the values recorded in `fixtures/tinyworld_seed0_small.json`.

Why: the generator is a package of several modules (specs, SQLite building, the route model,
templates, questions, world). Moving code between them, or tidying it, must not change a single
byte the world writes; `GENERATOR_VERSION` (which cached worlds are matched on) is a fixed string,
so an unnoticed change in output would silently reuse stale worlds. The hashes pin the output, so
this test fails when a change to the generator's code moves a byte. A deliberate change in output must
bump `GENERATOR_VERSION` and re-record the fixture (`python tests/test_tinyworld_golden.py --record`).

What is hashed: every JSON and CSV file byte for byte; every SQLite file as its SQL dump
(`iterdump`: schema and rows). SQLite writes the library's version number into the file header
(bytes 92-99), so raw database bytes would differ between machines for reasons that are not ours;
`test_tinyworld.py` already checks that two builds on one machine give identical raw bytes.
"""
from __future__ import annotations

import hashlib
import json
import sqlite3
import sys
from pathlib import Path

from repo_paths import FIXTURES, ROOT

FIXTURE = FIXTURES / "tinyworld_seed0_small.json"
SIZES = {"seed": 0, "n_train": 40, "n_dev": 12, "n_dev_id": 8}


def world_digest(root: Path) -> dict[str, str]:
    """{relative path: sha256} for every file under `root` (SQLite files hashed as their dump)."""
    out = {}
    for p in sorted(root.rglob("*")):
        if not p.is_file():
            continue
        if p.suffix == ".sqlite":
            con = sqlite3.connect(f"file:{p}?mode=ro", uri=True)
            try:
                data = "\n".join(con.iterdump()).encode("utf-8")
            finally:
                con.close()
        else:
            data = p.read_bytes()
        out[p.relative_to(root).as_posix()] = hashlib.sha256(data).hexdigest()
    return out


def _build(out: Path) -> dict:
    from acesql_lib.data.tinyworld import GENERATOR_VERSION, build_tinyworld
    world = build_tinyworld(out, **SIZES)
    return {"generator_version": GENERATOR_VERSION, **SIZES, "files": world_digest(world.root)}


def test_small_world_matches_the_recorded_hashes(tmp_path):
    want = json.loads(FIXTURE.read_text(encoding="utf-8"))
    got = _build(tmp_path / "world")
    assert got["generator_version"] == want["generator_version"], "GENERATOR_VERSION changed: re-record the fixture"
    assert sorted(got["files"]) == sorted(want["files"]), "the world writes other files than recorded"
    changed = sorted(name for name, h in got["files"].items() if want["files"][name] != h)
    assert not changed, f"tiny world output changed in {changed}; bump GENERATOR_VERSION and re-record"


def test_digest_sees_a_changed_row(tmp_path):
    """The digest is not blind to database content: one changed value changes that file's hash."""
    got = _build(tmp_path / "world")["files"]
    db = tmp_path / "world" / "dev" / "dev_databases" / "music" / "music.sqlite"
    con = sqlite3.connect(db)
    with con:
        con.execute("UPDATE artists SET country = 'Atlantis' WHERE artist_id = 1")
    con.close()
    again = world_digest(tmp_path / "world")
    assert [k for k in got if got[k] != again[k]] == ["dev/dev_databases/music/music.sqlite"]


def test_package_runs_as_a_command(tmp_path):
    """`python -m acesql_lib.data.tinyworld` (data/README.md) still builds a world from the package."""
    import os
    import subprocess
    root = str(ROOT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-m", "acesql_lib.data.tinyworld", "--out", str(tmp_path / "cli"),
                           "--n-train", "6", "--n-dev", "3"], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "6 train" in done.stdout and json.loads((tmp_path / "cli" / "manifest.json").read_text())["n_dev"] == 3


if __name__ == "__main__" and sys.argv[1:] == ["--record"]:
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        FIXTURE.write_text(json.dumps(_build(Path(tmp) / "world"), indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"recorded {FIXTURE}")
