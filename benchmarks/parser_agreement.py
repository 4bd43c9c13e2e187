"""How often the three retriever parsers agree, on the authors' 40 RL validation rows.

For each row of the authors' `validation.parquet` (their schemas and gold column indices) eleven
completion variants are written around the gold column set (canonical list, a trailing `[]`, a
nested list, a list inside the think block, a reopened think block, a bare table, `t.*`, a JSON
object, quoted names, no think block, a prose answer): 440 completions. Each is read by the
kit's parser, the authors' training parser and the authors' evaluation parser; the script prints
how many column sets agree pairwise and per variant, and checks that the authors' training
parser maps the canonical list to the row's `gold_column_indices` (index fidelity).

    python benchmarks/parser_agreement.py [path/to/validation.parquet]

The default path is the project's copy of the authors' fixture (tests/fixtures/authors/).
"""
from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from acesql_lib.roles.parsers import parse_retriever_eval  # noqa: E402
from acesql_lib.roles.answers import parse_retriever  # noqa: E402
from acesql_lib.data.schema import Schema  # noqa: E402

DEFAULT = REPO / "tests" / "fixtures" / "authors" / "validation.parquet"


def schema_of(db_info: dict) -> tuple[Schema, list[str | None]]:
    """Our Schema from the row's tables.json-like `db_info` (lists stored as Python literals),
    and the canonical `table.column` of each flattened column index."""
    entry = {k: (ast.literal_eval(v) if isinstance(v, str) and k != "db_id" else v) for k, v in db_info.items()
             if k != "ddls"}
    schema = Schema.from_tables_json(entry, "validation.parquet")
    names = [None if t < 0 else schema.canonical(entry["table_names_original"][t], c)
             for t, c in entry["column_names_original"]]
    return schema, names


def variants(gold: list[str], schema: Schema) -> dict[str, str]:
    cols = sorted(gold)
    table = cols[0].split(".")[0]
    extra = next((c for c in schema.columns() if c not in gold), cols[0])
    listed = ", ".join(cols)
    by_table: dict[str, list[str]] = {}
    for c in cols:
        t, _, name = c.partition(".")
        by_table.setdefault(t, []).append(name)
    quoted = ", ".join('"{}"."{}"'.format(*c.split(".", 1)) for c in cols)
    return {
        "canonical": f"<think>r</think>\n```\n[{listed}]\n```",
        "then_empty": f"<think>r</think>\n[{listed}]\nnothing else: []",
        "nested": f"<think>r</think>\n[[{cols[0]}], {listed}]",
        "list_in_think": f"<think>maybe [{extra}]</think>\n```\n[{listed}]\n```",
        "reopened": f"<think>r</think>\n```\n[{listed}]\n```\n<think> more",
        "bare_table": f"<think>r</think>\n```\n[{table}, {listed}]\n```",
        "star": f"<think>r</think>\n```\n[{table}.*, {listed}]\n```",
        "json": f"<think>r</think>\n```json\n{json.dumps(by_table)}\n```",
        "quoted": f"<think>r</think>\n[{quoted}]",
        "no_think": f"[{listed}]",
        "prose": f"<think>columns [{extra}] perhaps</think>\nThe answer is [{listed}].",
    }


def main(path: Path) -> dict:
    rows = pq.read_table(path).to_pylist()
    pairs = {"kit=authors_eval": 0, "kit=authors_train": 0, "authors_train=authors_eval": 0}
    per_variant: dict[str, dict[str, int]] = {}
    gold_ok, n = 0, 0
    for row in rows:
        schema, names = schema_of(json.loads(row["extra_info"]["db_info"]))
        gold = [names[i] for i in row["reward_model"]["ground_truth"]["gold_column_indices"]]
        for name, text in variants(gold, schema).items():
            kit = parse_retriever(text, schema, rules="kit").columns
            train = parse_retriever(text, schema, rules="authors").columns
            ev = parse_retriever_eval(text, schema, parser="authors").columns
            agree = {"kit=authors_eval": kit == ev, "kit=authors_train": kit == train,
                     "authors_train=authors_eval": train == ev}
            for k, v in agree.items():
                pairs[k] += v
                per_variant.setdefault(name, {p: 0 for p in pairs})[k] += v
            n += 1
            if name == "canonical":
                gold_ok += sorted(names.index(c) for c in train) == sorted(
                    row["reward_model"]["ground_truth"]["gold_column_indices"])
    return {"completions": n, "rows": len(rows), "agreement": pairs, "per_variant": per_variant,
            "canonical_list_to_gold_indices": f"{gold_ok}/{len(rows)}"}


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT), indent=1))
