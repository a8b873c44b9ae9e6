"""Tests for helpers.data.batching: padding, masks with True = padding, token budget, bucketing, seeded order."""

from __future__ import annotations

import itertools
import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from helpers.data.batching import Batch, make_batches, pad
from helpers.data.tokenization import PAD_ID


def random_pairs(n: int, seed: int = 0, longest: int = 30) -> tuple[list[list[int]], list[list[int]]]:
    """n (source, target) id lists of random lengths 2..longest with ids 4..99 (never the pad id)."""
    rng = random.Random(seed)
    src = [[rng.randrange(4, 100) for _ in range(rng.randint(2, longest))] for _ in range(n)]
    tgt = [[rng.randrange(4, 100) for _ in range(rng.randint(2, longest))] for _ in range(n)]
    return src, tgt


def unpadded(row: torch.Tensor, mask: torch.Tensor) -> list[int]:
    return row[~mask].tolist()


def test_pad_left_aligns_and_fills():
    out = pad([[5, 6, 7], [8], [9, 10]], pad_id=0)
    assert out.dtype == torch.long
    assert out.tolist() == [[5, 6, 7], [8, 0, 0], [9, 10, 0]]
    assert pad([[1, 2]], pad_id=-1).tolist() == [[1, 2]]
    with pytest.raises(ValueError, match="at least one sequence"):
        pad([])


def test_masks_are_true_exactly_at_padding():
    src, tgt = [[5, 6, 7], [8], [9, 10]], [[11, 12], [13, 14, 15, 16], [17]]
    (batch,) = make_batches(src, tgt, max_tokens=100, shuffle=False)
    for row, i in enumerate(batch.indices.tolist()):
        expected_src = [False] * len(src[i]) + [True] * (batch.src.shape[1] - len(src[i]))
        expected_tgt = [False] * len(tgt[i]) + [True] * (batch.tgt.shape[1] - len(tgt[i]))
        assert batch.src_padding_mask[row].tolist() == expected_src
        assert batch.tgt_padding_mask[row].tolist() == expected_tgt
        assert unpadded(batch.src[row], batch.src_padding_mask[row]) == src[i]
        assert (batch.src[row][batch.src_padding_mask[row]] == PAD_ID).all()
    assert batch.src_padding_mask.dtype == torch.bool and batch.src_padding_mask.shape == batch.src.shape
    assert batch.tgt_padding_mask.shape == batch.tgt.shape


def test_padding_mask_means_ignore_for_nn_multihead_attention():
    """Attending over a padded batch with the mask gives what each unpadded sentence gives alone."""
    torch.manual_seed(0)
    src, tgt = [[5, 6, 7, 8], [9, 10]], [[1, 2], [3, 4]]
    (batch,) = make_batches(src, tgt, max_tokens=100, shuffle=False)
    embed = nn.Embedding(100, 8)
    attention = nn.MultiheadAttention(8, num_heads=2, batch_first=True).eval()
    x = embed(batch.src)  # (N, S, E)
    out, _ = attention(x, x, x, key_padding_mask=batch.src_padding_mask)
    for row in range(len(batch)):
        keep = ~batch.src_padding_mask[row]
        alone = embed(batch.src[row][keep])[None]  # (1, S_row, E)
        expected, _ = attention(alone, alone, alone)
        torch.testing.assert_close(out[row][keep], expected[0])


def test_teacher_forcing_views():
    src, tgt = [[5, 6]], [[1, 20, 21, 2]]
    (batch,) = make_batches(src, tgt, max_tokens=10)
    assert batch.tgt_in.tolist() == [[1, 20, 21]]
    assert batch.tgt_out.tolist() == [[20, 21, 2]]
    assert batch.tgt_in_padding_mask.shape == batch.tgt_in.shape
    assert batch.num_tokens == 3


def test_every_pair_exactly_once_with_its_own_ids():
    src, tgt = random_pairs(500)
    batches = make_batches(src, tgt, max_tokens=300, seed=3)
    seen = torch.cat([b.indices for b in batches]).tolist()
    assert sorted(seen) == list(range(500))
    for batch in batches:
        for row, i in enumerate(batch.indices.tolist()):
            assert unpadded(batch.src[row], batch.src_padding_mask[row]) == src[i]
            assert unpadded(batch.tgt[row], batch.tgt_padding_mask[row]) == tgt[i]


def test_token_budget_is_respected_and_used():
    src, tgt = random_pairs(500)
    budget = 300
    batches = make_batches(src, tgt, max_tokens=budget, seed=1)
    for batch in batches:
        n, s = batch.src.shape
        t = batch.tgt.shape[1]
        assert n * max(s, t) <= budget
    # bucketing keeps padding low: far less than in batches of the same sizes drawn at random
    padding = sum(int(b.src_padding_mask.sum() + b.tgt_padding_mask.sum()) for b in batches)
    rng = random.Random(0)
    order = list(range(len(src)))
    rng.shuffle(order)
    random_padding, start = 0, 0
    for batch in batches:
        group = order[start : start + len(batch)]
        start += len(batch)
        random_padding += sum(max(len(src[i]) for i in group) - len(src[i]) for i in group)
        random_padding += sum(max(len(tgt[i]) for i in group) - len(tgt[i]) for i in group)
    assert padding < 0.8 * random_padding


def test_batches_do_not_interleave_in_length():
    """Bucketing: sort the batches by length and each covers its own range of pair sizes."""
    src, tgt = random_pairs(400, seed=5)
    sizes = [max(len(s), len(t)) for s, t in zip(src, tgt, strict=True)]
    batches = make_batches(src, tgt, max_tokens=250, seed=2)
    ranges = sorted((min(sizes[i] for i in b.indices), max(sizes[i] for i in b.indices)) for b in batches)
    for (_, high), (low, _) in itertools.pairwise(ranges):
        assert high <= low


def test_same_seed_same_batches_different_seed_different_order():
    src, tgt = random_pairs(300)
    first = [b.indices.tolist() for b in make_batches(src, tgt, max_tokens=200, seed=7)]
    again = [b.indices.tolist() for b in make_batches(src, tgt, max_tokens=200, seed=7)]
    other = [b.indices.tolist() for b in make_batches(src, tgt, max_tokens=200, seed=8)]
    assert first == again
    assert first != other
    assert sorted(itertools.chain(*first)) == sorted(itertools.chain(*other))


def test_without_shuffle_batches_go_from_short_to_long():
    src, tgt = random_pairs(200)
    sizes = [max(len(s), len(t)) for s, t in zip(src, tgt, strict=True)]
    batches = make_batches(src, tgt, max_tokens=200, shuffle=False)
    flat = [sizes[i] for b in batches for i in b.indices.tolist()]
    assert flat == sorted(flat)


def test_bad_input_gets_clear_errors():
    with pytest.raises(ValueError, match="src_ids has 2 sequences but tgt_ids has 1"):
        make_batches([[1, 2], [3]], [[1]], max_tokens=10)
    with pytest.raises(ValueError, match=r"pair 1 has 3 source and 12 target ids, more than max_tokens=10"):
        make_batches([[1, 2], [3, 4, 5]], [[1], list(range(12))], max_tokens=10)
    with pytest.raises(ValueError, match="pair 0 has an empty sequence"):
        make_batches([[]], [[1]], max_tokens=10)
    with pytest.raises(ValueError, match="at least one pair"):
        make_batches([], [], max_tokens=10)


def test_to_device_keeps_everything():
    src, tgt = random_pairs(10)
    batch = make_batches(src, tgt, max_tokens=1000)[0]
    moved = batch.to("cpu")
    assert isinstance(moved, Batch)
    for name in ("src", "tgt", "src_padding_mask", "tgt_padding_mask", "indices"):
        assert torch.equal(getattr(moved, name), getattr(batch, name))


@settings(max_examples=50, deadline=None)
@given(
    lengths=st.lists(st.tuples(st.integers(1, 20), st.integers(1, 20)), min_size=1, max_size=60),
    budget=st.integers(20, 200),
    seed=st.integers(0, 10),
)
def test_invariants_hold_for_any_lengths(lengths, budget, seed):
    src = [[4] * s for s, _ in lengths]
    tgt = [[5] * t for _, t in lengths]
    batches = make_batches(src, tgt, max_tokens=budget, seed=seed)
    assert sorted(torch.cat([b.indices for b in batches]).tolist()) == list(range(len(lengths)))
    for batch in batches:
        assert len(batch) * max(batch.src.shape[1], batch.tgt.shape[1]) <= budget
        assert torch.equal(batch.src_padding_mask, batch.src == PAD_ID)
        assert torch.equal(batch.tgt_padding_mask, batch.tgt == PAD_ID)


def test_corpus_to_batches_and_back():
    """The whole data path: corpus → tokenizers (training split) → ids → batches → the same sentences."""
    from pathlib import Path

    from helpers.data.corpus import load_corpus
    from helpers.data.tokenization import train_tokenizers

    corpus = load_corpus("multi30k", "train", data_dir=Path(__file__).resolve().parents[1] / "fixtures" / "multi30k")
    tok_de, tok_en = train_tokenizers(corpus, kind="bpe", min_frequency=1)
    batches = make_batches(tok_de.encode_batch(corpus.de), tok_en.encode_batch(corpus.en), max_tokens=30, seed=0)
    assert len(batches) > 1
    for batch in batches:
        assert tok_de.decode_batch(batch.src) == [corpus.de[i] for i in batch.indices]
        assert tok_en.decode_batch(batch.tgt) == [corpus.en[i] for i in batch.indices]
        assert tok_en.decode_batch(batch.tgt_out) == [corpus.en[i] for i in batch.indices]  # <bos> dropped
