"""Multi-head latent attention (MLA, lesson 11): the KV cache compressed into one small latent per token.

DeepSeek-V2 (DeepSeek-AI, 2024, arXiv:2405.04434, §2.1) caches neither keys nor values. Each token's hidden
state x goes *down* to a latent c = W_DKV x of d_c numbers, and every head rebuilds its own key and value from
it with an *up*-projection, k_i = W_UK,i c and v_i = W_UV,i c. The cache holds c alone, d_c numbers per token
and layer instead of 2·h·d (MHA) or 2·h_kv·d (GQA).

Two tricks make it work in practice, and this module holds both:

* **Absorption.** A score q_iᵀ k_i = (W_UQ,i x_q)ᵀ (W_UK,i c) = x_qᵀ (W_UQ,iᵀ W_UK,i) c: the product of the two
  matrices can be folded into one query projection that maps straight into the latent's space, and W_UV,i
  into the output projection likewise. The per-head keys and values are then never built: every head reads
  the same c, multi-query attention over the latent (``absorbed=True``).
* **The decoupled rotary key.** Rotary positions rotate keys by their position m, k_i = R_m W_UK,i c, and
  R_m sits *between* W_UK,i and the query: the fold then depends on the offset between query and key and
  cannot be precomputed. DeepSeek-V2 leaves the content keys unrotated and adds a small extra key
  k^R = RoPE(W_KR x), d_R numbers shared by all heads, cached beside c, and per head a rotary query part of
  the same width. A score is the content part plus the rotary part.

``rotate_content=True`` rotates the rebuilt keys instead (as GQA does): then grouped-query attention is MLA
with d_c = 2·h_kv·d and block-identity up-projections (``latent_from_gqa``), and a PCA of a real model's keys
and values gives a compressed latent for it; that form cannot be absorbed, and says so.

Shapes, in the course notation: N batch, L new tokens in this call, T tokens so far (cache plus L), E
embedding size, h query heads, d the head size of the content queries, keys and values, d_c the latent's
width, d_R the decoupled rotary key's width (per head of the queries, shared by the heads for the key),
d_c' the queries' latent width (query compression, optional), n_layers blocks.

``MultiHeadLatentAttention`` is a variant of the course's one attention core (``helpers.attention.AttentionCore``):
it projects to heads its own way (latent, up-projections, rotary parts, or the absorbed queries) and hands them to
``attend_heads``, so an experiment that swaps how scores become weights (``weights_from_scores``, as
``helpers.analysis.sinks.blocked_key`` does) reaches it as it reaches ``helpers.gpt``'s attention. Its masks come
from ``helpers.masks`` (True = blocked), flipped into the core's convention (True = may attend) where they enter
it; what its cache costs is counted in ``helpers.kv_cache`` (``cache_bytes_per_token``, re-exported here).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import cast

import torch
from torch import Tensor, nn

from helpers.attention import AttentionCore, merge_heads, repeat_kv_heads, split_heads
from helpers.attention import attend as core_attend
from helpers.gpt import GPT, CausalSelfAttention, GPTConfig
from helpers.kv_cache import cache_bytes_per_token
from helpers.layer_kind import LayerKind, check_entry_placed, register_kind
from helpers.masks import causal_mask_at, sdpa_mask
from helpers.rotary import rotary_cos_sin, rotate_pairs

__all__ = [
    "DEEPSEEK_V2",
    "SMOLLM2",
    "LatentConfig",
    "MultiHeadLatentAttention",
    "all_latent",
    "attend_keeping_weights",
    "cache_bytes_per_token",
    "gpt_to_latent",
    "latent_from_gqa",
    "latent_gpt",
    "pca_basis",
    "record_keys_values",
    "set_absorbed",
]


# ---------------------------------------------------------------------------------------------
# Sizes of the two models the lesson compares, with where each number comes from
# ---------------------------------------------------------------------------------------------
# SmolLM2-135M-Instruct: the GGUF file's header (llama.block_count, attention.head_count, head_count_kv,
# embedding_length; helpers.models.language_model reads them). d = 576 / 9.
SMOLLM2 = {"num_layers": 30, "embed_dim": 576, "num_heads": 9, "num_kv_heads": 3, "head_dim": 64}
# DeepSeek-V2: its paper (arXiv:2405.04434), §3.1.2 "Hyper-Parameters": 60 layers, hidden size 5120, n_h = 128
# heads of d_h = 128, KV compression d_c = 512 (= 4 d_h), query compression d_c' = 1536, decoupled queries and
# key of d_h^R = 64 per head (= d_h / 2). Table 1 gives the cache per token: MHA 2 n_h d_h l, GQA 2 n_g d_h l,
# MQA 2 d_h l, MLA (d_c + d_h^R) l, l the number of layers.
DEEPSEEK_V2 = {
    "num_layers": 60,
    "embed_dim": 5120,
    "num_heads": 128,
    "head_dim": 128,
    "latent_dim": 512,
    "query_latent_dim": 1536,
    "rotary_dim": 64,
}


def _int_in(name: str, value, low: int, high: int, why: str = "") -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{name} must be an int in {low} .. {high}{why}, got {value!r}")


# ---------------------------------------------------------------------------------------------
# The configuration
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LatentConfig:
    """Sizes of one multi-head latent attention layer.

    ``latent_dim`` d_c in 1 .. 2·h·d (wider than MHA's own keys and values would compress nothing);
    ``rotary_dim`` d_R, even, 0 .. d: the decoupled rotary key (0: none); ``query_latent_dim`` d_c' or None
    (queries straight from x); ``rotate_content`` rotates the rebuilt content keys and queries instead (the
    GQA-equivalent form; it needs d even and no decoupled key, and cannot be absorbed).
    """

    embed_dim: int
    num_heads: int
    head_dim: int
    latent_dim: int
    rotary_dim: int = 0
    query_latent_dim: int | None = None
    rotate_content: bool = False
    rotary_base: float = 10000.0

    def __post_init__(self) -> None:
        _int_in("embed_dim", self.embed_dim, 1, 10**6)
        _int_in("num_heads", self.num_heads, 1, 10**4)
        _int_in("head_dim", self.head_dim, 1, 10**4)
        most = 2 * self.num_heads * self.head_dim
        _int_in("latent_dim (d_c)", self.latent_dim, 1, most, f" (2·h·d = {most}: MHA's own keys and values)")
        _int_in("rotary_dim (d_R)", self.rotary_dim, 0, self.head_dim, " (at most the head size d)")
        if self.rotary_dim % 2:
            raise ValueError(f"rotary_dim (d_R) must be even (rotary positions rotate pairs), got {self.rotary_dim}")
        if self.query_latent_dim is not None:
            _int_in("query_latent_dim (d_c')", self.query_latent_dim, 1, 10**6)
        if not isinstance(self.rotate_content, bool):
            raise ValueError(f"rotate_content must be True or False, got {self.rotate_content!r}")
        if self.rotate_content and self.rotary_dim:
            raise ValueError(
                "rotate_content and a decoupled rotary key (rotary_dim > 0) are two ways to place positions: choose one"
            )
        if self.rotate_content and self.head_dim % 2:
            raise ValueError(
                f"rotate_content rotates pairs of the head's features: d must be even, got {self.head_dim}"
            )
        base = self.rotary_base
        if isinstance(base, bool) or not isinstance(base, int | float) or not math.isfinite(base) or base <= 0:
            raise ValueError(f"rotary_base must be a finite positive number, got {base!r}")

    @property
    def score_dim(self) -> int:
        """Features one score sums over, d + d_R: its scale is 1 / √(d + d_R)."""
        return self.head_dim + self.rotary_dim


# ---------------------------------------------------------------------------------------------
# Scores -> weights -> weighted sum: the attention core's, with the weights kept
# ---------------------------------------------------------------------------------------------
def attend_keeping_weights(
    query: Tensor, key: Tensor, value: Tensor, may_attend: Tensor, scale: float
) -> tuple[Tensor, Tensor]:
    """Masked softmax attention: query (N, h, L, D), key (N, h or 1, T, D), value (N, h or 1, T, D_v), mask
    (L, T) **True = may attend** (the core's convention, as ``F.scaled_dot_product_attention``'s) -> (outputs
    (N, h, L, D_v), weights (N, h, L, T)).

    The course's attention core (``helpers.attention.attend``) with the weights kept: a key and value with one
    head are read by every query head, the absorbed form's shared latent. ``scale`` is given, not taken from D:
    absorbed queries are d_c + d_R wide but their scores are the naive ones, scaled by 1 / √(d + d_R).
    ``MultiHeadLatentAttention`` calls the same core through ``attend_heads``, where a hook can replace the softmax.
    """
    out, weights = core_attend(query, key, value, may_attend, need_weights=True, scale=scale)
    assert weights is not None, "asked for with need_weights"
    return out, weights


def _check_flag(name: str, value) -> None:
    if not isinstance(value, bool):  # "no" or 0.0 would otherwise be read as a truth value
        raise TypeError(f"{name} must be True or False, got {value!r}")


# ---------------------------------------------------------------------------------------------
# The layer
# ---------------------------------------------------------------------------------------------
@register_kind("latent")
class MultiHeadLatentAttention(LayerKind, AttentionCore):
    """Causal self-attention with a latent KV cache; a drop-in for ``helpers.gpt.CausalSelfAttention``, and, like
    it, a variant of the attention core (``helpers.attention.AttentionCore``): ``weights_from_scores`` (or an
    override of ``scores_to_weights``) replaces the softmax in both forms, called with scores (N, h, L, T), the
    mask (L, T) True = may attend and the queries' positions (L,).

    Projections (``nn.Linear``, no biases), rows = outputs:

    - ``kv_down`` W_DKV (d_c, E): x -> the latent c, what the cache keeps;
    - ``k_up`` W_UK (h·d, d_c) and ``v_up`` W_UV (h·d, d_c): c -> every head's content key and value;
    - ``k_rope`` W_KR (d_R, E): x -> the decoupled rotary key, shared by the heads, cached rotated;
    - queries: ``q_proj`` (h·d, E) and ``q_rope`` (h·d_R, E), or with query compression ``q_down`` (d_c', E)
      then ``q_up`` (h·d, d_c') and ``q_rope`` (h·d_R, d_c');
    - ``out_proj`` W_O (E, h·d), whose input is the heads' outputs side by side (head hooks work on it).

    ``absorbed`` (attribute, or the forward argument) selects the absorbed form; both give the same numbers.

    As a kind of ``GPT`` layer ("latent") it is built from ``GPTConfig.kind_settings["latent"]``, a
    ``LatentConfig``; it places its rotations itself (``rotary_base`` None: it takes no shared (cos, sin)),
    carries none of the softmax layer's switches, and its cache entry is (c (N, T, d_c), k^R (N, T, d_R)).
    """

    @classmethod
    def check_config(cls, config, layer: int) -> None:
        latent = (config.kind_settings or {}).get("latent")
        if not isinstance(latent, LatentConfig):
            raise ValueError(
                f"layer {layer} is latent attention: its sizes come from kind_settings['latent'], a LatentConfig; "
                f"got {type(latent).__name__}"
            )
        if latent.embed_dim != config.embed_dim:
            raise ValueError(f"latent.embed_dim ({latent.embed_dim}) must equal the model's E ({config.embed_dim})")
        if config.positions == "sinusoidal":
            raise ValueError("latent attention places rotary positions itself: use positions 'rotary' or 'none'")

    @classmethod
    def rotary_base_from(cls, config) -> float | None:
        return None

    @classmethod
    def from_config(cls, config, layer: int) -> MultiHeadLatentAttention:
        return cls(config.kind_settings["latent"])

    def __init__(self, config: LatentConfig) -> None:
        super().__init__()
        if not isinstance(config, LatentConfig):
            raise TypeError(f"config must be a LatentConfig, got {type(config).__name__}")
        self.config = config
        E, h, d, d_c, d_R = config.embed_dim, config.num_heads, config.head_dim, config.latent_dim, config.rotary_dim
        self.kv_down = nn.Linear(E, d_c, bias=False)
        self.k_up = nn.Linear(d_c, h * d, bias=False)
        self.v_up = nn.Linear(d_c, h * d, bias=False)
        self.k_rope = nn.Linear(E, d_R, bias=False) if d_R else None
        query_in = E
        if config.query_latent_dim is not None:
            self.q_down = nn.Linear(E, config.query_latent_dim, bias=False)
            self.q_up = nn.Linear(config.query_latent_dim, h * d, bias=False)
            query_in = config.query_latent_dim
        else:
            self.q_proj = nn.Linear(E, h * d, bias=False)
        self.q_rope = nn.Linear(query_in, h * d_R, bias=False) if d_R else None
        self.out_proj = nn.Linear(h * d, E, bias=False)
        self.absorbed = False

    # -- pieces -------------------------------------------------------------------------------
    def _query_input(self, x: Tensor) -> Tensor:
        """What the queries are projected from: x (N, L, E), or its query latent (N, L, d_c')."""
        return self.q_down(x) if self.config.query_latent_dim is not None else x

    def _content_query_projection(self) -> nn.Linear:
        return self.q_up if self.config.query_latent_dim is not None else self.q_proj

    def _rotation(self, positions: Tensor, width: int, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        cos, sin = rotary_cos_sin(positions, width, self.config.rotary_base, dtype)
        return cos.to(positions.device), sin.to(positions.device)

    def latent(self, x: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        """What one token puts in the cache: x (N, L, E) at ``positions`` (L,) -> (c (N, L, d_c), the rotary key
        already rotated by its own position (N, L, d_R))."""
        c = self.kv_down(x)
        if self.k_rope is None:
            return c, x.new_zeros((*x.shape[:-1], 0))
        return c, rotate_pairs(self.k_rope(x), *self._rotation(positions, self.config.rotary_dim, x.dtype))

    def absorbed_weights(self) -> tuple[Tensor, Tensor]:
        """The folded matrices: W_UK,iᵀ W_UQ,i per head, (h, d_c, E or d_c'), which maps the query input
        straight into the latent's space; and W_O,i W_UV,i per head, (h, E, d_c), which maps a head's
        latent-space output straight to the model's features."""
        c, h, d = self.config, self.config.num_heads, self.config.head_dim
        w_uq = self._content_query_projection().weight.view(h, d, -1)  # (h, d, E or d_c')
        w_uk = self.k_up.weight.view(h, d, c.latent_dim)  # (h, d, d_c)
        w_uv = self.v_up.weight.view(h, d, c.latent_dim)  # (h, d, d_c)
        w_o = self.out_proj.weight.view(c.embed_dim, h, d).transpose(0, 1)  # (h, E, d)
        return w_uk.transpose(1, 2) @ w_uq, w_o @ w_uv

    # -- forward ------------------------------------------------------------------------------
    def forward(
        self,
        x: Tensor,
        positions: Tensor | None = None,
        past: tuple[Tensor, Tensor] | None = None,
        need_weights: bool = False,
        rotation: tuple[Tensor, Tensor] | None = None,
        absorbed: bool | None = None,
    ):
        """x (N, L, E), the L tokens after the ``past`` ones; ``past`` the cached (c (N, T - L, d_c), rotary key
        (N, T - L, d_R)) or None. ``positions`` (L,) are theirs, T - L .. T - 1, the default: the keys sit at
        0 .. T - 1, so any other positions would rotate and mask the new tokens as if they were elsewhere.
        ``rotation`` is accepted for ``GPT``'s blocks and ignored: this layer rotates at its own widths.
        ``absorbed`` True or False chooses the form for this call (None: the ``absorbed`` attribute).

        Returns the output (N, L, E) and the cache entry of all T tokens (c (N, T, d_c), rotary key
        (N, T, d_R)); with ``need_weights`` also the weights (N, h, L, T)."""
        cfg = self.config
        if not isinstance(x, Tensor) or x.dim() != 3 or x.size(-1) != cfg.embed_dim:
            shape = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
            raise ValueError(f"x must be (N, L, E) with E = {cfg.embed_dim}, got {shape}")
        absorbed = self.absorbed if absorbed is None else absorbed
        _check_flag("absorbed", absorbed)
        start = self._check_past(past, x)  # T - L: the tokens cached before this call
        positions = self._check_positions(positions, start, x)
        c, key_rope = self.latent(x, positions)
        if past is not None:
            c, key_rope = torch.cat((past[0], c), dim=1), torch.cat((past[1], key_rope), dim=1)  # (N, T, ·)
        T = c.size(1)
        may_attend = sdpa_mask(causal_mask_at(positions, T))  # (L, T), True = may attend (the core's convention)
        if absorbed and cfg.rotate_content:
            raise ValueError(
                "the absorbed form needs unrotated content keys: with rotate_content the rotation R_m of each "
                "key's position sits between W_UK and the query, so W_UK cannot be folded into the queries. "
                "Use a decoupled rotary key (rotary_dim > 0, rotate_content=False) or absorbed=False."
            )
        q_in = self._query_input(x)  # (N, L, E or d_c')
        q_rope = None
        if self.q_rope is not None:  # per head, rotated by the query's position
            q_rope = rotate_pairs(
                split_heads(self.q_rope(q_in), cfg.num_heads), *self._rotation(positions, cfg.rotary_dim, x.dtype)
            )
        scale = 1.0 / math.sqrt(cfg.score_dim)
        if absorbed:
            out, weights = self._absorbed(q_in, q_rope, c, key_rope, positions, may_attend, scale)
        else:
            out, weights = self._naive(q_in, q_rope, c, key_rope, positions, may_attend, scale)
        return (out, (c, key_rope), weights) if need_weights else (out, (c, key_rope))

    def _check_past(self, past, x: Tensor) -> int:
        """The number of cached tokens, T - L, after refusing a ``past`` this layer could not extend: not a
        (c (N, T - L, d_c), rotary key (N, T - L, d_R)) pair of x's batch size N, dtype and device."""
        if past is None:
            return 0
        cfg, N = self.config, x.size(0)
        if not (isinstance(past, tuple | list) and len(past) == 2 and all(isinstance(t, Tensor) for t in past)):
            raise TypeError(f"past must be a (latents, rotary keys) pair of tensors or None, got {past!r:.80}")
        cached = past[0].size(1) if past[0].dim() == 3 else -1
        for name, tensor, width in (("latents", past[0], cfg.latent_dim), ("rotary keys", past[1], cfg.rotary_dim)):
            if tensor.dim() != 3 or tuple(tensor.shape) != (N, cached, width):
                raise ValueError(
                    f"past {name} of shape {tuple(tensor.shape)} do not fit this call: it needs (N, T - L, ·) = "
                    f"({N}, {max(cached, 0)}, {width}) (batch size N = {N} as x's, d_c = {cfg.latent_dim}, d_R = "
                    f"{cfg.rotary_dim}, one length for both): a cache serves one layer configuration and one batch"
                )
            if tensor.dtype != x.dtype or tensor.device != x.device:
                raise TypeError(
                    f"past {name} are {tensor.dtype} on {tensor.device} but x is {x.dtype} on {x.device}: a cache "
                    "holds what this layer computed, in its dtype and on its device"
                )
        return cached

    @staticmethod
    def _check_positions(positions, start: int, x: Tensor) -> Tensor:
        """The new tokens' positions (L,): by default ``start`` .. ``start`` + L - 1, after the cached ones; given
        ones must be exactly those (whole numbers >= 0, one per token)."""
        L = x.size(1)
        expected = torch.arange(start, start + L, device=x.device)
        if positions is None:
            return expected
        if not isinstance(positions, Tensor) or positions.dtype == torch.bool or positions.is_floating_point():
            got = positions.dtype if isinstance(positions, Tensor) else type(positions).__name__
            raise TypeError(f"positions must be an integer tensor (L,) of token positions, got {got}")
        if positions.is_complex() or tuple(positions.shape) != (L,):
            raise ValueError(f"positions must be (L,) = ({L},), one per token of x, got shape {tuple(positions.shape)}")
        if L and int(positions.min()) < 0:
            raise ValueError(f"positions must be >= 0 (token positions), got {positions.tolist()}")
        if not torch.equal(positions.to(expected.device, torch.long), expected):
            raise ValueError(
                f"positions must be the new tokens' places after the {start} cached ones, {start} .. "
                f"{start + L - 1} (the default), got {positions.tolist()}: the keys sit at 0 .. T - 1, so other "
                "positions would rotate and mask these tokens as if they were elsewhere"
            )
        return positions

    def _naive(self, q_in, q_rope, c, key_rope, positions, may_attend, scale):
        """Every head's keys and values rebuilt from the latent, then ordinary attention."""
        cfg, h = self.config, self.config.num_heads
        q = split_heads(self._content_query_projection()(q_in), h)  # (N, h, L, d)
        k = split_heads(self.k_up(c), h)  # (N, h, T, d)
        v = split_heads(self.v_up(c), h)  # (N, h, T, d)
        if cfg.rotate_content:  # rebuilt keys rotated by their positions 0 .. T - 1, every step anew
            T = c.size(1)
            q = rotate_pairs(q, *self._rotation(positions, cfg.head_dim, q.dtype))
            k = rotate_pairs(k, *self._rotation(torch.arange(T, device=c.device), cfg.head_dim, k.dtype))
        if q_rope is not None:  # the shared rotary key, one copy per query head, beside the content part
            q = torch.cat((q, q_rope), dim=-1)  # (N, h, L, d + d_R)
            k = torch.cat((k, repeat_kv_heads(key_rope[:, None], h)), dim=-1)  # (N, h, T, d + d_R)
        out, weights = self._attend(q, k, v, may_attend, positions, scale)  # (N, h, L, d)
        return self.out_proj(merge_heads(out)), weights

    def _attend(self, q, k, v, may_attend, positions, scale):
        """The core's ``attend_heads``, always spelled out (the weights are returned on request, and the numbers
        are those lesson 11 was run with); a ``weights_from_scores`` hook replaces its softmax."""
        return self.attend_heads(q, k, v, may_attend, need_weights=True, positions=positions, scale=scale)

    def _absorbed(self, q_in, q_rope, c, key_rope, positions, may_attend, scale):
        """W_UK folded into the queries and W_UV into the output: all heads read the one latent."""
        query_to_latent, latent_to_out = self.absorbed_weights()  # (h, d_c, E or d_c'), (h, E, d_c)
        q = torch.einsum("nli,hci->nhlc", q_in, query_to_latent)  # (N, h, L, d_c): queries in the latent space
        key, value = c[:, None], c[:, None]  # (N, 1, T, d_c): one key/value head for all (multi-query)
        if q_rope is not None:
            q = torch.cat((q, q_rope), dim=-1)  # (N, h, L, d_c + d_R)
            key = torch.cat((key, key_rope[:, None]), dim=-1)  # (N, 1, T, d_c + d_R)
        out, weights = self._attend(q, key, value, may_attend, positions, scale)  # (N, h, L, d_c)
        return torch.einsum("nhlc,hec->nle", out, latent_to_out), weights  # (N, L, E)

    # -- its cache entry, as a kind of GPT layer --------------------------------------------------
    def check_entry(self, entry, N: int, length: int, kept: int, weight: Tensor, layer: int) -> None:
        """The entry (c (N, T, d_c), k^R (N, T, d_R)) of all T = ``length`` tokens, in the model's dtype."""
        lat = self.config
        if not (isinstance(entry, tuple) and len(entry) == 2 and all(isinstance(t, Tensor) for t in entry)):
            raise TypeError(f"cache layer {layer} must be a (latents, rotary keys) pair of tensors, got {entry!r:.80}")
        if tuple(entry[0].shape) != (N, kept, lat.latent_dim) or tuple(entry[1].shape) != (N, kept, lat.rotary_dim):
            raise ValueError(
                f"cache layer {layer} holds latents {tuple(entry[0].shape)} and rotary keys "
                f"{tuple(entry[1].shape)}, but this call needs (N, T, d_c) = ({N}, {kept}, {lat.latent_dim}) and "
                f"(N, T, d_R) = ({N}, {kept}, {lat.rotary_dim}): a cache serves one model and one batch"
            )
        for name, tensor in zip(("latents", "rotary keys"), entry, strict=True):
            check_entry_placed(tensor, name, weight, layer)

    def cache_numbers_per_token(self) -> int:
        """d_c + d_R: the latent and the decoupled rotary key."""
        return self.config.latent_dim + self.config.rotary_dim


# ---------------------------------------------------------------------------------------------
# A model of latent layers: a plain GPT, built from its config
# ---------------------------------------------------------------------------------------------
def all_latent(config: GPTConfig, latent: LatentConfig) -> GPTConfig:
    """``config`` with every layer of kind "latent", its sizes ``latent``: what ``GPT`` builds a latent model from.

    The config gives everything but the attention (its ``positions`` must be "rotary" or "none": the latent layers
    place their rotations themselves)."""
    if not isinstance(config, GPTConfig):
        raise TypeError(f"config must be a helpers.gpt.GPTConfig, got {type(config).__name__}")
    if not isinstance(latent, LatentConfig):
        raise TypeError(f"latent must be a LatentConfig, got {type(latent).__name__}")
    return replace(config, layer_kinds=("latent",) * config.num_layers, kind_settings={"latent": latent})


def latent_gpt(config: GPTConfig, latent: LatentConfig) -> GPT:
    """A ``helpers.gpt.GPT`` whose every layer is of kind "latent" (``MultiHeadLatentAttention``): ``GPT(all_latent(
    config, latent))``, nothing replaced after it is built. Its cache is the course's one ``KVCache``, each entry
    (c (N, T, d_c), k^R (N, T, d_R)) checked by the layer's kind, so ``new_cache``, ``generate`` and the cache's
    checks are the GPT's own."""
    return GPT(all_latent(config, latent))


def set_absorbed(model: GPT, absorbed: bool) -> GPT:
    """Every latent layer of ``model`` in the absorbed form (True) or the naive one (False); its other layers are
    left as they are. Returns the model. A model without a latent layer is refused (nothing would change)."""
    _check_flag("absorbed", absorbed)
    if not isinstance(model, GPT):
        raise TypeError(f"model must be a helpers.gpt.GPT, got {type(model).__name__}")
    latent = [layer for layer in model.attention_layers if isinstance(layer, MultiHeadLatentAttention)]
    if not latent:
        kinds = [layer.kind for layer in model.attention_layers]
        raise ValueError(f"the model has no latent layer to absorb (its kinds: {kinds})")
    for layer in latent:
        layer.absorbed = absorbed
    return model


# ---------------------------------------------------------------------------------------------
# From a trained GQA model to latent attention: exact, or compressed by a basis
# ---------------------------------------------------------------------------------------------
def latent_from_gqa(attention: CausalSelfAttention, basis: Tensor | None = None) -> MultiHeadLatentAttention:
    """Grouped-query attention rewritten as latent attention (``rotate_content=True``).

    The latent is the keys and values before rotary positions, stacked, 2·h_kv·d numbers, projected on
    ``basis`` (2·h_kv·d, r), orthonormal columns (None: the identity, an exact rewrite with d_c = 2·h_kv·d).
    W_DKV = basisᵀ [W_K; W_V]; the up-projections rebuild [k; v] ≈ basis c and hand query head i the block of
    its key/value head i // g (a block-identity when nothing is compressed)."""
    if not isinstance(attention, CausalSelfAttention):
        raise TypeError(f"attention must be a helpers.gpt.CausalSelfAttention, got {type(attention).__name__}")
    p, h, h_kv, d = attention.projections, attention.num_heads, attention.num_kv_heads, attention.head_dim
    width = 2 * h_kv * d
    weight = p.q_proj.weight
    if basis is None:
        basis = torch.eye(width, dtype=weight.dtype, device=weight.device)
    if not isinstance(basis, Tensor) or basis.dim() != 2 or basis.size(0) != width or not 1 <= basis.size(1) <= width:
        shape = tuple(basis.shape) if isinstance(basis, Tensor) else type(basis).__name__
        raise ValueError(f"basis must be (2·h_kv·d, r) = ({width}, r) with 1 <= r <= {width}, got {shape}")
    basis = basis.to(weight.dtype)
    rank = basis.size(1)
    config = LatentConfig(
        embed_dim=p.embed_dim, num_heads=h, head_dim=d, latent_dim=rank,
        rotate_content=attention.rotary, rotary_base=attention.rotary_base,
    )  # fmt: skip
    with torch.device(weight.device):
        latent = MultiHeadLatentAttention(config).to(weight.dtype)
    g = h // h_kv
    heads = torch.arange(h) // g  # the key/value head each query head reads
    key_rows, value_rows = basis[: h_kv * d].view(h_kv, d, rank), basis[h_kv * d :].view(h_kv, d, rank)
    with torch.no_grad():
        latent.kv_down.weight.copy_(basis.T @ torch.cat((p.k_proj.weight, p.v_proj.weight)))  # (r, E)
        latent.k_up.weight.copy_(key_rows[heads].reshape(h * d, rank))  # (h·d, r)
        latent.v_up.weight.copy_(value_rows[heads].reshape(h * d, rank))
        latent.q_proj.weight.copy_(p.q_proj.weight)
        latent.out_proj.weight.copy_(p.out_proj.weight)
    return latent.requires_grad_(weight.requires_grad)


def gpt_to_latent(model: GPT, bases: Sequence[Tensor | None] | None = None) -> GPT:
    """A GPT of latent layers (``latent_gpt``) whose layer i is ``latent_from_gqa(model's layer i, bases[i])``;
    every other weight is the model's own tensor (shared, not copied). All bases must have one rank r (the
    cache's d_c)."""
    if not isinstance(model, GPT):
        raise TypeError(f"model must be a helpers.gpt.GPT with grouped-query attention, got {type(model).__name__}")
    n = len(model.blocks)
    bases = [None] * n if bases is None else list(bases)
    if len(bases) != n:
        raise ValueError(f"one basis per layer: the model has {n} layers, got {len(bases)} bases")
    attentions = []
    for index, layer in enumerate(model.attention_layers):  # a latent layer, say, has no W_K or W_V to rewrite
        if not isinstance(layer, CausalSelfAttention):
            raise TypeError(
                f"model must be a helpers.gpt.GPT with grouped-query attention: layer {index} is of kind {layer.kind!r}"
            )
        if layer.kind != "global" or layer.window is not None:  # a latent layer reads every earlier token
            sees = f"a window of {layer.window} tokens" if layer.window is not None else "the keys it selects"
            raise ValueError(
                f"layer {index} (kind {layer.kind!r}) sees {sees}, but a latent layer sees every earlier token: "
                "the converted model would compute something else; convert a model of global layers"
            )
        attentions.append(layer)
    layers = [latent_from_gqa(attention, basis) for attention, basis in zip(attentions, bases, strict=True)]
    ranks = {layer.config.latent_dim for layer in layers}
    if len(ranks) != 1:
        raise ValueError(f"every layer's basis must have the same rank r (the cache's d_c), got ranks {sorted(ranks)}")
    with torch.device("meta"):
        converted = latent_gpt(model.config, layers[0].config)
    state = {name: t for name, t in model.state_dict().items() if ".attention." not in name}
    for i, layer in enumerate(layers):
        state |= {f"blocks.{i}.attention.{name}": t for name, t in layer.state_dict().items()}
    converted.load_state_dict(state, strict=True, assign=True)
    if model.config.tie_embeddings:
        converted.lm_head.weight = converted.token_embedding.weight
    return converted.eval().requires_grad_(False)


@torch.no_grad()
def record_keys_values(model: GPT, ids: Tensor) -> list[Tensor]:
    """Each layer's keys and values *before* rotary positions, side by side, for every token of ``ids``
    (N, T): a list of n_layers tensors (N·T, 2·h_kv·d), keys first. One forward pass, hooks on k_proj/v_proj."""
    recorded: dict[tuple[int, str], Tensor] = {}
    handles = []
    for i, block in enumerate(model.blocks):
        for name in ("k_proj", "v_proj"):

            def hook(module, args, output, key=(i, name)):
                recorded[key] = output.detach().flatten(0, 1)

            projections = cast(CausalSelfAttention, block.attention).projections
            handles.append(getattr(projections, name).register_forward_hook(hook))
    try:
        model(ids)
    finally:
        for handle in handles:
            handle.remove()
    return [torch.cat((recorded[(i, "k_proj")], recorded[(i, "v_proj")]), dim=1) for i in range(len(model.blocks))]


def pca_basis(activations: Tensor, rank: int) -> Tensor:
    """The rank-r subspace that keeps most of the activations (M, D): the top r right singular vectors,
    (D, r), orthonormal columns. Not centred: the latent must rebuild the keys and values themselves, mean
    included, with a linear map and no bias."""
    if not isinstance(activations, Tensor) or activations.dim() != 2:
        raise ValueError("activations must be (M, D): one row per token")
    if not activations.is_floating_point():
        raise TypeError(f"activations must be floating point, got {activations.dtype}")
    if not torch.isfinite(activations).all():
        bad = int((~torch.isfinite(activations)).any(dim=1).sum())
        raise ValueError(
            f"activations must be finite: {bad} of {activations.size(0)} rows hold NaN or inf (a basis of them "
            "would be NaN); record them again, or drop those rows"
        )
    _int_in("rank", rank, 1, activations.size(1), " (the activations' width D)")
    if activations.size(0) < rank:
        raise ValueError(f"a rank-{rank} basis needs at least {rank} rows (tokens), got {activations.size(0)}")
    _, _, vh = torch.linalg.svd(activations.double(), full_matrices=False)
    return vh[:rank].T.to(activations.dtype)
