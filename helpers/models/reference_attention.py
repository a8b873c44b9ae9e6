"""One ``transformers`` attention module rebuilt as the course's attention layer (lesson 14), weights and all.

``attention_from_gpt_oss`` turns gpt-oss's ``GptOssAttention`` (its learned sinks, a sliding window on its
"sliding_attention" layers) and ``attention_from_qwen3_next`` turns Qwen3-Next's ``Qwen3NextAttention`` (an output
gate, QK-norm, partial rotary) into ``helpers.gpt.CausalSelfAttention``, so that a lesson or a test can compare
the two on the same input. Each reads the sizes from the module's config, builds the matching one-layer
``GPTConfig``, copies every weight and refuses, naming what it expected, what it cannot carry over.

Layouts read: ``transformers`` 5.x (written against 5.25; pyproject.toml asks for >= 4.40), where ``rope_theta``
and ``partial_rotary_factor`` sit in ``config.rope_parameters`` (older releases: on the config itself; both are
read). Their query and key rows rotate each head's halves (feature k with k + r / 2); ``helpers.rotary`` rotates
adjacent pairs, so those rows are reordered once (``halves_to_pairs``): the same scores, features stored in
another order.

The rotation itself is not in these modules: their model hands them (cos, sin). Ours rotates by plain RoPE of
base ``rope_theta``; where their ``rope_type`` is not "default" (gpt-oss's "yarn"), give ours the same angles
through ``forward(..., rotation=(cos, sin))``, (L, r / 2) each.
"""

from __future__ import annotations

import importlib
from typing import Any

import torch
from torch import Tensor, nn

from helpers.gpt import CausalSelfAttention, GPTConfig
from helpers.rotary import halves_to_pairs

__all__ = ["attention_from_gpt_oss", "attention_from_qwen3_next"]


def _rope(config) -> dict:
    """rope_theta and partial_rotary_factor, from ``rope_parameters`` (transformers 5) or the config (4.x)."""
    found = dict(getattr(config, "rope_parameters", None) or {})
    for name in ("rope_theta", "partial_rotary_factor"):
        if name not in found and getattr(config, name, None) is not None:
            found[name] = getattr(config, name)
    return found


def _check_kind(theirs, class_name: str, module: str, function: str) -> None:
    cls = getattr(importlib.import_module(module), class_name)  # imported here: helpers loads transformers lazily
    if not isinstance(theirs, cls):
        raise TypeError(f"{function} expects transformers' {class_name}, got {type(theirs).__name__}")


def _check_carryable(theirs, config) -> None:
    """Refuse what our layer has no place for: biases and dropout."""
    names = ("q_proj", "k_proj", "v_proj", "o_proj")
    biased = [name for name in names if getattr(theirs.get_submodule(name), "bias", None) is not None]
    if biased or config.attention_bias:
        raise ValueError(
            f"the course's attention has no projection biases, but {type(theirs).__name__} has attention_bias=True "
            f"(biases on {', '.join(biased) or 'its projections'}): build it with attention_bias=False"
        )
    if config.attention_dropout:
        raise ValueError(
            f"the course's attention has no dropout; build {type(theirs).__name__} with attention_dropout=0.0, "
            f"got {config.attention_dropout}"
        )


def _check_shape(expected: tuple[int, ...], source: Tensor, name: str) -> None:
    if tuple(source.shape) != expected:
        raise ValueError(
            f"their {name} has shape {tuple(source.shape)}, but the sizes in their config give {expected}: "
            f"the module does not match its config"
        )


def _copy(target: Tensor, source: Tensor, name: str) -> None:
    """Copy ``source`` into ``target``, refusing a shape that the config's sizes do not give."""
    _check_shape(tuple(target.shape), source, name)
    with torch.no_grad():
        target.copy_(source)


def _positions(positions: str) -> str:
    if positions not in ("rotary", "none"):
        raise ValueError(f"positions must be 'rotary' (theirs rotates) or 'none' (no rotation), got {positions!r}")
    return positions


def _common_config(config, positions: str, **choices) -> GPTConfig:
    """A one-layer GPTConfig with their attention's sizes (h, h_kv, d, E) and rotary base."""
    return GPTConfig(
        vocab_size=config.vocab_size, embed_dim=config.hidden_size, num_heads=config.num_attention_heads,
        num_kv_heads=config.num_key_value_heads, head_dim=config.head_dim, num_layers=1, norm="rms",
        norm_eps=config.rms_norm_eps, positions=_positions(positions),
        rotary_base=float(_rope(config).get("rope_theta", 10000.0)), **choices,
    )  # fmt: skip


def _like(ours: CausalSelfAttention, theirs: nn.Module) -> CausalSelfAttention:
    """Ours on their device, in their dtype and train/eval mode: before copying, so float64 stays float64."""
    weight = theirs.get_parameter("o_proj.weight")
    return ours.to(device=weight.device, dtype=weight.dtype).train(theirs.training)


def attention_from_gpt_oss(theirs: nn.Module, positions: str = "rotary") -> CausalSelfAttention:
    """The course's ``CausalSelfAttention`` equal to ``GptOssAttention`` ``theirs``: same sizes, weights, sinks.

    Theirs: q_proj (h·d, E), k_proj and v_proj (h_kv·d, E), o_proj (E, h·d), sinks (h,); a layer whose
    ``layer_type`` is "sliding_attention" attends within ``config.sliding_window`` tokens (ours: a "local"
    layer with that window), any other to every earlier token. ``positions="none"``: ours does not rotate, the
    same as theirs given cos = 1, sin = 0. Refuses another module, biases, dropout and weights whose shapes do
    not match the config."""
    _check_kind(theirs, "GptOssAttention", "transformers.models.gpt_oss.modeling_gpt_oss", "attention_from_gpt_oss")
    config: Any = theirs.config  # a PretrainedConfig (nn.Module types its attributes as tensors or modules)
    _check_carryable(theirs, config)
    window = config.sliding_window if theirs.layer_type == "sliding_attention" else None
    kinds = {"layer_kinds": ("local",), "window": window} if window is not None else {}
    ours = _like(CausalSelfAttention(_common_config(config, positions, attention_sinks=True, **kinds)), theirs)
    d, p = ours.head_dim, ours.projections
    _copy(p.q_proj.weight, halves_to_pairs(theirs.get_parameter("q_proj.weight"), d), "q_proj.weight")
    _copy(p.k_proj.weight, halves_to_pairs(theirs.get_parameter("k_proj.weight"), d), "k_proj.weight")
    _copy(p.v_proj.weight, theirs.get_parameter("v_proj.weight"), "v_proj.weight")
    _copy(p.out_proj.weight, theirs.get_parameter("o_proj.weight"), "o_proj.weight")
    _copy(ours.sinks, theirs.get_parameter("sinks"), "sinks")
    return ours


def attention_from_qwen3_next(theirs: nn.Module, positions: str = "rotary") -> CausalSelfAttention:
    """The course's ``CausalSelfAttention`` equal to ``Qwen3NextAttention`` ``theirs``: gate, QK-norm, partial rotary.

    Theirs: q_proj (h·2d, E), each head's d query rows then its d gate rows, split here into ours q_proj (h·d, E)
    and gate_proj (h·d, E); k_proj, v_proj (h_kv·d, E); o_proj (E, h·d); q_norm, k_norm (d,) that scale by
    (1 + w), ours by its weight, so ours gets 1 + w. The first r = d · ``partial_rotary_factor`` features rotate.
    ``positions="none"``: no rotation, as theirs given cos = 1, sin = 0. Refuses another module, biases,
    dropout and weights whose shapes do not match the config."""
    _check_kind(
        theirs, "Qwen3NextAttention", "transformers.models.qwen3_next.modeling_qwen3_next", "attention_from_qwen3_next"
    )
    config: Any = theirs.config  # a PretrainedConfig (nn.Module types its attributes as tensors or modules)
    _check_carryable(theirs, config)
    fraction = float(_rope(config).get("partial_rotary_factor", 1.0))
    choices = {"qk_norm": True, "output_gate": True, "rotary_fraction": fraction}
    ours = _like(CausalSelfAttention(_common_config(config, positions, **choices)), theirs)
    h, d, r, p = ours.num_heads, ours.head_dim, ours.rotary_dim, ours.projections
    E = p.q_proj.weight.size(1)
    q_weight = theirs.get_parameter("q_proj.weight")
    _check_shape((h * 2 * d, E), q_weight, "q_proj.weight")  # (h·2d, E) before it is split
    query_rows, gate_rows = q_weight.view(h, 2 * d, E).split(d, dim=1)
    _copy(p.q_proj.weight, halves_to_pairs(query_rows.reshape(h * d, E), d, r), "q_proj.weight's query rows")
    _copy(ours.get_parameter("gate_proj.weight"), gate_rows.reshape(h * d, E), "q_proj.weight's gate rows")
    _copy(p.k_proj.weight, halves_to_pairs(theirs.get_parameter("k_proj.weight"), d, r), "k_proj.weight")
    _copy(p.v_proj.weight, theirs.get_parameter("v_proj.weight"), "v_proj.weight")
    _copy(p.out_proj.weight, theirs.get_parameter("o_proj.weight"), "o_proj.weight")
    for name in ("q_norm.weight", "k_norm.weight"):  # theirs multiplies by (1 + w), ours by its weight
        _copy(ours.get_parameter(name), halves_to_pairs(1.0 + theirs.get_parameter(name), d, r), name)
    return ours
