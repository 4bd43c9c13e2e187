"""From candidates to questions: execute the gold, keep only alternatives with the same rows
(§4 step 4's multiset comparison), phrase the question in a SynSQL style.
"""
from __future__ import annotations

import itertools
import random
import re
import sqlite3
from collections import Counter
from dataclasses import dataclass
from typing import Callable

from .route_model import Recorder, expr
from .templates import TEMPLATES, Cand, DbContext

LEVELS = ("Simple", "Moderate", "Complex", "Highly Complex")  # SynSQL sql_complexity (§3.1)
LEVEL_MIX = (0.25, 0.30, 0.25, 0.20)  # UNKNOWN: kit's share of each level in the tiny pool

STYLES = {  # SynSQL question styles; each wraps the noun phrase a template builds
    "Formal": ("Please provide {np}.", "Could you report {np}?"),
    "Colloquial": ("Hey, can you tell me {np}?", "So what's {np}?"),
    "Imperative": ("Find {np}.", "Show {np}.", "List {np}."),
    "Interrogative": ("What is {np}?", "Which value is {np}?"),
    "Descriptive": ("I would like to know {np}, based on the records in the {db} database.",),
    "Concise": ("{NP}?",),
}
MAX_RESULT_ROWS = 50  # prefer small, well-defined gold results


def _rows(con: sqlite3.Connection, sql: str) -> list[tuple] | None:
    try:
        return con.execute(sql).fetchall()
    except sqlite3.Error:
        return None


def _multiset(rows: list[tuple]) -> Counter:
    """Rows as a multiset, floats rounded to 6 places (§4 step 4)."""
    return Counter(tuple(round(v, 6) if isinstance(v, float) else v for v in r) for r in rows)


@dataclass
class Question:
    db_id: str
    level: str
    np: str
    sql: str
    routes: list[dict]  # gold first: {"sql", "columns"}
    evidence: str


def realise(ctx: DbContext, cand: Cand, rng: random.Random) -> Question | None:
    rendered = []
    for ch in itertools.product(*(range(len(a.routes)) for a in cand.attrs)):
        q = Recorder(ctx.db)
        sql = cand.render(q, ch)
        if sql:
            rendered.append((ch, sql, q.columns()))
    if not rendered:
        return None
    ch, sql, cols = rendered[rng.randrange(len(rendered))]
    gold = _rows(ctx.con, sql)
    if not gold or len(gold) > MAX_RESULT_ROWS or all(v in (None, 0) for r in gold for v in r):
        return None
    if cand.probe is not None:
        top = _rows(ctx.con, cand.probe(Recorder(ctx.db), ch))
        if top is None or (len(top) == 2 and _multiset(top[:1]) == _multiset(top[1:])):
            return None  # a tie at the top: the answer would not be well defined
    routes, seen, want = [{"sql": sql, "columns": cols}], {tuple(cols)}, _multiset(gold)
    for _, alt_sql, alt_cols in rendered:
        if tuple(alt_cols) not in seen:
            alt = _rows(ctx.con, alt_sql)
            if alt is not None and _multiset(alt) == want:  # verified, else dropped
                routes.append({"sql": alt_sql, "columns": alt_cols})
                seen.add(tuple(alt_cols))
    bare = [expr(Recorder(ctx.db, bare=True), a.routes[i]) for a, i in zip(cand.attrs, ch)]
    level = cand.base if cand.fixed_level else min(2, cand.base + sql.count(" JOIN "))
    return Question(ctx.db.db_id, LEVELS[level], cand.np, sql, routes,
                    "; ".join(h.format(*bare) for h in cand.hints))


def _phrase(rng: random.Random, np: str, db_id: str) -> tuple[str, str]:
    style = rng.choice(sorted(STYLES))
    return style, rng.choice(STYLES[style]).format(np=np, NP=np[0].upper() + np[1:], db=db_id)


def generate_questions(ctxs: list[DbContext], n: int, rng: random.Random, evidence_share: float,
                       seen: set[tuple[str, str]], accept: Callable[[Question], bool] | None = None,
                       ) -> list[tuple[str, str, Question, bool]]:
    """`n` distinct questions (text and gold SQL both new per database) as (style, text, question,
    with_evidence); a share `evidence_share` of them is phrased to be read with its evidence.
    `accept(question)`, when given, must hold for every question kept (the in-distribution dev
    split keeps only questions whose values are new)."""
    out: list[tuple[str, str, Question, bool]] = []
    attempts = 0
    while len(out) < n:
        attempts += 1
        if attempts > 100 * n:
            raise RuntimeError(f"tiny world: only {len(out)} of {n} questions after {attempts} attempts")
        ctx = rng.choice(ctxs)
        level = rng.choices(range(len(LEVELS)), LEVEL_MIX)[0]
        with_evidence = rng.random() < evidence_share
        cand = rng.choice(TEMPLATES[level])(ctx, rng, with_evidence)
        q = realise(ctx, cand, rng) if cand is not None else None
        if q is None or (accept is not None and not accept(q)):
            continue
        style, text = _phrase(rng, q.np, q.db_id)
        keys = {(q.db_id, "q:" + text.lower()), (q.db_id, "s:" + q.sql)}
        if keys & seen:
            continue
        seen |= keys
        out.append((style, text, q, with_evidence))
    return out


STRING_LITERAL = re.compile(r"'((?:[^']|'')*)'")


def string_values(sql: str) -> set[str]:
    """The quoted string literals of a SQL, unescaped: the values a question asks about."""
    return {m.replace("''", "'") for m in STRING_LITERAL.findall(sql)}
