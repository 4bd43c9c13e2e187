"""GPU checks for scripts/gpu_rehearsal.sh: greedy parity of vLLM and HF before and after a weight sync (also with
the engine asleep through the step, vLLM's sleep mode), and rollout tokens/s of the colocated engine (HF policy on the same GPU) against a standalone `vllm.LLM`.

    python scripts/gpu_rehearsal_checks.py [--dtype bfloat16] [--prompts 64 --n 8 --max-new-tokens 128]

Prints one JSON line. Exit 1 when float32 greedy parity fails before or after the sync, awake or asleep. In bfloat16
the two engines' kernels may round differently, so bf16 agreement is reported (share of prompts with
identical greedy tokens), not required.
"""
from __future__ import annotations

import argparse
import gc
import json
import sys
import tempfile
import time
from pathlib import Path


def _texts(k: int) -> list[str]:
    tables = ["singer", "concert", "stadium", "student", "course", "orders", "customer", "employee"]
    return [f"SELECT name, age FROM {tables[i % 8]} WHERE year = {1950 + i % 70} AND id > {i * 17 % 900}; "
            f"how many rows of {tables[i % 8]} were created in {1950 + i % 70}?" for i in range(k)]


def parity(dtype: str, workdir: Path, max_new_tokens: int = 24, sleep: bool = False) -> dict:
    """Greedy tokens of vLLM and HF before and after an SGD step and a weight sync; with `sleep`, the engine
    sleeps through the step as GRPO's update does (`engine.sleep_during_update`) and the sync wakes it."""
    import torch

    from acesql_lib.config.model import ModelConfig
    from acesql_lib.models.hf_engine import HFEngine
    from acesql_lib.models.vllm_engine import VLLMEngine, VLLMSettings
    from acesql_lib.models.loading import build_tiny_from_config, save_tiny

    torch.manual_seed(0)
    model, tok = build_tiny_from_config(ModelConfig(), _texts(400))
    model = model.to("cuda", dtype=getattr(torch, dtype))
    folder = save_tiny(model, tok, workdir / f"tiny_{dtype}")
    prompts = [tok.apply_chat_template([{"role": "user", "content": t}], tokenize=False, add_generation_prompt=True)
               for t in _texts(16)]

    def greedy(engine) -> list[list[int]]:
        return [g[0].token_ids for g in engine.generate(prompts, n=1, temperature=0.0, max_new_tokens=max_new_tokens)]

    hf = HFEngine(model, tok)
    vllm_engine = VLLMEngine(folder, VLLMSettings(dtype=dtype, gpu_memory_utilization=0.3, max_model_len=512, seed=0,
                                                  sleep_during_update=sleep))
    before = (greedy(hf), greedy(vllm_engine))
    vllm_engine.release_for_update()  # a no-op unless `sleep`
    opt = torch.optim.SGD(model.parameters(), lr=5e-2)
    batch = tok(_texts(8), return_tensors="pt", padding=True).to("cuda")
    model.train()
    loss = model(**batch, labels=batch["input_ids"]).loss
    loss.backward()
    opt.step()
    start = time.perf_counter()
    vllm_engine.sync_weights(model)
    sync_s = time.perf_counter() - start
    after = (greedy(hf), greedy(vllm_engine))
    vllm_engine.close()
    del model, hf
    gc.collect()
    torch.cuda.empty_cache()

    def agree(pair) -> float:
        return sum(a == b for a, b in zip(*pair)) / len(pair[0])

    return {"dtype": dtype, "asleep_during_step": sleep, "agree_before": agree(before), "agree_after": agree(after),
            "changed_by_step": before[0] != after[0], "sync_s": round(sync_s, 3)}


def throughput(dtype: str, workdir: Path, n_prompts: int, n: int, max_new_tokens: int) -> dict:
    import torch
    from vllm import LLM, SamplingParams

    from acesql_lib.config.model import ModelConfig
    from acesql_lib.models.vllm_engine import VLLMEngine, VLLMSettings
    from acesql_lib.models.loading import build_tiny_from_config, save_tiny

    torch.manual_seed(0)
    model, tok = build_tiny_from_config(ModelConfig(), _texts(400))
    model = model.to("cuda", dtype=getattr(torch, dtype))
    folder = save_tiny(model, tok, workdir / f"bench_{dtype}")
    prompts = [tok.apply_chat_template([{"role": "user", "content": t}], tokenize=False, add_generation_prompt=True)
               for t in _texts(n_prompts)]

    def timed(call) -> tuple[float, int]:
        call(prompts[:2], 2, 8)  # warm-up
        start = time.perf_counter()
        tokens = call(prompts, n, max_new_tokens)
        return time.perf_counter() - start, tokens

    colocated = VLLMEngine(folder, VLLMSettings(dtype=dtype, gpu_memory_utilization=0.4, max_model_len=1024, seed=0))
    co_s, co_tok = timed(lambda p, k, m: sum(c.n_tokens for g in colocated.generate(
        p, n=k, temperature=1.0, max_new_tokens=m, seed=0) for c in g))
    colocated.close()
    del model
    gc.collect()
    torch.cuda.empty_cache()
    llm = LLM(model=str(folder), dtype=dtype, gpu_memory_utilization=0.4, max_model_len=1024, seed=0)
    st_s, st_tok = timed(lambda p, k, m: sum(len(o.token_ids) for r in llm.generate(
        p, SamplingParams(n=k, temperature=1.0, top_p=1.0, max_tokens=m, seed=0), use_tqdm=False) for o in r.outputs))
    return {"colocated_tokens_per_s": round(co_tok / co_s, 1), "standalone_tokens_per_s": round(st_tok / st_s, 1),
            "ratio_colocated_over_standalone": round((co_tok / co_s) / (st_tok / st_s), 3),
            "prompts": n_prompts, "n": n, "max_new_tokens": max_new_tokens}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = {"parity_float32": parity("float32", Path(tmp)), f"parity_{args.dtype}": parity(args.dtype, Path(tmp)),
               "parity_float32_asleep": parity("float32", Path(tmp), sleep=True),
               "throughput": throughput(args.dtype, Path(tmp), args.prompts, args.n, args.max_new_tokens)}
    print(json.dumps(out), flush=True)
    ok = [p["agree_before"] == 1.0 and p["agree_after"] == 1.0 and p["changed_by_step"]
          for p in (out["parity_float32"], out["parity_float32_asleep"])]
    return 0 if all(ok) else 1


if __name__ == "__main__":
    sys.exit(main())
