"""The one rule every exercise of lessons 01-05 states and every check applies: no shortcut, the asked type; and,
from lesson 06 on, no graduated helper (``GRADUATED_HELPERS``, at the end).

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
    "exercise asks for (a boolean mask is `torch.bool`: not 0/1 integers, not a float mask)."
)

# Ways to pick rows out of a table without a matrix product, each with the name a hint shows.
_ROW_LOOK_UPS = {
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
_LINEAR = {F.linear: "`F.linear` (or `nn.Linear`)", torch._C._nn.linear: "`F.linear` (or `nn.Linear`)"}


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


#: Each exercise's shortcuts, by the exercise's name in its verdict; built on first use (helpers load lazily).
SHORTCUTS: dict[str, Callable[[], dict[Callable[..., Any], str]]] = {
    "one-hot look-up": lambda: dict(_ROW_LOOK_UPS),
    "sinusoidal positional encoding": _encoding_shortcuts,
    "linear projection": lambda: dict(_LINEAR),
    "attention weights": _attention_shortcuts,
    "padding mask for F.scaled_dot_product_attention": _padding_shortcuts,
    "masked attention": _attention_shortcuts,
    "multi-head attention": _multi_head_shortcuts,
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
            f"{RULE} Here: {instead}"
        )


def expect_dtype(answer: Tensor, dtype: torch.dtype, name: str, how: str = "") -> None:
    """Complain, naming the dtype received, unless ``answer`` has ``dtype``; ``how``: how to get there."""
    if answer.dtype != dtype:
        raise wrong(f"{name} should have dtype {dtype}, got dtype {answer.dtype}. {RULE}" + (f" {how}" if how else ""))


# ---------------------------------------------------------------------------------------------
# Lessons 06-12: the graduated helper an exercise asks the learner to write
# ---------------------------------------------------------------------------------------------
# From lesson 06 on, an exercise asks for a function that `helpers` already holds (the lesson graduates it there,
# or a later lesson does). Calling it gives the right numbers and checks nothing of the learner's, so every call of
# the learner's code refuses it (``feedback._call_once``), as it refuses the checks' own ``reference_*`` answers.
# Keyed by the exercise's name in its verdict; only the function that computes the whole answer is listed, never a
# building block the exercise gives (lesson 11's ``apply_rotary``, lesson 12's ``norm``).
def _lesson06() -> dict[Callable[..., Any], str]:
    from helpers.models.translation import training

    return {training.teacher_forcing: "`helpers.models.translation.training.teacher_forcing`"}


def _online_softmax() -> dict[Callable[..., Any], str]:
    import helpers.flash

    return {helpers.flash.online_softmax_update: "`helpers.flash.online_softmax_update`"}


def _rotary() -> dict[Callable[..., Any], str]:
    import helpers.rotary

    return {
        helpers.rotary.rotate_pairs: "`helpers.rotary.rotate_pairs`",
        helpers.rotary.apply_rotary: "`helpers.rotary.apply_rotary`",
    }


def _previous_token() -> dict[Callable[..., Any], str]:
    import helpers.analysis.circuits as circuits

    return {circuits.previous_token_score: "`helpers.analysis.circuits.previous_token_score`"}


def _rms_norm() -> dict[Callable[..., Any], str]:
    import helpers.norms

    # torch's own `F.rms_norm` stays allowed: lesson 09 compares with it and says so
    return {helpers.norms.RMSNorm.forward: "`helpers.norms.RMSNorm`"}


def _swiglu() -> dict[Callable[..., Any], str]:
    import helpers.swiglu

    return {helpers.swiglu.SwiGLU.forward: "`helpers.swiglu.SwiGLU`"}


def _induction() -> dict[Callable[..., Any], str]:
    import helpers.analysis.circuits as circuits

    return {circuits.induction_score: "`helpers.analysis.circuits.induction_score`"}


def _repeated_batch() -> dict[Callable[..., Any], str]:
    import helpers.analysis.circuits as circuits

    return {circuits.repeated_batch: "`helpers.analysis.circuits.repeated_batch`"}


def _cache_bytes() -> dict[Callable[..., Any], str]:
    import helpers.kv_cache

    return {
        helpers.kv_cache.cache_bytes_per_token: "`helpers.kv_cache.cache_bytes_per_token`",
        helpers.kv_cache.layer_cache_numbers: "`helpers.kv_cache.layer_cache_numbers`",
    }


def _absorbed() -> dict[Callable[..., Any], str]:
    from helpers.latent_attention import MultiHeadLatentAttention

    return {MultiHeadLatentAttention.absorbed_weights: "`MultiHeadLatentAttention.absorbed_weights`"}


def _cache_entry() -> dict[Callable[..., Any], str]:
    from helpers.latent_attention import MultiHeadLatentAttention

    return {MultiHeadLatentAttention.latent: "`MultiHeadLatentAttention.latent`"}


def _logit_difference() -> dict[Callable[..., Any], str]:
    import helpers.analysis.ioi as ioi

    return {ioi.logit_difference: "`helpers.analysis.ioi.logit_difference`"}


def _logit_lens() -> dict[Callable[..., Any], str]:
    import helpers.analysis.attribution as attribution

    return {attribution.logit_lens: "`helpers.analysis.attribution.logit_lens`"}


def _head_attribution() -> dict[Callable[..., Any], str]:
    import helpers.analysis.attribution as attribution

    return {attribution.direct_logit_attribution: "`helpers.analysis.attribution.direct_logit_attribution`"}


#: Each exercise's graduated helpers (lessons 06-12), by the exercise's name in its verdict.
GRADUATED_HELPERS: dict[str, Callable[[], dict[Callable[..., Any], str]]] = {
    "teacher forcing: inputs, labels and causal mask": _lesson06,
    "online softmax update": _online_softmax,
    "rotary rotation": _rotary,
    "previous-token score of each head": _previous_token,
    "RMSNorm": _rms_norm,
    "SwiGLU": _swiglu,
    "induction score of each head": _induction,
    "a repeated batch without the positional shortcut": _repeated_batch,
    "cache bytes per token": _cache_bytes,
    "the absorbed matrices": _absorbed,
    "what one token puts in the cache": _cache_entry,
    "the logit difference": _logit_difference,
    "the logit lens": _logit_lens,
    "each head's direct push on the logit difference": _head_attribution,
}


def graduated_helper_called(recorder: CallRecorder, exercise: str | None) -> str:
    """The name of ``exercise``'s graduated helper that the recorded call used ("" if none, or no such exercise);
    of several, the first listed (the outer one: Python's calls are recorded as a set, without their order)."""
    functions = GRADUATED_HELPERS.get(exercise or "")
    for function, name in (functions() if functions is not None else {}).items():
        if recorder.called({function: name}):
            return name
    return ""
