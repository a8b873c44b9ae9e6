"""A trained model together with its two tokenizers: text in, text (and attention) out.

Shapes: N sentences, S source tokens (with BOS and EOS), L produced tokens (with the final EOS),
layers x h decoder heads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from helpers.data.batching import pad
from helpers.data.tokenization import Tokenizer
from helpers.models.translation.decoding import Decoded, beam_search, greedy_decode
from helpers.models.translation.model import Seq2SeqTransformer


@dataclass
class Translation:
    """One sentence's translation, with the labels a cross-attention plot needs.

    ``attention`` is (n_layers, h, L, S): row t is the step that produced ``output_tokens[t]``, column s
    is ``source_tokens[s]``; None unless asked for.
    """

    source: str
    text: str
    source_tokens: list[str]
    output_tokens: list[str]
    attention: Tensor | None = None


@dataclass
class Translator:
    """German -> English with a trained :class:`Seq2SeqTransformer` and the tokenizers it was trained with."""

    model: Seq2SeqTransformer
    source_tokenizer: Tokenizer
    target_tokenizer: Tokenizer

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def encode_sources(self, sentences: Sequence[str]) -> list[list[int]]:
        """Source ids (BOS ... EOS) of each sentence; refuses one longer than the model's positions."""
        ids = self.source_tokenizer.encode_batch(list(sentences))
        limit = self.model.config.max_len
        for sentence, row in zip(sentences, ids, strict=True):
            if len(row) > limit:
                raise ValueError(
                    f"sentence of {len(row)} tokens (with BOS and EOS) exceeds the model's max_len={limit}: "
                    f"{sentence[:60]!r}..."
                )
        return ids

    def decode_ids(
        self, sentences: Sequence[str], beam_size: int = 1, batch_size: int = 250, return_attention: bool = False
    ) -> Decoded:
        """Run greedy search (``beam_size`` 1) or beam search over ``sentences``, in batches.

        Sentences are sorted by length before batching (less padding, and a batch finishes when its
        longest output does), and the results are put back in the input order.
        """
        if isinstance(sentences, str):
            raise TypeError("pass a list of sentences, not one string")
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        source_ids = self.encode_sources(sentences)
        order = sorted(range(len(source_ids)), key=lambda i: len(source_ids[i]))
        ids: list[list[int] | None] = [None] * len(source_ids)
        attention: list[Tensor | None] = [None] * len(source_ids)
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            src = pad([source_ids[i] for i in chunk]).to(self.device)  # (n, S)
            if beam_size == 1:
                result = greedy_decode(self.model, src, return_attention=return_attention)
            else:
                result = beam_search(self.model, src, beam_size=beam_size, return_attention=return_attention)
            for k, i in enumerate(chunk):
                ids[i] = result.ids[k]
                if return_attention:
                    assert result.attention is not None, "the decoders return attention when asked"
                    attention[i] = result.attention[k]
        return Decoded(ids, attention if return_attention else None)  # type: ignore[arg-type]

    def translate(self, sentences: Sequence[str], beam_size: int = 1, batch_size: int = 250) -> list[str]:
        """English text for each German sentence."""
        decoded = self.decode_ids(sentences, beam_size=beam_size, batch_size=batch_size)
        return [self.target_tokenizer.decode(ids) for ids in decoded.ids]

    def translate_with_attention(self, sentence: str, beam_size: int = 1) -> Translation:
        """One sentence's translation with its (n_layers, h, L, S) cross-attention and axis labels."""
        decoded = self.decode_ids([sentence], beam_size=beam_size, return_attention=True)
        assert decoded.attention is not None, "asked for with return_attention"
        ids = decoded.ids[0]
        return Translation(
            source=sentence,
            text=self.target_tokenizer.decode(ids),
            source_tokens=self.source_tokenizer.tokens(sentence, add_special=True),
            output_tokens=self.target_tokenizer.id_tokens([*ids, self.target_tokenizer.eos_id]),
            attention=decoded.attention[0],
        )
