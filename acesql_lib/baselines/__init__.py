"""Released text-to-SQL checkpoints evaluated by the kit under their own published protocols.

`protocols` holds each release's prompt, chat-template call, decoding and SQL extraction (and which files of
which repository it follows); `omnisql_schema` the schema text their prompts show; `run` the evaluation with
the kit's executor and scoring rule, written under `runs/<profile>/eval/baselines/<name>/<set>/`.
"""
from .protocols import BASELINES, KIT_PROTOCOL, PAPER_METHODS, PROTOCOLS, Decoding, Protocol, estimated_hours, \
    last_sql_block, protocol, release_question
from .run import BASELINES_DIR, baseline_dir, evaluate_baseline, majority_vote

__all__ = ["BASELINES", "BASELINES_DIR", "Decoding", "KIT_PROTOCOL", "PAPER_METHODS", "PROTOCOLS", "Protocol",
           "baseline_dir", "estimated_hours", "evaluate_baseline", "last_sql_block", "majority_vote", "protocol",
           "release_question"]
