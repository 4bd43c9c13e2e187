"""A preflight row (area, item, status, detail), its statuses, and how its sizes and counts are written."""
from __future__ import annotations

from dataclasses import dataclass

OK, WARN, MISSING, INFO, FAIL = "OK", "WARN", "MISSING", "INFO", "FAIL"
GIB = 1024 ** 3


@dataclass
class Row:
    area: str
    item: str
    status: str
    detail: str


def size_text(n: float) -> str:
    """Bytes in GiB, or in MiB below a tenth of one."""
    return f"{n / GIB:.1f} GiB" if n >= GIB / 10 else f"{n / 1024 ** 2:.1f} MiB"


def count_text(n: float) -> str:
    """A parameter count in billions, or in millions below one billion."""
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.2f}M"
