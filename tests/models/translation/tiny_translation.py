"""Tiny translation models, sources and tasks that the tests of helpers/models/translation/ share."""

from __future__ import annotations

import torch

from helpers.data.tokenization import BOS_ID, EOS_ID, PAD_ID, train_tokenizer
from helpers.models.translation import (
    Seq2SeqTransformer,
    TranslationConfig,
    Translator,
)

TINY = dict(embed_dim=16, num_heads=2, num_encoder_layers=2, num_decoder_layers=2, ff_dim=32, dropout=0.0, max_len=32)


def tiny_model(seed: int = 0, src_vocab: int = 11, tgt_vocab: int = 13) -> Seq2SeqTransformer:
    torch.manual_seed(seed)
    return Seq2SeqTransformer(TranslationConfig(**TINY), src_vocab, tgt_vocab).eval()


def random_source(N: int = 3, S: int = 7, vocab: int = 11, seed: int = 1) -> torch.Tensor:
    """(N, S) ids BOS ... EOS with different lengths, padded with 0."""
    g = torch.Generator().manual_seed(seed)
    src = torch.full((N, S), PAD_ID, dtype=torch.long)
    for n in range(N):
        length = S - n
        src[n, :length] = torch.randint(4, vocab, (length,), generator=g)
        src[n, 0], src[n, length - 1] = BOS_ID, EOS_ID
    return src


def fake_translator(vocab_words: list[str]) -> Translator:
    tokenizer = train_tokenizer(vocab_words, kind="word", min_frequency=1)
    model = Seq2SeqTransformer(TranslationConfig(**TINY), tokenizer.vocab_size, tokenizer.vocab_size).eval()
    return Translator(model, tokenizer, tokenizer)


def copy_task(n: int = 48) -> list[tuple[list[int], list[int]]]:
    g = torch.Generator().manual_seed(0)
    examples = []
    for _ in range(n):
        body = torch.randint(4, 11, (int(torch.randint(2, 6, (1,), generator=g)),), generator=g).tolist()
        examples.append(([BOS_ID, *body, EOS_ID], [BOS_ID, *body, EOS_ID]))
    return examples


def without_specials(logits: torch.Tensor) -> torch.Tensor:
    """Searches never output <pad> or <bos>: their scores become -inf."""
    logits = logits.clone()
    logits[..., [PAD_ID, BOS_ID]] = float("-inf")
    return logits


def naive_greedy(model: Seq2SeqTransformer, src_row: torch.Tensor, max_len: int) -> list[int]:
    """One sentence, full forward pass each step: the definition batched greedy search must match."""
    src = src_row[src_row.ne(PAD_ID)].unsqueeze(0)
    out = [BOS_ID]
    with torch.no_grad():
        for _ in range(max_len):
            token = int(without_specials(model(src, torch.tensor([out]))[0, -1]).argmax())
            if token == EOS_ID:
                break
            out.append(token)
    return out[1:]
