"""ACE-SQL reproducibility kit: the library behind the notebooks (docs/library.md; module map in the README).

Importing the package sets how progress bars draw (acesql_lib/progress.py: widgets in JupyterLab, text under
the pipeline runner); everything else is imported from its module, e.g. `from acesql_lib.grpo import build_trainer`.
"""
from importlib.metadata import PackageNotFoundError, version

from . import progress  # noqa: F401  (before any module takes tqdm.auto's bar)

try:
    __version__ = version("acesql-lib")
except PackageNotFoundError:  # run from a checkout without `pip install -e .`
    __version__ = "0.1.0"
