"""Measuring a translator: sacreBLEU and chrF on held-out text, heads against gold alignments, ablation.

Shapes: layers x h decoder heads; per sentence, T produced (or reference) tokens with the final
EOS and S source tokens with BOS and EOS; I German and J English whitespace words.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import torch
from sacrebleu.metrics import BLEU, CHRF
from torch import Tensor

from helpers.data.batching import pad
from helpers.data.corpus import Alignment, ParallelCorpus
from helpers.models.translation.decoding import teacher_forced_attention
from helpers.models.translation.model import ablated_heads
from helpers.models.translation.translator import Translator


@dataclass
class Scores:
    """Corpus-level scores and sacreBLEU's signatures (which say exactly how they were computed)."""

    bleu: float
    chrf: float
    signature: str  # BLEU's signature
    chrf_signature: str
    sentences: int

    def to_dict(self) -> dict:
        return asdict(self)

    def __str__(self) -> str:
        return f"BLEU {self.bleu:.1f}  chrF {self.chrf:.1f}  ({self.sentences} sentences; {self.signature})"


def score_translations(hypotheses: Sequence[str], references: Sequence[str]) -> Scores:
    """sacreBLEU's BLEU and chrF of detokenised ``hypotheses`` against one reference each."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    if not hypotheses:
        raise ValueError("nothing to score: no sentences")
    bleu, chrf = BLEU(), CHRF()
    refs = [list(references)]
    return Scores(
        bleu=round(bleu.corpus_score(list(hypotheses), refs).score, 2),
        chrf=round(chrf.corpus_score(list(hypotheses), refs).score, 2),
        signature=str(bleu.get_signature()),
        chrf_signature=str(chrf.get_signature()),
        sentences=len(hypotheses),
    )


def evaluate(
    translator: Translator, corpus: ParallelCorpus, beam_size: int = 1, indices: Sequence[int] | None = None
) -> tuple[Scores, list[str]]:
    """Translate ``corpus.de`` (or the sentences at ``indices``) and score against ``corpus.en``."""
    indices = list(range(len(corpus))) if indices is None else list(indices)
    sources = [corpus.de[i] for i in indices]
    hypotheses = translator.translate(sources, beam_size=beam_size)
    return score_translations(hypotheses, [corpus.en[i] for i in indices]), hypotheses


# ---------------------------------------------------------------------------------------------
# Heads against gold alignments
# ---------------------------------------------------------------------------------------------
def word_attention(attention: Tensor, source_words: Sequence[int], target_words: Sequence[int]) -> Tensor:
    """Token-level cross-attention (..., T, S) -> word-level (..., J, I).

    ``source_words[s]`` is the German word of source column s (-1 for BOS/EOS, dropped) and
    ``target_words[t]`` the English word of row t (-1 for the final EOS, dropped). A word's column
    sums the attention its tokens got (``Freien`` and ``.`` both belong to ``Freien.``); a word's row
    averages the rows of its tokens, so every row still sums to at most 1.
    """
    source_word, target_word = torch.as_tensor(source_words), torch.as_tensor(target_words)  # (S,), (T,)
    I, J = int(source_word.max()) + 1, int(target_word.max()) + 1  # noqa: E741 (the notation's word counts)
    to_source = torch.zeros(attention.size(-1), I)  # (S, I) one-hot, zero rows for BOS/EOS
    keep = source_word >= 0
    to_source[keep.nonzero().squeeze(1), source_word[keep]] = 1.0
    to_target = torch.zeros(J, attention.size(-2))  # (J, T) averaging matrix
    keep = target_word >= 0
    to_target[target_word[keep], keep.nonzero().squeeze(1)] = 1.0
    to_target = to_target / to_target.sum(dim=1, keepdim=True).clamp(min=1.0)
    return to_target @ attention.float() @ to_source  # (..., J, T) @ (..., T, S) @ (S, I) -> (..., J, I)


@dataclass
class AlignmentReport:
    """How each head's cross-attention agrees with the gold word alignments.

    ``accuracy[l, k]``: share of aligned English words whose most-attended German word (by head k of
    layer l) is one of its gold partners. ``edge_share[l, k]``: mean attention that head puts on the
    source's BOS/EOS, a sign of a head that parks its attention instead of aligning. ``entropy[l, k]``:
    mean entropy of the head's rows (nats): low = sharp, high = spread out. ``diagonal_baseline``: the
    accuracy of guessing "the word at the same relative position", which a head must beat to have
    learned more than position.
    """

    accuracy: Tensor  # (n_layers, h)
    edge_share: Tensor  # (n_layers, h)
    entropy: Tensor  # (n_layers, h)
    diagonal_baseline: float
    words: int  # English words with a gold partner, over all sentences scored

    def best_head(self) -> tuple[int, int]:
        flat = int(self.accuracy.argmax())
        return divmod(flat, self.accuracy.size(1))


def alignment_report(
    translator: Translator,
    corpus: ParallelCorpus,
    indices: Sequence[int] | None = None,
    batch_size: int = 200,
    only_crossing: bool = False,
) -> AlignmentReport:
    """Score every cross-attention head against ``corpus.alignments``, reading the *reference* translations.

    Teacher forcing on the reference (not the model's own output) means every sentence is scored on the
    same English words as the gold alignment, whatever the model would have written. ``only_crossing``
    scores only the English words of crossing links (``crossing_words``): the reordered words, where
    following word order cannot be right.
    """
    if corpus.alignments is None:
        raise ValueError(f"corpus {corpus.name!r} has no gold alignments (only the course's captions corpus does)")
    indices = list(range(len(corpus))) if indices is None else list(indices)
    src_tok, tgt_tok = translator.source_tokenizer, translator.target_tokenizer
    config = translator.model.config
    hits = torch.zeros(config.num_decoder_layers, config.num_heads)
    edge = torch.zeros_like(hits)
    entropy = torch.zeros_like(hits)
    rows = 0
    words = 0
    diagonal_hits = 0
    for start in range(0, len(indices), batch_size):
        chunk = indices[start : start + batch_size]
        src = pad(translator.encode_sources([corpus.de[i] for i in chunk])).to(translator.device)  # (n, S)
        targets = [tgt_tok.encode(corpus.en[i], add_special=False) for i in chunk]
        for attention, i in zip(teacher_forced_attention(translator.model, src, targets), chunk, strict=True):
            # attention: (n_layers, h, T, S) with T = reference tokens + EOS, S = source tokens + BOS/EOS
            source_words = [-1, *src_tok.word_index(corpus.de[i]), -1]
            target_words = [*tgt_tok.word_index(corpus.en[i]), -1]
            a = attention[..., :-1, :]  # drop the EOS row: (n_layers, h, T-1, S)
            edge += (a[..., 0] + a[..., -1]).mean(dim=-1)
            entropy += -(a.clamp_min(1e-12).log() * a).sum(dim=-1).mean(dim=-1)
            rows += 1
            words_attention = word_attention(attention, source_words, target_words)  # (n_layers, h, J, I)
            predicted = words_attention.argmax(dim=-1)  # (n_layers, h, J)
            gold = _gold_sets(corpus.alignments[i])
            if only_crossing:
                crossing = crossing_words(corpus.alignments[i])
                gold = {j: partners for j, partners in gold.items() if j in crossing}
            I, J = words_attention.size(-1), words_attention.size(-2)  # noqa: E741 (the notation's word counts)
            for j, partners in gold.items():
                if j >= J:
                    continue
                words += 1
                hits += sum((predicted[..., j] == p).float() for p in partners)
                diagonal_hits += round(j * (I - 1) / max(J - 1, 1)) in partners
    if words == 0:
        raise ValueError("no aligned words to score in the chosen sentences")
    return AlignmentReport(
        accuracy=hits / words,
        edge_share=edge / rows,
        entropy=entropy / rows,
        diagonal_baseline=diagonal_hits / words,
        words=words,
    )


def crossing_links(alignment: Alignment) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """Pairs of gold links that cross: (i, j) and (i2, j2) with i < i2 but j > j2.

    Two words swap their order between the languages there, e.g. a German verb at the end of its
    clause (a perfect participle, a subordinate clause) whose English partner comes earlier.
    """
    links = sorted(set(alignment))
    return [(a, b) for a in links for b in links if a[0] < b[0] and a[1] > b[1]]


def crossing_words(alignment: Alignment) -> set[int]:
    """The English words j that take part in a crossing link."""
    return {link[1] for pair in crossing_links(alignment) for link in pair}


def crossing_example(corpus: ParallelCorpus, max_words: int = 10) -> tuple[int, tuple[int, int]]:
    """A sentence pair that shows reordering well, and its link that jumps: ``(k, (i, j))``.

    Chosen from the gold alignments alone, so every model is shown the same sentence: among pairs of at
    most ``max_words`` German words, the link (German i, English j) that crosses the most other links,
    where English word j has no other gold partner (so attending to its neighbours in word order cannot
    pass for following it): typically a participle or separable prefix at the end of a German clause,
    translated early in English. Ties go to the shorter sentence, then the first.
    """
    if corpus.alignments is None:
        raise ValueError(f"corpus {corpus.name!r} has no gold alignments (only the course's captions corpus does)")
    best, best_key = None, None
    for k, alignment in enumerate(corpus.alignments):
        words = len(corpus.de[k].split())
        if words > max_words:
            continue
        partners = _gold_sets(alignment)
        crossed: dict[tuple[int, int], int] = {}
        for pair in crossing_links(alignment):
            for link in pair:
                if len(partners[link[1]]) == 1:
                    crossed[link] = crossed.get(link, 0) + 1
        for link, count in crossed.items():
            key = (-count, words, k, link)
            if best_key is None or key < best_key:
                best, best_key = (k, link), key
    if best is None:
        raise ValueError(f"no sentence of at most {max_words} words has a crossing gold link")
    return best


def reference_word_attention(translator: Translator, source: str, reference: str) -> Tensor:
    """Word-level cross-attention (n_layers, h, J, I) while the decoder reads the reference translation.

    Rows are the reference's J English words (as the gold alignments count them), columns the source's
    I German words; see ``word_attention`` for how tokens are merged into words.
    """
    src_tok, tgt_tok = translator.source_tokenizer, translator.target_tokenizer
    src = pad(translator.encode_sources([source])).to(translator.device)  # (1, S)
    ids = tgt_tok.encode(reference, add_special=False)
    attention = teacher_forced_attention(translator.model, src, [ids])[0]  # (n_layers, h, T, S)
    return word_attention(attention, [-1, *src_tok.word_index(source), -1], [*tgt_tok.word_index(reference), -1])


def _gold_sets(alignment: Alignment) -> dict[int, set[int]]:
    """English word j -> the German words gold-aligned with it."""
    gold: dict[int, set[int]] = {}
    for i, j in alignment:
        gold.setdefault(j, set()).add(i)
    return gold


# ---------------------------------------------------------------------------------------------
# Head ablation
# ---------------------------------------------------------------------------------------------
def head_ablation(
    translator: Translator, corpus: ParallelCorpus, indices: Sequence[int] | None = None, beam_size: int = 1
) -> tuple[float, Tensor]:
    """BLEU with every head, and (n_layers, h) BLEU with each cross-attention head silenced in turn.

    The cost of a head is the drop from the first number to its entry: a head whose removal costs
    nothing was not needed (others do its work), however tidy its attention map looks.
    """
    config = translator.model.config
    full, _ = evaluate(translator, corpus, beam_size, indices)
    without = torch.zeros(config.num_decoder_layers, config.num_heads)
    for layer in range(config.num_decoder_layers):
        for head in range(config.num_heads):
            with ablated_heads(translator.model, {(layer, head)}):
                without[layer, head] = evaluate(translator, corpus, beam_size, indices)[0].bleu
    return full.bleu, without
