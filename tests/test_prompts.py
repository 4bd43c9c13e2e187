"""Prompts and parsers of §2: layout, round trips, and hostile model outputs."""
import re

import pytest

from acesql_lib.roles.answers import parse_generator, parse_retriever, parse_think
from acesql_lib.roles.prompts import (generator_messages, generator_target, question_text, retriever_messages,
                                      retriever_target)
from acesql_lib.roles.parsers import parse_generator_eval, parse_retriever_eval
from acesql_lib.data.schema import Column, Schema, Table, load_tables_json
from repo_paths import REAL


@pytest.fixture(scope="module")
def spider():
    return load_tables_json(REAL / "spider_tables.json")


@pytest.fixture(scope="module")
def singer(spider):
    return spider["concert_singer"]


@pytest.fixture(scope="module")
def bird():
    return load_tables_json(REAL / "bird_subset_tables.json")


def wrap(answer: str, think: str = "reasoning") -> str:
    return f"<think>\n{think}\n</think>\n\n{answer}"


# ---------------------------------------------------------------- prompts

@pytest.mark.parametrize("style", ["paper", "tiny"])
def test_retriever_prompt_layout(singer, style):
    ddl = singer.to_ddl()
    msgs = retriever_messages(ddl, "How many singers?", engine="SQLite", style=style)
    assert len(msgs) == 1 and msgs[0]["role"] == "user"  # one user turn, no system prompt
    text = msgs[0]["content"]
    assert ddl in text and "How many singers?" in text and "SQLite" in text
    assert "<think>" in text and "[" in text and "```" in text
    # sections appear in a fixed order
    order = [text.index(h) for h in ("Task:", "Database engine:", "Database schema:", "Question:", "Rules:",
                                      "Output format:")]
    assert order == sorted(order)


@pytest.mark.parametrize("style", ["paper", "tiny"])
def test_generator_prompt_layout(singer, style):
    pruned = singer.to_ddl({"singer.Name", "singer.Age"})
    text = generator_messages(pruned, "Oldest singer?", engine="SQLite", style=style)[0]["content"]
    assert pruned in text and "Oldest singer?" in text and "```sql" in text and "<think>" in text
    assert "stadium" not in text  # only the pruned schema reaches the generator


def test_tiny_style_is_shorter_with_same_sections(singer):
    ddl = singer.to_ddl()
    paper = retriever_messages(ddl, "q", style="paper")[0]["content"]
    tiny = retriever_messages(ddl, "q", style="tiny")[0]["content"]
    assert len(tiny) < len(paper)
    heads = lambda t: [line for line in t.splitlines() if re.fullmatch(r"[A-Z][a-z ]{2,20}:", line)]  # noqa: E731
    assert len(heads(paper)) == 6
    assert heads(tiny) == heads(paper)


def test_bird_question_is_evidence_then_question():
    assert question_text("How many?", "count means COUNT") == "count means COUNT\nHow many?"
    assert question_text("How many?", "") == "How many?"
    text = generator_messages("CREATE TABLE t (a INTEGER);", "How many?", evidence="count means COUNT")[0]["content"]
    assert "Question:\ncount means COUNT\nHow many?" in text


def test_unknown_style_is_refused():
    with pytest.raises(ValueError, match="style"):
        retriever_messages("", "q", style="huge")


# ---------------------------------------------------------------- round trips

def test_retriever_target_round_trips_on_every_fixture_schema(spider, bird):
    for schema in list(spider.values()) + list(bird.values()):
        cols = schema.columns()[::3]
        target = retriever_target(cols, "pick the columns")
        p = parse_retriever(target, schema)
        assert p.columns == frozenset(cols), schema.db_id
        assert p.well_formed and p.n_dropped == 0 and p.n_items == len(set(cols))
        assert parse_think(target).think == "pick the columns"


def test_retriever_target_round_trips_names_with_commas():
    schema = Schema("x", [Table("t", [Column("a,b", "TEXT"), Column("c", "TEXT")])])
    p = parse_retriever(retriever_target(["t.a,b", "t.c"], "x"), schema, rules="kit")
    assert p.columns == {"t.a,b", "t.c"} and p.n_items == 2
    # the authors' parser splits on every comma, backticks or not: "`t.a" and "b`" match nothing
    p = parse_retriever(retriever_target(["t.a,b", "t.c"], "x"), schema)
    assert p.columns == {"t.c"} and p.n_items == 3 and p.n_dropped == 2


def test_generator_target_round_trips():
    sql = "SELECT name FROM singer\nWHERE age > 30 ORDER BY age DESC"
    for prefilled in (False, True):
        target = generator_target(sql, "  think about ages ", prefilled_think=prefilled)
        p = parse_generator(target, prefilled_think=prefilled)
        assert p.sql == sql and p.well_formed
        assert parse_think(target, prefilled).think == "think about ages"
    assert not generator_target(sql, "t", prefilled_think=True).startswith("<think>")


def test_targets_refuse_text_that_would_not_parse_back():
    with pytest.raises(ValueError):
        generator_target("SELECT 1", "I wrote </think> early")
    with pytest.raises(ValueError):
        generator_target("SELECT 1 ```", "t")


# ---------------------------------------------------------------- think block

@pytest.mark.parametrize("rules", ["authors", "kit"])
def test_parse_think_cases(rules):
    think = lambda text, **kw: parse_think(text, rules=rules, **kw)  # noqa: E731
    assert think("<think>a</think>b") == think("<think>a</think>b", prefilled_think=True)
    closed = think("<think> a </think> rest")
    assert closed.has_think and closed.think == "a" and closed.answer == " rest"
    unclosed = think("<think> still thinking [singer.Name]")
    assert unclosed.opened and not unclosed.has_think and unclosed.answer == ""
    none = think("just an answer [x.y]")
    assert not none.opened and not none.has_think and none.answer == "just an answer [x.y]"
    pre = think("reasoning here</think>\nanswer", prefilled_think=True)
    assert pre.has_think and pre.think == "reasoning here" and pre.answer == "\nanswer"


def test_think_tags_kit_voids_reopened_and_misordered_blocks():
    reopened = parse_think("<think>a</think> b <think> c", rules="kit")
    assert reopened.opened and not reopened.has_think and reopened.answer == ""
    assert not parse_think("x </think> y <think> z", rules="kit").has_think


def test_think_tags_authors_need_both_tags_anywhere_and_read_after_the_last_close():
    # authors' joint_reward.py: '<think>' in s and '</think>' in s; answer = s.split('</think>')[-1]
    reopened = parse_think("<think>a</think> b <think> c")
    assert reopened.has_think and reopened.think == "a" and reopened.answer == " b <think> c"
    misordered = parse_think("x </think> y <think> z </think> answer")
    assert misordered.has_think and misordered.answer == " answer"
    close_first = parse_think("x </think> y <think> z")
    assert close_first.has_think and close_first.answer == " y <think> z"
    assert not parse_think("only </think> close").has_think and not parse_think("<think> only open").has_think
    sql = parse_generator("<think>a</think>\n```sql\nSELECT 1\n```\n<think> more")
    assert sql.format_ok and sql.sql == "SELECT 1"
    assert not parse_generator("<think>a</think>\n```sql\nSELECT 1\n```\n<think> more", rules="kit").format_ok


# ---------------------------------------------------------------- retriever parser

def test_retriever_takes_last_list_after_think(singer):
    text = "<think>maybe [singer.Age] or [stadium.Name]</think>\n```\n[singer.Name]\n```\nnot [concert.Year"
    p = parse_retriever(text, singer, rules="kit")
    assert p.columns == {"singer.Name"} and p.has_think and p.has_list


def test_retriever_list_inside_think_only_is_no_answer(singer):
    p = parse_retriever("<think>[singer.Name, singer.Age]</think>\nI am done.", singer, rules="kit")
    assert p.has_think and not p.has_list and p.columns == frozenset() and not p.well_formed


def test_retriever_unclosed_think_gives_no_answer(singer):
    p = parse_retriever("<think>plan\n```\n[singer.Name]\n```", singer, truncated=True, rules="kit")
    assert not p.has_think and not p.has_list and p.columns == frozenset() and p.truncated


def test_retriever_without_think_still_parses_but_is_not_well_formed(singer):
    p = parse_retriever("[singer.Name, singer.Age]", singer)
    assert p.columns == {"singer.Name", "singer.Age"} and not p.has_think and not p.well_formed


def test_retriever_nested_brackets_are_flattened(singer):
    p = parse_retriever(wrap("[singer.Name, [singer.Age, singer.Country]]"), singer, rules="kit")
    assert p.columns == {"singer.Name", "singer.Age", "singer.Country"} and p.n_items == 3


def test_retriever_last_of_several_lists_wins(singer):
    p = parse_retriever(wrap("first [singer.Age]\nfinal:\n```\n[stadium.Name]\n```"), singer)
    assert p.columns == {"stadium.Name"}


def test_retriever_quoted_and_backticked_items(singer):
    text = wrap('[ "singer"."name", `singer`.`Age`, \'stadium.Location\', "concert.Theme" ]')
    p = parse_retriever(text, singer)
    assert p.columns == {"singer.Name", "singer.Age", "stadium.Location", "concert.Theme"} and p.n_dropped == 0


def test_retriever_drops_tables_and_unknown_items_and_counts_them(singer):
    p = parse_retriever(wrap("[singer, singer.Name, singer.nope, stadium.*, , concert.Year]"), singer, rules="kit")
    assert p.columns == {"singer.Name", "concert.Year"}
    assert p.n_items == 5 and p.n_dropped == 3


def test_retriever_case_and_punctuation_variants(singer):
    p = parse_retriever(wrap("[SINGER.song_name, singer.Song Release Year, Singer.is-male]"), singer)
    assert p.columns == {"singer.Song_Name", "singer.Song_release_year", "singer.Is_male"}


def test_retriever_empty_list(singer):
    p = parse_retriever(wrap("```\n[]\n```"), singer, rules="kit")
    assert p.has_list and p.well_formed and p.columns == frozenset() and p.n_items == 0


def test_retriever_prefilled_think(singer):
    text = "the name column\n</think>\n```\n[singer.Name]\n```"
    assert parse_retriever(text, singer, prefilled_think=True).well_formed
    assert not parse_retriever(text, singer).has_think  # without the flag the stray </think> is no block


def test_retriever_bird_names_with_spaces_and_parentheses(bird):
    schema = next(s for s in bird.values() if any(" " in c for c in s.columns()))
    spaced = [c for c in schema.columns() if " " in c or "(" in c][:3]
    p = parse_retriever(wrap("[" + ", ".join(f"`{c}`" for c in spaced) + "]"), schema)
    assert p.columns == frozenset(spaced)


# ---------------------------------------------------------------- generator parser

def test_generator_last_sql_block_wins():
    text = wrap("```sql\nSELECT 1\n```\nbetter:\n```SQL\nSELECT 2\n```")
    assert parse_generator(text).sql == "SELECT 2"


def test_generator_ignores_sql_inside_think_and_unclosed_blocks():
    text = "<think>```sql\nSELECT 1\n```</think>\n```sql\nSELECT 2"
    p = parse_generator(text)
    assert p.has_think and not p.has_sql_block and p.sql == "" and not p.well_formed


def test_generator_other_languages_are_not_sql_blocks():
    p = parse_generator(wrap("```sqlite\nSELECT 1\n```\n```python\nprint(1)\n```"), rules="kit")
    assert not p.has_sql_block
    # the authors' pattern ```sql(.*?)``` also opens on ```sqlite: a block whose "SQL" starts with "ite"
    p = parse_generator(wrap("```sqlite\nSELECT 1\n```"))
    assert p.has_sql_block and p.sql == "ite\nSELECT 1"


def test_generator_without_think_or_truncated_is_not_well_formed():
    no_think = parse_generator("```sql\nSELECT 1\n```")
    assert no_think.sql == "SELECT 1" and not no_think.has_think and not no_think.well_formed
    cut = parse_generator(wrap("```sql\nSELECT 1\n```"), truncated=True)
    assert cut.sql == "SELECT 1" and cut.truncated and not cut.well_formed


# ---------------------------------------------------------------- authors' retriever parsers

def test_authors_training_list_needs_a_character_inside_the_brackets(singer):
    text = wrap("```\n[singer.Name, singer.Age]\n```\nand nothing else: []")
    assert parse_retriever(text, singer).columns == {"singer.Name", "singer.Age"}
    assert parse_retriever(text, singer, rules="kit").columns == frozenset()  # kit reads the empty last list
    assert not parse_retriever(wrap("```\n[]\n```"), singer).has_list


def test_authors_training_nested_list_reads_up_to_the_first_close(singer):
    text = wrap("[[singer.Name], singer.Age]")
    assert parse_retriever(text, singer).columns == {"singer.Name"}
    assert parse_retriever(text, singer, rules="kit").columns == {"singer.Name", "singer.Age"}


def test_authors_training_normalised_collision_takes_the_later_column():
    schema = Schema("x", [Table("t", [Column("a_b", "TEXT"), Column("ab", "TEXT")])])
    text = wrap("[t.a b]")
    assert parse_retriever(text, schema).columns == {"t.ab"}
    assert parse_retriever(text, schema, rules="kit").columns == frozenset()  # kit: ambiguous, dropped


def test_authors_training_reads_items_from_the_whole_text_but_gates_on_the_answer(singer):
    p = parse_retriever("<think>[singer.Name, singer.Age]</think>\nI am done.", singer)
    assert p.columns == {"singer.Name", "singer.Age"} and p.has_think and not p.has_list and not p.format_ok
    bare = parse_retriever(wrap("[singer, singer.Name, stadium.*]"), singer)
    assert bare.columns == {"singer.Name"} and bare.n_dropped == 2  # bare tables and t.* are not columns here


def test_authors_eval_takes_the_first_list_anywhere(singer):
    text = "<think>maybe [singer.Age]</think>\nfinal: [singer.Name]"
    assert parse_retriever_eval(text, singer).columns == {"singer.Age"}
    assert parse_retriever_eval(text, singer, parser="kit").columns == {"singer.Name"}
    fenced = "<think>maybe [singer.Age]</think>\n```\n[singer.Name]\n```"
    assert parse_retriever_eval(fenced, singer).columns == {"singer.Name"}  # a code-block list comes first


def test_authors_eval_expands_tables_and_reads_json(singer):
    everything = lambda t: {c for c in singer.columns() if c.startswith(t + ".")}  # noqa: E731
    p = parse_retriever_eval(wrap("```\n[singer, stadium.*, concert., singer_in_concert.Singer_ID]\n```"), singer)
    assert p.columns == everything("singer") | everything("stadium") | everything("concert") \
        | {"singer_in_concert.Singer_ID"}
    js = parse_retriever_eval(wrap('```json\n{"singer": ["Name", "Age"], "stadium": ["Capacity"]}\n```'), singer)
    assert js.columns == {"singer.Name", "singer.Age", "stadium.Capacity"}
    cols = parse_retriever_eval(wrap('```json\n{"columns": ["singer.Name"]}\n```'), singer)
    assert cols.columns == {"singer.Name"}


def test_authors_eval_falls_back_to_the_raw_completion(singer):
    # the extracted JSON block holds no list; the raw completion's first list is read instead
    text = wrap('```json\n{"note": 1}\n```\n[singer.Name]')
    assert parse_retriever_eval(text, singer).columns == {"singer.Name"}
    assert parse_retriever_eval(wrap("no list at all"), singer).columns == frozenset()
    with pytest.raises(ValueError, match="parser"):
        parse_retriever_eval("x", singer, parser="nope")


def test_authors_eval_sql_extraction_and_the_kit_alternative():
    # EVAL/sql_infer.py: last ```sql block anywhere (also inside the think block)
    assert parse_generator_eval("<think>```sql\nSELECT 1\n```</think>\nno block").sql == "SELECT 1"
    assert parse_generator_eval("<think>```sql\nSELECT 1\n```</think>\nno block", parser="kit").sql == ""
    assert parse_generator_eval(wrap("```\nSELECT 2\n```")).sql == "SELECT 2"  # a plain fence holding SELECT
    cut = wrap("```sql\nSELECT name\nFROM singer;\nmore")  # unclosed block: lines from SELECT to ';'
    assert parse_generator_eval(cut).sql == "SELECT name\nFROM singer;"
    assert parse_generator_eval(cut, parser="kit").sql == ""  # kit: a cut-off query is not run
    assert parse_generator_eval("no query").sql == "no query" and parse_generator_eval("").sql == ""
    with pytest.raises(ValueError, match="parser"):
        parse_generator_eval("x", parser="nope")
