"""The steps from a corpus to a trained translator, in the order the lesson and the command line run them.

corpus -> tokenizers -> model -> encoded pairs -> training (validated on BLEU) -> Translator
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from helpers.data.corpus import ParallelCorpus
from helpers.data.tokenization import train_tokenizers
from helpers.models.translation.config import TranslationConfig
from helpers.models.translation.evaluation import evaluate
from helpers.models.translation.model import Seq2SeqTransformer
from helpers.models.translation.training import Example, TrainingHistory, default_device, train
from helpers.models.translation.translator import Translator


def build_translator(
    train_corpus: ParallelCorpus, config: TranslationConfig, device: torch.device | str | None = None
) -> Translator:
    """Tokenizers trained on ``train_corpus`` (training split only) and a freshly initialised, seeded model."""
    # Word-level: keep every word seen in training (min_frequency 1) up to vocab_size, since the course
    # corpus has no rare words worth hiding; BPE merges pairs seen at least twice.
    min_frequency = 1 if config.tokenizer == "word" else 2
    source, target = train_tokenizers(
        train_corpus, kind=config.tokenizer, vocab_size=config.vocab_size, min_frequency=min_frequency
    )
    torch.manual_seed(config.seed)  # the same initial weights on every run
    model = Seq2SeqTransformer(config, source.vocab_size, target.vocab_size)
    return Translator(model.to(device or default_device()), source, target)


def encode_pairs(translator: Translator, corpus: ParallelCorpus) -> list[Example]:
    """(source ids, target ids) for every pair, both BOS ... EOS; pairs longer than the model's
    positions are dropped (none in the course corpus; a handful of very long Multi30k captions)."""
    source = translator.source_tokenizer.encode_batch(corpus.de)
    target = translator.target_tokenizer.encode_batch(corpus.en)
    limit = translator.model.config.max_len
    return [(s, t) for s, t in zip(source, target, strict=True) if len(s) <= limit and len(t) <= limit]


def bleu_validator(
    translator: Translator, val_corpus: ParallelCorpus, sentences: int
) -> Callable[[Seq2SeqTransformer], float]:
    """A function scoring the model's greedy BLEU on the first ``sentences`` validation pairs."""
    indices = list(range(min(sentences, len(val_corpus))))

    def validate(_model: Seq2SeqTransformer) -> float:
        scores, _ = evaluate(translator, val_corpus, beam_size=1, indices=indices)
        return scores.bleu

    return validate


def fit(
    translator: Translator,
    train_corpus: ParallelCorpus,
    val_corpus: ParallelCorpus | None = None,
    *,
    steps: int | None = None,
    epochs: int | None = None,
    minutes: float | None = None,
    progress: bool = True,
    on_best: Callable[[Seq2SeqTransformer, TrainingHistory], None] | None = None,
    **training: Any,
) -> TrainingHistory:
    """Train ``translator.model`` on ``train_corpus``, validating BLEU on ``val_corpus`` (if given).

    ``training``: further keyword arguments of :func:`helpers.models.translation.training.train` (``accumulate``,
    ``resume``, ``on_state``, ...).
    """
    config = translator.model.config
    validate = bleu_validator(translator, val_corpus, config.val_sentences) if val_corpus is not None else None
    return train(
        translator.model,
        encode_pairs(translator, train_corpus),
        config,
        steps=steps,
        epochs=epochs,
        minutes=minutes,
        validate=validate,
        on_best=on_best,
        progress=progress,
        **training,
    )
