"""Lesson 12's query decomposition (``query_attribution``): one head's score for one key minus its score for
another, split over the parts of the residual that make its query. The parts add up to the score difference, and
that difference is the one the model's own attention computed (the log-ratio of its two softmax weights), right for
rotary positions and for shared key/value heads; with LayerNorm the norm's bias is a part of its own."""

from __future__ import annotations

import pytest
import torch

from helpers.analysis.attribution import query_attribution
from helpers.gpt import GPT, GPTConfig


def small_gpt(norm: str = "rms", positions: str = "rotary", num_kv_heads: int = 2) -> GPT:
    torch.manual_seed(4)
    config = GPTConfig(vocab_size=40, embed_dim=24, num_heads=6, num_kv_heads=num_kv_heads, num_layers=3, ff_dim=32,
                       positions=positions, norm=norm, feed_forward="swiglu" if norm == "rms" else "gelu")  # fmt: skip
    model = GPT(config).double().eval()
    with torch.no_grad():  # norms whose weights (and biases) are not the defaults, so that leaving them out shows
        for module in model.modules():
            if hasattr(module, "weight") and module.weight is not None and module.weight.dim() == 1:
                module.weight.uniform_(0.5, 1.5)
            if isinstance(module, torch.nn.LayerNorm):
                module.bias.uniform_(-0.3, 0.3)
    return model


IDS = torch.randint(0, 40, (5, 9), generator=torch.Generator().manual_seed(2))
KEYS = (torch.tensor([3, 2, 5, 1, 4]), torch.tensor([1, 4, 2, 6, 0]))  # one pair of key positions per prompt


@pytest.mark.parametrize(
    "norm, positions, num_kv_heads",
    [("rms", "rotary", 2), ("rms", "rotary", 6), ("layer", "none", 3), ("layer", "rotary", 1)],
)
@pytest.mark.parametrize("receiver", [(1, 0), (2, 4)])
def test_the_parts_add_up_to_the_score_difference_the_models_attention_computed(
    norm, positions, num_kv_heads, receiver
):
    model = small_gpt(norm, positions, num_kv_heads)
    parts = query_attribution(model, IDS, receiver, 8, KEYS, per_prompt=True)
    layer, head = receiver
    assert parts.heads.shape == (layer, 6, 5) and parts.mlps.shape == (layer, 5) and parts.total.shape == (5,)
    # RMSNorm computes in float32 whatever the input's dtype (helpers.norms), the frozen norm in the model's: the
    # parts meet the model's own query to float32's round-off.
    torch.testing.assert_close(parts.parts_sum(), parts.total, atol=1e-6, rtol=0)
    with torch.no_grad():
        _, weights = model(IDS, need_weights=True)  # n_layers of (N, h, T, T)
    rows = torch.arange(5)
    row = weights[layer][rows, head, 8]  # (N, T): the receiver's softmax from the query position
    # Within one softmax row, log w_a - log w_b is the score difference: the model's own numbers, not ours.
    torch.testing.assert_close(parts.total, row[rows, KEYS[0]].log() - row[rows, KEYS[1]].log(), atol=1e-9, rtol=0)
    if norm == "rms":
        assert torch.equal(parts.bias, torch.zeros(5, dtype=parts.bias.dtype))
    else:
        assert parts.bias.abs().max() > 1e-3  # the LayerNorm's bias makes a part of the query of its own


def test_an_int_position_is_every_prompts_and_the_means_are_the_per_prompt_means():
    model = small_gpt()
    same = query_attribution(model, IDS, (1, 3), 8, (4, 2), per_prompt=True)
    given = query_attribution(model, IDS, (1, 3), torch.full((5,), 8), (torch.full((5,), 4), torch.full((5,), 2)),
                              per_prompt=True)  # fmt: skip
    torch.testing.assert_close(same.heads, given.heads)
    means = query_attribution(model, IDS, (1, 3), 8, (4, 2))
    torch.testing.assert_close(means.heads, same.heads.mean(-1))
    torch.testing.assert_close(means.total, same.total.mean())


@pytest.mark.parametrize(
    "receiver, query, keys, message",
    [
        ((0, 1), 8, (1, 2), "layer in 1 .. 2"),
        ((3, 1), 8, (1, 2), "layer in 1 .. 2"),
        ((1, 6), 8, (1, 2), "head must be in 0 .. 5"),
        ((1, 1), 9, (1, 2), "positions in 0 .. 8"),
        ((1, 1), 3, (1, 5), "at or before"),
        ((1, 1), 8, (1,), "two key positions"),
        ((1, 1), torch.tensor([8, 8]), (1, 2), r"\(N,\) = \(5,\)"),
    ],
)
def test_bad_arguments_are_refused_saying_what_was_expected(receiver, query, keys, message):
    with pytest.raises(ValueError, match=message):
        query_attribution(small_gpt(), IDS, receiver, query, keys)
