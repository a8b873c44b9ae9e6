"""Top-k attention as a kind of ``GPT`` layer, "topk": DeepSeek Sparse Attention's shape (lesson 15).

A "topk" layer is the global layer (``helpers.gpt.CausalSelfAttention``: its projections, QK-norm, partial
rotary, output gate and query scale, inherited) with another middle. A lightning indexer
(``helpers.lightning_indexer``: a few small heads, one index key of c numbers per token) scores every key a query
may read; ``helpers.selection.causal_topk`` keeps each query's k best (the future masked before the choice); and
the layer's h heads attend over those k keys only, **one selection shared by all the heads** (DeepSeek-V3.2's
DSA). The attention gathers each query's k keys and values (``topk_attention_gather``): its scores are h·L·k
numbers, never h·L·T. The indexer's own scores are one (L, T) table per sequence, with no head axis: cheap next
to h heads of d, but still quadratic, as in DSA. The choice passes no gradient: training the model leaves the
indexer as it is, and DSA trains it apart, towards the heads' summed attention (``selection.summed_attention``).

Settings come from ``GPTConfig.kind_settings["topk"]``, a ``TopKSettings``: the budget k and the indexer's sizes.
The cache entry is (keys, values, index keys), (N, h_kv, T, d) twice and (N, T, c): every earlier token stays
readable (a later query may choose any of them), so a rolling cache keeps all of them.

Shapes, in the course notation: N batch, L new tokens in this call, T tokens so far (cache plus L), E embedding
size, h query heads, h_kv key/value heads, d head size, k keys kept per query, c the indexer's key width.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from helpers.gpt import CausalSelfAttention, GPTConfig
from helpers.kernels.topk_reference import topk_attention_gather
from helpers.kv_cache import extend
from helpers.layer_kind import check_entry_placed, register_kind
from helpers.lightning_indexer import LightningIndexer
from helpers.selection import causal_topk, selected_mask

__all__ = ["TopKAttention", "TopKSettings"]


def _positive_int(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"TopKSettings.{name} must be a positive int, got {value!r:.60}")


@dataclass(frozen=True)
class TopKSettings:
    """What a "topk" layer reads from ``kind_settings["topk"]``: ``k`` keys kept per query; the lightning
    indexer's ``indexer_heads`` heads of ``indexer_dim`` (c) features each, of which the first
    ``indexer_rotary_dim`` rotate (even, 0 .. c; None: the indexer's default, half of c as in V3.2)."""

    k: int
    indexer_heads: int = 4
    indexer_dim: int = 32
    indexer_rotary_dim: int | None = None

    def __post_init__(self) -> None:
        for name in ("k", "indexer_heads", "indexer_dim"):
            _positive_int(name, getattr(self, name))
        rotary = self.indexer_rotary_dim
        if rotary is not None and (
            isinstance(rotary, bool) or not isinstance(rotary, int) or not 0 <= rotary <= self.indexer_dim or rotary % 2
        ):
            raise ValueError(
                f"TopKSettings.indexer_rotary_dim must be None or an even int in 0 .. indexer_dim = "
                f"{self.indexer_dim} (rotary positions rotate pairs), got {rotary!r:.60}"
            )


@register_kind("topk")
class TopKAttention(CausalSelfAttention):
    """The kind "topk": x (N, L, E) -> (N, L, E), each query attending over the k earlier keys its indexer scores
    highest (see the module's docstring). Its cache entry is (keys, values, index_keys): (N, h_kv, T, d) twice
    and (N, T, c)."""

    # Sinks are refused: the gathered softmax (topk_attention_gather) has no sink column, so a sink would hold only
    # where the weights are spelled out (need_weights) and the two paths would disagree.
    carries = frozenset({"qk_norm", "output_gate", "query_scale", "rotary_fraction"})
    takes_a_window = False  # the selection, not a window, limits what it reads (made_local refuses it)

    @classmethod
    def check_config(cls, config: GPTConfig, layer: int) -> None:
        cls.settings_in(config, layer)

    @staticmethod
    def settings_in(config: GPTConfig, layer: int) -> TopKSettings:
        """Layer ``layer``'s settings, ``config.kind_settings["topk"]``; refused unless a ``TopKSettings``."""
        settings = (config.kind_settings or {}).get("topk")
        if not isinstance(settings, TopKSettings):
            raise ValueError(
                f"layer {layer} is top-k attention: its settings come from kind_settings['topk'], a "
                f"TopKSettings(k, indexer_heads=4, indexer_dim=32, indexer_rotary_dim=None); got "
                f"{type(settings).__name__}"
            )
        return settings

    @classmethod
    def from_config(cls, config: GPTConfig, layer: int) -> TopKAttention:
        return cls(config, layer)

    def __init__(self, config: GPTConfig, layer: int = 0) -> None:
        self.refuse_switches(config, layer)  # also when built outside a GPT: before the front end is made
        super().__init__(config, layer)
        settings = self.settings_in(config, layer)
        self.top_k, self.indexer_dim = settings.k, settings.indexer_dim
        self.indexer = LightningIndexer(
            config.embed_dim,
            num_heads=settings.indexer_heads,
            head_dim=settings.indexer_dim,
            rotary_dim=settings.indexer_rotary_dim,
            rotary_base=config.rotary_base,
            norm_eps=config.norm_eps,
        )

    def forward(  # type: ignore[override]  # its cache entry is a triple, the global layer's a pair
        self,
        x: Tensor,
        positions: Tensor,
        past: tuple[Tensor, ...] | None = None,
        need_weights: bool = False,
        rotation: tuple[Tensor, Tensor] | None = None,
    ) -> tuple[Tensor, tuple[Tensor, ...]] | tuple[Tensor, tuple[Tensor, ...], Tensor]:
        """x (N, L, E) at ``positions`` (L,); ``past`` the (keys, values, index_keys) of the P tokens before these,
        or None; ``rotation`` the positions' (cos, sin) for the front end, or None.

        Returns the output (N, L, E) and the entry of the P + L tokens; with ``need_weights`` also the weights
        (N, h, L, P + L), zero outside each query's selection."""
        q, k, v = self._project(x, positions, rotation)  # rotated before caching, as the global layer's
        index_keys = self.indexer.index_keys(x, positions)  # (N, L, c)
        kept = 0 if past is None else past[0].size(2)  # P
        k, v, index_keys = extend(past, (k, v, index_keys))  # (N, h_kv, T, d) twice, (N, T, c)
        local_positions = positions - (positions[0] - kept)  # the queries' places among the kept keys
        indices = self.select(x, index_keys, positions, local_positions)  # (N, L, k)
        heads, weights = self._attend_selected(q, k, v, indices, need_weights, positions)
        out, present = self._finish(heads, x), (k, v, index_keys)
        if not need_weights:
            return out, present
        assert weights is not None, "attend_heads returns the weights when asked"
        return out, present, weights

    def select(self, x: Tensor, index_keys: Tensor, positions: Tensor, local_positions: Tensor) -> Tensor:
        """The keys each query reads: indices (N, L, k) into the T kept keys, best first, -1 for none.

        x (N, L, E) the new tokens, ``index_keys`` (N, T, c) every kept token's, ``positions`` (L,) the queries'
        positions in the sequence (for the indexer's rotation), ``local_positions`` (L,) among the kept keys."""
        scores = self.indexer.index_scores(x, index_keys, positions)  # (N, L, T), not yet causal
        return causal_topk(scores, self.top_k, local_positions)

    def _attend_selected(
        self, q: Tensor, k: Tensor, v: Tensor, indices: Tensor, need_weights: bool, positions: Tensor
    ) -> tuple[Tensor, Tensor | None]:
        """q (N, h, L, d) over its selected keys of k, v (N, h_kv, T, d) -> (heads (N, h, L, d), weights or None).

        Gathered, T·k per head. The weights (N, h, L, T) are spelled out only when asked, or when a
        ``weights_from_scores`` experiment replaces the softmax (it reads scores over all T keys): the attention
        core then runs over every key with the unselected ones blocked, the same numbers (tested)."""
        if need_weights or self.weights_from_scores is not None:
            may_attend = selected_mask(indices, k.size(2))[:, None]  # (N, 1, L, T): every head reads the same keys
            return self.attend_heads(
                q, k, v, may_attend, need_weights=need_weights, positions=positions, scale=self.scale
            )
        shared = indices[:, None].expand(-1, self.num_kv_heads, -1, -1)  # (N, h_kv, L, k): a group reads its head's
        return topk_attention_gather(q, k, v, shared, self.scale), None

    # -- its cache entry, as a kind of GPT layer --------------------------------------------------
    def check_entry(self, entry, N: int, length: int, kept: int, weight: Tensor, layer: int) -> None:
        """The entry (keys, values, index_keys): (N, h_kv, kept, d) twice and (N, kept, c), in the model's dtype
        and on its device."""
        expected = (
            f"keys and values (N, h_kv, T, d) = ({N}, {self.num_kv_heads}, {kept}, {self.head_dim}) and index_keys "
            f"(N, T, c) = ({N}, {kept}, {self.indexer_dim})"
        )
        if not (isinstance(entry, tuple) and len(entry) == 3 and all(isinstance(t, Tensor) for t in entry)):
            raise TypeError(
                f"cache layer {layer} is of kind 'topk': its entry is a (keys, values, index_keys) triple of tensors, "
                f"{expected}; got {entry!r:.80}"
            )
        super().check_entry(entry[:2], N, length, kept, weight, layer)
        index_keys = entry[2]
        if tuple(index_keys.shape) != (N, kept, self.indexer_dim):
            raise ValueError(
                f"cache layer {layer} holds index_keys of shape {tuple(index_keys.shape)} but this call needs "
                f"{expected}: a cache serves one model and one batch; make one with model.new_cache()"
            )
        check_entry_placed(index_keys, "index_keys", weight, layer)

    def rolling_keep(self) -> int | None:
        """None: a later query may select any earlier key, so a rolling cache keeps every token."""
        return None

    def cache_numbers_per_token(self) -> int:
        """2 · h_kv · d + c: a key and a value per key/value head, and the indexer's key."""
        return 2 * self.num_kv_heads * self.head_dim + self.indexer.cache_numbers_per_token()
