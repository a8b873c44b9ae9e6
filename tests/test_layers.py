"""InspectableDecoderLayer must be nn.TransformerDecoderLayer plus recorded per-head weights.

Every expected value comes from PyTorch itself: the stock decoder layer / decoder / transformer
loaded with the same state dict, and a separate nn.MultiheadAttention(average_attn_weights=False)
fed the very inputs the stock layer's attention modules received.
"""

from __future__ import annotations

import copy
import gc
import inspect
import itertools
import weakref

import pytest
import torch
from torch import Tensor, nn

import helpers
from helpers.layers import (
    InspectableDecoderLayer,
    cross_attention_weights,
    recording,
    self_attention_weights,
)

E, H, FF = 16, 4, 32
N, L, S = 3, 5, 7
TGT_LENGTHS = [5, 3, 4]  # real target tokens per sentence; the rest is padding
SRC_LENGTHS = [7, 4, 6]
MASK_CASES = ["none", "tgt_causal", "tgt_padding", "memory_padding", "memory_mask", "all"]
DTYPE = torch.float64  # so that the two code paths (fused vs explicit softmax) agree to ~1e-12
ATOL = 1e-10


def _padding(lengths: list[int], size: int) -> Tensor:
    return torch.arange(size)[None, :] >= torch.tensor(lengths)[:, None]  # (N, size), True = padding


def _masks(case: str) -> dict:
    """Keyword arguments for the decoder layer's forward, in nn.MultiheadAttention's conventions."""
    causal = nn.Transformer.generate_square_subsequent_mask(L, dtype=DTYPE)  # float, -inf above diagonal
    memory_mask = torch.zeros(L, S, dtype=torch.bool)
    memory_mask[torch.arange(L), torch.arange(L) % S] = True  # block one source position per query
    tgt_padding, memory_padding = _padding(TGT_LENGTHS, L), _padding(SRC_LENGTHS, S)
    return {
        "none": {},
        "tgt_causal": {"tgt_mask": causal, "tgt_is_causal": True},
        "tgt_padding": {"tgt_key_padding_mask": tgt_padding},
        "memory_padding": {"memory_key_padding_mask": memory_padding},
        "memory_mask": {"memory_mask": memory_mask},
        "all": {
            "tgt_mask": helpers.causal_mask(L),  # bool this time (True = blocked), like the padding masks
            "tgt_is_causal": True,
            "tgt_key_padding_mask": tgt_padding,
            "memory_mask": memory_mask,
            "memory_key_padding_mask": memory_padding,
        },
    }[case]


def _inputs(batch_first: bool, seed: int = 0) -> tuple[Tensor, Tensor]:
    gen = torch.Generator().manual_seed(seed)
    tgt = torch.randn(N, L, E, generator=gen, dtype=DTYPE)
    memory = torch.randn(N, S, E, generator=gen, dtype=DTYPE)
    if not batch_first:
        tgt, memory = tgt.transpose(0, 1).contiguous(), memory.transpose(0, 1).contiguous()  # (T, N, E)
    return tgt.requires_grad_(), memory.requires_grad_()


def _pair(norm_first: bool, batch_first: bool, **kwargs) -> tuple[nn.TransformerDecoderLayer, InspectableDecoderLayer]:
    """A stock layer with random non-trivial weights, and ours loaded from its state dict."""
    torch.manual_seed(1)
    config = dict(
        d_model=E, nhead=H, dim_feedforward=FF, dropout=0.0, norm_first=norm_first, batch_first=batch_first, dtype=DTYPE
    )
    config.update(kwargs)
    stock = nn.TransformerDecoderLayer(**config)
    with torch.no_grad():  # make biases and norms non-zero so that a missed term shows up
        for p in stock.parameters():
            p.add_(0.1 * torch.randn_like(p))
    ours = InspectableDecoderLayer(**config)
    ours.load_state_dict(stock.state_dict())
    return stock, ours


def _capture_attention_inputs(layer: nn.TransformerDecoderLayer) -> dict[str, tuple]:
    """Record (args, kwargs) of every call to the layer's two attention modules."""
    calls: dict[str, tuple] = {}

    def hook(name):
        def save(module, args, kwargs):
            calls[name] = (tuple(a.detach() for a in args), dict(kwargs))

        return save

    layer.self_attn.register_forward_pre_hook(hook("self"), with_kwargs=True)
    layer.multihead_attn.register_forward_pre_hook(hook("cross"), with_kwargs=True)
    return calls


def _reference_weights(attn: nn.MultiheadAttention, args: tuple, kwargs: dict) -> Tensor:
    """Per-head weights from a fresh nn.MultiheadAttention holding the same weights."""
    fresh = nn.MultiheadAttention(E, H, dropout=0.0, batch_first=attn.batch_first, dtype=DTYPE)
    fresh.load_state_dict(attn.state_dict())
    kwargs = {**kwargs, "need_weights": True, "average_attn_weights": False}
    with torch.no_grad():
        return fresh(*args, **kwargs)[1]


GRID = list(itertools.product([False, True], [False, True], MASK_CASES, [True, False]))


@pytest.mark.parametrize("norm_first,batch_first,mask_case,training", GRID)
def test_equals_stock_layer_outputs_gradients_and_weights(norm_first, batch_first, mask_case, training):
    stock, ours = _pair(norm_first, batch_first)
    stock.train(training)
    ours.train(training)
    calls = _capture_attention_inputs(stock)
    masks = _masks(mask_case)

    tgt, memory = _inputs(batch_first)
    expected = stock(tgt, memory, **masks)
    tgt2, memory2 = _inputs(batch_first)
    got = ours(tgt2, memory2, **masks)

    # Same output (one tensor, same shape) ...
    assert type(got) is Tensor and got.shape == expected.shape == tgt.shape
    torch.testing.assert_close(got, expected, atol=ATOL, rtol=0)

    # ... same gradients for inputs and every parameter ...
    cotangent = torch.randn_like(expected)
    (expected * cotangent).sum().backward()
    (got * cotangent).sum().backward()
    torch.testing.assert_close(tgt2.grad, tgt.grad, atol=ATOL, rtol=0)
    torch.testing.assert_close(memory2.grad, memory.grad, atol=ATOL, rtol=0)
    stock_params = dict(stock.named_parameters())
    for name, p in ours.named_parameters():
        torch.testing.assert_close(p.grad, stock_params[name].grad, atol=ATOL, rtol=0, msg=name)

    # ... and recorded per-head weights equal to nn.MultiheadAttention(average_attn_weights=False)
    # called on the inputs the stock layer's attention modules received.
    assert ours.self_attn_weights.shape == (N, H, L, L)
    assert ours.cross_attn_weights.shape == (N, H, L, S)
    torch.testing.assert_close(
        ours.self_attn_weights, _reference_weights(stock.self_attn, *calls["self"]), atol=ATOL, rtol=0
    )
    torch.testing.assert_close(
        ours.cross_attn_weights, _reference_weights(stock.multihead_attn, *calls["cross"]), atol=ATOL, rtol=0
    )


@pytest.mark.parametrize("norm_first,batch_first", list(itertools.product([False, True], [False, True])))
def test_weights_respect_masks_and_rows_sum_to_one(norm_first, batch_first):
    _, ours = _pair(norm_first, batch_first)
    tgt, memory = _inputs(batch_first)
    ours(tgt, memory, **_masks("all"))
    sa, ca = ours.self_attn_weights, ours.cross_attn_weights
    torch.testing.assert_close(sa.sum(-1), torch.ones(N, H, L, dtype=DTYPE))
    torch.testing.assert_close(ca.sum(-1), torch.ones(N, H, L, dtype=DTYPE))
    assert (sa.triu(diagonal=1) == 0).all(), "a target token looked at a later one"
    assert (sa[_padding(TGT_LENGTHS, L)[:, None, None, :].expand_as(sa)] == 0).all()
    assert (ca[_padding(SRC_LENGTHS, S)[:, None, None, :].expand_as(ca)] == 0).all()
    # Heads are kept apart, not averaged: at least two heads differ.
    assert not torch.allclose(ca[:, 0], ca[:, 1])


def test_eval_under_no_grad_matches_stock():
    """Inference (eval + no_grad) may take torch's fast paths; the results must still agree."""
    for norm_first, batch_first in itertools.product([False, True], [False, True]):
        stock, ours = _pair(norm_first, batch_first)
        stock.eval()
        ours.eval()
        tgt, memory = _inputs(batch_first)
        with torch.no_grad():
            torch.testing.assert_close(
                ours(tgt, memory, **_masks("all")), stock(tgt, memory, **_masks("all")), atol=ATOL, rtol=0
            )


def test_float32_default_layer_matches_stock():
    torch.manual_seed(0)
    stock = nn.TransformerDecoderLayer(E, H, FF, dropout=0.0)
    ours = InspectableDecoderLayer(E, H, FF, dropout=0.0)
    ours.load_state_dict(stock.state_dict())
    tgt, memory = torch.randn(L, N, E), torch.randn(S, N, E)
    masks = {
        k: (v.float() if v.is_floating_point() else v) if isinstance(v, Tensor) else v for k, v in _masks("all").items()
    }
    torch.testing.assert_close(ours(tgt, memory, **masks), stock(tgt, memory, **masks), atol=1e-5, rtol=1e-5)


def test_same_signature_state_dict_and_export_as_stock():
    assert inspect.signature(InspectableDecoderLayer.forward) == inspect.signature(nn.TransformerDecoderLayer.forward)
    stock, ours = _pair(False, True)
    assert list(ours.state_dict()) == list(stock.state_dict())
    assert helpers.InspectableDecoderLayer is InspectableDecoderLayer


def test_record_off_runs_attention_like_stock_and_keeps_nothing():
    stock, ours = _pair(False, True)
    ours.record = False
    seen = []
    for attn in (ours.self_attn, ours.multihead_attn):
        attn.register_forward_pre_hook(lambda m, a, kw: seen.append(kw["need_weights"]), with_kwargs=True)
    tgt, memory = _inputs(True)
    ours.self_attn_weights = ours.cross_attn_weights = torch.ones(1)  # stale records must go
    out = ours(tgt, memory, **_masks("all"))
    assert seen == [False, False], "with recording off the attention must not compute weights"
    assert ours.self_attn_weights is None and ours.cross_attn_weights is None
    # Same code path as the stock layer: bit-for-bit equal.
    assert torch.equal(out, stock(tgt, memory, **_masks("all")))
    # The constructor switch works too.
    assert InspectableDecoderLayer(E, H, FF, record=False).record is False


def test_records_are_detached_and_replaced_each_pass():
    _, ours = _pair(True, True)
    ours.train()
    tgt, memory = _inputs(True)
    out = ours(tgt, memory)
    assert out.requires_grad
    for name in ("self_attn_weights", "cross_attn_weights"):
        assert not getattr(ours, name).requires_grad and getattr(ours, name).grad_fn is None
    first = weakref.ref(ours.cross_attn_weights)
    first_values = ours.cross_attn_weights.clone()
    ours(*_inputs(True, seed=7))
    gc.collect()
    assert first() is None, "the previous pass's weights are still alive"
    assert not torch.allclose(ours.cross_attn_weights, first_values)
    ours.clear_records()
    assert ours.self_attn_weights is None and ours.cross_attn_weights is None


def test_recording_context_manager_restores_settings():
    decoder = nn.TransformerDecoder(InspectableDecoderLayer(E, H, FF, dropout=0.0, record=False), num_layers=2)
    tgt, memory = torch.randn(L, N, E), torch.randn(S, N, E)
    with recording(decoder):
        assert all(layer.record for layer in decoder.layers)
        decoder(tgt, memory)
    assert not any(layer.record for layer in decoder.layers)
    assert cross_attention_weights(decoder).shape == (2, N, H, L, S)
    assert self_attention_weights(decoder).shape == (2, N, H, L, L)
    decoder(tgt, memory)  # recording off again: records cleared
    with pytest.raises(ValueError, match="recording on"):
        cross_attention_weights(decoder)
    with pytest.raises(ValueError, match="no InspectableDecoderLayer"), recording(nn.Linear(2, 2)):
        pass


def _stacks(batch_first: bool, norm_first: bool):
    torch.manual_seed(2)
    cfg = dict(
        d_model=E, nhead=H, dim_feedforward=FF, dropout=0.0, batch_first=batch_first, norm_first=norm_first, dtype=DTYPE
    )
    stock = nn.TransformerDecoder(nn.TransformerDecoderLayer(**cfg), num_layers=2, norm=nn.LayerNorm(E, dtype=DTYPE))
    with torch.no_grad():
        for p in stock.parameters():
            p.add_(0.1 * torch.randn_like(p))
    ours = nn.TransformerDecoder(InspectableDecoderLayer(**cfg), num_layers=2, norm=nn.LayerNorm(E, dtype=DTYPE))
    ours.load_state_dict(stock.state_dict())
    return stock, ours


@pytest.mark.parametrize("batch_first,norm_first", list(itertools.product([False, True], [False, True])))
def test_inside_transformer_decoder_equals_stock_stack(batch_first, norm_first):
    stock, ours = _stacks(batch_first, norm_first)
    calls = [_capture_attention_inputs(layer) for layer in stock.layers]
    tgt, memory = _inputs(batch_first)
    masks = _masks("all")
    torch.testing.assert_close(ours(tgt, memory, **masks), stock(tgt, memory, **masks), atol=ATOL, rtol=0)
    # nn.TransformerDecoder deep-copies the layer: each copy keeps its own records.
    assert ours.layers[0].cross_attn_weights is not ours.layers[1].cross_attn_weights
    for i, layer in enumerate(ours.layers):
        torch.testing.assert_close(
            layer.cross_attn_weights,
            _reference_weights(stock.layers[i].multihead_attn, *calls[i]["cross"]),
            atol=ATOL,
            rtol=0,
        )
        torch.testing.assert_close(
            layer.self_attn_weights, _reference_weights(stock.layers[i].self_attn, *calls[i]["self"]), atol=ATOL, rtol=0
        )
    assert not torch.allclose(ours.layers[0].cross_attn_weights, ours.layers[1].cross_attn_weights)
    torch.testing.assert_close(
        cross_attention_weights(ours), torch.stack([layer.cross_attn_weights for layer in ours.layers])
    )


@pytest.mark.filterwarnings("ignore:enable_nested_tensor is True")  # torch's note on batch_first=False encoders
@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("training", [True, False])
def test_inside_nn_transformer_with_causal_hint_and_memory_padding(batch_first, training):
    torch.manual_seed(3)
    cfg = dict(d_model=E, nhead=H, dim_feedforward=FF, dropout=0.0, batch_first=batch_first, dtype=DTYPE)

    def build(layer_cls):
        torch.manual_seed(4)
        decoder = nn.TransformerDecoder(layer_cls(**cfg), num_layers=2, norm=nn.LayerNorm(E, dtype=DTYPE))
        return nn.Transformer(num_encoder_layers=2, custom_decoder=decoder, **cfg)

    stock, ours = build(nn.TransformerDecoderLayer), build(InspectableDecoderLayer)
    ours.load_state_dict(stock.state_dict())
    stock.train(training)
    ours.train(training)
    src, tgt = _inputs(batch_first)[1], _inputs(batch_first)[0]
    kwargs = dict(
        tgt_mask=helpers.causal_mask(L),
        tgt_is_causal=True,
        src_key_padding_mask=_padding(SRC_LENGTHS, S),
        tgt_key_padding_mask=_padding(TGT_LENGTHS, L),
        memory_key_padding_mask=_padding(SRC_LENGTHS, S),
    )
    expected, got = stock(src, tgt, **kwargs), ours(src, tgt, **kwargs)
    torch.testing.assert_close(got, expected, atol=ATOL, rtol=0)
    weights = cross_attention_weights(ours)  # (layers, N, h, L, S)
    assert weights.shape == (2, N, H, L, S)
    blocked = _padding(SRC_LENGTHS, S)[None, :, None, None, :].expand_as(weights)  # padded source keys
    assert (weights[blocked] == 0).all()


@pytest.mark.parametrize("norm_first", [False, True])
def test_forward_step_gives_each_row_of_the_causal_forward_pass(norm_first):
    # Decoding one position at a time, with the cache of earlier positions, must give exactly the rows
    # of the stock layer's causal pass over the whole target (memory padding included).
    stock, ours = _pair(norm_first, batch_first=True)
    stock.eval(), ours.eval()
    tgt, memory = (x.detach() for x in _inputs(batch_first=True))
    memory_padding = _padding(SRC_LENGTHS, S)
    with torch.no_grad():
        full = stock(
            tgt, memory, tgt_mask=helpers.causal_mask(L), tgt_is_causal=True, memory_key_padding_mask=memory_padding
        )  # (N, L, E)
        past = None
        for t in range(L):
            row, past = ours.forward_step(tgt[:, t : t + 1], past, memory, memory_padding)
            assert row.shape == (N, 1, E) and past.shape == (N, t + 1, E)
            torch.testing.assert_close(row[:, 0], full[:, t], atol=ATOL, rtol=0)


def test_forward_step_rejects_more_than_one_position_or_sequence_first_layers():
    _, ours = _pair(norm_first=False, batch_first=True)
    tgt, memory = (x.detach() for x in _inputs(batch_first=True))
    with pytest.raises(ValueError, match=r"one position.*\(N, 1, E\).*\(3, 5, 16\)"):
        ours.forward_step(tgt, None, memory)
    _, sequence_first = _pair(norm_first=False, batch_first=False)
    with pytest.raises(ValueError, match="batch_first=True"):
        sequence_first.forward_step(tgt[:, :1], None, memory)


def test_deepcopy_and_weights_only_checkpoint_round_trip(tmp_path):
    _, ours = _pair(False, True)
    tgt, memory = _inputs(True)
    ours(tgt, memory)
    twin = copy.deepcopy(ours)
    torch.save(ours.state_dict(), tmp_path / "layer.pt")
    fresh = InspectableDecoderLayer(E, H, FF, dropout=0.0, batch_first=True, dtype=DTYPE)
    fresh.load_state_dict(torch.load(tmp_path / "layer.pt", weights_only=True))
    with torch.no_grad():
        torch.testing.assert_close(fresh(tgt, memory), twin(tgt, memory), atol=0, rtol=0)
    torch.testing.assert_close(fresh.cross_attn_weights, twin.cross_attn_weights, atol=0, rtol=0)


def test_unbatched_inputs_match_stock_and_record_without_batch_dim():
    stock, ours = _pair(False, False)
    tgt, memory = _inputs(False)
    tgt, memory = tgt[:, 0], memory[:, 0]  # (L, E), (S, E): one sentence, no batch dimension
    torch.testing.assert_close(
        ours(tgt, memory, tgt_mask=helpers.causal_mask(L)),
        stock(tgt, memory, tgt_mask=helpers.causal_mask(L)),
        atol=ATOL,
        rtol=0,
    )
    assert ours.cross_attn_weights.shape == (H, L, S) and ours.self_attn_weights.shape == (H, L, L)
