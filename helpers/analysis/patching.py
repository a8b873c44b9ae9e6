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

import torch
from torch import Tensor, nn

from helpers.analysis.circuits import record_head_outputs
from helpers.gpt import GPT

__all__ = ["PathPatch", "path_patching", "path_patching_map", "query_heads_moved", "residual_patching"]

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


def _positions(positions, N: int, T: int) -> list[Tensor]:
    """Each entry an int (the same position in every prompt) or an (N,) tensor (one per prompt) -> (N,) each."""
    out = []
    for p in positions:
        p = torch.full((N,), p) if isinstance(p, int) and not isinstance(p, bool) else torch.as_tensor(p)
        if p.shape != (N,) or p.dtype not in (torch.int64, torch.int32) or p.min() < 0 or p.max() >= T:
            raise ValueError(f"a position is an int or an (N,) = ({N},) tensor of ints in 0 .. {T - 1}, got {p!r}")
        out.append(p.long())
    return out


@torch.no_grad()
def residual_patching(
    model: GPT,
    clean: Tensor,
    corrupted: Tensor,
    metric: Metric,
    positions: Sequence,
    layers: Iterable[int] | None = None,
) -> Tensor:
    """Run ``corrupted`` with the residual entering layer l (l = n_layers: the final norm) at one position taken
    from the ``clean`` run; entry [l, p] is (metric patched − metric corrupted) / (metric clean − metric
    corrupted): 1 = that residual alone carries the clean behaviour there, 0 = it carries none of it.

    ``positions``: a list whose entries are ints or (N,) tensors (one position per prompt, e.g. the S2 of each
    IOI prompt, whose place differs between prompts); ``layers`` limits the rows computed (others NaN).
    Returns (n_layers + 1, len(positions)): one forward pass per entry."""
    _check_runs(model, clean, corrupted)
    N, T = clean.shape
    spots = _positions(positions, N, T)
    sites = [*model.blocks, model.norm]  # the residual enters each block, and last the final norm
    chosen = range(len(sites)) if layers is None else [_index("layer", layer, len(sites)) for layer in layers]
    saved: list[Tensor] = []
    handles = [s.register_forward_pre_hook(lambda _, args: saved.append(args[0].clone())) for s in sites]
    try:
        clean_metric = float(metric(model(clean)))
    finally:
        for handle in handles:
            handle.remove()
    corrupted_metric = float(metric(model(corrupted)))
    result = torch.full((len(sites), len(spots)), float("nan"))
    rows = torch.arange(N)
    for layer in chosen:
        for column, where in enumerate(spots):

            def patch(_, args, layer=layer, where=where):
                x = args[0].clone()
                x[rows, where] = saved[layer][rows, where]
                return (x, *args[1:])

            handle = sites[layer].register_forward_pre_hook(patch)
            try:
                patched = float(metric(model(corrupted)))
            finally:
                handle.remove()
            result[layer, column] = (patched - corrupted_metric) / (clean_metric - corrupted_metric)
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


def _projections(model: GPT, layer: int) -> nn.Module:
    """The attention projections of one block: q_proj, k_proj, v_proj (inputs of the heads), out_proj."""
    return model.blocks[layer].attention.projections


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
    for pair in receivers:
        layer, head = pair
        _index("receiver layer", layer, c.num_layers)
        _index(f"receiver {what}", head, heads)
        if layer <= sender_layer:
            raise ValueError(
                f"a receiver must sit in a later layer than the sender ({sender_layer}), got layer {layer}"
            )
        by_layer.setdefault(layer, []).append(head)
    if not by_layer:
        raise ValueError("need at least one receiver (layer, head)")
    return by_layer


@contextmanager
def _replaced_head_outputs(model: GPT, sources: Sequence[Tensor], sender: tuple[int, int], sender_source: Tensor):
    """Every head's output (the input of each out_proj, (N, T, h·d)) replaced by ``sources[layer]`` (N, T, h, d),
    except the sender's, taken from ``sender_source`` (N, T, h, d)."""

    def make(layer: int):
        def hook(_, args):
            outputs = sources[layer].clone()  # (N, T, h, d): frozen at the clean run
            if layer == sender[0]:
                outputs[:, :, sender[1]] = sender_source[:, :, sender[1]]
            return (outputs.flatten(-2), *args[1:])

        return hook

    with ExitStack() as stack:
        for layer in range(len(model.blocks)):
            handle = _projections(model, layer).out_proj.register_forward_pre_hook(make(layer))
            stack.callback(handle.remove)
        yield


def _head_columns(head: int, d: int) -> slice:
    return slice(head * d, (head + 1) * d)


class _Received(Exception):
    """Raised once the receivers' inputs are recorded: the layers after them need not run (step 2)."""


@dataclass
class _Runs:
    """Step 1, shared by every sender: the metric and every head's output (N, T, h, d) per layer, clean and
    corrupted."""

    clean_metric: float
    corrupted_metric: float
    clean_heads: list[Tensor]
    corrupted_heads: list[Tensor]


def _record_runs(model: GPT, clean: Tensor, corrupted: Tensor, metric: Metric) -> _Runs:
    c = model.config
    projections = [_projections(model, layer).out_proj for layer in range(c.num_layers)]
    with record_head_outputs(projections, c.num_heads) as recorded:
        clean_metric = float(metric(model(clean)))
        clean_heads = list(recorded)
        corrupted_metric = float(metric(model(corrupted)))
        corrupted_heads = list(recorded)
    return _Runs(clean_metric, corrupted_metric, clean_heads, corrupted_heads)


def _received_inputs(model: GPT, clean: Tensor, runs: _Runs, sender, by_layer, kind) -> dict[int, Tensor]:
    """Step 2: the receivers' ``kind`` projections (N, T, ·) on clean prompts with every head frozen clean but the
    sender's corrupted. The forward pass stops once the last receiver layer's input is recorded."""
    received: dict[int, Tensor] = {}
    last = max(by_layer)

    def record(_, __, out, layer):
        received[layer] = out
        if layer == last:
            raise _Received

    with ExitStack() as stack:
        stack.enter_context(_replaced_head_outputs(model, runs.clean_heads, sender, runs.corrupted_heads[sender[0]]))
        for layer in by_layer:
            module = getattr(_projections(model, layer), f"{kind}_proj")
            handle = module.register_forward_hook(lambda m, a, out, layer=layer: record(m, a, out, layer))
            stack.callback(handle.remove)
        with suppress(_Received):
            model(clean)
    return received


def _patched_metric(model: GPT, clean: Tensor, metric: Metric, received, by_layer, kind) -> float:
    """Step 3: clean prompts with only the receivers' slices of their ``kind`` projections replaced."""
    d = model.config.head_dim
    with ExitStack() as stack:
        for layer, heads in by_layer.items():
            module = getattr(_projections(model, layer), f"{kind}_proj")

            def patch(_, __, out, layer=layer, heads=heads):
                out = out.clone()  # (N, T, h·d) or (N, T, h_kv·d)
                for head in heads:
                    out[..., _head_columns(head, d)] = received[layer][..., _head_columns(head, d)]
                return out

            handle = module.register_forward_hook(patch)
            stack.callback(handle.remove)
        return float(metric(model(clean)))


def _check_sender(model: GPT, sender) -> tuple[int, int]:
    c = model.config
    layer, head = sender
    return _index("sender layer", layer, c.num_layers), _index("sender query head", head, c.num_heads)


@torch.no_grad()
def path_patching(
    model: GPT,
    clean: Tensor,
    corrupted: Tensor,
    metric: Metric,
    sender: tuple[int, int],
    receivers: Iterable[tuple[int, int]],
    kind: str = "q",
) -> PathPatch:
    """Patch ``sender`` = (layer, query head)'s output from the corrupted run into the receivers' ``kind`` input
    only ("q": receivers are (layer, query head); "k" or "v": (layer, key/value head), see the module's note on
    grouped queries), and measure ``metric`` on the clean prompts.

    1. Record every head's output on clean and on corrupted prompts.
    2. Run clean prompts with every head frozen at its clean output but the sender's at its corrupted one; record
       the receivers' ``kind`` projections (their slice of q_proj, k_proj or v_proj, before rotary positions).
    3. Run clean prompts with only those slices replaced: the metric there is ``patched``.

    For many senders and the same receivers, ``path_patching_map`` runs step 1 once."""
    _check_runs(model, clean, corrupted)
    sender = _check_sender(model, sender)
    by_layer = _check_receivers(model, kind, receivers, sender[0])
    runs = _record_runs(model, clean, corrupted, metric)
    received = _received_inputs(model, clean, runs, sender, by_layer, kind)
    patched = _patched_metric(model, clean, metric, received, by_layer, kind)
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
) -> Tensor:
    """``path_patching``'s effect for many senders into the same receivers: (n_layers, h), entry [layer, head] =
    (patched − clean) / (clean − corrupted) for that sender (−1: the path carries the whole difference), NaN for
    heads not patched. ``senders`` defaults to every head in a layer before the first receiver's. Step 1 runs
    once; each sender costs one forward pass up to the receivers and one whole one."""
    _check_runs(model, clean, corrupted)
    c = model.config
    receivers = list(receivers)
    first = min((layer for layer, _ in receivers), default=0)
    if senders is None:
        senders = [(layer, head) for layer in range(first) for head in range(c.num_heads)]
    senders = [_check_sender(model, sender) for sender in senders]
    by_layer = _check_receivers(model, kind, receivers, max((layer for layer, _ in senders), default=-1))
    runs = _record_runs(model, clean, corrupted, metric)
    result = torch.full((c.num_layers, c.num_heads), float("nan"))
    for sender in senders:
        received = _received_inputs(model, clean, runs, sender, by_layer, kind)
        patched = _patched_metric(model, clean, metric, received, by_layer, kind)
        result[sender] = PathPatch(patched, runs.clean_metric, runs.corrupted_metric).effect
    return result
