"""The BIRD scoring command against a reimplementation of the official evaluator's rule, on the
tiny world's BIRD-format dev set and on a database with results beyond 100,000 rows."""
import json
import sqlite3
import subprocess
import sys

import pytest

from acesql_lib.executor import BIRD_SEPARATOR, main, score_bird, write_bird_predictions
from acesql_lib.tinyworld import build_tinyworld


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
    report = score_bird(tmp_path / "predict_dev.json", tmp_path / "dev.json", world.dev_db_root, progress=False)
    ours = [int(s.correct) for s in report.scores]
    theirs = [official_verdict(p, g["SQL"], str(world.dev_db_root / g["db_id"] / f"{g['db_id']}.sqlite"))
              for p, g in zip(preds, gold)]
    assert len(ours) == len(dev) * kinds
    assert ours == theirs
    assert 0 < sum(ours) < len(ours)  # both verdicts occur


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
    report = score_bird(pred, dev, big_root, progress=False)
    assert [s.correct for s in report.scores] == [True, False]
    assert [s.pred_status for s in report.scores] == ["ok", "ok"]
    capped = score_bird(pred, dev, big_root, max_rows=1000, progress=False)
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
