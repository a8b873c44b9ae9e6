"""Tests for helpers.embeddings: token look-ups and sinusoidal positional encodings."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from helpers.embeddings import (
    PositionalEncoding,
    TokenEmbedding,
    cosine_similarity_matrix,
    one_hot_embedding,
    sinusoidal_positional_encoding,
)


def _loop_reference(num_positions: int, dim: int, base: float) -> torch.Tensor:
    """The paper's formula written element by element, in plain Python floats."""
    table = torch.zeros(num_positions, dim, dtype=torch.float64)
    for pos in range(num_positions):
        for i in range(dim):
            angle = pos / base ** (2 * (i // 2) / dim)
            table[pos, i] = math.sin(angle) if i % 2 == 0 else math.cos(angle)
    return table


@pytest.mark.parametrize("num_positions, dim, base", [(7, 8, 10000.0), (5, 6, 100.0), (4, 5, 10000.0), (1, 1, 10.0)])
def test_positional_encoding_matches_formula(num_positions, dim, base):
    got = sinusoidal_positional_encoding(num_positions, dim, base=base, dtype=torch.float64)
    assert got.shape == (num_positions, dim)
    torch.testing.assert_close(got, _loop_reference(num_positions, dim, base))


def test_positional_encoding_default_is_float32_and_position_zero_is_sin0_cos0():
    table = sinusoidal_positional_encoding(3, 6)
    assert table.dtype == torch.float32
    torch.testing.assert_close(table[0], torch.tensor([0.0, 1.0, 0.0, 1.0, 0.0, 1.0]))


def test_dot_product_between_positions_depends_only_on_distance():
    table = sinusoidal_positional_encoding(40, 16, dtype=torch.float64)
    similarity = table @ table.T  # (P, P)
    for distance in (0, 1, 5, 13):
        diagonal = torch.diagonal(similarity, offset=distance)
        torch.testing.assert_close(diagonal, torch.full_like(diagonal, float(diagonal[0])))
    # every position has the same length: sqrt(E / 2) (one sin^2 + cos^2 = 1 per pair)
    torch.testing.assert_close(torch.diagonal(similarity), torch.full((40,), 8.0, dtype=torch.float64))


@pytest.mark.parametrize("args", [(0, 4), (4, 0), (-1, 4)])
def test_positional_encoding_rejects_non_positive_sizes(args):
    with pytest.raises(ValueError, match="positive"):
        sinusoidal_positional_encoding(*args)


def test_positional_encoding_rejects_bad_base():
    with pytest.raises(ValueError, match="base"):
        sinusoidal_positional_encoding(4, 4, base=1.0)


def test_positional_encoding_module_adds_table_to_every_sequence():
    torch.manual_seed(0)
    module = PositionalEncoding(embed_dim=8, max_len=20)
    x = torch.randn(3, 11, 8)
    expected = x + sinusoidal_positional_encoding(20, 8)[:11]
    torch.testing.assert_close(module(x), expected)


def test_positional_encoding_module_can_start_later_in_the_sequence():
    # Step-by-step decoding adds position t to the t-th token alone: the same as slicing the full result.
    torch.manual_seed(0)
    module = PositionalEncoding(embed_dim=8, max_len=20)
    x = torch.randn(2, 9, 8)
    full = module(x)
    torch.testing.assert_close(module(x[:, 4:7], start=4), full[:, 4:7])
    with pytest.raises(ValueError, match=r"positions 18..20.*max_len=20"):
        module(x[:, :3], start=18)


def test_positional_encoding_module_keeps_float64():
    module = PositionalEncoding(embed_dim=4, max_len=6)
    x = torch.zeros(2, 6, 4, dtype=torch.float64)
    out = module(x)
    assert out.dtype == torch.float64
    torch.testing.assert_close(out[1], sinusoidal_positional_encoding(6, 4, dtype=torch.float64), atol=1e-7, rtol=0)


def test_positional_encoding_module_dropout_only_in_training():
    torch.manual_seed(0)
    module = PositionalEncoding(embed_dim=16, max_len=10, dropout=0.5)
    x = torch.randn(4, 10, 16)
    expected = x + sinusoidal_positional_encoding(10, 16)
    module.eval()
    torch.testing.assert_close(module(x), expected)
    module.train()
    out = module(x)
    dropped = out == 0
    assert 0.3 < dropped.float().mean() < 0.7
    torch.testing.assert_close(out[~dropped], (expected * 2)[~dropped])  # survivors scaled by 1 / (1 - p)


def test_positional_encoding_module_table_not_in_state_dict():
    assert "encoding" not in PositionalEncoding(8, max_len=10).state_dict()
    # so a model saved with one max_len loads into one built with another
    PositionalEncoding(8, max_len=30).load_state_dict(PositionalEncoding(8, max_len=10).state_dict())


def test_positional_encoding_module_errors_name_the_shapes():
    module = PositionalEncoding(embed_dim=8, max_len=5)
    with pytest.raises(ValueError, match=r"max_len=5"):
        module(torch.zeros(1, 6, 8))
    with pytest.raises(ValueError, match=r"\(N, L, E\) with E=8.*\(2, 3, 4\)"):
        module(torch.zeros(2, 3, 4))
    with pytest.raises(ValueError, match="dropout"):
        PositionalEncoding(8, dropout=1.0)


def test_token_embedding_is_scaled_lookup():
    torch.manual_seed(0)
    embed = TokenEmbedding(vocab_size=10, embed_dim=4, padding_idx=0)
    ids = torch.tensor([[1, 2, 0], [9, 9, 3]])
    out = embed(ids)
    assert out.shape == (2, 3, 4)
    torch.testing.assert_close(out, embed.weight[ids] * 2.0)  # sqrt(4) = 2
    torch.testing.assert_close(out[0, 2], torch.zeros(4))  # padding row starts at zero
    plain = TokenEmbedding(10, 4, scale=False)
    torch.testing.assert_close(plain(ids), plain.weight[ids])


def test_token_embedding_starts_as_large_as_the_positions():
    # Scaled or not, the output starts with entries of size about 1 (the positional encoding's size):
    # a scaled table starts at 1 / sqrt(E), so the scaled embeddings do not drown out position.
    torch.manual_seed(0)
    ids = torch.arange(1, 2000)[None, :]
    for scale in (True, False):
        embed = TokenEmbedding(2000, 64, padding_idx=0, scale=scale).requires_grad_(False)
        assert abs(float(embed(ids).std()) - 1.0) < 0.05, scale
        assert float(embed(torch.zeros(1, 1, dtype=torch.long)).abs().max()) == 0.0  # padding row still zero
    assert abs(float(TokenEmbedding(2000, 64).weight.detach().std()) - 1 / 8) < 0.01  # 1 / sqrt(64)


def test_token_embedding_rejects_bad_ids():
    embed = TokenEmbedding(5, 3)
    with pytest.raises(ValueError, match=r"\[0, 4\].*5"):
        embed(torch.tensor([[1, 5]]))
    with pytest.raises(TypeError, match="integer"):
        embed(torch.tensor([[1.0]]))


def test_one_hot_times_table_equals_nn_embedding():
    torch.manual_seed(0)
    table = nn.Embedding(7, 5)
    ids = torch.tensor([[0, 3, 6], [2, 2, 1]])
    torch.testing.assert_close(one_hot_embedding(ids, table.weight), table(ids))
    with pytest.raises(ValueError, match=r"\(V, E\)"):
        one_hot_embedding(ids, torch.zeros(3))


def test_cosine_similarity_matrix_matches_torch():
    torch.manual_seed(0)
    vectors = torch.randn(6, 5)
    expected = nn.functional.cosine_similarity(vectors[:, None, :], vectors[None, :, :], dim=-1)
    torch.testing.assert_close(cosine_similarity_matrix(vectors), expected)
    with pytest.raises(ValueError, match=r"\(T, E\)"):
        cosine_similarity_matrix(torch.zeros(2, 3, 4))
