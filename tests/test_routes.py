"""Alternative executable routes (§1, §5) on a hand-made database and on the tiny world's annotations."""
from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path

import pandas as pd
import pytest

from acesql_lib.executor import score_batch
from acesql_lib.data.routes import is_alternative_route, route_record, route_share, route_table
from acesql_lib.data.schema import Schema
from acesql_lib.data.sqlcolumns import column_set

# Two questions, each answerable along two routes: the orders table repeats the customer's name.
QUESTIONS = [
    {"gold": "SELECT DISTINCT T1.name FROM customers AS T1 JOIN orders AS T2 ON T1.id = T2.customer_id "
             "WHERE T2.amount > 50",
     "same_route": "select distinct c.NAME from orders o join customers c on o.customer_id = c.id where o.amount>50",
     "alternative": "SELECT DISTINCT customer_name FROM orders WHERE amount > 50",
     "wrong": "SELECT DISTINCT name FROM customers WHERE city = 'Paris'"},
    {"gold": "SELECT sum(amount) FROM orders WHERE customer_id = 3",
     "same_route": "SELECT SUM(o.amount) FROM orders AS o WHERE o.customer_id = 3",
     "alternative": "SELECT sum(T2.amount) FROM customers T1 JOIN orders T2 ON T1.id = T2.customer_id "
                    "WHERE T1.name = 'name3'",
     "wrong": "SELECT sum(amount) FROM orders WHERE customer_id = 4"},
]


@pytest.fixture(scope="module")
def shop(tmp_path_factory) -> tuple[Path, Schema]:
    path = tmp_path_factory.mktemp("routes") / "shop.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript("""
        CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT, city TEXT);
        CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER REFERENCES customers(id),
                             customer_name TEXT, amount REAL);
    """)
    customers = [(i, f"name{i}", ["Paris", "Lyon"][i % 2]) for i in range(1, 9)]
    conn.executemany("INSERT INTO customers VALUES (?, ?, ?)", customers)
    conn.executemany("INSERT INTO orders VALUES (?, ?, ?, ?)",
                     [(k, c, f"name{c}", 10.0 * k) for k, c in enumerate([1, 2, 3, 3, 4, 5, 6, 6, 7, 8], 1)])
    conn.commit()
    conn.close()
    return path, Schema.from_sqlite(path)


def test_is_alternative_route(shop):
    _, schema = shop
    for q in QUESTIONS:
        assert is_alternative_route(q["alternative"], q["gold"], schema) is True
        assert is_alternative_route(q["same_route"], q["gold"], schema) is False
        assert is_alternative_route(q["gold"], q["gold"], schema) is False
    assert is_alternative_route("SELECT nickname FROM customers", QUESTIONS[0]["gold"], schema) is None
    assert is_alternative_route(QUESTIONS[0]["gold"], "SELECT name FROM", schema) is None


def test_share_on_scored_predictions_matches_hand_count(shop):
    db, schema = shop
    kinds = ("gold", "same_route", "alternative", "wrong")
    items = [(q[k], q["gold"], db) for q in QUESTIONS for k in kinds]
    scores = score_batch(items, mode="multiset", timeout_s=5.0, workers=1, progress=False)
    correct = [s.correct for s in scores]
    assert correct == [k != "wrong" for _ in QUESTIONS for k in kinds]  # the fixture's premise
    records = [route_record(pred, gold, schema, ok, kind=k)
               for (pred, gold, _), ok, k in zip(items, correct, kinds * len(QUESTIONS))]
    share = route_share(records)
    # Hand count: 2 questions x (gold, same route, alternative) correct; the alternatives differ.
    assert share == {"n": 8, "n_correct": 6, "n_resolved": 6, "n_unresolved": 0, "n_alternative": 2,
                     "share": pytest.approx(2 / 6)}
    assert route_share(pd.DataFrame(records))["n_alternative"] == 2


def test_share_counts_unresolved_apart_and_ignores_wrong_predictions():
    gold = ["t.a", "t.b"]
    records = [
        {"correct": True, "pred_columns": ["T.A", "t.b"], "gold_columns": gold},  # same set, other case
        {"correct": True, "pred_columns": ["t.a", "t.c"], "gold_columns": gold},  # alternative
        {"correct": True, "pred_columns": None, "gold_columns": gold},  # unresolved
        {"correct": False, "pred_columns": ["t.z"], "gold_columns": gold},  # wrong: not a route
    ]
    assert route_share(records) == {"n": 4, "n_correct": 3, "n_resolved": 2, "n_unresolved": 1,
                                    "n_alternative": 1, "share": 0.5}
    assert math.isnan(route_share(records[3:])["share"])
    with pytest.raises(KeyError, match="route record 0"):
        route_share([{"correct": True, "pred_columns": ["t.a"]}])
    with pytest.raises(TypeError, match="string"):
        route_share([{"correct": True, "pred_columns": "t.a", "gold_columns": gold}])


def test_route_table_groups_by_stage_and_dataset():
    gold = ["t.a"]
    rows = []
    groups = (("sft", "bird_dev", 3, 1), ("rl", "bird_dev", 1, 3), ("rl", "spider_dev", 2, 2))
    for stage, dataset, n_same, n_alt in groups:
        base = {"stage": stage, "dataset": dataset, "correct": True, "gold_columns": gold}
        rows += [{**base, "pred_columns": gold}] * n_same + [{**base, "pred_columns": ["t.b"]}] * n_alt
    table = route_table(pd.DataFrame(rows))
    assert list(table[["stage", "dataset"]].itertuples(index=False, name=None)) == \
        [("sft", "bird_dev"), ("rl", "bird_dev"), ("rl", "spider_dev")]
    assert table["share"].tolist() == [0.25, 0.75, 0.5]
    assert table["n_correct"].tolist() == [4, 4, 4]
    with pytest.raises(KeyError, match="split"):
        route_table(pd.DataFrame(rows), by=("split",))


# ---------------------------------------------------------------------------- tiny world

@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from acesql_lib.data.tinyworld import build_tinyworld

    return build_tinyworld(tmp_path_factory.mktemp("tinyworld") / "world", seed=0, n_train=200, n_dev=60)


def _annotated(world) -> list[tuple[str, Path, list[dict]]]:
    """(gold SQL, database, routes) for every annotated question with at least two routes."""
    routes = json.loads(world.routes_json.read_text())
    train = json.loads(world.train_json.read_text())
    dev = {str(r["question_id"]): r for r in json.loads(world.dev_json.read_text())}
    out = []
    for index, rs in routes["train"].items():
        record = train[int(index)]
        out.append((record["sql"], world.db_path(record["db_id"], "train"), rs))
    for qid, rs in routes["dev"].items():
        record = dev[str(qid)]
        out.append((record["SQL"], world.db_path(record["db_id"], "dev"), rs))
    return [(gold, db, rs) for gold, db, rs in out if len(rs) >= 2]


def test_tinyworld_alternatives_are_correct_routes(tiny):
    annotated = _annotated(tiny)
    assert len(annotated) >= 5, "the tiny world should annotate several questions with alternative routes"
    schemas: dict[Path, Schema] = {}
    items, expected_alt, wrong_idx = [], [], []
    for gold, db, rs in annotated:
        assert rs[0]["sql"] == gold, f"{db.name}: the first route must be the gold SQL"
        schema = schemas.setdefault(db, Schema.from_sqlite(db))
        gold_cols = frozenset(c.lower() for c in rs[0]["columns"])
        assert frozenset(c.lower() for c in column_set(gold, schema)) == gold_cols
        for r in rs:
            differs = frozenset(c.lower() for c in r["columns"]) != gold_cols
            assert is_alternative_route(r["sql"], gold, schema) is differs, r["sql"]
            items.append((r["sql"], gold, db))
            expected_alt.append(differs)
        table = schema.tables[0]
        wrong_idx.append(len(items))  # a query that cannot answer the question
        items.append((f"SELECT -987654321.5 FROM \"{table.name}\" LIMIT 1", gold, db))
        expected_alt.append(False)
    scores = score_batch(items, mode="multiset", timeout_s=5.0, workers=1, progress=False)
    for i, ((pred, _, db), s) in enumerate(zip(items, scores)):
        assert s.correct is (i not in wrong_idx), f"{db.name}: {pred}"
    records = [route_record(pred, gold, schemas[db], s.correct) for (pred, gold, db), s in zip(items, scores)]
    n_correct = len(items) - len(wrong_idx)
    share = route_share(records)
    assert (share["n_correct"], share["n_resolved"]) == (n_correct, n_correct)
    assert share["n_alternative"] == sum(expected_alt) > 0
    assert share["share"] == pytest.approx(sum(expected_alt) / n_correct)


# ---------------------------------------------------------------------------------------------
# One definition, used by every former copy (evaluate records, GRPO's rollout metrics, distillation)


def test_match_rule_needs_a_sql_whatever_the_executor_says():
    from acesql_lib.data.routes import is_match

    assert is_match(True, "SELECT 1") is True
    assert is_match(True, "") is False and is_match(True, None) is False  # unparseable output never matches
    assert is_match(False, "SELECT 1") is False and is_match(0, "SELECT 1") is False


def test_alternative_route_of_one_prediction_ignores_case_and_needs_both_sets():
    from acesql_lib.data.routes import alternative_route

    assert alternative_route(True, ["T.A", "t.b"], ["t.a", "t.b"]) is False  # evaluate once compared case-sensitively
    assert alternative_route(True, ["t.a", "t.c"], ["t.a", "t.b"]) is True
    assert alternative_route(True, None, ["t.a"]) is None and alternative_route(True, ["t.a"], None) is None
    assert alternative_route(False, ["t.z"], ["t.a"]) is None  # a wrong prediction is no route
    assert alternative_route(True, float("nan"), ["t.a"]) is None  # a missing cell read back from a DataFrame


def _rollouts_on(shop, rows):
    """QuestionRollouts on the shop database, executed for real; rows = [(gold, [generator SQL, ...])]."""
    from acesql_lib.data.datasets import Example
    from acesql_lib.models.completions import Completion
    from acesql_lib.roles.answers import GeneratorParse
    from acesql_lib.train.rollouts import QuestionRollout, RoleSamples, Task, execute_rollouts

    db, schema = shop
    rolls = []
    for i, (gold, sqls) in enumerate(rows):
        ex = Example(f"q{i}", "shop", "q", "", gold, "", "", "bird", str(db))
        parses = [GeneratorParse(s, True, bool(s), False) for s in sqls]
        comps = [Completion(s, [1], 1, False) for s in sqls]
        rolls.append(QuestionRollout(Task(ex, schema), RoleSamples([], [], []), frozenset(),
                                     RoleSamples([""] * len(sqls), comps, parses)))
    execute_rollouts(rolls, compare_mode="multiset", timeout_s=5.0, workers=1)
    return rolls


def test_grpo_rollout_metrics_use_the_routes_definition(shop):
    """GRPO's route/alt_share is `route_share` over the rollouts: NaN (not 0.0) when no correct set
    resolves, and the same number as the per-record definition when some do."""
    from acesql_lib.train.grpo_metrics import rollout_metrics
    from acesql_lib.data.routes import rollout_route_records

    q0, q1 = QUESTIONS
    rolls = _rollouts_on(shop, [(q0["gold"], [q0["same_route"], q0["alternative"], q0["wrong"], ""]),
                                (q1["gold"], [q1["alternative"], q1["gold"]])])
    assert [r.matches for r in rolls] == [[True, True, False, False], [True, True]]
    records = rollout_route_records(rolls)
    assert len(records) == 6 and route_share(records)["n_alternative"] == 2
    assert rollout_metrics(rolls)["route/alt_share"] == pytest.approx(2 / 4)
    none = _rollouts_on(shop, [(q0["gold"], [q0["wrong"]])])
    assert math.isnan(rollout_metrics(none)["route/alt_share"])  # 0.0 would read as "no alternative route"


def test_distillation_summary_uses_the_routes_definition(shop):
    """Distillation counted every correct set as alternative when the gold did not resolve, and
    compared sets case-sensitively; now its share is `route_share` of the same records."""
    from acesql_lib.config.profiles import load_config
    from acesql_lib.train.distill import build_products
    from acesql_lib.train.rollouts import Task

    db, schema = shop
    from acesql_lib.data.datasets import Example

    q0 = QUESTIONS[0]
    tasks = [Task(Example(f"q{i}", "shop", "q", "", q0["gold"], "", "", "bird", str(db)), schema) for i in range(2)]
    gold = sorted(tasks[0].gold_columns)

    def rec(qid, gold_columns, columns):
        return {"qid": qid, "gold_columns": gold_columns, "selected": gold,
                "retriever": [{"text": "x", "columns": gold, "n_tokens": 1, "well_formed": True}],
                "generator": [{"text": "x", "sql": "SELECT 1", "n_tokens": 1, "well_formed": True, "format_ok": True,
                               "match": c is not False, "columns": None if c is False else c} for c in columns]}

    cfg = load_config("tiny", {"distill.n_generator": 3, "distill.rl_max_correct": 3})
    recs = [rec("q0", gold, [[c.upper() for c in gold], gold[:1], False]),  # same set in capitals; one alternative
            rec("q1", [], [gold, gold[:1], None])]  # gold unresolved (written as []): no route counted
    p = build_products(cfg, tasks, recs)
    expected = route_share([{"correct": g["match"], "pred_columns": g["columns"],
                             "gold_columns": r["gold_columns"] or None} for r in recs for g in r["generator"]])
    assert expected["n_resolved"] == 2 and expected["share"] == 0.5
    assert p.alt_route_share == 0.5 and p.summary["correct_rollouts"] == 5 and p.summary["route_resolved"] == 2
    assert build_products(cfg, tasks, recs[1:]).alt_route_share is None  # none resolves
