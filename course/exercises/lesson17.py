"""Checks for lesson 17's exercises: a new LoRA adapter, the adapted layer's output, the merged weight, and the number
of parameters LoRA trains.

Shapes in ``nn.Linear``'s convention: W (out, in), A (r, in), B (out, r), x (..., in); α is the scale's numerator, so
the update is (α / r) · B A and r is A's first size. Every case has out, in and r all different, so that a transposed
or swapped factor has a shape of its own, and the numeric checks run a square case (out = in) first, where a
transposition still computes and gives numbers of its own; B is never zero there (a zero B would hide every mistake
in the update). A new adapter's A is the learner's own draw, in the learner's own order: it is judged by what it is
(its shape, its bound, its spread over a few hundred numbers), B exactly (zeros); torch.empty, whose memory may hold
anything (zeros too), is told apart from the global random stream by calling the answer again with every random
number the same. The numeric checks take a tensor and nothing else (a list of its numbers is refused), and a product
whose shapes do not fit is answered with the shapes each factor and product has. The count compares whole numbers,
over cases chosen so that each usual mistake gives a number of its own, and refuses an answer that changed the list
of shapes it was given.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor

from course.call_recording import CallRecorder
from course.exercises.feedback import (
    LearnerError,
    Mistakes,
    Verdict,
    _Wrong,
    as_int,
    as_tensor,
    call_learner,
    close,
    expect_plain_tensor,
    expect_shape,
    learner_check,
    named_mistake,
    run_check,
    wrong,
)

__all__ = [
    "check_lora_forward",
    "check_lora_parameter_count",
    "check_merge_weight",
    "check_new_adapter",
    "reference_lora_forward",
    "reference_lora_parameter_count",
    "reference_merge_weight",
    "reference_new_adapter",
]


def reference_new_adapter(
    out_features: int, in_features: int, rank: int, generator: torch.Generator
) -> tuple[Tensor, Tensor]:
    """(A, B): A (rank, in_features) uniform in ±1/√in_features, drawn from ``generator`` (``nn.Linear``'s draw for
    its weight, peft's default for A); B (out_features, rank) zeros. Both float32."""
    bound = 1 / math.sqrt(in_features)
    A = torch.rand(rank, in_features, generator=generator) * (2 * bound) - bound
    B = torch.zeros(out_features, rank)
    return A, B


def reference_lora_forward(x: Tensor, W: Tensor, A: Tensor, B: Tensor, alpha: float) -> Tensor:
    """x (..., in), W (out, in), A (r, in), B (out, r) -> (..., out): the frozen layer's output plus the update
    (α / r) · (x Aᵀ) Bᵀ, through the rank-r bottleneck."""
    scale = alpha / A.size(0)
    return x @ W.T + scale * ((x @ A.T) @ B.T)


def reference_merge_weight(W: Tensor, A: Tensor, B: Tensor, alpha: float) -> Tensor:
    """W (out, in) -> a new (out, in) tensor, W + (α / r) · B A; W itself is left as it was."""
    return W + (alpha / A.size(0)) * (B @ A)


def reference_lora_parameter_count(shapes: list[tuple[int, int]], rank: int) -> int:
    """The numbers LoRA trains on layers whose weights have ``shapes`` (out, in): r · (out + in) each, A and B."""
    return sum(rank * (out_features + in_features) for out_features, in_features in shapes)


# ---------------------------------------------------------------------------------------------
# Exercise 1: a new adapter, A random and B zeros
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _AdapterCase:
    out_features: int
    in_features: int
    rank: int
    seed: int

    @property
    def name(self) -> str:
        return f"out_features {self.out_features}, in_features {self.in_features}, rank {self.rank}"

    @property
    def bound(self) -> float:
        return 1 / math.sqrt(self.in_features)


# out, in and r all differ in each case (a swapped or transposed shape shows); in < out in one, in > out in another
# (a bound taken from out_features is too wide in one, too narrow in the other); A holds 80 to 600 numbers.
_ADAPTER_CASES = [
    _AdapterCase(12, 20, 4, seed=170),
    _AdapterCase(16, 100, 6, seed=171),
    _AdapterCase(144, 36, 8, seed=172),
]
# A uniform draw in ±b reaches past 0.75 b somewhere: with 80 numbers or more, a right answer misses it with a
# probability below 1e-9.
_REACH = 0.75
# How far (in standard errors) A's mean and mean square may stray from a uniform draw's before A is refused.
_SIGMAS = 6.0


def _adapter_pair(result: Any, case: _AdapterCase, empty: str = "") -> tuple[Tensor, Tensor]:
    """(A, B) from the learner's answer, or a hint naming what is wrong with its form, shapes or dtype (``empty``: the
    torch.empty-like function the answer called, if any, named where it explains the numbers)."""
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        got = f"a {type(result).__name__}" + (f" of {len(result)} items" if isinstance(result, (tuple, list)) else "")
        raise wrong(f"return two tensors, (A, B), got {got} ({case.name}).")
    for name, item in zip("AB", result, strict=True):
        if not isinstance(item, Tensor):
            raise wrong(f"{name} should be a tensor, got {type(item).__name__} ({case.name}).")
        expect_plain_tensor(item, name)
    first, second = result
    _expect_adapter_shapes(tuple(first.shape), tuple(second.shape), case)
    for name, item in zip("AB", result, strict=True):
        if item.dtype != torch.float32:
            raise wrong(
                f"{name} is {item.dtype}: the exercise asks for float32, torch's default float and nn.Linear's: make "
                f"the tensors without a dtype, or turn them into float32 ({case.name})."
            )
        if not bool(item.isfinite().all()):
            raise wrong(f"{name} holds NaN or infinite numbers ({case.name}).{_empty_note(empty)}")
    return first.detach(), second.detach()


def _expect_adapter_shapes(got_A: tuple, got_B: tuple, case: _AdapterCase) -> None:
    """Refuse shapes other than A (r, in), B (out, r), naming the usual mix-ups."""
    out, d_in, r = case.out_features, case.in_features, case.rank
    want_A, want_B = (r, d_in), (out, r)
    if (got_A, got_B) == (want_A, want_B):
        return
    sizes = f"({case.name}: A should be (rank, in_features) = {want_A}, B (out_features, rank) = {want_B}; got "
    sizes += f"{got_A} and {got_B})"
    named = {
        (want_B, want_A): "the pair comes back as (B, A): return A first, then B, the order the exercise names.",
        ((d_in, r), (r, out)): "A and B are both transposed: in nn.Linear's convention a weight is (out, in), so A, "
        "which maps the layer's in_features inputs down to rank numbers, is (rank, in_features), and B, which maps "
        "them up to out_features, is (out_features, rank).",
        ((d_in, r), want_B): "A is transposed, rank and in_features swapped: A maps the layer's in_features inputs "
        "down to rank numbers, so in nn.Linear's convention (out, in) it is (rank, in_features).",
        (want_A, (r, out)): "B is transposed, rank and out_features swapped: B maps the rank numbers up to the "
        "layer's out_features outputs, so in nn.Linear's convention (out, in) it is (out_features, rank).",
        ((r, out), (d_in, r)): "in_features and out_features are swapped: A reads the layer's input (in_features "
        "numbers), B writes its output (out_features numbers).",
        ((r, out), want_B): "A's second size is out_features: A reads the layer's input, in_features numbers.",
        (want_A, (d_in, r)): "B's first size is in_features: B writes the layer's output, out_features numbers.",
    }
    if (got_A, got_B) in named:
        raise wrong(f"{named[got_A, got_B]} {sizes}")
    if (out, d_in) in (got_A, got_B):
        raise wrong(
            "a factor has the full weight's shape (out_features, in_features): the adapter replaces that matrix "
            f"by two thin ones, A (rank, in_features) and B (out_features, rank). {sizes}"
        )
    raise wrong(f"the shapes are off: A is (rank, in_features) and B (out_features, rank). {sizes}")


def _a_problem(A: Tensor, case: _AdapterCase) -> str | None:
    """What makes ``A`` unlike a uniform draw in ±1/√in_features, in words (None: it looks like one)."""
    values = A.double().flatten()
    n, b = values.numel(), case.bound
    largest = float(values.abs().max())
    where = f"({case.name}: ±1/√in_features = ±{b:.4f})"
    if largest == 0:
        return f"A is all zeros {where}: draw it at random."
    if int(values.unique().numel()) == 1:
        return f"A holds one number, {float(values[0]):.4f}, everywhere {where}: draw each entry at random."
    if largest > b * (1 + 1e-5):
        return (
            f"some entries of A lie outside the bound, the largest |A| is {largest:.4f} {where}: nn.Linear draws its "
            "weight uniformly between -1/√in_features and +1/√in_features."
        )
    if float(values.min()) >= 0 or float(values.max()) <= 0:
        return f"A's entries all have one sign {where}: a uniform draw between -bound and +bound takes both."
    if largest < _REACH * b:
        return (
            f"A's entries reach only ±{largest:.4f} {where}: a uniform draw over the whole range comes close to the "
            "bound somewhere."
        )
    if int(values.unique().numel()) < n // 2:
        return f"A repeats its numbers, {int(values.unique().numel())} different in {n} {where}: draw every entry."
    spread = b / math.sqrt(3)  # a uniform draw's standard deviation
    if abs(float(values.mean())) > _SIGMAS * spread / math.sqrt(n):
        return f"A's entries are not centred on 0, their mean is {float(values.mean()):.4f} {where}."
    square, expected = float(values.pow(2).mean()), b**2 / 3
    if abs(square - expected) > _SIGMAS * math.sqrt(4 / 45) * b**2 / math.sqrt(n):
        return (
            f"A's spread is not a uniform draw's: its root mean square is {square**0.5:.4f} where a uniform draw in "
            f"the bound gives about {expected**0.5:.4f} {where}."
        )
    return None


def _uniform(bound: Callable[[_AdapterCase], float]) -> Callable[[Tensor, _AdapterCase], bool]:
    """A test: A looks like a uniform draw in ±bound(case) (inside it, reaching past 0.75 of it, of both signs)."""

    def test(A: Tensor, case: _AdapterCase) -> bool:
        c, largest = bound(case), float(A.abs().max())
        return _REACH * c <= largest <= c * (1 + 1e-5) and float(A.min()) < 0 < float(A.max())

    return test


def _normal(*stds: Callable[[_AdapterCase], float]) -> Callable[[Tensor, _AdapterCase], bool]:
    """A test: A passes the bound and its root mean square is within 25% of one of ``stds(case)``, as a normal draw
    with that std gives."""

    def test(A: Tensor, case: _AdapterCase) -> bool:
        rms = float(A.double().pow(2).mean().sqrt())
        return float(A.abs().max()) > case.bound and any(0.8 <= rms / std(case) <= 1.25 for std in stds)

    return test


def _all_zero(A: Tensor, case: _AdapterCase) -> bool:
    return not bool(A.any())


def _one_number(A: Tensor, case: _AdapterCase) -> bool:
    return bool(A.any()) and int(A.unique().numel()) == 1


def _never_negative(A: Tensor, case: _AdapterCase) -> bool:
    return float(A.min()) >= 0 and bool(A.any())


def _never_positive(A: Tensor, case: _AdapterCase) -> bool:
    return float(A.max()) <= 0 and bool(A.any())


def _off_centre(A: Tensor, case: _AdapterCase) -> bool:
    """Both signs, but a mean far from 0 (over 4 standard errors of A's own spread): a shifted range. A centred draw
    passes this in one case with a probability below 1e-4, in all three of them never; a draw in [-b/2, 3b/2) fails
    it in one case with a probability about as small."""
    values = A.double().flatten()
    spread = float(values.std()) if values.numel() > 1 else 0.0
    mean = abs(float(values.mean()))
    return float(values.min()) < 0 < float(values.max()) and mean > 4 * spread / math.sqrt(values.numel())


# A's usual mistakes: hint -> a test that A passes, in every case, when it was drawn that way (tried in order, once
# some case's A is unlike the right draw).
_A_MISTAKES: dict[str, Callable[[Tensor, _AdapterCase], bool]] = {
    "A is left at zero too: with both factors zero no gradient ever reaches either. The update's gradients are "
    "dL/dB = g (A x)ᵀ, zero since A x = 0, and dL/dA = Bᵀ g xᵀ, zero since B = 0: training never moves them. "
    "Draw A at random, B alone starts at zero.": _all_zero,
    "A holds one number everywhere: its rows are then alike, their gradients too, and they stay alike (the adapter "
    "trains as if its rank were 1). Draw each entry at random.": _one_number,
    # Before any bound or spread is judged: a range off centre is first of all off centre (its numbers would pass
    # for a normal draw's, whose root mean square a uniform draw in [-2b, 0) or [0, 2b) shares).
    "A's entries are all 0 or less: the shift of torch.rand's [0, 1) goes too far. A uniform draw between "
    "-1/√in_features and +1/√in_features is centred on zero, about half its entries negative and half positive: the "
    "shift is half the width the draw is stretched to.": _never_positive,
    "A's entries are all 0 or more: torch.rand draws from [0, 1), so shift and stretch it to cover -1/√in_features "
    ".. +1/√in_features.": _never_negative,
    "A's entries are not centred on 0: most lie on one side, the range is shifted (its shift does not match its "
    "stretch). A uniform draw between -1/√in_features and +1/√in_features has its middle at zero: the shift is half "
    "the width the draw is stretched to.": _off_centre,
    "A is drawn from a standard normal (torch.randn) and not scaled: its entries are far too large. nn.Linear, and "
    "peft for A, draw uniformly between -1/√in_features and +1/√in_features.": _normal(lambda case: 1.0),
    "A is uniform in (-1, 1), not scaled by 1/√in_features: far too large. nn.Linear, and peft for A, draw "
    "uniformly between -1/√in_features and +1/√in_features.": _uniform(lambda case: 1.0),
    "A's bound comes from out_features: nn.Linear's bound, 1/√in_features, comes from the inputs each output reads "
    "(the fan-in), and A reads the layer's input.": _uniform(lambda case: 1 / math.sqrt(case.out_features)),
    "A's bound comes from the rank: nn.Linear's bound is 1/√in_features, from the inputs each of A's rows reads (the "
    "fan-in).": _uniform(lambda case: 1 / math.sqrt(case.rank)),
    "A's bound is 1/in_features: the square root is missing, the bound is 1/√in_features.": _uniform(
        lambda case: 1 / case.in_features
    ),
    "A's bound is 1/(2·in_features), not 1/√in_features: ** binds tighter than /, so 1/in_features**1/2 reads as "
    "(1/in_features)/2. Write the power as ** 0.5, or put 1/2 in brackets, or use math.sqrt.": _uniform(
        lambda case: 1 / (2 * case.in_features)
    ),
    "A is uniform in ±√(6/(in_features + rank)): that is xavier_uniform_'s bound (Glorot's, made to keep the "
    "spread of both the forward and the backward pass). nn.Linear, and peft for A, draw uniformly between "
    "-1/√in_features and +1/√in_features, from the fan-in alone.": _uniform(
        lambda case: math.sqrt(6 / (case.in_features + case.rank))
    ),
    "A is uniform in ±√(6/in_features): that is kaiming_uniform_'s default (a = 0, made for ReLU layers). nn.Linear "
    "calls it with a = √5, which makes the bound 1/√in_features.": _uniform(
        lambda case: math.sqrt(6 / case.in_features)
    ),
    "A spans only half the range: a draw in [0, 1) shifted by one half lies in ±0.5; it must be stretched by 2 "
    "before the bound multiplies it, to fill -1/√in_features .. +1/√in_features.": _uniform(
        lambda case: case.bound / 2
    ),
    "A is drawn from a normal distribution: its tails pass the bound. nn.Linear, and peft for A, draw uniformly "
    "between -1/√in_features and +1/√in_features (a normal with std 1/rank is peft's other option, "
    "init_lora_weights='gaussian').": _normal(lambda case: case.bound, lambda case: 1 / case.rank),
}

B_NOT_ZERO = (
    "B should start at zero. With B drawn at random (or any B not zero) the update B A is not zero, so the adapted "
    "model's output changes before any training step: it no longer starts as the pretrained model. A random and B "
    "zero still trains: B's first gradient is not zero (it sees A x), and A's follows once B has moved."
)
# The functions whose tensor holds whatever was in memory (zeros at times, old numbers at others).
_EMPTY: dict[Callable[..., Any], str] = {
    torch.empty: "torch.empty",
    torch.empty_like: "torch.empty_like",
    Tensor.new_empty: "new_empty",
    torch.empty_strided: "torch.empty_strided",
}
# What torch.empty gives, for a hint that names it: {name} is the function the answer called.
EMPTY_MEMORY = (
    "{name} does not give zeros, its tensor holds whatever was in memory (zeros at times, other numbers at others, "
    "NaN too, and not the same from one call to the next)"
)
EMPTY_B = (
    "B changes from one call to the next although every random number drawn is the same: it is memory never "
    "written, and {memory}. B must start at zero (then B A is zero and the adapted layer starts as the pretrained "
    "one): make it with zeros."
)
EMPTY_A = (
    "A changes from one call to the next although every random number drawn is the same: some of its entries are "
    "memory never written, and {memory}. Draw every entry of A from the generator."
)
# After the generator rule's refusal, when calls with the same random numbers agreed but the answer called {name}.
EMPTY_TOO = (
    " It also calls {name}: {memory}, so a B made with it is not reliably zeros, and an A made with it changes unless "
    "every entry is then drawn from the generator."
)
ROLES_SWAPPED = (
    "A and B swapped roles: here A is zero and B random. Either way B A starts at zero, but the exercise asks for "
    "the paper's and peft's convention, A random (as nn.Linear draws a weight) and B zeros, which the lesson's "
    "LoRALinear and peft's saved adapters follow."
)


def _empty_called(recorder: CallRecorder) -> str:
    """The torch.empty-like function the recorded call used ("" if none). Not one a module's constructor called
    (nn.Linear makes its weight with torch.empty, then draws it): naming torch.empty there would mislead."""
    modules = any("/torch/nn/modules/" in file.replace("\\", "/") for file, _ in recorder.entered())
    return "" if modules else recorder.called(_EMPTY)


def _empty_note(empty: str) -> str:
    """A sentence for a hint about numbers that are not what B (or A) should hold, when ``empty`` was called."""
    if not empty:
        return ""
    return f" (It calls {empty}: {EMPTY_MEMORY.format(name=empty)}.)"


def _adapter_verdict(pairs: Sequence[tuple[Tensor, Tensor]], empty: str = "") -> None:
    """Raise the hint for the first problem found in the (A, B) of every case (shapes and dtypes are right);
    ``empty``: the torch.empty-like function the answer called, if any."""
    B_zero = [not bool(B.any()) for _, B in pairs]
    if not all(B_zero):
        A_zero = [not bool(A.any()) for A, _ in pairs]
        if all(A_zero) and not any(B_zero):
            raise wrong(ROLES_SWAPPED)
        first = B_zero.index(False)
        raise wrong(f"{B_NOT_ZERO} ({_ADAPTER_CASES[first].name}){_empty_note(empty)}")
    problems = [_a_problem(A, case) for (A, _), case in zip(pairs, _ADAPTER_CASES, strict=True)]
    if not any(problems):
        return
    for hint, drawn_so in _A_MISTAKES.items():
        if all(drawn_so(A, case) for (A, _), case in zip(pairs, _ADAPTER_CASES, strict=True)):
            raise wrong(hint)
    raise wrong(next(problem for problem in problems if problem))


IGNORED_TOO = "(It also gives the same A and B whatever the generator: A is drawn from the generator it is given.)"


def _hint_without_the_generator(new_adapter: Callable[..., Any]) -> str | None:
    """The hint for the A and B of an answer that ignores its generator (all zeros, say), or None when they look
    right or cannot be had. Such an answer gives the same numbers for any generator, so it is called with None (the
    framework's generator rule, which refused it already, is then not run again)."""
    try:
        pairs = [
            _adapter_pair(call_learner(new_adapter, case.out_features, case.in_features, case.rank, None), case)
            for case in _ADAPTER_CASES
        ]
        _adapter_verdict(pairs)
    except _Wrong as problem:
        return str(problem)
    except LearnerError:  # it used the generator after all (generator.manual_seed ...): the refusal stands
        return None
    return None


def _same_numbers(a: Tensor, b: Tensor) -> bool:
    """Equal shapes, dtypes and numbers (NaN equal to NaN)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    a, b = a.detach(), b.detach()
    return bool(((a == b) | (a.isnan() & b.isnan())).all())


# How many times an answer the generator rule refused is called again, every random number the same each time.
_AGAIN = 4


def _hint_for_unrepeatable(new_adapter: Callable[..., Any], case: _AdapterCase, refusal: _Wrong, empty: str) -> _Wrong:
    """The hint for an answer that gave different results for two generators in the same state. The usual cause is
    torch's global stream; torch.empty's memory is another, which the global stream cannot explain. So the answer is
    called again a few times with no generator (every draw then comes from the global stream) and the global stream
    seeded alike each time: every random number is the same, so what still changes is memory never written. A B that
    is not zero is named as such; else the refusal stands, with a word on torch.empty where the answer called it."""
    results = []
    try:
        for _ in range(_AGAIN):
            torch.manual_seed(case.seed)  # inside run_check's fork_rng: the notebook's stream is untouched
            with CallRecorder() as recorder:
                results.append(call_learner(new_adapter, case.out_features, case.in_features, case.rank, None))
            empty = empty or _empty_called(recorder)
    except (LearnerError, _Wrong):  # it uses the generator itself (generator.manual_seed ...): nothing to compare
        results = []
    pairs = [
        tuple(result)
        for result in results
        if isinstance(result, (tuple, list)) and len(result) == 2 and all(isinstance(t, Tensor) for t in result)
    ]
    memory = EMPTY_MEMORY.format(name=empty or "torch.empty")
    if pairs and len(pairs) == len(results):
        for index, hint in ((1, EMPTY_B), (0, EMPTY_A)):
            if not all(_same_numbers(pair[index], pairs[0][index]) for pair in pairs[1:]):
                return wrong(f"{hint.format(memory=memory)} ({case.name})")
        B = pairs[0][1]
        if tuple(B.shape) == (case.out_features, case.rank) and bool(B.any()):  # NaN counts as not zero
            return wrong(f"{B_NOT_ZERO} ({case.name}){_empty_note(empty)}")
    if empty:
        return wrong(f"{refusal}{EMPTY_TOO.format(name=empty, memory=memory)}")
    return refusal


@learner_check
def check_new_adapter(new_adapter: Callable[[int, int, int, torch.Generator], tuple[Tensor, Tensor]]) -> Verdict:
    """Check ``new_adapter(out_features, in_features, rank, generator) -> (A, B)``: A (rank, in_features) uniform in
    ±1/√in_features drawn from ``generator``, B (out_features, rank) zeros, both float32. A is judged by its
    distribution, since the order of the draw is the learner's."""

    def body() -> str:
        pairs = []
        empty = ""  # a torch.empty-like function the answer called: its memory may hold anything, zeros too
        for case in _ADAPTER_CASES:
            generator = torch.Generator().manual_seed(case.seed)
            recorder = CallRecorder()
            try:
                with recorder:
                    result = call_learner(new_adapter, case.out_features, case.in_features, case.rank, generator)
            except _Wrong as refusal:
                empty = empty or _empty_called(recorder)
                if "two generators in the same state" in str(refusal):
                    raise _hint_for_unrepeatable(new_adapter, case, refusal, empty) from None
                if "seeded differently" not in str(refusal):
                    raise
                hint = _hint_without_the_generator(new_adapter)
                raise (refusal if hint is None else wrong(f"{hint} {IGNORED_TOO}")) from None
            empty = empty or _empty_called(recorder)
            pairs.append(_adapter_pair(result, case, empty))
        _adapter_verdict(pairs, empty)
        return (
            "A (rank, in_features) drawn uniformly within ±1/√in_features from the generator, B (out_features, rank) "
            "zeros: the adapted layer starts as the pretrained one, and B's first gradient is not zero."
        )

    return run_check("a new adapter's A and B", body)


# ---------------------------------------------------------------------------------------------
# Exercises 2 and 3: what the two numeric checks share
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _LoRACase:
    x: Tensor  # (..., in); the merge ignores it
    W: Tensor  # (out, in)
    A: Tensor  # (r, in)
    B: Tensor  # (out, r), not zero: a trained adapter
    alpha: float
    merging: bool = False  # named without x, which the merge is not given

    @property
    def name(self) -> str:
        (out, d_in), r = self.W.shape, self.A.size(0)
        sizes = f"W ({out}, {d_in}), A ({r}, {d_in}), B ({out}, {r}), alpha {self.alpha:g}"
        return sizes if self.merging else f"x {tuple(self.x.shape)}, {sizes}"


def _lora_case(x_shape: tuple[int, ...], out: int, d_in: int, r: int, alpha: float, seed: int) -> _LoRACase:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(*x_shape, d_in, generator=generator)
    W = torch.randn(out, d_in, generator=generator) / math.sqrt(d_in)
    A = (torch.rand(r, d_in, generator=generator) * 2 - 1) / math.sqrt(d_in)
    B = torch.randn(out, r, generator=generator) * 0.5
    return _LoRACase(x, W, A, B, alpha)


def _lora_cases(merging: bool = False) -> list[_LoRACase]:
    """A square case first (out = in: a transposed W or update still computes there), then two others. Each case's
    scale α / r differs from 1, from r / α, from α, from α / in and from α / out. ``merging``: the merge's cases,
    named without x."""
    cases = [
        _lora_case((4,), 5, 5, 3, 12.0, seed=173),  # scale 4
        _lora_case((2, 3), 5, 4, 2, 6.0, seed=174),  # scale 3
        _lora_case((2, 7), 6, 8, 4, 3.0, seed=175),  # scale 0.75
    ]
    return [replace(case, merging=merging) for case in cases]


def _scales(case: _LoRACase) -> dict[str, float | list[float]]:
    """The scale in place of α / r for each scale mistake (hint's key -> the wrong scales)."""
    r, d_in, out, alpha = case.A.size(0), case.A.size(1), case.B.size(0), case.alpha
    return {
        "missing": 1.0,
        "inverted": r / alpha,
        "alpha": alpha,
        "axis": [alpha / d_in, alpha / out],
        "rslora": alpha / math.sqrt(r),
    }


SCALE_HINTS = {
    "missing": "the scale α / r is missing: the update is multiplied by α / r (r is A's first size), which keeps "
    "its size about the same when the rank changes.",
    "inverted": "the scale is upside down, r / α: the update is multiplied by α / r.",
    "alpha": "the update is multiplied by α alone: the scale is α divided by the rank r (A's first size).",
    "axis": "r is read from the wrong size: the rank is A's first size (and B's second); in_features and "
    "out_features are the layer's sizes.",
    "rslora": "the scale is α / √r, rsLoRA's (Kalajdzievski, 2023): this exercise uses the paper's and peft's default "
    "α / r.",
}


def _judge_cases(
    cases: Sequence[_LoRACase],
    run: Callable[[_LoRACase], Tensor],
    reference: Callable[[_LoRACase], Tensor],
    mistakes: Callable[[_LoRACase], Mistakes],
    fallback: str,
    shape: Callable[[_LoRACase], tuple[tuple[int, ...], str, str]],
    shape_hint: Callable[[Tensor, _LoRACase], str | None] = lambda answer, case: None,
    shapes: str = "",
) -> None:
    """Run every case, then raise the hint of the mistake that the answers share, or ``fallback`` at the first wrong
    case. A case where the learner's code raises, or gives a shape of its own, ends the run: if the cases before it
    name a mistake (one that would raise on a non-square case, say), that mistake is named; else a product whose
    shapes did not fit is answered with ``shapes`` (each factor's and product's shape). A result that is not a tensor
    is refused."""
    answers: list[Tensor] = []
    tables: list[Mistakes] = []

    def named_so_far(problem: str) -> _Wrong | None:
        named = named_mistake(answers, tables) if answers else None
        seen = "; ".join(case.name for case in cases[: len(answers)])
        return None if named is None else wrong(f"{named} (It shows on {seen}; then {problem}.)")

    for case in cases:
        try:
            result = run(case)
        except LearnerError as error:
            named = named_so_far(f"your code raised {error} on {case.name}")
            if named is not None:
                raise named from None
            if shapes and _shapes_did_not_fit(error):
                raise wrong(f"your code raised {error} on {case.name}. {shapes}") from None
            raise
        try:
            answer = _one_tensor(result, case)
            expected, name, letters = shape(case)
            if tuple(answer.shape) != expected:
                hint = shape_hint(answer, case)
                if hint:
                    raise wrong(f"{hint} ({case.name})")
                expect_shape(answer, expected, f"{name} ({case.name})", letters)
        except _Wrong as problem:
            raise (named_so_far(str(problem)) or problem) from None
        answers.append(answer)
        tables.append(mistakes(case))
    right = [close(answer, reference(case)) for answer, case in zip(answers, cases, strict=True)]
    if all(right):
        return
    named = named_mistake(answers, tables, uncomputable_rules_out=True)
    raise named or wrong(f"{fallback} ({cases[right.index(False)].name})")


def _shapes_did_not_fit(error: LearnerError) -> bool:
    """Whether the learner's error is a product or a sum whose shapes did not fit."""
    marks = (
        "cannot be multiplied",
        "must match the size of tensor",
        "size mismatch",
        "inconsistent tensor size",
        "batch1 tensor",
        "batch2 tensor",
        "does not broadcast",
        "Expected size for first two dimensions",
    )
    return isinstance(error.error, RuntimeError) and any(mark in str(error.error) for mark in marks)


def _one_tensor(result: Any, case: _LoRACase) -> Tensor:
    """The learner's result as a float64 tensor; anything but a tensor (a list of its numbers, a number) refused."""
    if not isinstance(result, Tensor):
        got = f"a {type(result).__name__}"
        if isinstance(result, (tuple, list)):
            got += f" of {len(result)} items"
        raise wrong(
            f"the result should be one tensor (a torch.Tensor), got {got} ({case.name}): return the tensor the "
            "torch operations give, as it is. A Python list or number (.tolist(), .item()) keeps the numbers but "
            "drops the dtype, the device and the gradient, which the layer's callers (training A and B, merging) "
            "need."
        )
    return as_tensor(result, "the result")


# ---------------------------------------------------------------------------------------------
# Exercise 2: the adapted layer's output
# ---------------------------------------------------------------------------------------------
FORWARD_FALLBACK = (
    "the output differs from the adapted layer's: the frozen layer's output (x times W transposed, as nn.Linear "
    "computes it) plus the update, x through A (down to r numbers) and then through B (up to out_features), times "
    "the scale α / r, r being A's first size. Shape (..., out)."
)


FORWARD_SHAPES = (
    "The shapes: x is (..., in), W is (out, in), A is (r, in), B is (out, r). A product meets the last size of its "
    "left factor with the first size of its right one: x Wᵀ is (..., out); x Aᵀ is (..., r), then times Bᵀ gives "
    "(..., out), the output's shape. Check which factors are transposed, and their order."
)


def _forward_mistakes(case: _LoRACase) -> Mistakes:
    x, W, A, B, alpha = case.x, case.W, case.A, case.B, case.alpha
    base, low = x @ W.T, (x @ A.T) @ B.T
    scale = alpha / A.size(0)
    scales = _scales(case)
    table: dict[str, Any] = {
        SCALE_HINTS[key]: [base + s * low for s in (value if isinstance(value, list) else [value])]
        for key, value in scales.items()
    }
    table |= {
        "only the update came back: the adapted layer's output is the frozen layer's own output, x Wᵀ, PLUS the "
        "update. LoRA adds to the pretrained layer; it does not replace it.": scale * low,
        "the update is missing: this is the frozen layer alone. Add the update through A and B, times α / r (B is "
        "not zero here: a trained adapter).": base,
        "the scale multiplies the frozen layer's output too: α / r scales the update alone.": scale * (base + low),
        "the update is subtracted: the adapted layer ADDS the scaled update to the frozen layer's output.": base
        - scale * low,
        "W is not transposed: nn.Linear stores W as (out_features, in_features), so x (..., in) meets W transposed "
        "(in a square case both ways compute; only one is the layer).": lambda: x @ W + scale * low,
        "the update's factors are in the wrong order or not transposed: x goes through A first (A is (r, in), taken "
        "transposed, down to r numbers), then through B (B is (out, r), taken transposed, up to out_features).": (
            lambda: [base + scale * (x @ (B @ A)), base + scale * ((x @ B) @ A)]
        ),
    }
    return table


@learner_check
def check_lora_forward(lora_forward: Callable[[Tensor, Tensor, Tensor, Tensor, float], Tensor]) -> Verdict:
    """Check ``lora_forward(x, W, A, B, alpha)``: x (..., in), W (out, in), A (r, in), B (out, r) -> (..., out), the
    frozen layer's output x Wᵀ plus (α / r) · (x Aᵀ) Bᵀ."""

    def body() -> str:
        _judge_cases(
            _lora_cases(),
            lambda c: call_learner(lora_forward, c.x.clone(), c.W.clone(), c.A.clone(), c.B.clone(), c.alpha),
            lambda c: reference_lora_forward(c.x, c.W, c.A, c.B, c.alpha),
            _forward_mistakes,
            FORWARD_FALLBACK,
            lambda c: ((*c.x.shape[:-1], c.W.size(0)), "the output", "(..., out)"),
            shapes=FORWARD_SHAPES,
        )
        return (
            "the frozen layer's output plus the update, x through A down to r numbers and through B back up, scaled "
            "by α / r. Through that bottleneck the update costs r · (in + out) numbers a token, not the in · out of "
            "the product B A."
        )

    return run_check("the adapted layer's output", body)


# ---------------------------------------------------------------------------------------------
# Exercise 3: the merged weight
# ---------------------------------------------------------------------------------------------
MERGE_FALLBACK = (
    "the merged weight differs: W plus the update the adapter stands for, the product of B (out, r) and A (r, in), an "
    "(out, in) matrix like W, times the scale α / r, r being A's first size. Return a new tensor; W stays as it was."
)
MERGE_IN_PLACE = (
    "Merging here makes a NEW weight: LoRALinear.merge may write into W because the layer owns it, but this function "
    "is handed W by a caller who still needs it (to unmerge, to compare with the base model, or to merge another "
    "adapter)."
)


MERGE_SHAPES = (
    "The shapes: W is (out, in), A is (r, in), B is (out, r). A product meets the last size of its left factor "
    "with the first size of its right one, and what is added to W must have W's shape: B A is (out, in), the shape "
    "of W ((out, r) times (r, in)), where A B and Bᵀ Aᵀ are (r, r)."
)


def _merge_mistakes(case: _LoRACase) -> Mistakes:
    W, A, B, alpha = case.W, case.A, case.B, case.alpha
    update = B @ A
    scale = alpha / A.size(0)
    table: dict[str, Any] = {
        "the update is added twice: merging adds (α / r) · B A to W once (merged twice, a layer's output would "
        "change by twice the adapter's).": W + 2 * scale * update,
    }
    table |= {
        SCALE_HINTS[key]: [W + s * update for s in (value if isinstance(value, list) else [value])]
        for key, value in _scales(case).items()
    }
    table |= {
        "the update is subtracted: that is unmerging. Merging ADDS (α / r) · B A to W.": W - scale * update,
        "only the update came back: the merged weight is W PLUS the scaled update (W is the pretrained layer the "
        "adapter changes).": scale * update,
        "this is W unchanged: add the scaled update B A (B is not zero here: a trained adapter).": W,
        "the scale multiplies W too: α / r scales the update alone.": scale * (W + update),
        "the update is transposed: B (out, r) times A (r, in) is already (out, in), W's shape (in a square case its "
        "transpose fits too; only one is the adapter's).": lambda: W + scale * update.T,
    }
    return table


def _merge_shape_hint(answer: Tensor, case: _LoRACase) -> str | None:
    r = case.A.size(0)
    if tuple(answer.shape) == (r, r):
        return (
            f"the result is (r, r) = ({r}, {r}): A times B multiplies the wrong way round. The update is B times A, "
            "(out, r)(r, in) = (out, in), W's shape"
        )
    return None


@learner_check
def check_merge_weight(merge_weight: Callable[[Tensor, Tensor, Tensor, float], Tensor]) -> Verdict:
    """Check ``merge_weight(W, A, B, alpha)``: a new (out, in) tensor W + (α / r) · B A, W itself unchanged."""

    def run(case: _LoRACase) -> Tensor:
        try:
            return call_learner(merge_weight, case.W.clone(), case.A.clone(), case.B.clone(), case.alpha)
        except _Wrong as refused:
            if "changed its input" in str(refused) and "in place" in str(refused):
                raise wrong(f"{refused} {MERGE_IN_PLACE}") from None
            raise

    def body() -> str:
        _judge_cases(
            _lora_cases(merging=True),
            run,
            lambda c: reference_merge_weight(c.W, c.A, c.B, c.alpha),
            _merge_mistakes,
            MERGE_FALLBACK,
            lambda c: (tuple(c.W.shape), "the merged weight", "(out, in)"),
            _merge_shape_hint,
            shapes=MERGE_SHAPES,
        )
        return (
            "a new weight W + (α / r) · B A, W left as it was: the merged layer computes what the adapted one did, "
            "at a plain layer's speed."
        )

    return run_check("the merged weight", body)


# ---------------------------------------------------------------------------------------------
# Exercise 4: the parameters LoRA trains
# ---------------------------------------------------------------------------------------------
# SmolLM2-135M's q and v projections in its 30 layers: E = 576, 9 query heads and 3 key/value heads of 64 (grouped-
# query attention), so q_proj.weight is (576, 576) and v_proj.weight (192, 576). Then two small cases. In each, every
# mistake below gives a number of its own (tests/course/test_exercises_lesson_17.py holds them apart).
_COUNT_CASES: list[tuple[str, list[tuple[int, int]], int]] = [
    ("SmolLM2-135M's q_proj and v_proj in its 30 layers, rank 8", [(576, 576), (192, 576)] * 30, 8),
    ("one layer of shape (6, 5), rank 3", [(6, 5)], 3),
    ("layers of shapes (3, 5), (7, 2), (4, 4), rank 4", [(3, 5), (7, 2), (4, 4)], 4),
]


def _count_mistakes(shapes: list[tuple[int, int]], rank: int) -> dict[str, list[int]]:
    """hint -> the counts it gives (one or several ways) on these shapes and rank."""
    r = rank
    table = {
        "that counts the whole weight matrices, out · in each: training those is a full fine-tune of the layers. "
        "LoRA freezes W and trains two thin factors instead, A (r, in) and B (out, r).": [
            sum(o * i for o, i in shapes)
        ],
        "the base weights are counted too: LoRA freezes W (requires_grad False); the optimizer trains A and B alone.": [
            sum(o * i + r * (o + i) for o, i in shapes)
        ],
        "that counts A alone (r · in per layer): B (out, r) is trained too.": [sum(r * i for _, i in shapes)],
        "that counts B alone (r · out per layer): A (r, in) is trained too.": [sum(r * o for o, _ in shapes)],
        "the rank is missing: A (r, in) holds r numbers for each input, B (out, r) r for each output.": [
            sum(o + i for o, i in shapes)
        ],
        "that is r · out · in per layer, the full matrix r times over: A (r, in) and B (out, r) hold r · in and "
        "r · out numbers, added, not multiplied.": [sum(r * o * i for o, i in shapes)],
        "the rank is squared: A (r, in) holds r · in numbers and B (out, r) r · out, one r each (there is no r × r "
        "matrix in between).": [sum(r * r * (o + i) for o, i in shapes), sum(r * (o + i) + r * r for o, i in shapes)],
        "the biases are counted: LoRA adds no bias, and the layer's own stays frozen.": [
            sum(r * (o + i) + o for o, i in shapes)
        ],
    }
    if len(shapes) > 1:
        (o0, i0), (o1, i1) = shapes[0], shapes[-1]
        table["only one layer is counted: add the adapter's numbers of every layer in shapes."] = [
            r * (o0 + i0),
            r * (o1 + i1),
        ]
    return table


def _as_count(answer: object, case: str) -> int:
    """The learner's count, refused unless it is a plain int (``as_int`` names what came instead)."""
    why = (
        "a number of parameters is a whole number, as count_trainable and peft's print_trainable_parameters give it. "
        "Keep the arithmetic in ints (sums and products of the sizes), or turn the result into a Python int before "
        "returning it."
    )
    if isinstance(answer, float) and answer.is_integer():
        why += (
            " A float is refused even when it is whole: `/` makes one even where it divides exactly, and a float "
            "count stops being exact past 2**53."
        )
    return as_int(answer, "a number of parameters", f"for {case}", why)


def _same_shapes(given: list, kept: list[tuple[int, int]]) -> bool:
    """Whether the list the learner was given still holds the shapes it was given, in order."""
    return len(given) == len(kept) and all(
        type(shape) is tuple and all(type(size) is int for size in shape) and shape == kept_shape
        for shape, kept_shape in zip(given, kept, strict=True)
    )


def _count_in_place(name: str, given: list, kept: list[tuple[int, int]], case: str) -> _Wrong:
    """The hint for an answer (the function ``name``) that changed the list of shapes it was given."""
    if len(given) != len(kept):
        what = f"it held {len(kept)} shapes and now holds {len(given)}: pop, remove, clear or del take them out"
    else:
        what = "its shapes are now in another order, or replaced: sort, reverse or an assignment changes it"
    return wrong(
        f"`{name}` changed the list `shapes` it was given, for {case} ({what}). The caller's list must "
        "stay as it was: the caller still needs it (to build the adapters on those layers, say). Read the shapes "
        "without changing the list."
    )


COUNT_FALLBACK = (
    "LoRA trains, for each adapted layer, its two factors A (r, in) and B (out, r), and nothing else; add their "
    "numbers over every layer in shapes (each shape is (out_features, in_features), as layer.weight.shape gives it)."
)


@learner_check(returns="an int (a number of parameters)")
def check_lora_parameter_count(lora_parameter_count: Callable[[list[tuple[int, int]], int], int]) -> Verdict:
    """Check ``lora_parameter_count(shapes, rank) -> int``: shapes are (out_features, in_features) of the adapted
    layers' weights; the count is the sum of r · (out + in), A's and B's numbers."""

    def body() -> str:
        answers = []
        for name, shapes, rank in _COUNT_CASES:
            given = list(shapes)  # the learner's own copy each call; _COUNT_CASES keeps the shapes as they were
            answer = call_learner(lora_parameter_count, given, rank)
            if not _same_shapes(given, shapes):
                function = getattr(lora_parameter_count, "__name__", "lora_parameter_count")
                raise _count_in_place(function, given, shapes, name)
            answers.append(_as_count(answer, name))
        expected = [reference_lora_parameter_count(shapes, rank) for _, shapes, rank in _COUNT_CASES]
        if answers == expected:
            smol = expected[0]
            return (
                f"r · (out + in) for each adapted layer: {smol:,} numbers train on SmolLM2's q and v at rank 8, "
                f"{smol / 134_515_008:.2%} of its 134,515,008."
            )
        tables = [_count_mistakes(shapes, rank) for _, shapes, rank in _COUNT_CASES]
        for hint in dict.fromkeys(hint for table in tables for hint in table):
            listed = [(answer, table[hint]) for answer, table in zip(answers, tables, strict=True) if hint in table]
            if all(answer in ways for answer, ways in listed):
                raise wrong(hint)
        first = next(i for i, (a, e) in enumerate(zip(answers, expected, strict=True)) if a != e)
        raise wrong(
            f"{COUNT_FALLBACK} For {_COUNT_CASES[first][0]}: expected {expected[first]:,}, got {answers[first]:,}."
        )

    return run_check("the parameters LoRA trains", body)
