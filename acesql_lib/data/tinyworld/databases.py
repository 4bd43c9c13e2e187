"""Writing the databases: rows drawn from the specs, SQLite files with a fixed layout, the
Spider/BIRD `tables.json` entry and BIRD's `database_description` CSVs.
"""
from __future__ import annotations

import csv
import datetime
import io
import itertools
import random
import re
import sqlite3
from pathlib import Path

from ..schema import quote_identifier as qi
from .specs import FIRST, LAST, DbSpec, Table, readable_name


def generate_rows(db: DbSpec, seed: int) -> dict[str, list[dict]]:
    """Rows of every table, parents first; copies and derived columns are filled from them."""
    rng = random.Random(f"{seed}:{db.db_id}")
    rows: dict[str, list[dict]] = {}
    for t in db.tables:
        n = t.rows
        by_key = {name: {r[db.table(name).cols[0].name]: r for r in rows[name]} for name in rows}
        columns: dict[str, list] = {}
        for c in t.cols:
            kind = c.gen[0]
            if kind == "seq":
                columns[c.name] = list(range(1, n + 1))
            elif kind == "person":
                columns[c.name] = [f"{a} {b}" for a, b in rng.sample(sorted(itertools.product(FIRST, LAST)), n)]
            elif kind == "title":
                columns[c.name] = [f"{a} {b}" for a, b in rng.sample(sorted(itertools.product(c.gen[1], c.gen[2])), n)]
            elif kind == "code":
                columns[c.name] = [c.gen[1].format(k) for k in rng.sample(range(c.gen[2], c.gen[3] + 1), n)]
            elif kind == "from":
                columns[c.name] = list(c.gen[1][:n])
            elif kind == "choice":
                weights = [1.0 + 3 * rng.random() for _ in c.gen[1]]  # uneven, so "the most" is well defined
                columns[c.name] = rng.choices(c.gen[1], weights, k=n)
            elif kind == "int":
                columns[c.name] = [rng.randint(c.gen[1], c.gen[2]) for _ in range(n)]
            elif kind == "real":
                columns[c.name] = [round(rng.uniform(c.gen[1], c.gen[2]), 2) for _ in range(n)]
            elif kind == "date":
                start, days = datetime.date(c.gen[1], 1, 1), (c.gen[2] - c.gen[1] + 1) * 365
                columns[c.name] = [(start + datetime.timedelta(days=rng.randrange(days))).isoformat() for _ in range(n)]
            elif kind == "fk":
                keys = sorted(by_key[c.fk])
                weights = [0.05 + rng.random() ** 2 for _ in keys]  # skewed: some parents are busier
                columns[c.name] = rng.choices(keys, weights, k=n)
        table_rows = [{name: columns[name][i] for name in columns} for i in range(n)]
        for c in t.cols:  # copies and derived values, in column order
            if c.gen[0] == "copy":
                parent = db.table(t.col(c.gen[1]).fk).name
                for r in table_rows:
                    r[c.name] = by_key[parent][r[c.gen[1]]][c.gen[2]]
            elif c.gen[0] == "derived":
                for r in table_rows:
                    r[c.name] = c.gen[2](r)
        rows[t.name] = table_rows
    return rows


def create_sqlite(path: Path, db: DbSpec, rows: dict[str, list[dict]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    con = sqlite3.connect(path)
    con.execute("PRAGMA page_size = 4096")  # fixed layout, so the same rows give the same bytes
    with con:
        for t in db.tables:
            lines = [f"  {qi(c.name)} {c.type.upper()}" for c in t.cols]
            lines.append(f"  PRIMARY KEY ({qi(t.cols[0].name)})")
            lines += [f"  FOREIGN KEY ({qi(c.name)}) REFERENCES {qi(c.fk)}({qi(db.table(c.fk).cols[0].name)})"
                      for c in t.cols if c.fk]
            con.execute(f"CREATE TABLE {qi(t.name)} (\n" + ",\n".join(lines) + "\n)")
            marks = ", ".join("?" for _ in t.cols)
            con.executemany(f"INSERT INTO {qi(t.name)} VALUES ({marks})",
                            [tuple(r[c.name] for c in t.cols) for r in rows[t.name]])
    con.close()


def tables_entry(db: DbSpec) -> dict:
    """The Spider/BIRD tables.json entry of one database."""
    names, readable, types, pks, fks = [[-1, "*"]], [[-1, "*"]], ["text"], [], []
    index: dict[tuple[str, str], int] = {}
    for ti, t in enumerate(db.tables):
        for c in t.cols:
            index[(t.name, c.name)] = len(names)
            names.append([ti, c.name])
            readable.append([ti, c.phrase or readable_name(c.name)])
            types.append(c.type)
        pks.append(index[(t.name, t.cols[0].name)])
    for t in db.tables:
        for c in t.cols:
            if c.fk:
                fks.append([index[(t.name, c.name)], index[(c.fk, db.table(c.fk).cols[0].name)]])
    return {"db_id": db.db_id, "table_names": [readable_name(t.name) for t in db.tables],
            "table_names_original": [t.name for t in db.tables], "column_names": readable,
            "column_names_original": names, "column_types": types, "primary_keys": pks, "foreign_keys": fks}


def description_csv(db: DbSpec, t: Table) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["original_column_name", "column_name", "column_description", "data_format", "value_description"])
    for c in t.cols:
        kind = c.gen[0]
        if kind == "copy":
            note = f"copy of {c.gen[2]} of the {db.table(t.col(c.gen[1]).fk).singular} in {c.gen[1]}"
        elif kind == "derived":
            note = "computed as " + re.sub(r"\{([^}]+)\}", r"\1", c.gen[1])
        elif kind == "choice" and c.type == "text":
            note = "one of: " + ", ".join(c.gen[1])
        else:
            note = ""
        w.writerow([c.name, c.phrase or readable_name(c.name), c.desc or c.phrase or readable_name(c.name), c.type, note])
    return buf.getvalue()
