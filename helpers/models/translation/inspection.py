"""Every attention of a translator for one sentence: the encoder's self-attention, the decoder's masked
self-attention and its cross-attention, per layer and head.

Shapes: S source tokens (with BOS and EOS), L decoder positions (the decoder reads BOS y1 ... y(L-1) and
produces y1 ... y(L-1) EOS: L is the target length, as in README's notation), h heads per layer.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from helpers.data.batching import pad
from helpers.data.tokenization import BOS_ID
from helpers.layers import recording, self_attention_weights
from helpers.models.translation.translator import Translator


@dataclass
class AttentionMaps:
    """One sentence's attention weights everywhere in the model, with the labels their axes need.

    ``encoder[l, k]`` (S, S): source token s (row) over the source tokens (columns), encoder layer l, head k.
    ``decoder[l, k]`` (L, L): decoder position t (row, reading ``read_tokens[t]``) over the positions read so
    far; zero above the diagonal (the causal mask). ``cross[l, k]`` (L, S): decoder position t over the source.
    """

    source_tokens: list[str]  # S labels
    read_tokens: list[str]  # L labels: what the decoder read at each position (BOS first)
    output_tokens: list[str]  # L labels: what it was to produce there (EOS last)
    encoder: Tensor  # (encoder layers, h, S, S)
    decoder: Tensor  # (decoder layers, h, L, L)
    cross: Tensor  # (decoder layers, h, L, S)


@torch.no_grad()
def attention_maps(translator: Translator, source: str, target: str | None = None) -> AttentionMaps:
    """All attention weights while ``translator`` reads ``source`` and writes ``target``.

    ``target`` None: the translator's own greedy translation; a string: that English sentence, read by
    teacher forcing (e.g. the reference, to compare with gold alignments).
    """
    model, src_tok, tgt_tok = translator.model, translator.source_tokenizer, translator.target_tokenizer
    model.eval()
    src = pad(translator.encode_sources([source])).to(translator.device)  # (1, S)
    ids = translator.decode_ids([source]).ids[0] if target is None else tgt_tok.encode(target, add_special=False)
    tgt_in = torch.tensor([[BOS_ID, *ids]], device=translator.device)  # (1, L)
    with model.recording(), recording(model.transformer.encoder):
        model(src, tgt_in)
        encoder = self_attention_weights(model.transformer.encoder)[:, 0].cpu()  # (n_layers, h, S, S)
        decoder = self_attention_weights(model.transformer.decoder)[:, 0].cpu()  # (n_layers, h, L, L)
        cross = model.cross_attention()[:, 0].cpu()  # (n_layers, h, L, S)
    return AttentionMaps(
        source_tokens=src_tok.tokens(source, add_special=True),
        read_tokens=tgt_tok.id_tokens([BOS_ID, *ids]),
        output_tokens=tgt_tok.id_tokens([*ids, tgt_tok.eos_id]),
        encoder=encoder,
        decoder=decoder,
        cross=cross,
    )
