import copy

import pytest
import yaml

from acesql_lib.config.context import RunContext
from acesql_lib.config.checks import ConfigError
from acesql_lib.config.profiles import CONFIG_DIR, load_config, parse_overrides, written_config
from acesql_lib.config.settings import Config
from acesql_lib.config.train import GRPOConfig
from acesql_lib.config.paths import Paths


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


def _leaves(mapping: dict, prefix: tuple = ()) -> list[tuple]:
    out = []
    for key, value in mapping.items():
        out += _leaves(value, prefix + (key,)) if isinstance(value, dict) and value else [prefix + (key,)]
    return out


def repeated_keys(path, folder) -> list[str]:
    """The keys of a profile file whose value is the one the profile would have without them: the dataclass
    default, or the resolved value of the profile it inherits. Each key is dropped from a copy of the file (in
    `folder`, under the same name, so the profile's name and what it inherits stay) and the two are compared
    as written (`written_config`); a key whose removal breaks a rule between two settings is no repeat."""
    raw = yaml.safe_load(path.read_text()) or {}
    full = written_config(str(path))
    repeated = []
    for leaf in _leaves(raw):
        if leaf == ("inherits",):
            continue
        without = copy.deepcopy(raw)
        node = without
        for key in leaf[:-1]:
            node = node[key]
        del node[leaf[-1]]
        (folder / path.name).write_text(yaml.safe_dump(without))
        try:
            same = written_config(str(folder / path.name)) == full
        except ConfigError:
            same = False
        repeated += [".".join(leaf)] if same else []
    return repeated


@pytest.mark.parametrize("profile", ["paper", "tiny", "rehearsal"])
def test_no_profile_writes_a_value_it_would_inherit(profile, tmp_path):
    """A value has one home: the paper's settings are the dataclass defaults, and a profile states only what
    differs from them (tiny, paper) or from the profile it inherits (rehearsal from paper)."""
    assert repeated_keys(CONFIG_DIR / f"{profile}.yaml", tmp_path) == []


def test_a_value_written_twice_is_found(tmp_path):
    tiny = yaml.safe_load((CONFIG_DIR / "tiny.yaml").read_text())
    tiny["grpo"]["gamma"] = 0.5  # the default
    tiny["model"]["tiny"]["num_heads"] = 4  # the default, one level deeper
    tiny["eval"]["max_examples"] = 50  # not a default: stays
    rehearsal = yaml.safe_load((CONFIG_DIR / "rehearsal.yaml").read_text())
    rehearsal["model"]["prompt_style"] = "authors"  # what it inherits from paper.yaml
    rehearsal["engine"]["kind"] = "vllm"  # paper's engine, where the rehearsal writes `auto`
    for name, text in (("tiny", tiny), ("rehearsal", rehearsal)):
        (tmp_path / "planted").mkdir(exist_ok=True)
        (tmp_path / "planted" / f"{name}.yaml").write_text(yaml.safe_dump(text))
    (tmp_path / "copies").mkdir()
    assert sorted(repeated_keys(tmp_path / "planted" / "tiny.yaml", tmp_path / "copies")) == [
        "grpo.gamma", "model.tiny.num_heads"]
    assert sorted(repeated_keys(tmp_path / "planted" / "rehearsal.yaml", tmp_path / "copies")) == [
        "engine.kind", "model.prompt_style"]


def test_a_written_config_keeps_the_data_roots_and_load_config_fills_them_in():
    written, loaded = written_config("paper"), load_config("paper")
    assert written.eval.sets[0].path == "{bird_dev_dir}/dev.json"
    assert loaded.eval.sets[0].path == "data/bird/dev_20240627/dev.json"
    assert written.eval == Config().eval  # the six paper sets live in one place: the dataclass default


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
    assert (tiny.schedule, tiny.data_order) == ("kit", "kit")  # the tiny results block is measured with these
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

    def literal(hint):
        if typing.get_origin(hint) is typing.Literal:
            return hint
        return next((lit for a in typing.get_args(hint) if (lit := literal(a)) is not None), None)

    cfg = load_config("tiny")
    for f in dc.fields(Config):
        section = getattr(cfg, f.name)
        if dc.is_dataclass(section):
            for name, hint in typing.get_type_hints(type(section)).items():
                if literal(hint) is not None:  # a choice, a list of choices, a mapping keyed by choices
                    yield f.name, name, typing.get_args(literal(hint))


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

    from acesql_lib.config import choices
    from acesql_lib import executor
    from acesql_lib.train import grpo, pcgrad, rollouts, tracking

    assert pcgrad.PCGRAD_MODES == typing.get_args(choices.PCGradMode)
    assert rollouts.TRUNCATION_RULES == typing.get_args(choices.Truncation)
    assert executor.SCORINGS == typing.get_args(choices.Scoring)
    assert grpo.SCHEDULES == typing.get_args(choices.AuthorsOrKit)
    assert tracking.TRACKERS == typing.get_args(choices.Tracker)
    assert len(list(_choice_fields())) >= 30


def _bounded_fields():
    """Every (section, field, bounds) whose type carries pydantic bounds (PositiveInt, Share, ...), sections
    inside sections included (model.tiny)."""
    import dataclasses as dc
    import typing

    from acesql_lib.config.checks import field_bounds

    def walk(obj, path):
        for name, hint in typing.get_type_hints(type(obj), include_extras=True).items():
            value = getattr(obj, name)
            if dc.is_dataclass(value):
                yield from walk(value, f"{path}.{name}")
            elif bounds := field_bounds(hint):
                yield path, name, bounds

    cfg = load_config("tiny")
    for f in dc.fields(Config):
        if dc.is_dataclass(getattr(cfg, f.name)):
            yield from walk(getattr(cfg, f.name), f.name)


def _value(cfg, section, name):
    for part in section.split("."):
        cfg = getattr(cfg, part)
    return getattr(cfg, name)


BOUNDED = list(_bounded_fields())


def test_the_bounds_are_declared_on_the_fields():
    names = {f"{s}.{n}" for s, n, _ in BOUNDED}
    # every bounded setting declares its bound on its field
    assert {"grpo.gamma", "grpo.val_samples", "grpo.max_prompt_tokens", "data.values_min_match", "sft.warmup_ratio",
            "engine.gpu_memory_utilization", "distill.vote_threshold", "model.tiny.think_extra"} <= names
    assert len(BOUNDED) >= 60


@pytest.mark.parametrize("section,name,bounds", BOUNDED)
def test_every_bound_refuses_a_value_just_outside_it_naming_key_value_and_bound(section, name, bounds):
    current = _value(load_config("tiny"), section, name)
    step = 1 if isinstance(current, int) else 0.5
    outside = []
    if "ge" in bounds:
        outside.append(bounds["ge"] - step)
    if "gt" in bounds:
        outside.append(bounds["gt"])
    if "le" in bounds:
        outside.append(bounds["le"] + step)
    if "lt" in bounds:
        outside.append(bounds["lt"])
    for value in outside:
        value = type(current)(value)
        with pytest.raises(ConfigError) as e:
            load_config("tiny", {f"{section}.{name}": value})
        message = str(e.value)
        assert f"{section}.{name}: {value!r} is out of bounds" in message, message
    inside = bounds.get("ge", bounds.get("gt", 0)) + (step if "gt" in bounds else 0)
    if "le" in bounds or "lt" in bounds:
        inside = min(inside, bounds.get("le", bounds.get("lt", 0)) - (step if "lt" in bounds else 0))
    try:  # a value at the edge is within bounds
        cfg = load_config("tiny", {f"{section}.{name}": type(current)(inside)})
        assert _value(cfg, section, name) == type(current)(inside)
    except ConfigError as other:  # a rule that ties this value to another setting, not its bound
        assert "out of bounds" not in str(other), other


def test_types_are_strict_and_a_section_built_in_code_is_validated_too():
    from acesql_lib.config.data import DataConfig
    from acesql_lib.config.eval import EvalConfig

    with pytest.raises(ConfigError, match=r"grpo.batch_questions: True is not a valid integer"):
        load_config("tiny", {"grpo.batch_questions": True})  # a bool is not a count
    with pytest.raises(ConfigError, match=r"grpo.learning_rate: '1e-6' is not a valid number"):
        GRPOConfig(learning_rate="1e-6")
    with pytest.raises(ConfigError, match=r"grpo.gamma: 1.5 is out of bounds \(must be > 0 and <= 1\)"):
        GRPOConfig(gamma=1.5)
    with pytest.raises(ConfigError, match=r"data.n_example_values: -1 is out of bounds \(must be >= 0\)"):
        DataConfig(n_example_values=-1)
    with pytest.raises(ConfigError, match=r"eval.sets: expected a list of sets, got dict"):
        EvalConfig(sets={"name": "a"})
    assert GRPOConfig(gamma=1).gamma == 1.0 and isinstance(GRPOConfig(gamma=1).gamma, float)  # YAML's 1 for 1.0
