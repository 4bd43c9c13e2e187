"""Pure pieces of the GRPO step: schedule, vote, PPO/KL token loss, log-prob layout."""
import json
import math

import pytest
import torch

from acesql_lib.train.data_order import epoch_order
from acesql_lib.train.policy_loss import completion_logprobs, pad_batch, ppo_token_loss
from acesql_lib.train.schedule import gen_weight, generator_loss_weight, lr_lambda, total_steps, warmup_steps
from acesql_lib.train.rollouts import vote


def test_the_paper_run_has_728_steps_an_epoch_dropping_its_last_partial_batch():
    # §4.11 and the authors' verl dataloader (drop_last): 2,913 // 16 = 182 steps per epoch
    assert total_steps(2913, 16, 4) == 728
    assert total_steps(2913, 16, 4, max_steps=5) == 5
    assert total_steps(3, 16, 2) == 2  # fewer questions than a batch: one (short) step per epoch


def test_gen_weight_ramp_follows_the_authors_progress():
    # RL/trainer/two_pass_ray_trainer.py: progress (s-1)/(T-1), weight min(progress / 0.25, 1)
    assert gen_weight(1, 728, 0.25) == 0.0
    assert gen_weight(92, 728, 0.25) == pytest.approx(91 / (0.25 * 727))
    assert gen_weight(182, 728, 0.25) == pytest.approx(181 / 181.75)
    assert gen_weight(183, 728, 0.25) == 1.0
    assert gen_weight(500, 728, 0.25) == 1.0
    assert gen_weight(1, 728, 0.0) == 1.0  # "w/o schedule"
    assert gen_weight(2, 5, 0.25) == 1.0  # (2-1)/(0.25*4)
    assert gen_weight(1, 1, 0.25) == 0.0


def test_gen_weight_ramp_kit_reading():
    assert gen_weight(92, 728, 0.25, "kit") == pytest.approx(91 / 182)
    assert gen_weight(183, 728, 0.25, "kit") == pytest.approx(1.0)
    assert gen_weight(2, 5, 0.25, "kit") == pytest.approx(0.8)


def test_the_authors_norm_equalised_pcgrad_with_their_schedule_weighs_the_generator_loss_1_from_step_1():
    assert generator_loss_weight(1, 728, 0.25, "authors", "norm_equalised") == 1.0  # the ramp would give 0
    assert generator_loss_weight(1, 728, 0.25, "kit", "norm_equalised") == 0.0
    assert generator_loss_weight(92, 728, 0.25, "authors", "symmetric") == gen_weight(92, 728, 0.25, "authors")
    assert generator_loss_weight(92, 728, 0.25, "kit", "symmetric") == gen_weight(92, 728, 0.25, "kit")


def test_the_authors_warmup_is_36_steps_from_lr_zero():
    # verl: int(0.05 x 728) = 36 warm-up steps; lambda(i) = i / 36 below 36, so the first update runs at 0
    w = warmup_steps(0.05, 728)
    assert w == 36
    f = lr_lambda(w)
    assert [f(i) for i in (0, 1, 18, 35, 36, 37, 700)] == pytest.approx([0, 1 / 36, 0.5, 35 / 36, 1, 1, 1])
    assert lr_lambda(0)(0) == 1.0  # no warm-up: constant from the first step


def test_lr_warmup_kit_reading():
    assert warmup_steps(0.05, 728, "kit") == 37
    f = lr_lambda(4, "kit")
    assert [f(i) for i in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
    assert lr_lambda(0, "kit")(0) == 1.0


def test_the_authors_question_order_is_verls_seeded_sampler():
    """Epoch e's order is what a seed-1 RandomSampler under a drop-last DataLoader yields in its e-th pass."""
    from torch.utils.data import DataLoader, RandomSampler

    n, b = 50, 16
    loader = DataLoader(list(range(n)), batch_size=b, drop_last=True,
                        sampler=RandomSampler(range(n), generator=torch.Generator().manual_seed(1)))
    passes = [[int(i) for batch in loader for i in batch] for _ in range(3)]
    for e in range(3):
        assert epoch_order(n, b, e, "authors", 1)[:48] == passes[e]
    assert epoch_order(n, b, 1, "authors", 1) != epoch_order(n, b, 1, "authors", 2)
    kit = epoch_order(n, b, 0, "kit", seed=0)
    assert sorted(kit) == list(range(n)) and kit[:48] != passes[0]


def test_majority_vote_threshold():
    a, b, c = "t.a", "t.b", "t.c"
    sets = [frozenset({a, b}), frozenset({a}), frozenset({a, c}), frozenset({b, a}),
            frozenset({b}), frozenset(), frozenset({c}), frozenset({a})]
    # N=8, ceil(0.5*8)=4: a is listed 5 times, b 3 times, c 2 times
    assert vote(sets, 0.5) == frozenset({a})
    assert vote(sets, 0.3) == frozenset({a, b})  # ceil(2.4) = 3
    assert vote(sets, 0.25) == frozenset({a, b, c})  # ceil(2) = 2
    assert vote(sets, 0.5, "union") == frozenset({a, b, c})
    assert vote([], 0.5) == frozenset()
    assert vote([frozenset({a}), frozenset({b})], 0.5) == frozenset({a, b})  # ceil(1) = 1


def test_ppo_loss_ratio_one_is_policy_gradient():
    logp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    adv = torch.tensor([[2.0]])
    loss, kl, clipped = ppo_token_loss(logp, logp.detach(), logp.detach(), adv, kl_coef=0.0)
    loss.sum().backward()
    assert torch.allclose(logp.grad, torch.tensor([[-2.0, -2.0]]))  # d(-A * ratio)/dlogp = -A
    assert torch.all(kl == 0) and torch.all(clipped == 0)


def test_ppo_clip_and_dual_clip():
    old = torch.zeros(1, 3)
    logp = torch.log(torch.tensor([[1.5, 0.5, 10.0]]))  # ratios 1.5, 0.5, 10
    pos, _, clipped = ppo_token_loss(logp, old, logp, torch.tensor([[1.0]]), kl_coef=0)
    # A>0: min(r, clip(r)) -> 1.2, 0.5, 1.2 ; loss is the negative
    assert torch.allclose(pos, -torch.tensor([[1.2, 0.5, 1.2]]))
    assert clipped.tolist() == [[1.0, 1.0, 1.0]]
    neg, _, _ = ppo_token_loss(logp, old, logp, torch.tensor([[-1.0]]), kl_coef=0)
    # A<0: max(-A r, -A clip(r)) = 1.5, 0.8, 10 ; dual clip caps at -A*3 = 3
    assert torch.allclose(neg, torch.tensor([[1.5, 0.8, 3.0]]))


def test_k3_kl_matches_formula_and_is_nonnegative():
    logp = torch.tensor([[-1.0, -0.5, -3.0]])
    ref = torch.tensor([[-1.2, -0.5, -1.0]])
    _, kl, _ = ppo_token_loss(logp, logp, ref, torch.zeros(1, 1), kl_coef=0.001)
    d = ref - logp
    assert torch.allclose(kl, torch.exp(d) - d - 1)
    assert torch.all(kl >= 0) and kl[0, 1] == 0


def test_left_padded_logprobs_equal_unpadded():
    """The loss must see the same log-probs as an unpadded forward (what generation saw)."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    model = Qwen3ForCausalLM(Qwen3Config(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                                         max_position_embeddings=64)).eval()
    prompts = [[1, 2, 3, 4, 5], [6, 7]]
    comps = [[8, 9], [10, 11, 12, 13]]
    ids, attn, pos, cmask, c_len = pad_batch(prompts, comps, pad_id=0, device=torch.device("cpu"))
    with torch.no_grad():
        batched = completion_logprobs(model, ids, attn, pos, c_len)
        for i, (p, c) in enumerate(zip(prompts, comps)):
            full = torch.tensor([p + c])
            logits = model(input_ids=full).logits[0, len(p) - 1:-1].float()
            ref = torch.log_softmax(logits, -1).gather(-1, torch.tensor(c).unsqueeze(-1)).squeeze(-1)
            assert torch.allclose(batched[i, :len(c)], ref, atol=1e-5)
            assert cmask[i].sum() == len(c)


def test_run_summary_reads_reward_thirds_and_validation_from_the_log(tmp_path):
    from acesql_lib.train.grpo_metrics import run_summary

    rows = [{"step": s, "reward/generator": g, "reward/retriever": 1 - g, "pcgrad/conflict_ratio": s / 10,
             "pool/target_differs_from_gold_share": s / 100} for s, g in enumerate([0.1, 0.2, 0.3, 0.4, 0.5, 0.9], 1)]
    rows[0]["val/ex_start"] = 40.0
    rows[2]["val/ex"], rows[5]["val/ex"] = 42.5, 45.0
    log = tmp_path / "metrics.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    s = run_summary(log)
    assert s["steps"] == 6
    assert s["reward_generator_first_third"] == pytest.approx(0.15) and s["reward_generator_last_third"] == pytest.approx(0.7)
    assert s["reward_retriever_first_third"] == pytest.approx(0.85) and s["reward_retriever_last_third"] == pytest.approx(0.3)
    assert (s["val_ex_start"], s["val_ex"], s["val_ex_steps"]) == (40.0, [42.5, 45.0], [3, 6])
    assert s["pool_target_differs_from_gold_share"] == 0.06 and s["pcgrad_conflict_ratio_mean"] == pytest.approx(0.35)
    log.write_text("")
    with pytest.raises(ValueError, match="no logged steps"):
        run_summary(log)


@pytest.mark.parametrize("kind,expected", [("sparse", 0.0), ("dense", 4.0 - 6 / 2), ("dense_kit", 0.75)])
def test_trainer_retriever_reward_dispatch(kind, expected):
    # the trainer's reward choice on one parse: sparse vs the (empty) targets, the authors' dense
    # formula on the pool after the step's adds (best set {Name}; Age is irrelevant noise),
    # the kit's dense reward against the gold set when there is no target
    from types import SimpleNamespace

    from acesql_lib.config.train import GRPOConfig
    from acesql_lib.train.grpo import JointGRPO
    from acesql_lib.roles.answers import parse_retriever
    from acesql_lib.roles.prompts import retriever_target
    from acesql_lib.roles.rewards import LengthPenalty
    from acesql_lib.data.schema import Column, Schema, Table

    schema = Schema("db", [Table("singer", [Column("Name", "TEXT"), Column("Age", "INTEGER")])])
    parse = parse_retriever(retriever_target({"singer.Name", "singer.Age"}, "t"), schema)
    trainer = SimpleNamespace(grpo=GRPOConfig(retriever_reward=kind), penalty=LengthPenalty())
    roll = SimpleNamespace(task=SimpleNamespace(gold_columns=frozenset({"singer.Name"})))
    pool_after = {frozenset({"singer.Name"}): 1.0}
    assert JointGRPO._retriever_reward(trainer, roll, parse, 100, [], pool_after) == pytest.approx(expected)


def test_the_kl_term_is_verls_clamped_low_var_kl():
    """verl's low_var_kl (the authors' kl_loss_type): log-ratio clamped to [-20, 20], k3 to [-10, 10], and a
    clamped token gives no gradient; kl_clamp 0 keeps the unclamped k3."""
    logp = torch.tensor([[-0.1, -15.0, -30.0]], requires_grad=True)
    ref = torch.tensor([[-0.2, -0.1, -0.1]])
    adv = torch.zeros(1, 1)
    _, kl, _ = ppo_token_loss(logp, logp.detach(), ref, adv, kl_coef=1.0)
    d = ref - logp.detach()
    k3 = torch.exp(d) - d - 1
    kl = kl.detach()
    assert kl[0, 0] == pytest.approx(float(k3[0, 0]))
    assert kl[0, 1] == 10.0 and kl[0, 2] == 10.0  # e^14.9 - 15.9 and e^29.9 would be ~3e6 and ~1e13
    loss, _, _ = ppo_token_loss(logp, logp.detach(), ref, adv, kl_coef=1.0)
    loss.sum().backward()
    assert logp.grad[0, 0] != 0 and logp.grad[0, 1] == 0 and logp.grad[0, 2] == 0
    _, raw, _ = ppo_token_loss(logp, logp.detach(), ref, adv, kl_coef=1.0, kl_clamp=0.0)
    raw = raw.detach()
    assert raw[0, 1] == pytest.approx(float(k3[0, 1]), rel=1e-5) and raw[0, 1] > 1e6
