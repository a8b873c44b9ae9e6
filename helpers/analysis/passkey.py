"""The pass-key test (lesson 13): can a model fetch a number stated before more tokens than a local layer reads?

A prompt states a key (a string of digits) near its start, then repeats a filler text until the key's last token
lies more than ``gap`` tokens before the question's first token, then asks the question, which ends
"... The pass key is". With ``gap`` at least the window, no local (sliding-window) layer can read the key from
the question: only a global layer can, or a local layer reading what a global layer wrote at a later position.
The model answers greedily with the course's KV cache; the key is **fetched** when the answer's first number is
the key, digit for digit.

Which layers it takes is found by making global layers local: ``made_local(model, layers)`` gives those layers
the window within a ``with`` (each keeps its own rotary base, so that only what the layer may read changes) and
restores them on leaving. ``passkey_variants`` names the usual set: intact, every layer local, each global layer
made local alone; ``passkey_trials`` runs every prompt under every variant.

The keys, fillers, head and question are arguments: the lesson and its benchmark (``benchmarks/
lesson13_passkey.py``) use different ones, so that the benchmark's numbers are out of the lesson's sample.

The tokenizer is a ``transformers`` tokenizer (or anything with its two calls): ``tokenizer(text).input_ids``,
the ids of a text with its special tokens (Gemma's <bos>), and ``tokenizer.decode(ids, skip_special_tokens=True)``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import Tensor

from helpers.gpt import GPT, generate
from helpers.layer_kind import seeing

__all__ = [
    "PASSKEY_HEAD",
    "PASSKEY_QUESTION",
    "PasskeyPrompt",
    "PasskeyTrial",
    "answer_greedily",
    "count_fetched",
    "global_layers",
    "is_fetched",
    "made_local",
    "passkey_prompt",
    "passkey_trials",
    "passkey_variants",
]

PASSKEY_HEAD = (
    "There is a pass key hidden in this text. Remember it. The pass key is {key}. Remember it. {key} is the pass key.\n"
)
PASSKEY_QUESTION = "\nWhat is the pass key? The pass key is"


@dataclass(frozen=True)
class PasskeyPrompt:
    """A built prompt: ``ids`` (1, T); the ``key``; ``key_position``, the index of the key's last token (at its
    last mention in the head); ``question_position``, the index of the question's first token; ``repeats``, the
    filler's copies. ``distance`` = question_position - key_position, more than the ``gap`` asked for."""

    ids: Tensor
    key: str
    key_position: int
    question_position: int
    repeats: int

    @property
    def distance(self) -> int:
        return self.question_position - self.key_position


def _ids(tokenizer, text: str) -> list[int]:
    return list(tokenizer(text).input_ids)


def _prefix_length(tokenizer, text: str, end: int, full: list[int], what: str) -> int:
    """How many of ``full``'s tokens ``text[:end]`` is: the tokens of that prefix must begin ``full``."""
    prefix = _ids(tokenizer, text[:end])
    if full[: len(prefix)] != prefix:
        raise ValueError(
            f"the tokenizer joins {what} into one token with the text after it, so its position is not one token's: "
            "end the head after the key with a space or punctuation, and the filler with a sentence's end"
        )
    return len(prefix)


def _check_key(key) -> str:
    text = str(key) if isinstance(key, int) and not isinstance(key, bool) and key >= 0 else key
    if not isinstance(text, str) or not text.isdigit() or not text.isascii():
        raise ValueError(f"key must be a non-negative int or a string of digits, got {key!r}")
    return text


def _build(tokenizer, stated: str, key_end: int, filler: str, question: str) -> tuple[list[int], int, int]:
    """The ids of ``stated + filler + question``, the index of the key's last token (the key ends at character
    ``key_end``) and the index of the question's first token."""
    text = stated + filler + question
    full = _ids(tokenizer, text)
    key_position = _prefix_length(tokenizer, text, key_end, full, "the key's last digit") - 1
    question_position = _prefix_length(tokenizer, text, len(text) - len(question), full, "the filler's end")
    return full, key_position, question_position


def passkey_prompt(
    tokenizer, key: int | str, filler: str, gap: int, head: str = PASSKEY_HEAD, question: str = PASSKEY_QUESTION
) -> PasskeyPrompt:
    """``head`` (with ``{key}`` filled in), ``filler`` repeated, ``question``: the fewest copies of the filler that
    put the key's last token more than ``gap`` tokens before the question's first token."""
    key = _check_key(key)
    if isinstance(gap, bool) or not isinstance(gap, int) or gap < 0:
        raise ValueError(f"gap must be an int number of tokens >= 0, got {gap!r}")
    if not isinstance(filler, str) or not filler.strip():
        raise ValueError(f"filler must be a non-empty text, got {filler!r:.60}")
    if not isinstance(head, str) or "{key}" not in head or not isinstance(question, str) or not question:
        raise ValueError("head must be a text holding {key}, and question a non-empty text")
    stated = head.format(key=key)
    key_end = stated.rfind(key) + len(key)  # the key's last mention ends here
    per_copy = max(1, len(_ids(tokenizer, filler)) - len(_ids(tokenizer, "")))  # tokens of one copy, about

    def distance(repeats: int) -> int:
        _, key_position, question_position = _build(tokenizer, stated, key_end, filler * repeats, question)
        return question_position - key_position

    repeats = max(0, math.ceil(gap / per_copy) - 1)  # a first guess, then the fewest copies that are enough
    if distance(repeats) > gap:
        while repeats > 0 and distance(repeats - 1) > gap:
            repeats -= 1
    else:
        while distance(repeats) <= gap:
            repeats += 1
    full, key_position, question_position = _build(tokenizer, stated, key_end, filler * repeats, question)
    return PasskeyPrompt(torch.tensor([full]), key, key_position, question_position, repeats)


def is_fetched(answer: str, key: int | str) -> bool:
    """True when the answer's first number (a run of digits) is the key, digit for digit."""
    number = re.search(r"\d+", answer)
    return number is not None and number.group() == _check_key(key)


@torch.no_grad()
def answer_greedily(model: GPT, tokenizer, ids: Tensor, new_tokens: int = 8, rolling: bool = False) -> str:
    """The model's greedy continuation of ids (1, T), ``new_tokens`` tokens with the course's KV cache
    (``helpers.gpt.generate``; ``rolling`` for the rolling one), decoded without special tokens."""
    tokens, _ = generate(model, ids, new_tokens, rolling=rolling)
    return tokenizer.decode(tokens[0, ids.size(1) :].tolist(), skip_special_tokens=True)


def global_layers(model: GPT) -> tuple[int, ...]:
    """The softmax layers that attend to every earlier token now (no window; a delta layer has none to set)."""
    return tuple(i for i, layer in enumerate(model.attention_layers) if layer.takes_a_window and layer.window is None)


@contextmanager
def made_local(model: GPT, layers: Iterable[int], window: int | None = None) -> Iterator[GPT]:
    """Within the ``with``, each of ``layers`` (global layers) attends within ``window`` tokens (default the
    model's ``config.window``, its local layers' window). Only the window changes: each layer keeps its own
    rotary base and weights. The layers are global again on leaving, also after an error. A cache made inside
    (``model.new_cache(rolling=True)``) bounds those layers too; do not use it outside."""
    if not isinstance(model, GPT):
        raise TypeError(f"made_local needs a helpers.gpt.GPT, got {type(model).__name__}")
    window = model.config.window if window is None else window
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ValueError(f"window must be a positive int number of tokens (the model has none), got {window!r}")
    n_layers = len(model.blocks)
    layers = sorted(set(layers))
    bad = [i for i in layers if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < n_layers]
    if bad:
        raise ValueError(f"layers must be ints in 0 .. {n_layers - 1} (the model's layers), got {bad}")
    windowless = [i for i in layers if not model.attention_layers[i].takes_a_window]
    if windowless:
        raise ValueError(f"layers {windowless} have no window to set (kinds that do not read one)")
    local = [i for i in layers if model.layer_windows()[i] is not None]
    if local:
        raise ValueError(f"layers {local} are local already; made_local takes global layers {global_layers(model)}")
    with seeing(model, layers, window):  # the one way a layer's sight is changed
        yield model


def passkey_variants(model: GPT) -> dict[str, tuple[int, ...]]:
    """The variants' names and the global layers each makes local: "intact" (none), "every layer local" (all of
    them), and "layer i local" for each global layer i alone."""
    found = global_layers(model)
    return {"intact": (), "every layer local": found} | {f"layer {i} local": (i,) for i in found}


@dataclass(frozen=True)
class PasskeyTrial:
    """One answer: the ``variant`` (and the ``layers`` it made local), the ``key``, the ``filler``'s index in the
    fillers given, the ``gap`` asked for, the prompt's length ``T`` and key-to-question ``distance``, the
    ``answer`` text and whether the key was ``fetched``."""

    variant: str
    layers: tuple[int, ...]
    key: str
    filler: int
    gap: int
    T: int
    distance: int
    answer: str
    fetched: bool


def passkey_trials(
    model: GPT,
    tokenizer,
    keys: Sequence[int | str],
    fillers: Sequence[str],
    gaps: Sequence[int],
    variants: dict[str, tuple[int, ...]] | None = None,
    new_tokens: int = 8,
    head: str = PASSKEY_HEAD,
    question: str = PASSKEY_QUESTION,
    on_trial: Callable[[PasskeyTrial], None] | None = None,
) -> list[PasskeyTrial]:
    """Every (filler, gap, key) prompt answered under every variant (default ``passkey_variants(model)``), the
    variants' layers made local with ``made_local``. ``on_trial`` is called with each trial as it is done."""
    variants = passkey_variants(model) if variants is None else variants
    if not keys or not fillers or not gaps:
        raise ValueError("passkey_trials needs at least one key, one filler and one gap")
    trials = []
    for filler_index, filler in enumerate(fillers):
        for gap in gaps:
            for key in keys:
                prompt = passkey_prompt(tokenizer, key, filler, gap, head, question)
                for name, layers in variants.items():
                    with made_local(model, layers):
                        text = answer_greedily(model, tokenizer, prompt.ids, new_tokens)
                    trial = PasskeyTrial(
                        name, tuple(layers), prompt.key, filler_index, gap, prompt.ids.size(1), prompt.distance,
                        text, is_fetched(text, prompt.key),
                    )  # fmt: skip
                    trials.append(trial)
                    if on_trial is not None:
                        on_trial(trial)
    return trials


def count_fetched(trials: Iterable[PasskeyTrial], by: str | tuple[str, ...] = "variant") -> dict:
    """(keys fetched, trials) per value of the field ``by`` (or per tuple of values of several fields), in the
    order first seen: ``count_fetched(trials)`` -> {"intact": (4, 4), "every layer local": (0, 4), ...}."""
    fields = (by,) if isinstance(by, str) else tuple(by)
    known = set(PasskeyTrial.__dataclass_fields__)
    if not fields or any(f not in known for f in fields):
        raise ValueError(f"by must name fields of PasskeyTrial {sorted(known)}, got {by!r}")
    counts: dict = {}
    for trial in trials:
        value = getattr(trial, fields[0]) if len(fields) == 1 else tuple(getattr(trial, f) for f in fields)
        fetched, total = counts.get(value, (0, 0))
        counts[value] = (fetched + trial.fetched, total + 1)
    return counts
