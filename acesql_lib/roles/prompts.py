"""The two role prompts of §2 and their SFT targets, which `answers` reads back exactly.

Both roles use one user turn and no system prompt; the chat template of the model (thinking on)
turns the messages into text. Styles (`model.prompt_style`):
- "authors" (paper and rehearsal profiles): the authors' prompt texts byte for byte. Training and
  rollouts (self-distillation, SFT samples, GRPO and its validation) use their training templates
  (RL/prompts/retriever_prompt.txt, RL/prompts/generator_prompt.txt); evaluation uses their
  evaluation templates (EVAL/prompts/retriever_prompt.txt, INPUT_PROMPT_TEMPLATE of
  EVAL/prompt_templates.py), which lack the line asking for a <think> block and end in a newline.
  `evaluation_style` maps the profile's style to the one evaluation builds with ("authors_eval").
  How the authors fill them (their RL/utils/generate_prompts_utils.py, RL/rewards/retriever_utils.py,
  EVAL/prepare_eval_data.py, EVAL/generate_sql_prompts.py): the training question is
  evidence.strip() + newline + question.strip() (`question_text`), the evaluation question is
  evidence.strip() + newline + the question as read (not stripped); the schema text goes in as it is
  (not stripped); the training templates are read without their final newline; the evaluation
  retriever template is filled question first, then schema, by plain replacement (so a question
  holding the text "{schema}" would get the schema too, as theirs does); the others in one pass.
  Their engine line is "SQLite".
- "paper": the kit's own wording, written from the paper alone, one layout for both roles
  (task, engine, schema, question, rules, output format); "tiny" shortens its instruction sentences
  so CPU sequences stay short (the tiny profile). Training and evaluation use the same text.

SFT targets follow the output contract of §2 (`answers` module docstring): a think block, then the retriever's
column list in a code block or the generator's SQL in a ```` ```sql ```` block.
"""
from __future__ import annotations

import re
from typing import Iterable

from .answers import THINK_CLOSE, THINK_OPEN

PROMPT_STYLES = ("authors", "paper", "tiny")  # model.prompt_style (module docstring)
AUTHORS_EVAL = "authors_eval"  # the authors' evaluation templates; what evaluation builds with under "authors"


# ------------------------------------------------------------------------------------------
# Prompt text

_RETRIEVER = {
    "paper": {
        "task": ("You are a database schema specialist. Read the database schema and the question, "
                 "and find the minimal set of tables and columns that a SQL query answering the "
                 "question needs."),
        "rules": ("- Keep every column the query returns, filters on, groups by, orders by or aggregates.\n"
                  "- Keep the key columns that join the selected tables along a complete join path.\n"
                  "- Leave out everything else: no extra tables, no extra columns."),
        "format": ("Reason step by step inside <think>...</think>. Then, at the very end, write the selected "
                   "columns as one bracketed list of table.column items inside a code block, for example:\n"
                   "```\n[table_a.column_1, table_a.key, table_b.key, table_b.column_2]\n```"),
    },
    "tiny": {
        "task": "Find the minimal columns needed.",
        "rules": "- Include join keys. No extras.",
        "format": "<think>...</think> then\n```\n[table.column, ...]\n```",
    },
}

_GENERATOR = {
    "paper": {
        "task": ("You are an expert data scientist. Write one {engine} query that answers the question "
                 "below over the given database."),
        "rules": ("- Return exactly what the question asks for: no extra columns, none missing.\n"
                  "- Use only the tables and columns of the schema above.\n"
                  "- Think the query through before writing it."),
        "format": ("Reason step by step inside <think>...</think>. Then give the final query in one code block:\n"
                   "```sql\n-- your SQL query\n```"),
    },
    "tiny": {
        "task": "Write one {engine} query for the question.",
        "rules": "- Return exactly what is asked.",
        "format": "<think>...</think> then\n```sql\n...\n```",
    },
}


def question_text(question: str, evidence: str = "") -> str:
    """§2: for BIRD the question string is evidence + newline + question."""
    evidence = (evidence or "").strip()
    return f"{evidence}\n{question.strip()}" if evidence else question.strip()


def _style(table: dict, style: str) -> dict:
    if style not in table:
        raise ValueError(f"unknown prompt style {style!r} (known: {', '.join(table)})")
    return table[style]


def _layout(parts: dict, engine: str, schema_text: str, question: str, evidence: str) -> str:
    return (f"Task:\n{parts['task'].format(engine=engine)}\n\n"
            f"Database engine:\n{engine}\n\n"
            f"Database schema:\n{schema_text.strip()}\n\n"
            f"Question:\n{question_text(question, evidence)}\n\n"
            f"Rules:\n{parts['rules']}\n\n"
            f"Output format:\n{parts['format']}")


# The authors' texts (module docstring). Placeholders: {engine}, {schema}, {question}.
_AUTHORS_RETRIEVER_HEAD = (
    "Task Overview:\n"
    "You are a database schema specialist. Below, you are provided with a database schema and a natural language "
    "question. Your task is to identify the minimum necessary tables and columns required to construct a valid SQL "
    "query that answers the question.\n\n"
    "Database Engine:\n{engine}\n\n"
    "Database Schema: \n{schema} \n"
    "This schema describes the database's structure, including tables, columns, primary keys, and foreign keys.\n\n"
    "Question: \n{question}\n\n"
    "Instructions:\n\n"
    "-Inclusion Criteria: Only include columns used in SELECT, WHERE, JOIN (Foreign/Primary Keys),ORDER BY,etc.\n\n"
    "-Join Integrity: For multi-table questions, you must include all columns required to form a complete join "
    "path.\n\n"
    "-Strict Minimalism: Do not include any extra columns (like descriptions or notes) unless explicitly asked "
    "for.\n\n\n"
    "Output Format:\n"
    "In your answer, please think step by step and enclose the needed columns and tables in a code block at the "
    "end:\n")
_AUTHORS_RETRIEVER_THINK = "- Include a <think>...</think> reasoning block before the final column list.\n"
_AUTHORS_RETRIEVER_TAIL = ("```\n[table1.column1, table2.column2, ...]\n```\n\n"
                           "Take a deep breath and think step by step to find the most relevant columns.")
_AUTHORS_GENERATOR_HEAD = (
    "Task Overview:\n"
    "You are a data science expert. Below, you are provided with a database schema and a natural language "
    "question. Your task is to understand the schema and generate a valid SQL query to answer the question.\n\n"
    "Database Engine:\n{engine}\n\n"
    "Database Schema:\n{schema}\n"
    "This schema describes the database's structure, including tables, columns, primary keys, foreign keys, and "
    "any relevant relationships or constraints.\n\n"
    "Question:\n{question}\n\n"
    "Instructions:\n"
    "- Make sure you only output the information that is asked in the question. If the question asks for a "
    "specific column, make sure to only include that column in the SELECT clause, nothing more.\n"
    "- The generated query should return all of the information asked in the question without any missing or "
    "extra information.\n"
    "- Before generating the final SQL query, please think through the steps of how to write the query.\n\n")
_AUTHORS_GENERATOR_THINK = "- Include a <think>...</think> reasoning block before the final SQL query.\n\n"
_AUTHORS_GENERATOR_TAIL = ("Output Format:\n"
                           "In your answer, please enclose the generated SQL query in a code block:\n"
                           "```sql\n-- Your SQL query\n```\n\n"
                           "Take a deep breath and think step by step to find the correct SQL query.")
AUTHORS_TEMPLATES = {  # (role, style) -> template
    ("retriever", "authors"): _AUTHORS_RETRIEVER_HEAD + _AUTHORS_RETRIEVER_THINK + _AUTHORS_RETRIEVER_TAIL,
    ("retriever", AUTHORS_EVAL): _AUTHORS_RETRIEVER_HEAD + _AUTHORS_RETRIEVER_TAIL + "\n",
    ("generator", "authors"): _AUTHORS_GENERATOR_HEAD + _AUTHORS_GENERATOR_THINK + _AUTHORS_GENERATOR_TAIL,
    ("generator", AUTHORS_EVAL): _AUTHORS_GENERATOR_HEAD + _AUTHORS_GENERATOR_TAIL + "\n",
}
_PLACEHOLDER = re.compile(r"\{(engine|schema|question)\}")


def evaluation_style(style: str) -> str:
    """The style evaluation builds its prompts with: the authors' evaluation templates under "authors"."""
    return AUTHORS_EVAL if style == "authors" else style


def _authors_text(role: str, style: str, engine: str, schema_text: str, question: str, evidence: str) -> str:
    template = AUTHORS_TEMPLATES[(role, style)]
    if style == AUTHORS_EVAL:
        evidence = (evidence or "").strip()
        question = f"{evidence}\n{question}" if evidence else question  # the question as read
    else:
        question = question_text(question, evidence)
    values = {"engine": engine, "schema": schema_text, "question": question}
    if (role, style) == ("retriever", AUTHORS_EVAL):  # replaced in turn: question, then schema
        text = template.replace("{engine}", engine)
        return text.replace("{question}", question).replace("{schema}", schema_text)
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], template)  # one pass: values are not rescanned


def _is_authors(style: str) -> bool:
    return style in ("authors", AUTHORS_EVAL)


def retriever_messages(schema_text: str, question: str, evidence: str = "", engine: str = "SQLite",
                       style: str = "paper") -> list[dict[str, str]]:
    """Chat messages for the retriever: full schema in, minimal `table.column` list out (§2)."""
    if _is_authors(style):
        return [{"role": "user", "content": _authors_text("retriever", style, engine, schema_text, question, evidence)}]
    return [{"role": "user", "content": _layout(_style(_RETRIEVER, style), engine, schema_text, question, evidence)}]


def generator_messages(pruned_schema_text: str, question: str, evidence: str = "", engine: str = "SQLite",
                       style: str = "paper") -> list[dict[str, str]]:
    """Chat messages for the generator: pruned schema in, one SQL query out (§2, OmniSQL-style)."""
    if _is_authors(style):
        return [{"role": "user",
                 "content": _authors_text("generator", style, engine, pruned_schema_text, question, evidence)}]
    return [{"role": "user",
             "content": _layout(_style(_GENERATOR, style), engine, pruned_schema_text, question, evidence)}]


# ------------------------------------------------------------------------------------------
# SFT targets (`answers` reads them back exactly)


def _think_prefix(think: str, prefilled_think: bool) -> str:
    think = think.strip()
    if THINK_CLOSE in think or THINK_OPEN in think:
        raise ValueError("think text must not contain <think> or </think> tags")
    return ("" if prefilled_think else THINK_OPEN) + f"\n{think}\n{THINK_CLOSE}\n\n"


def _list_item(column: str) -> str:
    # A name with a comma would split; backticks keep it one item (the parser strips them).
    return f"`{column}`" if ("," in column and "`" not in column) else column


def retriever_target(columns: Iterable[str], think: str, prefilled_think: bool = False) -> str:
    """The retriever completion: think block, then the sorted column list in a code block."""
    cols = sorted(set(columns))
    for c in cols:
        if "[" in c or "]" in c:
            raise ValueError(f"column {c!r}: brackets in a name cannot be written in the list format")
    return _think_prefix(think, prefilled_think) + "```\n[" + ", ".join(_list_item(c) for c in cols) + "]\n```"


def generator_target(sql: str, think: str, prefilled_think: bool = False) -> str:
    """The generator completion: think block, then the SQL in a ```sql block."""
    sql = sql.strip()
    if "```" in sql:
        raise ValueError("SQL must not contain a code fence")
    return _think_prefix(think, prefilled_think) + f"```sql\n{sql}\n```"
