"""Attention sinks in a causal model (lesson 09): what the output loses when the heads cannot use one key.

``blocked_key(model, layers, key=0)`` is a context manager: inside it, in the chosen layers of a
``helpers.gpt.GPT`` (its latent layers too, ``helpers.latent_attention``, in either form: every layer is a variant of
the one attention core, ``helpers.attention.AttentionCore``), every query after token ``key`` no longer sees
that token. Its softmax runs over the other keys, which is the same as taking the head's weights, setting the
blocked key's share to zero and renormalizing each row to sum to 1; with ``renormalize=False`` the share is
dropped instead (the rows then sum to less than 1).
(The query at position ``key`` itself keeps it: for key 0 it is the only key it has.)
``sink_removal_effect`` measures what that does to next-token prediction over a few sentences.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from helpers.attention import AttentionCore, masked_softmax
from helpers.gpt import GPT

__all__ = ["SinkRemoval", "blocked_key", "sink_removal_effect"]


def _weights_without_key(key: int, renormalize: bool):
    """A ``weights_from_scores`` for the attention core: the masked softmax with token ``key`` hidden from
    every later query; scores (N, h, L, T), may_attend (L, T) or any shape that broadcasts to the scores' (a
    top-k layer's is (N, 1, L, T)), positions (L,) -> weights (N, h, L, T)."""

    def weights(scores: Tensor, may_attend: Tensor, positions: Tensor) -> Tensor:
        # (L, T): True where a later query's weight on the key goes
        hidden = torch.zeros(may_attend.shape[-2:], dtype=torch.bool, device=may_attend.device)
        if key < may_attend.size(-1):
            hidden[:, key] = positions > key  # the queries after the blocked token
        if renormalize:  # a softmax over the other keys: the share is spread over them
            return masked_softmax(scores, may_attend & ~hidden)
        # the intact weights with the share dropped: those rows now sum to less than 1
        return masked_softmax(scores, may_attend).masked_fill(hidden, 0.0)

    return weights


@contextmanager
def blocked_key(model: GPT, layers: Iterable[int], key: int = 0, renormalize: bool = True) -> Iterator[GPT]:
    """Within the ``with``, the attention of ``layers`` hides token ``key`` from every later query.

    Each chosen layer's weights (N, h, L, T) become the intact ones with column ``key`` set to zero (for the
    queries after it) and, with ``renormalize``, every row rescaled to sum to 1 again (the share goes to the
    other keys); without, those rows keep their other weights and sum to less than 1 (the share is dropped, as
    if the blocked token's value were zero). Works with and without a ``KVCache``. The layers are restored on
    leaving, also after an error."""
    if not isinstance(model, GPT):
        raise TypeError(f"blocked_key needs a helpers.gpt.GPT, got {type(model).__name__}")
    n_layers = len(model.blocks)
    layers = sorted(set(layers))
    bad = [i for i in layers if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < n_layers]
    if bad:
        raise ValueError(f"layers must be ints in 0 .. {n_layers - 1} (the model's layers), got {bad}")
    if isinstance(key, bool) or not isinstance(key, int) or key < 0:
        raise ValueError(f"key must be a token position >= 0, got {key!r}")
    modules = [model.blocks[i].attention for i in layers]
    foreign = [i for i, module in zip(layers, modules, strict=True) if not isinstance(module, AttentionCore)]
    if foreign:
        raise TypeError(
            f"the attention of layers {foreign} is not a variant of helpers.attention.AttentionCore, so it has no "
            "weights_from_scores to replace: blocked_key cannot hide a key there"
        )
    cores = [module for module in modules if isinstance(module, AttentionCore)]  # all of them: foreign refused
    busy = [i for i, module in zip(layers, cores, strict=True) if module.weights_from_scores is not None]
    if busy:
        raise RuntimeError(f"layers {busy} already have their attention weights replaced (blocked_key inside another)")
    try:
        for module in cores:
            module.weights_from_scores = _weights_without_key(key, bool(renormalize))
        yield model
    finally:
        for module in cores:
            module.weights_from_scores = None


@dataclass(frozen=True)
class SinkRemoval:
    """Next-token prediction over some sentences, intact and with a key blocked.

    ``loss`` and ``loss_blocked``: mean cross-entropy (nats) of each next token of the sentences;
    ``agreement``: the share of positions where the top-1 prediction stays the intact model's; ``positions``:
    how many predictions were compared (sum over sentences of T - 1)."""

    loss: float
    loss_blocked: float
    agreement: float
    positions: int


@torch.no_grad()
def sink_removal_effect(
    model: GPT, sentences: Sequence[Tensor], layers: Iterable[int], key: int = 0, renormalize: bool = True
) -> SinkRemoval:
    """Run ``sentences`` (each ids (1, T), T >= 2) intact and with token ``key`` blocked in ``layers``
    (``blocked_key``, with or without ``renormalize``), and compare their next-token predictions at every
    position (the first ``key`` + 1 positions included: blocking leaves them unchanged)."""
    if not sentences:
        raise ValueError("sink_removal_effect needs at least one sentence of ids (1, T)")
    layers = list(layers)
    loss = loss_blocked = agree = count = 0.0
    for ids in sentences:
        if not isinstance(ids, Tensor) or ids.dim() != 2 or ids.size(0) != 1 or ids.size(1) < 2:
            shape = tuple(ids.shape) if isinstance(ids, Tensor) else type(ids).__name__
            raise ValueError(f"each sentence must be ids (1, T) with T >= 2, got {shape}")
        intact = model(ids)[0, :-1]  # (T - 1, V): the predictions of tokens 1 .. T - 1
        with blocked_key(model, layers, key, renormalize):
            blocked = model(ids)[0, :-1]
        targets = ids[0, 1:]
        loss += F.cross_entropy(intact, targets, reduction="sum").item()
        loss_blocked += F.cross_entropy(blocked, targets, reduction="sum").item()
        agree += (intact.argmax(-1) == blocked.argmax(-1)).sum().item()
        count += targets.numel()
    return SinkRemoval(loss / count, loss_blocked / count, agree / count, int(count))
