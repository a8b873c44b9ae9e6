"""helpers.selection: every rule against a plain loop over queries that says the same thing in words, and the
costs against counting pairs one by one. The top-k forms themselves are held to their dense mask (and the Triton
kernel to both) in tests/kernels/test_sparse_attention.py and tests/test_topk_attention.py."""

from __future__ import annotations

import pytest
import torch

from helpers.kernels.topk_reference import topk_attention_dense, topk_attention_gather
from helpers.selection import (
    SelectionCost,
    block_topk,
    causal_topk,
    recall,
    recent_and_first_keys,
    recent_keys,
    selected_mask,
    summed_attention,
)


def _row_sets(indices):
    """Each row's keys as a set, -1 dropped: (..., L, k) -> nested lists of sets."""
    return [[{int(i) for i in row if int(i) >= 0} for row in rows] for rows in indices.reshape(-1, *indices.shape[-2:])]


@pytest.mark.parametrize("L, S, k", [(6, 6, 3), (5, 9, 4), (4, 4, 7), (1, 3, 2)])
def test_causal_topk_keeps_each_querys_best_earlier_keys(L, S, k):
    scores = torch.randn(2, 3, L, S, dtype=torch.float64)
    chosen = causal_topk(scores, k)
    assert chosen.shape == (2, 3, L, k) and chosen.dtype == torch.long
    for rows, heads in zip(_row_sets(chosen), scores.reshape(-1, L, S), strict=True):
        for t, (row, s) in enumerate(zip(rows, heads, strict=True)):
            where = S - L + t  # the queries are the last L
            readable = list(range(where + 1))
            best = sorted(readable, key=lambda j: -float(s[j]))[:k]
            assert row == set(best), (t, row, best)
    assert (chosen[..., : min(k, S - L + 1)] >= 0).all()  # the keys first, then the padding
    padding = chosen == -1
    assert torch.equal(padding, padding.cummax(-1).values)  # once -1, -1 to the end of the row


def test_causal_topk_masks_before_it_chooses_and_breaks_ties_to_the_earlier_key():
    scores = torch.tensor([[1.0, 9, 9], [2, 2, 9], [3, 3, 3]])  # the future scores 9
    assert causal_topk(scores, 2).tolist() == [[0, -1], [0, 1], [0, 1]]
    assert causal_topk(scores, 1, positions=torch.tensor([2, 2, 2])).tolist() == [[1], [2], [0]]
    zeros = torch.zeros(1, 40)  # a ReLU indexer's ties: the same keys for a row of any length
    assert causal_topk(zeros, 3, positions=torch.tensor([39])).tolist() == [[0, 1, 2]]
    with pytest.raises(ValueError, match="positive int"):
        causal_topk(scores, 0)
    with pytest.raises(ValueError, match="positions must be"):
        causal_topk(scores, 1, positions=torch.tensor([0, 1]))
    with pytest.raises(ValueError, match=r"0 \.\. S - 1"):
        causal_topk(scores, 1, positions=torch.tensor([0, 1, 3]))


def test_the_window_rules_name_the_recent_and_the_first_keys():
    positions = torch.arange(12)
    for t, row in enumerate(_row_sets(recent_keys(positions, 4))[0]):
        assert row == set(range(max(0, t - 3), t + 1))
    for t, row in enumerate(_row_sets(recent_and_first_keys(positions, 6, first=2))[0]):
        assert row == set(range(max(0, t - 3), t + 1)) | set(range(min(2, t + 1)))
    with pytest.raises(ValueError, match="first"):
        recent_and_first_keys(positions, 4, first=4)


def test_block_topk_keeps_the_own_block_and_the_best_earlier_blocks_by_mean_score():
    L, block, k = 13, 3, 9  # 5 blocks, the last one short
    scores = torch.randn(2, L, L, dtype=torch.float64)
    chosen = block_topk(scores, k, block)
    for head, rows in zip(scores, _row_sets(chosen), strict=True):
        for t, row in enumerate(rows):
            own = t // block
            means = {b: float(head[t, b * block : min((b + 1) * block, L)].mean()) for b in range(own)}
            best = sorted(means, key=lambda b: -means[b])[: k // block - 1]
            blocks = [own, *best]
            assert row == {j for b in blocks for j in range(b * block, (b + 1) * block) if j <= t}, (t, row)
    with pytest.raises(ValueError, match="multiple of the block"):
        block_topk(scores, 8, block)


def test_summed_attention_sums_then_normalises_and_recall_counts_the_mass_held():
    weights = torch.rand(2, 3, 4, 5, dtype=torch.float64)
    weights[:, 0] *= 0.1  # a head with little mass: it should count for little
    target = summed_attention(weights)
    torch.testing.assert_close(target, weights.sum(1) / weights.sum((1, 3))[..., None])
    torch.testing.assert_close(target.sum(-1), torch.ones(2, 4, dtype=torch.float64))
    assert not torch.allclose(target, (weights / weights.sum(-1, keepdim=True)).mean(1))
    probabilities = weights.softmax(-1)
    indices = torch.tensor([[0, 2], [1, -1], [4, 3], [0, 1]]).expand(2, 1, 4, 2)
    expected = torch.stack([probabilities[:, :, t, [j for j in row if j >= 0]].sum(-1) for t, row in
                            enumerate(indices[0, 0].tolist())], dim=-1).mean((0, 2))  # fmt: skip
    torch.testing.assert_close(recall(probabilities, indices), expected)


def test_a_selection_mask_is_what_the_top_k_forms_read():
    q, k, v = (torch.randn(1, 2, 5, 4, dtype=torch.float64) for _ in range(3))
    indices = causal_topk(q @ k.mT, 3)
    mask = selected_mask(indices, 5)
    assert torch.equal(mask.sum(-1), (indices >= 0).sum(-1))
    dense = torch.softmax((q @ k.mT / 2).masked_fill(~mask, float("-inf")), dim=-1) @ v
    torch.testing.assert_close(topk_attention_gather(q, k, v, indices), dense)
    torch.testing.assert_close(topk_attention_dense(q, k, v, indices), dense)


def test_the_costs_count_every_pair_once():
    cost = SelectionCost(heads=3, qk_dim=5, v_dim=4, indexer_heads=2, indexer_dim=6, k=4)
    for T in (1, 3, 4, 10):
        pairs = sum(t + 1 for t in range(T))
        kept = sum(min(cost.k, t + 1) for t in range(T))
        assert cost.dense(T) == pairs * 3 * (5 + 4)
        assert cost.selected(T) == kept * 3 * (5 + 4)
        assert cost.indexer(T) == pairs * 2 * (6 + 1)
    assert cost.selected(4) == cost.dense(4)  # k covers every key: nothing saved
