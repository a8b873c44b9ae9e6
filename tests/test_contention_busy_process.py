"""benchmarks/contention.py's busy loop stops with the script, however the script is stopped (not its timings:
the benchmark itself is run by hand, never by the suite)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# The benchmark's own pieces, as main() sets them up: SIGTERM leaves through SystemExit, the loop runs in a `with`.
SCRIPT = f"""
import importlib.util, signal, sys, time
spec = importlib.util.spec_from_file_location("contention", {str(ROOT / "benchmarks" / "contention.py")!r})
contention = importlib.util.module_from_spec(spec)
spec.loader.exec_module(contention)
signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal, even if this test's runner ignores it
contention.exit_on_sigterm()
with contention.BusyProcess(settle=0.2) as busy:
    print(busy.process.pid, flush=True)
    time.sleep(60)
"""


def running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie nobody reaped yet has stopped running)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads Linux's /proc")
@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL], ids=lambda s: s.name)
def test_the_busy_loop_dies_with_the_script(stop):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    script = subprocess.Popen([sys.executable, "-c", SCRIPT], stdout=subprocess.PIPE, text=True, env=env)
    busy = None
    try:
        busy = int(script.stdout.readline())
        assert running(busy)  # the loop is up: the check below can fail
        script.send_signal(stop)
        script.wait(timeout=10)
        deadline = time.monotonic() + 5  # SIGKILL skips every `finally`: the loop notices within 0.2 s
        while running(busy) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not running(busy), f"the busy loop {busy} outlived the script stopped by {stop.name}"
    finally:
        script.kill()
        script.wait()
        if busy is not None and running(busy):  # the test failed: leave no spinning core behind
            os.kill(busy, signal.SIGKILL)
