"""The GPT with layers that differ (lesson 13's Gemma 3): a tiny random hybrid config equals ``transformers``'
``Gemma3ForCausalLM`` with the same weights (logits and every head's weights, past the window); the rolling cache
generates the same tokens as a full recompute while its local layers keep at most their window; its bytes are
counted; and the config refuses kinds it cannot build."""

from __future__ import annotations

import pytest
import torch

from helpers.gpt import GPT, GPTConfig, generate, kv_cache_bytes
from helpers.kv_cache import KVCache, rolling_kv_cache_bytes
from helpers.rotary import halves_to_pairs, rotary_cos_sin, rotate_pairs
from helpers.swiglu import GeGLU

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tiny models: one thread is fastest

KINDS = ("local", "local", "global", "local", "local", "global")
WINDOW = 4


def _config(**changes) -> GPTConfig:
    sizes = dict(
        vocab_size=50, embed_dim=32, num_heads=4, num_kv_heads=2, num_layers=6, ff_dim=48, norm="rms",
        norm_eps=1e-6, feed_forward="geglu", rotary_base=1e6, tie_embeddings=True, window=WINDOW,
        layer_kinds=KINDS, local_rotary_base=10000.0, head_dim=16, qk_norm=True, post_norms=True,
        query_scale=12**-0.5, embed_scale=True,
    )  # fmt: skip
    return GPTConfig(**(sizes | changes))


def _reference(config: GPTConfig, seed: int = 0):
    """transformers' Gemma 3 of the same sizes, random weights (its norm weights too, which start at 0)."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    theirs = Gemma3TextConfig(
        vocab_size=config.vocab_size, hidden_size=config.embed_dim, intermediate_size=config.ff_dim,
        num_hidden_layers=config.num_layers, num_attention_heads=config.num_heads,
        num_key_value_heads=config.num_kv_heads, head_dim=config.head_dim, sliding_window=config.window,
        layer_types=["sliding_attention" if k == "local" else "full_attention" for k in config.layer_kinds],
        rope_parameters={
            "sliding_attention": {"rope_type": "default", "rope_theta": config.local_rotary_base},
            "full_attention": {"rope_type": "default", "rope_theta": config.rotary_base},
        },
        query_pre_attn_scalar=12, rms_norm_eps=config.norm_eps, max_position_embeddings=256,
        attn_implementation="eager", pad_token_id=0, bos_token_id=1, eos_token_id=2,
    )  # fmt: skip
    torch.manual_seed(seed)
    model = Gemma3ForCausalLM(theirs).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "norm" in name:
                parameter.normal_(0.0, 0.5)
    return model


def _course_state(reference, config: GPTConfig) -> dict[str, torch.Tensor]:
    """transformers' Gemma 3 weights as the course's GPT names them: each norm's (1 + w) stored as one weight,
    as Gemma's GGUF files store it, and the query and key features of each head in adjacent pairs."""
    d, state = config.head_dim, {}
    for name, tensor in reference.state_dict().items():
        if name == "lm_head.weight":
            continue
        ours = name.removeprefix("model.").replace("embed_tokens", "token_embedding").replace("layers.", "blocks.")
        ours = (
            ours.replace("input_layernorm", "norm1")
            .replace("post_attention_layernorm", "attention_out_norm")
            .replace("pre_feedforward_layernorm", "norm2")
            .replace("post_feedforward_layernorm", "feed_forward_out_norm")
            .replace("self_attn.q_norm", "attention.q_norm")
            .replace("self_attn.k_norm", "attention.k_norm")
            .replace("self_attn.o_proj", "attention.projections.out_proj")
            .replace("self_attn.", "attention.projections.")
            .replace("mlp.", "feed_forward.")
        )
        if "norm" in name:
            tensor = 1 + tensor
        if any(part in name for part in ("q_proj", "k_proj", "q_norm", "k_norm")):
            tensor = halves_to_pairs(tensor, d)
        state[ours] = tensor
    state["lm_head.weight"] = state["token_embedding.weight"]
    return state


@pytest.fixture(scope="module")
def pair():
    config = _config()
    reference = _reference(config)
    model = GPT(config).eval()
    model.load_state_dict(_course_state(reference, config), strict=True)
    return model, reference


def test_a_hybrid_config_equals_transformers_gemma3_past_the_window(pair):
    model, reference = pair
    ids = torch.randint(3, 50, (2, 13), generator=torch.Generator().manual_seed(1))  # T = 13 > window 4
    with torch.no_grad():
        logits, weights = model(ids, need_weights=True)
        theirs = reference(ids, output_attentions=True)
    torch.testing.assert_close(logits, theirs.logits, atol=1e-5, rtol=1e-5)
    assert len(weights) == 6 and all(w.shape == (2, 4, 13, 13) for w in weights)
    for ours, expected in zip(weights, theirs.attentions, strict=True):
        torch.testing.assert_close(ours, expected, atol=1e-6, rtol=0)
    local = weights[0][0, 0]
    assert bool((local.tril(-WINDOW) == 0).all()) and bool((weights[2][0, 0].tril(-WINDOW) > 0).any())
    # The test can fail: the local layers rotated with the global base differ beyond the tolerance.
    for block in model.blocks:
        block.attention.rotary_base = 1e6
    try:
        with torch.no_grad():
            assert not torch.allclose(model(ids), theirs.logits, atol=1e-3)
    finally:
        for kind, block in zip(KINDS, model.blocks, strict=True):
            block.attention.rotary_base = 10000.0 if kind == "local" else 1e6


def test_the_config_builds_each_layer_as_its_kind():
    model = GPT(_config())
    attention = [block.attention for block in model.blocks]
    assert [a.window for a in attention] == [4, 4, None, 4, 4, None]
    assert [a.rotary_base for a in attention] == [1e4, 1e4, 1e6, 1e4, 1e4, 1e6]
    block = model.blocks[0]
    assert block.attention.projections.q_proj.weight.shape == (64, 32)  # h·d = 4 · 16 from E = 32
    assert block.attention.projections.out_proj.weight.shape == (32, 64)
    assert isinstance(block.feed_forward, GeGLU) and block.attention.q_norm.weight.shape == (16,)
    plain = GPT(GPTConfig(vocab_size=10)).blocks[0]  # lesson 07's block: no new modules, no new parameters
    assert plain.attention_out_norm is None and plain.attention.q_norm is None
    assert set(plain.state_dict()) == {
        name for name in plain.state_dict() if not any(new in name for new in ("out_norm", "q_norm", "k_norm"))
    }


def test_halves_to_pairs_turns_the_rotate_halves_rotation_into_the_adjacent_pairs_one():
    d, T = 8, 5
    x = torch.randn(T, d)  # one head's queries in the rotate-halves order
    cos, sin = rotary_cos_sin(torch.arange(T), d, 10000.0)  # (T, d / 2)
    a, b = x[:, : d // 2], x[:, d // 2 :]
    halves = torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)  # feature k turns with k + d / 2
    paired = halves_to_pairs(x.T, d).T  # the same features, reordered as a projection's rows would be
    torch.testing.assert_close(rotate_pairs(paired, cos, sin), halves_to_pairs(halves.T, d).T)
    assert halves_to_pairs(torch.arange(8.0), 4).tolist() == [0, 2, 1, 3, 4, 6, 5, 7]  # each head on its own
    with pytest.raises(ValueError, match="whole heads of an even d = 8"):
        halves_to_pairs(torch.zeros(12, 3), 8)


def test_rolling_cache_generates_what_a_full_recompute_does_and_keeps_only_the_window():
    torch.manual_seed(0)
    model = GPT(_config()).eval()
    prompt = torch.randint(3, 50, (2, 3), generator=torch.Generator().manual_seed(2))
    recomputed, recomputed_logits = generate(model, prompt, 20, use_cache=False)
    rolled, rolled_logits = generate(model, prompt, 20, rolling=True)
    assert torch.equal(rolled, recomputed)
    torch.testing.assert_close(rolled_logits, recomputed_logits, atol=1e-5, rtol=1e-5)
    cache = model.new_cache(rolling=True)
    with torch.no_grad():
        model(rolled[:, :3], cache)
        for t in range(3, rolled.size(1)):
            model(rolled[:, t : t + 1], cache)
            kept = [entry[0].size(2) for entry in cache.layers]
            assert kept == [min(t + 1, WINDOW) if kind == "local" else t + 1 for kind in KINDS]
            windows = [WINDOW if kind == "local" else None for kind in KINDS]
            assert cache.nbytes() == rolling_kv_cache_bytes(windows, 2, 16, t + 1, bytes_per_number=4, batch_size=2)
    assert cache.length == rolled.size(1)
    # A cache that keeps two tokens fewer than the window would change what the local layers read (W - 1
    # earlier tokens are exactly what a query can reach): a cache cannot disagree with its model, so it is refused.
    short = KVCache(6, owner=model, keep=[WINDOW - 2 if kind == "local" else None for kind in KINDS])
    with torch.no_grad(), pytest.raises(ValueError, match=r"cache layer 0 keeps only the last 2 tokens.*'local'"):
        model(rolled[:, :3], short)
    # The least a cache may keep, W - 1, gives the full recompute's logits.
    least = KVCache(6, owner=model, keep=[WINDOW - 1 if kind == "local" else None for kind in KINDS])
    with torch.no_grad():
        model(rolled[:, :3], least)
        steps = [model(rolled[:, t : t + 1], least, last_only=True)[:, -1] for t in range(3, rolled.size(1) - 1)]
    torch.testing.assert_close(torch.stack(steps, 1), recomputed_logits[:, 1:], atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match=r"cache layer 5 keeps only the last 9 tokens.*every earlier token"):
        model(rolled[:, :1], KVCache(6, keep=[None] * 5 + [9]))


def test_a_long_prompt_fills_a_rolling_cache_in_one_step():
    torch.manual_seed(0)
    model = GPT(_config()).eval()
    ids = torch.randint(3, 50, (1, 11), generator=torch.Generator().manual_seed(3))
    cache = model.new_cache(rolling=True)
    with torch.no_grad():
        first = model(ids[:, :9], cache)
        nxt = model(ids[:, 9:], cache)
        whole = model(ids)
    torch.testing.assert_close(torch.cat((first, nxt), 1), whole, atol=1e-5, rtol=1e-5)
    assert [e[0].size(2) for e in cache.layers] == [4, 4, 11, 4, 4, 11] and cache.length == 11


def test_rolling_cache_bytes_against_t_for_gemma_every_layer_global_and_smollm2():
    gemma = [None if (i + 1) % 6 == 0 else 512 for i in range(18)]
    T = 8192
    hybrid = rolling_kv_cache_bytes(gemma, 1, 256, T)
    all_global = rolling_kv_cache_bytes([None] * 18, 1, 256, T)
    assert all_global == kv_cache_bytes(18, 1, 256, T)  # every layer global is the plain count
    assert hybrid == 2 * 256 * 2 * (15 * 512 + 3 * T)  # 15 local layers stop at their window
    assert rolling_kv_cache_bytes(gemma, 1, 256, 300) == kv_cache_bytes(18, 1, 256, 300)  # below the window
    smollm2 = rolling_kv_cache_bytes([None] * 30, 3, 64, T)
    assert smollm2 == kv_cache_bytes(30, 3, 64, T) and hybrid < all_global < smollm2


@pytest.mark.parametrize(
    "arguments, message",
    [
        (([4, 0], 1, 8, 3), "windows must list one window per layer"),
        (([], 1, 8, 3), "windows must list one window per layer"),
        ((4, 1, 8, 3), "windows must list one window per layer"),
        (([4], 0, 8, 3), "num_kv_heads must be a positive int, got 0"),
        (([4], 1, 8, -1), "tokens must be an int >= 0"),
    ],
)
def test_rolling_cache_bytes_refuses_bad_sizes(arguments, message):
    with pytest.raises(ValueError, match=message):
        rolling_kv_cache_bytes(*arguments)


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"layer_kinds": ("local",) * 5}, "layer_kinds must be a tuple of 6 kinds"),
        ({"layer_kinds": ("local",) * 5 + ("sliding",)}, r"layer_kinds may hold only \('local', 'global', 'linear'"),
        ({"window": None}, "a local layer attends within a window"),
        ({"head_dim": 0}, "head_dim must be a positive int"),
        ({"query_scale": -1.0}, "query_scale must be a positive number"),
        ({"local_rotary_base": float("inf")}, "local_rotary_base must be a finite positive number"),
        ({"qk_norm": 1}, "qk_norm must be True or False"),
        ({"head_dim": 15}, "the head size d must be even"),
    ],
)
def test_the_config_refuses_layer_choices_it_cannot_build(changes, message):
    with pytest.raises(ValueError, match=message):
        _config(**changes)


def test_a_rolling_cache_needs_a_cache_and_a_length():
    model = GPT(_config()).eval()
    with pytest.raises(ValueError, match="rolling=True is a kind of cache"):
        generate(model, torch.tensor([[3]]), 2, use_cache=False, rolling=True)
    cache = model.new_cache(rolling=True)
    with pytest.raises(ValueError, match="a rolling cache needs the step's length T"):
        cache.update(model, [(torch.zeros(1, 2, 1, 16),) * 2] * 6)
    with pytest.raises(ValueError, match="keep must hold one bound per layer"):
        KVCache(6, keep=[4, 0, None, 4, 4, None])


def test_head_dim_is_one_name_resolved_at_once_and_head_size_still_reads_with_a_warning():
    """d has one name, ``head_dim``: None becomes E / h when the config is built (so a config with d written in
    equals one without it), and the old keyword and attribute ``head_size`` still work, warning."""
    derived = GPTConfig(vocab_size=11, embed_dim=16, num_heads=4)
    assert derived.head_dim == 4 and derived == GPTConfig(vocab_size=11, embed_dim=16, num_heads=4, head_dim=4)
    with pytest.warns(DeprecationWarning, match="'head_size' is now 'head_dim'"):
        old = GPTConfig(vocab_size=11, embed_dim=16, num_heads=4, head_size=6)
    assert old.head_dim == 6 and "head_size" not in repr(old)
    with pytest.warns(DeprecationWarning, match="head_size is now .head_dim"):
        assert old.head_size == 6
    with pytest.raises(TypeError, match="both 'head_dim' and its old name 'head_size'"):
        GPTConfig(vocab_size=11, embed_dim=16, num_heads=4, head_size=6, head_dim=6)
    with pytest.raises(ValueError, match=r"embed_dim \(10\) must be a multiple of num_heads \(4\), or set head_dim"):
        GPTConfig(vocab_size=11, embed_dim=10, num_heads=4)
