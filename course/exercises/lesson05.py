"""Checks for lesson 05's exercises: a residual block (post-norm and pre-norm); a decoder layer's forward.

Shapes (batch first): N batch, L target length, S source length, E embedding size.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from course.exercises.feedback import (
    LearnerError,
    Verdict,
    as_tensor,
    call_learner,
    close,
    diagnose,
    expect_shape,
    run_check,
    wrong,
)
from helpers.attention import causal_mask

__all__ = ["StandInDropout", "check_decoder_layer_forward", "check_residual_block"]


# ---------------------------------------------------------------------------------------------
# Exercise 1: a residual block, post-norm or pre-norm
# ---------------------------------------------------------------------------------------------
def _block(x: Tensor, sublayer, norm, variant: str) -> Tensor:
    """The right answers ("post", "pre") and the usual wrong ones, by name."""
    return {
        "post": lambda: norm(x + sublayer(x)),  # the original transformer, PyTorch's default
        "pre": lambda: x + sublayer(norm(x)),
        "no residual post": lambda: norm(sublayer(x)),
        "no residual pre": lambda: sublayer(norm(x)),
        "no norm": lambda: x + sublayer(x),
        "normed residual": lambda: norm(x) + sublayer(norm(x)),
        "norm twice": lambda: norm(x + sublayer(norm(x))),
        "norm sublayer only": lambda: x + norm(sublayer(x)),
        "subtracted post": lambda: norm(x - sublayer(x)),
        "subtracted pre": lambda: x - sublayer(norm(x)),
        # a new LayerNorm (or F.layer_norm without weights): normalised, but without the given γ and β
        "bare norm post": lambda: _bare_norm(x + sublayer(x)),
        "bare norm pre": lambda: x + sublayer(_bare_norm(x)),
    }[variant]()


def _bare_norm(t: Tensor) -> Tensor:
    return torch.nn.functional.layer_norm(t, t.shape[-1:])


def _block_inputs() -> tuple[Tensor, Callable[[Tensor], Tensor], nn.LayerNorm]:
    generator = torch.Generator().manual_seed(50)
    E = 6
    x = 3 * torch.randn(2, 4, E, generator=generator, dtype=torch.float64) + 1  # far from normalised, on purpose
    weight = torch.randn(E, E, generator=generator, dtype=torch.float64)

    def sublayer(t: Tensor) -> Tensor:  # any function (N, L, E) -> (N, L, E) will do
        return torch.tanh(t @ weight)

    norm = nn.LayerNorm(E, dtype=torch.float64)
    with torch.no_grad():  # non-trivial scale and shift, so a missing norm is visible
        norm.weight.copy_(1 + 0.5 * torch.randn(E, generator=generator, dtype=torch.float64))
        norm.bias.copy_(0.5 * torch.randn(E, generator=generator, dtype=torch.float64))
    return x, sublayer, norm


def check_residual_block(residual_block: Callable[..., Tensor]) -> Verdict:
    """Check ``residual_block(x, sublayer, norm, norm_first)`` -> (N, L, E) for both settings of norm_first."""

    def body() -> str:
        x, sublayer, norm = _block_inputs()
        for norm_first, right, other in [(False, "post", "pre"), (True, "pre", "post")]:
            try:
                result = call_learner(residual_block, x.clone(), sublayer, norm, norm_first)
            except LearnerError as problem:
                if "mixed dtype" in str(problem.error):
                    raise wrong(
                        f"your code made a LayerNorm of its own ({problem.error}): use the `norm` you are given, "
                        "whose learned γ and β belong to the block."
                    ) from None
                raise
            answer = as_tensor(result, f"residual_block(..., norm_first={norm_first})")
            expect_shape(answer, x.shape, f"residual_block(x, ..., norm_first={norm_first})", "(N, L, E)")
            with torch.no_grad():
                expected = _block(x, sublayer, norm, right)
                if close(answer, expected):
                    continue
                which = "post-norm (norm_first=False)" if not norm_first else "pre-norm (norm_first=True)"
                formula = "norm(x + sublayer(x))" if not norm_first else "x + sublayer(norm(x))"
                mistakes = {
                    f"with norm_first={norm_first} you computed the other variant. {which} is {formula}.": _block(
                        x, sublayer, norm, other
                    ),
                    f"the residual is missing: add the block's input x back, {formula}.": _block(
                        x, sublayer, norm, "no residual post" if not norm_first else "no residual pre"
                    ),
                    f"the LayerNorm is missing: {which} is {formula}.": _block(x, sublayer, norm, "no norm"),
                    "the residual path carries the NORMALISED x: in pre-norm only the sublayer's input is normalised; "
                    "add the original x, x + sublayer(norm(x)), so the residual path stays a clean identity.": _block(
                        x, sublayer, norm, "normed residual"
                    ),
                    "the sum is normalised as well: pre-norm normalises only the sublayer's input, "
                    "x + sublayer(norm(x)); the output is not normalised.": _block(x, sublayer, norm, "norm twice"),
                    "only the sublayer's output is normalised: post-norm normalises the SUM, norm(x + "
                    "sublayer(x)).": _block(x, sublayer, norm, "norm sublayer only"),
                    f"the sublayer's output is subtracted: a residual connection ADDS it, {formula}.": _block(
                        x, sublayer, norm, "subtracted pre" if norm_first else "subtracted post"
                    ),
                    "the normalisation has no γ and β: use the `norm` you are given, not a new LayerNorm or "
                    f"F.layer_norm without weights; {which} is {formula}.": _block(
                        x, sublayer, norm, "bare norm pre" if norm_first else "bare norm post"
                    ),
                }
            raise diagnose(answer, mistakes, f"the shape is right but the numbers differ from {which}, {formula}.")
        return "post-norm norm(x + sublayer(x)) and pre-norm x + sublayer(norm(x))."

    return run_check("residual block", body)


# ---------------------------------------------------------------------------------------------
# Exercise 2: the decoder layer's forward pass (post-norm, PyTorch's default)
# ---------------------------------------------------------------------------------------------
class StandInDropout(nn.Module):
    """Multiplies by a fixed factor: stands in for a dropout so a check can see where it was applied."""

    def __init__(self, factor: float) -> None:
        super().__init__()
        self.factor = factor

    def forward(self, x: Tensor) -> Tensor:
        if isinstance(x, tuple):  # the usual slip: an attention's (output, weights) passed on whole
            raise TypeError(f"{type(self).__name__} got a tuple, not a tensor")
        return x * self.factor

    def extra_repr(self) -> str:
        return f"factor={self.factor}"


_DROPOUT_FACTORS = {"dropout": 0.9, "dropout1": 0.8, "dropout2": 0.7, "dropout3": 0.6}


def _decoder_inputs():
    """A batch-first post-norm decoder layer with stand-in dropouts, and inputs with L != S."""
    torch.manual_seed(51)
    E, h, N, L, S = 8, 2, 2, 4, 5
    layer = nn.TransformerDecoderLayer(E, h, dim_feedforward=16, dropout=0.0, batch_first=True, dtype=torch.float64)
    with torch.no_grad():
        for p in layer.parameters():
            p.add_(0.2 * torch.randn_like(p))
    for name, factor in _DROPOUT_FACTORS.items():
        setattr(layer, name, StandInDropout(factor))
    layer.train()  # training mode, so the dropouts (here: the stand-ins) are used, as when training
    generator = torch.Generator().manual_seed(52)
    tgt = torch.randn(N, L, E, generator=generator, dtype=torch.float64)
    memory = torch.randn(N, S, E, generator=generator, dtype=torch.float64)
    memory_padding = torch.tensor([[False] * S, [False] * (S - 2) + [True] * 2])  # True = padding
    return layer, tgt, memory, causal_mask(L), memory_padding


def _decoder_variant(
    layer: nn.TransformerDecoderLayer, tgt, memory, tgt_mask, memory_padding, mistake: str = ""
) -> Tensor:
    """The decoder layer's post-norm forward written out, with one named mistake switched on."""
    drop = {
        name: (lambda t: t) if mistake in (f"no {name}", "no dropouts") else getattr(layer, name)
        for name in _DROPOUT_FACTORS
    }
    activation = (lambda t: t) if mistake == "no activation" else layer.activation
    residual = {i: mistake != f"no residual {i}" for i in (1, 2, 3)}
    norms = {1: layer.norm1, 2: layer.norm2, 3: layer.norm3}
    if mistake == "norm1 everywhere":
        norms = {1: layer.norm1, 2: layer.norm1, 3: layer.norm1}
    elif mistake.startswith("norm1 in block "):
        norms[int(mistake[-1])] = layer.norm1

    def self_block(x):
        mask = {"no causal mask": None, "inverted causal mask": ~tgt_mask}.get(mistake, tgt_mask)
        return drop["dropout1"](layer.self_attn(x, x, x, attn_mask=mask, need_weights=False)[0])

    def cross_block(x):
        source = x if mistake == "cross over target" else memory
        padding = None if mistake in ("no memory padding", "cross over target") else memory_padding
        padding = ~memory_padding if mistake == "inverted memory padding" else padding
        return drop["dropout2"](
            layer.multihead_attn(x, source, source, key_padding_mask=padding, need_weights=False)[0]
        )

    def ff_block(x):
        return drop["dropout3"](layer.linear2(drop["dropout"](activation(layer.linear1(x)))))

    blocks = [(self_block, norms[1], 1), (cross_block, norms[2], 2), (ff_block, norms[3], 3)]
    if mistake == "cross before self":
        blocks[0], blocks[1] = (cross_block, layer.norm1, 1), (self_block, layer.norm2, 2)
    x = tgt
    for block, norm, i in blocks:
        pre_norm = mistake == "pre-norm"
        carried = tgt if mistake == f"residual from tgt {i}" else x  # the residual adds the block's own input
        x = x + block(norm(x)) if pre_norm else norm((carried if residual[i] else 0) + block(x))
    return x


def check_decoder_layer_forward(decoder_layer_forward: Callable[..., Tensor]) -> Verdict:
    """Check ``decoder_layer_forward(layer, tgt, memory, tgt_mask, memory_key_padding_mask)`` -> (N, L, E).

    ``layer`` is a batch-first, post-norm ``nn.TransformerDecoderLayer``; the answer must equal
    ``layer(tgt, memory, tgt_mask=..., memory_key_padding_mask=...)``, written with the layer's parts.
    The check swaps the layer's dropouts for stand-ins that scale by fixed factors, so it can tell
    where each one was applied.
    """

    def body() -> str:
        layer, tgt, memory, tgt_mask, memory_padding = _decoder_inputs()
        called_whole_layer = []
        hook = layer.register_forward_pre_hook(lambda module, args: called_whole_layer.append(True))
        try:
            result = call_learner(
                decoder_layer_forward, layer, tgt.clone(), memory.clone(), tgt_mask.clone(), memory_padding.clone()
            )
        except LearnerError as problem:
            message = str(problem.error)
            if isinstance(problem.error, TypeError) and ("tuple" in message or "sequence" in message):
                raise wrong(
                    "nn.MultiheadAttention returns a tuple (output, weights), and your code used the whole tuple "
                    f"as a tensor ({type(problem.error).__name__}: {message}). Take the output, "
                    "`layer.self_attn(x, x, x, ...)[0]` (and the same for `layer.multihead_attn`)."
                ) from None
            if "attn_mask" in message or "key_padding_mask" in message:
                raise wrong(
                    f"a mask went to the wrong attention or argument ({message}). `tgt_mask` (L, L) is the "
                    "self-attention's `attn_mask`; `memory_key_padding_mask` (N, S) is the cross-attention's "
                    "`key_padding_mask`, and the cross-attention takes no causal mask."
                ) from None
            if isinstance(problem.error, RuntimeError) and "must match the size" in message:
                raise wrong(
                    f"the shapes do not fit ({message}). The cross-attention's queries come from the decoder, its "
                    "keys and values from the memory: `layer.multihead_attn(x, memory, memory, ...)` returns one "
                    "row per target token, (N, L, E), which can be added to x."
                ) from None
            raise
        finally:
            hook.remove()
        if called_whole_layer:
            raise wrong(
                "you called the layer itself: write the three sub-blocks with its parts (layer.self_attn, ...)."
            )
        if isinstance(result, tuple):
            raise wrong("return only the layer's output tensor (N, L, E), not a tuple.")
        answer = as_tensor(result, "the output")
        expect_shape(answer, tgt.shape, "the output", "(N, L, E)")
        with torch.no_grad():
            expected = layer(tgt, memory, tgt_mask=tgt_mask, memory_key_padding_mask=memory_padding)
            if close(answer, expected):
                return (
                    "masked self-attention, cross-attention over the memory, feed-forward; "
                    "each dropout, residual and norm in place."
                )
            variant = lambda mistake: _decoder_variant(layer, tgt, memory, tgt_mask, memory_padding, mistake)  # noqa: E731
            mistakes = {
                "the norms are applied first (pre-norm). This layer is post-norm (norm_first=False, PyTorch's "
                "default): "
                "x = norm(x + block(x)).": variant("pre-norm"),
                "the causal mask is not used: pass `attn_mask=tgt_mask` to the self-attention, or each target token "
                "sees the words after it.": variant("no causal mask"),
                "the causal mask is inverted: `tgt_mask` is already True where a key is BLOCKED (above the diagonal), "
                "the convention of nn.MultiheadAttention's attn_mask; pass it as it is, `attn_mask=tgt_mask`. "
                "Inverted, each token may look only at the tokens after it, and the last one at none "
                "(its row is NaN).": variant("inverted causal mask"),
                "the memory's padding mask is inverted: `memory_key_padding_mask` is True at padding, which is "
                "what `key_padding_mask` expects; pass it as it is, without `~`.": variant("inverted memory padding"),
                "the memory's padding mask is not used: pass `key_padding_mask=memory_key_padding_mask` to the "
                "cross-attention.": variant("no memory padding"),
                "the cross-attention attends over the target: its queries come from x, but its keys and values are "
                "the encoder's `memory`.": variant("cross over target"),
                "the sub-blocks are in the wrong order: masked self-attention first, then cross-attention, then "
                "feed-forward.": variant("cross before self"),
                "the residual around the self-attention is missing: x = layer.norm1(x + self-attention(x)).": variant(
                    "no residual 1"
                ),
                "the residual around the cross-attention is missing: x = layer.norm2(x + cross-attention(x, "
                "memory)).": variant("no residual 2"),
                "the residual around the feed-forward network is missing: x = layer.norm3(x + "
                "feed_forward(x)).": variant("no residual 3"),
                "the feed-forward network has no activation: linear2(dropout(activation(linear1(x)))).": variant(
                    "no activation"
                ),
                "no dropout is applied: each sub-block's output goes through its own dropout (dropout1, dropout2, "
                "dropout3) before the residual sum, and the feed-forward network has `layer.dropout` after the "
                "activation.": variant("no dropouts"),
                "layer.dropout1 is missing: apply it to the self-attention's output before adding the "
                "residual.": variant("no dropout1"),
                "layer.dropout2 is missing: apply it to the cross-attention's output before adding the "
                "residual.": variant("no dropout2"),
                "layer.dropout3 is missing: apply it to the feed-forward output before adding the residual.": variant(
                    "no dropout3"
                ),
                "the feed-forward network's inner dropout is missing: "
                "linear2(dropout(activation(linear1(x)))).": variant("no dropout"),
                "every sub-block uses layer.norm1: each has its own LayerNorm, norm1, norm2 and norm3 in "
                "turn.": variant("norm1 everywhere"),
                "the cross-attention's block uses layer.norm1: its sum goes through layer.norm2.": variant(
                    "norm1 in block 2"
                ),
                "the feed-forward block uses layer.norm1: its sum goes through layer.norm3.": variant(
                    "norm1 in block 3"
                ),
                "the cross-attention's residual adds `tgt`, the layer's input: it must add its own input, the "
                "x that came out of the self-attention block.": variant("residual from tgt 2"),
                "the feed-forward's residual adds `tgt`, the layer's input: it must add its own input, the "
                "x that came out of the cross-attention block.": variant("residual from tgt 3"),
            }
        raise diagnose(
            answer,
            mistakes,
            "the shape is right but the numbers differ from nn.TransformerDecoderLayer's. Check each sub-block: "
            "x = norm(x + dropout_i(block(x))).",
        )

    return run_check("decoder layer forward", body)
