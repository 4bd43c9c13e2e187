"""How many real gold queries `column_set` resolves, and how fast.

Runs every Spider dev gold query (1,034) and the BIRD dev subset (147) from the real fixtures,
prints the share resolved per dataset (targets: >= 99% Spider, >= 97% BIRD), each failure with its
reason, and the mean milliseconds per query uncached and from the result cache.

    python benchmarks/column_resolution.py
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from acesql_lib.data.schema import load_tables_json  # noqa: E402
from acesql_lib.data.sqlcolumns import ColumnResolutionError, column_set  # noqa: E402

FIXTURES = REPO / "tests" / "fixtures" / "real"
DATASETS = {  # name: (questions file, tables file, SQL field, target share)
    "spider_dev": ("spider_dev.json", "spider_tables.json", "query", 0.99),
    "bird_subset": ("bird_subset.json", "bird_subset_tables.json", "SQL", 0.97),
}


def measure(name: str) -> dict:
    questions_file, tables_file, field, target = DATASETS[name]
    schemas = load_tables_json(FIXTURES / tables_file)
    records = json.loads((FIXTURES / questions_file).read_text(encoding="utf-8"))
    failures = []
    start = time.perf_counter()
    for i, rec in enumerate(records):
        try:
            column_set(rec[field], schemas[rec["db_id"]], cache=False)
        except ColumnResolutionError as e:
            failures.append((i, rec["db_id"], str(e), rec[field]))
    uncached_ms = (time.perf_counter() - start) * 1000 / len(records)
    start = time.perf_counter()
    for rec in records:
        try:
            column_set(rec[field], schemas[rec["db_id"]])
        except ColumnResolutionError:
            pass
    warm_ms = (time.perf_counter() - start) * 1000 / len(records)
    share = 1 - len(failures) / len(records)
    return {"dataset": name, "n": len(records), "resolved": len(records) - len(failures), "share": share,
            "target": target, "uncached_ms_per_query": uncached_ms, "warm_ms_per_query": warm_ms, "failures": failures}


def main() -> int:
    ok = True
    for name in DATASETS:
        r = measure(name)
        met = r["share"] >= r["target"]
        ok &= met
        print(f"{name}: {r['resolved']}/{r['n']} resolved = {r['share']:.2%} (target {r['target']:.0%}, "
              f"{'met' if met else 'MISSED'}); {r['uncached_ms_per_query']:.2f} ms/query uncached, "
              f"{r['warm_ms_per_query']:.4f} ms/query cached "
              f"(cache speed-up x{r['uncached_ms_per_query'] / max(r['warm_ms_per_query'], 1e-9):.0f})")
        for i, db_id, reason, sql in r["failures"]:
            print(f"  #{i} [{db_id}] {reason}\n      {sql}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
