"""Self-distillation products on fixed rollout records, and resume after an interrupted run."""
import json
from pathlib import Path

import pytest

from acesql_lib.config.profiles import load_config
from acesql_lib.data.datasets import load_synsql
from acesql_lib.config.data import DataConfig
from acesql_lib.data.task import build_tasks
from acesql_lib.train.distill import build_products, run_distillation, save_products, usable
from acesql_lib.roles.prompts import retriever_messages
from acesql_lib.models.hf_engine import HFEngine
from acesql_lib.models.loading import build_tiny_model, train_tiny_tokenizer
from acesql_lib.data.tinyworld import world_text


@pytest.fixture(scope="module")
def tasks(small_world):
    world = small_world
    return world, build_tasks(load_synsql(world.train_json, world.train_db_root).examples[:6],
                              DataConfig(schema_style="kit", relevant_values=False, n_example_values=0))


def record(task, gen):
    """A distillation record as run_distillation writes it; gen = [(match, columns or None, n_tokens)]."""
    gold = sorted(task.gold_columns)
    return {"qid": task.qid, "gold_columns": gold, "selected": gold,
            "retriever": [{"text": "<think>\nlook\n</think>\n\n```\n[x.y]\n```", "columns": gold, "n_tokens": 9,
                           "well_formed": True}],
            "generator": [{"text": f"<think>\nq{i}\n</think>\n\n```sql\nSELECT 1\n```", "sql": "SELECT 1",
                           "n_tokens": n, "well_formed": True, "match": m, "columns": c}
                          for i, (m, c, n) in enumerate(gen)]}


def test_products_from_fixed_rollouts(tasks):
    _, ts = tasks
    cfg = load_config("tiny", {"distill.n_generator": 4, "distill.rl_min_correct": 1, "distill.rl_max_correct": 3,
                               "distill.n_validation": 1, "distill.trace_choice": "shortest",
                               "distill.sft_excludes_validation": False})
    g0 = sorted(ts[0].gold_columns)
    alt = g0[:-1] + ["alt.col"]
    recs = [record(ts[0], [(True, g0, 30), (True, alt, 20), (True, g0, 25), (False, None, 10)]),  # 3 of 4
            record(ts[1], [(True, sorted(ts[1].gold_columns), 12)] * 4),  # 4 of 4: too easy for RL
            record(ts[2], [(False, None, 5)] * 4),  # 0 of 4: hopeless, no SFT sample
            record(ts[3], [(True, sorted(ts[3].gold_columns), 12), (False, None, 5), (False, None, 5),
                           (False, None, 5)])]  # 1 of 4
    p = build_products(cfg, ts, recs)
    assert p.pass_counts == {ts[0].qid: 3, ts[1].qid: 4, ts[2].qid: 0, ts[3].qid: 1}
    assert {s["role"] for s in p.sft_samples} == {"retriever", "generator"}
    assert len(p.sft_samples) == 2 * 3  # one pair per question with a correct trace
    gen0 = [s for s in p.sft_samples if s["qid"] == ts[0].qid and s["role"] == "generator"][0]
    assert "q1" in gen0["completion"][0]["content"]  # the shortest correct trace (20 tokens)
    ret0 = [s for s in p.sft_samples if s["qid"] == ts[0].qid and s["role"] == "retriever"][0]
    assert "alt.col" in ret0["completion"][0]["content"]  # retriever target = that trace's column set
    # pool: weight = number of correct rollouts per exact set; gold never added by itself
    w = p.pool.weights(ts[0].qid)
    assert w[frozenset(g0)] == 2 and w[frozenset(alt)] == 1
    assert p.pool.weights(ts[2].qid) == {}
    # RL set: correct 1..3 of 4 -> questions 0 and 3; one held out for validation
    assert sorted(p.rl_train + p.rl_validation) == sorted([ts[0].qid, ts[3].qid]) and len(p.rl_validation) == 1
    # alternative routes: correct rollouts whose column set differs from the gold SQL's
    assert p.alt_route_share == pytest.approx(1 / 8)  # 8 correct rollouts (3 + 4 + 1), one on "alt"
    assert p.summary["pass_rate_hist"] == {"0": 1, "1": 1, "2": 0, "3": 1, "4": 1}


def test_validation_questions_are_held_out_of_the_sft_data(tasks):
    _, ts = tasks
    recs = [record(t, [(True, sorted(t.gold_columns), 12), (False, None, 5)]) for t in ts]  # all 1 of 2
    settings = {"distill.n_generator": 2, "distill.rl_min_correct": 1, "distill.rl_max_correct": 1,
                "distill.n_validation": 2}
    held = build_products(load_config("tiny", settings), ts, recs)
    kept = build_products(load_config("tiny", {**settings, "distill.sft_excludes_validation": False}), ts, recs)
    assert len(held.rl_validation) == 2 and held.rl_validation == kept.rl_validation
    assert held.rl_train == kept.rl_train and len(held.rl_train) == len(ts) - 2
    assert {s["qid"] for s in held.sft_samples} == set(held.rl_train)  # validation never trained on
    assert {s["qid"] for s in kept.sft_samples} == {t.qid for t in ts}
    assert held.pool.stats() == kept.pool.stats()  # the pool still counts every correct rollout


def test_unusable_questions_are_counted_and_skipped(tasks, tmp_path):
    world, ts = tasks
    import dataclasses

    bad_db = dataclasses.replace(ts[0].example, id="x1", db_path=str(tmp_path / "missing.sqlite"))
    bad_sql = dataclasses.replace(ts[1].example, id="x2", sql="SELECT nope FROM nowhere")
    from acesql_lib.train.rollouts import Task

    kept, skipped = usable([Task(bad_db, ts[0].schema), Task(bad_sql, ts[1].schema), ts[2]], timeout_s=2)
    assert [t.qid for t in kept] == [ts[2].qid]
    assert skipped == {"missing database": 1, "gold fails": 1}


def test_interrupted_distillation_resumes_from_its_shards(tasks, tmp_path):
    world, ts = tasks
    tok = train_tiny_tokenizer(list(world_text(world))[:3000], vocab_size=400)
    model = build_tiny_model(tok, hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=64)
    engine = HFEngine(model, tok)
    cfg = load_config("tiny", {"distill.n_retriever": 2, "distill.n_generator": 2, "distill.max_new_tokens": 8,
                               "distill.shard_size": 2, "distill.rl_min_correct": 1, "distill.rl_max_correct": 2})
    first = run_distillation(cfg, ts[:4], engine, tok, tmp_path, progress=False)
    shards = sorted((tmp_path / "shards").glob("*/shard-*.jsonl"))
    assert [p.name for p in shards] == ["shard-00000.jsonl", "shard-00001.jsonl"]
    assert [r["qid"] for r in first] == [t.qid for t in ts[:4]]
    # the run was killed during shard 1: only shard 0 is on disk (marked so we can see it is reused)
    shards[1].unlink()
    lines = [json.loads(x) for x in shards[0].read_text().splitlines()]
    lines[0]["marker"] = "from disk"
    shards[0].write_text("".join(json.dumps(x) + "\n" for x in lines))
    again = run_distillation(cfg, ts[:4], engine, tok, tmp_path, progress=False)
    assert again[0].get("marker") == "from disk"  # finished shard read back, not redone
    assert shards[1].exists() and [r["qid"] for r in again] == [t.qid for t in ts[:4]]
    # a shard whose questions no longer match (a different pool) is redone, not trusted
    again = run_distillation(cfg, ts[1:5], engine, tok, tmp_path, progress=False)
    assert "marker" not in again[0] and [r["qid"] for r in again] == [t.qid for t in ts[1:5]]
    # other sampling settings or another model never reuse these shards, and leave them on disk
    hotter = load_config("tiny", {"distill.n_retriever": 2, "distill.n_generator": 2, "distill.max_new_tokens": 8,
                                  "distill.shard_size": 2, "distill.rl_min_correct": 1, "distill.rl_max_correct": 2,
                                  "distill.temperature": 0.3})
    run_distillation(hotter, ts[:2], engine, tok, tmp_path, progress=False)
    run_distillation(cfg, ts[:2], engine, tok, tmp_path, progress=False,
                     model_tag="other-model")
    folders = sorted(p for p in (tmp_path / "shards").iterdir())
    assert len(folders) == 3 and shards[0].exists()
    assert {json.loads((f / "settings.json").read_text())["temperature"] for f in folders} == {0.3, cfg.distill.temperature}


def test_initial_pool_follows_the_grpo_addition_rules(tasks):
    """The SFT-stage pool adds what GRPO's visits would: a match must pass the format gate
    (grpo.pool_add_gate: format), and a SQL naming no column adds nothing (bare_table_columns: none)."""
    _, ts = tasks
    t = ts[0]
    table = sorted(t.gold_columns)[0].split(".")[0]
    g0 = sorted(t.gold_columns)
    rec = record(t, [(True, g0, 30), (True, g0, 20), (True, g0, 25)])
    for gen in rec["generator"][:2]:
        gen["sql"] = t.example.sql
    rec["generator"][1]["format_ok"] = False  # a match whose output fails the format gate
    rec["generator"][2]["sql"] = f'SELECT count(*) FROM "{table}"'  # references no column
    rec["generator"][2]["columns"] = ["anchor.pk"]  # what the kit's primary-key rule had recorded
    authors = load_config("tiny", {"distill.n_generator": 3, "distill.rl_max_correct": 3})
    assert build_products(authors, ts, [rec]).pool.weights(t.qid) == {frozenset(g0): 1}
    kit = load_config("tiny", {"distill.n_generator": 3, "distill.rl_max_correct": 3, "grpo.pool_add_gate": "match",
                               "grpo.bare_table_columns": "anchor"})
    assert build_products(kit, ts, [rec]).pool.weights(t.qid) == {frozenset(g0): 2,
                                                                                frozenset(["anchor.pk"]): 1}


def test_sft_prompts_are_written_in_the_profiles_prompt_style(tasks):
    """SFT prompts are the distillation rollouts' prompts: `model.prompt_style` through SamplingSpec.distill."""
    _, ts = tasks
    cfg = load_config("tiny", {"distill.n_generator": 1, "distill.rl_max_correct": 1})
    recs = [record(ts[0], [(True, sorted(ts[0].gold_columns), 5)])]
    assert cfg.model.prompt_style == "tiny"
    tiny = build_products(cfg, ts, recs).sft_samples
    ex = ts[0].example
    assert [s["prompt"] for s in tiny if s["role"] == "retriever"] == [
        retriever_messages(ts[0].full_ddl, ex.question, ex.evidence, style="tiny")]
    paper = build_products(load_config("tiny", {"distill.n_generator": 1, "distill.rl_max_correct": 1,
                                                "model.prompt_style": "paper"}), ts, recs).sft_samples
    assert [s["prompt"] for s in paper if s["role"] == "retriever"] == [
        retriever_messages(ts[0].full_ddl, ex.question, ex.evidence, style="paper")]
    assert [s["prompt"] for s in paper] != [s["prompt"] for s in tiny]


@pytest.mark.parametrize("rules", [{}, {"grpo.think_rule": "kit", "grpo.retriever_parser": "kit",
                                        "grpo.truncation": "no_stop"}])
def test_stage_one_judges_the_format_by_the_rules_grpo_rewards(tasks, tmp_path, monkeypatch, rules):
    """Distillation's rollouts are judged by GRPO's rules (think rule, retriever parser, truncation, the SQL's
    text, the column-set rule), and a change of rule writes new shards."""
    from acesql_lib.train import distill

    world, ts = tasks
    seen = []
    real = distill.rollout

    def recording(tasks, engine, tokenizer, spec, rules, **kw):
        seen.append({k: getattr(rules, k) for k in ("think_rule", "retriever_parser", "truncation",
                                                    "sql_whitespace", "bare_table_columns")})
        return real(tasks, engine, tokenizer, spec, rules, **kw)

    monkeypatch.setattr(distill, "rollout", recording)
    tok = train_tiny_tokenizer(list(world_text(world))[:3000], vocab_size=400)
    model = build_tiny_model(tok, hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=64)
    cfg = load_config("tiny", {"distill.n_retriever": 1, "distill.n_generator": 1, "distill.max_new_tokens": 4,
                               "distill.shard_size": 2, "distill.rl_min_correct": 0, "distill.rl_max_correct": 1, **rules})
    run_distillation(cfg, ts[:2], HFEngine(model, tok), tok, tmp_path, progress=False)
    g = cfg.grpo
    assert seen == [{"think_rule": g.think_rule, "retriever_parser": g.retriever_parser, "truncation": g.truncation,
                     "sql_whitespace": g.sql_whitespace, "bare_table_columns": g.bare_table_columns}]
    for key, value in (("grpo.think_rule", "kit" if g.think_rule == "authors" else "authors"),
                       ("grpo.sql_whitespace", "collapse"), ("grpo.bare_table_columns", "anchor")):
        other = load_config("tiny", {**rules, key: value})
        assert distill.shard_settings(cfg) != distill.shard_settings(other), key

