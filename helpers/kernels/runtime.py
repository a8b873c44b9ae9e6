"""Which path the kernels take: compiled for a CUDA GPU, or run by Triton's interpreter on a CPU.

Triton turns a ``@triton.jit`` function into GPU code. Its interpreter, switched on by the environment variable
``TRITON_INTERPRET=1``, instead runs the same function in Python, one program after another, with numpy arrays for
the blocks: every load, store, ``tl.dot`` and mask does what the GPU would do, only slowly. So the kernels are
written once and proven on any Linux machine.

When the switch is read: ``@triton.jit`` reads ``TRITON_INTERPRET`` as it *decorates* a function, and makes it an
interpreted or a compiled function for good. Triton's own library functions (``tl.zeros``, ``tl.max``, …) are
decorated as ``import triton`` runs, so the switch must be on before Triton's first import, or a kernel interpreted
later still calls compiled library functions and fails ("Cannot call @triton.jit'd outside of the scope of a
kernel"). So this module decides the path before it imports Triton, and every kernel module imports it first:

- ``TRITON_INTERPRET`` set by the user: honoured (``1`` interprets, also beside a GPU, which helps debugging; ``0``
  on a machine without CUDA is refused: there is nothing to compile for);
- else a CUDA device present: compiled;
- else: this module sets ``TRITON_INTERPRET=1``, then imports Triton, and interprets.

Where something imported Triton before us without the switch, on a machine without CUDA, the kernels cannot run:
the import of a kernel module is refused with a message that says so (start a fresh Python, or import
``helpers.kernels.runtime`` before anything imports Triton), rather than failing deep inside the first kernel.
"""

from __future__ import annotations

import os

import torch

from helpers.kernels import TRITON_MISSING, triton_available

__all__ = ["DEVICE", "INTERPRETED", "describe_path"]

_VARIABLE = "TRITON_INTERPRET"


def _choose_interpreted() -> bool:
    """Decide the path (see the module's docstring); sets TRITON_INTERPRET=1 where the interpreter is the only one."""
    said = os.environ.get(_VARIABLE)
    if said is not None and said.strip() != "":
        interpreted = said.strip().lower() in ("1", "true", "on", "yes")
        if not interpreted and not torch.cuda.is_available():
            raise RuntimeError(
                f"{_VARIABLE}={said!r} asks for compiled kernels, but torch sees no CUDA device: set {_VARIABLE}=1 "
                "(or leave it unset) to run them in Triton's interpreter on the CPU"
            )
        return interpreted
    if torch.cuda.is_available():
        return False
    os.environ[_VARIABLE] = "1"  # before `import triton` below: the interpreter is the only path on this machine
    return True


if not triton_available():
    raise ImportError(TRITON_MISSING)

INTERPRETED: bool = _choose_interpreted()
"""True: the kernels run in Triton's interpreter (CPU tensors); False: compiled for the CUDA device."""

import triton  # noqa: E402  (after the decision above, which may set TRITON_INTERPRET)


def _library_is_interpreted() -> bool:
    """True when Triton's own library functions were decorated for the interpreter (tl.zeros as a witness)."""
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(triton.language.standard.zeros, InterpretedFunction)


if INTERPRETED and not (triton.knobs.runtime.interpret and _library_is_interpreted()):
    raise RuntimeError(
        "Triton was imported before helpers.kernels without TRITON_INTERPRET=1, on a machine without CUDA: its "
        "library functions were made for a GPU compiler, so no kernel can run. Start a fresh Python (or kernel) "
        "with TRITON_INTERPRET=1 set, or import helpers.kernels.runtime before anything imports triton."
    )

DEVICE: torch.device = torch.device("cpu") if INTERPRETED else torch.device("cuda")
"""Where the kernels' tensors live on this path: the CPU for the interpreter, the GPU for compiled kernels."""


def describe_path() -> str:
    """One line a lesson can print: which path the kernels take here, and why."""
    if INTERPRETED:
        return f"interpreted: Triton's CPU interpreter runs each program in Python ({_VARIABLE}=1); correct, not fast"
    return f"compiled: Triton compiles the kernels for {torch.cuda.get_device_name()}"
