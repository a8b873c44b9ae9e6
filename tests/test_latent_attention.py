"""Lesson 11's graduation tests: multi-head latent attention (``helpers.latent_attention``).

(1) the absorbed form (W_UK folded into the queries, W_UV into the output projection) equals the naive one,
outputs and weights; (2) grouped-query attention is latent attention with d_c = 2·h_kv·d and block-identity
up-projections: SmolLM2 rewritten that way equals the original; (3) generation with the latent cache equals
generation without it, token for token. Also: the cache holds the latent and the rotary key only, the cache
bytes of DeepSeek-V2's Table 1, and the clear errors for bad sizes and foreign caches."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from helpers.gpt import GPT, GPTConfig, KVCache, generate
from helpers.latent_attention import (
    DEEPSEEK_V2,
    SMOLLM2,
    LatentConfig,
    MultiHeadLatentAttention,
    all_latent,
    attend_keeping_weights,
    cache_bytes_per_token,
    gpt_to_latent,
    latent_from_gqa,
    latent_gpt,
    pca_basis,
    record_keys_values,
    set_absorbed,
)
from helpers.layer_kind import seeing

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SMALL = {"embed_dim": 32, "num_heads": 4, "head_dim": 8, "latent_dim": 12, "rotary_dim": 4}


def small_layer(**changes) -> MultiHeadLatentAttention:
    torch.manual_seed(0)
    return MultiHeadLatentAttention(LatentConfig(**(SMALL | changes))).double()


def small_model(vocab: int = 40, **changes) -> GPT:
    torch.manual_seed(1)
    config = GPTConfig(vocab_size=vocab, embed_dim=32, num_heads=4, num_kv_heads=4, num_layers=2, ff_dim=48)
    return latent_gpt(config, LatentConfig(**(SMALL | changes))).eval()


# ---------------------------------------------------------------------------------------------
# (1) absorbed = naive
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("query_latent_dim", [None, 16], ids=["full-queries", "compressed-queries"])
@pytest.mark.parametrize("rotary_dim", [0, 4], ids=["no-rope", "decoupled-rope"])
def test_the_absorbed_form_equals_the_naive_one(query_latent_dim, rotary_dim):
    layer = small_layer(query_latent_dim=query_latent_dim, rotary_dim=rotary_dim)
    x = torch.randn(2, 7, 32, dtype=torch.float64)
    with torch.no_grad():
        naive, (c, k_rope), naive_weights = layer(x, need_weights=True)
        # the absorbed form must not rebuild per-head keys or values: fail if it calls the up-projections
        layer.k_up.register_forward_hook(lambda *_: pytest.fail("absorbed form rebuilt keys"))
        layer.v_up.register_forward_hook(lambda *_: pytest.fail("absorbed form rebuilt values"))
        absorbed, (c2, k_rope2), absorbed_weights = layer(x, need_weights=True, absorbed=True)
    torch.testing.assert_close(absorbed, naive, atol=1e-12, rtol=0)
    torch.testing.assert_close(absorbed_weights, naive_weights, atol=1e-12, rtol=0)
    assert torch.equal(c, c2) and torch.equal(k_rope, k_rope2)


def test_a_cached_step_in_the_absorbed_form_equals_the_whole_sequence_naive():
    layer = small_layer()
    x = torch.randn(1, 6, 32, dtype=torch.float64)
    with torch.no_grad():
        whole, _, weights = layer(x, need_weights=True)
        _, past = layer(x[:, :5])
        last, (c, _), last_weights = layer(x[:, 5:], torch.tensor([5]), past, need_weights=True, absorbed=True)
    torch.testing.assert_close(last, whole[:, 5:], atol=1e-12, rtol=0)
    torch.testing.assert_close(last_weights, weights[:, :, 5:], atol=1e-12, rtol=0)
    assert c.shape == (1, 6, 12)


def test_folding_the_wrong_matrix_is_caught():
    """The check can fail: fold W_UV (not W_UK) into the queries and the scores change."""
    layer = small_layer()
    x = torch.randn(1, 5, 32, dtype=torch.float64)
    with torch.no_grad():
        naive, _ = layer(x)
        layer.k_up.weight.copy_(layer.v_up.weight)  # what a wrong fold computes
        wrong, _ = layer(x, absorbed=True)
    assert not torch.allclose(wrong, naive, atol=1e-6)


def test_rotating_the_content_keys_cannot_be_absorbed():
    layer = small_layer(rotary_dim=0, rotate_content=True)
    with pytest.raises(ValueError, match="sits between W_UK and the query"):
        layer(torch.randn(1, 3, 32, dtype=torch.float64), absorbed=True)


def test_attend_matches_sdpa_with_a_true_means_may_attend_mask():
    torch.manual_seed(3)
    q, k, v = torch.randn(2, 3, 4, 5), torch.randn(2, 3, 6, 5), torch.randn(2, 3, 6, 5)
    may_attend = torch.rand(4, 6) > 0.3
    may_attend[:, 0] = True
    out, weights = attend_keeping_weights(q, k, v, may_attend, 0.5)
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=may_attend, scale=0.5)
    torch.testing.assert_close(out, expected)
    assert torch.all(weights[..., ~may_attend] == 0)


# ---------------------------------------------------------------------------------------------
# (2) GQA is MLA with block-identity up-projections
# ---------------------------------------------------------------------------------------------
def test_a_small_gqa_model_rewritten_as_latent_attention_is_the_same_model():
    torch.manual_seed(2)
    model = GPT(GPTConfig(vocab_size=50, embed_dim=48, num_heads=6, num_kv_heads=2, num_layers=2)).eval()
    latent = gpt_to_latent(model)
    ids = torch.randint(50, (2, 9))
    with torch.no_grad():
        expected, expected_weights = model(ids, need_weights=True)
        got, got_weights = latent(ids, need_weights=True)
    settings = latent.config.kind_settings["latent"]  # every layer of kind "latent", these its sizes
    assert latent.config.layer_kinds == ("latent", "latent") and type(latent) is GPT
    assert settings.latent_dim == 2 * 2 * 8 and settings.rotate_content
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
    for ours, theirs in zip(got_weights, expected_weights, strict=True):
        torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=0)
    up = latent.blocks[0].attention.k_up.weight  # (h·d, d_c): query head i reads the block of head i // g
    assert torch.equal(up[16:24, :8], torch.eye(8)) and torch.equal(up[24:32, 8:16], torch.eye(8))  # g = 3
    assert latent.token_embedding.weight.data_ptr() == model.token_embedding.weight.data_ptr()  # shared


@pytest.mark.integration
def test_smollm2_rewritten_as_latent_attention_equals_the_original(smollm2):
    model, tokenizer = smollm2
    ids = torch.tensor([tokenizer("A mother and her young son enjoy a beautiful day outdoors.")["input_ids"]])
    latent = gpt_to_latent(model)
    with torch.no_grad():
        expected = model(ids)
        got = latent(ids)
    assert latent.config.kind_settings["latent"].latent_dim == 2 * 3 * 64
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=0)
    # the test can fail: a latent of rank 128 (a third of the keys and values) moves the logits well beyond 1e-4
    basis = pca_basis(torch.randn(500, 384), 128)
    with torch.no_grad():
        compressed = gpt_to_latent(model, [basis] * 30)(ids)
    assert (compressed - expected).abs().max() > 1e-2


@pytest.mark.integration
def test_smollm2_with_a_compressed_latent_cache_generates_the_same_with_and_without_it(smollm2):
    """(3) on the real model: a latent of 192 (half the keys and values), PCA on 240 random tokens' ones."""
    model, tokenizer = smollm2
    calibration = torch.randint(model.config.vocab_size, (2, 120), generator=torch.Generator().manual_seed(0))
    bases = [pca_basis(kv, 192) for kv in record_keys_values(model, calibration)]
    latent = gpt_to_latent(model, bases)
    prompt = torch.tensor([tokenizer("Two dogs run across a green")["input_ids"]])[:, :6]
    cached, _ = generate(latent, prompt, 12)
    plain, _ = generate(latent, prompt, 12, use_cache=False)
    assert torch.equal(cached, plain)
    cache = latent.new_cache()
    with torch.no_grad():
        latent(prompt, cache)
    assert cache.nbytes() == 30 * 6 * 192 * 4  # the latent only (no rotary key in the GQA form), float32


# ---------------------------------------------------------------------------------------------
# (3) generation with the latent cache = without it
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("absorbed", [False, True], ids=["naive", "absorbed"])
@pytest.mark.parametrize("query_latent_dim", [None, 16], ids=["full-queries", "compressed-queries"])
def test_generation_with_the_latent_cache_equals_generation_without_it(absorbed, query_latent_dim):
    model = set_absorbed(small_model(query_latent_dim=query_latent_dim), absorbed)
    prompt = torch.randint(40, (3, 4), generator=torch.Generator().manual_seed(4))
    cached, cached_logits = generate(model, prompt, 15)
    plain, plain_logits = generate(model, prompt, 15, use_cache=False)
    assert torch.equal(cached, plain)
    torch.testing.assert_close(cached_logits, plain_logits, atol=1e-5, rtol=0)
    assert len(set(cached[:, 4:].flatten().tolist())) > 2  # it wrote something other than one repeated token


def test_the_cache_holds_the_latent_and_the_rotary_key_only():
    model = small_model()
    cache = model.new_cache()
    with torch.no_grad():
        model(torch.randint(40, (2, 5)), cache)
        model(torch.randint(40, (2, 1)), cache)
    assert cache.length == 6
    assert [tuple(t.shape) for t in cache.layers[0]] == [(2, 6, 12), (2, 6, 4)]
    assert cache.nbytes() == 2 * 6 * 2 * (12 + 4) * 4  # layers × tokens × N × (d_c + d_R) × float32


# ---------------------------------------------------------------------------------------------
# Cache bytes
# ---------------------------------------------------------------------------------------------
def test_cache_bytes_per_token_follow_deepseek_v2s_table_1():
    n_layers, n_h, d_h, d_c, d_r = (
        DEEPSEEK_V2[k] for k in ("num_layers", "num_heads", "head_dim", "latent_dim", "rotary_dim")
    )
    assert cache_bytes_per_token("MHA", n_layers, d_h, num_heads=n_h) == 2 * n_h * d_h * n_layers * 2
    assert cache_bytes_per_token("GQA", n_layers, d_h, num_kv_heads=8) == 2 * 8 * d_h * n_layers * 2
    assert cache_bytes_per_token("MQA", n_layers, d_h) == 2 * d_h * n_layers * 2
    mla = cache_bytes_per_token("MLA", n_layers, latent_dim=d_c, rotary_dim=d_r)
    assert (
        mla == (d_c + d_r) * n_layers * 2 and mla == 9 * d_h * n_layers
    )  # Table 1: about 9/2 d_h l elements, 2 bytes each
    s = SMOLLM2
    assert cache_bytes_per_token("GQA", s["num_layers"], s["head_dim"], num_kv_heads=s["num_kv_heads"]) == 23_040


def test_cache_bytes_agree_with_a_real_cache():
    model = small_model()
    cache = model.new_cache()
    with torch.no_grad():
        model(torch.randint(40, (1, 10)), cache)
    assert cache.nbytes() == 10 * cache_bytes_per_token("MLA", 2, latent_dim=12, rotary_dim=4, bytes_per_number=4)
    gpt = GPT(GPTConfig(vocab_size=40, embed_dim=32, num_heads=4, num_kv_heads=2))
    kv = KVCache(2)
    with torch.no_grad():
        gpt(torch.randint(40, (1, 10)), kv)
    assert kv.nbytes() == 10 * cache_bytes_per_token("GQA", 2, 8, num_kv_heads=2, bytes_per_number=4)


# ---------------------------------------------------------------------------------------------
# Recording and PCA
# ---------------------------------------------------------------------------------------------
def test_recorded_keys_and_values_are_the_projections_before_rotary():
    torch.manual_seed(5)
    model = GPT(GPTConfig(vocab_size=30, embed_dim=32, num_heads=4, num_kv_heads=2, num_layers=2)).eval()
    ids = torch.randint(30, (2, 5))
    recorded = record_keys_values(model, ids)
    assert [tuple(r.shape) for r in recorded] == [(10, 32), (10, 32)]
    x = model.blocks[0].norm1(model.embed(ids)).flatten(0, 1)
    p = model.blocks[0].attention.projections
    torch.testing.assert_close(recorded[0], torch.cat((p.k_proj(x), p.v_proj(x)), dim=1))


def test_the_pca_basis_is_orthonormal_and_keeps_a_low_rank_signal():
    torch.manual_seed(6)
    signal = torch.randn(200, 3) @ torch.randn(3, 10)
    basis = pca_basis(signal, 3)
    torch.testing.assert_close(basis.T @ basis, torch.eye(3), atol=1e-5, rtol=0)
    torch.testing.assert_close(signal @ basis @ basis.T, signal, atol=1e-4, rtol=0)
    assert (signal @ pca_basis(signal, 2) @ pca_basis(signal, 2).T - signal).abs().max() > 0.1
    with pytest.raises(ValueError, match="needs at least 5 rows"):
        pca_basis(signal[:3], 5)


# ---------------------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "changes, message",
    [
        ({"latent_dim": 0}, r"latent_dim \(d_c\) must be an int in 1 \.\. 64"),
        ({"latent_dim": 65}, r"2·h·d = 64"),
        ({"rotary_dim": 3}, r"must be even"),
        ({"rotary_dim": 10}, r"rotary_dim \(d_R\) must be an int in 0 \.\. 8"),
        ({"rotary_dim": 4, "rotate_content": True}, r"choose one"),
        ({"query_latent_dim": 0}, r"query_latent_dim"),
    ],
)
def test_sizes_out_of_range_are_refused(changes, message):
    with pytest.raises(ValueError, match=message):
        LatentConfig(**(SMALL | changes))


def test_a_cache_from_another_configuration_is_refused():
    model = small_model()
    other = small_model(latent_dim=16)
    empty = other.new_cache()
    with pytest.raises(ValueError, match=r"kind_settings\['latent'\]\.latent_dim = 16, not 12.*model\.new_cache"):
        model(torch.randint(40, (1, 3)), empty)
    filled = other.new_cache()
    with torch.no_grad():
        other(torch.randint(40, (1, 3)), filled)
    with pytest.raises(ValueError, match=r"latents \(1, 3, 16\).*d_c\) = \(1, 3, 12\)"):  # the entry's widths
        model(torch.randint(40, (1, 1)), filled)
    cache = model.new_cache()
    with torch.no_grad():
        model(torch.randint(40, (1, 3)), cache)
    with pytest.raises(ValueError, match="one model and one batch"):
        model(torch.randint(40, (2, 1)), cache)
    assert cache.length == 3  # the refused call left the cache as it was


def test_a_basis_of_the_wrong_shape_is_refused():
    model = GPT(GPTConfig(vocab_size=30, embed_dim=32, num_heads=4, num_kv_heads=2, num_layers=1))
    with pytest.raises(ValueError, match=r"basis must be \(2·h_kv·d, r\) = \(32, r\)"):
        latent_from_gqa(model.blocks[0].attention, torch.randn(16, 4))
    with pytest.raises(ValueError, match="one basis per layer"):
        gpt_to_latent(model, [None, None])


def test_a_windowed_or_selecting_layer_is_not_converted_silently():
    """A latent layer reads every earlier token: converting a local layer would drop its window unsaid."""
    sizes = dict(vocab_size=30, embed_dim=32, num_heads=4, num_kv_heads=2, num_layers=2, window=3)
    hybrid = GPT(GPTConfig(**sizes, layer_kinds=("global", "local")))
    with pytest.raises(ValueError, match=r"layer 1 \(kind 'local'\) sees a window of 3 tokens"):
        gpt_to_latent(hybrid)
    with seeing(hybrid, [0], window=2), pytest.raises(ValueError, match=r"layer 0 \(kind 'global'\) sees a window"):
        gpt_to_latent(hybrid)


def test_the_latent_cache_is_the_courses_one_cache_tagged_with_its_model():
    from helpers.kv_cache import KVCache

    first, second = small_model(), small_model()
    cache = first.new_cache()
    assert isinstance(cache, KVCache) and cache.owner is first
    ids = torch.randint(0, 32, (1, 4))
    first(ids, cache=cache)
    with pytest.raises(ValueError, match="belongs to another"):
        second(ids[:, :1], cache=cache)  # same sizes, other weights: refused
    cache.layers[1] = None
    with pytest.raises(ValueError, match=r"cache layers \[1\] are empty but layers \[0\] are filled"):
        first(ids[:, :1], cache=cache)


# ---------------------------------------------------------------------------------------------
# Positions follow the cache; bad pasts, positions and flags are refused
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "changes, absorbed",
    [({}, False), ({}, True), ({"rotary_dim": 0, "rotate_content": True}, False)],
    ids=["naive", "absorbed", "rotated-content"],
)
def test_a_cached_step_without_positions_equals_the_whole_sequence(changes, absorbed):
    """The positions of the new tokens default to the cache's length, as the GPT's do (they used to restart at 0)."""
    layer = small_layer(**changes)
    x = torch.randn(2, 7, 32, dtype=torch.float64)
    with torch.no_grad():
        whole, _ = layer(x)
        _, past = layer(x[:, :4])
        rest, (c, _) = layer(x[:, 4:], past=past, absorbed=absorbed)  # no positions given
    torch.testing.assert_close(rest, whole[:, 4:], atol=1e-12, rtol=0)
    assert c.shape == (2, 7, 12)  # the cache grew by the 3 new tokens


def test_a_past_of_another_batch_size_or_width_is_refused():
    layer = small_layer()
    x = torch.randn(2, 3, 32, dtype=torch.float64)
    with torch.no_grad():
        _, (c, k_rope) = layer(x)
        with pytest.raises(ValueError, match=r"past latents of shape \(1, 3, 12\).*batch size N = 2"):
            layer(x[:, :1], past=(c[:1], k_rope[:1]))
        with pytest.raises(ValueError, match=r"past latents of shape \(2, 3, 16\).*d_c = 12"):
            layer(x[:, :1], past=(torch.zeros(2, 3, 16, dtype=torch.float64), k_rope))
        with pytest.raises(ValueError, match=r"past rotary keys of shape \(2, 2, 4\).*one length for both"):
            layer(x[:, :1], past=(c, k_rope[:, :2]))
        with pytest.raises(TypeError, match=r"past latents are torch\.float32 on cpu but x is torch\.float64"):
            layer(x[:, :1], past=(c.float(), k_rope))
        with pytest.raises(TypeError, match=r"past must be a \(latents, rotary keys\) pair"):
            layer(x[:, :1], past=c)


def test_a_latent_cache_of_another_configuration_is_refused_even_with_the_same_widths():
    """Same d_c and d_R, so the entries have the shapes this model's layers want; the cache still names the
    model it was made for, and the refusal names the settings in which the two differ."""
    model = small_model()
    other = small_model(num_heads=2, head_dim=16)
    cache = other.new_cache()
    with torch.no_grad():
        other(torch.randint(40, (1, 3)), cache)
    differ = r"kind_settings\['latent'\]\.num_heads = 2, not 4; kind_settings\['latent'\]\.head_dim = 16, not 8"
    with pytest.raises(ValueError, match=rf"belongs to another GPT, one with {differ}: make one for this model"):
        model(torch.randint(40, (1, 1)), cache)


def test_a_latent_model_is_a_plain_gpt_built_from_its_config():
    """Latent attention is one more kind of layer: the model is ``GPT(config)`` with every layer "latent", drawn in
    the GPT's own order (no layer built and then replaced), and its cache and checks are the GPT's."""
    model = small_model()
    assert type(model) is GPT and all(type(layer) is MultiHeadLatentAttention for layer in model.attention_layers)
    config = GPTConfig(vocab_size=40, embed_dim=32, num_heads=4, num_kv_heads=4, num_layers=2, ff_dim=48)
    assert model.config == all_latent(config, LatentConfig(**SMALL))
    torch.manual_seed(1)
    again = GPT(model.config)
    assert again.state_dict().keys() == model.state_dict().keys()
    assert all(torch.equal(t, again.state_dict()[name]) for name, t in model.state_dict().items())
    cache = model.new_cache()
    assert type(cache) is KVCache and cache.owner is model
    plain = KVCache(2)  # the course's one cache, made by no model: a latent model fills it as any GPT does
    ids = torch.randint(40, (2, 5))
    with torch.no_grad():
        torch.testing.assert_close(model(ids, plain), model(ids), atol=1e-6, rtol=0)
    assert [tuple(t.shape) for t in plain.layers[0]] == [(2, 5, 12), (2, 5, 4)]


def test_set_absorbed_switches_the_latent_layers_only():
    latent = LatentConfig(**SMALL)
    config = GPTConfig(vocab_size=40, embed_dim=32, num_heads=4, num_kv_heads=2, num_layers=2, ff_dim=48)
    torch.manual_seed(2)
    mixed = GPT(replace(config, layer_kinds=("latent", "global"), kind_settings={"latent": latent})).eval()
    ids = torch.randint(40, (1, 6))
    with torch.no_grad():
        naive = mixed(ids)
        assert set_absorbed(mixed, True) is mixed and mixed.blocks[0].attention.absorbed is True
        torch.testing.assert_close(mixed(ids), naive, atol=1e-5, rtol=0)
    assert not hasattr(mixed.blocks[1].attention, "absorbed")
    with pytest.raises(ValueError, match=r"no latent layer to absorb \(its kinds: \['global', 'global'\]\)"):
        set_absorbed(GPT(config), True)
    with pytest.raises(TypeError, match="absorbed must be True or False, got 'yes'"):
        set_absorbed(mixed, "yes")


@pytest.mark.parametrize(
    "positions, error, message",
    [
        (torch.tensor([-1, 0, 1]), ValueError, r"positions must be >= 0"),
        (torch.tensor([0.5, 1.5, 2.5]), TypeError, r"positions must be an integer tensor \(L,\).*float"),
        (torch.tensor([True, False, True]), TypeError, r"positions must be an integer tensor"),
        (torch.tensor([0, 1]), ValueError, r"positions must be \(L,\) = \(3,\).*got shape \(2,\)"),
        (torch.tensor([[0, 1, 2]]), ValueError, r"positions must be \(L,\) = \(3,\)"),
        ([0, 1, 2], TypeError, r"integer tensor \(L,\).*got list"),
        (torch.tensor([1, 2, 3]), ValueError, r"after the 0 cached ones, 0 \.\. 2"),
    ],
)
def test_bad_positions_are_refused(positions, error, message):
    layer = small_layer()
    with pytest.raises(error, match=message):
        layer(torch.randn(1, 3, 32, dtype=torch.float64), positions)


def test_positions_that_ignore_the_cache_are_refused():
    layer = small_layer()
    x = torch.randn(1, 6, 32, dtype=torch.float64)
    with torch.no_grad():
        _, past = layer(x[:, :5])
        with pytest.raises(ValueError, match=r"after the 5 cached ones, 5 \.\. 5 \(the default\), got \[0\]"):
            layer(x[:, 5:], torch.tensor([0]), past)


@pytest.mark.parametrize("flag", ["no", 1, 0.0])
def test_absorbed_must_be_true_or_false(flag):
    layer = small_layer()
    x = torch.randn(1, 3, 32, dtype=torch.float64)
    with pytest.raises(TypeError, match="absorbed must be True or False"):
        layer(x, absorbed=flag)
    with pytest.raises(TypeError, match="absorbed must be True or False"):
        set_absorbed(small_model(), flag)
    layer.absorbed = flag  # set by hand: refused when it is read
    with pytest.raises(TypeError, match="absorbed must be True or False"):
        layer(x)


def test_a_pca_basis_of_nan_or_integer_activations_is_refused():
    activations = torch.randn(20, 6)
    activations[3, 2] = float("nan")
    activations[7, 0] = float("inf")
    with pytest.raises(ValueError, match="activations must be finite: 2 of 20 rows hold NaN or inf"):
        pca_basis(activations, 2)
    with pytest.raises(TypeError, match="floating point"):
        pca_basis(torch.ones(20, 6, dtype=torch.long), 2)
