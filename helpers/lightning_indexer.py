"""DeepSeek Sparse Attention (lesson 15): a lightning indexer picks each query's k keys, the attention reads those.

DeepSeek-V3.2 (DeepSeek-AI, 2025, "DeepSeek-V3.2-Exp: Boosting Long-Context Efficiency with DeepSeek Sparse
Attention") keeps V3's multi-head latent attention (lesson 11) and adds a small scorer in front of it, the
**lightning indexer**. For a query t and an earlier token s it computes

    I[t, s] = Σ_j w[t, j] · ReLU(q[t, j] · k[s])        (H_I indexer heads j, one key per token shared by all)

with its own small queries q[t, j] (d_I numbers per head), one key k[s] of d_I numbers per token, and a weight
w[t, j] per query and head read from the query's hidden state. It is cheap because it is narrow (DeepSeek: 64
heads of 128 against the attention's 128 heads of 192, and FP8), and because its ReLU scores need no softmax.
Each query then keeps the k = 2048 keys of highest I among itself and the keys before it
(``helpers.selection.causal_topk``), and the attention, every one of its heads, reads only those: one selection
per query, shared by the layer's heads.

Two classes, each a plain ``nn.Module`` over the course's pieces:

* ``LightningIndexer``: the scorer. ``index_keys`` is what a cache keeps per token (d_I numbers: the normed,
  rotated key), ``index_scores`` scores queries against such keys, **unmasked** (the causal mask and the choice
  of k are ``causal_topk``'s, not the indexer's).
* ``SparseLatentAttention``: V3.2's attention layer, ``helpers.latent_attention.MultiHeadLatentAttention`` with
  DeepSeek-V3's RMSNorms on its two latents and the indexer's choice added to its causal mask. Its queries'
  latent (transformers' ``q_resid``) is also what the indexer's query projection reads.

Rotary convention. ``helpers.rotary`` rotates *adjacent* pairs (2k, 2k + 1); DeepSeek's indexer (and
``transformers``' ``DeepseekV32Indexer``) rotates the first r features by *halves* (k with k + r / 2). The course
keeps its own convention everywhere, and ``indexer_from_transformers`` reorders the rotated features of the
query rows (per head), of the key rows, and of the key LayerNorm's weight and bias alike: queries and keys are
then theirs with the features stored in another order, and the dot products, so the scores, are unchanged.
(LayerNorm's mean and variance do not depend on the order; its weight and bias act feature by feature, so they
move with the features.) The MLA part needs no reordering: DeepSeek rotates its rope part by adjacent pairs.

Left out, as ``transformers`` leaves them out: the Hadamard rotation DeepSeek applies to q and k before
quantising them (orthogonal, so q · k is unchanged) and the FP8 arithmetic (a precision choice).

Shapes: N batch, L queries (this call's tokens), S keys (all tokens so far), E embedding size, H_I indexer heads,
d_I their head size, r the rotated features of each, d_q' what the indexer's queries read (the query latent),
k keys kept per query.
"""

from __future__ import annotations

import importlib
import math
from typing import Any

import torch
from torch import Tensor, nn

from helpers.attention import split_heads
from helpers.latent_attention import LatentConfig, MultiHeadLatentAttention
from helpers.masks import causal_mask_at, sdpa_mask
from helpers.norms import RMSNorm
from helpers.rotary import halves_to_pairs, rotary_cos_sin, rotate_first, rotate_pairs
from helpers.selection import causal_topk, check_budget, selected_mask

__all__ = [
    "LightningIndexer",
    "SparseLatentAttention",
    "indexer_from_transformers",
    "sparse_latent_attention_from_transformers",
]


def _positive_int(name: str, value, why: str = "") -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int{why}, got {value!r}")
    return value


def _shape(value) -> object:
    return tuple(value.shape) if isinstance(value, Tensor) else type(value).__name__


# ---------------------------------------------------------------------------------------------
# The indexer
# ---------------------------------------------------------------------------------------------
class LightningIndexer(nn.Module):
    """Scores every key for every query, I[n, t, s] = Σ_j w[n, t, j] · ReLU(q[n, t, j] · k[n, s]), scaled as
    DeepSeek does: the dot products by d_I^-½, the head weights by H_I^-½.

    Parameters (``nn.Linear`` without bias, rows = outputs):

    - ``query_proj`` (H_I·d_I, d_q'): the query input (V3.2: the attention's query latent) -> H_I queries;
    - ``key_proj`` (d_I, E) and ``key_norm`` (LayerNorm over d_I, with weight and bias): x -> one key per token;
    - ``weights_proj`` (H_I, E): x -> each query's weight per indexer head (may be negative).

    ``rotary_dim`` r (even, 0 .. d_I; None: half of d_I rounded down to even, V3.2's 64 of 128): the first r
    features of every query and key rotate by their token's position, in adjacent pairs (``helpers.rotary``); the
    other d_I - r carry no position. ``query_dim`` d_q' (None: E). ``norm_eps``: the key LayerNorm's.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int = 4,
        head_dim: int = 64,
        rotary_dim: int | None = None,
        query_dim: int | None = None,
        rotary_base: float = 10000.0,
        norm_eps: float = 1e-6,
    ) -> None:
        super().__init__()
        _positive_int("embed_dim", embed_dim, " (E, the hidden states' width)")
        _positive_int("num_heads", num_heads, " (H_I, the indexer's heads)")
        _positive_int("head_dim", head_dim, " (d_I, the indexer's query and key width)")
        query_dim = embed_dim if query_dim is None else _positive_int("query_dim", query_dim, " or None (E)")
        rotary_dim = head_dim // 4 * 2 if rotary_dim is None else rotary_dim
        if isinstance(rotary_dim, bool) or not isinstance(rotary_dim, int) or not 0 <= rotary_dim <= head_dim:
            raise ValueError(f"rotary_dim must be an int in 0 .. head_dim = {head_dim} (or None), got {rotary_dim!r}")
        if rotary_dim % 2:
            raise ValueError(f"rotary_dim must be even (rotary positions rotate pairs of features), got {rotary_dim}")
        if isinstance(rotary_base, bool) or not isinstance(rotary_base, int | float) or not 0 < rotary_base < math.inf:
            raise ValueError(f"rotary_base must be a finite positive number (θ_k = base^(-2k/r)), got {rotary_base!r}")
        self.embed_dim, self.num_heads, self.head_dim = embed_dim, num_heads, head_dim
        self.rotary_dim, self.query_dim, self.rotary_base = rotary_dim, query_dim, float(rotary_base)
        self.query_proj = nn.Linear(query_dim, num_heads * head_dim, bias=False)
        self.key_proj = nn.Linear(embed_dim, head_dim, bias=False)
        self.key_norm = nn.LayerNorm(head_dim, eps=norm_eps)
        self.weights_proj = nn.Linear(embed_dim, num_heads, bias=False)

    def extra_repr(self) -> str:
        return f"heads={self.num_heads}, head_dim={self.head_dim}, rotary_dim={self.rotary_dim}"

    # -- checks ---------------------------------------------------------------------------------
    def _check_hidden(self, x, name: str = "x") -> None:
        if not isinstance(x, Tensor) or x.dim() != 3 or x.size(-1) != self.embed_dim or not x.is_floating_point():
            raise ValueError(f"{name} must be a float tensor (N, L, E) with E = {self.embed_dim}, got {_shape(x)}")

    @staticmethod
    def _check_positions(positions, L: int) -> None:
        if not isinstance(positions, Tensor) or positions.is_floating_point() or positions.dtype == torch.bool:
            got = positions.dtype if isinstance(positions, Tensor) else type(positions).__name__
            raise TypeError(f"positions must be an integer tensor (L,) of token positions, got {got}")
        if tuple(positions.shape) != (L,):
            raise ValueError(f"positions must be (L,) = ({L},), one per token, got shape {tuple(positions.shape)}")

    # -- the two halves of a score ---------------------------------------------------------------
    def _rotate(self, features: Tensor, positions: Tensor) -> Tensor:
        """features (..., L, d_I) -> the same with the first r rotated by their positions (L,), adjacent pairs."""
        if self.rotary_dim == 0:
            return features
        cos, sin = rotary_cos_sin(positions, self.rotary_dim, self.rotary_base, features.dtype)
        return rotate_first(features, cos.to(features.device), sin.to(features.device), self.rotary_dim)

    def index_keys(self, x: Tensor, positions: Tensor) -> Tensor:
        """x (N, L, E) at ``positions`` (L,) -> keys (N, L, d_I): normed, the first r features rotated. What a
        cache keeps: d_I numbers per token, read by every later query."""
        self._check_hidden(x)
        self._check_positions(positions, x.size(1))
        return self._rotate(self.key_norm(self.key_proj(x)), positions)

    def index_queries(self, query_input: Tensor, positions: Tensor) -> Tensor:
        """query_input (N, L, d_q') at ``positions`` (L,) -> queries (N, H_I, L, d_I), the first r rotated."""
        return self._rotate(split_heads(self.query_proj(query_input), self.num_heads), positions)

    def index_scores(self, x: Tensor, keys: Tensor, positions: Tensor, query_input: Tensor | None = None) -> Tensor:
        """Scores (N, L, S), **not masked**: query t (hidden state x[:, t], at positions[t]) against every key.

        x (N, L, E): the queries' hidden states (they give the head weights w); keys (N, S, d_I) from
        ``index_keys``; positions (L,) the queries'; query_input (N, L, d_q'), what the query projection reads
        (V3.2: the attention's query latent; default x). Computed in float32 at least (DeepSeek: FP8)."""
        self._check_hidden(x)
        N, L = x.shape[:2]
        self._check_positions(positions, L)
        query_input = x if query_input is None else query_input
        if not isinstance(query_input, Tensor) or tuple(query_input.shape) != (N, L, self.query_dim):
            raise ValueError(
                f"query_input must be (N, L, d_q') = ({N}, {L}, {self.query_dim}) like x's (N, L), got "
                f"{_shape(query_input)}"
            )
        if not isinstance(keys, Tensor) or keys.dim() != 3 or keys.size(0) != N or keys.size(-1) != self.head_dim:
            raise ValueError(
                f"keys must be (N, S, d_I) = ({N}, S, {self.head_dim}) from index_keys, got {_shape(keys)}"
            )
        wide = torch.promote_types(x.dtype, torch.float32)  # half-precision scores would round near-ties apart
        queries = self.index_queries(query_input, positions).to(wide)  # (N, H_I, L, d_I)
        per_head = torch.einsum("njld,nsd->njls", queries, keys.to(wide)) * self.head_dim**-0.5  # (N, H_I, L, S)
        weights = self.weights_proj(x).to(wide) * self.num_heads**-0.5  # (N, L, H_I)
        return torch.einsum("nlj,njls->nls", weights, per_head.relu())

    def forward(self, x: Tensor, positions: Tensor, query_input: Tensor | None = None) -> Tensor:
        """A prefill: the L tokens of x (N, L, E) at ``positions`` (L,) scored against each other, (N, L, L),
        unmasked (``helpers.selection.causal_topk`` masks the future before it chooses)."""
        return self.index_scores(x, self.index_keys(x, positions), positions, query_input)

    def cache_numbers_per_token(self) -> int:
        """d_I: the one key per token the indexer's cache keeps (beside the attention's own cache)."""
        return self.head_dim


# ---------------------------------------------------------------------------------------------
# The attention layer: DeepSeek-V3's latent attention reading the indexer's choice
# ---------------------------------------------------------------------------------------------
class SparseLatentAttention(MultiHeadLatentAttention):
    """DeepSeek-V3.2's attention: latent attention whose every query reads only the k keys its indexer chose.

    The layer of lesson 11 (``MultiHeadLatentAttention``, its projections, decoupled rotary key and absorbed
    form) with what DeepSeek-V3 adds and V3.2 keeps: an RMSNorm on the query latent (``query_norm``, d_c') and
    one on the KV latent (``latent_norm``, d_c), before their up-projections; and a ``LightningIndexer``
    (``indexer``) that reads x and the normed query latent. The attention's mask is the causal one **and** the
    indexer's choice (``causal_topk`` of its scores, ``index_topk`` keys per query, shared by all the heads).

    ``config`` must compress the queries (``query_latent_dim``) and place positions by a decoupled rotary key
    (``rotate_content=False``). The indexer rotates the same r = ``rotary_dim`` features at the same base.
    A prefill only (no cache): ``forward(x, positions)`` with positions 0 .. L - 1. Hence not a kind of
    ``helpers.gpt.GPT`` layer, though it inherits the parent's: it is not registered, and a GPT never builds it.
    """

    def __init__(
        self,
        config: LatentConfig,
        index_topk: int,
        index_heads: int = 4,
        index_head_dim: int = 64,
        norm_eps: float = 1e-6,
    ) -> None:
        if not isinstance(config, LatentConfig):
            raise TypeError(f"config must be a LatentConfig, got {type(config).__name__}")
        if config.query_latent_dim is None or config.rotate_content:
            raise ValueError(
                "DeepSeek-V3's attention compresses its queries (the indexer reads that latent) and rotates a "
                "decoupled key: config needs query_latent_dim (d_c') set and rotate_content=False, got "
                f"query_latent_dim={config.query_latent_dim}, rotate_content={config.rotate_content}"
            )
        super().__init__(config)
        self.index_topk = check_budget(index_topk, "index_topk")
        self.query_norm = RMSNorm(config.query_latent_dim, eps=norm_eps)
        self.latent_norm = RMSNorm(config.latent_dim, eps=norm_eps)
        self.indexer = LightningIndexer(
            config.embed_dim, index_heads, index_head_dim, rotary_dim=config.rotary_dim,
            query_dim=config.query_latent_dim, rotary_base=config.rotary_base, norm_eps=norm_eps,
        )  # fmt: skip

    # The two latents, normed: every form of the parent (naive, absorbed) reads them through these.
    def _query_input(self, x: Tensor) -> Tensor:
        """x (N, L, E) -> the normed query latent (N, L, d_c') (transformers' ``q_resid``)."""
        return self.query_norm(self.q_down(x))

    def latent(self, x: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        """x (N, L, E) -> (the normed latent c (N, L, d_c), the rotated rotary key (N, L, d_R))."""
        c, key_rope = super().latent(x, positions)
        return self.latent_norm(c), key_rope

    def select_keys(self, x: Tensor, positions: Tensor | None = None) -> Tensor:
        """The keys each query reads: x (N, L, E) -> indices (N, L, k), best first, -1 = no key."""
        positions = self._check_positions(positions, 0, self._checked(x))
        return self._select(x, positions, self._query_input(x))

    def _select(self, x: Tensor, positions: Tensor, query_latent: Tensor) -> Tensor:
        return causal_topk(self.indexer(x, positions, query_latent), self.index_topk, positions)

    def _checked(self, x) -> Tensor:
        if not isinstance(x, Tensor) or x.dim() != 3 or x.size(-1) != self.config.embed_dim:
            raise ValueError(f"x must be (N, L, E) with E = {self.config.embed_dim}, got {_shape(x)}")
        return x

    def forward(  # type: ignore[override]  # a prefill: no cache, no GPT layer contract
        self,
        x: Tensor,
        positions: Tensor | None = None,
        *,
        return_indices: bool = False,
        absorbed: bool | None = None,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """x (N, L, E) at ``positions`` (L,) = 0 .. L - 1 (the default) -> out (N, L, E), or (out, indices
        (N, L, k)) with ``return_indices``. ``absorbed`` picks the form for this call (None: the attribute)."""
        cfg = self.config
        positions = self._check_positions(positions, 0, self._checked(x))
        absorbed = self.absorbed if absorbed is None else absorbed
        if not isinstance(absorbed, bool):
            raise TypeError(f"absorbed must be True or False (or None), got {absorbed!r}")
        query_latent = self._query_input(x)  # (N, L, d_c')
        c, key_rope = self.latent(x, positions)  # (N, L, d_c), (N, L, d_R)
        indices = self._select(x, positions, query_latent)  # (N, L, k)
        L = x.size(1)
        # causal_topk never names a later key; the causal mask is kept anyway so that no choice can read the future.
        may_attend = selected_mask(indices, L)[:, None] & sdpa_mask(causal_mask_at(positions, L))  # (N, 1, L, L)
        q_rope = None
        if self.q_rope is not None:
            rotation = self._rotation(positions, cfg.rotary_dim, x.dtype)
            q_rope = rotate_pairs(split_heads(self.q_rope(query_latent), cfg.num_heads), *rotation)
        attend_in_form = self._absorbed if absorbed else self._naive
        out, _ = attend_in_form(query_latent, q_rope, c, key_rope, positions, may_attend, cfg.score_dim**-0.5)
        return (out, indices) if return_indices else out

    def cache_numbers_per_token(self) -> int:
        """d_c + d_R for the attention, d_I for the indexer's key."""
        return super().cache_numbers_per_token() + self.indexer.cache_numbers_per_token()


# ---------------------------------------------------------------------------------------------
# From transformers' DeepSeek-V3.2 modules
# ---------------------------------------------------------------------------------------------
_MODELING = "transformers.models.deepseek_v32.modeling_deepseek_v32"


def _check_kind(reference, class_name: str, function: str) -> None:
    cls = getattr(importlib.import_module(_MODELING), class_name)  # here: helpers loads transformers lazily
    if not isinstance(reference, cls):
        raise TypeError(f"{function} expects transformers' {class_name}, got {type(reference).__name__}")


def _rotary_base(config, function: str) -> float:
    """rope_theta, refusing a scaled rotary (V3.2's released "yarn"): ours rotates by plain RoPE."""
    rope = dict(getattr(config, "rope_parameters", None) or {})
    if rope.get("rope_type", "default") != "default":
        raise ValueError(
            f"{function} carries plain RoPE only (rope_type 'default'), got rope_type {rope['rope_type']!r}: its "
            "angles and its attention scale would differ"
        )
    return float(rope.get("rope_theta", 10000.0))


def _copy(target: Tensor, source: Tensor, name: str) -> None:
    if tuple(source.shape) != tuple(target.shape):
        raise ValueError(f"their {name} has shape {tuple(source.shape)}, the config's sizes give {tuple(target.shape)}")
    with torch.no_grad():
        target.copy_(source)


def indexer_from_transformers(reference: Any) -> LightningIndexer:
    """The course's ``LightningIndexer`` equal to transformers' ``DeepseekV32Indexer``: same sizes and weights,
    the rotated features of wq_b's rows (per head), wk's rows and k_norm's weight and bias reordered from halves
    to adjacent pairs (see the module's docstring). Its keys are theirs in that order; its scores are theirs."""
    _check_kind(reference, "DeepseekV32Indexer", "indexer_from_transformers")
    H, d, r = reference.n_heads, reference.head_dim, reference.qk_rope_head_dim
    weight = reference.wk.weight
    with torch.device(weight.device):
        ours = LightningIndexer(
            reference.hidden_size, H, d, rotary_dim=r, query_dim=reference.q_lora_rank,
            rotary_base=_rotary_base(reference.config, "indexer_from_transformers"), norm_eps=reference.k_norm.eps,
        ).to(weight.dtype)  # fmt: skip
    _copy(ours.query_proj.weight, halves_to_pairs(reference.wq_b.weight, d, r), "wq_b.weight")
    _copy(ours.key_proj.weight, halves_to_pairs(weight, d, r), "wk.weight")
    _copy(ours.key_norm.weight, halves_to_pairs(reference.k_norm.weight, d, r), "k_norm.weight")
    _copy(ours.key_norm.bias, halves_to_pairs(reference.k_norm.bias, d, r), "k_norm.bias")
    _copy(ours.weights_proj.weight, reference.weights_proj.weight, "weights_proj.weight")
    return ours.train(reference.training).requires_grad_(weight.requires_grad)


def sparse_latent_attention_from_transformers(reference: Any) -> SparseLatentAttention:
    """The course's ``SparseLatentAttention`` equal to transformers' ``DeepseekV32Attention`` (its indexer too).

    Theirs packs what ours keeps apart: q_b_proj (h·(d + d_R), d_c') is per head d content rows then d_R rotary
    ones (ours: q_up, q_rope); kv_a_proj_with_mqa (d_c + d_R, E) the latent then the rotary key (kv_down,
    k_rope); kv_b_proj (h·(d + d_v), d_c) per head d key rows then d_v value rows (k_up, v_up). Refuses biases,
    dropout, a scaled rotary and d_v ≠ d (lesson 11's layer has one head size for content keys and values)."""
    _check_kind(reference, "DeepseekV32Attention", "sparse_latent_attention_from_transformers")
    config = reference.config
    function = "sparse_latent_attention_from_transformers"
    if config.attention_bias or config.attention_dropout:
        raise ValueError(
            f"{function}: the course's latent attention has no biases and no dropout, got attention_bias="
            f"{config.attention_bias}, attention_dropout={config.attention_dropout}"
        )
    h, d, d_rope, d_v = config.num_attention_heads, config.qk_nope_head_dim, config.qk_rope_head_dim, config.v_head_dim
    if d_v != d:
        raise ValueError(f"{function} needs v_head_dim = qk_nope_head_dim (one head size d), got {d_v} and {d}")
    latent = LatentConfig(
        embed_dim=config.hidden_size, num_heads=h, head_dim=d, latent_dim=config.kv_lora_rank, rotary_dim=d_rope,
        query_latent_dim=config.q_lora_rank, rotary_base=_rotary_base(config, function),
    )  # fmt: skip
    weight = reference.o_proj.weight
    with torch.device(weight.device):
        ours = SparseLatentAttention(
            latent, config.index_topk, config.index_n_heads, config.index_head_dim,
            norm_eps=reference.q_a_layernorm.variance_epsilon,
        ).to(weight.dtype)  # fmt: skip
    ours.latent_norm.eps = float(reference.kv_a_layernorm.variance_epsilon)
    ours.indexer = indexer_from_transformers(reference.indexer)
    d_c, d_q = config.kv_lora_rank, config.q_lora_rank
    query_rows = reference.q_b_proj.weight.view(h, d + d_rope, d_q)
    key_value_rows = reference.kv_b_proj.weight.view(h, d + d_v, d_c)
    latent_rows = reference.kv_a_proj_with_mqa.weight
    _copy(ours.q_down.weight, reference.q_a_proj.weight, "q_a_proj.weight")
    _copy(ours.query_norm.weight, reference.q_a_layernorm.weight, "q_a_layernorm.weight")
    _copy(ours.q_up.weight, query_rows[:, :d].reshape(h * d, d_q), "q_b_proj.weight's content rows")
    _copy(ours.get_parameter("q_rope.weight"), query_rows[:, d:].reshape(h * d_rope, d_q), "q_b_proj's rotary rows")
    _copy(ours.kv_down.weight, latent_rows[:d_c], "kv_a_proj_with_mqa.weight's latent rows")
    _copy(ours.get_parameter("k_rope.weight"), latent_rows[d_c:], "kv_a_proj_with_mqa.weight's rotary rows")
    _copy(ours.latent_norm.weight, reference.kv_a_layernorm.weight, "kv_a_layernorm.weight")
    _copy(ours.k_up.weight, key_value_rows[:, :d].reshape(h * d, d_c), "kv_b_proj.weight's key rows")
    _copy(ours.v_up.weight, key_value_rows[:, d:].reshape(h * d_v, d_c), "kv_b_proj.weight's value rows")
    _copy(ours.out_proj.weight, weight, "o_proj.weight")
    return ours.train(reference.training).requires_grad_(weight.requires_grad)
