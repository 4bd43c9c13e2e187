"""The rehearsal profile: paper.yaml with only the model, device/dtype, sizes and data roots changed;
the official layouts written from the tiny world; every paper evaluation set loading from them."""
from __future__ import annotations

import fnmatch
import shutil
import json
from pathlib import Path

import pytest
import yaml

from acesql_lib.config.checks import ConfigError
from acesql_lib.config.profiles import CONFIG_DIR, load_config
from acesql_lib.data.datasets import (DatasetError, eval_examples, load_bird, load_spider, load_spider_dk,
                                      load_spider_realistic, load_spider_syn, load_spider_test, load_synsql,
                                      load_tables)
from acesql_lib.data.downloads import OfflineError, download_spider_dk, download_spider_realistic, download_spider_syn
from acesql_lib.data.layouts import MARKER, LayoutError, LayoutRoots, synonym_rewrite, write_layouts
from acesql_lib.data.tinyworld import build_tinyworld

from repo_paths import REAL

DK = REAL / "spider_dk"

# What the rehearsal may change: the model, the device/dtype, sizes, the data roots. Anything else must equal
# paper.yaml, the accelerate launch files included (acesql_lib/train/launch.py rehearses them on CPU).
ALLOWED = [
    "profile",
    "model.base_model", "model.build_tiny", "model.dtype", "model.device", "model.tiny.*",
    "engine.kind", "engine.max_model_len", "engine.gpu_memory_utilization", "engine.hf_batch_size",
    "data.*_dir", "data.layouts_from", "data.layouts_real_spider_dk", "data.tiny_n_train", "data.tiny_n_dev",
    "data.max_train_examples",
    "filtering.target_size", "filtering.per_db_cap",
    "distill.n_retriever", "distill.n_generator", "distill.rl_min_correct", "distill.rl_max_correct",
    "distill.n_validation", "distill.n_rl_train", "distill.max_new_tokens", "distill.shard_size",
    "sft.per_device_batch_size", "sft.effective_batch_size", "sft.gradient_accumulation_steps", "sft.max_steps",
    "sft.max_length", "sft.bf16",
    "sft.logging_steps", "sft.save_steps",
    "grpo.batch_questions", "grpo.n_retriever", "grpo.n_generator", "grpo.max_steps", "grpo.epochs",
    "grpo.max_prompt_tokens", "grpo.max_response_tokens", "grpo.micro_batch_size", "grpo.val_every",
    "grpo.save_every", "grpo.val_samples", "grpo.val_retriever_samples",
    "eval.max_examples", "eval.max_new_tokens", "eval.retriever_max_new_tokens", "eval.max_model_len", "eval.workers",
    "eval.sets.*.path", "eval.sets.*.tables", "eval.sets.*.db_root",  # the data roots, substituted into the paths
]


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(_flat(v, key + "."))
        elif isinstance(v, list) and v and all(isinstance(x, dict) for x in v):  # eval.sets.<i>.<field>
            out.update(_flat({str(i): x for i, x in enumerate(v)}, key + "."))
        else:
            out[key] = v
    return out


def _diff(a, b) -> set[str]:
    fa, fb = _flat(a.to_dict()), _flat(b.to_dict())
    return {k for k in fa.keys() | fb.keys() if fa.get(k) != fb.get(k)}


def test_rehearsal_differs_from_paper_only_in_allowed_keys():
    paper, reh = load_config("paper"), load_config("rehearsal")
    changed = _diff(paper, reh)
    bad = sorted(k for k in changed if not any(fnmatch.fnmatch(k, pat) for pat in ALLOWED))
    assert not bad, f"rehearsal.yaml changes keys outside the allowed ones: {bad}"
    # the evaluation sets are the paper's six, same names, formats and question fields, read from the moved roots
    assert [(s.name, s.format, s.question_field) for s in reh.eval.sets] == \
           [(s.name, s.format, s.question_field) for s in paper.eval.sets]
    assert [s.name for s in paper.eval.sets] == ["bird_dev", "spider_dev", "spider_test", "spider_dk", "spider_syn",
                                                 "spider_realistic"]
    # the list itself is inherited (only the data roots move), so the two files cannot disagree on it
    assert "sets" not in yaml.safe_load((CONFIG_DIR / "rehearsal.yaml").read_text())["eval"]
    for p, r in zip(paper.eval.sets, reh.eval.sets):
        for field in ("path", "tables", "db_root"):
            assert getattr(r, field).startswith("runs/rehearsal/data/"), (r.name, field, getattr(r, field))
            assert Path(getattr(r, field)).name == Path(getattr(p, field)).name
    # what a GPU user runs stays on: the paper's prompt style, example values, comparison modes, phases
    assert reh.model.prompt_style == paper.model.prompt_style == "authors" and reh.data.n_example_values == 2
    assert (reh.distill.compare_mode, reh.grpo.compare_mode) == (paper.distill.compare_mode, paper.grpo.compare_mode)
    assert reh.grpo.gen_schedule_ratio == paper.grpo.gen_schedule_ratio and reh.grpo.pcgrad == paper.grpo.pcgrad
    assert reh.data.world == "synsql" and paper.data.layouts_from == "" and reh.data.layouts_from == "tinyworld"


def test_diff_check_catches_a_drift(tmp_path):
    """The allowed-keys check is not vacuous: a rehearsal that changes the prompt style or gamma fails it."""
    text = (CONFIG_DIR / "rehearsal.yaml").read_text()
    drift = tmp_path / "drift.yaml"
    drift.write_text(text.replace("model:\n", "model:\n  prompt_style: tiny\n", 1)
                     .replace("grpo:\n", "grpo:\n  gamma: 0.7\n", 1)
                     .replace("inherits: paper", f"inherits: {CONFIG_DIR / 'paper.yaml'}"))
    changed = _diff(load_config("paper"), load_config(str(drift)))
    bad = {k for k in changed if not any(fnmatch.fnmatch(k, pat) for pat in ALLOWED)}
    assert bad == {"model.prompt_style", "grpo.gamma"}


def test_inherits_errors_name_the_file(tmp_path):
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text(f"inherits: {b}\n")
    b.write_text(f"inherits: {a}\n")
    with pytest.raises(ConfigError, match="circular"):
        load_config(str(a))
    c = tmp_path / "c.yaml"
    c.write_text("inherits: no_such_profile\n")
    with pytest.raises(ConfigError, match=r"c\.yaml: inherits 'no_such_profile': profile not found"):
        load_config(str(c))
    d = tmp_path / "d.yaml"
    d.write_text("inherits: paper\ngrpo:\n  gammma: 0.5\n")
    with pytest.raises(ConfigError, match="gammma"):
        load_config(str(d))


def test_engine_kind_auto_resolves_to_what_is_installed():
    import importlib.util

    cfg = load_config("rehearsal")
    assert cfg.engine.kind == ("vllm" if importlib.util.find_spec("vllm") else "hf")
    assert load_config("paper").engine.kind == "vllm"


# ---------------------------------------------------------------------------------------------
# Layouts


@pytest.fixture(scope="module")
def layouts(tmp_path_factory, small_world):
    root, world = tmp_path_factory.mktemp("layouts"), small_world
    roots = LayoutRoots(root / "synsql", root / "bird" / "dev_20240627", root / "spider", root / "spider_dk",
                        root / "spider_syn", root / "spider_realistic")
    counts = write_layouts(world, roots, DK)
    return world, roots, counts


def test_layouts_have_the_release_files_and_fields(layouts):
    world, roots, counts = layouts
    assert {p.name for p in roots.synsql.iterdir()} >= {"data.json", "tables.json", "databases"}
    synsql = load_synsql(roots.synsql / "data.json", roots.synsql / "databases")
    assert len(synsql) == counts["synsql"]["questions"] == 60 and not synsql.skipped
    assert set(json.loads((roots.synsql / "data.json").read_text())[0]) == {
        "db_id", "sql_complexity", "question_style", "question", "external_knowledge", "cot", "sql"}

    bird = load_bird(roots.bird_dev / "dev.json", roots.bird_dev / "dev_databases")
    assert len(bird) == 20 and roots.bird_dev.name == "dev_20240627"
    assert all((Path(ex.db_path).parent / "database_description").is_dir() for ex in bird)
    assert set(load_tables(roots.bird_dev / "dev_tables.json")) == {ex.db_id for ex in bird} | set(
        world.read_manifest()["dev_only_databases"]) | {ex.db_id for ex in bird}

    for name in ("dev.json", "test.json", "tables.json", "test_tables.json", "database", "test_database"):
        assert (roots.spider / name).exists(), name
    dev, test = load_spider(roots.spider / "dev.json", roots.spider / "database"), load_spider_test(roots.spider)
    assert len(dev) + len(test) == 20 and len(dev) == 10
    assert all(ex.evidence == "" for ex in dev)  # Spider has no evidence

    dk = load_spider_dk(roots.spider_dk)
    assert len(dk) == 127 + 10 and counts["spider_dk"]["real_questions"] == 127
    assert set(json.loads((roots.spider_dk / "Spider-DK.json").read_text())[0]) == {"type", "db_id", "query", "question"}
    assert {"new_concert_singer", "new_pets_1", "new_orchestra"} <= set(load_tables(roots.spider_dk / "tables.json"))

    syn_rows = json.loads((roots.spider_syn / "dev.json").read_text())
    assert set(syn_rows[0]) == {"db_id", "SpiderQuestion", "SpiderSynQuestion", "query"}
    syn = load_spider_syn(roots.spider_syn, roots.spider / "database")
    assert [ex.question for ex in syn] == [r["SpiderSynQuestion"] for r in syn_rows]  # the question asked
    assert counts["spider_syn"]["rewritten"] > 0
    realistic = load_spider_realistic(roots.spider_realistic, roots.spider / "database")
    assert len(realistic) == 10


def test_layouts_are_reused_and_never_overwrite_foreign_folders(layouts, tmp_path):
    world, roots, _ = layouts
    stamp = (roots.spider / "dev.json").stat().st_mtime_ns
    write_layouts(world, roots, DK)
    assert (roots.spider / "dev.json").stat().st_mtime_ns == stamp  # same settings: reused
    foreign = tmp_path / "spider"
    foreign.mkdir()
    (foreign / "dev.json").write_text("[]")
    with pytest.raises(LayoutError, match=f"{foreign}: not empty and not written by the kit"):
        write_layouts(world, LayoutRoots(roots.synsql, roots.bird_dev, foreign, roots.spider_dk, roots.spider_syn,
                                         roots.spider_realistic), DK)
    assert (foreign / "dev.json").read_text() == "[]" and not (foreign / MARKER).exists()


def test_synonym_rewrite_keeps_case_and_words():
    assert synonym_rewrite("Show the number of members in each city.") == \
        "Display the count of participants in every town."
    assert synonym_rewrite("How old is Ann?") == "How old is Ann?"


def test_every_paper_eval_set_loads_from_the_layouts(layouts):
    _, roots, _ = layouts
    over = {"data.synsql_dir": str(roots.synsql), "data.bird_dev_dir": str(roots.bird_dev),
            "data.spider_dir": str(roots.spider), "data.spider_dk_dir": str(roots.spider_dk),
            "data.spider_syn_dir": str(roots.spider_syn), "data.spider_realistic_dir": str(roots.spider_realistic)}
    cfg = load_config("rehearsal", over)
    sizes = {s.name: len(eval_examples(s)) for s in cfg.eval.sets}
    assert sizes == {"bird_dev": 20, "spider_dev": 10, "spider_test": 10, "spider_dk": 137, "spider_syn": 10,
                     "spider_realistic": 10}
    syn = next(s for s in cfg.eval.sets if s.name == "spider_syn")
    assert syn.question_field == "SpiderSynQuestion"


def test_missing_robustness_set_names_its_download_helper(tmp_path):
    cfg = load_config("paper", {"data.spider_dk_dir": str(tmp_path / "nowhere")})
    dk = next(s for s in cfg.eval.sets if s.name == "spider_dk")
    with pytest.raises(FileNotFoundError, match="download_spider_dk"):
        eval_examples(dk)


@pytest.mark.parametrize("call, layout", [
    (lambda d: download_spider_dk(d, d / "spider"), "Spider-DK.json"),
    (download_spider_syn, "SpiderSynQuestion"),
    (download_spider_realistic, "spider-realistic.json"),
])
def test_robustness_downloads_stop_offline_with_the_layout(tmp_path, monkeypatch, call, layout):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(OfflineError, match=layout):
        call(tmp_path / "dest")
    assert not (tmp_path / "dest").exists()


def test_spider_syn_record_without_its_question_is_reported_and_skipped(tmp_path):
    path = tmp_path / "dev.json"
    path.write_text(json.dumps([{"db_id": "a", "SpiderQuestion": "q", "SpiderSynQuestion": "q2", "query": "SELECT 1"},
                                {"db_id": "a", "SpiderQuestion": "q", "query": "SELECT 1"}]))
    result = load_spider_syn(tmp_path, check_db=False)
    assert [ex.question for ex in result] == ["q2"]
    assert result.skipped == [(1, "field 'SpiderSynQuestion' is missing")]
    path.write_text("{}")
    with pytest.raises(DatasetError, match="dev.json"):
        load_spider_syn(tmp_path, check_db=False)


def test_tables_1_and_3_get_a_row_for_every_paper_set_the_rehearsal_evaluates(tmp_path):
    """Notebook 05 evaluates every eval.sets entry; with the paper's six, Table 1 and the robustness table
    (Table 3) both get this run's numbers, none 'not run'."""
    from acesql_lib.reports import ReportDirs, ReportInputs, build_tables

    cfg = load_config("rehearsal")
    ex = {s.name: 10.0 + i for i, s in enumerate(cfg.eval.sets)}
    metrics = tmp_path / "metrics"
    metrics.mkdir()
    stages = {st: {name: {"ex": v, "n": 8} for name, v in ex.items()} for st in ("base", "sft", "rl")}
    (metrics / "05_evaluation.json").write_text(json.dumps({"stages": stages}))
    dirs = ReportDirs(metrics, tmp_path / "run", tmp_path / "tables", tmp_path / "figures")
    tables = {t.name: t for t in build_tables(cfg, ReportInputs(dirs.metrics, dirs.run))}
    robust = tables["table3_robustness"].rows[-1]
    # each cell is this run's EX with its 95% CI: "13.0 [2.2, 47.1]"
    assert [c.split(" [")[0] for c in robust[-3:]] == [f"{ex[n]:.1f}" for n in ("spider_dk", "spider_syn", "spider_realistic")]
    assert all(" [" in c for c in robust[-3:])
    main = tables["table1_main"]
    row = main.rows[-1]
    for name, label in (("bird_dev", "BIRD dev"), ("spider_dev", "Spider dev"), ("spider_test", "Spider test")):
        assert row[main.columns.index(label)].split(" [")[0] == f"{ex[name]:.1f}"


def _zip(path: Path, files: dict[str, Path | str]) -> Path:
    import zipfile

    with zipfile.ZipFile(path, "w") as z:
        for name, src in files.items():
            if isinstance(src, Path):
                z.write(src, name)
            else:
                z.writestr(name, src)
    return path


def test_robustness_downloads_unpack_the_repository_archives(tmp_path, monkeypatch, layouts):
    """The helpers on local archives shaped like GitHub's (a top folder), as a GPU user gets them."""
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    _, roots, _ = layouts
    dk_zip = _zip(tmp_path / "dk.zip", {
        "Spider-DK-main/Spider-DK.json": DK / "Spider-DK.json", "Spider-DK-main/tables.json": DK / "tables.json",
        **{f"Spider-DK-main/database/{db}/{db}.sqlite": DK / "database" / db / f"{db}.sqlite"
           for db in ("new_concert_singer", "new_pets_1", "new_orchestra")}})
    spider = tmp_path / "spider"
    shutil.copytree(roots.spider / "database", spider / "database")
    rows = json.loads((DK / "Spider-DK.json").read_text()) + [
        {"type": 0, "db_id": "retail", "query": "SELECT 1", "question": "one?"}]  # a db from Spider's folder
    dest = download_spider_dk(tmp_path / "spider_dk", spider, url=dk_zip.as_uri())
    (dest / "Spider-DK.json").write_text(json.dumps(rows))
    dk = load_spider_dk(dest)  # every database present: Spider-DK's own and Spider's, linked in
    assert len(dk) == 128 and Path(dk.examples[-1].db_path).is_file()

    syn_zip = _zip(tmp_path / "syn.zip", {"Spider-Syn-main/Spider-Syn/dev.json": roots.spider_syn / "dev.json",
                                          "Spider-Syn-main/README.md": "x"})
    syn = download_spider_syn(tmp_path / "syn", url=syn_zip.as_uri())
    assert len(load_spider_syn(syn, spider / "database")) == 10
    real = download_spider_realistic(tmp_path / "real", url=(roots.spider_realistic / "spider-realistic.json").as_uri())
    assert len(load_spider_realistic(real, spider / "database")) == 10


def test_tiny_base_trains_on_the_prompts_distillation_shows(tmp_path):
    """The rehearsal's base learns the paper profile's schema text (authors' style, question-relevant
    values first), byte for byte the retriever and generator prompts of distillation; trained on the
    kit's DDL text instead, it got no rollout right."""
    from acesql_lib.data.datasets import load_synsql
    from acesql_lib.data.task import build_tasks
    from acesql_lib.config.paths import Paths
    from acesql_lib.roles.prompts import generator_messages, retriever_messages
    from acesql_lib.pipeline.tinybase import gold_samples, profile_schemas

    cfg = load_config("rehearsal", {"run_dir": str(tmp_path / "run")})
    world = build_tinyworld(tmp_path / "world", seed=cfg.data.seed, n_train=12, n_dev=4)
    pool = list(load_synsql(world.train_json, world.train_db_root))
    paths = Paths.from_config(cfg)
    style = cfg.model.prompt_style  # the authors' training prompts, as the paper profile's
    assert style == "authors"
    samples, skipped = gold_samples(pool, profile_schemas(cfg, paths, pool), style=style)
    tasks = build_tasks(pool, cfg.data, paths.run / "values_index")
    assert skipped == 0 and len(samples) == 2 * len(tasks)
    for task, ret, gen in zip(tasks, samples[::2], samples[1::2]):
        ex = task.example
        assert ret["prompt"] == retriever_messages(task.full_ddl, ex.question, ex.evidence, style=style)
        assert gen["prompt"] == generator_messages(task.schema_text(task.gold_columns), ex.question, ex.evidence,
                                                   style=style)
    assert "CREATE TABLE" in samples[0]["prompt"][-1]["content"]
