"""The authors' released data as the kit's inputs: their initial pool, RL rows and SFT files.

The authors published their stage-1 products (GitHub xbchen1/ACE-SQL, MIT; Hugging Face dataset
xiaobing11/ACE-SQL, `downloads.download_acesql_release`). This package is the one place that knows
their formats and turns them into the kit's own records: `initial_pool` (their `initial_pool.json` as a
`ColumnSetPool`), `rl_rows` (their RL parquet rows as `Task`s), `sft_files` (their Alpaca files as SFT
samples), on the files and column indices of `release_files`. This module reads them for a profile whose
`data.stage1_source` is "authors", and is the command:

    python -m acesql_lib.authors.release --config paper --write-sft runs/paper/distill/sft_samples.jsonl

Malformed records are reported (file, record, field), counted in a `ReadReport` and skipped; a file
that cannot be read at all raises an error naming it.

How gold enters the released pool, and the GRPO pool built from it, is in `pool_init`.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Sequence

from ..data.task import Task
from .initial_pool import pool_statistics, read_pool
from .release_files import release_file
from .rl_rows import read_rl_rows, rl_tasks
from .sft_files import read_sft


def release_dir(cfg: Any) -> Path:
    """The folder holding the profile's download of the release (`data.authors_release_dir`)."""
    from ..config.paths import resolve

    return resolve(cfg.data.authors_release_dir)


def release_tasks(cfg: Any, paths: Any = None) -> tuple[list[Task], list[Task]]:
    """The released RL train and validation questions as kit tasks (databases under the SynSQL folder)."""
    from ..data.datasets import train_db_root

    root, db_root = release_dir(cfg), train_db_root(cfg, paths)
    out = []
    for what in ("rl_train", "rl_validation"):
        rows, report = read_rl_rows(release_file(root, what), db_root)
        print(f"[authors] {report.summary()}")
        out.append(rl_tasks(rows, cfg.data))
    if not out[0]:
        raise ValueError(f"{release_file(root, 'rl_train')}: no usable RL rows")
    return out[0], out[1]


def release_sft_samples(cfg: Any) -> list[dict[str, Any]]:
    """Both roles' released SFT samples: the retriever file's, then the generator file's."""
    samples = []
    for role in ("retriever", "generator"):
        part, report = read_sft(release_file(release_dir(cfg), f"sft_{role}"), role)
        print(f"[authors] {report.summary()}")
        samples += part
    return samples


def release_names(cfg: Any) -> dict[str, list[str | None]]:
    """db_id -> index -> name, from the db_info of the released RL rows."""
    names: dict[str, list[str | None]] = {}
    for what in ("rl_train", "rl_validation"):
        for r in read_rl_rows(release_file(release_dir(cfg), what))[0]:
            names.setdefault(r.example.db_id, r.column_names)
    return names


def main(argv: Sequence[str] | None = None) -> None:
    from ..config.profiles import load_config, parse_overrides

    ap = argparse.ArgumentParser(description="Read the authors' released data into the kit's formats.")
    ap.add_argument("--config", default="paper", help="profile name or YAML path")
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="config overrides")
    ap.add_argument("--write-sft", metavar="JSONL", help="write both roles' SFT samples here (for acesql_lib.train.sft)")
    ap.add_argument("--pool-stats", action="store_true", help="print how the released pool is made up")
    args = ap.parse_args(argv)
    cfg = load_config(args.config, parse_overrides(args.set))
    if args.write_sft:
        samples = release_sft_samples(cfg)
        out = Path(args.write_sft)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text("".join(json.dumps(s) + "\n" for s in samples))
        print(f"wrote {len(samples)} samples to {out}")
    if args.pool_stats:
        root = release_dir(cfg)
        raw, _ = read_pool(release_file(root, "pool"))
        rows, _ = read_rl_rows(release_file(root, "rl_validation"))
        print(json.dumps(pool_statistics(raw, rows), indent=1))


if __name__ == "__main__":
    main()
