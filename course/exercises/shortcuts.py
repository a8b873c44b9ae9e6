"""The one rule every exercise of lessons 01-05 states and every check applies: no shortcut, the asked type; and,
from lesson 06 on, no graduated helper (``course.exercises.graduated``). Lesson 13's window mask and cache bytes
refuse theirs here, with the one-call rule's hint that says what to write instead.

``RULE`` is the sentence each exercise shows. Its two halves:

- **No shortcut.** An exercise asks for a computation written out (one-hot vectors times a table; ``x @ weight.T +
  bias``; softmax of masked scores). A library call that does the whole exercise in one go gives the right numbers,
  so comparing numbers cannot tell; recording the calls can. Each check names its shortcuts (``SHORTCUTS``) and
  refuses them, with the same message everywhere (``refuse_shortcuts``). Calls that do one earlier step (a softmax,
  a projection in lesson 04) are the building blocks and stay allowed.
- **The asked type.** A tensor the exercise asks for as boolean must be ``torch.bool``: not 0/1 integers, and not a
  float mask of 0 and -inf (which some functions also accept, and which means the same, but is not what was asked).
  ``expect_dtype`` says so, naming the dtype it got.

``FunctionRecorder`` is a ``course.call_recording.CallRecorder``: a ``TorchFunctionMode`` (every torch function called
from Python passes through it) that also watches Python calls (``sys.setprofile``), so it sees
``nn.MultiheadAttention.forward`` or a helper function too, and, under the checker, what the learner's code called in
the graded kernel.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from course.call_recording import CallRecorder
from course.exercises.feedback import wrong

#: The rule, as each exercise of lessons 01-05 states it.
RULE = (
    "The rule of every exercise: write the step yourself with the operations it names. A library call that does "
    "the whole exercise in one go is refused even when its numbers are right, and the result has the type the "
    "exercise asks for."
)
#: What the asked type means for a mask; a hint adds it only where the exercise is about a mask.
MASK_TYPE = "A boolean mask is `torch.bool`: not 0/1 integers, not a float mask."
# The exercises (by their names in SHORTCUTS) whose answer is a mask or that take one.
_MASK_EXERCISES = ("padding mask for F.scaled_dot_product_attention", "masked attention", "sliding-window mask")

# Ways to pick rows out of a table without a matrix product, each with the name a hint shows.
_ROW_LOOK_UPS: dict[Callable[..., Any], str] = {
    Tensor.__getitem__: "indexing, `weight[ids]`",
    F.embedding: "`F.embedding`",
    torch.embedding: "`torch.embedding`",
    torch.index_select: "`index_select`",
    Tensor.index_select: "`index_select`",
    torch.take: "`torch.take`",
    Tensor.take: "`take`",
    torch.gather: "`gather`",
    Tensor.gather: "`gather`",
}

# nn.Linear's computation in one call: nn.Linear.forward, F.linear and torch's own linear all end up here.
_LINEAR: dict[Callable[..., Any], str] = {
    F.linear: "`F.linear` (or `nn.Linear`)",
    torch._C._nn.linear: "`F.linear` (or `nn.Linear`)",
}


def _attention_shortcuts() -> dict[Callable[..., Any], str]:
    import helpers.attention

    return {
        F.scaled_dot_product_attention: "`F.scaled_dot_product_attention`",
        helpers.attention.scaled_dot_product_attention: "`helpers.scaled_dot_product_attention`",
    }


def _multi_head_shortcuts() -> dict[Callable[..., Any], str]:
    import helpers.attention

    return {
        nn.MultiheadAttention.forward: "`nn.MultiheadAttention`",
        F.multi_head_attention_forward: "`nn.MultiheadAttention` (or `F.multi_head_attention_forward`)",
        torch._native_multi_head_attention: "`nn.MultiheadAttention`",
        helpers.attention.MultiHeadAttention.forward: "`helpers.MultiHeadAttention`",
    }


def _padding_shortcuts() -> dict[Callable[..., Any], str]:
    import helpers.attention

    return {helpers.attention.sdpa_mask_from_padding: "`helpers.sdpa_mask_from_padding`"}


def _encoding_shortcuts() -> dict[Callable[..., Any], str]:
    import helpers.embeddings

    return {helpers.embeddings.sinusoidal_positional_encoding: "`helpers.embeddings.sinusoidal_positional_encoding`"}


def _window_mask_shortcuts() -> dict[Callable[..., Any], str]:
    import helpers.masks

    # One name for both: sliding_window_mask calls causal_mask_at, and a recorder may report either first.
    named = "`helpers.masks.sliding_window_mask` (or `causal_mask_at`, which builds it)"
    return {helpers.masks.sliding_window_mask: named, helpers.masks.causal_mask_at: named}


def _hybrid_bytes_shortcuts() -> dict[Callable[..., Any], str]:
    import helpers.kv_cache

    return {helpers.kv_cache.rolling_kv_cache_bytes: "`helpers.kv_cache.rolling_kv_cache_bytes`"}


#: Each exercise's shortcuts, by the exercise's name in its verdict; built on first use (helpers load lazily).
SHORTCUTS: dict[str, Callable[[], dict[Callable[..., Any], str]]] = {
    "one-hot look-up": lambda: dict(_ROW_LOOK_UPS),
    "sinusoidal positional encoding": _encoding_shortcuts,
    "linear projection": lambda: dict(_LINEAR),
    "attention weights": _attention_shortcuts,
    "padding mask for F.scaled_dot_product_attention": _padding_shortcuts,
    "masked attention": _attention_shortcuts,
    "multi-head attention": _multi_head_shortcuts,
    # Lesson 13: the library functions the lesson graduates into (helpers.masks, helpers.kv_cache).
    "sliding-window mask": _window_mask_shortcuts,
    "hybrid cache bytes": _hybrid_bytes_shortcuts,
}


class FunctionRecorder(CallRecorder):
    """A ``CallRecorder`` (see :mod:`course.call_recording`) that also names the exercise-specific look-ups."""

    def looked_up_rows(self) -> str:
        """How the watched table's rows were picked without a product ("" if they were not)."""
        return self.called(_ROW_LOOK_UPS, watched_only=True)

    def called_linear(self) -> str:
        """The name of the one-call linear layer the code used ("" if none)."""
        return self.called(_LINEAR)


def refuse_shortcuts(recorder: FunctionRecorder, exercise: str, instead: str, watched_only: bool = False) -> None:
    """Raise the rule's hint if the code called one of ``exercise``'s shortcuts; ``instead``: what to write."""
    used = recorder.called(SHORTCUTS[exercise](), watched_only=watched_only)
    if used:
        raise wrong(
            f"the numbers may be right, but your code calls {used}, which does this whole exercise in one call. "
            f"{_rule(exercise in _MASK_EXERCISES)} Here: {instead}"
        )


def _rule(about_masks: bool) -> str:
    """RULE, with what a boolean mask is where the exercise is about a mask (and only there)."""
    return f"{RULE} {MASK_TYPE}" if about_masks else RULE


def expect_dtype(answer: Tensor, dtype: torch.dtype, name: str, how: str = "") -> None:
    """Complain, naming the dtype received, unless ``answer`` has ``dtype``; ``how``: how to get there."""
    if answer.dtype != dtype:
        rule = _rule(dtype == torch.bool)
        raise wrong(f"{name} should have dtype {dtype}, got dtype {answer.dtype}. {rule}" + (f" {how}" if how else ""))
