"""Tests for helpers.data.tokenization: special ids, exact round trips, unknown words, BPE pieces, word positions."""

from __future__ import annotations

import os
import unicodedata
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers.data.tokenization import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    SPECIAL_TOKENS,
    UNK_ID,
    Tokenizer,
    train_tokenizer,
    train_tokenizers,
)

GERMAN = [
    "Eine Mutter und ihr kleiner Sohn genießen einen schönen Tag im Freien.",
    "Ein Hund läuft im Park.",
    "Im Park spielt ein kleines Mädchen mit einem Ball.",
    "Eine Frau steigt in den Bus ein.",
    "Zwei Männer sitzen auf einer Bank, während ein Junge Fußball spielt.",
    "Der Spieler schießt den Ball ins Tor.",
    "Ein älterer Herr liest eine Zeitung am Fluss.",
    "Die Kinder haben im Garten gespielt.",
    "Ein Mädchen isst ein Eis, weil es heiß ist.",
    "Eine Gruppe von Leuten steht vor einem großen Gebäude.",
    "Ein Mann in einem blauen Hemd fährt Fahrrad.",
    "Der Fußballspieler läuft über die Straße.",
    "Eine Straßenmusikerin spielt Gitarre.",
]
ENGLISH = [
    "A mother and her little son are enjoying a beautiful day outdoors.",
    "A dog is running in the park.",
    "In the park, a little girl is playing with a ball.",
    "A woman's bag is on the bus.",
    "Two men are sitting on a bench while a boy plays soccer.",
]


@pytest.fixture(scope="module")
def bpe_de() -> Tokenizer:
    return train_tokenizer(GERMAN, kind="bpe", vocab_size=150, min_frequency=2)


@pytest.fixture(scope="module")
def word_de() -> Tokenizer:
    return train_tokenizer(GERMAN, kind="word", min_frequency=1)


def test_special_tokens_have_fixed_ids_in_both_kinds(bpe_de, word_de):
    for tokenizer in (bpe_de, word_de):
        assert [tokenizer.backend.token_to_id(t) for t in SPECIAL_TOKENS] == [0, 1, 2, 3]
        specials = (tokenizer.pad_id, tokenizer.bos_id, tokenizer.eos_id, tokenizer.unk_id)
        assert specials == (PAD_ID, BOS_ID, EOS_ID, UNK_ID) == (0, 1, 2, 3)
        ids = tokenizer.encode("Ein Hund läuft.")
        assert ids[0] == BOS_ID and ids[-1] == EOS_ID
        assert ids[1:-1] == tokenizer.encode("Ein Hund läuft.", add_special=False)
        assert PAD_ID not in ids and UNK_ID not in ids


@pytest.mark.parametrize("kind", ["word", "bpe"])
def test_round_trip_on_training_sentences(kind):
    for texts in (GERMAN, ENGLISH):
        tokenizer = train_tokenizer(texts, kind=kind, min_frequency=1)
        for text in texts:
            ids = tokenizer.encode(text)
            assert UNK_ID not in ids
            assert tokenizer.decode(ids) == text


def test_bpe_round_trip_on_new_words_made_of_known_letters(bpe_de):
    # none of these sentences was in training, but every letter was: BPE needs no <unk>
    for text in ["Ein Straßenhund schläft.", "Die Gitarrenspielerin läuft, weil es regnet.", "Größer ist älter."]:
        ids = bpe_de.encode(text)
        assert UNK_ID not in ids
        assert bpe_de.decode(ids) == text


def test_decode_puts_no_space_before_punctuation(word_de):
    ids = word_de.encode("Ein Mädchen isst ein Eis, weil es heiß ist.")
    pieces = [word_de.id_to_token(i) for i in ids[1:-1]]
    assert "," in pieces and "." in pieces  # punctuation is its own token...
    assert word_de.decode(ids) == "Ein Mädchen isst ein Eis, weil es heiß ist."  # ...but no space comes back


def test_decode_stops_at_eos_and_skips_padding_and_accepts_tensors(word_de):
    ids = word_de.encode("Ein Hund läuft im Park.")
    padded = [*ids, PAD_ID, PAD_ID]
    assert word_de.decode(torch.tensor(padded)) == "Ein Hund läuft im Park."
    assert word_de.decode([*ids[:3], EOS_ID, *ids[3:]]) == "Ein Hund"
    assert word_de.decode_batch(torch.tensor([padded, padded])) == ["Ein Hund läuft im Park."] * 2


def test_unknown_words_become_unk_in_the_word_tokenizer(word_de):
    ids = word_de.encode("Ein Zebra läuft im Park.", add_special=False)
    assert ids.count(UNK_ID) == 1 and ids[1] == UNK_ID
    assert word_de.decode(ids) == "Ein <unk> läuft im Park."
    assert word_de.tokens("Ein Zebra läuft.") == ["Ein", "<unk>", "läuft", "."]


def test_min_frequency_sends_rare_words_to_unk():
    tokenizer = train_tokenizer(["der Hund", "der Hund", "die Katze"], kind="word", min_frequency=2)
    assert tokenizer.encode("die Katze", add_special=False) == [UNK_ID, UNK_ID]
    assert UNK_ID not in tokenizer.encode("der Hund")


def test_long_compound_splits_into_several_bpe_pieces(bpe_de):
    compound = "Straßenfußballspielerin"
    ids = bpe_de.encode(compound, add_special=False)
    assert len(ids) >= 3
    assert UNK_ID not in ids
    assert bpe_de.decode(ids) == compound
    labels = bpe_de.tokens(compound)
    assert labels[0] == bpe_de.id_to_token(ids[0]).lstrip("▁")
    assert all(label.startswith("##") for label in labels[1:])
    assert "".join(label.removeprefix("##") for label in labels) == compound


def test_tokens_give_one_readable_label_per_id(bpe_de, word_de):
    text = "Eine Mutter genießt den Tag im Freien."
    assert word_de.tokens(text) == ["Eine", "Mutter", "<unk>", "den", "Tag", "im", "Freien", "."]
    for tokenizer in (bpe_de, word_de):
        assert len(tokenizer.tokens(text)) == len(tokenizer.encode(text, add_special=False))
        with_specials = tokenizer.tokens(text, add_special=True)
        assert with_specials[0] == "<bos>" and with_specials[-1] == "<eos>"
        assert len(with_specials) == len(tokenizer.encode(text))
        assert tokenizer.id_tokens(tokenizer.encode(text))[0] == "<bos>"


def test_word_index_for_the_word_tokenizer(word_de):
    text = "Eine Mutter genießt den Tag im Freien."
    # punctuation glued to "Freien." belongs to whitespace token 6
    assert word_de.word_index(text) == [0, 1, 2, 3, 4, 5, 6, 6]


@pytest.mark.parametrize(
    "text",
    [
        "Eine Mutter und ihr kleiner Sohn genießen einen schönen Tag im Freien.",
        "Der Straßenfußballspieler läuft, weil es regnet.",
        "Ein Hund läuft im Park .",  # a space before the full stop
        "Ein  Hund   läuft.",  # several spaces
    ],
)
def test_word_index_groups_pieces_into_whitespace_tokens(bpe_de, text):
    index = bpe_de.word_index(text)
    ids = bpe_de.encode(text, add_special=False)
    assert len(index) == len(ids)
    assert index == sorted(index)  # pieces come in word order
    words = text.split()
    assert set(index) == set(range(len(words)))  # every whitespace token has a piece
    # gluing the pieces of each whitespace token gives back that token
    pieces = [bpe_de.id_to_token(i).replace("▁", "") for i in ids]
    for k, word in enumerate(words):
        assert "".join(p for p, w in zip(pieces, index, strict=True) if w == k) == word
    # a bare space marker (before "." or an extra space) belongs to the word after it
    bare = [pos for pos, i in enumerate(ids) if bpe_de.id_to_token(i) == "▁"]
    assert all(index[pos] == index[pos + 1] for pos in bare)
    if text.endswith(" .") or "  " in text:
        assert bare, "this case should exercise bare space markers"


def test_input_is_normalised_to_nfc(bpe_de):
    composed = "Mädchen läuft."
    decomposed = unicodedata.normalize("NFD", composed)
    assert decomposed != composed
    assert bpe_de.encode(decomposed) == bpe_de.encode(composed)


def test_json_round_trip_survives_a_weights_only_checkpoint(bpe_de, word_de, tmp_path):
    for tokenizer in (bpe_de, word_de):
        path = tmp_path / f"{tokenizer.kind}.pt"
        torch.save({"tokenizer_de": tokenizer.to_json(), "weights": torch.zeros(2)}, path)
        loaded = Tokenizer.from_json(torch.load(path, weights_only=True)["tokenizer_de"])
        assert (loaded.kind, loaded.vocab_size) == (tokenizer.kind, tokenizer.vocab_size)
        for text in [*GERMAN, "Ein Zebra läuft."]:
            assert loaded.encode(text) == tokenizer.encode(text)
            assert loaded.decode(loaded.encode(text)) == tokenizer.decode(tokenizer.encode(text))


def test_bad_input_gets_clear_errors(bpe_de):
    with pytest.raises(ValueError, match="kind must be one of"):
        train_tokenizer(GERMAN, kind="char")
    with pytest.raises(ValueError, match="at least one sentence"):
        train_tokenizer([])
    with pytest.raises(TypeError, match="expected a str, got list"):
        bpe_de.encode(["Ein", "Hund"])
    with pytest.raises(ValueError, match="outside the vocabulary"):
        bpe_de.id_to_token(bpe_de.vocab_size)
    with pytest.raises(ValueError, match="not a tokenizer"):
        Tokenizer.from_json("{}")
    with pytest.raises(ValueError, match="not a tokenizer JSON"):
        Tokenizer.from_json("<pad>")


WORDS = st.lists(st.sampled_from(sorted({w for line in GERMAN for w in line.split()})), min_size=1, max_size=12)


@settings(max_examples=60, deadline=None)
@given(WORDS)
def test_round_trip_property(word_de, bpe_de, words):
    text = " ".join(words)
    for tokenizer in (word_de, bpe_de):
        assert tokenizer.decode(tokenizer.encode(text)) == text
        index = tokenizer.word_index(text)
        assert max(index) == len(words) - 1 and index == sorted(index)


# The real corpus: a BPE tokenizer trained on Multi30k's training split only round-trips its test split.
REAL = next(
    (
        Path(c)
        for c in (os.environ.get("MULTI30K_DIR"), Path(__file__).resolve().parents[3] / "shared" / "data" / "multi30k")
        if c and (Path(c) / "train.de.gz").is_file()
    ),
    None,
)


@pytest.mark.skipif(REAL is None, reason="real Multi30k files not found")
def test_bpe_on_multi30k_round_trips_the_test_split():
    from helpers.data.corpus import load_corpus

    train = load_corpus("multi30k", "train", data_dir=REAL)
    test = load_corpus("multi30k", "test", data_dir=REAL)
    tokenizer = train_tokenizer(train.de, kind="bpe", vocab_size=4000)
    exact = sum(
        tokenizer.decode(ids) == text for ids, text in zip(tokenizer.encode_batch(test.de), test.de, strict=True)
    )
    assert exact / len(test) > 0.99  # only sentences with characters never seen in training may differ
    index = tokenizer.word_index(test.de[10])  # the running example: 12 whitespace tokens
    assert index == sorted(index) and set(index) == set(range(12))


def test_word_index_edge_cases(bpe_de):
    assert bpe_de.word_index("") == [] == bpe_de.encode("", add_special=False)
    index = bpe_de.word_index("Ein Hund ")  # a trailing space joins the last word
    assert len(index) == len(bpe_de.encode("Ein Hund ", add_special=False)) and index[-1] == 1
    with pytest.raises(ValueError, match="no words"):
        bpe_de.word_index("   ")


def test_train_tokenizers_uses_the_training_split_only():
    from helpers.data.corpus import ParallelCorpus

    train = ParallelCorpus("x", "train", GERMAN[:5], ENGLISH)
    de, en = train_tokenizers(train, kind="word", min_frequency=1)
    assert de.decode(de.encode(GERMAN[1])) == GERMAN[1]
    assert en.decode(en.encode(ENGLISH[1])) == ENGLISH[1]
    assert de.encode("dog", add_special=False) == [UNK_ID] and en.encode("Hund", add_special=False) == [UNK_ID]
    with pytest.raises(ValueError, match="training split only, got split 'test'"):
        train_tokenizers(ParallelCorpus("x", "test", GERMAN[:5], ENGLISH))


@pytest.mark.parametrize(
    "text", ["Der Straßenfußballspieler läuft, weil es regnet.", GERMAN[0], "Ein Hund läuft im Park ."]
)
def test_labels_from_ids_match_labels_from_text(bpe_de, word_de, text):
    for tokenizer in (bpe_de, word_de):
        ids = tokenizer.encode(text)
        assert tokenizer.id_tokens(ids) == tokenizer.tokens(text, add_special=True)


def test_bpe_on_the_course_corpus_round_trips_its_test_split():
    from helpers.data.corpus import load_corpus

    tok_de, tok_en = train_tokenizers(load_corpus("captions", "train"), kind="bpe")
    test = load_corpus("captions", "test")
    for tokenizer, texts in ((tok_de, test.de), (tok_en, test.en)):
        assert [tokenizer.decode(ids) for ids in tokenizer.encode_batch(texts)] == texts
    # every gold alignment index names a whitespace token that word_index can reach
    for de, alignment in zip(test.de[:200], test.alignments[:200], strict=True):
        assert {i for i, _ in alignment} <= set(tok_de.word_index(de))
