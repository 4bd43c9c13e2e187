"""The two roles' answers read back (§2): the think block, the retriever's column list and the generator's SQL,
with the format flags that rewards gate on.

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


class ColumnResolver(Protocol):
    def resolve(self, item: str) -> str | None: ...


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
