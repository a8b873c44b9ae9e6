"""helpers.models.translation.inspection: every attention of a translation, with its labels."""

from __future__ import annotations

import pytest
import torch

from helpers.data.batching import pad
from helpers.data.tokenization import train_tokenizer
from helpers.models.translation import Seq2SeqTransformer, TranslationConfig, Translator
from helpers.models.translation.inspection import attention_maps

TINY = dict(embed_dim=16, num_heads=2, num_encoder_layers=2, num_decoder_layers=2, ff_dim=32, dropout=0.0, max_len=32)


def tiny_translator(norm_first: bool = False) -> Translator:
    tokenizer = train_tokenizer(["Ein Hund läuft im Freien.", "A dog runs outdoors."], kind="word", min_frequency=1)
    torch.manual_seed(0)
    config = TranslationConfig(**TINY, norm_first=norm_first)
    model = Seq2SeqTransformer(config, tokenizer.vocab_size, tokenizer.vocab_size).eval()
    return Translator(model, tokenizer, tokenizer)


@pytest.mark.parametrize("norm_first", [False, True])
def test_every_attention_has_its_shape_its_labels_and_rows_that_sum_to_one(norm_first):
    translator = tiny_translator(norm_first)
    maps = attention_maps(translator, "Ein Hund läuft im Freien.", "A dog runs outdoors.")
    S, T = len(maps.source_tokens), len(maps.read_tokens)
    assert maps.read_tokens[0] == "<bos>" and maps.output_tokens[-1] == "<eos>"
    assert maps.read_tokens[1:] == maps.output_tokens[:-1]  # position t reads what position t - 1 produced
    assert maps.encoder.shape == (2, 2, S, S)
    assert maps.decoder.shape == (2, 2, T, T)
    assert maps.cross.shape == (2, 2, T, S)
    for weights in (maps.encoder, maps.decoder, maps.cross):
        assert torch.allclose(weights.sum(-1), torch.ones(weights.shape[:-1]), atol=1e-5)
    assert maps.decoder.triu(diagonal=1).abs().max() == 0  # masked: no position looks ahead


@pytest.mark.parametrize("norm_first", [False, True])
def test_the_encoder_records_the_weights_of_the_inputs_it_really_gets(norm_first):
    """The encoder layers record their own weights in the pass that makes the memory: torch's attention agrees."""
    translator = tiny_translator(norm_first)
    model = translator.model
    sentence = "Ein Hund läuft im Freien."
    weights = attention_maps(translator, sentence, "A dog runs outdoors.").encoder  # (n_layers, h, S, S)
    src = pad(translator.encode_sources([sentence]))
    x = model.positions(model.src_embedding(src))
    for index, layer in enumerate(model.transformer.encoder.layers):
        reference = torch.nn.MultiheadAttention(16, 2, batch_first=True).eval()
        reference.load_state_dict(layer.self_attn.state_dict())
        queries = layer.norm1(x) if norm_first else x
        _, expected = reference(queries, queries, queries, need_weights=True, average_attn_weights=False)
        assert torch.allclose(weights[index], expected[0], atol=1e-5)
        x = layer(x, src_key_padding_mask=src.eq(0))
    assert all(layer.record is False for layer in model.transformer.encoder.layers)  # switched back off


def test_cross_attention_matches_what_translation_returns():
    translator = tiny_translator()
    sentence = "Ein Hund läuft im Freien."
    maps = attention_maps(translator, sentence)  # the model's own output
    translation = translator.translate_with_attention(sentence)
    assert maps.output_tokens == translation.output_tokens
    assert torch.allclose(maps.cross, translation.attention, atol=1e-5)
