"""The evaluation sections: the benchmark sets (`EvalSet`, §5: Tables 1 and 3) and how they are decoded and
scored (`EvalConfig`).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import NonNegativeInt, PositiveFloat, PositiveInt

from .checks import build_section, check, validate_fields
from .choices import AuthorsOrKit, BirdDevVersion, Scoring, SetFormat


BIRD_DEV_VERSION = "20240627"  # the BIRD dev release the paper measured on (EvalSet.version)


@dataclass
class EvalSet:
    name: str = "bird_dev"
    format: SetFormat = "bird"  # "bird" (set EX, §5) or "spider" (order-aware multiset, §5)
    # The three paths may start with a data root in braces, `{spider_dir}` = data.spider_dir (`DATA_ROOTS`), filled in
    # when a profile is loaded (`load_config`): a profile that moves the data changes the roots, never the sets
    path: str = ""  # questions file (dev.json)
    tables: str = ""  # tables.json
    db_root: str = ""  # folder with <db_id>/<db_id>.sqlite
    question_field: str = ""  # "" = the format's own ("question"); Spider-Syn asks "SpiderSynQuestion" (§5)
    # The prompts show question-relevant values when data.relevant_values is on; false: never. The authors' Spider
    # dev/test prompts have none (EVAL/prepare_spider_data.py, EVAL/generate_spider_sql_prompts.py pass {}),
    # their BIRD ones do (EVAL/prepare_eval_data.py, EVAL/generate_sql_prompts.py)
    relevant_values: bool = True
    # The benchmark release the set is (data/benchmarks.json); "" = not a versioned benchmark. BIRD dev: the paper's
    # is 20240627 (§7 names dev_20240627; its baseline rows are published dev_20240627 numbers; the authors' EVAL
    # code names no version), the default of a set named bird_dev; 20251106 is BIRD's corrected re-release.
    version: BirdDevVersion = ""

    def __post_init__(self) -> None:
        if isinstance(self.version, int) and not isinstance(self.version, bool):
            self.version = str(self.version)  # YAML reads an unquoted 20251106 as a number
        validate_fields(self, f"eval.sets[{self.name}]")
        if self.name == "bird_dev" and not self.version:
            self.version = BIRD_DEV_VERSION


@dataclass
class EvalConfig:
    sets: list[EvalSet] = field(default_factory=lambda: [
        EvalSet("bird_dev", "bird", "{bird_dev_dir}/dev.json", "{bird_dev_dir}/dev_tables.json",
                "{bird_dev_dir}/dev_databases"),
        EvalSet("spider_dev", "spider", "{spider_dir}/dev.json", "{spider_dir}/tables.json", "{spider_dir}/database",
                relevant_values=False),  # the authors' Spider prompts show no relevant values
        EvalSet("spider_test", "spider", "{spider_dir}/test.json", "{spider_dir}/test_tables.json",
                "{spider_dir}/test_database", relevant_values=False),
        EvalSet("spider_dk", "spider", "{spider_dk_dir}/Spider-DK.json", "{spider_dk_dir}/tables.json",
                "{spider_dk_dir}/database"),
        EvalSet("spider_syn", "spider", "{spider_syn_dir}/dev.json", "{spider_dir}/tables.json", "{spider_dir}/database",
                "SpiderSynQuestion"),
        EvalSet("spider_realistic", "spider", "{spider_realistic_dir}/spider-realistic.json", "{spider_dir}/tables.json",
                "{spider_dir}/database"),
    ])  # §5: Table 1 (BIRD dev, Spider dev/test) and Table 3 (Spider-DK/Syn/Realistic)
    # §5 silent; the authors' evaluation scripts (EVAL/single_eval_maj.py, EVAL/spider_config.py): 8,192 new SQL
    # tokens, 4,096 retriever tokens, vLLM max_model_len 8,192 (training rollouts: 2,048 per role, 6,144)
    max_new_tokens: PositiveInt = 8192  # the generator (SQL) pass
    retriever_max_new_tokens: NonNegativeInt = 4096  # 0 = max_new_tokens
    max_model_len: PositiveInt = 8192  # the evaluation engine's context (prompt + output); engine.max_model_len is training's
    exec_timeout_s: PositiveFloat = 30.0  # seconds per SQL: Spider-format sets, and BIRD-format sets under scoring "kit"
    # How BIRD-format sets are scored (executor/scoring.py): "authors" (paper: their EVAL/evaluation_maj.py; a
    # prediction without SQL runs as no rows and matches an empty gold result, invalid UTF-8 text scores 0,
    # 300 s per SQL), "bird_original" / "bird_minidev" (the BIRD releases' evaluators, 30 s), "kit" (no SQL
    # scores 0, invalid UTF-8 read as U+FFFD, exec_timeout_s; the tiny profile)
    scoring: Scoring = "authors"
    max_examples: NonNegativeInt = 0  # 0 = whole set
    workers: NonNegativeInt = 0  # executor processes; 0 = number of CPU cores
    retriever_parser: AuthorsOrKit = "authors"  # §5 silent; the authors' EVAL parser (first list, table expansion, JSON); "kit"
    generator_parser: AuthorsOrKit = "authors"  # §5 silent; the authors' EVAL/sql_infer.py SQL extraction (fallbacks); "kit"
    ablation_sets: list[str] = field(default_factory=list)  # sets the ablation variants are evaluated on; [] = the first (§6: BIRD dev)
    reuse: bool = True  # an evaluation of the same model, set, settings and code is read back, not redone (evaluate.eval_key)

    def ablation_eval_sets(self) -> list[EvalSet]:
        """The sets notebook 06 evaluates each ablation variant on (`ablation_sets`, else the first)."""
        by_name = {s.name: s for s in self.sets}
        return [by_name[n] for n in self.ablation_sets] if self.ablation_sets else self.sets[:1]

    def __post_init__(self) -> None:
        validate_fields(self, "eval")
        check(isinstance(self.sets, list), "eval.sets", f"expected a list of sets, got {type(self.sets).__name__}")
        self.sets = [s if isinstance(s, EvalSet) else build_section(EvalSet, s, f"eval.sets[{i}]", "<profile>")
                     for i, s in enumerate(self.sets)]
        unknown = [n for n in self.ablation_sets if n not in {s.name for s in self.sets}]
        check(not unknown, "eval.ablation_sets", f"names not in eval.sets: {unknown}")
