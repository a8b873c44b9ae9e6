"""Kinds of attention layer: each kind is a class, registered by name, that a ``helpers.gpt.GPT`` stacks.

A model's layers may differ (Gemma 3: five sliding-window layers to one global; Qwen3-Next: gated delta-rule
layers between softmax ones; lesson 11: latent attention). ``GPTConfig.layer_kinds`` names one kind per layer,
and the ``GPT`` builds each layer with that kind's class, calls it the same way and never asks which kind it
is. Everything that differs between kinds lives in the kind's class:

* **its mask rule and rotary base**: ``window`` (None: every earlier token) and ``rotary_base`` (None: the
  layer places its positions itself and takes no shared (cos, sin)), both read from the config by
  ``from_config``. What a windowed layer may see is changed in one way, ``seeing`` (below): its ``window`` and
  ``keep_first``, the first tokens it keeps seeing besides the window (StreamingLLM's sinks);
* **the switches it accepts**: ``carries`` names the config switches (``SWITCHES``) the kind can carry; a
  config that turns on one of the others for a layer of that kind is refused when it is built
  (``refuse_switches``), naming the layer and the switch;
* **its cache entry**: ``check_entry`` refuses an entry this layer could not extend (what it keeps: keys and
  values, a latent, a state), ``check_keep`` refuses a cache bound that would hide tokens the layer may see,
  ``rolling_keep`` is how many tokens a rolling cache keeps for it, and ``cache_numbers_per_token`` how many
  numbers one token adds to its cache (0 for a state that does not grow).

A layer's forward is ``forward(x (N, L, E), positions (L,), past, need_weights, rotation) -> (out (N, L, E),
present[, weights (N, h, L, T)])``: ``past`` is the layer's cache entry (None at first), ``present`` the entry
after these tokens, ``rotation`` the (cos, sin) of the positions at the model's rotary width for the layer's
``rotary_base``, or None.

Adding a kind: subclass ``LayerKind``, decorate it with ``@register_kind("name")``, and name it in
``layer_kinds`` (CONTRIBUTING.md, "Adding a kind of layer"; ``tests/test_layer_kind.py`` adds one in the test
file itself).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

from torch import Tensor, nn

__all__ = [
    "KINDS",
    "SWITCHES",
    "LayerKind",
    "check_entry_placed",
    "kind_class",
    "register_kind",
    "seeing",
    "switch_value",
]

# The config switches a kind may or may not carry, each with the value that means "off".
SWITCHES: dict[str, Any] = {
    "qk_norm": False,
    "attention_sinks": False,
    "output_gate": False,
    "query_scale": None,
    "rotary_fraction": 1.0,
}

KINDS: dict[str, type[LayerKind]] = {}

# The modules that register the course's own kinds, imported on the first look-up (``import helpers`` is lazy).
_COURSE_KIND_MODULES = ("helpers.gpt", "helpers.delta_rule", "helpers.latent_attention", "helpers.topk_attention")


def switch_value(config, name: str):
    """The value of switch ``name`` in ``config``, or None when it is off."""
    value = getattr(config, name)
    return None if value == SWITCHES[name] else value


def register_kind(name: str):
    """A class decorator: register a ``LayerKind`` subclass under ``name`` (refused if the name is taken by
    another class, so that two kinds never share a name)."""
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"a kind's name must be a word such as 'local', got {name!r}")

    def register(cls: type[LayerKind]) -> type[LayerKind]:
        if not (isinstance(cls, type) and issubclass(cls, LayerKind)):
            raise TypeError(f"register_kind registers LayerKind subclasses, got {cls!r}")
        known = KINDS.get(name)
        if known is not None and known.__qualname__ != cls.__qualname__:
            raise ValueError(f"the kind {name!r} is taken by {known.__qualname__}: choose another name")
        cls.kind = name
        KINDS[name] = cls
        return cls

    return register


def kind_class(name: str) -> type[LayerKind]:
    """The class registered under ``name``; an unknown name is refused with the list of known ones."""
    if not isinstance(name, str):
        raise ValueError(f"a layer's kind is a name such as 'global' (a str), got {name!r:.80}")
    if name not in KINDS:
        for module in _COURSE_KIND_MODULES:
            importlib.import_module(module)
    if name not in KINDS:
        raise ValueError(f"unknown kind of layer {name!r}: the known kinds are {', '.join(map(repr, KINDS))}")
    return KINDS[name]


def check_entry_placed(tensor: Tensor, name: str, weight: Tensor, layer: int) -> None:
    """Refuse a cache tensor (``name``: "keys", "a state", ...) whose dtype or device is not the model's (its
    ``weight``'s): every kind's ``check_entry`` ends with this, for each tensor its entry holds."""
    if tensor.dtype != weight.dtype or tensor.device != weight.device:
        raise TypeError(
            f"cache layer {layer} holds {name} of dtype {tensor.dtype} on {tensor.device} but the model is "
            f"{weight.dtype} on {weight.device}: make a new cache with model.new_cache() after moving the model"
        )


class LayerKind(nn.Module):
    """The base of every kind of attention layer (see the module's docstring). A subclass sets ``carries`` and
    implements ``from_config``, ``forward``, ``check_entry`` and ``cache_numbers_per_token``; the defaults
    here are those of a layer that sees every earlier token and whose cache grows by one entry per token."""

    kind: str = ""  # the registered name (set by ``register_kind``)
    carries: ClassVar[frozenset[str]] = frozenset()
    takes_a_window: ClassVar[bool] = False  # whether setting ``window`` limits what the layer sees
    window: int | None = None
    keep_first: int = 0  # besides its window, the first tokens every query still sees (set by ``seeing``)
    rotary_base: float | None = None

    # -- the config ----------------------------------------------------------------------------
    @classmethod
    def refuse_switches(cls, config, layer: int) -> None:
        """Refuse a config that turns on, for layer ``layer`` of this kind, a switch the kind cannot carry."""
        for name in SWITCHES:
            value = switch_value(config, name)
            if value is not None and name not in cls.carries:
                carried = ", ".join(sorted(cls.carries)) or "none of them"
                raise ValueError(
                    f"layer {layer} is of kind {cls.kind!r}, which cannot carry {name}={value!r} (the switches it "
                    f"carries: {carried}); leave {name} off or choose another kind for that layer"
                )
        cls.check_config(config, layer)

    @classmethod
    def check_config(cls, config, layer: int) -> None:
        """Refuse what else this kind cannot be built from (a subclass adds its own rules)."""

    @classmethod
    def window_from(cls, config) -> int | None:
        """The window a layer of this kind has in a model of ``config`` (None: every earlier token)."""
        return None

    @classmethod
    def rotary_base_from(cls, config) -> float | None:
        """The rotary base of a layer of this kind in ``config`` (None: it places its positions itself)."""
        return config.rotary_base

    @classmethod
    def from_config(cls, config, layer: int) -> LayerKind:
        """Layer ``layer`` of this kind, built from the model's config."""
        raise NotImplementedError(f"the kind {cls.kind!r} must say how it is built from a config (from_config)")

    # -- the cache -----------------------------------------------------------------------------
    def rolling_keep(self) -> int | None:
        """The tokens a rolling cache keeps for this layer: its window (None: all it has seen, also when it keeps
        seeing its first tokens, which the last ``window`` would drop)."""
        return None if self.keep_first else self.window

    def check_keep(self, keep: int | None, layer: int) -> None:
        """Refuse a cache bound that would drop keys this layer may still read: a layer that sees every earlier
        token (or its first ones besides a window) needs them all (None); a windowed one the ``window - 1``
        tokens before its first new query."""
        if keep is None or (self.window is not None and not self.keep_first and keep >= self.window - 1):
            return
        if self.keep_first:
            raise ValueError(
                f"cache layer {layer} keeps only the last {keep} tokens but the layer also sees its first "
                f"{self.keep_first}: make the cache with model.new_cache() (a StreamingCache keeps both, for one-token "
                "steps after the `seeing` block)"
            )
        sees = (
            "every earlier token"
            if self.window is None
            else f"a window of {self.window} tokens (itself and {self.window - 1} before)"
        )
        raise ValueError(
            f"cache layer {layer} keeps only the last {keep} tokens but the layer (kind {self.kind!r}) sees {sees}: "
            "its logits would be wrong; make the cache with model.new_cache() or model.new_cache(rolling=True)"
        )

    def check_entry(self, entry, N: int, length: int, kept: int, weight: Tensor, layer: int) -> None:
        """Refuse cache entry ``entry`` of layer ``layer`` that this layer cannot extend for a batch of N: it
        should hold ``kept`` of the ``length`` tokens seen, in ``weight``'s dtype and on its device."""
        raise NotImplementedError(f"the kind {self.kind!r} must say what its cache entry holds (check_entry)")

    def cache_numbers_per_token(self) -> int:
        """Numbers one token adds to this layer's cache for one sequence (0: the entry does not grow)."""
        raise NotImplementedError(f"the kind {self.kind!r} must count its cache (cache_numbers_per_token)")


@contextmanager
def seeing(model, layers: Iterable[int], window: int | None, keep_first: int = 0) -> Iterator[Any]:
    """Within the ``with``, each of ``layers`` of ``model`` (a ``helpers.gpt.GPT``) sees, of the tokens up to
    its query, the last ``window`` (None: every one) and the first ``keep_first`` besides them: the one way to
    change what a layer may see (a global layer made local, StreamingLLM's window with its sinks). Only the
    mask changes: weights and rotary bases stay. Every layer is set back on leaving, also after an error.

    Refused: a layer whose kind has no window to set (a delta or top-k layer), ``keep_first`` without a
    window, and sizes that are not counts. A cache made inside with ``rolling=True`` keeps what the layers then
    see; do not use it outside."""
    attention = model.attention_layers
    layers = sorted(set(layers))
    bad = [i for i in layers if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < len(attention)]
    if bad:
        raise ValueError(f"layers must be ints in 0 .. {len(attention) - 1} (the model's layers), got {bad}")
    if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 1):
        raise ValueError(f"window must be a positive int number of tokens or None, got {window!r}")
    if isinstance(keep_first, bool) or not isinstance(keep_first, int) or keep_first < 0:
        raise ValueError(
            f"keep_first must be an int >= 0 (how many first tokens every query keeps), got {keep_first!r}"
        )
    if keep_first and window is None:
        raise ValueError(f"keep_first={keep_first} keeps first tokens besides a window: give a window too")
    windowless = [i for i in layers if not attention[i].takes_a_window]
    if windowless:
        raise ValueError(f"layers {windowless} have no window to set (kinds that do not read one)")
    before = [(attention[i].window, attention[i].keep_first) for i in layers]
    try:
        for i in layers:
            attention[i].window, attention[i].keep_first = window, keep_first
        yield model
    finally:
        for i, (old_window, old_first) in zip(layers, before, strict=True):
            attention[i].window, attention[i].keep_first = old_window, old_first
