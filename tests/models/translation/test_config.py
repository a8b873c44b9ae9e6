"""helpers.models.translation.config: the lesson's configuration is the defaults and the benchmarked one."""

from __future__ import annotations

from helpers.models.translation import (
    TranslationConfig,
)


def test_the_lesson_config_is_the_defaults_and_holds_the_measured_settings():
    from helpers.models.translation.config import LESSON_CONFIG

    assert TranslationConfig() == LESSON_CONFIG
    # The settings benchmarks/RESULTS.md measured: change one only together with a new measurement.
    measured = dict(d_model=64, heads=4, encoder_layers=1, decoder_layers=2, feedforward=128, dropout=0.0)
    measured |= dict(batch_tokens=600, lr=8e-3, warmup_steps=150, label_smoothing=0.1, eval_every=0, steps=2000)
    assert {name: getattr(LESSON_CONFIG, name) for name in measured} == measured


def test_lesson_notebook_trains_the_benchmarked_configuration():
    """The benchmarks measure LESSON_CONFIG for its steps: the lesson must build from it, not from a hand copy."""
    import json
    from pathlib import Path

    notebook = Path(__file__).resolve().parents[3] / "notebooks" / "06_translation.ipynb"
    source = "\n".join("".join(cell["source"]) for cell in json.loads(notebook.read_text())["cells"])
    assert "config = replace(LESSON_CONFIG, seed=0)" in source
    assert "TranslationConfig(" not in source  # no hand copy of the settings
    assert "fit(translator, train_corpus, val_corpus, steps=config.steps" in source
