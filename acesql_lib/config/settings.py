"""Typed configuration: `Config`, the run's settings, one dataclass per stage.

Defaults are the paper's values (section of ../spec noted as "§" beside each field); where the
paper is silent the field says UNKNOWN and names the kit's choice. The sections live with their stage:
`data` (DataConfig, FilteringConfig), `model` (ModelConfig, TinyBaseConfig, EngineConfig), `train`
(DistillConfig, SFTConfig, GRPOConfig), `eval` (EvalSet, EvalConfig); the reports' own section is here.
Profiles in `configs/*.yaml` override these defaults with the same keys, each stating only what differs from
what it inherits (the paper profile states nothing; tests/test_config.py fails on a repeated value), and
`profiles.load_config` reads them. Every field's type says what it accepts: a choice is a `Literal`
(`choices`), a bound is pydantic's `Field` constraint (`PositiveInt`, `Share`, ...), and pydantic checks
each value against its type in strict mode (nothing coerced but an int for a float) whenever a section
is built, from a profile or in code (`checks`); the few rules that tie two settings together stay in the
section's `__post_init__`. An unknown key, a value of the wrong type or out of bounds raises a `ConfigError`
that names the key, the value, what is allowed, and the file.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from pydantic import PositiveInt

from .checks import validate_fields
from .choices import FigureFormat, TableFormat
from .data import DataConfig, FilteringConfig
from .eval import EvalConfig
from .model import EngineConfig, ModelConfig
from .train import DistillConfig, GRPOConfig, SFTConfig


@dataclass
class ReportsConfig:
    table_formats: list[TableFormat] = field(default_factory=lambda: ["csv", "md", "tex"])
    figure_formats: list[FigureFormat] = field(default_factory=lambda: ["png", "pdf"])
    style: str = "whitegrid"  # seaborn style used for every figure
    dpi: PositiveInt = 150

    def __post_init__(self) -> None:
        validate_fields(self, "reports")


@dataclass
class Config:
    profile: str = "paper"
    run_dir: str = ""  # "" = runs/<profile>: models, checkpoints, rollouts (not in git)
    reports_dir: str = ""  # "" = reports/<profile>: tables, figures, metrics, executed notebooks
    seed: int = 0
    data: DataConfig = field(default_factory=DataConfig)
    filtering: FilteringConfig = field(default_factory=FilteringConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    distill: DistillConfig = field(default_factory=DistillConfig)
    sft: SFTConfig = field(default_factory=SFTConfig)
    grpo: GRPOConfig = field(default_factory=GRPOConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    reports: ReportsConfig = field(default_factory=ReportsConfig)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
