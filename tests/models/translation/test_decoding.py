"""helpers.models.translation.decoding: greedy and beam search against their plain definitions."""

from __future__ import annotations

import pytest
import torch
from tiny_translation import naive_greedy, random_source, tiny_model, without_specials

from helpers.data.tokenization import BOS_ID, EOS_ID, PAD_ID
from helpers.models.translation import (
    Seq2SeqTransformer,
    beam_search,
    greedy_decode,
)
from helpers.models.translation.decoding import length_penalty

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_batched_greedy_equals_one_sentence_at_a_time():
    model = tiny_model(seed=3)
    src = random_source(N=4, S=8, seed=5)
    decoded = greedy_decode(model, src, max_len=12)
    assert decoded.ids == [naive_greedy(model, row, 12) for row in src]


def test_greedy_attention_is_what_the_decoder_saw_for_each_produced_token():
    model = tiny_model(seed=3)
    src = random_source(N=3, S=7, seed=2)
    decoded = greedy_decode(model, src, max_len=6, return_attention=True)
    for n, (ids, attention) in enumerate(zip(decoded.ids, decoded.attention, strict=True)):
        S_n = int(src[n].ne(PAD_ID).sum())
        assert attention.shape == (2, 2, len(ids) + 1, S_n)  # (n_layers, h, T, S_n)
        with torch.no_grad(), model.recording():
            model(src[n : n + 1, :S_n], torch.tensor([[BOS_ID, *ids]]))
        assert torch.allclose(attention, model.cross_attention()[:, 0], atol=1e-5)


def test_beam_of_one_without_length_penalty_is_greedy():
    model = tiny_model(seed=4)
    src = random_source(N=3, S=8, seed=6)
    assert beam_search(model, src, beam_size=1, alpha=0.0, max_len=10).ids == greedy_decode(model, src, max_len=10).ids


def sequence_log_prob(model, src_row, ids) -> float:
    src = src_row[src_row.ne(PAD_ID)].unsqueeze(0)
    target = torch.tensor([[BOS_ID, *ids, EOS_ID]])
    with torch.no_grad():
        log_probs = without_specials(model(src, target[:, :-1])).log_softmax(-1)
    return float(log_probs[0].gather(1, target[0, 1:, None]).sum())


def test_beam_search_finds_a_hypothesis_at_least_as_good_as_greedy_and_is_batch_independent():
    model = tiny_model(seed=7)
    src = random_source(N=3, S=8, seed=8)
    alpha = 0.6
    beams = beam_search(model, src, beam_size=4, alpha=alpha, max_len=10)
    greedy = greedy_decode(model, src, max_len=10)
    for n in range(3):

        def normalised(ids, row=src[n]):
            return sequence_log_prob(model, row, ids) / float(length_penalty(torch.tensor(len(ids) + 1), alpha))

        if len(greedy.ids[n]) < 10:  # greedy finished within the limit, so beam search saw its path too
            assert normalised(beams.ids[n]) >= normalised(greedy.ids[n]) - 1e-4
        single = beam_search(
            model, src[n : n + 1, : int(src[n].ne(PAD_ID).sum())], beam_size=4, alpha=alpha, max_len=10
        )
        assert single.ids[0] == beams.ids[n]
    assert len(beam_search(model, src, beam_size=4, return_attention=True, max_len=5).attention) == 3


def test_decode_step_gives_the_last_row_of_a_full_decode():
    model = tiny_model(seed=2)
    src = random_source(N=3, S=7, seed=4)
    tgt = torch.randint(4, 13, (3, 6), generator=torch.Generator().manual_seed(0))
    tgt[:, 0] = BOS_ID
    with torch.no_grad():
        memory, src_padding = model.encode(src)
        full = model.decode(tgt, memory, src_padding)  # (N, L, V)
        cache = None
        for t in range(tgt.size(1)):
            logits, cache = model.decode_step(tgt[:, t : t + 1], memory, src_padding, cache)
            torch.testing.assert_close(logits, full[:, t], atol=1e-5, rtol=1e-5)
    # The projected KV cache (this asserted the old input cache, one (N, t, E) per layer): per decoder layer the
    # self-attention's keys and values (N, h, t, d) and the memory's (N, h, S, d), E = 16 split into h = 2.
    assert cache.length == 6 and cache.owner is model
    assert [[tuple(t.shape) for t in entry] for entry in cache.layers] == [[(3, 2, 6, 8)] * 2 + [(3, 2, 7, 8)] * 2] * 2


def naive_beam_search(
    model: Seq2SeqTransformer, src_row: torch.Tensor, k: int, alpha: float, max_len: int
) -> list[int]:
    """One sentence, k hypotheses as plain lists, a full forward pass for each: the definition the
    batched, cached search must match. A finished hypothesis keeps its score and competes on."""
    src = src_row[src_row.ne(PAD_ID)].unsqueeze(0)

    def rank(hypothesis):
        _, score, length, _ = hypothesis
        return score / float(length_penalty(torch.tensor(length), alpha))

    beams = [([BOS_ID], 0.0, 0, False)]  # (tokens, log-probability, length with EOS, finished)
    for _ in range(max_len):
        candidates = []
        for tokens, score, length, finished in beams:
            if finished:
                candidates.append((tokens, score, length, True))
                continue
            with torch.no_grad():
                log_probs = without_specials(model(src, torch.tensor([tokens]))[0, -1]).log_softmax(-1).tolist()
            candidates += [([*tokens, t], score + lp, length + 1, t == EOS_ID) for t, lp in enumerate(log_probs)]
        beams = sorted(candidates, key=rank, reverse=True)[:k]
        if all(finished for *_, finished in beams):
            break
    tokens = max(beams, key=rank)[0][1:]
    return tokens[: tokens.index(EOS_ID)] if EOS_ID in tokens else tokens


def test_batched_cached_beam_search_equals_the_plain_definition():
    for seed in (7, 9):
        model = tiny_model(seed=seed)
        src = random_source(N=3, S=8, seed=seed + 1)
        batched = beam_search(model, src, beam_size=3, alpha=0.6, max_len=6).ids
        assert batched == [naive_beam_search(model, row, k=3, alpha=0.6, max_len=6) for row in src]


def never_ending(seed: int) -> Seq2SeqTransformer:
    """A tiny model that never writes EOS: every sentence runs to its length limit."""
    model = tiny_model(seed=seed)
    with torch.no_grad():
        model.generator.bias[EOS_ID] = -1e9
    return model


@pytest.mark.parametrize(
    "search", [greedy_decode, lambda model, src: beam_search(model, src, beam_size=3)], ids=["greedy", "beam"]
)
def test_a_sentence_that_never_ends_stops_at_its_own_limit_in_any_batch(search):
    """The default limit is 2 * (the sentence's own length) + 10, capped by the position table; not the batch's."""
    model = never_ending(seed=3)
    short = random_source(N=1, S=4, seed=1)  # BOS w w EOS: 4 tokens -> at most 18
    long = random_source(N=1, S=12, seed=2)  # 12 tokens -> 34, capped at max_len - 1 = 31
    batch = torch.zeros(2, 12, dtype=torch.long)
    batch[0, :4], batch[1] = short[0], long[0]
    together = search(model, batch).ids
    assert [len(ids) for ids in together] == [18, 31]
    assert together == [search(model, short).ids[0], search(model, long).ids[0]]


def test_decoding_rejects_bad_sources():
    model = tiny_model()
    with pytest.raises(ValueError, match="int64"):
        greedy_decode(model, torch.zeros(2, 3))
    with pytest.raises(ValueError, match="beam_size"):
        beam_search(model, random_source(), beam_size=0)
    with pytest.raises(ValueError, match="max_len must be at least 1"):
        greedy_decode(model, random_source(), max_len=0)
