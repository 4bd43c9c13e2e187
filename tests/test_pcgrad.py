"""PCGrad (§4 step 10) on hand-made conflicting gradients, every mode, and across 2 gloo ranks."""
import math

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from acesql_lib.train.pcgrad import combine_into_grads, pcgrad_combine, save_grads
from launching import rank_finished, rank_started

T = torch.tensor


def project(a: torch.Tensor, onto_normal_of: torch.Tensor) -> torch.Tensor:
    """a minus its component along b: the textbook PCGrad step, written independently."""
    b = onto_normal_of
    return a - (a @ b) / (b @ b) * b


def combined(g_ret, g_gen, mode, **kw):
    out, stats = pcgrad_combine(g_ret, g_gen, mode, sharded=False, **kw)
    return out, stats


# ---------------------------------------------------------------- one conflicting pair by hand

def test_symmetric_by_hand():
    # g1 = [1, 0], g2 = [-1, 1]: <g1, g2> = -1.
    # g1' = g1 + 1/2 g2 = [0.5, 0.5]; g2' = g2 + 1 g1 = [0, 1]; sum = [0.5, 1.5]
    (out,), stats = combined([T([1.0, 0.0])], [T([-1.0, 1.0])], "symmetric")
    assert out.tolist() == pytest.approx([0.5, 1.5])
    assert stats.conflict_ratio == 1.0 and stats.n_conflicts == 1 and stats.n_tensors == 1
    assert stats.cosine == pytest.approx(-1 / math.sqrt(2))
    assert stats.norm_ret == pytest.approx(1.0) and stats.norm_gen == pytest.approx(math.sqrt(2))
    # each projected part is orthogonal to the other original gradient
    g1, g2 = T([1.0, 0.0]), T([-1.0, 1.0])
    assert project(g1, g2) @ g2 == pytest.approx(0.0) and project(g2, g1) @ g1 == pytest.approx(0.0)
    assert (project(g1, g2) + project(g2, g1)).tolist() == pytest.approx(out.tolist())


def test_generator_dominant_by_hand():
    # only g1 is projected: [0.5, 0.5] + [-1, 1] = [-0.5, 1.5]
    (out,), _ = combined([T([1.0, 0.0])], [T([-1.0, 1.0])], "generator_dominant")
    assert out.tolist() == pytest.approx([-0.5, 1.5])


def test_norm_mean_by_hand():
    # both rescaled to the mean norm m = (1 + sqrt 2) / 2, then symmetric projection:
    # result = (1 - cos) * m * (u1 + u2) with cos = -1/sqrt 2, u the unit vectors
    #        = 2.0607 * [0.2929, 0.7071] = [0.6036, 1.4571]
    g1, g2 = T([1.0, 0.0]), T([-1.0, 1.0])
    (out,), _ = combined([g1], [g2], "norm_mean")
    r = 1 / math.sqrt(2)  # -cos, and u1 + u2 = [1 - r, r]
    k = (1 + r) * (1 + 2 * r) / 2  # (1 - cos) * m = 2.0607
    assert out.tolist() == pytest.approx([k * (1 - r), k * r], abs=1e-6)  # float32
    m = (g1.norm() + g2.norm()) / 2
    s1, s2 = g1 / g1.norm() * m, g2 / g2.norm() * m
    assert out.tolist() == pytest.approx((project(s1, s2) + project(s2, s1)).tolist())


def test_norm_equalised_is_the_authors_cap_then_one_sided_projection():
    # |g_ret| = 2 > 0.3 |g_gen| = 0.3 sqrt 2: g_ret scaled to 0.3 sqrt 2, then projected onto g_gen's normal
    g_ret, g_gen = T([2.0, 0.0], dtype=torch.float64), T([-1.0, 1.0], dtype=torch.float64)
    (out,), stats = combined([g_ret], [g_gen], "norm_equalised")
    capped = g_ret * (0.3 * g_gen.norm() / g_ret.norm())
    assert out.tolist() == pytest.approx((g_gen + project(capped, g_gen)).tolist())
    # capped = 0.3 sqrt 2 [1, 0]; less its part along g_gen it is 0.15 sqrt 2 [1, 1]: out = g_gen + that
    assert out.tolist() == pytest.approx([-1 + 0.15 * math.sqrt(2), 1 + 0.15 * math.sqrt(2)], abs=1e-6)  # float32
    assert stats.n_conflicts == 1
    # below the cap: no scaling, still only the retriever gradient is projected
    (small,), _ = combined([T([0.1, 0.0], dtype=torch.float64)], [g_gen], "norm_equalised")
    assert small.tolist() == pytest.approx([-0.95, 1.05])
    # no conflict: the cap still applies, nothing is projected
    (agree,), _ = combined([T([1.0, 0.0], dtype=torch.float64)], [T([1.0, 1.0], dtype=torch.float64)],
                           "norm_equalised")
    assert agree.tolist() == pytest.approx([1 + 0.3 * math.sqrt(2), 1.0])
    (other,), _ = combined([g_ret], [g_gen], "norm_equalised", max_ratio=1.0)  # cap at |g_gen|
    assert other.tolist() == pytest.approx((g_gen + project(g_ret * (g_gen.norm() / 2), g_gen)).tolist())


def test_no_projection_onto_a_gradient_with_squared_norm_at_most_eps():
    # |g_ret|^2 = 1e-14 <= 1e-12: g_gen is NOT projected onto g_ret (authors); g_ret is still projected
    g_ret, g_gen = T([1e-7, 0.0], dtype=torch.float64), T([-1.0, 1.0], dtype=torch.float64)
    (authors,), _ = combined([g_ret], [g_gen], "symmetric")
    assert authors.tolist() == pytest.approx((project(g_ret, g_gen) + g_gen).tolist(), abs=1e-6)
    assert authors.tolist() == pytest.approx([-1 + 0.5e-7, 1 + 0.5e-7], abs=1e-6)
    (kit,), _ = combined([g_ret], [g_gen], "symmetric", eps=0.0)  # kit: projects onto any non-zero gradient
    assert kit.tolist() == pytest.approx((project(g_ret, g_gen) + project(g_gen, g_ret)).tolist(), abs=1e-6)
    assert kit.tolist() == pytest.approx([0.5e-7, 1 + 0.5e-7], abs=1e-6)
    # the same skip when the generator gradient is the tiny one (generator_dominant projects g_ret onto it)
    (dom,), _ = combined([g_gen], [g_ret], "generator_dominant")
    assert dom.tolist() == pytest.approx((g_gen + g_ret).tolist())


def test_none_is_plain_sum_but_still_measures_conflict():
    (out,), stats = combined([T([1.0, 0.0])], [T([-1.0, 1.0])], "none")
    assert out.tolist() == [0.0, 1.0]
    assert stats.conflict_ratio == 1.0


@pytest.mark.parametrize("mode", ["symmetric", "generator_dominant", "norm_mean", "none", "global"])
def test_no_conflict_is_plain_sum(mode):
    (out,), stats = combined([T([1.0, 0.0])], [T([1.0, 1.0])], mode)
    assert out.tolist() == [2.0, 1.0]
    assert stats.conflict_ratio == 0.0 and stats.cosine == pytest.approx(1 / math.sqrt(2))


def test_zero_generator_gradient_leaves_retriever_gradient():
    # step 1 of the w_gen schedule: g_gen = 0
    (out,), stats = combined([T([1.0, -2.0])], [T([0.0, 0.0])], "norm_equalised")
    assert out.tolist() == [1.0, -2.0] and stats.cosine == 0.0 and stats.conflict_ratio == 0.0


# ---------------------------------------------------------------- several tensors

RET = [T([1.0, 0.0]), T([1.0])]
GEN = [T([-1.0, 1.0]), T([0.5])]


def test_per_tensor_modes_treat_tensors_separately():
    out, stats = combined(RET, GEN, "symmetric")
    assert out[0].tolist() == pytest.approx([0.5, 1.5])
    assert out[1].tolist() == [1.5]  # <1, 0.5> > 0: plain sum
    assert stats.conflict_ratio == 0.5 and stats.n_conflicts == 1 and stats.n_tensors == 2
    # global cosine over the concatenation: dot = -0.5, |r|^2 = 2, |g|^2 = 2.25
    assert stats.cosine == pytest.approx(-0.5 / math.sqrt(2 * 2.25))
    assert stats.norm_ret == pytest.approx(math.sqrt(2)) and stats.norm_gen == pytest.approx(1.5)


def test_global_mode_projects_the_concatenation():
    out, stats = combined(RET, GEN, "global")
    r, g = torch.cat(RET), torch.cat(GEN)
    expected = project(r, g) + project(g, r)
    assert torch.cat(out).tolist() == pytest.approx(expected.tolist())
    # by hand: coefficients 1 + 0.5/2 = 1.25 and 1 + 0.5/2.25
    assert out[1].item() == pytest.approx(1.25 + 0.5 * (1 + 0.5 / 2.25))
    assert stats.conflict_ratio == 1.0 and stats.n_conflicts == 1


def test_global_mode_without_overall_conflict_is_plain_sum():
    out, stats = combined([T([1.0, 0.0]), T([1.0])], [T([-1.0, 1.0]), T([3.0])], "global")
    assert torch.cat(out).tolist() == [0.0, 1.0, 4.0] and stats.conflict_ratio == 0.0


def test_none_gradients_are_zeros():
    g_ret = [T([1.0, 0.0]), None, T([2.0]), None]
    g_gen = [T([-1.0, 1.0]), T([3.0, 4.0]), None, None]
    out, stats = combined(g_ret, g_gen, "symmetric")
    assert out[0].tolist() == pytest.approx([0.5, 1.5])
    assert out[1].tolist() == [3.0, 4.0] and out[2].tolist() == [2.0] and out[3] is None
    assert stats.n_tensors == 3 and stats.conflict_ratio == pytest.approx(1 / 3)
    # global: a tensor only the retriever touched is scaled by the retriever coefficient
    out, _ = combined(g_ret, g_gen, "global")
    r = torch.cat([T([1.0, 0.0]), T([0.0, 0.0]), T([2.0])])
    g = torch.cat([T([-1.0, 1.0]), T([3.0, 4.0]), T([0.0])])
    assert torch.cat(out[:3]).tolist() == pytest.approx((project(r, g) + project(g, r)).tolist())


def test_functional_form_leaves_inputs_untouched():
    r, g = [T([1.0, 0.0])], [T([-1.0, 1.0])]
    pcgrad_combine(r, g, "symmetric", sharded=False)
    assert r[0].tolist() == [1.0, 0.0] and g[0].tolist() == [-1.0, 1.0]


def test_bad_arguments():
    with pytest.raises(ValueError, match="mode"):
        pcgrad_combine([T([1.0])], [T([1.0])], "sum")
    with pytest.raises(ValueError, match="tensor 0"):
        pcgrad_combine([T([1.0])], [T([1.0, 2.0])])
    with pytest.raises(ValueError, match="gradients"):
        pcgrad_combine([T([1.0])], [])


# ---------------------------------------------------------------- the trainer's in-place path

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_two_backward_passes_in_place(dtype):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3)).to(dtype)
    params = list(model.parameters())
    x = torch.randn(8, 6, dtype=dtype)
    loss_ret = lambda: model(x).pow(2).mean()  # noqa: E731
    loss_gen = lambda: -model(x).sum() * 0.3  # noqa: E731 (pushes the outputs the other way: conflicts)
    ref_ret = torch.autograd.grad(loss_ret(), params)
    ref_gen = torch.autograd.grad(loss_gen(), params)
    expected, ref_stats = pcgrad_combine(ref_ret, ref_gen, "symmetric", sharded=False)
    assert ref_stats.n_conflicts > 0  # the test exercises projection

    loss_ret().backward()
    saved = save_grads(params)
    assert all(p.grad is None for p in params)
    loss_gen().backward()
    stats = combine_into_grads(params, saved, "symmetric", sharded=False)
    assert saved == [None] * len(params)  # consumed
    tol = 1e-6 if dtype == torch.float32 else 2e-2
    for p, e in zip(params, expected):
        assert p.grad.dtype == dtype
        torch.testing.assert_close(p.grad.float(), e.float(), atol=tol, rtol=tol)
    assert stats.n_conflicts == ref_stats.n_conflicts and stats.cosine == pytest.approx(ref_stats.cosine, abs=1e-3)


# ---------------------------------------------------------------- two ranks (gloo)

def _rank_worker(rank: int, world: int, init_file: str, results: dict) -> None:
    rank_started()
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        # FSDP-like: each rank holds a different shard (here: one tensor of the pair each)
        g_ret, g_gen = [RET[rank].clone()], [GEN[rank].clone()]
        out, stats = pcgrad_combine(g_ret, g_gen, "global")  # sharded defaults to True when initialised
        local, lstats = pcgrad_combine(g_ret, g_gen, "symmetric")
        results[rank] = (out[0].tolist(), stats.cosine, stats.norm_gen, local[0].tolist(), lstats.conflict_ratio)
    finally:
        dist.destroy_process_group()
    rank_finished()


def test_global_mode_across_two_ranks_matches_one_process(tmp_path):
    ctx = mp.get_context("spawn")
    with ctx.Manager() as manager:
        results = manager.dict()
        mp.start_processes(_rank_worker, args=(2, str(tmp_path / "init"), results), nprocs=2, start_method="spawn")
        results = dict(results)
    single, single_stats = combined(RET, GEN, "global")
    per_tensor, _ = combined(RET, GEN, "symmetric")
    for rank in (0, 1):
        out, cosine, norm_gen, local, conflict_ratio = results[rank]
        assert out == pytest.approx(single[rank].tolist())  # one coefficient from all-reduced scalars
        assert cosine == pytest.approx(single_stats.cosine) and norm_gen == pytest.approx(single_stats.norm_gen)
        assert local == pytest.approx(per_tensor[rank].tolist())  # per-tensor modes stay local
        assert conflict_ratio == pytest.approx(0.5)  # 1 conflicting shard of 2, summed over ranks


def test_per_tensor_figures_match_the_gradients_and_symmetric_pcgrad_opposes_neither_role():
    """`detail=True`: each tensor's cosine before, conflict flag, coefficients and each role's cosine with the
    combined gradient, as computed directly from the tensors; after symmetric PCGrad no role's cosine with the
    combined gradient is negative, where the plain sum's is on some conflicting tensor."""
    import torch

    from acesql_lib.train.pcgrad import pcgrad_combine

    torch.manual_seed(3)
    r = [torch.randn(5, 4), torch.randn(7), torch.randn(3, 3)]
    q = [-x + 0.2 * torch.randn_like(x) if i != 1 else 0.5 * x + torch.randn_like(x) for i, x in enumerate(r)]
    q[2] = -3.0 * r[2] + 0.1 * torch.randn_like(r[2])  # a strong conflict: the plain sum opposes the retriever
    cos = lambda a, b: float(torch.dot(a.flatten(), b.flatten()) / (a.norm() * b.norm()))  # noqa: E731
    for mode in ("symmetric", "none"):
        out, stats = pcgrad_combine(r, q, mode, sharded=False, detail=True)
        assert [t.index for t in stats.tensors] == [0, 1, 2]
        for t, a, b, g in zip(stats.tensors, r, q, out):
            assert t.cosine == pytest.approx(cos(a, b), abs=1e-5)
            assert t.conflict == (cos(a, b) < 0)
            assert torch.allclose(g, t.c_ret * a + t.c_gen * b, atol=1e-5)
            assert t.cosine_ret_after == pytest.approx(cos(g, a), abs=1e-5)
            assert t.cosine_gen_after == pytest.approx(cos(g, b), abs=1e-5)
        after = [min(t.cosine_ret_after, t.cosine_gen_after) for t in stats.tensors]
        if mode == "symmetric":
            assert min(after) >= -1e-6
        else:
            assert min(after) < -0.5
    assert pcgrad_combine(r, q, "symmetric", sharded=False)[1].tensors == ()  # only when asked
