"""The route model: what a question can talk about (`Attr`), every route that reads it (`Route`,
a chain of `Join`s to a leaf column, or a derived column's expression), and the `Recorder` that
renders column references and records the column set a SQL uses (kit rule of `sqlcolumns.py`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..schema import quote_identifier as qi
from .specs import Col, DbSpec, Table, readable_name


@dataclass(frozen=True)
class Join:
    src: str
    src_col: str
    dst: str
    dst_col: str


@dataclass(frozen=True)
class Route:
    joins: tuple[Join, ...]
    table: str
    col: str
    use_expr: bool = False  # a derived column written as its expression


@dataclass(frozen=True)
class Attr:
    anchor: str  # the table the question counts or lists
    role: str  # label, cat, num or date
    phrase: str
    routes: tuple[Route, ...]
    owner: str  # table that owns the leaf column on the first route


class Recorder:
    """Renders column references and records the column set they make (module doc)."""

    def __init__(self, db: DbSpec, bare: bool = False) -> None:
        self.db, self.bare, self.used, self.tables = db, bare, set(), set()

    def __call__(self, table: str, col: str) -> str:
        self.used.add(f"{table}.{col}")
        return col if self.bare else f"{qi(table)}.{qi(col)}"

    def from_table(self, table: str) -> str:
        self.tables.add(table)
        return qi(table)

    def columns(self) -> list[str]:
        cols = set(self.used)
        for t in self.tables:  # kit rule: a table read through `*` only stands as its primary key
            if not any(c.startswith(t + ".") for c in cols):
                cols.add(f"{t}.{self.db.table(t).cols[0].name}")
        return sorted(cols)


def expr(q: Recorder, r: Route) -> str:
    col = q.db.table(r.table).col(r.col)
    if r.use_expr:
        return "(" + re.sub(r"\{([^}]+)\}", lambda m: q(r.table, m.group(1)), col.gen[1]) + ")"
    return q(r.table, r.col)


def from_clause(q: Recorder, anchor: str, routes: list[Route]) -> str | None:
    """FROM anchor plus the joins the routes need; None when two routes reach a table differently."""
    seen: dict[str, Join] = {}
    order: list[Join] = []
    for r in routes:
        for j in r.joins:
            if j.dst == anchor or seen.get(j.dst, j) != j:
                return None
            if j.dst not in seen:
                seen[j.dst] = j
                order.append(j)
    text = q.from_table(anchor)
    for j in order:
        text += f" JOIN {q.from_table(j.dst)} ON {q(j.src, j.src_col)} = {q(j.dst, j.dst_col)}"
    return text


def _leaf_routes(db: DbSpec, joins: tuple[Join, ...], table: str, c: Col) -> list[Route]:
    routes = [Route(joins, table, c.name)]
    if c.gen[0] == "derived":
        routes.append(Route(joins, table, c.name, True))
    return routes


def _linked_phrase(via: str, parent: Table, c: Col) -> str:
    """'customer city'; 'borrower name' rather than 'borrower member name'."""
    phrase = c.phrase or readable_name(c.name)
    if phrase.startswith(parent.singular + " "):
        phrase = phrase[len(parent.singular) + 1:]
    return f"{via} {phrase}"


def attributes(db: DbSpec, anchor: str) -> list[Attr]:
    """Local columns, parent columns one FK away (with the anchor's copy, if any) and two FKs away
    (with the shortcut FK, if any). Copy and shortcut columns are routes, not attributes."""
    t = db.table(anchor)
    out = [Attr(anchor, c.role, c.phrase or readable_name(c.name), tuple(_leaf_routes(db, (), anchor, c)), anchor)
           for c in t.cols if c.role in ("label", "cat", "num", "date") and c.gen[0] != "copy"]
    for fk in t.links():
        p = db.table(fk.fk)
        j1 = Join(anchor, fk.name, p.name, p.cols[0].name)
        for pc in p.cols:
            if pc.role not in ("label", "cat", "num", "date") or pc.gen[0] == "copy":
                continue
            routes = _leaf_routes(db, (j1,), p.name, pc)
            routes += [Route((), anchor, c.name) for c in t.cols if c.gen[:3] == ("copy", fk.name, pc.name)]
            out.append(Attr(anchor, pc.role, _linked_phrase(fk.link_phrase or p.singular, p, pc), tuple(routes), p.name))
        for fk2 in p.links():
            g = db.table(fk2.fk)
            if g.name in (anchor, p.name):
                continue
            j2 = Join(p.name, fk2.name, g.name, g.cols[0].name)
            shortcut = [c for c in t.cols if c.fk == g.name and c.gen[:3] == ("copy", fk.name, fk2.name)]
            for gc in g.cols:
                if gc.role not in ("label", "cat"):
                    continue
                routes = [Route((j1, j2), g.name, gc.name)]
                routes += [Route((Join(anchor, s.name, g.name, g.cols[0].name),), g.name, gc.name) for s in shortcut]
                out.append(Attr(anchor, gc.role, _linked_phrase(g.singular, g, gc), tuple(routes), g.name))
    return out
