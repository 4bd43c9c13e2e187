"""Released checkpoints under their own protocols (acesql_lib/evaluation/baselines): the schema text, the prompts byte for
byte against the releases' templates (tests/fixtures/baselines/release_prompts.json, copied from the releases'
repositories), the SQL extraction, the vote, and the whole path on the shipped tiny base model."""
from __future__ import annotations

import json
import sqlite3

import pytest

from acesql_lib.evaluation.baselines import BASELINES, PROTOCOLS, baseline_dir, estimated_hours, last_sql_block, \
    majority_vote, protocol, release_question
from acesql_lib.evaluation.baselines.omnisql_schema import db_details, db_info_from_schema, read_db_infos, sample_values
from acesql_lib.config.eval import EvalSet
from acesql_lib.config.profiles import load_config
from acesql_lib.evaluation.evaluate import evaluate_baseline
from acesql_lib.runtime.jsonfiles import DatasetError
from acesql_lib.models.loading import load_tokenizer
from acesql_lib.config.paths import Paths
from acesql_lib.data.schema import Schema
from repo_paths import FIXTURES, ROOT

RELEASES = json.loads((FIXTURES / "baselines" / "release_prompts.json").read_text())
DK = FIXTURES / "real" / "spider_dk"
TINY_BASE = ROOT / "data" / "tiny_base"


def _quirky_db(tmp_path):
    """A database with what OmniSQL's schema text treats specially: a reserved word, a space, a long string,
    '' and NULL values, a blob, a composite key and a foreign key."""
    db = tmp_path / "shop" / "shop.sqlite"
    db.parent.mkdir()
    conn = sqlite3.connect(db)
    conn.executescript("""
        CREATE TABLE "order items" (id INTEGER, "Order" TEXT, note TEXT, pic BLOB, PRIMARY KEY (id, "Order"));
        CREATE TABLE buyer (buyer_id INTEGER PRIMARY KEY, name TEXT);
        INSERT INTO "order items" VALUES (1, '', NULL, x'0102'), (2, 'it''s', 'abcdefghijklmnopqrstuvwxyzabcdefghijklmnopq', x'03'),
                                         (3, 'x', 'short', NULL);
        INSERT INTO buyer VALUES (7, 'Ann');
    """)
    conn.commit()
    conn.close()
    info = {"db_id": "shop", "table_names_original": ["order items", "buyer"],
            "column_names_original": [[-1, "*"], [0, "id"], [0, "Order"], [0, "note"], [0, "pic"], [1, "buyer_id"],
                                      [1, "name"]],
            "column_names": [[-1, "*"], [0, "id"], [0, "order"], [0, "a note"], [0, "picture"], [1, "buyer id"],
                             [1, ""]],
            "column_types": ["text", "number", "text", "text", "others", "number", "text"],
            "primary_keys": [[1, 2], 5], "foreign_keys": [[1, 5]]}
    return db, info


def test_the_schema_text_follows_omnisql_rules_on_a_hand_built_database(tmp_path):
    db, info = _quirky_db(tmp_path)
    sampled = sample_values(db, info["table_names_original"])
    text = db_details(info, sampled, relevant={"buyer.name": ["Bob", "Ann"]})
    assert text == (
        "CREATE TABLE `order items` (\n"
        "    id number, -- example: [1, 2]\n"
        "    `Order` text, -- example: [\"it's\", 'x']\n"
        "    note text, -- a note, example: ['abcdefghijklmnopqrstuvwxyzabcdefghijklmn', 'short']\n"
        "    pic others, -- picture, example: [b'\\x01\\x02', b'\\x03']\n"
        "    PRIMARY KEY (id, `Order`),\n"
        "    CONSTRAINT fk_order_items_id FOREIGN KEY (id) REFERENCES buyer (buyer_id)\n"
        ");\n\n"
        "CREATE TABLE buyer (\n"
        "    buyer_id number, -- example: [7]\n"
        "    name text, -- example: ['Bob', 'Ann']\n"
        "    PRIMARY KEY (buyer_id)\n"
        ");")


def test_a_set_without_tables_json_is_described_from_its_sqlite_file(tmp_path):
    db, _ = _quirky_db(tmp_path)
    info = db_info_from_schema(Schema.from_sqlite(db))
    text = db_details(info, sample_values(db, info["table_names_original"]))
    assert "CREATE TABLE `order items` (\n    id INTEGER, -- example: [1, 2]\n" in text
    assert "    PRIMARY KEY (id, `Order`)\n);" in text and "    buyer_id INTEGER, -- example: [7]" in text


def test_a_tables_json_entry_without_a_field_is_named_with_its_file(tmp_path):
    bad = tmp_path / "tables.json"
    bad.write_text(json.dumps([{"db_id": "shop", "table_names_original": ["t"]}]))
    with pytest.raises(DatasetError, match=r"tables\.json: entry 0 \(db_id 'shop'\).*column_names_original"):
        read_db_infos(bad)


def _dk_rows():
    rows = json.loads((DK / "Spider-DK.json").read_text())
    return [rows[0], next(r for r in rows if r["db_id"] == "new_pets_1")]


def _dk_details(db_id):
    info = read_db_infos(DK / "tables.json")[db_id]
    return db_details(info, sample_values(DK / "database" / db_id / f"{db_id}.sqlite", info["table_names_original"]))


def _expected_user_text(name, details, question):
    """The user turn rebuilt from the release's own template text (the fixture), not from the kit's."""
    if name in ("omnisql", "sql_r1"):
        return RELEASES[name]["template"].format(db_engine="SQLite", db_details=details, question=question)
    a = RELEASES["arctic"]
    return (a["user_fstring_text"].replace('{data["db_desc"]}', details).replace('{data["question"]}', question)
            .replace("{instruct_info}", a["instruct_info_raw"].strip()).strip())


@pytest.mark.parametrize("name", sorted(PROTOCOLS))
def test_each_release_prompt_is_byte_identical_to_its_template_on_spider_dk_rows(name):
    tokenizer = load_tokenizer(TINY_BASE)
    proto = protocol(name)
    for row in _dk_rows():
        details = _dk_details(row["db_id"])
        messages = [{"role": "user", "content": _expected_user_text(name, details, row["question"])}]
        if name == "arctic":
            messages.insert(0, {"role": "system", "content": RELEASES["arctic"]["system"]})
        kwargs = {"enable_thinking": False} if name == "sql_r1" else {}  # SQL-R1's call for a non-Qwen3 checkpoint
        expected = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False, **kwargs)
        expected += RELEASES["arctic"]["cot_info"] if name == "arctic" else ""
        assert proto.prompt(tokenizer, details, release_question(row["question"])) == expected


def test_the_question_is_evidence_then_question_as_read_on_bird_rows():
    rows = json.loads((FIXTURES / "real" / "bird_subset.json").read_text())
    with_evidence = next(r for r in rows if r["evidence"].strip())
    assert release_question(with_evidence["question"], with_evidence["evidence"]) == \
        with_evidence["evidence"] + "\n" + with_evidence["question"]
    assert release_question("How many?", "  ") == "How many?"


@pytest.mark.parametrize("answer, sql", [
    ("<think>x</think>\n```sql\nSELECT 1;\n```", "SELECT 1;"),
    ("```sql\nSELECT 1\n```\nthen\n```sql\n  SELECT 2  \n```", "SELECT 2"),  # several blocks: the last
    ("no code block here, SELECT 1", ""),  # no block
    ("```sql\nSELECT 1\n```\n```sql\nSELECT 2", "SELECT 1"),  # the last fence never closes: the earlier block
    ("```sql\nSELECT 1\nmore ```sql\nSELECT 2\n```", "SELECT 1\nmore"),  # an unclosed fence swallows up to the next
    ("```SQL\nSELECT 1\n```", ""),  # the releases' pattern is lower-case sql only
    ("```\nSELECT 1\n```", ""),  # a plain fence is no sql block
    ("```sql SELECT name FROM t```", "SELECT name FROM t"),
    ("", ""),
])
def test_the_release_extraction_takes_the_last_closed_sql_block(answer, sql):
    assert last_sql_block(answer) == sql


def test_the_vote_picks_the_most_returned_result_and_its_first_sql(bird_dir):
    db = str(bird_dir / "dev_databases" / "concerts" / "concerts.sqlite")
    older = "SELECT count(*) FROM singer WHERE age > 30"
    same = "SELECT count(*) FROM singer WHERE age >= 31"
    other = "SELECT count(*) FROM singer"
    assert majority_vote([other, older, "SELECT nope", same], db, 5.0) == older  # 2 votes for the same result
    assert majority_vote([other, older], db, 5.0) == other  # a tie: the first sample's
    assert majority_vote(["SELECT nope", "SELEC"], db, 5.0) == "SELECT nope"  # none runs: the first
    # an empty answer runs as no rows (Python's sqlite3), so it votes with an empty result
    empty = "SELECT name FROM singer WHERE age > 100"
    assert majority_vote(["", empty, other], db, 5.0) == ""


def test_an_unknown_baseline_or_decoding_is_named():
    with pytest.raises(ValueError, match="unknown baseline 'gpt'.*omnisql"):
        protocol("gpt")
    with pytest.raises(ValueError, match="decoding 'beam'.*greedy, major_voting"):
        protocol("omnisql").decoding("beam")


def test_the_estimated_hours_scale_with_samples_budget_and_gpus():
    one = estimated_hours("omnisql", 1534)
    assert estimated_hours("omnisql", 1534, decoding="major_voting") == pytest.approx(8 * one)
    assert estimated_hours("arctic", 1534) == pytest.approx(4 * one)  # 8,192 new tokens against 2,048
    assert estimated_hours("omnisql", 1534, gpus=4) == pytest.approx(one / 4)
    assert 0.5 < one < 3  # 1,534 x 2,048 tokens at about 2.2M tokens an hour for one GPU


@pytest.mark.parametrize("name", BASELINES)
def test_each_protocol_evaluates_the_tiny_model_and_writes_ex_with_its_ci(name, bird_dir, tmp_path):
    cfg = load_config("tiny", {"eval.workers": 1, "eval.max_new_tokens": 16, "data.relevant_values": name == "omnisql"})
    paths = Paths(profile="test", run=tmp_path / "run", reports=tmp_path / "reports")
    eval_set = EvalSet("mini", "bird", str(bird_dir / "dev.json"), "", str(bird_dir / "dev_databases"))
    metrics = evaluate_baseline(cfg, paths, name, TINY_BASE, [eval_set], max_new_tokens=16, progress=False)["mini"]
    out = baseline_dir(paths, name, "mini")
    written = json.loads((out / "metrics.json").read_text())
    assert written["baseline"] == name and written["n"] == 3
    assert written["ex_ci_low"] - 1e-9 <= written["ex"] <= written["ex_ci_high"] and written["ex_ci_high"] > 0
    assert written["ex"] == pytest.approx(metrics["ex"])
    records = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert [r["id"] for r in records] == ["0", "1", "2"]
    assert (out / "predict_mini.json").is_file()
    if name == "qwen3-8b":  # the kit's own two-pass evaluation
        assert written["retriever_n"] == 3 and written["protocol_source"].startswith("the kit's")
        return
    proto = protocol(name)
    assert written["n_samples"] == proto.decoding().n and written["max_new_tokens"] == 16
    assert written["release_decoding"] is False and written["release_max_new_tokens"] == proto.max_new_tokens
    assert written["relevant_values"] is (name == "omnisql")
    for r in records:
        assert 1 <= r["generator_tokens"] <= 16 * proto.decoding().n
        if proto.decoding().n == 1:
            assert r["pred_sql"] == last_sql_block(r["answer"])
        else:
            assert len(r["sample_sqls"]) == proto.decoding().n and r["pred_sql"] in r["sample_sqls"]


def _measured(run_dir, name, set_name, n_correct, n=200, tokens=300):
    """A baseline's files as `evaluate_baseline` writes them (its own metrics and writer)."""
    from acesql_lib.evaluation.baselines.run import _describe, _write, baseline_metrics

    records = [{"id": f"dev_{i:03d}", "db_id": "db", "difficulty": "", "question": "q", "pred_sql": "SELECT 1",
                "correct": i < n_correct, "exec_status": "ok", "gold_sql": "SELECT 1", "retriever_tokens": 0,
                "generator_tokens": tokens, "truncated": False, "overlong": None} for i in range(n)]
    proto = protocol(name)
    metrics = {**baseline_metrics(records), **_describe(name, proto.checkpoint, proto, "greedy", proto.decoding("greedy"),
                                                        proto.max_new_tokens, proto.max_model_len)}
    _write(run_dir / "eval" / "baselines" / name / set_name, set_name, metrics, records)


def test_the_tables_put_a_measured_baseline_beside_the_paper_and_name_its_file(tmp_path):
    from acesql_lib.reports import ReportInputs, load_paper_results, table_efficiency, table_main, table_robustness
    from helpers_reports import write_inputs
    from scipy import stats as sps

    dirs = write_inputs(tmp_path)
    _measured(dirs.run, "omnisql", "tiny_dev", 120)
    _measured(dirs.run, "arctic", "tiny_dev", 130, tokens=900)
    cfg, paper = load_config("tiny"), load_paper_results()
    inputs = ReportInputs(dirs.metrics, dirs.run)

    def wilson(k, n):
        ci = sps.binomtest(k, n).proportion_ci(0.95, method="wilson")
        return f"{100 * k / n:.1f} [{100 * ci.low:.1f}, {100 * ci.high:.1f}]"

    main = table_main(cfg, inputs, paper)
    col = main.columns.index("tiny_dev (BIRD format)")
    methods = [r[0] for r in main.rows]
    paper_row, measured = main.rows[methods.index("OmniSQL")], main.rows[methods.index("OmniSQL") + 1]
    assert paper_row[2] == "paper" and paper_row[3].startswith("63.9 [")  # the paper's number as before
    assert measured[0] == "OmniSQL" and measured[1] == "seeklhy/OmniSQL-7B"
    assert measured[2] == "measured by the kit, greedy (runs/eval/baselines/omnisql/<set>/metrics.json)"
    assert measured[col] == wilson(120, 200) and measured[3] == "not measured"
    arctic = main.rows[methods.index("Arctic-Text2SQL-R1-7B")]  # no paper row in Table 1: its own
    assert arctic[col] == wilson(130, 200)
    assert methods.count("SQL-R1") == 1 and "measured by the kit" in " ".join(main.notes)
    eff = table_efficiency(cfg, inputs, paper)
    row = next(r for r in eff.rows if r[0] == "Arctic-Text2SQL-R1-7B")
    assert row[3] == wilson(130, 200) and row[4] == "900.0" and row[5] == "—" and row[6] == "900.0"
    assert (tmp_path / "runs" / "eval" / "baselines" / "arctic" / "tiny_dev" / "metrics.json").is_file()
    # Table 3 has no tiny_dev column: a baseline measured on none of its sets adds no row
    assert [r[0] for r in table_robustness(cfg, inputs, paper).rows] == [r["method"] for r in paper["robustness"]] + [
        "ACE-SQL (this kit)"]
    _measured(dirs.run, "omnisql", "spider_dk", 150, n=535)
    rob = table_robustness(cfg, ReportInputs(dirs.metrics, dirs.run), paper)
    methods = [r[0] for r in rob.rows]
    measured = rob.rows[methods.index("OmniSQL-7B") + 1]
    assert measured[1].startswith("measured by the kit") and measured[2] == wilson(150, 535)
    assert measured[3] == "not measured"


def test_without_a_measurement_the_tables_show_the_papers_rows_as_before(tmp_path):
    from acesql_lib.reports import ReportInputs, load_paper_results, table_efficiency, table_main
    from helpers_reports import write_inputs

    dirs = write_inputs(tmp_path)
    cfg, paper = load_config("tiny"), load_paper_results()
    inputs = ReportInputs(dirs.metrics, dirs.run)
    assert [r[0] for r in table_main(cfg, inputs, paper).rows] == [r["method"] for r in paper["main_results"]] + [
        "ACE-SQL (this kit)"]
    assert all("measured by the kit" not in r[1] for r in table_efficiency(cfg, inputs, paper).rows)


def test_the_command_line_names_a_wrong_baseline_and_a_missing_stage(capsys):
    from acesql_lib.evaluation.evaluate import main

    with pytest.raises(SystemExit):
        main(["--model", "data/tiny_base", "--baseline", "gpt"])
    assert "invalid choice: 'gpt'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--model", "data/tiny_base"])
    assert "--stage is required (or --baseline NAME)" in capsys.readouterr().err


def test_a_spider_set_with_tables_json_gets_the_release_prompt_and_the_spider_compare_mode(tmp_path):
    from acesql_lib.evaluation.baselines.run import _db_infos, release_prompts
    from acesql_lib.evaluation.evaluate import load_eval_set

    cfg = load_config("tiny", {"eval.workers": 1, "eval.max_examples": 4})
    paths = Paths(profile="test", run=tmp_path / "run", reports=tmp_path / "reports")
    dk = EvalSet("dk", "spider", str(DK / "Spider-DK.json"), str(DK / "tables.json"), str(DK / "database"))
    examples, schemas = load_eval_set(cfg, dk)
    tokenizer = load_tokenizer(TINY_BASE)
    prompts = release_prompts(cfg, protocol("omnisql"), tokenizer, examples, _db_infos(dk, schemas), tmp_path)
    rows = json.loads((DK / "Spider-DK.json").read_text())[:4]
    assert prompts == [protocol("omnisql").prompt(tokenizer, _dk_details(r["db_id"]), r["question"]) for r in rows]
    metrics = evaluate_baseline(cfg, paths, "omnisql", TINY_BASE, [dk], max_new_tokens=8, progress=False)["dk"]
    assert (metrics["mode"], metrics["scoring"], metrics["n"]) == ("spider", "kit", 4)


def test_an_unreadable_baseline_file_is_reported_and_left_out(tmp_path):
    from acesql_lib.reports import ReportInputs

    _measured(tmp_path / "runs", "omnisql", "bird_dev", 50, n=100)
    bad = tmp_path / "runs" / "eval" / "baselines" / "arctic" / "bird_dev" / "metrics.json"
    bad.parent.mkdir(parents=True)
    bad.write_text("{not json")
    inputs = ReportInputs(tmp_path / "metrics", tmp_path / "runs")
    assert list(inputs.baselines()) == ["omnisql"] and inputs.baselines()["omnisql"]["bird_dev"]["ex"] == 50.0
    assert any(str(bad) in p and "not valid JSON" in p for p in inputs.problems)
