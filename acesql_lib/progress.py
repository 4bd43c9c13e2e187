"""Progress bars: widgets in JupyterLab, text everywhere else.

`tqdm.auto` draws a widget inside a Jupyter kernel when ipywidgets is installed (it is: stepping through the
notebooks in JupyterLab shows live bars, without tqdm's "IProgress not found" warning). Under the pipeline
runner no browser draws widgets, and the runner relays the kernels' text bars to the terminal
(`pipeline.ProgressRelay`), so it starts its kernels with ACESQL_PROGRESS=text and the kit's bars draw text
there: this module's own `tqdm`, and every `from tqdm.auto import tqdm` made after the package is imported
(the kit's other modules, TRL's and transformers' bars), since it then points tqdm.auto at the text bar.
Read once, when the package is first imported (acesql_lib/__init__.py).
"""
from __future__ import annotations

import os

from tqdm.auto import tqdm as _auto_tqdm
from tqdm.std import tqdm as _text_tqdm

TEXT = os.environ.get("ACESQL_PROGRESS", "").strip().lower() == "text"
tqdm = _text_tqdm if TEXT else _auto_tqdm
if TEXT:
    import tqdm.auto as _auto
    import tqdm.autonotebook as _autonotebook

    _auto.tqdm = _autonotebook.tqdm = _text_tqdm

__all__ = ["tqdm", "TEXT"]
