"""Lesson 06's cross-attention explorer: the plain callback and the ipywidgets wrapper."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pytest
import torch

from helpers.models.translation import Translation
from helpers.viewing.widgets import cross_attention_explorer, show_cross_attention


def translations() -> list[Translation]:
    torch.manual_seed(0)
    out = []
    for source, tokens, output in [
        ("Ein Hund läuft.", ["<bos>", "Ein", "Hund", "läuft", ".", "<eos>"], ["A", "dog", "runs", ".", "<eos>"]),
        ("Eine Frau singt.", ["<bos>", "Eine", "Frau", "singt", ".", "<eos>"], ["A", "woman", "sings", ".", "<eos>"]),
    ]:
        attention = torch.rand(2, 4, len(output), len(tokens)).softmax(-1)  # (n_layers, h, T, S)
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


# --- lesson 06's figures -----------------------------------------------------------------------
def test_readable_head_grid_keeps_labels_legible_at_page_width():
    from helpers.viewing.plotting import readable_head_grid

    tokens_q = [f"q{i}" for i in range(14)]
    tokens_k = [f"k{i}" for i in range(15)]
    weights = torch.rand(2, 4, 14, 15).softmax(-1)
    fig = readable_head_grid(weights, tokens_q, tokens_k, title="t")
    width, _ = fig.get_size_inches()
    assert width <= 12  # a notebook page shows it near full size, so 10-point labels stay about 10 points
    panels = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]
    assert len(panels) == 8
    assert [t.get_text() for t in panels[0].get_yticklabels()] == tokens_q
    assert [t.get_text() for t in panels[-1].get_xticklabels()] == tokens_k
    assert all(t.get_fontsize() >= 10 for ax in panels for t in ax.get_xticklabels() + ax.get_yticklabels())
    plt.close(fig)
    with pytest.raises(ValueError, match="weights"):
        readable_head_grid(torch.rand(3), ["a"] * 3, ["b"] * 3)


def test_layer_head_heatmap_writes_every_number_and_labels_its_colour_bar():
    from helpers.viewing.plotting import layer_head_heatmap

    values = torch.tensor([[0.61, 0.34, 0.53, 0.44], [0.80, 0.74, 0.77, 0.83]])
    ax = layer_head_heatmap(values, "alignment accuracy", "share of words", vmin=0, vmax=1)
    assert sorted(t.get_text() for t in ax.texts) == sorted(f"{v:.0%}" for v in values.flatten().tolist())
    colour_bar = next(a for a in ax.figure.axes if a is not ax)
    assert colour_bar.get_ylabel() == "share of words"
    plt.close("all")
    ax = layer_head_heatmap(torch.tensor([[0.7, 10.7]]), "BLEU lost", "BLEU points", fmt="{:.1f}")
    assert sorted(t.get_text() for t in ax.texts) == ["0.7", "10.7"]
    plt.close("all")
    with pytest.raises(ValueError, match="one per head"):
        layer_head_heatmap(torch.rand(4), "x", "y")


def test_word_alignment_grid_frames_every_gold_link_and_the_highlight():
    from helpers.viewing.plotting import word_alignment_grid

    gold = [(0, 0), (1, 1), (2, 3), (3, 2)]
    fig = word_alignment_grid(torch.rand(4, 4, 4), list("ABCD"), list("abcd"), gold, highlight=(2, 3))
    panels = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]
    assert len(panels) == 4
    for ax in panels:
        frames = ax.patches
        assert len(frames) == len(gold)
        red = [p for p in frames if p.get_edgecolor()[:3] == (1.0, 0.0, 0.0)]
        assert len(red) == 1 and red[0].get_xy() == (2 - 0.5, 3 - 0.5)  # German 2 on x, English 3 on y
    plt.close(fig)
    with pytest.raises(ValueError, match="English"):
        word_alignment_grid(torch.rand(4, 4, 4), list("ABC"), list("abcd"), gold)


def test_the_three_attentions_are_drawn_one_row_each():
    from helpers.models.translation.inspection import AttentionMaps
    from helpers.viewing.plotting import attention_kinds_figure

    S, T = 6, 5
    maps = AttentionMaps(
        source_tokens=[f"s{i}" for i in range(S)],
        read_tokens=["<bos>", *[f"r{i}" for i in range(T - 1)]],
        output_tokens=[*[f"r{i}" for i in range(T - 1)], "<eos>"],
        encoder=torch.rand(1, 4, S, S).softmax(-1),
        decoder=torch.rand(2, 4, T, T).softmax(-1),
        cross=torch.rand(2, 4, T, S).softmax(-1),
    )
    fig = attention_kinds_figure(maps)
    panels = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]
    assert len(panels) == 12  # 3 kinds x 4 heads, plus one colour bar
    assert panels[0].title.get_text().startswith("encoder self")
    assert panels[4].title.get_text().startswith("decoder self")
    assert panels[8].title.get_text().startswith("cross")
    assert len(panels[8].get_xticklabels()) == S and len(panels[4].get_xticklabels()) == T
    # rows: decoder self-attention by the token read, cross-attention by the token produced (as in every figure)
    assert [t.get_text() for t in panels[4].get_yticklabels()] == maps.read_tokens
    assert [t.get_text() for t in panels[8].get_yticklabels()] == maps.output_tokens
    assert "produced" in panels[8].get_ylabel() and "read" in panels[4].get_ylabel()
    plt.close(fig)


# --- one explorer for every lesson: (weights, query_tokens, key_tokens) --------------------------
def test_attention_explorer_takes_triples_and_self_attention_views_alike():
    from helpers.models.pretrained import AttentionView
    from helpers.viewing.widgets import attention_explorer, show_attention

    tokens = ["[CLS]", "a", "dog", "[SEP]"]
    weights = torch.rand(3, 2, 4, 4).softmax(-1)  # (n_layers, h, T, T)
    view = AttentionView("a dog", tokens, weights)
    assert torch.equal(show_attention([view], layer=2, head=1), weights[2, 1])
    assert torch.equal(show_attention([(weights, tokens, None)], layer=0, head=1), weights[0, 1])
    ui = attention_explorer([view, (weights.flip(-1), tokens, tokens)])
    sentence, layer, head = ui.children[:3]
    assert [label for label, _ in sentence.options] == ["a dog", "1: [CLS] a dog [SEP]"]
    sentence.value, layer.value, head.value = 1, 1, 0
    assert torch.equal(ui.result, weights.flip(-1)[1, 0])
    plt.close("all")
    with pytest.raises(ValueError, match=r"same \(n_layers, h\)"):
        attention_explorer([view, (weights[0], tokens, None)])
    with pytest.raises(ValueError, match="query_tokens has 3 tokens"):
        attention_explorer([(weights, tokens[:3], None)])
    with pytest.raises(ValueError, match="got a str"):
        attention_explorer(["not an example"])


def test_the_lesson_06_names_are_the_same_explorer():
    from helpers.viewing import widgets

    assert widgets.cross_attention_explorer is widgets.attention_explorer
    assert widgets.show_cross_attention is widgets.show_attention


def test_draw_default_false_keeps_the_first_figure_out_of_the_widget_state():
    from helpers.viewing.widgets import attention_explorer

    items = translations()
    plt.close("all")
    attention_explorer(items)
    assert len(plt.get_fignums()) == 1  # by default the explorer draws its first figure
    plt.close("all")
    ui = attention_explorer(items, draw_default=False)
    assert plt.get_fignums() == []  # nothing drawn, so nothing saved in the output widget's state
    assert torch.equal(ui.result, items[0].attention[1, 0])  # the result is there all the same
    ui.children[2].value = 3
    assert len(plt.get_fignums()) == 1 and torch.equal(ui.result, items[0].attention[1, 3])
    plt.close("all")
