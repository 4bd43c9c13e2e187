"""The two engines inside the training loop and the pipeline, side by side in one run on one machine.

(1) Joint GRPO on the RL fixture policy (tests' `rl_setup`), `--steps` steps per run, runs
    alternating hf, vllm, hf, vllm, ... (`--repeats` each): seconds per step, per generated token, and the
    rollout share of a step (the first step, which warms each engine, left out).
(2) The rehearsal pipeline at the smoke size of tests/test_pipeline_rehearsal.py, once with each engine:
    wall time per notebook.
Both engines run in this one environment (.venv-vllm holds every kit dependency at the kit's pins), so
the only difference is the engine:

    .venv-vllm/bin/python benchmarks/engines_in_loop.py [--steps 6 --repeats 2] [--no-pipeline]

Prints a table and one JSON line (also to --out). Figures: benchmarks/README.md ("Engines in the loop").
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # the tests' RL run builder (rl_setup)

ROOTS = ("synsql_dir", "bird_dev_dir", "spider_dir", "spider_dk_dir", "spider_syn_dir", "spider_realistic_dir")
SMOKE = {"grpo.max_steps": 2, "grpo.val_every": 2, "grpo.save_every": 2, "eval.max_examples": 2}


def grpo_run(template: Path, work: Path, kind: str, steps: int) -> dict[str, float]:
    from acesql_lib.config.context import RunContext
    from acesql_lib.train.grpo_run import build_trainer
    from rl_setup import rl_overrides

    shutil.copytree(template, work)
    over = rl_overrides(work, **{"engine.kind": kind, "grpo.max_steps": steps, "grpo.save_every": steps})
    ctx = RunContext.create("tiny", over)
    start = time.perf_counter()
    trainer = build_trainer(ctx.cfg, ctx.paths, progress=False)
    build_s = time.perf_counter() - start
    trainer.train()
    trainer.engine.close()
    log = [json.loads(x) for x in (trainer.out / "metrics.jsonl").read_text().splitlines()][1:]
    n = trainer.grpo.batch_questions
    tokens = [n * (trainer.grpo.n_retriever * m["completion_length/retriever"] +
                   trainer.grpo.n_generator * m["completion_length/generator"]) for m in log]  # per step, all samples
    step_s = sum(m["time/step_s"] for m in log)
    return {"build_s": build_s, "step_s": step_s / len(log), "rollout_s": sum(m["time/rollout_s"] for m in log) / len(log),
            "rollout_share": sum(m["time/rollout_s"] for m in log) / step_s,
            "ms_per_token": 1000 * sum(m["time/generation_s"] for m in log) / sum(tokens)}


def pipeline_run(root: Path, kind: str) -> dict[str, float]:
    from acesql_lib.pipeline.runner import PipelineOptions, run_pipeline

    data = {f"data.{r}": str(root / "data" / r.replace("_dir", "") / ("dev_20240627" if r == "bird_dev_dir" else ""))
            for r in ROOTS}
    over = {"run_dir": str(root / "run"), "reports_dir": str(root / "reports"),
            "data.tinyworld_dir": str(root / "world"), **data, **SMOKE, "engine.kind": kind}
    start = time.perf_counter()
    runs = run_pipeline("rehearsal", overrides=over, options=PipelineOptions(progress=False))
    return {"total_s": time.perf_counter() - start, **{r.name: r.seconds for r in runs}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--no-pipeline", action="store_true")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    from rl_setup import build_rl_run

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        template = build_rl_run(tmp / "fixture")
        grpo: dict[str, list[dict[str, float]]] = {"hf": [], "vllm": []}
        for i in range(args.repeats):
            for kind in ("hf", "vllm"):
                grpo[kind].append(grpo_run(template, tmp / f"{kind}{i}", kind, args.steps))
        pipeline = {} if args.no_pipeline else {kind: pipeline_run(tmp / f"pipeline_{kind}", kind)
                                                 for kind in ("hf", "vllm")}
    med = {k: {m: statistics.median(r[m] for r in rows) for m in rows[0]} for k, rows in grpo.items()}
    print(f"GRPO, {args.steps} steps x {args.repeats} runs per engine (medians; first step left out):")
    print(f"{'':8}{'build s':>9}{'s/step':>9}{'rollout s':>11}{'share':>8}{'ms/token':>10}")
    for k, m in med.items():
        print(f"{k:8}{m['build_s']:9.2f}{m['step_s']:9.3f}{m['rollout_s']:11.3f}{m['rollout_share']:8.2f}"
              f"{m['ms_per_token']:10.3f}")
    print(f"vllm / hf: s/step {med['vllm']['step_s'] / med['hf']['step_s']:.2f}x, "
          f"ms/token {med['vllm']['ms_per_token'] / med['hf']['ms_per_token']:.2f}x")
    if pipeline:
        print("\nrehearsal pipeline (smoke size), seconds per notebook:")
        for name in pipeline["hf"]:
            print(f"  {name:24}{pipeline['hf'][name]:8.1f}{pipeline['vllm'][name]:8.1f}"
                  f"{pipeline['vllm'][name] / pipeline['hf'][name]:7.2f}x")
    result = {"grpo_runs": grpo, "grpo_median": med, "pipeline": pipeline, "steps": args.steps}
    line = json.dumps(result)
    print(line)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(line + "\n")


if __name__ == "__main__":
    main()
