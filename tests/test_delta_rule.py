"""Linear attention and the (gated) delta rule (``helpers.delta_rule``), in float64: the parallel and recurrent
forms of linear attention agree; the recurrent and chunked delta rule agree for lengths, chunk sizes that do and do
not divide them, and initial states, and both equal ``transformers``' Qwen3-Next references (which compute in
float32, hence their tolerance); the rule recalls a stored value exactly; the GPT's "linear" and "delta" layers
generate from a constant-size state what a full forward pass gives; and the state's bytes do not grow with T."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from helpers.delta_rule import (
    DeltaRuleAttention,
    delta_rule_chunked,
    delta_rule_recurrent,
    delta_rule_step,
    delta_rule_weights,
    linear_attention,
    linear_attention_recurrent,
    linear_attention_weights,
)
from helpers.gpt import GPT, GPTConfig, generate
from helpers.kv_cache import kv_cache_bytes, recurrent_state_bytes

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # small tensors: one thread is fastest

F64 = torch.float64


def _inputs(T: int, N: int = 2, h: int = 3, d_k: int = 5, d_v: int = 4, seed: int = 0, gated: bool = True):
    """Random q, k (unit length, as the layers use them), v, beta in (0, 1), log alpha < 0 and a state."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(N, h, T, d_k, generator=g, dtype=F64)
    k = F.normalize(torch.randn(N, h, T, d_k, generator=g, dtype=F64), dim=-1)
    v = torch.randn(N, h, T, d_v, generator=g, dtype=F64)
    beta = torch.rand(N, h, T, generator=g, dtype=F64)
    log_alpha = -torch.rand(N, h, T, generator=g, dtype=F64) if gated else None
    state = torch.randn(N, h, d_k, d_v, generator=g, dtype=F64)
    return q, k, v, beta, log_alpha, state


# ---------------------------------------------------------------------------------------------
# Linear attention: the masked (Q K^T) V form is the running sum S_t = S_{t-1} + k_t v_t^T
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("T", [1, 6, 17])
@pytest.mark.parametrize("with_state", [False, True])
def test_linear_attention_parallel_equals_recurrent(T, with_state):
    q, k, v, _, _, state = _inputs(T)
    start = state if with_state else None
    out, final = linear_attention(q, k, v, start)
    out_r, final_r = linear_attention_recurrent(q, k, v, start)
    torch.testing.assert_close(out, out_r, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(final, final_r, rtol=1e-12, atol=1e-12)
    # and both are the sum written out: o_t = sum_{i <= t} (q_t . k_i) v_i / sqrt(d_k) (+ S_0^T q_t / sqrt(d_k))
    t = T - 1
    by_hand = torch.einsum("nhd,nhid,nhie->nhe", q[:, :, t], k, v) / 5**0.5
    if with_state:
        by_hand = by_hand + torch.einsum("nhd,nhde->nhe", q[:, :, t], state) / 5**0.5
    torch.testing.assert_close(out[:, :, t], by_hand, rtol=1e-12, atol=1e-12)


def test_linear_attention_weights_are_the_masked_scores_and_zero_in_the_future():
    q, k, v, *_ = _inputs(6)
    weights = linear_attention_weights(q, k, scale=0.5)
    assert torch.all(weights.triu(1) == 0)
    torch.testing.assert_close(weights.tril(), (0.5 * q @ k.transpose(-1, -2)).tril())
    torch.testing.assert_close(weights @ v, linear_attention(q, k, v, scale=0.5)[0])


# ---------------------------------------------------------------------------------------------
# The delta rule: recurrent = chunked, and what it reduces to
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("T", "chunk_size"), [(1, 4), (7, 3), (16, 4), (16, 5), (23, 64), (23, 1), (30, 7)])
@pytest.mark.parametrize("with_state", [False, True])
@pytest.mark.parametrize("gated", [False, True])
def test_delta_rule_recurrent_equals_chunked(T, chunk_size, with_state, gated):
    q, k, v, beta, log_alpha, state = _inputs(T, gated=gated, seed=T + chunk_size)
    start = state if with_state else None
    out_r, final_r = delta_rule_recurrent(q, k, v, beta, log_alpha, start)
    out_c, final_c = delta_rule_chunked(q, k, v, beta, log_alpha, chunk_size, start)
    torch.testing.assert_close(out_c, out_r, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(final_c, final_r, rtol=1e-10, atol=1e-10)


def test_a_prompt_read_in_two_calls_continues_from_the_state():
    q, k, v, beta, log_alpha, _ = _inputs(20)
    whole, final = delta_rule_chunked(q, k, v, beta, log_alpha, chunk_size=6)
    first, middle = delta_rule_chunked(q[:, :, :9], k[:, :, :9], v[:, :, :9], beta[..., :9], log_alpha[..., :9], 4)
    rest, end = delta_rule_recurrent(q[:, :, 9:], k[:, :, 9:], v[:, :, 9:], beta[..., 9:], log_alpha[..., 9:], middle)
    torch.testing.assert_close(torch.cat((first, rest), dim=2), whole, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(end, final, rtol=1e-10, atol=1e-10)


def test_beta_and_alpha_one_is_the_plain_delta_rule_written_with_matrices():
    q, k, v, _, _, state = _inputs(9)
    ones = torch.ones(q.shape[:3], dtype=F64)
    out, final = delta_rule_chunked(q, k, v, ones, torch.zeros_like(ones), chunk_size=4, initial_state=state)
    eye = torch.eye(5, dtype=F64)
    S, expected = state.clone(), []
    for t in range(9):  # S_t = (I - k k^T) S_{t-1} + k v^T, o_t = S_t^T q_t / sqrt(d_k)
        kt, vt = k[:, :, t, :, None], v[:, :, t, None, :]  # (N, h, d_k, 1), (N, h, 1, d_v)
        S = (eye - kt @ kt.transpose(-1, -2)) @ S + kt @ vt
        expected.append((S.transpose(-1, -2) @ q[:, :, t, :, None])[..., 0] / 5**0.5)
    torch.testing.assert_close(out, torch.stack(expected, dim=2), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(final, S, rtol=1e-12, atol=1e-12)
    # log_alpha = 0 (alpha = 1) is no gate at all
    torch.testing.assert_close(delta_rule_recurrent(q, k, v, ones, None, state)[0], out, rtol=1e-12, atol=1e-12)


def test_the_gate_scales_the_old_state_first():
    q, k, v, beta, _, state = _inputs(1)
    log_alpha = torch.full(beta.shape, -0.7, dtype=F64)
    _, gated = delta_rule_step(state, q[:, :, 0], k[:, :, 0], v[:, :, 0], beta[..., 0], log_alpha[..., 0])
    _, plain = delta_rule_step(state * torch.exp(torch.tensor(-0.7, dtype=F64)), q[:, :, 0], k[:, :, 0], v[:, :, 0],
                               beta[..., 0])  # fmt: skip
    torch.testing.assert_close(gated, plain, rtol=1e-12, atol=1e-12)
    assert not torch.allclose(gated, delta_rule_step(state, q[:, :, 0], k[:, :, 0], v[:, :, 0], beta[..., 0])[1])


def test_one_key_stored_then_queried_recalls_its_value_exactly_where_linear_attention_does_not():
    """beta = 1 and ||k|| = 1: the delta rule overwrites what the key held before (a random state here); linear
    attention adds to it, so the old contents leak into the answer."""
    _, k, v, _, _, state = _inputs(1)
    beta = torch.ones(k.shape[:3], dtype=F64)
    _, stored = delta_rule_recurrent(k, k, v, beta, initial_state=state)
    recalled = (k[:, :, 0, None, :] @ stored)[..., 0, :]  # S^T k
    torch.testing.assert_close(recalled, v[:, :, 0], rtol=1e-12, atol=1e-12)
    out, _ = delta_rule_recurrent(k, k, v, beta, initial_state=state, scale=1.0)  # the same read, as the output
    torch.testing.assert_close(out[:, :, 0], v[:, :, 0], rtol=1e-12, atol=1e-12)
    _, summed = linear_attention(k, k, v, state)
    leaked = (k[:, :, 0, None, :] @ summed)[..., 0, :] - v[:, :, 0]  # S_0^T k: the old contents
    assert leaked.abs().max() > 0.1


def test_with_orthonormal_keys_and_beta_one_the_delta_rule_is_linear_attention():
    """Nothing to correct: the state holds nothing under a key orthogonal to every earlier one."""
    q, _, v, *_ = _inputs(5, d_k=8)
    basis = torch.linalg.qr(torch.randn(8, 8, dtype=F64, generator=torch.Generator().manual_seed(1)))[0]
    k = basis[:5].expand(2, 3, 5, 8)  # 5 orthonormal keys
    ones = torch.ones(2, 3, 5, dtype=F64)
    torch.testing.assert_close(delta_rule_chunked(q, k, v, ones, chunk_size=2)[0], linear_attention(q, k, v)[0])
    # and with an overlapping key they differ: the delta rule subtracts what the state already recalls
    k2 = k.clone()
    k2[:, :, 3] = F.normalize(k[:, :, 0] + k[:, :, 1], dim=-1)
    assert not torch.allclose(delta_rule_chunked(q, k2, v, ones)[0], linear_attention(q, k2, v)[0])


@pytest.mark.parametrize("gated", [False, True])
def test_delta_rule_weights_times_values_are_the_outputs(gated):
    q, k, v, beta, log_alpha, _ = _inputs(11, gated=gated)
    weights = delta_rule_weights(q, k, beta, log_alpha)
    assert weights.shape == (2, 3, 11, 11) and torch.all(weights.triu(1) == 0)
    torch.testing.assert_close(weights @ v, delta_rule_recurrent(q, k, v, beta, log_alpha)[0], rtol=1e-12, atol=1e-12)


def test_bad_inputs_are_refused_with_the_shapes_expected():
    q, k, v, beta, log_alpha, state = _inputs(6)
    with pytest.raises(ValueError, match=r"\(N, h, T, d_k\)"):
        delta_rule_recurrent(q, k[:, :, :5], v, beta)
    with pytest.raises(ValueError, match=r"beta must be one number per head and token, \(N, h, T\)"):
        delta_rule_chunked(q, k, v, beta[..., None])
    with pytest.raises(ValueError, match="log_alpha must be <= 0"):
        delta_rule_chunked(q, k, v, beta, -log_alpha)
    with pytest.raises(ValueError, match=r"initial_state must be the state \(N, h, d_k, d_v\)"):
        delta_rule_chunked(q, k, v, beta, initial_state=state.transpose(-1, -2))
    with pytest.raises(ValueError, match="chunk_size must be a positive int"):
        delta_rule_chunked(q, k, v, beta, chunk_size=0)
    with pytest.raises(ValueError, match=r"float tensor \(N, h, T, d\)"):
        linear_attention(q[0], k[0], v[0])
    with pytest.raises(ValueError, match="kind must be one of"):
        DeltaRuleAttention(8, 2, 4, kind="softmax")


# ---------------------------------------------------------------------------------------------
# transformers' Qwen3-Next references (float32 inside: tolerance 1e-5)
# ---------------------------------------------------------------------------------------------
def _references():
    from transformers.models.qwen3_next import modeling_qwen3_next as qwen3_next

    return qwen3_next.torch_recurrent_gated_delta_rule, qwen3_next.torch_chunk_gated_delta_rule


def _theirs(x):
    """Ours (N, h, T, ...) -> theirs (N, T, h, ...)."""
    return x.transpose(1, 2)


@pytest.mark.parametrize(("T", "chunk_size"), [(13, 4), (16, 8), (5, 64)])
@pytest.mark.parametrize("with_state", [False, True])
def test_equal_to_transformers_gated_delta_rule(T, chunk_size, with_state):
    """Their g is our log alpha; they scale queries by 1 / sqrt(d_k), our default; their state is (N, h, d_k,
    d_v) like ours."""
    recurrent_ref, chunk_ref = _references()
    q, k, v, beta, log_alpha, state = _inputs(T, seed=T)
    start = state if with_state else None
    ours, our_state = delta_rule_chunked(q, k, v, beta, log_alpha, chunk_size, start)
    ours_r, our_state_r = delta_rule_recurrent(q, k, v, beta, log_alpha, start)
    args = [_theirs(t) for t in (q, k, v, log_alpha, beta)]
    for reference, extra in ((recurrent_ref, {}), (chunk_ref, {"chunk_size": chunk_size})):
        theirs, their_state = reference(*args, initial_state=start, output_final_state=True, **extra)
        for mine in (ours, ours_r):
            torch.testing.assert_close(_theirs(theirs).to(F64), mine, rtol=1e-5, atol=1e-5)
        for mine in (our_state, our_state_r):
            torch.testing.assert_close(their_state.to(F64), mine, rtol=1e-5, atol=1e-5)


def test_equal_to_transformers_with_its_l2_norm_and_another_scale():
    """``use_qk_l2norm_in_kernel``: their queries and keys scaled to unit length inside (ours: before the call, as
    the layer does); a scale s of ours is their 1 / sqrt(d_k) with the queries multiplied by s · sqrt(d_k)."""
    recurrent_ref, chunk_ref = _references()
    q, _, v, beta, log_alpha, _ = _inputs(10, seed=3)
    k = 3.0 * torch.randn(q.shape, dtype=F64, generator=torch.Generator().manual_seed(4))  # not unit length
    ours, _ = delta_rule_chunked(F.normalize(q, dim=-1), F.normalize(k, dim=-1), v, beta, log_alpha, 4)
    args = [_theirs(t) for t in (q, k, v, log_alpha, beta)]
    for reference in (recurrent_ref, chunk_ref):
        theirs, _ = reference(*args, use_qk_l2norm_in_kernel=True)
        torch.testing.assert_close(_theirs(theirs).to(F64), ours, rtol=1e-5, atol=1e-5)
    k = F.normalize(k, dim=-1)
    scaled, _ = delta_rule_recurrent(q, k, v, beta, log_alpha, scale=0.3)
    theirs, _ = recurrent_ref(_theirs(q * 0.3 * 5**0.5), *[_theirs(t) for t in (k, v, log_alpha, beta)])
    torch.testing.assert_close(_theirs(theirs).to(F64), scaled, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# The GPT's "linear" and "delta" layers: generation from a state equals the full forward pass
# ---------------------------------------------------------------------------------------------
def _model(kinds: tuple[str, ...], seed: int = 0, chunk_size: int | None = None, **changes) -> GPT:
    torch.manual_seed(seed)
    config = GPTConfig(
        vocab_size=40, embed_dim=32, num_heads=4, num_layers=len(kinds), ff_dim=48, layer_kinds=kinds, window=4,
        **changes,
    )  # fmt: skip
    model = GPT(config).double().eval()
    if chunk_size is not None:  # several chunks in the prompt and in the full forward pass
        for block in model.blocks:
            if isinstance(block.attention, DeltaRuleAttention):
                block.attention.chunk_size = chunk_size
    return model


@pytest.mark.parametrize(
    "kinds", [("delta", "delta"), ("linear", "linear"), ("delta", "global"), ("linear", "local", "delta")]
)
@pytest.mark.parametrize("positions", ["rotary", "none"])
def test_generation_from_the_state_equals_the_full_forward_pass(kinds, positions):
    model = _model(kinds, chunk_size=3, positions=positions)
    prompt = torch.randint(40, (2, 7), generator=torch.Generator().manual_seed(1))
    cached, cached_logits = generate(model, prompt, 12)
    full, full_logits = generate(model, prompt, 12, use_cache=False)
    assert torch.equal(cached, full)
    torch.testing.assert_close(cached_logits, full_logits, rtol=1e-10, atol=1e-10)
    # the one-token steps run delta_rule_step: the same logits as the chunked form over the whole text
    torch.testing.assert_close(model(cached[:, :-1])[:, 6:], cached_logits, rtol=1e-10, atol=1e-10)


def test_a_delta_layer_has_its_projections_and_weights_whose_product_with_values_is_its_output():
    model = _model(("delta",))
    layer = model.blocks[0].attention
    assert {"q_proj", "k_proj", "v_proj", "out_proj", "beta_proj", "alpha_proj"} <= dict(layer.named_children()).keys()
    assert not hasattr(_model(("linear",)).blocks[0].attention, "beta_proj")
    x, positions = torch.randn(2, 9, 32, dtype=F64), torch.arange(9)
    out, (state,), weights = layer(x, positions, need_weights=True)
    v = layer.v_proj(x).unflatten(-1, (4, 8)).transpose(1, 2)
    torch.testing.assert_close(out, layer.out_proj((weights @ v).transpose(1, 2).flatten(2)))
    assert state.shape == (2, 4, 8, 8)
    with pytest.raises(ValueError, match="cache holds no keys"):
        layer(x[:, :1], positions[:1], past=(state,), need_weights=True)


def test_a_cache_whose_state_has_another_shape_is_refused():
    model = _model(("delta", "global"))
    cache = model.new_cache()
    model(torch.randint(40, (2, 5)), cache)
    cache.layers[0] = (cache.layers[0][0][:, :2],)
    with pytest.raises(ValueError, match=r"must hold \(state,\), a state \(N, h, d, d\)"):
        model(torch.randint(40, (2, 1)), cache)


# ---------------------------------------------------------------------------------------------
# Memory: the state stays h · d_k · d_v numbers per layer while a KV cache grows with T
# ---------------------------------------------------------------------------------------------
def test_the_state_is_constant_in_T_while_the_kv_cache_grows_counted_and_measured():
    delta, softmax = _model(("delta", "delta")), _model(("global", "global"))
    caches = {"delta": delta.new_cache(), "softmax": softmax.new_cache()}
    ids = torch.randint(40, (2, 1))
    measured = {"delta": [], "softmax": []}
    for T in range(1, 25):
        for name, model in (("delta", delta), ("softmax", softmax)):
            model(ids, caches[name])
            measured[name].append(caches[name].nbytes())
        assert measured["delta"][-1] == recurrent_state_bytes(2, 4, 8, 8, bytes_per_number=8, batch_size=2)
        assert measured["softmax"][-1] == kv_cache_bytes(2, 4, 8, T, bytes_per_number=8, batch_size=2)
    assert len(set(measured["delta"])) == 1 and measured["softmax"][-1] == 24 * measured["softmax"][0]
    # the KV cache of 2 · h · d numbers per token and layer passes the state's h · d · d at T = d / 2 = 4 tokens
    assert measured["softmax"][3] == measured["delta"][0]


def test_recurrent_state_bytes_counts_and_refuses_bad_sizes():
    # transformers' Qwen3NextConfig defaults: 36 of its 48 layers linear, 32 value heads, d_k = d_v = 128; bf16
    assert recurrent_state_bytes(36, 32, 128, 128) == 36 * 32 * 128 * 128 * 2
    assert recurrent_state_bytes(1, 1, 2, 3, bytes_per_number=4, batch_size=5) == 120
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="must be a positive int"):
            recurrent_state_bytes(2, bad, 8, 8)


# ---------------------------------------------------------------------------------------------
# The numeric edges: both forms accept the same inputs and refuse the same ones
# ---------------------------------------------------------------------------------------------
def _edge_inputs(T: int = 7, dtype=torch.float32):
    g = torch.Generator().manual_seed(5)
    q = torch.randn(1, 2, T, 4, generator=g)
    k = torch.nn.functional.normalize(torch.randn(1, 2, T, 4, generator=g), dim=-1)
    v = torch.randn(1, 2, T, 4, generator=g)
    beta, log_alpha = torch.rand(1, 2, T, generator=g), -torch.rand(1, 2, T, generator=g)
    return [t.to(dtype) for t in (q, k, v, beta, log_alpha)]


def _both_forms(q, k, v, beta, log_alpha):
    return delta_rule_recurrent(q, k, v, beta, log_alpha), delta_rule_chunked(q, k, v, beta, log_alpha, chunk_size=3)


@pytest.mark.parametrize(
    "edit, error, message",
    [
        (lambda t: t[4].index_fill_(2, torch.tensor([3]), -math.inf), ValueError, "log_alpha must be <= 0 and finite"),
        (lambda t: t[4].index_fill_(2, torch.tensor([3]), math.nan), ValueError, "log_alpha must be <= 0 and finite"),
        (lambda t: t[3].index_fill_(2, torch.tensor([1]), 1.5), ValueError, r"beta must be in \[0, 1\]"),
        (lambda t: t[3].index_fill_(2, torch.tensor([1]), -0.1), ValueError, r"beta must be in \[0, 1\]"),
        (lambda t: t[3].index_fill_(2, torch.tensor([1]), math.nan), ValueError, r"beta must be in \[0, 1\]"),
        (lambda t: t.__setitem__(2, t[2].double()), TypeError, "share one dtype and device.*v torch.float64"),
    ],
)
def test_both_forms_refuse_the_same_inputs_clearly(edit, error, message):
    inputs = _edge_inputs()
    edit(inputs)
    for form in (delta_rule_recurrent, delta_rule_chunked):
        with pytest.raises(error, match=message):
            form(*inputs)


def test_both_forms_agree_at_the_edges_they_accept():
    q, k, v, beta, log_alpha = _edge_inputs()
    log_alpha[:, :, 3] = -30.0  # forget (almost) everything at token 3: finite in both forms
    beta[:, :, 2], beta[:, :, 4] = 0.0, 1.0  # the ends of [0, 1]
    (out, state), (chunked, chunked_state) = _both_forms(q, k, v, beta, log_alpha)
    assert torch.isfinite(chunked).all()
    torch.testing.assert_close(chunked, out, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(chunked_state, state, atol=1e-5, rtol=1e-5)
    empty = [t[:, :, :0] for t in (q, k, v, beta, log_alpha)]  # T = 0: no output, the initial state back
    for result, _ in zip(_both_forms(*empty), range(2), strict=True):
        assert result[0].shape == (1, 2, 0, 4) and torch.equal(result[1], torch.zeros(1, 2, 4, 4))
    half = _edge_inputs(dtype=torch.float16)  # 16-bit: the chunked form solves in float32, returns float16
    (out16, _), (chunked16, _) = _both_forms(*half)
    reference, _ = delta_rule_recurrent(*_edge_inputs())
    assert out16.dtype == chunked16.dtype == torch.float16
    torch.testing.assert_close(chunked16.float(), reference, atol=3e-3, rtol=3e-3)
    torch.testing.assert_close(out16.float(), reference, atol=3e-3, rtol=3e-3)
