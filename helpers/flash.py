"""Online softmax and tiled ("flash") attention in plain PyTorch: attention that never holds the (L, S) scores.

Shapes, in the course notation: N batch, h heads, L query length, S key/value length, d query/key size,
dv value size; ``...`` is any number of batch dimensions in front (usually (N, h)). New letters here:
Bk the number of scores in one block of keys, Bq the number of queries in one tile.

The idea (Milakov & Gimelshein 2018 for the softmax; Dao et al. 2022 for attention): a softmax needs the
maximum and the sum of exponentials of its whole row, but both can be kept *running*. After each new block of
scores, the running maximum may grow; everything accumulated so far was computed against the old maximum, so
it is multiplied by ``exp(old_max - new_max)`` and the block is added. At the end, one division by the running
sum gives exactly the softmax, or exactly ``softmax(scores) @ V`` when the accumulator sums weighted values.

Masks follow ``torch.nn.functional.scaled_dot_product_attention``: a boolean ``attn_mask`` is **True where a
query may attend**; a float mask is added to the scores.
"""

from __future__ import annotations

import math
import numbers

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from helpers.attention import check_query_key_value, check_scale

__all__ = ["flash_attention", "online_softmax", "online_softmax_update"]


# ---------------------------------------------------------------------------------------------
# Online softmax
# ---------------------------------------------------------------------------------------------
def online_softmax_update(running_max: Tensor, running_sum: Tensor, block: Tensor) -> tuple[Tensor, Tensor]:
    """Fold one block of scores into a running maximum and a running sum of exponentials.

    Args:
        running_max: (...,) the largest score seen so far (``-inf`` before the first block).
        running_sum: (...,) the sum of ``exp(score - running_max)`` over the scores seen so far (0 at first).
        block: (..., Bk) the next Bk scores of each row.

    Returns:
        ``(new_max, new_sum)``, both (...,): the old sum was computed against the old maximum, so it is
        rescaled by ``exp(running_max - new_max)`` (at most 1) before the block's exponentials are added.
    """
    new_max = torch.maximum(running_max, block.amax(dim=-1))
    # A row whose scores are all -inf so far keeps max -inf; subtracting -inf from -inf is NaN, so such a row
    # uses 0 as its reference instead (its exponentials are all 0 either way).
    reference = torch.where(torch.isneginf(new_max), torch.zeros_like(new_max), new_max)
    rescale = torch.exp(running_max - reference)  # exp(old - new) <= 1: shrink what was summed so far
    new_sum = running_sum * rescale + torch.exp(block - reference[..., None]).sum(dim=-1)
    return new_max, new_sum


def online_softmax(scores: Tensor, block_size: int = 4) -> Tensor:
    """Softmax over the last dimension computed in one pass over blocks of ``block_size`` scores.

    The first pass keeps only a running maximum and a running sum (two numbers per row, whatever the row's
    length); the result then needs only ``exp(score - max) / sum``. Equal to ``torch.softmax(scores, -1)``.
    scores: (..., S) -> (..., S).
    """
    _check_block_size("block_size (scores per block)", block_size)
    if not isinstance(scores, Tensor) or not scores.is_floating_point() or scores.dim() < 1:
        kind = f"{scores.dtype} {tuple(scores.shape)}" if isinstance(scores, Tensor) else type(scores).__name__
        raise TypeError(f"scores must be a real floating-point tensor (..., S), got {kind}")
    running_max = torch.full(scores.shape[:-1], float("-inf"), dtype=scores.dtype, device=scores.device)
    running_sum = torch.zeros_like(running_max)
    for block in scores.split(block_size, dim=-1):
        running_max, running_sum = online_softmax_update(running_max, running_sum, block)
    return torch.exp(scores - running_max[..., None]) / running_sum[..., None]


# ---------------------------------------------------------------------------------------------
# Tiled ("flash") attention
# ---------------------------------------------------------------------------------------------
def flash_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None = None,
    is_causal: bool = False,
    block_size: int = 512,
    scale: float | None = None,
    window: int | None = None,
    query_block_size: int = 256,
) -> Tensor:
    """Scaled dot-product attention over tiles, never materialising the (..., L, S) scores or weights.

    Same arguments, mask meaning and result as ``torch.nn.functional.scaled_dot_product_attention`` (no dropout).
    The queries are cut into tiles of ``query_block_size`` and the keys and values into blocks of ``block_size``;
    each tile walks over the key blocks with an online softmax, so the largest temporary is one (..., Bq, Bk) block
    of scores and the memory grows linearly with L and S. Gradients for query, key and value come from a backward
    pass that recomputes each tile's weights from the rows' saved log-sum-exp, so training is linear in memory too.

    Args:
        query: (..., L, d) queries.
        key:   (..., S, d) keys.
        value: (..., S, dv) values.
        attn_mask: broadcastable to (..., L, S). Boolean: **True = may attend**; float: added to the scores.
        is_causal: query i attends to keys 0..i only (top-left aligned when L != S, as in torch). Key blocks
            wholly above the diagonal are skipped, not computed and masked: that halves the work.
        block_size: keys (and values) per block, Bk.
        scale: factor for the scores; default ``1 / sqrt(d)``.
        window: with ``is_causal``, query i attends only to the ``window`` keys i - window + 1 .. i (sliding-window
            attention); key blocks wholly outside the band are skipped, so the cost grows linearly with L.
        query_block_size: queries per tile, Bq.

    Returns:
        (..., L, dv). A query whose every key is blocked gets a zero output, as in torch.
    """
    _check_arguments(query, key, value, attn_mask, is_causal, block_size, window, query_block_size, scale)
    scale = 1.0 / math.sqrt(query.size(-1)) if scale is None else scale
    L, S = query.size(-2), key.size(-2)
    if attn_mask is not None:  # size-1 query or key dims become full views (no copy), so tiles can be sliced
        attn_mask = attn_mask.expand(*attn_mask.shape[:-2], L, S)
    tiling = _Tiling(L, S, query_block_size, block_size, is_causal, window)
    if torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value)):
        # Gradients: a backward that recomputes the tiles instead of keeping them (linear memory here too).
        # Broadcast batch dims first, so that autograd sums the gradients of shared tensors back.
        batch_shape = torch.broadcast_shapes(query.shape[:-2], key.shape[:-2], value.shape[:-2])
        query, key, value = (t.expand(*batch_shape, *t.shape[-2:]) for t in (query, key, value))
        return _FlashAttention.apply(query, key, value, attn_mask, tiling, scale)
    return _forward(query, key, value, attn_mask, tiling, scale)[0]


class _Tiling:
    """Which (query tile, key block) pairs to compute, and which of their (query, key) pairs the causal and
    window rules block. Query tile ``[q_start, q_end)``, key blocks ``[k_start, k_end)``."""

    def __init__(self, L, S, query_block_size, block_size, is_causal, window) -> None:
        self.L, self.S, self.query_block_size, self.block_size = L, S, query_block_size, block_size
        self.is_causal, self.window = is_causal, window

    def tiles(self):
        for q_start in range(0, self.L, self.query_block_size):
            q_end = min(q_start + self.query_block_size, self.L)
            k_first, k_last = _key_range(q_start, q_end, self.S, self.is_causal, self.window)
            blocks = range(k_first - k_first % self.block_size, k_last, self.block_size)
            yield q_start, q_end, [(k_start, min(k_start + self.block_size, k_last)) for k_start in blocks]

    def scores(self, q_tile: Tensor, key: Tensor, attn_mask: Tensor | None, q_start, q_end, k_start, k_end) -> Tensor:
        """The masked scores (..., Bq, Bk) of one tile (``q_tile`` is already scaled)."""
        scores = q_tile @ key[..., k_start:k_end, :].transpose(-2, -1)  # (..., Bq, Bk)
        blocked = _blocked(q_start, q_end, k_start, k_end, self.is_causal, self.window, q_tile.device)  # (Bq, Bk)
        if blocked is not None:
            scores.masked_fill_(blocked, float("-inf"))
        if attn_mask is not None:
            tile_mask = attn_mask[..., q_start:q_end, k_start:k_end]
            if tile_mask.dtype == torch.bool:
                scores.masked_fill_(~tile_mask, float("-inf"))
            else:
                scores.add_(tile_mask)
        return scores


@torch.no_grad()
def _forward(query, key, value, attn_mask, tiling: _Tiling, scale: float) -> tuple[Tensor, Tensor]:
    """Output (..., L, dv) and each row's log-sum-exp of scores (..., L, 1) (+inf for a row with no key)."""
    batch_shape = torch.broadcast_shapes(query.shape[:-2], key.shape[:-2], value.shape[:-2])
    output = query.new_empty(*batch_shape, tiling.L, value.size(-1))  # (..., L, dv), filled tile by tile
    logsumexp = query.new_empty(*batch_shape, tiling.L, 1)  # (..., L, 1), what a backward pass needs
    for q_start, q_end, blocks in tiling.tiles():
        q_tile = query[..., q_start:q_end, :] * scale  # (..., Bq, d): scaling the tile is cheaper than the scores
        running_max = q_tile.new_full((*batch_shape, q_end - q_start, 1), float("-inf"))  # (..., Bq, 1)
        running_sum = q_tile.new_zeros((*batch_shape, q_end - q_start, 1))  # (..., Bq, 1)
        accumulator = q_tile.new_zeros((*batch_shape, q_end - q_start, value.size(-1)))  # (..., Bq, dv)
        for k_start, k_end in blocks:
            scores = tiling.scores(q_tile, key, attn_mask, q_start, q_end, k_start, k_end)  # (..., Bq, Bk)
            # The online softmax: the block's maximum may raise the running one; what was summed against the old
            # maximum shrinks by exp(old - new), in place, then the block's exponentials are added.
            new_max = torch.maximum(running_max, scores.amax(dim=-1, keepdim=True))  # (..., Bq, 1)
            reference = new_max.masked_fill(torch.isneginf(new_max), 0.0)  # a row blocked so far: no NaN
            rescale = torch.exp(running_max - reference)  # (..., Bq, 1), each <= 1
            weights = scores.sub_(reference).exp_()  # (..., Bq, Bk), unnormalised, in the scores' memory
            running_sum.mul_(rescale).add_(weights.sum(dim=-1, keepdim=True))
            accumulator.mul_(rescale).add_(weights @ value[..., k_start:k_end, :])  # (..., Bq, dv)
            running_max = new_max
        # Divide once at the end; a row with no allowed key has sum 0 and accumulator 0: output 0, as in torch.
        output[..., q_start:q_end, :] = accumulator / running_sum.clamp_min(torch.finfo(running_sum.dtype).tiny)
        row_lse = running_max + running_sum.log()  # log Σ exp(scores); -inf (or NaN) for an empty row
        logsumexp[..., q_start:q_end, :] = row_lse.masked_fill(running_sum == 0, float("inf"))  # its weights: 0
    return output, logsumexp


def _first_derivative_only(backward):
    """Refuse create_graph=True at once when the gradient flowing in is a constant (the first gradient of a plain
    sum): ``once_differentiable`` then marks nothing, and the second derivative failed later with torch's bare
    "element 0 of tensors does not require grad". (A gradient that itself requires grad is marked by
    ``once_differentiable``, whose error names the function.) Grad mode is on inside a backward only when it was
    asked to build a graph of the gradients."""

    def checked(ctx, grad_output):
        if torch.is_grad_enabled() and not grad_output.requires_grad:
            raise RuntimeError(
                "flash_attention has first derivatives only: create_graph=True (a second derivative) is not "
                "supported; use helpers.scaled_dot_product_attention for higher-order gradients"
            )
        return backward(ctx, grad_output)

    return checked


class _FlashAttention(torch.autograd.Function):
    """Tiled attention whose backward recomputes each tile's weights from the saved log-sum-exp of every row,
    exp(scores - logsumexp), instead of storing the (L, S) weights. No gradient for a float ``attn_mask``."""

    @staticmethod
    def forward(ctx, query, key, value, attn_mask, tiling, scale):
        output, logsumexp = _forward(query, key, value, attn_mask, tiling, scale)
        ctx.save_for_backward(query, key, value, output, logsumexp)
        ctx.attn_mask, ctx.tiling, ctx.scale = attn_mask, tiling, scale
        return output

    @staticmethod
    @_first_derivative_only
    @once_differentiable  # the backward is itself not differentiable: a second derivative is refused, not wrong
    def backward(ctx, grad_output):
        query, key, value, output, logsumexp = ctx.saved_tensors
        tiling, scale = ctx.tiling, ctx.scale
        grad_query, grad_key, grad_value = torch.zeros_like(query), torch.zeros_like(key), torch.zeros_like(value)
        # d(loss)/d(score) = weight · (d(loss)/d(weight) - Σ_j weight_j · d(loss)/d(weight_j)); that last sum equals
        # the row's dO · O, so it needs no weights: (..., L, 1).
        row_dot = (grad_output * output).sum(dim=-1, keepdim=True)
        for q_start, q_end, blocks in tiling.tiles():
            q_tile = query[..., q_start:q_end, :] * scale  # (..., Bq, d)
            grad_out_tile = grad_output[..., q_start:q_end, :]  # (..., Bq, dv)
            for k_start, k_end in blocks:
                scores = tiling.scores(q_tile, key, ctx.attn_mask, q_start, q_end, k_start, k_end)
                weights = torch.exp(scores - logsumexp[..., q_start:q_end, :])  # (..., Bq, Bk), recomputed
                grad_value[..., k_start:k_end, :] += weights.transpose(-2, -1) @ grad_out_tile
                grad_weights = grad_out_tile @ value[..., k_start:k_end, :].transpose(-2, -1)  # (..., Bq, Bk)
                grad_scores = weights * (grad_weights - row_dot[..., q_start:q_end, :])
                grad_query[..., q_start:q_end, :] += grad_scores @ key[..., k_start:k_end, :] * scale
                grad_key[..., k_start:k_end, :] += grad_scores.transpose(-2, -1) @ q_tile
        return grad_query, grad_key, grad_value, None, None, None


def _key_range(q_start: int, q_end: int, S: int, is_causal: bool, window: int | None) -> tuple[int, int]:
    """The keys [first, last) that some query of the tile q_start..q_end-1 may see."""
    if not is_causal:
        return 0, S
    last = min(q_end, S)  # query i sees keys up to i: the tile's last query sees up to q_end - 1
    first = 0 if window is None else max(0, q_start - window + 1)
    return first, last


def _blocked(q_start, q_end, k_start, k_end, is_causal, window, device) -> Tensor | None:
    """(Bq, Bk) True where the causal or window rule blocks a (query, key) pair of this tile; None if none does."""
    if not is_causal:
        return None
    crosses_diagonal = k_end - 1 > q_start
    leaves_window = window is not None and k_start < q_end - window
    if not (crosses_diagonal or leaves_window):
        return None
    offset = torch.arange(q_start, q_end, device=device)[:, None] - torch.arange(k_start, k_end, device=device)
    blocked = offset < 0  # key after the query
    if window is not None:
        blocked |= offset >= window  # key more than window - 1 positions back
    return blocked


def _check_block_size(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be a positive whole number, got {value!r}")


def _check_arguments(query, key, value, attn_mask, is_causal, block_size, window, query_block_size, scale) -> None:
    check_query_key_value(query, key, value)  # the same check as scaled_dot_product_attention's
    check_scale(scale)
    if is_causal and attn_mask is not None:
        raise ValueError("pass either attn_mask or is_causal=True, not both (as in F.scaled_dot_product_attention)")
    if window is not None:
        if not is_causal:
            raise ValueError(f"window needs is_causal=True, got window={window!r} with is_causal=False")
        _check_block_size("window (a number of keys)", window)
    _check_block_size("block_size", block_size)
    _check_block_size("query_block_size", query_block_size)
    if attn_mask is not None:
        if not isinstance(attn_mask, Tensor) or (attn_mask.dtype != torch.bool and not attn_mask.is_floating_point()):
            kind = attn_mask.dtype if isinstance(attn_mask, Tensor) else type(attn_mask).__name__
            raise TypeError(f"attn_mask must be bool (True = may attend) or float (added), got {kind}")
        if attn_mask.requires_grad:  # the backward pass computes no gradient for the mask: refuse to drop it silently
            raise ValueError(
                "flash_attention gives no gradient for a float attn_mask that requires grad; detach it, or use "
                "helpers.scaled_dot_product_attention, whose mask does get one"
            )
        scores_shape = (*torch.broadcast_shapes(query.shape[:-2], key.shape[:-2]), query.size(-2), key.size(-2))
        try:
            fits = torch.broadcast_shapes(attn_mask.shape, scores_shape) == scores_shape
        except RuntimeError:
            fits = False
        if not fits:
            raise ValueError(
                f"attn_mask of shape {tuple(attn_mask.shape)} does not broadcast to the scores' shape "
                f"{scores_shape} (..., L, S)"
            )
