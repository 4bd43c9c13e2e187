"""Differential test of the paper profile's training semantics (the authors' released code).

A seeded random sequence of question visits drives the real pool, parsers, column extractor and
rewards; every reward and every pool weight is checked against expectations computed here by hand
(a plain dict pool, the tables of expected parses below), never by calling the code under test.
The same inputs are then read with the kit's alternative settings, and each rule must show at
least one rollout where that reading departs from the authors' expectation, so a regression to
the kit's behaviour on any rule fails this test.

Rules covered: generator reward not gated on truncation; pool additions only behind the format
gate; think tags (both anywhere, answer after the last </think>); training list parsing (a list
needs one character, nesting, later collision); `SELECT count(*) FROM t` adds no set; truncation
from the response length; ties, empty pools, lengths 511-2048.
"""
import random

import pytest

from acesql_lib.models.completions import Completion
from acesql_lib.roles.pool import ColumnSetPool, pool_additions
from acesql_lib.roles.answers import parse_generator, parse_retriever
from acesql_lib.roles.rewards import generator_reward, retriever_reward
from acesql_lib.train.rollouts import is_truncated
from acesql_lib.data.schema import load_tables_json
from acesql_lib.data.sqlcolumns import column_set
from repo_paths import REAL

LIMIT = 2048  # max response tokens (§4.11)

N = frozenset({"singer.Name"})
NA = frozenset({"singer.Name", "singer.Age"})
JOIN = frozenset({"singer.Name", "singer.Singer_ID", "singer_in_concert.Singer_ID"})
KEY = frozenset({"singer.Singer_ID"})  # the kit's anchor for a bare `singer`

# SQL -> (authors' column set, kit's column set); written by hand
SQLS = {
    "SELECT Name FROM singer": (N, N),
    "SELECT Name, Age FROM singer WHERE Age > 30": (NA, NA),
    "SELECT count(*) FROM singer": (frozenset(), KEY),
    "SELECT T1.Name FROM singer AS T1 JOIN singer_in_concert AS T2 ON T1.Singer_ID = T2.Singer_ID": (JOIN, JOIN),
}

# generator output kinds: text, format gate under the authors' rules, under the kit's rules
GEN_KINDS = {
    "ok": (lambda sql: f"<think>plan</think>\n```sql\n{sql}\n```", True, True),
    "reopened": (lambda sql: f"<think>plan</think>\n```sql\n{sql}\n```\n<think> more", True, False),
    "close_first": (lambda sql: f"plan </think>\n```sql\n{sql}\n```\n<think> more", True, False),
    "no_think": (lambda sql: f"```sql\n{sql}\n```", False, False),
    "no_block": (lambda sql: f"<think>plan</think>\n{sql}", False, False),
}


def listed(cols):
    return ", ".join(sorted(cols))


# retriever output kinds: text for an intended set S, the authors' (gate, columns), the kit's columns
RET_KINDS = {
    "ok": (lambda s: f"<think>r</think>\n```\n[{listed(s)}]\n```", lambda s: (True, s), lambda s: s),
    "then_empty": (lambda s: f"<think>r</think>\n[{listed(s)}]\nnothing else: []", lambda s: (True, s),
                   lambda s: frozenset()),
    "nested": (lambda s: f"<think>r</think>\n[[{sorted(s)[0]}], {listed(s)}]",
               lambda s: (True, frozenset(sorted(s)[:1])), lambda s: s),
    "reopened": (lambda s: f"<think>r</think>\n[{listed(s)}]\n<think> more", lambda s: (True, s), lambda s: s),
    "no_think": (lambda s: f"[{listed(s)}]", lambda s: (False, s), lambda s: s),
    "empty": (lambda s: "<think>r</think>\n```\n[]\n```", lambda s: (False, frozenset()), lambda s: frozenset()),
}
RET_SETS = [N, NA, JOIN, KEY]


def penalty(n):  # p_len by hand (§4 step 6)
    return 0.5 * min(max((n - 512) / (2048 - 512), 0.0), 1.0)


def length(rng):
    return rng.choice([511, 512, 1280, 2047, 2048, 2048, rng.randint(511, 2048)])


@pytest.fixture(scope="module")
def singer():
    return load_tables_json(REAL / "spider_tables.json")["concert_singer"]


def test_seeded_visits_match_the_authors_semantics_and_the_kit_departs_on_every_rule(singer):
    rng = random.Random(20240614)
    pool = ColumnSetPool(gamma=0.5)
    pool.add_question("q_seeded", correct_sets=[N, N, NA])  # an SFT pool: N 2, NA 1
    pool.add_question("q_tie", correct_sets=[N, JOIN])  # a tie from the start
    ref = {"q_seeded": {N: 2.0, NA: 1.0}, "q_tie": {N: 1.0, JOIN: 1.0}}  # the hand-kept pool
    departs = {rule: 0 for rule in ("generator_truncation", "pool_format_gate", "think_tags", "list_parsing",
                                    "bare_tables", "truncation")}
    seen = {"ties": 0, "empty_pool": 0, "rewarded": 0}
    for _ in range(80):
        qid = rng.choice(["q_seeded", "q_tie", "q_fresh", "q_other"])
        # -- expected: decay, then the targets (every positive set at the maximum weight)
        w = ref.setdefault(qid, {})
        for s in w:
            w[s] *= 0.5
        positive = {s: v for s, v in w.items() if v > 0}
        top = max(positive.values(), default=None)
        expected_targets = {s for s, v in positive.items() if abs(v - top) < 1e-9}
        seen["ties"] += len(expected_targets) > 1
        seen["empty_pool"] += not expected_targets
        # -- code under test: the pool's visit
        targets = pool.visit(qid)
        assert set(targets) == expected_targets

        # retriever rollouts, rewarded against the targets read before this step's additions
        for _ in range(4):
            kind, s, n = rng.choice(list(RET_KINDS)), rng.choice(RET_SETS), length(rng)
            make, authors, kit_cols = RET_KINDS[kind]
            gate, cols = authors(s)
            want = 1 - penalty(n) if gate and n < LIMIT and cols and cols in expected_targets else 0.0
            seen["rewarded"] += want > 0
            stop = rng.random() < 0.5  # whether the last token is a stop token (the kit's truncation flag)
            c = Completion(make(s), [0] * n, n, truncated=n >= LIMIT and not stop)
            got = retriever_reward(parse_retriever(c.text, singer, truncated=is_truncated(c, LIMIT)), targets, n)
            assert got == pytest.approx(want), (kind, sorted(s), n)
            kit = retriever_reward(parse_retriever(c.text, singer, truncated=is_truncated(c, LIMIT, "no_stop"),
                                                   rules="kit"), targets, n)
            if kit != pytest.approx(want):
                rule = {"then_empty": "list_parsing", "nested": "list_parsing", "reopened": "think_tags"}.get(kind)
                if rule is None and n >= LIMIT and stop:
                    rule = "truncation"
                assert rule is not None, (kind, sorted(s), n, kit, want)
                departs[rule] += 1

        # generator rollouts: rewards, and the sets the pool adds after the rewards were read
        parses, matches, sets, expected_adds = [], [], [], []
        for _ in range(4):
            kind, sql, n, match = rng.choice(list(GEN_KINDS)), rng.choice(list(SQLS)), length(rng), rng.random() < 0.7
            make, fmt_authors, fmt_kit = GEN_KINDS[kind]
            text = make(sql)
            want = 1 - penalty(n) if fmt_authors and match else 0.0
            if fmt_authors and match and SQLS[sql][0]:
                expected_adds.append(SQLS[sql][0])
            c = Completion(text, [0] * n, n, truncated=n >= LIMIT)
            p = parse_generator(text, truncated=is_truncated(c, LIMIT))
            m = match and bool(p.sql)  # the executor never matches an empty SQL
            assert generator_reward(p, m, n) == pytest.approx(want), (kind, n)
            parses.append(p), matches.append(m), sets.append(column_set(p.sql, singer, bare_tables="none") if m else None)
            kp = parse_generator(text, truncated=c.truncated, rules="kit")
            km = match and bool(kp.sql)
            kit = generator_reward(kp, km, n, truncation_gate=True)
            if kit != pytest.approx(want):
                departs["generator_truncation" if fmt_kit and n >= LIMIT else "think_tags"] += 1
            kit_set = column_set(kp.sql, singer) if km else None  # kit's extractor: bare tables anchored
            kit_added = pool_additions([kp], [km], [kit_set], gate="match")  # kit: any execution match adds
            if kit_added and not fmt_authors:
                departs["pool_format_gate"] += 1  # a set the authors' format gate refuses
            if kit_added and fmt_authors and not SQLS[sql][0]:
                departs["bare_tables"] += 1  # count(*): the kit adds the key, the authors nothing
        adds = pool_additions(parses, matches, sets, gate="format")
        assert sorted(map(sorted, adds)) == sorted(map(sorted, expected_adds))
        pool.add_matches(qid, adds)
        for s in expected_adds:
            w[s] = w.get(s, 0.0) + 1.0
        assert pool.weights(qid) == pytest.approx(w)

    assert seen["ties"] and seen["empty_pool"] and seen["rewarded"] > 10, seen
    assert all(departs.values()), departs


def test_truncation_is_read_from_the_response_length():
    # authors: truncated when the response length reaches the limit, a final stop token included
    stopped_at_limit = Completion("x", [0] * LIMIT, LIMIT, truncated=False)
    assert is_truncated(stopped_at_limit, LIMIT) and not is_truncated(stopped_at_limit, LIMIT, "no_stop")
    short = Completion("x", [0] * 100, 100, truncated=False)
    assert not is_truncated(short, LIMIT) and not is_truncated(short, LIMIT, "no_stop")
    with pytest.raises(ValueError, match="truncation"):
        is_truncated(short, LIMIT, "sometimes")
