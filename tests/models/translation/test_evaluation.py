"""helpers.models.translation.evaluation: sacreBLEU scores, word attention, heads against gold alignments, crossings."""

from __future__ import annotations

import pytest
import torch
from tiny_translation import fake_translator

from helpers.data.corpus import ParallelCorpus
from helpers.models.translation import (
    alignment_report,
    score_translations,
    word_attention,
)
from helpers.models.translation.evaluation import crossing_example, crossing_links, crossing_words

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_scores_use_sacrebleu_and_report_its_signature():
    import sacrebleu

    hyps, refs = ["A dog runs outdoors.", "A man sits."], ["A dog runs outdoors.", "A woman sits."]
    scores = score_translations(hyps, refs)
    assert scores.bleu == pytest.approx(round(sacrebleu.corpus_bleu(hyps, [refs]).score, 2))
    assert scores.chrf == pytest.approx(round(sacrebleu.corpus_chrf(hyps, [refs]).score, 2))
    assert "version:" in scores.signature and "nrefs:1" in scores.signature
    assert score_translations(refs, refs).bleu == 100.0
    with pytest.raises(ValueError, match="references"):
        score_translations(hyps, refs[:1])


def test_word_attention_sums_pieces_of_a_source_word_and_averages_rows_of_a_target_word():
    attention = torch.tensor(
        [
            [0.1, 0.2, 0.3, 0.4, 0.0],
            [0.0, 0.5, 0.0, 0.5, 0.0],
            [0.2, 0.2, 0.2, 0.2, 0.2],
        ]
    )  # (T, S): rows "dog", "runs", "." (+ no EOS row here); columns <bos> Hund läuft . <eos>
    words = word_attention(attention, source_words=[-1, 0, 1, 1, -1], target_words=[0, 1, 1])
    assert torch.allclose(words, torch.tensor([[0.2, 0.7], [0.35, 0.45]]))


def test_alignment_report_scores_a_head_that_follows_gold_as_perfect(monkeypatch):
    corpus = ParallelCorpus(
        "captions",
        "test",
        de=["Ein Hund läuft im Freien."],
        en=["A dog runs outdoors."],
        alignments=[[(0, 0), (1, 1), (2, 2), (3, 3), (4, 3)]],
    )
    translator = fake_translator(corpus.de + corpus.en)
    # source ids: <bos> Ein Hund läuft im Freien . <eos> (8); target rows: A dog runs outdoors . <eos> (6)
    perfect = torch.zeros(6, 8)
    for row, column in enumerate([1, 2, 3, 5, 6, 7]):
        perfect[row, column] = 1.0
    reversed_ = perfect.flip(1)
    fake = torch.stack([torch.stack([perfect, reversed_])] * 2)  # (n_layers, h, T, S): head 0 aligns, head 1 does not

    def fake_attention(model, src, ids):
        return [fake for _ in ids]

    monkeypatch.setattr("helpers.models.translation.evaluation.teacher_forced_attention", fake_attention)
    report = alignment_report(translator, corpus)
    assert report.words == 4
    assert report.accuracy[:, 0].tolist() == [1.0, 1.0]
    assert report.accuracy[:, 1].max() < 0.5
    assert report.best_head() == (0, 0)
    with pytest.raises(ValueError, match="gold alignments"):
        alignment_report(translator, ParallelCorpus("multi30k", "test", corpus.de, corpus.en))


def test_crossing_links_and_the_example_chosen_from_gold_alignments():
    # Ein(0) Mann(1) hat(2) einen(3) Ball(4) geworfen.(5) / A(0) man(1) has(2) thrown(3) a(4) ball.(5)
    gold = [(0, 0), (1, 1), (2, 2), (3, 4), (4, 5), (5, 3), (5, 5)]
    assert ((3, 4), (5, 3)) in crossing_links(gold) and ((4, 5), (5, 3)) in crossing_links(gold)
    assert crossing_words(gold) == {3, 4, 5}
    corpus = ParallelCorpus(
        "captions",
        "test",
        de=["Ein Hund läuft.", "Ein Mann hat einen Ball geworfen.", "Ein Mann hat einen roten Ball heute geworfen."],
        en=["A dog runs.", "A man has thrown a ball.", "A man has thrown a red ball today."],
        alignments=[[(0, 0), (1, 1), (2, 2)], [(0, 0), (1, 1), (2, 2), (3, 4), (4, 5), (5, 3)], []],
    )
    corpus.alignments[2] = [(0, 0), (1, 1), (2, 2), (3, 4), (4, 5), (5, 6), (6, 7), (7, 3)]
    assert crossing_example(corpus) == (2, (7, 3))  # 'geworfen' jumps over four links there
    assert crossing_example(corpus, max_words=6) == (1, (5, 3))
    with pytest.raises(ValueError, match="crossing"):
        crossing_example(corpus, max_words=3)
