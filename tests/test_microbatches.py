"""Token-budget micro-batches balanced by length (the authors' verl dynamic batching)."""
import pytest

from acesql_lib.train.microbatches import balanced_partitions, micro_batch_count


def test_the_largest_differencing_partition_worked_by_hand():
    # lengths 5 8 6 4 7 into 2: {8}{7} and {6}{5} (spread 1 each), then {4} takes {8}{7} -> {4,7}{8},
    # then that (spread 3) takes {6}{5} -> {4,7,5}=16 and {8,6}=14
    assert balanced_partitions([5, 8, 6, 4, 7], 2) == [[0, 3, 4], [1, 2]]
    assert balanced_partitions([10, 1, 1, 1, 1, 1, 1, 1], 3) == [[0], [1, 3, 5, 6], [2, 4, 7]]
    assert balanced_partitions([3], 1) == [[0]]


@pytest.mark.parametrize("seed", range(5))
def test_partitions_cover_every_sequence_once_and_balance_the_sums(seed):
    import random

    rng = random.Random(seed)
    lengths = [rng.randint(50, 3000) for _ in range(32)]
    k = micro_batch_count(lengths, 12000)
    parts = balanced_partitions(lengths, k)
    assert len(parts) == k and sorted(i for p in parts for i in p) == list(range(32)) and all(parts)
    sums = [sum(lengths[i] for i in p) for p in parts]
    assert max(sums) - min(sums) <= max(lengths)  # a differencing partition is within one item of even


def test_micro_batch_count_is_the_ceiling_of_tokens_over_the_budget():
    assert micro_batch_count([6000, 6000, 1], 12000) == 2
    assert micro_batch_count([100, 100], 12000) == 1
    assert micro_batch_count([9000, 9000], 1000) == 2  # at most one sequence per micro-batch
    with pytest.raises(ValueError, match="between|must be in"):
        balanced_partitions([1, 2], 3)
    with pytest.raises(ValueError, match="max_tokens"):
        micro_batch_count([1], 0)


def test_a_micro_batch_of_short_rows_and_one_long_completion_runs_in_passes_within_its_padded_budget():
    from acesql_lib.train.microbatches import padded_chunks

    prompts = [50] * 31 + [60]
    completions = [20] * 31 + [2048]  # padded together: 32 rows x (60 + 2048) = 67,456 tokens
    chunks = padded_chunks(prompts, completions, list(range(32)), 12000)
    assert sorted(i for c in chunks for i in c) == list(range(32))  # every row once
    for c in chunks:
        assert len(c) * (max(prompts[i] for i in c) + max(completions[i] for i in c)) <= 12000
    assert [31] in chunks  # the long completion alone, the short rows together
    assert padded_chunks([9000], [5000], [0], 12000) == [[0]]  # a row over the budget still runs, alone
    assert padded_chunks(prompts, completions, [3, 1, 2], 10 ** 6) == [[1, 2, 3]]
