"""Attention sinks in a causal model (lesson 09): what the output loses when the heads cannot use one key.

``blocked_key(model, layers, key=0)`` is a context manager: inside it, in the chosen layers of a
``helpers.gpt.GPT``, every query after token ``key`` no longer sees that token. Its softmax runs over the other
keys, which is the same as taking the head's weights, setting the blocked key's share to zero and renormalizing
each row to sum to 1; with ``renormalize=False`` the share is dropped instead (the rows then sum to less than 1).
(The query at position ``key`` itself keeps it: for key 0 it is the only key it has.)
``sink_removal_effect`` measures what that does to next-token prediction over a few sentences.
"""

from __future__ import annotations

import math
import types
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from helpers.gpt import GPT, attention_mask
from helpers.rotary import rotary_cos_sin, rotate_pairs

__all__ = ["SinkRemoval", "blocked_key", "sink_removal_effect"]


def _forward_without_key(self, x, positions, past=None, need_weights=False, rotation=None):
    """``CausalSelfAttention.forward`` with one key hidden from the later queries (``self._blocked_key``).
    x (N, L, E) -> output (N, L, E), keys and values (N, h_kv, T, d) each, and with ``need_weights`` the
    weights (N, h, L, T)."""
    N, L, _ = x.shape
    p, h, h_kv, d = self.projections, self.num_heads, self.num_kv_heads, self.head_dim
    q = p.q_proj(x).view(N, L, h, d).transpose(1, 2)  # (N, h, L, d)
    k = p.k_proj(x).view(N, L, h_kv, d).transpose(1, 2)  # (N, h_kv, L, d)
    v = p.v_proj(x).view(N, L, h_kv, d).transpose(1, 2)  # (N, h_kv, L, d)
    if self.rotary:
        cos, sin = rotation if rotation is not None else rotary_cos_sin(positions, d, self.rotary_base, x.dtype)
        q, k = rotate_pairs(q, cos, sin), rotate_pairs(k, cos, sin)
    if past is not None:
        k, v = torch.cat((past[0], k), dim=2), torch.cat((past[1], v), dim=2)  # (N, h_kv, T, d)
    g = h // h_kv
    keys, values = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)  # (N, h, T, d)
    T = k.size(2)
    mask = attention_mask(positions, T, self.window)  # (L, T), True = may attend
    blocked, renormalize = self._blocked_key
    hidden = torch.zeros_like(mask)  # (L, T): True where a later query's weight on the blocked key goes
    if blocked < T:
        hidden[:, blocked] = positions > blocked  # the queries after the blocked token
    scores = (q @ keys.transpose(-2, -1)) / math.sqrt(d)  # (N, h, L, T)
    if renormalize:  # a softmax over the other keys: the share is spread over them
        weights = scores.masked_fill(~mask | hidden, float("-inf")).softmax(dim=-1)
    else:  # the intact weights with the share dropped: those rows now sum to less than 1
        weights = scores.masked_fill(~mask, float("-inf")).softmax(dim=-1).masked_fill(hidden, 0.0)
    out = p.out_proj((weights @ values).transpose(1, 2).reshape(N, L, h * d))
    return (out, (k, v), weights) if need_weights else (out, (k, v))


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
    try:
        for module in modules:
            module._blocked_key = (key, bool(renormalize))
            module.forward = types.MethodType(_forward_without_key, module)  # shadows the class's forward
        yield model
    finally:
        for module in modules:
            module.__dict__.pop("forward", None)
            module.__dict__.pop("_blocked_key", None)


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
