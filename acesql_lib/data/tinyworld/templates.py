"""Question templates: each draws a candidate (`Cand`) whose SQL can be rendered through every
route of its attributes; `TEMPLATES` groups them by SynSQL complexity level.
"""
from __future__ import annotations

import random
import sqlite3
from dataclasses import dataclass
from typing import Callable

from ..schema import quote_identifier as qi
from .route_model import Attr, Recorder, Route, attributes, expr, from_clause
from .specs import Col, DbSpec, Table, readable_name

MULTI_ROUTE_WEIGHT = 6  # UNKNOWN: attributes with several routes are drawn this much more often


@dataclass
class Cand:
    base: int  # index into questions.LEVELS before joins are counted
    np: str  # the noun phrase the question style wraps
    attrs: list[Attr]
    render: Callable[[Recorder, tuple[int, ...]], str | None]
    hints: list[str]  # evidence parts; {i} is attribute i as the gold route writes it
    probe: Callable[[Recorder, tuple[int, ...]], str | None] | None = None  # top-2 sort keys; must differ
    fixed_level: bool = False


class DbContext:
    """One database open for question generation, with its attributes and cached value lists."""

    def __init__(self, db: DbSpec, con: sqlite3.Connection) -> None:
        self.db, self.con = db, con
        self.attrs = {t.name: attributes(db, t.name) for t in db.tables}
        self._values: dict[tuple[str, str, Route], list] = {}

    def pick(self, rng: random.Random, anchor: str, roles: tuple[str, ...], exclude: tuple[Attr, ...] = (),
             hops: int | None = None) -> Attr | None:
        pool = [a for a in self.attrs[anchor] if a.role in roles and a not in exclude
                and (hops is None or len(a.routes[0].joins) == hops)]
        if not pool:
            return None
        return rng.choices(pool, [MULTI_ROUTE_WEIGHT if len(a.routes) > 1 else 1 for a in pool])[0]

    def values(self, a: Attr) -> list:
        key = (a.anchor, a.phrase, a.routes[0])
        if key not in self._values:
            q = Recorder(self.db)
            sql = f"SELECT {expr(q, a.routes[0])} FROM {from_clause(q, a.anchor, [a.routes[0]])}"
            self._values[key] = [v for (v,) in self.con.execute(sql) if v is not None]
        return self._values[key]

    def leaf_type(self, a: Attr) -> str:
        r = a.routes[0]
        return self.db.table(r.table).col(r.col).type


def lit(v: object) -> str:
    return "'" + v.replace("'", "''") + "'" if isinstance(v, str) else str(v)


def _plural(phrase: str) -> str:
    return phrase if phrase.endswith("s") else phrase + "s"


def _threshold(ctx: DbContext, a: Attr, high: bool, rank: int) -> str | int | float:
    """A cut-off near the top (or bottom) of the values; numbers are rounded so the question can
    show them as the SQL writes them."""
    vals = sorted(set(ctx.values(a)), reverse=high)
    v = vals[min(rank, len(vals) - 1)]
    if isinstance(v, float):
        return round(v, 1) if max(vals) - min(vals) < 50 else int(v)
    return v


def _cat(a: Attr, v: object, i: int) -> tuple[str, str]:
    return f"whose {a.phrase} is {v}", f"{v} refers to {{{i}}} = {lit(v)}"


def _cmp(a: Attr, op: str, v: object, i: int, evidence: bool) -> tuple[str, str]:
    """Phrase and evidence for `a op v`; a question with evidence says 'high'/'low' and leaves the
    number to the evidence (BIRD's style), one without names the number."""
    if a.role == "date":
        word = "later" if op == ">" else "earlier"
        return f"whose {a.phrase} is {word} than {v}", f"{word} than {v} refers to {{{i}}} {op} {lit(v)}"
    if evidence:
        word = "high" if op == ">" else "low"
        return f"with a {word} {a.phrase}", f"{word} {a.phrase} refers to {{{i}}} {op} {lit(v)}"
    word = "greater" if op == ">" else "less"
    return f"whose {a.phrase} is {word} than {v}", f"{a.phrase} refers to {{{i}}}"


AGG_WORDS = {"AVG": "average", "MAX": "maximum", "MIN": "minimum", "SUM": "total"}


def _sql(q: Recorder, anchor: str, attrs: list[Attr], ch: tuple[int, ...]) -> tuple[str | None, list[str]]:
    routes = [a.routes[i] for a, i in zip(attrs, ch)]
    fr = from_clause(q, anchor, routes)
    return fr, ([expr(q, r) for r in routes] if fr else [])


def t_count(ctx: DbContext, rng: random.Random, evidence: bool) -> Cand | None:
    t = rng.choice(ctx.db.tables)
    a = ctx.pick(rng, t.name, ("cat", "label"))
    if a is None:
        return None
    v = rng.choice(ctx.values(a))
    phrase, hint = _cat(a, v, 0)

    def render(q: Recorder, ch: tuple[int, ...]) -> str | None:
        fr, exprs = _sql(q, t.name, [a], ch)
        return fr and f"SELECT COUNT(*) FROM {fr} WHERE {exprs[0]} = {lit(v)}"
    return Cand(0, f"the number of {t.plural} {phrase}", [a], render, [hint])


def t_list(ctx: DbContext, rng: random.Random, evidence: bool) -> Cand | None:
    t = rng.choice(ctx.db.tables)
    lab = t.label
    a = ctx.pick(rng, t.name, ("num", "date"))
    if a is None:
        return None
    op = rng.choice([">", "<"])
    v = _threshold(ctx, a, op == ">", rng.randint(2, 6))
    phrase, hint = _cmp(a, op, v, 0, evidence)

    def render(q: Recorder, ch: tuple[int, ...]) -> str | None:
        fr, exprs = _sql(q, t.name, [a], ch)
        return fr and f"SELECT {q(t.name, lab.name)} FROM {fr} WHERE {exprs[0]} {op} {lit(v)}"
    return Cand(0, f"the {_plural(lab.phrase or readable_name(lab.name))} of {t.plural} {phrase}", [a], render, [hint])


def t_lookup(ctx: DbContext, rng: random.Random, evidence: bool) -> Cand | None:
    t = rng.choice(ctx.db.tables)
    lab = t.label
    if lab.role != "label":
        return None
    a = ctx.pick(rng, t.name, ("cat", "num", "date", "label"), exclude=tuple(
        x for x in ctx.attrs[t.name] if x.owner == t.name and x.routes[0].col == lab.name))
    if a is None:
        return None
    x = rng.choice([r[0] for r in ctx.con.execute(f"SELECT {qi(lab.name)} FROM {qi(t.name)}")])

    def render(q: Recorder, ch: tuple[int, ...]) -> str | None:
        fr, exprs = _sql(q, t.name, [a], ch)
        return fr and f"SELECT {exprs[0]} FROM {fr} WHERE {q(t.name, lab.name)} = {lit(x)}"
    return Cand(0, f"the {a.phrase} of the {t.singular} {x}", [a], render, [f"{a.phrase} refers to {{0}}"])


def _agg(ctx: DbContext, rng: random.Random, evidence: bool, filtered: bool) -> Cand | None:
    t = rng.choice(ctx.db.tables)
    a = ctx.pick(rng, t.name, ("num",))
    b = ctx.pick(rng, t.name, ("cat",), exclude=(a,)) if filtered else None
    if a is None or (filtered and b is None):
        return None
    fn = rng.choice(sorted(AGG_WORDS))
    hints = [f"{AGG_WORDS[fn]} {a.phrase} refers to {fn}({{0}})"]
    where, v = "", None
    if b is not None:
        v = rng.choice(ctx.values(b))
        phrase, hint = _cat(b, v, 1)
        where, hints = " " + phrase, hints + [hint]
    attrs = [a] + ([b] if b else [])

    def render(q: Recorder, ch: tuple[int, ...]) -> str | None:
        fr, exprs = _sql(q, t.name, attrs, ch)
        if not fr:
            return None
        cond = f" WHERE {exprs[1]} = {lit(v)}" if b else ""
        return f"SELECT {fn}({exprs[0]}) FROM {fr}{cond}"
    return Cand(1 if b else 0, f"the {AGG_WORDS[fn]} {a.phrase} of {t.plural}{where}", attrs, render, hints)


def t_agg(ctx: DbContext, rng: random.Random, evidence: bool) -> Cand | None:
    return _agg(ctx, rng, evidence, False)


def t_agg_where(ctx: DbContext, rng: random.Random, evidence: bool) -> Cand | None:
    return _agg(ctx, rng, evidence, True)


def t_top(ctx: DbContext, rng: random.Random, evidence: bool) -> Cand | None:
    t = rng.choice(ctx.db.tables)
    lab = t.label
    a = ctx.pick(rng, t.name, ("num",))
    if a is None:
        return None
    high = rng.random() < 0.6
    order = "DESC" if high else "ASC"

    def render(q: Recorder, ch: tuple[int, ...], probe: bool = False) -> str | None:
        fr, exprs = _sql(q, t.name, [a], ch)
        if not fr:
            return None
        what, n = (exprs[0], 2) if probe else (q(t.name, lab.name), 1)
        return f"SELECT {what} FROM {fr} ORDER BY {exprs[0]} {order} LIMIT {n}"
    word = "highest" if high else "lowest"
    return Cand(1, f"the {lab.phrase or readable_name(lab.name)} of the {t.singular} with the {word} {a.phrase}", [a],
                render, [f"{word} {a.phrase} refers to {'MAX' if high else 'MIN'}({{0}})"],
                probe=lambda q, ch: render(q, ch, True))


def t_group_top(ctx: DbContext, rng: random.Random, evidence: bool) -> Cand | None:
    t = rng.choice(ctx.db.tables)
    a = ctx.pick(rng, t.name, ("cat",))
    if a is None:
        return None

    def render(q: Recorder, ch: tuple[int, ...], probe: bool = False) -> str | None:
        fr, exprs = _sql(q, t.name, [a], ch)
        if not fr:
            return None
        what, n = ("COUNT(*)", 2) if probe else (exprs[0], 1)
        return f"SELECT {what} FROM {fr} GROUP BY {exprs[0]} ORDER BY COUNT(*) DESC LIMIT {n}"
    return Cand(1, f"the {a.phrase} with the most {t.plural}", [a], render, [f"{a.phrase} refers to {{0}}"],
                probe=lambda q, ch: render(q, ch, True))


def t_group_agg(ctx: DbContext, rng: random.Random, evidence: bool) -> Cand | None:
    t = rng.choice(ctx.db.tables)
    a = ctx.pick(rng, t.name, ("cat",))
    b = ctx.pick(rng, t.name, ("num",))
    if a is None or b is None or len(set(ctx.values(a))) > 20:
        return None
    fn = rng.choice(sorted(AGG_WORDS))

    def render(q: Recorder, ch: tuple[int, ...]) -> str | None:
        fr, exprs = _sql(q, t.name, [a, b], ch)
        return fr and f"SELECT {exprs[0]}, {fn}({exprs[1]}) FROM {fr} GROUP BY {exprs[0]}"
    return Cand(1, f"the {AGG_WORDS[fn]} {b.phrase} of {t.plural} for each {a.phrase}", [a, b], render,
                [f"{AGG_WORDS[fn]} {b.phrase} refers to {fn}({{1}})"])


def t_count2(ctx: DbContext, rng: random.Random, evidence: bool) -> Cand | None:
    t = rng.choice(ctx.db.tables)
    a = ctx.pick(rng, t.name, ("cat",))
    b = ctx.pick(rng, t.name, ("num", "date"))
    if a is None or b is None:
        return None
    v = rng.choice(ctx.values(a))
    op = rng.choice([">", "<"])
    w = _threshold(ctx, b, op == ">", len(set(ctx.values(b))) // rng.randint(3, 6))
    p1, h1 = _cat(a, v, 0)
    p2, h2 = _cmp(b, op, w, 1, evidence)

    def render(q: Recorder, ch: tuple[int, ...]) -> str | None:
        fr, exprs = _sql(q, t.name, [a, b], ch)
        return fr and f"SELECT COUNT(*) FROM {fr} WHERE {exprs[0]} = {lit(v)} AND {exprs[1]} {op} {lit(w)}"
    return Cand(1, f"the number of {t.plural} {p1} and {p2}", [a, b], render, [h1, h2])


def _parent_label(ctx: DbContext, rng: random.Random) -> tuple[Table, Attr, Table, str] | None:
    t = rng.choice(ctx.db.tables)
    a = ctx.pick(rng, t.name, ("label",), hops=1)
    if a is None:
        return None
    return t, a, ctx.db.table(a.owner), a.routes[0].joins[0].src_col


def t_having(ctx: DbContext, rng: random.Random, evidence: bool) -> Cand | None:
    found = _parent_label(ctx, rng)
    if found is None:
        return None
    t, a, p, fk = found
    counts = [n for (n,) in ctx.con.execute(
        f"SELECT COUNT(*) FROM {qi(t.name)} GROUP BY {qi(fk)} ORDER BY 1 DESC")]
    n = counts[min(rng.randint(1, 5), len(counts) - 1)]

    def render(q: Recorder, ch: tuple[int, ...]) -> str | None:
        fr, exprs = _sql(q, t.name, [a], ch)
        return fr and f"SELECT {exprs[0]} FROM {fr} GROUP BY {q(t.name, fk)} HAVING COUNT(*) > {n}"
    return Cand(2, f"the {_plural(a.phrase)} of {p.plural} that have more than {n} {t.plural}", [a], render,
                [f"more than {n} {t.plural} refers to COUNT(*) > {n}"])


def t_top_parent(ctx: DbContext, rng: random.Random, evidence: bool) -> Cand | None:
    found = _parent_label(ctx, rng)
    if found is None:
        return None
    t, a, p, fk = found
    b = ctx.pick(rng, t.name, ("num",), hops=0)
    if b is None:
        return None

    def render(q: Recorder, ch: tuple[int, ...], probe: bool = False) -> str | None:
        fr, exprs = _sql(q, t.name, [a, b], ch)
        if not fr:
            return None
        what, k = (f"SUM({exprs[1]})", 2) if probe else (exprs[0], 1)
        return f"SELECT {what} FROM {fr} GROUP BY {q(t.name, fk)} ORDER BY SUM({exprs[1]}) DESC LIMIT {k}"
    total = b.phrase if b.phrase.startswith("total ") else "total " + b.phrase
    return Cand(2, f"the {a.phrase} of the {p.singular} whose {t.plural} have the highest {total}",
                [a, b], render, [f"highest {total} refers to MAX(SUM({{1}}))"],
                probe=lambda q, ch: render(q, ch, True))


def t_above_avg(ctx: DbContext, rng: random.Random, evidence: bool) -> Cand | None:
    t = rng.choice(ctx.db.tables)
    a = ctx.pick(rng, t.name, ("num",))
    b = ctx.pick(rng, t.name, ("cat",))
    if a is None or b is None:
        return None
    v = rng.choice(ctx.values(b))
    phrase, hint = _cat(b, v, 1)

    def render(q: Recorder, ch: tuple[int, ...]) -> str | None:
        fr, exprs = _sql(q, t.name, [a, b], ch)
        inner, (e_in,) = _sql(q, t.name, [a], ch[:1]) if fr else (None, [None])
        return fr and inner and (f"SELECT COUNT(*) FROM {fr} WHERE {exprs[1]} = {lit(v)} AND {exprs[0]} > "
                                 f"(SELECT AVG({e_in}) FROM {inner})")
    return Cand(3, f"the number of {t.plural} {phrase} and whose {a.phrase} is above the average {a.phrase} "
                   f"of all {t.plural}", [a, b], render, [hint, f"average {a.phrase} refers to AVG({{0}})"],
                fixed_level=True)


def _child_link(ctx: DbContext, rng: random.Random) -> tuple[Table, Col, Table] | None:
    t = rng.choice(ctx.db.tables)
    links = t.links()
    if not links:
        return None
    fk = rng.choice(links)
    return t, fk, ctx.db.table(fk.fk)


def t_not_in(ctx: DbContext, rng: random.Random, evidence: bool) -> Cand | None:
    found = _child_link(ctx, rng)
    if found is None:
        return None
    t, fk, p = found
    a = ctx.pick(rng, t.name, ("cat",))
    if a is None or a.owner == p.name:
        return None
    v = rng.choice(ctx.values(a))
    phrase, hint = _cat(a, v, 0)

    def render(q: Recorder, ch: tuple[int, ...]) -> str | None:
        fr, exprs = _sql(q, t.name, [a], ch)
        return fr and (f"SELECT COUNT(*) FROM {q.from_table(p.name)} WHERE {q(p.name, p.cols[0].name)} NOT IN "
                       f"(SELECT {q(t.name, fk.name)} FROM {fr} WHERE {exprs[0]} = {lit(v)})")
    return Cand(3, f"the number of {p.plural} that have no {t.plural} {phrase}", [a], render, [hint], fixed_level=True)


def t_cte(ctx: DbContext, rng: random.Random, evidence: bool) -> Cand | None:
    found = _child_link(ctx, rng)
    if found is None:
        return None
    t, fk, p = found
    a = ctx.pick(rng, t.name, ("cat",))
    if a is None:
        return None
    v = rng.choice(ctx.values(a))
    phrase, hint = _cat(a, v, 0)

    def render(q: Recorder, ch: tuple[int, ...]) -> str | None:
        fr, exprs = _sql(q, t.name, [a], ch)
        return fr and (f"WITH per AS (SELECT {q(t.name, fk.name)} AS k, COUNT(*) AS n FROM {fr} WHERE {exprs[0]} = "
                       f"{lit(v)} GROUP BY {q(t.name, fk.name)}) SELECT COUNT(*) FROM per WHERE n > "
                       f"(SELECT AVG(n) FROM per)")
    return Cand(3, f"the number of {p.plural} with more {t.plural} {phrase} than the average {p.singular} has",
                [a], render, [hint], fixed_level=True)


def t_max_parent(ctx: DbContext, rng: random.Random, evidence: bool) -> Cand | None:
    found = _child_link(ctx, rng)
    if found is None:
        return None
    t, fk, p = found
    a = ctx.pick(rng, p.name, ("num",), hops=0)
    if a is None:
        return None
    pk = p.cols[0].name

    def render(q: Recorder, ch: tuple[int, ...], probe: bool = False) -> str | None:
        fr, exprs = _sql(q, p.name, [a], ch)
        if probe:
            return f"SELECT {exprs[0]} FROM {fr} ORDER BY {exprs[0]} DESC LIMIT 2"
        return (f"SELECT COUNT(*) FROM {q.from_table(t.name)} WHERE {q(t.name, fk.name)} = "
                f"(SELECT {q(p.name, pk)} FROM {fr} ORDER BY {exprs[0]} DESC LIMIT 1)")
    via = fk.link_phrase or p.singular
    return Cand(3, f"the number of {t.plural} whose {via} is the {p.singular} with the highest {a.phrase}", [a],
                render, [f"highest {a.phrase} refers to MAX({{0}})"], probe=lambda q, ch: render(q, ch, True),
                fixed_level=True)


def t_diff(ctx: DbContext, rng: random.Random, evidence: bool) -> Cand | None:
    t = rng.choice(ctx.db.tables)
    a = ctx.pick(rng, t.name, ("cat",))
    if a is None:
        return None
    options = sorted(set(ctx.values(a)))
    if len(options) < 2:
        return None
    v1, v2 = rng.sample(options, 2)

    def render(q: Recorder, ch: tuple[int, ...]) -> str | None:
        parts = []
        for v in (v1, v2):
            fr, exprs = _sql(q, t.name, [a], ch)
            if not fr:
                return None
            parts.append(f"(SELECT COUNT(*) FROM {fr} WHERE {exprs[0]} = {lit(v)})")
        return f"SELECT {parts[0]} - {parts[1]}"
    return Cand(3, f"the difference between the number of {t.plural} whose {a.phrase} is {v1} and the number whose "
                   f"{a.phrase} is {v2}", [a], render, [_cat(a, v1, 0)[1], _cat(a, v2, 0)[1]], fixed_level=True)


TEMPLATES: tuple[tuple[Callable[[DbContext, random.Random, bool], Cand | None], ...], ...] = (
    (t_count, t_list, t_lookup, t_agg),
    (t_top, t_group_top, t_group_agg, t_count2, t_agg_where),
    (t_having, t_top_parent),
    (t_above_avg, t_not_in, t_cte, t_max_parent, t_diff),
)
