"""Lesson 15's model-level key selection (helpers.analysis.key_selection) on a tiny random GPT, in float64."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from helpers.analysis.key_selection import (
    indexer_kl,
    indexer_top_k,
    layer_targets,
    mean_loss,
    moba,
    oracle_per_head,
    oracle_shared,
    recall_by_layer,
    recalls_by_layer,
    recent_window,
    selected_attention,
    train_indexers,
    window_and_first,
)
from helpers.gpt import GPT, GPTConfig
from helpers.lightning_indexer import LightningIndexer
from helpers.selection import recent_keys

T = 24


def _model(**changes) -> GPT:
    torch.manual_seed(0)
    settings = {"vocab_size": 40, "embed_dim": 32, "num_heads": 4, "num_kv_heads": 2, "num_layers": 2, "ff_dim": 48}
    config = GPTConfig(**(settings | {"norm": "rms", "feed_forward": "swiglu", "rotary_base": 500.0} | changes))
    return GPT(config).double().eval()


def _ids(seed: int = 1) -> torch.Tensor:
    return torch.randint(0, 40, (2, T), generator=torch.Generator().manual_seed(seed))


def _indexers(model: GPT) -> list[LightningIndexer]:
    torch.manual_seed(3)
    return [LightningIndexer(32, 2, 8).double() for _ in model.blocks]


def _rules_at_full_budget(model: GPT) -> dict[str, object]:
    return {
        "per head": oracle_per_head(T),
        "shared": oracle_shared(T),
        "window": recent_window(T),
        "window and first": window_and_first(T),
        "moba": moba(T, 4),
        "indexed": indexer_top_k(_indexers(model), T),
    }


@pytest.mark.parametrize("name", ["per head", "shared", "window", "window and first", "moba", "indexed"])
def test_a_budget_of_every_key_is_full_causal_attention(name):
    model, ids = _model(), _ids()
    rule = _rules_at_full_budget(model)[name]
    with torch.no_grad():
        full = model(ids)
        with selected_attention(model, rule):
            selected = model(ids)
    torch.testing.assert_close(selected, full, rtol=0, atol=1e-10)


def _hand_topk_weights(k: int):
    """Per head and query, loop: keep the k largest causal scores (ties to the earlier key), softmax over them."""

    def weights(scores, may_attend, positions):
        out = torch.zeros_like(scores)
        N, h, L, S = scores.shape
        for n in range(N):
            for head in range(h):
                for t in range(L):
                    readable = [j for j in range(S) if j <= int(positions[t])]
                    best = sorted(readable, key=lambda j: (-float(scores[n, head, t, j]), j))[:k]
                    out[n, head, t, best] = torch.softmax(scores[n, head, t, best], dim=0)
        return out

    return weights


def test_oracle_per_head_equals_a_hand_built_top_k_softmax():
    model, ids = _model(), _ids()
    with torch.no_grad():
        for block in model.blocks:
            block.attention.weights_from_scores = _hand_topk_weights(5)
        reference = model(ids)
        for block in model.blocks:
            block.attention.weights_from_scores = None
        with selected_attention(model, oracle_per_head(5)):
            selected = model(ids)
        full = model(ids)
    torch.testing.assert_close(selected, reference, rtol=0, atol=1e-10)
    assert (selected - full).abs().max() > 1e-3  # 5 keys of up to 24 is a real change


def test_hooks_are_removed_after_an_error():
    model, ids = _model(), _ids()

    def broken(layer, scores, positions, x):
        raise RuntimeError("a rule that fails")

    with pytest.raises(RuntimeError, match="a rule that fails"), selected_attention(model, broken):
        model(ids)
    for block in model.blocks:
        assert block.attention.weights_from_scores is None
        assert not block.attention._forward_pre_hooks
    with selected_attention(model, recent_window(3)):  # usable again
        model(ids)


def test_a_second_hook_and_a_windowed_layer_are_refused():
    model = _model()
    with (
        selected_attention(model, recent_window(3)),
        pytest.raises(RuntimeError, match="another hook"),
        selected_attention(model, recent_window(4)),
    ):
        pass
    local = _model(window=4, layer_kinds=("local", "global"))
    with pytest.raises(ValueError, match=r"layers \[0\] have a window"), selected_attention(local, recent_window(3)):
        pass


def test_a_rule_with_a_wrong_shape_is_refused():
    model, ids = _model(), _ids()
    with (
        pytest.raises(ValueError, match="a rule returns indices"),
        selected_attention(model, lambda *a: torch.zeros(3)),
    ):
        model(ids)


def test_mean_loss_is_the_cross_entropy_of_the_later_tokens():
    model, ids = _model(), _ids()
    with torch.no_grad():
        logits = model(ids)
    expected = F.cross_entropy(logits[:, 9:-1].reshape(-1, 40), ids[:, 10:].reshape(-1))
    assert mean_loss(model, ids, start=10) == pytest.approx(float(expected), abs=1e-12)
    assert mean_loss(model, ids, recent_window(2), start=10) != pytest.approx(float(expected), abs=1e-3)


def test_recall_is_one_at_full_budget_and_the_per_head_oracle_holds_the_most():
    model, ids = _model(), _ids()
    assert torch.allclose(recall_by_layer(model, ids, oracle_per_head(T), start=8), torch.ones(2, dtype=torch.float64))
    per_head = recall_by_layer(model, ids, oracle_per_head(4), start=8)
    for other in (oracle_shared(4), recent_window(4), window_and_first(4, first=1)):
        assert (recall_by_layer(model, ids, other, start=8) <= per_head + 1e-12).all()
    assert (per_head < 1).all()


def _causal_target(L: int, zeros: bool) -> torch.Tensor:
    torch.manual_seed(4)
    raw = torch.rand(2, L, L, dtype=torch.float64).tril()
    if zeros:
        raw = raw * (torch.rand(2, L, L, dtype=torch.float64) > 0.3)
        raw[..., 0] += 0.1  # every row keeps some mass
    return raw / raw.sum(-1, keepdim=True)


@pytest.mark.parametrize("zeros", [False, True])
def test_indexer_kl_is_zero_at_the_targets_log_and_positive_elsewhere(zeros):
    target = _causal_target(7, zeros)
    future = torch.randn(2, 7, 7, dtype=torch.float64) * 5  # whatever the future keys score must not count
    causal = torch.ones(7, 7, dtype=torch.bool).tril()
    scores = torch.where(causal, target.log() + 2.0, future)  # log 0 = -inf: a key the target never reads
    assert float(indexer_kl(scores, target)) == pytest.approx(0.0, abs=1e-12)
    other = torch.randn(2, 7, 7, dtype=torch.float64, requires_grad=True)
    loss = indexer_kl(other, target)
    loss.backward()
    assert float(loss.detach()) > 1e-3
    assert torch.isfinite(other.grad).all()
    assert (other.grad.triu(1) == 0).all()  # the future keys get no gradient


def test_trained_indexers_lower_the_kl_in_every_layer():
    model = _model()
    texts = [_ids(seed)[:1] for seed in (5, 6)]
    before = train_indexers(model, texts, heads=2, dim=8, steps=0, seed=0)
    after = train_indexers(model, texts, heads=2, dim=8, steps=25, lr=2e-2, queries=12, seed=0)
    held_out = layer_targets(model, _ids(7)[:1])
    positions = torch.arange(T)
    for layer, (x, target) in enumerate(held_out):
        with torch.no_grad():
            start = float(indexer_kl(before[layer](x, positions), target))
            end = float(indexer_kl(after[layer](x, positions), target))
        assert end < 0.8 * start, (layer, start, end)


def test_recalls_of_several_rules_in_one_pass_equal_one_rule_at_a_time():
    model, ids = _model(), _ids()
    rules = {"shared": oracle_shared(5), "moba": moba(8, 4), "indexed": indexer_top_k(_indexers(model), 5)}
    together = recalls_by_layer(model, ids, rules, start=8)
    for name, rule in rules.items():
        torch.testing.assert_close(together[name], recall_by_layer(model, ids, rule, start=8), rtol=0, atol=0)


def test_a_query_left_without_keys_gets_zero_weights_not_nan():
    model, ids = _model(), _ids()

    def nothing_for_query_3(layer, scores, positions, x):
        indices = recent_keys(positions, 2)
        indices[3] = -1
        return indices

    with torch.no_grad(), selected_attention(model, nothing_for_query_3):
        logits = model(ids)
    assert torch.isfinite(logits).all()


def test_a_window_rule_reused_on_another_text_reads_that_texts_positions():
    model, rule = _model(), window_and_first(6, first=2)
    short, long = _ids(8)[:, :12], _ids(9)
    mean_loss(model, long, rule, start=5)
    assert mean_loss(model, short, rule, start=5) == mean_loss(model, short, window_and_first(6, first=2), start=5)


def test_only_the_layers_named_select_and_a_local_one_is_refused():
    model, ids = _model(window=4, layer_kinds=("local", "global")), _ids()
    with torch.no_grad():
        full = model(ids)
        with selected_attention(model, oracle_shared(T), layers=[1]):
            assert model.blocks[0].attention.weights_from_scores is None  # the local layer keeps its own softmax
            torch.testing.assert_close(model(ids), full, rtol=0, atol=1e-10)
        with selected_attention(model, oracle_shared(2), layers=[1]):
            assert (model(ids) - full).abs().max() > 1e-3
    with (
        pytest.raises(ValueError, match=r"layers \[0\] have a window"),
        selected_attention(model, recent_window(3), [0, 1]),
    ):
        pass
