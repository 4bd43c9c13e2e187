"""The tiny benchmark world: a deterministic stand-in for SynSQL + BIRD that CPUs can train on.

`build_tinyworld(out_dir, seed)` writes, in the real formats (§7), eight small SQLite databases,
a SynSQL-format training pool over six of them (`train/data.json`), a BIRD-format dev set over
all eight (`dev/dev.json`, two databases never seen in training), Spider-format `tables.json`
files, BIRD `database_description` CSVs, and `routes.json`: for each question whose answer can
be reached through two or more distinct column sets (§1, "alternative executable routes"), the
gold SQL first and then each alternative, every one re-executed here and kept only when its rows
equal the gold's as a multiset (floats rounded to 6 places, as §4 step 4 compares).

The routes are built in on purpose: denormalised copies (`loans.member_city` repeats
`members.city`), derived columns (`OrderItems."Line Total"` = Quantity x "Unit Price",
`age` next to `birth_year`) and shortcut foreign keys (`enrollments.dept_id` next to the path
through `courses`). Column sets follow the kit rule of `sqlcolumns.py`: "table.column" in the
schema's original case; a table read only through `*` contributes its primary key.

The package, along its seams (no module imports one listed after it):
- `specs`: name lists, column/table specs and `DB_SPECS`, the eight databases as data;
- `databases`: rows drawn from the specs, SQLite files, `tables.json` entries, description CSVs;
- `route_model`: attributes and their routes (`Attr`, `Route`, `Join`) and the column `Recorder`;
- `templates`: the question templates (`Cand`, `DbContext`, `TEMPLATES`);
- `questions`: realising candidates (gold executed, alternatives verified) and phrasing them;
- `world`: `TinyWorld`, `build_tinyworld`, `world_text`, `route_stats` and the CLI
  (`python -m acesql_lib.data.tinyworld --out data/tinyworld`).

Same seed, same bytes: only `random.Random` instances seeded from (seed, name) are used, every
listing is sorted or in a fixed order, no timestamps, fixed SQLite page size and insert order.
"""
from .databases import create_sqlite, description_csv, generate_rows, tables_entry
from .questions import (LEVEL_MIX, LEVELS, MAX_RESULT_ROWS, STYLES, Question, generate_questions, realise,
                        string_values)
from .route_model import Attr, Join, Recorder, Route, attributes, expr, from_clause
from .specs import (ADJ, AGE, CITIES, COUNTRIES, DB_SPECS, FIRST, FK, GOODS, ID, LAST, NOUN, REF_YEAR, C, Col, DbSpec,
                    T, Table, readable_name)
from .templates import AGG_WORDS, MULTI_ROUTE_WEIGHT, TEMPLATES, Cand, DbContext, lit
from .world import (BIRD_DIFFICULTY, CATEGORICAL_MAX_DISTINCT, GENERATOR_VERSION, KIND, TRAIN_EVIDENCE_SHARE, TinyWorld,
                    build_profile_world, build_tinyworld, categorical_values, main, route_stats, world_text)

__all__ = ["ADJ", "AGE", "AGG_WORDS", "Attr", "BIRD_DIFFICULTY", "C", "CATEGORICAL_MAX_DISTINCT", "CITIES", "COUNTRIES",
           "Cand", "Col", "DB_SPECS", "build_profile_world", "categorical_values", "string_values",
           "DbContext", "DbSpec", "FIRST", "FK", "GENERATOR_VERSION", "GOODS", "ID", "Join", "KIND", "LAST", "LEVELS",
           "LEVEL_MIX", "MAX_RESULT_ROWS", "MULTI_ROUTE_WEIGHT", "NOUN", "Question", "REF_YEAR", "Recorder", "Route",
           "STYLES", "T", "TEMPLATES", "TRAIN_EVIDENCE_SHARE", "Table", "TinyWorld", "attributes", "build_tinyworld",
           "create_sqlite", "description_csv", "expr", "from_clause", "generate_questions", "generate_rows", "lit",
           "main", "readable_name", "realise", "route_stats", "tables_entry", "world_text"]
