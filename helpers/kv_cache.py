"""The KV cache: what a decoder's attention keeps of the tokens it has already read, one entry per layer.

Generating one token at a time, a causal decoder would otherwise project every earlier token again at every
step. Their keys and values never change (a causal mask keeps earlier tokens from seeing later ones), so each
layer projects a token once and keeps the result. One design serves every model of the course:

* an entry per layer: ``None`` before the first step, then a tuple of *projected* tensors, each with the batch
  on dim 0 and the token axis on dim -2, the first of them the layer's keys (its dim -2 is the cache's length);
* the model reads ``cache.layers[i]``, concatenates the step's new keys and values after them (``extend``),
  attends, and stores every layer's new entry at once with ``update`` only after the whole step has run, so a
  step interrupted half-way (an error, Ctrl-C) leaves the cache as it was;
* a cache is tagged with the model that fills it (``owner``): another model, even one of the same sizes, is
  refused, since its keys would be projected with other weights;
* ``select(rows)`` keeps or reorders the batch's rows of every entry: finished sentences leave the batch, beam
  search continues each beam from its parent's row.

What the entries hold (course notation: N batch, T tokens so far, S source length, h heads, h_kv key/value
heads, d head size):

    helpers.gpt.GPT                      (keys, values), (N, h_kv, T, d) each, rotated if the model is rotary
    helpers.layers.InspectableDecoderLayer  (keys, values, memory keys, memory values): the masked
                                         self-attention's (N, h, T, d) and the cross-attention's (N, h, S, d),
                                         the latter projected from the encoder's memory once, at the first step

A new kind of attention keeps what it needs in the same object, e.g. latent attention its per-token latent
(N, 1, T, r) and its decoupled rotary key (N, 1, T, d_rope), and checks its own entries as ``GPT`` does.
"""

from __future__ import annotations

import weakref

import torch
from torch import Tensor, nn

__all__ = ["KVCache", "extend"]

Entry = tuple[Tensor, ...]


def extend(past: Entry | None, new: Entry) -> Entry:
    """The cached tensors with the step's new tokens after them: each pair concatenated along dim -2 (T)."""
    if past is None:
        return new
    return tuple(torch.cat((old, fresh), dim=-2) for old, fresh in zip(past, new, strict=True))


class KVCache:
    """Per layer, the projected keys and values of every token seen so far (see the module's docstring).

    ``KVCache(num_layers)`` is empty and belongs to no model until one fills it; ``model.new_cache()`` makes
    one tagged with that model. ``layers[i]`` is None or the layer's tuple of tensors (N, ·, T, ·).
    """

    def __init__(self, num_layers: int, owner: nn.Module | None = None) -> None:
        if isinstance(num_layers, bool) or not isinstance(num_layers, int) or num_layers < 1:
            raise ValueError(f"num_layers must be a positive int, got {num_layers!r}")
        self.layers: list[Entry | None] = [None] * num_layers
        self._owner = None if owner is None else weakref.ref(owner)

    @property
    def owner(self) -> nn.Module | None:
        """The model whose projections filled this cache (None while none has)."""
        return None if self._owner is None else self._owner()

    @property
    def length(self) -> int:
        """T: how many tokens the cache holds (the position of the next token)."""
        first = self.layers[0]
        return 0 if first is None else first[0].size(-2)

    def check_owner(self, model: nn.Module) -> None:
        """Refuse a cache that another model filled or was made for: its keys come from other weights."""
        owner = self.owner
        if self._owner is not None and owner is not model:
            made_by = "a model that no longer exists" if owner is None else f"another {type(owner).__name__}"
            raise ValueError(
                f"this cache belongs to {made_by} (a cache holds one model's projected keys and values, even "
                "when another model has the same sizes): make one for this model with model.new_cache()"
            )

    def update(self, model: nn.Module, entries: list[Entry]) -> None:
        """Store every layer's new entry at once, after a whole step has run, and tag the cache with ``model``."""
        if len(entries) != len(self.layers):
            raise ValueError(f"expected {len(self.layers)} entries, one per layer, got {len(entries)}")
        self.check_owner(model)
        self.layers = list(entries)
        self._owner = weakref.ref(model)

    def select(self, rows: Tensor) -> None:
        """Keep (and reorder) the batch rows ``rows`` (a (N',) index or an (N,) boolean) of every entry."""
        self.layers = [None if entry is None else tuple(t[rows] for t in entry) for entry in self.layers]

    def nbytes(self) -> int:
        """Bytes held by all cached tensors."""
        return sum(t.numel() * t.element_size() for entry in self.layers if entry is not None for t in entry)
