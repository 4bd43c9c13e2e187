"""One question through both roles: retriever samples -> vote -> pruned schema -> generator samples -> execution.

Self-distillation (§3.2), every GRPO step (§4 steps 1-4) and validation walk the same path, so it
lives here once. Everything is batched over questions: one engine call per role.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Sequence

from .datasets import Example
from .engines import Completion, Engine
from .executor import score_batch
from .prompts import (GeneratorParse, RetrieverParse, generator_messages, parse_generator, parse_retriever,
                      question_text, retriever_messages)
from .schema import Schema
from .sqlcolumns import ColumnResolutionError, column_set
from .timing import phase


@dataclass
class Task:
    """A question with its database schema; the unit that rollouts, pools and rewards key on."""

    example: Example
    schema: Schema

    @property
    def qid(self) -> str:
        return self.example.id

    @cached_property
    def relevant_values(self) -> dict[str, list] | None:
        """The question's values found by the schema's values index (§2), or None without one."""
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
        if not sql:
            return None
        try:
            return column_set(sql, self.schema, bare_tables=bare_tables)
        except ColumnResolutionError:
            return None


TRUNCATION_RULES = ("length", "no_stop")


def is_truncated(c: Completion, max_new_tokens: int, rule: str = "length") -> bool:
    """"length": the response reached the budget (authors' joint_reward.py: length >= limit, a
    final stop token included); "no_stop": it ended without a stop token (kit: engines' flag)."""
    if rule == "length":
        return c.n_tokens >= max_new_tokens
    if rule == "no_stop":
        return c.truncated
    raise ValueError(f"truncation rule must be one of {TRUNCATION_RULES}, got {rule!r}")


def render(tokenizer: Any, messages: list[dict[str, str]], enable_thinking: bool = True) -> str:
    """The chat template's text up to the assistant turn; what engines and losses both see."""
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                         enable_thinking=enable_thinking)


def retriever_prompt(task: Task, tokenizer: Any, style: str = "paper", enable_thinking: bool = True) -> str:
    ex = task.example
    return render(tokenizer, retriever_messages(task.full_ddl, ex.question, ex.evidence, style=style), enable_thinking)


def generator_prompt(task: Task, selected: frozenset[str], tokenizer: Any, style: str = "paper",
                     enable_thinking: bool = True) -> str:
    ex = task.example
    return render(tokenizer, generator_messages(task.schema_text(selected), ex.question, ex.evidence, style=style),
                  enable_thinking)


def vote(sets: Sequence[frozenset[str]], threshold: float = 0.5, mode: str = "majority") -> frozenset[str]:
    """§4 step 2: keep a column listed by at least ceil(threshold * N) samples; "union" keeps any."""
    if not sets:
        return frozenset()
    if mode == "union":
        return frozenset().union(*sets)
    need = math.ceil(threshold * len(sets))
    counts = Counter(c for s in sets for c in s)
    return frozenset(c for c, k in counts.items() if k >= need)


@dataclass
class RoleSamples:
    """n samples of one role for one question: the prompt, the completions and their parses."""

    prompts: list[str]  # one per sample (identical unless the vote is per_retriever)
    completions: list[Completion]
    parses: list[Any]


@dataclass
class QuestionRollout:
    task: Task
    retriever: RoleSamples
    selected: frozenset[str]  # voted column set the generator saw
    generator: RoleSamples
    matches: list[bool] = field(default_factory=list)  # execution Match per generator sample
    exec_status: list[str] = field(default_factory=list)
    match_sets: list[frozenset[str] | None] = field(default_factory=list)  # column set of each Match SQL

    @property
    def n_correct(self) -> int:
        return sum(self.matches)


def _sample(engine: Engine, prompts: list[str], n: int, temperature: float, top_p: float, max_new_tokens: int,
            seed: int | None) -> list[list[Completion]]:
    # Identical prompts are generated once with n samples, so engines can share the prompt prefix.
    with phase("generation"):
        return engine.generate(prompts, n=n, temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens,
                               seed=seed)


def rollout(tasks: Sequence[Task], engine: Engine, tokenizer: Any, *, n_retriever: int, n_generator: int,
            temperature: float, top_p: float = 1.0, max_new_tokens: int = 2048, vote_mode: str = "majority",
            vote_threshold: float = 0.5, style: str = "paper", enable_thinking: bool = True,
            seed: int | None = None, compare_mode: str = "multiset", timeout_s: float = 30.0, workers: int = 0,
            progress: bool = False, think_rule: str = "authors", retriever_parser: str = "authors",
            truncation: str = "length") -> list[QuestionRollout]:
    """§4 steps 1-4 for a batch of questions (also §3.2 with the distillation sample counts).

    `think_rule` / `retriever_parser`: the parsers' rule sets (prompts module); `truncation`:
    "length" (authors: the response reached max_new_tokens) or "no_stop" (kit: no stop token).
    """
    cut = lambda c: is_truncated(c, max_new_tokens, truncation)  # noqa: E731
    # 1. retriever rollouts on the full schema
    r_prompts = [retriever_prompt(t, tokenizer, style, enable_thinking) for t in tasks]
    r_out = _sample(engine, r_prompts, n_retriever, temperature, top_p, max_new_tokens, seed)
    r_parses = [[parse_retriever(c.text, t.schema, truncated=cut(c), rules=retriever_parser, think_rules=think_rule)
                 for c in outs] for t, outs in zip(tasks, r_out)]
    # 2. vote: one pruned schema per question, shared by its generator samples
    g_prompts: list[list[str]] = []
    selections: list[frozenset[str]] = []
    for t, parses in zip(tasks, r_parses):
        sets = [p.columns for p in parses]
        if vote_mode == "per_retriever":  # generator i sees retriever sample i mod N (authors' variant)
            selections.append(vote(sets, vote_threshold, "majority"))
            g_prompts.append([generator_prompt(t, sets[i % len(sets)], tokenizer, style, enable_thinking)
                              for i in range(n_generator)])
        else:
            sel = vote(sets, vote_threshold, vote_mode)
            selections.append(sel)
            g_prompts.append([generator_prompt(t, sel, tokenizer, style, enable_thinking)])
    # 3. generator rollouts
    if vote_mode == "per_retriever":
        flat = _sample(engine, [p for ps in g_prompts for p in ps], 1, temperature, top_p, max_new_tokens,
                       None if seed is None else seed + 1)
        g_out = [[flat[i * n_generator + j][0] for j in range(n_generator)] for i in range(len(tasks))]
    else:
        g_out = _sample(engine, [ps[0] for ps in g_prompts], n_generator, temperature, top_p, max_new_tokens,
                        None if seed is None else seed + 1)
    results = []
    for t, rp, ro, sel, gp, go in zip(tasks, r_parses, r_out, selections, g_prompts, g_out):
        g_parses = [parse_generator(c.text, truncated=cut(c), rules=think_rule) for c in go]
        results.append(QuestionRollout(
            task=t, retriever=RoleSamples([r_prompts[len(results)]] * n_retriever, ro, rp), selected=sel,
            generator=RoleSamples(gp * n_generator if len(gp) == 1 else gp, go, g_parses)))
    # 4. execute every SQL against its gold (gold results are cached by the executor)
    execute_rollouts(results, compare_mode=compare_mode, timeout_s=timeout_s, workers=workers, progress=progress)
    return results


def execute_rollouts(rollouts: Sequence[QuestionRollout], compare_mode: str = "multiset", timeout_s: float = 30.0,
                     workers: int = 0, progress: bool = False) -> None:
    items = [(p.sql, r.task.example.sql, r.task.example.db_path) for r in rollouts for p in r.generator.parses]
    with phase("execution"):
        scores = score_batch(items, mode=compare_mode, timeout_s=timeout_s, workers=workers,
                             progress=progress) if items else []
    k = 0
    for r in rollouts:
        n = len(r.generator.parses)
        chunk = scores[k:k + n]
        k += n
        # Unparseable output never matches, whatever the executor says of an empty string.
        r.matches = [bool(s.correct) and bool(p.sql) for s, p in zip(chunk, r.generator.parses)]
        r.exec_status = [s.pred_status for s in chunk]
        r.match_sets = [r.task.columns_of(p.sql) if m else None for p, m in zip(r.generator.parses, r.matches)]
