"""Turning a trained model's next-token scores into translations: greedy search and beam search.

Shapes: N sentences, K beams, S source length, L produced length (tokens incl. EOS), V vocabulary,
layers x h heads. Both searches cache what decoding can: the encoder runs once per batch, and each
decoder layer keeps, in a ``helpers.kv_cache.KVCache``, the projected keys and values of the positions
already decoded and those of the memory (projected once, at the first step), so a step runs the decoder
for the newest position only (``decode_step_cached``) instead of the whole prefix again. Finished
sentences leave the batch so that each greedy step only runs the decoder for those still writing.

Each search can also return the cross-attention of every decoder layer and head for the tokens it
produced. Because the decoder is causal, the attention of output row t depends only on the tokens
before it, so one teacher-forced pass over the finished output gives exactly the weights the search
saw at each step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from helpers.data.tokenization import BOS_ID, EOS_ID, PAD_ID
from helpers.kv_cache import KVCache
from helpers.models.translation.model import Seq2SeqTransformer


@dataclass
class Decoded:
    """What a search produced for a batch of N sentences.

    ``ids[n]``: the produced token ids without BOS and EOS.
    ``attention[n]``: (n_layers, h, L, S_n) cross-attention, one row per produced token plus the final
    EOS (L = len(ids[n]) + 1), one column per real (non-padding) source token; None unless asked for.
    """

    ids: list[list[int]]
    attention: list[Tensor] | None = None


def output_limits(model: Seq2SeqTransformer, src: Tensor, max_len: int | None) -> Tensor:
    """(N,) how many tokens (EOS included) each sentence may produce: ``max_len`` for all, or each its own.

    Without ``max_len``: twice the source sentence's length plus 10 (generous for captions), bounded by the
    position table. That length is the sentence's own (its non-padding tokens), not its batch's padded width,
    so a sentence that never writes EOS stops at the same place alone or in any batch.
    """
    if max_len is not None:
        if max_len < 1:
            raise ValueError(f"max_len must be at least 1 token, got {max_len}")
        return torch.full((src.size(0),), max_len, dtype=torch.long, device=src.device)
    lengths = src.ne(PAD_ID).sum(dim=1)  # (N,)
    return (2 * lengths + 10).clamp(max=model.config.max_len - 1)


@torch.no_grad()
def greedy_decode(
    model: Seq2SeqTransformer, src: Tensor, max_len: int | None = None, return_attention: bool = False
) -> Decoded:
    """Pick the most likely next token at every step, for a whole batch at once.

    src (N, S) source ids, padding = 0. ``max_len``: at most this many tokens per sentence (default: each
    sentence's ``output_limits``). Returns ``Decoded`` for the N sentences.
    """
    _check_source(src)
    model.eval()
    N = src.size(0)
    limits = output_limits(model, src, max_len)  # (N,)
    max_len = int(limits.max())
    memory, src_padding = model.encode(src)  # (N, S, E), (N, S): computed once, reused every step
    tokens = torch.full((N, max_len + 1), PAD_ID, dtype=torch.long, device=src.device)
    tokens[:, 0] = BOS_ID
    alive = torch.arange(N, device=src.device)  # sentences still writing
    cache = new_decoder_cache(model)  # per decoder layer: keys and values of the positions read, and the memory's
    for t in range(max_len):
        logits = decode_step_cached(model, tokens[alive, t : t + 1], memory, src_padding, cache)  # (n_alive, V)
        next_token = never_special(logits).argmax(dim=-1)  # (n_alive,)
        tokens[alive, t + 1] = next_token
        writing = next_token.ne(EOS_ID) & limits[alive].gt(t + 1)  # t + 1 tokens written so far
        alive, src_padding = alive[writing], src_padding[writing]
        cache.select(writing)
        if alive.numel() == 0:
            break
    ids = [_until_eos(row[1:].tolist()) for row in tokens]
    return Decoded(ids, _attention_for(model, src, ids) if return_attention else None)


def new_decoder_cache(model: Seq2SeqTransformer) -> KVCache:
    """An empty cache for ``decode_step_cached``: ``model.new_cache()``, one entry per decoder layer."""
    return model.new_cache()


def decode_step_cached(
    model: Seq2SeqTransformer, token: Tensor, memory: Tensor, src_padding: Tensor, cache: KVCache
) -> Tensor:
    """Logits (N, V) for the next token after one more target token ``token`` (N, 1), from ``cache``.

    ``model.decode_step`` with the cache the search keeps (and reorders, ``cache.select``) itself: the first
    call (an empty cache, ``token`` = BOS) projects ``memory`` (N, S, E) into every layer's cross-attention keys
    and values, every call adds the new position's self-attention keys and values. Equal to the last row of
    ``model.decode`` on the whole sequence so far (tested). ``src_padding`` (N, S), True = padding.
    """
    if cache is None:  # decode_step would make one, which the caller would then never see
        raise TypeError("cache must be new_decoder_cache(model), got None")
    return model.decode_step(token, memory, src_padding, cache)[0]


def never_special(logits: Tensor) -> Tensor:
    """The scores (..., V) with <pad> and <bos> ruled out: neither is ever an output token.

    A trained model gives them almost no probability (no target is ever <pad> or <bos>), but an untrained one
    can prefer them, and a <pad> read back as input would be a token the decoder's padding mask ignores.
    """
    return logits.index_fill(-1, torch.tensor([PAD_ID, BOS_ID], device=logits.device), float("-inf"))


def length_penalty(lengths: Tensor, alpha: float) -> Tensor:
    """GNMT's length normaliser ((5 + length) / 6) ** alpha: divides a hypothesis' log-probability.

    Without it beam search prefers short outputs, because every extra token lowers the total
    log-probability; alpha = 0 switches it off, alpha = 1 is close to dividing by the length.
    """
    return ((5.0 + lengths.float()) / 6.0) ** alpha


@torch.no_grad()
def beam_search(
    model: Seq2SeqTransformer,
    src: Tensor,
    beam_size: int = 4,
    alpha: float = 0.6,
    max_len: int | None = None,
    return_attention: bool = False,
) -> Decoded:
    """Keep the ``beam_size`` best partial translations per sentence, ranked with a length penalty.

    src (N, S). All N x K hypotheses run through the decoder as one batch of N*K rows. A finished
    hypothesis (it produced EOS) stays in its beam with a frozen score, extended by padding only, so
    it competes with the live ones until the search ends. A hypothesis that reaches its sentence's limit
    (``max_len``, or each sentence's ``output_limits``) is finished there too.
    """
    _check_source(src)
    if beam_size < 1:
        raise ValueError(f"beam_size must be at least 1, got {beam_size}")
    model.eval()
    N, K, device = src.size(0), beam_size, src.device
    limits = output_limits(model, src, max_len).unsqueeze(1)  # (N, 1)
    max_len = int(limits.max())
    memory, src_padding = model.encode(src)  # (N, S, E)
    memory = memory.repeat_interleave(K, dim=0)  # (N*K, S, E): each sentence's memory once per beam
    src_padding = src_padding.repeat_interleave(K, dim=0)  # (N*K, S)
    tokens = torch.full((N * K, 1), BOS_ID, dtype=torch.long, device=device)  # (N*K, t)
    scores = torch.full((N, K), float("-inf"), device=device)
    scores[:, 0] = 0.0  # all beams start identical: expand only the first, or the K beams would be copies
    lengths = torch.zeros(N, K, dtype=torch.long, device=device)
    finished = torch.zeros(N, K, dtype=torch.bool, device=device)
    cache = new_decoder_cache(model)  # per decoder layer, (N*K, ·) rows: reordered with the beams below
    for _ in range(max_len):
        logits = decode_step_cached(model, tokens[:, -1:], memory, src_padding, cache)  # (N*K, V)
        log_probs = F.log_softmax(never_special(logits), dim=-1)  # (N*K, V)
        V = log_probs.size(-1)
        log_probs = log_probs.view(N, K, V)
        # A finished hypothesis may only be continued by PAD, at no cost.
        frozen = torch.full_like(log_probs, float("-inf"))
        frozen[..., PAD_ID] = 0.0
        log_probs = torch.where(finished.unsqueeze(-1), frozen, log_probs)
        candidates = scores.unsqueeze(-1) + log_probs  # (N, K, V) total log-probability
        new_lengths = (lengths + (~finished).long()).unsqueeze(-1)  # (N, K, 1)
        ranked = candidates / length_penalty(new_lengths, alpha)  # (N, K, V)
        best = ranked.view(N, K * V).topk(K, dim=-1).indices  # (N, K) flat (beam, token) choices
        beam, token = best // V, best % V  # (N, K) each
        scores = candidates.view(N, K * V).gather(1, best)
        lengths = new_lengths.squeeze(-1).gather(1, beam)
        finished = finished.gather(1, beam) | token.eq(EOS_ID) | lengths.ge(limits)
        rows = (torch.arange(N, device=device).unsqueeze(1) * K + beam).view(-1)  # (N*K,) parent rows
        tokens = torch.cat([tokens[rows], token.view(-1, 1)], dim=1)  # (N*K, t+1)
        cache.select(rows)  # each beam continues its parent's cache
        if finished.all():
            break
    winner = (scores / length_penalty(lengths, alpha)).argmax(dim=-1)  # (N,)
    best_rows = torch.arange(N, device=device) * K + winner
    ids = [_until_eos(row[1:].tolist()) for row in tokens[best_rows]]
    return Decoded(ids, _attention_for(model, src, ids) if return_attention else None)


@torch.no_grad()
def teacher_forced_attention(model: Seq2SeqTransformer, src: Tensor, ids: Sequence[Sequence[int]]) -> list[Tensor]:
    """Cross-attention while the decoder reads ``[BOS] + ids[n]``: one (n_layers, h, L, S_n) per sentence.

    Row t is the step that produced token t of ``ids[n] + [EOS]``; this works for any target, the
    model's own output or a reference translation.
    """
    return _attention_for(model, src, [list(x) for x in ids])


def _attention_for(model: Seq2SeqTransformer, src: Tensor, ids: list[list[int]]) -> list[Tensor]:
    model.eval()
    L = max(len(x) for x in ids) + 1
    tgt_in = torch.full((len(ids), L), PAD_ID, dtype=torch.long, device=src.device)
    for n, x in enumerate(ids):
        tgt_in[n, : len(x) + 1] = torch.tensor([BOS_ID, *x], dtype=torch.long)
    with model.recording():
        model(src, tgt_in)
        weights = model.cross_attention().cpu()  # (n_layers, N, h, L, S)
    source_lengths = src.ne(PAD_ID).sum(dim=1).tolist()
    return [weights[:, n, :, : len(x) + 1, : source_lengths[n]] for n, x in enumerate(ids)]


def _until_eos(row: list[int]) -> list[int]:
    return row[: row.index(EOS_ID)] if EOS_ID in row else [t for t in row if t != PAD_ID]


def _check_source(src: Tensor) -> None:
    if src.dim() != 2 or src.dtype != torch.long:
        raise ValueError(f"src must be an (N, S) int64 tensor of token ids, got {tuple(src.shape)} {src.dtype}")
    if src.size(0) == 0:
        raise ValueError("src holds no sentences (N = 0)")
