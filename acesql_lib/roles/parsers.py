"""The parsers evaluation reads completions with (§5 is silent; `eval.retriever_parser`, `eval.generator_parser`).

"authors" (paper profile) follows the authors' evaluation scripts, which differ from their
training parsers (answers module docstring): EVAL/retriever_infer.py extracts the answer,
EVAL/merge_retriever_outputs.py and EVAL/src/utils/schema_utils.py read its items,
EVAL/generate_sql_prompts.py re-parses the raw completion when nothing matched, and
EVAL/sql_infer.py extracts the SQL. "kit" is the kit's training parser with the kit's rules.
The CREATE TABLE fallback of EVAL/src/utils/retriever_output_parser.py is not reproduced: no
evaluation script imports that file.
"""
from __future__ import annotations

import json
import re
from typing import Any

from .answers import (AUTHORS_LIST, GeneratorParse, RetrieverParse, authors_index, parse_generator, parse_retriever,
                      split_on_commas)

_AUTHORS_FIRST_LIST = re.compile(r"\[([^\[\]]*)\]", re.DOTALL)
_CODE_BLOCK_LIST = re.compile(r"```(?:python|sql|text)?\s*\n?\s*\[([^\]]*)\]\s*\n?```", re.DOTALL)
_JSON_BLOCK = re.compile(r"```json\s*\n?(.*?)\n?```", re.DOTALL)


def _authors_eval_extract(text: str) -> str:
    """The first JSON block, else the first code-block list, else the first non-empty list, else all."""
    block = _JSON_BLOCK.search(text)
    if block:
        return block.group(1).strip()
    listed = _CODE_BLOCK_LIST.search(text)
    if listed:
        return f"[{listed.group(1)}]"
    plain = AUTHORS_LIST.search(text)
    return f"[{plain.group(1)}]" if plain else text


def _authors_eval_items(text: str) -> list[str]:
    """The item list of an extracted answer: JSON object, code-block list, whole list, first list."""
    text = text.strip()
    if not text:
        return []
    candidates = [text] if text.startswith("{") and text.endswith("}") else []
    block = _JSON_BLOCK.search(text)
    if block:
        candidates.insert(0, block.group(1).strip())
    for candidate in candidates:
        try:
            data = json.loads(candidate)
        except (json.JSONDecodeError, RecursionError):  # model output: nesting past Python's stack is not JSON here
            continue
        if not isinstance(data, dict):
            continue
        if isinstance(data.get("columns"), list):
            return [str(c).strip() for c in data["columns"] if str(c).strip()]
        if all(isinstance(v, list) for v in data.values()):
            flat = [f"{t}.{str(c).strip()}" for t, cols in data.items() for c in cols if str(c).strip()]
            if flat:
                return flat
    listed = _CODE_BLOCK_LIST.search(text)
    if listed:
        return split_on_commas(listed.group(1))
    if text.startswith("[") and text.endswith("]"):
        return split_on_commas(text[1:-1])
    first = _AUTHORS_FIRST_LIST.search(text)
    return split_on_commas(first.group(1)) if first else []


def parse_retriever_eval(text: str, schema: Any, truncated: bool = False, parser: str = "authors",
                         prefilled_think: bool = False) -> RetrieverParse:
    """The column set evaluation prunes the schema with (`eval.retriever_parser`).

    "authors": the authors' evaluation pipeline (module docstring); the format flags are those
    of their training gate, reported only. "kit": the kit's training parser (answers.parse_retriever).
    """
    if parser == "kit":
        return parse_retriever(text, schema, truncated, prefilled_think, rules="kit")
    if parser != "authors":
        raise ValueError(f"eval retriever parser must be 'authors' or 'kit', got {parser!r}")
    index = authors_index(schema)
    columns, n_items, n_dropped = index.match(_authors_eval_items(_authors_eval_extract(text)), expand_tables=True)
    if not columns:  # the prompt builder's fallback: the raw completion, parsed once more
        columns, n_items, n_dropped = index.match(_authors_eval_items(text), expand_tables=True)
    gate = parse_retriever(text, schema, truncated, prefilled_think, rules="authors")
    return RetrieverParse(columns, gate.has_think, gate.has_list, truncated, n_items, n_dropped)


_EVAL_SQL_BLOCK = re.compile(r"```sql\s*(.*?)\s*```", re.DOTALL | re.IGNORECASE)
_EVAL_ANY_BLOCK = re.compile(r"```\s*(.*?)\s*```", re.DOTALL)
_SQL_WORDS = ("SELECT", "INSERT", "UPDATE", "DELETE")


def _authors_eval_sql(text: str) -> str:
    blocks = _EVAL_SQL_BLOCK.findall(text)
    if blocks:
        return blocks[-1].strip()
    fenced = _EVAL_ANY_BLOCK.findall(text)
    if fenced and any(w in fenced[-1].strip().upper() for w in _SQL_WORDS):
        return fenced[-1].strip()
    if "SELECT" in text.upper():
        lines, started = [], False
        for line in text.split("\n"):
            started = started or "SELECT" in line.upper()
            if started:
                lines.append(line)
                if ";" in line:
                    break
        return "\n".join(lines).strip()
    return text.strip()


def parse_generator_eval(text: str, truncated: bool = False, parser: str = "authors",
                         prefilled_think: bool = False) -> GeneratorParse:
    """The SQL evaluation executes (`eval.generator_parser`): "authors" as their evaluation script
    (module docstring; the format flags are those of their training gate, reported only), "kit"
    the kit's parser (last closed sql block after the think block; a cut-off query is not run)."""
    if parser == "kit":
        return parse_generator(text, truncated, prefilled_think, rules="kit")
    if parser != "authors":
        raise ValueError(f"eval generator parser must be 'authors' or 'kit', got {parser!r}")
    gate = parse_generator(text, truncated, prefilled_think, rules="authors")
    return GeneratorParse(_authors_eval_sql(text) if text else "", gate.has_think, gate.has_sql_block, truncated)
