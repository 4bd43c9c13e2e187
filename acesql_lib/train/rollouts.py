"""One question through both roles: retriever samples -> vote -> pruned schema -> generator samples -> execution.

Self-distillation (§3.2), every GRPO step (§4 steps 1-4), validation and the greedy evaluation
(§5) walk the same path, so it lives here once, as phases (`retrieve`, `select`, `generate`,
`execute_rollouts`) that `rollout` runs in order. How a call samples is one `SamplingSpec`, built
from the stage's config. Everything is batched over questions: one engine call per role.
"""
from __future__ import annotations

import dataclasses
import math
import re
import typing
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from ..config.choices import Truncation
from ..models.completions import Completion, Engine, stop_token_ids, within_context
from ..roles.parsers import parse_generator_eval, parse_retriever_eval
from ..executor import ResultReading, score_batch
from ..executor.scoring import rule as scoring_rule, sql_to_run
from ..runtime.progress import tqdm
from ..roles.answers import parse_generator, parse_retriever
from ..roles.prompts import generator_messages, retriever_messages
from ..data.routes import is_match
from ..data.task import Task
from ..runtime.timing import phase

__all__ = ["Task"]  # re-exported: a question with its schema lives in acesql_lib/data/task.py


TRUNCATION_RULES = typing.get_args(Truncation)  # declared once, in config


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


def prompt_tokens(text: str, tokenizer: Any) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def keep_last_tokens(prompt: str, tokenizer: Any, limit: int) -> str:
    """A generator prompt over `limit` tokens keeps its last `limit` (the authors left-truncate generator
    prompts to `serl.gen_max_prompt_length` 4,096, RL/trainer/two_pass_ray_trainer.py); 0 = no limit.
    The kept tokens are decoded back to text, which the engine tokenises again."""
    if limit <= 0:
        return prompt
    ids = prompt_tokens(prompt, tokenizer)
    return prompt if len(ids) <= limit else tokenizer.decode(ids[-limit:])


def drop_overlong(tasks: Sequence[Task], tokenizer: Any, limit: int, spec: "SamplingSpec"
                  ) -> tuple[list[Task], list[Task]]:
    """(kept, dropped): questions whose retriever prompt (as `spec` writes it) is over `limit` tokens are dropped,
    as the authors' loader does (verl `filter_overlong_prompts` at `data.max_prompt_length` 4,096); 0 keeps all."""
    if limit <= 0:
        return list(tasks), []
    kept, dropped = [], []
    for t in tasks:
        n = len(prompt_tokens(spec.retriever_prompt(t, tokenizer), tokenizer))
        (kept if n <= limit else dropped).append(t)
    return kept, dropped


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


@dataclass(frozen=True)
class SamplingSpec:
    """How one rollout call prompts and samples both roles; built from the stage's config, never unpacked by hand.

    `seed` seeds the retriever pass; the generator pass uses `seed + 1` (None: unseeded). `prompt_style` and
    `enable_thinking` decide the prompts' text (`roles.prompts`, rendered by the chat template): the stage's
    constructors read `model.prompt_style` once, here, and every phase takes it from the spec.
    """

    n_retriever: int
    n_generator: int
    temperature: float
    top_p: float = 1.0
    max_new_tokens: int = 2048
    enable_thinking: bool = True
    seed: int | None = None
    retriever_max_new_tokens: int = 0  # the retriever's own budget; 0 = max_new_tokens (training: 2,048 per role)
    max_prompt_tokens: int = 0  # generator prompts longer than this keep their last tokens (authors); 0 = no limit
    # the engine's context (prompt + new tokens, evaluation's eval.max_model_len): a prompt that leaves no room is
    # not generated (`unanswered`) and an answer stops where it fills the context (`_sample`); 0 = not checked
    context: int = 0
    prompt_style: str = "paper"  # roles.prompts.PROMPT_STYLES, or evaluation's style (`greedy`)

    def retriever_prompt(self, task: Task, tokenizer: Any) -> str:
        """The retriever's prompt for `task` under this spec's style and thinking switch."""
        return retriever_prompt(task, tokenizer, self.prompt_style, self.enable_thinking)

    def generator_prompt(self, task: Task, selected: frozenset[str], tokenizer: Any) -> str:
        """The generator's prompt for `task` on the column set `selected`, before `max_prompt_tokens`' cut."""
        return generator_prompt(task, selected, tokenizer, self.prompt_style, self.enable_thinking)

    def max_tokens(self, role: str) -> int:
        """New-token budget of `role`'s pass."""
        return (self.retriever_max_new_tokens or self.max_new_tokens) if role == "retriever" else self.max_new_tokens

    def role_seed(self, role: str) -> int | None:
        if role not in ("retriever", "generator"):
            raise ValueError(f"role must be 'retriever' or 'generator', got {role!r}")
        return None if self.seed is None else self.seed + (role == "generator")

    @classmethod
    def distill(cls, cfg: Any, shard: int = 0) -> "SamplingSpec":
        """§3.2 self-distillation: `distill.*` sample counts and sampling, one seed per shard."""
        d = cfg.distill
        return cls(d.n_retriever, d.n_generator, d.temperature, d.top_p, d.max_new_tokens,
                   cfg.engine.enable_thinking, cfg.seed * 7919 + shard, prompt_style=cfg.model.prompt_style)

    @classmethod
    def grpo(cls, cfg: Any, step: int, rank: int = 0) -> "SamplingSpec":
        """§4 steps 1-3: `grpo.*` sample counts and sampling, one seed per (step, rank)."""
        g = cfg.grpo
        return cls(g.n_retriever, g.n_generator, g.temperature, g.top_p, g.max_response_tokens,
                   cfg.engine.enable_thinking, g.seed * 100_003 + step * 101 + rank,
                   max_prompt_tokens=g.max_prompt_tokens, prompt_style=cfg.model.prompt_style)

    @classmethod
    def validation(cls, cfg: Any) -> "SamplingSpec":
        """§4.11 validation: `grpo.val_retriever_samples` retriever samples, the vote, `grpo.val_samples`
        generator samples at `val_temperature` (the authors: 8 x 8, the training rollout without pool updates)."""
        g = cfg.grpo
        return cls(g.val_retriever_samples, g.val_samples, g.val_temperature, g.top_p, g.max_response_tokens,
                   cfg.engine.enable_thinking, g.seed + 7, max_prompt_tokens=g.max_prompt_tokens,
                   prompt_style=cfg.model.prompt_style)

    @classmethod
    def greedy(cls, max_new_tokens: int, enable_thinking: bool = True, retriever_max_new_tokens: int = 0,
               context: int = 0, prompt_style: str = "paper") -> "SamplingSpec":
        """§5 evaluation: one greedy sample per role, unseeded; `max_new_tokens` is the SQL pass's budget, `context`
        the engine's (prompt + new tokens), `prompt_style` evaluation's (`prompts.evaluation_style`)."""
        return cls(1, 1, 0.0, 1.0, max_new_tokens, enable_thinking, None, retriever_max_new_tokens, context=context,
                   prompt_style=prompt_style)


@dataclass(frozen=True)
class RolloutSpec:
    """How a rollout is judged, built once from the config for each of the four stages that roll out:
    self-distillation (§3.2, whose correct rollouts become SFT data and the initial pool), GRPO (§4), its
    validation, and evaluation (§5). The think rule, the parsers' rules and the truncation rule decide what a
    completion says; `sql_whitespace` how both SQLs are written before they run; `bare_table_columns` which
    column set a matching SQL adds (to the pool in training; to the route analysis in evaluation); the vote,
    the comparison, the deadline and the scoring rule complete the step. Never unpacked by hand: `parsers()`
    gives the stage's parsers and `rollout` / `evaluate` read everything else from it. The training stages'
    judging rules are always `grpo.*`'s, so stage 1 judges a completion exactly as RL rewards it; evaluation
    parses with `eval.*`'s (the authors' EVAL rules on the paper profile)."""

    think_rule: str = "authors"
    retriever_parser: str = "authors"
    truncation: str = "length"
    sql_whitespace: str = "keep"
    bare_table_columns: str = "anchor"
    vote_mode: str = "majority"
    vote_threshold: float = 0.5
    compare_mode: str = "multiset"
    timeout_s: float = 30.0
    scoring: str = "kit"  # executor.scoring's rule: "kit" in training, eval.scoring for a BIRD-format evaluation set
    # "training": prompts' parsers under think_rule / retriever_parser / truncation; "evaluation": evalparse's
    # parsers under retriever_parser / generator_parser, truncated when the engine stopped at the budget
    parsing: str = "training"
    generator_parser: str = "authors"  # evaluation only (eval.generator_parser)

    JUDGING = ("think_rule", "retriever_parser", "truncation", "sql_whitespace", "bare_table_columns")

    @classmethod
    def grpo(cls, cfg: Any) -> "RolloutSpec":
        """§4 steps 1-4 (training and validation): `grpo.*`."""
        g = cfg.grpo
        return cls(g.think_rule, g.retriever_parser, g.truncation, g.sql_whitespace, g.bare_table_columns,
                   g.vote, g.vote_threshold, g.compare_mode, g.exec_timeout_s)

    @classmethod
    def distill(cls, cfg: Any) -> "RolloutSpec":
        """§3.2: GRPO's judging rules; the stage's own vote threshold, comparison and deadline (`distill.*`)."""
        d = cfg.distill
        return dataclasses.replace(cls.grpo(cfg), vote_mode="majority", vote_threshold=d.vote_threshold,
                                   compare_mode=d.compare_mode, timeout_s=d.exec_timeout_s)

    @classmethod
    def evaluation(cls, cfg: Any, compare_mode: str, timeout_s: float, scoring: str = "kit") -> "RolloutSpec":
        """§5: one greedy retriever sample is the pruned schema (a vote of one), parsed by `eval.*`'s rules; the
        SQL runs as written; a correct prediction's column set read by the kit's anchor rule (routes, §5);
        `compare_mode`, `timeout_s` and `scoring` are the evaluation set's (its format and `eval.scoring`)."""
        e = cfg.eval
        return cls(retriever_parser=e.retriever_parser, sql_whitespace="keep", bare_table_columns="anchor",
                   compare_mode=compare_mode, timeout_s=timeout_s, scoring=scoring, parsing="evaluation",
                   generator_parser=e.generator_parser)

    def parsers(self, max_new_tokens: int) -> tuple["RetrieverParser", "GeneratorParser"]:
        """The stage's (retriever, generator) parsers: `(completion, task) -> parse`."""
        if self.parsing == "evaluation":
            return (lambda c, t: parse_retriever_eval(c.text, t.schema, truncated=c.truncated, parser=self.retriever_parser),
                    lambda c, t: parse_generator_eval(c.text, c.truncated, self.generator_parser))
        return training_parsers(max_new_tokens, self.think_rule, self.retriever_parser, self.truncation)

    def execute(self, rollouts: Sequence["QuestionRollout"], workers: int = 0, progress: bool = False) -> None:
        """§4 step 4 / §5 under this spec: every generator sample against its gold (`execute_rollouts`)."""
        execute_rollouts(rollouts, compare_mode=self.compare_mode, timeout_s=self.timeout_s, workers=workers,
                         progress=progress, sql_whitespace=self.sql_whitespace,
                         bare_table_columns=self.bare_table_columns, scoring=self.scoring)


RetrieverParser = Callable[[Completion, Task], Any]
GeneratorParser = Callable[[Completion, Task], Any]


def training_parsers(max_new_tokens: int, think_rule: str = "authors", retriever_parser: str = "authors",
                     truncation: str = "length") -> tuple[RetrieverParser, GeneratorParser]:
    """The rollout parsers of distillation and GRPO (`answers.parse_retriever` / `parse_generator`)."""
    cut = lambda c: is_truncated(c, max_new_tokens, truncation)  # noqa: E731
    return (lambda c, t: parse_retriever(c.text, t.schema, truncated=cut(c), rules=retriever_parser,
                                         think_rules=think_rule),
            lambda c, t: parse_generator(c.text, truncated=cut(c), rules=think_rule))


def unanswered() -> Completion:
    """The completion of a prompt that leaves no room in the engine's context: nothing generated, `overlong`."""
    return Completion("", [], 0, truncated=False, overlong=True)


def _rooms(prompts: Sequence[str], tokenizer: Any, context: int) -> list[int | None]:
    """New tokens each prompt leaves in a `context`-token engine (None: not checked, `context` 0)."""
    if not context:
        return [None] * len(prompts)
    if tokenizer is None:
        raise ValueError("a context limit needs the tokenizer to count prompt tokens")
    return [context - len(prompt_tokens(p, tokenizer)) for p in prompts]


@dataclass(frozen=True)
class EngineCalls:
    """How a role's pass calls the engine: `chunk` prompts a call (None: one call for all), with a progress bar
    named `desc` over the calls when `progress`."""

    chunk: int | None = None
    desc: str = ""
    progress: bool = False


def _sample(engine: Engine, prompts: list[str], n: int, spec: SamplingSpec, role: str,
            calls: EngineCalls = EngineCalls(), tokenizer: Any = None) -> list[list[Completion]]:
    """One engine call per role (or per `calls.chunk` prompts, so progress is visible). Identical prompts
    are generated once with n samples, so engines can share the prompt prefix.

    Under `spec.context` a prompt that leaves no room for one new token is not sent (vLLM refuses it, which would
    stop the whole call): its samples are `unanswered()`. Every other answer ends where prompt and answer fill
    the context, as vLLM ends it (`within_context`; the HF engine has no context of its own)."""
    rooms = _rooms(prompts, tokenizer, spec.context)
    send = [i for i, room in enumerate(rooms) if room is None or room >= 1]
    size = calls.chunk or max(len(send), 1)
    got: list[list[Completion]] = []
    with phase("generation"):
        for start in tqdm(range(0, len(send), size), desc=calls.desc, disable=not calls.progress or not send,
                          leave=False):
            got.extend(engine.generate([prompts[i] for i in send[start:start + size]], n=n,
                                       temperature=spec.temperature, top_p=spec.top_p,
                                       max_new_tokens=spec.max_tokens(role), seed=spec.role_seed(role)))
    if not spec.context:
        return got
    stops = set(stop_token_ids(tokenizer))
    out = [[unanswered() for _ in range(n)] for _ in prompts]
    for i, outs in zip(send, got):
        out[i] = [within_context(c, rooms[i], stops, tokenizer) for c in outs]
    return out


# ---------------------------------------------------------------------------------------------
# The phases: retrieve -> select -> generate -> execute (`rollout` runs them in order; `evaluate`
# runs them greedily with n = 1, plus a generate pass on the gold column sets)


def retrieve(tasks: Sequence[Task], engine: Engine, tokenizer: Any, spec: SamplingSpec, parse: RetrieverParser,
             calls: EngineCalls = EngineCalls(desc="retriever")) -> list[RoleSamples]:
    """§4 step 1: `spec.n_retriever` retriever samples per question on its full schema."""
    prompts = [spec.retriever_prompt(t, tokenizer) for t in tasks]
    out = _sample(engine, prompts, spec.n_retriever, spec, "retriever", calls, tokenizer)
    return [RoleSamples([p] * spec.n_retriever, outs, [parse(c, t) for c in outs])
            for t, p, outs in zip(tasks, prompts, out)]


def select(retrieved: Sequence[RoleSamples], n_generator: int, vote_mode: str = "majority",
           vote_threshold: float = 0.5) -> tuple[list[frozenset[str]], list[list[frozenset[str]]]]:
    """§4 step 2: the voted set per question, and the column sets its generator samples see: the
    voted set once (shared by all samples), or per sample retriever i mod N ("per_retriever")."""
    voted, seen = [], []
    for rs in retrieved:
        sets = [p.columns for p in rs.parses]
        if vote_mode == "per_retriever":  # generator i sees retriever sample i mod N (authors' variant)
            voted.append(vote(sets, vote_threshold, "majority"))
            seen.append([sets[i % len(sets)] for i in range(n_generator)])
        else:
            voted.append(vote(sets, vote_threshold, vote_mode))
            seen.append([voted[-1]])
    return voted, seen


def generate(tasks: Sequence[Task], column_sets: Sequence[Sequence[frozenset[str]]], engine: Engine, tokenizer: Any,
             spec: SamplingSpec, parse: GeneratorParser,
             calls: EngineCalls = EngineCalls(desc="generator")) -> list[RoleSamples]:
    """§4 step 3: `spec.n_generator` generator samples per question on its pruned schema(s).

    Each question gives one column set (all samples share that prompt) or one per sample.
    """
    n = spec.n_generator
    if any(len(cs) not in (1, n) for cs in column_sets):
        raise ValueError(f"generate: each question needs 1 or n_generator={n} column sets")
    shared = all(len(cs) == 1 for cs in column_sets)
    prompts = [[keep_last_tokens(spec.generator_prompt(t, s, tokenizer), tokenizer, spec.max_prompt_tokens)
                for s in cs]
               for t, cs in zip(tasks, column_sets)]
    if shared:
        out = _sample(engine, [ps[0] for ps in prompts], n, spec, "generator", calls, tokenizer)
    else:
        flat = _sample(engine, [p for ps in prompts for p in (ps * n if len(ps) == 1 else ps)], 1, spec,
                       "generator", calls, tokenizer)
        out = [[flat[i * n + j][0] for j in range(n)] for i in range(len(tasks))]
    return [RoleSamples(ps * n if len(ps) == 1 else ps, outs, [parse(c, t) for c in outs])
            for t, ps, outs in zip(tasks, prompts, out)]


ROLLOUT_PHASES = ("retriever samples", "generator samples", "execution")  # what `rollout` reports to `on_phase`


def rollout(tasks: Sequence[Task], engine: Engine, tokenizer: Any, spec: SamplingSpec, rules: RolloutSpec, *,
            workers: int = 0, on_phase: Callable[[str], None] | None = None
            ) -> list[QuestionRollout]:
    """§4 steps 1-4 for a batch of questions (also §3.2 with the distillation specs): `spec` says how both
    roles are prompted and sample, `rules` how the rollout is judged (parsers, truncation, SQL text, column sets, vote).
    `on_phase` is called with each of ROLLOUT_PHASES as it ends (a `progress.PhaseBar`'s `done`)."""
    done = on_phase or (lambda phase: None)
    r_parse, g_parse = rules.parsers(spec.max_new_tokens)
    retrieved = retrieve(tasks, engine, tokenizer, spec, r_parse)
    done(ROLLOUT_PHASES[0])
    voted, seen = select(retrieved, spec.n_generator, rules.vote_mode, rules.vote_threshold)
    generated = generate(tasks, seen, engine, tokenizer, spec, g_parse)
    done(ROLLOUT_PHASES[1])
    results = [QuestionRollout(t, r, sel, g) for t, r, sel, g in zip(tasks, retrieved, voted, generated)]
    rules.execute(results, workers=workers)  # 4. every SQL against its gold (gold results cached)
    done(ROLLOUT_PHASES[2])
    return results


SQL_WHITESPACE_RULES = ("collapse", "keep")


def normalise_sql(sql: str | None, rule: str = "keep") -> str | None:
    """The SQL as it is executed. "collapse" (the authors' training reward, RL/rewards/joint_reward.py):
    every run of whitespace, newlines and whitespace inside string literals included, becomes one
    space, so a `-- comment` line comments out the rest of the query. "keep": the SQL as written."""
    if rule not in SQL_WHITESPACE_RULES:
        raise ValueError(f"sql_whitespace must be one of {', '.join(SQL_WHITESPACE_RULES)}, got {rule!r}")
    return re.sub(r"\s+", " ", sql) if rule == "collapse" and sql else sql


def execute_rollouts(rollouts: Sequence[QuestionRollout], compare_mode: str = "multiset", timeout_s: float = 30.0,
                     workers: int = 0, progress: bool = False, sql_whitespace: str = "keep",
                     bare_table_columns: str = "anchor", scoring: str = "kit") -> None:
    """§4 step 4: one executor batch for every generator sample; sets matches, statuses, match sets.

    Both SQLs run as `normalise_sql(..., sql_whitespace)` writes them; the column sets are read from
    the SQL as the model wrote it (as the authors extract columns from the un-collapsed text).
    `scoring` (`executor.scoring`, evaluation's `eval.scoring`): "kit" (training and the tiny
    profile) never matches a prediction without SQL and reads invalid UTF-8 as U+FFFD; the
    official rules run a statement-less prediction as no rows (a match when the gold has none) and
    score a result holding invalid UTF-8 text 0."""
    sc = scoring_rule(scoring)
    items = [(sql_to_run(normalise_sql(p.sql, sql_whitespace), sc), normalise_sql(r.task.example.sql, sql_whitespace),
              r.task.example.db_path) for r in rollouts for p in r.generator.parses]
    with phase("execution"):
        scores = score_batch(items, mode=compare_mode, timeout_s=timeout_s, workers=workers,
                             progress=progress, reading=ResultReading(strict_utf8=sc.strict_utf8)) if items else []
    k = 0
    for r in rollouts:
        n = len(r.generator.parses)
        chunk = scores[k:k + n]
        k += n
        r.matches = [bool(s.correct) if sc.blank_runs else is_match(s.correct, p.sql)
                     for s, p in zip(chunk, r.generator.parses)]
        r.exec_status = [s.pred_status for s in chunk]
        r.match_sets = [r.task.columns_of(p.sql, bare_table_columns) if m else None
                        for p, m in zip(r.generator.parses, r.matches)]
