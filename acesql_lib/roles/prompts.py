"""The two role prompts of §2, their SFT targets, and the parsers that rewards gate on.

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

Output contract (§2):
- retriever: `<think>...</think>`, then a bracketed list `[table.col, ...]` in a code block;
- generator: `<think>...</think>`, then a ```` ```sql ```` block; the last sql block is the answer.

Parsing rules (kit's reading of §2 where the paper is terse):
- The answer region is the text after the LAST `</think>`. An opened but unclosed think block
  leaves no answer (the model ran out of budget or broke the format). Text with no think tag at
  all is parsed as a whole (so evaluation of a non-thinking model still works) but is not
  well formed. `prefilled_think=True` says the prompt already ended with `<think>`, so the
  generation starts inside the think block.
- Retriever: the last balanced top-level `[...]` of the answer region. Nested brackets are
  flattened (`[a.b, [c.d]]` gives a.b and c.d). The code fence is asked for but not required.
  Items are split on commas outside double quotes/backticks; quotes, backticks and brackets
  are stripped; each item goes through `Schema.resolve`; unknown items and bare tables are
  dropped silently and counted.
- Generator: the last CLOSED ```` ```sql ```` block of the answer region; an unterminated final
  block does not count (a cut-off query must not be executed as if complete).

Two rule sets (`rules=`), chosen by `grpo.think_rule` / `grpo.retriever_parser` (training) and
`eval.retriever_parser` (evaluation); "authors" is the paper profile's, read from the authors'
released code (RL/rewards/joint_reward.py, RL/rewards/retriever_utils.py, RL/utils/schema_utils.py,
EVAL/retriever_infer.py, EVAL/merge_retriever_outputs.py, EVAL/src/utils/schema_utils.py):
- think ("authors"): a think block exists when both `<think>` and `</think>` occur anywhere (a
  prefilled prompt supplies the `<think>`); the answer region is everything after the LAST
  `</think>`, whatever the order of the tags. "kit" is the stricter reading above.
- retriever list, training ("authors"): the LAST `[...]` holding at least one character and no
  `]`, searched in the whole completion (the format gate still needs one in the answer region);
  items split on every comma (also inside backticks); each item, lower-cased and stripped of
  quotes and backticks, matches a column exactly or, failing that, with non-alphanumerics
  removed (when two columns collide, the later one in schema order wins); bare tables drop.
- generator SQL, evaluation ("authors", `evalparse.parse_generator_eval`, EVAL/sql_infer.py): the last
  ```` ```sql ```` block anywhere in the completion (think block included), else the last fenced
  block if it holds SELECT/INSERT/UPDATE/DELETE, else the lines from the first one holding SELECT
  to the first `;`, else the whole completion.
- retriever list, evaluation ("authors", `evalparse.parse_retriever_eval`): the first JSON block or
  code-block list, else the first `[...]` anywhere (the think block included); JSON objects
  `{"columns": [...]}` or `{"table": [cols]}`; a bare table name, `t.*` or `t.` selects all of
  the table's columns; when nothing matches, the raw completion is parsed once more.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, Protocol

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
PARSE_RULES = ("authors", "kit")  # see module docstring
PROMPT_STYLES = ("authors", "paper", "tiny")  # model.prompt_style (module docstring)
AUTHORS_EVAL = "authors_eval"  # the authors' evaluation templates; what evaluation builds with under "authors"


class ColumnResolver(Protocol):
    def resolve(self, item: str) -> str | None: ...


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
# SFT targets (the parsers below read them back exactly)


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


# ------------------------------------------------------------------------------------------
# Parsers


@dataclass(frozen=True)
class ThinkParse:
    think: str  # the reasoning text, stripped ("" when there is none)
    has_think: bool  # a think block was opened AND closed
    opened: bool  # a think block was opened (by the text or by the prompt)
    answer: str  # text after the last </think>; whole text if no think tag; "" if unclosed


def _check_rules(rules: str) -> None:
    if rules not in PARSE_RULES:
        raise ValueError(f"parser rules must be one of {PARSE_RULES}, got {rules!r}")


def parse_think(text: str, prefilled_think: bool = False, rules: str = "authors") -> ThinkParse:
    """Split a generation into its think block and its answer region (see module docstring)."""
    _check_rules(rules)
    if rules == "authors":
        return _parse_think_authors(text, prefilled_think)
    start = text.find(THINK_OPEN)
    end = text.rfind(THINK_CLOSE)
    if start >= 0:
        body_start = start + len(THINK_OPEN)
    elif prefilled_think:
        body_start = 0
    else:  # no <think> anywhere; a stray </think> alone is not a think block
        return ThinkParse("", False, False, text[end + len(THINK_CLOSE):] if end >= 0 else text)
    if end >= body_start and text.rfind(THINK_OPEN) < end:
        return ThinkParse(text[body_start:end].strip(), True, True, text[end + len(THINK_CLOSE):])
    # Opened but never closed (or reopened after the last close): nothing is answer.
    return ThinkParse(text[body_start:].strip(), False, True, "")


_THINK_BODY = re.compile(r"<think>(.*?)</think>", re.DOTALL)


def _parse_think_authors(text: str, prefilled_think: bool) -> ThinkParse:
    opened = prefilled_think or THINK_OPEN in text
    closed = THINK_CLOSE in text
    if opened and closed:
        body = _THINK_BODY.search(text)
        think = body.group(1) if body else text[:text.find(THINK_CLOSE)].replace(THINK_OPEN, "")
        return ThinkParse(think.strip(), True, True, text.rsplit(THINK_CLOSE, 1)[1])
    # Not a think block: the reward gates fail. For ungated readers (evaluation) the region is
    # read as the kit does: whole text without tags, text after a stray </think>, "" if unclosed.
    if closed:
        return ThinkParse("", False, False, text.rsplit(THINK_CLOSE, 1)[1])
    if opened:
        start = text.find(THINK_OPEN)
        return ThinkParse((text[start + len(THINK_OPEN):] if start >= 0 else text).strip(), False, True, "")
    return ThinkParse("", False, False, text)


@dataclass(frozen=True)
class RetrieverParse:
    columns: frozenset[str]  # canonical `table.column` items found in the schema
    has_think: bool
    has_list: bool
    truncated: bool
    n_items: int  # non-empty items in the list
    n_dropped: int  # items that matched no column (unknown names, bare tables)

    @property
    def format_ok(self) -> bool:  # the format gate without the truncation gate
        return self.has_think and self.has_list

    @property
    def well_formed(self) -> bool:
        return self.format_ok and not self.truncated


@dataclass(frozen=True)
class GeneratorParse:
    sql: str  # "" when there is no closed sql block
    has_think: bool
    has_sql_block: bool
    truncated: bool

    @property
    def format_ok(self) -> bool:  # the format gate without the truncation gate (authors' generator gate)
        return self.has_think and self.has_sql_block

    @property
    def well_formed(self) -> bool:
        return self.format_ok and not self.truncated


def _last_bracket_group(text: str) -> str | None:
    """Content of the last balanced top-level [...] in `text`, or None."""
    depth, start, last = 0, -1, None
    for i, ch in enumerate(text):
        if ch == "[":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "]" and depth > 0:
            depth -= 1
            if depth == 0:
                last = text[start + 1:i]
    return last


def _split_items(content: str) -> list[str]:
    """Split on commas that are not inside double quotes or backticks."""
    items, current, quote = [], [], None
    for ch in content:
        if quote:
            quote = None if ch == quote else quote
        elif ch in "\"`":
            quote = ch
        elif ch == ",":
            items.append("".join(current))
            current = []
            continue
        current.append(ch)
    items.append("".join(current))
    return items


_ITEM_STRIP = " \t\r\n\"'`[]"


def parse_retriever(text: str, schema: ColumnResolver, truncated: bool = False,
                    prefilled_think: bool = False, rules: str = "authors",
                    think_rules: str | None = None) -> RetrieverParse:
    """The retriever's column set and the format flags that the reward gates on (§2, §4 step 6).

    `rules` picks the list reading, `think_rules` (default: the same) the think-block rule.
    """
    _check_rules(rules)
    think = parse_think(text, prefilled_think, think_rules or rules)
    if rules == "authors":
        return _parse_retriever_authors(text, think, schema, truncated)
    content = _last_bracket_group(think.answer)
    if content is None:
        return RetrieverParse(frozenset(), think.has_think, False, truncated, 0, 0)
    columns, n_items, n_dropped = set(), 0, 0
    for raw in _split_items(content):
        item = raw.strip(_ITEM_STRIP)
        if not item:
            continue
        n_items += 1
        hit = schema.resolve(item)  # strips quotes/backticks around each part (§2 matching)
        if hit is None:
            n_dropped += 1
        else:
            columns.add(hit)
    return RetrieverParse(frozenset(columns), think.has_think, True, truncated, n_items, n_dropped)


# The authors' readings (module docstring) -------------------------------------------------------
AUTHORS_LIST = re.compile(r"\[([^\]]+)\]")  # at least one character, no ']' inside
_NON_ALNUM = re.compile(r"[^a-zA-Z0-9]")


def _norm(name: str) -> str:
    return _NON_ALNUM.sub("", name).lower()


def split_on_commas(content: str) -> list[str]:
    """Every comma splits; whitespace, then double, then single quotes are stripped; empties drop."""
    return [c.strip().strip('"').strip("'") for c in content.split(",") if c.strip()]


class _AuthorsIndex:
    """Lookup maps of one schema: exact `table.column`, alphanumeric-only, and per table."""

    def __init__(self, schema: Any) -> None:
        self.schema = schema  # held so that id(schema) is not reused while cached
        self.column: dict[str, str] = {}
        self.column_norm: dict[str, str] = {}
        self.table: dict[str, list[str]] = {}
        self.table_norm: dict[str, str] = {}
        for t in schema.tables:
            for c in t.columns:
                key, canonical = f"{t.name}.{c.name}".lower(), f"{t.name}.{c.name}"
                self.column[key] = canonical  # later columns win on a collision
                self.column_norm[_norm(key)] = key
                if t.name.lower() not in self.table:
                    self.table[t.name.lower()] = []
                    self.table_norm[_norm(t.name)] = t.name.lower()
                self.table[t.name.lower()].append(canonical)

    def match(self, items: Iterable[str], expand_tables: bool) -> tuple[frozenset[str], int, int]:
        """(columns, items seen, items matched to nothing)."""
        columns: set[str] = set()
        n_items = n_dropped = 0
        for item in items:
            n_items += 1
            key = item.strip().lower().replace('"', "").replace("`", "").replace("'", "").strip()
            if key in self.column:
                columns.add(self.column[key])
            elif expand_tables and key in self.table:
                columns.update(self.table[key])
            elif _norm(key) in self.column_norm:
                columns.add(self.column[self.column_norm[_norm(key)]])
            elif expand_tables and _norm(key) in self.table_norm:
                columns.update(self.table[self.table_norm[_norm(key)]])
            else:
                n_dropped += 1
        return frozenset(columns), n_items, n_dropped


_INDEXES: dict[int, _AuthorsIndex] = {}


def authors_index(schema: Any) -> _AuthorsIndex:
    index = _INDEXES.get(id(schema))
    if index is None or index.schema is not schema:
        if len(_INDEXES) >= 256:
            _INDEXES.clear()
        index = _INDEXES[id(schema)] = _AuthorsIndex(schema)
    return index


def _parse_retriever_authors(text: str, think: ThinkParse, schema: Any, truncated: bool) -> RetrieverParse:
    gate_region = think.answer if think.has_think else text
    has_list = AUTHORS_LIST.search(gate_region) is not None
    lists = AUTHORS_LIST.findall(text)  # the items come from the last list of the WHOLE completion
    items = split_on_commas(lists[-1]) if lists else []
    columns, n_items, n_dropped = authors_index(schema).match(items, expand_tables=False)
    return RetrieverParse(columns, think.has_think, has_list, truncated, n_items, n_dropped)


_SQL_BLOCK = re.compile(r"```sql(?![A-Za-z0-9_])[ \t]*\n?(.*?)```", re.DOTALL | re.IGNORECASE)
_SQL_BLOCK_AUTHORS = re.compile(r"```sql(.*?)```", re.DOTALL | re.IGNORECASE)  # also opens on ```sqlite


def parse_generator(text: str, truncated: bool = False, prefilled_think: bool = False,
                    rules: str = "authors") -> GeneratorParse:
    """The generator's final SQL (last closed ```sql block after the think block) and format flags."""
    think = parse_think(text, prefilled_think, rules)
    blocks = (_SQL_BLOCK_AUTHORS if rules == "authors" else _SQL_BLOCK).findall(think.answer)
    if not blocks:
        return GeneratorParse("", think.has_think, False, truncated)
    return GeneratorParse(blocks[-1].strip(), think.has_think, True, truncated)

