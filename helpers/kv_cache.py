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
  refused, since its keys would be projected with other weights (the refusal names the settings in which the
  two models' configs differ, a latent layer's sizes, say);
* ``select(rows)`` keeps or reorders the batch's rows of every entry: finished sentences leave the batch, beam
  search continues each beam from its parent's row.

What the entries hold (course notation: N batch, T tokens so far, S source length, h heads, h_kv key/value
heads, d head size):

    helpers.gpt.GPT                      (keys, values), (N, h_kv, T, d) each, rotated if the model is rotary
    helpers.layers.InspectableDecoderLayer  (keys, values, memory keys, memory values): the masked
                                         self-attention's (N, h, T, d) and the cross-attention's (N, h, S, d),
                                         the latter projected from the encoder's memory once, at the first step

    helpers.latent_attention.MultiHeadLatentAttention  (latents, rotary keys), (N, T, d_c) and (N, T, d_R): a
                                         GPT layer of kind "latent" keeps one latent per token, every head's keys
                                         and values rebuilt from it
    helpers.delta_rule.DeltaRuleAttention  (state,), (N, h, d_k, d_v): a GPT layer of kind "linear" or "delta"
                                         keeps one matrix per head, the same size after any number of tokens
    helpers.topk_attention.TopKAttention  (keys, values, index keys), (N, h_kv, T, d) twice and (N, T, c): a
                                         GPT layer of kind "topk" keeps its lightning indexer's key beside them

A new kind of attention keeps what it needs in the same object and checks its own entries as ``GPT`` does;
``check_filled_together`` is the check they share (every layer filled, or none).

A rolling cache (``KVCache(..., keep=[...])``, ``GPT.new_cache(rolling=True)``) keeps, for each layer with a bound,
only the last ``keep[i]`` tokens of every entry: a sliding-window (local) layer never reads further back, so its
memory stops growing at the window, while ``length`` still counts every token seen (the next token's position).
It drops the oldest tokens and keeps the rest in order, rather than overwriting slot ``position % window`` of a
ring in place: every step replaces an entry after the whole step has run (above), so each step copies the
kept keys once either way, and keys in position order need no map from slots to positions for the mask.

What a cache costs is counted here too, once for every kind of attention (E is never needed: only what is
kept): ``layer_cache_numbers`` (the numbers one token adds to one layer's cache: 2·h·d for MHA, 2·h_kv·d for
GQA, 2·d for MQA, d_c + d_R for latent attention), ``cache_bytes_per_token`` (a whole model's, in bytes) and
``kv_cache_bytes`` (a keys-and-values cache of T tokens and N sequences), ``rolling_kv_cache_bytes`` (the
same with some layers bounded by their window), and ``recurrent_state_bytes`` (linear attention's and the delta
rule's state, h · d_k · d_v numbers per layer and sequence: no T in it).
"""

from __future__ import annotations

import dataclasses
import weakref

import torch
from torch import Tensor, nn

__all__ = [
    "CACHE_KINDS",
    "KVCache",
    "cache_bytes_per_token",
    "extend",
    "kv_cache_bytes",
    "layer_cache_numbers",
    "recurrent_state_bytes",
    "rolling_kv_cache_bytes",
]

Entry = tuple[Tensor, ...]

CACHE_KINDS = ("MHA", "GQA", "MQA", "MLA")


# ---------------------------------------------------------------------------------------------
# What a cache costs: the one count
# ---------------------------------------------------------------------------------------------
def _int_at_least(name: str, value, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        kind = "a positive int" if low == 1 else f"an int >= {low}"
        raise ValueError(f"{name} must be {kind}, got {value!r}")


def layer_cache_numbers(
    kind: str, head_dim: int = 0, num_heads: int = 0, num_kv_heads: int = 0, latent_dim: int = 0, rotary_dim: int = 0
) -> int:
    """Numbers one token adds to one layer's cache, by attention ``kind``:

    - "MHA": keys and values of every head, 2 · h · d (``num_heads``, ``head_dim``);
    - "GQA": of every key/value head, 2 · h_kv · d (``num_kv_heads``; ``num_heads``, if given, must be a multiple
      of it: each key/value head serves a whole group of g = h / h_kv query heads);
    - "MQA": of the one shared head, 2 · d;
    - "MLA": the latent and the decoupled rotary key, d_c + d_R (``latent_dim``, ``rotary_dim`` >= 0).

    The sizes a kind does not use are ignored (0 by default)."""
    if kind in ("MHA", "GQA", "MQA"):
        _int_at_least("head_dim", head_dim, 1)
    if kind == "MHA":
        _int_at_least("num_heads", num_heads, 1)
        return 2 * num_heads * head_dim
    if kind == "GQA":
        _int_at_least("num_kv_heads", num_kv_heads, 1)
        _int_at_least("num_heads", num_heads, 0)
        if num_heads and num_heads % num_kv_heads:
            raise ValueError(
                f"num_heads ({num_heads}) must be a multiple of num_kv_heads ({num_kv_heads}): each key/value head "
                "serves a whole group of g = h / h_kv query heads"
            )
        return 2 * num_kv_heads * head_dim
    if kind == "MQA":
        return 2 * head_dim
    if kind == "MLA":
        _int_at_least("latent_dim", latent_dim, 1)
        _int_at_least("rotary_dim", rotary_dim, 0)
        return latent_dim + rotary_dim
    raise ValueError(f"kind must be one of {', '.join(map(repr, CACHE_KINDS))}, got {kind!r}")


def cache_bytes_per_token(
    kind: str,
    num_layers: int,
    head_dim: int = 0,
    num_heads: int = 0,
    num_kv_heads: int = 0,
    latent_dim: int = 0,
    rotary_dim: int = 0,
    bytes_per_number: int = 2,
) -> int:
    """Bytes one token adds to the cache of a whole model (every layer): ``layer_cache_numbers`` of ``kind``
    times n_layers and ``bytes_per_number`` (2 for 16-bit numbers, as DeepSeek-V2's Table 1 counts elements)."""
    _int_at_least("num_layers", num_layers, 1)
    _int_at_least("bytes_per_number", bytes_per_number, 1)
    per_layer = layer_cache_numbers(kind, head_dim, num_heads, num_kv_heads, latent_dim, rotary_dim)
    return num_layers * per_layer * bytes_per_number


def kv_cache_bytes(
    num_layers: int, num_kv_heads: int, head_dim: int, tokens: int, bytes_per_number: int = 2, batch_size: int = 1
) -> int:
    """Size of a KV cache: 2 (keys and values) × n_layers × h_kv × d × tokens × bytes (× N).

    Every size must be a positive int; ``tokens`` may be 0 (an empty cache)."""
    for name, value in (("num_layers", num_layers), ("num_kv_heads", num_kv_heads), ("head_dim", head_dim)):
        _int_at_least(name, value, 1)
    _int_at_least("tokens", tokens, 0)
    for name, value in (("bytes_per_number", bytes_per_number), ("batch_size", batch_size)):
        _int_at_least(name, value, 1)
    per_token = cache_bytes_per_token("GQA", num_layers, head_dim, num_kv_heads=num_kv_heads, bytes_per_number=1)
    return per_token * tokens * bytes_per_number * batch_size


def recurrent_state_bytes(
    num_layers: int, num_heads: int, key_dim: int, value_dim: int, bytes_per_number: int = 2, batch_size: int = 1
) -> int:
    """Size of the state a linear-attention or delta-rule layer keeps instead of a KV cache: n_layers × h ×
    d_k × d_v × bytes (× N), one (d_k, d_v) matrix per head, whatever the number of tokens read (every size a
    positive int)."""
    sizes = {"num_layers": num_layers, "num_heads": num_heads, "key_dim": key_dim, "value_dim": value_dim}
    sizes.update(bytes_per_number=bytes_per_number, batch_size=batch_size)
    for name, value in sizes.items():
        _int_at_least(name, value, 1)
    return num_layers * num_heads * key_dim * value_dim * bytes_per_number * batch_size


# ---------------------------------------------------------------------------------------------
# The cache
# ---------------------------------------------------------------------------------------------


def extend(past: Entry | None, new: Entry) -> Entry:
    """The cached tensors with the step's new tokens after them: each pair concatenated along dim -2 (T)."""
    if past is None:
        return new
    return tuple(torch.cat((old, fresh), dim=-2) for old, fresh in zip(past, new, strict=True))


class KVCache:
    """Per layer, the projected keys and values of every token seen so far (see the module's docstring).

    ``KVCache(num_layers)`` is empty and belongs to no model until one fills it; ``model.new_cache()`` makes
    one tagged with that model. ``layers[i]`` is None or the layer's tuple of tensors (N, ·, T, ·).

    ``keep``: None (every layer keeps every token), or per layer the most tokens it keeps (None: all), so that
    ``layers[i]`` is (N, ·, min(T, keep[i]), ·): a rolling cache for sliding-window layers.
    """

    def __init__(self, num_layers: int, owner: nn.Module | None = None, keep: list[int | None] | None = None) -> None:
        if isinstance(num_layers, bool) or not isinstance(num_layers, int) or num_layers < 1:
            raise ValueError(f"num_layers must be a positive int, got {num_layers!r}")
        if keep is not None:
            keep = list(keep)
            bad = [k for k in keep if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1)]
            if len(keep) != num_layers or bad:
                raise ValueError(
                    f"keep must hold one bound per layer ({num_layers}), each a positive int number of tokens or "
                    f"None (keep all), got {keep!r:.120}"
                )
        self.layers: list[Entry | None] = [None] * num_layers
        self.keep: list[int | None] = [None] * num_layers if keep is None else keep
        self._length: int | None = None  # tokens seen, once a step that drops some has said so
        self._owner = None if owner is None else weakref.ref(owner)

    @property
    def owner(self) -> nn.Module | None:
        """The model whose projections filled this cache (None while none has)."""
        return None if self._owner is None else self._owner()

    @property
    def length(self) -> int:
        """T: how many tokens the cache has seen (the position of the next token); a rolling cache's bounded
        layers hold fewer."""
        first = self.layers[0]
        if first is None:
            return 0
        return first[0].size(-2) if self._length is None else self._length

    def check_owner(self, model: nn.Module) -> None:
        """Refuse a cache that another model filled or was made for: its keys come from other weights."""
        owner = self.owner
        if self._owner is not None and owner is not model:
            made_by = "a model that no longer exists" if owner is None else f"another {type(owner).__name__}"
            differ = [] if owner is None else _settings_that_differ(owner, model)
            # Name what the two models disagree on (a cache made for another configuration, say); with nothing
            # to name, say why equal sizes are not enough.
            why = (
                f", one with {'; '.join(differ)}"
                if differ
                else " (a cache holds one model's projected keys and values, even when another model has the same "
                "sizes)"
            )
            raise ValueError(f"this cache belongs to {made_by}{why}: make one for this model with model.new_cache()")

    def update(self, model: nn.Module, entries: list[Entry], length: int | None = None) -> None:
        """Store every layer's new entry at once, after a whole step has run, and tag the cache with ``model``.

        ``length``: the tokens seen after this step (T); needed when ``keep`` bounds a layer, since every layer
        may then hold fewer. A bounded layer keeps the last ``keep[i]`` tokens of its entry, copied, so that the
        longer tensor they were cut from is freed."""
        if len(entries) != len(self.layers):
            raise ValueError(f"expected {len(self.layers)} entries, one per layer, got {len(entries)}")
        bounded = any(k is not None for k in self.keep)
        if bounded and (isinstance(length, bool) or not isinstance(length, int) or length < 1):
            raise ValueError(f"a rolling cache needs the step's length T (a positive int), got {length!r}")
        self.check_owner(model)
        self.layers = [self._kept(entry, keep) for entry, keep in zip(entries, self.keep, strict=True)]
        self._length = length
        self._owner = weakref.ref(model)

    def _kept(self, entry: Entry, keep: int | None) -> Entry:
        """What a layer keeps of its entry after a step: its last ``keep`` tokens (a variant keeps others)."""
        return _last(entry, keep)

    def check_fits(self, layers: list) -> None:
        """Refuse bounds (``keep``) that would hide keys the model's ``layers`` may still read: each layer's kind
        says what it needs (``helpers.layer_kind.LayerKind.check_keep``). A variant of the cache whose bounds
        follow another rule (``helpers.streaming.StreamingCache``) overrides this."""
        for index, (layer, keep) in enumerate(zip(layers, self.keep, strict=True)):
            layer.check_keep(keep, index)

    def check_filled_together(self) -> bool:
        """Whether the layers hold tokens: True if every layer does, False if none does; refuse a cache in which
        only some do (a step stores every layer at once, so such a cache was edited by hand or half-copied)."""
        empty = [i for i, entry in enumerate(self.layers) if entry is None]
        if empty and len(empty) < len(self.layers):
            filled = [i for i, entry in enumerate(self.layers) if entry is not None]
            raise ValueError(
                f"cache layers {empty} are empty but layers {filled} are filled: a step fills every layer at once, "
                "so every layer holds the same tokens; make a new cache with model.new_cache()"
            )
        return not empty

    def select(self, rows: Tensor) -> None:
        """Keep (and reorder) the batch rows ``rows`` of every entry: an int index (N',) of rows in 0 .. N - 1
        (repeats allowed: beams that share a parent), or a boolean (N,), True = keep."""
        if not isinstance(rows, Tensor) or rows.dim() != 1 or rows.is_floating_point() or rows.is_complex():
            got = f"{rows.dtype} of shape {tuple(rows.shape)}" if isinstance(rows, Tensor) else type(rows).__name__
            raise TypeError(f"rows must be a 1-D tensor: int row numbers (N',) or a boolean (N,) to keep, got {got}")
        filled = next((entry for entry in self.layers if entry is not None), None)
        if filled is not None:
            N = filled[0].size(0)
            if rows.dtype == torch.bool and rows.numel() != N:
                raise ValueError(f"a boolean rows must have one entry per cached row, N = {N}, got {rows.numel()}")
            if rows.dtype != torch.bool and rows.numel() and not (int(rows.min()) >= 0 and int(rows.max()) < N):
                raise ValueError(
                    f"rows must be row numbers in 0 .. N - 1 = {N - 1} (the cache holds N = {N} rows), got values "
                    f"{int(rows.min())} .. {int(rows.max())}"
                )
        self.layers = [None if entry is None else tuple(t[rows] for t in entry) for entry in self.layers]

    def nbytes(self) -> int:
        """Bytes held by all cached tensors."""
        return sum(t.numel() * t.element_size() for entry in self.layers if entry is not None for t in entry)


def _settings_that_differ(owner: nn.Module, model: nn.Module) -> list[str]:
    """Where the config of the model a cache was made for (``owner``) differs from ``model``'s, each as "name =
    theirs, not ours", following dataclass fields and dict entries down (a GPT's ``kind_settings['latent']`` is a
    ``LatentConfig``); empty when the two are not models of one class with dataclass configs, or agree."""
    theirs, ours = getattr(owner, "config", None), getattr(model, "config", None)
    if type(owner) is not type(model) or not dataclasses.is_dataclass(theirs) or type(theirs) is not type(ours):
        return []
    return _differences(theirs, ours, "")


def _differences(theirs, ours, name: str) -> list[str]:
    """The settings under ``name`` that differ; a dataclass or a dict with the same keys is followed down, so that
    the message names the one field that differs rather than printing two whole configs."""
    if type(theirs) is type(ours) and dataclasses.is_dataclass(theirs):
        found = []
        for field in dataclasses.fields(theirs):
            inner = f"{name}.{field.name}" if name else field.name
            found += _differences(getattr(theirs, field.name), getattr(ours, field.name), inner)
        return found
    if isinstance(theirs, dict) and isinstance(ours, dict) and theirs.keys() == ours.keys():
        return [d for key in theirs for d in _differences(theirs[key], ours[key], f"{name}[{key!r}]")]
    return [] if theirs == ours else [f"{name} = {theirs!r}, not {ours!r}"]


def _last(entry: Entry, keep: int | None) -> Entry:
    """The entry's last ``keep`` tokens (dim -2), copied; the entry itself if it holds no more than that."""
    if keep is None or entry[0].size(-2) <= keep:
        return entry
    return tuple(t[..., -keep:, :].clone() for t in entry)


def rolling_kv_cache_bytes(
    windows: list[int | None],
    num_kv_heads: int,
    head_dim: int,
    tokens: int,
    bytes_per_number: int = 2,
    batch_size: int = 1,
) -> int:
    """Size of a rolling KV cache after ``tokens`` tokens: per layer 2 (keys and values) × h_kv × d × min(T, W)
    × bytes (× N), where W is that layer's window (None: a global layer, which keeps all T).

    ``windows`` holds one entry per layer (Gemma 3 270M: 512 five times, then None, three times over). With every
    entry None it is ``kv_cache_bytes``'s 2 × n_layers × h_kv × d × T × bytes × N. Every size must be a positive
    int; ``tokens`` may be 0 (an empty cache)."""
    sizes = {"num_kv_heads": num_kv_heads, "head_dim": head_dim}
    sizes.update(bytes_per_number=bytes_per_number, batch_size=batch_size)
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
        raise ValueError(f"tokens must be an int >= 0 (the tokens seen), got {tokens!r}")
    windows = list(windows) if not isinstance(windows, str | int) else None
    bad = (
        windows is None
        or not windows
        or any(w is not None and (isinstance(w, bool) or not isinstance(w, int) or w < 1) for w in windows)
    )
    if bad:
        raise ValueError("windows must list one window per layer, each a positive int number of tokens or None")
    kept = sum(tokens if w is None else min(tokens, w) for w in windows)  # tokens held, summed over the layers
    return 2 * num_kv_heads * head_dim * kept * bytes_per_number * batch_size
