"""acesql_lib/train/packed.py: samples packed by prompt give the log-probabilities and gradients of one sample per row."""
from __future__ import annotations

import pytest
import torch

from acesql_lib.train.policy_loss import completion_logprobs, pad_batch
from acesql_lib.models.loading import build_tiny_model, train_tiny_tokenizer
from acesql_lib.train.packed import _attention_mask, pack_by_prompt, packed_logprobs

PAD = 0


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    texts = [f"select name from t{i} where id = {i * 7}" for i in range(60)]
    tokenizer = train_tiny_tokenizer(texts, vocab_size=300)
    m = build_tiny_model(tokenizer, hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
                         intermediate_size=128, max_position=256)
    for p in m.parameters():  # weights far from initialisation, so positions and masks matter in every output
        p.data.add_(torch.randn_like(p) * 0.05)
    return m.float()


def ragged_batch(seed: int = 0):
    """Three prompts of different lengths, shared by 3, 1 and 2 samples, interleaved; completions of
    different lengths, one of them empty (a sample that stopped at once)."""
    g = torch.Generator().manual_seed(seed)

    def tokens(n: int) -> list[int]:
        return torch.randint(1, 100, (n,), generator=g).tolist()

    p = [tokens(23), tokens(9), tokens(31)]
    prompts = [p[0], p[1], p[0], p[2], p[0], p[2]]
    completions = [tokens(7), tokens(12), tokens(1), tokens(15), [], tokens(4)]
    return prompts, completions


def per_row(model, prompts, completions, chunk=0):
    ids, attn, pos, cmask, c_len = pad_batch(prompts, completions, PAD, "cpu")
    return completion_logprobs(model, ids, attn, pos, c_len, chunk) * cmask, cmask  # padding's scores dropped


def grads(model, loss):
    model.zero_grad(set_to_none=True)
    loss.backward()
    return [p.grad.clone() for p in model.parameters()]


def test_packing_puts_each_prompt_once_with_its_samples_after_it():
    prompts, completions = ragged_batch()
    b = pack_by_prompt(prompts, completions, PAD)
    assert b.ids.shape[0] == 3  # one row per distinct prompt, in order of first appearance
    widths = [len(prompts[0]) + 7 + 1 + 0, len(prompts[1]) + 12, len(prompts[3]) + 15 + 4]
    assert b.ids.shape[1] == max(widths)
    row0 = b.ids[0, -widths[0]:].tolist()
    assert row0 == prompts[0] + completions[0] + completions[2]  # the empty completion takes no column
    # positions continue from the prompt's end for every completion, as in generation
    p = len(prompts[0])
    assert b.positions[0, -widths[0]:].tolist() == [*range(p), *range(p, p + 7), p]
    # every completion token is scored once, at the position before it
    assert b.target.numel() == sum(len(c) for c in completions)
    assert b.cmask.sum().item() == b.target.numel() and b.c_len == 15


def test_a_completion_token_sees_its_prompt_and_its_own_earlier_tokens_only():
    prompts, completions = ragged_batch()
    b = pack_by_prompt(prompts, completions, PAD)
    mask, width = b.mask[0, 0], b.ids.shape[1]
    p, start = len(prompts[0]), width - (len(prompts[0]) + 8)
    first, second = start + p, start + p + 7  # first token of completion 0, the one of completion 2
    assert mask[second, start:start + p].all() and not mask[second, first:first + 7].any()
    assert mask[first + 6, first:first + 7].all() and not mask[first + 3, first + 4:].any()
    assert not mask[first, :start].any()  # padding is seen by nobody but itself
    assert mask[0, 0] and mask.sum(-1).min() >= 1


@pytest.mark.parametrize("chunk", [0, 5])
def test_log_probabilities_and_gradients_are_those_of_one_sample_per_row(model, chunk):
    prompts, completions = ragged_batch()
    expected, cmask = per_row(model, prompts, completions, chunk)
    packed = pack_by_prompt(prompts, completions, PAD)
    got = packed_logprobs(model, packed, chunk)
    assert torch.equal(packed.cmask, cmask) and got.shape == expected.shape
    assert torch.equal(got * (1 - cmask), torch.zeros_like(got))  # nothing past a completion's end
    assert torch.allclose(got, expected, atol=2e-5), (got - expected).abs().max()
    weights = torch.randn(cmask.shape, generator=torch.Generator().manual_seed(1)) * cmask
    g_rows, g_packed = grads(model, (expected * weights).sum()), grads(model, (got * weights).sum())
    assert sum(float(g.abs().sum()) > 0 for g in g_rows) == len(g_rows)
    for a, b in zip(g_rows, g_packed):
        assert float((a - b).norm()) <= 1e-4 * float(a.norm()), float((a - b).norm() / a.norm())


def test_chunked_log_softmax_gives_the_same_values_as_the_whole(model):
    prompts, completions = ragged_batch()
    packed = pack_by_prompt(prompts, completions, PAD)
    with torch.no_grad():
        assert torch.equal(packed_logprobs(model, packed, 0), packed_logprobs(model, packed, 4))


def test_a_sample_does_not_see_the_other_samples_of_its_prompt(model):
    prompts, completions = ragged_batch()
    changed = [list(c) for c in completions]
    changed[0] = [t % 90 + 3 for t in changed[0]]  # another sample of prompt 0 (samples 2 and 4 share it)
    with torch.no_grad():
        a = packed_logprobs(model, pack_by_prompt(prompts, completions, PAD))
        b = packed_logprobs(model, pack_by_prompt(prompts, changed, PAD))
    assert not torch.allclose(a[0], b[0])
    for i in range(1, len(prompts)):
        assert torch.allclose(a[i], b[i], atol=2e-6), i


def test_eager_attention_takes_an_additive_mask_and_gives_the_same_values(model):
    prompts, completions = ragged_batch()
    packed = pack_by_prompt(prompts, completions, PAD)
    with torch.no_grad():
        sdpa = packed_logprobs(model, packed)
        model.set_attn_implementation("eager")
        try:
            assert _attention_mask(model, packed.mask).dtype == torch.float32
            eager = packed_logprobs(model, packed)
        finally:
            model.set_attn_implementation("sdpa")
    assert torch.allclose(sdpa, eager, atol=2e-5)


def test_an_attention_without_4d_masks_is_refused_with_the_setting_named(model):
    packed = pack_by_prompt(*ragged_batch(), PAD)
    model.config._attn_implementation = "flash_attention_2"
    try:
        with pytest.raises(ValueError, match="grpo.packed_prompts"):
            _attention_mask(model, packed.mask)
    finally:
        model.config._attn_implementation = "sdpa"


def test_mismatched_inputs_are_named():
    with pytest.raises(ValueError, match="2 prompts and 1 completions"):
        pack_by_prompt([[1], [2]], [[3]], PAD)


def _backward_nodes(t: torch.Tensor) -> set[str]:
    seen, todo, names = set(), [t.grad_fn], set()
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        names.add(type(node).__name__)
        todo.extend(n for n, _ in node.next_functions)
    return names


def test_repeated_positions_sum_their_gradients_in_a_fixed_order(model):
    """A prompt's last position predicts the first token of every sample of it. Gathered by advanced indexing
    (IndexBackward0), their gradients are summed by parallel atomic adds on CPU, whose order varies with the
    threads' timing: two runs of one GRPO variant beside another process differed in their last bits from step
    2-8 on. index_select sums them in index order."""
    prompts, completions = ragged_batch()
    packed = pack_by_prompt(prompts, completions, PAD)
    where = packed.row * packed.keep + packed.column
    assert len(set(where.tolist())) < where.numel()  # positions do repeat
    for chunk in (0, 4):
        nodes = _backward_nodes(packed_logprobs(model, packed, chunk))
        assert "IndexBackward0" not in nodes and ("IndexSelectBackward0" in nodes or chunk), nodes
