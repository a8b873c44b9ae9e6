"""Kinds of layer (helpers.layer_kind): a new kind in one class and one registration, with no edit to gpt.py;
switches a kind cannot carry refused when the config is built; a cache that disagrees with its model refused."""

import pytest
import torch
from torch import Tensor, nn

from helpers.gpt import GPT, GPTConfig, KVCache, generate
from helpers.layer_kind import KINDS, LayerKind, kind_class, register_kind


@register_kind("running_mean")
class RunningMean(LayerKind):
    """A kind of this test's own: each token's output is out_proj of the mean of the values of itself and every
    earlier token (no scores at all). Its cache entry is (values,), (N, T, E)."""

    def __init__(self, embed_dim: int) -> None:
        super().__init__()
        self.v_proj = nn.Linear(embed_dim, embed_dim, bias=False)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=False)

    @classmethod
    def from_config(cls, config, layer: int) -> LayerKind:
        return cls(config.embed_dim)

    def forward(self, x, positions, past=None, need_weights=False, rotation=None):
        v = self.v_proj(x)  # (N, L, E)
        values = v if past is None else torch.cat((past[0], v), dim=1)  # (N, T, E)
        counts = (positions + 1).to(x.dtype)[:, None]  # (L, 1): tokens each query averages
        out = self.out_proj(values.cumsum(dim=1)[:, -x.size(1) :] / counts)
        return out, (values,)

    def check_entry(self, entry, N: int, length: int, kept: int, weight: Tensor, layer: int) -> None:
        if not (isinstance(entry, tuple) and len(entry) == 1 and tuple(entry[0].shape[:2]) == (N, kept)):
            raise ValueError(f"cache layer {layer} must hold (values,) of {kept} tokens")

    def cache_numbers_per_token(self) -> int:
        return self.v_proj.out_features


def _config(**changes) -> GPTConfig:
    settings = dict(vocab_size=30, embed_dim=16, num_heads=2, num_kv_heads=2, num_layers=2, ff_dim=32)
    return GPTConfig(**(settings | changes))


def test_a_kind_registered_in_a_test_file_generates_alike_with_and_without_the_cache():
    torch.manual_seed(0)
    model = GPT(_config(layer_kinds=("running_mean", "global"))).eval()
    assert isinstance(model.blocks[0].attention, RunningMean) and kind_class("running_mean") is RunningMean
    prompt = torch.randint(30, (2, 4), generator=torch.Generator().manual_seed(1))
    cached, cached_logits = generate(model, prompt, 6)
    recomputed, recomputed_logits = generate(model, prompt, 6, use_cache=False)
    assert torch.equal(cached, recomputed)
    torch.testing.assert_close(cached_logits, recomputed_logits, atol=1e-5, rtol=1e-5)
    # The test can fail: a running mean that forgot its cache would read only the new token.
    one = model(prompt[:, :1], model.new_cache())[:, -1]
    assert not torch.allclose(one, model(prompt[:, :2])[:, -1], atol=1e-3)
    assert [layer.cache_numbers_per_token() for layer in model.attention_layers] == [16, 2 * 2 * 8]


def test_a_kind_name_is_registered_once_and_unknown_names_list_the_known_ones():
    with pytest.raises(ValueError, match="is taken by RunningMean"):
        register_kind("running_mean")(type("Other", (LayerKind,), {}))
    with pytest.raises(ValueError, match=r"unknown kind of layer 'top_k': the known kinds are .*'global'"):
        kind_class("top_k")
    with pytest.raises(ValueError, match=r"layer_kinds may hold only \('local', 'global'.*got \['sliding'\]"):
        _config(layer_kinds=("sliding", "global"))
    with pytest.raises(ValueError, match=r"one name per layer, each a str.*\[\(0, \['local'\]\)\]"):
        _config(layer_kinds=(["local"], "global"), window=4)
    assert {"global", "local", "linear", "delta", "latent"} <= set(KINDS)


@pytest.mark.parametrize(
    "kind, switch, value",
    [
        ("delta", "qk_norm", True),
        ("linear", "attention_sinks", True),
        ("delta", "output_gate", True),
        ("linear", "query_scale", 0.5),
        ("running_mean", "rotary_fraction", 0.5),
    ],
)
def test_a_switch_a_kind_cannot_carry_is_refused_when_the_config_is_built(kind, switch, value):
    with pytest.raises(ValueError, match=rf"layer 1 is of kind '{kind}', which cannot carry {switch}={value}"):
        _config(layer_kinds=("global", kind), **{switch: value})


def test_delta_and_linear_layers_carry_partial_rotary():
    torch.manual_seed(0)
    model = GPT(_config(layer_kinds=("delta", "linear"), rotary_fraction=0.5)).eval()  # a raw RuntimeError before
    prompt = torch.randint(30, (1, 5), generator=torch.Generator().manual_seed(2))
    cached, logits = generate(model, prompt, 5)
    recomputed, recomputed_logits = generate(model, prompt, 5, use_cache=False)
    assert torch.equal(cached, recomputed)
    torch.testing.assert_close(logits, recomputed_logits, atol=1e-5, rtol=1e-5)
    assert model.blocks[0].attention.rotary_dim == 4  # d = 8, half of it rotates


def test_local_rotary_base_is_refused_unless_a_local_layer_reads_it():
    with pytest.raises(ValueError, match="local_rotary_base must be a finite positive number or None, got True"):
        _config(layer_kinds=("local", "global"), window=4, local_rotary_base=True)
    with pytest.raises(ValueError, match="this model has none"):
        _config(layer_kinds=("global", "global"), local_rotary_base=100.0)
    config = _config(layer_kinds=("local", "global"), window=4, local_rotary_base=100.0)
    assert [config.layer_rotary_base(i) for i in range(2)] == [100.0, 10000.0]


def test_a_cache_that_hides_keys_a_layer_may_see_is_refused():
    model = GPT(_config(layer_kinds=("local", "global"), window=3)).eval()
    ids = torch.randint(30, (1, 6), generator=torch.Generator().manual_seed(3))
    with pytest.raises(ValueError, match=r"cache layer 0 keeps only the last 1 tokens.*a window of 3 tokens"):
        model(ids, KVCache(2, keep=[1, None]))
    with pytest.raises(ValueError, match=r"cache layer 1 keeps only the last 2 tokens.*every earlier token"):
        model(ids, KVCache(2, keep=[5, 2]))
    # Bounds the layers allow give the logits of a run without a cache.
    cache = KVCache(2, keep=[2, None])
    steps = [model(ids[:, t : t + 1], cache)[:, -1] for t in range(ids.size(1))]
    torch.testing.assert_close(torch.stack(steps, 1), model(ids), atol=1e-5, rtol=1e-5)


def test_what_a_layer_sees_is_its_window_and_a_kind_without_one_is_not_made_local():
    from helpers.analysis.attention_distance import layer_kinds
    from helpers.analysis.passkey import global_layers, made_local

    model = GPT(_config(layer_kinds=("delta", "global"), window=None)).eval()
    assert layer_kinds(model) == ("delta", "global") and global_layers(model) == (1,)
    with pytest.raises(ValueError, match=r"layers \[0\] have no window to set"), made_local(model, [0], window=2):
        pass
    with made_local(model, [1], window=2):
        assert layer_kinds(model) == ("delta", "local") and model.layer_windows() == [None, 2]
    assert model.layer_windows() == [None, None]


def test_a_sink_logit_of_plus_inf_or_nan_is_refused():
    from helpers.attention import masked_softmax

    scores = torch.randn(1, 2, 3, 3)
    for bad in (torch.tensor([0.0, torch.inf]), torch.tensor([torch.nan, 0.0])):
        with pytest.raises(ValueError, match=r"sink logits must be real numbers or -inf"):
            masked_softmax(scores, None, bad)
    plain = masked_softmax(scores, None, torch.full((2,), -torch.inf))  # -inf is plain attention
    torch.testing.assert_close(plain, scores.softmax(-1))


def test_latent_attention_is_a_kind_that_mixes_with_others_in_one_model():
    from helpers.latent_attention import LatentConfig, MultiHeadLatentAttention, latent_gpt

    latent = LatentConfig(embed_dim=16, num_heads=2, head_dim=8, latent_dim=6, rotary_dim=4)
    torch.manual_seed(0)
    model = GPT(_config(layer_kinds=("latent", "global"), kind_settings={"latent": latent})).eval()
    assert isinstance(model.blocks[0].attention, MultiHeadLatentAttention)
    prompt = torch.randint(30, (2, 3), generator=torch.Generator().manual_seed(4))
    cached, logits = generate(model, prompt, 5)
    recomputed, recomputed_logits = generate(model, prompt, 5, use_cache=False)
    assert torch.equal(cached, recomputed)
    torch.testing.assert_close(logits, recomputed_logits, atol=1e-5, rtol=1e-5)
    assert [layer.cache_numbers_per_token() for layer in model.attention_layers] == [6 + 4, 2 * 2 * 8]
    with pytest.raises(ValueError, match=r"kind_settings\['latent'\], a LatentConfig; got NoneType"):
        _config(layer_kinds=("latent", "global"))
    with pytest.raises(ValueError, match="layer 0 is of kind 'latent', which cannot carry qk_norm=True"):
        _config(layer_kinds=("latent", "global"), kind_settings={"latent": latent}, qk_norm=True)
    whole = latent_gpt(_config(), latent)  # every layer latent: a GPT built from that config, nothing replaced
    assert type(whole) is GPT
    assert whole.config.layer_kinds == ("latent", "latent") and whole.config.kind_settings == {"latent": latent}


def test_the_registry_module_does_not_shadow_a_name_lessons_import_from_helpers():
    import helpers
    import helpers.gpt  # imports helpers.layer_kind, which must not hide helpers.layer_kinds (lesson 13's)
    from helpers.analysis.attention_distance import layer_kinds

    assert helpers.layer_kinds is layer_kinds
