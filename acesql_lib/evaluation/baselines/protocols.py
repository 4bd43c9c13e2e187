"""The released single-model text-to-SQL checkpoints the paper compares with, each under its own evaluation.

A protocol is what a release's evaluation scripts do to one question: the prompt (template, schema text,
question text), the chat template call, the decoding settings (context, new-token budget, temperature,
samples, the vote over samples) and the SQL taken from the answer. Where each protocol's facts come from:

- "omnisql" (seeklhy/OmniSQL-7B; RUCKBReasoning/OmniSQL): `train_and_evaluate/process_dataset.py`
  (`input_prompt_template`, evaluation-mode schema text, question = evidence + newline + question when the
  evidence is not blank; run with `--value_limit_num 2` and the BM25 values index, `process_dataset.sh`),
  `train_and_evaluate/infer.py` (one user turn, `apply_chat_template(add_generation_prompt=True)`, context
  8,192, 2,048 new tokens, stop at <|im_end|>, the last ```sql block, "" when there is none) and
  `train_and_evaluate/auto_evaluation.py` (greedy: n 1, temperature 0; major voting: n 8, temperature 0.8).
- "arctic" (Snowflake/Arctic-Text2SQL-R1-7B; snowflakedb/ArcticTraining `projects/arctic_text2sql_r1/`):
  `bird_eval/infer.py` (a system turn and a user turn, each text stripped; the chat template's prompt
  followed by "Let me solve this step by step. \\n<think>"; context 16,384, 8,192 new tokens; the same
  extraction), `bird_eval/eval_open_source_models.py` (greedy n 1 at temperature 0 by default; with
  `--self_consistency` n 8 at 0.8, voted) and `data_preprocessing/process_dataset.py` (OmniSQL's schema
  text and question, values index included, README.md).
- "sql_r1" (SQL-R1-7B; IDEA-FinAI/SQL-R1): `src/utils/prepare_input_seq.py` (OmniSQL's template with two
  more instruction lines, OmniSQL's schema text without relevant values, `db_id2relevant_hits=None`),
  `src/inference.py` (one user turn, `enable_thinking=False` for a checkpoint not named Qwen3, context 8,192,
  2,048 new tokens, the same extraction), `sh/inference.sh` (n 8, temperature 0.8) and `sh/eval_bird.sh` +
  `src/evaluation_bird_post.py` (major voting).
- "qwen3-8b" (Qwen/Qwen3-8B): the paper's own protocol, the kit's two-pass evaluation (`evaluate`, §5).

The majority vote (`major_voting` of OmniSQL's and Arctic's `evaluate_bird.py` and SQL-R1's
`evaluation_bird_post.py`): every sample's SQL is executed, 10 s each; those that run without error vote with
their result as a set of rows (an empty answer runs as no rows); the first sample of the most voted result is the
answer. When no sample runs the kit takes the first (the releases draw one at random, seed 42; every such SQL
fails, so EX is the same).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

KIT_PROTOCOL = "qwen3-8b"  # evaluated by the kit's own two-pass evaluation (evaluate.py)

_OMNISQL_INTRO = """Task Overview:
You are a data science expert. Below, you are provided with a database schema and a natural language question. Your task is to understand the schema and generate a valid SQL query to answer the question.

"""
_BODY = """Database Engine:
{db_engine}

Database Schema:
{db_details}
This schema describes the database's structure, including tables, columns, primary keys, foreign keys, and any relevant relationships or constraints.

Question:
{question}

Instructions:
- Make sure you only output the information that is asked in the question. If the question asks for a specific column, make sure to only include that column in the SELECT clause, nothing more.
- The generated query should return all of the information asked in the question without any missing or extra information.
- Before generating the final SQL query, please think through the steps of how to write the query.
"""
_SQL_R1_LINES = """- Note that while the reasoning process and SQL query need to be enclosed within <think> </think> and <answer> </answer> tags respectively, this should not affect the quality of the SQL generation.
- The answer must contain the SQL query within ```sql ``` tags.
"""
_OMNISQL_FORMAT = """
Output Format:
In your answer, please enclose the generated SQL query in a code block:
```sql
-- Your SQL query
```

Take a deep breath and think step by step to find the correct SQL query.
"""
OMNISQL_TEMPLATE = _OMNISQL_INTRO + _BODY + _OMNISQL_FORMAT
SQL_R1_TEMPLATE = _OMNISQL_INTRO + _BODY + _SQL_R1_LINES + _OMNISQL_FORMAT

ARCTIC_SYSTEM = ("You are a data science expert. Below, you are provided with a database schema and a natural language "
                 "question. Your task is to understand the schema and generate a valid SQL query to answer the question.")
_ARCTIC_FORMAT = """Please provide a detailed chain-of-thought reasoning process and include your thought process within `<think>` tags. Your final answer should be enclosed within `<answer>` tags.

Ensure that your SQL query follows the correct syntax and is formatted as follows:

```sql
-- Your SQL query here
```

Example format:
<think> Step-by-step reasoning, including self-reflection and corrections if necessary. [Limited by 4K tokens] </think>
<answer> Summary of the thought process leading to the final SQL query. [Limited by 1K tokens]

```sql
Correct SQL query here
```
</answer>"""
ARCTIC_USER_TEMPLATE = _BODY + "\nOutput Format:\n" + _ARCTIC_FORMAT  # the release strips the filled text
ARCTIC_ASSISTANT_START = "Let me solve this step by step. \n<think>"

_SQL_BLOCK = re.compile(r"```sql\s*(.*?)\s*```", re.DOTALL)


def last_sql_block(answer: str) -> str:
    """The releases' extraction: the text of the last ```sql ... ``` block, stripped; "" when there is none
    (an unclosed block does not count; its opening fence can close an earlier block's text)."""
    blocks = _SQL_BLOCK.findall(answer or "")
    return blocks[-1].strip() if blocks else ""


@dataclass(frozen=True)
class Decoding:
    """One decoding of a release: `n` samples at `temperature`, voted when n > 1."""

    n: int = 1
    temperature: float = 0.0
    top_p: float = 1.0

    @property
    def voted(self) -> bool:
        return self.n > 1


GREEDY = Decoding()
MAJOR_VOTING = Decoding(n=8, temperature=0.8)  # OmniSQL's and SQL-R1's major voting, Arctic's self-consistency


@dataclass(frozen=True)
class Protocol:
    name: str
    checkpoint: str  # the released checkpoint's Hugging Face id
    source: str  # the repository whose evaluation code it follows (module docstring names the files)
    max_model_len: int  # the engine's context (prompt + answer)
    max_new_tokens: int
    user_template: str  # the user turn, filled with db_engine, db_details and question
    decodings: dict[str, Decoding] = field(default_factory=dict)
    default_decoding: str = "greedy"
    relevant_values: bool = True  # the schema text shows the question's values (BM25 index)
    system: str = ""
    strip_user: bool = False  # the release strips the filled user turn (Arctic's `.strip()`)
    chat_kwargs: tuple[tuple[str, Any], ...] = ()  # extra apply_chat_template arguments
    assistant_start: str = ""  # text the release appends to the rendered prompt
    vote_timeout_s: float = 10.0  # each sample's execution in the vote (OmniSQL's evaluate_bird.py, SQL-R1's)
    paper_methods: tuple[str, ...] = ()  # the rows of data/paper_results.yaml this checkpoint is

    def user_text(self, db_details: str, question: str) -> str:
        text = self.user_template.format(db_engine="SQLite", db_details=db_details, question=question)
        return text.strip() if self.strip_user else text

    def messages(self, db_details: str, question: str) -> list[dict[str, str]]:
        system = [{"role": "system", "content": self.system}] if self.system else []
        return system + [{"role": "user", "content": self.user_text(db_details, question)}]

    def prompt(self, tokenizer: Any, db_details: str, question: str) -> str:
        """The text the engine is given, as the release renders it."""
        text = tokenizer.apply_chat_template(self.messages(db_details, question), add_generation_prompt=True,
                                             tokenize=False, **dict(self.chat_kwargs))
        return text + self.assistant_start

    def decoding(self, name: str | None = None) -> Decoding:
        name = name or self.default_decoding
        if name not in self.decodings:
            raise ValueError(f"baseline {self.name!r}: decoding {name!r} is not one of its release's "
                             f"({', '.join(self.decodings)})")
        return self.decodings[name]


def release_question(question: str, evidence: str = "") -> str:
    """OmniSQL's question text: evidence + newline + question when the evidence is not blank, both as read."""
    return question if not (evidence or "").strip() else f"{evidence}\n{question}"


PROTOCOLS: dict[str, Protocol] = {p.name: p for p in (
    Protocol("omnisql", "seeklhy/OmniSQL-7B", "RUCKBReasoning/OmniSQL", 8192, 2048, OMNISQL_TEMPLATE,
             {"greedy": GREEDY, "major_voting": MAJOR_VOTING}, paper_methods=("OmniSQL", "OmniSQL-7B")),
    Protocol("arctic", "Snowflake/Arctic-Text2SQL-R1-7B", "snowflakedb/ArcticTraining", 16384, 8192,
             ARCTIC_USER_TEMPLATE, {"greedy": GREEDY, "self_consistency": MAJOR_VOTING}, system=ARCTIC_SYSTEM,
             strip_user=True,
             assistant_start=ARCTIC_ASSISTANT_START, paper_methods=("Arctic-Text2SQL-R1-7B",)),
    Protocol("sql_r1", "MPX0222forHF/SQL-R1-7B", "IDEA-FinAI/SQL-R1", 8192, 2048, SQL_R1_TEMPLATE,
             {"major_voting": MAJOR_VOTING, "greedy": GREEDY}, default_decoding="major_voting",
             relevant_values=False, chat_kwargs=(("enable_thinking", False),),
             paper_methods=("SQL-R1", "SQL-R1-7B")),
)}
BASELINES = (KIT_PROTOCOL, *PROTOCOLS)
PAPER_METHODS = {KIT_PROTOCOL: ("Qwen3-8B base",)} | {p.name: p.paper_methods for p in PROTOCOLS.values()}


def protocol(name: str) -> Protocol:
    if name not in PROTOCOLS:
        raise ValueError(f"unknown baseline {name!r}; known: {', '.join(BASELINES)}")
    return PROTOCOLS[name]


QWEN25_7B_PARAMS = 7.62e9  # Qwen2.5(-Coder)-7B, the base of all three released 7B checkpoints


def estimated_hours(name: str, n_questions: int, gpus: int = 1, decoding: str | None = None) -> float:
    """At most this many hours to evaluate `n_questions` under baseline `name` on `gpus` GPUs: every sample
    at its full budget, at the preflight's engine throughput (`schedule.ROLLOUT_TOKENS_PER_HOUR` on the
    paper's 4 GPUs for an 8B model), scaled by the model's size."""
    from ...config.eval import EvalConfig
    from ...train.schedule import PAPER_GPUS, PAPER_PARAMS, ROLLOUT_TOKENS_PER_HOUR

    if name == KIT_PROTOCOL:  # two greedy passes: retriever and generator budgets of the paper profile
        ev = EvalConfig()
        tokens, params = n_questions * (ev.retriever_max_new_tokens + ev.max_new_tokens), PAPER_PARAMS
    else:
        proto = protocol(name)
        tokens, params = n_questions * proto.decoding(decoding).n * proto.max_new_tokens, QWEN25_7B_PARAMS
    return tokens / ROLLOUT_TOKENS_PER_HOUR * params / PAPER_PARAMS * PAPER_GPUS / max(gpus, 1)
