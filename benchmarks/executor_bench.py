"""Executor benchmark: `score_batch` beside the official BIRD evaluator's approach, same pairs.

The baseline follows BIRD's evaluation.py: a multiprocessing Pool with one apply_async per pair, a
fresh sqlite3.connect per pair, prediction then gold executed for every pair, and a thread-based
timeout (func_timeout style: run in a thread, join(timeout)). Both score in "set" mode (BIRD EX)
and must agree on every pair. Also measured: how long a runaway query holds the caller with a
1 s limit, and whether it keeps running after control returns.

    python benchmarks/executor_bench.py [--world DIR] [--pairs 2000] [--workers 2] [--previous FILE]

`--previous PATH` also runs another version of the executor on the same pairs, side by side, to
measure what a change costs: a module file (`git show <commit>:acesql_lib/executor.py > prev.py`,
from before the package split) or a copy of the package folder (`mkdir prev && git archive <commit>
acesql_lib/executor | tar -x -C prev`, then `--previous prev/acesql_lib/executor`).

Without --world, six SQLite databases (4 tables, thousands of rows) are built in a temp folder;
with --world, every *.sqlite under DIR is used. Pairs are generated from each database's own
schema: 8 predictions per gold as in GRPO rollouts (copies, equivalent rewrites, wrong answers,
errors), plus a few slow correlated-subquery queries (~0.3-1 s, far below the 30 s limit so
both evaluators' verdicts are defined).
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import random
import resource
import sqlite3
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from acesql_lib import executor  # noqa: E402
from acesql_lib.executor import execute, score_batch, shutdown_pool  # noqa: E402

TIMEOUT_S = 30.0
RUNAWAY_FINITE = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x < {n}) SELECT count(*) FROM c"


# --------------------------------------------------------------------------- world

def build_world(root: Path, n_dbs: int = 6, seed: int = 0) -> list[Path]:
    rng = random.Random(seed)
    cities, segments = [f"city_{i}" for i in range(25)], ["retail", "corporate", "public", "student"]
    categories, statuses = [f"cat_{i}" for i in range(12)], ["open", "shipped", "returned", "lost"]
    paths = []
    for d in range(n_dbs):
        path = root / f"shop_{d}" / f"shop_{d}.sqlite"
        path.parent.mkdir(parents=True)
        conn = sqlite3.connect(path)
        conn.executescript("""
            CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT, city TEXT, segment TEXT, signup_year INTEGER);
            CREATE TABLE products (id INTEGER PRIMARY KEY, name TEXT, category TEXT, price REAL);
            CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER REFERENCES customers(id),
                                 order_year INTEGER, status TEXT);
            CREATE TABLE order_items (id INTEGER PRIMARY KEY, order_id INTEGER REFERENCES orders(id),
                                      product_id INTEGER REFERENCES products(id), qty INTEGER, discount REAL);""")
        n_c, n_p, n_o, n_i = 2500 + 300 * d, 300 + 20 * d, 6000 + 500 * d, 12000 + 800 * d
        conn.executemany("INSERT INTO customers VALUES (?,?,?,?,?)", [
            (i, f"cust_{i}", rng.choice(cities), rng.choice(segments), rng.randint(2010, 2023)) for i in range(1, n_c + 1)])
        conn.executemany("INSERT INTO products VALUES (?,?,?,?)", [
            (i, f"prod_{i}", rng.choice(categories), round(rng.uniform(1, 500), 2)) for i in range(1, n_p + 1)])
        conn.executemany("INSERT INTO orders VALUES (?,?,?,?)", [
            (i, rng.randint(1, n_c), rng.randint(2015, 2023), rng.choice(statuses)) for i in range(1, n_o + 1)])
        conn.executemany("INSERT INTO order_items VALUES (?,?,?,?,?)", [
            (i, rng.randint(1, n_o), rng.randint(1, n_p), rng.randint(1, 9), round(rng.random() / 3, 3))
            for i in range(1, n_i + 1)])
        conn.commit()
        conn.close()
        paths.append(path)
    return paths


def introspect(db: Path, rng: random.Random) -> list[dict]:
    """Tables with their text/number columns, sampled values, row count and foreign keys."""
    conn = sqlite3.connect(db)
    tables = []
    for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'"):
        cols = conn.execute(f'PRAGMA table_info("{name}")').fetchall()
        text = [c[1] for c in cols if "CHAR" in c[2].upper() or "TEXT" in c[2].upper()]
        num = [c[1] for c in cols if c[2].upper() in ("INTEGER", "REAL", "INT", "NUMERIC", "FLOAT", "DOUBLE") and not c[5]]
        n = conn.execute(f'SELECT count(*) FROM "{name}"').fetchone()[0]
        if not (text and num) or n < 20:
            continue
        sample = {f'"{c}"': [v for (v,) in conn.execute(f'SELECT "{c}" FROM "{name}" WHERE "{c}" IS NOT NULL LIMIT 200')]
                  for c in text + num}
        text, num = [f'"{c}"' for c in text], [f'"{c}"' for c in num]  # names may hold spaces ("Product Name")
        fks = [(f[3], f[2], f[4]) for f in conn.execute(f'PRAGMA foreign_key_list("{name}")')]
        tables.append({"name": name, "text": text, "num": num, "n": n, "sample": sample, "fks": fks})
    conn.close()
    return tables


def q(v) -> str:
    return "'" + str(v).replace("'", "''") + "'" if isinstance(v, str) else repr(v)


def gold_group(t: dict, rng: random.Random) -> tuple[str, list[str]]:
    """A gold SQL on table t and 8 predictions: 2 copies, 2 rewrites, 2 wrong, 1 error, 1 other."""
    T, s, n = f'"{t["name"]}"', rng.choice(t["text"]), rng.choice(t["num"])
    v, x = rng.choice(t["sample"][s]), rng.choice(t["sample"][n])
    kind = rng.randrange(5)
    if kind == 0:
        gold = f"SELECT COUNT(*) FROM {T} WHERE {s} = {q(v)}"
        rewrites = [f"SELECT COUNT(rowid) FROM {T} WHERE {q(v)} = {s}", f"SELECT SUM(1) FROM {T} WHERE {s} IN ({q(v)})"]
        wrong = [f"SELECT COUNT(*) FROM {T} WHERE {s} <> {q(v)}", f"SELECT COUNT(DISTINCT {n}) FROM {T} WHERE {s} = {q(v)}"]
    elif kind == 1:
        gold = f"SELECT {s}, COUNT(*) FROM {T} GROUP BY {s}"
        rewrites = [f"SELECT {s}, COUNT(1) FROM {T} GROUP BY 1 ORDER BY 2", f"SELECT t1.{s}, COUNT(*) AS n FROM {T} AS t1 GROUP BY t1.{s}"]
        wrong = [f"SELECT {s}, COUNT(DISTINCT {n}) FROM {T} GROUP BY {s}", f"SELECT {s}, COUNT(*) FROM {T} WHERE {n} > {q(x)} GROUP BY {s}"]
    elif kind == 2:
        gold = f"SELECT {s} FROM {T} WHERE {n} > {q(x)}"
        rewrites = [f"SELECT {s} FROM {T} WHERE NOT {n} <= {q(x)}", f"SELECT DISTINCT {s} FROM {T} WHERE {q(x)} < {n}"]
        wrong = [f"SELECT {s} FROM {T} WHERE {n} < {q(x)}", f"SELECT {n} FROM {T} WHERE {n} > {q(x)}"]
    elif kind == 3:
        gold = f"SELECT {s}, AVG({n}), MAX({n}) FROM {T} GROUP BY {s} HAVING COUNT(*) > 1"
        rewrites = [f"SELECT {s}, SUM({n}) * 1.0 / COUNT({n}), MAX({n}) FROM {T} GROUP BY {s} HAVING COUNT(*) > 1",
                    f"SELECT * FROM (SELECT {s}, AVG({n}), MAX({n}) FROM {T} GROUP BY {s} HAVING COUNT(*) > 1)"]
        wrong = [f"SELECT {s}, AVG({n}), MIN({n}) FROM {T} GROUP BY {s} HAVING COUNT(*) > 1",
                 f"SELECT {s}, AVG({n}) FROM {T} GROUP BY {s}"]
    else:
        fk = t["fks"][0] if t["fks"] else None
        if fk is None:
            return gold_group(t, rng)
        col, parent, pcol = f'"{fk[0]}"', fk[1], f'"{fk[2]}"' if fk[2] else "rowid"
        gold = f'SELECT p.rowid, COUNT(*) FROM {T} AS c JOIN "{parent}" AS p ON c.{col} = p.{pcol} WHERE c.{n} > {q(x)} GROUP BY p.rowid'
        rewrites = [f'SELECT {col}, COUNT(*) FROM {T} WHERE {n} > {q(x)} AND {col} IN (SELECT {pcol} FROM "{parent}") GROUP BY {col}',
                    gold.replace("COUNT(*)", "COUNT(c.rowid)")]
        wrong = [gold.replace(f"> {q(x)}", f">= {q(x)}"), gold.replace("COUNT(*)", f"SUM(c.{n})")]
    errors = [f"SELECT {s}_x FROM {T}", f"SELEC {s} FROM {T}", f"SELECT {s} FROM {T}_missing"]
    preds = [gold, gold] + rewrites + wrong + [rng.choice(errors), rng.choice(rewrites + wrong)]
    return gold, preds


SLOW_MARK = "a.rowid <="


def slow_sql(t: dict, k: int) -> str:
    """A correlated subquery over an unindexed column: cost grows with k outer rows."""
    T, s = f'"{t["name"]}"', t["text"][0]
    return f"SELECT COUNT(*) FROM {T} AS a WHERE a.rowid <= {k} AND (SELECT COUNT(*) FROM {T} AS b WHERE b.{s} = a.{s}) > 1"


def calibrate(db: Path, t: dict, target_s: float) -> int:
    conn = sqlite3.connect(db)
    k, elapsed = 16, 0.0
    while elapsed < 0.05 and k < t["n"]:
        k *= 2
        start = time.perf_counter()
        conn.execute(slow_sql(t, k)).fetchall()
        elapsed = time.perf_counter() - start
    conn.close()
    return max(1, min(t["n"], int(k * target_s / max(elapsed, 1e-6))))


def make_pairs(dbs: list[Path], n_pairs: int, seed: int = 0) -> list[tuple[str, str, str]]:
    rng = random.Random(seed)
    worlds = [(db, introspect(db, rng)) for db in dbs]
    worlds = [(db, ts) for db, ts in worlds if ts]
    pairs: list[tuple[str, str, str]] = []
    n_groups = n_pairs // 8
    slow_gold_groups, slow_pred_groups = {n_groups // 3, 2 * n_groups // 3}, set(range(5, n_groups, n_groups // 6))
    for g in range(n_groups):
        db, tables = worlds[g % len(worlds)]
        t = rng.choice(tables)
        gold, preds = gold_group(t, rng)
        if g in slow_gold_groups:  # a slow gold: 2 copies, 2 slow rewrites, the rest fast
            big = max(tables, key=lambda x: x["n"])
            k = calibrate(db, big, 0.4)
            gold = slow_sql(big, k)
            preds[:4] = [gold, gold, gold.replace("> 1", ">= 2"), gold.replace("COUNT(*) FROM", "COUNT(a.rowid) FROM", 1)]
        elif g in slow_pred_groups:  # one slow (wrong) prediction
            big = max(tables, key=lambda x: x["n"])
            preds[-1] = slow_sql(big, calibrate(db, big, rng.uniform(0.3, 0.6)))
        pairs += [(p, gold, str(db)) for p in preds]
    return pairs


# --------------------------------------------------------------------------- BIRD-style baseline

class FunctionTimedOut(Exception):
    pass


def thread_timeout(timeout: float, fn, args, keep: list | None = None):
    """func_timeout's approach: run in a thread, join(timeout); the thread is not stopped."""
    box: dict = {}

    def run() -> None:
        try:
            box["result"] = fn(*args)
        except BaseException as e:  # noqa: BLE001
            box["error"] = e

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout)
    if keep is not None:
        keep.append(thread)
    if thread.is_alive():
        raise FunctionTimedOut()
    if "error" in box:
        raise box["error"]
    return box["result"]


def bird_execute_sql(predicted_sql: str, ground_truth: str, db_path: str) -> int:
    conn = sqlite3.connect(db_path)
    cursor = conn.cursor()
    cursor.execute(predicted_sql)
    predicted_res = cursor.fetchall()
    cursor.execute(ground_truth)
    ground_truth_res = cursor.fetchall()
    return 1 if set(predicted_res) == set(ground_truth_res) else 0


def bird_execute_model(predicted_sql: str, ground_truth: str, db_place: str, idx: int, meta_time_out: float) -> dict:
    try:
        res = thread_timeout(meta_time_out, bird_execute_sql, (predicted_sql, ground_truth, db_place))
    except FunctionTimedOut:
        res = 0
    except Exception:  # noqa: BLE001
        res = 0
    return {"sql_idx": idx, "res": res}


def run_baseline(pairs, workers: int) -> list[int]:
    results: list[dict] = []
    pool = mp.Pool(processes=workers)
    for i, (pred, gold, db) in enumerate(pairs):
        pool.apply_async(bird_execute_model, args=(pred, gold, db, i, TIMEOUT_S), callback=results.append)
    pool.close()
    pool.join()
    results.sort(key=lambda r: r["sql_idx"])
    return [r["res"] for r in results]


# --------------------------------------------------------------------------- main

def timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def proc_cpu_s(pid: int) -> float:
    """utime + stime of a live process (Linux /proc), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_ours(items, workers: int):
    """score_batch on a fresh pool; wall s and CPU s (parent + workers, read before they exit)."""
    shutdown_pool()
    cpu0, start = time.process_time(), time.perf_counter()
    scores = score_batch(items, mode="set", timeout_s=TIMEOUT_S, workers=workers, progress=False)
    wall = time.perf_counter() - start
    pool = executor._POOL
    cpu = time.process_time() - cpu0 + (sum(proc_cpu_s(w.proc.pid) for w in pool.workers if w is not None) if pool else 0.0)
    shutdown_pool()
    return scores, wall, cpu


def load_previous(path: str):
    """Import an older executor from a module file or a package folder, as `previous_executor`
    (workers import it by name, so it goes on sys.path)."""
    import importlib
    import shutil
    folder = tempfile.mkdtemp()
    if Path(path).is_dir():
        shutil.copytree(path, Path(folder) / "previous_executor", ignore=shutil.ignore_patterns("__pycache__"))
    else:
        shutil.copy(path, Path(folder) / "previous_executor.py")
    sys.path.insert(0, folder)
    return importlib.import_module("previous_executor")


def run_previous(module, items, workers: int):
    module.shutdown_pool()
    cpu0, start = time.process_time(), time.perf_counter()
    scores = module.score_batch(items, mode="set", timeout_s=TIMEOUT_S, workers=workers, progress=False)
    wall = time.perf_counter() - start
    pool = module._POOL
    cpu = time.process_time() - cpu0 + (sum(proc_cpu_s(w.proc.pid) for w in pool.workers if w is not None) if pool else 0.0)
    module.shutdown_pool()
    return scores, wall, cpu


def run_base(pairs, workers: int):
    """The baseline; its Pool workers are forked children, so RUSAGE_CHILDREN counts them once joined."""
    cpu0, kids0 = time.process_time(), resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    verdicts = run_baseline(pairs, workers)
    wall = time.perf_counter() - start
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = time.process_time() - cpu0 + (kids.ru_utime - kids0.ru_utime) + (kids.ru_stime - kids0.ru_stime)
    return verdicts, wall, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--world", help="folder with *.sqlite databases; default: build six in a temp folder")
    ap.add_argument("--pairs", type=int, default=2000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--previous", help="an older executor (module file or package folder) to run side by side")
    args = ap.parse_args()
    tmp = tempfile.TemporaryDirectory()
    dbs = sorted(Path(args.world).rglob("*.sqlite")) if args.world else build_world(Path(tmp.name))
    pairs = make_pairs(dbs, args.pairs)
    n_golds = len({(g, d) for _, g, d in pairs})
    print(f"{len(pairs)} pairs, {n_golds} distinct golds, {len(dbs)} databases, {args.workers} workers, timeout {TIMEOUT_S:g} s")

    base, t_base, c_base = run_base(pairs, args.workers)
    ours, t_ours, c_ours = run_ours(pairs, args.workers)
    previous = load_previous(args.previous) if args.previous else None
    if previous is not None:
        prev, t_prev, c_prev = run_previous(previous, pairs, args.workers)
        ours2, t_ours2, c_ours2 = run_ours(pairs, args.workers)  # again, after: drift on a shared machine shows
    # Same pairs with every prediction made textually unique: no reuse of identical SQL text.
    unique = [(f"{p} /* {i} */", g, d) for i, (p, g, d) in enumerate(pairs)]
    ours_u, t_ours_u, c_ours_u = run_ours(unique, args.workers)

    # The same comparison without the slow queries (both run those alike: same SQLite work).
    fast = [x for x in pairs if SLOW_MARK not in x[0] and SLOW_MARK not in x[1]]
    base_f, t_base_f, c_base_f = run_base(fast, args.workers)
    ours_f, t_ours_f, c_ours_f = run_ours(fast, args.workers)
    disagree_f = sum(int(s.correct) != b for s, b in zip(ours_f, base_f))

    verdicts = [int(s.correct) for s in ours]
    disagree = sum(a != b for a, b in zip(verdicts, base)) + abs(len(base) - len(verdicts))
    disagree_u = sum(int(s.correct) != b for s, b in zip(ours_u, base))
    statuses: dict[str, int] = {}
    for s in ours:
        statuses[s.pred_status] = statuses.get(s.pred_status, 0) + 1
    print(f"verdicts: {sum(verdicts)} correct; pred statuses {statuses}; gold failures {ours.gold_failures}")
    print(f"{'':38}{'wall s':>8}{'pairs/s':>9}{'ratio':>7}{'CPU s':>8}{'ratio':>7}  disagreements")
    for name, t, c, dis in [("baseline (BIRD evaluation.py style)", t_base, c_base, None),
                            ("score_batch", t_ours, c_ours, disagree),
                            ("score_batch, every pred unique text", t_ours_u, c_ours_u, disagree_u)]:
        print(f"{name:38}{t:8.2f}{len(pairs) / t:9.1f}{t_base / t:6.2f}x{c:8.2f}{c_base / c:6.2f}x  "
              f"{'' if dis is None else dis}")
    if previous is not None:
        dis_prev = sum(int(a.correct) != int(b.correct) for a, b in zip(prev, ours))
        for name, t, c, dis in [("previous executor", t_prev, c_prev, dis_prev),
                                ("score_batch (again, after it)", t_ours2, c_ours2, None)]:
            print(f"{name:38}{t:8.2f}{len(pairs) / t:9.1f}{t_base / t:6.2f}x{c:8.2f}{c_base / c:6.2f}x  "
                  f"{'' if dis is None else dis}")
        mean_ours = (t_ours + t_ours2) / 2
        print(f"this executor vs the previous one (wall, mean of the runs before and after it): "
              f"{mean_ours / t_prev:.3f}x the time ({100 * (mean_ours / t_prev - 1):+.1f}%)")
    print(f"without the {len(pairs) - len(fast)} pairs that touch a slow query ({len(fast)} pairs):")
    for name, t, c, dis in [("baseline (BIRD evaluation.py style)", t_base_f, c_base_f, None),
                            ("score_batch", t_ours_f, c_ours_f, disagree_f)]:
        print(f"{name:38}{t:8.2f}{len(fast) / t:9.1f}{t_base_f / t:6.2f}x{c:8.2f}{c_base_f / c:6.2f}x  "
              f"{'' if dis is None else dis}")

    # Timeout precision: a runaway query, 1 s limit.
    db = str(dbs[0])
    r, t_ours_timeout = timed(lambda: execute(db, RUNAWAY_FINITE.format(n=10**12), timeout_s=1.0))
    conn = sqlite3.connect(db)
    n = 200_000
    _, t_n = timed(lambda: conn.execute(RUNAWAY_FINITE.format(n=n)).fetchall())
    n_runaway = int(n * 4.0 / t_n)  # about 4 s of work: stands in for a query that never ends
    threads: list[threading.Thread] = []
    start = time.perf_counter()
    try:
        thread_timeout(1.0, bird_execute_sql, (RUNAWAY_FINITE.format(n=n_runaway), "SELECT 1", db), keep=threads)
    except FunctionTimedOut:
        pass
    t_base_return = time.perf_counter() - start
    still_running = threads[0].is_alive()
    threads[0].join()
    t_base_end = time.perf_counter() - start
    print(f"runaway query, 1 s limit: ours returns after {t_ours_timeout:.3f} s (status {r.status}, query stopped); "
          f"baseline returns after {t_base_return:.3f} s, query still running: {still_running}, "
          f"it ran until {t_base_end:.2f} s")
    tmp.cleanup()


if __name__ == "__main__":
    main()
