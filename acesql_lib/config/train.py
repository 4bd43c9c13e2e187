"""The training sections along the data flow: self-distillation and the RL question choice (`DistillConfig`,
§3.2-§3.4), mixed SFT (`SFTConfig`, §3.3) and joint GRPO (`GRPOConfig`, §4).
"""
from __future__ import annotations

from dataclasses import dataclass

from pydantic import NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt

from .checks import ConfigError, check, validate_fields
from .choices import (AuthorsOrKit, BareTableColumns, CompareMode, LossAgg, OpenShare, PCGradMode, PoolAddGate, PoolInit,
                      RLSelection, Ratio, RetrieverReward, SQLWhitespace, Share, TraceChoice, Tracker, Truncation, Vote)


@dataclass
class DistillConfig:
    n_retriever: PositiveInt = 8  # UNKNOWN (§3.2): retriever samples per question; kit uses the RL value
    n_generator: PositiveInt = 16  # UNKNOWN (§3.2): generator samples; the pool denominator of 16 suggests 16
    vote_threshold: OpenShare = 0.5  # §4 step 2 majority vote
    temperature: NonNegativeFloat = 1.0  # UNKNOWN (§3.2): kit uses the RL rollout temperature
    top_p: OpenShare = 1.0
    max_new_tokens: PositiveInt = 2048  # §4.11 max response per role
    trace_choice: TraceChoice = "shortest"  # UNKNOWN (§3.2): one correct trace per question: shortest, first or random
    rl_min_correct: NonNegativeInt = 2  # §3.4: RL questions correct 2..14 times out of 16
    rl_max_correct: NonNegativeInt = 14
    n_validation: NonNegativeInt = 40  # §3.4: held-out validation pairs (at most half of the eligible questions)
    n_rl_train: NonNegativeInt = 2913  # §3.4: RL training pairs (cap)
    # §3.4 "whose SFT rollouts were correct 2..14 times": "stage1" counts the self-distillation rollouts, as the
    # authors' release does (their RL rows and pool share stage 1's counts); "sft_model" rolls the SFT model out
    # again on `rl_candidates` filtered training questions and counts those (`distill.select_by_model`)
    rl_selection: RLSelection = "stage1"
    rl_candidates: NonNegativeInt = 0  # rl_selection "sft_model": questions the SFT model rolls out; 0: the distilled ones
    sft_excludes_validation: bool = True  # UNKNOWN (§3.4 "held-out"): keep the validation pairs out of the SFT data
    shard_size: PositiveInt = 256  # questions per distillation shard; a killed run loses at most one
    exec_timeout_s: PositiveFloat = 30.0
    compare_mode: CompareMode = "multiset"  # §4 step 4: training match is a multiset, floats rounded to 6 places

    def __post_init__(self) -> None:
        validate_fields(self, "distill")
        check(0 <= self.rl_min_correct <= self.rl_max_correct <= self.n_generator, "distill.rl_min_correct",
               "need 0 <= rl_min_correct <= rl_max_correct <= n_generator")


@dataclass
class SFTConfig:
    learning_rate: PositiveFloat = 2e-5  # §3.3
    lr_scheduler_type: str = "cosine"  # §3.3
    warmup_ratio: Ratio = 0.05  # §3.3
    per_device_batch_size: PositiveInt = 4
    effective_batch_size: PositiveInt = 64  # §3.3: samples per optimizer step, over all processes
    gradient_accumulation_steps: NonNegativeInt = 0  # 0: derived from effective_batch_size (`accumulation`)
    num_epochs: PositiveFloat = 2.0  # §3.3
    max_length: PositiveInt = 4096  # §3.3 cutoff
    bf16: bool = True  # §3.3
    gradient_checkpointing: bool = True
    max_steps: int = -1  # -1 = derived from epochs
    logging_steps: PositiveInt = 10
    report_to: Tracker = "none"  # experiment tracker for the SFT runs: none, tensorboard, wandb or trackio (kit's option)
    length_split: PositiveInt = 1  # forward passes per batch, rows sorted by length (same loss, less padding; CPU speed)
    completion_head: bool = False  # LM head on completion positions only (same loss, ~1/6 of the head's work; CPU speed)
    save_steps: NonNegativeInt = 500  # 0 = no checkpoints
    accelerate_config: str = "configs/accelerate/zero3.yaml"  # §3.3 DeepSpeed ZeRO-3, 4 x A100

    def __post_init__(self) -> None:
        validate_fields(self, "sft")

    def accumulation(self, processes: int) -> int:
        """Micro-batches per optimizer step on `processes` ranks: `gradient_accumulation_steps` when set, else
        what reaches `effective_batch_size` (4 per device: 4 on 4 GPUs, 16 on one GPU, both 64 samples)."""
        if self.gradient_accumulation_steps:
            return self.gradient_accumulation_steps
        per_step = self.per_device_batch_size * processes
        if self.effective_batch_size % per_step:
            raise ConfigError(f"sft.effective_batch_size: {self.effective_batch_size} is not a multiple of "
                              f"sft.per_device_batch_size x processes = {self.per_device_batch_size} x {processes}; "
                              f"change one, or set sft.gradient_accumulation_steps")
        return self.effective_batch_size // per_step


@dataclass
class GRPOConfig:
    batch_questions: PositiveInt = 16  # §4: B = 16 questions per step
    n_retriever: PositiveInt = 8  # §4 step 1
    n_generator: PositiveInt = 8  # §4 step 3
    temperature: NonNegativeFloat = 1.0  # §4 step 1
    top_p: OpenShare = 1.0
    vote: Vote = "majority"  # §4 step 2; variants "union" and "per_retriever" (authors' code)
    vote_threshold: OpenShare = 0.5  # §4 step 2: ceil(0.5 * N_ret)
    exec_timeout_s: PositiveFloat = 30.0  # §4 step 4
    compare_mode: CompareMode = "multiset"  # §4 step 4
    gamma: OpenShare = 0.5  # §4 step 5 pool decay
    # §4 step 5; authors' released pool: SFT rollout counts plus the gold set at 0.5 when no rollout used it.
    # Also "sft_rollouts" (counts only), "union" (UNKNOWN reading), "static_gold" (ablation), "authors_file".
    pool_init: PoolInit = "sft_rollouts_plus_gold"
    authors_pool_file: str = ""  # pool_init "authors_file": their initial_pool.json; "" = the one in data.authors_release_dir
    len_penalty_start: NonNegativeInt = 512  # §4 step 6: p_len = 0.5 * clip((L - 512) / (2048 - 512), 0, 1)
    len_penalty_end: int = 2048
    len_penalty_max: NonNegativeFloat = 0.5
    retriever_reward: RetrieverReward = "sparse"  # §4 step 6; "dense" = authors' dense formula (ablation), "dense_kit" = kit's coverage minus noise
    generator_truncation_gate: bool = False  # §4 step 6 silent; authors' joint_reward.py gates only the retriever on truncation; true = kit
    truncation: Truncation = "length"  # authors: response length >= max_response_tokens; "no_stop" = kit (no stop token)
    think_rule: AuthorsOrKit = "authors"  # §2 silent; authors: both tags anywhere, answer after the last </think>; "kit" = stricter
    retriever_parser: AuthorsOrKit = "authors"  # training list parsing, authors' RL/rewards/retriever_utils.py; "kit" = own parser
    pool_add_gate: PoolAddGate = "format"  # §4 step 5 silent; authors: add a match only if it passes the format gate; "match" = kit
    bare_table_columns: BareTableColumns = "none"  # authors' extractor: SELECT count(*) FROM t adds no set; "anchor" = kit's PK rule
    sql_whitespace: SQLWhitespace = "collapse"  # authors' joint_reward.py: whitespace runs -> one space before execution; "keep" = as written
    adv_eps: NonNegativeFloat = 1e-6  # §4 step 7
    clip_eps: PositiveFloat = 0.2  # §4 step 8
    dual_clip: float = 3.0  # §4 step 8
    kl_coef: NonNegativeFloat = 0.001  # §4 step 8, k3 estimator
    kl_clamp: NonNegativeFloat = 10.0  # authors (verl low_var_kl): log-ratio in [-20, 20], k3 clamped to [-10, 10]; 0 = unclamped (kit)
    reference_model: str = ""  # §4 step 8: "" = the frozen SFT checkpoint; a folder to use another reference
    gen_schedule_ratio: Share = 0.25  # §4 step 9: w_gen 0 -> 1 over the first 25% of steps; 0 disables
    # §4.11 silent on the rounding; authors (verl): warm-up int(5% x T) from lr 0, w_gen progress (s-1)/(T-1).
    # "kit": warm-up ceil(5% x T) from lr 1/W, w_gen (s-1)/(ratio x T)
    schedule: AuthorsOrKit = "authors"
    pcgrad: PCGradMode = "symmetric"  # §4 step 10; "generator_dominant", "norm_equalised" (authors'), "norm_mean" (kit), "none", "global"
    pcgrad_eps: NonNegativeFloat = 1e-12  # authors' dp_actor.py: no projection onto a gradient with squared norm <= eps; 0 = kit
    pcgrad_max_ratio: PositiveFloat = 0.3  # authors' norm_equalised: retriever gradient capped at 0.3 x generator norm
    max_grad_norm: PositiveFloat = 1.0  # §4 step 10
    learning_rate: PositiveFloat = 1e-6  # §4.11
    warmup_ratio: Share = 0.05  # §4.11 (1.0: the LR warms up over the whole run)
    weight_decay: NonNegativeFloat = 0.0  # §4.11
    epochs: PositiveInt = 4  # §4.11: 4 epochs x 182 steps = 728
    max_steps: NonNegativeInt = 0  # 0 = epochs x floor(questions / batch): an epoch's last partial batch is dropped (728)
    max_prompt_tokens: NonNegativeInt = 4096  # §4.11; authors: longer retriever prompts are dropped, generator prompts keep their last 4,096 tokens; 0 = no limit
    max_response_tokens: PositiveInt = 2048  # §4.11
    # §4 step 8 "token-mean"; authors (verl dynamic batching, ppo_max_token_len_per_gpu 12,000): a token mean per
    # micro-batch of about `micro_batch_tokens` tokens, weighted by its share of sequences. "global_token_mean" (kit):
    # one token mean over the role's tokens on all ranks, in chunks of `micro_batch_size` sequences
    loss_agg: LossAgg = "micro_token_mean"
    micro_batch_tokens: PositiveInt = 12000  # prompt + completion tokens per micro-batch ("micro_token_mean")
    micro_batch_size: PositiveInt = 8  # sequences per forward/backward pass ("global_token_mean"; memory, not maths)
    bf16: bool = True  # authors: bf16 compute on the fp32 policy (accelerate mixed precision); GPU only, CPU runs fp32
    gradient_checkpointing: bool = True  # authors (RL/trainer/config/model/hf_model.yaml): layer activations recomputed
    # memory, not maths: the loss's fp32 log-softmax over the vocabulary taken this many completion positions at a
    # time and recomputed in the backward pass (0 = the whole micro-batch at once); the values are the same
    logprob_chunk_tokens: NonNegativeInt = 1024
    # speed, not maths (kit's option): the samples of one prompt in one row, the prompt computed once and each
    # completion masked to it and itself (acesql_lib/train/packed.py); false = one sample per row, as the authors' actor.
    # Its dense mask grows with the square of prompt + all completions, so it suits short completions (the CPU
    # profiles); the preflight's "packed GRPO rows" says what a row costs at the profile's lengths
    packed_prompts: bool = False
    val_every: NonNegativeInt = 40  # §4.11
    val_temperature: NonNegativeFloat = 0.8  # §4.11
    # §4.11 silent; authors (RL/trainer/validation_correct.py): validation runs the training rollout, 8 retriever
    # samples, the vote, 8 generator samples per question at val_temperature; EX is the share of matching samples
    val_retriever_samples: PositiveInt = 8
    val_samples: PositiveInt = 8  # generator samples per validation question
    # the validation before the first update read back where the run folder holds one of the same SFT model,
    # questions, pool targets, settings and code (JointGRPO.validate_start): the ablation variants start where the
    # full run did, and validate the same rollouts. Single-process runs; the same numbers either way
    reuse_start_validation: bool = True
    save_every: NonNegativeInt = 80  # §4.11
    keep_checkpoints: NonNegativeInt = 3
    report_to: Tracker = "none"  # tracker for metrics.jsonl's metrics: none, tensorboard, wandb or trackio (kit's option)
    seed: int = 0
    # question order: "authors" = verl's seeded torch sampler (RL/trainer/main_two_pass.py, data.seed 1 in
    # RL/scripts/train_rl_pcgrad.sh); "kit" = a Python shuffle per epoch from grpo.seed
    data_order: AuthorsOrKit = "authors"
    data_seed: int = 1
    accelerate_config: str = "configs/accelerate/fsdp.yaml"

    def __post_init__(self) -> None:
        validate_fields(self, "grpo")
        check(self.len_penalty_end > self.len_penalty_start, "grpo.len_penalty_end", "must exceed len_penalty_start")
