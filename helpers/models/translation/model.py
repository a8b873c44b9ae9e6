"""The sequence-to-sequence transformer that translates German to English.

Shapes: N batch, S source length, L target length, E embedding size (``config.embed_dim``; torch's
``nn.Transformer`` calls it ``d_model``), h heads, V vocabulary size. Token ids use the course tokenizers'
specials (``helpers.data.tokenization``): pad 0, bos 1, eos 2, unk 3. Boolean masks follow ``nn.Transformer``:
**True = blocked** (a padding position, or the future).

The model is the course's own, from the lessons' parts: token embeddings scaled by sqrt(E) and
sinusoidal positions (lesson 01), ``helpers.layers.Transformer`` (encoder layers and
``InspectableDecoderLayer``s, lesson 05, every attention a ``helpers.MultiHeadAttention``, lesson 04),
and a linear layer to next-token scores. Its parameter names are ``nn.Transformer``'s, and every
forward pass can record each decoder layer's per-head cross-attention (``model.cross_attention()``).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any, cast

import torch
from torch import Tensor, nn

from helpers.attention import causal_mask
from helpers.data.tokenization import PAD_ID
from helpers.embeddings import PositionalEncoding, TokenEmbedding
from helpers.kv_cache import Entry, KVCache
from helpers.layers import InspectableDecoderLayer, Transformer, cross_attention_weights, recording
from helpers.models.translation.config import TranslationConfig


class Seq2SeqTransformer(nn.Module):
    """German -> English encoder-decoder: ``forward(src, tgt_in) -> logits (N, L, V_tgt)``.

    ``src`` (N, S) holds source ids (padding = 0); ``tgt_in`` (N, L) holds the target shifted right
    (BOS first, EOS dropped), which is what the decoder reads while learning to predict the target.
    """

    def __init__(self, config: TranslationConfig, src_vocab_size: int, tgt_vocab_size: int) -> None:
        super().__init__()
        self.config = config
        E = config.embed_dim
        self.src_embedding = TokenEmbedding(src_vocab_size, E, padding_idx=PAD_ID)  # scaled by sqrt(E)
        self.tgt_embedding = TokenEmbedding(tgt_vocab_size, E, padding_idx=PAD_ID)
        self.positions = PositionalEncoding(E, max_len=config.max_len, dropout=config.dropout)
        # Encoder and decoder stacks of the course's own layers, every attention a helpers.MultiHeadAttention.
        # The decoder layers record their per-head weights only on request (`model.recording()`), so
        # training runs the fused attention kernel.
        # helpers.layers.Transformer is a drop-in for nn.Transformer, so it keeps torch's argument names.
        self.transformer = Transformer(
            d_model=E,
            nhead=config.num_heads,
            num_encoder_layers=config.num_encoder_layers,
            num_decoder_layers=config.num_decoder_layers,
            dim_feedforward=config.ff_dim,
            dropout=config.dropout,
            batch_first=True,
            norm_first=config.norm_first,
            record=False,
        )
        self.generator = nn.Linear(E, tgt_vocab_size)  # decoder state -> next-token logits
        if config.tie_embeddings:  # one parameter: a word's score is its decoder state's match with its vector
            self.generator.weight = self.tgt_embedding.weight

    # -- the two halves, used separately by decoding (the encoder runs once per sentence) --------
    def encode(self, src: Tensor) -> tuple[Tensor, Tensor]:
        """src (N, S) -> memory (N, S, E) and its padding mask (N, S), True = padding."""
        src_padding = src.eq(PAD_ID)
        memory = self.transformer.encoder(self.positions(self.src_embedding(src)), src_key_padding_mask=src_padding)
        return memory, src_padding

    def decode(self, tgt_in: Tensor, memory: Tensor, src_padding: Tensor) -> Tensor:
        """tgt_in (N, L) and memory (N, S, E) -> logits (N, L, V); position t sees tgt_in[:, :t+1]."""
        L = tgt_in.size(1)
        future = causal_mask(L, device=tgt_in.device)  # (L, L), True above the diagonal = blocked
        hidden = self.transformer.decoder(
            self.positions(self.tgt_embedding(tgt_in)),
            memory,
            tgt_mask=future,
            tgt_is_causal=True,
            tgt_key_padding_mask=tgt_in.eq(PAD_ID),
            memory_key_padding_mask=src_padding,
        )  # (N, L, E)
        return self.generator(hidden)  # (N, L, V)

    def new_cache(self) -> KVCache:
        """An empty ``KVCache`` for ``decode_step``: one entry per decoder layer, tagged with this model."""
        return KVCache(len(self.decoder_layers), owner=self)

    def decode_step(
        self, token: Tensor, memory: Tensor, src_padding: Tensor, cache: KVCache | None = None
    ) -> tuple[Tensor, KVCache]:
        """Logits for the next token after one more target token, without re-reading the earlier ones.

        token (N, 1): the newest token of each sequence; ``cache``: None (or an empty ``new_cache()``) at the
        first step, when ``token`` is BOS, then the cache the previous call returned. The first step projects
        ``memory`` (N, S, E) into every layer's cross-attention keys and values, once; later steps read those
        and ignore ``memory``. Every step adds the new position's self-attention keys and values, so the cache
        then holds, per layer, (N, h, t + 1, d) x 2 and (N, h, S, d) x 2 (``InspectableDecoderLayer.step``).
        ``src_padding`` (N, S), True = padding. Returns logits (N, V), equal to the last row of ``decode`` on
        the whole sequence so far, and the cache, updated in place (the same object) once every layer has run.
        """
        if cache is None:
            cache = self.new_cache()
        if not isinstance(cache, KVCache) or len(cache.layers) != len(self.decoder_layers):
            kind = type(cache).__name__
            raise TypeError(f"cache must be None or model.new_cache() (= new_decoder_cache(model)), got {kind}")
        cache.check_owner(self)
        x = self.positions(self.tgt_embedding(token), start=cache.length)  # (N, 1, E)
        entries: list[Entry] = []
        for layer, past in zip(self.decoder_layers, cache.layers, strict=True):
            x, entry = layer.step(x, past, memory if past is None else None, src_padding)
            entries.append(entry)
        if self.transformer.decoder.norm is not None:
            x = self.transformer.decoder.norm(x)
        cache.update(self, entries)  # every layer at once, after the whole step: an interrupted step changes nothing
        return self.generator(x[:, -1]), cache  # (N, V)

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        memory, src_padding = self.encode(src)
        return self.decode(tgt_in, memory, src_padding)

    # -- looking inside ---------------------------------------------------------------------------
    @property
    def decoder_layers(self) -> list[InspectableDecoderLayer]:
        # The course's own stacks hold these; the twin of on_torch_layers holds torch's, read only for the
        # attributes both kinds have (self_attn, multihead_attn).
        return cast(list[InspectableDecoderLayer], list(self.transformer.decoder.layers))

    def cross_attention(self) -> Tensor:
        """Cross-attention recorded by the last forward pass: (n_layers, N, h, L, S), one per head."""
        return cross_attention_weights(self.transformer.decoder)

    def recording(self, enabled: bool = True) -> AbstractContextManager[None]:
        """Context manager: record per-head attention weights (or not) for the duration of a block."""
        return recording(self.transformer.decoder, enabled)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


@contextmanager
def ablated_heads(model: Seq2SeqTransformer, heads: set[tuple[int, int]], attention: str = "cross") -> Iterator[None]:
    """Silence heads ``{(layer, head), ...}`` for the duration of a block.

    ``attention``: ``"cross"`` (the decoder's cross-attention, the default), ``"decoder"`` (its masked
    self-attention) or ``"encoder"`` (the encoder's self-attention). A head's output enters the layer only
    through its d columns of the output projection (``out_proj.weight[:, head*d:(head+1)*d]``), so zeroing
    those columns removes exactly that head's contribution and nothing else. The weights are restored
    afterwards, even on error.
    """
    d = model.config.embed_dim // model.config.num_heads
    # The course's MultiHeadAttention, or torch's nn.MultiheadAttention in on_torch_layers' twin: both have out_proj.
    layers: dict[str, list[Any]] = {
        "cross": [layer.multihead_attn for layer in model.decoder_layers],
        "decoder": [layer.self_attn for layer in model.decoder_layers],
        "encoder": [layer.self_attn for layer in model.transformer.encoder.layers],
    }
    if attention not in layers:
        raise ValueError(f"attention must be 'cross', 'decoder' or 'encoder', got {attention!r}")
    modules = layers[attention]
    saved = []
    with torch.no_grad():
        for layer_index, head in sorted(heads):
            if not (0 <= layer_index < len(modules) and 0 <= head < model.config.num_heads):
                raise ValueError(
                    f"(layer, head) must lie in [0, {len(modules)}) x [0, {model.config.num_heads}), "
                    f"got {(layer_index, head)}"
                )
            weight = modules[layer_index].out_proj.weight  # (E, E)
            columns = slice(head * d, (head + 1) * d)
            saved.append((weight, columns, weight[:, columns].clone()))
            weight[:, columns] = 0.0
    try:
        yield
    finally:
        with torch.no_grad():
            for weight, columns, original in saved:
                weight[:, columns] = original


def on_torch_layers(model: Seq2SeqTransformer) -> Seq2SeqTransformer:
    """A copy of ``model`` whose ``transformer`` is ``nn.Transformer`` (torch's layers and ``nn.MultiheadAttention``),
    loaded with the same weights: the reference the course's own layers are compared with.

    The two compute the same function (the tests check outputs, gradients and decoding), so this twin is the
    reference for tests and for benchmarks that compare the course's attention with torch's.
    """
    c = model.config
    layer: dict[str, Any] = dict(dim_feedforward=c.ff_dim, dropout=c.dropout, batch_first=True, norm_first=c.norm_first)
    twin = copy.deepcopy(model)
    # The twin's stacks are torch's on purpose, not the course's Transformer that the attribute is declared as.
    twin.transformer = nn.Transformer(  # type: ignore[assignment]
        c.embed_dim,
        c.num_heads,
        custom_encoder=nn.TransformerEncoder(
            nn.TransformerEncoderLayer(c.embed_dim, c.num_heads, **layer),
            c.num_encoder_layers,
            norm=nn.LayerNorm(c.embed_dim),
            enable_nested_tensor=False,  # keep padded positions, as the course's encoder does
        ),
        custom_decoder=nn.TransformerDecoder(
            nn.TransformerDecoderLayer(c.embed_dim, c.num_heads, **layer),
            c.num_decoder_layers,
            norm=nn.LayerNorm(c.embed_dim),
        ),
        batch_first=True,
    )
    twin.transformer.load_state_dict(model.transformer.state_dict())
    return twin
