"""From lesson 06 on, no graduated helper: an answer calling the `helpers` function its exercise asks for is refused.

An exercise of lessons 06-12, 14, 15 and 17 asks for a function that ``helpers`` already holds (the lesson graduates it
there, or a later lesson does). Calling it gives the right numbers and checks nothing of the learner's, so every call
of the learner's code refuses it (``feedback._call_once``), as it refuses the checks' own ``reference_*`` answers;
lessons 01-05's one-call shortcuts are ``course.exercises.shortcuts``'. Keyed by the exercise's name in its verdict;
only the function that computes the whole answer is listed, never a building block the exercise gives (lesson 11's
``apply_rotary``, lesson 12's ``norm``, lesson 14's sinkless ``masked_softmax``). This module imports no check code,
so ``feedback`` can import it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from course.call_recording import CallRecorder


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


def _sink_softmax() -> dict[Callable[..., Any], str]:
    import helpers.attention

    # masked_softmax without a sink stays allowed (a plain softmax is the exercise's building block); with one it
    # runs _softmax_with_sink, the whole exercise.
    return {helpers.attention._softmax_with_sink: "`helpers.attention.masked_softmax(..., sink=...)`"}


def _delta_rule() -> dict[Callable[..., Any], str]:
    import helpers.delta_rule as delta_rule

    # The outer ones first: delta_rule_recurrent runs delta_rule_step, and the answer called the one it names.
    return {
        delta_rule.delta_rule_recurrent: "`helpers.delta_rule.delta_rule_recurrent`",
        delta_rule.delta_rule_chunked: "`helpers.delta_rule.delta_rule_chunked`",
        delta_rule.delta_rule_step: "`helpers.delta_rule.delta_rule_step`",
    }


def _selection() -> dict[Callable[..., Any], str]:
    import helpers.selection as selection

    return {
        selection.causal_topk: "`helpers.selection.causal_topk`",
        selection.summed_attention: "`helpers.selection.summed_attention`",
    }


def _lora_adapter() -> dict[Callable[..., Any], str]:
    from helpers.lora import LoRALinear

    return {LoRALinear.__init__: "`helpers.lora.LoRALinear`"}


def _lora_forward() -> dict[Callable[..., Any], str]:
    from helpers.lora import LoRALinear

    return {LoRALinear.forward: "`helpers.lora.LoRALinear`"}


def _lora_merge() -> dict[Callable[..., Any], str]:
    import helpers.lora as lora

    # The outer one first: merge_lora runs LoRALinear.merge, which runs delta_weight.
    return {
        lora.merge_lora: "`helpers.lora.merge_lora`",
        lora.LoRALinear.merge: "`helpers.lora.LoRALinear.merge`",
        lora.LoRALinear.delta_weight: "`helpers.lora.LoRALinear.delta_weight`",
    }


def _lora_count() -> dict[Callable[..., Any], str]:
    import helpers.lora as lora

    # Counting a model's parameters is no shortcut in itself; counting those of the course's LoRA layers is.
    return {
        lora.count_trainable: "`helpers.lora.count_trainable`",
        lora.add_lora: "`helpers.lora.add_lora`",
        lora.LoRALinear.__init__: "`helpers.lora.LoRALinear`",
    }


#: Each exercise's graduated helpers (lessons 06-12, 14, 15 and 17), by the exercise's name in its verdict.
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
    "softmax with an attention sink": _sink_softmax,
    "one step of the gated delta rule": _delta_rule,
    "top-k keys after the causal mask": _selection,
    "the indexer's target": _selection,
    "a new adapter's A and B": _lora_adapter,
    "the adapted layer's output": _lora_forward,
    "the merged weight": _lora_merge,
    "the parameters LoRA trains": _lora_count,
}


def graduated_helper_called(recorder: CallRecorder, exercise: str | None) -> str:
    """The name of ``exercise``'s graduated helper that the recorded call used ("" if none, or no such exercise);
    of several, the first listed (the outer one: Python's calls are recorded as a set, without their order)."""
    functions = GRADUATED_HELPERS.get(exercise or "")
    for function, name in (functions() if functions is not None else {}).items():
        if recorder.called({function: name}):
            return name
    return ""
