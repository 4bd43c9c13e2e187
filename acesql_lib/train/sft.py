"""Supervised fine-tuning on prompt/completion chat pairs (§3.3), shared by the tiny base model and stage 1.

One function, `train_sft`, wraps TRL's `SFTTrainer` in the conversational prompt-completion format:
each sample is `{"prompt": [user message], "completion": [assistant message]}`. TRL renders the
prompt with the model's own chat template and `add_generation_prompt=True`, renders prompt +
completion the same way, and trains only on the completion tokens (`completion_only_loss=True`).
So the training sequence is exactly the text the engines see at inference (the generation prompt)
followed by what the model should write there, ending with the end-of-turn token it must learn to
stop on.

Paper settings (§3.3): full fine-tune, lr 2e-5, cosine schedule, 5% warmup, effective batch 64,
2 epochs, cutoff 4096 tokens, bf16, DeepSpeed ZeRO-3 (`accelerate launch -m acesql_lib.train.sft`).
LoRA through PEFT is the kit's option for small GPUs. Without CUDA the trainer runs on CPU in float32.
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase, TrainerCallback

from ..config.train import SFTConfig
from ..models.loading import LoraSpec, apply_lora

LOG_NAME = "sft_log.jsonl"


@dataclass
class SFTResult:
    log_history: list[dict[str, Any]]  # TRL/transformers log records (loss, learning_rate, grad_norm, ...)
    train_loss: float  # mean training loss over the run
    steps: int  # optimizer steps taken
    seconds: float  # wall time of `trainer.train()`
    n_samples: int = 0
    n_too_long: int = 0  # samples cut at max_length or dropped by TRL (reported, not silent)
    evals: list[dict[str, Any]] = field(default_factory=list)  # what eval_fn returned, with the step
    model: Any = field(default=None, repr=False)  # the trained model (PEFT-wrapped under LoRA)


def check_samples(samples: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Keep well-formed prompt/completion samples; report the malformed ones by index and field."""
    good, bad = [], []
    for i, s in enumerate(samples):
        problem = _sample_problem(s)
        if problem:
            bad.append(f"sample {i}: {problem}")
        else:
            good.append({"prompt": s["prompt"], "completion": s["completion"]})
    if bad:
        print(f"[sft] skipped {len(bad)} malformed samples, first: {bad[:3]}")
    if not good:
        raise ValueError(f"no usable SFT samples (of {len(samples)}); first problems: {bad[:3]}")
    return good


def _sample_problem(s: Any) -> str:
    if not isinstance(s, dict):
        return f"expected a dict, got {type(s).__name__}"
    for key, role in (("prompt", None), ("completion", "assistant")):
        msgs = s.get(key)
        if not isinstance(msgs, list) or not msgs:
            return f"field {key!r} must be a non-empty list of chat messages"
        for m in msgs:
            if not isinstance(m, dict) or not isinstance(m.get("content"), str) or "role" not in m:
                return f"field {key!r} holds a message without string 'role'/'content'"
        if role and msgs[-1]["role"] != role:
            return f"field {key!r} must end with an {role} message"
    return ""


class _JsonlLog(TrainerCallback):
    """Appends every trainer log record (loss per logging step) to output_dir/sft_log.jsonl."""

    def __init__(self, path: Path, eval_fn: Callable[[PreTrainedModel], dict[str, Any]] | None, eval_every: int,
                 evals: list[dict[str, Any]], resumed_step: int = 0):
        self.path, self.eval_fn, self.eval_every, self.evals = path, eval_fn, eval_every, evals
        path.parent.mkdir(parents=True, exist_ok=True)
        kept = [ln for ln in (path.read_text().splitlines() if resumed_step and path.exists() else [])
                if ln.strip() and _logged_step(ln) <= resumed_step]  # what the resumed checkpoint had logged
        path.write_text("".join(ln + "\n" for ln in kept))

    def _write(self, record: dict[str, Any]) -> None:
        with self.path.open("a") as f:
            f.write(json.dumps(record, default=float) + "\n")

    def on_log(self, args, state, control, logs=None, **kwargs):
        if state.is_world_process_zero and logs:
            self._write({"step": state.global_step, "epoch": state.epoch, **logs})

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if self.eval_fn and self.eval_every and state.global_step % self.eval_every == 0 \
                and state.global_step < state.max_steps:
            self._evaluate(state, model)

    def on_train_end(self, args, state, control, model=None, **kwargs):
        if self.eval_fn:
            self._evaluate(state, model)

    def _evaluate(self, state, model) -> None:
        was_training = model.training
        metrics = {"step": state.global_step, **self.eval_fn(model)}
        model.train(was_training)
        self.evals.append(metrics)
        if state.is_world_process_zero:
            self._write({"eval": metrics})


def length_split(inputs: dict[str, Any], parts: int) -> list[dict[str, Any]]:
    """A right-padded batch cut into `parts` row groups of similar length, each trimmed to its longest row.

    Rows are sorted by length before the cut, so a group of short rows does not carry the padding
    of the batch's longest row. With right padding and a causal mask the real tokens never see the
    padding, so the logits of every real token are the same as in the whole batch.
    """
    mask = inputs["attention_mask"]
    n_rows = mask.shape[0]
    lengths = mask.sum(dim=1)
    order = torch.argsort(lengths, descending=True, stable=True)
    groups = []
    for rows in torch.tensor_split(order, min(parts, n_rows)):
        width = int(lengths[rows].max())
        groups.append({k: v[rows, :width] if torch.is_tensor(v) and v.dim() == 2 and v.shape[0] == n_rows else v
                       for k, v in inputs.items()})
    return groups


def padding_share(batches: Sequence[dict[str, Any]], parts: int = 1) -> dict[str, float]:
    """Real and padded tokens of collated batches, fed whole (`parts`=1) or cut by `length_split`."""
    real = padded = 0
    for batch in batches:
        for group in length_split(batch, parts):
            real += int(group["attention_mask"].sum())
            padded += group["attention_mask"].numel()
    return {"real_tokens": real, "padded_tokens": padded, "pad_share": 1 - real / padded if padded else 0.0}


def completion_head_loss(trainer: Any, model: PreTrainedModel, inputs: dict[str, Any],
                         num_items_in_batch: Any = None) -> torch.Tensor:
    """The completion-only loss with the LM head applied to the completion positions only.

    TRL's fused head computes the vocabulary's log-probabilities at every position and masks the
    prompt afterwards; here the decoder's hidden states are gathered at the positions that predict
    a completion token first, so the head and the log-softmax run on ~1/6 of the tokens. Same sum
    of token log-probabilities, same divisor (`num_items_in_batch`, else this batch's count); TRL's
    logged entropy, token accuracy and token count are kept.
    """
    labels = inputs["labels"]
    hidden = model.get_decoder()(input_ids=inputs["input_ids"], attention_mask=inputs.get("attention_mask"),
                                 use_cache=False).last_hidden_state
    target = labels[:, 1:]  # position t predicts token t + 1
    keep = target.ne(-100)
    logits = model.get_output_embeddings()(hidden[:, :-1][keep]).float()
    logp = logits.log_softmax(dim=-1)
    wanted = target[keep]
    count = keep.sum() if num_items_in_batch is None else num_items_in_batch
    loss = -logp.gather(-1, wanted[:, None]).sum() / torch.as_tensor(count).clamp(min=1)
    with torch.no_grad():
        n = max(int(keep.sum()), 1)
        metrics = trainer._metrics["train" if model.training else "eval"]
        metrics["entropy"].append(float(-(logp.exp() * logp).sum(-1).sum()) / n)
        metrics["mean_token_accuracy"].append(float((logits.argmax(-1) == wanted).sum()) / n)
        if model.training:
            trainer._total_train_tokens += int(inputs["attention_mask"].sum())
        metrics["num_tokens"] = [trainer._total_train_tokens]
    return loss


def _trainer_class():
    from trl import SFTTrainer

    class LengthSplitSFTTrainer(SFTTrainer):
        """TRL's SFTTrainer whose step runs the batch as `length_split` length-sorted forward/backward passes.

        Each pass is normalised by the completion tokens of the WHOLE batch (`num_items_in_batch`,
        which the Trainer counts before the step), so the summed loss and the accumulated gradient
        are the batch's, as one padded pass computes them; only the padding work goes. The logged
        entropy and token accuracy become the mean over the passes. Meant for one process (CPU): under
        DDP every pass would synchronise gradients.
        """

        length_split = 1
        completion_head = False

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            if not self.completion_head or return_outputs or hasattr(model, "peft_config") or "labels" not in inputs:
                return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
            return completion_head_loss(self, model, inputs, num_items_in_batch)

        def training_step(self, model, inputs, num_items_in_batch=None):
            if self.length_split <= 1 or "attention_mask" not in inputs:
                return super().training_step(model, inputs, num_items_in_batch)
            if num_items_in_batch is None:  # the count the Trainer makes: labels after the causal shift
                num_items_in_batch = inputs["labels"][..., 1:].ne(-100).sum()
            losses = [super(LengthSplitSFTTrainer, self).training_step(model, group, num_items_in_batch)
                      for group in length_split(inputs, self.length_split)]
            return torch.stack(losses).sum()

    return LengthSplitSFTTrainer


def _logged_step(line: str) -> int:
    """The step of a log line (an eval line: its evaluation's step); a line that does not parse sorts last."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError:
        return 1 << 62
    return int((record.get("eval") or record).get("step", 1 << 62))


RUN_SETTINGS = "sft_run_settings.json"


def resumable_checkpoint(output_dir: Path, settings: dict[str, Any]) -> Path | None:
    """The last checkpoint in `output_dir` of a run started with the same `settings`, or None. Checkpoints of a
    run with other settings are moved aside to `retired-<n>/` (never resumed, never deleted); the settings are
    then written for this run."""
    from transformers.trainer_utils import get_last_checkpoint

    output_dir.mkdir(parents=True, exist_ok=True)
    record = output_dir / RUN_SETTINGS
    text = json.dumps(settings, sort_keys=True, default=str)
    stale = record.exists() and record.read_text() != text
    found = [p for p in output_dir.glob("checkpoint-*") if p.is_dir()]
    if found and (stale or not record.exists()):
        n = 1 + max((int(p.name.split("-")[1]) for p in output_dir.glob("retired-*") if p.name.split("-")[1].isdigit()),
                    default=0)
        aside = output_dir / f"retired-{n}"
        aside.mkdir()
        for p in found:
            p.rename(aside / p.name)
        print(f"[sft] checkpoints of a run with other settings moved to {aside}")
    record.write_text(text)
    last = get_last_checkpoint(str(output_dir))
    return Path(last) if last else None


def trl_config(cfg: SFTConfig, output_dir: str | Path, max_steps: int | None = None, seed: int = 0,
               group_by_length: bool = False, completion_only: bool = True):
    """TRL `SFTConfig` from the kit's `SFTConfig`; CPU settings (float32, no bf16) when there is no CUDA.

    `group_by_length` batches samples of similar length (less padding; on CPU that is most of the cost).
    """
    from trl import SFTConfig as TRLSFTConfig

    cuda = torch.cuda.is_available()
    steps = cfg.max_steps if max_steps is None else max_steps
    return TRLSFTConfig(
        output_dir=str(output_dir),
        learning_rate=cfg.learning_rate,  # §3.3: 2e-5
        lr_scheduler_type=cfg.lr_scheduler_type,  # §3.3: cosine
        warmup_steps=cfg.warmup_ratio,  # §3.3: 5%; transformers 5 reads a float < 1 as a ratio of all steps
        per_device_train_batch_size=cfg.per_device_batch_size,
        gradient_accumulation_steps=cfg.accumulation(_launched_processes()),  # §3.3: 64 samples a step
        num_train_epochs=cfg.num_epochs,  # §3.3: 2
        max_steps=steps if steps and steps > 0 else -1,
        max_length=cfg.max_length,  # §3.3: 4096-token cutoff
        completion_only_loss=completion_only,  # loss on the assistant completion only (§3.3)
        packing=False,  # packing would let prompts attend across samples
        bf16=cfg.bf16 and cuda,  # §3.3 bf16 on GPU; CPU runs in float32
        use_cpu=not cuda,
        gradient_checkpointing=cfg.gradient_checkpointing and cuda,
        logging_steps=cfg.logging_steps,
        save_strategy="steps" if cfg.save_steps > 0 else "no",
        save_steps=max(cfg.save_steps, 1),
        save_total_limit=2,
        report_to=cfg.report_to,  # none, tensorboard (events in output_dir/runs/), wandb or trackio
        seed=seed,
        data_seed=seed,  # the data order depends on the seed only
        dataloader_num_workers=0,
        train_sampling_strategy="group_by_length" if group_by_length else "random",
        disable_tqdm=False,
    )


def _launched_processes() -> int:
    """The ranks of this launch (`accelerate launch` sets WORLD_SIZE; a plain process is one)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


@dataclass(frozen=True)
class SFTRun:
    """What one fine-tuning run sets beyond the `sft` section: `max_steps` (or `sft.max_steps` > 0) bounds it by
    optimizer steps, otherwise `sft.num_epochs`; `seed` seeds the weights' training and the data order;
    `lora` wraps the model in fresh PEFT adapters first (unless it has them); `group_by_length` batches samples of
    similar length; `completion_only` trains on the completion tokens only; `eval_fn(model) -> metrics` runs every
    `eval_every` steps and at the end; `desc` names the step bar."""

    max_steps: int | None = None
    seed: int = 0
    lora: LoraSpec | None = None
    group_by_length: bool = False
    completion_only: bool = True
    eval_fn: Callable[[PreTrainedModel], dict[str, Any]] | None = None
    eval_every: int = 0
    desc: str = "sft"


def train_sft(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, samples: Sequence[dict[str, Any]],
              cfg: SFTConfig, output_dir: str | Path, run: SFTRun = SFTRun()) -> SFTResult:
    """Fine-tune `model` on chat prompt/completion `samples` as `run` says; the log goes to output_dir/sft_log.jsonl.

    A full fine-tune updates `model` in place; under `run.lora` `SFTResult.model` is the adapted model. It is
    the trained model either way (save it with `save_model`, which merges adapters).
    """
    return _train(model, tokenizer, samples, cfg, output_dir, run)[1]


def make_trainer(model, tokenizer, rows, cfg: SFTConfig, output_dir: str | Path, run: SFTRun = SFTRun(),
                 callbacks: Sequence[TrainerCallback] = ()):
    """The kit's SFTTrainer on checked `rows`: TRL tokenises them once here (a `datasets.Dataset` that
    another trainer has already tokenised, its `train_dataset`, is used as is); the bar is named `run.desc`.
    `run`'s adapters and evaluations are `train_sft`'s to add."""
    from datasets import Dataset
    from transformers.trainer_callback import ProgressCallback

    args = trl_config(cfg, output_dir, run.max_steps, run.seed, run.group_by_length, run.completion_only)
    data = rows if isinstance(rows, Dataset) else Dataset.from_list(rows)
    trainer = _trainer_class()(model=model, args=args, train_dataset=data, processing_class=tokenizer,
                               callbacks=list(callbacks))
    trainer.length_split, trainer.completion_head = cfg.length_split, cfg.completion_head
    trainer.remove_callback(ProgressCallback)
    trainer.add_callback(_step_bar(run.desc))
    return trainer


def _step_bar(desc: str) -> TrainerCallback:
    """transformers' step bar with a name and a unit, so a relayed line reads `base model, step i/n, ~m min left`."""
    from tqdm.auto import tqdm
    from transformers.trainer_callback import ProgressCallback

    class StepBar(ProgressCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            if state.is_world_process_zero:
                self.training_bar = tqdm(total=state.max_steps, desc=desc, unit="step", dynamic_ncols=True)
            self.current_step = 0

    return StepBar()


def _train(model, tokenizer, samples, cfg: SFTConfig, output_dir: str | Path, run: SFTRun = SFTRun()):
    """`train_sft`'s run, with its trainer: (trainer, result)."""
    from transformers import set_seed
    output_dir = Path(output_dir)
    rows = check_samples(samples)
    set_seed(run.seed)
    if run.lora is not None and not hasattr(model, "peft_config"):
        model = apply_lora(model, run.lora)
    evals: list[dict[str, Any]] = []
    settings = {"sft": dataclasses.asdict(cfg), "max_steps": run.max_steps, "seed": run.seed, "lora": run.lora,
                "group_by_length": run.group_by_length, "completion_only": run.completion_only,
                "samples": hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest(),
                "model": getattr(getattr(model, "config", None), "_name_or_path", None)}
    resume = None
    if cfg.save_steps > 0:
        from accelerate import PartialState

        with PartialState(cpu=not torch.cuda.is_available()).main_process_first():  # one process moves files
            resume = resumable_checkpoint(output_dir, settings)
    resumed_step = int(resume.name.split("-")[1]) if resume else 0
    trainer = make_trainer(model, tokenizer, rows, cfg, output_dir, run,
                           [_JsonlLog(output_dir / LOG_NAME, run.eval_fn, run.eval_every, evals, resumed_step)])
    if resume:
        print(f"[sft] resuming from {resume} (step {resumed_step})", flush=True)
    # TRL has already cut sequences to max_length (and dropped any left with no completion token),
    # so a sequence at exactly the cutoff is counted as cut.
    kept = trainer.train_dataset["input_ids"]
    n_too_long = sum(len(ids) >= cfg.max_length for ids in kept) + (len(rows) - len(kept)) if cfg.max_length else 0
    if n_too_long:
        print(f"[sft] {n_too_long} of {len(rows)} samples reach max_length={cfg.max_length}: truncated or dropped")
    start = time.perf_counter()
    out = trainer.train(resume_from_checkpoint=str(resume) if resume else None)
    seconds = time.perf_counter() - start
    loss = float(out.training_loss) if out.training_loss is not None else math.nan
    result = SFTResult(list(trainer.state.log_history), loss, int(trainer.state.global_step), seconds,
                       len(rows), n_too_long, evals, trainer.model)
    return trainer, result


def save_model(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, directory: str | Path,
               merge_lora: bool = True) -> Path:
    """A plain `save_pretrained` folder; LoRA adapters are merged so vLLM and the RL stage load it as is."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    if merge_lora and hasattr(model, "merge_and_unload"):
        model = model.merge_and_unload()
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


# ---------------------------------------------------------------------------------------------
# accelerate launch -m acesql_lib.train.sft --config configs/paper.yaml --samples X --output Y


def read_samples(path: str | Path) -> list[dict[str, Any]]:
    """Samples from a JSONL file (one {"prompt": [...], "completion": [...]} per line) or a JSON list."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: SFT samples file not found")
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        return json.loads(text)
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{n}: not valid JSON: {e}") from None
    return rows


def main(argv: Sequence[str] | None = None) -> SFTResult:
    from ..runtime.process_group import closed_at_the_end

    with closed_at_the_end():
        return _main(argv)


def _main(argv: Sequence[str] | None) -> SFTResult:
    from ..config.profiles import load_config
    from ..models.loading import load_policy, training_dtype

    ap = argparse.ArgumentParser(description="Mixed SFT (§3.3) of the policy on retriever + generator samples.")
    ap.add_argument("--config", default="tiny", help="profile name or YAML path (configs/<profile>.yaml)")
    ap.add_argument("--samples", required=True, help="JSONL of {prompt, completion} chat samples")
    ap.add_argument("--output", required=True, help="folder for the fine-tuned model and sft_log.jsonl")
    ap.add_argument("--model", default=None, help="starting model (default: model.base_model of the profile)")
    ap.add_argument("--max-steps", type=int, default=None)
    args = ap.parse_args(argv)
    cfg = load_config(args.config)
    # The training arguments before the model: under the ZeRO-3 launch (zero3_init_flag) they register DeepSpeed's
    # config with transformers, so from_pretrained partitions the weights across the ranks as it reads them
    # (deepspeed.zero.Init) instead of every rank holding a whole fp32 copy first. Otherwise the model loads on
    # the CPU in fp32 (model.train_dtype); the trainer places it and computes in bf16 on a GPU (sft.bf16).
    registered = trl_config(cfg.sft, args.output, args.max_steps, cfg.seed)  # noqa: F841 (kept alive while loading)
    model, tokenizer = load_policy(args.model or cfg.model.base_model, dtype=training_dtype(cfg.model), device="cpu")
    lora = LoraSpec.from_config(cfg.model)
    trainer, result = _train(model, tokenizer, read_samples(args.samples), cfg.sft, args.output,
                             SFTRun(args.max_steps, cfg.seed, lora))
    if lora is None:
        trainer.save_model(args.output)  # gathers ZeRO-3 shards into one 16-bit checkpoint
        if trainer.is_world_process_zero():
            tokenizer.save_pretrained(args.output)
    elif trainer.is_world_process_zero():
        save_model(result.model, tokenizer, args.output)
    a = trainer.args  # samples per optimizer step over the launch's ranks (§3.3: 64)
    batch = a.per_device_train_batch_size * a.gradient_accumulation_steps * a.world_size
    print(json.dumps({"train_loss": result.train_loss, "steps": result.steps, "seconds": round(result.seconds, 1),
                      "batch": batch}))
    return result


if __name__ == "__main__":
    main()
