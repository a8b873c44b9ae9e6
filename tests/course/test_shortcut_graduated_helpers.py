"""Lessons 06-12, 14, 15 and 17: an answer that calls the graduated ``helpers`` function its exercise asks the learner
to write gets a friendly NOT YET that names the function (#48), as lessons 01-05's shortcuts and every lesson's
``reference_*`` do.
That the honest answers still pass is tests/course/test_reference_answers.py's (and each lesson's exercise tests')."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

import helpers.analysis.circuits as circuits
import helpers.analysis.ioi as ioi
import helpers.attention
import helpers.delta_rule
import helpers.flash
import helpers.rotary
import helpers.selection
from course.exercises import (
    lesson06,
    lesson07,
    lesson08,
    lesson09,
    lesson10,
    lesson11,
    lesson12,
    lesson14,
    lesson15,
    lesson17,
)
from course.exercises.graduated import GRADUATED_HELPERS
from helpers.kv_cache import cache_bytes_per_token
from helpers.latent_attention import LatentConfig, MultiHeadLatentAttention
from helpers.lora import LoRALinear, add_lora, count_trainable, merge_lora
from helpers.masks import causal_mask
from helpers.models.translation.training import teacher_forcing
from helpers.norms import RMSNorm
from helpers.swiglu import SwiGLU


# Shortcut answers, each the learner's own function (defined in this file, outside the course) that hands the whole
# exercise to the graduated helper.
def teacher_forcing_batch(tgt):
    tgt_in, tgt_out = teacher_forcing(tgt)
    return tgt_in, tgt_out, causal_mask(tgt_in.size(1))


def online_softmax_update(running_max, running_sum, block):
    return helpers.flash.online_softmax_update(running_max, running_sum, block)


def rotate_pairs(x, angles):
    return helpers.rotary.rotate_pairs(x, angles.cos(), angles.sin())


def previous_token_score(weights, attention_mask):
    return circuits.previous_token_score(weights)


def rms_norm_helpers(x, weight, eps):
    norm = RMSNorm(x.size(-1), eps).to(x.dtype)
    norm.weight.data.copy_(weight)
    return norm(x)


def swiglu(x, gate_weight, up_weight, down_weight):
    layer = SwiGLU(x.size(-1), gate_weight.size(0)).to(x.dtype)
    for linear, weight in ((layer.gate_proj, gate_weight), (layer.up_proj, up_weight), (layer.down_proj, down_weight)):
        linear.weight.data.copy_(weight)
    return layer(x)


def induction(weights, ids):
    return circuits.induction_score(weights, ids)


def make_batch(batch_size, seq_len, vocab_size, low, high, generator):
    batch = circuits.repeated_batch(batch_size, seq_len, vocab_size, (low, high), generator)
    return batch.ids, batch.predictable


def cache_bytes(kind, n_layers, h, h_kv, d, d_c, d_R):
    return cache_bytes_per_token(kind, n_layers, d, h, h_kv, d_c, d_R)


def absorb(layer):
    return layer.absorbed_weights()


def cache_entry(x, positions, w_dkv, w_kr, base):
    d_c, d_R = w_dkv.size(0), w_kr.size(0)
    config = LatentConfig(x.size(-1), 1, max(d_R, 2), d_c, d_R, rotary_base=base)
    layer = MultiHeadLatentAttention(config).to(x.dtype)
    layer.kv_down.weight.data.copy_(w_dkv)
    layer.k_rope.weight.data.copy_(w_kr)
    return layer.latent(x, positions)


class _Batch:  # the three fields of an IOIBatch that logit_difference reads
    def __init__(self, io, s):
        self.ids, self.io, self.s = torch.zeros(io.size(0), 1, dtype=torch.long), io, s


def logit_difference(logits, io, s):
    return ioi.logit_difference(logits, _Batch(io, s), per_prompt=True)


def sink_softmax(scores, sink):
    return helpers.attention.masked_softmax(scores, sink=sink)


def sink_softmax_inside_attention(scores, sink):  # the sink's softmax reached through the attention function
    S = scores.size(-1)
    keys = torch.eye(S, dtype=scores.dtype).expand(*scores.shape[:-2], S, S)
    blocked = torch.isneginf(scores)
    _, weights = helpers.attention.attend(
        scores.masked_fill(blocked, 0.0), keys, keys, ~blocked, need_weights=True, sink=sink, scale=1.0
    )
    return weights


def delta_step(state, k, v, beta, log_alpha=None):
    return helpers.delta_rule.delta_rule_step(state, k, k, v, beta, log_alpha)[1]


def delta_step_chunked(state, k, v, beta, log_alpha=None):
    one = [None if t is None else t[:, :, None] for t in (k, k, v, beta, log_alpha)]
    return helpers.delta_rule.delta_rule_chunked(*one, initial_state=state)[1]


def top_k_keys(scores, k):
    return helpers.selection.causal_topk(scores, k)


def indexer_target(weights):
    return helpers.selection.summed_attention(weights[None])[0]


def new_adapter(out_features, in_features, rank, generator):
    layer = LoRALinear(torch.nn.Linear(in_features, out_features), rank, 1.0, generator)
    return layer.lora_A.detach(), layer.lora_B.detach()


def _lora_layer(W, A, B, alpha):
    layer = LoRALinear(torch.nn.Linear(W.size(1), W.size(0), bias=False), A.size(0), alpha)
    with torch.no_grad():
        for parameter, value in ((layer.base.weight, W), (layer.lora_A, A), (layer.lora_B, B)):
            parameter.copy_(value)
    return layer


def lora_forward(x, W, A, B, alpha):
    with torch.no_grad():
        return _lora_layer(W, A, B, alpha)(x)


def merge_weight(W, A, B, alpha):
    model = torch.nn.Sequential(_lora_layer(W, A, B, alpha))
    merge_lora(model)
    return model[0].base.weight.detach().clone()


def lora_parameter_count(shapes, rank):
    model = torch.nn.Sequential(*(torch.nn.Linear(i, o) for o, i in shapes))
    add_lora(model, [str(n) for n in range(len(shapes))], rank, 1.0)
    return count_trainable(model)


CASES = [
    (lesson06.check_teacher_forcing, teacher_forcing_batch, "`helpers.models.translation.training.teacher_forcing`"),
    (lesson07.check_online_softmax_update, online_softmax_update, "`helpers.flash.online_softmax_update`"),
    (lesson07.check_rotate_pairs, rotate_pairs, "`helpers.rotary.rotate_pairs`"),
    (lesson08.check_previous_token_score, previous_token_score, "`helpers.analysis.circuits.previous_token_score`"),
    (lesson09.check_rms_norm, rms_norm_helpers, "`helpers.norms.RMSNorm`"),
    (lesson09.check_swiglu, swiglu, "`helpers.swiglu.SwiGLU`"),
    (lesson10.check_induction_score, induction, "`helpers.analysis.circuits.induction_score`"),
    (lesson10.check_repeated_batch, make_batch, "`helpers.analysis.circuits.repeated_batch`"),
    (lesson11.check_cache_bytes, cache_bytes, "`helpers.kv_cache.cache_bytes_per_token`"),
    (lesson11.check_absorbed_weights, absorb, "`MultiHeadLatentAttention.absorbed_weights`"),
    (lesson11.check_cache_entry, cache_entry, "`MultiHeadLatentAttention.latent`"),
    (lesson12.check_logit_difference, logit_difference, "`helpers.analysis.ioi.logit_difference`"),
    (lesson14.check_sink_softmax, sink_softmax, "`helpers.attention.masked_softmax(..., sink=...)`"),
    (lesson14.check_sink_softmax, sink_softmax_inside_attention, "`helpers.attention.masked_softmax(..., sink=...)`"),
    (lesson14.check_delta_step, delta_step, "`helpers.delta_rule.delta_rule_step`"),
    (lesson14.check_delta_step, delta_step_chunked, "`helpers.delta_rule.delta_rule_chunked`"),
    (lesson15.check_top_k_keys, top_k_keys, "`helpers.selection.causal_topk`"),
    (lesson15.check_indexer_target, indexer_target, "`helpers.selection.summed_attention`"),
    (lesson17.check_new_adapter, new_adapter, "`helpers.lora.LoRALinear`"),
    (lesson17.check_lora_forward, lora_forward, "`helpers.lora.LoRALinear`"),
    (lesson17.check_merge_weight, merge_weight, "`helpers.lora."),  # merge_lora, or the merge it runs
    (lesson17.check_lora_parameter_count, lora_parameter_count, "`helpers.lora."),
]


@pytest.mark.parametrize("check,answer,helper", CASES, ids=[answer.__name__ for _, answer, _ in CASES])
def test_calling_the_graduated_helper_is_not_yet_and_names_it(check, answer, helper, capsys):
    verdict = check(answer)
    assert verdict.status == "wrong", verdict
    assert helper in verdict.message and "course's own version" in verdict.message, verdict
    assert "[NOT YET]" in capsys.readouterr().out


def test_every_listed_exercise_is_a_check_of_lessons_06_to_12_14_15_or_17():
    """A renamed exercise would silently drop its entry: every key is the name some check of 06-12, 14, 15 or 17 runs
    under."""
    modules = (lesson06, lesson07, lesson08, lesson09, lesson10, lesson11, lesson12, lesson14, lesson15, lesson17)
    sources = "".join(Path(module.__file__).read_text() for module in modules)
    names = set(re.findall(r'(?:run_check|_checked)\(\s*"([^"]+)"', sources))
    assert set(GRADUATED_HELPERS) <= names, set(GRADUATED_HELPERS) - names
    for functions in GRADUATED_HELPERS.values():
        assert functions(), functions


def test_a_helper_of_another_exercise_is_no_shortcut_here():
    """The refusal is the running exercise's own: lesson 11's cache entry may call `apply_rotary` (a building block
    there), which lesson 07's rotary exercise refuses."""
    verdict = lesson11.check_cache_entry(lambda x, positions, w_dkv, w_kr, base: (
        x @ w_dkv.T, helpers.rotary.apply_rotary(x @ w_kr.T, positions, base)))  # fmt: skip
    assert verdict.passed, verdict


def test_a_plain_softmax_from_the_library_is_no_shortcut_for_the_sink():
    """masked_softmax without a sink is the building block: only its sink's path is the exercise's answer."""

    def with_the_column(scores, sink):
        column = sink.view(-1, 1, 1).expand(*scores.shape[:-1], 1)
        return helpers.attention.masked_softmax(torch.cat([scores, column], dim=-1))[..., :-1]

    assert lesson14.check_sink_softmax(with_the_column).passed
