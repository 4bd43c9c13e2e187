"""Released text-to-SQL checkpoints evaluated by the kit under their own published protocols.

`protocols` holds each release's prompt, chat-template call, decoding and SQL extraction (and which files of
which repository it follows); `omnisql_schema` the schema text their prompts show; `run` one set's evaluation
with the kit's executor and scoring rule, written under `runs/<profile>/eval/baselines/<name>/<set>/`.
`evaluate.evaluate_baseline` (the CLI's `--baseline`) loads the checkpoint and runs every set.
"""
from .protocols import BASELINES, KIT_PROTOCOL, PAPER_METHODS, PROTOCOLS, Decoding, Protocol, estimated_hours, \
    last_sql_block, protocol, release_question
from .run import (BASELINES_DIR, ReleaseRun, add_baseline_arguments, baseline_dir, evaluate_release,
                  kit_baseline_metrics, majority_vote, print_baseline_results, release_config)

__all__ = ["BASELINES", "BASELINES_DIR", "Decoding", "KIT_PROTOCOL", "PAPER_METHODS", "PROTOCOLS", "Protocol",
           "ReleaseRun",
           "add_baseline_arguments", "baseline_dir", "estimated_hours", "evaluate_release", "kit_baseline_metrics",
           "last_sql_block", "majority_vote", "print_baseline_results", "protocol", "release_config",
           "release_question"]
