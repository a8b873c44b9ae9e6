"""Progress of a long loop in a notebook, as a few plain lines of text.

Why plain lines. A live bar (tqdm) in a notebook is either an ipywidget, which leaves widget state in the saved
notebook and sends thousands of updates that a test runner reading the notebook must keep, or a stream of
carriage returns on stderr. A run of a minute needs neither: a line at every tenth of the way (``every=0.1``), each
with the seconds since the start, says that it is alive and how far it has got. The lines are the same on every
machine except for the seconds, which ``tests/nbval_sanitize.cfg`` maps to a stable form (``N s elapsed``), so a
lesson that prints them still passes nbval's comparison of its outputs.

``ProgressLines(total, label)``, then ``.update(done, note="loss 1.23")`` as the loop goes (``done`` counts steps,
or seconds of a time budget, up to ``total``)::

    training: 10% (200/2000 steps), loss 3.214, 4 s elapsed
"""

from __future__ import annotations

import math
import sys
import time
from typing import TextIO


def in_notebook() -> bool:
    """True inside a Jupyter kernel (its streams are ipykernel's), where a terminal's bar does not belong."""
    return type(sys.stdout).__module__.startswith("ipykernel")


class ProgressLines:
    """One line each time a loop passes another ``every`` of its ``total`` (10%, 20%, ... 100%), to ``stream``."""

    def __init__(
        self,
        total: float,
        label: str,
        unit: str = "steps",
        every: float = 0.1,
        stream: TextIO | None = None,
        done: float = 0,
    ) -> None:
        if not total > 0:
            raise ValueError(f"total must be positive (the loop's steps or seconds), got {total}")
        if not 0 < every <= 1:
            raise ValueError(f"every must be a fraction in (0, 1], e.g. 0.1 for a line every 10%, got {every}")
        self.total, self.label, self.unit, self.every = total, label, unit, every
        self.stream = stream
        self.start = time.perf_counter()
        self.shown = math.floor(done / total / every + 1e-9)  # a resumed loop does not repeat the lines it had

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def update(self, done: float, note: str = "") -> bool:
        """Print a line if ``done`` (of ``total``) has passed the next tenth (or ``every``); True if it printed."""
        reached = math.floor(min(done, self.total) / self.total / self.every + 1e-9)
        if reached <= self.shown:
            return False
        self.shown = reached
        share = min(100, round(reached * self.every * 100))
        amount = f"{done:.0f}/{self.total:.0f} {self.unit}"
        extra = f", {note}" if note else ""
        print(
            f"{self.label}: {share}% ({amount}){extra}, {self.elapsed():.0f} s elapsed",
            file=self.stream or sys.stdout,
            flush=True,
        )
        return True
