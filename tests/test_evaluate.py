"""Two-pass evaluation (§5): metric arithmetic on fixed records, and whole runs of a tiny random
model over a real SQLite database (files, official BIRD format, token counts, run layout)."""
from __future__ import annotations

import json

import pytest

from acesql_lib.config.eval import EvalSet
from acesql_lib.config.profiles import load_config
from acesql_lib.data.datasets import load_bird, schemas_for
from acesql_lib.evaluation.evaluate import EvalOptions, evaluate, evaluate_set, evaluate_sets
from acesql_lib.evaluation.metrics import alt_route_metrics, generator_ability, retrieval_metrics, summarize, token_metrics
from acesql_lib.evaluation.records import ex_by_difficulty
from acesql_lib.executor import BIRD_SEPARATOR, read_bird_predictions
from acesql_lib.models.loading import build_tiny_model, save_tiny, train_tiny_tokenizer
from acesql_lib.config.paths import Paths
from acesql_lib.roles.prompts import generator_messages, generator_target, retriever_messages, retriever_target
from acesql_lib.data.sqlcolumns import column_set
from helpers_bird import QUESTIONS, eval_prompt_lengths  # the questions of the `bird_dir` fixture (conftest)


def _record(correct, difficulty="simple", retrieved=(), gold=(), pred=(), gold_schema_correct=None, r_tok=10,
            g_tok=20):
    return {"correct": correct, "difficulty": difficulty, "retrieved_columns": list(retrieved),
            "gold_columns": None if gold is None else list(gold), "pred_columns": None if pred is None else list(pred),
            "gold_schema_correct": gold_schema_correct, "retriever_tokens": r_tok, "generator_tokens": g_tok,
            "retriever_well_formed": True, "generator_well_formed": correct, "retriever_truncated": False,
            "generator_truncated": False}


RECORDS = [
    # correct, same route as gold, retriever exact
    _record(True, "simple", ["a.x", "a.y"], ["a.x", "a.y"], ["a.x", "a.y"], True, 10, 30),
    # correct on an alternative route; retriever covers gold plus one extra
    _record(True, "moderate", ["a.x", "a.y", "b.z"], ["a.x", "a.y"], ["b.z"], True, 20, 40),
    # wrong; retriever misses one of two gold columns
    _record(False, "moderate", ["a.x"], ["a.x", "a.y"], ["a.x"], False, 30, 50),
    # wrong; gold column set unresolvable (excluded from retrieval and generator ability)
    _record(False, "challenging", ["a.x"], None, None, None, 40, 60),
    # correct, but the prediction's column set does not resolve; empty retrieval
    _record(True, "challenging", [], ["A.X"], None, False, 50, 70),
]


def test_ex_overall_and_per_difficulty():
    table = ex_by_difficulty(RECORDS)
    assert table["overall"] == {"ex": 60.0, "n": 5}
    assert table["simple"] == {"ex": 100.0, "n": 1}
    assert table["moderate"] == {"ex": 50.0, "n": 2}
    assert table["challenging"] == {"ex": 50.0, "n": 2}
    assert list(table) == ["overall", "simple", "moderate", "challenging"]


def test_retrieval_metrics_by_hand():
    m = retrieval_metrics(RECORDS)
    assert m["n"] == 4  # the unresolvable gold set is left out
    # coverage: yes, yes, no, no (empty retrieval vs {a.x}; case-insensitive compare)
    assert m["retriever_ability"] == pytest.approx(0.5)  # shares are fractions
    assert m["column_precision"] == pytest.approx((1 + 2 / 3 + 1 + 0) / 4)
    assert m["column_recall"] == pytest.approx((1 + 1 + 0.5 + 0) / 4)
    assert m["column_exact_match"] == pytest.approx(0.25)
    assert retrieval_metrics([])["retriever_ability"] is None


def test_generator_ability_tokens_and_alt_routes():
    gen = generator_ability(RECORDS)
    assert gen == {"generator_ability": pytest.approx(100 * 2 / 4), "n": 4}
    tok = token_metrics(RECORDS)
    assert tok["retriever_tokens"] == 30 and tok["generator_tokens"] == 50 and tok["tokens_per_question"] == 80
    alt = alt_route_metrics(RECORDS)
    # 3 correct; one has no resolvable prediction set; of the 2 resolved, 1 is on another route
    assert alt["alt_route_n_correct"] == 3 and alt["alt_route_n_unresolved"] == 1
    assert alt["alt_route_share"] == pytest.approx(0.5)
    assert alt_route_metrics([_record(False, gold=["a.x"], pred=["a.x"])])["alt_route_share"] is None
    summary = summarize(RECORDS)
    assert summary["ex"] == 60.0 and summary["generator_ability_n"] == 4 and summary["retriever_n"] == 4
    assert summary["generator_well_formed"] == 0.6 and summary["ex"] == 60.0  # EX in percent


# ---------------------------------------------------------------------------------------------
# Whole runs on a real database

def _cfg():
    return load_config("tiny", {"eval.max_new_tokens": 48, "engine.hf_batch_size": 8, "eval.workers": 1})


def _tokenizer(texts):
    return train_tiny_tokenizer(texts * 3, vocab_size=400)


def _samples(examples, schemas):
    out = []
    for ex in examples:
        schema = schemas[ex.db_id]
        cols = column_set(ex.sql, schema)
        out.append({"prompt": retriever_messages(schema.to_ddl(), ex.question, style="tiny"),
                    "completion": [{"role": "assistant", "content": retriever_target(cols, "Tables: t.")}]})
        out.append({"prompt": generator_messages(schema.to_ddl(cols), ex.question, style="tiny"),
                    "completion": [{"role": "assistant", "content": generator_target(ex.sql, "Tables: t.")}]})
    return out


def test_random_model_end_to_end_writes_official_files_and_counts_tokens(bird_dir, tmp_path):
    cfg = _cfg()
    examples = list(load_bird(bird_dir / "dev.json", bird_dir / "dev_databases"))
    schemas = schemas_for(examples)
    tok = _tokenizer([q for q, _, _ in QUESTIONS] + [s for _, s, _ in QUESTIONS] + [schemas["concerts"].to_ddl()])
    model = build_tiny_model(tok, hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=64,
                             max_position=1024, seed=0)
    result = evaluate(model, tok, examples, schemas, cfg,
                      EvalOptions(mode="set", stage="random", out_dir=tmp_path, set_name="dev"), progress=False)
    lines = (tmp_path / "predictions.jsonl").read_text().splitlines()
    assert len(lines) == 3
    rec = json.loads(lines[0])
    for key in ("id", "db_id", "retrieved_columns", "pred_sql", "correct", "retriever_tokens", "generator_tokens",
                "gold_columns", "pred_columns", "alt_route"):
        assert key in rec
    assert rec["gold_columns"] == ["singer.age"]
    raw = json.loads((tmp_path / "predict_dev.json").read_text())
    assert sorted(raw) == ["0", "1", "2"] and all(v.endswith(f"{BIRD_SEPARATOR}concerts") for v in raw.values())
    assert len(read_bird_predictions(tmp_path / "predict_dev.json")) == 3
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["n"] == 3 and metrics["stage"] == "random" and metrics["mode"] == "set"
    # Tokens: every generation counted, none longer than the budget, sum per question reported.
    for r in result.records:
        assert 1 <= r["retriever_tokens"] <= 48 and 1 <= r["generator_tokens"] <= 48
    assert metrics["tokens_per_question"] == pytest.approx(
        sum(r["retriever_tokens"] + r["generator_tokens"] for r in result.records) / 3)
    assert metrics["generator_ability_n"] == 3  # the gold-schema pass ran for every question


def _saved_random_model(bird_dir, folder):
    """An untrained tiny model with a tokenizer fitted to the fixture's prompts, saved to `folder`."""
    examples = list(load_bird(bird_dir / "dev.json", bird_dir / "dev_databases"))
    samples = _samples(examples, schemas_for(examples))
    tok = _tokenizer([m["content"] for s in samples for m in s["prompt"] + s["completion"]])
    model = build_tiny_model(tok, hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=64,
                             max_position=1024, seed=0)
    save_tiny(model, tok, folder)
    return model, tok


def test_evaluate_set_loads_a_saved_checkpoint_and_writes_under_the_run(bird_dir, tmp_path):
    cfg = _cfg()
    _saved_random_model(bird_dir, tmp_path / "model")
    eval_set = EvalSet("mini", "bird", str(bird_dir / "dev.json"), "", str(bird_dir / "dev_databases"))
    paths = Paths(profile="test", run=tmp_path / "run", reports=tmp_path / "reports")
    result = evaluate_set(cfg, paths, tmp_path / "model", eval_set, stage="random", progress=False)
    assert result.out_dir == tmp_path / "run" / "eval" / "random" / "mini"
    for name in ("predictions.jsonl", "predict_mini.json", "metrics.json"):
        assert (result.out_dir / name).is_file()
    m = result.metrics
    assert m["set"] == "mini" and m["n"] == 3 and m["mode"] == "set"
    assert list(m["ex_by_difficulty"]) == ["overall", "simple", "moderate", "challenging"]
    # The gold column sets resolve, so retrieval metrics exist even for a model that lists nothing.
    assert m["retriever_n"] == 3 and m["retriever_ability"] is not None
    with pytest.raises(KeyError, match="not in eval.sets"):
        evaluate_set(cfg, paths, tmp_path / "model", "no_such_set", stage="random")


def test_the_sets_of_one_checkpoint_share_one_model_and_one_engine_and_score_as_one_at_a_time(bird_dir, tmp_path,
                                                                                              monkeypatch):
    """Notebooks 05 and 06 evaluate each checkpoint on every set through `evaluate_sets`: one load and one
    engine start per checkpoint (a vLLM engine takes seconds to start), none when every set is read back,
    and the same records as evaluating each set on its own."""
    import dataclasses

    import acesql_lib.evaluation.evaluate as ev

    cfg = _cfg()
    cfg = dataclasses.replace(cfg, eval=dataclasses.replace(cfg.eval, reuse=False))
    _saved_random_model(bird_dir, tmp_path / "model")
    sets = [EvalSet(name, "bird", str(bird_dir / "dev.json"), "", str(bird_dir / "dev_databases"))
            for name in ("first", "second", "third")]
    paths = Paths(profile="test", run=tmp_path / "run", reports=tmp_path / "reports")
    alone = {s.name: evaluate_set(cfg, paths, tmp_path / "model", s, stage="alone", progress=False) for s in sets}
    engines, closed = [], []
    real = ev.make_engine

    def counted(*a, **k):
        engine = real(*a, **k)
        engines.append(engine)
        close = engine.close
        engine.close = lambda: closed.append(engine) or close()
        return engine

    monkeypatch.setattr(ev, "make_engine", counted)
    together = evaluate_sets(cfg, paths, tmp_path / "model", sets, stage="together", progress=False)
    assert list(together) == ["first", "second", "third"]
    assert len(engines) == 1 and closed == engines  # one engine for the three sets, closed at the end
    for name, result in together.items():
        assert result.records == alone[name].records and result.metrics["set"] == name
        assert result.out_dir == tmp_path / "run" / "eval" / "together" / name
    cached = dataclasses.replace(cfg, eval=dataclasses.replace(cfg.eval, reuse=True))
    read_back = evaluate_sets(cached, paths, tmp_path / "model", sets, stage="cached", progress=False)
    assert len(engines) == 1 and all(r.metrics["reused"] for r in read_back.values())  # no load, no engine


def test_an_evaluation_of_the_same_model_and_settings_is_read_back_not_redone(bird_dir, tmp_path, monkeypatch):
    """Notebook 06's full variant is notebook 05's RL model, and a study's seeds share base and SFT: the
    second evaluation under another stage name reads the first back (same records, "reused"), while a
    changed model, setting or questions file, or eval.reuse off, evaluates afresh."""
    import dataclasses
    import os
    import shutil

    import acesql_lib.evaluation.evaluate as ev

    cfg = _cfg()
    model, tok = _saved_random_model(bird_dir, tmp_path / "model")
    questions = tmp_path / "dev.json"
    shutil.copy(bird_dir / "dev.json", questions)
    eval_set = EvalSet("mini", "bird", str(questions), "", str(bird_dir / "dev_databases"))
    paths = Paths(profile="test", run=tmp_path / "run", reports=tmp_path / "reports")
    calls = []
    real = ev.evaluate
    monkeypatch.setattr(ev, "evaluate", lambda *a, **k: calls.append(k["options"].stage) or real(*a, **k))

    first = evaluate_set(cfg, paths, tmp_path / "model", eval_set, stage="rl", progress=False)
    again = evaluate_set(cfg, paths, tmp_path / "model", eval_set, stage="rl_full", progress=False)
    assert calls == ["rl"] and (first.metrics["reused"], again.metrics["reused"]) == (False, True)
    assert again.records == first.records and again.metrics["stage"] == "rl_full"
    assert {k: v for k, v in again.metrics.items() if k not in ("stage", "reused")} == \
        {k: v for k, v in first.metrics.items() if k not in ("stage", "reused")}
    written = json.loads((tmp_path / "run" / "eval" / "rl_full" / "mini" / "metrics.json").read_text())
    assert written["stage"] == "rl_full" and written["reused"] is True
    assert (tmp_path / "run" / "eval" / "rl_full" / "mini" / "predict_mini.json").read_text() == \
        (tmp_path / "run" / "eval" / "rl" / "mini" / "predict_mini.json").read_text()

    evaluate_set(dataclasses.replace(cfg, eval=dataclasses.replace(cfg.eval, max_new_tokens=cfg.eval.max_new_tokens - 1)),
                 paths, tmp_path / "model", eval_set, stage="shorter", progress=False)
    evaluate_set(dataclasses.replace(cfg, eval=dataclasses.replace(cfg.eval, reuse=False)),
                 paths, tmp_path / "model", eval_set, stage="no_reuse", progress=False)
    save_tiny(model, tok, tmp_path / "model")  # rewritten weights: another model for every reuse key
    evaluate_set(cfg, paths, tmp_path / "model", eval_set, stage="rewritten", progress=False)
    db = next((bird_dir / "dev_databases").rglob("*.sqlite"))
    os.utime(db, ns=(db.stat().st_atime_ns, db.stat().st_mtime_ns + 1))  # a rebuilt database
    evaluate_set(cfg, paths, tmp_path / "model", eval_set, stage="database", progress=False)
    questions.write_text(json.dumps(json.loads(questions.read_text())[:2]))
    short = evaluate_set(cfg, paths, tmp_path / "model", eval_set, stage="fewer", progress=False)
    assert calls == ["rl", "shorter", "no_reuse", "rewritten", "database", "fewer"] and short.metrics["n"] == 2
    for entry in (tmp_path / "run" / "eval_cache").iterdir():  # a half-written entry is never read back
        (entry / "predictions.jsonl").write_text("")
    evaluate_set(cfg, paths, tmp_path / "model", eval_set, stage="fewer_again", progress=False)
    assert calls[-1] == "fewer_again"


@pytest.mark.slow
def test_tiny_base_model_dev_ex_is_in_the_base_band(tmp_path):
    """The tiny base model plays Qwen3-8B's part: well formed, some right, room to improve (10-60% EX)."""
    from acesql_lib.config.context import RunContext
    from acesql_lib.pipeline.shipped_base import MANIFEST
    from acesql_lib.pipeline.tinybase import build_tiny_base
    from acesql_lib.data.tinyworld import build_profile_world

    ctx = RunContext.create("tiny", {"run_dir": str(tmp_path / "run")})
    cfg, paths = ctx.cfg, ctx.paths
    world = build_profile_world(cfg.data, paths.tinyworld)
    path = build_tiny_base(cfg, paths, world)
    manifest = json.loads((path / MANIFEST).read_text())
    assert manifest["steps"] == cfg.model.tiny.steps
    assert build_tiny_base(cfg, paths, world) == path  # reused, not retrained
    assert json.loads((path / MANIFEST).read_text())["build_seconds"] == manifest["build_seconds"]
    result = evaluate_set(cfg, paths, path, cfg.eval.sets[0], stage="base")
    # A band, not a value: the claim is the profile's design target for the base (10-60%, docs/status.md), and
    # 1,000 CPU training steps need not end at the same weights on another CPU or thread count.
    assert 10.0 <= result.ex <= 60.0, result.metrics
    assert result.metrics["retriever_well_formed"] > 0.5 and result.metrics["generator_well_formed"] > 0.5


def test_each_role_gets_its_own_evaluation_budget_as_the_authors_scripts(bird_dir, tmp_path):
    """The authors' evaluation gives the retriever 4,096 and the SQL pass 8,192 new tokens in an 8,192-token
    engine (EVAL/single_eval_maj.py); the kit's evaluation passes each role its own budget."""
    from acesql_lib.models.hf_engine import HFEngine
    from acesql_lib.evaluation.evaluate import eval_engine_config

    paper = load_config("paper")
    assert (paper.eval.retriever_max_new_tokens, paper.eval.max_new_tokens, paper.eval.max_model_len) == (4096, 8192, 8192)
    assert eval_engine_config(paper).max_model_len == 8192 and paper.engine.max_model_len == 6144  # training's
    cfg = load_config("tiny", {"eval.max_new_tokens": 40, "eval.retriever_max_new_tokens": 12,
                               "engine.hf_batch_size": 8, "engine.hf_greedy_batch_size": 2, "eval.workers": 1})
    examples = list(load_bird(bird_dir / "dev.json", bird_dir / "dev_databases"))
    schemas = schemas_for(examples)
    tok = _tokenizer([q for q, _, _ in QUESTIONS] + [s for _, s, _ in QUESTIONS] + [schemas["concerts"].to_ddl()])
    model = build_tiny_model(tok, hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=64,
                             max_position=1024, seed=0)
    engine, budgets, sizes = HFEngine.from_config(cfg.engine, model, tok), [], []
    real = engine.generate

    def recording(prompts, n=1, **kw):
        budgets.append(kw["max_new_tokens"])
        sizes.append(len(prompts))
        return real(prompts, n=n, **kw)

    engine.generate = recording
    result = evaluate(model, tok, examples, schemas, cfg,
                      EvalOptions(mode="set", stage="random", out_dir=tmp_path, set_name="dev"), engine=engine,
                      progress=False)
    assert budgets[:2] == [12, 12] and set(budgets[2:]) == {40}  # retriever pass, then the generator passes
    assert sizes == [2, 1] * 3  # each pass's 3 prompts in calls of engine.hf_greedy_batch_size (the greedy batch)
    assert all(r["retriever_tokens"] <= 12 for r in result.records)
    assert any(r["generator_tokens"] > 12 for r in result.records)  # an untrained model runs to its budget


def test_bird_sets_are_scored_by_eval_scoring_and_the_separator_in_sql_cannot_crash(bird_dir, tmp_path):
    """eval.scoring: under "authors" (the paper profile; EVAL/evaluation_maj.py) a prediction without
    SQL runs as no rows and matches a gold with none; under "kit" (tiny) it scores 0. A model SQL that
    holds the BIRD separator is written to predict_dev.json and read back unchanged (it raised)."""
    from acesql_lib.models.completions import Completion, Engine
    from acesql_lib.executor import BIRD_SEPARATOR

    assert load_config("paper").eval.scoring == "authors" and load_config("rehearsal").eval.scoring == "authors"
    assert load_config("tiny").eval.scoring == "kit"
    tricky = f"SELECT name FROM singer -- note{BIRD_SEPARATOR}x"
    records = [{"question_id": 0, "db_id": "concerts", "question": "Who is older than 100?", "evidence": "",
                "SQL": "SELECT name FROM singer WHERE age > 100", "difficulty": "simple"},
               {"question_id": 1, "db_id": "concerts", "question": "Name every singer.", "evidence": "",
                "SQL": "SELECT name FROM singer", "difficulty": "simple"}]
    (tmp_path / "dev.json").write_text(json.dumps(records))
    examples = list(load_bird(tmp_path / "dev.json", bird_dir / "dev_databases"))
    schemas = schemas_for(examples)

    class Fixed(Engine):
        def generate(self, prompts, n=1, temperature=1.0, top_p=1.0, max_new_tokens=256, seed=None):
            return [[Completion("" if "older than 100" in p else f"```sql\n{tricky}\n```", [1], 1, False)] * n
                    for p in prompts]

    tok = _tokenizer([r["question"] for r in records] + [schemas["concerts"].to_ddl()])
    got = {}
    for scoring in ("kit", "authors"):
        cfg = load_config("tiny", {"eval.scoring": scoring, "engine.hf_batch_size": 8, "eval.workers": 1})
        out = tmp_path / scoring
        result = evaluate(None, tok, examples, schemas, cfg,
                          EvalOptions(mode="set", stage="s", out_dir=out, set_name="dev"), engine=Fixed(), progress=False)
        got[scoring] = [r["correct"] for r in result.records]
        assert result.metrics["scoring"] == scoring
        assert read_bird_predictions(out / "predict_dev.json") == {0: ("", "concerts"), 1: (tricky, "concerts")}
    assert got == {"kit": [False, True], "authors": [True, True]}


def test_the_gold_schema_pass_decodes_only_prompts_the_pruned_pass_has_not(bird_dir, tmp_path):
    """Where the retriever's voted set is the gold set, the gold-schema prompt is the pruned pass's prompt, and its
    greedy answer is the one that pass decoded: only the other questions' gold-schema prompts are decoded again,
    and every record holds what decoding each prompt would give."""
    from acesql_lib.models.completions import Completion, Engine
    from acesql_lib.roles.prompts import AUTHORS_EVAL, evaluation_style
    from acesql_lib.train.rollouts import Task, generator_prompt

    cfg = load_config("tiny", {"eval.max_new_tokens": 40, "eval.retriever_max_new_tokens": 12, "eval.workers": 1})
    examples = list(load_bird(bird_dir / "dev.json", bird_dir / "dev_databases"))
    schemas = schemas_for(examples)
    gold = {ex.question: column_set(ex.sql, schemas[ex.db_id]) for ex in examples}
    right = {q for i, q in enumerate(gold) if i != 1}  # the retriever names the gold set for these

    def answer(prompt: str, max_new_tokens: int) -> str:
        if max_new_tokens == 40:  # the generator: an answer that tells its prompt from any other
            return f"```sql\nSELECT {len(prompt)} FROM singer\n```"
        question = next(q for q in gold if q in prompt)
        return retriever_target(sorted(gold[question]) if question in right else ["singer.name", "singer.age"],
                                "", prefilled_think=False)

    calls: list[list[str]] = []

    class ByPrompt(Engine):
        def generate(self, prompts, n=1, temperature=1.0, top_p=1.0, max_new_tokens=256, seed=None):
            calls.append(list(prompts))
            return [[Completion(answer(p, max_new_tokens), [1], 1, False)] * n for p in prompts]

    tok = _tokenizer([q for q, _, _ in QUESTIONS] + [schemas["concerts"].to_ddl()])
    result = evaluate(None, tok, examples, schemas, cfg,
                      EvalOptions(mode="set", stage="s", out_dir=tmp_path, set_name="dev"), engine=ByPrompt(),
                      progress=False)
    style = evaluation_style(cfg.model.prompt_style)
    assert style != AUTHORS_EVAL
    on_gold = {ex.question: generator_prompt(Task(ex, schemas[ex.db_id]), gold[ex.question], tok, style,
                                             cfg.engine.enable_thinking) for ex in examples}
    assert len(calls) == 3 and calls[2] == [on_gold[q] for q in gold if q not in right]
    for r in result.records:
        assert r["retrieved_columns"] == sorted(gold[r["question"]]) or r["question"] not in right
        assert r["gold_schema_sql"] == f"SELECT {len(on_gold[r['question']])} FROM singer"
    assert result.metrics["generator_ability_n"] == 3


# ---------------------------------------------------------------------------------------------
# Prompts over the evaluation engine's context (eval.max_model_len)


LONG_EVIDENCE = "A singer is older than another when the age column holds a larger number. "


def _with_a_long_question(bird_dir, root, extra_rows=0):
    """The fixture's three questions plus question 3, whose evidence makes its prompts long; its gold has no rows
    (the authors' scoring matches an empty prediction to it). `extra_rows` lengthens that evidence."""
    records = json.loads((bird_dir / "dev.json").read_text())
    records.append({"question_id": 3, "db_id": "concerts", "question": "Which singers are older than 100?",
                    "evidence": LONG_EVIDENCE * (8 + extra_rows), "SQL": "SELECT name FROM singer WHERE age > 100",
                    "difficulty": "simple"})
    root.mkdir(parents=True, exist_ok=True)
    (root / "dev.json").write_text(json.dumps(records))
    return list(load_bird(root / "dev.json", bird_dir / "dev_databases"))


def test_a_prompt_over_the_engine_context_scores_0_is_counted_and_named_and_the_rest_is_as_before(
        bird_dir, tmp_path, capsys):
    """A question whose prompt leaves no room in the engine's context (eval.max_model_len) is not generated, scores 0
    (even under the authors' scoring, where an empty prediction matches an empty gold), and is counted and named
    per pass; the batch goes on and every other question's record is the one an evaluation without it gives."""
    budget = 48
    examples = _with_a_long_question(bird_dir, tmp_path / "data")
    schemas = schemas_for(examples)
    tok = _tokenizer([q for q, _, _ in QUESTIONS] + [s for _, s, _ in QUESTIONS] + [schemas["concerts"].to_ddl(),
                                                                                   LONG_EVIDENCE])
    model = build_tiny_model(tok, hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=64,
                             max_position=2048, seed=0)
    overrides = {"eval.max_new_tokens": budget, "engine.hf_greedy_batch_size": 1, "eval.workers": 1,
                 "eval.scoring": "authors"}
    base_cfg = load_config("tiny", overrides)
    lengths = eval_prompt_lengths(examples, schemas, tok, base_cfg)
    context = max(max(pair) for pair in lengths[:3]) + budget + 4  # room for the whole budget of the others
    assert min(lengths[3]) > context, (lengths, context)  # question 3's prompts leave no room at all
    cfg = load_config("tiny", {**overrides, "eval.max_model_len": context})

    result = evaluate(model, tok, examples, schemas, cfg,
                      EvalOptions(mode="set", stage="s", out_dir=tmp_path / "out", set_name="dev"), progress=False)
    alone = evaluate(model, tok, examples[:3], schemas, base_cfg,
                     EvalOptions(mode="set", stage="s", out_dir=tmp_path / "alone", set_name="dev"), progress=False)
    assert base_cfg.eval.max_model_len > context + budget  # the reference evaluation's context holds every prompt
    for got, want in zip(result.records[:3], alone.records):
        assert {k: v for k, v in got.items() if k != "overlong"} == {k: v for k, v in want.items() if k != "overlong"}
        assert got["overlong"] is None
    long = result.records[3]
    assert long["id"] == "3" and long["overlong"] == "retriever" and long["correct"] is False
    assert long["exec_status"] == "overlong" and long["pred_sql"] == "" and long["retrieved_columns"] == []
    assert long["retriever_tokens"] == long["generator_tokens"] == 0
    assert long["gold_schema_correct"] is False  # its gold-schema prompt is over the context too
    m = result.metrics
    assert m["n"] == 4 and m["n_overlong"] == {"retriever": 1, "generator": 0, "gold_schema": 1}
    assert m["overlong_ids"] == {"retriever": ["3"], "generator": [], "gold_schema": ["3"]}
    assert m["max_model_len"] == context
    assert json.loads((tmp_path / "out" / "metrics.json").read_text())["n_overlong"] == m["n_overlong"]
    assert m["ex"] == pytest.approx(sum(r["correct"] for r in alone.records) * 100 / 4)
    out = capsys.readouterr().out
    assert f"over the engine's {context}-token context" in out and "retriever pass: 1 (3)" in out, out
    assert alone.metrics["n_overlong"] == {"retriever": 0, "generator": 0, "gold_schema": 0}


def test_an_answer_that_fills_the_context_is_cut_there_in_both_passes(bird_dir, tmp_path):
    """Prompt + budget over the context: the answer stops where the context is full (what vLLM does), marked
    truncated, the first tokens of the answer a larger context gives; a prompt with no room at all is not
    generated, in the generator pass as in the retriever pass."""
    from acesql_lib.models.hf_engine import HFEngine, HFOptions
    from acesql_lib.roles.prompts import evaluation_style
    from acesql_lib.train.rollouts import SamplingSpec, Task, generate, prompt_tokens, retrieve

    examples = _with_a_long_question(bird_dir, tmp_path / "data")
    schemas = schemas_for(examples)
    tasks = [Task(ex, schemas[ex.db_id]) for ex in examples]
    tok = _tokenizer([q for q, _, _ in QUESTIONS] + [schemas["concerts"].to_ddl(), LONG_EVIDENCE])
    model = build_tiny_model(tok, hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=64,
                             max_position=2048, seed=0)
    engine = HFEngine(model, tok, HFOptions(greedy_batch_size=1))
    cfg = load_config("tiny")
    style = evaluation_style(cfg.model.prompt_style)
    parse = lambda c, t: c  # noqa: E731
    budget = 40
    free = SamplingSpec.greedy(budget, cfg.engine.enable_thinking, prompt_style=style)
    whole = retrieve(tasks[:3], engine, tok, free, parse)
    lengths = [len(prompt_tokens(r.prompts[0], tok)) for r in whole]
    assert all(r.completions[0].n_tokens == budget for r in whole)  # an untrained model runs to its budget
    context = max(lengths) + 10  # 10 to `budget` new tokens of room
    spec = SamplingSpec.greedy(budget, cfg.engine.enable_thinking, context=context, prompt_style=style)
    cut = retrieve(tasks, engine, tok, spec, parse)
    for n, w, c in zip(lengths, whole, cut):
        room = context - n
        assert c.completions[0].token_ids == w.completions[0].token_ids[:room] and c.completions[0].n_tokens == room
        assert c.completions[0].truncated and not c.completions[0].overlong
        assert c.completions[0].text == tok.decode(w.completions[0].token_ids[:room], skip_special_tokens=True)
    assert cut[3].completions[0].overlong and cut[3].completions[0].n_tokens == 0
    assert cut[3].completions[0].text == "" and cut[3].completions[0].token_ids == []
    # the generator pass: question 3's pruned-schema prompt is over the context, the others are cut
    sets = [[frozenset({"singer.name"})]] * 4
    g = generate(tasks, sets, engine, tok, spec, parse)
    g_lengths = [len(prompt_tokens(s.prompts[0], tok)) for s in g]
    assert g_lengths[3] >= context and all(n < context for n in g_lengths[:3])
    assert [s.completions[0].overlong for s in g] == [False, False, False, True]
    assert all(s.completions[0].n_tokens == min(budget, context - n) for s, n in zip(g[:3], g_lengths))


@pytest.mark.parametrize("device", ["cuda", "auto", "cpu"])
def test_stages_that_only_sample_load_the_policy_on_the_cpu_when_vllm_generates(device):
    """Under vLLM the engine reads the checkpoint itself and takes the policy's weights once (make_engine's sync):
    evaluation and distillation load that policy on the CPU, so the GPU holds one copy; the HF engine decodes with
    the policy, which stays on `model.device`."""
    from acesql_lib.models.engines import policy_load_device

    for kind, want in (("vllm", "cpu"), ("hf", device)):
        assert policy_load_device(load_config("tiny", {"engine.kind": kind, "model.device": device})) == want
