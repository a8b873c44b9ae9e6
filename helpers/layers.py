"""Transformer layers built from the course's own ``MultiHeadAttention``, with decoders you can look inside.

Lesson 05 assembles these layers from their parts; this module holds the graduated versions that lesson 06's
translator is made of:

    EncoderLayer             self-attention + feed-forward            == nn.TransformerEncoderLayer
    InspectableDecoderLayer  masked self-attention + cross-attention  == nn.TransformerDecoderLayer,
                             + feed-forward, recording per-head weights
    Encoder, Decoder         a stack of copies of one layer, then an optional final LayerNorm
    Transformer              Encoder + Decoder                        == nn.Transformer

Every attention is ``helpers.MultiHeadAttention``. Constructor arguments, attribute names (``self_attn``,
``multihead_attn``, ``linear1``, ``norm1``, ...), state-dict keys and ``forward`` arguments are PyTorch's, so a
state dict moves between each class and its ``torch.nn`` counterpart in both directions, and the layers also run
inside ``nn.TransformerEncoder`` / ``nn.TransformerDecoder``. That is why these drop-ins keep torch's names for
the sizes (``d_model`` = E, ``nhead`` = h, ``dim_feedforward`` = F) where the course's own configs say
``embed_dim``, ``num_heads`` and ``ff_dim``.

Shapes (course notation): N batch, L target length, S source (memory) length, E = d_model, h heads.
Masks follow ``nn.MultiheadAttention``: boolean **True = blocked**, or float added to the scores.

    layer.self_attn_weights   (N, h, L, L)   who each target token looked at among the targets
    layer.cross_attn_weights  (N, h, L, S)   who each target token looked at in the source

(For unbatched 2-D inputs the N dimension is absent, as in ``nn.MultiheadAttention``.)
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from helpers.attention import MultiHeadAttention, merge_masks
from helpers.kv_cache import Entry, extend

__all__ = [
    "Decoder",
    "Encoder",
    "EncoderLayer",
    "InspectableDecoderLayer",
    "Transformer",
    "cross_attention_weights",
    "recording",
    "self_attention_weights",
]

Activation = str | Callable[[Tensor], Tensor]


def _activation(activation: Activation) -> Callable[[Tensor], Tensor]:
    """'relu' or 'gelu' (as torch's layers accept), or any function Tensor -> Tensor."""
    if callable(activation):
        return activation
    functions: dict[str, Callable[[Tensor], Tensor]] = {"relu": F.relu, "gelu": F.gelu}
    if activation not in functions:
        raise ValueError(f"activation should be 'relu', 'gelu' or a function, got {activation!r}")
    return functions[activation]


class EncoderLayer(nn.Module):
    """Self-attention, then a position-wise feed-forward network, each in a residual block.

    The layer lesson 05 builds, graduated: same constructor and ``forward`` as ``nn.TransformerEncoderLayer``
    and the same parameter names, so either loads the other's state dict. Post-norm
    (``x = norm(x + sublayer(x))``, the original transformer) unless ``norm_first`` (pre-norm).

    forward: src (N, S, E) with ``batch_first``, else (S, N, E); src_mask (S, S) or (N*h, S, S);
    src_key_padding_mask (N, S), True = padding. Returns a tensor of src's shape.

    ``record`` (default False, as torch's layer keeps nothing): after a pass with it on, ``self_attn_weights``
    holds the per-head weights (N, h, S, S), detached. With it off the attention asks for no weights and runs
    torch's fused kernel. ``recording(module)`` switches it for every layer of a stack.
    """

    head_gate: Tensor | None  # (h,) per-head output gates, set by helpers.models.pretrained.encoder_layer

    def __init__(
        self,
        d_model: int,
        nhead: int,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation: Activation = F.relu,
        layer_norm_eps: float = 1e-5,
        batch_first: bool = False,
        norm_first: bool = False,
        bias: bool = True,
        device=None,
        dtype=None,
        record: bool = False,
    ) -> None:
        super().__init__()
        factory = {"device": device, "dtype": dtype}
        # Created in torch's order, so that the same seed gives the same initial weights as the stock layer.
        attention = dict(dropout=dropout, bias=bias, batch_first=batch_first, **factory)
        self.self_attn = MultiHeadAttention(d_model, nhead, **attention)
        self.record = record
        self.self_attn_weights: Tensor | None = None
        self.linear1 = nn.Linear(d_model, dim_feedforward, bias=bias, **factory)
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(dim_feedforward, d_model, bias=bias, **factory)
        self.norm_first = norm_first
        self.norm1 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **factory)
        self.norm2 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **factory)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.activation = _activation(activation)

    def clear_records(self) -> None:
        """Forget the weights recorded by the last pass."""
        self.self_attn_weights = None

    def forward(
        self,
        src: Tensor,
        src_mask: Tensor | None = None,
        src_key_padding_mask: Tensor | None = None,
        is_causal: bool = False,
    ) -> Tensor:
        x = src
        if self.norm_first:  # pre-norm: normalise each sublayer's input, keep the residual path a pure sum
            x = x + self._sa_block(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            return x + self._ff_block(self.norm2(x))
        x = self.norm1(x + self._sa_block(x, src_mask, src_key_padding_mask, is_causal))  # post-norm
        return self.norm2(x + self._ff_block(x))

    def _sa_block(
        self, x: Tensor, attn_mask: Tensor | None, key_padding_mask: Tensor | None, is_causal: bool
    ) -> Tensor:
        out, weights = self.self_attn(
            x,
            x,
            x,
            attn_mask=attn_mask,
            key_padding_mask=key_padding_mask,
            is_causal=is_causal,
            need_weights=self.record,
            average_attn_weights=False,  # keep the heads apart: (N, h, S, S)
        )
        self.self_attn_weights = None if weights is None else weights.detach()  # no graph kept between passes
        return self.dropout1(out)

    def _ff_block(self, x: Tensor) -> Tensor:
        """E -> dim_feedforward -> E at every position on its own."""
        return self.dropout2(self.linear2(self.dropout(self.activation(self.linear1(x)))))


class InspectableDecoderLayer(nn.Module):
    """Masked self-attention, cross-attention over the memory, feed-forward; records each pass's per-head weights.

    Same constructor as ``nn.TransformerDecoderLayer`` plus ``record`` (default True); same parameter names
    (``self_attn``, ``multihead_attn``, ``linear1``, ``linear2``, ``norm1``..``norm3``), so the stock layer's state
    dict loads into it and back; same ``forward`` arguments and single tensor output, so it drops into
    ``nn.TransformerDecoder`` as well as this module's ``Decoder``.

    After a forward pass with ``record`` on:
        ``self_attn_weights``:  (N, h, L, L), masked self-attention, one matrix per head.
        ``cross_attn_weights``: (N, h, L, S), cross-attention over the memory, one per head.
    Both are detached copies (they hold no autograd graph) and are replaced by the next pass.
    They are the weights actually used, i.e. after attention dropout when the layer trains with
    dropout > 0. With ``record`` off the attention asks for no weights (``need_weights=False``: the fused
    kernel, which never builds the (N, h, L, S) weights) and both attributes are ``None``, so no weights
    from an earlier pass linger. ``clear_records()`` drops them on demand.

    For decoding, ``step`` runs the layer for the newest target position only, reusing the projected keys
    and values of the earlier positions and of the memory (its entry of a ``helpers.kv_cache.KVCache``).

    Inside a stack the layer is deep-copied ``num_layers`` times: read the records from
    ``decoder.layers[i]`` (or all at once with ``cross_attention_weights(decoder)``).

    A query whose every key is masked gets zero weights and a zero attention output (``MultiHeadAttention``'s
    rule), where the stock layer gives NaN. Real padding never blocks a whole row unless a sequence is all padding.
    """

    self_attn_weights: Tensor | None
    cross_attn_weights: Tensor | None

    def __init__(
        self,
        d_model: int,
        nhead: int,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation: Activation = F.relu,
        layer_norm_eps: float = 1e-5,
        batch_first: bool = False,
        norm_first: bool = False,
        bias: bool = True,
        device=None,
        dtype=None,
        *,
        record: bool = True,
    ) -> None:
        super().__init__()
        factory = {"device": device, "dtype": dtype}
        attention = dict(dropout=dropout, bias=bias, batch_first=batch_first, **factory)
        # Created in torch's order, so that the same seed gives the same initial weights as the stock layer.
        self.self_attn = MultiHeadAttention(d_model, nhead, **attention)
        self.multihead_attn = MultiHeadAttention(d_model, nhead, **attention)  # the cross-attention
        self.linear1 = nn.Linear(d_model, dim_feedforward, bias=bias, **factory)
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(dim_feedforward, d_model, bias=bias, **factory)
        self.norm_first = norm_first
        self.norm1 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **factory)
        self.norm2 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **factory)
        self.norm3 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **factory)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.dropout3 = nn.Dropout(dropout)
        self.activation = _activation(activation)
        self.record = record
        self.self_attn_weights = None
        self.cross_attn_weights = None

    def clear_records(self) -> None:
        """Forget the weights recorded by the last pass."""
        self.self_attn_weights = None
        self.cross_attn_weights = None

    def forward(
        self,
        tgt: Tensor,
        memory: Tensor,
        tgt_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        tgt_key_padding_mask: Tensor | None = None,
        memory_key_padding_mask: Tensor | None = None,
        tgt_is_causal: bool = False,
        memory_is_causal: bool = False,
    ) -> Tensor:
        """tgt (N, L, E) with ``batch_first``, else (L, N, E); memory (N, S, E) or (S, N, E) -> tgt's shape.

        tgt_mask (L, L), memory_mask (L, S) (or per head, (N*h, ·, ·)); the key padding masks (N, L) and
        (N, S), True = padding. ``tgt_is_causal`` is a hint that tgt_mask is the causal mask (which must
        still be given), as in torch.
        """
        x = tgt
        if self.norm_first:  # pre-norm
            x = x + self._sa_block(self.norm1(x), tgt_mask, tgt_key_padding_mask, tgt_is_causal)
            x = x + self._mha_block(self.norm2(x), memory, memory_mask, memory_key_padding_mask, memory_is_causal)
            return x + self._ff_block(self.norm3(x))
        x = self.norm1(x + self._sa_block(x, tgt_mask, tgt_key_padding_mask, tgt_is_causal))  # post-norm
        x = self.norm2(x + self._mha_block(x, memory, memory_mask, memory_key_padding_mask, memory_is_causal))
        return self.norm3(x + self._ff_block(x))

    # -- the three sublayers ---------------------------------------------------------------------
    def _sa_block(
        self, x: Tensor, attn_mask: Tensor | None, key_padding_mask: Tensor | None, is_causal: bool = False
    ) -> Tensor:
        """Masked self-attention over the target: x (N, L, E) or (L, N, E) -> same shape."""
        out, weights = self.self_attn(
            x,
            x,
            x,
            attn_mask=attn_mask,
            key_padding_mask=key_padding_mask,
            is_causal=is_causal,
            need_weights=self.record,
            average_attn_weights=False,  # keep the heads apart: (N, h, L, L)
        )
        self.self_attn_weights = None if weights is None else weights.detach()  # no graph kept between passes
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
        out, weights = self.multihead_attn(
            x,
            mem,
            mem,
            attn_mask=attn_mask,
            key_padding_mask=key_padding_mask,
            is_causal=is_causal,
            need_weights=self.record,
            average_attn_weights=False,  # keep the heads apart: (N, h, L, S)
        )
        self.cross_attn_weights = None if weights is None else weights.detach()
        return self.dropout2(out)

    def _ff_block(self, x: Tensor) -> Tensor:
        """E -> dim_feedforward -> E at every position on its own."""
        return self.dropout3(self.linear2(self.dropout(self.activation(self.linear1(x)))))

    # -- one position at a time, for decoding ----------------------------------------------------
    def step(
        self,
        x: Tensor,
        past: Entry | None,
        memory: Tensor | None = None,
        memory_key_padding_mask: Tensor | None = None,
    ) -> tuple[Tensor, Entry]:
        """The layer's output for the newest target position only, from the projected keys and values it keeps.

        x (N, 1, E): the newest position's input. past: None at the first position, then what the previous
        step returned, the layer's entry of a ``helpers.kv_cache.KVCache``: the masked self-attention's keys
        and values of the t earlier positions, (N, h, t, d) each, and the cross-attention's keys and values of
        the memory, (N, h, S, d) each. ``memory`` (N, S, E) is read at the first position only, where its keys
        and values are projected once for every later step. Returns the output (N, 1, E), equal to row t of
        ``forward`` on all t + 1 positions with a causal mask, and the entry for the next step (t + 1 positions).

        Why this is all a step needs: with a causal mask, earlier positions never see later ones, so their
        outputs, keys and values do not change when a token is added; the new position projects its own query,
        key and value and reads the kept ones. Cross-attention and feed-forward are per position. Batch first
        only; no masks besides the memory's padding (a sequence being decoded has no padding of its own).
        With ``record`` on, ``cross_attn_weights`` holds this position's (N, h, 1, S).
        """
        self._check_step(x)
        if past is None:
            if not isinstance(memory, Tensor):
                raise ValueError("the first step (past=None) needs the encoder's memory (N, S, E)")
            memory_kv = self.multihead_attn.project_key_value(memory, memory)  # (N, h, S, d) x 2, kept from now on
            self_kv = None
        elif isinstance(past, tuple) and len(past) == 4 and all(isinstance(t, Tensor) for t in past):
            self_kv, memory_kv = past[:2], past[2:]
        else:
            raise TypeError(
                "past must be None or the (keys, values, memory keys, memory values) a previous step returned, "
                f"got {type(past).__name__}"
            )
        kept: list[Tensor] = []  # the self-attention's keys and values after this step

        def self_attention(h: Tensor) -> Tensor:  # (N, 1, E): the new position's query over t + 1 keys
            attention = self.self_attn
            k, v = extend(self_kv, attention.project_key_value(h, h))  # (N, h, t + 1, d) each
            kept.extend((k, v))
            return self.dropout1(attention.attend_projected(attention.project_query(h), k, v)[0])

        def cross_attention(h: Tensor) -> Tensor:  # (N, 1, E) over the memory's S kept keys
            attention, (k, v) = self.multihead_attn, memory_kv
            N, S = h.size(0), k.size(2)
            mask = merge_masks(None, memory_key_padding_mask, N, attention.num_heads, 1, S, h.dtype)
            out, weights = attention.attend_projected(attention.project_query(h), k, v, mask, self.record)
            self.cross_attn_weights = None if weights is None else weights.detach()
            return self.dropout2(out)

        out = self._step_sublayers(x, self_attention, cross_attention)
        return out, (*kept, *memory_kv)

    def _step_sublayers(
        self, x: Tensor, self_attention: Callable[[Tensor], Tensor], cross_attention: Callable[[Tensor], Tensor]
    ) -> Tensor:
        """The layer's residual blocks for one position, pre- or post-norm, around the two attentions given."""
        if self.norm_first:
            x = x + self_attention(self.norm1(x))
            x = x + cross_attention(self.norm2(x))
            return x + self._ff_block(self.norm3(x))
        x = self.norm1(x + self_attention(x))
        x = self.norm2(x + cross_attention(x))
        return self.norm3(x + self._ff_block(x))

    def _check_step(self, x: Tensor) -> None:
        if not self.self_attn.batch_first:
            raise ValueError("step needs a batch-first layer (batch_first=True)")
        if not isinstance(x, Tensor) or x.dim() != 3 or x.size(1) != 1:
            shape = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
            raise ValueError(f"step takes one position per sequence, x of shape (N, 1, E); got {shape}")


# ---------------------------------------------------------------------------------------------
# Stacks
# ---------------------------------------------------------------------------------------------
class Encoder(nn.Module):
    """``num_layers`` copies of ``encoder_layer`` run in turn, then ``norm`` if given (``nn.TransformerEncoder``).

    src (N, S, E) or (S, N, E) -> the memory, same shape. Each copy has its own weights (a deep copy).
    """

    def __init__(self, encoder_layer: nn.Module, num_layers: int, norm: nn.Module | None = None) -> None:
        super().__init__()
        self.layers = nn.ModuleList(copy.deepcopy(encoder_layer) for _ in range(num_layers))
        self.num_layers = num_layers
        self.norm = norm

    def forward(
        self,
        src: Tensor,
        mask: Tensor | None = None,
        src_key_padding_mask: Tensor | None = None,
        is_causal: bool | None = None,
    ) -> Tensor:
        x = src
        for layer in self.layers:
            x = layer(x, src_mask=mask, src_key_padding_mask=src_key_padding_mask, is_causal=bool(is_causal))
        return x if self.norm is None else self.norm(x)


class Decoder(nn.Module):
    """``num_layers`` copies of ``decoder_layer`` run in turn, then ``norm`` if given (``nn.TransformerDecoder``).

    tgt (N, L, E) and memory (N, S, E) (or length first) -> tgt's shape. Every layer attends to the same memory.
    """

    def __init__(self, decoder_layer: nn.Module, num_layers: int, norm: nn.Module | None = None) -> None:
        super().__init__()
        self.layers = nn.ModuleList(copy.deepcopy(decoder_layer) for _ in range(num_layers))
        self.num_layers = num_layers
        self.norm = norm

    def forward(
        self,
        tgt: Tensor,
        memory: Tensor,
        tgt_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        tgt_key_padding_mask: Tensor | None = None,
        memory_key_padding_mask: Tensor | None = None,
        tgt_is_causal: bool | None = None,
        memory_is_causal: bool = False,
    ) -> Tensor:
        x = tgt
        for layer in self.layers:
            x = layer(
                x,
                memory,
                tgt_mask=tgt_mask,
                memory_mask=memory_mask,
                tgt_key_padding_mask=tgt_key_padding_mask,
                memory_key_padding_mask=memory_key_padding_mask,
                tgt_is_causal=bool(tgt_is_causal),
                memory_is_causal=memory_is_causal,
            )
        return x if self.norm is None else self.norm(x)


class Transformer(nn.Module):
    """Encoder and decoder stacks of the course's layers, each ending in a LayerNorm: ``nn.Transformer``'s model.

    Same constructor (without ``custom_encoder``/``custom_decoder``; plus ``record`` for the decoder layers),
    parameter names and ``forward`` as ``nn.Transformer``, and the same initialisation (Xavier-uniform for
    every matrix): with the same seed both start from identical weights.

    forward: src (N, S, E), tgt (N, L, E) with ``batch_first`` (else length first), masks as in
    ``nn.Transformer`` -> (N, L, E).
    """

    def __init__(
        self,
        d_model: int = 512,
        nhead: int = 8,
        num_encoder_layers: int = 6,
        num_decoder_layers: int = 6,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation: Activation = F.relu,
        layer_norm_eps: float = 1e-5,
        batch_first: bool = False,
        norm_first: bool = False,
        bias: bool = True,
        device=None,
        dtype=None,
        *,
        record: bool = True,
    ) -> None:
        super().__init__()
        factory = {"device": device, "dtype": dtype}
        common = dict(
            dim_feedforward=dim_feedforward,
            dropout=dropout,
            activation=activation,
            layer_norm_eps=layer_norm_eps,
            batch_first=batch_first,
            norm_first=norm_first,
            bias=bias,
            **factory,
        )
        self.encoder = Encoder(
            EncoderLayer(d_model, nhead, **common),
            num_encoder_layers,
            nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **factory),
        )
        self.decoder = Decoder(
            InspectableDecoderLayer(d_model, nhead, **common, record=record),
            num_decoder_layers,
            nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **factory),
        )
        self.d_model, self.nhead, self.batch_first = d_model, nhead, batch_first
        for p in self.parameters():  # as nn.Transformer: Xavier-uniform matrices (biases and norms keep theirs)
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)

    def forward(
        self,
        src: Tensor,
        tgt: Tensor,
        src_mask: Tensor | None = None,
        tgt_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        src_key_padding_mask: Tensor | None = None,
        tgt_key_padding_mask: Tensor | None = None,
        memory_key_padding_mask: Tensor | None = None,
        src_is_causal: bool | None = None,
        tgt_is_causal: bool | None = None,
        memory_is_causal: bool = False,
    ) -> Tensor:
        memory = self.encoder(src, mask=src_mask, src_key_padding_mask=src_key_padding_mask, is_causal=src_is_causal)
        return self.decoder(
            tgt,
            memory,
            tgt_mask=tgt_mask,
            memory_mask=memory_mask,
            tgt_key_padding_mask=tgt_key_padding_mask,
            memory_key_padding_mask=memory_key_padding_mask,
            tgt_is_causal=tgt_is_causal,
            memory_is_causal=memory_is_causal,
        )


# ---------------------------------------------------------------------------------------------
# Switching recording on and reading the records of a whole stack
# ---------------------------------------------------------------------------------------------
RecordingLayer = EncoderLayer | InspectableDecoderLayer


def _inspectable_layers(
    module: nn.Module, kinds: tuple[type[RecordingLayer], ...] = (EncoderLayer, InspectableDecoderLayer)
) -> list[RecordingLayer]:
    layers = [m for m in module.modules() if isinstance(m, kinds)]
    if not layers:
        names = " or ".join(kind.__name__ for kind in kinds)
        raise ValueError(
            f"{type(module).__name__} contains no {names}; build the stacks with "
            "Encoder(EncoderLayer(...), num_layers) and Decoder(InspectableDecoderLayer(...), num_layers)"
        )
    return layers


@contextmanager
def recording(module: nn.Module, enabled: bool = True) -> Iterator[None]:
    """Switch recording on (or off) for every ``EncoderLayer`` and ``InspectableDecoderLayer`` inside ``module``.

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
        for layer, setting in zip(layers, before, strict=True):
            layer.record = setting


def _stack_records(module: nn.Module, attribute: str, kinds: tuple[type[RecordingLayer], ...]) -> Tensor:
    layers = _inspectable_layers(module, kinds)
    records = [getattr(layer, attribute) for layer in layers]
    missing = [i for i, r in enumerate(records) if r is None]
    if missing:
        raise ValueError(
            f"layers {missing} hold no {attribute}: run a forward pass with recording on first "
            "(layer.record = True, or `with recording(model):`)"
        )
    return torch.stack(records)


def cross_attention_weights(module: nn.Module) -> Tensor:
    """Every layer's recorded cross-attention, stacked: (n_layers, N, h, L, S), in module order."""
    return _stack_records(module, "cross_attn_weights", (InspectableDecoderLayer,))


def self_attention_weights(module: nn.Module) -> Tensor:
    """Every layer's recorded self-attention inside ``module``, stacked, in module order.

    Pass one stack: an encoder gives (n_layers, N, h, S, S), a decoder its masked self-attention (n_layers, N, h, L, L).
    """
    return _stack_records(module, "self_attn_weights", (EncoderLayer, InspectableDecoderLayer))
