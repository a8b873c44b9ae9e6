"""Lesson 06's cross-attention explorer: the plain callback and the ipywidgets wrapper."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pytest
import torch

from helpers.translation import Translation
from helpers.widgets import cross_attention_explorer, show_cross_attention


def translations() -> list[Translation]:
    torch.manual_seed(0)
    out = []
    for source, tokens, output in [
        ("Ein Hund läuft.", ["<bos>", "Ein", "Hund", "läuft", ".", "<eos>"], ["A", "dog", "runs", ".", "<eos>"]),
        ("Eine Frau singt.", ["<bos>", "Eine", "Frau", "singt", ".", "<eos>"], ["A", "woman", "sings", ".", "<eos>"]),
    ]:
        attention = torch.rand(2, 4, len(output), len(tokens)).softmax(-1)  # (layers, h, T, S)
        out.append(Translation(source, " ".join(output[:-1]), tokens, output, attention))
    return out


def test_callback_draws_and_returns_the_chosen_head():
    items = translations()
    weights = show_cross_attention(items, sentence=1, layer=0, head=3)
    assert torch.equal(weights, items[1].attention[0, 3])
    plt.close("all")
    with pytest.raises(ValueError, match="sentence"):
        show_cross_attention(items, sentence=2)
    with pytest.raises(ValueError, match="layer"):
        show_cross_attention(items, layer=2)


def test_explorer_starts_on_the_last_layer_and_follows_its_controls():
    items = translations()
    ui = cross_attention_explorer(items)
    sentence, layer, head = ui.children[:3]
    assert layer.value == 1 and torch.equal(ui.result, items[0].attention[1, 0])
    sentence.value, layer.value, head.value = 1, 0, 2
    assert torch.equal(ui.result, items[1].attention[0, 2])
    plt.close("all")
