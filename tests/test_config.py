import pytest

from acesql_lib.context import RunContext
from acesql_lib.config import Config, ConfigError, GRPOConfig, load_config, parse_overrides
from acesql_lib.paths import Paths


def test_defaults_are_the_papers():
    c = Config()
    assert (c.grpo.batch_questions, c.grpo.n_retriever, c.grpo.n_generator) == (16, 8, 8)
    assert c.grpo.gamma == 0.5 and c.grpo.kl_coef == 0.001 and c.grpo.clip_eps == 0.2 and c.grpo.dual_clip == 3.0
    assert c.grpo.learning_rate == 1e-6 and c.grpo.gen_schedule_ratio == 0.25 and c.grpo.max_grad_norm == 1.0
    assert (c.grpo.len_penalty_start, c.grpo.len_penalty_end, c.grpo.len_penalty_max) == (512, 2048, 0.5)
    assert c.sft.learning_rate == 2e-5 and c.sft.num_epochs == 2 and c.sft.max_length == 4096
    assert c.distill.rl_min_correct == 2 and c.distill.rl_max_correct == 14 and c.distill.n_validation == 40
    assert c.model.base_model == "Qwen/Qwen3-8B"


@pytest.mark.parametrize("profile", ["tiny", "paper"])
def test_profiles_load(profile):
    cfg = load_config(profile)
    assert cfg.profile == profile
    assert Paths.from_config(cfg).reports.name == profile


def test_paper_profile_equals_defaults_for_the_method():
    """paper.yaml restates the defaults; a drift between them would silently change the recipe."""
    cfg = load_config("paper")
    assert cfg.grpo == GRPOConfig(accelerate_config=cfg.grpo.accelerate_config)
    assert cfg.sft == Config().sft


def write(tmp_path, text):
    p = tmp_path / "p.yaml"
    p.write_text(text)
    return str(p)


def test_unknown_key_names_key_and_file(tmp_path):
    path = write(tmp_path, "grpo:\n  gamaa: 0.3\n")
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert "grpo.gamaa" in str(e.value) and path in str(e.value)


def test_wrong_type_names_key_and_file(tmp_path):
    path = write(tmp_path, "grpo:\n  batch_questions: many\n")
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert "grpo.batch_questions" in str(e.value) and path in str(e.value)


def test_bad_value_names_key_and_file(tmp_path):
    path = write(tmp_path, "grpo:\n  pcgrad: sideways\n")
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert "grpo.pcgrad" in str(e.value) and path in str(e.value)


def test_validation_needs_at_least_one_sample(tmp_path):
    with pytest.raises(ConfigError, match="grpo.val_samples"):
        load_config(write(tmp_path, "grpo:\n  val_samples: 0\n"))


def test_int_accepted_for_float_and_overrides(tmp_path):
    cfg = load_config(write(tmp_path, "grpo:\n  gamma: 1\n"), {"grpo.kl_coef": 0.01, "seed": 3})
    assert cfg.grpo.gamma == 1.0 and isinstance(cfg.grpo.gamma, float)
    assert cfg.grpo.kl_coef == 0.01 and cfg.seed == 3


def test_bad_override_is_named():
    with pytest.raises(ConfigError, match="grpo.nope"):
        load_config("tiny", {"grpo.nope": 1})


def test_missing_profile():
    with pytest.raises(ConfigError, match="profile not found"):
        load_config("no_such_profile")


def test_nested_eval_sets(tmp_path):
    path = write(tmp_path, "eval:\n  sets:\n    - {name: a, format: spider, path: x, tables: y, db_root: z}\n")
    cfg = load_config(path)
    assert cfg.eval.sets[0].format == "spider"
    with pytest.raises(ConfigError, match="format"):
        load_config(write(tmp_path, "eval:\n  sets:\n    - {name: a, format: csv}\n"))


def test_command_line_overrides_parse_as_yaml_and_reach_the_config():
    over = parse_overrides(["grpo.max_steps=4", "model.lora=true", "run_dir=/tmp/x", "grpo.learning_rate=2e-6"])
    assert over == {"grpo.max_steps": 4, "model.lora": True, "run_dir": "/tmp/x", "grpo.learning_rate": 2e-6}
    cfg = load_config("tiny", over)
    assert cfg.grpo.max_steps == 4 and cfg.model.lora is True
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        parse_overrides(["grpo.max_steps"])


def test_eval_set_paths_follow_the_tiny_world_folder():
    default = load_config("tiny").eval.sets[0]
    assert default.path == "data/tinyworld/dev/dev.json" and default.db_root == "data/tinyworld/dev/dev_databases"
    moved = load_config("tiny", {"data.tinyworld_dir": "/elsewhere/world"}).eval.sets[0]
    assert moved.path == "/elsewhere/world/dev/dev.json" and moved.tables == "/elsewhere/world/dev/dev_tables.json"


AUTHORS_SEMANTICS = {"generator_truncation_gate": False, "truncation": "length", "think_rule": "authors",
                     "retriever_parser": "authors", "pool_add_gate": "format", "bare_table_columns": "none",
                     "pcgrad_eps": 1e-12, "pcgrad_max_ratio": 0.3, "retriever_reward": "sparse"}


@pytest.mark.parametrize("profile", ["tiny", "paper"])
def test_profiles_train_and_evaluate_with_the_authors_semantics(profile):
    cfg = load_config(profile)
    assert {k: getattr(cfg.grpo, k) for k in AUTHORS_SEMANTICS} == AUTHORS_SEMANTICS
    assert cfg.eval.retriever_parser == "authors" and cfg.eval.generator_parser == "authors"
    assert {k: getattr(GRPOConfig(), k) for k in AUTHORS_SEMANTICS} == AUTHORS_SEMANTICS


@pytest.mark.parametrize("key,value", [("grpo.truncation", "sometimes"), ("grpo.think_rule", "loose"),
                                       ("grpo.pool_add_gate", "any"), ("grpo.bare_table_columns", "pk"),
                                       ("grpo.pcgrad_eps", -1.0), ("eval.retriever_parser", "regex"),
                                       ("eval.generator_parser", "regex"), ("distill.rl_selection", "base_model"),
                                       ("distill.rl_candidates", -1), ("grpo.schedule", "verl"),
                                       ("grpo.data_order", "shuffled")])
def test_bad_semantics_option_is_named(key, value):
    with pytest.raises(ConfigError, match=key):
        load_config("tiny", overrides={key: value})


def test_the_paper_profile_schedules_and_orders_as_the_authors_and_tiny_keeps_its_own():
    paper, tiny = load_config("paper").grpo, load_config("tiny").grpo
    assert (paper.val_retriever_samples, paper.val_samples) == (8, 8)  # RL/trainer/validation_correct.py
    assert (tiny.val_retriever_samples, tiny.val_samples) == (1, 8)
    assert (paper.schedule, paper.data_order, paper.data_seed) == ("authors", "authors", 1)
    assert (tiny.schedule, tiny.data_order) == ("kit", "kit")  # the tiny README numbers predate the authors' rounding
    assert (GRPOConfig().schedule, GRPOConfig().data_order, GRPOConfig().data_seed) == ("authors", "authors", 1)


def test_rl_questions_are_chosen_by_stage_one_counts_as_the_authors_release_does():
    for profile in ("tiny", "paper"):
        cfg = load_config(profile)
        assert cfg.distill.rl_selection == "stage1"
        assert RunContext.create(profile, {}).paths.rl_data == RunContext.create(profile, {}).paths.distill
    other = RunContext.create("tiny", {"distill.rl_selection": "sft_model"}).paths
    assert other.rl_data == other.run / "rl_select"


def test_ablation_sets_name_configured_sets():
    tiny = load_config("tiny")
    assert [s.name for s in tiny.eval.ablation_eval_sets()] == ["tiny_dev", "tiny_dev_id"]
    assert [s.name for s in load_config("paper").eval.ablation_eval_sets()] == ["bird_dev"]  # §6: BIRD dev only
    with pytest.raises(ConfigError, match="eval.ablation_sets.*nope"):
        load_config("tiny", {"eval.ablation_sets": ["tiny_dev", "nope"]})


def _choice_fields():
    """Every (section, field, allowed values) of a setting whose type is a choice (a Literal in config.py)."""
    import dataclasses as dc
    import typing

    from acesql_lib.config import _choice_adapters

    cfg = load_config("tiny")
    for f in dc.fields(Config):
        section = getattr(cfg, f.name)
        if dc.is_dataclass(section):
            for name in _choice_adapters(type(section)):
                hint = typing.get_type_hints(type(section))[name]
                while typing.get_origin(hint) is not typing.Literal:  # list[Literal] / dict[Literal, float]
                    hint = typing.get_args(hint)[0]
                yield f.name, name, typing.get_args(hint)


@pytest.mark.parametrize("section,name,allowed", list(_choice_fields()))
def test_every_choice_refuses_a_value_outside_its_literal_naming_key_value_and_choices(section, name, allowed):
    current = getattr(getattr(load_config("tiny"), section), name)
    bad = "no-such-choice"
    value = [bad] if isinstance(current, list) else {bad: 1.0} if isinstance(current, dict) else bad
    with pytest.raises(ConfigError) as e:
        load_config("tiny", {f"{section}.{name}": value})
    message = str(e.value)
    assert f"{section}.{name}" in message and repr(bad) in message
    assert all(repr(choice) in message for choice in allowed)
    for choice in allowed:  # and accepts each of its values (the choices a profile may name)
        if isinstance(current, (list, dict)) or choice == current:
            continue
        try:
            load_config("tiny", {f"{section}.{name}": choice})
        except ConfigError as other:  # a rule that ties this choice to another setting, not the choice itself
            assert "is not allowed" not in str(other), other


def test_choices_the_modules_act_on_are_the_configs():
    import typing

    from acesql_lib import config, executor, grpo, pcgrad, rollouts, tracking

    assert pcgrad.PCGRAD_MODES == typing.get_args(config.PCGradMode)
    assert rollouts.TRUNCATION_RULES == typing.get_args(config.Truncation)
    assert executor.SCORINGS == typing.get_args(config.Scoring)
    assert grpo.SCHEDULES == typing.get_args(config.AuthorsOrKit)
    assert tracking.TRACKERS == typing.get_args(config.Tracker)
    assert len(list(_choice_fields())) >= 30
