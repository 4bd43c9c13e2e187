"""A question with its database schema: the unit that rollouts, pools, rewards and the authors' release key on.

It lives on its own, beside `datasets.Example`, so modules that only need questions and schemas (the
authors' release, the pool's initialisation) do not import the engines and the executor with `rollouts`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from .datasets import Example
from ..roles.prompts import question_text
from .schema import Schema
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
