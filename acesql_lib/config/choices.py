"""Every choice a setting offers, declared once as a `Literal`, and the bounds a number may take.

The config sections' fields are typed with these (`checks.validate_fields` validates each value against its
field's type with pydantic), and the modules that act on a choice read its values from here
(`typing.get_args(Tracker)`), so a choice is spelled in one place.
"""
from __future__ import annotations

import typing
from typing import Annotated, Literal

from pydantic import Field

from ..roles.prompts import PROMPT_STYLES

World = Literal["synsql", "tinyworld"]
SchemaStyle = Literal["kit", "authors"]
Stage1Source = Literal["ours", "authors"]
LayoutsFrom = Literal["", "tinyworld"]
Complexity = Literal["Simple", "Moderate", "Complex", "Highly Complex"]  # SynSQL's sql_complexity levels
DType = Literal["float32", "bfloat16", "float16"]
Device = Literal["auto", "cpu", "cuda"]
PromptStyle = Literal[PROMPT_STYLES]  # prompts.PROMPT_STYLES (its module docstring says what each is)
EngineKind = Literal["vllm", "hf", "auto"]
TraceChoice = Literal["shortest", "first", "random"]
RLSelection = Literal["stage1", "sft_model"]  # whose rollouts choose the RL questions (DistillConfig.rl_selection)
CompareMode = Literal["set", "multiset", "spider"]
Tracker = Literal["none", "tensorboard", "wandb", "trackio"]  # experiment trackers that SFT and GRPO can report to
Vote = Literal["majority", "union", "per_retriever"]
PoolInit = Literal["sft_rollouts_plus_gold", "sft_rollouts", "union", "static_gold", "authors_file"]
RetrieverReward = Literal["sparse", "dense", "dense_kit"]
PCGradMode = Literal["symmetric", "generator_dominant", "norm_equalised", "norm_mean", "none", "global"]
Truncation = Literal["length", "no_stop"]
AuthorsOrKit = Literal["authors", "kit"]  # think rule, parsers, schedule, question order: the authors' or the kit's
PoolAddGate = Literal["format", "match"]
BareTableColumns = Literal["none", "anchor"]
SQLWhitespace = Literal["collapse", "keep"]
LossAgg = Literal["micro_token_mean", "global_token_mean"]
SetFormat = Literal["bird", "spider"]
BirdDevVersion = Literal["", "20240627", "20251106"]  # BIRD dev's releases (data/benchmarks.json pins each one's files)
Scoring = Literal["kit", "authors", "bird_original", "bird_minidev"]  # executor/scoring.py says what each rule does
TableFormat = Literal["csv", "md", "tex"]
FigureFormat = Literal["png", "pdf", "svg"]

TRACKERS = typing.get_args(Tracker)
RL_SELECTIONS = typing.get_args(RLSelection)
POOL_INITS = typing.get_args(PoolInit)

# Bounds, declared in the field's type (pydantic's PositiveInt / NonNegativeInt / PositiveFloat / NonNegativeFloat
# and these shares).
Share = Annotated[float, Field(ge=0, le=1)]  # [0, 1]
OpenShare = Annotated[float, Field(gt=0, le=1)]  # (0, 1]
Ratio = Annotated[float, Field(ge=0, lt=1)]  # [0, 1)
ThinkFiller = Annotated[int, Field(ge=0, le=6)]  # filler sentences after the think sentence (tinybase.THINK_FILLER)
