"""A question with its database schema: the unit that rollouts, pools, rewards and the authors' release key on,
and the one place tasks are built (`build_tasks`): from examples, the profile's data settings and the values
index, for distillation, GRPO and its validation, evaluation and notebook 02.

It lives on its own, beside `datasets.Example`, so modules that only need questions and schemas (the
authors' release, the pool's initialisation) do not import the engines and the executor with `rollouts`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..roles.prompts import question_text
from .datasets import Example, schema_for
from .schema import Schema, find_tables_json, tables_json_schemas
from .sqlcolumns import ColumnResolutionError, column_set


@dataclass
class Task:
    """A question with its database schema; the unit that rollouts, pools and rewards key on."""

    example: Example
    schema: Schema
    # The question's relevant values when they come with the question (the authors' released rows carry
    # theirs, `relavant_values`); None: the schema's values index finds them.
    given_values: dict[str, list] | None = field(default=None, repr=False, compare=False)

    @property
    def qid(self) -> str:
        return self.example.id

    @cached_property
    def relevant_values(self) -> dict[str, list] | None:
        """The question's values (§2): the given ones, else those the schema's values index finds, else None."""
        if self.given_values is not None:
            return {k.lower(): list(v) for k, v in self.given_values.items()}
        index = self.schema.values_index
        return index.relevant_values(question_text(self.example.question, self.example.evidence)) if index else None

    def schema_text(self, selected: frozenset[str] | None = None) -> str:
        """The schema text of this question's prompts (profile style, relevant values first)."""
        return self.schema.to_ddl(selected, relevant_values=self.relevant_values)

    @cached_property
    def full_ddl(self) -> str:
        return self.schema_text()

    @cached_property
    def gold_columns(self) -> frozenset[str] | None:
        try:
            return column_set(self.example.sql, self.schema)
        except ColumnResolutionError:
            return None

    def columns_of(self, sql: str, bare_tables: str = "anchor") -> frozenset[str] | None:
        """Column set of a predicted SQL, or None when it cannot be resolved (kit rule: never guessed)."""
        if not isinstance(sql, str) or not sql:
            return None
        try:
            return column_set(sql, self.schema, bare_tables=bare_tables)
        except ColumnResolutionError:
            return None


def profile_schema(schema: Schema, db_path: str | Path, data: Any, values_cache: str | Path | None) -> Schema:
    """`schema` with the text the profile's prompts show: `data.schema_style`, `data.max_example_values` and,
    when `data.relevant_values` is on and `values_cache` is given, its values index (built or loaded from
    the cache; kept when already there). In the authors' style the column descriptions and spelled types
    come from the database's tables.json when there is one (their source; BIRD's description CSVs are the
    kit's). Returns the schema."""
    if data.schema_style == "authors" and schema.text_style != "authors":
        found = find_tables_json(db_path)
        entry = tables_json_schemas(found).get(schema.db_id) if found else None
        if entry is not None:
            schema.adopt_descriptions(entry)
    schema.text_style = data.schema_style
    schema.max_values = data.max_example_values
    if data.relevant_values and values_cache is not None and schema.values_index is None:
        from .values_index import open_index

        schema.values_index = open_index(db_path, values_cache, top_k=data.values_top_k,
                                         min_match=data.values_min_match, max_hits=data.values_max_hits)
    return schema


def build_tasks(examples: Sequence[Example], data: Any, values_cache: str | Path | None = None,
                schemas: Mapping[str, Schema] | None = None,
                given_values: Mapping[str, dict[str, list]] | None = None) -> list[Task]:
    """The tasks of `examples` under the profile's `data` settings: one schema per database, read from it
    (`data.n_example_values` example values per column, strings cut to `data.example_max_chars`) unless
    `schemas` (db_id -> Schema: an evaluation set's tables.json, the authors' rows) gives it, and shown as
    the profile's prompts show it (`profile_schema`, the values index cached under `values_cache`).
    `given_values` (question id -> values) are the relevant values that come with a question (the authors'
    rows); a question it leaves out gets the values index's."""
    own: dict[str, Schema] = {}
    tasks = []
    for ex in examples:
        if schemas is not None:
            schema = schemas[ex.db_id]
        else:
            if ex.db_path not in own:
                own[ex.db_path] = schema_for(ex.db_path, data.n_example_values, data.example_max_chars)
            schema = own[ex.db_path]
        profile_schema(schema, ex.db_path, data, values_cache)  # cheap once done
        tasks.append(Task(ex, schema, given_values=None if given_values is None else given_values.get(ex.id)))
    return tasks
