"""Small real SQLite databases for tests: one way to write them."""
from __future__ import annotations

import sqlite3
from pathlib import Path


def sqlite_db(path: Path, script: str) -> Path:
    """Create the database at `path` (its folders too) from an SQL script; returns the path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path)
    try:
        conn.executescript(script)
        conn.commit()
    finally:
        conn.close()
    return path
