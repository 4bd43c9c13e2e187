"""Put a pip requirements file's blanket `--only-binary :all:` before its per-package `--no-binary` lines.

    python scripts/lock_options.py requirements-gpu.lock      (`make lock` runs it after uv)

pip applies a requirements file's format options in file order, and `--only-binary :all:` clears every
package named by an earlier `--no-binary` (pip's FormatControl): with uv's order (`--no-binary deepspeed`
first) pip may not build deepspeed from source, and deepspeed has no wheel, so the lock would not install.
After the blanket option, `--no-binary deepspeed` makes deepspeed the one exception, as intended.
Standard library only: `make lock` runs it before any environment of the kit exists.
"""
from __future__ import annotations

import sys
from pathlib import Path


def ordered(text: str) -> str:
    """`text` with every `--only-binary` line moved in front of the first `--no-binary` line."""
    lines = text.splitlines(keepends=True)
    only = [ln for ln in lines if ln.startswith("--only-binary")]
    rest = [ln for ln in lines if not ln.startswith("--only-binary")]
    first = next((i for i, ln in enumerate(rest) if ln.startswith("--no-binary")), None)
    if first is None:
        return text
    return "".join(rest[:first] + only + rest[first:])


def main(argv: list[str]) -> int:
    for name in argv:
        path = Path(name)
        path.write_text(ordered(path.read_text(encoding="utf-8")), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
