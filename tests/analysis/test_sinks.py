"""``blocked_key`` and ``sink_removal_effect``: a blocked key's share of each row is removed and the rest
renormalized, in the chosen layers only, with and without a cache; the model is restored afterwards."""

from __future__ import annotations

import pytest
import torch

from helpers.analysis.sinks import blocked_key, sink_removal_effect
from helpers.gpt import GPT, GPTConfig, generate
from helpers.latent_attention import LatentConfig, latent_gpt, set_absorbed


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    config = GPTConfig(
        vocab_size=50, embed_dim=32, num_heads=4, num_kv_heads=2, num_layers=3, ff_dim=48, norm="rms",
        feed_forward="swiglu", rotary_base=100.0,
    )  # fmt: skip
    return GPT(config).eval()


IDS = torch.tensor([[3, 14, 15, 9, 26, 5, 35, 8]])  # (1, T)


@pytest.mark.parametrize("key", [0, 3])
def test_the_blocked_keys_share_is_removed_and_the_rest_renormalized(tiny, key):
    with torch.no_grad():
        _, intact = tiny(IDS, need_weights=True)
        with blocked_key(tiny, [0], key=key):
            _, blocked = tiny(IDS, need_weights=True)
    first = intact[0][0]  # (h, T, T): layer 0 is the first to change, so its input is the intact one
    expected = first.clone()
    expected[:, key + 1 :, key] = 0  # the queries after the blocked token
    expected = expected / expected.sum(-1, keepdim=True)
    torch.testing.assert_close(blocked[0][0], expected, atol=1e-6, rtol=1e-5)
    assert blocked[0][0][:, key + 1 :, key].abs().max() == 0
    assert not torch.allclose(blocked[1], intact[1])  # later layers see a changed input


def test_without_renormalizing_the_share_is_dropped_and_the_rest_kept(tiny):
    with torch.no_grad():
        _, intact = tiny(IDS, need_weights=True)
        with blocked_key(tiny, [0], key=0, renormalize=False):
            _, dropped = tiny(IDS, need_weights=True)
    expected = intact[0].clone()  # (1, h, T, T)
    expected[..., 1:, 0] = 0
    torch.testing.assert_close(dropped[0], expected)
    rows = dropped[0].sum(-1)[..., 1:]  # the later queries' rows: 1 minus the dropped share
    torch.testing.assert_close(rows, 1 - intact[0][..., 1:, 0])


def test_outside_the_block_and_in_other_layers_nothing_changes(tiny):
    with torch.no_grad():
        before = tiny(IDS)
        with blocked_key(tiny, [2]):
            _, blocked = tiny(IDS, need_weights=True)
        _, intact = tiny(IDS, need_weights=True)
        after = tiny(IDS)
    assert torch.equal(before, after)
    assert torch.equal(blocked[0], intact[0]) and torch.equal(blocked[1], intact[1])  # layers 0, 1 untouched
    assert all(block.attention.weights_from_scores is None for block in tiny.blocks)


def test_blocking_works_with_the_cache(tiny):
    with blocked_key(tiny, [0, 1, 2]):
        cached, _ = generate(tiny, IDS[:, :3], 5)
        uncached, _ = generate(tiny, IDS[:, :3], 5, use_cache=False)
    assert torch.equal(cached, uncached)


@pytest.fixture(scope="module")
def tiny_latent():
    """Lesson 11's model: every layer multi-head latent attention, with a decoupled rotary key."""
    torch.manual_seed(0)
    config = GPTConfig(vocab_size=50, embed_dim=32, num_heads=4, num_kv_heads=4, num_layers=2, ff_dim=48)
    return latent_gpt(config, LatentConfig(32, 4, 8, latent_dim=12, rotary_dim=4)).eval()


@pytest.mark.parametrize("absorbed", [False, True], ids=["naive", "absorbed"])
def test_blocking_reaches_latent_attention_in_both_forms(tiny_latent, absorbed):
    """Latent layers are variants of the attention core: the hook really hides the key there too."""
    model = set_absorbed(tiny_latent, absorbed)
    with torch.no_grad():
        intact_logits, intact = model(IDS, need_weights=True)
        with blocked_key(model, [0], key=2):
            blocked_logits, blocked = model(IDS, need_weights=True)
    expected = intact[0].clone()  # (1, h, T, T): layer 0's input is the intact one
    expected[..., 3:, 2] = 0
    expected = expected / expected.sum(-1, keepdim=True)
    torch.testing.assert_close(blocked[0], expected, atol=1e-6, rtol=1e-5)
    assert blocked[0][..., 3:, 2].abs().max() == 0 and intact[0][..., 3:, 2].min() > 0
    assert not torch.allclose(blocked_logits[:, 3:], intact_logits[:, 3:])  # the output changed after the key
    torch.testing.assert_close(blocked_logits[:, :3], intact_logits[:, :3])  # and not before it
    assert all(block.attention.weights_from_scores is None for block in model.blocks)
    with blocked_key(model, [0, 1], key=0):  # and with the latent cache, as with the GPT's
        cached, _ = generate(model, IDS[:, :3], 5)
        uncached, _ = generate(model, IDS[:, :3], 5, use_cache=False)
    assert torch.equal(cached, uncached)


def test_a_layer_that_is_not_an_attention_core_is_refused(tiny):
    model = GPT(tiny.config).eval()
    model.blocks[1].attention = torch.nn.Identity()
    with (
        pytest.raises(TypeError, match=r"layers \[1\] is not a variant of helpers\.attention\.AttentionCore"),
        blocked_key(model, [0, 1]),
    ):
        pass
    assert model.blocks[0].attention.weights_from_scores is None  # nothing half-set


def test_the_model_is_restored_after_an_error(tiny):
    with pytest.raises(ValueError), blocked_key(tiny, [1]):
        tiny(torch.tensor([[99]]))  # an id beyond V
    assert tiny.blocks[1].attention.weights_from_scores is None


def test_a_block_inside_another_on_the_same_layer_is_refused_and_the_outer_one_kept(tiny):
    with blocked_key(tiny, [0, 1]):
        inner = blocked_key(tiny, [1, 2], key=3)
        with pytest.raises(RuntimeError, match=r"layers \[1\] already have their attention weights replaced"):
            inner.__enter__()
        assert tiny.blocks[1].attention.weights_from_scores is not None
        assert tiny.blocks[2].attention.weights_from_scores is None
    assert tiny.blocks[0].attention.weights_from_scores is None


def test_the_effect_compares_losses_and_top1_predictions(tiny):
    sentences = [IDS, IDS[:, :5]]
    none = sink_removal_effect(tiny, sentences, layers=[])
    assert none.loss == none.loss_blocked and none.agreement == 1.0 and none.positions == 7 + 4
    effect = sink_removal_effect(tiny, sentences, layers=[0, 1, 2])
    assert effect.loss == none.loss and effect.loss_blocked != effect.loss
    with torch.no_grad():
        logits = tiny(IDS)[0, :-1]
        with blocked_key(tiny, [0, 1, 2]):
            changed = tiny(IDS)[0, :-1]
    expected = torch.nn.functional.cross_entropy(changed, IDS[0, 1:]).item()
    assert 0 <= effect.agreement <= 1
    single = sink_removal_effect(tiny, [IDS], layers=[0, 1, 2])
    assert single.loss_blocked == pytest.approx(expected, rel=1e-5)
    assert single.agreement == pytest.approx((logits.argmax(-1) == changed.argmax(-1)).float().mean().item())


@pytest.mark.parametrize(
    ("layers", "key", "message"),
    [([3], 0, "0 .. 2"), ([True], 0, "0 .. 2"), ([0], -1, "key must be"), ([0], 1.5, "key must be")],
)
def test_bad_layers_and_keys_are_refused(tiny, layers, key, message):
    with pytest.raises(ValueError, match=message), blocked_key(tiny, layers, key):
        pass


def test_bad_sentences_are_refused(tiny):
    with pytest.raises(ValueError, match="at least one sentence"):
        sink_removal_effect(tiny, [], layers=[0])
    with pytest.raises(ValueError, match=r"\(1, T\) with T >= 2"):
        sink_removal_effect(tiny, [torch.tensor([[1]])], layers=[0])
