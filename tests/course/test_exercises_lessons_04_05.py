"""Every check of lessons 04-05 passes a right answer, says "not attempted" for a student copy's
stub, and names each usual mistake when fed a deliberately wrong implementation of it."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from conftest import assert_hint, not_attempted
from torch import Tensor, nn

from course.exercises.lesson04 import (
    _mha_cases,
    _reference_mha,
    check_merge_heads,
    check_multi_head_attention,
    check_split_heads,
    reference_multi_head_attention,
)
from course.exercises.lesson05 import (
    _decoder_inputs,
    _decoder_variant,
    check_decoder_layer_forward,
    check_residual_block,
)
from course.exercises.shortcuts import RULE


# ---------------------------------------------------------------------------------------------
# Lesson 04, exercise 1: split and merge
# ---------------------------------------------------------------------------------------------
def split_right(x: Tensor, num_heads: int) -> Tensor:
    N, T, E = x.shape
    return x.view(N, T, num_heads, E // num_heads).transpose(1, 2)


def merge_right(x: Tensor) -> Tensor:
    N, h, T, d = x.shape
    return x.transpose(1, 2).reshape(N, T, h * d)


SPLIT_MISTAKES = {
    "reshape without transpose": lambda x, h: x.reshape(x.size(0), h, x.size(1), x.size(2) // h),
    "transpose(1, 2)": lambda x, h: x.view(x.size(0), x.size(1), h, x.size(2) // h),  # forgot the transpose
    "interleaved": lambda x, h: x.view(x.size(0), x.size(1), x.size(2) // h, h).permute(0, 3, 1, 2),
    "last two dimensions are swapped": lambda x, h: x.view(x.size(0), x.size(1), h, -1).permute(0, 2, 3, 1),
    "you made d = ": lambda x, h: x.view(x.size(0), x.size(1), -1, h).transpose(1, 2),  # (N, d, T, h)
    "swapped the batch and the tokens": lambda x, h: x.view(x.size(0), x.size(1), h, -1).transpose(0, 1),
    "should have shape": lambda x, h: x.view(x.size(0), x.size(1), h, -1).permute(0, 3, 2, 1),  # (N, d, h, T)
    "not in place": lambda x, h: split_right(x, h).flip(2),  # tokens reversed: no known mistake
}


@pytest.mark.parametrize("hint,split", list(SPLIT_MISTAKES.items()))
def test_split_check_names_each_mistake(hint, split):
    verdict = check_split_heads(split)
    assert verdict.status == "wrong" and hint in verdict.message


def test_split_check_passes_right_answers_and_spots_stubs():
    assert check_split_heads(split_right).passed
    # Any correct formulation passes (unflatten + permute), in the dtype it was given: float64 is refused by name.
    assert check_split_heads(lambda x, h: x.unflatten(-1, (h, -1)).permute(0, 2, 1, 3)).passed
    verdict = check_split_heads(lambda x, h: x.unflatten(-1, (h, -1)).permute(0, 2, 1, 3).double())
    assert_hint(verdict, "dtype changed", "torch.float32", "torch.float64")
    assert check_split_heads(not_attempted).status == "not attempted"


MERGE_MISTAKES = {
    "merge without transpose": lambda x: x.reshape(x.size(0), x.size(2), -1),
    "`.view` fails after `.transpose`": lambda x: x.transpose(1, 2).view(x.size(0), x.size(2), -1),
    "wrong order": lambda x: merge_right(x.flip(1)),
    "interleaved": lambda x: x.permute(0, 2, 3, 1).reshape(x.size(0), x.size(2), -1),
    "not yet concatenated": lambda x: x.transpose(1, 2),
    "merge_heads(split_heads(x)) == x": lambda x: merge_right(x) * 2,
}


@pytest.mark.parametrize("hint,merge", list(MERGE_MISTAKES.items()))
def test_merge_check_names_each_mistake(hint, merge):
    verdict = check_merge_heads(merge)
    assert verdict.status == "wrong" and hint in verdict.message


def test_merge_check_passes_right_answers_and_spots_stubs():
    assert check_merge_heads(merge_right).passed
    assert check_merge_heads(lambda x: torch.cat(x.unbind(1), dim=-1)).passed  # concatenation written out
    assert check_merge_heads(not_attempted).status == "not attempted"


# ---------------------------------------------------------------------------------------------
# Lesson 04, exercise 2: the forward pass
# ---------------------------------------------------------------------------------------------
def mha(
    query,
    key,
    value,
    q_proj,
    k_proj,
    v_proj,
    out_proj,
    num_heads,
    *,
    split=split_right,
    merge=merge_right,
    use_out_proj=True,
    scale=None,
    softmax_dim=-1,
    swap_kv=False,
    heads=None,
    transposed="",
):
    """A learner-style implementation, with knobs that introduce one mistake at a time."""
    h = num_heads if heads is None else heads
    if transposed:  # x @ W.weight + b: the weight used as stored, untransposed
        q_proj, k_proj, v_proj, o = (lambda x, p=p: x @ p.weight + p.bias for p in (q_proj, k_proj, v_proj, out_proj))
        out_proj = o if "o" in transposed else out_proj
    q, k, v = q_proj(query), k_proj(key), v_proj(value)
    if swap_kv:
        k, v = k_proj(value), v_proj(key)
    q, k, v = split(q, h), split(k, h), split(v, h)  # (N, h, T, d)
    d = q.size(-1)
    scale = math.sqrt(d) if scale is None else scale(query.size(-1), d)
    weights = torch.softmax(q @ k.transpose(-2, -1) / scale, dim=softmax_dim)
    out = merge(weights @ v)
    return out_proj(out) if use_out_proj else out


def mha_with_torch_sdpa(query, key, value, q_proj, k_proj, v_proj, out_proj, num_heads):
    q, k, v = (split_right(p(x), num_heads) for p, x in ((q_proj, query), (k_proj, key), (v_proj, value)))
    return out_proj(merge_right(F.scaled_dot_product_attention(q, k, v)))


MHA_MISTAKES = {
    "output projection is missing": dict(use_out_proj=False),
    "split with reshape but no transpose": dict(split=SPLIT_MISTAKES["reshape without transpose"]),
    "reshaping (N, h, L, d) straight to (N, L, E)": dict(merge=MERGE_MISTAKES["merge without transpose"]),
    "concatenated in the wrong order": dict(merge=MERGE_MISTAKES["wrong order"]),
    "interleaved features": dict(split=SPLIT_MISTAKES["interleaved"], merge=MERGE_MISTAKES["interleaved"]),
    "divided by √E": dict(scale=lambda E, d: math.sqrt(E)),
    "not scaled": dict(scale=lambda E, d: 1.0),
    "softmax runs over the queries": dict(softmax_dim=-2),
    "one wide head over all E features": dict(heads=1, scale=lambda E, d: math.sqrt(E / {8: 2, 12: 3}[E])),
    "one wide head scaled by √E": dict(heads=1),
    "keys and values are swapped": dict(swap_kv=True),
    "weight untransposed, `x @ W.weight + W.bias`": dict(transposed="qkvo"),
    "Q, K and V use their weights untransposed": dict(transposed="qkv"),
}


def _with_torch_module(query, key, value, q_proj, k_proj, v_proj, out_proj, num_heads, training=True):
    E = query.size(-1)
    module = torch.nn.MultiheadAttention(E, num_heads, batch_first=True).train(training)
    with torch.no_grad():
        module.in_proj_weight.copy_(torch.cat([q_proj.weight, k_proj.weight, v_proj.weight]))
        module.in_proj_bias.copy_(torch.cat([q_proj.bias, k_proj.bias, v_proj.bias]))
        module.out_proj.load_state_dict(out_proj.state_dict())
    return module(query, key, value, need_weights=False)[0]


@pytest.mark.parametrize("training", [True, False])
def test_mha_check_refuses_nn_multihead_attention_by_the_rule(training):
    def answer(*args):
        with torch.no_grad():  # eval mode and no grad: nn.MultiheadAttention takes its fast path
            return _with_torch_module(*args, training=training)

    verdict = check_multi_head_attention(answer)
    assert_hint(verdict, "MultiheadAttention", RULE)


@pytest.mark.parametrize("hint,knobs", list(MHA_MISTAKES.items()))
def test_mha_check_names_each_mistake(hint, knobs):
    verdict = check_multi_head_attention(lambda *args: mha(*args, **knobs))
    assert verdict.status == "wrong" and hint in verdict.message


def test_mha_check_explains_self_attention_only_code():
    # Uses the query for K and V: computes self-attention where cross-attention was asked for.
    verdict = check_multi_head_attention(lambda q, k, v, *rest: mha(q, q, q, *rest))
    assert verdict.status == "wrong" and "computed from `query`" in verdict.message

    # Splits K and V with the query's length L: runs when L = S, crashes for cross-attention.
    def split_with_query_length(query, key, value, q_proj, k_proj, v_proj, out_proj, h):
        N, L, E = query.shape
        q, k, v = (
            p(x).view(N, L, h, E // h).transpose(1, 2) for p, x in ((q_proj, query), (k_proj, key), (v_proj, value))
        )
        return out_proj(merge_right(torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(E // h), dim=-1) @ v))

    verdict = check_multi_head_attention(split_with_query_length)
    assert verdict.status == "wrong" and "works for self-attention but not for cross-attention" in verdict.message


def test_mha_check_other_answers():
    assert check_multi_head_attention(mha).passed
    assert check_multi_head_attention(mha_with_torch_sdpa).passed
    assert check_multi_head_attention(not_attempted).status == "not attempted"
    assert "not a tuple" in check_multi_head_attention(lambda *a: (mha(*a), None)).message
    assert "differ from nn.MultiheadAttention" in check_multi_head_attention(lambda *a: mha(*a) + 0.01).message


def test_reference_equals_torch_multihead_attention():
    """The switchable reference the hints rest on is nn.MultiheadAttention when no switch is on."""
    for query, key, value, proj, h in _mha_cases():
        expected = reference_multi_head_attention(query, key, value, proj["q"], proj["k"], proj["v"], proj["o"], h)
        torch.testing.assert_close(_reference_mha(query, key, value, proj, h), expected)
        torch.testing.assert_close(
            expected,
            nn.functional.multi_head_attention_forward(
                query.double().transpose(0, 1),
                key.double().transpose(0, 1),
                value.double().transpose(0, 1),
                query.size(-1),
                h,
                torch.cat([proj[c].weight for c in "qkv"]).double(),
                torch.cat([proj[c].bias for c in "qkv"]).double(),
                None,
                None,
                False,
                0.0,
                proj["o"].weight.double(),
                proj["o"].bias.double(),
                need_weights=False,
            )[0].transpose(0, 1),
        )


# ---------------------------------------------------------------------------------------------
# Lesson 05, exercise 1: residual block
# ---------------------------------------------------------------------------------------------
def block_right(x, sublayer, norm, norm_first):
    return x + sublayer(norm(x)) if norm_first else norm(x + sublayer(x))


BLOCK_MISTAKES = {
    "computed the other variant": lambda x, s, n, first: block_right(x, s, n, not first),
    "ignores norm_first -> other variant": lambda x, s, n, first: n(x + s(x)),  # always post-norm
    "residual is missing": lambda x, s, n, first: s(n(x)) if first else n(s(x)),
    "LayerNorm is missing": lambda x, s, n, first: x + s(x),
    "carries the NORMALISED x": lambda x, s, n, first: n(x) + s(n(x)) if first else n(x + s(x)),
    "the sum is normalised as well": lambda x, s, n, first: n(x + s(n(x))) if first else n(x + s(x)),
    "only the sublayer's output is normalised": lambda x, s, n, first: x + s(n(x)) if first else x + n(s(x)),
    # the pre-norm bug x + norm(sublayer(x)) is named as what the learner wrote, not as a post-norm slip
    "the sublayer's OUTPUT is normalised": lambda x, s, n, first: x + n(s(x)) if first else n(x + s(x)),
    "subtracted": lambda x, s, n, first: x - s(n(x)) if first else n(x - s(x)),
    "has no γ and β": lambda x, s, n, first: (
        x + s(F.layer_norm(x, x.shape[-1:])) if first else F.layer_norm(x + s(x), x.shape[-1:])
    ),
    "differ from": lambda x, s, n, first: block_right(x, s, n, first) + 1,
}


@pytest.mark.parametrize("hint,block", list(BLOCK_MISTAKES.items()))
def test_residual_check_names_each_mistake(hint, block):
    verdict = check_residual_block(block)
    expected = "computed the other variant" if hint.startswith("ignores") else hint
    assert verdict.status == "wrong" and expected in verdict.message


def test_residual_check_pre_norm_bug_is_not_called_a_post_norm_slip():
    verdict = check_residual_block(lambda x, s, n, first: x + n(s(x)) if first else n(x + s(x)))
    assert "norm_first=True" not in verdict.message or "pre-norm" in verdict.message
    assert "post-norm normalises the SUM" not in verdict.message


def test_residual_check_other_answers():
    assert check_residual_block(block_right).passed
    verdict = check_residual_block(lambda x, s, n, first: (x + s(n(x)) if first else n(x + s(x))).float())
    assert_hint(verdict, "dtype changed", "torch.float64", "torch.float32")
    assert check_residual_block(not_attempted).status == "not attempted"


# ---------------------------------------------------------------------------------------------
# Lesson 05, exercise 2: decoder layer forward
# ---------------------------------------------------------------------------------------------
def decoder_right(layer, tgt, memory, tgt_mask, memory_key_padding_mask, *, mistake=""):
    """A learner-style answer; ``mistake`` breaks one thing (written independently of the check's variants)."""
    x = tgt
    drop = lambda name: (lambda t: t) if mistake in (f"no {name}", "no dropouts") else getattr(layer, name)  # noqa: E731
    act = (lambda t: t) if mistake == "no activation" else layer.activation

    def sa(x):
        mask = None if mistake == "no causal" else tgt_mask
        return drop("dropout1")(layer.self_attn(x, x, x, attn_mask=mask, need_weights=False)[0])

    def ca(x):
        src = x if mistake == "cross over target" else memory
        kpm = None if mistake in ("no memory padding", "cross over target") else memory_key_padding_mask
        return drop("dropout2")(layer.multihead_attn(x, src, src, key_padding_mask=kpm, need_weights=False)[0])

    def ff(x):
        return drop("dropout3")(layer.linear2(drop("dropout")(act(layer.linear1(x)))))

    if mistake == "pre-norm":
        x = x + sa(layer.norm1(x))
        x = x + ca(layer.norm2(x))
        return x + ff(layer.norm3(x))
    if mistake == "cross first":
        x = layer.norm1(x + ca(x))
        x = layer.norm2(x + sa(x))
    elif mistake == "cross first, norms kept with their block":
        x = layer.norm2(x + ca(x))
        x = layer.norm1(x + sa(x))
    elif mistake == "feed-forward first":
        x = layer.norm3(x + ff(x))
        x = layer.norm1(x + sa(x))
        return layer.norm2(x + ca(x))
    elif mistake == "cross-attention doubled":
        x = layer.norm1(x + sa(x))
        x = layer.norm2(x + 2 * ca(x))
    elif mistake == "self-attention scores from memory":
        x = layer.norm1(x + drop("dropout1")(layer.self_attn(x, memory, memory, need_weights=False)[0]))
        x = layer.norm2(x + ca(x))
    else:
        x = layer.norm1((0 if mistake == "no residual 1" else x) + sa(x))
        x = layer.norm2((0 if mistake == "no residual 2" else x) + ca(x))
    return layer.norm3((0 if mistake == "no residual 3" else x) + ff(x))


DECODER_MISTAKES = {
    "pre-norm": "norms are applied first",
    "no causal": "causal mask is not used",
    "no memory padding": "padding mask is not used",
    "cross over target": "attends over the target",
    "cross first": "wrong order",
    "cross first, norms kept with their block": "wrong order",
    "feed-forward first": "your code called linear1 -> self_attn -> multihead_attn",
    # an unknown slip: the fallback names the first sub-block whose result differs, not the ones after it
    "cross-attention doubled": "first sub-block whose result differs is the cross-attention block",
    "self-attention scores from memory": "first sub-block whose result differs is the self-attention block",
    "no residual 1": "residual around the self-attention",
    "no residual 2": "residual around the cross-attention",
    "no residual 3": "residual around the feed-forward",
    "no activation": "no activation",
    "no dropouts": "no dropout is applied",
    "no dropout1": "dropout1 is missing",
    "no dropout2": "dropout2 is missing",
    "no dropout3": "dropout3 is missing",
    "no dropout": "inner dropout is missing",
}


@pytest.mark.parametrize("mistake,hint", list(DECODER_MISTAKES.items()))
def test_decoder_check_names_each_mistake(mistake, hint):
    verdict = check_decoder_layer_forward(lambda *args: decoder_right(*args, mistake=mistake))
    assert verdict.status == "wrong" and hint in verdict.message, verdict.message


def test_decoder_check_other_answers():
    assert check_decoder_layer_forward(decoder_right).passed
    assert check_decoder_layer_forward(not_attempted).status == "not attempted"
    whole = check_decoder_layer_forward(
        lambda layer, t, m, tm, mk: layer(t, m, tgt_mask=tm, memory_key_padding_mask=mk)
    )
    assert "called the layer itself" in whole.message
    no_index = check_decoder_layer_forward(
        lambda layer, t, m, tm, mk: layer.norm1(t + layer.self_attn(t, t, t, attn_mask=tm))
    )
    assert "returns a tuple" in no_index.message
    assert (
        "differ from nn.TransformerDecoderLayer"
        in check_decoder_layer_forward(lambda *a: decoder_right(*a) * 1.01).message
    )


def test_decoder_variant_without_mistake_is_the_stock_layer():
    layer, tgt, memory, tgt_mask, padding = _decoder_inputs()
    with torch.no_grad():
        torch.testing.assert_close(
            _decoder_variant(layer, tgt, memory, tgt_mask, padding),
            layer(tgt, memory, tgt_mask=tgt_mask, memory_key_padding_mask=padding),
        )


# ---------------------------------------------------------------------------------------------
# Misdiagnoses, each a row (wrong answer -> the hint that names the real mistake)
# ---------------------------------------------------------------------------------------------
def test_mha_without_transpose_in_both_split_and_merge_is_named():
    """The natural mistake: reshape straight to (N, h, T, d) and straight back; it used to get "the numbers differ"."""
    knobs = dict(split=SPLIT_MISTAKES["reshape without transpose"], merge=MERGE_MISTAKES["merge without transpose"])
    verdict = check_multi_head_attention(lambda *args: mha(*args, **knobs))
    assert verdict.status == "wrong" and "split AND merged with reshape but no transpose" in verdict.message


def test_split_and_merge_wrong_shape_messages_read_cleanly():
    split = check_split_heads(SPLIT_MISTAKES["should have shape"])  # (N, d, h, T): no named mistake
    assert split.message == (
        "for x of shape (N, T, E) = (2, 3, 8), split_heads(x, 4) should have shape (N, h, T, d) = (2, 4, 3, 2), "
        "got (2, 2, 4, 3)"
    )
    merge = check_merge_heads(lambda x: x.permute(0, 2, 3, 1).reshape(x.size(0), -1, x.size(2)))  # (N, E, T)
    assert merge.message == (
        "for x of shape (N, h, T, d) = (2, 4, 3, 2), merge_heads(x) should have shape (N, T, E) = (2, 3, 8), "
        "got (2, 8, 3)"
    )


def _decoder_with(self_mask=None, padding=None, drop_index=""):
    """A decoder answer with one of the mistakes #11 lists: a mask flipped, or an attention's tuple used whole."""

    def answer(layer, tgt, memory, tgt_mask, memory_key_padding_mask):
        mask = tgt_mask if self_mask is None else self_mask(tgt_mask)
        kpm = memory_key_padding_mask if padding is None else padding(memory_key_padding_mask)
        attended = layer.self_attn(tgt, tgt, tgt, attn_mask=mask, need_weights=False)
        x = layer.norm1(tgt + layer.dropout1(attended if drop_index == "self" else attended[0]))
        attended = layer.multihead_attn(x, memory, memory, key_padding_mask=kpm, need_weights=False)
        x = layer.norm2(x + layer.dropout2(attended if drop_index == "cross" else attended[0]))
        return layer.norm3(x + layer.dropout3(layer.linear2(layer.dropout(layer.activation(layer.linear1(x))))))

    return answer


@pytest.mark.parametrize(
    "kwargs, hint",
    [
        (dict(self_mask=lambda m: ~m), "causal mask is inverted"),
        (dict(padding=lambda m: ~m), "padding mask is inverted"),
        (dict(drop_index="self"), "returns a tuple (output, weights)"),
        (dict(drop_index="cross"), "returns a tuple (output, weights)"),
    ],
)
def test_decoder_mask_polarity_and_forgotten_index_are_named(kwargs, hint):
    verdict = check_decoder_layer_forward(_decoder_with(**kwargs))
    assert verdict.status == "wrong" and hint in verdict.message, verdict.message
    assert "[0]" in verdict.message or "inverted" in verdict.message


def test_decoder_forgotten_index_without_dropout_is_named():
    # x + (output, weights): the TypeError mentions the tuple; the hint explains it
    def answer(layer, tgt, memory, tgt_mask, memory_key_padding_mask):
        x = layer.norm1(tgt + layer.self_attn(tgt, tgt, tgt, attn_mask=tgt_mask))
        return x

    verdict = check_decoder_layer_forward(answer)
    assert "returns a tuple (output, weights)" in verdict.message and "[0]" in verdict.message


# ---------------------------------------------------------------------------------------------
# More learner mistakes in the forward pass, each with the hint that names it
# ---------------------------------------------------------------------------------------------
def _mha_written_out(*, k_proj_name="k", v_input="value", softmax=True, softmax_dim=-1, scale="d"):
    """A learner's forward pass written out, independent of the check's reference, with one mistake."""

    def answer(query, key, value, q_proj, k_proj, v_proj, out_proj, num_heads):
        projections = {"q": q_proj, "k": k_proj, "v": v_proj}
        q = split_right(q_proj(query), num_heads)
        k = split_right(projections[k_proj_name](key), num_heads)
        v = split_right(v_proj({"value": value, "key": key}[v_input]), num_heads)
        d = q.size(-1)
        scores = q @ k.transpose(-2, -1) / math.sqrt({"d": d, "h": num_heads}[scale])
        weights = torch.softmax(scores, dim=softmax_dim) if softmax else scores
        return out_proj(merge_right(weights @ v))

    return answer


@pytest.mark.parametrize(
    "knobs, hint",
    [
        (dict(softmax_dim=1), "softmax runs over dim=1, the heads"),
        (dict(scale="h"), "divided by √h"),
        (dict(softmax=False), "the softmax is missing"),
        (dict(k_proj_name="q"), "K is computed with `q_proj`"),
        (dict(v_input="key"), "V is computed from `key`"),
    ],
)
def test_mha_more_mistakes_are_named(knobs, hint):
    verdict = check_multi_head_attention(_mha_written_out(**knobs))
    assert verdict.status == "wrong" and hint in verdict.message, verdict.message


def test_mha_written_out_without_mistake_passes():
    assert check_multi_head_attention(_mha_written_out()).passed


# ---------------------------------------------------------------------------------------------
# More residual-block and decoder-layer mistakes
# ---------------------------------------------------------------------------------------------
MORE_BLOCK_MISTAKES = {
    "sublayer's output is subtracted": lambda x, s, n, first: x - s(n(x)) if first else n(x - s(x)),
    "has no γ and β": lambda x, s, n, first: (
        x + s(F.layer_norm(x, x.shape[-1:])) if first else F.layer_norm(x + s(x), x.shape[-1:])
    ),
    "made a LayerNorm of its own": lambda x, s, n, first: x + s(nn.LayerNorm(x.size(-1))(x)),
}


@pytest.mark.parametrize("hint,block", list(MORE_BLOCK_MISTAKES.items()))
def test_residual_check_names_more_mistakes(hint, block):
    verdict = check_residual_block(block)
    assert verdict.status == "wrong" and hint in verdict.message, verdict.message


def _decoder_rewired(*, cross_mask="", norms=("norm1", "norm2", "norm3"), residual_from_tgt=(), queries="x"):
    """A decoder answer written out, with masks sent to the wrong place, norms reused or residuals from tgt."""

    def answer(layer, tgt, memory, tgt_mask, memory_key_padding_mask):
        norm = [getattr(layer, name) for name in norms]
        x = tgt
        attended = layer.self_attn(x, x, x, attn_mask=tgt_mask, need_weights=False)[0]
        x = norm[0](x + layer.dropout1(attended))
        masks = {
            "": dict(key_padding_mask=memory_key_padding_mask),
            "padding as attn_mask": dict(attn_mask=memory_key_padding_mask),
            "causal too": dict(attn_mask=tgt_mask, key_padding_mask=memory_key_padding_mask),
        }[cross_mask]
        if queries == "memory":
            attended = layer.multihead_attn(memory, x, x, need_weights=False)[0]
        else:
            attended = layer.multihead_attn(x, memory, memory, need_weights=False, **masks)[0]
        x = norm[1]((tgt if 2 in residual_from_tgt else x) + layer.dropout2(attended))
        hidden = layer.dropout3(layer.linear2(layer.dropout(layer.activation(layer.linear1(x)))))
        return norm[2]((tgt if 3 in residual_from_tgt else x) + hidden)

    return answer


@pytest.mark.parametrize(
    "knobs, hint",
    [
        (dict(cross_mask="padding as attn_mask"), "a mask went to the wrong attention or argument"),
        (dict(cross_mask="causal too"), "the cross-attention takes no causal mask"),
        (dict(queries="memory"), "queries come from the decoder"),
        (dict(norms=("norm1", "norm1", "norm1")), "every sub-block uses layer.norm1"),
        (dict(norms=("norm1", "norm1", "norm3")), "cross-attention's block uses layer.norm1"),
        (dict(norms=("norm1", "norm2", "norm1")), "feed-forward block uses layer.norm1"),
        (dict(residual_from_tgt=(2,)), "cross-attention's residual adds `tgt`"),
        (dict(residual_from_tgt=(3,)), "feed-forward's residual adds `tgt`"),
    ],
)
def test_decoder_check_names_more_mistakes(knobs, hint):
    verdict = check_decoder_layer_forward(_decoder_rewired(**knobs))
    assert verdict.status == "wrong" and hint in verdict.message, verdict.message
    assert "your code raised" not in verdict.message


def test_decoder_rewired_without_mistake_passes():
    assert check_decoder_layer_forward(_decoder_rewired()).passed


@pytest.mark.parametrize(
    "split, hint",
    [
        (lambda x, h: x.view(x.size(0), x.size(1), h, -1).transpose(0, 2), "got (4, 3, 2, 2)"),
        (lambda x, h: list(x.chunk(h, -1)), "should be one tensor"),
        (lambda x, h: x.reshape(x.size(0), h, x.size(1), -1).permute(0, 2, 1, 3), "heads are still dim 2"),
    ],
)
def test_split_check_names_more_mistakes(split, hint):
    verdict = check_split_heads(split)
    assert verdict.status == "wrong" and hint in verdict.message, verdict.message


@pytest.mark.parametrize(
    "merge, hint",
    [
        (lambda x: x.sum(1), "should have shape (N, T, E) = (2, 3, 8), got (2, 3, 2)"),
        (lambda x: torch.cat(x.unbind(1), dim=1), "got (2, 12, 2)"),
        (lambda x: x.transpose(2, 3).reshape(x.size(0), x.size(2), -1), "merge_heads(split_heads(x)) == x"),
    ],
)
def test_merge_check_names_more_mistakes(merge, hint):
    verdict = check_merge_heads(merge)
    assert verdict.status == "wrong" and hint in verdict.message, verdict.message


def test_split_and_merge_other_right_answers_pass():
    assert check_split_heads(lambda x, h: torch.stack(x.chunk(h, -1), 1)).passed
    assert check_merge_heads(lambda x: x.transpose(1, 2).contiguous().view(x.size(0), x.size(2), -1)).passed
