"""The BIRD scoring rules the kit reproduces, by name (`eval.scoring`, `python -m acesql_lib.executor --mode`).

Every rule compares rows as Python sets (`set(pred) == set(gold)`, column order counting) and
scores an error or a timeout 0; they differ in what they do with unusual predictions and results:

- "kit": the kit's own rule (the tiny profile): a prediction without a statement (blank, spaces,
  comments) scores 0 ("empty SQL"), a null or a malformed entry scores 0 and is counted, invalid
  UTF-8 text in a result is read as U+FFFD, both SQLs run on the database the prediction names.
- "authors": the authors' evaluation scripts, which the paper's numbers come from (xbchen1/ACE-SQL
  `EVAL/evaluation_maj.py`, run by `EVAL/single_eval_maj.py` in greedy_search mode):
  - a prediction without a statement runs as Python's sqlite3 runs it, returning no rows, so it
    scores 1 when the gold returns no rows (evaluation_maj.py:74-78: `cursor.execute(pred_sql)`,
    `fetchall()`, set equality; `sql_infer.py:55-56` writes "" for an empty response);
  - a null prediction scores 0 (`cursor.execute(None)` raises TypeError, caught at :81);
  - their predictions carry no separator and no database: the SQL runs whole, on the gold's
    database (evaluation_maj.py:281), so a BIRD entry's db_id is ignored and an entry without the
    separator is the SQL itself;
  - no `text_factory` (evaluation_maj.py:50-51, 69-70): text that is not valid UTF-8 raises in
    `fetchall()` and the question scores 0, whichever side holds it;
  - timeout 300 s for the pair (`--timeout 300`, single_eval_maj.py:556; the script's own default is
    30, evaluation_maj.py:39); the kit gives each SQL its own deadline of that length;
  - one prediction per gold question in order (`assert len(...) == ...`, evaluation_maj.py:340): a
    missing entry stops the script, here an error naming the file.
- "bird_original": the original BIRD release (AlibabaResearch/DAMO-ConvAI `bird/llm/src/evaluation.py`):
  - `sql, db_name = sql_str.split('\\t----- bird -----\\t')` (:58): an entry without the separator, or
    with it twice, stops the script (ValueError); here an error naming the file and the entry;
  - a non-string (null) entry becomes `" "` on the database "financial" (:59-60), and the gold runs
    there too: it scores 1 only when the gold returns no rows on financial;
  - both SQLs run on the database the prediction names (:62, :143); no `text_factory`: invalid UTF-8
    scores 0; `meta_time_out` 30 s for the pair (:128, run_evaluation.sh:8);
  - entries are paired with the gold by their order in the file (`sql_data.items()`, :56; `zip`, :142);
    fewer entries than gold questions stop the script at `exec_results[i]` (:95): here an error.
- "bird_minidev": the mini-dev release (bird-bench/mini_dev `evaluation/evaluation_ex.py`,
  `evaluation/evaluation_utils.py`):
  - an entry without the separator (or with it twice) runs whole, stripped (utils:85-89), so a blank
    string runs as no statement; a null runs `" "` (utils:90-92): both score 1 when the gold returns
    no rows;
  - both SQLs run on the gold's database (`db_places=db_paths_gt`, evaluation_ex.py:140); no
    `text_factory` (utils:47, 57-64): invalid UTF-8 scores 0; 30 s for the pair (evaluation_ex.py:117);
  - paired by file order (utils:83, evaluation_ex.py:136); fewer entries than gold questions stop the
    script (`exec_results[i]`, evaluation_ex.py:77): here an error.

What none of the reproductions copies: the official scripts run a prediction that writes (inside
a transaction they roll back, or on a connection they never commit) and then the gold on that same
connection; the kit never runs a write (it is `blocked`, 0).
"""
from __future__ import annotations

import re
import typing
from dataclasses import dataclass

from ..config.choices import Scoring

SCORINGS = typing.get_args(Scoring)  # declared once, in config (eval.scoring)
# What a prediction with no statement is replaced by under a rule that runs it: no rows, any width.
EMPTY_RESULT_SQL = "SELECT 1 WHERE 0"
# SQLite's tokenizer (tokenize.c) on what separates statements: whitespace is exactly space, \t, \n,
# \f and \r; `--` runs to the end of its line and `/*` to the first `*/` (or the end of the text);
# a string ('...', '' inside) or a quoted identifier ("...", `...`, [...]) hides what it holds; `;`
# ends a statement, and one with no token between two ends is empty. Python's sqlite3
# (`cursor.execute`, what every released evaluator calls on the raw predicted text) prepares the
# first non-empty statement, skipping empty ones before it, and runs nothing when there is none.
_SEPARATOR_TOKEN = re.compile(r"""(?P<skip>[ \t\n\f\r;]+|--[^\n]*|/\*.*?(?:\*/|\Z))"""
                              r"""|'(?:[^']|'')*(?:'|\Z)|"(?:[^"]|"")*(?:"|\Z)|`[^`]*(?:`|\Z)|\[[^\]]*(?:\]|\Z)"""
                              r"""|[^ \t\n\f\r;'"`\[\-/]+|.""", re.DOTALL)


@dataclass(frozen=True)
class ScoringRule:
    name: str
    blank_runs: bool  # a prediction without a statement returns no rows (True) or scores 0 ("empty SQL")
    strict_utf8: bool  # invalid UTF-8 text in a result is an error (True) or read as U+FFFD
    timeout_s: float | None  # seconds per SQL; None: the caller's (eval.exec_timeout_s, --timeout)
    database: str  # "prediction": both SQLs on the db the entry names; "gold": on the gold's
    pairing: str  # "key": entry "i" is gold question i; "order": the i-th entry in the file
    null: str  # "zero" | "blank" (runs " ") | "blank_financial" (runs " " on financial, gold too)
    no_separator: str  # "zero" | "whole" (the entry is the SQL) | "stop" (the release stops)
    two_separators: str  # "last" (split at the last) | "whole" | "stop"
    missing: str  # fewer entries than gold questions: "zero" (each missing one scores 0) | "stop"
    source: str  # where the rule comes from


RULES = {
    "kit": ScoringRule("kit", False, False, None, "prediction", "key", "zero", "zero", "last", "zero",
                       "the kit's own rule"),
    "authors": ScoringRule("authors", True, True, 300.0, "gold", "key", "zero", "whole", "last", "stop",
                           "xbchen1/ACE-SQL EVAL/evaluation_maj.py (run by EVAL/single_eval_maj.py)"),
    "bird_original": ScoringRule("bird_original", True, True, 30.0, "prediction", "order", "blank_financial",
                                 "stop", "stop", "stop", "AlibabaResearch/DAMO-ConvAI bird/llm/src/evaluation.py"),
    "bird_minidev": ScoringRule("bird_minidev", True, True, 30.0, "gold", "order", "blank", "whole", "whole",
                                "stop", "bird-bench/mini_dev evaluation/evaluation_ex.py, evaluation_utils.py"),
}


def rule(name: str) -> ScoringRule:
    """The rule called `name` (one of SCORINGS); ValueError naming the choices otherwise."""
    if name not in RULES:
        raise ValueError(f"scoring must be one of {', '.join(SCORINGS)}, got {name!r}")
    return RULES[name]


def has_no_statement(sql: object) -> bool:
    """True when Python's sqlite3 would execute `sql` as no statement at all (no rows, no error):
    nothing but SQLite whitespace, semicolons and comments, read token by token as SQLite reads
    them, so a comment never hides the statement after it (`/* note */ SELECT 1` has one)."""
    if not isinstance(sql, str):
        return False
    return all(m.lastgroup == "skip" for m in _SEPARATOR_TOKEN.finditer(sql))


def sql_to_run(sql: str, scoring: ScoringRule) -> str:
    """What the executor runs for a prediction under `scoring`: a statement-less one becomes
    EMPTY_RESULT_SQL when the rule runs it (no rows), else it is run as written."""
    return EMPTY_RESULT_SQL if scoring.blank_runs and has_no_statement(sql) else sql
