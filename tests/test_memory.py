"""GRPO's memory: chunked log-probabilities change no value, and the preflight's formula
(`acesql_lib.train.memory.grpo_step_bytes`) holds against measured updates: on this CPU (the process's resident
peak, benchmarks/grpo_memory.py) and in the H200 measurements kept in benchmarks/results/."""
from __future__ import annotations

import json
import sys

import pytest
import torch

from acesql_lib.train.policy_loss import completion_logprobs, pad_batch
from acesql_lib.train.memory import UpdateLayout, grpo_step_bytes, logits_bytes
from repo_paths import ROOT as REPO

sys.path.insert(0, str(REPO / "benchmarks"))
from grpo_memory import run_in_subprocess, shape_argv, shape_of  # noqa: E402


def _small_qwen3(vocab: int = 3000):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    return Qwen3ForCausalLM(Qwen3Config(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, head_dim=16))


@pytest.mark.parametrize("autocast", [False, True])
def test_chunked_log_probabilities_equal_the_whole_ones_in_value_and_gradient(autocast):
    model = _small_qwen3()
    prompts = [[5, 6, 7], [8, 9, 10, 11, 12], [13]]
    completions = [list(range(20, 70)), list(range(100, 131)), list(range(200, 247))]
    ids, attn, pos, cmask, c_len = pad_batch(prompts, completions, 0, torch.device("cpu"))
    weights = torch.arange(ids.shape[0] * c_len, dtype=torch.float32).view(-1, c_len) / 100 * cmask
    results = []
    for chunk in (0, 16, 37, 4096):
        model.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            logp = completion_logprobs(model, ids, attn, pos, c_len, chunk_tokens=chunk)
        (logp * weights).sum().backward()
        results.append((logp.detach(), [p.grad.clone() for p in model.parameters()]))
        assert logp.dtype == torch.float32 and logp.shape == (3, c_len)
    for logp, grads in results[1:]:
        assert torch.equal(logp, results[0][0])
        assert all(torch.equal(a, b) for a, b in zip(grads, results[0][1]))


def test_the_formula_holds_for_the_h200_measurements():
    """24 updates measured on an H200 (the allocator's exact peak; scripts/gpu_checks.sh writes them anew)."""
    import argparse

    records = json.loads((REPO / "benchmarks" / "results" / "grpo_memory_h200.json").read_text())
    assert len(records) == 24 and {r["device"] for r in records} == {"cuda"}
    for r in records:
        shape = shape_of(argparse.Namespace(vocab=r["vocab"], hidden=r["hidden"], layers=r["layers"]))
        est = grpo_step_bytes(shape, r["micro_batch"], r["prompt"], r["completion"],  # the allocator's peak: tensors only
                              UpdateLayout(r["checkpointing"], r["logprob_chunk_tokens"], runtime=False))
        assert 0.95 <= est["total"] / r["measured_bytes"] <= 1.05, r


def test_the_formula_holds_for_an_update_measured_here():
    """A GRPO update of a 2-layer Qwen3 with a large vocabulary (32,768: the logits dominate its memory, as Qwen3's
    151,936 do; a larger vocabulary makes the test slower and tells no more),
    measured on this CPU in a fresh process: the
    estimate within 20% with and without checkpointing and chunking, and the chunked log-probabilities
    holding less, by about what the formula says."""
    shape = (2, 256, 4, 128, 512)  # layers, hidden, sequences, prompt, completion: 2,048 positions of logits
    vocab = 32768
    chunked = run_in_subprocess(shape_argv("cpu", *shape, ckpt=1, chunk=512, vocab=vocab))
    whole = run_in_subprocess(shape_argv("cpu", *shape, ckpt=0, chunk=0, vocab=vocab))
    for r in (chunked, whole):
        print(f"ckpt {r['checkpointing']} chunk {r['logprob_chunk_tokens']}: measured {r['measured_bytes'] / 2**30:.3f} "
              f"GiB, estimate x{r['ratio']:.3f}, update {r['update_s']} s")
        assert 0.8 <= r["ratio"] <= 1.2, r
    rows = 4 * 512
    saved = logits_bytes(rows, vocab, 0) - logits_bytes(rows, vocab, 512)
    assert whole["measured_bytes"] - chunked["measured_bytes"] > 0.5 * saved
