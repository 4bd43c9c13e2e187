"""The BIRD scoring command against a reimplementation of the official evaluator's rule, on the
tiny world's BIRD-format dev set and on a database with results beyond 100,000 rows."""
import json
import sqlite3
import subprocess
import sys

import pytest

from acesql_lib.executor import BIRD_SEPARATOR, BirdFiles, main, score_bird, write_bird_predictions
from acesql_lib.data.tinyworld import build_tinyworld


def official_verdict(pred: object, gold: str, db_path: str) -> int:
    """BIRD evaluation.py: a null prediction becomes " ", both SQLs run (fetchall, no cap) and the
    verdict is set(pred) == set(gold); any exception scores 0."""
    sql = pred if isinstance(pred, str) else " "
    try:
        con = sqlite3.connect(db_path)
        cur = con.cursor()
        cur.execute(sql)
        p = cur.fetchall()
        cur.execute(gold)
        g = cur.fetchall()
        con.close()
        return int(set(p) == set(g))
    except Exception:  # noqa: BLE001 - the official rule
        return 0


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return build_tinyworld(tmp_path_factory.mktemp("birdcmd") / "world", seed=0, n_train=40, n_dev=60)


def prediction_kinds(gold: str, i: int) -> list[str]:
    body = gold.rstrip().rstrip(";")
    return [gold, f"SELECT * FROM ({body}) UNION ALL SELECT * FROM ({body})",  # duplicates: a set match
            f"SELECT * FROM ({body}) LIMIT 1", "SELECT 1", "SELECT nope FROM nowhere", f"{body} -- {i}",
            f"SELECT DISTINCT * FROM ({body})", "DELETE FROM sqlite_master"]


def test_verdicts_agree_with_the_official_rule_on_the_tiny_world(world, tmp_path):
    dev = json.loads(world.dev_json.read_text())
    kinds = len(prediction_kinds("SELECT 1", 0))
    gold, preds, db_ids = [], [], []
    for i, rec in enumerate(dev):
        for k, sql in enumerate(prediction_kinds(rec["SQL"], i)):
            gold.append({**rec, "question_id": len(gold)})
            preds.append(sql)
            db_ids.append(rec["db_id"])
    (tmp_path / "dev.json").write_text(json.dumps(gold))
    write_bird_predictions(tmp_path / "predict_dev.json", preds, db_ids)
    report = score_bird(BirdFiles(tmp_path / "predict_dev.json", tmp_path / "dev.json", world.dev_db_root),
                        progress=False)
    ours = [int(s.correct) for s in report.scores]
    theirs = [official_verdict(p, g["SQL"], str(world.dev_db_root / g["db_id"] / f"{g['db_id']}.sqlite"))
              for p, g in zip(preds, gold)]
    assert len(ours) == len(dev) * kinds
    assert ours == theirs
    by_kind = [ours[k::kinds] for k in range(kinds)]
    # both verdicts occur, where the kind fixes them: the gold, the gold twice over (a set), the gold with a
    # comment and its distinct rows match on every question; a missing table and a write on none
    assert all(all(by_kind[k]) for k in (0, 1, 5, 6)) and not any(by_kind[4] + by_kind[7])


@pytest.fixture(scope="module")
def big_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("bigbird")
    (root / "big").mkdir()
    con = sqlite3.connect(root / "big" / "big.sqlite")
    con.execute("CREATE TABLE t (x INTEGER, y TEXT)")
    con.executemany("INSERT INTO t VALUES (?, ?)", [(i, f"r{i % 97}") for i in range(150_000)])
    con.commit()
    con.close()
    return root


def _files(tmp_path, entries: dict, gold_sqls: list[str], db="big"):
    (tmp_path / "dev.json").write_text(json.dumps([
        {"question_id": i, "db_id": db, "SQL": sql, "difficulty": "simple"} for i, sql in enumerate(gold_sqls)]))
    (tmp_path / "predict_dev.json").write_text(json.dumps(entries))
    return tmp_path / "predict_dev.json", tmp_path / "dev.json"


def test_results_over_100000_rows_are_scored_by_set_equality(big_root, tmp_path):
    gold = ["SELECT x, y FROM t ORDER BY x DESC", "SELECT x FROM t"]
    entries = {"0": f"SELECT x, y FROM t{BIRD_SEPARATOR}big", "1": f"SELECT x + 1 FROM t{BIRD_SEPARATOR}big"}
    pred, dev = _files(tmp_path, entries, gold)
    report = score_bird(BirdFiles(pred, dev, big_root), progress=False)
    assert [s.correct for s in report.scores] == [True, False]
    assert [s.pred_status for s in report.scores] == ["ok", "ok"]
    capped = score_bird(BirdFiles(pred, dev, big_root), max_rows=1000, progress=False)
    assert [s.pred_status for s in capped.scores] == ["too_large", "too_large"] and capped.too_large == 2


def test_null_and_malformed_predictions_score_zero_with_a_count(big_root, tmp_path, capsys):
    gold = ["SELECT count(*) FROM t"] * 4
    entries = {"0": None, "1": "SELECT count(*) FROM t", "2": f"SELECT count(*) FROM t{BIRD_SEPARATOR}big", "3": 7}
    pred, dev = _files(tmp_path, entries, gold)
    table = main(["--pred", str(pred), "--gold", str(dev), "--db-root", str(big_root), "--timeout", "5"])
    assert table["total"] == (25.0, 4)
    out = capsys.readouterr().out
    assert "malformed predictions (scored 0): 3" in out


def test_the_command_line_never_shows_a_traceback(big_root, tmp_path):
    pred, dev = _files(tmp_path, {"0": None, "1": "no separator"}, ["SELECT 1", "SELECT 2"])
    ok = subprocess.run([sys.executable, "-m", "acesql_lib.executor", "--pred", str(pred), "--gold", str(dev),
                         "--db-root", str(big_root), "--max-rows", "10", "--timeout", "2"],
                        capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0 and "Traceback" not in ok.stderr and "ACCURACY" in ok.stdout
    assert "malformed predictions (scored 0): 2" in ok.stdout
    (tmp_path / "broken.json").write_bytes(b"\xff\xfe not json")
    bad = subprocess.run([sys.executable, "-m", "acesql_lib.executor", "--pred", str(tmp_path / "broken.json"),
                          "--gold", str(dev), "--db-root", str(big_root)], capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "Traceback" not in bad.stderr and "broken.json" in bad.stderr


# ---------------------------------------------------------------------------------------------
# The scoring rules, each against a reimplementation of its release on constructed predictions

SEP = BIRD_SEPARATOR


def original_release(pred_path, gold_sql_path, db_root: str) -> list[int]:
    """AlibabaResearch/DAMO-ConvAI bird/llm/src/evaluation.py, line for line: package_sqls (:51-73),
    execute_sql/execute_model (:17-48) on the database the prediction names (:62, :143); it raises
    where the release stops (an entry without the separator or with it twice, :58)."""
    clean, dbs = [], []
    for _idx, sql_str in json.load(open(pred_path)).items():
        if type(sql_str) == str:  # noqa: E721 - as the release
            sql, db_name = sql_str.split("\t----- bird -----\t")
        else:
            sql, db_name = " ", "financial"
        clean.append(sql)
        dbs.append(db_root + db_name + "/" + db_name + ".sqlite")
    gold = [line.strip().split("\t")[0] for line in open(gold_sql_path).readlines()]
    out = []
    for (pred, gt), db in zip(zip(clean, gold), dbs):
        try:
            cur = sqlite3.connect(db).cursor()
            cur.execute(pred)
            p = cur.fetchall()
            cur.execute(gt)
            out.append(int(set(p) == set(cur.fetchall())))
        except Exception:  # noqa: BLE001 - execute_model's rule
            out.append(0)
    return out


def minidev_release(pred_path, gold_sql_path, db_root: str) -> list[int]:
    """bird-bench/mini_dev evaluation/evaluation_utils.py package_sqls (:70-103) and execute_sql
    (:57-67), evaluation_ex.py execute_model (:25-43) on the gold's database (:140)."""
    clean = []
    for _, sql_str in json.load(open(pred_path)).items():
        if isinstance(sql_str, str):
            try:
                sql, _db_name = sql_str.split("\t----- bird -----\t")
            except ValueError:
                sql = sql_str.strip()
        else:
            sql = " "
        clean.append(sql)
    gold = [line.strip().split("\t") for line in open(gold_sql_path).readlines()]
    out = []
    for pred, (gt, db_name) in zip(clean, gold):
        try:
            conn = sqlite3.connect(db_root + db_name + "/" + db_name + ".sqlite")
            cur = conn.cursor()
            cur.execute(pred)
            p = cur.fetchall()
            cur.execute(gt)
            g = cur.fetchall()
            conn.close()
            out.append(int(set(p) == set(g)))
        except Exception:  # noqa: BLE001
            out.append(0)
    return out


def authors_scripts(pred_sqls: list, gold: list[dict], db_root: str) -> list[int]:
    """xbchen1/ACE-SQL EVAL/evaluation_maj.py compare_sql (:66-85) as greedy_search runs it (:329-355):
    the i-th `pred_sqls[0]` against the i-th gold record, on the gold's database (:281)."""
    out = []
    for pred_sql, g in zip(pred_sqls, gold):
        conn = sqlite3.connect(f"{db_root}{g['db_id']}/{g['db_id']}.sqlite")
        cursor, correctness = conn.cursor(), 0
        try:
            conn.execute("BEGIN TRANSACTION;")
            cursor.execute(pred_sql)
            predicted_res = cursor.fetchall()
            cursor.execute(g["SQL"])
            if set(predicted_res) == set(cursor.fetchall()):
                correctness = 1
            conn.rollback()
        except:  # noqa: E722 - as the script
            conn.rollback()
        finally:
            conn.close()
        out.append(correctness)
    return out


@pytest.fixture(scope="module")
def rules_root(tmp_path_factory):
    """shop: t(x) = 1, 1, 2 and bad(s) holding invalid UTF-8 text; other: t(x) = 7; financial (the
    database the original release falls back to): a table `loan` and no `t`."""
    root = tmp_path_factory.mktemp("rules") / "dev_databases"
    for name, script in {"shop": "CREATE TABLE t (x INTEGER); INSERT INTO t VALUES (1), (1), (2);"
                                 "CREATE TABLE bad (s TEXT); INSERT INTO bad VALUES (CAST(x'ff41' AS TEXT));",
                         "other": "CREATE TABLE t (x INTEGER); INSERT INTO t VALUES (7);",
                         "financial": "CREATE TABLE loan (a INTEGER); INSERT INTO loan VALUES (1);"}.items():
        (root / name).mkdir(parents=True)
        con = sqlite3.connect(root / name / f"{name}.sqlite")
        con.executescript(script)
        con.close()
    return root


EMPTY_GOLD = "SELECT x FROM t WHERE x > 5"
# (what the case is, the BIRD entry, the SQL the authors' pipeline would hold, the gold SQL on shop,
#  verdicts under kit, authors, bird_original, bird_minidev)
RULE_CASES = [
    ("null, gold empty on shop, no table t on financial", None, None, EMPTY_GOLD, (0, 0, 0, 1)),
    ("null, gold empty on any database", None, None, "SELECT 1 WHERE 0", (0, 0, 1, 1)),
    ("blank SQL, gold empty", f"{SEP}shop", "", EMPTY_GOLD, (0, 1, 1, 1)),
    ("comment-only SQL, gold empty", f"-- nothing{SEP}shop", "-- nothing", EMPTY_GOLD, (0, 1, 1, 1)),
    ("blank SQL, gold with rows", f"{SEP}shop", "", "SELECT x FROM t", (0, 0, 0, 0)),
    ("gold over invalid UTF-8", f"SELECT s FROM bad WHERE 1{SEP}shop", "SELECT s FROM bad WHERE 1",
     "SELECT s FROM bad", (1, 0, 0, 0)),
    ("duplicates: distinct vs all rows", f"SELECT DISTINCT x FROM t{SEP}shop", "SELECT DISTINCT x FROM t",
     "SELECT x FROM t", (1, 1, 1, 1)),
    ("duplicates: doubled rows", f"SELECT x FROM t UNION ALL SELECT x FROM t{SEP}shop",
     "SELECT x FROM t UNION ALL SELECT x FROM t", "SELECT DISTINCT x FROM t", (1, 1, 1, 1)),
    ("names another database", f"SELECT 7{SEP}other", "SELECT 7", "SELECT x FROM t", (1, 0, 1, 0)),
    ("both empty", f"SELECT x FROM t WHERE x < 0{SEP}shop", "SELECT x FROM t WHERE x < 0", EMPTY_GOLD, (1, 1, 1, 1)),
    ("wrong", f"SELECT x + 1 FROM t{SEP}shop", "SELECT x + 1 FROM t", "SELECT x FROM t", (0, 0, 0, 0)),
]
# Entries the original release stops on (evaluation.py:58); verdicts under kit, authors, bird_minidev
STOP_CASES = [
    ("no separator", "SELECT x FROM t", "SELECT x FROM t", "SELECT x FROM t", (0, 1, 1)),
    ("blank, no separator", "   ", "   ", EMPTY_GOLD, (0, 1, 1)),
    ("empty string", "", "", EMPTY_GOLD, (0, 1, 1)),
    ("separator twice", f"SELECT x FROM t{SEP}junk{SEP}shop", f"SELECT x FROM t{SEP}junk", "SELECT x FROM t",
     (1, 1, 1)),
]


def _rule_files(tmp_path, cases):
    entries = {str(i): entry for i, (_, entry, *_rest) in enumerate(cases)}
    (tmp_path / "predict_dev.json").write_text(json.dumps(entries))
    gold = [{"question_id": i, "db_id": "shop", "SQL": c[3], "difficulty": "simple"} for i, c in enumerate(cases)]
    (tmp_path / "dev.json").write_text(json.dumps(gold))
    (tmp_path / "dev_gold.sql").write_text("".join(f"{g['SQL']}\tshop\n" for g in gold))
    return tmp_path / "predict_dev.json", tmp_path / "dev_gold.sql", tmp_path / "dev.json", gold


def _ours(pred, gold_sql, dev, root, mode):
    return [int(s.correct) for s in score_bird(BirdFiles(pred, gold_sql, root, dev), progress=False,
                                               scoring=mode).scores]


def test_each_scoring_rule_gives_its_release_verdicts(rules_root, tmp_path):
    """kit: nulls, blanks and statement-less SQL 0, U+FFFD decoding, the prediction's database;
    authors (EVAL/evaluation_maj.py): blank runs as no rows, null 0, invalid UTF-8 0, gold's database;
    bird_original (evaluation.py): null is " " on financial with the gold there too, the prediction's
    database, invalid UTF-8 0; bird_minidev (evaluation_ex.py): null and blank run as " ", the gold's
    database, invalid UTF-8 0. Each against a reimplementation of its release."""
    pred, gold_sql, dev, gold = _rule_files(tmp_path, RULE_CASES)
    root = f"{rules_root}/"
    theirs = {"authors": authors_scripts([c[2] for c in RULE_CASES], gold, root),
              "bird_original": original_release(pred, gold_sql, root),
              "bird_minidev": minidev_release(pred, gold_sql, root)}
    for k, mode in enumerate(("kit", "authors", "bird_original", "bird_minidev")):
        expected = [c[4][k] for c in RULE_CASES]
        ours = _ours(pred, gold_sql, dev, rules_root, mode)
        assert ours == expected, (mode, [(c[0], o) for c, o, e in zip(RULE_CASES, ours, expected) if o != e])
        if mode in theirs:
            assert theirs[mode] == expected, (mode, theirs[mode])


def test_entries_the_original_release_stops_on(rules_root, tmp_path):
    """An entry without the separator or with it twice: the original release stops with a traceback
    (evaluation.py:58), so bird_original is an error naming the file and entry; mini-dev runs the
    entry whole (evaluation_utils.py:85-89), the authors' scripts hold bare SQL, the kit scores 0."""
    from acesql_lib.data.datasets import DatasetError

    pred, gold_sql, dev, gold = _rule_files(tmp_path, STOP_CASES)
    with pytest.raises(ValueError):
        original_release(pred, gold_sql, f"{rules_root}/")
    with pytest.raises(DatasetError, match=r"predict_dev\.json: entry '0' has no .* separator: .*evaluation\.py stops"):
        score_bird(BirdFiles(pred, gold_sql, rules_root, dev), progress=False, scoring="bird_original")
    assert authors_scripts([c[2] for c in STOP_CASES], gold, f"{rules_root}/") == [c[4][1] for c in STOP_CASES]
    assert minidev_release(pred, gold_sql, f"{rules_root}/") == [c[4][2] for c in STOP_CASES]
    for k, mode in enumerate(("kit", "authors", "bird_minidev")):
        assert _ours(pred, gold_sql, dev, rules_root, mode) == [c[4][k] for c in STOP_CASES], mode


def test_fewer_entries_than_gold_questions_stop_the_releases_and_count_in_kit(rules_root, tmp_path, capsys):
    from acesql_lib.data.datasets import DatasetError

    pred, gold_sql, dev, _ = _rule_files(tmp_path, RULE_CASES[6:8])
    pred.write_text(json.dumps({"0": RULE_CASES[6][1]}))
    kit = score_bird(BirdFiles(pred, gold_sql, rules_root, dev), progress=False)
    assert [s.correct for s in kit.scores] == [True, False] and kit.missing == 1
    for mode in ("authors", "bird_original", "bird_minidev"):
        with pytest.raises(DatasetError, match=r"no prediction for 1 of 2 gold questions"):
            score_bird(BirdFiles(pred, gold_sql, rules_root, dev), progress=False, scoring=mode)
    table = main(["--pred", str(pred), "--gold", str(gold_sql), "--diff-json", str(dev), "--db-root", str(rules_root),
                  "--mode", "kit", "--compare", "set"])
    assert table["total"] == (50.0, 2) and "scoring: kit" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="no prediction for 1 of 2"):
        main(["--pred", str(pred), "--gold", str(gold_sql), "--diff-json", str(dev), "--db-root", str(rules_root),
              "--mode", "bird_minidev"])
