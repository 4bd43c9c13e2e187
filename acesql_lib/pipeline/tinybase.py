"""The tiny profile's base model: a small Qwen3 taught the two output formats on gold answers.

The paper starts from Qwen3-8B (§1), which already writes well-formed retriever lists and SQL, gets
some questions right and leaves plenty to gain. The CPU profile cannot download it, so it builds a
stand-in offline: a byte-level BPE tokenizer trained on its training text (digits split one by one, as
Qwen's are, so copying a number from the question is a run of single-digit copies; the space before
a capitalised word split off, so a name reads the same in the question and in the SQL), a freshly
initialised Qwen3 sized by `model.tiny_*`, and a short SFT (TRL `SFTTrainer`, completion-only
loss, CPU settings) on gold outputs of BOTH roles from the tiny world's training pool:

- retriever: full schema + question -> think + the gold SQL's column set (`column_set`);
- generator: schema pruned to that column set + question -> think + the gold SQL.

Think text (kit's choice; the tiny world has no reasoning traces): one templated sentence that
names the role and the tables the answer uses, "Columns of a, b." (retriever) and "Query over a, b."
(generator). It keeps the `<think>` format of §2 without spending CPU time on long rationales. With
`model.tiny.think_extra` > 0 it goes on with a random number of filler sentences, so outputs
vary in length and the efficiency claim (RL shortens outputs under the length penalty) can show.

What decides the dev score is copying values from the question and evidence: the dev values never
occur in training SQL. Three things make copying learnable: the tokenizer is trained on the
training text only (every token the dev text is cut into has a trained embedding), a share
`model.tiny.value_swap` of the questions has its values made up (`swap_values`; memorising
values stops paying), and enough steps: copying appears between steps 400 and 600 (dev EX 1% at
400, 10% at 600, ~20% at 1,000; benchmarks/tiny_base_calibration.py).

The strength of the base model is controlled by `model.tiny.steps` (optimizer steps, never
wall time), so a seed gives the same model on any machine. The folder gets a manifest (seed,
steps, hash of every setting that shapes the model); a rerun with the same settings reuses it.

The kit ships the tiny profile's base (`data/tiny_base/`, `model.tiny.prebuilt`), as the paper
profile downloads Qwen3-8B: a run copies it in when its manifest's settings equal the run's, the
machine's thread count and torch's build suffix aside, and builds otherwise (`shipped_base`, which is
not part of a build's key). Shipping one model also makes every machine start from the same weights, where
builds on other thread counts differ in the last digits. `python -m acesql_lib.pipeline.tinybase --ship` builds (or
reuses) the base and writes it there, `--rekey` carries it over to a refactor of the building code;
tests/test_tinybase_prebuilt.py fails when the shipped one no longer matches the code.
"""
from __future__ import annotations

import argparse
import json
import random
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import torch

from ..config.settings import Config
from ..data.datasets import schemas_for
from ..models.loading import build_tiny_model, train_tiny_tokenizer
from ..config.paths import Paths
from ..roles.prompts import generator_messages, generator_target, question_text, retriever_messages, retriever_target
from ..runtime.reuse_keys import code_hash, imported_modules, settings_hash
from ..train.sft import SFTRun, train_sft
from .shipped_base import MANIFEST, read_manifest, rekey, ship, use_prebuilt
from ..data.sqlcolumns import ColumnResolutionError, column_set
from ..data.tinyworld import TinyWorld

KIT_VERSION = 5  # bump when the recipe changes in a way neither the config nor the code hash can see
# The base model's reuse key (`base_settings`) holds the code of this module and of every module it imports
# (reuse_keys.imported_modules: recipe, tokenizer and model, SFT, prompt and schema text, values, column sets, data
# loading, the tiny world), less the modules that do not shape the weights: `config`'s settings modules, whose
# values are the settings the key holds (their code only declares, loads and checks them), `evaluate`, which
# `main --evaluate` runs on a built base, and `shipped_base` and `reuse_keys`, which decide whether a base is
# copied or built, never what a build makes. Filtering chooses the questions left out with `model.tiny.holdout_stage1` only; otherwise its code
# is left out too.
BUILD_ENTRY = ("pipeline.tinybase",)
BUILD_LEAVES_OUT = ("config.settings", "config.data", "config.model", "config.train", "config.eval", "config.choices",
                    "config.checks", "config.profiles", "evaluation.evaluate", "pipeline.shipped_base",
                    "runtime.reuse_keys")
HOLDOUT_MODULES = ("data.filtering",)


# Sentences a think text may go on with (`model.tiny.think_extra`), always in this order: they
# carry nothing the answer needs, so a shorter think loses nothing, and each sentence end is a choice
# between going on and closing the think, which the length penalty of RL can move (§4 step 6).
THINK_FILLER = ("Read the question.", "Check the schema.", "Keep what is asked.", "Mind the joins.",
                "Mind the filters.", "Then write it.")


def tiny_think(columns: Iterable[str], role: str, extra: int = 0) -> str:
    """The templated think text of the tiny targets: the role, then the tables the answer reads, then
    the first `extra` sentences of `THINK_FILLER`.

    The first word differs per role ("Columns" / "Query"), so the first generated token commits to
    the right output format next to the prompt's end, which a 2-layer model finds far easier than
    recalling the task line hundreds of tokens back.
    """
    if role not in ("retriever", "generator"):
        raise ValueError(f"role must be 'retriever' or 'generator', got {role!r}")
    if not 0 <= extra <= len(THINK_FILLER):
        raise ValueError(f"extra must be 0..{len(THINK_FILLER)} filler sentences, got {extra}")
    tables = ", ".join(sorted({c.split(".", 1)[0] for c in columns}))
    head = f"Columns of {tables}." if role == "retriever" else f"Query over {tables}."
    return " ".join((head, *THINK_FILLER[:extra]))


_NAME_VALUE = re.compile(r"[A-Z][a-z]+(?: [A-Z][a-z]+)*")
_SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]


def pseudo_value(rng: random.Random) -> str:
    """A made-up capitalised name ("Kavoru Tesi"): no database holds it, so only copying can produce it."""
    words = ["".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 3))) for _ in range(rng.randint(1, 2))]
    return " ".join(w.capitalize() for w in words)


_NUMBER_LITERAL = re.compile(r"(?<=[<>=] )-?\d+(?:\.\d+)?(?![\w.])")  # a number compared against


def _spelled(value: str) -> re.Pattern:
    return re.compile(rf"(?<![\w'.]){re.escape(value)}(?![\w']|\.\d)")


def pseudo_number(value: str, rng: random.Random) -> str:
    """A random number written like `value` (same sign, digit count and decimals)."""
    sign, body = ("-", value[1:]) if value.startswith("-") else ("", value)
    whole, _, frac = body.partition(".")
    lead = str(rng.randint(1, 9)) if len(whole) > 1 else str(rng.randint(0, 9))
    digits = lead + "".join(str(rng.randint(0, 9)) for _ in range(len(whole) - 1))
    return sign + digits + ("." + "".join(str(rng.randint(0, 9)) for _ in frac) if frac else "")


def swap_values(question: str, evidence: str, sql: str, rng: random.Random) -> tuple[str, str, str] | None:
    """Question, evidence and SQL with every literal that the question or evidence spells out (a
    name-like string, or a number the SQL compares against) replaced by a made-up one, the same in
    all three; None when there is no such literal."""
    text = question + "\n" + evidence
    names = {v for v in re.findall(r"'([^']*)'", sql) if _NAME_VALUE.fullmatch(v) and _spelled(v).search(text)}
    numbers = {v for v in _NUMBER_LITERAL.findall(sql) if _spelled(v).search(text)}
    if not names and not numbers:
        return None
    # longest first (a value inside a longer one is replaced after it), ties by text: a set's order follows the
    # process's string hashing (PYTHONHASHSEED), and each value draws its stand-in from `rng` in this order
    for value in sorted(names, key=lambda v: (-len(v), v)):
        fake = pseudo_value(rng)
        question, evidence = (_spelled(value).sub(fake, t.replace(f"'{value}'", f"'{fake}'"))
                              for t in (question, evidence))
        sql = sql.replace(f"'{value}'", f"'{fake}'")
    for value in sorted(numbers, key=lambda v: (-len(v), v)):
        fake = pseudo_number(value, rng)
        question, evidence = (_spelled(value).sub(fake, t) for t in (question, evidence))
        sql = _NUMBER_LITERAL.sub(lambda m: fake if m.group() == value else m.group(), sql)
    return question, evidence, sql


def gold_samples(examples: Sequence[Any], schemas: Mapping[str, Any], style: str = "tiny",
                 value_swap: float = 0.0, seed: int = 0, think_extra: int = 0) -> tuple[list[dict[str, Any]], int]:
    """Retriever and generator SFT samples from gold SQL (two per question); also the number skipped.

    A question whose gold SQL does not resolve to a column set is skipped (and counted). With
    `value_swap` > 0 that share of questions has its name values replaced by made-up ones
    (`swap_values`) in both roles' samples: the tiny world's dev values never occur in training SQL,
    and a model trained from scratch otherwise memorises the training values instead of copying.
    With `think_extra` > 0 each sample's think text goes on with 0..`think_extra` filler sentences
    (uniform, drawn per sample from a stream of its own, so the value swaps stay as they were): the
    base, and the SFT traces distilled from it, then think at varied length.
    """
    rng = random.Random(seed)
    think_rng = random.Random(f"think-{seed}")

    def think(columns: frozenset[str], role: str) -> str:
        return tiny_think(columns, role, think_rng.randint(0, think_extra) if think_extra else 0)

    samples, skipped = [], 0
    for ex in examples:
        schema = schemas[ex.db_id]
        try:
            columns = column_set(ex.sql, schema)
        except ColumnResolutionError:
            skipped += 1
            continue
        question, evidence, sql = ex.question, ex.evidence, ex.sql
        if value_swap and rng.random() < value_swap:
            question, evidence, sql = swap_values(question, evidence, sql, rng) or (question, evidence, sql)
        index = getattr(schema, "values_index", None)  # the prompts' question-relevant values, as a Task shows them
        relevant = index.relevant_values(question_text(question, evidence)) if index is not None else None
        samples.append({"prompt": retriever_messages(schema.to_ddl(relevant_values=relevant), question, evidence,
                                                     style=style),
                        "completion": [{"role": "assistant",
                                        "content": retriever_target(columns, think(columns, "retriever"))}]})
        samples.append({"prompt": generator_messages(schema.to_ddl(columns, relevant_values=relevant), question,
                                                     evidence, style=style),
                        "completion": [{"role": "assistant",
                                        "content": generator_target(sql, think(columns, "generator"))}]})
    return samples, skipped


def _sample_text(sample: Mapping[str, Any]) -> str:
    return "\n".join(m["content"] for key in ("prompt", "completion") for m in sample[key])


def base_tokenizer(samples: Sequence[Mapping[str, Any]], vocab_size: int) -> Any:
    """The tokenizer, trained on exactly the text the base model trains on.

    A token that never occurs in training keeps its random embedding, so the model can neither read
    nor copy it. Trained on the dev text as well, the tokenizer made whole tokens of held-out values
    and of the unseen databases' names; trained on the training text only, those are spelled with
    pieces the model has learned.
    """
    return train_tiny_tokenizer((_sample_text(s) for s in samples), vocab_size)


def build_leaves_out(cfg: Config) -> tuple[str, ...]:
    """The modules `BUILD_ENTRY` imports whose code does not key the base model of `cfg`."""
    return BUILD_LEAVES_OUT + (() if cfg.model.tiny.holdout_stage1 else HOLDOUT_MODULES)


def build_modules(cfg: Config) -> tuple[str, ...]:
    """The modules whose code hash keys the base model of `cfg`."""
    return imported_modules(*BUILD_ENTRY, leave_out=build_leaves_out(cfg))


def base_settings(cfg: Config, world: TinyWorld) -> dict[str, Any]:
    """Everything that shapes the base model; its hash decides whether a saved model is reused."""
    manifest = world.read_manifest() if world.manifest.is_file() else {}
    return {
        "kit_version": KIT_VERSION, "seed": cfg.seed, "sft": asdict(base_sft_config(cfg)),
        "model": {**asdict(cfg.model), "tiny": {k: v for k, v in asdict(cfg.model.tiny).items() if k != "prebuilt"}},  # where from, not what
        "data": {"n_example_values": cfg.data.n_example_values, "example_max_chars": cfg.data.example_max_chars},
        # with the hold-out, filtering decides which questions the base is trained on
        "filtering": asdict(cfg.filtering) if cfg.model.tiny.holdout_stage1 else None,
        "world": {k: manifest.get(k) for k in ("kind", "generator_version", "seed", "n_train", "n_dev")},
        "torch": torch.__version__, "libraries": _library_versions(),
        "code": code_hash(*BUILD_ENTRY, leave_out=build_leaves_out(cfg)),
        # CPU float sums are ordered by thread: 1 and 2 threads give other weights after 4 steps of the same seed
        "torch_threads": torch.get_num_threads(),
    }


def _library_versions() -> dict[str, str]:
    """Versions of the libraries that train the base model (a different TRL can train a different model)."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in ("transformers", "trl", "tokenizers", "accelerate"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "absent"
    return out


def base_sft_config(cfg: Config):
    """The base model's SFT settings: the profile's SFT block with the model.tiny_base_* values.

    Only what shapes the base model is kept from the SFT block (max_length, optimizer details), so a
    change meant for stage 1's mixed SFT (epochs, logging) does not rebuild the base model. The two
    speed settings (length-sorted passes, completion-only LM head; same loss and gradient) are the
    base build's own, so the paper profile's GPU settings for stage 1 do not slow the rehearsal's base.
    """
    return replace(cfg.sft, learning_rate=cfg.model.tiny.lr, per_device_batch_size=cfg.model.tiny.batch_size,
                   gradient_accumulation_steps=1, max_steps=cfg.model.tiny.steps, bf16=False,
                   lr_scheduler_type=cfg.model.tiny.scheduler, warmup_ratio=cfg.model.tiny.warmup_ratio,
                   gradient_checkpointing=False, save_steps=0, num_epochs=1, logging_steps=10, report_to="none",
                   length_split=cfg.model.tiny.length_split, completion_head=cfg.model.tiny.completion_head)


def base_training_data(cfg: Config, world: TinyWorld, paths: Paths | None = None
                       ) -> tuple[list[dict[str, Any]], int, Any]:
    """The base model's SFT samples (both roles), the number of questions skipped, and its tokenizer;
    the prompts carry the schema text the profile's own prompts show (`profile_schemas`)."""
    pool = load_train_pool(cfg, world)
    if cfg.model.tiny.holdout_stage1:
        held = {e.id for e in stage1_pool(cfg, pool)}
        pool = [e for e in pool if e.id not in held]
    schemas = profile_schemas(cfg, paths or Paths.from_config(cfg), pool)
    samples, skipped = gold_samples(pool, schemas, cfg.model.prompt_style, cfg.model.tiny.value_swap, cfg.seed,
                                    cfg.model.tiny.think_extra)
    return samples, skipped, base_tokenizer(samples, cfg.model.tiny.vocab_size)


def stage1_pool(cfg: Config, pool: Sequence[Any]) -> list[Any]:
    """Stage 1's questions, chosen from `pool` exactly as notebook 01 chooses them (`filter_pool`,
    deterministic for a seed), so the base build can leave them out (`model.tiny.holdout_stage1`)."""
    from ..data.filtering import filter_pool

    schemas = schemas_for(pool, cfg.data.n_example_values, cfg.data.example_max_chars)
    return list(filter_pool(pool, cfg.filtering, schemas, seed=cfg.seed, progress=False).kept)


def load_train_pool(cfg: Config, world: TinyWorld) -> list[Any]:
    """The tiny world's training pool as notebooks 00-01 read it (`datasets.world_training_pool`), malformed
    records reported."""
    from ..data.datasets import world_training_pool

    loaded = world_training_pool(world, cfg.data.max_train_examples)
    if loaded.skipped:
        print(f"[tinybase] skipped {len(loaded.skipped)} malformed pool records, first: {loaded.skipped[:3]}")
    return list(loaded)


def profile_schemas(cfg: Config, paths: Paths, pool: Sequence[Any]) -> dict[str, Any]:
    """db_id -> Schema with the text the profile's prompts show (`data.schema_style`, question-relevant
    values with `data.relevant_values`), as `task.build_tasks` gives them: a base trained on the kit's
    DDL text reads the authors' text as unseen input (the rehearsal's base then got no rollout right)."""
    schemas = schemas_for(pool, cfg.data.n_example_values, cfg.data.example_max_chars)
    if cfg.data.schema_style != "kit" or cfg.data.relevant_values:
        from ..data.task import profile_schema

        db_paths = {ex.db_id: ex.db_path for ex in pool}
        for db_id, schema in schemas.items():
            profile_schema(schema, db_paths[db_id], cfg.data, paths.run / "values_index")
    return schemas


@contextmanager
def compiled_decoder(model: Any, enabled: bool = True) -> Iterator[Any]:
    """Within the block the decoder's forward runs through `torch.compile` (dynamic shapes); after it,
    the eager forward is back. Only the forward is wrapped, so the weights keep their names
    (`model.tiny.compile`; benchmarks/tiny_base_speed.py measures it)."""
    if not enabled:
        yield model
        return
    decoder = model.get_decoder()
    decoder.forward = torch.compile(decoder.forward, dynamic=True)
    try:
        yield model
    finally:
        decoder.__dict__.pop("forward", None)


def build_tiny_base(cfg: Config, paths: Paths, world: TinyWorld, force: bool = False, progress: bool = True,
                    eval_fn: Callable[[Any, Any], dict[str, Any]] | None = None, eval_every: int = 0) -> Path:
    """Build (or reuse) the tiny base model in `paths.base_model`; returns the folder.

    `eval_fn(model, tokenizer) -> metrics`, every `eval_every` steps and at the end, traces the
    base model's strength against steps (benchmarks/tiny_base_calibration.py); the results go to
    the manifest's "evals".
    """
    out = Path(paths.base_model)
    settings = base_settings(cfg, world)
    digest = settings_hash(settings)
    manifest_path = out / MANIFEST
    if not force and manifest_path.is_file() and (out / "config.json").is_file():
        old = json.loads(manifest_path.read_text())
        if old.get("config_hash") == digest:
            return out
    if not force and eval_fn is None and cfg.model.tiny.prebuilt and \
            use_prebuilt(cfg.model.tiny.prebuilt, out, settings, digest):
        return out
    start = time.perf_counter()
    torch.manual_seed(cfg.seed)
    samples, skipped, tokenizer = base_training_data(cfg, world, paths)
    m = cfg.model
    model = build_tiny_model(tokenizer, m.tiny.hidden_size, m.tiny.num_layers, m.tiny.num_heads, m.tiny.num_kv_heads,
                             m.tiny.intermediate_size, m.tiny.max_position, cfg.seed)
    lengths = prompt_lengths(tokenizer, samples)
    if lengths["max_total"] > min(m.tiny.max_position, cfg.sft.max_length):
        raise ValueError(f"tiny base: a sample has {lengths['max_total']} tokens, more than "
                         f"min(model.tiny.max_position, sft.max_length) = {min(m.tiny.max_position, cfg.sft.max_length)}")
    work = out.with_name(out.name + ".building")
    sft_cfg = replace(base_sft_config(cfg), report_to=cfg.sft.report_to)  # tracking does not shape the model
    with compiled_decoder(model, m.tiny.compile):
        result = train_sft(model, tokenizer, samples, sft_cfg, work,
                           SFTRun(max_steps=m.tiny.steps, seed=cfg.seed, completion_only=not m.tiny.full_loss,
                                  group_by_length=m.tiny.group_by_length,
                                  eval_fn=(lambda mdl: eval_fn(mdl, tokenizer)) if eval_fn else None,
                                  eval_every=eval_every, desc="base model"))
    model.save_pretrained(work)
    tokenizer.save_pretrained(work)
    manifest = {"seed": cfg.seed, "steps": result.steps, "config_hash": digest, "settings": settings,
                "samples": len(samples), "skipped_questions": skipped, "train_loss": result.train_loss,
                "train_seconds": round(result.seconds, 1), "build_seconds": round(time.perf_counter() - start, 1),
                "parameters": sum(p.numel() for p in model.parameters()), "token_lengths": lengths,
                "evals": result.evals}
    (work / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True, default=str) + "\n")
    if out.exists():
        import shutil

        shutil.rmtree(out)
    work.rename(out)
    return out


def prompt_lengths(tokenizer: Any, samples: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Token lengths of the rendered generation prompts and completions, per role (mean and max)."""
    stats: dict[str, list[int]] = {"retriever_prompt": [], "generator_prompt": [], "completion": [], "total": []}
    for i, s in enumerate(samples):
        prompt = tokenizer.apply_chat_template(s["prompt"], add_generation_prompt=True, tokenize=True,
                                               return_dict=True)["input_ids"]
        completion = tokenizer(s["completion"][0]["content"], add_special_tokens=False)["input_ids"]
        stats["retriever_prompt" if i % 2 == 0 else "generator_prompt"].append(len(prompt))
        stats["completion"].append(len(completion) + 1)  # + end-of-turn token
        stats["total"].append(len(prompt) + len(completion) + 1)
    out: dict[str, float] = {}
    for k, v in stats.items():
        out[f"mean_{k}"] = round(sum(v) / len(v), 1) if v else 0.0
        out[f"max_{k}"] = max(v) if v else 0
    return out


def ensure_base_model(cfg: Config, paths: Paths) -> str:
    """The profile's base model: built offline here for the tiny profile, a hub id or folder otherwise."""
    if not cfg.model.build_tiny:
        return cfg.model.base_model
    from ..data.tinyworld import build_profile_world

    world = build_profile_world(cfg.data, paths.tinyworld)
    return str(build_tiny_base(cfg, paths, world))


def main(argv: Sequence[str] | None = None) -> Path:
    from ..config.context import RunContext
    from ..data.tinyworld import build_profile_world

    ap = argparse.ArgumentParser(description="Build the tiny profile's base model (gold-output SFT on the tiny world).")
    ap.add_argument("--profile", default="tiny")
    ap.add_argument("--force", action="store_true")
    ap.add_argument("--evaluate", action="store_true", help="also run the two-pass greedy evaluation on the dev set")
    ap.add_argument("--ship", action="store_true",
                    help="build without the shipped copy and write the result to model.tiny.prebuilt")
    ap.add_argument("--rekey", nargs=2, metavar=("OLD_BUILD", "NEW_BUILD"),
                    help="keep the shipped weights under this code's key: two builds on one machine, from the shipped "
                         "copy's code and from this code, that are byte for byte the same (shipped_base.rekey)")
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="config overrides")
    args = ap.parse_args(argv)
    from ..config.profiles import parse_overrides

    ctx = RunContext.create(args.profile, parse_overrides(args.set))
    if args.rekey:
        from ..config.paths import resolve

        shipped = resolve(ctx.cfg.model.tiny.prebuilt)
        rekey(shipped, Path(args.rekey[0]), Path(args.rekey[1]))
        print(f"rekeyed: {shipped} (weights unchanged)")
        return shipped
    cfg, paths = ctx.cfg, ctx.paths
    world = build_profile_world(cfg.data, paths.tinyworld)
    if args.ship:
        if not cfg.model.tiny.prebuilt:
            raise SystemExit("--ship: model.tiny.prebuilt is empty; name the folder to write")
        cfg = replace(cfg, model=replace(cfg.model, tiny=replace(cfg.model.tiny, prebuilt="")))  # a build, never the old copy
    copied = (paths.base_model / MANIFEST).is_file() and "prebuilt_from" in read_manifest(paths.base_model)
    path = build_tiny_base(cfg, paths, world, force=args.force or (args.ship and copied))
    if args.ship:
        from ..config.paths import resolve

        print(f"shipped: {ship(path, resolve(ctx.cfg.model.tiny.prebuilt))}")
    manifest = read_manifest(path)
    print(json.dumps({k: manifest[k] for k in ("steps", "train_loss", "build_seconds", "token_lengths")}, indent=1))
    if args.evaluate:
        from ..evaluation.evaluate import evaluate_set

        r = evaluate_set(cfg, paths, path, cfg.eval.sets[0], "base")
        keys = ("ex", "generator_ability", "retriever_ability", "column_precision", "column_recall",
                "tokens_per_question", "seconds")
        print(json.dumps({k: r.metrics[k] for k in keys}, indent=1, default=str))
    return path


if __name__ == "__main__":
    main()
