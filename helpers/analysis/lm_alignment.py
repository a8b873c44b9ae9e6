"""Does a decoder-only model's self-attention align words? Lesson 06's measure carried over (lesson 17).

Lesson 06 scored a translator's cross-attention against the captions' gold word alignments: for each English word
with a gold partner, the German word its attention row weighs most, a hit when that word is one of the partners
(``helpers.models.translation.evaluation``). A decoder-only model has no cross-attention: it reads the pair as one
text (``helpers.analysis.lora_translation.PROMPT``),

    German: Der Musiker fährt Fahrrad.⏎English: The musician is riding a bike.<end>

and each position's self-attention spreads over everything before it: the labels, the German, the English
written so far. The German words' tokens are the columns here, the English words' positions the rows; attention to
anything else (the first token, which many heads park on, the labels, the English) is left out of the argmax, as
lesson 06 left out BOS and EOS.

**Which position is an English word's query.** Lesson 06's rows are the decoder steps that *predict* a word's
tokens. Here the position that predicts a token is the one before it: the ":" of "English:" predicts "The", "The"
predicts "musician". So a word's row is the mean of the rows of the positions that predict its tokens
(``"predicting"``, the default): the attention that chooses the word, in the same place as lesson 06's. The
alternative is the rows at the word's own tokens (``"reading"``): the attention of a position that has just read
the word, which serves to predict the *next* one. Both come out of the same forward pass, so both are reported.
For a word of one token they are the rows before it and at it; a word of several tokens (" Fahr" "rad" ".")
averages its rows, and its column sums its tokens' attention, as lesson 06's ``word_attention`` does (it is reused).

**Baselines**, so that a score has a reference: ``diagonal_baseline``, lesson 06's guess of the German word at the
same relative place (English word j of J → German word round(j · (I - 1) / (J - 1))), and ``uniform_baseline``, the
expected score of a German word picked at random (a word's partners over I). A head that aligns beats both; a head
that follows position alone scores near the diagonal, and only on reordered words (``crossing``) does position
fail: there the diagonal guess is scored too.

Shapes: n_layers layers of h query heads; per pair T tokens, I German and J English whitespace words.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from helpers.analysis.lora_translation import CaptionPair, encode_corpus, pad_right
from helpers.data.corpus import Alignment, ParallelCorpus
from helpers.models.translation.evaluation import crossing_words, word_attention

__all__ = ["CONVENTIONS", "AlignmentScores", "WordHits", "alignment_scores", "query_words", "word_hits"]

CONVENTIONS = ("predicting", "reading")


def query_words(english_word: Sequence[int], convention: str = "predicting") -> list[int]:
    """Each position's English word as a query row, (T,) -> (T,), -1 for rows not scored.

    ``"predicting"``: position t stands for the word of token t + 1, the token it predicts (the last position
    predicts nothing: -1). ``"reading"``: position t stands for its own token's word."""
    if convention not in CONVENTIONS:
        raise ValueError(f"convention must be one of {CONVENTIONS}, got {convention!r}")
    words = list(english_word)
    return [*words[1:], -1] if convention == "predicting" else words


@dataclass
class WordHits:
    """One pair's counts: ``hits`` (...) English words whose most-attended German word is a gold partner, over
    ``words`` aligned English words; ``diagonal`` the hits of the same-relative-place guess, ``uniform`` the
    expected hits of a German word picked at random."""

    hits: Tensor
    words: int
    diagonal: int
    uniform: float


def word_hits(
    attention: Tensor,
    german_word: Sequence[int],
    row_words: Sequence[int],
    alignment: Alignment,
    only: set[int] | None = None,
) -> WordHits:
    """Score attention (..., T, T) of one pair (rows queries, columns keys; e.g. (n_layers, h, T, T)) against its
    gold ``alignment`` ((German word i, English word j) pairs).

    ``german_word`` (T,): each key position's German word (-1: not German); ``row_words`` (T,): the English word
    each query row stands for (``query_words``; -1: not scored). Rows are merged into words by averaging, columns
    by summing (lesson 06's ``word_attention``); each aligned English word j then looks at the German word with
    the most attention, a hit when that word is one of j's partners. ``only``: score only these English words
    (``crossing_words(alignment)``: the reordered ones)."""
    T = attention.size(-1)
    if attention.dim() < 2 or attention.size(-2) != T:
        raise ValueError(f"attention must be (..., T, T), got {tuple(attention.shape)}")
    if len(german_word) != T or len(row_words) != T:
        raise ValueError(f"german_word ({len(german_word)}) and row_words ({len(row_words)}) must have T = {T} entries")
    I, J = max(german_word) + 1, max(row_words) + 1  # noqa: E741 (the notation's word counts)
    if I < 1 or J < 1:
        raise ValueError("the pair has no German key or no English query: nothing to score")
    partners: dict[int, set[int]] = {}
    for i, j in alignment:
        if not (0 <= i < I) or j < 0:
            raise ValueError(f"the gold link {i}-{j} names a German word the tokens do not have (I = {I})")
        partners.setdefault(j, set()).add(i)
    scored = {j: ps for j, ps in partners.items() if j < J and (only is None or j in only)}
    words = word_attention(attention, german_word, row_words)  # (..., J, I)
    predicted = words.argmax(dim=-1)  # (..., J): the German word each English word looks at most
    hits = torch.zeros(attention.shape[:-2])
    diagonal, uniform = 0, 0.0
    for j, ps in scored.items():
        hits += sum((predicted[..., j] == i).float() for i in ps)
        diagonal += round(j * (I - 1) / max(J - 1, 1)) in ps
        uniform += len(ps) / I
    return WordHits(hits, len(scored), diagonal, uniform)


@dataclass
class AlignmentScores:
    """How each head's attention from English words to German words agrees with the gold alignments.

    ``predicting[l, k]`` / ``reading[l, k]``: the share of aligned English words (``words`` in all) whose
    most-attended German word, by head k of layer l, is a gold partner, with each convention (module docstring).
    ``crossing[l, k]``: ``predicting`` on the English words of crossing links only (``crossing_words`` of them).
    ``german_share[l, k]``: the mean attention the predicting rows of aligned English words give the German tokens
    at all (the rest goes to the labels, the first token, the English). Baselines: ``diagonal_baseline`` and
    ``uniform_baseline`` (on all aligned words), ``crossing_diagonal`` (on the crossing ones)."""

    predicting: Tensor  # (n_layers, h)
    reading: Tensor  # (n_layers, h)
    crossing: Tensor  # (n_layers, h)
    german_share: Tensor  # (n_layers, h)
    diagonal_baseline: float
    uniform_baseline: float
    crossing_diagonal: float
    words: int
    crossing_words: int
    pairs: int

    def best_head(self, convention: str = "predicting") -> tuple[int, int]:
        """(layer, head) of the highest score under ``convention`` ("predicting", "reading" or "crossing")."""
        table = getattr(self, convention) if convention in (*CONVENTIONS, "crossing") else None
        if table is None:
            raise ValueError(f"convention must be one of {(*CONVENTIONS, 'crossing')}, got {convention!r}")
        layer, head = divmod(int(table.argmax()), table.size(1))
        return layer, head


@torch.no_grad()
def alignment_scores(
    model: nn.Module,
    tokenizer,
    corpus: ParallelCorpus,
    indices: Sequence[int] | None = None,
    batch_size: int = 8,
    end_id: int | None = None,
) -> AlignmentScores:
    """``AlignmentScores`` of every head of ``model`` (a ``helpers.gpt.GPT``) on the corpus's pairs at ``indices``
    (None: all), each read as prompt + reference translation (``encode_pair``: teacher forcing on the reference,
    so every model is scored on the same English words whatever it would write).

    Pairs run ``batch_size`` at a time, right-padded: attention is causal, so a pair's own T × T weights are those
    it gets alone (the pads come after it), and they are cut out of the batch's."""
    if corpus.alignments is None:
        raise ValueError(f"corpus {corpus.name!r} has no gold alignments (only the course's captions corpus does)")
    indices = list(range(len(corpus)) if indices is None else indices)
    if not indices:
        raise ValueError("no pairs to score")
    pairs = encode_corpus(tokenizer, corpus, indices, end_id)
    totals: dict[str, Tensor] = {}
    counts = dict.fromkeys(("words", "crossing_words", "diagonal", "uniform", "crossing_diagonal", "rows"), 0.0)
    device = next(model.parameters()).device
    for start in range(0, len(pairs), batch_size):
        chunk = pairs[start : start + batch_size]
        ids, _, lengths = pad_right(chunk)
        _, weights = model(ids.to(device), need_weights=True, last_only=True)  # n_layers × (N, h, T, T)
        for row, (pair, index) in enumerate(zip(chunk, indices[start : start + batch_size], strict=True)):
            L = int(lengths[row])
            attention = torch.stack([w[row, :, :L, :L] for w in weights]).float().cpu()  # (n_layers, h, L, L)
            _add_pair(totals, counts, attention, pair, corpus.alignments[index])
    if counts["words"] == 0:
        raise ValueError("no aligned English words in the chosen pairs")
    words, crossing = int(counts["words"]), max(int(counts["crossing_words"]), 1)
    return AlignmentScores(
        predicting=totals["predicting"] / words,
        reading=totals["reading"] / words,
        crossing=totals["crossing"] / crossing,
        german_share=totals["german_share"] / max(counts["rows"], 1),
        diagonal_baseline=counts["diagonal"] / words,
        uniform_baseline=counts["uniform"] / words,
        crossing_diagonal=counts["crossing_diagonal"] / crossing,
        words=words,
        crossing_words=int(counts["crossing_words"]),
        pairs=len(pairs),
    )


def _add_pair(
    totals: dict[str, Tensor], counts: dict[str, float], attention: Tensor, pair: CaptionPair, alignment: Alignment
) -> None:
    """Add one pair's hits (both conventions, the crossing words) and German share to the running totals."""

    def add(name: str, value: Tensor) -> None:
        totals[name] = totals[name] + value if name in totals else value

    predicting_rows = query_words(pair.english_word, "predicting")
    predicting = word_hits(attention, pair.german_word, predicting_rows, alignment)
    reading = word_hits(attention, pair.german_word, query_words(pair.english_word, "reading"), alignment)
    crossing = word_hits(attention, pair.german_word, predicting_rows, alignment, only=crossing_words(alignment))
    add("predicting", predicting.hits)
    add("reading", reading.hits)
    add("crossing", crossing.hits)
    counts["words"] += predicting.words
    counts["diagonal"] += predicting.diagonal
    counts["uniform"] += predicting.uniform
    counts["crossing_words"] += crossing.words
    counts["crossing_diagonal"] += crossing.diagonal
    aligned = {j for _, j in alignment}
    rows = [t for t, j in enumerate(predicting_rows) if j in aligned]  # the predicting rows of aligned words
    german = torch.tensor([i >= 0 for i in pair.german_word])
    add("german_share", attention[..., rows, :][..., german].sum(dim=-1).sum(dim=-1))
    counts["rows"] += len(rows)
