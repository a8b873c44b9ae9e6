"""Batches of sentence pairs for training: padding, padding masks, and a token budget with length bucketing.

Sentences differ in length, but a tensor is a rectangle, so short sentences are filled up with
``<pad>`` (id 0). Two habits keep that waste small and training fast:

- **bucketing**: pairs of similar length go in the same batch, so little padding is needed;
- **a token budget**: instead of a fixed number of sentences, each batch holds as many pairs as fit in
  ``max_tokens`` padded positions, so batches of short sentences hold more of them.

Mask meaning, as in ``nn.MultiheadAttention``'s ``key_padding_mask``: **True = padding, ignore**.
Shape notation: N batch, S source length, T full target length (``<bos> … <eos>``), L = T - 1 decoder
length (the target with its last or first token dropped, for teacher forcing).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from helpers.attention import padding_mask
from helpers.data.tokenization import PAD_ID


@dataclass
class Batch:
    """One batch of padded pairs.

    Attributes:
        src: (N, S) long, source ids (``<bos> … <eos>`` then ``<pad>``).
        tgt: (N, T) long, target ids (``<bos> … <eos>`` then ``<pad>``).
        src_padding_mask: (N, S) bool, True where ``src`` is padding.
        tgt_padding_mask: (N, T) bool, True where ``tgt`` is padding.
        indices: (N,) long, the position of each pair in the lists given to :func:`make_batches`.
    """

    src: Tensor
    tgt: Tensor
    src_padding_mask: Tensor
    tgt_padding_mask: Tensor
    indices: Tensor

    # Teacher forcing: the decoder reads the target up to position t and must predict position t + 1.
    @property
    def tgt_in(self) -> Tensor:
        """(N, L) decoder input: the target without its last position."""
        return self.tgt[:, :-1]

    @property
    def tgt_out(self) -> Tensor:
        """(N, L) what the decoder must predict: the target without ``<bos>`` (pad positions: ignore in the loss)."""
        return self.tgt[:, 1:]

    @property
    def tgt_in_padding_mask(self) -> Tensor:
        """(N, L) bool, True where ``tgt_in`` is padding."""
        return self.tgt_padding_mask[:, :-1]

    @property
    def num_tokens(self) -> int:
        """Real (non-padding) target tokens to predict: what to divide a summed loss by."""
        return int((~self.tgt_padding_mask[:, 1:]).sum())

    def __len__(self) -> int:
        return self.src.shape[0]

    def to(self, device: torch.device | str) -> Batch:
        """The same batch on ``device``."""
        tensors = (self.src, self.tgt, self.src_padding_mask, self.tgt_padding_mask, self.indices)
        return Batch(*(tensor.to(device) for tensor in tensors))


def pad(sequences: Sequence[Sequence[int]], pad_id: int = PAD_ID) -> Tensor:
    """(N, max length) long tensor: each sequence left-aligned, filled up with ``pad_id``."""
    if len(sequences) == 0:
        raise ValueError("pad needs at least one sequence")
    longest = max(len(sequence) for sequence in sequences)
    out = torch.full((len(sequences), longest), pad_id, dtype=torch.long)  # (N, longest)
    for row, sequence in enumerate(sequences):
        out[row, : len(sequence)] = torch.as_tensor(sequence, dtype=torch.long)
    return out


def collate(
    src_ids: Sequence[Sequence[int]], tgt_ids: Sequence[Sequence[int]], indices: Sequence[int], pad_id: int = PAD_ID
) -> Batch:
    """One :class:`Batch` from the pairs at ``indices``."""
    src = [src_ids[i] for i in indices]
    tgt = [tgt_ids[i] for i in indices]
    return Batch(
        src=pad(src, pad_id),
        tgt=pad(tgt, pad_id),
        src_padding_mask=padding_mask([len(s) for s in src]),  # (N, S), True = padding
        tgt_padding_mask=padding_mask([len(t) for t in tgt]),  # (N, T)
        indices=torch.as_tensor(list(indices), dtype=torch.long),
    )


def make_batches(
    src_ids: Sequence[Sequence[int]],
    tgt_ids: Sequence[Sequence[int]],
    max_tokens: int,
    shuffle: bool = True,
    seed: int = 0,
    pad_id: int = PAD_ID,
) -> list[Batch]:
    """Group pairs into batches of at most ``max_tokens`` padded positions, similar lengths together.

    The budget counts padding too, since padding costs memory and time like any token: a batch of N
    pairs whose longest source has S ids and longest target T ids uses ``N * max(S, T) <= max_tokens``.
    Every pair appears in exactly one batch. With ``shuffle``, pairs of equal length are mixed and the
    batch order is shuffled, both from ``seed`` (same seed, same batches: pass ``seed=epoch`` for a new
    order each epoch); without it, batches go from shortest to longest.
    """
    if len(src_ids) != len(tgt_ids):
        raise ValueError(f"src_ids has {len(src_ids)} sequences but tgt_ids has {len(tgt_ids)}")
    if len(src_ids) == 0:
        raise ValueError("make_batches needs at least one pair")
    sizes = [max(len(s), len(t)) for s, t in zip(src_ids, tgt_ids, strict=True)]
    for i, (s, t) in enumerate(zip(src_ids, tgt_ids, strict=True)):
        if len(s) == 0 or len(t) == 0:
            raise ValueError(f"pair {i} has an empty sequence")
        if sizes[i] > max_tokens:
            raise ValueError(
                f"pair {i} has {len(s)} source and {len(t)} target ids, more than max_tokens={max_tokens}; "
                "raise max_tokens or drop long pairs"
            )
    rng = random.Random(seed)
    order = list(range(len(sizes)))
    if shuffle:
        rng.shuffle(order)  # so that the stable sort below mixes pairs of equal length differently per seed
    order.sort(key=lambda i: sizes[i])  # bucketing: neighbours have similar lengths

    groups: list[list[int]] = []
    current: list[int] = []
    for i in order:
        # sorted by size, so the newcomer is the longest: the padded width becomes sizes[i]
        if current and (len(current) + 1) * sizes[i] > max_tokens:
            groups.append(current)
            current = []
        current.append(i)
    groups.append(current)
    if shuffle:
        rng.shuffle(groups)
    return [collate(src_ids, tgt_ids, group, pad_id) for group in groups]
