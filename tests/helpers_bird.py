"""A BIRD-layout dev set of three questions over one real SQLite database (concerts), for the
evaluation tests (test_evaluate, test_two_pass); conftest's `bird_dir` fixture writes it once per module."""
from __future__ import annotations

import json
import sqlite3
from pathlib import Path

QUESTIONS = [
    ("How many singers are older than 30?", "SELECT count(*) FROM singer WHERE age > 30", "simple"),
    ("List the names of singers from France.", "SELECT name FROM singer WHERE country = 'France'", "moderate"),
    ("What is the name of the concert held in 2014?", "SELECT concert_name FROM concert WHERE year = 2014",
     "challenging"),
]


def write_bird_dev(root: Path) -> Path:
    """A BIRD-layout dev set under `root`: dev.json + dev_databases/concerts/concerts.sqlite."""
    db = root / "dev_databases" / "concerts" / "concerts.sqlite"
    db.parent.mkdir(parents=True)
    conn = sqlite3.connect(db)
    conn.executescript("""
        CREATE TABLE singer (singer_id INTEGER PRIMARY KEY, name TEXT, country TEXT, age INTEGER);
        CREATE TABLE concert (concert_id INTEGER PRIMARY KEY, concert_name TEXT, year INTEGER,
                              singer_id INTEGER REFERENCES singer(singer_id));
        INSERT INTO singer VALUES (1, 'Joe', 'France', 52), (2, 'Ann', 'Peru', 25), (3, 'Li', 'France', 33);
        INSERT INTO concert VALUES (1, 'Spring Gala', 2014, 1), (2, 'Autumn Night', 2015, 3);
    """)
    conn.commit()
    conn.close()
    records = [{"question_id": i, "db_id": "concerts", "question": q, "evidence": "", "SQL": sql, "difficulty": d}
               for i, (q, sql, d) in enumerate(QUESTIONS)]
    (root / "dev.json").write_text(json.dumps(records))
    return root


def eval_prompt_lengths(examples, schemas, tokenizer, cfg) -> list[tuple[int, int]]:
    """Per question, the token lengths of the evaluation's retriever prompt and of its generator prompt on the whole
    schema, with the schema text the evaluation gives it (`task.profile_schema`, as `evaluate` builds its tasks)."""
    from acesql_lib.config.paths import Paths
    from acesql_lib.roles.prompts import evaluation_style
    from acesql_lib.train.rollouts import Task, generator_prompt, prompt_tokens, retriever_prompt
    from acesql_lib.data.task import profile_schema

    style, thinking = evaluation_style(cfg.model.prompt_style), cfg.engine.enable_thinking
    out = []
    for ex in examples:
        schema = profile_schema(schemas[ex.db_id], ex.db_path, cfg.data, Paths.from_config(cfg).run / "values_index")
        task = Task(ex, schema)
        every = frozenset(f"{t.name}.{c.name}" for t in schema.tables for c in t.columns)
        out.append((len(prompt_tokens(retriever_prompt(task, tokenizer, style, thinking), tokenizer)),
                    len(prompt_tokens(generator_prompt(task, every, tokenizer, style, thinking), tokenizer))))
    return out
