"""A fixed calibration workload, so times measured on different days (or machines) compare.

The same machine runs the tiny pipeline 2-3x slower on a busy day than on a quiet one. A wall time alone
therefore says little; beside it, the kit reports the time of this short, fixed workload, measured in the
same run, and the wall time in units of it ("x calibration"). The workload is built like the kit's own
work, so it slows down as the kit does:

- compute: forward and backward passes of a tiny Qwen3 (the tiny profile's shape) on a 16 x 256 batch;
- Python-bound decoding: greedy `generate` of 32 tokens for 8 prompts with the same model, where the time
  goes to per-token Python overhead as in the tiny pipeline's generation.

Each part runs `repeats` times and its fastest run counts (the least disturbed one); the calibration is
the sum of the two parts, about 1-3 s on a 2-core CPU. Runs with torch's current thread setting.

    python -m acesql_lib.runtime.calibration          # prints the figure and its parts
"""
from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, dataclass

import torch

SHAPE = {"vocab_size": 1024, "hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "intermediate_size": 256}  # configs/tiny.yaml's model


@dataclass(frozen=True)
class Calibration:
    seconds: float  # compute + decode: the unit every reported time is divided by
    compute_s: float
    decode_s: float
    threads: int

    def units(self, seconds: float) -> float:
        """`seconds` in calibration units."""
        return seconds / self.seconds if self.seconds > 0 else float("nan")

    def describe(self, seconds: float | None = None) -> str:
        own = f"calibration {self.seconds:.2f} s (compute {self.compute_s:.2f} + decoding {self.decode_s:.2f}, " \
              f"{self.threads} threads)"
        return own if seconds is None else f"{seconds:.1f} s = {self.units(seconds):.0f} x {own}"


def _model():
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    config = Qwen3Config(**SHAPE, head_dim=SHAPE["hidden_size"] // SHAPE["num_attention_heads"],
                         max_position_embeddings=512, tie_word_embeddings=True, pad_token_id=0, eos_token_id=1,
                         bos_token_id=None)
    return Qwen3ForCausalLM(config).eval()


def measure(repeats: int = 3) -> Calibration:
    """Run the workload `repeats` times per part; the fastest run of each part counts."""
    model = _model()
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(2, SHAPE["vocab_size"], (16, 256), generator=gen)
    prompts = torch.randint(2, SHAPE["vocab_size"], (8, 24), generator=gen)
    compute, decode = [], []
    for _ in range(max(1, repeats)):
        model.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        for _ in range(2):
            model(input_ids=ids, labels=ids).loss.backward()
        compute.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        with torch.no_grad():
            model.generate(input_ids=prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=32,
                           min_new_tokens=32, do_sample=False, pad_token_id=0)
        decode.append(time.perf_counter() - t0)
    c, d = min(compute), min(decode)
    return Calibration(round(c + d, 4), round(c, 4), round(d, 4), torch.get_num_threads())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Time the kit's fixed calibration workload.")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    cal = measure(args.repeats)
    print(json.dumps(asdict(cal)) if args.json else cal.describe())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
