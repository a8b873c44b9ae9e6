"""helpers.models.translation.translator: text in, text and labelled cross-attention out, in the input's order."""

from __future__ import annotations

import pytest
import torch
from tiny_translation import fake_translator

from helpers.data.batching import pad
from helpers.models.translation import greedy_decode

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# Of different lengths, each of at least 11 tokens (with BOS and EOS), so that each output's length limit is the
# model's (max_len - 1) whichever sentences share its batch.
SENTENCES = [
    "Ein kleiner Hund läuft mit einer Frau im Freien und singt.",
    "Eine Frau singt und ein Mann sitzt im Freien.",
    "Ein Mann sitzt und ein kleiner Hund läuft mit einer Frau im Freien.",
    "Ein Hund und eine Frau singen im Freien.",
]


def perturbed_translator():
    """A tiny translator whose random weights give different outputs for different sentences."""
    torch.manual_seed(0)
    translator = fake_translator([*SENTENCES, "A little dog runs with a woman outdoors.", "A man sits."])
    with torch.no_grad():
        for p in translator.model.parameters():
            p.add_(0.5 * torch.randn_like(p))
    return translator


def test_translate_is_greedy_search_one_sentence_at_a_time_whatever_the_batching():
    translator = perturbed_translator()
    one_by_one = [
        translator.target_tokenizer.decode(greedy_decode(translator.model, pad([ids])).ids[0])
        for ids in translator.encode_sources(SENTENCES)
    ]
    assert len(set(one_by_one)) > 1  # the outputs differ, so a mixed-up order would show
    assert min(len(ids) for ids in translator.encode_sources(SENTENCES)) >= 11
    for batch_size in (1, 3, 250):  # sorted by length inside, put back in the input order
        assert translator.translate(SENTENCES, batch_size=batch_size) == one_by_one


def test_translate_with_attention_labels_every_row_and_column():
    translator = perturbed_translator()
    translation = translator.translate_with_attention(SENTENCES[0])
    assert translation.text == translator.translate(SENTENCES[:1])[0]
    n_layers, h = translator.model.config.num_decoder_layers, translator.model.config.num_heads
    L, S = len(translation.output_tokens), len(translation.source_tokens)
    assert translation.attention.shape == (n_layers, h, L, S)  # (n_layers, h, L, S)
    assert translation.source_tokens == translator.source_tokenizer.tokens(SENTENCES[0], add_special=True)
    assert (
        translation.output_tokens[-1] == translator.target_tokenizer.id_tokens([translator.target_tokenizer.eos_id])[0]
    )
    assert torch.allclose(translation.attention.sum(-1), torch.ones(n_layers, h, L), atol=1e-5)


def test_bad_sentences_and_batch_sizes_get_clear_errors():
    translator = perturbed_translator()
    with pytest.raises(TypeError, match="list of sentences"):
        translator.translate("Ein Hund läuft.")
    with pytest.raises(ValueError, match="batch_size must be positive"):
        translator.translate(SENTENCES, batch_size=0)
    with pytest.raises(ValueError, match="max_len=32"):
        translator.translate([" ".join(["Hund"] * 40)])
