"""The translator's step-by-step decoder on the shared KV cache: projected keys and values, the memory's once."""

from __future__ import annotations

import pytest
import torch
from tiny_translation import random_source, tiny_model
from torch import nn

from helpers.attention import MultiHeadAttention, causal_mask
from helpers.data.tokenization import BOS_ID
from helpers.layers import InspectableDecoderLayer
from helpers.models.translation import beam_search, greedy_decode
from helpers.models.translation.decoding import decode_step_cached, never_special, new_decoder_cache


@pytest.mark.parametrize("norm_first", [False, True])
def test_layer_step_gives_each_row_of_the_stock_layers_causal_pass(norm_first):
    torch.manual_seed(0)
    N, L, S, E, h = 3, 5, 6, 16, 4
    stock = nn.TransformerDecoderLayer(E, h, 32, dropout=0.0, batch_first=True, norm_first=norm_first).double()
    ours = InspectableDecoderLayer(E, h, 32, dropout=0.0, batch_first=True, norm_first=norm_first).double()
    ours.load_state_dict(stock.state_dict())
    stock.eval(), ours.eval()
    tgt, memory = torch.randn(N, L, E, dtype=torch.float64), torch.randn(N, S, E, dtype=torch.float64)
    padding = torch.zeros(N, S, dtype=torch.bool)
    padding[1, 4:] = True
    with torch.no_grad():
        full = stock(tgt, memory, tgt_mask=causal_mask(L), tgt_is_causal=True, memory_key_padding_mask=padding)
        past = None
        for t in range(L):
            row, past = ours.step(tgt[:, t : t + 1], past, memory if past is None else None, padding)
            torch.testing.assert_close(row[:, 0], full[:, t], atol=1e-10, rtol=0)
    d = E // h
    assert [tuple(x.shape) for x in past] == [(N, h, L, d), (N, h, L, d), (N, h, S, d), (N, h, S, d)]
    with pytest.raises(ValueError, match="needs the encoder's memory"):
        ours.step(tgt[:, :1], None, None)
    with pytest.raises(TypeError, match="past must be None or the"):
        ours.step(tgt[:, :1], tgt[:, :1], memory)


def test_decode_step_cached_equals_the_full_decode_and_projects_the_memory_once(monkeypatch):
    model = tiny_model(seed=2)
    src = random_source(N=3, S=7, seed=4)
    tgt = torch.randint(4, 13, (3, 6), generator=torch.Generator().manual_seed(0))
    tgt[:, 0] = BOS_ID
    projections = []
    original = MultiHeadAttention.project_key_value

    def counting(self, key, value):
        projections.append((self, key.size(1)))
        return original(self, key, value)

    monkeypatch.setattr(MultiHeadAttention, "project_key_value", counting)
    with torch.no_grad():
        memory, src_padding = model.encode(src)
        full = model.decode(tgt, memory, src_padding)  # (N, L, V)
        projections.clear()
        cache, old_cache = new_decoder_cache(model), None
        for t in range(tgt.size(1)):
            logits = decode_step_cached(model, tgt[:, t : t + 1], memory, src_padding, cache)
            torch.testing.assert_close(logits, full[:, t], atol=1e-5, rtol=1e-5)
            counted = len(projections)
            old, old_cache = model.decode_step(tgt[:, t : t + 1], memory, src_padding, old_cache)
            del projections[counted:]  # count the cached decoder's projections only
            torch.testing.assert_close(logits, old, atol=1e-5, rtol=1e-5)
    assert cache.length == 6 and cache.owner is model
    assert [tuple(t.shape) for t in cache.layers[0]] == [(3, 2, 6, 8), (3, 2, 6, 8), (3, 2, 7, 8), (3, 2, 7, 8)]
    cross = [module for module, length in projections if length == 7]  # the memory's keys and values
    layers = model.decoder_layers
    assert sorted(map(id, cross)) == sorted(id(layer.multihead_attn) for layer in layers)  # once per layer


def test_a_decoder_cache_from_another_model_is_refused():
    first, second = tiny_model(seed=0), tiny_model(seed=1)
    src = random_source(N=2, S=5)
    with torch.no_grad():
        memory, padding = first.encode(src)
        cache = new_decoder_cache(first)
        decode_step_cached(first, torch.full((2, 1), BOS_ID), memory, padding, cache)
        with pytest.raises(ValueError, match="belongs to another Seq2SeqTransformer"):
            decode_step_cached(second, torch.full((2, 1), 5), memory, padding, cache)
        with pytest.raises(TypeError, match="new_decoder_cache"):
            decode_step_cached(first, torch.full((2, 1), 5), memory, padding, [None, None])


def _greedy_with_input_cache(model, src, max_len):
    """The plainest greedy loop: every sentence decoded to max_len through decode_step, no rows dropped."""
    memory, padding = model.encode(src)
    tokens, cache = torch.full((src.size(0), 1), BOS_ID), None
    for _ in range(max_len):
        logits, cache = model.decode_step(tokens[:, -1:], memory, padding, cache)
        tokens = torch.cat((tokens, never_special(logits).argmax(-1, keepdim=True)), dim=1)
    return tokens[:, 1:]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_greedy_and_beam_outputs_do_not_depend_on_which_cache_decodes(seed):
    model, src = tiny_model(seed=seed), random_source(N=4, S=8, seed=seed + 10)
    with torch.no_grad():
        reference = _greedy_with_input_cache(model, src, max_len=9)
        decoded = greedy_decode(model, src, max_len=9)
        single_beam = beam_search(model, src, beam_size=1, alpha=0.0, max_len=9)
    for n, ids in enumerate(decoded.ids):
        row = reference[n].tolist()
        assert ids == (row[: row.index(2)] if 2 in row else row)  # up to EOS (id 2)
    assert single_beam.ids == decoded.ids  # one beam without a length penalty is the greedy search
