"""Transformer layers you can look inside: a decoder layer that records per-head attention.

``InspectableDecoderLayer`` is ``torch.nn.TransformerDecoderLayer`` with one addition: after each
forward pass it keeps the attention weights of **every head** of its masked self-attention and of
its cross-attention over the encoder's memory. Everything else (constructor, parameters, state
dict, ``forward`` signature, the one tensor it returns) is the stock layer's, so it drops into
``nn.TransformerDecoder`` and ``nn.Transformer(custom_decoder=...)`` unchanged.

Shapes (course notation): N batch, L target length, S source (memory) length, E = d_model, h heads.

    layer.self_attn_weights   (N, h, L, L)   who each target token looked at among the targets
    layer.cross_attn_weights  (N, h, L, S)   who each target token looked at in the source

(For unbatched 2-D inputs the N dimension is absent, as in ``nn.MultiheadAttention``.)
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import Tensor, nn

__all__ = ["InspectableDecoderLayer", "cross_attention_weights", "recording", "self_attention_weights"]


class InspectableDecoderLayer(nn.TransformerDecoderLayer):
    """A ``nn.TransformerDecoderLayer`` that records each pass's per-head attention weights.

    Same constructor as ``nn.TransformerDecoderLayer`` plus ``record`` (default True). The layer
    overrides only the two attention sub-blocks (``_sa_block`` and ``_mha_block``); the stock
    ``forward`` (residuals, norms in post- or pre-norm order, feed-forward, the ``tgt_is_causal`` and
    ``memory_is_causal`` hints) runs untouched.

    After a forward pass with ``record`` on:
        ``self_attn_weights``:  (N, h, L, L), masked self-attention, one matrix per head.
        ``cross_attn_weights``: (N, h, L, S), cross-attention over the memory, one per head.
    Both are detached copies (they hold no autograd graph) and are replaced by the next pass.
    They are the weights actually used, i.e. after attention dropout when the layer trains with
    dropout > 0. With ``record`` off the attention runs exactly as in the stock layer
    (``need_weights=False``, torch's fused kernel) and both attributes are ``None``, so no weights
    from an earlier pass linger. ``clear_records()`` drops them on demand.

    For decoding, ``forward_step`` runs the layer for the newest target position only, reusing a
    cache of the earlier positions' inputs (what their keys and values are made from).

    Inside ``nn.TransformerDecoder`` the layer is deep-copied ``num_layers`` times: read the records
    from ``decoder.layers[i]`` (or all at once with ``cross_attention_weights(decoder)``).

    Known difference: a query whose every key is masked gets NaN weights and a NaN output when
    recording (torch's weight-returning path), while the stock layer's fused kernel can return
    zeros for it. Real padding never blocks a whole row unless a sequence is entirely padding.
    """

    self_attn_weights: Tensor | None
    cross_attn_weights: Tensor | None

    def __init__(self, *args, record: bool = True, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.record = record
        self.self_attn_weights = None
        self.cross_attn_weights = None

    def __setstate__(self, state: dict) -> None:
        # Pickles written before `record` existed still load, recording on.
        state.setdefault("record", True)
        state.setdefault("self_attn_weights", None)
        state.setdefault("cross_attn_weights", None)
        super().__setstate__(state)

    def clear_records(self) -> None:
        """Forget the weights recorded by the last pass."""
        self.self_attn_weights = None
        self.cross_attn_weights = None

    # -- the two attention sub-blocks of nn.TransformerDecoderLayer, now keeping their weights ------
    def _sa_block(
        self,
        x: Tensor,
        attn_mask: Tensor | None,
        key_padding_mask: Tensor | None,
        is_causal: bool = False,
    ) -> Tensor:
        """Masked self-attention over the target: x (L, N, E) or (N, L, E) -> same shape."""
        if not self.record:
            self.self_attn_weights = None
            return super()._sa_block(x, attn_mask, key_padding_mask, is_causal)
        out, weights = self.self_attn(
            x,
            x,
            x,
            attn_mask=attn_mask,
            key_padding_mask=key_padding_mask,
            is_causal=is_causal,
            need_weights=True,
            average_attn_weights=False,  # keep the heads apart: (N, h, L, L)
        )
        self.self_attn_weights = weights.detach()  # no graph kept alive between passes
        return self.dropout1(out)

    def _mha_block(
        self,
        x: Tensor,
        mem: Tensor,
        attn_mask: Tensor | None,
        key_padding_mask: Tensor | None,
        is_causal: bool = False,
    ) -> Tensor:
        """Cross-attention: target queries x over the encoder's memory mem -> x's shape."""
        if not self.record:
            self.cross_attn_weights = None
            return super()._mha_block(x, mem, attn_mask, key_padding_mask, is_causal)
        out, weights = self.multihead_attn(
            x,
            mem,
            mem,
            attn_mask=attn_mask,
            key_padding_mask=key_padding_mask,
            is_causal=is_causal,
            need_weights=True,
            average_attn_weights=False,  # keep the heads apart: (N, h, L, S)
        )
        self.cross_attn_weights = weights.detach()
        return self.dropout2(out)

    # -- one position at a time, for decoding ----------------------------------------------------
    def forward_step(
        self, x: Tensor, past: Tensor | None, memory: Tensor, memory_key_padding_mask: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """The layer's output for the newest target position only, reusing what earlier positions left.

        x (N, 1, E): the newest position's input. past (N, t, E) or None: the inputs of the layer's
        self-attention at the t earlier positions, as returned by the previous step. Returns the
        output (N, 1, E), equal to row t of ``forward`` on all t + 1 positions with a causal mask,
        and the new cache (N, t + 1, E) for the next step.

        Why this is all a step needs: with a causal mask, earlier positions never see later ones, so
        their outputs do not change when a token is added; the new position needs only their keys
        and values, which come from its self-attention's inputs. Everything else (cross-attention,
        feed-forward) is per position. Batch first only; no masks besides the memory's padding (a
        sequence being decoded has no padding of its own).
        """
        if not self.self_attn.batch_first:
            raise ValueError("forward_step needs a batch-first layer (batch_first=True)")
        if x.dim() != 3 or x.size(1) != 1:
            raise ValueError(
                f"forward_step takes one position per sequence, x of shape (N, 1, E); got {tuple(x.shape)}"
            )
        if self.norm_first:
            h = self.norm1(x)
            seen = h if past is None else torch.cat([past, h], dim=1)  # (N, t+1, E)
            x = x + self.dropout1(self.self_attn(h, seen, seen, need_weights=False)[0])
            x = x + self._mha_block(self.norm2(x), memory, None, memory_key_padding_mask)
            x = x + self._ff_block(self.norm3(x))
        else:
            seen = x if past is None else torch.cat([past, x], dim=1)  # (N, t+1, E)
            x = self.norm1(x + self.dropout1(self.self_attn(x, seen, seen, need_weights=False)[0]))
            x = self.norm2(x + self._mha_block(x, memory, None, memory_key_padding_mask))
            x = self.norm3(x + self._ff_block(x))
        return x, seen


def _inspectable_layers(module: nn.Module) -> list[InspectableDecoderLayer]:
    layers = [m for m in module.modules() if isinstance(m, InspectableDecoderLayer)]
    if not layers:
        raise ValueError(
            f"{type(module).__name__} contains no InspectableDecoderLayer; build the decoder with "
            "nn.TransformerDecoder(InspectableDecoderLayer(...), num_layers)"
        )
    return layers


@contextmanager
def recording(module: nn.Module, enabled: bool = True) -> Iterator[None]:
    """Switch recording on (or off) for every ``InspectableDecoderLayer`` inside ``module``.

    The previous setting of each layer comes back on exit, e.g. train with recording off and
    record only while translating the sentences you want to plot::

        with recording(model):
            model(src, tgt, ...)
    """
    layers = _inspectable_layers(module)
    before = [layer.record for layer in layers]
    for layer in layers:
        layer.record = enabled
    try:
        yield
    finally:
        for layer, setting in zip(layers, before):
            layer.record = setting


def _stack_records(module: nn.Module, attribute: str) -> Tensor:
    layers = _inspectable_layers(module)
    records = [getattr(layer, attribute) for layer in layers]
    missing = [i for i, r in enumerate(records) if r is None]
    if missing:
        raise ValueError(
            f"layers {missing} hold no {attribute}: run a forward pass with recording on first "
            "(layer.record = True, or `with recording(model):`)"
        )
    return torch.stack(records)


def cross_attention_weights(module: nn.Module) -> Tensor:
    """Every layer's recorded cross-attention, stacked: (layers, N, h, L, S), in module order."""
    return _stack_records(module, "cross_attn_weights")


def self_attention_weights(module: nn.Module) -> Tensor:
    """Every layer's recorded masked self-attention, stacked: (layers, N, h, L, L)."""
    return _stack_records(module, "self_attn_weights")
