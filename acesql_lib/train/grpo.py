"""Joint two-role GRPO (§4): one model, a retriever loss and a generator loss, PCGrad between them.

`JointGRPO.step()` is the whole method in labelled phases, top to bottom:

    batch -> retriever rollouts -> vote -> generator rollouts -> execute -> pool -> rewards
          -> advantages -> losses (two backward passes) -> PCGrad -> clip -> AdamW -> sync engine

It runs the same in a notebook (one process) and under `accelerate launch -m acesql_lib.train.grpo_run`
(DDP/FSDP): each rank takes its share of the step's questions, losses are normalised by the
GLOBAL token count of each role so the summed update equals the single-process one, and pool
updates are exchanged so every rank holds the same pool.

Beside it: the run built from a profile and its command line (`grpo_run`), the validation's scoring and the
reuse of the validation before any update (`grpo_validation`), the step's metrics and their log
(`grpo_metrics`), the loss's per-token pieces (`policy_loss`) and the collectives every rank joins (`ranks`).

Old log-probs: with one PPO epoch and one optimizer step per batch (§4 step 8) the sampling
policy IS the current policy, so old log-probs are the current ones detached (ratio = 1; the
clip and dual clip stay in the loss for engines whose sampling log-probs differ).
"""
from __future__ import annotations

import contextlib
import math
import signal
import time
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
from ..runtime.progress import phase_bar, tqdm, waiting

from . import checkpoint as ckpt
from ..config.choices import AuthorsOrKit
from ..config.settings import Config
from .data_order import epoch_order
from .grpo_metrics import MetricsLog, pcgrad_rows, role_metrics, rollout_metrics
from .grpo_validation import SavedStartValidation, start_key, validation_metrics, validation_scores
from .pcgrad import PCGradStats, combine_into_grads, save_grads
from .policy_loss import RoleBatch, forward_passes, logprob_fn, micro_batches, ppo_token_loss, role_batch
from .ranks import any_rank, gather_objects, mean_over_ranks
from ..roles.pool import ColumnSetPool, pool_additions
from ..roles.rewards import (LengthPenalty, authors_dense_retriever_reward, dense_retriever_reward, generator_reward,
                             group_advantages, retriever_reward)
from .rollouts import ROLLOUT_PHASES, QuestionRollout, RolloutSpec, SamplingSpec, rollout
from .schedule import generator_loss_weight, lr_lambda, total_steps, warmup_steps
from ..data.task import Task
from ..models.sharding import (fsdp2_on_cpu, full_state_dict, is_sharded, reduce_gradients_in_fp32, reshard, shard_reference,
                               unsharded)
from ..runtime.timing import PHASES_LOG, append_phases, as_metrics, phase, since, totals


SCHEDULES = typing.get_args(AuthorsOrKit)  # grpo.schedule, declared in config


def accelerator_precision(bf16: bool, cuda: bool) -> dict[str, Any]:
    """`Accelerator` arguments of a GRPO run: on a GPU, bf16 autocast over the fp32 policy (`model.train_dtype`)
    when `grpo.bf16`, as the authors' FSDP mixed precision; on CPU, fp32 throughout."""
    if not cuda:
        return {"cpu": True}  # no mixed_precision argument: a state set up before (TRL, a test) stays valid
    return {"cpu": False, "mixed_precision": "bf16" if bf16 else "no"}


@dataclass(frozen=True)
class RLQuestions:
    """The questions a GRPO run trains on (`tasks`) and validates on (`validation`), and the column-set pool
    that holds their targets."""

    tasks: Sequence[Task]
    pool: ColumnSetPool
    validation: Sequence[Task] = ()


@dataclass
class StepRollouts:
    """§4 steps 1-4 of one step, what `update()` continues from: this rank's rollouts, and the clock and the
    phase totals when the step began (its time/step_s and its phase seconds count from them)."""

    rollouts: list[QuestionRollout]
    started: float
    phases_at_start: dict[str, float]


@dataclass
class StepReport:
    """What one step did; notebook 04 narrates it and the JSONL log keeps `metrics`."""

    step: int
    rollouts: list[QuestionRollout]
    targets: dict[str, list[frozenset[str]]]  # pool targets read before this step's matches
    pool_before: dict[str, dict[frozenset[str], float]]
    pool_after: dict[str, dict[frozenset[str], float]]
    rewards: dict[str, torch.Tensor]  # role -> [questions, samples]
    advantages: dict[str, torch.Tensor]
    metrics: dict[str, float] = field(default_factory=dict)
    # with `record_pcgrad`: per parameter tensor, the two roles' cosine before PCGrad, whether they conflicted,
    # the combining coefficients and each role's cosine with the combined gradient after it
    pcgrad: list[dict[str, Any]] = field(default_factory=list)
    phases_at_start: dict[str, float] = field(default_factory=dict, repr=False)  # the step's, for `record`


class NonFiniteLoss(FloatingPointError):
    pass


class StopRequested(Exception):
    """A SIGTERM reached the run during a step's rollouts; the step was given up (`JointGRPO.step`)."""


class JointGRPO:
    def __init__(self, cfg: Config, policy: torch.nn.Module, reference: torch.nn.Module | None, tokenizer: Any,
                 questions: RLQuestions, out_dir: str | Path, accelerator: Any = None, progress: bool = True) -> None:
        """The trainer of `policy` on `questions`, writing to `out_dir`. Its `engine` is attached once the policy
        is prepared (`grpo_run.build_trainer`); each rollout's `SamplingSpec` writes its prompts."""
        from accelerate import Accelerator

        self.cfg, self.grpo = cfg, cfg.grpo
        self.rules = RolloutSpec.grpo(cfg)  # how every rollout of this run is judged, validation's too
        self.acc = accelerator or Accelerator(**accelerator_precision(self.grpo.bf16, torch.cuda.is_available()))
        fsdp2_on_cpu(self.acc)  # a launch for FSDP2 on CPU processes runs accelerate's FSDP2 code (sharding.py)
        self.tokenizer, self.engine = tokenizer, None
        self.tasks, self.val_tasks, self.pool = list(questions.tasks), list(questions.validation), questions.pool
        self.out = Path(out_dir)
        self.progress = progress and self.acc.is_main_process
        self.penalty = LengthPenalty.from_config(self.grpo)
        self.total_steps = total_steps(len(self.tasks), self.grpo.batch_questions, self.grpo.epochs,
                                       self.grpo.max_steps)
        optimizer = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=self.grpo.learning_rate,
                                      weight_decay=self.grpo.weight_decay)
        warmup = warmup_steps(self.grpo.warmup_ratio, self.total_steps, self.grpo.schedule)
        reduce_gradients_in_fp32(self.acc)  # FSDP2: bf16 compute, fp32 gradient reduction (the authors' verl)
        self.model, self.optimizer = self.acc.prepare(policy, optimizer)
        if self.acc.is_main_process and self.acc.num_processes > 1:
            how = ("FSDP2 (accelerate)" if getattr(self.acc, "is_fsdp2", False)
                   else f"replicated ({self.acc.distributed_type.name}, DDP)")
            print(f"[grpo] {self.acc.num_processes} processes, policy and reference: {how}", flush=True)
        # Not through prepare: accelerate's scheduler wrapper steps once per process per call when batches
        # are not split (accelerate/scheduler.py), so 4 ranks would run the warm-up 4x as fast. One
        # optimizer step is one scheduler step on every rank; the prepared optimizer shares `optimizer`'s
        # parameter groups, so the learning rate it uses is the one set here.
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(warmup, self.grpo.schedule))
        self.reference = shard_reference(reference, self.acc)  # FSDP2: 1/N of it per process, rank 0's weights
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.state = ckpt.TrainState()
        self._stop_requested = False
        self._val_start: dict[str, float] = {}  # validation before step 1, logged with it (validate_start)
        self.policy_source: str | None = None  # the folder the policy was loaded from (build_trainer), for start_key
        self.log = MetricsLog(self.out, self.grpo.report_to)
        self.record_grads = False  # keep a copy of the final combined gradient of each step (inspection, tests)
        self.record_pcgrad = False  # per-tensor PCGrad figures in each step's report (`StepReport.pcgrad`; notebook 04)
        self._training = False  # inside train(), whose bar counts the steps; a step taken alone shows its phases
        self.last_grads: list[torch.Tensor] = []

    # -- data cursor: a seeded permutation per epoch, so resuming needs only (epoch, position) --
    def _next_questions(self) -> list[int]:
        n, b = len(self.tasks), self.grpo.batch_questions
        if self.state.position + b > n:  # not enough left in this epoch: start the next one
            self.state.epoch += 1
            self.state.position = 0
        order = epoch_order(n, b, self.state.epoch, self.grpo.data_order, self.grpo.data_seed, self.grpo.seed)
        chosen = order[self.state.position:self.state.position + b]
        self.state.position += b
        return chosen[self.acc.process_index::self.acc.num_processes]  # this rank's share

    @property
    def unwrapped(self) -> torch.nn.Module:
        return self.acc.unwrap_model(self.model)

    # -- one step: collect (§4 steps 1-4), then update (steps 5-11) ------------------------------
    def step(self) -> StepReport:
        """One GRPO step: rollouts on this rank's share of the batch, then the update. A SIGTERM seen by any rank
        during the rollouts gives the step up before its update (`StopRequested`): the data cursor goes back, and
        the run's state is the last finished step's, so a stop loses at most this step."""
        cursor = (self.state.epoch, self.state.position)
        collected = self.collect()
        if any_rank(self.acc, self._stop_requested):  # every rank decides together (a collective)
            self.state.epoch, self.state.position = cursor
            raise StopRequested(self.state.step)
        return self.update(collected)

    def collect(self) -> StepRollouts:
        """§4 steps 1-4: retriever samples, vote, generator samples on the voted schema, execution. Taken
        alone (notebook 04's step cell), a bar shows its phases; inside train() the steps' bar counts."""
        step = self.state.step + 1
        phases_at_start, started = totals(), time.perf_counter()  # the step's phase times and its clock
        tasks = [self.tasks[i] for i in self._next_questions()]
        self.model.eval()
        spec = SamplingSpec.grpo(self.cfg, step, self.acc.process_index)
        with self._generating(), phase_bar(f"step {step} rollouts", ROLLOUT_PHASES,
                                           disable=not self.progress or self._training) as bar:
            rollouts = rollout(tasks, self.engine, self.tokenizer, spec, self.rules, on_phase=bar.done)
        return StepRollouts(rollouts, started, phases_at_start)

    def _generating(self) -> Any:
        """Generation on the live policy (the HF engine) under FSDP2: its units gathered once for all ranks'
        decoding; an engine with its own copy of the weights (vLLM) needs nothing."""
        if getattr(self.engine, "kind", "") == "hf" and self._sharded():
            return unsharded(self.model)
        return contextlib.nullcontext()

    def update(self, collected: StepRollouts) -> StepReport:
        """§4 steps 5-11 on this rank's rollouts; every rank must call it (collectives inside). Taken alone, a bar
        shows it under way; inside train() the steps' bar counts."""
        with waiting(f"step {self.state.step + 1} update", disable=not self.progress or self._training):
            return self._update(collected)

    def _update(self, collected: StepRollouts) -> StepReport:
        grpo, step, rollouts = self.grpo, self.state.step + 1, collected.rollouts
        rollout_seconds = time.perf_counter() - collected.started

        # -- 5. pool: decay and read targets BEFORE adding this step's matches; every rank applies all updates
        targets, pool_before, pool_after = self._update_pool(rollouts)

        # -- 6. rewards (sparse and gated, with the length penalty)
        r_gen = torch.tensor([[generator_reward(p, m, c.n_tokens, self.penalty, grpo.generator_truncation_gate)
                               for p, m, c in zip(r.generator.parses, r.matches, r.generator.completions)]
                              for r in rollouts], dtype=torch.float32)
        r_ret = torch.tensor([[self._retriever_reward(r, p, c.n_tokens, targets[r.task.qid], pool_after[r.task.qid])
                               for p, c in zip(r.retriever.parses, r.retriever.completions)]
                              for r in rollouts], dtype=torch.float32)

        # -- 7. advantages per role, per question group
        a_ret, a_gen = group_advantages(r_ret, grpo.adv_eps), group_advantages(r_gen, grpo.adv_eps)

        # -- 8-10. two backward passes, PCGrad, clip, AdamW
        w_gen = generator_loss_weight(step, self.total_steps, grpo.gen_schedule_ratio, grpo.schedule, grpo.pcgrad)
        self.engine.release_for_update()  # with engine.sleep_during_update: its memory is the update's until the sync
        ret_batch = role_batch(rollouts, "retriever", a_ret, self.tokenizer)
        gen_batch = role_batch(rollouts, "generator", a_gen, self.tokenizer)
        ret_loss, gen_loss, pcgrad_stats, grad_norm = self.optimize(ret_batch, gen_batch, w_gen, step)

        # -- 11. the engine samples from the updated policy next step
        self.engine.sync_weights(self.unwrapped)
        self.state.step = step

        metrics = {"step": step, "epoch": self.state.epoch, "w_gen": w_gen, "lr": self.scheduler.get_last_lr()[0],
                   "grad_norm": grad_norm, "time/step_s": time.perf_counter() - collected.started,
                   "time/rollout_s": rollout_seconds, **role_metrics("retriever", r_ret, rollouts, ret_loss),
                   **role_metrics("generator", r_gen, rollouts, gen_loss), **pcgrad_stats.as_metrics(),
                   **{f"pool/{k}": v for k, v in self.pool.stats().items()}, **rollout_metrics(rollouts)}
        return StepReport(step, rollouts, targets, pool_before, pool_after, {"retriever": r_ret, "generator": r_gen},
                          {"retriever": a_ret, "generator": a_gen}, mean_over_ranks(self.acc, metrics),
                          pcgrad_rows(self.unwrapped, pcgrad_stats), collected.phases_at_start)

    def _update_pool(self, rollouts: Sequence[QuestionRollout]) -> tuple[dict[str, list[frozenset[str]]], dict, dict]:
        """§4 step 5: every rank's matching column sets (read under grpo.bare_table_columns by the rollout: what
        notebook 04 shows is what joins) go to the pool of every rank, each question's targets read first.
        Returns the targets, and this rank's questions' pool weights before and after."""
        additions = [(r.task.qid, pool_additions(r.generator.parses, r.matches, r.match_sets, self.grpo.pool_add_gate))
                     for r in rollouts]
        all_additions = gather_objects(self.acc, additions)
        pool_before = {q: self.pool.weights(q) for q, _ in additions}
        targets = {}
        for qid, sets in all_additions:
            targets[qid] = self.pool.visit(qid)
            self.pool.add_matches(qid, sets)
        pool_after = {q: self.pool.weights(q) for q, _ in additions}
        return targets, pool_before, pool_after

    def optimize(self, ret_batch: RoleBatch, gen_batch: RoleBatch, w_gen: float, step: int
                 ) -> tuple[dict[str, float], dict[str, float], PCGradStats, float]:
        """§4 steps 8-10: the two roles' backward passes, PCGrad, clipping, one AdamW step (collectives inside).
        Returns each role's loss figures (`_backward`), PCGrad's statistics and the gradient norm before clipping."""
        grpo = self.grpo
        self.model.train()
        ret_loss = self._backward(ret_batch, weight=1.0)
        saved = save_grads(self.params)  # the one extra gradient copy PCGrad needs
        gen_loss = self._backward(gen_batch, weight=w_gen)
        losses = {"retriever": ret_loss["loss"], "generator": gen_loss["loss"]}
        # every rank decides together: one rank alone in save_checkpoint (barriers, gathers) while the others
        # enter PCGrad's all-reduce would hang the launch
        if any_rank(self.acc, not all(math.isfinite(v) for v in losses.values())):
            self.save_checkpoint()  # parameters are still those of the last good step
            raise NonFiniteLoss(f"step {step}: non-finite loss {losses}; checkpoint of step {self.state.step} "
                                f"saved in {self.out}; lower grpo.learning_rate or check the data")
        pcgrad_stats = combine_into_grads(self.params, saved, grpo.pcgrad, sharded=self._sharded(), eps=grpo.pcgrad_eps,
                                          max_ratio=grpo.pcgrad_max_ratio, detail=self.record_pcgrad)
        del saved  # combined into .grad: not held through the optimizer step
        grad_norm = self.acc.clip_grad_norm_(self.params, grpo.max_grad_norm)
        grad_norm = float(grad_norm.full_tensor() if hasattr(grad_norm, "full_tensor") else grad_norm)  # DTensor under FSDP2
        if self.record_grads:
            self.last_grads = [p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p)
                               for p in self.params]
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return ret_loss, gen_loss, pcgrad_stats, grad_norm

    def _retriever_reward(self, r: QuestionRollout, parse: Any, n_tokens: int, targets: list[frozenset[str]],
                          pool_weights: dict[frozenset[str], float]) -> float:
        if self.grpo.retriever_reward == "dense":  # ablation, authors' formula on the pool after this step's adds
            return authors_dense_retriever_reward(parse, pool_weights, r.task.gold_columns or frozenset())
        if self.grpo.retriever_reward == "dense_kit":  # ablation: coverage minus noise against the top target (or gold)
            target = targets[0] if targets else (r.task.gold_columns or frozenset())
            return dense_retriever_reward(parse, target, n_tokens, penalty=self.penalty)
        return retriever_reward(parse, targets, n_tokens, self.penalty)

    # -- one role's loss (§4 step 8): its sequences in micro-batches, one backward pass ---------
    def _backward(self, batch: RoleBatch, weight: float) -> dict[str, float]:
        """The role's loss (`grpo.loss_agg`) times `weight`, accumulated over micro-batches; one gradient sync at
        the end. Returns its loss, KL and clipped share (summed over micro-batches with their weights)."""
        grpo, dev = self.grpo, self.acc.device
        sums = {"loss": 0.0, "kl": 0.0, "clipped": 0.0}
        passes = forward_passes(batch, micro_batches(batch, grpo, self.acc), grpo)
        for k, (rows, scale, tokens) in enumerate(passes):
            logprobs, cmask = logprob_fn([batch.prompt_ids[i] for i in rows], [batch.completion_ids[i] for i in rows],
                                         self.tokenizer.pad_token_id, dev, grpo)
            with self._accumulating(last=k == len(passes) - 1), torch.set_grad_enabled(weight > 0):
                logp = logprobs(self.model)
                with torch.no_grad():
                    ref_logp = self._reference_logprobs(logprobs, logp)
                adv = batch.advantages[rows].to(dev).unsqueeze(1)
                tok_loss, kl, clipped = ppo_token_loss(logp, logp.detach(), ref_logp, adv, grpo.clip_eps,
                                                       grpo.dual_clip, grpo.kl_coef, grpo.kl_clamp)
                loss = (tok_loss * cmask).sum()
                if weight > 0:
                    self.acc.backward(loss * (weight * scale / tokens))
            sums["loss"] += float(loss.detach()) / tokens * scale
            sums["kl"] += float((kl.detach() * cmask).sum()) / tokens * scale
            sums["clipped"] += float((clipped * cmask).sum()) / tokens * scale
        if weight <= 0:  # forward passes without a backward: FSDP2 units that keep their gathered weights
            reshard(self.model)  # after forward (accelerate's embedding and head unit) give them back here
        return sums

    def _reference_logprobs(self, logprobs: Callable[[torch.nn.Module], torch.Tensor], logp: torch.Tensor
                            ) -> torch.Tensor:
        """The KL term's reference log-probabilities (§4 step 8): the frozen reference model's; under LoRA without
        a reference model of its own, the policy with its adapters switched off (the same frozen SFT weights,
        no second copy); the policy's own (no KL) when `grpo.kl_coef` is 0."""
        if self.grpo.kl_coef <= 0:
            return logp.detach()
        if self.reference is not None:
            return logprobs(self.reference)
        if ckpt.is_peft(self.unwrapped):
            with self.unwrapped.disable_adapter():
                return logprobs(self.unwrapped)
        return logp.detach()

    def _accumulating(self, last: bool) -> Any:
        """Gradient sync held back until a role's last micro-batch under DDP (each rank keeps its whole gradient
        anyway). Not under FSDP2: its `no_sync` keeps every unit's unsharded gradient until the last micro-batch
        (the whole model's, in fp32), where reducing each micro-batch keeps only this rank's shard."""
        if last or getattr(self.acc, "is_fsdp2", False):
            return contextlib.nullcontext()
        return self.acc.no_sync(self.model)

    def _sharded(self) -> bool:
        return self.acc.distributed_type.name.startswith("FSDP") or is_sharded(self.model)

    # -- validation (§4.11: every K steps, temperature 0.8, on the held-out questions) --------
    def validate(self) -> dict[str, float]:
        """The held-out questions rolled out as in training, without pool updates (each rank its share), and
        scored by `grpo_validation`."""
        if not self.val_tasks:
            return {}
        with phase("validation"), phase_bar(f"validation ({len(self.val_tasks)} questions)", ROLLOUT_PHASES,
                                            disable=not self.progress) as bar:
            self.model.eval()
            share = self.val_tasks[self.acc.process_index::self.acc.num_processes]
            with self._generating():
                rollouts = rollout(share, self.engine, self.tokenizer, SamplingSpec.validation(self.cfg), self.rules,
                                   on_phase=bar.done)
            return validation_metrics(gather_objects(self.acc, validation_scores(rollouts, self.pool)))

    def validate_start(self) -> dict[str, float]:
        """The starting point of the validation curve, before any update (only at step 0); logged with step 1
        as val/*_start. Validation is seeded on its own RNG, so training is unchanged by it, and reading it back
        (`grpo_validation.start_key`) changes nothing else."""
        if self.val_tasks and self.state.step == 0 and not self._val_start:
            key = start_key(self.cfg, self.rules, self.val_tasks, self.tokenizer, self.pool, self.policy_source,
                            self.acc.num_processes)
            saved = SavedStartValidation(self.out.parent, key)
            stored = saved.read()
            if stored is not None:
                self._val_start = stored
            else:
                self._val_start = self.validate()
                if self.acc.is_main_process:
                    saved.write(self._val_start)
        return self._val_start

    # -- checkpoints: everything needed to continue exactly -----------------------------------
    def _training_objects(self) -> ckpt.TrainingObjects:
        return ckpt.TrainingObjects(self.acc, self.model, self.optimizer, self.scheduler)

    def save_checkpoint(self) -> Path | None:
        with phase("checkpoints"), waiting(f"checkpoint {self.state.step}", disable=not self.progress):
            return ckpt.save(self.out, self.state, self._training_objects(), self.pool, self.cfg, self.tokenizer,
                             keep=self.grpo.keep_checkpoints)

    def _save_at_stop(self) -> None:
        """The last finished step's checkpoint, unless it is written already (or no step has finished)."""
        if self.state.step > 0 and not (self.out / f"checkpoint-{self.state.step}" / ckpt.MARKER).exists():
            self.save_checkpoint()

    def resume(self) -> bool:
        with waiting("resuming from the last checkpoint", disable=not self.progress or not ckpt.checkpoints(self.out)):
            found = ckpt.load_latest(self.out, self._training_objects(), gamma=self.grpo.gamma)
            if found is None:
                return False
            self.state, self.pool = found
            self.engine.sync_weights(self.unwrapped)
        if self.acc.is_main_process:  # one writer: two ranks rewriting the log at once could leave it empty
            self.log.keep_until(self.state.step)
        self.acc.wait_for_everyone()
        return True

    # -- the run: steps, each recorded, to the final model --------------------------------------
    def record(self, report: StepReport) -> bool:
        """After a step (`step()`, or `collect()` then `update()`): its metrics to the JSONL log and the tracker,
        validation and a checkpoint when due. What `train()` does after every step; True when a SIGTERM asks
        every rank to stop (the checkpoint is then written)."""
        m = report.metrics
        m.update(as_metrics(since(report.phases_at_start)))  # time/generation_s, time/execution_s of this step
        m.update({f"{k}_start": v for k, v in self._val_start.items()})
        self._val_start = {}
        if self.val_tasks and (report.step % self.grpo.val_every == 0 or report.step == self.total_steps):
            m.update(self.validate())
        if self.acc.is_main_process:
            self.log.write(m, report.step)
        stop = any_rank(self.acc, self._stop_requested)  # a SIGTERM seen by any rank stops all, same step
        if report.step % self.grpo.save_every == 0 or report.step == self.total_steps or stop:
            self.save_checkpoint()
        return stop

    def train(self, on_step: Callable[[StepReport], None] | None = None, stop_after: int | None = None) -> Path:
        """Run to `total_steps` (or `stop_after`), logging JSONL and saving every `save_every` steps."""
        self.out.mkdir(parents=True, exist_ok=True)
        previous = _install_sigterm(self)
        first_step = self.state.step
        bar = tqdm(total=self.total_steps, initial=self.state.step, desc="grpo", unit="step", disable=not self.progress)
        train_start, phases_at_start = time.perf_counter(), totals()  # for phases.jsonl at the end
        self.validate_start()
        self._training = True
        try:
            while self.state.step < self.total_steps and (stop_after is None or self.state.step < stop_after):
                try:
                    report = self.step()
                except StopRequested:
                    self._save_at_stop()
                    raise SystemExit(f"SIGTERM: the step in progress given up; checkpoint of step "
                                     f"{self.state.step} in {self.out}") from None
                stop = self.record(report)
                m = report.metrics
                bar.update(1)
                bar.set_postfix({"r_ret": f"{m['reward/retriever']:.2f}", "r_gen": f"{m['reward/generator']:.2f}"})
                if on_step:
                    on_step(report)
                if stop:
                    raise SystemExit(f"SIGTERM: checkpoint of step {report.step} saved in {self.out}")
        finally:
            self._training = False
            bar.close()
            self.log.close()
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)
        final = self.out / "final"
        # a finished run called again (notebook 06's full variant) leaves its final folder as it is, so the
        # model keeps its identity (`models.model_tag`) and its evaluations are read back, not redone
        fresh = self.state.step > first_step or not (final / "config.json").is_file()
        if self.state.step >= self.total_steps and fresh:
            self._save_final_model(final)
        if self.state.step > first_step and self.acc.is_main_process:
            # the time outside the steps (benchmarks/pipeline_time.py); the steps' own is in metrics.jsonl
            append_phases(self.out / PHASES_LOG, f"grpo ({self.out.name})", phases_at_start,
                          time.perf_counter() - train_start, only=("validation", "checkpoints"),
                          steps=[first_step, self.state.step])
        self.acc.wait_for_everyone()
        return final

    def _save_final_model(self, final: Path) -> None:
        """The trained policy as a plain model folder, with its tokenizer and pool."""
        with phase("checkpoints"), waiting("final model", disable=not self.progress):
            model = self.unwrapped
            if ckpt.is_peft(model):  # a plain model folder, as SFT writes (the run ends here)
                model = model.merge_and_unload()
                state = None
            else:  # full tensors on every rank under FSDP (a collective), written once by the main process
                state = full_state_dict(self.acc, self.model)
            if self.acc.is_main_process:
                model.save_pretrained(final, state_dict=state)
                self.tokenizer.save_pretrained(final)
                self.pool.save(final / "pool.json")


def _install_sigterm(trainer: JointGRPO):
    try:
        def handler(signum, frame):  # finish the step, checkpoint, exit (see train)
            trainer._stop_requested = True
        return signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread (e.g. some notebook front-ends): no handler
        return None
