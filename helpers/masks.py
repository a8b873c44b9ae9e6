"""Masks: which keys each query may read, in one convention, **True = blocked**.

Every mask this module builds is boolean and **True where attention is blocked** (a future key, one beyond a
sliding window, a padding position): the meaning of ``attn_mask`` and ``key_padding_mask`` in
``torch.nn.MultiheadAttention``, whose arguments the course's front ends mirror. A float mask is added to the
scores (``-inf`` blocks) and means the same everywhere.

One edge takes the other convention, because it mirrors ``torch.nn.functional.scaled_dot_product_attention``
and hands its mask to that kernel unchanged: a boolean mask given to ``helpers.attention``'s
``scaled_dot_product_attention``, ``masked_softmax``, ``attend`` and ``AttentionCore.attend_heads`` (and so to
a ``weights_from_scores`` hook) is **True where a query may attend**. ``sdpa_mask`` (and, for a padding mask
of one entry per key, ``sdpa_mask_from_padding``) is the one crossing: it flips a blocked mask into that one.

Shapes, in the course notation: N batch, L queries, S keys (T when a sequence attends to itself), h heads.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = [
    "causal_mask",
    "causal_mask_at",
    "merge_masks",
    "padding_mask",
    "sdpa_mask",
    "sdpa_mask_from_padding",
    "sliding_window_mask",
    "streaming_mask",
    "streaming_mask_at",
]


def causal_mask(size: int, device: torch.device | str | None = None) -> Tensor:
    """Boolean (L, L) mask that is **True where attention is blocked** (True = blocked): above the diagonal.

    Query position ``i`` may look at key positions ``0..i`` only. This is the meaning of
    ``attn_mask`` in ``nn.MultiheadAttention``; for ``F.scaled_dot_product_attention`` (True =
    take part) pass ``~causal_mask(L)``.
    """
    if size < 1:
        raise ValueError(f"causal_mask needs a positive size, got {size}")
    return torch.ones(size, size, dtype=torch.bool, device=device).triu(diagonal=1)


def sliding_window_mask(size: int, window: int, device: torch.device | str | None = None) -> Tensor:
    """Boolean (L, L) mask that is **True where attention is blocked** (True = blocked): the future and the distant
    past.

    Query position ``i`` may look at key positions ``i - window + 1 .. i`` only: itself and the
    ``window - 1`` positions before it (a causal mask with a window; ``window >= size`` gives
    ``causal_mask(size)``). As ``causal_mask``, this is the meaning of ``attn_mask`` in
    ``nn.MultiheadAttention``; for ``F.scaled_dot_product_attention`` (True = take part) pass
    ``~sliding_window_mask(L, window)``.
    """
    if size < 1 or window < 1:
        raise ValueError(f"sliding_window_mask needs a positive size and window, got size={size}, window={window}")
    return causal_mask_at(torch.arange(size, device=device), size, window)  # queries at 0 .. L - 1


def causal_mask_at(query_positions: Tensor, num_keys: int, window: int | None = None) -> Tensor:
    """Boolean (L, T) mask that is **True where attention is blocked** (True = blocked), for L queries at
    ``query_positions`` (L,) over the keys at positions 0 .. T - 1 (``num_keys`` = T).

    The query at position p may read keys 0 .. p (causal) and, with a ``window``, only keys p - window + 1 .. p.
    A decoder with a cache asks this of its newest L tokens, which sit at the end (positions T - L .. T - 1): a
    top-left aligned ``is_causal=True`` would let the one new query of a cached step see only the first key.
    For queries at 0 .. T - 1 it is ``causal_mask(T)`` (or ``sliding_window_mask(T, window)``)."""
    if not isinstance(query_positions, Tensor) or query_positions.dim() != 1:
        shape = tuple(query_positions.shape) if isinstance(query_positions, Tensor) else type(query_positions).__name__
        raise ValueError(f"query_positions must be a 1-D tensor (L,) of positions, got {shape}")
    if isinstance(num_keys, bool) or not isinstance(num_keys, int) or num_keys < 0:
        raise ValueError(f"num_keys (T) must be an int >= 0, got {num_keys!r}")
    if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 1):
        raise ValueError(f"window must be a positive int number of tokens or None, got {window!r}")
    offset = query_positions[:, None] - torch.arange(num_keys, device=query_positions.device)  # (L, T)
    blocked = offset < 0  # a key after the query
    if window is not None:
        blocked |= offset >= window  # a key further back than the window reaches
    return blocked


def streaming_mask(size: int, window: int, sinks: int, device: torch.device | str | None = None) -> Tensor:
    """Boolean (L, L) mask that is **True where attention is blocked** (True = blocked): StreamingLLM's window
    with ``sinks`` first tokens kept (Xiao et al. 2023). Query ``i`` may read key ``j <= i`` when ``j > i - window``
    (the window) or ``j < sinks`` (the first tokens, "attention sinks"). ``sinks=0`` gives
    ``sliding_window_mask(size, window)``; ``window >= size`` gives ``causal_mask(size)``."""
    if size < 1:
        raise ValueError(f"streaming_mask needs a positive size, got {size}")
    return streaming_mask_at(torch.arange(size, device=device), size, window, sinks)


def streaming_mask_at(query_positions: Tensor, num_keys: int, window: int, sinks: int) -> Tensor:
    """Boolean (L, T) mask that is **True where attention is blocked** (True = blocked), for L queries at
    ``query_positions`` (L,) over keys at positions 0 .. T - 1: ``causal_mask_at(query_positions, T, window)``
    with the keys at positions 0 .. ``sinks`` - 1 open again to every query at or after them."""
    if isinstance(sinks, bool) or not isinstance(sinks, int) or sinks < 0:
        raise ValueError(f"sinks must be an int >= 0 (how many first tokens every query keeps), got {sinks!r}")
    if window is None:
        raise ValueError("window must be a positive int number of tokens (a streaming mask has a window), got None")
    blocked = causal_mask_at(query_positions, num_keys, window)  # (L, T): the future and beyond the window
    first = torch.arange(num_keys, device=query_positions.device) < sinks  # (T,): the sink keys
    future = query_positions[:, None] < torch.arange(num_keys, device=query_positions.device)  # (L, T)
    return blocked & ~(first & ~future)  # a sink stays blocked only for the queries before it


def sdpa_mask(blocked: Tensor) -> Tensor:
    """A boolean mask **True = blocked** (this module's) -> the same mask **True = may attend**, the convention of
    ``F.scaled_dot_product_attention`` and of the attention core (``helpers.attention.attend``). Any shape."""
    if not isinstance(blocked, Tensor) or blocked.dtype != torch.bool:
        got = blocked.dtype if isinstance(blocked, Tensor) else type(blocked).__name__
        raise TypeError(f"sdpa_mask flips a boolean mask (True = blocked), got {got}")
    return ~blocked


def padding_mask(lengths: Tensor | list[int], max_len: int | None = None) -> Tensor:
    """Boolean (N, S) mask that is **True at padding positions** (to be ignored): True = blocked, as every mask here.

    ``lengths[n]`` is the number of real tokens in sequence ``n``; positions ``>= lengths[n]`` are
    padding. This is the meaning of ``key_padding_mask`` in ``nn.MultiheadAttention``.
    """
    lengths = torch.as_tensor(lengths)
    if lengths.dim() != 1:
        raise ValueError(f"padding_mask expects a 1-D tensor of lengths (N,), got shape {tuple(lengths.shape)}")
    if (lengths < 0).any():
        raise ValueError("padding_mask lengths must be non-negative")
    max_len = int(lengths.max()) if max_len is None else max_len
    if lengths.numel() and int(lengths.max()) > max_len:
        raise ValueError(f"a length {int(lengths.max())} exceeds max_len={max_len}")
    positions = torch.arange(max_len, device=lengths.device)  # (S,)
    return positions[None, :] >= lengths[:, None]  # (N, S)


def sdpa_mask_from_padding(key_padding_mask: Tensor) -> Tensor:
    """Turn a (N, S) padding mask (**True = padding**, i.e. True = blocked) into a (N, 1, S) sdpa mask
    (**True = may attend**).

    The padding mask has one entry per key and every query of a sentence uses the same one, so the
    result has a query dimension of size 1 that broadcasts over the L queries of (N, L, S) scores.
    For per-head scores (N, h, L, S) add the head dimension: ``.unsqueeze(1)`` -> (N, 1, 1, S).
    """
    if key_padding_mask.dim() != 2 or key_padding_mask.dtype != torch.bool:
        raise ValueError(
            f"expected a boolean (N, S) key padding mask, got {key_padding_mask.dtype} "
            f"of shape {tuple(key_padding_mask.shape)}"
        )
    return ~key_padding_mask[:, None, :]  # (N, S) -> (N, 1, S), flipped


def merge_masks(
    attn_mask: Tensor | None,
    key_padding_mask: Tensor | None,
    N: int,
    num_heads: int,
    L: int,
    S: int,
    dtype: torch.dtype,
) -> Tensor | None:
    """Combine ``nn.MultiheadAttention``-style masks into one float mask to add to the scores.

    attn_mask: (L, S) or (N*h, L, S); key_padding_mask: (N, S); bool True = blocked, float = added.
    Returns None or a float mask of shape (N or 1, h or 1, L, S), ``-inf`` where blocked.
    """
    mask = None
    expected: tuple[int, ...] | str  # the shape attn_mask should have, or the shapes it may have
    if attn_mask is not None:
        if attn_mask.dim() == 2:
            expected = (L, S)
            ok = tuple(attn_mask.shape) == expected
            shaped = attn_mask.view(1, 1, L, S) if ok else None
        elif attn_mask.dim() == 3:
            expected = (N * num_heads, L, S)
            ok = tuple(attn_mask.shape) == expected
            shaped = attn_mask.view(N, num_heads, L, S) if ok else None
        else:
            expected, ok = "(L, S) or (N*num_heads, L, S)", False
        if not ok:
            raise ValueError(
                f"attn_mask should have shape {expected} = (L, S) or (N*num_heads, L, S) with L={L}, S={S}, "
                f"N={N}, num_heads={num_heads}; got {tuple(attn_mask.shape)}"
            )
        assert shaped is not None, "ok: attn_mask had a shape it could be viewed as"
        mask = _blocked_to_additive(shaped, "attn_mask", dtype)
    if key_padding_mask is not None:
        if tuple(key_padding_mask.shape) != (N, S):
            raise ValueError(
                f"key_padding_mask should have shape (N, S) = ({N}, {S}), got {tuple(key_padding_mask.shape)}"
            )
        padding = _blocked_to_additive(key_padding_mask.view(N, 1, 1, S), "key_padding_mask", dtype)
        mask = padding if mask is None else mask + padding
    return mask


def _blocked_to_additive(mask: Tensor, name: str, dtype: torch.dtype) -> Tensor:
    """Torch-MHA-style mask (bool True = blocked, or float) -> float mask added to the scores."""
    if mask.dtype == torch.bool:
        return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(mask, float("-inf"))
    if mask.is_floating_point():
        return mask.to(dtype)
    raise TypeError(f"{name} must be bool (True = blocked) or floating point (added to scores), got {mask.dtype}")
