"""Figures for the lessons: attention heatmaps with token labels, grids of heads.

Conventions, kept in every figure of the course: rows are queries (the tokens doing the looking,
on the y axis), columns are keys (the tokens looked at, on the x axis); weights are drawn with one
colour-blind-safe colour map (viridis) on one shared scale, 0 to 1 unless stated.
"""

from __future__ import annotations

import io
from collections.abc import Sequence

import matplotlib.pyplot as plt
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from torch import Tensor

from helpers.viewing.shapes import attention_inputs, layers_of_heads

CMAP = "viridis"


def attention_heatmap(
    weights: Tensor,
    query_tokens: Sequence[str],
    key_tokens: Sequence[str] | None = None,
    ax: Axes | None = None,
    title: str | None = None,
    vmin: float = 0.0,
    vmax: float = 1.0,
    annotate: bool = False,
    colorbar: bool = True,
) -> Axes:
    """Draw one (L, S) attention matrix: queries on the y axis, keys on the x axis.

    ``key_tokens`` None: self-attention, the keys are the query tokens. ``annotate`` writes each weight in
    its cell (for small examples a learner checks by hand).
    """
    stacked, query_tokens, key_tokens = attention_inputs(_as_2d(weights), query_tokens, key_tokens)
    weights = stacked[0, 0]
    L, S = weights.shape
    if ax is None:
        _, ax = plt.subplots(figsize=(0.5 * S + 2.5, 0.45 * L + 1.5))
    image = ax.imshow(weights.numpy(), cmap=CMAP, vmin=vmin, vmax=vmax, aspect="auto")
    ax.set_xticks(range(S), key_tokens, rotation=60, ha="right", rotation_mode="anchor")
    ax.set_yticks(range(L), query_tokens)
    ax.set_xlabel("keys (attended to)")
    ax.set_ylabel("queries")
    if title:
        ax.set_title(title)
    if annotate:
        for i in range(L):
            for j in range(S):
                value = float(weights[i, j])
                colour = "black" if value > vmin + 0.6 * (vmax - vmin) else "white"
                ax.text(j, i, f"{value:.2f}", ha="center", va="center", color=colour, fontsize=8)
    if colorbar:
        ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label="attention weight")
    return ax


LABELS = ("outer", "all", "none")


def _pick(indices, count: int, what: str) -> list[int]:
    if indices is None:
        return list(range(count))
    picked = [int(i) for i in indices]
    if not picked or any(not -count <= i < count for i in picked):
        raise ValueError(f"{what} must be a non-empty list of indices in 0..{count - 1}, got {list(indices)}")
    return [i % count for i in picked]


def readable_panel_size(num_tokens: int, label_size: float = 8.0) -> float:
    """The side in inches of a heatmap panel whose ``num_tokens`` token labels of ``label_size`` points don't
    overlap (one label every 1.25 label heights), at least 1.6 inches."""
    return max(1.6, 1.25 * label_size * num_tokens / 72)


def head_grid(
    weights: Tensor,
    query_tokens: Sequence[str],
    key_tokens: Sequence[str] | None = None,
    row_label: str = "layer",
    title: str | None = None,
    vmin: float = 0.0,
    vmax: float = 1.0,
    panel_size: float | None = 2.6,
    *,
    layers: Sequence[int] | None = None,
    heads: Sequence[int] | None = None,
    columns: int | None = None,
    labels: str = "outer",
    label_size: float = 7.0,
) -> Figure:
    """Draw every head: (h, L, S) as one row, (n_layers, h, L, S) as a layer x head grid (any shape of
    ``helpers.viewing.shapes``). All panels share one colour scale and one colour bar.

    ``layers`` / ``heads``: the indices to show (fewer, larger panels). ``columns``: wrap the panels into
    rows of at most this many (panels are then read left to right, top to bottom). ``labels``: token
    labels on the "outer" panels (left column, bottom of each column), on "all" panels, or "none" (an
    overview of many heads, where labels could not be read anyway). ``panel_size`` in inches; None sizes
    it from the token count so that the ``label_size``-point labels do not overlap.
    """
    if labels not in LABELS:
        raise ValueError(f"labels must be one of {LABELS}, got {labels!r}")
    stacked, query_tokens, key_tokens = attention_inputs(weights, query_tokens, key_tokens)
    layer_ids = _pick(layers, stacked.shape[0], "layers")
    head_ids = _pick(heads, stacked.shape[1], "heads")
    L, S = stacked.shape[-2:]
    panels = [(r, head) for r in layer_ids for head in head_ids]  # (layer, head) in reading order
    one_row = stacked.shape[0] == 1
    if columns is None:
        columns = len(head_ids)
    if columns < 1:
        raise ValueError(f"columns must be at least 1, got {columns}")
    columns = min(columns, len(panels))
    rows = -(-len(panels) // columns)
    if panel_size is None:
        panel_size = readable_panel_size(max(L, S), label_size)
    fig, axes = plt.subplots(
        rows,
        columns,
        figsize=(panel_size * columns + 1.0, panel_size * rows + 0.6),
        squeeze=False,
        constrained_layout=True,
    )
    for index, (r, head) in enumerate(panels):
        row, column = divmod(index, columns)
        ax = axes[row][column]
        image = ax.imshow(stacked[r, head].numpy(), cmap=CMAP, vmin=vmin, vmax=vmax, aspect="auto")
        bottom = index + columns >= len(panels)  # no panel below this one
        show_x = labels == "all" or (labels == "outer" and bottom)
        show_y = labels == "all" or (labels == "outer" and column == 0)
        ax.set_xticks(range(S), key_tokens if show_x else [], rotation=90, fontsize=label_size)
        ax.set_yticks(range(L), query_tokens if show_y else [], fontsize=label_size)
        if labels == "none":
            ax.set_xticks([])
            ax.set_yticks([])
        heading = f"head {head}" if one_row else f"{row_label} {r}, head {head}"
        ax.set_title(heading, fontsize=label_size + 2)
        if column == 0:
            ax.set_ylabel("queries", fontsize=label_size + 1)
        if bottom:
            ax.set_xlabel("keys (attended to)", fontsize=label_size + 1)
    for ax in list(axes.flat)[len(panels) :]:
        ax.remove()  # no empty frames, and the figure counts only the panels drawn
    fig.colorbar(image, ax=list(axes.flat)[: len(panels)], shrink=0.8, label="attention weight")
    if title:
        fig.suptitle(title)
    return fig


def _as_2d(weights: Tensor) -> Tensor:
    if weights is None:
        raise ValueError("weights is None: expected one 2-D matrix")
    weights = torch.as_tensor(weights).detach().float().cpu()
    if weights.dim() != 2:
        raise ValueError(f"expected one (L, S) attention matrix, got shape {tuple(weights.shape)}")
    return weights


# ---------------------------------------------------------------------------------------------
# Lesson 01: positional encodings
# ---------------------------------------------------------------------------------------------
def positional_encoding_heatmap(encoding: Tensor, ax: Axes | None = None, title: str | None = None) -> Axes:
    """Draw a (P, E) positional-encoding table: positions down the y axis, features along the x axis.

    Values lie in [-1, 1]; one fixed colour scale (viridis) makes tables of different sizes comparable.
    """
    encoding = _as_2d(encoding)
    P, E = encoding.shape
    if ax is None:
        _, ax = plt.subplots(figsize=(7.5, 4.0))
    image = ax.imshow(encoding.numpy(), cmap=CMAP, vmin=-1.0, vmax=1.0, aspect="auto", interpolation="nearest")
    ax.set_xlabel(f"feature (0 .. {E - 1}): even = sin, odd = cos; frequency falls to the right")
    ax.set_ylabel(f"position (0 .. {P - 1})")
    ax.set_title(title or f"sinusoidal positional encoding, {P} positions x {E} features")
    ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label="value")
    return ax


def position_similarity_plot(encoding: Tensor, reference_positions: Sequence[int] = (5, 20, 35)) -> Figure:
    """Dot products between the encodings of every pair of positions, and a slice through them.

    Left: the (P, P) matrix ``encoding @ encoding.T``; its stripes run parallel to the diagonal
    because the dot product depends only on the distance between positions. Right: the rows of a few
    reference positions drawn against the distance to them: the curves lie on top of each other.
    """
    encoding = _as_2d(encoding)
    P = encoding.shape[0]
    if any(not 0 <= p < P for p in reference_positions):
        raise ValueError(f"reference positions must lie in [0, {P - 1}], got {list(reference_positions)}")
    similarity = encoding @ encoding.T  # (P, P)
    fig, (left, right) = plt.subplots(1, 2, figsize=(11.0, 4.2), constrained_layout=True)
    image = left.imshow(similarity.numpy(), cmap=CMAP, aspect="equal", interpolation="nearest")
    left.set_xlabel("position j")
    left.set_ylabel("position i")
    left.set_title("PE[i] · PE[j]")
    fig.colorbar(image, ax=left, fraction=0.046, pad=0.04, label="dot product")
    positions = torch.arange(P)
    for reference, marker in zip(reference_positions, ("o", "s", "^", "D", "v"), strict=False):
        right.plot(
            (positions - reference).numpy(),
            similarity[reference].numpy(),
            marker=marker,
            markersize=3,
            linewidth=1,
            label=f"from position {reference}",
        )
    right.set_xlabel("distance j - i")
    right.set_ylabel("PE[i] · PE[j]")
    right.set_title("the same curve, wherever you start")
    right.legend()
    right.grid(alpha=0.3)
    return fig


# ---------------------------------------------------------------------------------------------
# Lesson 03: why the scores are scaled, and masks
# ---------------------------------------------------------------------------------------------
def scaling_experiment_plot(
    head_sizes: Sequence[int],
    variance_unscaled: Sequence[float],
    variance_scaled: Sequence[float],
    max_weight_unscaled: Sequence[float],
    max_weight_scaled: Sequence[float],
    num_keys: int | None = None,
) -> Figure:
    """Two panels against the head size d_k (log axis): score variance, and the largest softmax weight.

    Without scaling the variance grows like d_k and the softmax saturates (largest weight -> 1);
    dividing by sqrt(d_k) keeps the variance near 1 and the weights spread.
    """
    fig, (left, right) = plt.subplots(1, 2, figsize=(11.0, 4.0), constrained_layout=True)
    sizes = list(head_sizes)
    left.plot(sizes, list(variance_unscaled), "o-", label="q · k (unscaled)")
    left.plot(sizes, list(variance_scaled), "s-", label="q · k / √d_k (scaled)")
    # drawn on top, wide and pale: the unscaled curve runs along it, and both must stay visible
    left.plot(sizes, sizes, "-", color="grey", alpha=0.35, linewidth=7, zorder=1, label="d_k (for reference)")
    left.set_xscale("log", base=2)
    left.set_yscale("log", base=2)
    left.set_xlabel("head size d_k")
    left.set_ylabel("variance of the scores")
    left.set_title("score variance")
    left.legend()
    right.plot(sizes, list(max_weight_unscaled), "o-", label="softmax(q · k)")
    right.plot(sizes, list(max_weight_scaled), "s-", label="softmax(q · k / √d_k)")
    if num_keys:
        right.axhline(1.0 / num_keys, linestyle=":", color="grey", label=f"uniform (1/{num_keys})")
    right.set_xscale("log", base=2)
    right.set_ylim(0.0, 1.05)
    right.set_xlabel("head size d_k")
    right.set_ylabel("largest weight in a row (mean)")
    right.set_title("softmax sharpness")
    right.legend()
    for ax in (left, right):
        ax.grid(alpha=0.3)
    return fig


def mask_plot(
    mask: Tensor,
    query_tokens: Sequence[str],
    key_tokens: Sequence[str],
    true_means: str,
    ax: Axes | None = None,
    title: str | None = None,
) -> Axes:
    """Draw a boolean (L, S) mask, stating its convention: ``true_means`` is "blocked" or "may attend".

    Whatever the convention, cells where a query may attend are drawn bright, blocked cells dark
    with a cross, so masks in either convention look the same when they mean the same.
    """
    if true_means not in ("blocked", "may attend"):
        raise ValueError(f'true_means must be "blocked" or "may attend", got {true_means!r}')
    mask = torch.as_tensor(mask).detach().cpu()
    if mask.dtype != torch.bool or mask.dim() != 2:
        raise ValueError(f"expected a boolean (L, S) mask, got dtype {mask.dtype} and shape {tuple(mask.shape)}")
    L, S = mask.shape
    if len(query_tokens) != L or len(key_tokens) != S:
        raise ValueError(
            f"a mask of shape (L, S) = {(L, S)} needs {L} query tokens and {S} key tokens, "
            f"got {len(query_tokens)} and {len(key_tokens)}"
        )
    allowed = ~mask if true_means == "blocked" else mask
    if ax is None:
        _, ax = plt.subplots(figsize=(0.5 * S + 2.0, 0.45 * L + 1.5))
    ax.imshow(allowed.float().numpy(), cmap=CMAP, vmin=0.0, vmax=1.0, aspect="auto")
    for i in range(L):
        for j in range(S):
            ax.text(j, i, "" if allowed[i, j] else "x", ha="center", va="center", color="white", fontsize=9)
    ax.set_xticks(range(S), list(key_tokens), rotation=60, ha="right", rotation_mode="anchor")
    ax.set_yticks(range(L), list(query_tokens))
    ax.set_xlabel("keys (attended to)")
    ax.set_ylabel("queries")
    ax.set_title(title or f"mask (True = {true_means}); bright = may attend, x = blocked", fontsize=10)
    return ax


# ---------------------------------------------------------------------------------------------
# Lesson 04: splitting into heads; lesson 05: where attention sits in the stacks
# ---------------------------------------------------------------------------------------------
def head_split_diagram(num_tokens: int = 4, embed_dim: int = 8, num_heads: int = 2) -> Figure:
    """Draw the reshapes of multi-head attention for one sentence, each cell coloured by its head.

    (T, E) projections -> view (T, h, d) -> transpose (h, T, d): h separate (T, d) matrices that
    attend independently -> transpose back and reshape: the heads' outputs side by side, (T, E).
    The batch dimension N is left out: it rides along unchanged in front.
    """
    if embed_dim % num_heads != 0:
        raise ValueError(f"embed_dim ({embed_dim}) must be divisible by num_heads ({num_heads})")
    T, E, h = num_tokens, embed_dim, num_heads
    d = E // h
    colours = plt.get_cmap("cividis")([0.15 + 0.7 * i / max(h - 1, 1) for i in range(h)])
    fig, axes = plt.subplots(
        1, 3, figsize=(12.0, 3.2), constrained_layout=True, gridspec_kw={"width_ratios": [1, 1.25, 1]}
    )

    def matrix(ax, x0, y0, rows, cols, head_of_col, label=None):
        for r in range(rows):
            for c in range(cols):
                head = head_of_col(c)
                ax.add_patch(
                    plt.Rectangle((x0 + c, y0 - r - 1), 1, 1, facecolor=colours[head], edgecolor="white", linewidth=1)
                )
                text_colour = "white" if head < h / 2 else "black"  # dark text on the light (yellow) end of cividis
                ax.text(x0 + c + 0.5, y0 - r - 0.5, f"{r}", ha="center", va="center", fontsize=7, color=text_colour)
        if label:
            ax.text(x0 + cols / 2, y0 + 0.4, label, ha="center", va="bottom", fontsize=9)

    left, middle, right = axes
    matrix(left, 0, 0, T, E, lambda c: c // d)
    left.set_title(f"Q = x W_qᵀ: (T, E) = ({T}, {E})\ncolour = head, number = token", fontsize=10)
    gap = 1.0
    for i in range(h):
        matrix(middle, i * (d + gap), 0, T, d, lambda c, i=i: i, label=f"head {i}")
    middle.set_title(
        f"view (T, h, d), transpose -> (h, T, d) = ({h}, {T}, {d})\neach head attends on its own", fontsize=10
    )
    matrix(right, 0, 0, T, E, lambda c: c // d)
    right.set_title(
        f"transpose back, reshape: (T, E) = ({T}, {E})\nheads side by side, then W_o mixes them", fontsize=10
    )
    for ax, width in ((left, E), (middle, h * (d + gap) - gap), (right, E)):
        ax.set_xlim(-0.3, width + 0.3)
        ax.set_ylim(-T - 0.3, 1.3)
        ax.set_aspect("equal")
        ax.axis("off")
    return fig


def transformer_diagram(num_layers: str = "n_layers") -> Figure:
    """Encoder and decoder layers as stacks of boxes, attention highlighted, memory flowing across.

    Encoder layer: self-attention, add & norm, feed-forward, add & norm. Decoder layer: masked
    self-attention, add & norm, cross-attention (queries from the decoder; keys and values from the
    encoder's output, the memory), add & norm, feed-forward, add & norm. A residual arrow runs around
    every sublayer into its add & norm. Each framed layer repeats ``num_layers`` times (named so, never
    N, which is the batch in the memory's shape (N, S, E)).
    """
    attention, other = plt.get_cmap("cividis")(0.85), "#d9d9d9"
    fig, ax = plt.subplots(figsize=(9.0, 6.4), constrained_layout=True)
    width, height, step = 3.2, 0.55, 0.8

    def box(x, y, text, colour, bold=False):
        ax.add_patch(plt.Rectangle((x, y), width, height, facecolor=colour, edgecolor="black", linewidth=0.8))
        ax.text(
            x + width / 2,
            y + height / 2,
            text,
            ha="center",
            va="center",
            fontsize=9,
            fontweight="bold" if bold else "normal",
        )

    def arrow(x0, y0, x1, y1, **kw):
        ax.annotate("", xy=(x1, y1), xytext=(x0, y0), arrowprops=dict(arrowstyle="->", linewidth=1.2, **kw))

    encoder = ["self-attention (h heads)", "add & norm", "feed-forward", "add & norm"]
    decoder = [
        "masked self-attention (h heads)",
        "add & norm",
        "cross-attention (h heads)",
        "add & norm",
        "feed-forward",
        "add & norm",
    ]
    ex, dx, y0 = 0.0, 5.0, 0.8
    for i, text in enumerate(encoder):
        box(ex, y0 + i * step, text, attention if "attention" in text else other, bold="attention" in text)
    for i, text in enumerate(decoder):
        box(dx, y0 + i * step, text, attention if "attention" in text else other, bold="attention" in text)
    # Frames around one layer of each stack, repeated num_layers times.
    for x, n in ((ex, len(encoder)), (dx, len(decoder))):
        ax.add_patch(
            plt.Rectangle((x - 0.3, y0 - 0.25), width + 0.6, n * step + 0.25, fill=False, linestyle="--", linewidth=1)
        )
        ax.text(x + width + 0.4, y0 + n * step - 0.3, f"× {num_layers}", fontsize=11, va="center")
    # Residual arrows: each sublayer's input goes around it into the add & norm above it.
    # The encoder's run on the left; the decoder's on the right, clear of the memory arrow.
    for x, n, side in ((ex, len(encoder), -0.15), (dx, len(decoder), width + 0.15)):
        for i in range(0, n, 2):
            below, into = y0 + i * step - 0.13, y0 + (i + 1) * step + height / 2
            edge = x if side < 0 else x + width
            ax.plot([x + width / 2, x + side, x + side], [below, below, into], color="0.35", linewidth=1.1)
            arrow(x + side, into, edge, into, color="0.35")
    ax.text(ex - 0.38, y0 + step * 0.6, "residual", fontsize=8, color="0.35", rotation=90, ha="right", va="center")
    ax.text(ex + width / 2, y0 + len(encoder) * step + 0.2, "encoder layer", ha="center", fontsize=11)
    ax.text(dx + width / 2, y0 + len(decoder) * step + 0.2, "decoder layer", ha="center", fontsize=11)
    # Inputs from below, flow upwards.
    ax.text(ex + width / 2, 0.0, "source tokens + positions\n(German)", ha="center", va="center", fontsize=9)
    ax.text(
        dx + width / 2,
        0.0,
        "target tokens so far + positions\n(English, shifted right)",
        ha="center",
        va="center",
        fontsize=9,
    )
    arrow(ex + width / 2, 0.3, ex + width / 2, y0)
    arrow(dx + width / 2, 0.3, dx + width / 2, y0)
    for x, n in ((ex, len(encoder)), (dx, len(decoder))):
        for i in range(n - 1):
            arrow(x + width / 2, y0 + i * step + height, x + width / 2, y0 + (i + 1) * step)
    # The memory: the encoder's output feeds keys and values of every decoder layer's cross-attention.
    top = y0 + (len(encoder) - 1) * step + height  # top of the encoder's last box
    cross_y = y0 + 2 * step + height / 2
    xs, ys = ex + width - 0.4, top + 0.85
    bend = (ex + width + dx) / 2 + 0.3
    ax.plot([xs, xs, bend, bend], [top, ys, ys, cross_y], color="black", linewidth=1.6)
    arrow(bend, cross_y, dx, cross_y, mutation_scale=14)
    ax.text(ex, ys + 0.1, "memory (N, S, E): keys and values\nof every cross-attention", fontsize=9, va="bottom")
    ax.text(dx + width + 0.4, cross_y - 0.35, "queries from\nthe decoder", fontsize=8, va="center")
    ax.text(
        dx + width / 2,
        y0 + len(decoder) * step + 0.7,
        "-> linear + softmax over the target vocabulary",
        ha="center",
        fontsize=9,
    )
    ax.text(
        (ex + dx + width) / 2,
        -0.6,
        f"{num_layers}: layers in each stack (6 in the original transformer); N: sentences in a batch",
        ha="center",
        fontsize=8,
    )
    ax.set_xlim(-0.7, dx + width + 1.7)
    ax.set_ylim(-0.8, y0 + len(decoder) * step + 1.0)
    ax.axis("off")
    ax.set_title(
        "where attention sits (highlighted): encoder self-attention; decoder masked self-attention and cross-attention",
        fontsize=10,
    )
    return fig


# ---------------------------------------------------------------------------------------------
# Lesson 08: one number per head, for every layer (and lesson 07's time axes)
# ---------------------------------------------------------------------------------------------
def layer_head_tables(
    tables: dict[str, Tensor],
    columns: int = 2,
    shared_scale: tuple[float, float] | None = None,
    panel_size: tuple[float, float] = (5.6, 2.6),
    share: Sequence[str] | None = None,
) -> Figure:
    """One heatmap per (n_layers, h) table of per-head numbers: layers down the y axis, heads along the x axis.

    ``tables`` maps a panel title to its table. Each panel gets its own colour bar (scores, entropies and
    costs have different units), except: ``shared_scale=(vmin, vmax)`` puts every panel on that scale;
    ``share`` names the panels (titles) that share one scale, from their common minimum to maximum (e.g.
    the mean weights of several roles, not the entropy beside them), each labelled "shared scale".
    """
    if not tables:
        raise ValueError("layer_head_tables needs at least one table")
    tables = {title: torch.as_tensor(t).detach().float().cpu() for title, t in tables.items()}
    shapes = {tuple(t.shape) for t in tables.values()}
    if len(shapes) != 1 or len(next(iter(shapes))) != 2:
        raise ValueError(f"every table must be one (n_layers, h) matrix of the same shape, got shapes {sorted(shapes)}")
    if columns < 1:
        raise ValueError(f"columns must be at least 1, got {columns}")
    shared = list(share or [])
    unknown = [name for name in shared if name not in tables]
    if unknown:
        raise ValueError(f"share names panels that are not in tables: {unknown}; the titles are {list(tables)}")
    if shared and shared_scale:
        raise ValueError("give either shared_scale (every panel) or share (some panels), not both")
    if shared:
        together = torch.stack([tables[name] for name in shared])
        group_scale = (float(together.min()), float(together.max()))
    layers, heads = next(iter(shapes))
    rows = -(-len(tables) // columns)
    fig, axes = plt.subplots(
        rows, columns, figsize=(panel_size[0] * columns, panel_size[1] * rows), squeeze=False, constrained_layout=True
    )
    for ax, (title, table) in zip(axes.flat, tables.items(), strict=False):
        vmin, vmax = shared_scale if shared_scale else group_scale if title in shared else (None, None)
        image = ax.imshow(table.numpy(), cmap=CMAP, vmin=vmin, vmax=vmax)
        ax.set_xticks(range(heads), [str(h) for h in range(heads)], fontsize=7)
        ax.set_yticks(range(layers), [str(layer) for layer in range(layers)], fontsize=7)
        ax.set_xlabel("head", fontsize=8)
        ax.set_ylabel("layer", fontsize=8)
        ax.set_title(title, fontsize=10)
        fig.colorbar(image, ax=ax, shrink=0.9, label="shared scale" if title in shared or shared_scale else None)
    for ax in list(axes.flat)[len(tables) :]:
        ax.axis("off")
    return fig


_TIME_UNITS = ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns"))


def format_seconds(seconds: float) -> str:
    """A duration in seconds as a short label in the largest unit under it: 0.0021 -> "2.1 ms", 3e-5 -> "30 µs"."""
    if seconds == 0:
        return "0 s"
    for scale, unit in _TIME_UNITS[:-1]:
        if abs(seconds) >= scale:
            return f"{seconds / scale:.3g} {unit}"
    scale, unit = _TIME_UNITS[-1]  # ns, the smallest, for anything below the others (and NaN)
    return f"{seconds / scale:.3g} {unit}"


def seconds_axis(ax: Axes, axis: str = "y", log: bool = True) -> Axes:
    """Label a time axis holding seconds in readable units ("100 µs", "1 ms", "2.5 s"); with ``log``, a
    base-10 log scale with ticks at the powers of ten."""
    from matplotlib.ticker import FuncFormatter, LogLocator

    if axis not in ("x", "y"):
        raise ValueError(f'axis must be "x" or "y", got {axis!r}')
    target = ax.yaxis if axis == "y" else ax.xaxis
    if log:
        (ax.set_yscale if axis == "y" else ax.set_xscale)("log", base=10)
        target.set_major_locator(LogLocator(base=10))
    target.set_major_formatter(FuncFormatter(lambda value, _: format_seconds(value)))
    return ax


# ---------------------------------------------------------------------------------------------
# Lesson 06: a trained translator's heads, readable at the width of a notebook page
# ---------------------------------------------------------------------------------------------
LABEL_SIZE = 10  # tick labels in points: still readable when a notebook shrinks a wide figure to its page


def readable_head_grid(
    weights: Tensor,
    query_tokens: Sequence[str],
    key_tokens: Sequence[str] | None = None,
    title: str | None = None,
    row_label: str = "layer",
    query_label: str = "queries",
    key_label: str = "keys (attended to)",
    vmax: float = 1.0,
) -> Figure:
    """``head_grid`` for a notebook page: (h, L, S) or (n_layers, h, L, S), at most 11 inches wide, 10-point labels.

    Token labels sit on the outer panels only (the left column and the bottom row), which every panel shares.
    The colour scale runs from 0 to ``vmax`` (1 unless stated).
    """
    weights = layers_of_heads(weights)
    rows, heads = weights.shape[:2]
    panel = min(2.9, 10.0 / heads)
    fig = head_grid(weights, query_tokens, key_tokens, row_label=row_label, title=title, vmax=vmax, panel_size=panel)
    fig.set_size_inches(panel * heads + 1.2, (panel + 0.35) * rows + 1.3)
    panels = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"][: rows * heads]
    for index, ax in enumerate(panels):
        ax.tick_params(labelsize=LABEL_SIZE)
        ax.title.set_fontsize(LABEL_SIZE + 1)
        ax.set_ylabel(query_label if index % heads == 0 else "", fontsize=LABEL_SIZE)
        ax.set_xlabel(key_label if index >= (rows - 1) * heads else "", fontsize=LABEL_SIZE)
    return fig


def attention_kinds_figure(maps, layer: int = -1, encoder_layer: int = -1, title: str | None = None) -> Figure:
    """The three attentions of a translator side by side, one row each, one column per head.

    ``maps`` is a ``helpers.models.translation.inspection.AttentionMaps``. Rows: the encoder's self-attention
    (source over source, (S, S)), the decoder's masked self-attention (each position over the positions read
    so far, (T, T)), rows labelled by the token read, and its cross-attention (each position over the source,
    (T, S)), rows labelled by the token produced there, as every cross-attention figure of the course; one colour scale.
    """
    rows = [
        (maps.encoder[encoder_layer], maps.source_tokens, maps.source_tokens, "encoder self", "encoder self-attention"),
        (
            maps.decoder[layer],
            maps.read_tokens,
            maps.read_tokens,
            "decoder self",
            "decoder masked self-att.\n(token read)",
        ),
        (maps.cross[layer], maps.output_tokens, maps.source_tokens, "cross", "cross-attention\n(token produced)"),
    ]
    heads = maps.cross.shape[1]
    panel = min(2.9, 10.0 / heads)
    fig, axes = plt.subplots(
        3, heads, figsize=(panel * heads + 1.2, 3 * (panel + 0.55) + 1.0), squeeze=False, constrained_layout=True
    )
    for r, (weights, queries, keys, name, row_name) in enumerate(rows):
        for h in range(heads):
            ax = axes[r][h]
            image = ax.imshow(weights[h].float().numpy(), cmap=CMAP, vmin=0.0, vmax=1.0, aspect="auto")
            ax.set_xticks(range(len(keys)), list(keys), rotation=90, fontsize=LABEL_SIZE - 1)
            ax.set_yticks(range(len(queries)), list(queries) if h == 0 else [], fontsize=LABEL_SIZE - 1)
            ax.set_title(f"{name}, head {h}", fontsize=LABEL_SIZE)
            if h == 0:
                ax.set_ylabel(row_name, fontsize=LABEL_SIZE)
    fig.colorbar(image, ax=axes, shrink=0.6, label="attention weight")
    if title:
        fig.suptitle(title)
    return fig


def layer_head_heatmap(
    values: Tensor,
    title: str,
    colorbar_label: str,
    fmt: str = "{:.0%}",
    vmin: float | None = None,
    vmax: float | None = None,
    ax: Axes | None = None,
) -> Axes:
    """One number per head, (n_layers, h), as a heatmap with the number written in each cell.

    For tables such as each head's alignment accuracy or the BLEU lost without it. ``fmt`` formats the
    numbers in the cells; ``vmin``/``vmax`` fix the colour scale (default: the values' own range).
    """
    values = torch.as_tensor(values).detach().float().cpu()
    if values.dim() != 2:
        raise ValueError(f"expected (n_layers, h) values, one per head, got shape {tuple(values.shape)}")
    layers, heads = values.shape
    if ax is None:
        _, ax = plt.subplots(figsize=(1.3 * heads + 2.2, 0.8 * layers + 1.4), constrained_layout=True)
    low = float(values.min()) if vmin is None else vmin
    high = float(values.max()) if vmax is None else vmax
    image = ax.imshow(values.numpy(), cmap=CMAP, vmin=low, vmax=high, aspect="auto")
    ax.set_xticks(range(heads), [f"head {h}" for h in range(heads)], fontsize=LABEL_SIZE)
    ax.set_yticks(range(layers), [f"layer {layer}" for layer in range(layers)], fontsize=LABEL_SIZE)
    for layer in range(layers):
        for h in range(heads):
            value = float(values[layer, h])
            bright = high > low and (value - low) / (high - low) > 0.6
            colour = "black" if bright else "white"  # dark text on viridis' light end
            ax.text(h, layer, fmt.format(value), ha="center", va="center", color=colour, fontsize=LABEL_SIZE)
    ax.set_title(title, fontsize=LABEL_SIZE + 1)
    ax.figure.colorbar(image, ax=ax, label=colorbar_label)
    return ax


def word_alignment_grid(
    word_attention: Tensor,
    english_words: Sequence[str],
    german_words: Sequence[str],
    gold: Sequence[tuple[int, int]],
    highlight: tuple[int, int] | None = None,
    title: str | None = None,
) -> Figure:
    """Word-level attention of each head, (h, J, I), with the gold links framed.

    English words on the y axis, German words on the x axis; a white frame on every gold link (German i,
    English j), a red one on ``highlight`` (e.g. a crossing link). Shows at a glance which heads put their
    strongest weight inside the frames.
    """
    word_attention = torch.as_tensor(word_attention).detach().float().cpu()
    if word_attention.dim() != 3:
        raise ValueError(f"expected (h, J, I) word attention, got shape {tuple(word_attention.shape)}")
    heads, J, I = word_attention.shape  # noqa: E741 (the notation's word counts)
    if len(english_words) != J or len(german_words) != I:
        raise ValueError(
            f"(h, J, I) = {tuple(word_attention.shape)} needs {J} English and {I} German words, "
            f"got {len(english_words)} and {len(german_words)}"
        )
    panel = min(2.9, 10.0 / heads)
    fig, axes = plt.subplots(
        1, heads, figsize=(panel * heads + 1.2, panel + 1.6), squeeze=False, constrained_layout=True
    )
    for h, ax in enumerate(axes[0]):
        image = ax.imshow(word_attention[h].numpy(), cmap=CMAP, vmin=0.0, vmax=1.0, aspect="auto")
        for i, j in gold:
            colour, width = ("red", 2.5) if (i, j) == highlight else ("white", 1.0)
            ax.add_patch(plt.Rectangle((i - 0.5, j - 0.5), 1, 1, fill=False, edgecolor=colour, linewidth=width))
        ax.set_xticks(range(I), list(german_words), rotation=90, fontsize=LABEL_SIZE - 1)
        ax.set_yticks(range(J), list(english_words) if h == 0 else [], fontsize=LABEL_SIZE - 1)
        ax.set_title(f"head {h}", fontsize=LABEL_SIZE)
    fig.colorbar(image, ax=axes, shrink=0.8, label="attention weight (word level)")
    if title:
        fig.suptitle(title)
    return fig


# ---------------------------------------------------------------------------------------------
# Every lesson: figures saved at a third of the bytes
# ---------------------------------------------------------------------------------------------
def compact_png(fig: Figure, colours: int = 256, dpi: float | None = None) -> bytes:
    """``fig`` as PNG bytes with at most ``colours`` colours (a palette PNG), cropped as the notebook crops
    it. Viridis and black text need no more than 256; the file is about a third of a full-colour PNG's."""

    from PIL import Image  # matplotlib's own dependency

    if not 2 <= colours <= 256:
        raise ValueError(f"colours must be in 2..256 (a PNG palette), got {colours}")
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", bbox_inches="tight", dpi=dpi or fig.dpi)
    image = Image.open(io.BytesIO(buffer.getvalue())).convert("RGB").quantize(colors=colours)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", optimize=True)
    return buffer.getvalue()


def use_compact_png(colours: int = 256) -> bool:
    """Make the notebook store every matplotlib figure as ``compact_png`` (call it after ``%matplotlib inline``).

    Returns False (and changes nothing) outside IPython. The figures look the same; a lesson's saved size
    falls by about two thirds of its images' bytes.
    """
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    if shell is None:
        return False
    compact_png(plt.figure(figsize=(0.1, 0.1)), colours)  # checks colours before anything is registered
    plt.close("all")
    import base64

    # base64 text, as matplotlib-inline's own formatter gives it
    formatter = shell.display_formatter.formatters["image/png"]
    formatter.for_type(Figure, lambda fig: base64.b64encode(compact_png(fig, colours)).decode("ascii"))
    return True
