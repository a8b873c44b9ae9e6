"""The lessons' figures: what each draws (panels, labels, scales, units) and the errors bad input gets."""

from __future__ import annotations

import itertools

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import pytest
import torch

from helpers.viewing.plotting import (
    attention_heatmap,
    compact_png,
    format_seconds,
    head_grid,
    layer_head_tables,
    readable_panel_size,
    seconds_axis,
    use_compact_png,
)
from helpers.viewing.shapes import attention_inputs, layers_of_heads

TOKENS = ["[CLS]", "a", "mother", "and", "her", "son", "[SEP]"]


def weights(*shape, seed=0):
    return torch.softmax(torch.randn(*shape, generator=torch.Generator().manual_seed(seed)), dim=-1)


def panels(fig):
    return [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]


def colour_limits(ax):
    return ax.images[0].get_clim()


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


# --- one way to shape head weights --------------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "shape"),
    [
        (weights(4, 5), (1, 1, 4, 5)),
        (weights(3, 4, 5), (1, 3, 4, 5)),
        (weights(2, 3, 4, 5), (2, 3, 4, 5)),
        ([weights(3, 4, 5), weights(3, 4, 5, seed=1)], (2, 3, 4, 5)),
        (weights(3, 4, 5).tolist(), (1, 3, 4, 5)),  # nested numbers: one array, not three layers
        (weights(3, 4, 5).numpy(), (1, 3, 4, 5)),
    ],
)
def test_every_accepted_shape_becomes_layers_heads_queries_keys(value, shape):
    stacked = layers_of_heads(value)
    assert tuple(stacked.shape) == shape and stacked.dtype == torch.float32
    numbers = torch.stack(value) if isinstance(value, list) and torch.is_tensor(value[0]) else torch.as_tensor(value)
    assert torch.allclose(stacked.reshape(-1), numbers.float().reshape(-1))


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (None, "weights is None"),
        ([], "empty list"),
        (weights(5), r"got shape \(5,\)"),
        (weights(2, 2, 3, 4, 5), "pick one sentence"),
        ([weights(4, 5)], r"layer 0 .* must be \(h, L, S\)"),
        ([weights(3, 4, 5), weights(2, 4, 5)], "same"),
        ([[0.5, 0.5], [0.5]], "could not be read"),
        (torch.zeros(2, 0, 3), "nothing to show"),
        (torch.ones(2, 2, dtype=torch.complex64), "complex"),
    ],
)
def test_bad_weights_get_an_error_naming_what_was_expected(value, message):
    with pytest.raises(ValueError, match=message):
        layers_of_heads(value)


def test_tokens_are_checked_against_the_weights():
    w = weights(2, 7, 7)
    stacked, queries, keys = attention_inputs(w, TOKENS)
    assert queries == keys == TOKENS and stacked.shape == (1, 2, 7, 7)
    with pytest.raises(ValueError, match="pass key_tokens"):
        attention_inputs(weights(2, 7, 5), TOKENS)
    with pytest.raises(ValueError, match="key_tokens has 7 tokens; the weights need 5"):
        attention_inputs(weights(2, 7, 5), TOKENS, TOKENS)
    with pytest.raises(ValueError, match=r"query_tokens\[2\] is 3 \(int\)"):
        attention_inputs(w, ["a", "b", 3, "d", "e", "f", "g"])


# --- attention_heatmap ----------------------------------------------------------------------------
def test_heatmap_puts_queries_on_the_y_axis_and_keys_on_the_x_axis():
    w = weights(3, 7)
    ax = attention_heatmap(w, TOKENS[:3], TOKENS, annotate=True)
    assert [t.get_text() for t in ax.get_yticklabels()] == TOKENS[:3]
    assert [t.get_text() for t in ax.get_xticklabels()] == TOKENS
    assert torch.allclose(torch.as_tensor(ax.images[0].get_array().data).float(), w)
    assert len(ax.texts) == 21 and ax.texts[0].get_text() == f"{float(w[0, 0]):.2f}"
    assert colour_limits(ax) == (0.0, 1.0)
    with pytest.raises(ValueError, match=r"one \(L, S\) attention matrix"):
        attention_heatmap(weights(2, 3, 7), TOKENS[:3], TOKENS)


# --- head_grid ------------------------------------------------------------------------------------
def test_head_grid_draws_every_layer_and_head_on_one_scale():
    w = weights(2, 3, 7, 7)
    fig = head_grid(w, TOKENS)
    drawn = panels(fig)
    assert len(drawn) == 6 and len(fig.axes) == 7  # one shared colour bar
    assert [ax.get_title() for ax in drawn[:4]] == ["layer 0, head 0", "layer 0, head 1", "layer 0, head 2",
                                                    "layer 1, head 0"]  # fmt: skip
    assert all(colour_limits(ax) == (0.0, 1.0) for ax in drawn)
    assert torch.allclose(torch.as_tensor(drawn[4].images[0].get_array().data).float(), w[1, 1])
    # token labels on the outer panels only: the left column and the bottom row
    labelled_y = [bool(ax.get_yticklabels()) and ax.get_yticklabels()[0].get_text() != "" for ax in drawn]
    labelled_x = [bool(ax.get_xticklabels()) and ax.get_xticklabels()[0].get_text() != "" for ax in drawn]
    assert labelled_y == [True, False, False, True, False, False]
    assert labelled_x == [False, False, False, True, True, True]


def test_head_grid_can_show_fewer_larger_panels_wrapped_into_rows():
    w = weights(6, 12, 7, 7)
    fig = head_grid(w, TOKENS, layers=[5], heads=[0, 3, 7, 11, 2], columns=3, panel_size=None, label_size=9)
    drawn = panels(fig)
    assert [ax.get_title() for ax in drawn] == [f"layer 5, head {h}" for h in (0, 3, 7, 11, 2)]
    assert torch.allclose(torch.as_tensor(drawn[2].images[0].get_array().data).float(), w[5, 7])
    # the panel above the missing sixth gets the key labels, as the last row does
    has_x = [ax.get_xticklabels()[0].get_text() != "" for ax in drawn]
    assert has_x == [False, False, True, True, True]
    width, height = fig.get_size_inches()
    assert width == pytest.approx(3 * readable_panel_size(7, 9) + 1.0)
    assert height == pytest.approx(2 * readable_panel_size(7, 9) + 0.6)
    with pytest.raises(ValueError, match=r"heads must be .* in 0\.\.11"):
        head_grid(w, TOKENS, heads=[12])
    with pytest.raises(ValueError, match="labels must be one of"):
        head_grid(w, TOKENS, labels="some")


def test_labels_none_draws_an_overview_without_token_labels():
    fig = head_grid(weights(6, 12, 7, 7), TOKENS, labels="none", panel_size=0.8)
    drawn = panels(fig)
    assert len(drawn) == 72
    assert all(not ax.get_xticklabels() and not ax.get_yticklabels() for ax in drawn)


@pytest.mark.parametrize("tokens", [7, 13, 30])
def test_a_panel_sized_from_the_token_count_has_no_overlapping_labels(tokens):
    names = [f"tok{i}" for i in range(tokens)]
    fig = head_grid(weights(1, 2, tokens, tokens), names, panel_size=None, label_size=8)
    fig.canvas.draw()
    for ax in panels(fig)[:1]:
        boxes = [t.get_window_extent() for t in ax.get_yticklabels()]
        assert len(boxes) == tokens and not any(a.overlaps(b) for a, b in itertools.pairwise(boxes))


def test_a_fixed_small_panel_does_overlap_so_the_check_above_can_fail():
    names = [f"tok{i}" for i in range(30)]
    fig = head_grid(weights(1, 2, 30, 30), names, panel_size=1.2, label_size=8)
    fig.canvas.draw()
    boxes = [t.get_window_extent() for t in panels(fig)[0].get_yticklabels()]
    assert any(a.overlaps(b) for a, b in itertools.pairwise(boxes))


# --- layer_head_tables ----------------------------------------------------------------------------
def test_layer_head_tables_returns_its_figure_and_shares_a_scale_where_asked():
    tables = {
        "previous": torch.rand(6, 12) * 0.4,
        "next": torch.rand(6, 12) * 0.9,
        "entropy (nats)": torch.rand(6, 12) * 2.5,
    }
    fig = layer_head_tables(tables, columns=3, share=["previous", "next"])
    drawn = panels(fig)
    assert len(drawn) == 3
    together = torch.cat([tables["previous"], tables["next"]])
    expected = (float(together.min()), float(together.max()))
    assert colour_limits(drawn[0]) == pytest.approx(expected) == colour_limits(drawn[1])
    entropy = tables["entropy (nats)"]
    assert colour_limits(drawn[2]) == pytest.approx((float(entropy.min()), float(entropy.max())))
    bars = [ax for ax in fig.axes if ax.get_label() == "<colorbar>"]
    assert [bar.get_ylabel() for bar in bars] == ["shared scale", "shared scale", ""]
    own = panels(layer_head_tables(tables, columns=3))
    assert colour_limits(own[0]) != colour_limits(own[1])  # without share each panel has its own scale
    with pytest.raises(ValueError, match="not in tables"):
        layer_head_tables(tables, share=["previous "])
    with pytest.raises(ValueError, match="either shared_scale"):
        layer_head_tables(tables, share=["next"], shared_scale=(0, 1))


# --- time axes ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("seconds", "label"),
    [(2.5, "2.5 s"), (0.0021, "2.1 ms"), (3e-5, "30 µs"), (4.2e-8, "42 ns"), (0.001, "1 ms"), (0, "0 s")],
)
def test_durations_read_in_the_largest_unit_under_them(seconds, label):
    assert format_seconds(seconds) == label


def test_seconds_axis_labels_ticks_in_readable_units():
    fig, ax = plt.subplots()
    ax.plot([64, 128, 256, 512], [2e-5, 8e-5, 3e-4, 1.2e-3])
    seconds_axis(ax, "y")
    fig.canvas.draw()
    labels = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
    assert ax.get_yscale() == "log"
    assert "100 µs" in labels and "1 ms" in labels
    assert all(unit in ("s", "ms", "µs", "ns") for unit in (label.split()[-1] for label in labels))
    with pytest.raises(ValueError, match='axis must be "x" or "y"'):
        seconds_axis(ax, "z")


# --- compact figures ------------------------------------------------------------------------------
def test_compact_png_is_a_palette_image_of_the_same_size_and_fewer_bytes():
    import io

    from PIL import Image

    fig = head_grid(weights(2, 4, 7, 7), TOKENS)
    compact = compact_png(fig)
    full = io.BytesIO()
    fig.savefig(full, format="png", bbox_inches="tight")
    small, big = Image.open(io.BytesIO(compact)), Image.open(io.BytesIO(full.getvalue()))
    assert small.mode == "P" and small.size == big.size
    assert len(compact) < 0.6 * len(full.getvalue())
    with pytest.raises(ValueError, match=r"colours must be in 2\.\.256"):
        compact_png(fig, colours=1000)


def test_use_compact_png_makes_ipython_store_figures_compactly():
    import base64
    import io

    from IPython.core.interactiveshell import InteractiveShell
    from PIL import Image

    assert use_compact_png() is False  # no IPython running: nothing changes
    shell = InteractiveShell.instance()
    try:
        assert use_compact_png() is True
        fig = head_grid(weights(1, 2, 7, 7), TOKENS)
        data, _ = shell.display_formatter.format(fig)
        assert Image.open(io.BytesIO(base64.b64decode(data["image/png"]))).mode == "P"
    finally:
        InteractiveShell.clear_instance()
