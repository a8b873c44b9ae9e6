"""What the browser tests share: Debian's chromium driven by Playwright, headless and offline, or a skip that says why.

Import it from a test file in this folder (``from chromium import …``) and set ``pytestmark = skip_without_browser``.
"""

from __future__ import annotations

import shutil
import warnings

import pytest

CHROMIUM = shutil.which("chromium")
# Headless, and nothing that phones home: the machines that run the tests have no network.
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]

try:
    from playwright.sync_api import sync_playwright
except ImportError:  # the test extra is not installed
    sync_playwright = None

MISSING = (
    "no `chromium` on PATH (install it: apt-get install -y chromium)"
    if CHROMIUM is None
    else "Playwright for Python is not installed (pip install -e '.[test]')"
    if sync_playwright is None
    else None
)
if MISSING:
    warnings.warn(f"BROWSER TESTS SKIPPED: {MISSING}", stacklevel=1)
skip_without_browser = pytest.mark.skipif(MISSING is not None, reason=f"BROWSER TESTS SKIPPED: {MISSING}")
