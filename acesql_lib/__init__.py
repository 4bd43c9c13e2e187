"""ACE-SQL reproducibility kit: the library behind the notebooks (docs/library.md; module map in the README).

The names a user starts from are importable from the package (`from acesql_lib import RunContext, run_pipeline`);
each is loaded from its module on first use, so `import acesql_lib` stays light (no torch, no transformers).
Everything else is imported from its module, e.g. `from acesql_lib.grpo import ABLATIONS`. Importing the package
sets how progress bars draw (acesql_lib/progress.py: widgets in JupyterLab, text under the pipeline runner).
"""
from importlib import import_module
from importlib.metadata import PackageNotFoundError, version

from . import progress  # noqa: F401  (before any module takes tqdm.auto's bar)

try:
    __version__ = version("acesql-lib")
except PackageNotFoundError:  # run from a checkout without `pip install -e .`
    __version__ = "0.2.0"

# The public names and the module each lives in (its one home).
PUBLIC = {
    "load_config": "config", "Config": "config", "ConfigError": "config", "parse_overrides": "config",
    "RunContext": "context",
    "run_pipeline": "pipeline",
    "ensure_base_model": "tinybase",
    "load_bird": "datasets", "load_spider": "datasets", "load_synsql": "datasets", "training_pool": "datasets",
    "Schema": "schema", "load_tables_json": "schema",
    "column_set": "sqlcolumns",
    "make_engine": "engines",
    "RolloutSpec": "rollouts", "SamplingSpec": "rollouts", "rollout": "rollouts",
    "run_distillation": "distill",
    "train_sft": "sft",
    "build_trainer": "grpo",
    "evaluate_sets": "evaluate", "evaluate_checkpoints": "evaluate", "evaluate_baseline": "evaluate",
    "build_tables": "reports",
    "preflight_table": "preflight",
}
__all__ = ["__version__", *PUBLIC]


def __getattr__(name: str):
    if name not in PUBLIC:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f".{PUBLIC[name]}", __name__), name)
    globals()[name] = value  # loaded once
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
