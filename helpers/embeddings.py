"""Token embeddings and sinusoidal positional encodings (lesson 01).

Shapes use the course's notation: N batch, L sequence length, E embedding size, P number of
positions a table holds, V vocabulary size.

A transformer sees a sentence as a sequence of token ids. ``TokenEmbedding`` turns each id into a
learned vector of size E; ``sinusoidal_positional_encoding`` gives every position its own fixed
vector of size E, and ``PositionalEncoding`` adds that vector to each token's embedding, so that
the same word at two places in the sentence looks different to attention.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

__all__ = [
    "PositionalEncoding",
    "TokenEmbedding",
    "cosine_similarity_matrix",
    "one_hot_embedding",
    "sinusoidal_positional_encoding",
]


# ---------------------------------------------------------------------------------------------
# Token embeddings
# ---------------------------------------------------------------------------------------------
class TokenEmbedding(nn.Module):
    """Look up a learned vector for every token id, scaled by sqrt(E) as in "Attention Is All You Need".

    Why the scale: the original transformer shares this table with its output layer, whose weights
    are small (about 1 / sqrt(E) each); multiplying by sqrt(E) brings the embeddings back to entries
    of size about 1, the size of the positional encoding added next. So when scaling, the table
    starts with entries of size 1 / sqrt(E) (``nn.Embedding``'s default is 1): the scaled vectors
    then start as large as the positions, not sqrt(E) times larger; with the default start, position
    is a faint signal under the words (what that costs lesson 06's translator is measured in
    benchmarks/RESULTS.md, "Translation"). With ``scale=False`` (a plain look-up) the table keeps
    ``nn.Embedding``'s start; either way the output starts with entries of size about 1.

    Shapes: ids (N, L) int64 -> (N, L, E). ``padding_idx`` works as in ``nn.Embedding`` (its row
    starts at zero and gets no gradient).
    """

    def __init__(self, vocab_size: int, embed_dim: int, padding_idx: int | None = None, scale: bool = True) -> None:
        super().__init__()
        if vocab_size < 1 or embed_dim < 1:
            raise ValueError(f"vocab_size and embed_dim must be positive, got {vocab_size} and {embed_dim}")
        self.embedding = nn.Embedding(vocab_size, embed_dim, padding_idx=padding_idx)
        self.embed_dim = embed_dim
        self.scale = math.sqrt(embed_dim) if scale else 1.0
        if scale:  # entries 1 / sqrt(E) now, about 1 once scaled: as large as the positions (see above)
            with torch.no_grad():
                self.embedding.weight.normal_(0.0, 1.0 / self.scale)
                if padding_idx is not None:
                    self.embedding.weight[padding_idx].zero_()

    @property
    def weight(self) -> Tensor:
        """The (V, E) table: row ``i`` is the vector of token id ``i``."""
        return self.embedding.weight

    def forward(self, ids: Tensor) -> Tensor:
        if ids.dtype not in (torch.int64, torch.int32):
            raise TypeError(f"token ids must be an integer tensor (int64 or int32), got {ids.dtype}")
        vocab_size = self.embedding.num_embeddings
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= vocab_size):
            raise ValueError(
                f"token ids must lie in [0, {vocab_size - 1}] for a vocabulary of {vocab_size}, "
                f"got values from {int(ids.min())} to {int(ids.max())}"
            )
        return self.embedding(ids) * self.scale  # (N, L) -> (N, L, E)


def one_hot_embedding(ids: Tensor, weight: Tensor) -> Tensor:
    """The same look-up as ``nn.Embedding``, written as one-hot vectors times the table.

    ids (...,) int64 and weight (V, E) -> (..., E). Row ``i`` of ``one_hot(ids) @ weight`` picks out
    row ``ids[i]`` of the table: an embedding layer is a linear layer whose inputs are one-hot.
    """
    if weight.dim() != 2:
        raise ValueError(f"weight must be a (V, E) table, got shape {tuple(weight.shape)}")
    one_hot = torch.nn.functional.one_hot(ids, num_classes=weight.size(0)).to(weight.dtype)  # (..., V)
    return one_hot @ weight  # (..., V) @ (V, E) -> (..., E)


def cosine_similarity_matrix(vectors: Tensor) -> Tensor:
    """Cosine similarity between every pair of rows: (T, E) -> (T, T), entries in [-1, 1]."""
    if vectors.dim() != 2:
        raise ValueError(f"expected a (T, E) matrix of row vectors, got shape {tuple(vectors.shape)}")
    unit = torch.nn.functional.normalize(vectors, dim=-1)  # each row to length 1
    return unit @ unit.T


# ---------------------------------------------------------------------------------------------
# Sinusoidal positional encoding
# ---------------------------------------------------------------------------------------------
def sinusoidal_positional_encoding(
    num_positions: int, dim: int, base: float = 10000.0, dtype: torch.dtype = torch.float32
) -> Tensor:
    """The fixed positional encodings of "Attention Is All You Need": a (P, E) table.

    Features come in pairs. Pair ``k`` (features ``2k`` and ``2k + 1``) turns at the angular
    frequency ``w_k = base ** (-2k / E)``::

        PE[pos, 2k]     = sin(pos * w_k)
        PE[pos, 2k + 1] = cos(pos * w_k)

    The first pairs turn fast (w_0 = 1 radian per position), the last ones slowly (a period of up
    to ``2π · base`` positions), like the hands of a clock. Because a shift by ``t`` positions
    rotates each (sin, cos) pair by the angle ``t · w_k``, the dot product ``PE[i] · PE[j]``
    depends only on the distance ``i - j``. An odd ``dim`` keeps the sine of the last pair only.
    """
    if num_positions < 1 or dim < 1:
        raise ValueError(f"num_positions and dim must be positive, got {num_positions} and {dim}")
    if base <= 1.0:
        raise ValueError(f"base must be greater than 1 (the paper uses 10000), got {base}")
    # Compute in float64 so that large positions keep their precision, then convert.
    positions = torch.arange(num_positions, dtype=torch.float64)[:, None]  # (P, 1)
    pair = torch.arange(0, dim, 2, dtype=torch.float64)  # 2k for k = 0 .. ceil(E/2) - 1
    frequencies = base ** (-pair / dim)  # (ceil(E/2),)
    angles = positions * frequencies  # (P, ceil(E/2))
    encoding = torch.empty(num_positions, dim, dtype=torch.float64)
    encoding[:, 0::2] = torch.sin(angles)
    encoding[:, 1::2] = torch.cos(angles[:, : dim // 2])
    return encoding.to(dtype)


class PositionalEncoding(nn.Module):
    """Add sinusoidal positional encodings to a batch of embeddings, then apply dropout.

    Shapes: x (N, L, E) -> (N, L, E), batch first. Position ``t`` of every sequence gets
    ``sinusoidal_positional_encoding(max_len, E)[t]`` added. The table is a buffer that is not saved
    in the state dict (it is computed, not learned), so checkpoints do not depend on ``max_len``.
    """

    encoding: Tensor  # (P, E), the buffer registered in __init__

    def __init__(self, embed_dim: int, max_len: int = 512, dropout: float = 0.0, base: float = 10000.0) -> None:
        super().__init__()
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.embed_dim, self.max_len = embed_dim, max_len
        self.dropout = nn.Dropout(dropout)
        self.register_buffer(
            "encoding", sinusoidal_positional_encoding(max_len, embed_dim, base=base), persistent=False
        )  # (P, E)

    def forward(self, x: Tensor, start: int = 0) -> Tensor:
        """Add positions ``start .. start + L - 1`` (``start`` > 0: the next tokens of a sequence
        whose first ``start`` tokens were encoded earlier, as in step-by-step decoding)."""
        if x.dim() != 3 or x.size(-1) != self.embed_dim:
            raise ValueError(
                f"PositionalEncoding expects batch-first embeddings (N, L, E) with E={self.embed_dim}, "
                f"got shape {tuple(x.shape)}"
            )
        end = start + x.size(1)
        if start < 0 or end > self.max_len:
            raise ValueError(
                f"positions {start}..{end - 1} must lie in [0, max_len={self.max_len}); build PositionalEncoding "
                f"with a larger max_len"
            )
        positions = self.encoding[start:end].to(dtype=x.dtype)  # (L, E), broadcast over the batch
        return self.dropout(x + positions)  # (N, L, E)
