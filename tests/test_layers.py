"""The course's layers must be PyTorch's: EncoderLayer = nn.TransformerEncoderLayer, InspectableDecoderLayer =
nn.TransformerDecoderLayer plus recorded per-head weights, Encoder / Decoder / Transformer = torch's stacks.

Every expected value comes from PyTorch itself: the stock layer / stack / transformer loaded with the same
state dict, and a separate nn.MultiheadAttention(average_attn_weights=False) fed the very inputs the stock
layer's attention modules received.
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
    Decoder,
    Encoder,
    EncoderLayer,
    InspectableDecoderLayer,
    Transformer,
    cross_attention_weights,
    recording,
    self_attention_weights,
)

# Layers this small run fastest on one thread: two spin against each other on a busy 2-core machine (12x the CPU).
pytestmark = pytest.mark.usefixtures("one_torch_thread")

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


def _assert_same_gradients(stock, ours, expected, got, input_pairs) -> None:
    """Backpropagate one random cotangent through both outputs; the inputs' and every parameter's gradients agree.

    ``input_pairs``: (torch's input, our copy of it) for each input that requires a gradient.
    """
    cotangent = torch.randn_like(expected)
    (expected * cotangent).sum().backward()
    (got * cotangent).sum().backward()
    for theirs, mine in input_pairs:
        torch.testing.assert_close(mine.grad, theirs.grad, atol=ATOL, rtol=0)
    stock_params = dict(stock.named_parameters())
    for name, p in ours.named_parameters():
        torch.testing.assert_close(p.grad, stock_params[name].grad, atol=ATOL, rtol=0, msg=name)


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
    _assert_same_gradients(stock, ours, expected, got, [(tgt, tgt2), (memory, memory2)])

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


def _arguments(function) -> list[tuple[str, object]]:
    """Names and defaults of a function's parameters (annotations aside: ours are strings, torch's types)."""
    return [(p.name, p.default) for p in inspect.signature(function).parameters.values()]


def test_same_signature_state_dict_and_export_as_stock():
    assert _arguments(InspectableDecoderLayer.forward) == _arguments(nn.TransformerDecoderLayer.forward)
    assert _arguments(InspectableDecoderLayer.__init__)[:-1] == _arguments(nn.TransformerDecoderLayer.__init__)
    assert _arguments(EncoderLayer.forward) == _arguments(nn.TransformerEncoderLayer.forward)
    assert _arguments(EncoderLayer.__init__)[:-1] == _arguments(nn.TransformerEncoderLayer.__init__)
    assert _arguments(EncoderLayer.__init__)[-1] == ("record", False)
    assert _arguments(Transformer.forward) == _arguments(nn.Transformer.forward)
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
    torch.testing.assert_close(out, stock(tgt, memory, **_masks("all")), atol=ATOL, rtol=0)
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
    with pytest.raises(ValueError, match="no EncoderLayer or InspectableDecoderLayer"), recording(nn.Linear(2, 2)):
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
    weights = cross_attention_weights(ours)  # (n_layers, N, h, L, S)
    assert weights.shape == (2, N, H, L, S)
    blocked = _padding(SRC_LENGTHS, S)[None, :, None, None, :].expand_as(weights)  # padded source keys
    assert (weights[blocked] == 0).all()


@pytest.mark.parametrize("norm_first", [False, True])
def test_step_gives_each_row_of_the_causal_forward_pass(norm_first):
    # Decoding one position at a time, from the projected keys and values of the earlier positions and of the
    # memory, must give exactly the rows of the stock layer's causal pass over the whole target (memory padding
    # included). (This tested forward_step, the input cache, until step's KV cache became the only one.)
    stock, ours = _pair(norm_first, batch_first=True)
    stock.eval(), ours.eval()
    tgt, memory = (x.detach() for x in _inputs(batch_first=True))
    memory_padding = _padding(SRC_LENGTHS, S)
    d = E // H
    with torch.no_grad():
        full = stock(
            tgt, memory, tgt_mask=helpers.causal_mask(L), tgt_is_causal=True, memory_key_padding_mask=memory_padding
        )  # (N, L, E)
        past = None
        for t in range(L):
            row, past = ours.step(tgt[:, t : t + 1], past, memory if past is None else None, memory_padding)
            assert row.shape == (N, 1, E)
            assert [tuple(x.shape) for x in past] == [(N, H, t + 1, d)] * 2 + [(N, H, S, d)] * 2
            torch.testing.assert_close(row[:, 0], full[:, t], atol=ATOL, rtol=0)


def test_step_rejects_more_than_one_position_or_sequence_first_layers():
    _, ours = _pair(norm_first=False, batch_first=True)
    tgt, memory = (x.detach() for x in _inputs(batch_first=True))
    with pytest.raises(ValueError, match=r"one position.*\(N, 1, E\).*\(3, 5, 16\)"):
        ours.step(tgt, None, memory)
    _, sequence_first = _pair(norm_first=False, batch_first=False)
    with pytest.raises(ValueError, match="batch_first=True"):
        sequence_first.step(tgt[:, :1], None, memory)


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


# ---------------------------------------------------------------------------------------------
# The encoder layer and the stacks against torch's
# ---------------------------------------------------------------------------------------------
def _encoder_masks(case: str) -> dict:
    return {
        "none": {},
        "padding": {"src_key_padding_mask": _padding(SRC_LENGTHS, S)},
        "causal": {"src_mask": helpers.causal_mask(S), "is_causal": True},
        "float_mask": {"src_mask": torch.randn(S, S, dtype=DTYPE, generator=torch.Generator().manual_seed(3))},
        "all": {
            "src_mask": helpers.causal_mask(S),
            "is_causal": True,
            "src_key_padding_mask": _padding(SRC_LENGTHS, S),
        },
    }[case]


def _perturbed(module: nn.Module) -> nn.Module:
    with torch.no_grad():  # non-zero biases and norms, so that a missed term shows up
        for p in module.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return module


ENCODER_GRID = list(itertools.product([False, True], [False, True], ["none", "padding", "causal", "float_mask", "all"]))


@pytest.mark.parametrize("norm_first,batch_first,mask_case", ENCODER_GRID)
@pytest.mark.parametrize("training", [True, False])
def test_encoder_layer_equals_stock_outputs_and_gradients(norm_first, batch_first, mask_case, training):
    torch.manual_seed(5)
    cfg = dict(d_model=E, nhead=H, dim_feedforward=FF, dropout=0.0, norm_first=norm_first, batch_first=batch_first)
    stock = _perturbed(nn.TransformerEncoderLayer(**cfg, dtype=DTYPE)).train(training)
    ours = EncoderLayer(**cfg, dtype=DTYPE).train(training)
    ours.load_state_dict(stock.state_dict())
    masks = _encoder_masks(mask_case)
    src, src2 = _inputs(batch_first)[1], _inputs(batch_first)[1]
    expected, got = stock(src, **masks), ours(src2, **masks)
    torch.testing.assert_close(got, expected, atol=ATOL, rtol=0)
    _assert_same_gradients(stock, ours, expected, got, [(src, src2)])


@pytest.mark.parametrize("norm_first", [False, True])
def test_recording_encoder_layer_keeps_torchs_weights_and_output(norm_first):
    """With record on, the layer's output is unchanged and it keeps the per-head weights torch's attention gives."""
    torch.manual_seed(7)
    cfg = dict(d_model=E, nhead=H, dim_feedforward=FF, dropout=0.0, norm_first=norm_first, batch_first=True)
    stock = _perturbed(nn.TransformerEncoderLayer(**cfg)).eval()
    ours = EncoderLayer(**cfg).eval()
    ours.load_state_dict(stock.state_dict())
    src, padding = torch.randn(N, S, E), _padding(SRC_LENGTHS, S)
    assert ours.self_attn_weights is None
    ours(src, src_key_padding_mask=padding)
    assert ours.self_attn_weights is None  # record is off by default: nothing kept
    with recording(ours):
        got = ours(src, src_key_padding_mask=padding)
    assert ours.record is False
    reference = nn.MultiheadAttention(E, H, batch_first=True).eval()
    reference.load_state_dict(ours.self_attn.state_dict())
    queries = ours.norm1(src) if norm_first else src
    _, expected_weights = reference(
        queries, queries, queries, key_padding_mask=padding, need_weights=True, average_attn_weights=False
    )
    torch.testing.assert_close(ours.self_attn_weights, expected_weights, atol=1e-6, rtol=0)
    real = ~padding
    torch.testing.assert_close(got[real], stock(src, src_key_padding_mask=padding)[real], atol=1e-5, rtol=1e-5)
    assert not ours.self_attn_weights.requires_grad
    stack = Encoder(EncoderLayer(**cfg), 2)
    with recording(stack):
        stack(src, src_key_padding_mask=padding)
    assert self_attention_weights(stack).shape == (2, N, H, S, S)
    ours.clear_records()
    assert ours.self_attn_weights is None


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layer_matches_torch_fast_path_at_inference(norm_first):
    """eval + no_grad sends nn.TransformerEncoderLayer down its fused C++ path; ours must agree with it."""
    torch.manual_seed(6)
    cfg = dict(d_model=E, nhead=H, dim_feedforward=FF, norm_first=norm_first, batch_first=True)
    stock = _perturbed(nn.TransformerEncoderLayer(**cfg)).eval()
    ours = EncoderLayer(**cfg).eval()
    ours.load_state_dict(stock.state_dict())
    src = torch.randn(N, S, E)
    padding = _padding(SRC_LENGTHS, S)
    with torch.no_grad():
        got, expected = ours(src, src_key_padding_mask=padding), stock(src, src_key_padding_mask=padding)
    real = ~padding  # torch's fast path may leave padded positions as they are
    torch.testing.assert_close(got[real], expected[real], atol=1e-5, rtol=1e-5)


@pytest.mark.filterwarnings("ignore:enable_nested_tensor is True")
def test_state_dicts_move_both_ways_between_our_layers_and_torchs():
    pairs = [
        (lambda: EncoderLayer(E, H, FF), lambda: nn.TransformerEncoderLayer(E, H, FF)),
        (lambda: InspectableDecoderLayer(E, H, FF), lambda: nn.TransformerDecoderLayer(E, H, FF)),
        (
            lambda: Transformer(E, H, 2, 1, FF),
            lambda: nn.Transformer(E, H, 2, 1, FF),
        ),
    ]
    for build_ours, build_stock in pairs:
        ours, stock = _perturbed(build_ours()), _perturbed(build_stock())
        assert list(ours.state_dict()) == list(stock.state_dict())
        fresh_stock, fresh_ours = build_stock(), build_ours()
        fresh_stock.load_state_dict(ours.state_dict())  # strict: every key present, none extra
        fresh_ours.load_state_dict(stock.state_dict())
        for name, tensor in ours.state_dict().items():
            assert torch.equal(fresh_stock.state_dict()[name], tensor), name


@pytest.mark.filterwarnings("ignore:enable_nested_tensor is True")  # torch's note on batch_first=False encoders
def test_transformer_initialises_exactly_like_nn_transformer():
    torch.manual_seed(7)
    stock = nn.Transformer(E, H, 2, 2, FF, batch_first=True)
    torch.manual_seed(7)
    ours = Transformer(E, H, 2, 2, FF, batch_first=True)
    stock_state = stock.state_dict()
    for name, tensor in ours.state_dict().items():
        assert torch.equal(tensor, stock_state[name]), name


@pytest.mark.filterwarnings("ignore:enable_nested_tensor is True")
@pytest.mark.parametrize("batch_first,norm_first", list(itertools.product([False, True], [False, True])))
@pytest.mark.parametrize("training", [True, False])
def test_transformer_equals_nn_transformer_outputs_and_gradients(batch_first, norm_first, training):
    torch.manual_seed(8)
    cfg = dict(dim_feedforward=FF, dropout=0.0, batch_first=batch_first, norm_first=norm_first, dtype=DTYPE)
    stock = _perturbed(nn.Transformer(E, H, 2, 2, **cfg)).train(training)
    ours = Transformer(E, H, 2, 2, **cfg).train(training)
    ours.load_state_dict(stock.state_dict())
    kwargs = dict(
        tgt_mask=helpers.causal_mask(L),
        tgt_is_causal=True,
        src_key_padding_mask=_padding(SRC_LENGTHS, S),
        tgt_key_padding_mask=_padding(TGT_LENGTHS, L),
        memory_key_padding_mask=_padding(SRC_LENGTHS, S),
    )
    (tgt, src), (tgt2, src2) = _inputs(batch_first), _inputs(batch_first)
    expected, got = stock(src, tgt, **kwargs), ours(src2, tgt2, **kwargs)
    torch.testing.assert_close(got, expected, atol=ATOL, rtol=0)
    _assert_same_gradients(stock, ours, expected, got, [(src, src2), (tgt, tgt2)])
    with recording(ours):
        ours(src2, tgt2, **kwargs)
    assert cross_attention_weights(ours.decoder).shape == (2, N, H, L, S)


def test_our_stacks_copy_the_layer_and_equal_torchs_stacks():
    torch.manual_seed(9)
    stock_encoder = _perturbed(
        nn.TransformerEncoder(
            nn.TransformerEncoderLayer(E, H, FF, dropout=0.0), 3, nn.LayerNorm(E), enable_nested_tensor=False
        )
    )
    ours_encoder = Encoder(EncoderLayer(E, H, FF, dropout=0.0), 3, nn.LayerNorm(E))
    ours_encoder.load_state_dict(stock_encoder.state_dict())
    assert len({id(layer.self_attn.in_proj_weight) for layer in ours_encoder.layers}) == 3  # copies, not one layer
    src, padding = torch.randn(S, N, E), _padding(SRC_LENGTHS, S)
    memory = ours_encoder(src, src_key_padding_mask=padding)
    torch.testing.assert_close(memory, stock_encoder(src, src_key_padding_mask=padding), atol=1e-5, rtol=1e-5)
    stock_decoder = _perturbed(nn.TransformerDecoder(nn.TransformerDecoderLayer(E, H, FF, dropout=0.0), 2))
    ours_decoder = Decoder(InspectableDecoderLayer(E, H, FF, dropout=0.0), 2)
    ours_decoder.load_state_dict(stock_decoder.state_dict())
    tgt = torch.randn(L, N, E)
    kwargs = dict(tgt_mask=helpers.causal_mask(L), tgt_is_causal=True, memory_key_padding_mask=padding)
    torch.testing.assert_close(
        ours_decoder(tgt, memory, **kwargs), stock_decoder(tgt, memory, **kwargs), atol=1e-5, rtol=1e-5
    )
    assert self_attention_weights(ours_decoder).shape == (2, N, H, L, L)


def test_unknown_activation_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="'relu', 'gelu'"):
        EncoderLayer(E, H, FF, activation="swish")
    gelu = EncoderLayer(E, H, FF, activation="gelu", dropout=0.0)
    stock = nn.TransformerEncoderLayer(E, H, FF, activation="gelu", dropout=0.0)
    stock.load_state_dict(gelu.state_dict())
    x = torch.randn(S, N, E)
    torch.testing.assert_close(gelu(x), stock(x), atol=1e-5, rtol=1e-5)
