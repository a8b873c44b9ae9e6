"""``helpers.layer_kind.seeing``: the one way to change what a layer may see (its window and the first tokens it
keeps), for an experiment, set back on leaving. Compared with models built with that sight and with an explicit
masked softmax."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

from helpers.gpt import GPT, GPTConfig
from helpers.layer_kind import seeing
from helpers.masks import streaming_mask

SMALL = dict(vocab_size=30, embed_dim=16, num_heads=4, num_kv_heads=2, num_layers=3, ff_dim=32)


def _model(**changes) -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(**SMALL, **changes)).double().eval()


@pytest.fixture
def ids():
    return torch.randint(0, 30, (2, 17), generator=torch.Generator().manual_seed(5))


def test_a_global_layer_seeing_a_window_is_the_model_built_local(ids):
    built = _model(window=4)
    made = _model()
    made.load_state_dict(built.state_dict())
    with seeing(made, range(3), window=4):
        torch.testing.assert_close(made(ids), built(ids), rtol=0, atol=1e-12)
    assert not torch.allclose(made(ids), built(ids))  # set back: global again
    assert made.layer_windows() == [None, None, None]


def test_first_tokens_kept_are_the_streaming_mask_spelled_out(ids):
    """Layer 1 sees a window of 3 and the first 2 tokens: its weights are the masked softmax of its scores under
    streaming_mask, and are zero exactly where that mask blocks."""
    model = _model()
    with torch.no_grad(), seeing(model, [1], window=3, keep_first=2):
        _, weights = model(ids, need_weights=True)
    blocked = streaming_mask(ids.size(1), 3, 2)
    assert torch.all(weights[1].masked_select(blocked) == 0) and torch.all(weights[1].masked_select(~blocked) > 0)
    assert torch.all(weights[0].masked_select(~torch.ones_like(blocked).tril().bool()) == 0)  # others: causal
    assert torch.all(weights[0][..., 10, 5] > 0)  # layer 0 still reads beyond the window


def test_every_layer_is_set_back_after_an_error(ids):
    model = _model(window=5, layer_kinds=("local", "global", "local"))
    with pytest.raises(RuntimeError, match="inside"), seeing(model, [0, 1], window=2, keep_first=1):
        assert model.layer_windows() == [2, 2, 5]
        raise RuntimeError("inside")
    assert model.layer_windows() == [5, None, 5]
    assert [layer.keep_first for layer in model.attention_layers] == [0, 0, 0]


def test_a_rolling_cache_and_a_cache_that_dropped_keys_are_refused_with_first_tokens_kept(ids):
    model = _model()
    with seeing(model, range(3), window=3, keep_first=1):
        with pytest.raises(ValueError, match="also sees its first 1"):
            model(ids, cache=model.new_cache(rolling=True).__class__(3, owner=model, keep=[2, 2, 2]))
        full = model.new_cache()
        model(ids[:, :6], cache=full)
        model(ids[:, 6:7], cache=full)  # a full cache: every key since 0, allowed
    assert full.layers[0] is not None


@pytest.mark.parametrize(
    ("layers", "window", "keep_first", "message"),
    [
        ([3], 2, 0, r"layers must be ints in 0 .. 2"),
        ([True], 2, 0, r"layers must be ints"),
        ([0], 0, 0, "window must be a positive int number of tokens or None, got 0"),
        ([0], 2.0, 0, "window must be a positive int"),
        ([0], 2, -1, "keep_first must be an int >= 0"),
        ([0], None, 2, "give a window too"),
    ],
)
def test_bad_settings_are_refused_by_name(layers, window, keep_first, message):
    model = _model()
    with pytest.raises(ValueError, match=message), seeing(model, layers, window, keep_first):
        pass
    assert model.layer_windows() == [None, None, None]


def test_a_kind_without_a_window_is_refused():
    model = _model(layer_kinds=("global", "delta", "global"))
    with pytest.raises(ValueError, match=r"layers \[1\] have no window to set"), seeing(model, [0, 1], window=2):
        pass


def test_no_module_of_the_library_sets_a_layers_sight_but_seeing():
    """One way: outside a layer's own construction, no code in helpers/ or benchmarks/ assigns ``.window`` or
    ``.keep_first`` on another object (the four ways the course once had are gone)."""
    root = Path(__file__).resolve().parents[1]
    found = []
    for path in [*root.joinpath("helpers").rglob("*.py"), *root.joinpath("benchmarks").glob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            targets = node.targets if isinstance(node, ast.Assign) else []
            for target in targets:
                for leaf in target.elts if isinstance(target, ast.Tuple) else [target]:
                    if isinstance(leaf, ast.Attribute) and leaf.attr in ("window", "keep_first"):
                        owner = leaf.value
                        if not (isinstance(owner, ast.Name) and owner.id == "self"):
                            found.append(f"{path.relative_to(root)}:{node.lineno}")
    assert found and all(place.startswith("helpers/layer_kind.py:") for place in found), found  # seeing's own
