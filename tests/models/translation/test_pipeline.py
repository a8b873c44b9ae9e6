"""helpers.models.translation.pipeline: corpus -> tokenizers -> seeded model -> encoded pairs -> training on BLEU."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from tiny_translation import TINY

from helpers.data.corpus import ParallelCorpus
from helpers.data.tokenization import UNK_ID
from helpers.models.translation import TranslationConfig, build_translator, encode_pairs, fit, score_translations

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TRAIN = ParallelCorpus(
    "captions",
    "train",
    de=["Ein Hund läuft.", "Eine Frau singt im Freien.", "Ein Mann sitzt."],
    en=["A dog runs.", "A woman sings outdoors.", "A man sits."],
)
CONFIG = TranslationConfig(**TINY, tokenizer="word", lr=3e-3, warmup_steps=1, batch_tokens=64, val_sentences=2)


def test_build_translator_trains_each_tokenizer_on_its_side_and_seeds_the_model():
    first, second = build_translator(TRAIN, CONFIG, "cpu"), build_translator(TRAIN, CONFIG, "cpu")
    for name, tensor in first.model.state_dict().items():
        assert torch.equal(tensor, second.model.state_dict()[name]), name  # config.seed decides the weights
    assert first.model.src_embedding.weight.shape[0] == first.source_tokenizer.vocab_size
    assert first.model.tgt_embedding.weight.shape[0] == first.target_tokenizer.vocab_size
    assert UNK_ID not in first.source_tokenizer.encode("Eine Frau singt im Freien.")
    assert UNK_ID in first.source_tokenizer.encode("woman")  # English is the target's, not the source's
    assert UNK_ID not in first.target_tokenizer.encode("A woman sings outdoors.")


def test_encode_pairs_gives_both_sides_ids_and_drops_pairs_past_the_models_positions():
    translator = build_translator(TRAIN, replace(CONFIG, max_len=6), "cpu")
    pairs = encode_pairs(translator, TRAIN)
    kept = [
        (s, t)
        for s, t in zip(
            translator.source_tokenizer.encode_batch(TRAIN.de),
            translator.target_tokenizer.encode_batch(TRAIN.en),
            strict=True,
        )
        if len(s) <= 6 and len(t) <= 6
    ]
    assert pairs == kept and len(kept) == 2  # <bos> Eine Frau singt im Freien . <eos> is 8 tokens: dropped
    translator = build_translator(TRAIN, CONFIG, "cpu")
    assert encode_pairs(translator, TRAIN) == list(
        zip(
            translator.source_tokenizer.encode_batch(TRAIN.de),
            translator.target_tokenizer.encode_batch(TRAIN.en),
            strict=True,
        )
    )


def test_fit_trains_on_the_corpus_and_scores_bleu_on_the_first_validation_sentences():
    translator = build_translator(TRAIN, CONFIG, "cpu")
    before = {name: tensor.clone() for name, tensor in translator.model.state_dict().items()}
    history = fit(translator, TRAIN, TRAIN, steps=3, progress=False)
    assert history.steps_done == 3 and history.val_steps == [3]
    assert any(not torch.equal(before[name], t) for name, t in translator.model.state_dict().items())
    expected = score_translations(translator.translate(TRAIN.de[:2]), TRAIN.en[:2]).bleu  # val_sentences=2
    assert history.val_scores == [expected]
