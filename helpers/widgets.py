"""Interactive explorers for the lessons (ipywidgets).

Each widget is a thin shell around a plain function in this module that draws or returns what
the widget shows; unit tests call those functions directly, and every lesson draws a static
figure with the default settings before showing the widget (GitHub does not run widgets).
"""

from __future__ import annotations
