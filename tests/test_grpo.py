"""The joint GRPO loop end to end on a real tiny policy: a step, exact resume after a kill, SIGTERM,
non-finite loss, and the 2-process (gloo) update equal to the single-process one."""
from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from acesql_lib.config.context import RunContext
from acesql_lib.train.grpo import NonFiniteLoss
from acesql_lib.train.grpo_run import build_trainer

from rl_setup import rl_overrides
from helpers_rl import fresh_run
from acesql_lib.runtime.timing import PHASES_LOG
from helpers_tensorboard import read_events
from launching import accelerate_launch
from repo_paths import ROOT as REPO


def cli(run: Path, *extra: str) -> list[str]:
    sets = [f"{k}={v}" for k, v in rl_overrides(run).items()] + list(extra)
    return [sys.executable, "-m", "acesql_lib.train.grpo_run", "--config", "tiny", "--set", *sets]


def params_of(folder: Path) -> dict[str, torch.Tensor]:
    out = {}
    for f in sorted(folder.glob("*.safetensors")):
        out.update(load_file(str(f)))
    return out


def test_one_step_logs_trl_metrics_and_moves_parameters(rl_template, tmp_path):
    run = fresh_run(rl_template, tmp_path, "a")
    ctx = RunContext.create("tiny", rl_overrides(run, **{"grpo.max_steps": 2}))
    trainer = build_trainer(ctx.cfg, ctx.paths, progress=False)
    before = {k: v.detach().clone() for k, v in trainer.unwrapped.named_parameters()}
    reports = []
    trainer.train(on_step=reports.append)
    m = reports[-1].metrics
    for key in ("reward/retriever", "reward/generator", "reward_std/generator", "frac_reward_zero_std/retriever",
                "completion_length/retriever", "kl/generator", "w_gen", "pcgrad/conflict_ratio", "pcgrad/cosine",
                "grad_norm", "pool/sets_per_question_mean", "route/alt_share", "exec/match_rate"):
        assert key in m, key
    assert reports[0].metrics["w_gen"] == 0.0  # §4 step 9: no generator gradient at step 1
    assert "val/ex_start" in reports[0].metrics and "val/ex_start" not in reports[1].metrics  # before any update
    changed = [k for k, v in trainer.unwrapped.named_parameters() if not torch.equal(v, before[k])]
    assert len(changed) == len(before), "every parameter should move"
    lines = (run / "grpo" / "full" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in lines] == [1, 2]
    assert (run / "grpo" / "full" / "final" / "pool.json").exists()
    # the time outside the steps, for benchmarks/pipeline_time.py: validation before step 1 and at the end
    (spent,) = [json.loads(x) for x in (run / "grpo" / "full" / PHASES_LOG).read_text().splitlines()]
    assert spent["stage"] == "grpo (full)" and spent["steps"] == [0, 2]
    assert spent["phases"]["validation"] > 0 and spent["phases"]["checkpoints"] > 0
    assert spent["seconds"] >= spent["phases"]["validation"] + spent["phases"]["checkpoints"]
    r = reports[-1].rewards
    assert r["generator"].shape == (4, 4) and r["retriever"].shape == (4, 4)


def test_kill_after_checkpoint_and_resume_equals_straight_run(rl_template, tmp_path):
    straight = fresh_run(rl_template, tmp_path, "straight")
    subprocess.run(cli(straight), cwd=REPO, check=True, capture_output=True, timeout=600)

    resumed = fresh_run(rl_template, tmp_path, "resumed")
    proc = subprocess.Popen(cli(resumed), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    marker = resumed / "grpo" / "full" / "checkpoint-2" / "COMPLETE"
    deadline = time.time() + 300
    while not marker.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    assert marker.exists(), "no checkpoint-2 before the kill"
    proc.send_signal(signal.SIGKILL)  # a crash: no handler runs
    proc.wait()
    subprocess.run(cli(resumed), cwd=REPO, check=True, capture_output=True, timeout=600)

    a, b = straight / "grpo" / "full", resumed / "grpo" / "full"
    pa, pb = params_of(a / "final"), params_of(b / "final")
    assert pa.keys() == pb.keys()
    for k in pa:
        assert torch.allclose(pa[k], pb[k], atol=1e-5), k
    assert json.loads((a / "final" / "pool.json").read_text()) == json.loads((b / "final" / "pool.json").read_text())
    steps = [json.loads(x)["step"] for x in (b / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4]  # the log holds each step once, whatever was redone


def test_sigterm_writes_a_checkpoint_and_exits(rl_template, tmp_path):
    run = fresh_run(rl_template, tmp_path, "term")
    proc = subprocess.Popen(cli(run, "grpo.save_every=100"), cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    log = run / "grpo" / "full" / "metrics.jsonl"
    deadline = time.time() + 300
    while not (log.exists() and log.read_text().strip()) and proc.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode != 0 and b"SIGTERM" in err
    done = [p.name for p in (run / "grpo" / "full").glob("checkpoint-*") if (p / "COMPLETE").exists()]
    assert done, "SIGTERM must leave a checkpoint"
    step = int(sorted(done)[-1].split("-")[1])
    state = json.loads((run / "grpo" / "full" / f"checkpoint-{step}" / "state.json").read_text())
    assert state["step"] == step >= 1


def test_non_finite_loss_stops_with_a_message_after_saving(rl_template, tmp_path):
    run = fresh_run(rl_template, tmp_path, "nan")
    ctx = RunContext.create("tiny", rl_overrides(run))
    trainer = build_trainer(ctx.cfg, ctx.paths, progress=False)
    with torch.no_grad():  # a broken reference: sampling still works, the KL term (and the loss) is NaN
        next(trainer.reference.parameters()).fill_(float("nan"))
    with pytest.raises(NonFiniteLoss, match="non-finite loss"):
        trainer.train()
    assert (run / "grpo" / "full" / "checkpoint-0" / "COMPLETE").exists()


def test_two_processes_make_the_single_process_update(rl_template, tmp_path):
    """accelerate launch, 2 CPU processes (gloo), each with half of one global batch of rollouts."""
    run = fresh_run(rl_template, tmp_path, "ddp")
    script = Path(__file__).with_name("ddp_update_check.py")
    env = {**os.environ, "ACESQL_RUN": str(run)}
    single = subprocess.run([sys.executable, str(script), "collect-and-single"], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=600)
    assert single.returncode == 0, single.stderr[-3000:]
    launch = subprocess.run(accelerate_launch("configs/accelerate/cpu_2proc.yaml", str(script), "distributed"),
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert launch.returncode == 0, launch.stderr[-3000:]
    one, two = torch.load(run / "single.pt"), torch.load(run / "distributed.pt")
    assert one["grads"].keys() == two["grads"].keys()
    for k, g in one["grads"].items():  # the combined (PCGrad, clipped) gradient of the global batch
        assert torch.allclose(g, two["grads"][k], rtol=1e-4, atol=1e-7), k
    assert sum(float(g.abs().sum()) > 0 for g in one["grads"].values()) > 0
    moved = 0
    for k in one["after"]:
        assert torch.allclose(one["after"][k], two["after"][k], atol=1e-4), k
        moved += not torch.equal(one["after"][k], one["before"][k])
    assert moved > 0


def test_a_non_finite_loss_on_one_rank_stops_every_rank_with_the_last_good_checkpoint(rl_template, tmp_path):
    run = fresh_run(rl_template, tmp_path, "nan2")
    script = Path(__file__).with_name("nan_rank_check.py")
    done = subprocess.run(accelerate_launch("configs/accelerate/cpu_2proc.yaml", str(script)),
                          cwd=REPO, env={**os.environ, "ACESQL_RUN": str(run)}, capture_output=True, text=True,
                          timeout=300)  # a hang fails here
    assert done.stdout.count("stopped: step 1: non-finite loss") == 2, done.stdout + done.stderr[-3000:]
    assert (run / "grpo" / "full" / "checkpoint-0" / "COMPLETE").exists()


def test_a_run_started_from_other_settings_is_kept_aside_not_resumed(rl_template, tmp_path):
    def trainer_for(overrides):
        ctx = RunContext.create("tiny", overrides)
        return build_trainer(ctx.cfg, ctx.paths, progress=False)

    run = fresh_run(rl_template, tmp_path, "stale")
    over = rl_overrides(run, **{"grpo.max_steps": 2, "grpo.save_every": 1})
    trainer_for(over).train(stop_after=1)
    assert (run / "grpo" / "full" / "checkpoint-1" / "COMPLETE").exists()
    assert trainer_for(over).state.step == 1  # same settings, model and data: resumed
    pool = run / "distill" / "pool.json"
    pool.write_text(pool.read_text() + "\n")  # other distilled data
    fresh = trainer_for(over)
    assert fresh.state.step == 0  # started afresh...
    assert (run / "grpo" / "full.stale-1" / "checkpoint-1" / "COMPLETE").exists()  # ...the old run kept aside
    fresh.train(stop_after=1)
    trainer_for({**over, "grpo.learning_rate": 1e-3})  # another RL setting
    assert (run / "grpo" / "full.stale-2" / "checkpoint-1" / "COMPLETE").exists()


@pytest.mark.parametrize("n_ret", [1, 4])
def test_validation_averages_val_samples_generator_samples_per_question(rl_template, tmp_path, n_ret, monkeypatch):
    """The authors' validation is the training rollout at val_temperature: N_ret retriever samples, the vote,
    N_gen generator samples; EX is the share of matching generator samples."""
    import acesql_lib.train.grpo as grpo_mod

    run = fresh_run(rl_template, tmp_path, f"v{n_ret}")
    ctx = RunContext.create("tiny", rl_overrides(run, **{"grpo.val_samples": 3, "grpo.val_retriever_samples": n_ret}))
    trainer = build_trainer(ctx.cfg, ctx.paths, progress=False)
    asked, generate = [], trainer.engine.generate
    rolled, rollout, set_matches = [], grpo_mod.rollout, []

    def recording(prompts, n=1, **kw):  # the real engine, with its calls noted
        out = generate(prompts, n=n, **kw)
        asked.append((len(prompts), n, len(out)))
        return out

    def kept(*args, **kw):  # the real rollout, its results kept (their matches replaced when set_matches is)
        rolls = rollout(*args, **kw)
        for r, matches in zip(rolls, set_matches):
            r.matches = matches
        rolled.append(rolls)
        return rolls

    trainer.engine.generate = recording
    monkeypatch.setattr(grpo_mod, "rollout", kept)
    m = trainer.validate()
    n_val = len(trainer.val_tasks)
    assert n_val > 0 and [(a, b) for a, b, _ in asked] == [(n_val, n_ret), (n_val, 3)]  # retriever n_ret x, generator 3x
    (rolls,) = rolled
    assert [len(r.matches) for r in rolls] == [3] * n_val
    # every question has 3 samples, so the mean of per-question shares is the share of all 3 x n_val samples
    assert m["val/ex"] == pytest.approx(100.0 * sum(sum(r.matches) for r in rolls) / (3 * n_val), rel=1e-12)
    # the fixture's policy matches no sample today (val/ex 0.0), which would hide a wrong average: with
    # 1, 2, 3, 1, ... of each question's 3 samples matching, val/ex is again the share of all samples
    set_matches[:] = [[k <= j % 3 for k in range(3)] for j in range(n_val)]
    assert trainer.validate()["val/ex"] == pytest.approx(100.0 * sum(j % 3 + 1 for j in range(n_val)) / (3 * n_val),
                                                         rel=1e-12)


def test_the_validation_before_the_first_update_is_read_back_by_a_run_that_starts_alike(rl_template, tmp_path):
    """The ablation variants start from the full run's SFT model with the same questions: the first variant
    validates and stores its starting point, one of another variant with the same pool reads it back without
    rolling out, and one whose pool targets, sampling or code differs (or that switches reuse off) validates."""
    run = fresh_run(rl_template, tmp_path, "s")
    rolled = []

    def trainer_for(variant: str, **extra):
        ctx = RunContext.create("tiny", rl_overrides(run, **extra))
        trainer = build_trainer(ctx.cfg, ctx.paths, variant, progress=False)
        validate = trainer.validate

        def counted():
            rolled.append(variant)
            return validate()

        trainer.validate = counted
        return trainer

    first = trainer_for("full").validate_start()
    assert rolled == ["full"] and set(first) == {"val/ex", "val/retriever_exact"}
    stored = list((run / "grpo" / "start_validation").glob("*.json"))
    assert len(stored) == 1
    assert trainer_for("no_pcgrad", **{"grpo.pcgrad": "none"}).validate_start() == first  # read back
    assert rolled == ["full"]
    again = trainer_for("hotter", **{"grpo.val_temperature": 1.3})
    again.validate_start()
    assert rolled == ["full", "hotter"] and len(list(stored[0].parent.glob("*.json"))) == 2
    off = trainer_for("off", **{"grpo.reuse_start_validation": False})
    assert off.validate_start() == first and rolled[-1] == "off"
    static = trainer_for("static_gold", **{"grpo.pool_init": "static_gold"})
    static.pool.targets = lambda qid: []  # another pool: its targets are part of what is judged
    static.validate_start()
    assert rolled[-1] == "static_gold"
    stored[0].write_text("{half written")  # a broken entry is validated again and replaced
    assert trainer_for("full2").validate_start() == first and rolled[-1] == "full2"


def test_report_to_tensorboard_logs_the_jsonl_metrics(rl_template, tmp_path):
    run = fresh_run(rl_template, tmp_path, "tb")
    ctx = RunContext.create("tiny", rl_overrides(run, **{"grpo.max_steps": 2, "grpo.report_to": "tensorboard"}))
    build_trainer(ctx.cfg, ctx.paths, progress=False).train()
    rows = [json.loads(x) for x in (run / "grpo" / "full" / "metrics.jsonl").read_text().splitlines()]
    events = read_events(run / "grpo" / "full" / "runs")
    for key in ("reward/retriever", "reward/generator", "kl/generator", "grad_norm"):
        assert [s for s, _ in events[key]] == [r["step"] for r in rows] == [1, 2], key
        assert [v for _, v in events[key]] == pytest.approx([r[key] for r in rows], rel=1e-6), key


def test_trainer_reads_the_prompt_style_from_the_config(rl_template, tmp_path):
    """build_trainer once derived the style from the profile name ("tiny" -> tiny), so a profile
    with another model.prompt_style (the rehearsal) trained on prompts it never evaluated on."""
    from acesql_lib.train.rollouts import SamplingSpec, retriever_prompt

    run = fresh_run(rl_template, tmp_path, "style")
    ctx = RunContext.create("tiny", rl_overrides(run, **{"model.prompt_style": "paper"}))
    trainer = build_trainer(ctx.cfg, ctx.paths, progress=False)
    assert SamplingSpec.grpo(trainer.cfg, step=1).prompt_style == "paper"
    rolls = trainer.collect().rollouts
    r = rolls[0]
    assert r.retriever.prompts[0] == retriever_prompt(r.task, trainer.tokenizer, "paper",
                                                      ctx.cfg.engine.enable_thinking)


def test_rl_questions_chosen_by_the_sft_models_own_rollouts(rl_template, tmp_path, monkeypatch):
    """distill.rl_selection "sft_model" (§3.4 read as the SFT model's rollouts): the SFT model is rolled out
    on the filtered pool, each question's correct rollouts are counted from its own shard records, the
    questions inside the bounds train, stage 1's validation split is kept as it is, the training
    questions' pool comes from these rollouts, a rerun reads the products back, and GRPO trains on them."""
    import acesql_lib.models.engines as engines
    from acesql_lib.data.datasets import load_synsql
    from acesql_lib.config.data import DataConfig
    from acesql_lib.data.task import build_tasks
    from acesql_lib.train.distill import _pool_set, select_by_model
    from acesql_lib.data.filtering import save_pool
    from acesql_lib.models.loading import model_tag
    from acesql_lib.roles.pool import ColumnSetPool

    run = fresh_run(rl_template, tmp_path, "sel")
    world = rl_template.parent / "world"
    candidates = load_synsql(world / "train" / "data.json", world / "train" / "databases").examples[:14]
    save_pool(run / "data" / "filtered_pool.json", candidates)
    stage1 = json.loads((run / "distill" / "rl_questions.json").read_text())
    stage1_val = [e["id"] for e in stage1["validation"]]
    over = rl_overrides(run, **{"data.tinyworld_dir": str(world), "distill.rl_selection": "sft_model",
                                "distill.n_retriever": 2, "distill.n_generator": 4, "distill.max_new_tokens": 40,
                                "distill.temperature": 1.0, "distill.shard_size": 5, "distill.exec_timeout_s": 5,
                                "distill.rl_min_correct": 0, "distill.rl_max_correct": 4, "distill.n_rl_train": 9,
                                "grpo.max_steps": 1})
    ctx = RunContext.create("tiny", over)
    assert ctx.paths.rl_data == run / "rl_select"
    summary = select_by_model(ctx.cfg, ctx.paths, progress=False)
    out = run / "rl_select"
    shards = sorted(out.glob("shards/*/shard-*.jsonl"))
    assert len(shards) == 3  # 14 questions, 5 a shard
    settings = json.loads(shards[0].with_name("settings.json").read_text())
    assert settings["model"] == model_tag(run / "models" / "sft")  # the SFT model's rollouts, not the base's
    records = [json.loads(line) for f in shards for line in f.read_text().splitlines()]
    counts = {r["qid"]: sum(g["match"] for g in r["generator"]) for r in records}
    data = json.loads((out / "rl_questions.json").read_text())
    assert data["pass_counts"] == counts
    assert [e["id"] for e in data["validation"]] == sorted(stage1_val)  # stage 1's split, kept as it is
    train = [e["id"] for e in data["train"]]
    assert len(train) == 9 == summary["rl_train"] and not set(train) & set(stage1_val)
    assert set(train) <= {e.id for e in candidates[:14]}
    pool = ColumnSetPool.load(out / "pool.json", gamma=0.5)
    stage1_pool = ColumnSetPool.load(run / "distill" / "pool.json", gamma=0.5)
    for q in stage1_val:
        assert pool.targets(q) == stage1_pool.targets(q)
    tasks = {t.qid: t for t in build_tasks(candidates, DataConfig(schema_style="kit", relevant_values=False, n_example_values=0))}
    for r in records:  # one weight per correct rollout, by stage 1's rule for what a rollout gives the pool
        if r["qid"] in train:
            n_sets = sum(1 for g in r["generator"] if _pool_set(ctx.cfg, tasks[r["qid"]], g))
            assert sum(pool.weights(r["qid"]).values()) == n_sets, r["qid"]

    def no_rollouts(*a, **k):
        raise AssertionError("finished products must be read back, not rolled out again")
    monkeypatch.setattr(engines, "make_engine", no_rollouts)
    assert select_by_model(ctx.cfg, ctx.paths, progress=False) == summary
    monkeypatch.undo()
    trainer = build_trainer(ctx.cfg, ctx.paths, progress=False)
    assert sorted(t.qid for t in trainer.tasks) == sorted(train)
    assert sorted(t.qid for t in trainer.val_tasks) == sorted(stage1_val)
    trainer.engine.close()

    # narrower bounds: the same shards, recounted; only questions inside the bounds train
    ctx2 = RunContext.create("tiny", {**over, "distill.rl_min_correct": 1})
    select_by_model(ctx2.cfg, ctx2.paths, progress=False)
    train2 = [e["id"] for e in json.loads((out / "rl_questions.json").read_text())["train"]]
    eligible = {q for q, k in counts.items() if k >= 1 and q not in stage1_val}
    assert set(train2) <= eligible and len(train2) == min(9, len(eligible))
    assert sorted(out.glob("shards/*/shard-*.jsonl")) == shards  # no new rollouts for new bounds


def test_the_learning_rate_steps_once_per_optimizer_step_whatever_the_process_count(rl_template, tmp_path, monkeypatch):
    """accelerate's prepared scheduler steps num_processes times per call; ours must step once, so the
    warm-up of a 4-rank launch takes as many optimizer steps as a 1-process run's (not a quarter of them)."""
    import accelerate.scheduler

    class FourRanks:  # what accelerate's scheduler wrapper reads of a 4-process launch
        num_processes = 4

    monkeypatch.setattr(accelerate.scheduler, "AcceleratorState", FourRanks)
    run = fresh_run(rl_template, tmp_path, "lr")
    ctx = RunContext.create("tiny", rl_overrides(run, **{"grpo.max_steps": 3, "grpo.warmup_ratio": 1.0}))
    trainer = build_trainer(ctx.cfg, ctx.paths, progress=False)
    reports = []
    trainer.train(on_step=reports.append)
    lr = ctx.cfg.grpo.learning_rate
    assert [r.metrics["lr"] for r in reports] == pytest.approx([lr * 2 / 3, lr, lr])


def test_the_authors_schedule_and_question_order_drive_the_trainer(rl_template, tmp_path):
    """grpo.schedule authors: the first update runs at lr 0 (verl's warm-up), so it leaves the weights as
    they were; grpo.data_order authors: each step's questions are verl's sampler's next batch."""
    from acesql_lib.train.data_order import epoch_order

    run = fresh_run(rl_template, tmp_path, "sched")
    ctx = RunContext.create("tiny", rl_overrides(run, **{"grpo.max_steps": 3, "grpo.warmup_ratio": 0.67,
                                                         "grpo.schedule": "authors", "grpo.data_order": "authors",
                                                         "grpo.data_seed": 5}))
    trainer = build_trainer(ctx.cfg, ctx.paths, progress=False)
    before = [p.detach().clone() for p in trainer.params]
    n, b = len(trainer.tasks), trainer.grpo.batch_questions
    expected = epoch_order(n, b, 0, "authors", 5)[:b]
    assert trainer._next_questions() == expected
    trainer.state.position = 0
    reports = []
    trainer.train(on_step=reports.append, stop_after=1)
    assert all(torch.equal(a, p.detach()) for a, p in zip(before, trainer.params))  # lr 0 on the first update
    lr = ctx.cfg.grpo.learning_rate
    assert reports[0].metrics["lr"] == pytest.approx(lr / 2)  # warm-up int(0.67 x 3) = 2: next step at 1/2


@pytest.mark.parametrize("schedule,w_gen", [("authors", 1.0), ("kit", 0.0)])
def test_norm_equalised_pcgrad_trains_both_losses_at_full_scale_under_the_authors_schedule(rl_template, tmp_path,
                                                                                           schedule, w_gen):
    run = fresh_run(rl_template, tmp_path, f"ne-{schedule}")
    ctx = RunContext.create("tiny", rl_overrides(run, **{"grpo.max_steps": 2, "grpo.pcgrad": "norm_equalised",
                                                         "grpo.schedule": schedule}))
    reports = []
    build_trainer(ctx.cfg, ctx.paths, progress=False).train(on_step=reports.append, stop_after=1)
    assert reports[0].metrics["w_gen"] == w_gen  # step 1: the ramp would give 0


@pytest.mark.parametrize("train_dtype", ["float32", "bfloat16"])
def test_a_1e6_step_moves_fp32_master_weights_under_bf16_compute_and_rounds_away_on_a_bf16_policy(
        rl_template, tmp_path, train_dtype):
    """The authors' precision: fp32 masters, bf16 compute (here accelerate's bf16 autocast on CPU, as on a GPU).
    At lr 1e-6 AdamW moves every fp32 weight; the same step on a bf16-held policy rounds almost all away."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    from acesql_lib.train.grpo import accelerator_precision

    assert accelerator_precision(True, cuda=True) == {"cpu": False, "mixed_precision": "bf16"}
    assert accelerator_precision(False, cuda=True)["mixed_precision"] == "no"
    run = fresh_run(rl_template, tmp_path, f"prec-{train_dtype}")
    ctx = RunContext.create("tiny", rl_overrides(run, **{"grpo.max_steps": 1, "grpo.learning_rate": 1e-6,
                                                         "model.train_dtype": train_dtype}))
    AcceleratorState._reset_state(True)
    try:
        acc = Accelerator(cpu=True, mixed_precision="bf16")
        trainer = build_trainer(ctx.cfg, ctx.paths, accelerator=acc, progress=False)
        assert {p.dtype for p in trainer.params} == {getattr(torch, train_dtype)}
        before = [p.detach().clone() for p in trainer.params]
        reports = []
        trainer.train(on_step=reports.append)
        assert reports[0].metrics["lr"] == pytest.approx(1e-6) and reports[0].metrics["grad_norm"] > 0
        moved = sum(int((a != p.detach()).sum()) for a, p in zip(before, trainer.params))
        total = sum(a.numel() for a in before)
    finally:
        AcceleratorState._reset_state(True)
    print(f"{train_dtype}: {moved / total:.4f} of {total} weights moved")
    if train_dtype == "float32":
        assert all(not torch.equal(a, p.detach()) for a, p in zip(before, trainer.params))  # every tensor moved
        assert moved / total > 0.9
    else:
        assert moved / total < 0.05  # the update is below bf16's resolution for nearly every weight


def test_lora_grpo_trains_only_adapters_resumes_from_their_checkpoint_and_writes_a_merged_model(rl_template, tmp_path):
    """model.lora (the one-GPU route the preflight names): PEFT adapters on the SFT model train, a checkpoint
    holds them alone and resumes into an equal trainer, and final/ is a plain model with them merged."""
    from transformers import AutoModelForCausalLM

    run = fresh_run(rl_template, tmp_path, "lora")
    over = rl_overrides(run, **{"grpo.max_steps": 2, "grpo.save_every": 1, "model.lora": True, "model.lora_r": 4,
                                "model.lora_alpha": 8, "model.lora_dropout": 0.0})
    ctx = RunContext.create("tiny", over)
    trainer = build_trainer(ctx.cfg, ctx.paths, progress=False)
    names = [n for n, p in trainer.model.named_parameters() if p.requires_grad]
    assert names and all("lora_" in n for n in names)
    base = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if not p.requires_grad}
    trainer.train(stop_after=1)
    assert all(torch.equal(base[n], p) for n, p in trainer.model.named_parameters() if n in base)
    adapters = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    again = build_trainer(ctx.cfg, ctx.paths, progress=False)  # resumes from checkpoint-1
    assert again.state.step == 1
    assert all(torch.equal(adapters[n], p) for n, p in again.model.named_parameters() if p.requires_grad)
    final = again.train()
    merged = AutoModelForCausalLM.from_pretrained(final)
    assert not any("lora_" in n for n, _ in merged.named_parameters())
    sft = AutoModelForCausalLM.from_pretrained(ctx.paths.sft_model)
    moved = [n for n, p in merged.named_parameters() if not torch.equal(p, dict(sft.named_parameters())[n])]
    assert moved  # the adapters' update is in the merged weights


def test_overlong_retriever_prompts_are_dropped_and_generator_prompts_keep_their_last_tokens(rl_template, tmp_path):
    """The authors' limits at grpo.max_prompt_tokens: a question whose retriever prompt is longer is dropped
    (verl's filter_overlong_prompts), a longer generator prompt keeps its last tokens (left truncation)."""
    from acesql_lib.train.rollouts import SamplingSpec, keep_last_tokens, prompt_tokens

    run = fresh_run(rl_template, tmp_path, "long")
    plain = RunContext.create("tiny", rl_overrides(run))
    base = build_trainer(plain.cfg, plain.paths, progress=False)
    tok, spec = base.tokenizer, SamplingSpec.grpo(base.cfg, step=0)
    lengths = sorted(len(prompt_tokens(spec.retriever_prompt(t, tok), tok)) for t in base.tasks)
    limit = lengths[len(lengths) // 2]  # about half the questions are longer
    ctx = RunContext.create("tiny", rl_overrides(run, **{"grpo.max_prompt_tokens": limit, "grpo.max_steps": 1}))
    with pytest.warns(UserWarning, match="questions dropped: retriever prompt over grpo.max_prompt_tokens"):
        trainer = build_trainer(ctx.cfg, ctx.paths, progress=False)
    assert len(trainer.tasks) == sum(n <= limit for n in lengths) < len(base.tasks)
    assert all(len(prompt_tokens(spec.retriever_prompt(t, tok), tok)) <= limit for t in trainer.tasks)
    # generator prompts: a limit below their length keeps the tail, decoded from the last `limit` tokens
    task = trainer.tasks[0]
    full = spec.generator_prompt(task, task.gold_columns or frozenset(), tok)
    short = keep_last_tokens(full, tok, 16)
    assert short == tok.decode(prompt_tokens(full, tok)[-16:]) and full.endswith(short) and short != full
    assert keep_last_tokens(full, tok, 0) == full and keep_last_tokens(full, tok, 10_000) == full
    trainer.grpo = dataclasses.replace(trainer.grpo, max_prompt_tokens=16)
    trainer.cfg = dataclasses.replace(trainer.cfg, grpo=trainer.grpo)
    rolls = trainer.collect().rollouts
    for r in rolls:
        whole = spec.generator_prompt(r.task, r.selected, tok)
        assert all(p == keep_last_tokens(whole, tok, 16) and whole.endswith(p) and p != whole
                   for p in r.generator.prompts)


def test_the_authors_loss_is_a_token_mean_per_balanced_micro_batch_weighted_by_its_sequences(rl_template, tmp_path):
    """grpo.loss_agg micro_token_mean: the gradient of one role equals that of sum over micro-batches of
    (sequences in it / sequences) x (its token mean), the micro-batches being verl's length-balanced split
    of ceil(tokens / micro_batch_tokens); it differs from the global token mean's gradient."""
    from acesql_lib.train.policy_loss import (completion_logprobs, forward_passes, micro_batches, pad_batch,
                                              ppo_token_loss, role_batch)
    from acesql_lib.train.microbatches import balanced_partitions, micro_batch_count

    run = fresh_run(rl_template, tmp_path, "agg")
    ctx = RunContext.create("tiny", rl_overrides(run, **{"grpo.loss_agg": "micro_token_mean",
                                                         "grpo.kl_coef": 0.0}))
    trainer = build_trainer(ctx.cfg, ctx.paths, progress=False)
    rolls = trainer.collect().rollouts
    gen = torch.Generator().manual_seed(3)
    adv = torch.randn(len(rolls), trainer.grpo.n_generator, generator=gen)
    batch = role_batch(rolls, "generator", adv, trainer.tokenizer)
    lengths = [len(p) + len(c) for p, c in zip(batch.prompt_ids, batch.completion_ids)]
    budget = sum(lengths) // 3 + 1  # three micro-batches
    trainer.grpo = dataclasses.replace(trainer.grpo, micro_batch_tokens=budget)
    trainer.model.train()

    def grads_after(fn):
        trainer.optimizer.zero_grad(set_to_none=True)
        fn()
        return [p.grad.detach().clone() for p in trainer.params]

    ours = grads_after(lambda: trainer._backward(batch, weight=1.0))
    n = len(lengths)
    parts = balanced_partitions(lengths, micro_batch_count(lengths, budget))
    assert len(parts) == 3

    def by_hand():
        for part in parts:
            tokens = sum(len(batch.completion_ids[i]) for i in part)
            for i in part:  # one sequence at a time: no padding, the per-token weight written out
                ids, attn, pos, cmask, c_len = pad_batch([batch.prompt_ids[i]], [batch.completion_ids[i]],
                                                          trainer.tokenizer.pad_token_id, trainer.acc.device)
                logp = completion_logprobs(trainer.model, ids, attn, pos, c_len)
                tok, _, _ = ppo_token_loss(logp, logp.detach(), logp.detach(), batch.advantages[i].view(1, 1),
                                           kl_coef=0.0)
                ((tok * cmask).sum() * (len(part) / n) / tokens).backward()

    expected = grads_after(by_hand)
    assert all(torch.allclose(a, b, atol=1e-6, rtol=1e-4) for a, b in zip(ours, expected))
    # one sample per padded row (the paper's layout): each micro-batch runs in forward passes whose padded rows
    # stay within the budget, with the micro-batch's weights: the same gradient
    trainer.grpo = dataclasses.replace(trainer.grpo, packed_prompts=False)
    micro = micro_batches(batch, trainer.grpo, trainer.acc)
    passes = forward_passes(batch, micro, trainer.grpo)
    assert len(passes) > len(micro) == 3
    padded = [len(rows) * (max(len(batch.prompt_ids[i]) for i in rows) + max(len(batch.completion_ids[i]) for i in rows))
              for rows, _, _ in passes]
    assert all(size <= budget for size, (rows, _, _) in zip(padded, passes) if len(rows) > 1)
    split = grads_after(lambda: trainer._backward(batch, weight=1.0))
    assert all(torch.allclose(a, b, atol=1e-6, rtol=1e-4) for a, b in zip(split, expected))
    trainer.grpo = dataclasses.replace(trainer.grpo, loss_agg="global_token_mean")
    global_mean = grads_after(lambda: trainer._backward(batch, weight=1.0))
    assert not all(torch.allclose(a, b, atol=1e-6, rtol=1e-4) for a, b in zip(global_mean, expected))


def test_activation_checkpointing_gives_the_same_update(rl_template, tmp_path):
    """grpo.gradient_checkpointing (the authors' actor): activations recomputed in the backward pass, the
    same combined gradient as storing them."""
    grads = {}
    for flag in (False, True):
        run = fresh_run(rl_template, tmp_path, f"gc-{flag}")
        ctx = RunContext.create("tiny", rl_overrides(run, **{"grpo.gradient_checkpointing": flag}))
        trainer = build_trainer(ctx.cfg, ctx.paths, progress=False)
        assert trainer.unwrapped.is_gradient_checkpointing == flag
        trainer.record_grads = True
        trainer.step()
        grads[flag] = trainer.last_grads
    assert any(float(g.abs().sum()) > 0 for g in grads[True])
    assert all(torch.allclose(a, b, atol=1e-6, rtol=1e-5) for a, b in zip(grads[False], grads[True]))


def test_samples_packed_by_prompt_give_the_per_row_update(rl_template, tmp_path):
    """grpo.packed_prompts (the tiny profile's layout, acesql_lib/train/packed.py): the same rollouts give the
    combined gradient of one sample per row, up to float rounding."""
    from acesql_lib.train.policy_loss import role_batch

    grads, packed_rows = {}, {}
    for flag in (False, True):
        run = fresh_run(rl_template, tmp_path, f"packed-{flag}")
        ctx = RunContext.create("tiny", rl_overrides(run, **{"grpo.packed_prompts": flag}))
        trainer = build_trainer(ctx.cfg, ctx.paths, progress=False)
        trainer.record_grads = True
        collected = trainer.collect()
        rolls = collected.rollouts
        batch = role_batch(rolls, "retriever", torch.zeros(len(rolls), ctx.cfg.grpo.n_retriever), trainer.tokenizer)
        packed_rows[flag] = len({tuple(p) for p in batch.prompt_ids})
        trainer.update(collected)
        grads[flag] = trainer.last_grads
    assert packed_rows[True] == len(rolls) < len(batch.prompt_ids)  # one prompt per question, several samples each
    assert sum(float(g.abs().sum()) > 0 for g in grads[True]) > len(grads[True]) // 2
    for a, b in zip(grads[False], grads[True]):
        assert float((a - b).norm()) <= 1e-4 * max(float(a.norm()), 1e-12), float((a - b).norm())


def test_the_accelerator_is_made_before_the_models_and_they_load_on_its_device(rl_template, tmp_path, monkeypatch):
    """Under a launcher the Accelerator sets each rank's device and process group; models loaded before it
    would all land on the first GPU (the construction order of the multi-GPU launch)."""
    from accelerate.state import AcceleratorState, PartialState

    from acesql_lib.models import loading as models

    seen = []
    real_policy, real_reference = models.load_policy, models.load_reference

    def policy(*args, **kw):
        seen.append(("policy", PartialState._shared_state != {}, kw.get("device")))
        return real_policy(*args, **kw)

    def reference(*args, **kw):
        seen.append(("reference", PartialState._shared_state != {}, kw.get("device")))
        return real_reference(*args, **kw)

    monkeypatch.setattr(models, "load_policy", policy)
    monkeypatch.setattr(models, "load_reference", reference)
    AcceleratorState._reset_state(True)  # as in a fresh launch: no process state yet
    run = fresh_run(rl_template, tmp_path, "order")
    ctx = RunContext.create("tiny", rl_overrides(run, **{"model.device": "auto"}))
    trainer = build_trainer(ctx.cfg, ctx.paths, progress=False)
    assert seen == [("policy", True, str(trainer.acc.device)), ("reference", True, str(trainer.acc.device))]


def test_training_and_validation_rollouts_execute_under_the_profile_sql_rule(rl_template, tmp_path, monkeypatch):
    """grpo.sql_whitespace reaches the executor in both of GRPO's rollout calls (step and validation)."""
    from acesql_lib.train import rollouts

    seen = []
    real = rollouts.execute_rollouts

    def recording(rolls, *args, **kw):
        seen.append(kw.get("sql_whitespace"))
        return real(rolls, *args, **kw)

    monkeypatch.setattr(rollouts, "execute_rollouts", recording)
    run = fresh_run(rl_template, tmp_path, "ws")
    ctx = RunContext.create("tiny", rl_overrides(run, **{"grpo.max_steps": 1, "grpo.sql_whitespace": "collapse"}))
    build_trainer(ctx.cfg, ctx.paths, progress=False).train()
    assert len(seen) >= 2 and set(seen) == {"collapse"}  # validation before and after the step, and the step


def test_a_lora_policy_is_its_own_reference_with_the_adapters_off(rl_template, tmp_path):
    """model.lora starting from the SFT model: no second model is loaded; the KL reference's log-probabilities
    are the SFT model's (the policy with its adapters disabled), while the policy's own differ once the adapters
    are non-zero."""
    from acesql_lib.train.policy_loss import completion_logprobs, pad_batch
    from acesql_lib.models.loading import load_reference

    run = fresh_run(rl_template, tmp_path, "lora_ref")
    over = rl_overrides(run, **{"model.lora": True, "model.lora_r": 4, "model.lora_alpha": 8,
                                "model.lora_dropout": 0.0, "grpo.reference_model": ""})
    ctx = RunContext.create("tiny", over)
    trainer = build_trainer(ctx.cfg, ctx.paths, progress=False)
    assert trainer.reference is None and ctx.cfg.grpo.kl_coef > 0
    with torch.no_grad():
        for name, p in trainer.unwrapped.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    ids, attn, pos, _, c_len = pad_batch([[5, 6, 7, 8], [9, 10]], [[11, 12, 13], [14, 15, 16, 17]],
                                          trainer.tokenizer.pad_token_id, torch.device("cpu"))
    fn = lambda model: completion_logprobs(model, ids, attn, pos, c_len)  # noqa: E731
    with torch.no_grad():
        policy = fn(trainer.unwrapped)
        ref = trainer._reference_logprobs(fn, policy)
        sft = fn(load_reference(str(ctx.paths.sft_model), dtype=ctx.cfg.model.dtype, device="cpu")[0])
    assert torch.equal(ref, sft)
    assert not torch.allclose(policy, sft)
