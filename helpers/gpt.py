"""A decoder-only (GPT-style) causal language model with a KV cache, grouped-query attention, optional
sliding windows, three kinds of positions (rotary, sinusoidal, none), and the Llama-style choices (RMSNorm, a
SwiGLU feed-forward, an output layer tied to the embedding) that a real model such as SmolLM2 needs.

Shapes, in the course notation: N batch, L new tokens in this call, T tokens so far (the cache's length plus
L), E embedding size, h query heads, h_kv key/value heads (h a multiple of h_kv), g = h / h_kv query heads per
key/value head, d = E / h head size, F feed-forward width, n_layers blocks, V vocabulary.

Generation writes one token at a time. Without a cache every step runs the whole sequence again; with the KV
cache every layer keeps the keys and values of the tokens it has seen, (N, h_kv, T, d) each, and a step runs only
the newest token: its query attends over the cached keys plus its own. The outputs are the same (tested);
the work per token no longer grows with the length.

A model's layers may differ (Gemma 3): ``layer_kinds`` makes each layer "local" (a sliding window, with its own
rotary base) or "global" (full causal attention), and the Gemma choices (QK-norm, a norm after each block as well
as before it, the embedding scaled by sqrt(E), a GELU-gated feed-forward, a head size d other than E / h, a query
scale of its own) are switches of the same config. With ``new_cache(rolling=True)`` each local layer's cache keeps
only its window of keys and values, so its memory stops growing at the window. A layer may also be "linear"
(linear attention) or "delta" (the gated delta rule, ``helpers.delta_rule``): no softmax, and its cache is one
(d, d) state per head that does not grow with T.

Each kind of layer is a class registered by name (``helpers.layer_kind``): "global" is ``CausalSelfAttention``,
"local" ``LocalAttention``, "linear" and "delta" live in ``helpers.delta_rule``, "latent" in
``helpers.latent_attention``, "topk" (the global layer's front end, attending over the k keys an indexer chose)
in ``helpers.topk_attention``. The kind owns its window, rotary base, cache entry and the switches it carries;
``GPT`` builds each layer by its kind's name and never asks a layer's class, so a new kind needs no edit here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from helpers.attention import AttentionCore, GroupedQueryAttention, merge_heads, split_heads
from helpers.embeddings import PositionalEncoding
from helpers.kv_cache import KVCache, extend, kv_cache_bytes
from helpers.layer_kind import KINDS, SWITCHES, LayerKind, check_entry_placed, kind_class, register_kind
from helpers.masks import causal_mask_at, sdpa_mask, streaming_mask_at
from helpers.norms import RMSNorm
from helpers.rotary import rotary_cos_sin, rotate_first
from helpers.swiglu import GeGLU, SwiGLU
from helpers.tools.progress import ProgressLines
from helpers.tools.renames import accepting_old_names

__all__ = ["GPT", "GPTConfig", "KVCache", "generate", "kv_cache_bytes", "train_gpt"]

POSITIONS = ("rotary", "sinusoidal", "none")
NORMS = ("layer", "rms")
FEED_FORWARDS = ("gelu", "swiglu", "geglu")
# The course's kinds (helpers.layer_kind.KINDS: all, those registered later too).
LAYER_KINDS = ("local", "global", "linear", "delta", "latent", "topk")


def _positive_int(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")


def _is_kind(name: str) -> bool:
    try:
        kind_class(name)
    except ValueError:
        return False
    return True


@accepting_old_names({"head_size": "head_dim"})  # code written before the one name for d
@dataclass
class GPTConfig:
    """The model's sizes and choices. ``num_kv_heads`` (h_kv) < ``num_heads`` (h) is grouped-query attention
    (1: multi-query); ``window`` limits each token's attention to itself and the ``window - 1`` tokens before it.

    ``norm`` "layer" (LayerNorm) or "rms" (RMSNorm, eps ``norm_eps``); ``feed_forward`` "gelu" (two layers with
    biases), "swiglu" or "geglu" (gated by GELU(tanh), Gemma's); ``rotary_base`` the base of the rotary
    frequencies; ``tie_embeddings`` makes the output layer reuse the token embedding's matrix (V, E). The defaults
    are the small GPT of lesson 07.

    Layers that differ (each default keeps a model whose layers are alike, as above):

    * ``layer_kinds``: None (every layer as ``window`` says), or one "local" or "global" per layer: a local layer
      attends within ``window`` tokens and rotates by ``local_rotary_base`` (``rotary_base`` if None), a global
      layer attends to every earlier token and rotates by ``rotary_base``; "linear" or "delta" makes a layer
      linear attention or the gated delta rule (``helpers.delta_rule.DeltaRuleAttention``: h heads of d, its
      cache a state (N, h, d, d)), "latent" lesson 11's latent attention; any kind registered with
      ``helpers.layer_kind.register_kind`` is accepted (``kind_settings``: a dict from a kind's name to the
      settings its layers read, such as "latent": a ``LatentConfig``). A switch below that a layer's kind cannot
      carry (a delta layer's ``qk_norm``, say) is refused here, naming the layer and the switch;
    * ``head_dim``: d, each head's size; None (the default) makes it E / h, and the config keeps the number it
      resolved, as ``transformers``' configs do. Set it when d is not E / h (Gemma 3 270M: h·d = 4 · 256 = 1024 >
      E = 640). Its old name ``head_size`` is still accepted, with a ``DeprecationWarning``;
    * ``qk_norm``: an RMSNorm over each head's d features of the queries and the keys, before the rotation;
    * ``post_norms``: a norm on each block's output as well, before it joins the residual stream;
    * ``query_scale``: the factor of the scores (None: 1 / sqrt(d));
    * ``embed_scale``: the token vectors multiplied by sqrt(E).

    Attention that may read nothing (lesson 14; each default leaves the layers as above):

    * ``attention_sinks``: gpt-oss's sink logits, a learned ``sinks`` (h,) per layer: each head's softmax runs over
      its scores and one extra logit whose weight is dropped (``helpers.attention.masked_softmax``);
    * ``output_gate``: Qwen3-Next's gated attention, sigmoid(x W_g) times the heads' outputs (N, L, h·d), one gate
      per head and feature computed from the attention's input x, before the output projection;
    * ``rotary_fraction``: the share of each head's d features that rotate (Qwen3-Next's partial rotary factor):
      the first r = d · fraction (even), the others pass unrotated.
    """

    vocab_size: int
    embed_dim: int = 64
    num_heads: int = 4
    num_kv_heads: int = 4
    num_layers: int = 2
    ff_dim: int = 256
    max_len: int = 512  # longest sequence with sinusoidal positions (rotary and none have no limit)
    positions: str = "rotary"
    window: int | None = None
    norm: str = "layer"
    norm_eps: float = 1e-5
    feed_forward: str = "gelu"
    rotary_base: float = 10000.0
    tie_embeddings: bool = False
    layer_kinds: tuple[str, ...] | None = None
    local_rotary_base: float | None = None
    head_dim: int = None  # type: ignore[assignment]  # None is resolved to E / h at once, so every reader gets an int
    qk_norm: bool = False
    post_norms: bool = False
    query_scale: float | None = None
    embed_scale: bool = False
    attention_sinks: bool = False
    output_gate: bool = False
    rotary_fraction: float = 1.0
    kind_settings: dict[str, object] | None = None

    def __post_init__(self) -> None:
        for name in ("vocab_size", "embed_dim", "num_heads", "num_kv_heads", "num_layers", "ff_dim", "max_len"):
            _positive_int(name, getattr(self, name))
        if self.head_dim is not None:
            _positive_int("head_dim", self.head_dim)
        elif self.embed_dim % self.num_heads:
            raise ValueError(
                f"embed_dim ({self.embed_dim}) must be a multiple of num_heads ({self.num_heads}), or set head_dim"
            )
        else:
            self.head_dim = self.embed_dim // self.num_heads
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads ({self.num_kv_heads}): each "
                f"key/value head serves a whole group of g query heads"
            )
        if self.positions not in POSITIONS:
            raise ValueError(f"positions must be one of {POSITIONS}, got {self.positions!r}")
        if self.positions == "rotary" and self.head_dim % 2:
            raise ValueError(f"rotary positions rotate pairs: the head size d must be even, got {self.head_dim}")
        if self.window is not None and (isinstance(self.window, bool) or not isinstance(self.window, int)):
            raise ValueError(f"window must be a positive int number of tokens or None, got {self.window!r}")
        if self.window is not None and self.window < 1:
            raise ValueError(f"window must be a positive number of tokens or None, got {self.window}")
        if self.norm not in NORMS:
            raise ValueError(f"norm must be one of {NORMS}, got {self.norm!r}")
        if self.feed_forward not in FEED_FORWARDS:
            raise ValueError(f"feed_forward must be one of {FEED_FORWARDS}, got {self.feed_forward!r}")
        if not (isinstance(self.norm_eps, int | float) and self.norm_eps > 0):
            raise ValueError(f"norm_eps must be a small positive number, got {self.norm_eps!r}")
        if not (isinstance(self.rotary_base, int | float) and math.isfinite(self.rotary_base) and self.rotary_base > 0):
            raise ValueError(f"rotary_base must be a finite positive number, got {self.rotary_base!r}")
        self._check_layer_choices()

    def _check_layer_choices(self) -> None:
        if self.layer_kinds is not None:
            kinds = self.layer_kinds
            if isinstance(kinds, str) or not isinstance(kinds, tuple | list) or len(kinds) != self.num_layers:
                raise ValueError(
                    f"layer_kinds must be a tuple of {self.num_layers} kinds, one per layer, each one of "
                    f"{LAYER_KINDS}; got {kinds!r:.120}"
                )
            wrong = [(i, k) for i, k in enumerate(kinds) if not isinstance(k, str)]
            if wrong:
                raise ValueError(f"layer_kinds holds one name per layer, each a str such as 'global'; got {wrong}")
            self.layer_kinds = tuple(kinds)  # a list would make two equal configs compare unequal
            if "local" in kinds and self.window is None:
                raise ValueError("a local layer attends within a window: set window (a number of tokens)")
            known = (*LAYER_KINDS, *(k for k in KINDS if k not in LAYER_KINDS))
            unknown = sorted({k for k in kinds if k not in known and not _is_kind(k)})
            if unknown:
                raise ValueError(f"layer_kinds may hold only {known} (or a kind registered later), got {unknown}")
        settings = self.kind_settings
        if settings is not None and not (isinstance(settings, dict) and all(isinstance(k, str) for k in settings)):
            raise ValueError(f"kind_settings must be a dict from a kind's name to its settings, got {settings!r:.80}")
        base = self.local_rotary_base
        if base is not None and (
            isinstance(base, bool) or not (isinstance(base, int | float) and math.isfinite(base) and base > 0)
        ):
            raise ValueError(f"local_rotary_base must be a finite positive number or None, got {base!r}")
        if base is not None and "local" not in {self.layer_kind(i) for i in range(self.num_layers)}:
            raise ValueError(
                f"local_rotary_base={base!r} is the rotary base of local layers, and this model has none: set "
                "window and layer_kinds with 'local' layers, or leave local_rotary_base None"
            )
        scale = self.query_scale
        if scale is not None and (isinstance(scale, bool) or not isinstance(scale, int | float) or not scale > 0):
            raise ValueError(f"query_scale must be a positive number (the scores' factor) or None, got {scale!r}")
        for name in ("qk_norm", "post_norms", "embed_scale", "attention_sinks", "output_gate"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}")
        fraction = self.rotary_fraction
        if isinstance(fraction, bool) or not isinstance(fraction, int | float) or not 0 < fraction <= 1:
            raise ValueError(f"rotary_fraction must be in (0, 1], the share of d that rotates, got {fraction!r}")
        if self.positions == "rotary" and (self.rotary_dim < 2 or self.rotary_dim % 2):
            raise ValueError(
                f"rotary_fraction {fraction} of d = {self.head_dim} rotates {self.rotary_dim} features: "
                "it must be an even number of at least 2 (rotary positions rotate pairs)"
            )
        for layer in range(self.num_layers):  # each kind refuses the switches it cannot carry, naming the layer
            kind_class(self.layer_kind(layer)).refuse_switches(self, layer)

    @property
    def rotary_dim(self) -> int:
        """r: how many of each head's d features rotate, int(d · ``rotary_fraction``) (d unless partial)."""
        return int(self.head_dim * self.rotary_fraction)

    def layer_kind(self, layer: int) -> str:
        """The kind of layer ``layer``: ``layer_kinds[layer]``, or without ``layer_kinds`` "local" if the model
        has a ``window`` and "global" if not (every layer alike)."""
        if self.layer_kinds is not None:
            return self.layer_kinds[layer]
        return "global" if self.window is None else "local"

    def layer_window(self, layer: int) -> int | None:
        """The window of layer ``layer`` (None: every earlier token), as its kind reads it from the config."""
        return kind_class(self.layer_kind(layer)).window_from(self)

    def layer_rotary_base(self, layer: int) -> float:
        """The rotary base of layer ``layer``: ``local_rotary_base`` for a local layer (if set), else
        ``rotary_base``."""
        base = kind_class(self.layer_kind(layer)).rotary_base_from(self)
        return self.rotary_base if base is None else base


@register_kind("global")
class CausalSelfAttention(LayerKind, AttentionCore):
    """The kind "global" (and, as ``LocalAttention``, "local"): masked self-attention with a KV cache, using
    ``GroupedQueryAttention``'s four projections.

    ``helpers.GroupedQueryAttention`` projects its key and value *inputs* on every call; a cache must keep the
    projected (and, with RoPE, rotated) keys and values instead, so this module owns one and runs its
    ``q_proj``, ``k_proj``, ``v_proj`` and ``out_proj`` itself, around the attention core
    (``helpers.attention.AttentionCore.attend_heads``). Without cache and rotary positions it computes
    exactly ``self.projections(x, x, x, attn_mask=causal_mask(L))`` (tested).

    ``self.projections.out_proj`` is an ``nn.Linear(E, E)`` whose input is the h heads' outputs concatenated,
    (N, L, h·d) with head i in features i·d .. (i + 1)·d - 1: a forward pre-hook on it can read, zero or patch
    one head's output before the heads are mixed.

    ``weights_from_scores``: None (the masked softmax), or a function ``(scores (N, h, L, T), may_attend (L, T),
    positions (L,)) -> weights (N, h, L, T)`` that replaces it, for an experiment that changes what the heads
    may read (``helpers.analysis.sinks.blocked_key`` hides one key with it). With one set, the attention is
    spelled out, as with ``need_weights``.

    Lesson 14's variants, each a parameter more: ``sinks`` (h,) with ``attention_sinks`` (the core's masked softmax
    reads it; no fused kernel then), ``gate_proj`` (E -> h·d) with ``output_gate``: out_proj(heads · sigmoid(x W_g)).

    ``window`` and ``keep_first``: what the layer may see (None: every earlier token; a number: itself and the
    ``window - 1`` tokens before it, and besides them the first ``keep_first`` tokens, 0 unless set). They are
    changed one way, ``helpers.layer_kind.seeing``: ``made_local`` (lesson 13) and ``streaming_attention``
    (lesson 14) stand on it. Its cache entry is (keys, values), (N, h_kv, T, d) each.
    """

    rotary_base: float  # every softmax layer has one (its kind's: local or global)
    takes_a_window = True  # its mask reads ``window``: local, or global made local for an experiment
    carries = frozenset(SWITCHES)  # the shared front end: QK-norm, sinks, gate, query scale, partial rotary

    @classmethod
    def from_config(cls, config: GPTConfig, layer: int) -> CausalSelfAttention:
        return cls(config, layer)

    def __init__(self, config: GPTConfig, layer: int = 0) -> None:
        super().__init__()
        self.projections = GroupedQueryAttention(
            config.embed_dim, config.num_heads, config.num_kv_heads, bias=False, head_dim=config.head_dim
        )
        self.num_heads, self.num_kv_heads = config.num_heads, config.num_kv_heads
        self.head_dim = config.head_dim
        # Layer ``layer``'s kind: its window (None: global) and its rotary base.
        self.rotary, self.window = config.positions == "rotary", config.layer_window(layer)
        self.rotary_base = config.layer_rotary_base(layer)
        self.scale = config.query_scale  # None: 1 / sqrt(d)
        self.rotary_dim = config.rotary_dim  # r <= d: the first r features of each head rotate
        self.q_norm: RMSNorm | None
        self.k_norm: RMSNorm | None
        if config.qk_norm:  # one RMSNorm over each head's d features, shared by the heads
            self.q_norm = RMSNorm(config.head_dim, config.norm_eps)
            self.k_norm = RMSNorm(config.head_dim, config.norm_eps)
        else:
            self.q_norm = self.k_norm = None
        self.weights_from_scores = None
        if config.attention_sinks:  # gpt-oss: one logit per head, the softmax's extra column (read by the core)
            self.sinks = nn.Parameter(torch.zeros(config.num_heads))
        # Qwen3-Next: one gate per head and feature from the attention's input, (E -> h·d), on the heads' outputs
        self.gate_proj = (
            nn.Linear(config.embed_dim, config.num_heads * config.head_dim, bias=False) if config.output_gate else None
        )

    def forward(
        self,
        x: Tensor,
        positions: Tensor,
        past: tuple[Tensor, Tensor] | None = None,
        need_weights: bool = False,
        rotation: tuple[Tensor, Tensor] | None = None,
    ) -> tuple[Tensor, tuple[Tensor, Tensor]] | tuple[Tensor, tuple[Tensor, Tensor], Tensor]:
        """x (N, L, E) at ``positions`` (L,); past keys and values (N, h_kv, P, d) each, or None: the P tokens
        before these, P = T - L, or fewer in a rolling cache, which keeps a local layer's last ``window`` only.
        ``rotation``: the (cos, sin) of the positions, (L, d / 2) each, if the caller computed them already.

        Returns the output (N, L, E) and the keys and values of the P + L tokens, (N, h_kv, P + L, d) each; with
        ``need_weights`` also the attention weights (N, h, L, P + L)."""
        q, k, v = self._project(x, positions, rotation)
        kept = 0 if past is None else past[0].size(2)  # P
        k, v = extend(past, (k, v))  # (N, h_kv, P + L, d): the new tokens go after the old ones
        mask = sdpa_mask(self._blocked(positions, kept, k.size(2)))  # (L, P + L), True = may attend
        out, weights = self.attend_heads(
            q, k, v, mask, need_weights=need_weights, positions=positions, scale=self.scale
        )
        out = self._finish(out, x)
        if not need_weights:
            return out, (k, v)
        assert weights is not None, "attend_heads returns the weights when asked"
        return out, (k, v), weights

    def _blocked(self, positions: Tensor, kept: int, num_keys: int) -> Tensor:
        """(L, T) True = blocked, for queries at ``positions`` (L,) over the T keys held, the ``kept`` cached
        ones first: the future, and what the layer's ``window`` and ``keep_first`` (``helpers.layer_kind.seeing``)
        leave out."""
        if not self.keep_first:
            # The keys sit at positions positions[0] - P .., so the queries' positions are counted from there: the
            # same mask as over all T keys, cut to the ones kept (with a full cache P = positions[0]: unchanged).
            return causal_mask_at(positions - (positions[0] - kept), num_keys, self.window)
        if int(positions[0]) != kept:  # first tokens kept need the keys at 0 .. T - 1, not a cache that dropped some
            raise ValueError(
                f"this layer keeps seeing its first {self.keep_first} tokens besides its window, so it needs every "
                "key since position 0: run it without a cache or with a full one (a StreamingCache serves "
                "one-token steps after the `seeing` block)"
            )
        return streaming_mask_at(positions, num_keys, cast(int, self.window), self.keep_first)

    # The two ends of every softmax layer's forward, apart so that a kind that attends otherwise (top-k) reuses them.
    def _project(
        self, x: Tensor, positions: Tensor, rotation: tuple[Tensor, Tensor] | None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """x (N, L, E) at ``positions`` (L,) -> q (N, h, L, d), k and v (N, h_kv, L, d): projected, QK-normed and
        rotated (by ``rotation``, the positions' (cos, sin), or computed here if None), ready to cache."""
        p = self.projections
        q = split_heads(p.q_proj(x), self.num_heads)  # (N, h, L, d)
        k = split_heads(p.k_proj(x), self.num_kv_heads)  # (N, h_kv, L, d)
        v = split_heads(p.v_proj(x), self.num_kv_heads)  # (N, h_kv, L, d)
        if self.q_norm is not None and self.k_norm is not None:  # QK-norm: each head's q and k scaled to a fixed RMS
            q, k = self.q_norm(q), self.k_norm(k)
        if self.rotary:  # rotate by each token's own position, before caching: cached keys never change
            r = self.rotary_dim
            cos, sin = rotation if rotation is not None else rotary_cos_sin(positions, r, self.rotary_base, x.dtype)
            q, k = rotate_first(q, cos, sin, r), rotate_first(k, cos, sin, r)
        return q, k, v

    def _finish(self, heads: Tensor, x: Tensor) -> Tensor:
        """The heads' outputs (N, h, L, d) -> the layer's output (N, L, E): concatenated, gated by x (the layer's
        input, with ``output_gate``) and mixed by ``out_proj``."""
        out = merge_heads(heads)  # heads concatenated (N, L, h·d)
        if self.gate_proj is not None:  # each head's output scaled feature by feature by a gate in (0, 1)
            out = out * torch.sigmoid(self.gate_proj(x))
        return self.projections.out_proj(out)  # the heads mixed

    def check_entry(self, entry, N: int, length: int, kept: int, weight: Tensor, layer: int) -> None:
        """A softmax layer's entry: (keys, values), (N, h_kv, kept, d) each, in the model's dtype and device."""
        if not (isinstance(entry, tuple) and len(entry) == 2 and all(isinstance(t, Tensor) for t in entry)):
            raise TypeError(f"cache layer {layer} must be a (keys, values) pair of tensors, got {entry!r:.80}")
        expected = (N, self.num_kv_heads, kept, self.head_dim)
        held = f"T = {length} as in layer 0" if kept == length else f"the last {kept} of T = {length} tokens"
        for name, tensor in zip(("keys", "values"), entry, strict=True):
            if tuple(tensor.shape) != expected:
                raise ValueError(
                    f"cache layer {layer} holds {name} of shape {tuple(tensor.shape)} (N, h_kv, T, d) but this "
                    f"call needs {expected} (batch size N = {N}, h_kv = {self.num_kv_heads}, {held}, "
                    f"d = {self.head_dim}): a cache serves one model and one batch; make one with model.new_cache()"
                )
            check_entry_placed(tensor, name, weight, layer)

    def cache_numbers_per_token(self) -> int:
        """2 · h_kv · d: a key and a value per key/value head."""
        return 2 * self.num_kv_heads * self.head_dim


@register_kind("local")
class LocalAttention(CausalSelfAttention):
    """The kind "local": a ``CausalSelfAttention`` that sees a window of ``config.window`` tokens and rotates
    by ``config.local_rotary_base`` (``rotary_base`` if None); a rolling cache keeps its window only."""

    @classmethod
    def window_from(cls, config: GPTConfig) -> int | None:
        return config.window

    @classmethod
    def rotary_base_from(cls, config: GPTConfig) -> float | None:
        return config.rotary_base if config.local_rotary_base is None else config.local_rotary_base


class DecoderBlock(nn.Module):
    """Pre-norm block: x + attention(norm(x)), then x + feed-forward(norm(x)). (N, L, E) -> (N, L, E).

    The norms are LayerNorm or RMSNorm, the feed-forward GELU (E -> F -> E), SwiGLU or GeGLU, as the config says.
    With ``post_norms`` (Gemma) each branch's output is normed too before it is added:
    x + norm(attention(norm(x))), then x + norm(feed-forward(norm(x))). ``layer`` picks the layer's kind."""

    def __init__(self, config: GPTConfig, layer: int = 0) -> None:
        super().__init__()
        self.norm1, self.norm2 = _norm(config), _norm(config)
        self.attention = _attention(config, layer)
        self.feed_forward: nn.Module
        if config.feed_forward == "swiglu":
            self.feed_forward = SwiGLU(config.embed_dim, config.ff_dim)
        elif config.feed_forward == "geglu":
            self.feed_forward = GeGLU(config.embed_dim, config.ff_dim)
        else:
            self.feed_forward = nn.Sequential(
                nn.Linear(config.embed_dim, config.ff_dim), nn.GELU(), nn.Linear(config.ff_dim, config.embed_dim)
            )
        # None, not an nn.Identity, without post_norms: the Llama and lesson 07 blocks keep their modules as they were
        self.attention_out_norm = _norm(config) if config.post_norms else None
        self.feed_forward_out_norm = _norm(config) if config.post_norms else None

    def forward(self, x, positions, past=None, need_weights=False, rotation=None):
        attended, present, *weights = self.attention(self.norm1(x), positions, past, need_weights, rotation)
        if self.attention_out_norm is not None:
            attended = self.attention_out_norm(attended)
        x = x + attended
        fed = self.feed_forward(self.norm2(x))
        if self.feed_forward_out_norm is not None:
            fed = self.feed_forward_out_norm(fed)
        return (x + fed, present, *weights)


def _attention(config: GPTConfig, layer: int) -> LayerKind:
    """Layer ``layer``'s attention: built by the class registered for its kind (``helpers.layer_kind``)."""
    return kind_class(config.layer_kind(layer)).from_config(config, layer)


def _norm(config: GPTConfig) -> nn.Module:
    if config.norm == "rms":
        return RMSNorm(config.embed_dim, config.norm_eps)
    return nn.LayerNorm(config.embed_dim, eps=config.norm_eps)


class GPT(nn.Module):
    """Decoder-only causal language model: ids (N, L) -> next-token logits (N, L, V).

    ``forward(ids, cache, need_weights, last_only)``: with a ``KVCache`` the ids are the next L tokens after the
    cache's T - L, and the cache grows by them once the step is complete. With ``need_weights=True`` it returns
    ``(logits, weights)``, weights a list of n_layers tensors (N, h, L, T); with ``last_only=True`` the logits
    are the last position's only, (N, 1, V). ``embed`` and ``run`` split the
    forward pass so that a lesson can take gradients with respect to the token vectors.
    """

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        self.token_embedding = nn.Embedding(config.vocab_size, config.embed_dim)
        self.positional = (
            PositionalEncoding(config.embed_dim, config.max_len) if config.positions == "sinusoidal" else None
        )
        self.blocks = nn.ModuleList(DecoderBlock(config, layer) for layer in range(config.num_layers))
        self.norm = _norm(config)
        self.lm_head = nn.Linear(config.embed_dim, config.vocab_size, bias=False)
        if config.tie_embeddings:
            self.lm_head.weight = self.token_embedding.weight  # one (V, E) matrix: embedding and output layer
        # Read once here, so that the forward pass and the cache code read no switch: Gemma's sqrt(E) factor
        # (None: none), and the rotary bases the layers share (none without rotary positions).
        self.embed_factor = math.sqrt(config.embed_dim) if config.embed_scale else None
        self.rotary_dim = config.rotary_dim if config.positions == "rotary" else None

    def embed(self, ids: Tensor, start: int = 0) -> Tensor:
        """Token vectors (N, L, E) of ``ids`` (N, L) at positions start .. start + L - 1 (sinusoidal added; times
        sqrt(E) with ``embed_scale``, which makes them as large as the residual stream Gemma trained with)."""
        x = self.token_embedding(ids)
        if self.embed_factor is not None:
            x = x * torch.tensor(self.embed_factor, dtype=x.dtype)  # rounded to x's dtype first
        return x if self.positional is None else self.positional(x, start=start)

    def _check_cache(self, cache: KVCache, N: int) -> None:
        """Refuse a cache this call cannot extend: another model's, another depth, a bound that hides tokens a
        layer may see, entries of another batch, layout, dtype or device, or layers that disagree with each other
        (every layer is checked, each by its own kind)."""
        if not isinstance(cache, KVCache):
            raise TypeError(f"cache must be a KVCache (model.new_cache()) or None, got {type(cache).__name__}")
        layers = self.attention_layers
        if len(cache.layers) != len(layers):
            raise ValueError(
                f"cache has {len(cache.layers)} layers but this model has {len(layers)}: "
                f"make one with model.new_cache()"
            )
        cache.check_fits(layers)
        if not cache.check_filled_together():
            cache.check_owner(self)
            return
        length, weight = cache.length, self.lm_head.weight
        for index, (layer, entry, keep) in enumerate(zip(layers, cache.layers, cache.keep, strict=True)):
            kept = length if keep is None else min(length, keep)  # a rolling cache keeps a window's tokens only
            layer.check_entry(entry, N, length, kept, weight, index)
        cache.check_owner(self)  # last: a cache of other sizes gets the message that names them

    def run(self, x: Tensor, cache: KVCache | None = None, need_weights: bool = False, last_only: bool = False):
        """Blocks, final norm and output layer: token vectors (N, L, E) -> logits (N, L, V)
        (and the list of n_layers weights (N, h, L, T) with ``need_weights``). With ``last_only`` the output
        layer runs on the last position alone, logits (N, 1, V): all a generation step needs."""
        if cache is not None:
            self._check_cache(cache, x.size(0))
        return self._run_checked(x, cache, need_weights, last_only)

    def _run_checked(self, x: Tensor, cache: KVCache | None, need_weights: bool, last_only: bool):
        """``run`` with a cache already checked (``forward`` checks it before reading its length)."""
        start = 0 if cache is None else cache.length
        positions = torch.arange(start, start + x.size(1), device=x.device)  # (L,)
        rotations = self._rotations(positions, x.dtype)
        presents, all_weights = [], []
        for index, (block, layer) in enumerate(zip(self.blocks, self.attention_layers, strict=True)):
            past = None if cache is None else cache.layers[index]
            rotation = rotations.get(layer.rotary_base)
            x, present, *weights = block(x, positions, past, need_weights, rotation)
            presents.append(present)
            all_weights += weights
        logits = self._read_out(x, last_only)
        if cache is not None:  # every layer at once, only after the whole step has run
            cache.update(self, presents, length=start + x.size(1))
        return (logits, all_weights) if need_weights else logits

    def _rotary_base(self, block: nn.Module) -> float | None:
        """A block's rotary base: its layer's (None: a layer that places its rotations itself)."""
        return cast(LayerKind, block.attention).rotary_base

    def _rotations(self, positions: Tensor, dtype: torch.dtype) -> dict[float | None, tuple[Tensor, Tensor]]:
        """The (cos, sin) of ``positions``, (L, r / 2) each, by rotary base: computed once for all the layers that
        share a base (one base for a Llama; Gemma's local and global layers have one each). Empty if not rotary."""
        if self.rotary_dim is None:
            return {}
        bases = {layer.rotary_base for layer in self.attention_layers if layer.rotary_base is not None}
        rotations: dict[float | None, tuple[Tensor, Tensor]] = {}
        for base in bases:
            cos, sin = rotary_cos_sin(positions, self.rotary_dim, base, dtype)
            rotations[base] = cos.to(positions.device), sin.to(positions.device)
        return rotations

    def _read_out(self, x: Tensor, last_only: bool) -> Tensor:
        if last_only:
            x = x[:, -1:]  # (N, 1, E): V × E multiply-adds per token, the largest layer, saved for the others
        return self.lm_head(self.norm(x))

    def run_from(self, x: Tensor, layer: int, last_only: bool = False) -> Tensor:
        """The rest of a forward pass without a cache: x (N, L, E) is the residual stream entering block ``layer``
        (``layer`` = n_layers: the final norm) at positions 0 .. L - 1 -> logits (N, L, V), or (N, 1, V) with
        ``last_only``. What an experiment that changes the residual at one layer needs: the layers before it
        would compute the same as in the run it came from, so they are not run again (hooks on them do not fire).
        """
        n_layers = self.config.num_layers
        if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer <= n_layers:
            raise ValueError(f"layer must be an int in 0 .. n_layers = {n_layers}, got {layer!r}")
        if not isinstance(x, Tensor) or x.dim() != 3 or x.size(-1) != self.config.embed_dim:
            shape = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
            raise ValueError(f"x must be a residual stream (N, L, E) with E = {self.config.embed_dim}, got {shape}")
        positions = torch.arange(x.size(1), device=x.device)
        rotations = self._rotations(positions, x.dtype)
        for block, attention in zip(self.blocks[layer:], self.attention_layers[layer:], strict=True):
            x, _ = block(x, positions, None, False, rotations.get(attention.rotary_base))
        return self._read_out(x, last_only)

    def forward(self, ids: Tensor, cache: KVCache | None = None, need_weights: bool = False, last_only: bool = False):
        if not isinstance(ids, Tensor) or ids.dim() != 2:
            shape = tuple(ids.shape) if isinstance(ids, Tensor) else type(ids).__name__
            raise ValueError(f"ids must be (N, L) token ids, got {shape}")
        if ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
            raise TypeError(f"ids must be integer token ids, got dtype {ids.dtype}")
        if ids.numel() == 0:
            raise ValueError(f"ids must hold at least one token, got shape {tuple(ids.shape)}")
        if cache is not None:  # before cache.length is read
            self._check_cache(cache, ids.size(0))
        low, high = int(ids.min()), int(ids.max())
        if low < 0 or high >= self.config.vocab_size:
            raise ValueError(
                f"ids must be token ids in 0 .. V - 1 = {self.config.vocab_size - 1}, got values {low} .. {high}"
            )
        if ids.dtype not in (torch.int32, torch.int64):  # uint8, int16, …: in range, but nn.Embedding takes these two
            ids = ids.long()
        x = self.embed(ids, start=0 if cache is None else cache.length)
        return self._run_checked(x, cache, need_weights, last_only)  # the cache was checked above, once

    @property
    def decoder_blocks(self) -> list[DecoderBlock]:
        """The blocks, in order, as their type (an nn.ModuleList yields plain Modules to a type checker)."""
        return cast(list[DecoderBlock], list(self.blocks))

    @property
    def attention_layers(self) -> list[LayerKind]:
        """Each block's attention layer, in order, as a ``LayerKind`` (what the cache code asks)."""
        return [cast(LayerKind, block.attention) for block in self.blocks]

    def layer_windows(self) -> list[int | None]:
        """Each layer's window as it attends now (None: every earlier token; a delta-rule layer has none)."""
        return [layer.window for layer in self.attention_layers]

    def new_cache(self, rolling: bool = False) -> KVCache:
        """An empty ``KVCache`` for this model (it refuses to serve another).

        ``rolling=True``: each windowed (local) layer keeps only the keys and values of its last ``window``
        tokens, all its queries can still reach, so its memory stops growing at the window; global layers keep
        every token. The outputs are the same as with a full cache (tested)."""
        if not isinstance(rolling, bool):
            raise TypeError(f"rolling must be True or False, got {rolling!r}")
        keep = [layer.rolling_keep() for layer in self.attention_layers] if rolling else None
        return KVCache(len(self.blocks), owner=self, keep=keep)


@torch.no_grad()
def generate(
    model: GPT,
    prompt: Tensor,
    max_new_tokens: int,
    use_cache: bool = True,
    eos_id: int | None = None,
    rolling: bool = False,
) -> tuple[Tensor, Tensor]:
    """Greedy generation: prompt (N, T0) -> tokens (N, T0 + new) and each step's logits (N, new, V).

    Without the cache each step runs the model on the whole sequence so far (the output layer on every
    position) and keeps the last position's logits; with it, the prompt fills the cache once and every later
    step runs the newest token only, the output layer on the last position only.
    With ``eos_id`` generation stops once every row has produced that token (a row that finished early
    is filled with ``eos_id``), so ``new`` can be below ``max_new_tokens``. ``rolling=True`` generates with a
    rolling cache (``model.new_cache(rolling=True)``): the local layers keep their window of tokens only.
    """
    if not isinstance(prompt, Tensor) or prompt.dim() != 2 or prompt.size(1) < 1:
        shape = tuple(prompt.shape) if isinstance(prompt, Tensor) else type(prompt).__name__
        raise ValueError(f"prompt must be (N, T0) token ids with T0 >= 1, got {shape}")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be an int >= 1, got {max_new_tokens!r}")
    vocab_size = getattr(getattr(model, "config", None), "vocab_size", None)
    if eos_id is not None and (
        isinstance(eos_id, bool)
        or not isinstance(eos_id, int)
        or eos_id < 0
        or (vocab_size is not None and eos_id >= vocab_size)
    ):
        raise ValueError(f"eos_id must be a token id in 0 .. V - 1 or None, got {eos_id!r}")
    tokens, step_logits = prompt, []
    if rolling and not use_cache:
        raise ValueError("rolling=True is a kind of cache: it needs use_cache=True")
    cache = (model.new_cache(rolling=True) if rolling else model.new_cache()) if use_cache else None
    new = prompt
    finished = torch.zeros(prompt.size(0), 1, dtype=torch.bool, device=prompt.device)
    for _ in range(max_new_tokens):
        logits = model(new, cache, last_only=True)[:, -1] if use_cache else model(tokens)[:, -1]  # (N, V)
        next_token = logits.argmax(dim=-1, keepdim=True)  # (N, 1)
        if eos_id is not None:
            next_token = next_token.masked_fill(finished, eos_id)
            finished |= next_token == eos_id
        tokens = torch.cat((tokens, next_token), dim=1)
        step_logits.append(logits)
        new = next_token
        if eos_id is not None and bool(finished.all()):
            break
    return tokens, torch.stack(step_logits, dim=1)


def train_gpt(
    model: GPT,
    inputs: Tensor,
    targets: Tensor,
    steps: int,
    batch_size: int = 32,
    lr: float = 3e-3,
    ignore_index: int = -100,
    seed: int = 0,
    progress: str | None = None,
) -> list[float]:
    """Train on (inputs, targets), both (num_sequences, T) token ids, for a fixed number of steps with AdamW.

    A language model's targets are its inputs shifted by one; other tasks give other targets (positions to
    skip hold ``ignore_index``). Returns the loss of every step. ``progress``: a label to print a line under at
    every tenth of the steps (``helpers.tools.progress``); None: silent.
    """
    lines = ProgressLines(steps, progress) if progress is not None and steps > 0 else None
    if inputs.shape != targets.shape:
        raise ValueError(f"inputs {tuple(inputs.shape)} and targets {tuple(targets.shape)} must have one shape")
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    model.train()
    losses = []
    for _ in range(steps):
        rows = torch.randint(len(inputs), (batch_size,), generator=generator)
        logits = model(inputs[rows])  # (N, T, V)
        loss = F.cross_entropy(logits.flatten(0, 1), targets[rows].flatten(), ignore_index=ignore_index)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if lines is not None:
            lines.update(len(losses))
    model.eval()
    return losses
