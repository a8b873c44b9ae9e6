"""One way into every figure, explorer and view: attention weights with their query and key tokens.

Every viewing function takes ``(weights, query_tokens, key_tokens)``: L query tokens label the rows (the
tokens doing the looking), S key tokens the columns (the tokens looked at). ``layers_of_heads`` turns any
accepted shape of weights into one (n_layers, h, L, S) tensor; ``attention_inputs`` also checks the tokens.

Accepted weights, for one sentence:

- (L, S): one head;
- (h, L, S): one layer of h heads;
- (n_layers, h, L, S): every layer;
- a list or tuple over layers of (h, L, S) tensors (what a model's forward pass records layer by layer);
- nested Python lists of numbers in any of the shapes above (read as one array, never as a list of layers).

Recorded weights with a batch dimension, (N, h, L, S), are ambiguous with (n_layers, h, L, S): pick one
sentence first, ``w[0]``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

SHAPES = "(L, S), (h, L, S), (n_layers, h, L, S) or a list over layers of (h, L, S)"


def _is_array(value) -> bool:
    return isinstance(value, (Tensor, np.ndarray))


def _float_cpu(value, what: str) -> Tensor:
    try:
        tensor = torch.as_tensor(value)
    except (TypeError, ValueError, RuntimeError) as error:
        raise ValueError(f"{what} could not be read as an array of numbers ({error}); expected {SHAPES}") from None
    if tensor.is_complex():
        raise ValueError(f"{what} is complex ({tensor.dtype}); attention weights are real numbers")
    return tensor.detach().cpu().float()


def layers_of_heads(weights) -> Tensor:
    """Any accepted shape of weights (see the module docstring) -> (n_layers, h, L, S), float32 on the CPU.

    Raises ValueError naming the shape received and the shapes expected.
    """
    if weights is None:
        raise ValueError(f"weights is None: expected {SHAPES}")
    if isinstance(weights, (list, tuple)):
        if len(weights) == 0:
            raise ValueError(f"weights is an empty {type(weights).__name__}: expected {SHAPES}")
        arrays = [_is_array(w) for w in weights]
        if all(arrays):
            layers = [_float_cpu(w, f"layer {i} of the weights") for i, w in enumerate(weights)]
            for i, w in enumerate(layers):
                if w.dim() != 3:
                    raise ValueError(
                        f"layer {i} of the weights has shape {tuple(w.shape)}; in a list over layers each layer "
                        "must be (h, L, S) (for recorded (N, h, L, S) weights pick one sentence, e.g. w[0])"
                    )
                if w.shape != layers[0].shape:
                    raise ValueError(
                        f"every layer must have the same (h, L, S) shape: layer 0 is {tuple(layers[0].shape)}, "
                        f"layer {i} is {tuple(w.shape)}"
                    )
            return torch.stack(layers)
        if any(arrays):
            raise ValueError(
                "weights mixes tensors and plain lists: pass a list over layers of (h, L, S) tensors, "
                "or one nested list of numbers"
            )
        # Nested numbers: one array, whatever its depth.
    stacked = _float_cpu(weights, "weights")
    if stacked.dim() == 2:
        stacked = stacked[None, None]
    elif stacked.dim() == 3:
        stacked = stacked[None]
    if stacked.dim() != 4:
        raise ValueError(
            f"expected weights of shape {SHAPES}, got shape {tuple(stacked.shape)} "
            "(for recorded (N, h, L, S) weights pick one sentence, e.g. w[0])"
        )
    if 0 in stacked.shape:
        raise ValueError(f"nothing to show: weights have shape (n_layers, h, L, S) = {tuple(stacked.shape)}")
    return stacked


def checked_tokens(tokens, count: int, name: str) -> list[str]:
    """``tokens`` as a list of ``count`` strings, or ValueError naming ``name`` and what was wrong."""
    if tokens is None:
        raise ValueError(f"{name} is None: expected a list of {count} token strings")
    if isinstance(tokens, (str, bytes)):
        raise ValueError(
            f"{name} is one string ({str(tokens)[:40]!r}); expected a list of {count} token strings, e.g. "
            "tokenizer output"
        )
    if not isinstance(tokens, Sequence) and not _is_array(tokens):
        raise ValueError(f"{name} is a {type(tokens).__name__}: expected a list of {count} token strings")
    tokens = list(tokens)
    for i, token in enumerate(tokens):
        if not isinstance(token, str):
            raise ValueError(
                f"{name}[{i}] is {token!r} ({type(token).__name__}): every token must be a string "
                "(decode token ids first)"
            )
    if len(tokens) != count:
        raise ValueError(f"{name} has {len(tokens)} tokens; the weights need {count}")
    return tokens


def attention_inputs(weights, query_tokens, key_tokens=None) -> tuple[Tensor, list[str], list[str]]:
    """Check ``(weights, query_tokens, key_tokens)`` together: ((n_layers, h, L, S), L strings, S strings).

    ``key_tokens`` None means self-attention: the keys are the query tokens (then L must equal S).
    """
    stacked = layers_of_heads(weights)
    L, S = stacked.shape[-2:]
    if key_tokens is None:
        if L != S:
            raise ValueError(
                f"weights of shape (n_layers, h, L, S) = {tuple(stacked.shape)} have L = {L} queries and S = {S} "
                "keys: pass key_tokens (only self-attention, L = S, may leave them out)"
            )
        queries = checked_tokens(query_tokens, L, "query_tokens")
        return stacked, queries, list(queries)
    return stacked, checked_tokens(query_tokens, L, "query_tokens"), checked_tokens(key_tokens, S, "key_tokens")
