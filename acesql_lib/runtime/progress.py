"""Progress bars: widgets in JupyterLab, text everywhere else.

`tqdm.auto` draws a widget inside a Jupyter kernel when ipywidgets is installed (it is: stepping through the
notebooks in JupyterLab shows live bars, without tqdm's "IProgress not found" warning). Under the pipeline
runner no browser draws widgets, and the runner relays the kernels' text bars to the terminal
(`pipeline.ProgressRelay`), so it starts its kernels with ACESQL_PROGRESS=text and the kit's bars draw text
there: this module's own `tqdm`, and every `from tqdm.auto import tqdm` made after the package is imported
(the kit's other modules, TRL's and transformers' bars), since it then points tqdm.auto at the text bar.
Read once, when the package is first imported (acesql_lib/__init__.py).

A wait with no count of its own gets a bar too (`waiting`: a checkpoint written, an engine starting), and one
made of a few long phases a bar over them (`phase_bar`: a validation's retriever samples, generator samples and
execution), so no cell sits silent while it works.
"""
from __future__ import annotations

import contextlib
import os
from typing import Any, Iterator, Sequence

from tqdm.auto import tqdm as _auto_tqdm
from tqdm.std import tqdm as _text_tqdm

TEXT = os.environ.get("ACESQL_PROGRESS", "").strip().lower() == "text"
tqdm = _text_tqdm if TEXT else _auto_tqdm
if TEXT:
    import tqdm.auto as _auto
    import tqdm.autonotebook as _autonotebook

    _auto.tqdm = _autonotebook.tqdm = _text_tqdm


@contextlib.contextmanager
def waiting(desc: str, disable: bool = False) -> Iterator[Any]:
    """A bar for one wait: 0/1 as it starts, 1/1 with the time it took when the block ends without an error."""
    bar = tqdm(total=1, desc=desc, disable=disable)
    try:
        yield bar
        bar.update(1)
    finally:
        bar.close()


class PhaseBar:
    """A bar over the named phases of one wait, moved as each ends (`done`), the phase under way beside it."""

    def __init__(self, desc: str, phases: Sequence[str], disable: bool = False):
        self.phases = list(phases)
        self.bar = tqdm(total=len(self.phases), desc=desc, unit="phase", disable=disable)
        self.bar.set_postfix_str(self.phases[0] if self.phases else "", refresh=True)

    def done(self, phase: str) -> None:
        """`phase` has ended: the bar moves on and names the next one."""
        if phase not in self.phases:
            raise ValueError(f"unknown phase {phase!r}; this bar's phases: {', '.join(self.phases)}")
        following = self.phases[self.phases.index(phase) + 1:]
        self.bar.set_postfix_str(following[0] if following else "", refresh=False)
        self.bar.update(1)


@contextlib.contextmanager
def phase_bar(desc: str, phases: Sequence[str], disable: bool = False) -> Iterator[PhaseBar]:
    """A `PhaseBar` closed when the block ends."""
    bar = PhaseBar(desc, phases, disable)
    try:
        yield bar
    finally:
        bar.bar.close()


__all__ = ["tqdm", "TEXT", "waiting", "PhaseBar", "phase_bar"]
