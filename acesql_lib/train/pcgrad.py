"""PCGrad aggregation of the two roles' gradients (§4 step 10).

Two backward passes give g_ret (retriever loss x w_ret) and g_gen (generator loss x w_gen). Per
parameter tensor, when <g_ret, g_gen> < 0 each is projected onto the normal plane of the OTHER
original gradient, and the two are summed:

    g_ret' = g_ret - <g_ret, g_gen> / |g_gen|^2 * g_gen
    g_gen' = g_gen - <g_ret, g_gen> / |g_ret|^2 * g_ret
    g      = g_ret' + g_gen' = (1 - d/|g_ret|^2) g_ret + (1 - d/|g_gen|^2) g_gen

so the result is two scalar coefficients per tensor, applied in place: the only extra memory is
the saved retriever gradient. The trainer's use:

    loss_ret.backward(); saved = save_grads(params)       # p.grad moved out (the one copy)
    loss_gen.backward(); stats = combine_into_grads(params, saved, mode)  # p.grad = combined
    clip_grad_norm_(params, 1.0); optimizer.step()

Modes: "symmetric" (paper); "generator_dominant" (only g_ret is projected, g_gen kept);
"norm_equalised" (the authors' RL/third_party/verl/workers/actor/dp_actor.py: g_ret is first
scaled down, over all tensors at once, so that |g_ret| <= max_ratio * |g_gen|, then on each
conflicting tensor only g_ret is projected onto the normal plane of g_gen, and g_gen is kept:
g = s g_ret + (1 - s d / |g_gen|^2) g_gen; the norms behind s are summed over ranks when sharded,
where the authors' code reads each rank's own shard); "norm_mean" (another reading of the paper: only on
conflicting tensors, both gradients are rescaled to the MEAN of their two norms before the
symmetric projection; non-conflicting tensors are summed as is); "none" (plain sum, the "w/o
PCGrad" ablation; conflicts are still measured); "global" (beyond the paper: one dot product over
ALL tensors, and one pair of coefficients for all).

`eps`: no projection ONTO a gradient whose squared norm is <= eps (its term is dropped; the other
projection still applies). eps = 0 projects onto any non-zero gradient. The defaults of `mode`, `eps` and
`max_ratio` are the config's (`grpo.pcgrad`, `grpo.pcgrad_eps`, `grpo.pcgrad_max_ratio`).

Distributed: per-tensor modes work on whatever each rank holds (its FSDP shard, as in the
authors' setup). Three scalars (dot, two squared norms) and the conflict counts are summed over
ranks when `sharded` (default: whenever torch.distributed is initialised): under FSDP that gives
the true global values that "global" mode needs; under DDP, where every rank holds the same
averaged gradient, pass sharded=False to report exact norms (the projection coefficients and
the cosine are ratios and come out the same either way).
None gradients are zeros.
"""
from __future__ import annotations

import typing
from dataclasses import dataclass, field, fields
from typing import Iterable, NamedTuple, Sequence

import torch

from ..config.choices import PCGradMode
from ..config.train import GRPOConfig

PCGRAD_MODES = typing.get_args(PCGradMode)  # declared once, in config
_TINY = 1e-30


@dataclass(frozen=True)
class PCGradStats:
    conflict_ratio: float  # share of tensors with <g_ret, g_gen> < 0 (global mode: 1.0 or 0.0)
    cosine: float  # cosine between g_ret and g_gen over all tensors
    norm_ret: float
    norm_gen: float
    n_tensors: int  # tensors with a gradient from either role
    n_conflicts: int
    tensors: tuple["TensorStats", ...] = field(default=(), repr=False)  # per tensor, when asked (`detail`)

    def as_metrics(self, prefix: str = "pcgrad/") -> dict[str, float]:
        return {prefix + f.name: float(getattr(self, f.name)) for f in fields(self) if f.name != "tensors"}


@dataclass(frozen=True)
class TensorStats:
    """One parameter tensor's PCGrad (this rank's part of it under FSDP): the roles' cosine before, whether
    they conflicted, the coefficients of g = c_ret g_ret + c_gen g_gen, and each role's cosine with g after."""

    index: int  # position in the parameter list
    cosine: float
    conflict: bool
    c_ret: float
    c_gen: float
    cosine_ret_after: float  # <g, g_ret> / (|g| |g_ret|): PCGrad's combined step never opposes a role (>= 0)
    cosine_gen_after: float

    def as_row(self) -> dict[str, float | bool]:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "index"}


def _local(t: torch.Tensor) -> torch.Tensor:
    """The rank-local part of a DTensor (FSDP2), the tensor itself otherwise."""
    return t.to_local() if hasattr(t, "to_local") else t


def _dot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.dot(a.reshape(-1).float(), b.reshape(-1).float())


def save_grads(params: Iterable[torch.nn.Parameter]) -> list[torch.Tensor | None]:
    """Move every `p.grad` out (p.grad becomes None) so the next backward starts from zero."""
    saved = []
    for p in params:
        saved.append(p.grad)
        p.grad = None
    return saved


def combine_into_grads(params: Sequence[torch.nn.Parameter], saved_ret: list[torch.Tensor | None],
                       mode: str = GRPOConfig.pcgrad, sharded: bool | None = None, eps: float = GRPOConfig.pcgrad_eps,
                       max_ratio: float = GRPOConfig.pcgrad_max_ratio, detail: bool = False) -> PCGradStats:
    """g_gen is the current `p.grad`, g_ret the saved list (consumed: its entries are reused as
    buffers and set to None). Writes the combined gradient into `p.grad`. `detail` adds per-tensor figures."""
    params = list(params)
    if len(saved_ret) != len(params):
        raise ValueError(f"pcgrad: {len(params)} parameters but {len(saved_ret)} saved gradients")
    out, stats = _combine_inplace(saved_ret, [p.grad for p in params], mode, sharded, eps, max_ratio, detail)
    for p, g in zip(params, out):
        p.grad = g
    saved_ret[:] = [None] * len(saved_ret)
    return stats


def pcgrad_combine(g_ret: Sequence[torch.Tensor | None], g_gen: Sequence[torch.Tensor | None],
                   mode: str = GRPOConfig.pcgrad, sharded: bool | None = None, eps: float = GRPOConfig.pcgrad_eps,
                   max_ratio: float = GRPOConfig.pcgrad_max_ratio, detail: bool = False
                   ) -> tuple[list[torch.Tensor | None], PCGradStats]:
    """Functional form (inputs untouched): the combined gradient per tensor and the statistics."""
    if len(g_ret) != len(g_gen):
        raise ValueError(f"pcgrad: {len(g_ret)} retriever but {len(g_gen)} generator gradients")
    clone = lambda gs: [None if g is None else g.detach().clone() for g in gs]  # noqa: E731
    return _combine_inplace(clone(g_ret), clone(g_gen), mode, sharded, eps, max_ratio, detail)


class _Sums(NamedTuple):
    """The sums over every tensor (and over the ranks, when sharded) of the dot products, the two squared norms,
    the conflicts and the tensors."""

    dot: float
    sq_ret: float
    sq_gen: float
    conflicts: float
    tensors: float


def _combine_inplace(g_ret: list[torch.Tensor | None], g_gen: list[torch.Tensor | None], mode: str,
                     sharded: bool | None, eps: float, max_ratio: float,
                     detail: bool = False) -> tuple[list[torch.Tensor | None], PCGradStats]:
    """The combined gradient per tensor (written into g_gen's tensors, or g_ret's where g_gen has none) and
    the statistics: three scalars per tensor, their sums, two coefficients per tensor, then one pass over the
    gradients."""
    if mode not in PCGRAD_MODES:
        raise ValueError(f"pcgrad mode must be one of {PCGRAD_MODES}, got {mode!r}")
    if eps < 0 or max_ratio <= 0:
        raise ValueError(f"pcgrad: eps ({eps}) must be >= 0 and max_ratio ({max_ratio}) > 0")
    present = [i for i in range(len(g_ret)) if g_ret[i] is not None or g_gen[i] is not None]
    if not present:
        return list(g_gen), PCGradStats(0.0, 0.0, 0.0, 0.0, 0, 0)
    d, nr, ng = _tensor_scalars(g_ret, g_gen, present)
    sums = _sums(d, nr, ng, len(present), sharded)
    c_ret, c_gen = _coefficients(mode, d, nr, ng, sums, eps, max_ratio)
    out = _apply(g_ret, g_gen, present, c_ret, c_gen, scale=mode != "none")  # plain sum: no multiplying by 1
    if mode == "global":
        n_conflicts, ratio = int(sums.dot < 0), float(sums.dot < 0)
    else:
        n_conflicts, ratio = int(round(sums.conflicts)), sums.conflicts / max(sums.tensors, 1.0)
    norms = (sums.sq_ret * sums.sq_gen) ** 0.5  # |g_ret| |g_gen|
    tensors = _tensor_stats(present, d, nr, ng, c_ret, c_gen) if detail else ()
    return out, PCGradStats(conflict_ratio=ratio, cosine=sums.dot / norms if norms > 0 else 0.0,
                            norm_ret=sums.sq_ret ** 0.5, norm_gen=sums.sq_gen ** 0.5,
                            n_tensors=int(round(sums.tensors)), n_conflicts=n_conflicts, tensors=tensors)


def _tensor_scalars(g_ret: list[torch.Tensor | None], g_gen: list[torch.Tensor | None], present: list[int]
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per present tensor (this rank's part): <g_ret, g_gen>, |g_ret|^2 and |g_gen|^2, in fp32 (a missing
    gradient's are 0)."""
    device = _local(g_ret[present[0]] if g_ret[present[0]] is not None else g_gen[present[0]]).device
    zero = torch.zeros((), device=device)
    dots, sq_ret, sq_gen = [], [], []
    for i in present:
        r = None if g_ret[i] is None else _local(g_ret[i])
        g = None if g_gen[i] is None else _local(g_gen[i])
        if r is not None and g is not None and r.shape != g.shape:
            raise ValueError(f"pcgrad: tensor {i}: retriever gradient {tuple(r.shape)} vs generator {tuple(g.shape)}")
        dots.append(_dot(r, g).to(device) if r is not None and g is not None else zero)
        sq_ret.append(_dot(r, r).to(device) if r is not None else zero)
        sq_gen.append(_dot(g, g).to(device) if g is not None else zero)
    return torch.stack(dots), torch.stack(sq_ret), torch.stack(sq_gen)


def _sums(d: torch.Tensor, nr: torch.Tensor, ng: torch.Tensor, n_present: int, sharded: bool | None) -> _Sums:
    """The scalars summed over the tensors, and over the ranks when `sharded` (None: whenever torch.distributed
    is initialised): scalars only, never the gradients."""
    totals = torch.stack([d.sum(), nr.sum(), ng.sum(), (d < 0).sum().float(),
                          torch.tensor(float(n_present), device=d.device)])
    if sharded is None:
        sharded = torch.distributed.is_available() and torch.distributed.is_initialized()
    if sharded and torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.all_reduce(totals)
    return _Sums(*totals.tolist())


def _coefficients(mode: str, d: torch.Tensor, nr: torch.Tensor, ng: torch.Tensor, sums: _Sums, eps: float,
                  max_ratio: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(c_ret, c_gen) per tensor under `mode`, so that g = c_ret g_ret + c_gen g_gen.

    Projecting g_ret onto g_gen's normal plane adds -d/|g_gen|^2 to g_gen's coefficient, and vice versa; a
    projection onto a gradient with squared norm <= eps is skipped."""
    one = torch.ones_like(d)
    conflict = d < 0
    onto_gen, onto_ret = conflict & (ng > eps), conflict & (nr > eps)
    if mode == "global":
        c_ret = one * ((1 - sums.dot / max(sums.sq_ret, _TINY)) if sums.dot < 0 and sums.sq_ret > eps else 1.0)
        c_gen = one * ((1 - sums.dot / max(sums.sq_gen, _TINY)) if sums.dot < 0 and sums.sq_gen > eps else 1.0)
    elif mode == "none":
        c_ret, c_gen = one, one
    elif mode == "norm_equalised":  # authors: global cap on |g_ret|, then one-sided projection
        norm_r_all, norm_g_all = sums.sq_ret ** 0.5, sums.sq_gen ** 0.5
        s = max_ratio * norm_g_all / norm_r_all if norm_r_all > max_ratio * norm_g_all and norm_g_all > eps else 1.0
        c_ret = one * s
        c_gen = torch.where(onto_gen, 1 - s * d / ng.clamp_min(_TINY), one)
    elif mode == "norm_mean":
        norm_r, norm_g = nr.sqrt(), ng.sqrt()
        cos = d / (norm_r * norm_g).clamp_min(_TINY)
        mean_norm = (norm_r + norm_g) / 2
        c_ret = torch.where(conflict, (1 - cos) * mean_norm / norm_r.clamp_min(_TINY), one)
        c_gen = torch.where(conflict, (1 - cos) * mean_norm / norm_g.clamp_min(_TINY), one)
    else:
        c_gen = torch.where(onto_gen, 1 - d / ng.clamp_min(_TINY), one)
        c_ret = one if mode == "generator_dominant" else torch.where(onto_ret, 1 - d / nr.clamp_min(_TINY), one)
    return c_ret, c_gen


def _apply(g_ret: list[torch.Tensor | None], g_gen: list[torch.Tensor | None], present: list[int], c_ret: torch.Tensor,
           c_gen: torch.Tensor, scale: bool) -> list[torch.Tensor | None]:
    """g = c_ret g_ret + c_gen g_gen in place, per present tensor (into g_gen's tensor; g_ret's where g_gen has
    none); `scale` False sums as is."""
    out = list(g_gen)
    for k, i in enumerate(present):
        r, g = g_ret[i], g_gen[i]
        if r is not None and scale:
            rl = _local(r)
            rl.mul_(c_ret[k].to(rl.device))
        if g is None:
            out[i] = r
            continue
        gl = _local(g)
        if scale:
            gl.mul_(c_gen[k].to(gl.device))
        if r is not None:
            gl.add_(_local(r))
        out[i] = g
    return out


def _tensor_stats(present: list[int], d: torch.Tensor, nr: torch.Tensor, ng: torch.Tensor, c_ret: torch.Tensor,
                  c_gen: torch.Tensor) -> tuple[TensorStats, ...]:
    """Per tensor, from its three scalars alone: with g = c_r r + c_g q, <g, r> = c_r |r|^2 + c_g d and
    <g, q> = c_r d + c_g |q|^2, |g|^2 = c_r^2 |r|^2 + 2 c_r c_g d + c_g^2 |q|^2."""
    nr_, ng_ = nr.clamp_min(_TINY), ng.clamp_min(_TINY)
    g_sq = (c_ret ** 2 * nr + 2 * c_ret * c_gen * d + c_gen ** 2 * ng).clamp_min(_TINY)
    before = d / (nr_ * ng_).sqrt()
    ret_after = (c_ret * nr + c_gen * d) / (g_sq * nr_).sqrt()
    gen_after = (c_ret * d + c_gen * ng) / (g_sq * ng_).sqrt()
    rows = zip(present, before.tolist(), (d < 0).tolist(), c_ret.tolist(), c_gen.tolist(), ret_after.tolist(),
               gen_after.tolist())
    return tuple(TensorStats(i, b, bool(c), cr, cg, ra, ga) for i, b, c, cr, cg, ra, ga in rows)
