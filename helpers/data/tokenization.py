"""Tokenizers for German and English: word-level and BPE, built on the ``tokenizers`` library.

(Named ``tokenization`` rather than ``tokenize`` so it never shadows Python's own ``tokenize`` module.)

How text becomes tokens, for both kinds:

1. Unicode NFC normalisation (``ü`` is always one code point, so it is always one symbol).
2. Every space becomes the marker ``▁`` glued to the word after it (``Eine Mutter`` → ``▁Eine ▁Mutter``),
   and punctuation is split off (``Freien.`` → ``▁Freien`` ``.``). Case is kept: *Sohn* and *sohn* differ
   in German.
3. The model: **word** keeps whole pieces (a piece unseen in training becomes ``<unk>``); **bpe** splits
   rare words into frequent sub-word pieces (``▁Fuß`` ``ball`` ``spieler``), so only a character never
   seen in training is unknown.

Because the ``▁`` markers record where the spaces were, decoding is exact: join the pieces and turn
``▁`` back into spaces. ``decode(encode(text)) == text`` for any text made of known pieces, with no
space before punctuation, which is what sacreBLEU expects.

Special tokens have fixed ids in every tokenizer: ``<pad>`` 0, ``<bos>`` 1, ``<eos>`` 2, ``<unk>`` 3.
"""

from __future__ import annotations

import bisect
import json
import re
from collections.abc import Iterable, Sequence

import tokenizers
from tokenizers import decoders, models, normalizers, pre_tokenizers, trainers

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIAL_TOKENS = (PAD, BOS, EOS, UNK)
PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3
KINDS = ("word", "bpe")
SPACE = "▁"  # U+2581, stands for the space before a word
_FORMAT = "attention-course-tokenizer"


class Tokenizer:
    """A trained tokenizer for one language; make one with :func:`train_tokenizer` or :meth:`from_json`.

    ``kind`` is ``"word"`` or ``"bpe"``. Ids: ``<pad>`` 0, ``<bos>`` 1, ``<eos>`` 2, ``<unk>`` 3, then the
    vocabulary.
    """

    pad_id, bos_id, eos_id, unk_id = PAD_ID, BOS_ID, EOS_ID, UNK_ID

    def __init__(self, backend: tokenizers.Tokenizer, kind: str) -> None:
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        for expected_id, token in enumerate(SPECIAL_TOKENS):
            if backend.token_to_id(token) != expected_id:
                raise ValueError(f"special token {token} must have id {expected_id}, got {backend.token_to_id(token)}")
        self.backend = backend
        self.kind = kind

    # -- sizes and lookups ----------------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        """Number of ids, specials included (the size of the embedding table)."""
        return self.backend.get_vocab_size()

    def id_to_token(self, token_id: int) -> str:
        """The raw piece of an id, ``▁`` included (e.g. ``"▁Mutter"``)."""
        piece = self.backend.id_to_token(int(token_id))
        if piece is None:
            raise ValueError(f"id {token_id} is outside the vocabulary (0..{self.vocab_size - 1})")
        return piece

    def __repr__(self) -> str:
        return f"Tokenizer(kind={self.kind!r}, vocab_size={self.vocab_size})"

    # -- text → ids -----------------------------------------------------------------------------
    def encode(self, text: str, add_special: bool = True) -> list[int]:
        """Token ids of ``text``; with ``add_special``, wrapped as ``<bos> … <eos>``."""
        ids = self.backend.encode(_check_text(text)).ids
        return [BOS_ID, *ids, EOS_ID] if add_special else ids

    def encode_batch(self, texts: Sequence[str], add_special: bool = True) -> list[list[int]]:
        """:meth:`encode` for many texts at once (faster: the library works on the batch natively)."""
        encodings = self.backend.encode_batch([_check_text(text) for text in texts])
        if add_special:
            return [[BOS_ID, *e.ids, EOS_ID] for e in encodings]
        return [e.ids for e in encodings]

    # -- ids → text -----------------------------------------------------------------------------
    def decode(self, ids: Iterable[int]) -> str:
        """Text for BLEU from ids (a list or a 1-D tensor): stops at the first ``<eos>``, drops ``<bos>``
        and ``<pad>``, joins pieces, and puts spaces back where the ``▁`` markers were."""
        if hasattr(ids, "tolist"):
            ids = ids.tolist()
        pieces = []
        for token_id in ids:
            if token_id == EOS_ID:
                break
            if token_id in (BOS_ID, PAD_ID):
                continue
            # An unknown word lost its ▁ when it became <unk>; treat it as a word of its own.
            pieces.append(SPACE + UNK if token_id == UNK_ID else self.id_to_token(token_id))
        return "".join(pieces).replace(SPACE, " ").strip()

    def decode_batch(self, batch: Iterable[Iterable[int]]) -> list[str]:
        """:meth:`decode` for each row (e.g. of an (N, L) tensor of generated ids)."""
        return [self.decode(ids) for ids in batch]

    # -- labels and word positions (for attention plots) ---------------------------------------
    def tokens(self, text: str, add_special: bool = False) -> list[str]:
        """Readable labels, one per id of ``encode(text, add_special)``: words without ``▁``, and a
        sub-word piece that continues a word marked ``##`` (``Fußball`` → ``Fuß``, ``##ball``)."""
        encoding = self.backend.encode(_check_text(text))
        continues = _continues_word(text, encoding)
        labels = [_label(piece, inside) for piece, inside in zip(encoding.tokens, continues, strict=True)]
        return [BOS, *labels, EOS] if add_special else labels

    def id_tokens(self, ids: Iterable[int]) -> list[str]:
        """Readable labels for ids (e.g. a model's output), as :meth:`tokens` writes them: ``▁`` removed,
        a piece that continues a word marked ``##``, specials kept as ``<bos>``, ``<eos>``, ..."""
        if hasattr(ids, "tolist"):
            ids = ids.tolist()
        labels = []
        previous = ""
        for token_id in ids:
            piece = self.id_to_token(token_id)
            if piece in SPECIAL_TOKENS:
                labels.append(piece)
            else:
                # no space marker, and letters on both sides of the seam: the piece continues a word
                continues = not piece.startswith(SPACE) and piece[:1].isalnum() and previous[-1:].isalnum()
                labels.append(_label(piece, continues))
            previous = piece
        return labels

    def word_index(self, text: str) -> list[int]:
        """For each id of ``encode(text, add_special=False)``, the index of the whitespace token
        (``text.split()``) it comes from. Lets attention over tokens be compared with gold alignments,
        which count whitespace tokens: ``"Freien."`` is one whitespace token but two ids."""
        encoding = self.backend.encode(_check_text(text))
        words = list(re.finditer(r"\S+", text))
        if not words and encoding.offsets:
            raise ValueError(f"{text!r} has tokens but no words (nothing but spaces)")
        starts = [word.start() for word in words]
        index = []
        for _start, end in encoding.offsets:
            last = end - 1  # the token's last character: inside its word unless the token is a bare "▁"
            position = bisect.bisect_right(starts, last) - 1
            if text[last].isspace():
                position += 1  # a bare space marker belongs to the word after it
            index.append(min(max(position, 0), len(words) - 1))  # a trailing space joins the last word
        return index

    # -- saving with a checkpoint ---------------------------------------------------------------
    def to_json(self) -> str:
        """The whole tokenizer as one JSON string (store it in a checkpoint: ``weights_only`` loading
        accepts plain strings)."""
        return json.dumps({"format": _FORMAT, "version": 1, "kind": self.kind, "tokenizer": self.backend.to_str()})

    @classmethod
    def from_json(cls, text: str) -> Tokenizer:
        """The tokenizer that :meth:`to_json` wrote."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise ValueError(f"not a tokenizer JSON string: {error}") from error
        if not isinstance(data, dict) or data.get("format") != _FORMAT:
            raise ValueError(f"not a tokenizer written by Tokenizer.to_json (expected format {_FORMAT!r})")
        return cls(tokenizers.Tokenizer.from_str(data["tokenizer"]), data["kind"])


def train_tokenizer(
    texts: Iterable[str],
    kind: str = "bpe",
    vocab_size: int | None = None,
    min_frequency: int = 2,
) -> Tokenizer:
    """Train a tokenizer for one language on ``texts`` (use the *training* split only).

    Args:
        texts: sentences of one language.
        kind: ``"word"`` (whole words; rare ones become ``<unk>``) or ``"bpe"`` (sub-word pieces).
        vocab_size: largest vocabulary, specials included. Default: no limit for ``word``, 4000 for ``bpe``.
        min_frequency: ``word``: a word seen fewer times becomes ``<unk>``; ``bpe``: a pair of pieces
            seen fewer times is never merged.
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    texts = [_check_text(text) for text in texts]
    if not texts:
        raise ValueError("train_tokenizer needs at least one sentence")
    trainer: trainers.Trainer
    if kind == "word":
        backend = tokenizers.Tokenizer(models.WordLevel(unk_token=UNK))
        trainer = trainers.WordLevelTrainer(
            vocab_size=vocab_size or 10_000_000,
            min_frequency=min_frequency,
            special_tokens=list(SPECIAL_TOKENS),
            show_progress=False,
        )
    else:
        backend = tokenizers.Tokenizer(models.BPE(unk_token=UNK))
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size or 4000,
            min_frequency=min_frequency,
            special_tokens=list(SPECIAL_TOKENS),
            show_progress=False,
        )
    backend.normalizer = normalizers.NFC()
    backend.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Metaspace(), pre_tokenizers.Punctuation()])
    backend.decoder = decoders.Metaspace()  # for anyone using the library object directly
    backend.train_from_iterator(texts, trainer=trainer, length=len(texts))
    return Tokenizer(backend, kind)


def train_tokenizers(
    corpus, kind: str = "bpe", vocab_size: int | None = None, min_frequency: int = 2
) -> tuple[Tokenizer, Tokenizer]:
    """A German and an English tokenizer trained on a *training* split (a :class:`~helpers.data.corpus.ParallelCorpus`).

    Refuses any other split: a tokenizer that has seen the test sentences makes test scores look better
    than they are.
    """
    if getattr(corpus, "split", None) != "train":
        raise ValueError(f"train tokenizers on the training split only, got split {getattr(corpus, 'split', None)!r}")
    return (
        train_tokenizer(corpus.de, kind, vocab_size, min_frequency),
        train_tokenizer(corpus.en, kind, vocab_size, min_frequency),
    )


def _check_text(text: str) -> str:
    if not isinstance(text, str):
        raise TypeError(f"expected a str, got {type(text).__name__}")
    return text


def _continues_word(text: str, encoding: tokenizers.Encoding) -> list[bool]:
    """True for each token that continues a word begun by the previous token (a BPE piece inside a word)."""
    flags = []
    previous_end = None
    for start, end in encoding.offsets:
        piece = text[start:end]
        flags.append(previous_end == start and piece[:1].isalnum() and text[start - 1 : start].isalnum())
        previous_end = end
    return flags


def _label(piece: str, continues: bool) -> str:
    word = piece[1:] if piece.startswith(SPACE) and len(piece) > 1 else piece
    return f"##{word}" if continues else word
