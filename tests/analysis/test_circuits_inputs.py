"""helpers.analysis.circuits refuses what would silently measure the wrong thing (issue 36): an empty model,
a head count that is not the model's, a layer given as True, per-head means that would broadcast over d."""

from __future__ import annotations

import pytest
import torch

from helpers.analysis.circuits import (
    AttentionOnlyTransformer,
    head_hooks,
    mean_head_outputs,
    output_projections,
    record_head_outputs,
)


def enter(hooks) -> None:
    """Enter and leave the hooks' block: the checks run on entry."""
    with hooks:
        pass


def small_model() -> AttentionOnlyTransformer:
    torch.manual_seed(0)
    return AttentionOnlyTransformer(vocab_size=20, embed_dim=16, num_heads=4, num_layers=2, max_len=24).eval()


@pytest.mark.parametrize(
    ("name", "value"), [("num_layers", -1), ("num_layers", 0), ("num_heads", 0), ("embed_dim", True), ("max_len", 2.5)]
)
def test_a_model_without_layers_or_heads_is_refused(name, value):
    sizes = {"vocab_size": 20, "embed_dim": 16, "num_heads": 4, "num_layers": 2, "max_len": 24} | {name: value}
    with pytest.raises(ValueError, match=f"{name} must be a positive int"):
        AttentionOnlyTransformer(**sizes)


@pytest.mark.parametrize("projections_of", [lambda m: m.output_projections(), output_projections])
def test_a_head_count_that_is_not_the_models_is_refused(projections_of):
    model = small_model()
    projections = projections_of(model)
    with pytest.raises(ValueError, match="has 4 heads, but num_heads=2"), head_hooks(projections, 2, [(0, 0)]):
        pass
    with pytest.raises(ValueError, match="has 4 heads, but num_heads=8"), record_head_outputs(projections, 8):
        pass


def test_the_gpts_head_count_is_known_too():
    from helpers.gpt import GPT, GPTConfig

    gpt = GPT(GPTConfig(vocab_size=20, embed_dim=16, num_heads=4, num_kv_heads=2, num_layers=2)).eval()
    with pytest.raises(ValueError, match="has 4 heads, but num_heads=2"):
        enter(head_hooks(output_projections(gpt), 2, [(1, 0)]))


def test_a_head_count_that_does_not_split_the_features_is_refused():
    projections = [torch.nn.Linear(16, 16)]  # a bare projection: its head count is unknown, its width is not
    with pytest.raises(ValueError, match="16 head features do not split into 3 heads"):
        enter(head_hooks(projections, 3, [(0, 0)]))


@pytest.mark.parametrize("pair", [(True, 0), (0, False), (0.0, 1), (-1, 0), (2, 0), (0, 4)])
def test_a_layer_or_head_that_is_not_an_index_in_range_is_refused(pair):
    model = small_model()
    with pytest.raises(ValueError, match=r"\(layer, head\) are ints in 0 \.\. 1 and 0 \.\. 3"):
        enter(head_hooks(model.output_projections(), 4, [pair]))


def test_means_of_shape_h_by_1_are_refused_not_broadcast():
    model = small_model()
    projections = model.output_projections()
    ids = torch.randint(20, (2, 10))
    means = mean_head_outputs(model, projections, 4, ids)
    assert means[0].shape == (4, 4)
    squashed = [m.mean(dim=-1, keepdim=True) for m in means]  # (h, 1): one number per head
    expected = r"mean for layer 0 is \(4, 1\), expected \(h, d\) = \(4, 4\)"
    with pytest.raises(ValueError, match=expected), torch.no_grad(), head_hooks(projections, 4, [(0, 1)], squashed):
        model(ids)
    with torch.no_grad(), head_hooks(projections, 4, [(0, 1)], means):  # the right shape still works
        model(ids)
