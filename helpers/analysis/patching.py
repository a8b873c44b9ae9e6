"""Activation patching and path patching on a decoder (lesson 12), with plain hooks.

Two runs of one model on prompts of one shape: **clean** (the behaviour is there) and **corrupted** (one fact
changed, e.g. the IOI prompt with the repeated name replaced by a third one). Patching copies an activation from
one run into the other and measures how much of the behaviour moves with it:

* ``residual_patching`` — the residual stream entering layer l at one position, clean → corrupted: where the
  information sits, layer by layer and position by position (it moves from the names to the last token).
* ``path_patching`` — one *sender* head's output, corrupted, but only along its path into chosen *receivers'*
  queries, keys or values: every other head is frozen at its clean output, so the change reaches the receivers
  through the residual stream directly and through no other head (Wang et al., 2022). The receivers' inputs so
  obtained are then put into an otherwise clean run. A large change means the sender talks to the receivers.

**Grouped-query models** (SmolLM2: h = 9 query heads share h_kv = 3 key/value heads, g = 3). A query head has
its own slice of ``q_proj``'s output, so receivers' queries are patched per query head. A key or value head is
shared: its slice of ``k_proj`` / ``v_proj`` feeds all g query heads of its group, so patching "the keys of query
head 4" is patching key/value head 4 // g for query heads 3, 4 and 5 together. Receivers of ``kind="k"`` or
``"v"`` are therefore named by key/value head, (layer, kv_head), and the result says which query heads moved.

Metrics map logits (N, T, V) to a number (e.g. ``helpers.analysis.ioi.logit_difference``). Shapes: N prompts,
T tokens, E embedding size, h query heads, h_kv key/value heads, d head size, n_layers layers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from typing import cast

import torch
from torch import Tensor

from helpers.analysis.circuits import record_head_outputs
from helpers.attention import GroupedQueryAttention, unflatten_heads
from helpers.gpt import GPT, CausalSelfAttention
from helpers.tools.progress import ProgressLines

__all__ = ["PathPatch", "knock_out", "path_patching", "path_patching_map", "query_heads_moved", "residual_patching"]

Metric = Callable[[Tensor], Tensor]


def _check_runs(model, clean: Tensor, corrupted: Tensor) -> None:
    if not isinstance(model, GPT):
        raise TypeError(f"expected a helpers.gpt.GPT (e.g. lesson 09's SmolLM2), got {type(model).__name__}")
    if clean.shape != corrupted.shape or clean.dim() != 2:
        raise ValueError(
            f"clean and corrupted must be token ids of one shape (N, T), got {tuple(clean.shape)} and "
            f"{tuple(corrupted.shape)}"
        )


def _index(name: str, value, size: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < size:
        raise ValueError(f"{name} must be an int in 0 .. {size - 1}, got {value!r}")
    return value


def _head_pair(role: str, pair, layers: int, heads: int, head: str = "head") -> tuple[int, int]:
    """One head written (layer, head), two ints in range -> the tuple; anything else is refused saying so.
    ``role`` names it in the messages ("sender", "receiver", "kept"), ``head`` what its second number counts."""
    if isinstance(pair, str) or not isinstance(pair, Sequence) or len(pair) != 2:
        raise ValueError(f"each {role} head is one head written (layer, head), two ints such as (0, 1); got {pair!r}")
    return _index(f"{role} layer", pair[0], layers), _index(f"{role} {head}", pair[1], heads)


def _head_pairs(role: str, pairs, layers: int, heads: int, head: str = "head") -> list[tuple[int, int]]:
    """A collection of (layer, head) pairs -> the list. A string is refused: read character by character,
    ``keep="01"`` would be the pairs "0" and "1", not heads of layer 0."""
    if isinstance(pairs, str | bytes) or not isinstance(pairs, Iterable):
        raise ValueError(
            f"the {role} heads are a collection of (layer, head) pairs such as [(0, 1), (2, 3)]; got "
            f"{type(pairs).__name__} {pairs!r}"
        )
    return [_head_pair(role, pair, layers, heads, head) for pair in pairs]


def _positions(positions, N: int, T: int) -> list[Tensor]:
    """Each entry an int (the same position in every prompt) or an (N,) tensor (one per prompt) -> (N,) each."""
    out = []
    for p in positions:
        p = torch.full((N,), p) if isinstance(p, int) and not isinstance(p, bool) else torch.as_tensor(p)
        if p.shape != (N,) or p.dtype not in (torch.int64, torch.int32) or p.min() < 0 or p.max() >= T:
            raise ValueError(f"a position is an int or an (N,) = ({N},) tensor of ints in 0 .. {T - 1}, got {p!r}")
        out.append(p.long())
    return out


# Patched runs go through the model in batches of at most this many prompts (several patches side by side):
# fewer, larger matrix products, while the logits (rows × T × V floats, 49,152 words for SmolLM2) stay small.
MAX_ROWS = 64


def _record_residuals(model: GPT, ids: Tensor, metric: Metric) -> tuple[float, list[Tensor]]:
    """One run: the metric, and the residual entering each block and the final norm (n_layers + 1 of (N, T, E))."""
    saved: list[Tensor] = []
    handles = [s.register_forward_pre_hook(lambda _, args: saved.append(args[0])) for s in [*model.blocks, model.norm]]
    try:
        value = float(metric(model(ids)))
    finally:
        for handle in handles:
            handle.remove()
    return value, saved


def _groups(items: list, N: int) -> list[list]:
    """``items`` cut into groups whose patched copies (N prompts each) fit in one batch of MAX_ROWS."""
    size = max(1, MAX_ROWS // N)
    return [items[i : i + size] for i in range(0, len(items), size)]


@torch.no_grad()
def residual_patching(
    model: GPT,
    clean: Tensor,
    corrupted: Tensor,
    metric: Metric,
    positions: Sequence,
    layers: Iterable[int] | None = None,
    progress: str | None = None,
) -> Tensor:
    """Run ``corrupted`` with the residual entering layer l (l = n_layers: the final norm) at one position taken
    from the ``clean`` run; entry [l, p] is (metric patched − metric corrupted) / (metric clean − metric
    corrupted): 1 = that residual alone carries the clean behaviour there, 0 = it carries none of it.

    ``positions``: a list whose entries are ints or (N,) tensors (one position per prompt, e.g. the S2 of each
    IOI prompt, whose place differs between prompts); ``layers`` limits the rows computed (others NaN).
    Returns (n_layers + 1, len(positions)).

    A patched run starts at layer l from the corrupted run's residual (``GPT.run_from``): the layers before l
    would compute exactly what they computed in the corrupted run. The positions of one layer run side by side in
    one batch. ``progress``: a label to print a line under at every tenth of the layers; None: silent."""
    _check_runs(model, clean, corrupted)
    N, T = clean.shape
    spots = _positions(positions, N, T)
    n_sites = len(model.blocks) + 1  # the residual enters each block, and last the final norm
    chosen = range(n_sites) if layers is None else [_index("layer", layer, n_sites) for layer in layers]
    clean_metric, clean_residuals = _record_residuals(model, clean, metric)
    corrupted_metric, corrupted_residuals = _record_residuals(model, corrupted, metric)
    result = torch.full((n_sites, len(spots)), float("nan"))
    rows = torch.arange(N)
    lines = ProgressLines(len(chosen), progress, "layers") if progress is not None and chosen else None
    for done, layer in enumerate(chosen, start=1):
        for group in _groups(list(enumerate(spots)), N):
            x = corrupted_residuals[layer].repeat(len(group), 1, 1)  # (len(group)·N, T, E): one copy per position
            for copy, (_, where) in enumerate(group):
                x[copy * N + rows, where] = clean_residuals[layer][rows, where]
            logits = model.run_from(x, layer)
            for copy, (column, _) in enumerate(group):
                patched = float(metric(logits[copy * N : (copy + 1) * N]))
                result[layer, column] = (patched - corrupted_metric) / (clean_metric - corrupted_metric)
        if lines is not None:
            lines.update(done)
    return result


@dataclass
class PathPatch:
    """One path-patching result: the metric on clean prompts, with the receivers' inputs made as if the sender
    had seen the corrupted prompt (``patched``), the clean and corrupted metrics, and ``effect`` = (patched −
    clean) / (clean − corrupted): −1 = this one path carries the whole clean − corrupted difference."""

    patched: float
    clean: float
    corrupted: float

    @property
    def effect(self) -> float:
        return (self.patched - self.clean) / (self.clean - self.corrupted)


def _projections(model: GPT, layer: int) -> GroupedQueryAttention:
    """The attention projections of one block: q_proj, k_proj, v_proj (inputs of the heads), out_proj."""
    return cast(CausalSelfAttention, model.blocks[layer].attention).projections  # what GPT's __init__ put there


def query_heads_moved(model: GPT, kind: str, receivers: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """The (layer, query head) pairs whose attention a patch of ``receivers`` changes: the receivers themselves for
    queries; for keys and values every query head that reads key/value head j, g·j .. g·j + g − 1."""
    if kind == "q":
        return sorted(set(receivers))
    g = model.config.num_heads // model.config.num_kv_heads
    return sorted({(layer, g * j + i) for layer, j in receivers for i in range(g)})


def _check_receivers(model: GPT, kind: str, receivers, sender_layer: int) -> dict[int, list[int]]:
    if kind not in ("q", "k", "v"):
        raise ValueError(f"kind must be 'q', 'k' or 'v' (the receivers' queries, keys or values), got {kind!r}")
    c = model.config
    heads = c.num_heads if kind == "q" else c.num_kv_heads
    what = "query head" if kind == "q" else "key/value head (keys and values are shared by g query heads)"
    by_layer: dict[int, list[int]] = {}
    for layer, head in _head_pairs("receiver", receivers, c.num_layers, heads, what):
        if layer <= sender_layer:
            raise ValueError(
                f"a receiver must sit in a later layer than the sender ({sender_layer}), got layer {layer}"
            )
        by_layer.setdefault(layer, []).append(head)
    if not by_layer:
        raise ValueError("need at least one receiver (layer, head)")
    return by_layer


def _head_columns(head: int, d: int) -> slice:
    return slice(head * d, (head + 1) * d)


class _Received(Exception):
    """Raised once the receivers' inputs are recorded: the layers after them need not run (step 2)."""


@dataclass
class _Runs:
    """Step 1, shared by every sender: the metric, every head's output (N, T, h, d) per layer and the residual
    entering each block (N, T, E), clean and corrupted."""

    clean_metric: float
    corrupted_metric: float
    clean_heads: list[Tensor]
    corrupted_heads: list[Tensor]
    clean_residuals: list[Tensor]


def _record_runs(model: GPT, clean: Tensor, corrupted: Tensor, metric: Metric) -> _Runs:
    c = model.config
    projections = [_projections(model, layer).out_proj for layer in range(c.num_layers)]
    with record_head_outputs(projections, c.num_heads) as recorded:
        clean_metric, clean_residuals = _record_residuals(model, clean, metric)
        clean_heads = list(recorded)
        corrupted_metric = float(metric(model(corrupted)))
        corrupted_heads = list(recorded)
    return _Runs(clean_metric, corrupted_metric, clean_heads, corrupted_heads, clean_residuals)


@contextmanager
def _frozen_heads(model: GPT, runs: _Runs, copies: Sequence[Sequence[tuple[int, int]]]):
    """K = len(copies) copies of the clean prompts side by side, (K·N, ...): every head's output (the input of
    out_proj) is the clean run's, except that copy k's senders, the (layer, head) pairs ``copies[k]``, have the
    corrupted run's. Hooks sit in every layer from the first sender's on."""
    K, N = len(copies), runs.clean_heads[0].size(0)
    first = min(layer for senders in copies for layer, _ in senders)

    def make(layer: int):
        outputs = runs.clean_heads[layer].repeat(K, 1, 1, 1)  # (K·N, T, h, d): frozen at the clean run
        for copy, senders in enumerate(copies):
            for head in (head for where, head in senders if where == layer):
                outputs[copy * N : (copy + 1) * N, :, head] = runs.corrupted_heads[layer][:, :, head]
        frozen = outputs.flatten(-2)
        return lambda _, args: (frozen, *args[1:])

    with ExitStack() as stack:
        for layer in range(first, len(model.blocks)):
            handle = _projections(model, layer).out_proj.register_forward_pre_hook(make(layer))
            stack.callback(handle.remove)
        yield


def _received_inputs(model: GPT, runs: _Runs, copies, by_layer, kind) -> dict[int, Tensor]:
    """Step 2, for K groups of senders side by side: the receivers' ``kind`` projections (K·N, T, ·) with every
    head frozen clean but copy k's senders corrupted. The run starts at the first sender's layer from the clean
    residual (the layers before it compute exactly the clean run) and stops once the last receiver layer's input
    is recorded."""
    received: dict[int, Tensor] = {}
    last = max(by_layer)
    first = min(layer for senders in copies for layer, _ in senders)

    def record(out: Tensor, layer: int) -> None:
        received[layer] = out
        if layer == last:
            raise _Received

    x = runs.clean_residuals[first].repeat(len(copies), 1, 1)  # (K·N, T, E)
    with ExitStack() as stack:
        stack.enter_context(_frozen_heads(model, runs, copies))
        for layer in by_layer:
            module = getattr(_projections(model, layer), f"{kind}_proj")
            handle = module.register_forward_hook(lambda _, __, out, layer=layer: record(out, layer))
            stack.callback(handle.remove)
        with suppress(_Received):
            model.run_from(x, first)
    return received


def _patched_metrics(model: GPT, runs: _Runs, metric: Metric, received, by_layer, kind) -> list[float]:
    """Step 3: K copies of the clean prompts with only the receivers' slices of their ``kind`` projections
    replaced by copy k's received ones; the metric of each copy. The run starts at the first receiver layer."""
    d, N = model.config.head_dim, runs.clean_heads[0].size(0)
    K = next(iter(received.values())).size(0) // N
    first = min(by_layer)
    with ExitStack() as stack:
        for layer, heads in by_layer.items():
            module = getattr(_projections(model, layer), f"{kind}_proj")

            def patch(_, __, out, layer=layer, heads=heads):
                out = out.clone()  # (K·N, T, h·d) or (K·N, T, h_kv·d)
                for head in heads:
                    out[..., _head_columns(head, d)] = received[layer][..., _head_columns(head, d)]
                return out

            handle = module.register_forward_hook(patch)
            stack.callback(handle.remove)
        logits = model.run_from(runs.clean_residuals[first].repeat(K, 1, 1), first)
    return [float(metric(logits[copy * N : (copy + 1) * N])) for copy in range(K)]


def _check_sender(model: GPT, sender) -> tuple[int, int]:
    return _head_pair("sender", sender, model.config.num_layers, model.config.num_heads, "query head")


def _check_senders(model: GPT, sender) -> list[tuple[int, int]]:
    """One (layer, head) pair, or a list of them patched together -> the list. A tuple of ints is one head, so
    (0, 1, 2) is refused as a head of three numbers, not read as three senders."""
    is_head = isinstance(sender, tuple) and all(isinstance(x, int) for x in sender)
    if is_head:
        senders = [_check_sender(model, sender)]
    else:
        senders = _head_pairs("sender", sender, model.config.num_layers, model.config.num_heads, "query head")
    if not senders:
        raise ValueError("need at least one sender (layer, head)")
    return senders


@torch.no_grad()
def path_patching(
    model: GPT,
    clean: Tensor,
    corrupted: Tensor,
    metric: Metric,
    sender: tuple[int, int] | Sequence[tuple[int, int]],
    receivers: Iterable[tuple[int, int]],
    kind: str = "q",
) -> PathPatch:
    """Patch ``sender`` = (layer, query head)'s output from the corrupted run into the receivers' ``kind`` input
    only ("q": receivers are (layer, query head); "k" or "v": (layer, key/value head), see the module's note on
    grouped queries), and measure ``metric`` on the clean prompts. ``sender`` may be a list of (layer, head)
    pairs, patched together (a class of heads whose members each carry a part: one at a time, each moves little).

    1. Record every head's output on clean and on corrupted prompts.
    2. Run clean prompts with every head frozen at its clean output but the sender's at its corrupted one; record
       the receivers' ``kind`` projections (their slice of q_proj, k_proj or v_proj, before rotary positions).
    3. Run clean prompts with only those slices replaced: the metric there is ``patched``.

    For many senders and the same receivers, ``path_patching_map`` runs step 1 once."""
    _check_runs(model, clean, corrupted)
    senders = _check_senders(model, sender)
    by_layer = _check_receivers(model, kind, receivers, max(layer for layer, _ in senders))
    runs = _record_runs(model, clean, corrupted, metric)
    received = _received_inputs(model, runs, [senders], by_layer, kind)
    (patched,) = _patched_metrics(model, runs, metric, received, by_layer, kind)
    return PathPatch(patched, runs.clean_metric, runs.corrupted_metric)


@torch.no_grad()
def path_patching_map(
    model: GPT,
    clean: Tensor,
    corrupted: Tensor,
    metric: Metric,
    receivers: Iterable[tuple[int, int]],
    kind: str = "q",
    senders: Iterable[tuple[int, int]] | None = None,
    progress: str | None = None,
) -> Tensor:
    """``path_patching``'s effect for many senders into the same receivers: (n_layers, h), entry [layer, head] =
    (patched − clean) / (clean − corrupted) for that sender (−1: the path carries the whole difference), NaN for
    heads not patched. ``senders`` defaults to every head in a layer before the first receiver's. Step 1 runs
    once; then the senders of one layer run side by side, from their layer up to the receivers (step 2) and from
    the first receiver layer to the end (step 3): the layers before compute exactly the clean run. ``progress``: a
    label to print a line under at every tenth of the senders' layers; None: silent."""
    _check_runs(model, clean, corrupted)
    c = model.config
    receivers = _head_pairs("receiver", receivers, c.num_layers, c.num_heads)  # heads by kind: _check_receivers
    first = min((layer for layer, _ in receivers), default=0)
    if senders is None:
        senders = [(layer, head) for layer in range(first) for head in range(c.num_heads)]
    senders = _head_pairs("sender", senders, c.num_layers, c.num_heads, "query head")
    by_layer = _check_receivers(model, kind, receivers, max((layer for layer, _ in senders), default=-1))
    runs = _record_runs(model, clean, corrupted, metric)
    result = torch.full((c.num_layers, c.num_heads), float("nan"))
    sender_layers = sorted({layer for layer, _ in senders})
    lines = ProgressLines(len(sender_layers), progress, "layers") if progress is not None and sender_layers else None
    for done, layer in enumerate(sender_layers, start=1):
        for heads in _groups(sorted({head for where, head in senders if where == layer}), clean.size(0)):
            received = _received_inputs(model, runs, [[(layer, head)] for head in heads], by_layer, kind)
            patched = _patched_metrics(model, runs, metric, received, by_layer, kind)
            for head, value in zip(heads, patched, strict=True):
                result[layer, head] = PathPatch(value, runs.clean_metric, runs.corrupted_metric).effect
        if lines is not None:
            lines.update(done)
    return result


@torch.no_grad()
def knock_out(model: GPT, ids: Tensor, reference: Tensor, metric: Metric, keep: Iterable[tuple[int, int]]) -> float:
    """``metric`` on ``ids`` (N, T) with every head *not* in ``keep`` mean-ablated: its output replaced, at each
    position, by its mean over the ``reference`` prompts (N_ref, T) (Wang et al.'s knock-out of everything outside
    a circuit: with the corrupted "ABC" prompts as reference, a removed head still writes what it writes on
    average, but nothing about which name repeats). The MLPs run as usual. Returns the metric, a number."""
    if not isinstance(model, GPT):
        raise TypeError(f"expected a helpers.gpt.GPT (e.g. lesson 09's SmolLM2), got {type(model).__name__}")
    if ids.dim() != 2 or reference.dim() != 2 or ids.size(1) != reference.size(1):
        raise ValueError(
            f"ids (N, T) and reference (N_ref, T) must be token ids of one length T, got {tuple(ids.shape)} and "
            f"{tuple(reference.shape)}"
        )
    c = model.config
    kept = set(_head_pairs("kept", keep, c.num_layers, c.num_heads))
    projections = [_projections(model, layer).out_proj for layer in range(c.num_layers)]
    with record_head_outputs(projections, c.num_heads) as recorded:
        model(reference)
        means = [outputs.mean(dim=0) for outputs in recorded]  # per layer (T, h, d): each head's mean per position

    def make(layer: int):
        removed = [head for head in range(c.num_heads) if (layer, head) not in kept]

        def hook(_, args):
            outputs = unflatten_heads(args[0], c.num_heads).clone()  # (N, T, h, d)
            outputs[:, :, removed] = means[layer][:, removed]
            return (outputs.flatten(-2), *args[1:])

        return hook

    with ExitStack() as stack:
        for layer, projection in enumerate(projections):
            stack.callback(projection.register_forward_pre_hook(make(layer)).remove)
        return float(metric(model(ids)))
