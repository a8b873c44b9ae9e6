"""Graded cells whose checks run outside the kernel: a notebook client that grades while the kernel answers.

Both graders run their notebooks with it: ``check``'s supervisor (:mod:`course.grading.supervisor`) and nbgrader's
autograde (:class:`course.grading.nbgrader_kernel.SandboxedExecute`). A client built on :class:`RemoteChecks` is
told, per cell index, the course's checks that cell answers (``remote_checks``: (check's module, check's name,
learner's function), in order). While such a cell runs ``answer_the_checker("function")`` in the kernel, once per
check and in the same order (:mod:`course.grading.learner_side`), this process runs each check in a thread
(:func:`course.grading.remote.grade`), calling the learner's function over that cell's Jupyter ``input`` messages
(:class:`KernelChannel`), and keeps its verdict in ``verdicts[cell index]``: one entry (function, status, message)
per check that got an answer, in order. Nothing the kernel displays is read as a verdict.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import queue
import threading
from typing import Any

from nbclient import NotebookClient
from nbclient.util import run_sync

from course.grading import remote, wire

__all__ = ["GRADING_WAIT_S", "KernelChannel", "RemoteChecks", "verdict_text"]

#: How long a cell's checks may go on once the cell has ended (a check still waiting is then told the channel broke).
GRADING_WAIT_S = 30


def verdict_text(entry: dict[str, str]) -> str:
    """One entry's line: the verdict's as the check prints it in the lesson (``[PASS] linear projection: ...``,
    ``[NOT YET] ...``), or ``[ERROR] function: message`` for an exercise that could not be graded."""
    if entry.get("text"):
        return entry["text"]
    return f"[{entry.get('status', 'error').upper()}] {entry.get('function', '?')}: {entry.get('message', '')}"


class RemoteChecks(NotebookClient):
    """A ``NotebookClient`` whose cells in ``remote_checks`` are graded here while the kernel answers (see above)."""

    remote_checks: dict[int, list[tuple[str, str, str]]]  # cell index -> (module, check, function) per check
    verdicts: dict[int, list[dict[str, str]]]  # cell index -> one entry per check graded, in order

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.remote_checks, self.verdicts = {}, {}

    def execute_cell(self, *args: Any, **kwargs: Any) -> Any:
        # NotebookClient's execute_cell runs NotebookClient.async_execute_cell, not a subclass's: nbconvert's
        # ExecutePreprocessor (nbgrader's Execute) runs every cell through it.
        return run_sync(self.async_execute_cell)(*args, **kwargs)

    async def async_execute_cell(self, cell, cell_index, execution_count=None, store_history=True):
        checks = self.remote_checks.get(cell_index)
        if not checks:
            return await super().async_execute_cell(cell, cell_index, execution_count, store_history)
        assert self.kc is not None, "cells run only once the kernel's client is started"
        channel = KernelChannel(self.kc)
        self.verdicts[cell_index] = []
        grading = asyncio.ensure_future(self._grade_cell(channel, cell_index, checks))
        self.kc.allow_stdin = True  # this cell's input() requests are the kernel's answers
        try:
            return await super().async_execute_cell(cell, cell_index, execution_count, store_history)
        finally:
            self.kc.allow_stdin = False
            channel.closed = True
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(grading, GRADING_WAIT_S)

    async def _grade_cell(self, channel: KernelChannel, cell_index: int, checks: list[tuple[str, str, str]]) -> None:
        for module, check, function in checks:
            entry = await self._grade(channel, module, check, function)
            if entry is None:  # the cell ended before the kernel answered this check
                return
            self.verdicts[cell_index].append(entry)

    async def _grade(self, channel: KernelChannel, module: str, check: str, function: str) -> dict[str, str] | None:
        """One check's entry, graded over ``channel``; None when the kernel never said hello (the cell ended)."""
        loop = asyncio.get_running_loop()
        channel.loop = loop
        try:
            hello = wire.unframe(await channel.next_prompt())
        except remote.ChannelBroken:
            return None
        except wire.Unreadable as problem:
            entry = {"function": function, "status": "error", "message": f"not graded: {problem}"}
        else:
            entry = await self._run_check(loop, module, check, function, channel, hello)
        if not channel.closed:  # the kernel waits for the next call: tell it the check is done
            assert self.kc is not None  # async_execute_cell started this grading with a client
            self.kc.input(wire.frame({"op": "done", "line": verdict_text(entry)}, trusted=True))
        return entry

    @staticmethod
    async def _run_check(loop, module: str, check: str, function: str, channel: KernelChannel, hello: Any) -> dict:
        finished = loop.create_future()

        def in_thread() -> None:  # the check is synchronous; its calls of the kernel wait on this loop
            try:
                graded = getattr(importlib.import_module(module), check)
                result = remote.grade(graded, function, channel, hello)
            except BaseException as error:  # the course's bug: this exercise's row says so (never a hang)
                result = {"function": function, "status": "error", "message": f"the check failed: {error!r}"}
            loop.call_soon_threadsafe(finished.set_result, result)

        threading.Thread(target=in_thread, daemon=True).start()
        return await finished


class KernelChannel:
    """The check's calls of the learner's code, over one graded cell's ``input`` requests: the kernel's answer
    is the prompt of its next ``input()``, the check's next request the reply to it."""

    def __init__(self, kc) -> None:
        self.kc, self.closed = kc, False
        self.loop: asyncio.AbstractEventLoop | None = None  # the grading loop, set by _grade before the check runs

    async def next_prompt(self) -> str:
        """The prompt of the kernel's next input request (ChannelBroken once the cell has finished)."""
        while not self.closed:
            try:
                msg = await self.kc.get_stdin_msg(timeout=0.2)
            except queue.Empty:
                continue
            if msg.get("msg_type") == "input_request":
                return msg.get("content", {}).get("prompt", "")
        raise remote.ChannelBroken("the kernel stopped answering the check (its cell ended, or timed out)")

    async def _exchange(self, text: str) -> str:
        if self.closed:
            raise remote.ChannelBroken("the kernel stopped answering the check (its cell ended, or timed out)")
        self.kc.input(text)
        return await self.next_prompt()

    def ask(self, request: dict):
        """Send ``request`` (from the check's thread) and wait for the kernel's reply, read as data only."""
        assert self.loop is not None, "ask() runs in the check's thread, which _grade starts after setting the loop"
        future = asyncio.run_coroutine_threadsafe(self._exchange(wire.frame(request, trusted=True)), self.loop)
        try:
            prompt = future.result()
        except remote.ChannelBroken:
            raise
        except Exception as error:
            raise remote.ChannelBroken(f"the kernel could not be asked ({type(error).__name__})") from None
        try:
            return wire.unframe(prompt)
        except wire.Unreadable as problem:
            raise remote.ChannelBroken(f"the answer from the kernel cannot be graded: {problem}") from None
