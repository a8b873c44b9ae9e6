"""helpers.tools.progress: a line at every tenth of a loop, in a form tests/nbval_sanitize.cfg makes stable."""

from __future__ import annotations

import configparser
import io
import re
from pathlib import Path

import pytest

from helpers.tools.progress import ProgressLines, in_notebook

SANITIZE = Path(__file__).resolve().parents[1] / "nbval_sanitize.cfg"


def _lines(total: int, steps, **kwargs) -> list[str]:
    out = io.StringIO()
    progress = ProgressLines(total, "training", stream=out, **kwargs)
    for step in steps:
        progress.update(step, note="loss 1.000")
    return out.getvalue().splitlines()


def test_a_line_at_every_tenth_and_none_between():
    lines = _lines(2000, range(1, 2001))
    assert len(lines) == 10
    assert lines[0].startswith("training: 10% (200/2000 steps), loss 1.000, ") and lines[0].endswith(" s elapsed")
    assert lines[-1].startswith("training: 100% (2000/2000 steps)")


def test_a_short_loop_says_each_tenth_it_reaches_once():
    lines = _lines(7, range(1, 8))  # 1/7 passes 10%, 2/7 passes 20%, ...: never two lines for one step
    assert [re.search(r"(\d+)%", line).group(1) for line in lines] == ["10", "20", "40", "50", "70", "80", "100"]


def test_a_resumed_loop_does_not_repeat_its_lines():
    assert [line.split(" (")[0] for line in _lines(100, range(51, 101), done=50)] == [
        f"training: {share}%" for share in (60, 70, 80, 90, 100)
    ]


def test_bad_totals_and_intervals_are_refused():
    with pytest.raises(ValueError, match="total must be positive"):
        ProgressLines(0, "x")
    with pytest.raises(ValueError, match="every must be a fraction"):
        ProgressLines(10, "x", every=2)


def test_the_nbval_sanitizer_maps_the_seconds_to_one_form():
    config = configparser.ConfigParser()
    config.read(SANITIZE)
    rules = [(config[name]["regex"], config[name]["replace"]) for name in config.sections()]
    slow, fast = _lines(10, [10])[0], _lines(10, [10])[0].replace(" 0 s elapsed", " 137 s elapsed")
    assert slow != fast

    def sanitized(text: str) -> str:
        for regex, replace in rules:
            text = re.sub(regex, replace, text)
        return text

    assert sanitized(slow) == sanitized(fast) == "training: 100% (10/10 steps), loss 1.000, N s elapsed"


def test_a_plain_python_process_is_not_a_notebook():
    assert not in_notebook()


def test_train_gpt_with_a_label_says_each_tenth_and_trains_the_same(capsys):
    import torch

    from helpers.gpt import GPT, GPTConfig, train_gpt

    config = GPTConfig(vocab_size=12, embed_dim=16, num_heads=2, num_kv_heads=1, num_layers=1, ff_dim=32)
    data = torch.randint(12, (50, 9), generator=torch.Generator().manual_seed(0))
    runs = []
    for label in (None, "the small GPT"):
        torch.manual_seed(0)
        runs.append(train_gpt(GPT(config), data[:, :-1], data[:, 1:], steps=10, batch_size=4, progress=label))
        runs.append(capsys.readouterr().out.splitlines())
    quiet, silence, spoken, lines = runs
    assert silence == [] and quiet == spoken  # the lines change nothing in the training
    assert [line.split(" (")[0] for line in lines] == [f"the small GPT: {10 * k}%" for k in range(1, 11)]
