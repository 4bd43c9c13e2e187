"""Step-numbered, atomic, resumable GRPO checkpoints.

One folder per step holds everything needed to continue exactly: the policy weights, optimizer and
scheduler states, the RNG states of every generator the loop draws from, the column-set pool, the
data cursor (epoch, position) and the resolved config. A folder counts only once its `COMPLETE`
marker exists, so a crash while saving leaves the previous checkpoint as the latest.

Under FSDP the model and the optimizer go through torch's distributed checkpoint API (`sharded/`): every
rank writes its own shards and reads them back, so no process ever holds the whole optimizer state
(for Qwen3-8B, Adam's moments alone are 65 GB). Otherwise one process writes `model/` (a model folder)
and `optimizer.pt`. A checkpoint of either kind resumes under the other (a sharded one on one process,
or a gathered one, `model/` and `optimizer.pt`, under FSDP).
"""
from __future__ import annotations

import json
import random
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from ..roles.pool import ColumnSetPool
from ..models.sharding import is_sharded

MARKER = "COMPLETE"


@dataclass
class TrainState:
    step: int = 0
    epoch: int = 0
    position: int = 0  # questions already taken from this epoch's permutation


@dataclass(frozen=True)
class TrainingObjects:
    """The live objects a checkpoint is written from and restored into: the accelerator, the prepared model, its
    optimizer and its learning-rate scheduler."""

    acc: Any
    model: torch.nn.Module
    optimizer: Any
    scheduler: Any


def _rng_state() -> dict[str, Any]:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}


def _set_rng_state(s: dict[str, Any]) -> None:
    random.setstate(s["python"])
    np.random.set_state(s["numpy"])
    torch.set_rng_state(s["torch"])
    if s.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(s["cuda"])


def _inner(optimizer: Any) -> torch.optim.Optimizer:
    return getattr(optimizer, "optimizer", optimizer)  # accelerate's wrapper holds the torch optimizer


def restore_model_state(model: torch.nn.Module, weights: dict[str, torch.Tensor], sharded: bool) -> tuple[list, list]:
    """Full tensors from a checkpoint into the live model; under FSDP each rank keeps its shard of them.
    Returns (missing, unexpected) names."""
    if not sharded:
        return model.load_state_dict(weights, strict=False)
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    found = set_model_state_dict(model, weights, options=StateDictOptions(full_state_dict=True, strict=False))
    return list(found.missing_keys), list(found.unexpected_keys)


def restore_optimizer_state(model: torch.nn.Module, optimizer: Any, state: dict[str, Any], sharded: bool) -> None:
    """The saved whole optimizer state into the live optimizer; under FSDP the main process holds it and
    sends each rank its shards (every rank calls this)."""
    if not sharded:
        optimizer.load_state_dict(state)
        return
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    state = _state_by_name(model, state)

    set_optimizer_state_dict(model, _inner(optimizer), state,
                             options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))


def _state_by_name(model: torch.nn.Module, state: dict[str, Any]) -> dict[str, Any]:
    """A one-process optimizer state (parameters numbered in the optimizer's order) keyed by parameter name,
    the form torch's distributed state-dict API reads; a state already keyed by name (or the empty one that
    ranks other than the main process pass) as it is. The kit's optimizer holds the trainable parameters in
    the model's order, one group."""
    groups = state.get("param_groups") or []
    if not groups or not all(isinstance(i, int) for g in groups for i in g["params"]):
        return state
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    return {"state": {names[i]: v for i, v in state["state"].items()},
            "param_groups": [{**g, "params": [names[i] for i in g["params"]]} for g in groups]}


def _is_sharded(acc: Any, model: torch.nn.Module) -> bool:
    return acc.distributed_type.name.startswith("FSDP") or is_sharded(model)


LORA_KEY = "lora_"  # PEFT's adapter parameters carry it in their names


def is_peft(model: torch.nn.Module) -> bool:
    return hasattr(model, "peft_config") and hasattr(model, "merge_and_unload")


def checkpoints(out_dir: Path) -> list[Path]:
    """Complete checkpoints, oldest first."""
    found = [p for p in Path(out_dir).glob("checkpoint-*") if (p / MARKER).exists() and p.name.split("-")[-1].isdigit()]
    return sorted(found, key=lambda p: int(p.name.split("-")[-1]))


SHARDED = "sharded"  # torch.distributed.checkpoint folder: model and optimizer, each rank its own shards


def _distributed_state(model: torch.nn.Module, optimizer: Any) -> dict[str, Any]:
    """The model's and the optimizer's state as torch's distributed checkpoint reads and writes it (each
    rank's DTensor shards under FSDP; the optimizer's state initialised if it has taken no step yet)."""
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_state, optim_state = get_state_dict(model, _inner(optimizer))
    return {"model": model_state, "optimizer": optim_state}


def save(out_dir: Path, state: TrainState, live: TrainingObjects, pool: ColumnSetPool, cfg: Any, tokenizer: Any = None,
         keep: int = 3) -> Path | None:
    """`out_dir/checkpoint-<step>`, written whole or not at all (the `COMPLETE` marker last), the oldest beyond
    `keep` removed; every rank calls it. Returns the folder on the main process, None on the others."""
    acc, model, optimizer, scheduler = live.acc, live.model, live.optimizer, live.scheduler
    out_dir = Path(out_dir)
    final = out_dir / f"checkpoint-{state.step}"
    tmp = out_dir / f".tmp-checkpoint-{state.step}"
    sharded = _is_sharded(acc, model)
    acc.wait_for_everyone()
    if acc.is_main_process:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    acc.wait_for_everyone()
    if sharded:  # every rank writes its shards (a collective)
        import torch.distributed.checkpoint as dcp

        dcp.save(_distributed_state(acc.unwrap_model(model), optimizer), checkpoint_id=str(tmp / SHARDED))
    else:
        model_state, optim_state = acc.get_state_dict(model), optimizer.state_dict()
    if acc.is_main_process:
        if not sharded:
            _save_gathered(tmp, acc.unwrap_model(model), model_state, optim_state)
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp / "model")
        torch.save({"scheduler": scheduler.state_dict(), "rng": _rng_state()}, tmp / "trainer_state.pt")
        pool.save(tmp / "pool.json")
        (tmp / "state.json").write_text(json.dumps(asdict(state), indent=2) + "\n")
        (tmp / "config.yaml").write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
        (tmp / MARKER).write_text("ok\n")
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        for old in checkpoints(out_dir)[:-keep] if keep > 0 else []:
            shutil.rmtree(old, ignore_errors=True)
    acc.wait_for_everyone()
    return final if acc.is_main_process else None


def _save_gathered(tmp: Path, model: torch.nn.Module, model_state: dict[str, Any], optim_state: dict[str, Any]) -> None:
    """One process's checkpoint: `model/` (a model folder, or a LoRA run's adapters alone: the base is the
    frozen SFT model) and `optimizer.pt`."""
    if is_peft(model):
        from safetensors.torch import save_file

        (tmp / "model").mkdir()
        save_file({k: v.contiguous() for k, v in model_state.items() if LORA_KEY in k},
                  str(tmp / "model" / "adapter_state.safetensors"))
    else:
        model.save_pretrained(tmp / "model", state_dict=model_state, safe_serialization=True)
    torch.save(optim_state, tmp / "optimizer.pt")


def load_latest(out_dir: Path, live: TrainingObjects, *, gamma: float) -> tuple[TrainState, ColumnSetPool] | None:
    """Restore the newest complete checkpoint into the live objects (its pool with the run's
    `grpo.gamma`); None when there is none."""
    acc, model, optimizer, scheduler = live.acc, live.model, live.optimizer, live.scheduler
    found = checkpoints(Path(out_dir))
    if not found:
        return None
    path = found[-1]
    target = acc.unwrap_model(model)
    if (path / SHARDED).is_dir():  # each rank reads its shards (resharded if the process count changed)
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import set_state_dict

        live = _distributed_state(target, optimizer)
        dcp.load(live, checkpoint_id=str(path / SHARDED))
        set_state_dict(target, _inner(optimizer), model_state_dict=live["model"], optim_state_dict=live["optimizer"])
    else:
        _load_gathered(path, acc, target, optimizer)
    blob = torch.load(path / "trainer_state.pt", weights_only=False)
    scheduler.load_state_dict(blob["scheduler"])
    _set_rng_state(blob["rng"])
    state = TrainState(**json.loads((path / "state.json").read_text()))
    pool = ColumnSetPool.load(path / "pool.json", gamma=gamma)
    return state, pool


def _load_gathered(path: Path, acc: Any, target: torch.nn.Module, optimizer: Any) -> None:
    """`model/` and `optimizer.pt` (one process's checkpoint) into the live model and optimizer; under FSDP
    each rank keeps its shard of them."""
    from safetensors.torch import load_file

    weights: dict[str, torch.Tensor] = {}
    for f in sorted((path / "model").glob("*.safetensors")):
        weights.update(load_file(str(f)))
    sharded = _is_sharded(acc, target)
    missing, unexpected = restore_model_state(target, weights, sharded)
    # tied embeddings are saved once; a LoRA checkpoint holds the adapters alone; anything else missing
    # means a different model
    real_missing = [k for k in missing if not k.endswith("lm_head.weight") and (LORA_KEY in k or not is_peft(target))]
    if real_missing or unexpected:
        raise RuntimeError(f"{path}: checkpoint does not fit the model (missing {real_missing[:5]}, "
                           f"unexpected {list(unexpected)[:5]})")
    # sharded: only the main process reads the whole state and sends each rank its part
    whole = torch.load(path / "optimizer.pt", weights_only=False) if not sharded or acc.is_main_process else {}
    restore_optimizer_state(target, optimizer, whole, sharded)
