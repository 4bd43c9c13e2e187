"""Joint two-role GRPO (§4): one model, a retriever loss and a generator loss, PCGrad between them.

`JointGRPO.step()` is the whole method in labelled phases, top to bottom:

    batch -> retriever rollouts -> vote -> generator rollouts -> execute -> pool -> rewards
          -> advantages -> losses (two backward passes) -> PCGrad -> clip -> AdamW -> sync engine

It runs the same in a notebook (one process) and under `accelerate launch -m acesql_lib.train.grpo`
(DDP/FSDP): each rank takes its share of the step's questions, losses are normalised by the
GLOBAL token count of each role so the summed update equals the single-process one, and pool
updates are exchanged so every rank holds the same pool.

Old log-probs: with one PPO epoch and one optimizer step per batch (§4 step 8) the sampling
policy IS the current policy, so old log-probs are the current ones detached (ratio = 1; the
clip and dual clip stay in the loss for engines whose sampling log-probs differ).
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import hashlib
import json
import math
import os
import random
import signal
import time
import typing
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
from ..runtime.progress import phase_bar, tqdm, waiting

from . import checkpoint as ckpt
from ..config.choices import AuthorsOrKit
from ..config.settings import Config
from ..executor import VALID_STATUSES
from .microbatches import balanced_partitions, micro_batch_count, padded_chunks
from .packed import pack_by_prompt, packed_logprobs, token_logprobs
from .pcgrad import combine_into_grads, save_grads
from ..roles.pool import ColumnSetPool, pool_additions
from ..roles.rewards import (LengthPenalty, authors_dense_retriever_reward, dense_retriever_reward, generator_reward,
                             group_advantages, retriever_reward)
from .rollouts import ROLLOUT_PHASES, QuestionRollout, RolloutSpec, SamplingSpec, rollout
from .schedule import gen_weight, lr_lambda, total_steps, warmup_steps
from ..data.task import Task
from ..data.routes import rollout_route_records, route_share
from ..runtime.reuse_keys import engine_key, settings_hash
from ..models.sharding import (fsdp2_on_cpu, full_state_dict, is_sharded, reduce_gradients_in_fp32, reshard, shard_reference,
                               unsharded)
from ..runtime.timing import PHASES_LOG, append_phases, as_metrics, phase, since, totals
from .tracking import open_tracker


# ---------------------------------------------------------------------------------------------
# Pieces with their own tests


SCHEDULES = typing.get_args(AuthorsOrKit)  # grpo.schedule, declared in config


def accelerator_precision(bf16: bool, cuda: bool) -> dict[str, Any]:
    """`Accelerator` arguments of a GRPO run: on a GPU, bf16 autocast over the fp32 policy (`model.train_dtype`)
    when `grpo.bf16`, as the authors' FSDP mixed precision; on CPU, fp32 throughout."""
    if not cuda:
        return {"cpu": True}  # no mixed_precision argument: a state set up before (TRL, a test) stays valid
    return {"cpu": False, "mixed_precision": "bf16" if bf16 else "no"}


@functools.lru_cache(maxsize=4)
def _authors_epochs(n: int, batch: int, data_seed: int, upto: int) -> tuple[tuple[int, ...], ...]:
    sampler = torch.utils.data.RandomSampler(range(n), generator=torch.Generator().manual_seed(data_seed))
    batches = torch.utils.data.BatchSampler(sampler, batch, drop_last=True)
    return tuple(tuple(i for chunk in batches for i in chunk) for _ in range(upto + 1))


def epoch_order(n: int, batch: int, epoch: int, data_order: str = "authors", data_seed: int = 1,
                seed: int = 0) -> list[int]:
    """The question order of `epoch` (0-based), a function of the epoch alone so a resume needs only
    (epoch, position).

    "authors": verl's sampler, one torch generator seeded `data_seed` drawn epoch after epoch
    (RandomSampler under a drop-last BatchSampler, as RL/trainer/main_two_pass.py builds it), so a
    run sees the authors' order of the same rows. "kit": a fresh Python shuffle per epoch from `seed`."""
    if data_order == "authors":
        if n < batch:  # the cursor takes the whole (short) list each step; keep the sampler's order
            return list(torch.randperm(n, generator=torch.Generator().manual_seed(data_seed)).tolist())
        return list(_authors_epochs(n, batch, data_seed, epoch)[epoch])
    order = list(range(n))
    random.Random(seed * 1_000_003 + epoch).shuffle(order)
    return order


def ppo_token_loss(logp: torch.Tensor, old_logp: torch.Tensor, ref_logp: torch.Tensor, adv: torch.Tensor,
                   clip_eps: float = 0.2, dual_clip: float = 3.0, kl_coef: float = 0.001, kl_clamp: float = 10.0
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """§4 step 8: PPO clipped surrogate with dual clip, plus the k3 ("low_var_kl") KL term, per token.

    `kl_clamp` > 0 is verl's low_var_kl as the authors ran it: the log-ratio clamped to [-20, 20] and the
    estimate to [-kl_clamp, kl_clamp] (no gradient from a clamped token); 0 leaves k3 unclamped.
    Returns (loss, kl, clipped) per token; `adv` is broadcast per sequence ([b, 1])."""
    ratio = torch.exp(logp - old_logp)
    pg = torch.maximum(-adv * ratio, -adv * ratio.clamp(1 - clip_eps, 1 + clip_eps))
    pg = torch.where(adv < 0, torch.minimum(pg, -adv * dual_clip), pg)  # dual clip bounds negative advantages
    delta = ref_logp - logp
    if kl_clamp > 0:
        delta = delta.clamp(-20.0, 20.0)
    kl = torch.exp(delta) - delta - 1  # k3: unbiased, always >= 0
    if kl_clamp > 0:
        kl = kl.clamp(-kl_clamp, kl_clamp)
    clipped = ((ratio < 1 - clip_eps) | (ratio > 1 + clip_eps)).float()
    return pg + kl_coef * kl, kl, clipped


@dataclass
class RoleBatch:
    """Every sampled sequence of one role in this rank's share of the step."""

    prompt_ids: list[list[int]]
    completion_ids: list[list[int]]
    advantages: torch.Tensor  # [n_seq]

    @property
    def n_tokens(self) -> int:
        return sum(len(c) for c in self.completion_ids)


def _pad_batch(prompts: Sequence[list[int]], completions: Sequence[list[int]], pad_id: int, device: torch.device):
    """Prompts left-padded, completions right-padded: completion tokens share columns, so the model
    only needs logits for the last C+1 positions (TRL's layout; big vocabularies stay affordable)."""
    p_len = max(len(p) for p in prompts)
    c_len = max(max(len(c) for c in completions), 1)
    n = len(prompts)
    ids = torch.full((n, p_len + c_len), pad_id, dtype=torch.long)
    attn = torch.zeros((n, p_len + c_len), dtype=torch.long)
    cmask = torch.zeros((n, c_len), dtype=torch.float32)
    for i, (p, c) in enumerate(zip(prompts, completions)):
        ids[i, p_len - len(p):p_len] = torch.tensor(p, dtype=torch.long)
        attn[i, p_len - len(p):p_len] = 1
        if c:
            ids[i, p_len:p_len + len(c)] = torch.tensor(c, dtype=torch.long)
            attn[i, p_len:p_len + len(c)] = 1
            cmask[i, :len(c)] = 1
    pos = (attn.cumsum(-1) - 1).clamp(min=0)  # positions as generation saw them (0 at the first real token)
    return ids.to(device), attn.to(device), pos.to(device), cmask.to(device), c_len


def completion_logprobs(model: torch.nn.Module, ids: torch.Tensor, attn: torch.Tensor, pos: torch.Tensor,
                        c_len: int, chunk_tokens: int = 0) -> torch.Tensor:
    """Log-probability of each completion token, [b, c_len].

    The model's logits (bf16 under mixed precision) are kept for the completion's positions only. With
    `chunk_tokens` > 0 their fp32 log-softmax is taken `chunk_tokens` positions at a time, each chunk
    recomputed in the backward pass instead of saved (`grpo.logprob_chunk_tokens`): the fp32 copy of the
    b x c_len x vocabulary logits, its softmax and its gradient never exist whole. Every row's value is the
    one the whole-tensor computation gives (the reduction runs along the vocabulary, row by row)."""
    logits = model(input_ids=ids, attention_mask=attn, position_ids=pos, logits_to_keep=c_len + 1).logits
    logits, target = logits[:, :-1], ids[:, -c_len:]
    if chunk_tokens <= 0 or logits.shape[0] * c_len <= chunk_tokens:
        return token_logprobs(logits, target)
    width = max(1, chunk_tokens // logits.shape[0])  # positions per chunk; split along them (its backward is one cat)
    pieces = zip(logits.split(width, dim=1), target.split(width, dim=1))
    if torch.is_grad_enabled() and logits.requires_grad:
        from torch.utils.checkpoint import checkpoint

        return torch.cat([checkpoint(token_logprobs, x, t, use_reentrant=False) for x, t in pieces], dim=1)
    return torch.cat([token_logprobs(x, t) for x, t in pieces], dim=1)


# ---------------------------------------------------------------------------------------------
# The trainer


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


# where a validation's numbers come from (JointGRPO._start_key): its key hashes these modules and every module
# they import (reuse_keys.imported_modules)
START_VALIDATION_CODE = ("train.grpo",)


class NonFiniteLoss(FloatingPointError):
    pass


class StopRequested(Exception):
    """A SIGTERM reached the run during a step's rollouts; the step was given up (`JointGRPO.step`)."""


class JointGRPO:
    def __init__(self, cfg: Config, policy: torch.nn.Module, reference: torch.nn.Module | None, tokenizer: Any,
                 engine: Any, tasks: Sequence[Task], pool: ColumnSetPool, out_dir: str | Path,
                 val_tasks: Sequence[Task] = (), accelerator: Any = None, style: str = "paper",
                 progress: bool = True) -> None:
        from accelerate import Accelerator

        self.cfg, self.g = cfg, cfg.grpo
        self.rules = RolloutSpec.grpo(cfg)  # how every rollout of this run is judged, validation's too
        self.acc = accelerator or Accelerator(**accelerator_precision(self.g.bf16, torch.cuda.is_available()))
        fsdp2_on_cpu(self.acc)  # a launch for FSDP2 on CPU processes runs accelerate's FSDP2 code (sharding.py)
        self.tokenizer, self.engine, self.style = tokenizer, engine, style
        self.tasks, self.val_tasks, self.pool = list(tasks), list(val_tasks), pool
        self.out = Path(out_dir)
        self.progress = progress and self.acc.is_main_process
        self.penalty = LengthPenalty.from_config(self.g)
        self.total_steps = total_steps(len(self.tasks), self.g.batch_questions, self.g.epochs, self.g.max_steps)
        optimizer = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=self.g.learning_rate,
                                      weight_decay=self.g.weight_decay)
        warmup = warmup_steps(self.g.warmup_ratio, self.total_steps, self.g.schedule)
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
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(warmup, self.g.schedule))
        self.reference = shard_reference(reference, self.acc)  # FSDP2: 1/N of it per process, rank 0's weights
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.state = ckpt.TrainState()
        self._stop_requested = False
        self._val_start: dict[str, float] = {}  # validation before step 1, logged with it (validate_start)
        self.policy_source: str | None = None  # the folder the policy was loaded from (build_trainer), for _start_key
        self._phases_at_collect = totals()
        self._tracker: Any = None
        self.record_grads = False  # keep a copy of the final combined gradient of each step (inspection, tests)
        self.record_pcgrad = False  # per-tensor PCGrad figures in each step's report (`StepReport.pcgrad`; notebook 04)
        self._training = False  # inside train(), whose bar counts the steps; a step taken alone shows its phases
        self.last_grads: list[torch.Tensor] = []

    # -- data cursor: a seeded permutation per epoch, so resuming needs only (epoch, position) --
    def _next_questions(self) -> list[int]:
        n, b = len(self.tasks), self.g.batch_questions
        if self.state.position + b > n:  # not enough left in this epoch: start the next one
            self.state.epoch += 1
            self.state.position = 0
        order = epoch_order(n, b, self.state.epoch, self.g.data_order, self.g.data_seed, self.g.seed)
        chosen = order[self.state.position:self.state.position + b]
        self.state.position += b
        return chosen[self.acc.process_index::self.acc.num_processes]  # this rank's share

    @property
    def unwrapped(self) -> torch.nn.Module:
        return self.acc.unwrap_model(self.model)

    def step(self) -> StepReport:
        """One GRPO step: rollouts on this rank's share of the batch, then the update. A SIGTERM seen by any rank
        during the rollouts gives the step up before its update (`StopRequested`): the data cursor goes back, and
        the run's state is the last finished step's, so a stop loses at most this step."""
        t0 = time.perf_counter()
        cursor = (self.state.epoch, self.state.position)
        rolls = self.collect()
        if _any_rank(self.acc, self._stop_requested):  # every rank decides together (a collective)
            self.state.epoch, self.state.position = cursor
            raise StopRequested(self.state.step)
        return self.update(rolls, t0)

    def collect(self) -> list[QuestionRollout]:
        """§4 steps 1-4: retriever samples, vote, generator samples on the voted schema, execution. Taken
        alone (notebook 04's step cell), a bar shows its phases; inside train() the steps' bar counts."""
        step = self.state.step + 1
        self._phases_at_collect = totals()  # the step's phase times (generation, execution) count from here
        self._collect_t0 = time.perf_counter()
        tasks = [self.tasks[i] for i in self._next_questions()]
        self.model.eval()
        spec = SamplingSpec.grpo(self.cfg, step, self.acc.process_index)
        with self._generating(), phase_bar(f"step {step} rollouts", ROLLOUT_PHASES,
                                           disable=not self.progress or self._training) as bar:
            return rollout(tasks, self.engine, self.tokenizer, spec, self.rules, style=self.style, on_phase=bar.done)

    def _generating(self) -> Any:
        """Generation on the live policy (the HF engine) under FSDP2: its units gathered once for all ranks'
        decoding; an engine with its own copy of the weights (vLLM) needs nothing."""
        if getattr(self.engine, "kind", "") == "hf" and self._sharded():
            return unsharded(self.model)
        return contextlib.nullcontext()

    def update(self, rolls: list[QuestionRollout], t0: float | None = None) -> StepReport:
        """§4 steps 5-10 on this rank's rollouts; every rank must call it (collectives inside). Taken alone, a bar
        shows it under way; inside train() the steps' bar counts."""
        with waiting(f"step {self.state.step + 1} update", disable=not self.progress or self._training):
            return self._update(rolls, t0)

    def _update(self, rolls: list[QuestionRollout], t0: float | None) -> StepReport:
        g, step = self.g, self.state.step + 1
        t0 = getattr(self, "_collect_t0", time.perf_counter()) if t0 is None else t0
        t_rollout = time.perf_counter() - t0

        # -- 5. pool: decay and read targets BEFORE adding this step's matches; every rank applies all updates
        # the match sets were read under grpo.bare_table_columns by the rollout: what notebook 04 shows is what joins
        mine = [(r.task.qid, pool_additions(r.generator.parses, r.matches, r.match_sets, g.pool_add_gate)) for r in rolls]
        everyone = _gather_objects(self.acc, mine)
        pool_before = {q: self.pool.weights(q) for q, _ in mine}
        targets = {}
        for qid, sets in everyone:
            targets[qid] = self.pool.visit(qid)
            self.pool.add_matches(qid, sets)
        pool_after = {q: self.pool.weights(q) for q, _ in mine}

        # -- 6. rewards (sparse and gated, with the length penalty)
        r_gen = torch.tensor([[generator_reward(p, m, c.n_tokens, self.penalty, g.generator_truncation_gate)
                               for p, m, c in zip(r.generator.parses, r.matches, r.generator.completions)]
                              for r in rolls], dtype=torch.float32)
        r_ret = torch.tensor([[self._retriever_reward(r, p, c.n_tokens, targets[r.task.qid], pool_after[r.task.qid])
                               for p, c in zip(r.retriever.parses, r.retriever.completions)]
                              for r in rolls], dtype=torch.float32)

        # -- 7. advantages per role, per question group
        a_ret, a_gen = group_advantages(r_ret, g.adv_eps), group_advantages(r_gen, g.adv_eps)

        # -- 8-10. two backward passes, PCGrad, clip, AdamW
        # The authors' norm-equalised PCGrad sets both loss scales to 1.0 (RL/third_party/verl/workers/actor/dp_actor.py)
        equalised = g.pcgrad == "norm_equalised" and g.schedule == "authors"
        w_gen = 1.0 if equalised else gen_weight(step, self.total_steps, g.gen_schedule_ratio, g.schedule)
        self.engine.release_for_update()  # with engine.sleep_during_update: its memory is the update's until the sync
        m_ret, m_gen, pc, grad_norm = self.optimize(self._role_batch(rolls, "retriever", a_ret),
                                                    self._role_batch(rolls, "generator", a_gen), w_gen, step)

        # -- 11. the engine samples from the updated policy next step
        self.engine.sync_weights(self.unwrapped)
        self.state.step = step

        metrics = {"step": step, "epoch": self.state.epoch, "w_gen": w_gen, "lr": self.scheduler.get_last_lr()[0],
                   "grad_norm": grad_norm, "time/step_s": time.perf_counter() - t0, "time/rollout_s": t_rollout,
                   **_role_metrics("retriever", r_ret, rolls, m_ret), **_role_metrics("generator", r_gen, rolls, m_gen),
                   **pc.as_metrics(), **{f"pool/{k}": v for k, v in self.pool.stats().items()},
                   **_rollout_metrics(rolls)}
        metrics = _mean_over_ranks(self.acc, metrics)
        names = [n for n, p in self.unwrapped.named_parameters() if p.requires_grad]
        per_tensor = [{"tensor": names[t.index] if t.index < len(names) else str(t.index), **t.as_row()}
                      for t in pc.tensors]
        return StepReport(step, rolls, targets, pool_before, pool_after, {"retriever": r_ret, "generator": r_gen},
                          {"retriever": a_ret, "generator": a_gen}, metrics, per_tensor)

    def optimize(self, ret_batch: RoleBatch, gen_batch: RoleBatch, w_gen: float, step: int
                 ) -> tuple[dict[str, float], dict[str, float], Any, float]:
        """§4 steps 8-10: the two roles' backward passes, PCGrad, clipping, one AdamW step (collectives inside)."""
        g = self.g
        self.model.train()
        m_ret = self._backward(ret_batch, weight=1.0)
        saved = save_grads(self.params)  # the one extra gradient copy PCGrad needs
        m_gen = self._backward(gen_batch, weight=w_gen)
        losses = {"retriever": m_ret["loss"], "generator": m_gen["loss"]}
        # every rank decides together: one rank alone in save_checkpoint (barriers, gathers) while the others
        # enter PCGrad's all-reduce would hang the launch
        if _any_rank(self.acc, not all(math.isfinite(v) for v in losses.values())):
            self.save_checkpoint()  # parameters are still those of the last good step
            raise NonFiniteLoss(f"step {step}: non-finite loss {losses}; checkpoint of step {self.state.step} "
                                f"saved in {self.out}; lower grpo.learning_rate or check the data")
        pc = combine_into_grads(self.params, saved, g.pcgrad, sharded=self._sharded(), eps=g.pcgrad_eps,
                                max_ratio=g.pcgrad_max_ratio, detail=self.record_pcgrad)
        del saved  # combined into .grad: not held through the optimizer step
        grad_norm = self.acc.clip_grad_norm_(self.params, g.max_grad_norm)
        grad_norm = float(grad_norm.full_tensor() if hasattr(grad_norm, "full_tensor") else grad_norm)  # DTensor under FSDP2
        if self.record_grads:
            self.last_grads = [p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p)
                               for p in self.params]
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return m_ret, m_gen, pc, grad_norm

    def _retriever_reward(self, r: QuestionRollout, parse: Any, n_tokens: int, targets: list[frozenset[str]],
                          pool_weights: dict[frozenset[str], float]) -> float:
        if self.g.retriever_reward == "dense":  # ablation, authors' formula on the pool after this step's adds
            return authors_dense_retriever_reward(parse, pool_weights, r.task.gold_columns or frozenset())
        if self.g.retriever_reward == "dense_kit":  # ablation: coverage minus noise against the top target (gold if none)
            target = targets[0] if targets else (r.task.gold_columns or frozenset())
            return dense_retriever_reward(parse, target, n_tokens, penalty=self.penalty)
        return retriever_reward(parse, targets, n_tokens, self.penalty)

    def _role_batch(self, rolls: Sequence[QuestionRollout], role: str, adv: torch.Tensor) -> RoleBatch:
        enc: dict[str, list[int]] = {}
        prompts, comps, advs = [], [], []
        for i, r in enumerate(rolls):
            samples = r.retriever if role == "retriever" else r.generator
            for j, (p, c) in enumerate(zip(samples.prompts, samples.completions)):
                if p not in enc:
                    enc[p] = self.tokenizer(p, add_special_tokens=False)["input_ids"]
                prompts.append(enc[p])
                comps.append(list(c.token_ids))
                advs.append(float(adv[i, j]))
        return RoleBatch(prompts, comps, torch.tensor(advs))

    def _micro_batches(self, batch: RoleBatch) -> list[tuple[list[int], float, int]]:
        """(sequence indices, numerator, denominator) of each micro-batch of this rank's share of a role:
        each of its tokens weighs numerator / denominator in the role's loss.

        "global_token_mean": chunks of `micro_batch_size` sequences, every token weighted 1 / (the role's
        token count over all ranks), times the rank count that DDP's gradient average divides away.
        "micro_token_mean" (the authors' verl actor): k = ceil(tokens / `micro_batch_tokens`) micro-batches
        (the largest k of any rank) balanced by length, each a token mean weighted by its share of the
        rank's sequences; DDP's average over ranks is the authors' FSDP average."""
        g, n = self.g, len(batch.prompt_ids)
        if g.loss_agg == "global_token_mean":
            total_tokens = max(_sum_over_ranks(self.acc, batch.n_tokens), 1)
            return [(list(range(s, min(s + g.micro_batch_size, n))), self.acc.num_processes, total_tokens)
                    for s in range(0, n, g.micro_batch_size)]
        lengths = [len(p) + len(c) for p, c in zip(batch.prompt_ids, batch.completion_ids)]
        k = min(n, max(_gather_objects(self.acc, [micro_batch_count(lengths, g.micro_batch_tokens)])))
        parts = balanced_partitions(lengths, k)
        return [(part, len(part) / n, max(sum(len(batch.completion_ids[i]) for i in part), 1)) for part in parts]

    def _forward_passes(self, batch: RoleBatch, micro: list[tuple[list[int], float, int]]
                        ) -> list[tuple[list[int], float, int]]:
        """Each "micro_token_mean" micro-batch in forward passes whose padded rows stay within
        `grpo.micro_batch_tokens` (`microbatches.padded_chunks`; the authors' verl packs without padding), each
        pass with its micro-batch's loss weights, so the loss and gradient are the same sums. Other layouts: one
        pass per micro-batch."""
        if self.g.loss_agg != "micro_token_mean" or self.g.packed_prompts:
            return micro
        p_len = [len(p) for p in batch.prompt_ids]
        c_len = [len(c) for c in batch.completion_ids]
        return [(part, numer, denom) for rows, numer, denom in micro
                for part in padded_chunks(p_len, c_len, rows, self.g.micro_batch_tokens)]

    def _backward(self, batch: RoleBatch, weight: float) -> dict[str, float]:
        """The role's loss (`grpo.loss_agg`), accumulated over micro-batches; one gradient sync at the end."""
        g, dev = self.g, self.acc.device
        sums = {"loss": 0.0, "kl": 0.0, "clipped": 0.0}
        passes = self._forward_passes(batch, self._micro_batches(batch))
        for k, (rows, numer, denom) in enumerate(passes):
            logprobs, cmask = self._logprob_fn([batch.prompt_ids[i] for i in rows],
                                               [batch.completion_ids[i] for i in rows])
            with self._accumulating(last=k == len(passes) - 1), torch.set_grad_enabled(weight > 0):
                logp = logprobs(self.model)
                with torch.no_grad():
                    ref_logp = self._reference_logprobs(logprobs, logp)
                adv = batch.advantages[rows].to(dev).unsqueeze(1)
                tok_loss, kl, clipped = ppo_token_loss(logp, logp.detach(), ref_logp, adv, g.clip_eps, g.dual_clip,
                                                       g.kl_coef, g.kl_clamp)
                loss = (tok_loss * cmask).sum()
                if weight > 0:
                    self.acc.backward(loss * (weight * numer / denom))
            sums["loss"] += float(loss.detach()) / denom * numer
            sums["kl"] += float((kl.detach() * cmask).sum()) / denom * numer
            sums["clipped"] += float((clipped * cmask).sum()) / denom * numer
        if weight <= 0:  # forward passes without a backward: FSDP2 units that keep their gathered weights
            reshard(self.model)  # after forward (accelerate's embedding and head unit) give them back here
        return sums

    def _reference_logprobs(self, logprobs: Callable[[torch.nn.Module], torch.Tensor], logp: torch.Tensor
                            ) -> torch.Tensor:
        """The KL term's reference log-probabilities (§4 step 8): the frozen reference model's; under LoRA without
        a reference model of its own, the policy with its adapters switched off (the same frozen SFT weights,
        no second copy); the policy's own (no KL) when `grpo.kl_coef` is 0."""
        if self.g.kl_coef <= 0:
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

    def _logprob_fn(self, prompts: list[list[int]], completions: list[list[int]]
                    ) -> tuple[Callable[[torch.nn.Module], torch.Tensor], torch.Tensor]:
        """A micro-batch laid out for the forward pass (`grpo.packed_prompts`: one row per distinct prompt,
        acesql_lib/train/packed.py; else one padded row per sample), as a function of the model that returns the
        completion tokens' log-probabilities [samples, c_len], and the completion mask."""
        pad, dev, chunk = self.tokenizer.pad_token_id, self.acc.device, self.g.logprob_chunk_tokens
        if self.g.packed_prompts:
            packed = pack_by_prompt(prompts, completions, pad, dev)
            return (lambda model: packed_logprobs(model, packed, chunk)), packed.cmask
        ids, attn, pos, cmask, c_len = _pad_batch(prompts, completions, pad, dev)
        return (lambda model: completion_logprobs(model, ids, attn, pos, c_len, chunk)), cmask

    def _sharded(self) -> bool:
        return self.acc.distributed_type.name.startswith("FSDP") or is_sharded(self.model)

    # -- validation (§4.11: every K steps, temperature 0.8, on the held-out questions) --------
    def validate(self) -> dict[str, float]:
        if not self.val_tasks:
            return {}
        with phase("validation"), phase_bar(f"validation ({len(self.val_tasks)} questions)", ROLLOUT_PHASES,
                                            disable=not self.progress) as bar:
            return self._validate(bar.done)

    def _validate(self, on_phase: Callable[[str], None] | None = None) -> dict[str, float]:
        self.model.eval()
        share = self.val_tasks[self.acc.process_index::self.acc.num_processes]
        with self._generating():
            rolls = rollout(share, self.engine, self.tokenizer, SamplingSpec.validation(self.cfg), self.rules,
                            style=self.style, on_phase=on_phase)
        def exact(parse: Any, r: QuestionRollout) -> int:  # a retriever sample's set is a pool target (read only)
            return int(bool(parse.columns) and parse.columns in (self.pool.targets(r.task.qid) or [r.task.gold_columns]))

        rows = [(r.n_correct / len(r.generator.parses), sum(exact(p, r) for p in r.retriever.parses) / len(r.retriever.parses))
                for r in rolls]
        rows = [x for part in _gather_objects(self.acc, rows) for x in [part]]
        n = max(len(rows), 1)
        # EX in percent, the retriever's exact-match share a fraction (README, "Units")
        return {"val/ex": 100.0 * sum(a for a, _ in rows) / n, "val/retriever_exact": sum(b for _, b in rows) / n}

    # -- checkpoints: everything needed to continue exactly -----------------------------------
    def save_checkpoint(self) -> Path | None:
        with phase("checkpoints"), waiting(f"checkpoint {self.state.step}", disable=not self.progress):
            return ckpt.save(self.out, self.state, self.acc, self.model, self.optimizer, self.scheduler, self.pool,
                             self.cfg, self.tokenizer, keep=self.g.keep_checkpoints)

    def _save_at_stop(self) -> None:
        """The last finished step's checkpoint, unless it is written already (or no step has finished)."""
        if self.state.step > 0 and not (self.out / f"checkpoint-{self.state.step}" / ckpt.MARKER).exists():
            self.save_checkpoint()

    def resume(self) -> bool:
        with waiting("resuming from the last checkpoint", disable=not self.progress or not ckpt.checkpoints(self.out)):
            found = ckpt.load_latest(self.out, self.acc, self.model, self.optimizer, self.scheduler, gamma=self.g.gamma)
            if found is None:
                return False
            self.state, self.pool = found
            self.engine.sync_weights(self.unwrapped)
        if self.acc.is_main_process:  # one writer: two ranks rewriting the log at once could leave it empty
            _truncate_log(self.out / "metrics.jsonl", self.state.step)
        self.acc.wait_for_everyone()
        return True

    def record(self, report: StepReport) -> bool:
        """After a step (`step()`, or `collect()` then `update()`): its metrics to the JSONL log and the tracker,
        validation and a checkpoint when due. What `train()` does after every step; True when a SIGTERM asks
        every rank to stop (the checkpoint is then written)."""
        m = report.metrics
        m.update(as_metrics(since(self._phases_at_collect)))  # time/generation_s, time/execution_s of this step
        m.update({f"{k}_start": v for k, v in self._val_start.items()})
        self._val_start = {}
        if self.val_tasks and (report.step % self.g.val_every == 0 or report.step == self.total_steps):
            m.update(self.validate())
        if self.acc.is_main_process:
            self.out.mkdir(parents=True, exist_ok=True)
            with (self.out / "metrics.jsonl").open("a") as f:
                f.write(json.dumps(m) + "\n")
            if self._tracker is None:  # the JSONL's metrics, same names, also to grpo.report_to's tracker
                self._tracker = open_tracker(self.g.report_to, self.out / "runs", run_name=self.out.name,
                                             setting="grpo.report_to")
            self._tracker.log(m, report.step)
        stop = _any_rank(self.acc, self._stop_requested)  # a SIGTERM seen by any rank stops all, same step
        if report.step % self.g.save_every == 0 or report.step == self.total_steps or stop:
            self.save_checkpoint()
        return stop

    def validate_start(self) -> dict[str, float]:
        """The starting point of the validation curve, before any update (only at step 0); logged with step 1
        as val/*_start. Validation is seeded on its own RNG, so training is unchanged by it, and reading it back
        (`_start_key`) changes nothing else."""
        if self.val_tasks and self.state.step == 0 and not self._val_start:
            key = self._start_key()
            key_text = json.dumps(key, sort_keys=True, default=str)
            saved = self.out.parent / "start_validation" / f"{settings_hash(key)}.json" if key else None
            try:
                stored = json.loads(saved.read_text()) if saved else {}
            except (OSError, json.JSONDecodeError):
                stored = {}  # none yet, or half written: validate
            if saved and stored.get("key") == key_text and isinstance(stored.get("metrics"), dict):
                self._val_start = stored["metrics"]
            else:
                self._val_start = self.validate()
                if saved and self.acc.is_main_process:  # whole or not at all
                    saved.parent.mkdir(parents=True, exist_ok=True)
                    tmp = saved.with_name(f"{saved.name}.tmp-{os.getpid()}")
                    tmp.write_text(json.dumps({"key": key_text, "metrics": self._val_start}, sort_keys=True))
                    tmp.replace(saved)
        return self._val_start

    def _start_key(self) -> dict[str, Any] | None:
        """Everything the validation before any update depends on, or None where it is not read back (switched
        off, several processes, a policy of unknown source): the SFT model (`models.model_tag`; fresh LoRA adapters
        add nothing yet), its settings and the engine's, the validation's sampling and judging rules, every
        question's retriever prompt (schema text, values, template), gold SQL and database file, the pool's
        targets for the questions, and the code."""
        if not self.g.reuse_start_validation or self.acc.num_processes != 1 or not self.policy_source:
            return None
        from ..models.loading import model_tag
        from ..runtime.reuse_keys import code_hash
        from .rollouts import retriever_prompt

        spec = SamplingSpec.validation(self.cfg)
        questions = []
        for t in self.val_tasks:
            db = Path(t.example.db_path)
            st = db.stat() if db.is_file() else None
            questions.append([t.qid, retriever_prompt(t, self.tokenizer, self.style, spec.enable_thinking),
                              t.example.sql, str(db), st and st.st_size, st and st.st_mtime_ns,
                              sorted(sorted(s) for s in self.pool.targets(t.qid) or [])])
        return {"model": model_tag(self.policy_source), "settings": dataclasses.asdict(self.cfg.model),
                "engine": engine_key(self.cfg.engine), "sampling": dataclasses.asdict(spec),
                "rules": dataclasses.asdict(self.rules), "questions": settings_hash(questions),
                "code": code_hash(*START_VALIDATION_CODE)}

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
            if self._tracker is not None:
                self._tracker.close()
                self._tracker = None
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)
        final = self.out / "final"
        # a finished run called again (notebook 06's full variant) leaves its final folder as it is, so the
        # model keeps its identity (`models.model_tag`) and its evaluations are read back, not redone
        fresh = self.state.step > first_step or not (final / "config.json").is_file()
        if self.state.step >= self.total_steps and fresh:
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
        if self.state.step > first_step and self.acc.is_main_process:
            # the time outside the steps (benchmarks/pipeline_time.py); the steps' own is in metrics.jsonl
            append_phases(self.out / PHASES_LOG, f"grpo ({self.out.name})", phases_at_start,
                          time.perf_counter() - train_start, only=("validation", "checkpoints"),
                          steps=[first_step, self.state.step])
        self.acc.wait_for_everyone()
        return final


# ---------------------------------------------------------------------------------------------
# Small helpers


def _install_sigterm(trainer: JointGRPO):
    try:
        def handler(signum, frame):  # finish the step, checkpoint, exit (see train)
            trainer._stop_requested = True
        return signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread (e.g. some notebook front-ends): no handler
        return None


def _gather_objects(acc: Any, items: list) -> list:
    if acc.num_processes == 1:
        return list(items)
    from accelerate.utils import gather_object

    return gather_object(items)


def _sum_over_ranks(acc: Any, value: int) -> int:
    if acc.num_processes == 1:
        return value
    t = torch.tensor([value], device=acc.device, dtype=torch.long)
    return int(acc.reduce(t, reduction="sum").item())


def _any_rank(acc: Any, flag: bool) -> bool:
    """True on every rank when it is true on any (a collective: every rank must call it)."""
    return _sum_over_ranks(acc, int(bool(flag))) > 0


def _mean_over_ranks(acc: Any, metrics: dict[str, float]) -> dict[str, float]:
    if acc.num_processes == 1:
        return metrics
    keys = sorted(k for k, v in metrics.items() if isinstance(v, (int, float)))
    t = torch.tensor([float(metrics[k]) for k in keys], device=acc.device, dtype=torch.float64)
    t = acc.reduce(t, reduction="mean")
    return {**metrics, **{k: float(v) for k, v in zip(keys, t.tolist())}, "step": metrics["step"]}


def _role_metrics(role: str, rewards: torch.Tensor, rolls: Sequence[QuestionRollout], m: dict[str, float]) -> dict[str, float]:
    """TRL's metric names (reward, reward_std, frac_reward_zero_std, completion_length, kl), per role."""
    samples = [r.retriever if role == "retriever" else r.generator for r in rolls]
    lengths = [c.n_tokens for s in samples for c in s.completions]
    parses = [p for s in samples for p in s.parses]
    return {
        f"reward/{role}": float(rewards.mean()) if rewards.numel() else 0.0,
        f"reward_std/{role}": float(rewards.std(dim=1, correction=1).mean()) if rewards.shape[1] > 1 else 0.0,
        f"frac_reward_zero_std/{role}": float((rewards.std(dim=1, correction=1) < 1e-8).float().mean())
        if rewards.shape[1] > 1 else 1.0,
        f"completion_length/{role}": sum(lengths) / max(len(lengths), 1),
        f"truncated/{role}": sum(c.truncated for s in samples for c in s.completions) / max(len(lengths), 1),
        f"well_formed/{role}": sum(p.well_formed for p in parses) / max(len(parses), 1),
        f"loss/{role}": m["loss"], f"kl/{role}": m["kl"], f"clip_ratio/{role}": m["clipped"],
    }


def _rollout_metrics(rolls: Sequence[QuestionRollout]) -> dict[str, float]:
    matches = sum(r.n_correct for r in rolls)
    n = sum(len(r.matches) for r in rolls)
    errors = sum(1 for r in rolls for st in r.exec_status if st not in VALID_STATUSES)
    return {"exec/match_rate": matches / max(n, 1), "exec/error_rate": errors / max(n, 1),
            "route/alt_share": route_share(rollout_route_records(rolls))["share"],  # NaN: no correct set resolves
            "vote/columns": sum(len(r.selected) for r in rolls) / max(len(rolls), 1)}


def run_summary(log_path: str | Path) -> dict[str, Any]:
    """The learning check's reading of a run's metrics.jsonl: rewards over the first and last third
    of the steps, validation before any update and at every check, the pool and PCGrad."""
    rows = [json.loads(line) for line in Path(log_path).read_text().splitlines() if line.strip()]
    if not rows:
        raise ValueError(f"{log_path}: no logged steps")
    k = max(1, len(rows) // 3)

    def mean(key: str, part: list[dict]) -> float:
        return sum(r[key] for r in part) / len(part)

    checks = [r for r in rows if "val/ex" in r]
    return {
        "steps": max(r["step"] for r in rows),
        "reward_generator_first_third": mean("reward/generator", rows[:k]),
        "reward_generator_last_third": mean("reward/generator", rows[-k:]),
        "reward_retriever_first_third": mean("reward/retriever", rows[:k]),
        "reward_retriever_last_third": mean("reward/retriever", rows[-k:]),
        "val_ex_start": next((r["val/ex_start"] for r in rows if "val/ex_start" in r), None),
        "val_ex": [r["val/ex"] for r in checks], "val_ex_steps": [r["step"] for r in checks],
        "pool_target_differs_from_gold_share": rows[-1]["pool/target_differs_from_gold_share"],
        "pcgrad_conflict_ratio_mean": mean("pcgrad/conflict_ratio", rows),
    }


def _truncate_log(path: Path, step: int) -> None:
    """After a resume, drop log lines of steps that the checkpoint does not contain."""
    if not path.exists():
        return
    keep = [ln for ln in path.read_text().splitlines() if ln.strip() and json.loads(ln).get("step", 0) <= step]
    path.write_text("".join(ln + "\n" for ln in keep))


# The ablations of §6, as config overrides of the full method
ABLATIONS: dict[str, dict[str, Any]] = {
    "full": {},
    "no_pcgrad": {"grpo.pcgrad": "none"},  # "w/o PCGrad": plain sum of the two gradients
    "no_schedule": {"grpo.gen_schedule_ratio": 0.0},  # "w/o schedule": w_gen = 1 from step 1
    "static_gold": {"grpo.pool_init": "static_gold"},  # retriever target = gold SQL's column set, never updated
    "dense_reward": {"grpo.retriever_reward": "dense"},  # the authors' dense retriever reward (their V6 formula)
}


# ---------------------------------------------------------------------------------------------
# Entry point: `accelerate launch -m acesql_lib.train.grpo --config configs/<profile>.yaml`


RUN_SETTINGS = "run_settings.json"


def run_settings(cfg: Config, paths: Any) -> dict[str, Any]:
    """What a run's checkpoints depend on: RL settings, the starting model and the distilled data."""
    from ..models.loading import model_tag

    def digest(path: Path) -> str | None:
        return hashlib.sha256(path.read_bytes()).hexdigest()[:16] if path.is_file() else None

    return {"grpo": dataclasses.asdict(cfg.grpo), "engine": engine_key(cfg.engine), "seed": cfg.seed,
            "start_model": model_tag(paths.sft_model), "reference": cfg.grpo.reference_model,
            "pool": digest(paths.rl_data / "pool.json"), "rl_questions": digest(paths.rl_data / "rl_questions.json"),
            **({"stage1_source": "authors"} if cfg.data.stage1_source == "authors" else {})}


def retire_stale_run(out: Path, settings: dict[str, Any]) -> Path | None:
    """Resume only a run started from the same settings, model and data: a run folder written from
    others is renamed `<name>.stale-<n>` (kept, never deleted) and the run starts afresh."""
    out = Path(out)
    record = out / RUN_SETTINGS
    text = json.dumps(settings, indent=1, sort_keys=True, default=str) + "\n"
    moved = None
    if out.exists() and any(out.iterdir()) and (not record.is_file() or record.read_text() != text):
        n = 1
        while out.with_name(f"{out.name}.stale-{n}").exists():
            n += 1
        moved = out.with_name(f"{out.name}.stale-{n}")
        out.rename(moved)
        print(f"[grpo] {out} was started from other settings, model or data: kept as {moved.name}, starting afresh")
    out.mkdir(parents=True, exist_ok=True)
    record.write_text(text)
    return moved


def _without_overlong(tasks: list[Task], tokenizer: Any, cfg: Config, name: str) -> list[Task]:
    """The authors' loader drops questions whose retriever prompt exceeds the prompt limit; say how many."""
    from .rollouts import drop_overlong

    kept, dropped = drop_overlong(tasks, tokenizer, cfg.grpo.max_prompt_tokens, cfg.model.prompt_style,
                                  cfg.engine.enable_thinking)
    if dropped:
        warnings.warn(f"{len(dropped)} of {len(tasks)} {name} questions dropped: retriever prompt over "
                      f"grpo.max_prompt_tokens = {cfg.grpo.max_prompt_tokens} tokens (ids {[t.qid for t in dropped][:5]}"
                      f"{' ...' if len(dropped) > 5 else ''})", stacklevel=2)
    if name == "RL" and not kept:
        raise ValueError(f"every RL question's retriever prompt is over grpo.max_prompt_tokens = "
                         f"{cfg.grpo.max_prompt_tokens} tokens; raise it")
    return kept


def load_device(accelerator: Any, device: str) -> str:
    """Where GRPO loads its models: this rank's device (`model.device` auto or cuda), or the CPU under FSDP2,
    whose preparation shards them onto the GPU (no rank holds a whole copy there)."""
    if device not in ("auto", "cuda"):
        return device
    return "cpu" if getattr(accelerator, "is_fsdp2", False) else str(accelerator.device)


def build_trainer(cfg: Config, paths: Any, variant: str = "full", accelerator: Any = None,
                  progress: bool = True) -> JointGRPO:
    """Everything the notebook and the launcher share: models, engine, RL questions, pool.

    The `Accelerator` comes first: under a launcher it sets up the process group and each rank's device,
    so the models load onto that rank's device, and only the main process writes shared files while
    every rank waits."""
    from accelerate import Accelerator

    from .distill import load_rl_tasks
    from ..models.engines import make_engine
    from ..models.loading import LoraSpec, apply_lora, load_policy, load_reference, training_dtype
    from ..config.paths import check_variant
    from .pool_init import initial_pool

    check_variant(variant)  # before minutes of loading: the run folder's and metrics file's name

    accelerator = accelerator or Accelerator(**accelerator_precision(cfg.grpo.bf16, torch.cuda.is_available()))
    fsdp2_on_cpu(accelerator)  # before loading: the models load where the FSDP2 preparation expects them
    device = load_device(accelerator, cfg.model.device)
    if cfg.distill.rl_selection == "sft_model":  # §3.4 by the SFT model's rollouts: chosen once, then read back
        from .distill import select_by_model

        if accelerator.is_main_process:
            select_by_model(cfg, paths, progress=progress)
        accelerator.wait_for_everyone()
    # fp32 master weights (model.train_dtype); the reference is frozen and runs in the inference dtype, as verl's
    policy, tokenizer = load_policy(str(paths.sft_model), dtype=training_dtype(cfg.model), device=device)
    if cfg.grpo.gradient_checkpointing:  # the authors' actor recomputes layer activations in the backward pass
        policy.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    lora = LoraSpec.from_config(cfg.model)
    if lora is not None:  # model.lora: only fresh adapters on the (merged) SFT model train, as in SFT
        policy = apply_lora(policy, lora)
    # the KL reference: its own frozen copy, but under LoRA starting from the SFT model, whose frozen base with
    # the adapters switched off is that model already (JointGRPO._reference_logprobs)
    own_reference = cfg.grpo.kl_coef > 0 and (lora is None or bool(cfg.grpo.reference_model))
    ref_path = cfg.grpo.reference_model or str(paths.sft_model)
    reference = load_reference(ref_path, dtype=cfg.model.dtype, device=device)[0] if own_reference else None
    tasks, val_tasks = load_rl_tasks(cfg, paths)
    tasks, val_tasks = (_without_overlong(ts, tokenizer, cfg, name) for ts, name in ((tasks, "RL"), (val_tasks, "validation")))
    pool = initial_pool(cfg, paths, [*tasks, *val_tasks])  # grpo.pool_init; the authors' pool with their data
    style = cfg.model.prompt_style
    out = paths.grpo_run(variant)
    if accelerator.is_main_process:
        retire_stale_run(out, run_settings(cfg, paths))
    accelerator.wait_for_everyone()
    trainer = JointGRPO(cfg, policy, reference, tokenizer, None, tasks, pool, out,
                        val_tasks=val_tasks, accelerator=accelerator, style=style, progress=progress)
    # the engine starts after the policy is prepared: under FSDP2 every rank then holds rank 0's weights (the
    # others loaded zeros with cpu_ram_efficient_loading) and the models are sharded before vLLM takes its share
    trainer.engine = make_engine(cfg.engine, trainer.unwrapped, tokenizer, model_path=str(paths.sft_model),
                                 dtype=cfg.model.dtype, seed=cfg.seed, progress=trainer.progress)
    trainer.policy_source = str(paths.sft_model)
    trainer.resume()
    return trainer


def main(argv: list[str] | None = None) -> None:
    from ..config.context import RunContext

    ap = argparse.ArgumentParser(description="Joint two-role GRPO (spec §4).")
    ap.add_argument("--config", default="tiny", help="profile name or YAML path")
    ap.add_argument("--variant", default="full", choices=sorted(ABLATIONS), help="run name under runs/<profile>/grpo/")
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="config overrides")
    ap.add_argument("--stop-after", type=int, default=None, help="stop after this many steps (a resumable pause)")
    args = ap.parse_args(argv)
    from ..config.profiles import parse_overrides

    overrides = {**ABLATIONS[args.variant], **parse_overrides(args.set)}
    ctx = RunContext.create(args.config, overrides)
    from ..runtime.process_group import closed_at_the_end

    with closed_at_the_end():
        trainer = build_trainer(ctx.cfg, ctx.paths, args.variant)
        trainer.train(stop_after=args.stop_after)


if __name__ == "__main__":
    main()
