"""StreamingLLM (Xiao et al. 2023) on the course's ``GPT``: a window of recent tokens plus the first ``sinks`` ones.

A model trained with full causal attention parks much of its heads' weight on the first token (lesson 09). Cut
to a window, its later queries lose that token and their loss climbs; keep the first few tokens besides the
window ("attention sinks"; here ``sinks`` counts those kept tokens, as lesson 14 teaches, and is not gpt-oss's
learned ``sinks`` logits) and most of the loss comes back. Three pieces, each on the course's one core, mask
and cache:

* ``streaming_attention(model, window, sinks)``: within the ``with``, every layer attends as
  ``helpers.masks.streaming_mask`` says (each layer's window and first tokens kept, set by
  ``helpers.layer_kind.seeing``): one prefill scores a whole text as a streaming model would;
* ``nll_by_position(model, ids, window, sinks)``: the next-token loss at every position from one such prefill;
* ``StreamingCache`` and ``streaming_logits``: generation that keeps, per layer, the keys and values of the first
  ``sinks`` tokens and of the last ``window - 1`` (the new token makes the window), so its memory stops growing;
  its logits equal the masked prefill's (tested).

Positions: every token keeps its **original position** (a rotary model rotates each key once, by its position
in the text, before caching it), as the masked prefill does. The paper instead renumbers the positions within
the cache (sinks at 0 .. k - 1, the window after them); that changes what a query sees and is not done here.

Shapes: N batch, T tokens, V vocabulary.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import Tensor

from helpers.attention import AttentionCore
from helpers.gpt import GPT
from helpers.kv_cache import Entry, KVCache
from helpers.layer_kind import seeing

__all__ = ["StreamingCache", "nll_by_position", "streaming_attention", "streaming_logits"]


def _check_sizes(window: int, sinks: int) -> None:
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ValueError(f"window must be a positive int number of tokens, got {window!r}")
    if isinstance(sinks, bool) or not isinstance(sinks, int) or sinks < 0:
        raise ValueError(f"sinks must be an int >= 0 (how many first tokens every query keeps), got {sinks!r}")


def _global_cores(model: GPT) -> list[AttentionCore]:
    """The model's attention layers, refused unless each is full causal softmax attention: a layer with its own
    window would block the sinks again, a delta-rule layer has no scores to mask."""
    if not isinstance(model, GPT):
        raise TypeError(f"streaming attention needs a helpers.gpt.GPT, got {type(model).__name__}")
    cores = [block.attention for block in model.blocks]
    odd = [i for i, core in enumerate(cores) if not isinstance(core, AttentionCore)]
    windowed = [i for i, core in enumerate(cores) if getattr(core, "window", None) is not None]
    if odd or windowed:
        raise ValueError(
            f"streaming attention needs every layer full causal softmax attention; layers {odd} are not softmax "
            f"attention and layers {windowed} have a window of their own"
        )
    return [core for core in cores if isinstance(core, AttentionCore)]


@contextmanager
def streaming_attention(model: GPT, window: int, sinks: int) -> Iterator[GPT]:
    """Within the ``with``, query i of every layer reads keys j <= i with j > i - ``window`` or j < ``sinks``.

    For a run without a cache or with a full one (the keys at positions 0 .. T - 1); a rolling cache is refused
    at the first step. Each layer's ``window`` and ``keep_first`` are set (``helpers.layer_kind.seeing``), so the
    layers mask their scores themselves, and are restored on leaving, also after an error."""
    _check_sizes(window, sinks)
    _global_cores(model)
    with seeing(model, range(len(model.blocks)), window, keep_first=sinks):  # the one way a layer's sight changes
        yield model


@torch.no_grad()
def nll_by_position(model: GPT, ids: Tensor, window: int | None = None, sinks: int = 0) -> Tensor:
    """ids (N, T) -> (N, T - 1): the negative log-likelihood of token t + 1 given tokens 0 .. t, from one
    prefill. ``window`` None: full causal attention; else every layer attends within ``window`` tokens plus the
    first ``sinks`` (``streaming_attention``)."""
    if not isinstance(ids, Tensor) or ids.dim() != 2 or ids.size(1) < 2:
        shape = tuple(ids.shape) if isinstance(ids, Tensor) else type(ids).__name__
        raise ValueError(f"ids must be (N, T) token ids with T >= 2, got {shape}")
    if window is None:
        if sinks:
            raise ValueError(
                f"sinks are kept besides a window: with window=None (full causal) pass sinks=0, got {sinks}"
            )
        logits = model(ids)
    else:
        with streaming_attention(model, window, sinks):
            logits = model(ids)
    return F.cross_entropy(logits[:, :-1].transpose(1, 2).float(), ids[:, 1:], reduction="none")  # (N, T - 1)


class StreamingCache(KVCache):
    """A ``KVCache`` that keeps, per layer, the first ``sinks`` tokens and the last ``window - 1``: with the next
    token that makes StreamingLLM's window, so its memory stops at sinks + window - 1 tokens per layer.

    For a model whose layers are all full causal (``streaming_logits`` checks): fed one token a step, each
    query then reads exactly the keys ``helpers.masks.streaming_mask`` allows. Keys keep their original
    positions (rotated once, before caching)."""

    def __init__(self, model: GPT, window: int, sinks: int) -> None:
        _check_sizes(window, sinks)
        if sinks + window - 1 < 1:
            raise ValueError(f"a streaming cache must keep a token: window ({window}) + sinks ({sinks}) - 1 >= 1")
        self.window, self.sinks = window, sinks
        super().__init__(len(model.blocks), owner=model, keep=[sinks + window - 1] * len(model.blocks))

    def check_fits(self, layers: list) -> None:
        """Its bound is StreamingLLM's, on purpose: every layer must see every earlier token (no window of its
        own), and the cache, not the layer, then decides what one-token steps read."""
        sight = (self.window, self.sinks)  # inside streaming_attention the layers see what the cache keeps
        windowed = [
            i
            for i, layer in enumerate(layers)
            if getattr(layer, "window", None) is not None and (layer.window, layer.keep_first) != sight
        ]
        if windowed:
            raise ValueError(
                f"a streaming cache serves layers without a window of their own; layers {windowed} have one"
            )

    def _kept(self, entry: Entry, keep: int | None) -> Entry:
        """The first ``sinks`` tokens and the last ``window - 1`` of an entry (dim -2), copied."""
        length = entry[0].size(-2)
        if keep is None or length <= keep:
            return entry
        recent = length - (self.window - 1)  # where the last window - 1 tokens start
        return tuple(torch.cat((t[..., : self.sinks, :], t[..., recent:, :]), dim=-2) for t in entry)


@torch.no_grad()
def streaming_logits(model: GPT, ids: Tensor, window: int, sinks: int, prefill: int = 1) -> Tensor:
    """ids (N, T) -> logits (N, T, V) from a ``StreamingCache``: the first ``prefill`` tokens in one step under
    ``streaming_attention``, then one token a step, each step reading only the sinks and the window kept."""
    _global_cores(model)
    if not isinstance(ids, Tensor) or ids.dim() != 2:
        shape = tuple(ids.shape) if isinstance(ids, Tensor) else type(ids).__name__
        raise ValueError(f"ids must be (N, T) token ids, got {shape}")
    if isinstance(prefill, bool) or not isinstance(prefill, int) or not 1 <= prefill <= ids.size(1):
        raise ValueError(f"prefill must be an int in 1 .. T = {ids.size(1)}, got {prefill!r}")
    cache = StreamingCache(model, window, sinks)
    with streaming_attention(model, window, sinks):
        logits = [model(ids[:, :prefill], cache=cache)]  # the cache is still empty: all keys since 0
    for t in range(prefill, ids.size(1)):
        logits.append(model(ids[:, t : t + 1], cache=cache))  # (N, 1, V)
    return torch.cat(logits, dim=1)
