"""The command line, end to end on tiny models and small slices (seconds, not minutes)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from helpers.translation import load_checkpoint
from helpers.translation.cli import main

ROOT = Path(__file__).resolve().parents[1]
MULTI30K = ROOT.parent / "shared" / "data" / "multi30k"
TINY = [
    "--d-model",
    "16",
    "--heads",
    "2",
    "--encoder-layers",
    "1",
    "--decoder-layers",
    "1",
    "--feedforward",
    "32",
    "--val-sentences",
    "8",
    "--quiet",
]


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("cli") / "captions.pt"
    assert main(["train", "--corpus", "captions", "--steps", "4", "--limit", "200", "--out", str(out), *TINY]) == 0
    return out


def test_train_writes_a_checkpoint_with_config_tokenizers_and_metrics(checkpoint):
    translator, payload = load_checkpoint(checkpoint)
    assert payload["config"]["d_model"] == 16 and payload["config"]["tokenizer"] == "word"
    assert payload["info"]["corpus"] == "captions" and payload["info"]["train_pairs"] == 200
    assert payload["metrics"]["steps"] == 4 and "val_bleu" in payload["metrics"]
    assert translator.source_tokenizer.vocab_size > 4


def test_evaluate_prints_json_with_bleu_chrf_and_signature(checkpoint, capsys):
    assert main(["evaluate", "--checkpoint", str(checkpoint), "--split", "test", "--limit", "20", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert {"bleu", "chrf", "signature"} <= set(result)
    assert result["sentences"] == 20 and "version:" in result["signature"]
    assert main(["evaluate", "--checkpoint", str(checkpoint), "--split", "val", "--limit", "5", "--beam", "4"]) == 0
    assert "BLEU" in capsys.readouterr().out


def test_translate_arguments_file_and_stdin_give_one_line_per_sentence(checkpoint, capsys, tmp_path, monkeypatch):
    sentences = ["Ein Hund läuft.", "Eine Frau singt im Freien."]
    assert main(["translate", "--checkpoint", str(checkpoint), *sentences]) == 0
    from_args = capsys.readouterr().out.splitlines()
    assert len(from_args) == 2
    source = tmp_path / "in.de"
    source.write_text("\n".join([sentences[0], "", sentences[1]]) + "\n", encoding="utf-8")
    assert main(["translate", "--checkpoint", str(checkpoint), "--input", str(source)]) == 0
    from_file = capsys.readouterr().out.splitlines()
    assert from_file == [from_args[0], "", from_args[1]]  # line i translates line i, blank stays blank
    monkeypatch.setattr(sys, "stdin", io.StringIO("\n".join(sentences) + "\n"))
    assert main(["translate", "--checkpoint", str(checkpoint), "--input", "-", "--beam", "4"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2


def test_bad_input_gets_a_clear_error(tmp_path, capsys):
    foreign = tmp_path / "foreign.pt"
    torch.save({"weights": 1}, foreign)
    assert main(["translate", "--checkpoint", str(foreign), "Ein Satz."]) == 2
    assert "not a translation checkpoint" in capsys.readouterr().err
    assert main(["translate", "--checkpoint", str(foreign)]) == 2
    assert "nothing to translate" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["train", "--corpus", "captions", "--minutes", "1", "--epochs", "1", "--out", str(tmp_path / "x.pt")])


def test_help_documents_every_command(capsys):
    result = subprocess.run(
        [sys.executable, "-m", "helpers.translation", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )  # the real `python -m` entry point
    assert result.returncode == 0 and "{train,evaluate,translate}" in result.stdout
    for command in ("train", "evaluate", "translate"):
        with pytest.raises(SystemExit) as exit_:
            main([command, "--help"])
        assert exit_.value.code == 0
        assert f"usage: python -m helpers.translation {command}" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    train_help = capsys.readouterr().out
    assert "--minutes" in train_help and "--epochs" in train_help and "multi30k" in train_help


@pytest.mark.skipif(not MULTI30K.is_dir(), reason="Multi30k files not present at ../shared/data/multi30k")
def test_multi30k_trains_evaluates_and_translates_from_the_shared_folder(tmp_path, capsys):
    out = tmp_path / "m30k.pt"
    assert (
        main(
            [
                "train",
                "--corpus",
                "multi30k",
                "--data-dir",
                str(MULTI30K),
                "--steps",
                "2",
                "--limit",
                "300",
                "--vocab-size",
                "300",
                "--batch-tokens",
                "600",
                "--out",
                str(out),
                *TINY,
            ]
        )
        == 0
    )
    _, payload = load_checkpoint(out)
    assert payload["config"]["tokenizer"] == "bpe" and payload["info"]["corpus"] == "multi30k"
    assert main(["evaluate", "--checkpoint", str(out), "--split", "test", "--limit", "10", "--json"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["corpus"] == "multi30k"
    assert main(["translate", "--checkpoint", str(out), "Ein Mann fährt Fahrrad."]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 1
