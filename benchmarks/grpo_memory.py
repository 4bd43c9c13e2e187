"""Peak memory of one GRPO update, measured, beside the preflight's estimate of it.

A scaled-down Qwen3 (the real vocabulary, a few narrow layers) is trained as the paper profile trains
Qwen3-8B: fp32 master weights under bf16 autocast, a frozen bf16 reference, AdamW, the two roles'
backward passes with PCGrad (`JointGRPO.optimize`, the trainer's own code). One update warms the
optimizer state; the next one is measured:

  cuda: torch.cuda.max_memory_allocated (exact, allocator bytes);
  cpu:  the process's resident high-water mark (VmHWM, reset through /proc/self/clear_refs) above its
        resident size before the model existed, with every allocation of 64 KiB and more mapped and
        returned at once (MALLOC_MMAP_THRESHOLD_), so resident bytes follow live tensors.

    python benchmarks/grpo_memory.py --device cpu --checkpointing 1 [--layers 2 --hidden 256 ...]
    python benchmarks/grpo_memory.py --grid --device cuda --out reports/benchmarks/grpo_memory.json

Prints one JSON line per shape: measured bytes, `acesql_lib.train.memory.grpo_step_bytes`' estimate and its
terms, and their ratio. tests/test_memory.py runs it on CPU; figures: benchmarks/README.md.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parent.parent
MMAP_ENV = {"MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "0", "MALLOC_ARENA_MAX": "2"}

# Shapes the --grid run measures: (layers, hidden, micro-batch, prompt, completion); vocabulary Qwen3's.
GRID = [(2, 256, 2, 256, 256), (2, 512, 4, 256, 512), (4, 512, 2, 512, 512), (4, 1024, 2, 1024, 1024)]
# Larger ones for a GPU (seconds there, too slow for two CPU cores): the paper's micro-batch lengths.
GPU_GRID = [(4, 2048, 4, 2048, 2048), (8, 1024, 6, 1024, 2048)]


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def _reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")  # Linux >= 4.0: VmHWM := VmRSS


def shape_of(args: argparse.Namespace) -> dict:
    heads = max(args.hidden // 64, 1)
    return {"vocab_size": args.vocab, "hidden_size": args.hidden, "num_hidden_layers": args.layers,
            "num_attention_heads": heads, "num_key_value_heads": max(heads // 4, 1), "head_dim": args.hidden // heads,
            "intermediate_size": 3 * args.hidden, "tie_word_embeddings": False}


def measure(args: argparse.Namespace) -> dict:
    """In this process: build, warm, measure one update. Returns the JSON record."""
    import torch
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from acesql_lib.config.profiles import load_config
    from acesql_lib.train.grpo import JointGRPO, RLQuestions
    from acesql_lib.train.memory import UpdateLayout, grpo_step_bytes
    from acesql_lib.train.policy_loss import RoleBatch
    from acesql_lib.roles.pool import ColumnSetPool

    cuda = args.device == "cuda"
    torch.manual_seed(0)
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    base = torch.cuda.memory_allocated() if cuda else _status_kib("VmRSS") * 1024
    shape = shape_of(args)
    config = Qwen3Config(**{k: v for k, v in shape.items()}, max_position_embeddings=args.prompt + args.completion + 8,
                         dtype="float32", attn_implementation="sdpa")
    device = torch.device(args.device)
    with device:  # built in place: no CPU copy of the weights on the way
        policy = Qwen3ForCausalLM(config)
    if args.checkpointing:
        policy.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    with device:
        reference = Qwen3ForCausalLM(config).to(dtype=torch.bfloat16).eval().requires_grad_(False)
    n = args.micro
    cfg = load_config("paper", {"grpo.gradient_checkpointing": bool(args.checkpointing), "grpo.kl_coef": 0.001,
                                "grpo.loss_agg": "global_token_mean", "grpo.micro_batch_size": n,
                                "grpo.logprob_chunk_tokens": args.chunk, "grpo.warmup_ratio": 0.0,
                                "grpo.pcgrad": "symmetric"})
    AcceleratorState._reset_state(True)
    acc = Accelerator(cpu=not cuda, mixed_precision="bf16")
    out = Path(tempfile.mkdtemp(prefix="grpo_memory_"))
    trainer = JointGRPO(cfg, policy, reference, SimpleNamespace(pad_token_id=0), RLQuestions([], ColumnSetPool()), out,
                        accelerator=acc, progress=False)
    gen = torch.Generator().manual_seed(1)

    def batch() -> RoleBatch:
        ids = torch.randint(1, args.vocab, (n, args.prompt + args.completion), generator=gen).tolist()
        return RoleBatch([r[:args.prompt] for r in ids], [r[args.prompt:] for r in ids],
                         torch.linspace(-1.0, 1.0, n))

    trainer.optimize(batch(), batch(), 1.0, 1)  # AdamW's moments exist from here on

    def now() -> int:
        return (torch.cuda.memory_allocated() if cuda else _status_kib("VmRSS") * 1024) - base

    def reset() -> None:
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        else:
            _reset_peak()

    def peak() -> int:
        if cuda:
            torch.cuda.synchronize()
            return torch.cuda.max_memory_allocated() - base
        return _status_kib("VmHWM") * 1024 - base

    phases: dict[str, int] = {}  # the peak inside each phase of the measured update, bytes above `base`
    backward, opt_step = trainer._backward, trainer.optimizer.step

    def timed(name: str, fn):
        def wrapped(*a, **k):
            reset()
            try:
                return fn(*a, **k)
            finally:
                phases[name] = max(phases.get(name, 0), peak())
        return wrapped

    calls = iter(("retriever_backward", "generator_backward"))
    trainer._backward = lambda *a, **k: timed(next(calls), backward)(*a, **k)
    trainer.optimizer.step = timed("optimizer_step", opt_step)
    resident = now()
    t0 = time.perf_counter()
    trainer.optimize(batch(), batch(), 1.0, 2)
    seconds = time.perf_counter() - t0
    peak_bytes = max(phases.values())
    est = grpo_step_bytes(shape, n, args.prompt, args.completion,  # a measured peak holds tensors only
                          UpdateLayout(checkpointing=bool(args.checkpointing), logprob_chunk_tokens=args.chunk,
                                       runtime=False))
    return {"device": args.device, "layers": args.layers, "hidden": args.hidden, "vocab": args.vocab,
            "micro_batch": n, "prompt": args.prompt, "completion": args.completion,
            "checkpointing": bool(args.checkpointing), "logprob_chunk_tokens": args.chunk,
            "params": sum(p.numel() for p in policy.parameters()), "measured_bytes": int(peak_bytes),
            "estimated_bytes": int(est["total"]), "ratio": est["total"] / peak_bytes, "resident_before": int(resident),
            "phases": phases,
            "terms": {k: int(v) for k, v in est.items()}, "update_s": round(seconds, 3)}


def run_in_subprocess(argv: list[str]) -> dict:
    """One shape in a fresh process (CPU: nothing else resident; the allocator settings above)."""
    env = {**os.environ, **MMAP_ENV, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, __file__, *argv], capture_output=True, text=True, env=env, cwd=REPO)
    if done.returncode:
        raise RuntimeError(f"grpo_memory {' '.join(argv)} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def shape_argv(device: str, layers: int, hidden: int, micro: int, prompt: int, completion: int, ckpt: int,
               chunk: int, vocab: int = 151936) -> list[str]:
    return ["--device", device, "--vocab", str(vocab), "--layers", str(layers), "--hidden", str(hidden),
            "--micro", str(micro), "--prompt", str(prompt), "--completion", str(completion),
            "--checkpointing", str(ckpt), "--chunk", str(chunk)]


def grid(device: str, shapes: list[tuple[int, int, int, int, int]], vocab: int = 151936, echo: bool = False
         ) -> list[dict]:
    """Each shape with and without checkpointing, chunked and whole: on CUDA in this process (the allocator's
    peak is exact whatever ran before), on CPU each in a fresh process."""
    records = []
    for shape in shapes:
        for ckpt in (1, 0):
            for chunk in (1024, 0):
                argv = shape_argv(device, *shape, ckpt, chunk, vocab=vocab)
                if device == "cuda":
                    import gc

                    import torch

                    rec = measure(build_parser().parse_args(argv))
                    gc.collect()
                    torch.cuda.empty_cache()
                else:
                    rec = run_in_subprocess(argv)
                records.append(rec)
                if echo:
                    print(json.dumps(rec), flush=True)
    return records


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--vocab", type=int, default=151936)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--micro", type=int, default=2, help="sequences per micro-batch")
    ap.add_argument("--prompt", type=int, default=256)
    ap.add_argument("--completion", type=int, default=256)
    ap.add_argument("--checkpointing", type=int, default=1)
    ap.add_argument("--chunk", type=int, default=1024, help="grpo.logprob_chunk_tokens")
    ap.add_argument("--grid", action="store_true", help="every GRID shape, with and without checkpointing, "
                                                         "chunked and whole, each in its own process")
    ap.add_argument("--shapes", default="", help="with --grid: indices into GRID (default all), e.g. 0,1,2")
    ap.add_argument("--out", default="")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not args.grid:
        if args.device == "cpu" and os.environ.get("MALLOC_MMAP_THRESHOLD_") != MMAP_ENV["MALLOC_MMAP_THRESHOLD_"]:
            print(json.dumps(run_in_subprocess(sys.argv[1:] if argv is None else argv)))
            return 0
        print(json.dumps(measure(args)))
        return 0
    chosen = [int(i) for i in args.shapes.split(",")] if args.shapes else range(len(GRID))
    records = grid(args.device, [GRID[i] for i in chosen], vocab=args.vocab, echo=True)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(records, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
