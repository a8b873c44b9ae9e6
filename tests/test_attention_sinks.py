"""gpt-oss's attention sinks in the one masked softmax: a learned logit per head, softmax over the scores and one
extra column whose weight is dropped. Equal in float64 to ``transformers``' ``GptOssAttention`` (eager) with a
causal mask and with a sliding window (gpt-oss alternates them: our ``layer_kinds``); as s -> -inf it is plain
attention; low scores beside a high sink give almost no weight to anything; gradients reach the sink; a cached
GPT with sinks decodes as it runs whole; bad sinks get clear errors."""

from __future__ import annotations

import math

import pytest
import torch

from helpers.attention import AttentionCore, attend, masked_softmax
from helpers.gpt import GPT, GPTConfig
from helpers.masks import causal_mask, sdpa_mask
from helpers.models.reference_attention import attention_from_gpt_oss
from helpers.rotary import rotary_cos_sin

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tiny tensors: one thread is fastest

N, h, h_kv, d, E, T, WINDOW = 2, 4, 2, 8, 32, 9, 4


def _scores(seed: int = 0, L: int = 5, S: int = 6) -> torch.Tensor:
    return torch.randn(N, h, L, S, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


# ---------------------------------------------------------------------------------------------
# The sink softmax on its own
# ---------------------------------------------------------------------------------------------
def test_a_sink_of_minus_infinity_is_plain_attention_even_for_rows_with_no_key():
    scores = _scores()
    may_attend = torch.ones(5, 6, dtype=torch.bool).tril()  # (L, S), True = may attend
    may_attend = may_attend.clone()
    may_attend[0] = False  # a query with no key left: zeros with and without the sink, never NaN
    sink = torch.full((h,), float("-inf"), dtype=torch.float64)
    with_sink = masked_softmax(scores, may_attend, sink)
    assert torch.equal(with_sink, masked_softmax(scores, may_attend))
    assert torch.equal(with_sink[:, :, 0], torch.zeros(N, h, 6, dtype=torch.float64))
    # and the limit: a very low sink is within e^-1000 of it
    torch.testing.assert_close(masked_softmax(scores, may_attend, sink.new_full((h,), -1e3)), with_sink)


def test_each_row_over_the_real_keys_sums_to_one_over_one_plus_e_to_the_sink_minus_logsumexp():
    scores = _scores(1)
    sink = torch.tensor([-2.0, 0.0, 1.0, 3.0], dtype=torch.float64)
    weights = masked_softmax(scores, None, sink)
    expected = torch.sigmoid(scores.logsumexp(-1) - sink.view(h, 1))  # 1 / (1 + e^(s - lse)), (N, h, L)
    torch.testing.assert_close(weights.sum(-1), expected, rtol=0, atol=1e-15)
    assert (weights.sum(-1) < 1).all()
    # the kept weights keep the softmax's proportions: each row is the plain softmax times its sum
    torch.testing.assert_close(weights, masked_softmax(scores) * expected.unsqueeze(-1), rtol=0, atol=1e-15)


def test_low_scores_and_a_high_sink_give_almost_no_weight_to_anything():
    scores = torch.full((1, h, 3, 5), -8.0, dtype=torch.float64) + 0.1 * _scores(2, 3, 5)[:1]
    sink = torch.tensor([8.0, 8.0, 8.0, -30.0], dtype=torch.float64)  # the last head has no sink to speak of
    weights = masked_softmax(scores, None, sink)
    assert weights[:, :3].sum(-1).max() < 5 * math.exp(-16 + 1)  # five keys each about e^-16 of the sink
    torch.testing.assert_close(weights[:, 3].sum(-1), torch.ones(1, 3, dtype=torch.float64))


def test_a_fully_blocked_row_with_a_finite_sink_gives_zero_weights_and_finite_gradients():
    scores = _scores(3).requires_grad_()
    sink = torch.zeros(h, dtype=torch.float64, requires_grad=True)
    may_attend = torch.ones(5, 6, dtype=torch.bool)
    may_attend[2] = False
    weights = masked_softmax(scores, may_attend, sink)
    assert torch.equal(weights[:, :, 2], torch.zeros(N, h, 6, dtype=torch.float64))
    weights.sum().backward()
    assert torch.isfinite(scores.grad).all() and torch.isfinite(sink.grad).all()


def test_gradients_reach_the_sink_and_equal_finite_differences():
    scores = _scores(4, 3, 4).requires_grad_()
    sink = torch.tensor([0.5, -1.0, 2.0, 0.0], dtype=torch.float64, requires_grad=True)
    may_attend = torch.ones(3, 4, dtype=torch.bool).tril()
    values = torch.randn(N, h, 4, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(5))

    def output(s, sk):
        return masked_softmax(s, may_attend, sk) @ values

    assert torch.autograd.gradcheck(output, (scores, sink))
    (grad,) = torch.autograd.grad(output(scores, sink).square().sum(), sink)
    assert (grad.abs() > 1e-6).all()  # every head's sink gets a gradient


def test_attend_with_a_sink_spells_the_attention_out_and_matches_the_weights_it_returns():
    g = torch.Generator().manual_seed(6)
    q = torch.randn(N, h, 5, d, generator=g, dtype=torch.float64)
    k, v = (torch.randn(N, h_kv, 5, d, generator=g, dtype=torch.float64) for _ in range(2))
    sink = torch.randn(h, generator=g, dtype=torch.float64)
    may_attend = sdpa_mask(causal_mask(5))
    out, _ = attend(q, k, v, may_attend, sink=sink)
    out_w, weights = attend(q, k, v, may_attend, sink=sink, need_weights=True)
    torch.testing.assert_close(out, out_w, rtol=0, atol=1e-14)
    plain, _ = attend(q, k, v, may_attend)
    assert not torch.allclose(out, plain)  # the sink changed something
    assert (weights.sum(-1) < 1).all()


@pytest.mark.parametrize(
    ("sink", "scores_shape", "error", "message"),
    [
        (torch.zeros(h + 1), (N, h, 3, 3), ValueError, r"one logit per head, shape \(4,\)"),
        (torch.zeros(1, h), (N, h, 3, 3), ValueError, r"got shape \(1, 4\)"),
        (torch.zeros(h, dtype=torch.long), (N, h, 3, 3), TypeError, "floating-point tensor"),
        ([0.0] * h, (N, h, 3, 3), TypeError, "got list"),
        (torch.zeros(h), (3, 3), ValueError, r"\(\.\.\., h, L, S\)"),
    ],
)
def test_bad_sinks_are_refused_with_the_shape_expected(sink, scores_shape, error, message):
    with pytest.raises(error, match=message):
        masked_softmax(torch.zeros(scores_shape), None, sink)


def test_a_sink_and_a_weights_from_scores_hook_together_are_an_error_not_a_sink_dropped():
    q = k = v = torch.zeros(1, h, 3, d)
    with pytest.raises(ValueError, match="would drop the sink"):
        attend(q, k, v, sink=torch.zeros(h), weights_from_scores=lambda s, m, p: masked_softmax(s, m))

    class WithSinks(AttentionCore):
        def __init__(self):
            super().__init__()
            self.sinks = torch.nn.Parameter(torch.zeros(h))

    core = WithSinks()
    assert core.sink_logits is core.sinks
    core.weights_from_scores = lambda s, m, p: masked_softmax(s, m)
    with pytest.raises(ValueError, match="sink logits"):
        core.attend_heads(q, k, v)


# ---------------------------------------------------------------------------------------------
# Equal to transformers' GptOssAttention (eager), float64, causal and sliding-window layers
# ---------------------------------------------------------------------------------------------
def _gpt_oss_pair(layer: int):
    """Our layer ``layer`` (local, then global) and GptOssAttention with the same random weights, float64."""
    from transformers import GptOssConfig
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssAttention

    theirs_config = GptOssConfig(
        vocab_size=50, hidden_size=E, num_attention_heads=h, num_key_value_heads=h_kv, head_dim=d,
        num_hidden_layers=2, layer_types=["sliding_attention", "full_attention"], sliding_window=WINDOW,
        attention_bias=False, attention_dropout=0.0, attn_implementation="eager",
    )  # fmt: skip
    torch.manual_seed(10 + layer)
    theirs = GptOssAttention(theirs_config, layer_idx=layer).double().eval()
    with torch.no_grad():
        for parameter in theirs.parameters():
            parameter.normal_(0.0, 0.3)
        theirs.sinks.normal_(0.0, 2.0)  # some heads with high sinks, some low
    return attention_from_gpt_oss(theirs), theirs


def _additive_mask(window: int | None) -> torch.Tensor:
    """The 4-D float mask transformers' eager attention adds (N, 1, T, T): 0 = may attend, dtype's min = blocked."""
    i, j = torch.arange(T).view(T, 1), torch.arange(T).view(1, T)
    blocked = (j > i) | ((i - j >= window) if window is not None else torch.zeros(T, T, dtype=torch.bool))
    mask = torch.zeros(T, T, dtype=torch.float64).masked_fill(blocked, torch.finfo(torch.float64).min)
    return mask.expand(N, 1, T, T)


@pytest.mark.parametrize(("layer", "window"), [(0, WINDOW), (1, None)], ids=["sliding window", "causal"])
def test_sink_attention_equals_transformers_gpt_oss_attention(layer, window):
    ours, theirs = _gpt_oss_pair(layer)
    assert ours.window == window
    x = torch.randn(N, T, E, dtype=torch.float64, generator=torch.Generator().manual_seed(11))
    positions = torch.arange(T)
    assert ours.rotary_base == theirs.config.rope_parameters["rope_theta"]  # 150,000: gpt-oss's, read from it
    cos, sin = rotary_cos_sin(positions, d, ours.rotary_base, torch.float64)  # (T, d / 2): theirs rotates halves
    with torch.no_grad():
        expected, expected_weights = theirs(x, (cos.expand(N, T, -1), sin.expand(N, T, -1)), _additive_mask(window))
        out, _, weights = ours(x, positions, need_weights=True)
        fused_out, _ = ours(x, positions)  # no weights asked for: the same spelled-out path
    torch.testing.assert_close(weights, expected_weights, rtol=0, atol=1e-13)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-12)
    torch.testing.assert_close(fused_out, expected, rtol=0, atol=1e-12)
    assert (weights.sum(-1) < 1 - 1e-6).all()  # every head gave some weight to its sink
    ours.sinks.data.fill_(float("-inf"))
    with torch.no_grad():
        plain, _, plain_weights = ours(x, positions, need_weights=True)
    torch.testing.assert_close(plain_weights.sum(-1), torch.ones(N, h, T, dtype=torch.float64))
    assert not torch.allclose(plain, out, atol=1e-3)  # the sinks mattered


# ---------------------------------------------------------------------------------------------
# In the GPT: parameters, gradients, the cache
# ---------------------------------------------------------------------------------------------
def _sink_gpt(**changes) -> GPT:
    torch.manual_seed(0)
    config = dict(vocab_size=20, embed_dim=E, num_heads=h, num_kv_heads=h_kv, num_layers=2, ff_dim=48,
                  layer_kinds=("local", "global"), window=WINDOW, attention_sinks=True)  # fmt: skip
    model = GPT(GPTConfig(**(config | changes))).eval()
    with torch.no_grad():
        for block in model.blocks:
            block.attention.sinks.normal_(0.0, 1.0)
    return model


def test_each_layer_gets_a_learned_sinks_parameter_that_the_loss_reaches():
    model = _sink_gpt()
    plain = GPT(GPTConfig(vocab_size=20, embed_dim=E, num_heads=h, num_kv_heads=h_kv, num_layers=2, ff_dim=48))
    names = set(model.state_dict()) - set(plain.state_dict())
    assert names == {"blocks.0.attention.sinks", "blocks.1.attention.sinks"}
    assert all(block.attention.sinks.shape == (h,) for block in model.blocks)
    ids = torch.randint(20, (2, 7), generator=torch.Generator().manual_seed(1))
    model(ids).logsumexp(-1).sum().backward()
    assert all((block.attention.sinks.grad.abs() > 0).all() for block in model.blocks)


def test_a_gpt_with_sinks_decodes_with_the_cache_as_it_runs_whole():
    model = _sink_gpt()
    ids = torch.randint(20, (2, 10), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        whole, weights = model(ids, need_weights=True)
        cache, steps = model.new_cache(rolling=True), []
        for t in range(ids.size(1)):
            steps.append(model(ids[:, t : t + 1], cache))
    torch.testing.assert_close(torch.cat(steps, dim=1), whole, rtol=0, atol=1e-5)
    assert all((w.sum(-1) < 1).all() for w in weights)


def _gpt_oss(**changes):
    from transformers import GptOssConfig
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssAttention

    config = dict(vocab_size=50, hidden_size=E, num_attention_heads=h, num_key_value_heads=h_kv, head_dim=d,
                  num_hidden_layers=1, layer_types=["full_attention"], attention_bias=False)  # fmt: skip
    return GptOssAttention(GptOssConfig(**(config | changes)), layer_idx=0)


def test_attention_from_gpt_oss_keeps_their_dtype_and_mode_and_a_full_layer_has_no_window():
    theirs = _gpt_oss().double()
    with torch.no_grad():  # transformers makes sinks with torch.empty: memory that may hold a NaN, unequal to itself
        theirs.sinks.normal_(generator=torch.Generator().manual_seed(0))
    ours = attention_from_gpt_oss(theirs)
    assert ours.window is None and ours.sinks.dtype == torch.float64 and ours.training
    assert torch.equal(ours.sinks, theirs.sinks)
    assert attention_from_gpt_oss(theirs.eval(), positions="none").rotary is False


def test_attention_from_gpt_oss_refuses_biases_dropout_wrong_shapes_and_other_modules():
    with pytest.raises(ValueError, match=r"no projection biases.*q_proj, k_proj, v_proj, o_proj"):
        attention_from_gpt_oss(_gpt_oss(attention_bias=True))
    with pytest.raises(ValueError, match="no dropout"):
        attention_from_gpt_oss(_gpt_oss(attention_dropout=0.1))
    theirs = _gpt_oss()
    theirs.sinks = torch.nn.Parameter(torch.zeros(h + 1))
    with pytest.raises(ValueError, match=r"their sinks has shape \(5,\), but .* give \(4,\)"):
        attention_from_gpt_oss(theirs)
    with pytest.raises(TypeError, match="expects transformers' GptOssAttention, got Linear"):
        attention_from_gpt_oss(torch.nn.Linear(E, E))
    with pytest.raises(ValueError, match="positions must be 'rotary'"):
        attention_from_gpt_oss(_gpt_oss(), positions="sinusoidal")
