"""ACE-SQL reproducibility kit: the library behind the notebooks (docs/library.md; module map in the README).

The names a user starts from are importable from the package (`from acesql_lib import RunContext, run_pipeline`);
each is loaded from its module on first use, so `import acesql_lib` stays light (no torch, no transformers).
Everything else is imported from its module, e.g. `from acesql_lib.train.grpo_run import ABLATIONS`. Importing the
package sets how progress bars draw (acesql_lib/runtime/progress.py: widgets in JupyterLab, text under the pipeline
runner).
"""
from importlib import import_module
from importlib.metadata import PackageNotFoundError, version

from .runtime import progress  # noqa: F401  (before any module takes tqdm.auto's bar)

try:
    __version__ = version("acesql-lib")
except PackageNotFoundError:  # run from a checkout without `pip install -e .`
    __version__ = "0.3.0"

# The public names and the module each lives in (its one home).
PUBLIC = {
    "load_config": "config.profiles", "Config": "config.settings", "ConfigError": "config.checks", "parse_overrides": "config.profiles",
    "RunContext": "config.context",
    "run_pipeline": "pipeline.runner",
    "ensure_base_model": "pipeline.tinybase",
    "load_bird": "data.datasets", "load_spider": "data.datasets", "load_synsql": "data.datasets", "training_pool": "data.datasets",
    "Schema": "data.schema", "load_tables_json": "data.schema",
    "column_set": "data.sqlcolumns",
    "make_engine": "models.engines",
    "RolloutSpec": "train.rollouts", "SamplingSpec": "train.rollouts", "rollout": "train.rollouts",
    "run_distillation": "train.distill",
    "train_sft": "train.sft",
    "build_trainer": "train.grpo_run",
    "evaluate_sets": "evaluation.evaluate", "evaluate_checkpoints": "evaluation.evaluate", "evaluate_baseline": "evaluation.evaluate",
    "build_tables": "reports",
    "preflight_table": "pipeline.preflight",
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
