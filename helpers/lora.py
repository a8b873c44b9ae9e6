"""LoRA (Hu et al., 2021) from scratch: a frozen ``nn.Linear`` plus a trainable low-rank update (lesson 17).

A linear layer y = x Wᵀ + b, W (out, in), is fine-tuned by learning a change of W of rank r ≪ min(in, out),
written as a product, instead of the change itself:

    y = x Wᵀ + b + (α / r) · (x Aᵀ) Bᵀ,        A (r, in), B (out, r), W and b frozen.

A starts random and B at zero, so the adapted model starts as the pretrained one exactly, and the first step
already moves B (its gradient is (α / r) · (dL/dy)ᵀ (x Aᵀ), not zero) while A waits for B to be non-zero. The
scale α / r keeps the update's size about the same when r changes, so α need not be tuned again for every rank.
One adapted layer trains r · (in + out) numbers instead of in · out.

Once trained the update can be **merged**: W ← W + (α / r) · B A, after which the layer is a plain linear layer
again, as fast as before; **unmerging** subtracts it (W comes back up to rounding).

Here, in the course's shape notation (N batch, L tokens, E embedding size, F feed-forward width):

* ``LoRALinear``: the wrapper, with ``merge``, ``unmerge`` and ``delta_weight``;
* ``add_lora(model, targets, rank, alpha)``: wraps the projections a learner names (``PROJECTIONS``: "q", "k", "v",
  "o", "ff") of the course's ``helpers.gpt.GPT`` and freezes every other parameter;
  ``lora_layers``, ``count_trainable``, ``merge_lora``, ``unmerge_lora``, ``remove_lora``;
* ``save_adapter`` / ``load_adapter``: the adapter alone (A, B, r and α of each wrapped layer, a few hundred KB
  where the model is hundreds of MB), read with ``torch.load(..., weights_only=True)`` and refused, naming what
  differs, when it does not fit the model.

``peft``, the field's library, computes the same thing; ``tests/test_lora.py`` checks outputs and gradients equal.
"""

from __future__ import annotations

import math
import pickle
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from helpers.tools.files import atomic_target

__all__ = [
    "PROJECTIONS",
    "AdapterError",
    "LoRALinear",
    "adapter_state_dict",
    "add_lora",
    "count_trainable",
    "freeze_all_but_lora",
    "load_adapter",
    "lora_layers",
    "merge_lora",
    "remove_lora",
    "resolve_targets",
    "save_adapter",
    "unmerge_lora",
]

# The projections a learner names, each the end of module names in ``helpers.gpt.GPT``: a module is a target when its
# name is one of these or ends with "." and one of these (peft's rule for a list of names, so the same list works
# there). The attention's four live in ``CausalSelfAttention.projections`` (a ``GroupedQueryAttention``); the
# feed-forward is ``nn.Sequential(Linear, GELU, Linear)`` or, in a Llama such as SmolLM2, a ``SwiGLU`` of three.
PROJECTIONS: dict[str, tuple[str, ...]] = {
    "q": ("attention.projections.q_proj",),  # E -> h·d
    "k": ("attention.projections.k_proj",),  # E -> h_kv·d
    "v": ("attention.projections.v_proj",),  # E -> h_kv·d
    "o": ("attention.projections.out_proj",),  # h·d -> E
    "ff": (
        "feed_forward.0",  # E -> F (GELU feed-forward)
        "feed_forward.2",  # F -> E
        "feed_forward.gate_proj",  # E -> F (SwiGLU, GeGLU)
        "feed_forward.up_proj",  # E -> F
        "feed_forward.down_proj",  # F -> E
    ),
}

FORMAT = "attention-course LoRA adapter"
VERSION = 1


class AdapterError(ValueError):
    """An adapter that does not fit the model (other projections, rank, α or sizes), or a file that is not one."""


def _check_rank_and_alpha(rank: Any, alpha: Any) -> None:
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise ValueError(f"rank must be a positive int (r, the update's rank), got {rank!r}")
    if isinstance(alpha, bool) or not isinstance(alpha, int | float) or not math.isfinite(alpha) or alpha <= 0:
        raise ValueError(
            f"alpha must be a positive finite number (the update is scaled by alpha / rank), got {alpha!r}"
        )


class LoRALinear(nn.Module):
    """``base`` (an ``nn.Linear(in, out)``, frozen) plus a trainable update of rank r: (..., in) -> (..., out).

    ``lora_A`` (r, in) is drawn uniform in ±1/√in: Kaiming-uniform with a = √5, the draw ``nn.Linear`` gives its own
    weight and the one Hu et al.'s loralib and peft give A (with the same ``generator`` state, the same numbers).
    ``lora_B`` (out, r) starts at zero, so the layer starts equal to ``base``. ``scale`` = α / r.

    The base's weight and bias are frozen here (``requires_grad=False``); A and B are the layer's only trainable
    parameters. They take ``base``'s dtype and device. While ``merged`` the update sits inside ``base.weight`` and
    the forward is ``base`` alone, so A and B get no gradient: unmerge before training again.
    """

    def __init__(self, base: nn.Linear, rank: int, alpha: float, generator: torch.Generator | None = None) -> None:
        super().__init__()
        if isinstance(base, LoRALinear):
            raise ValueError(
                f"this layer is a LoRALinear already (rank {base.rank}, alpha {base.alpha}): one adapter each"
            )
        if not isinstance(base, nn.Linear):
            raise TypeError(f"LoRALinear wraps an nn.Linear, got {type(base).__name__}")
        _check_rank_and_alpha(rank, alpha)
        self.base = base.requires_grad_(False)  # the pretrained W and b: read, never trained
        self.rank, self.alpha, self.scale = rank, float(alpha), alpha / rank
        self.in_features, self.out_features = base.in_features, base.out_features
        weight = base.weight
        # Kaiming-uniform with a = √5: the bound is gain · √(3 / in) with gain √(2 / (1 + a²)) = √(1/3), so 1/√in.
        # Drawn on the CPU (a generator draws on its own device) in W's dtype, then moved beside W.
        A = torch.empty(rank, self.in_features, dtype=weight.dtype)
        nn.init.kaiming_uniform_(A, a=math.sqrt(5), generator=generator)
        self.lora_A = nn.Parameter(A.to(weight.device))  # (r, in)
        self.lora_B = nn.Parameter(torch.zeros(self.out_features, rank, dtype=weight.dtype, device=weight.device))
        self.merged = False

    def forward(self, x: Tensor) -> Tensor:
        """x (..., in) -> x Wᵀ + b + (α / r) · (x Aᵀ) Bᵀ, (..., out). Through the rank-r bottleneck x Aᵀ (..., r):
        never the (out, in) product B A, which would cost in · out numbers per layer and step."""
        y = self.base(x)
        if self.merged:  # the update is inside base.weight already
            return y
        return y + F.linear(F.linear(x, self.lora_A), self.lora_B) * self.scale

    def delta_weight(self) -> Tensor:
        """The update to W that the adapter stands for, (α / r) · B A, (out, in)."""
        return (self.lora_B @ self.lora_A) * self.scale

    @torch.no_grad()
    def merge(self) -> None:
        """W ← W + (α / r) · B A: the forward is then one matrix product, as fast as the base's. Merging twice would
        add the update twice, so it is refused."""
        if self.merged:
            raise RuntimeError(
                "this LoRALinear is merged already: merging again would add (alpha / r) · B A to W a second time; "
                "call unmerge() first"
            )
        self.base.weight += self.delta_weight()
        self.merged = True

    @torch.no_grad()
    def unmerge(self) -> None:
        """W ← W − (α / r) · B A: W as it was, up to rounding (the sum was rounded to W's dtype once)."""
        if not self.merged:
            raise RuntimeError(
                "this LoRALinear is not merged: unmerging would subtract (alpha / r) · B A from the base W"
            )
        self.base.weight -= self.delta_weight()
        self.merged = False

    def extra_repr(self) -> str:
        return f"rank={self.rank}, alpha={self.alpha:g}, scale={self.scale:g}, merged={self.merged}"


# -- adapting a model -----------------------------------------------------------------------------------------------


def lora_layers(model: nn.Module) -> dict[str, LoRALinear]:
    """Every ``LoRALinear`` in ``model``, by module name, in the model's order."""
    return {name: module for name, module in model.named_modules() if isinstance(module, LoRALinear)}


def _as_list(targets: str | Iterable[str]) -> list[str]:
    """A learner's targets as a list of names: one name alone ("q") or several (("q", "v"))."""
    chosen = [targets] if isinstance(targets, str) else list(targets)
    if not chosen or not all(isinstance(target, str) and target for target in chosen):
        raise ValueError(
            f"targets must name at least one projection: some of {', '.join(map(repr, PROJECTIONS))} or module "
            f"names such as 'lm_head', got {targets!r}"
        )
    return chosen


def _picks(target: str, name: str) -> bool:
    """Whether ``target`` (a short name or the end of a module name) picks the module called ``name``."""
    return any(name == ending or name.endswith("." + ending) for ending in PROJECTIONS.get(target, (target,)))


def resolve_targets(model: nn.Module, targets: str | Iterable[str]) -> list[str]:
    """The names of ``model``'s linear layers that ``targets`` picks, in the model's order.

    ``targets``: short names from ``PROJECTIONS`` ("q", "k", "v", "o", "ff"), or ends of module names
    ("lm_head", "blocks.0.attention.projections.q_proj"); ``("q", "v")`` is Hu et al.'s choice. A target that picks
    no linear layer is refused, listing the ones there are. Layers wrapped already are included (``add_lora``
    refuses them); the ``base`` inside a wrapper is not."""
    chosen = _as_list(targets)
    wrapped = lora_layers(model)
    candidates = [
        name
        for name, module in model.named_modules()
        if isinstance(module, nn.Linear | LoRALinear) and not any(name.startswith(w + ".") for w in wrapped)
    ]
    for target in chosen:
        if not any(_picks(target, name) for name in candidates):
            shown = ", ".join(candidates[:8]) + (f", ... ({len(candidates)} in all)" if len(candidates) > 8 else "")
            raise ValueError(
                f"the target {target!r} matches no linear layer of this model: name some of "
                f"{', '.join(map(repr, PROJECTIONS))} or a module name; its linear layers are {shown or 'none'}"
            )
    return [name for name in candidates if any(_picks(target, name) for target in chosen)]


def _shared_weights(model: nn.Module) -> dict[int, list[str]]:
    """id of each parameter -> every name it is registered under (two or more: tied, as an output layer to the
    embedding)."""
    names: dict[int, list[str]] = {}
    for name, parameter in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(parameter), []).append(name)
    return names


def add_lora(
    model: nn.Module, targets: str | Iterable[str], rank: int, alpha: float, seed: int | None = 0
) -> list[str]:
    """Wrap each linear layer of ``model`` that ``targets`` picks (``resolve_targets``) in a ``LoRALinear`` of rank
    ``rank`` and scale ``alpha / rank``, in place, and freeze every other parameter (``freeze_all_but_lora``).

    Each A is drawn from one generator seeded with ``seed``, layer after layer in the model's order (None: from
    torch's global generator). Returns the wrapped layers' names.

    Refused, before anything changes: a rank that is not a positive int, an alpha that is not positive, a target
    that matches no linear layer, a layer that has an adapter already, and a layer whose weight is tied to another
    module's (``tie_embeddings``: merging would change the embedding too)."""
    _check_rank_and_alpha(rank, alpha)
    names = resolve_targets(model, targets)
    modules = dict(model.named_modules())
    shared = _shared_weights(model)
    for name in names:
        module = modules[name]
        if isinstance(module, LoRALinear):
            raise ValueError(
                f"{name} has a LoRA adapter already (rank {module.rank}, alpha {module.alpha:g}): a layer takes one; "
                "remove_lora(model) first to start again"
            )
        tied = [other for other in shared[id(module.weight)] if other != f"{name}.weight"]
        if tied:
            raise ValueError(
                f"{name}.weight is the same tensor as {', '.join(tied)} (tied): an adapter on it would change "
                "both when merged; adapt another layer"
            )
    generator = None if seed is None else torch.Generator().manual_seed(seed)
    for name in names:
        parent_name, _, child = name.rpartition(".")
        parent = modules[parent_name] if parent_name else model
        setattr(parent, child, LoRALinear(modules[name], rank, alpha, generator))
    freeze_all_but_lora(model)
    return names


def freeze_all_but_lora(model: nn.Module) -> None:
    """Every parameter of ``model`` frozen but the LoRA layers' A and B: the embeddings, norms, biases and every
    weight keep their pretrained values, and the optimizer sees the adapters alone."""
    model.requires_grad_(False)
    for layer in lora_layers(model).values():
        layer.lora_A.requires_grad_(True)
        layer.lora_B.requires_grad_(True)


def count_trainable(model: nn.Module) -> int:
    """Numbers the optimizer trains: r · (in + out) per LoRA layer once ``add_lora`` has frozen the rest (a tied
    parameter counts once)."""
    return sum(parameter.numel() for parameter in model.parameters() if parameter.requires_grad)


def _some_lora_layers(model: nn.Module, action: str) -> dict[str, LoRALinear]:
    """``lora_layers(model)``, refused when there are none: merging a model without adapters is a slip (the
    adapters were added to another copy, or removed), not a step to pass over in silence."""
    layers = lora_layers(model)
    if not layers:
        raise ValueError(
            f"the model has no LoRA layers to {action}: add them with add_lora(model, targets, rank, alpha)"
        )
    return layers


def merge_lora(model: nn.Module) -> None:
    """Merge every LoRA layer (``LoRALinear.merge``; one merged already is refused, before any is changed)."""
    layers = _some_lora_layers(model, "merge")
    merged = [name for name, layer in layers.items() if layer.merged]
    if merged:
        raise RuntimeError(f"{', '.join(merged)} merged already: merging again would add the update twice")
    for layer in layers.values():
        layer.merge()


def unmerge_lora(model: nn.Module) -> None:
    """Unmerge every LoRA layer (``LoRALinear.unmerge``; one that is not merged is refused, before any is changed)."""
    layers = _some_lora_layers(model, "unmerge")
    unmerged = [name for name, layer in layers.items() if not layer.merged]
    if unmerged:
        raise RuntimeError(f"{', '.join(unmerged)} not merged: unmerging would subtract an update W does not hold")
    for layer in layers.values():
        layer.unmerge()


def remove_lora(model: nn.Module, merge: bool = True) -> list[str]:
    """Put each LoRA layer's ``base`` back in its place, a plain ``nn.Linear``: with ``merge`` the update merged into
    it (the model computes what it did, at the base's speed), without it the base as it was (the update is lost).
    The parameters stay frozen (``model.requires_grad_(True)`` to train them all). Returns the names."""
    modules = dict(model.named_modules())
    layers = lora_layers(model)
    for name, layer in layers.items():
        if merge and not layer.merged:
            layer.merge()
        elif not merge and layer.merged:
            layer.unmerge()
        parent_name, _, child = name.rpartition(".")
        setattr(modules[parent_name] if parent_name else model, child, layer.base)
    return list(layers)


# -- the adapter as a file --------------------------------------------------------------------------------------------


def adapter_state_dict(model: nn.Module) -> dict[str, Tensor]:
    """The adapter's tensors by name, "<layer>.lora_A" (r, in) and "<layer>.lora_B" (out, r), detached: what
    ``save_adapter`` stores (the frozen base weights are not part of it)."""
    state = {}
    for name, layer in lora_layers(model).items():
        state[f"{name}.lora_A"] = layer.lora_A.detach()
        state[f"{name}.lora_B"] = layer.lora_B.detach()
    return state


def _layer_description(layer: LoRALinear) -> dict[str, int | float]:
    return {
        "rank": layer.rank,
        "alpha": layer.alpha,
        "in_features": layer.in_features,
        "out_features": layer.out_features,
    }


def save_adapter(model: nn.Module, path: str | Path) -> Path:
    """Write the adapter of ``model`` (each LoRA layer's A, B, r, α and size) to ``path``, atomically: under a
    temporary name beside it, renamed into place only when whole, so a failed save leaves no half-written file.

    Plain values only (tensors, numbers, strings, dicts), so ``load_adapter`` reads it with ``weights_only=True``."""
    layers = lora_layers(model)
    if not layers:
        raise AdapterError("the model has no LoRA layers to save: add them with add_lora(model, targets, rank, alpha)")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "format": FORMAT,
        "version": VERSION,
        "layers": {name: _layer_description(layer) for name, layer in layers.items()},
        "weights": {name: tensor.cpu().clone() for name, tensor in adapter_state_dict(model).items()},
    }
    with atomic_target(path) as temporary:
        torch.save(payload, temporary)
    return path


def _read_adapter(path: Path) -> dict[str, Any]:
    """The file's contents, checked to be an adapter written by ``save_adapter``; raises ``AdapterError``."""
    if not path.is_file():
        raise FileNotFoundError(f"no adapter file at {path}")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)  # never runs code from the file
    except pickle.UnpicklingError as error:
        named = re.search(r"GLOBAL (\S+)", str(error))  # torch's message names the first object it refused
        raise AdapterError(
            f"{path} is refused: it holds Python objects{f' ({named.group(1)})' if named else ''}, not only tensors, "
            "numbers, strings and dicts, so save_adapter did not write it and loading it could run its code"
        ) from None
    except Exception as error:  # a cut-off or foreign file fails in many ways inside torch.load
        first_line = str(error).splitlines()[0] if str(error) else ""
        raise AdapterError(f"{path} is not a readable adapter file: {type(error).__name__}: {first_line}") from error
    if not isinstance(payload, dict) or payload.get("format") != FORMAT or payload.get("version") != VERSION:
        found = sorted(map(str, payload))[:6] if isinstance(payload, dict) else type(payload).__name__
        raise AdapterError(f"{path} is not a LoRA adapter written by save_adapter (format {FORMAT!r}): found {found}")
    layers, weights = payload.get("layers"), payload.get("weights")
    if not (isinstance(layers, dict) and all(isinstance(d, dict) for d in layers.values())):
        raise AdapterError(f"{path}: its 'layers' must map each layer's name to its rank, alpha and sizes")
    if not (isinstance(weights, dict) and all(isinstance(t, Tensor) for t in weights.values())):
        raise AdapterError(f"{path}: its 'weights' must map names to tensors")
    return payload


def _check_fits(path: Path, layers: dict[str, LoRALinear], stored: dict[str, Any], weights: dict[str, Tensor]) -> None:
    """Refuse an adapter whose layers, ranks, alphas, sizes or tensors differ from the model's, naming the first."""
    if not layers:
        first: dict[str, Any] = next(iter(stored.values()), {})
        names = ", ".join(list(stored)[:4]) + (", ..." if len(stored) > 4 else "")
        raise AdapterError(
            f"the model has no LoRA layers; {path} holds an adapter for {len(stored)} layers ({names}) at rank "
            f"{first.get('rank')} and alpha {first.get('alpha')}: add them first with add_lora(model, targets, "
            "rank, alpha), then load"
        )
    missing, extra = [n for n in layers if n not in stored], [n for n in stored if n not in layers]
    if missing or extra:
        raise AdapterError(
            f"{path} does not fit the model's LoRA layers: the model has {len(layers)}, the file {len(stored)}; "
            f"the file lacks {missing or 'none'}; it has others {extra or 'none'} (the adapter was made with other "
            "targets, or for another number of layers)"
        )
    for name, layer in layers.items():
        expected = _layer_description(layer)
        differ = [
            f"{key} {stored[name].get(key)!r} in the file, {value!r} in the model"
            for key, value in expected.items()
            if stored[name].get(key) != value
        ]
        if differ:
            raise AdapterError(f"{path} does not fit {name}: {'; '.join(differ)}")
        if layer.merged:
            raise AdapterError(f"{name} is merged: unmerge it (unmerge_lora(model)) before loading another adapter")
        for part, parameter in (("lora_A", layer.lora_A), ("lora_B", layer.lora_B)):
            tensor = weights.get(f"{name}.{part}")
            if tensor is None or tensor.shape != parameter.shape or not tensor.is_floating_point():
                held = "missing" if tensor is None else f"{tensor.dtype} of shape {tuple(tensor.shape)}"
                raise AdapterError(
                    f"{path}: {name}.{part} should be floats of shape {tuple(parameter.shape)}, is {held}"
                )
            if not bool(torch.isfinite(tensor).all()):
                raise AdapterError(
                    f"{path}: {name}.{part} holds NaN or infinite numbers (the run that wrote it diverged)"
                )


def load_adapter(model: nn.Module, path: str | Path) -> list[str]:
    """Copy the adapter saved at ``path`` into ``model``'s LoRA layers (``add_lora`` with the same targets, rank and
    alpha first); returns the layers' names.

    Everything is checked before anything is copied, so a refused file leaves the model as it was: the same layers
    (other targets or another number of layers are refused), each with the file's rank, alpha and sizes (another
    model size is refused), none of them merged, tensors of the right shapes, all finite."""
    path = Path(path)
    payload = _read_adapter(path)
    layers = lora_layers(model)
    _check_fits(path, layers, payload["layers"], payload["weights"])
    with torch.no_grad():
        for name, layer in layers.items():
            layer.lora_A.copy_(payload["weights"][f"{name}.lora_A"])  # into A's own dtype and device
            layer.lora_B.copy_(payload["weights"][f"{name}.lora_B"])
    return list(layers)
