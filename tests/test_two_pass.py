"""One two-pass path: `evaluate` runs `rollouts`' phases greedily, and every rollout call samples
by a `SamplingSpec` built from its stage's config (distillation, GRPO, validation, notebook 02)."""
from __future__ import annotations

import json
import math
import re

import pytest

from acesql_lib.config.profiles import load_config
from acesql_lib.data.datasets import load_bird, schemas_for
from acesql_lib.models.hf_engine import HFEngine, HFOptions
from acesql_lib.evaluation.evaluate import EvalOptions, evaluate
from acesql_lib.models.loading import build_tiny_model, train_tiny_tokenizer
from acesql_lib.train.rollouts import RolloutSpec, SamplingSpec, Task, generate, rollout, select
from acesql_lib.data.routes import alternative_route
from helpers_bird import QUESTIONS  # the questions of the `bird_dir` fixture (conftest): a real SQLite BIRD layout
from repo_paths import ROOT as REPO


def test_spec_builders_carry_each_stage_settings_and_seed_rule():
    cfg = load_config("tiny", {"distill.temperature": 0.7, "distill.top_p": 0.9, "grpo.top_p": 0.8,
                               "grpo.val_temperature": 0.6, "engine.enable_thinking": False, "seed": 5,
                               "grpo.seed": 11})
    d, g = cfg.distill, cfg.grpo
    s = SamplingSpec.distill(cfg, shard=3)
    assert (s.n_retriever, s.n_generator, s.temperature, s.top_p, s.max_new_tokens, s.enable_thinking) == (
        d.n_retriever, d.n_generator, 0.7, 0.9, d.max_new_tokens, False)
    assert (s.role_seed("retriever"), s.role_seed("generator")) == (5 * 7919 + 3, 5 * 7919 + 4)
    s = SamplingSpec.grpo(cfg, step=2, rank=1)
    assert (s.n_retriever, s.n_generator, s.temperature, s.top_p, s.max_new_tokens) == (
        g.n_retriever, g.n_generator, g.temperature, 0.8, g.max_response_tokens)
    assert s.seed == 11 * 100_003 + 2 * 101 + 1 and not s.enable_thinking
    s = SamplingSpec.validation(cfg)
    assert (s.n_retriever, s.n_generator, s.temperature, s.top_p, s.seed) == (
        g.val_retriever_samples, g.val_samples, 0.6, 0.8, 18)
    s = SamplingSpec.greedy(48, enable_thinking=False)
    assert (s.n_retriever, s.n_generator, s.temperature, s.seed, s.role_seed("generator")) == (1, 1, 0.0, None, None)
    with pytest.raises(ValueError, match="role"):
        s.role_seed("critic")


def test_notebooks_pass_a_sampling_spec_not_hand_unpacked_settings():
    """Notebook 02's copy had drifted (no top_p, no enable_thinking, its own seed): every rollout
    call in a notebook takes a SamplingSpec, no notebook spells out sampling keywords, and notebook 02
    shows the distillation's sampling as its SamplingSpec."""
    named = set()
    for nb in sorted((REPO / "notebooks").glob("*.ipynb")):
        code = "\n".join("".join(c["source"]) for c in json.loads(nb.read_text())["cells"] if c["cell_type"] == "code")
        if re.search(r"\bSamplingSpec\.(distill|grpo|validation|greedy)\(", code):
            named.add(nb.stem)
        for m in re.finditer(r"\b(?:rollout|generate)\(([^)]*)\)", code):
            args = m.group(1)
            if m.group(0).startswith("rollout"):
                assert "spec" in args.split(",")[3], f"{nb.name}: rollout without a SamplingSpec: {args}"
            for kw in ("temperature=", "top_p=", "max_new_tokens=", "n_retriever=", "n_generator=", "seed=",
                       "enable_thinking="):
                assert kw not in args, f"{nb.name}: a call spells out {kw} by hand"
    assert "02_self_distillation" in named


@pytest.fixture(scope="module")
def tiny(bird_dir):
    examples = list(load_bird(bird_dir / "dev.json", bird_dir / "dev_databases"))
    schemas = schemas_for(examples)
    tok = train_tiny_tokenizer(([q for q, _, _ in QUESTIONS] + [s for _, s, _ in QUESTIONS]
                                + [schemas["concerts"].to_ddl()]) * 3, vocab_size=400)
    model = build_tiny_model(tok, hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=64,
                             max_position=1024, seed=0)
    return examples, schemas, tok, model


def test_evaluate_is_the_rollout_path_run_greedily(tiny, tmp_path):
    """With the kit's parsers on both sides, evaluate's records are exactly what `rollout` gives
    for a greedy one-sample spec: same prompts, decoding, parsing, execution and match rule."""
    examples, schemas, tok, model = tiny
    cfg = load_config("tiny", {"eval.max_new_tokens": 48, "engine.hf_batch_size": 8, "eval.workers": 1,
                               "eval.retriever_parser": "kit", "eval.generator_parser": "kit"})
    engine = HFEngine(model, tok, HFOptions(batch_size=8))
    result = evaluate(model, tok, examples, schemas, cfg, EvalOptions(mode="set", stage="t"), engine=engine,
                      progress=False)
    tasks = [Task(ex, schemas[ex.db_id]) for ex in examples]
    spec = SamplingSpec.greedy(cfg.eval.max_new_tokens, cfg.engine.enable_thinking, prompt_style=cfg.model.prompt_style)
    rules = RolloutSpec(think_rule="kit", retriever_parser="kit", truncation="no_stop", compare_mode="set")
    rolls = rollout(tasks, engine, tok, spec, rules, workers=1)
    assert len(rolls) == len(result.records) == 3
    for r, rec in zip(rolls, result.records):
        assert rec["retrieved_columns"] == sorted(r.selected) == sorted(r.retriever.parses[0].columns)
        assert rec["pred_sql"] == r.generator.parses[0].sql and rec["correct"] == r.matches[0]
        assert rec["exec_status"] == r.exec_status[0]
        assert (rec["retriever_tokens"], rec["generator_tokens"]) == (
            r.retriever.completions[0].n_tokens, r.generator.completions[0].n_tokens)
        assert rec["alt_route"] == alternative_route(rec["correct"], rec["pred_columns"], rec["gold_columns"])
    share = result.metrics["alt_route_share"]
    flags = [rec["alt_route"] for rec in result.records if rec["alt_route"] is not None]
    assert (share is None) == (not flags) and (share is None or math.isclose(share, sum(flags) / len(flags)))


def test_select_and_generate_per_retriever_sample(tiny):
    """per_retriever: generator sample i sees retriever sample i mod N; the voted set is still reported."""
    from acesql_lib.train.rollouts import RoleSamples

    examples, schemas, tok, model = tiny
    a, b = frozenset({"singer.age"}), frozenset({"singer.name"})

    class P:  # a parse exposes `.columns` to the vote
        def __init__(self, cols):
            self.columns = cols

    rs = RoleSamples(["p"] * 2, [None, None], [P(a), P(b)])
    voted, seen = select([rs], n_generator=4, vote_mode="per_retriever")
    assert voted == [a | b] and seen == [[a, b, a, b]]
    voted, seen = select([rs], n_generator=4, vote_mode="majority", vote_threshold=1.0)
    assert voted == [frozenset()] and seen == [[frozenset()]]
    task = Task(examples[0], schemas[examples[0].db_id])
    spec = SamplingSpec(2, 4, 1.0, 1.0, 8, True, 3, prompt_style="tiny")
    out = generate([task], [[a, b, a, b]], HFEngine(model, tok), tok, spec, lambda c, t: c.text)[0]
    assert len(out.prompts) == len(out.completions) == 4 and out.prompts[0] == out.prompts[2] != out.prompts[1]
    with pytest.raises(ValueError, match="n_generator"):
        generate([task], [[a, b]], HFEngine(model, tok), tok, spec, lambda c, t: c.text)


def test_distillation_shards_are_keyed_by_the_same_sampling_spec():
    """The shard folder's settings hold every field of the spec the shards are sampled with, so a
    change of any sampling setting (enable_thinking, top_p included) never reuses old shards."""
    import dataclasses

    from acesql_lib.runtime.reuse_keys import settings_hash
    from acesql_lib.train.distill import shard_settings

    cfg = load_config("tiny")
    settings, spec = shard_settings(cfg), dataclasses.asdict(SamplingSpec.distill(cfg))
    assert {k: settings[k] for k in spec if k != "seed"} == {k: v for k, v in spec.items() if k != "seed"}
    for key, value in (("engine.enable_thinking", not cfg.engine.enable_thinking), ("distill.top_p", 0.5)):
        other = shard_settings(load_config("tiny", {key: value}))
        assert settings_hash(other) != settings_hash(settings), key
