"""Indirect-object identification (lesson 12): the task a real model's circuit is traced on.

"When Mary and John went to the store, John gave a drink to" → " Mary". The name that appears once is the
*indirect object* (IO); the name that appears twice is the *subject* (S: its first place S1, its second S2). A
model that has learned the task puts more logit on IO than on S at the last position (END); the **logit
difference** logit(IO) − logit(S) there measures how well (Wang et al., 2022, on GPT-2 small).

``ioi_batch(tokenizer, template, pairs)`` writes one template with every pair of names in both roles and both
orders (ABB: IO named first; BAB: S named first), with the positions of IO, S1, S2 and END in each prompt, and
the **corrupted "ABC" batch**: the same prompts with S2 replaced by a third name C, so that no name repeats and
nothing tells the model which name to avoid. One template per batch, so that every prompt of a batch has the same
length T (each name is one token) and the batch is a plain (N, T) tensor.

Shapes: N prompts, T tokens, V vocabulary.
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = ["TEMPLATES", "IOIBatch", "ioi_batch", "logit_difference", "name_pairs"]

# Three templates of the kind Wang et al. used, written for this course. {A} and {B} are the two names in order of
# appearance; {S} is the subject's second mention, the one the model must not name next.
TEMPLATES = (
    "When {A} and {B} went to the store, {S} gave a drink to",
    "After {A} and {B} went to the park, {S} handed a ball to",
    "Then {A} and {B} had a long argument, and afterwards {S} said to",
)
ROLES = ("IO", "S1", "S2", "END")


@dataclass
class IOIBatch:
    """One template's prompts, clean and corrupted, tokenized, with every role's token and position.

    ``ids`` and ``corrupted`` are (N, T); ``io``, ``s`` and ``c`` the token ids (N,) of the indirect object, the
    subject and the corrupted batch's third name; ``positions[role]`` (N,) the position of IO, S1, S2 and END."""

    template: str
    prompts: list[str]
    ids: Tensor
    corrupted: Tensor
    io: Tensor
    s: Tensor
    c: Tensor
    positions: dict[str, Tensor]


def name_pairs(names: Sequence[str]) -> list[tuple[str, str, str]]:
    """Names taken two by two, (names[0], names[1]), (names[2], names[3]), …, each with a third name C for the
    corrupted batch: the first name of the next pair (the last pair takes the first). Needs ≥ 4 names, even."""
    if isinstance(names, str) or not isinstance(names, Sequence):
        raise TypeError(
            f"names must be a sequence of names (a list such as ['Mary', 'John', 'Alice', 'Bob']), got "
            f"{type(names).__name__} {names!r}"
            + (" (a string would be read letter by letter)" if isinstance(names, str) else "")
        )
    strange = [name for name in names if not isinstance(name, str) or not name]
    if strange:
        raise TypeError(f"each name is a non-empty string, got {strange[0]!r} in {list(names)!r}")
    names = list(names)
    if len(names) < 4 or len(names) % 2:
        raise ValueError(f"need an even number of at least 4 names (pairs and a third name each), got {len(names)}")
    if len(set(names)) != len(names):
        raise ValueError(f"the names must all differ, got {names}")
    pairs = [(names[i], names[i + 1]) for i in range(0, len(names), 2)]
    return [(a, b, pairs[(k + 1) % len(pairs)][0]) for k, (a, b) in enumerate(pairs)]


def _check_template(template: str) -> None:
    if not isinstance(template, str):
        raise TypeError(f"a template is a string, got {type(template).__name__}")
    slots = _placeholders(template)
    for slot in ("A", "B", "S"):
        if slots.count(slot) != 1:
            raise ValueError(f"a template holds {{A}}, {{B}} and {{S}} once each; {template!r} has {{{slot}}} "
                             f"{slots.count(slot)} times")  # fmt: skip
    if slots != ["A", "B", "S"]:
        raise ValueError(f"a template names {{A}}, then {{B}}, then the subject again {{S}}: {template!r}")
    if template.rstrip() != template:
        raise ValueError(f"a template ends where the name is predicted, without trailing space: {template!r}")


def _placeholders(template: str) -> list[str]:
    """The names of ``template``'s placeholders in order; refuses any but plain {A}, {B} and {S} (a positional
    {0}, an unknown {C}, a format such as {A:>8}, which would pad the name with spaces) and unbalanced braces."""
    try:
        fields = list(string.Formatter().parse(template))
    except ValueError as error:  # a lone "{" or "}"
        raise ValueError(
            f"a template's braces must pair up ({{{{ for a literal brace}}}}): {template!r}: {error}"
        ) from None
    slots = []
    for _, field, spec, conversion in fields:
        if field is None:
            continue
        if field not in ("A", "B", "S") or spec or conversion:
            written = "{" + field + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "") + "}"
            raise ValueError(
                f"a template's placeholders are {{A}}, {{B}} and {{S}} alone (the two names, then the subject "
                f"again), got {written} in {template!r}"
            )
        slots.append(field)
    return slots


def _one_token(tokenizer, name: str) -> int:
    """The id of " name" (with the space a name has inside a sentence), which must be a single token."""
    ids = tokenizer(" " + name)["input_ids"]
    if len(ids) != 1:
        raise ValueError(f"every name must be one token with its leading space; {name!r} is {len(ids)} tokens")
    return ids[0]


def ioi_batch(tokenizer, template: str, pairs: Sequence[tuple[str, str, str]]) -> IOIBatch:
    """The prompts of ``template`` for every (A, B, C) of ``pairs`` (see ``name_pairs``): each pair of names in
    both roles (IO = A, S = B, then IO = B, S = A) and both orders, ABB ("When A and B …, B gave … to": IO named
    first) and BAB ("When B and A …, B gave … to": S named first). N = 4 · len(pairs); prompts 4k .. 4k + 3 are
    pair k's (IO = A ABB, IO = A BAB, IO = B ABB, IO = B BAB).

    Both roles matter: a model may simply like one name more than another (its logit is higher whatever the
    prompt), and with each name once as IO and once as S that preference cancels in the mean logit difference.
    The corrupted prompt replaces S2 by C. Refuses names that are not one token, a template without {A}, {B} and
    {S} in that order, and names that repeat within a triple."""
    _check_template(template)
    if isinstance(pairs, str) or not isinstance(pairs, Sequence):
        raise TypeError(f"pairs must be a list of (A, B, C) triples of names (see name_pairs), got {pairs!r}")
    if not pairs:
        raise ValueError("need at least one (A, B, C) triple of names")
    prompts, corrupted, io, s, c = [], [], [], [], []
    for triple in pairs:
        if isinstance(triple, str) or not isinstance(triple, Sequence) or not all(isinstance(n, str) for n in triple):
            raise TypeError(
                f"each of pairs is a triple of names (A, B, C), e.g. ('Mary', 'John', 'Alice'), got {triple!r}"
            )
        if len(triple) != 3 or len(set(triple)) != 3:
            raise ValueError(f"each triple holds three different names (A, B, C), got {triple!r}")
        a, b, third = triple
        for indirect, subject in ((a, b), (b, a)):
            for first, second in ((indirect, subject), (subject, indirect)):  # ABB, then BAB
                prompts.append(template.format(A=first, B=second, S=subject))
                corrupted.append(template.format(A=first, B=second, S=third))
                io.append(_one_token(tokenizer, indirect))
                s.append(_one_token(tokenizer, subject))
                c.append(_one_token(tokenizer, third))
    ids = [tokenizer(p)["input_ids"] for p in prompts]
    bad = [tokenizer(p)["input_ids"] for p in corrupted]
    if len({len(x) for x in ids + bad}) != 1:
        raise ValueError(f"the prompts of {template!r} do not all have one length: a name split into two tokens")
    ids_t, bad_t = torch.tensor(ids), torch.tensor(bad)
    io_t, s_t, c_t = torch.tensor(io), torch.tensor(s), torch.tensor(c)
    positions = _positions(ids_t, io_t, s_t)
    return IOIBatch(template, prompts, ids_t, bad_t, io_t, s_t, c_t, positions)


def _positions(ids: Tensor, io: Tensor, s: Tensor) -> dict[str, Tensor]:
    """Where IO, S1, S2 and END are in each prompt (N,): the names are found by their token ids."""
    T = ids.size(1)
    place = torch.arange(T).expand_as(ids)
    is_io, is_s = ids == io[:, None], ids == s[:, None]  # (N, T)
    if not ((is_io.sum(1) == 1).all() and (is_s.sum(1) == 2).all()):
        raise ValueError("each prompt must hold IO once and S twice as whole tokens (does the template name one?)")
    first_s = torch.where(is_s, place, T).min(dim=1).values
    second_s = torch.where(is_s, place, -1).max(dim=1).values
    end = torch.full_like(first_s, T - 1)
    return {"IO": is_io.float().argmax(dim=1), "S1": first_s, "S2": second_s, "END": end}


def logit_difference(logits: Tensor, batch: IOIBatch, per_prompt: bool = False) -> Tensor:
    """logit(IO) − logit(S) at the last position: logits (N, T, V) (or (N, V) of the last position alone) ->
    the mean over prompts, a number (or (N,) with ``per_prompt``). Positive: the model prefers the right name."""
    last = logits[:, -1] if logits.dim() == 3 else logits  # (N, V)
    if last.dim() != 2 or last.size(0) != batch.ids.size(0):
        raise ValueError(f"expected logits (N, T, V) or (N, V) for N = {batch.ids.size(0)}, got {tuple(logits.shape)}")
    rows = torch.arange(last.size(0))
    difference = last[rows, batch.io] - last[rows, batch.s]  # (N,)
    return difference if per_prompt else difference.mean()
