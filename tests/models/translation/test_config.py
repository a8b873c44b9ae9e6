"""helpers.models.translation.config: the lesson's configuration is the defaults and the benchmarked one."""

from __future__ import annotations

from helpers.models.translation import (
    TranslationConfig,
)


def test_the_lesson_config_is_the_defaults_and_holds_the_measured_settings():
    from helpers.models.translation.config import LESSON_CONFIG

    assert TranslationConfig() == LESSON_CONFIG
    # The settings benchmarks/RESULTS.md measured: change one only together with a new measurement.
    measured = dict(embed_dim=64, num_heads=4, num_encoder_layers=1, num_decoder_layers=2, ff_dim=128, dropout=0.0)
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


OLD_NAMES = dict(d_model=32, heads=2, feedforward=48, encoder_layers=3, decoder_layers=1)
NEW_NAMES = dict(embed_dim=32, num_heads=2, ff_dim=48, num_encoder_layers=3, num_decoder_layers=1)


def test_the_size_fields_have_the_names_of_gpt_config_and_the_readme_notation():
    from dataclasses import fields

    from helpers.gpt import GPTConfig

    names = {f.name for f in fields(TranslationConfig)}
    assert {"embed_dim", "num_heads", "ff_dim", "vocab_size", "max_len"} <= names & {f.name for f in fields(GPTConfig)}
    assert {"num_encoder_layers", "num_decoder_layers"} <= names
    assert not names & set(OLD_NAMES)  # one vocabulary: the old names are aliases, not fields


def test_old_keywords_and_attributes_still_work_with_a_deprecation_warning():
    import pytest

    with pytest.warns(DeprecationWarning, match="'d_model' is now 'embed_dim'"):
        old = TranslationConfig(**OLD_NAMES)
    assert old == TranslationConfig(**NEW_NAMES)
    for name, value in OLD_NAMES.items():
        with pytest.warns(DeprecationWarning, match=rf"TranslationConfig\.{name} is now"):
            assert getattr(old, name) == value
    with pytest.raises(TypeError, match="both 'embed_dim' and its old name 'd_model'"):
        TranslationConfig(d_model=32, embed_dim=32)


def test_a_config_dict_saved_with_the_old_names_is_read_with_a_warning():
    import pytest

    saved = TranslationConfig(**NEW_NAMES).to_dict()
    assert set(NEW_NAMES) <= set(saved)  # what is written now
    older = {({v: k for k, v in zip(OLD_NAMES, NEW_NAMES, strict=True)}).get(k, k): v for k, v in saved.items()}
    assert set(OLD_NAMES) <= set(older) and not set(NEW_NAMES) & set(older)
    with pytest.warns(DeprecationWarning):
        assert TranslationConfig.from_dict(older) == TranslationConfig(**NEW_NAMES)
    with pytest.raises(ValueError, match="unknown TranslationConfig fields"):
        TranslationConfig.from_dict({**saved, "nhead": 2})
