"""The authors' released data (tests/fixtures/authors: their 40 RL validation rows and their
initial pool of 2,953 questions) read into the kit's pool, RL tasks and SFT samples."""
from __future__ import annotations

import json
import random
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from acesql_lib.authors.initial_pool import pool_from_release, pool_statistics, read_pool
from acesql_lib.authors.release import main as release_main
from acesql_lib.authors.release_files import index_names, pool_key, release_file
from acesql_lib.authors.rl_rows import read_rl_rows, rl_tasks
from acesql_lib.authors.sft_files import read_sft
from acesql_lib.train import pool_init as P
from acesql_lib.config.checks import ConfigError
from acesql_lib.config.profiles import load_config
from acesql_lib.train.distill import load_rl_tasks, load_sft_samples, run_distillation
from acesql_lib.config.paths import Paths
from acesql_lib.roles.pool import ColumnSetPool
from acesql_lib.train.sft import check_samples
from acesql_lib.data.sqlcolumns import column_set

from repo_paths import FIXTURES

AUTHORS = FIXTURES / "authors"
POOL = AUTHORS / "initial_pool.json"
VALIDATION = AUTHORS / "validation.parquet"


def kit_data(n_values: int):
    """Data settings under which a task's schema text is the kit's DDL with `n_values` sampled values."""
    from acesql_lib.config.data import DataConfig

    return DataConfig(schema_style="kit", relevant_values=False, n_example_values=n_values)


@pytest.fixture(scope="module")
def released():
    """The raw JSON parsed here, independently of the module, and the module's reading of it."""
    plain = json.loads(POOL.read_text())
    raw, report = read_pool(POOL)
    return plain, raw, report


@pytest.fixture(scope="module")
def rows():
    rows, report = read_rl_rows(VALIDATION)
    assert report.total == 40 and not report.skipped
    return rows


def indices(text: str) -> frozenset[int]:
    return frozenset(int(x) for x in text.split(","))


# --- the pool file ---------------------------------------------------------------------------


def test_pool_file_reads_every_question_with_its_exact_weights(released):
    plain, raw, report = released
    assert len(raw) == len(plain) == 2953 and report.kept == 2953 and not report.skipped
    for key in random.Random(0).sample(sorted(plain), 200):
        assert raw[key] == {indices(s): float(w) for s, w in plain[key].items()}
    key = next(k for k in plain if k.startswith("3d_object_positioning_and_animation_data||Find the scene IDs"))
    assert raw[key][frozenset({1, 2, 12, 13, 20})] == 6.0000005454545455  # a rescaled weight, kept to the bit


def test_all_2953_questions_load_into_a_column_set_pool(released):
    plain, raw, _ = released
    top = max(i for sets in raw.values() for s in sets for i in s)
    names = [None] + [f"t.c{i}" for i in range(1, top + 1)]
    pool, counts = pool_from_release(raw, {k: (f"q{n}", names, ()) for n, k in enumerate(sorted(raw))})
    assert len(pool) == 2953 and counts["questions_loaded"] == 2953 and counts["released_questions_not_used"] == 0
    for n, key in enumerate(sorted(plain)[:300]):
        want = {frozenset(f"t.c{i}" for i in indices(s)): float(w) for s, w in plain[key].items()}
        assert pool.weights(f"q{n}") == want


def test_pool_statistics_say_how_gold_enters(released, rows):
    _, raw, _ = released
    s = pool_statistics(raw, rows)
    assert (s["questions"], s["entries"]) == (2953, 5009)
    assert (s["integer_weights"], s["half_weights"], s["fractional_weights"]) == (4159, 471, 379)
    assert s["questions_with_a_half_weight"] == 471 and s["questions_with_two_half_weights"] == 0
    assert s["questions_rescaled"] == 250
    # the gold set is in the pool of every validation question: at 0.5 where no rollout used it
    assert (s["rows_gold_absent"], s["rows_gold_at_half"], s["rows_gold_at_rollout_count"]) == (0, 8, 32)
    assert s["rows_total_is_pool_correct_sum"] == 40


def test_malformed_pool_entries_are_reported_and_skipped(tmp_path):
    bad = {"db||good question": {"1,2": 3, "4": 0.5},
           "no separator here": {"1": 1},
           "db||bad set": {"1,x": 2},
           "db||negative": {"1": -1},
           "db||boolean": {"1": True},
           "db||not a mapping": [1, 2]}
    path = tmp_path / "pool.json"
    path.write_text(json.dumps(bad))
    raw, report = read_pool(path)
    assert raw == {"db||good question": {frozenset({1, 2}): 3.0, frozenset({4}): 0.5}}
    assert report.total == 6 and len(report.skipped) == 5
    reasons = dict(report.skipped)
    assert "db_id||question" in reasons["'no separator here'"] and "'1,x'" in reasons["'db||bad set'"]
    assert "-1" in reasons["'db||negative'"] and "True" in reasons["'db||boolean'"]
    path.write_text("[1, 2")
    with pytest.raises(ValueError, match="pool.json: not valid JSON"):
        read_pool(path)


def test_a_parquet_copy_of_the_pool_reads_the_same(tmp_path, released):
    plain, raw, _ = released
    keys = sorted(plain)[:50]
    per_question = [{"pool_key": k, "column_sets": json.dumps(plain[k])} for k in keys]
    pq.write_table(pa.Table.from_pylist(per_question), tmp_path / "a.parquet")
    per_set = [{"question_key": k, "column_set": [int(x) for x in s.split(",")], "weight": float(w)}
               for k in keys for s, w in plain[k].items()]
    pq.write_table(pa.Table.from_pylist(per_set), tmp_path / "b.parquet")
    for name in ("a.parquet", "b.parquet"):
        got, report = read_pool(tmp_path / name)
        assert got == {k: raw[k] for k in keys} and report.kept == 50
    pq.write_table(pa.Table.from_pylist([{"pool_key": keys[0], "note": "x"}]), tmp_path / "c.parquet")
    with pytest.raises(ValueError, match=r"c.parquet: row 0: no question key with its column sets"):
        read_pool(tmp_path / "c.parquet")


# --- the RL rows -----------------------------------------------------------------------------


def test_validation_rows_load_into_rl_tasks(rows):
    tasks = rl_tasks(rows, kit_data(2))
    assert len(tasks) == 40 and len({t.qid for t in tasks}) == 40
    for r, t in zip(rows, tasks):
        assert t.qid == pool_key(r.example.db_id, r.example.question) == r.key
        assert t.example.sql == r.example.sql and t.example.evidence == r.example.evidence
        assert [x.name for x in t.schema.tables] == r.db_info["table_names_original"]
        assert len(t.schema.columns()) == len(r.db_info["column_names_original"]) - 1
        assert index_names(t.schema) == r.column_names
    assert sum(bool(t.example.evidence) for t in tasks) == 11
    first = tasks[0]
    assert first.schema.table("participants").columns[0].examples == rows[0].sampled_values["participants.participant_id"]
    assert "example: ['nih12345', 'nih67890']" in first.full_ddl


def test_gold_column_indices_name_the_gold_sqls_column_set(rows):
    """The index convention: positions in column_names_original, '*' at 0."""
    tasks = rl_tasks(rows, kit_data(0))
    agree = sum(column_set(t.example.sql, t.schema) == r.gold_columns for r, t in zip(rows, tasks))
    assert agree == 40
    assert rows[0].gold_columns == {"participants.participant_id", "participants.age", "age_data.participant_id",
                                    "age_data.age_group", "alcohol_consumption.participant_id",
                                    "alcohol_consumption.collection_site"}


def test_release_pool_for_the_validation_questions_by_name(released, rows):
    plain, raw, _ = released
    tasks = rl_tasks(rows, kit_data(0))
    pool, counts = pool_from_release(raw, P.pool_questions(tasks, {r.example.db_id: r.column_names for r in rows}))
    assert counts == {"questions_loaded": 40, "released_questions_not_used": 2913}
    for r in rows:
        names = r.column_names
        want = {frozenset(names[i] for i in indices(s)): float(w) for s, w in plain[r.key].items()}
        assert pool.weights(r.key) == want
        assert sum(want.values()) == r.pool_stats["pool_correct_sum"]
        assert pool.gold(r.key) == r.gold_columns
    assert pool.weights(rows[0].key)[rows[0].gold_columns] == 0.5


def test_the_released_pool_trains_like_any_pool(tmp_path, released, rows):
    """Visit, decay and add on a loaded released pool; it survives a save and load unchanged."""
    _, raw, _ = released
    tasks = rl_tasks(rows[:1], kit_data(0))
    pool, _ = pool_from_release(raw, P.pool_questions(tasks, {rows[0].example.db_id: rows[0].column_names}))
    key, gold = rows[0].key, rows[0].gold_columns
    alt = next(s for s in pool.weights(key) if s != gold)
    assert pool.targets(key) == [alt]  # 11 rollouts used another route than the gold SQL (age_data.age)
    pool.save(tmp_path / "pool.json")
    assert ColumnSetPool.load(tmp_path / "pool.json", gamma=0.5).weights(key) == pool.weights(key)
    assert pool.visit(key) == [alt] and pool.weights(key) == {alt: 5.5, gold: 0.25}
    pool.add_matches(key, [gold] * 6)
    assert pool.targets(key) == [gold] and pool.weights(key)[gold] == 6.25


def test_malformed_rl_rows_are_reported_and_skipped(tmp_path):
    table = pq.read_table(VALIDATION).to_pylist()[:5]
    table[1]["reward_model"]["ground_truth"]["gold_column_indices"] = []
    table[2]["extra_info"]["db_info"] = "{not json"
    table[3]["reward_model"]["ground_truth"]["gold_column_indices"] = [0, 99999]  # '*' and past the end
    path = tmp_path / "rows.parquet"
    pq.write_table(pa.Table.from_pylist(table), path)
    rows, report = read_rl_rows(path, db_root=tmp_path / "databases")
    assert [r.key for r in rows] == [pool_key(t["reward_model"]["ground_truth"]["db_id"],
                                                t["reward_model"]["ground_truth"]["question"]) for t in table[::4]]
    assert report.total == 5 and [i for i, _ in report.skipped] == ["1", "2", "3"]
    reasons = [why for _, why in report.skipped]
    assert "gold_column_indices" in reasons[0] and "extra_info.db_info" in reasons[1] and "index 0" in reasons[2]
    db_id = rows[0].example.db_id
    assert rows[0].example.db_path == str(tmp_path / "databases" / db_id / f"{db_id}.sqlite")
    (tmp_path / "broken.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(ValueError, match="broken.parquet: not a readable parquet file"):
        read_rl_rows(tmp_path / "broken.parquet")


# --- SFT files -------------------------------------------------------------------------------


ALPACA = [
    {"instruction": "Task: pick columns.\nQuestion: how many?", "input": "", "output": "<think>\ncount\n</think>\n```\n[t.a]\n```"},
    {"instruction": "Write SQL.", "input": "Schema: CREATE TABLE t (a INT);", "output": "<think>x</think>\n```sql\nSELECT a FROM t\n```"},
    {"instruction": "Second turn.", "system": "You are precise.", "history": [["first?", "first."]],
     "output": "<think>y</think>\nanswer"},
    {"instruction": "", "output": "<think>z</think>"},  # empty instruction
    {"instruction": "no output"},
    "not an object",
]


def test_alpaca_records_become_sft_samples(tmp_path):
    path = tmp_path / "domain2_alpaca_think.json"
    path.write_text(json.dumps(ALPACA))
    samples, report = read_sft(path, "generator")
    assert report.total == 6 and [i for i, _ in report.skipped] == ["3", "4", "5"]
    assert "'instruction'" in report.skipped[0][1] and "'output'" in report.skipped[1][1]
    assert [s["role"] for s in samples] == ["generator"] * 3
    assert samples[0]["prompt"] == [{"role": "user", "content": ALPACA[0]["instruction"]}]
    assert samples[1]["prompt"][0]["content"] == "Write SQL.\nSchema: CREATE TABLE t (a INT);"
    assert [m["role"] for m in samples[2]["prompt"]] == ["system", "user", "assistant", "user"]
    assert samples[1]["completion"] == [{"role": "assistant", "content": ALPACA[1]["output"]}]
    assert len(check_samples(samples)) == 3  # what the SFT trainer accepts
    pq.write_table(pa.Table.from_pylist(ALPACA[:2]), tmp_path / "train.parquet")  # the hub's layout
    again, _ = read_sft(tmp_path / "train.parquet", "retriever")
    assert [s["prompt"] for s in again] == [s["prompt"] for s in samples[:2]]


# --- gold-seeded initialisation --------------------------------------------------------------


def test_seed_gold_adds_the_gold_set_at_half_only_where_no_rollout_used_it():
    gold = {"used": {"t.a", "t.b"}, "unused": {"t.a"}, "none": {"t.c"}, "no_gold": ()}
    rollouts = {"used": [{"t.a", "t.b"}, {"t.a", "t.b"}, {"t.b"}], "unused": [{"t.a", "t.d"}], "none": [],
                "no_gold": [{"t.x"}]}
    pool, seeded = P.seed_gold(ColumnSetPool.from_rollouts(rollouts, gold))
    assert seeded == 2
    assert pool.weights("used") == {frozenset({"t.a", "t.b"}): 2.0, frozenset({"t.b"}): 1.0}
    assert pool.weights("unused") == {frozenset({"t.a", "t.d"}): 1.0, frozenset({"t.a"}): 0.5}
    assert pool.weights("none") == {frozenset({"t.c"}): 0.5}
    assert pool.weights("no_gold") == {frozenset({"t.x"}): 1.0}
    # a rollout set always outweighs the seed; with no rollout the gold set is the target
    assert pool.targets("unused") == [frozenset({"t.a", "t.d"})] and pool.targets("none") == [frozenset({"t.c"})]
    pool.visit("used")
    with pytest.raises(ValueError, match="already visited"):
        P.seed_gold(pool)


def test_seed_gold_rebuilds_the_released_pool_of_the_validation_questions(released, rows):
    """Take the 0.5 gold seeds out of the released pool (what plain SFT counts would give) and seed
    again: the released pool comes back on all 40 rows."""
    _, raw, _ = released
    tasks = rl_tasks(rows, kit_data(0))
    pool, _ = pool_from_release(raw, P.pool_questions(tasks, {r.example.db_id: r.column_names for r in rows}))
    data = pool.to_dict()
    for q in data["questions"].values():
        q["sets"] = [s for s in q["sets"] if not (s[1] == 0.5 and sorted(s[0]) == q["gold"])]
    rebuilt, seeded = P.seed_gold(ColumnSetPool.from_dict(data, gamma=0.5))
    assert seeded == 8
    assert all(rebuilt.weights(r.key) == pool.weights(r.key) for r in rows)


# --- the profile's settings ------------------------------------------------------------------


@pytest.fixture
def release(tmp_path):
    """A release folder in the GitHub layout: 30 rows as 'train', 10 as 'validation', the pool, SFT files."""
    root = tmp_path / "release"
    (root / "RL" / "data").mkdir(parents=True)
    (root / "SFT" / "data").mkdir(parents=True)
    table = pq.read_table(VALIDATION)
    pq.write_table(table.slice(0, 30), root / "RL" / "data" / "train.parquet")
    pq.write_table(table.slice(30, 10), root / "RL" / "data" / "validation.parquet")
    shutil.copy(POOL, root / "RL" / "data" / "initial_pool.json")
    (root / "SFT" / "data" / "domain1_alpaca_think.json").write_text(json.dumps(ALPACA[:1]))
    (root / "SFT" / "data" / "domain2_alpaca_think.json").write_text(json.dumps(ALPACA[:3]))
    return root


def authors_cfg(tmp_path, release, **extra):
    over = {"run_dir": str(tmp_path / "run"), "data.stage1_source": "authors",
            "data.authors_release_dir": str(release), "data.synsql_dir": str(tmp_path / "synsql"), **extra}
    cfg = load_config("paper", over)
    return cfg, Paths.from_config(cfg)


def test_stage1_source_authors_gives_their_tasks_sft_samples_and_pool(tmp_path, release, released):
    plain = released[0]
    cfg, paths = authors_cfg(tmp_path, release)
    train, val = load_rl_tasks(cfg, paths)
    assert (len(train), len(val)) == (30, 10)
    assert train[0].example.db_path == str(tmp_path / "synsql" / "databases" / train[0].example.db_id /
                                          f"{train[0].example.db_id}.sqlite")
    samples = load_sft_samples(paths.distill, cfg)
    assert [s["role"] for s in samples] == ["retriever", "generator", "generator", "generator"]
    pool = P.initial_pool(cfg, paths, [*train, *val])
    assert len(pool) == 40
    t = val[-1]
    names = index_names(t.schema)
    assert pool.weights(t.qid) == {frozenset(names[i] for i in indices(s)): float(w) for s, w in plain[t.qid].items()}
    static = P.initial_pool(load_config("paper", {**authors_over(tmp_path, release), "grpo.pool_init": "static_gold"}),
                            paths, [*train, *val])
    assert static.targets(t.qid) == [t.gold_columns]
    with pytest.raises(ValueError, match="union"):
        P.initial_pool(load_config("paper", {**authors_over(tmp_path, release), "grpo.pool_init": "union"}),
                       paths, train)
    with pytest.raises(RuntimeError, match="nothing to distil"):
        run_distillation(cfg, train, None, None, tmp_path / "distill")


def authors_over(tmp_path, release):
    return {"run_dir": str(tmp_path / "run"), "data.stage1_source": "authors", "data.authors_release_dir": str(release)}


def test_pool_init_authors_file_with_other_questions_is_a_clear_error(tmp_path, release, rows):
    cfg = load_config("paper", {"grpo.pool_init": "authors_file",
                                "grpo.authors_pool_file": str(release / "RL" / "data" / "initial_pool.json")})
    tasks = rl_tasks(rows[:3], kit_data(0))
    pool = P.initial_pool(cfg, Paths.from_config(cfg), tasks)  # their questions, by db_id||question
    assert pool.weights(tasks[0].qid)[rows[0].gold_columns] == 0.5
    for t in tasks:
        t.example.question += " (reworded)"
    with pytest.raises(ValueError, match="none of the 3 RL questions has an entry"):
        P.initial_pool(cfg, Paths.from_config(cfg), tasks)


def test_sft_rollouts_plus_gold_seeds_the_distilled_pool(tmp_path):
    cfg = load_config("tiny", {"run_dir": str(tmp_path / "run")})
    assert cfg.grpo.pool_init == "sft_rollouts_plus_gold"
    paths = Paths.from_config(cfg)
    ColumnSetPool.from_rollouts({"a": [{"t.x"}], "b": []}, {"a": {"t.y"}, "b": {"t.z"}}).save(paths.distill / "pool.json")
    pool = P.initial_pool(cfg, paths, [])
    assert pool.weights("a") == {frozenset({"t.x"}): 1.0, frozenset({"t.y"}): 0.5}
    assert pool.targets("b") == [frozenset({"t.z"})]
    plain = P.initial_pool(load_config("tiny", {"run_dir": str(tmp_path / "run"), "grpo.pool_init": "sft_rollouts"}),
                           paths, [])
    assert plain.weights("a") == {frozenset({"t.x"}): 1.0} and plain.targets("b") == []


def test_release_settings_are_checked(tmp_path):
    with pytest.raises(ConfigError, match="data.stage1_source"):
        load_config("paper", {"data.stage1_source": "theirs"})
    with pytest.raises(ConfigError, match="needs data.world 'synsql'"):
        load_config("tiny", {"data.stage1_source": "authors"})
    with pytest.raises(ConfigError, match="grpo.pool_init"):
        load_config("paper", {"grpo.pool_init": "gold_plus"})
    with pytest.raises(FileNotFoundError, match="download_acesql_release"):
        release_file(tmp_path, "rl_train")
    assert release_file(AUTHORS, "pool") == POOL and release_file(AUTHORS, "rl_validation") == VALIDATION
    hub = tmp_path / "hub" / "data" / "rl"  # the hub dataset's layout
    hub.mkdir(parents=True)
    shutil.copy(VALIDATION, hub / "validation.parquet")
    assert release_file(tmp_path / "hub", "rl_validation") == hub / "validation.parquet"


def test_command_line_writes_the_sft_jsonl_the_sft_launcher_reads(tmp_path, release, capsys):
    from acesql_lib.train.sft import read_samples

    out = tmp_path / "sft_samples.jsonl"
    release_main(["--config", "paper", "--set", f"data.authors_release_dir={release}", "--write-sft", str(out),
                  "--pool-stats"])
    assert [s["role"] for s in read_samples(out)] == ["retriever", "generator", "generator", "generator"]
    printed = capsys.readouterr().out
    stats = json.loads(printed[printed.index("{"):])
    assert stats["questions"] == 2953 and stats["rows"] == 10 and stats["rows_gold_absent"] == 0
