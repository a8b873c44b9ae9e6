"""`make lab` serves the lessons: JupyterLab starts on the requested port with notebooks/ as its root."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_make_lab_serves_the_notebooks_folder():
    port, token = _free_port(), "course-test-token"
    env = {**os.environ, "JUPYTER_TOKEN": token}
    server = subprocess.Popen(
        ["make", "--no-print-directory", "lab", f"PORT={port}"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        listing, deadline = None, time.monotonic() + 60
        while listing is None and time.monotonic() < deadline:
            assert server.poll() is None, f"make lab exited early: {server.stderr.read().decode()[-2000:]}"
            try:
                url = f"http://127.0.0.1:{port}/api/contents?token={token}"
                with urllib.request.urlopen(url, timeout=2) as response:
                    listing = json.load(response)
            except OSError:
                time.sleep(0.5)
        assert listing is not None, "JupyterLab did not answer within 60 s"
        served = {item["name"] for item in listing["content"]}
        lessons = {p.name for p in (ROOT / "notebooks").glob("*.ipynb")}
        assert lessons and lessons <= served, (
            f"expected the lessons {sorted(lessons)} at the root, got {sorted(served)}"
        )
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
