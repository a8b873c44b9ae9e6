"""Checks for lesson 05's exercises: a residual block (post-norm and pre-norm); a decoder layer's forward.

Shapes (batch first): N batch, L target length, S source length, E embedding size.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from functools import partial

import torch
from torch import Tensor, nn

from course.check_inputs import MatrixThenActivation, StandInDropout  # built here, rebuilt in a graded kernel
from course.exercises.feedback import (
    LearnerError,
    Verdict,
    as_tensor,
    call_learner,
    close,
    diagnose_cases,
    expect_shape,
    learner_check,
    run_check,
    wrong,
)
from course.exercises.shortcuts import RULE
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


def _block_inputs() -> list[tuple[Tensor, Callable[[Tensor], Tensor], nn.LayerNorm]]:
    """Two blocks (E = 6 and E = 5), each with its own sublayer and a norm with non-trivial γ and β."""
    generator = torch.Generator().manual_seed(50)
    cases: list[tuple[Tensor, Callable[[Tensor], Tensor], nn.LayerNorm]] = []
    for E, activation in ((6, torch.tanh), (5, torch.nn.functional.gelu)):
        x = 3 * torch.randn(2, 4, E, generator=generator, dtype=torch.float64) + 1  # far from normalised, on purpose
        weight = torch.randn(E, E, generator=generator, dtype=torch.float64)
        sublayer = MatrixThenActivation(weight, activation)  # any (N, L, E) -> (N, L, E)
        norm = nn.LayerNorm(E, dtype=torch.float64)
        with torch.no_grad():  # non-trivial scale and shift, so a missing norm is visible
            norm.weight.copy_(1 + 0.5 * torch.randn(E, generator=generator, dtype=torch.float64))
            norm.bias.copy_(0.5 * torch.randn(E, generator=generator, dtype=torch.float64))
        cases.append((x, sublayer, norm))
    return cases


_FORMULA = {
    False: "post-norm (norm_first=False) normalises the SUM of x and the sublayer's output",
    True: "pre-norm (norm_first=True) normalises only the sublayer's INPUT and adds its output to x as it is",
}

# The usual mistakes for each setting of norm_first: hint -> the variant of ``_block`` it computes.
_RESIDUAL_MISTAKES: dict[bool, dict[str, str]] = {
    norm_first: {
        f"with norm_first={norm_first} you computed the other variant: {_FORMULA[norm_first]}.": (
            "post" if norm_first else "pre"
        ),
        f"the residual is missing: add the block's input x back; {_FORMULA[norm_first]}.": (
            "no residual pre" if norm_first else "no residual post"
        ),
        f"the LayerNorm is missing: {_FORMULA[norm_first]}.": "no norm",
        f"the sublayer's output is subtracted: a residual connection ADDS it; {_FORMULA[norm_first]}.": (
            "subtracted pre" if norm_first else "subtracted post"
        ),
        "the normalisation has no γ and β: use the `norm` you are given, not a new LayerNorm or F.layer_norm "
        f"without weights; {_FORMULA[norm_first]}.": ("bare norm pre" if norm_first else "bare norm post"),
        # where the norm goes wrong, by variant: each hint names the line the learner wrote
        **(
            {
                "the residual path carries the NORMALISED x: in pre-norm only the sublayer's input is normalised; "
                "add the original x, so that the residual path stays a clean identity.": ("normed residual"),
                "the sum is normalised as well: pre-norm normalises only the sublayer's input; the block's output "
                "is not normalised.": "norm twice",
                "the sublayer's OUTPUT is normalised: pre-norm normalises its INPUT.": "norm sublayer only",
            }
            if norm_first
            else {
                "only the sublayer's output is normalised: post-norm normalises the SUM of x and that output.": (
                    "norm sublayer only"
                ),
                "the block's input is normalised before the sublayer as well: post-norm normalises only the SUM "
                "of x and the sublayer's output.": "norm twice",
            }
        ),
    }
    for norm_first in (False, True)
}


def _call_block(residual_block, x, sublayer, norm, norm_first: bool) -> Tensor:
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
    return answer


@learner_check
def check_residual_block(residual_block: Callable[..., Tensor]) -> Verdict:
    """Check ``residual_block(x, sublayer, norm, norm_first)`` -> (N, L, E) for both settings of norm_first."""

    def body() -> str:
        cases = _block_inputs()
        kept = copy.deepcopy(cases)  # the expected values' own modules: beyond the reach of the learner's call
        for norm_first, right in ((False, "post"), (True, "pre")):
            answers = [_call_block(residual_block, *case, norm_first) for case in cases]
            with torch.no_grad():
                if all(close(a, _block(*case, right)) for a, case in zip(answers, kept, strict=True)):
                    continue
                tables = [
                    {hint: _block(*case, variant) for hint, variant in _RESIDUAL_MISTAKES[norm_first].items()}
                    for case in kept
                ]
            fallback = f"the shape is right but the numbers differ from the block's: {_FORMULA[norm_first]}."
            raise diagnose_cases(answers, tables, fallback)
        return "both variants are right: post-norm normalises the sum, pre-norm only the sublayer's input."

    return run_check("residual block", body)


# ---------------------------------------------------------------------------------------------
# Exercise 2: the decoder layer's forward pass (post-norm, PyTorch's default)
# ---------------------------------------------------------------------------------------------
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
    x = tgt
    for block, norm, i in blocks:
        pre_norm = mistake == "pre-norm"
        carried = tgt if mistake == f"residual from tgt {i}" else x  # the residual adds the block's own input
        x = x + block(norm(x)) if pre_norm else norm((carried if residual[i] else 0) + block(x))
    return x


# The usual mistakes: hint -> the name ``_decoder_variant`` knows it by.
_DECODER_MISTAKES: dict[str, str] = {
    "the norms are applied first (pre-norm). This layer is post-norm (norm_first=False, PyTorch's default): "
    "x = norm(x + block(x)).": "pre-norm",
    "the causal mask is not used: pass `attn_mask=tgt_mask` to the self-attention, or each target token sees the "
    "words after it.": "no causal mask",
    "the causal mask is inverted: `tgt_mask` is already True where a key is BLOCKED (above the diagonal), the "
    "convention of nn.MultiheadAttention's attn_mask; pass it as it is, `attn_mask=tgt_mask`. Inverted, each token "
    "may look only at the tokens after it, and the last one at none (its row is NaN).": "inverted causal mask",
    "the memory's padding mask is inverted: `memory_key_padding_mask` is True at padding, which is what "
    "`key_padding_mask` expects; pass it as it is, without `~`.": "inverted memory padding",
    "the memory's padding mask is not used: pass `key_padding_mask=memory_key_padding_mask` to the "
    "cross-attention.": "no memory padding",
    "the cross-attention attends over the target: its queries come from x, but its keys and values are the "
    "encoder's `memory`.": "cross over target",
    "the residual around the self-attention is missing: x = layer.norm1(x + self-attention(x)).": "no residual 1",
    "the residual around the cross-attention is missing: x = layer.norm2(x + cross-attention(x, memory)).": (
        "no residual 2"
    ),
    "the residual around the feed-forward network is missing: x = layer.norm3(x + feed_forward(x)).": "no residual 3",
    "the feed-forward network has no activation: linear2(dropout(activation(linear1(x)))).": "no activation",
    "no dropout is applied: each sub-block's output goes through its own dropout (dropout1, dropout2, dropout3) "
    "before the residual sum, and the feed-forward network has `layer.dropout` after the activation.": "no dropouts",
    "layer.dropout1 is missing: apply it to the self-attention's output before adding the residual.": "no dropout1",
    "layer.dropout2 is missing: apply it to the cross-attention's output before adding the residual.": "no dropout2",
    "layer.dropout3 is missing: apply it to the feed-forward output before adding the residual.": "no dropout3",
    "the feed-forward network's inner dropout is missing: linear2(dropout(activation(linear1(x)))).": "no dropout",
    "every sub-block uses layer.norm1: each has its own LayerNorm, norm1, norm2 and norm3 in turn.": (
        "norm1 everywhere"
    ),
    "the cross-attention's block uses layer.norm1: its sum goes through layer.norm2.": "norm1 in block 2",
    "the feed-forward block uses layer.norm1: its sum goes through layer.norm3.": "norm1 in block 3",
    "the cross-attention's residual adds `tgt`, the layer's input: it must add its own input, the x that came out "
    "of the self-attention block.": "residual from tgt 2",
    "the feed-forward's residual adds `tgt`, the layer's input: it must add its own input, the x that came out of "
    "the cross-attention block.": "residual from tgt 3",
}

_ORDER_HINT = (
    "the sub-blocks are in the wrong order (your code called {called}): masked self-attention first, then "
    "cross-attention over the memory, then the feed-forward network, each x = norm_i(x + dropout_i(block(x)))."
)
# The sub-blocks by the part each one starts with, and the line a learner writes for it.
_SUB_BLOCKS = {
    "self_attn": "the self-attention block, x = norm1(x + dropout1(self_attn(x, x, x, attn_mask=tgt_mask)[0]))",
    "multihead_attn": "the cross-attention block, x = norm2(x + dropout2(multihead_attn(x, memory, memory, "
    "key_padding_mask=memory_key_padding_mask)[0]))",
    "linear1": "the feed-forward block, x = norm3(x + dropout3(linear2(dropout(activation(linear1(x))))))",
}


# (part, the tensor it was given, None if it was given only keywords), in the order the parts ran
Calls = list[tuple[str, Tensor | None]]


def _record_sub_blocks(layer: nn.TransformerDecoderLayer) -> tuple[Calls, Callable[[], None]]:
    """Record (part, the tensor it was given) each time a sub-block's first part runs; returns the list and undo."""
    seen: Calls = []
    handles = [
        getattr(layer, name).register_forward_pre_hook(
            lambda module, args, name=name: seen.append((name, args[0].detach().clone() if args else None))
        )
        for name in _SUB_BLOCKS
    ]

    def undo() -> None:
        for handle in handles:
            handle.remove()

    return seen, undo


def _first_wrong_sub_block(seen: Calls, reference: Calls) -> str:
    """The first sub-block whose result differs: the input of the part after it differs from the reference's."""
    ours = dict(seen[::-1])  # the first call of each part
    order = list(_SUB_BLOCKS)
    for index, (name, given) in enumerate(reference):
        # A part given only keywords recorded None, which close cannot compare (it raises): a known gap, left as
        # it is here because handling it would change what the check says.
        if name in ours and not close(ours[name], given):  # type: ignore[arg-type]
            return order[max(index - 1, 0)] if index else order[0]
    return order[-1]


def _call_decoder(decoder_layer_forward, layer, tgt, memory, tgt_mask, memory_padding) -> Tensor:
    """The learner's output, with hints for the usual errors (a tuple used as a tensor, a mask in the wrong place)."""
    try:
        result = call_learner(
            decoder_layer_forward, layer, tgt.clone(), memory.clone(), tgt_mask.clone(), memory_padding.clone()
        )
    except LearnerError as problem:
        message = str(problem.error)
        if isinstance(problem.error, TypeError) and ("tuple" in message or "sequence" in message):
            raise wrong(
                "nn.MultiheadAttention returns a tuple (output, weights), and your code used the whole tuple as a "
                f"tensor ({type(problem.error).__name__}: {message}). Take the output, "
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
                f"the shapes do not fit ({message}). The cross-attention's queries come from the decoder, its keys "
                "and values from the memory: `layer.multihead_attn(x, memory, memory, ...)` returns one row per "
                "target token, (N, L, E), which can be added to x."
            ) from None
        raise
    if isinstance(result, tuple):
        raise wrong("return only the layer's output tensor (N, L, E), not a tuple.")
    answer = as_tensor(result, "the output")
    expect_shape(answer, tgt.shape, "the output", "(N, L, E)")
    return answer


@learner_check
def check_decoder_layer_forward(decoder_layer_forward: Callable[..., Tensor]) -> Verdict:
    """Check ``decoder_layer_forward(layer, tgt, memory, tgt_mask, memory_key_padding_mask)`` -> (N, L, E).

    ``layer`` is a batch-first, post-norm ``nn.TransformerDecoderLayer``; the answer must equal
    ``layer(tgt, memory, tgt_mask=..., memory_key_padding_mask=...)``, written with the layer's parts.
    The check swaps the layer's dropouts for stand-ins that scale by fixed factors, so it can tell
    where each one was applied, and watches which part each sub-block starts with, so it can tell
    their order and name the first sub-block that went wrong.
    """

    def body() -> str:
        layer, tgt, memory, tgt_mask, memory_padding = _decoder_inputs()
        kept = copy.deepcopy(layer)  # the expected values' own layer: beyond the reach of the learner's call
        called_whole_layer = []
        hook = layer.register_forward_pre_hook(lambda module, args: called_whole_layer.append(True))
        seen, undo = _record_sub_blocks(layer)
        try:
            answer = _call_decoder(decoder_layer_forward, layer, tgt, memory, tgt_mask, memory_padding)
        finally:
            hook.remove()
            undo()
        if called_whole_layer:
            raise wrong(
                "you called the layer itself, which does this whole exercise in one call: write the three "
                f"sub-blocks with its parts (layer.self_attn, ...). {RULE}"
            )
        called = list(dict.fromkeys(name for name, _ in seen))
        if called != list(_SUB_BLOCKS)[: len(called)]:
            raise wrong(_ORDER_HINT.format(called=" -> ".join(called)))
        with torch.no_grad():
            reference, undo = _record_sub_blocks(kept)
            expected = kept(tgt, memory, tgt_mask=tgt_mask, memory_key_padding_mask=memory_padding)
            undo()
            if close(answer, expected):
                return (
                    "masked self-attention, cross-attention over the memory, feed-forward; "
                    "each dropout, residual and norm in place."
                )
            inputs = (kept, tgt, memory, tgt_mask, memory_padding)
            table = {hint: partial(_decoder_variant, *inputs, mistake) for hint, mistake in _DECODER_MISTAKES.items()}
            block = _SUB_BLOCKS[_first_wrong_sub_block(seen, reference)]
            fallback = (
                "the shape is right but the numbers differ from nn.TransformerDecoderLayer's. The first sub-block "
                f"whose result differs is {block}."
            )
            raise diagnose_cases([answer], [table], fallback)

    return run_check("decoder layer forward", body)
