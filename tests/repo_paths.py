"""Where the tests find the repository and their fixture files: one definition, imported by the
test modules (`from repo_paths import FIXTURES, REAL, ROOT`) instead of each spelling the path again."""
from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent  # the repository
FIXTURES = TESTS / "fixtures"  # small files the tests read (tests/fixtures)
REAL = FIXTURES / "real"  # excerpts of the real datasets (Spider, BIRD), tests/fixtures/real
