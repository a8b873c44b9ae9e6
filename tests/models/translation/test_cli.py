"""The command line, end to end on tiny models and small slices (seconds, not minutes)."""

from __future__ import annotations

import errno
import io
import json
import os
import re
import runpy
import stat
import sys
from pathlib import Path

import pytest
import torch

from helpers.models.translation import cli, load_checkpoint, save_checkpoint
from helpers.models.translation.checkpoint import CheckpointError
from helpers.models.translation.cli import main

ROOT = Path(__file__).resolve().parents[3]
MULTI30K = ROOT.parent / "shared" / "data" / "multi30k"
MULTI30K_FIXTURE = ROOT / "tests" / "fixtures" / "multi30k"
TINY = [
    "--embed-dim",
    "16",
    "--num-heads",
    "2",
    "--num-encoder-layers",
    "1",
    "--num-decoder-layers",
    "1",
    "--ff-dim",
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
    assert payload["config"]["embed_dim"] == 16 and payload["config"]["tokenizer"] == "word"
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


def test_help_documents_every_command(capsys, monkeypatch):
    # the real `python -m` entry point, run as `-m` runs it, without another interpreter to start
    monkeypatch.setattr(sys, "argv", ["python -m helpers.models.translation", "--help"])
    with pytest.raises(SystemExit) as exit_:
        runpy.run_module("helpers.models.translation", run_name="__main__", alter_sys=True)
    assert exit_.value.code == 0 and "{train,evaluate,translate}" in capsys.readouterr().out
    for command in ("train", "evaluate", "translate"):
        with pytest.raises(SystemExit) as exit_:
            main([command, "--help"])
        assert exit_.value.code == 0
        assert f"usage: python -m helpers.models.translation {command}" in capsys.readouterr().out
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


# ---------------------------------------------------------------------------------------------
# Bad input is refused before anything loads, with a message
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (["--minutes", "-1"], "argument --minutes: expected a number greater than 0, got -1"),
        (["--minutes", "0"], "argument --minutes: expected a number greater than 0, got 0"),
        (["--steps", "-5"], "argument --steps: expected an integer of at least 1, got -5"),
        (["--steps", "0"], "argument --steps: expected an integer of at least 1, got 0"),
        (["--epochs", "-2"], "argument --epochs: expected an integer of at least 1, got -2"),
        (["--epochs", "0"], "argument --epochs: expected an integer of at least 1, got 0"),
        (["--num-heads", "0"], "argument --num-heads/--heads: expected an integer of at least 1, got 0"),
        (["--num-heads", "3"], "embed_dim (64) must be divisible by num_heads (3)"),
        (["--vocab-size", "0"], "argument --vocab-size: expected an integer of at least 5, got 0"),
        (["--eval-every", "-1"], "argument --eval-every: expected an integer of at least 0, got -1"),
        (["--dropout", "1"], "argument --dropout: expected a number in [0, 1), got 1"),
        (["--lr", "nan"], "argument --lr: expected a finite number, got 'nan'"),
        (["--limit", "0"], "argument --limit: expected an integer of at least 1, got 0"),
        (["--batch-tokens", "ten"], "argument --batch-tokens: expected an integer, got 'ten'"),
        (["--tokenizer", "chars"], "argument --tokenizer: invalid choice: 'chars'"),
    ],
)
def test_train_options_are_checked_before_anything_loads(options, expected, tmp_path, capsys, monkeypatch):
    def no_loading(*args, **kwargs):
        raise AssertionError("the corpus was loaded before the options were checked")

    monkeypatch.setattr(cli, "load_corpus", no_loading)
    with pytest.raises(SystemExit) as exit_:
        main(["train", "--out", str(tmp_path / "x.pt"), *options])
    assert exit_.value.code == 2
    assert expected in capsys.readouterr().err
    assert not (tmp_path / "x.pt").exists()


def test_the_old_model_flags_still_set_the_same_fields_with_a_warning(capsys):
    """A learner's saved command with --d-model, --heads, ... trains the model it always did, and says the new names."""
    old = ["--d-model", "32", "--heads", "2", "--feedforward", "48", "--encoder-layers", "3", "--decoder-layers", "1"]
    new = ["--embed-dim", "32", "--num-heads", "2", "--ff-dim", "48", "--num-encoder-layers", "3"]
    new += ["--num-decoder-layers", "1"]
    config_new = cli._train_config(cli.build_parser().parse_args(["train", "--out", "x.pt", *new]))
    assert "deprecated" not in capsys.readouterr().err
    config_old = cli._train_config(cli.build_parser().parse_args(["train", "--out", "x.pt", *old]))
    assert config_old == config_new and (config_new.embed_dim, config_new.num_heads, config_new.ff_dim) == (32, 2, 48)
    assert (config_new.num_encoder_layers, config_new.num_decoder_layers) == (3, 1)
    warnings = capsys.readouterr().err
    for flag in old[::2]:  # the yes/no tie flags have their own test
        assert f"warning: {flag} is deprecated and will be removed; use {cli.RENAMED_FLAGS[flag]}" in warnings


@pytest.mark.parametrize("value", ["abc", "-3", "0"])
def test_an_omp_num_threads_that_is_not_a_count_stops_the_command_before_anything_loads(monkeypatch, capsys, value):
    """A lesson warns and goes on (helpers.tools.threads); a command started on purpose stops, saying what to do,
    rather than train on threads nobody chose. --threads decides instead of the variable."""
    monkeypatch.setenv("OMP_NUM_THREADS", value)
    with pytest.raises(SystemExit) as exit_:
        main(["translate", "--checkpoint", "missing.pt", "Satz."])
    assert exit_.value.code == 2
    error = capsys.readouterr().err
    assert f"error: OMP_NUM_THREADS={value!r} is not a positive integer" in error and "--threads N" in error
    monkeypatch.setattr(cli.torch, "set_num_threads", lambda n: None)  # leave this process's threads as they are
    assert main(["--threads", "1", "translate", "--checkpoint", "missing.pt", "Satz."]) == 2
    assert "no checkpoint at missing.pt" in capsys.readouterr().err  # past the threads, to the missing file


@pytest.mark.parametrize(
    ("options", "given"),
    [
        (["--d-model", "64", "--embed-dim", "128"], "--d-model 64 and --embed-dim 128"),
        (["--num-heads", "4", "--heads", "2"], "--num-heads 4 and --heads 2"),
        (["--ff-dim", "64", "--feedforward", "64", "--ff-dim", "32"], "--ff-dim 32 and --feedforward 64"),
    ],
)
def test_an_old_and_a_new_flag_with_different_values_are_refused(tmp_path, capsys, options, given):
    """An old saved command with the new flag added: the last one used to win silently; which was meant is unknown."""
    with pytest.raises(SystemExit) as exit_:
        main(["train", "--out", str(tmp_path / "x.pt"), *options])
    assert exit_.value.code == 2
    error = capsys.readouterr().err
    new = next(flag for flag in options if flag.startswith("--") and flag not in cli.RENAMED_FLAGS)
    assert f"given under its old and its new name with different values, {given}; give only {new}" in error
    assert not (tmp_path / "x.pt").exists()


def test_an_old_and_a_new_flag_with_one_value_are_the_same_setting(capsys):
    parsed = cli.build_parser().parse_args(["train", "--out", "x.pt", "--d-model", "48", "--embed-dim", "48"])
    assert cli._train_config(parsed).embed_dim == 48
    assert "warning: --d-model is deprecated" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        ["--threads", "-1", "translate", "--checkpoint", "x.pt", "Satz."],
        ["--threads", "0", "translate", "--checkpoint", "x.pt", "Satz."],
        ["translate", "--checkpoint", "x.pt", "--beam", "0", "Satz."],
        ["translate", "--checkpoint", "x.pt", "--batch-size", "-3", "Satz."],
        ["evaluate", "--checkpoint", "x.pt", "--limit", "-1"],
    ],
)
def test_other_numeric_options_are_checked_in_the_parser(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert "expected an integer of at least 1" in capsys.readouterr().err


def _refuse_training(monkeypatch):
    def no_loading(*args, **kwargs):
        raise AssertionError("training data was loaded although --out cannot be written")

    monkeypatch.setattr(cli, "load_corpus", no_loading)


def test_out_that_is_a_folder_or_below_a_file_is_refused_before_training(tmp_path, capsys, monkeypatch):
    _refuse_training(monkeypatch)
    assert main(["train", "--out", str(tmp_path), "--steps", "1"]) == 2
    assert f"error: cannot write checkpoint {tmp_path}: it is a folder" in capsys.readouterr().err
    regular = tmp_path / "file"
    regular.write_text("x")
    assert main(["train", "--out", str(regular / "sub" / "m.pt"), "--steps", "1"]) == 2
    err = capsys.readouterr().err
    assert f"error: cannot write checkpoint {regular / 'sub' / 'm.pt'}: " in err
    assert "a part of the folder path is a file" in err and ".part" not in err


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (PermissionError(errno.EACCES, "Permission denied"), "Permission denied"),
        (OSError(errno.EROFS, "Read-only file system"), "Read-only file system"),
    ],
)
def test_unwritable_or_read_only_out_is_refused_before_training(error, reason, tmp_path, capsys, monkeypatch):
    _refuse_training(monkeypatch)

    def refuse(*args, **kwargs):
        raise error

    monkeypatch.setattr(cli.tempfile, "mkstemp", refuse)  # root can write anywhere: simulate what users see
    out = tmp_path / "runs" / "m.pt"
    assert main(["train", "--out", str(out), "--steps", "1"]) == 2
    assert f"error: cannot write checkpoint {out}: {reason}" in capsys.readouterr().err


def test_writable_out_leaves_no_probe_behind(tmp_path):
    cli.check_writable(tmp_path / "new" / "m.pt")
    assert list((tmp_path / "new").iterdir()) == []


def test_checkpoint_follows_the_umask_so_a_class_can_read_it(checkpoint, tmp_path):
    translator, _ = load_checkpoint(checkpoint)
    previous = os.umask(0o022)
    try:
        save_checkpoint(tmp_path / "shared.pt", translator)
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "shared.pt").stat().st_mode) == 0o644


def test_unreadable_checkpoint_is_a_permission_error_not_corruption(checkpoint, monkeypatch, capsys):
    real_read_bytes = Path.read_bytes

    def deny(path):  # root reads anything: simulate what another account sees
        if path == checkpoint:
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_read_bytes(path)

    monkeypatch.setattr(Path, "read_bytes", deny)
    assert main(["translate", "--checkpoint", str(checkpoint), "Ein Hund."]) == 2
    err = capsys.readouterr().err
    assert f"cannot read checkpoint {checkpoint}: Permission denied" in err and "corrupt" not in err


def test_translate_input_errors_name_file_line_and_encoding(checkpoint, tmp_path, capsys, monkeypatch):
    assert main(["translate", "--checkpoint", str(checkpoint), "--input", str(tmp_path)]) == 2
    assert f"--input {tmp_path} is a folder; expected a UTF-8 text file" in capsys.readouterr().err
    latin = tmp_path / "latin.de"
    latin.write_bytes("Ein Hund läuft.\nEine Frau singt über Bäume.\n".encode("latin-1"))
    assert main(["translate", "--checkpoint", str(checkpoint), "--input", str(latin)]) == 2
    assert f"{latin}: line 1 is not valid UTF-8 (byte 0xe4); the input must be UTF-8" in capsys.readouterr().err
    stdin = io.TextIOWrapper(io.BytesIO(b"Ein Hund.\nEine Frau singt \xfcber B\xe4ume.\n"), encoding="utf-8")
    monkeypatch.setattr(sys, "stdin", stdin)
    assert main(["translate", "--checkpoint", str(checkpoint), "--input", "-"]) == 2
    assert "standard input: line 2 is not valid UTF-8 (byte 0xfc)" in capsys.readouterr().err


def _crafted(checkpoint: Path, tmp_path: Path, **config) -> Path:
    payload = torch.load(checkpoint, weights_only=True)
    payload["config"] = {**payload["config"], **config}
    path = tmp_path / "crafted.pt"
    torch.save(payload, path)
    return path


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({"max_len": 10**9}, "max_len 1000000000 is outside 1..8,192"),
        ({"embed_dim": 2**20, "num_heads": 2}, "embed_dim 1048576 is outside 1..4,096"),
        ({"num_encoder_layers": 10**6}, "num_encoder_layers 1000000 is outside 1..48"),
        (
            {"embed_dim": 4096, "num_heads": 2},
            "the config describes src_embedding",
        ),  # within bounds, but not the file's
    ],
)
def test_crafted_config_is_refused_before_the_model_is_built(checkpoint, tmp_path, config, expected):
    path = _crafted(checkpoint, tmp_path, **config)
    with pytest.raises(CheckpointError, match=re.escape(expected)):
        _load_with_meta_only(path)


def _load_with_meta_only(path: Path):
    """load_checkpoint, with the real build forbidden but the meta-device (shapes only) build allowed."""
    import helpers.models.translation.checkpoint as checkpoint_module
    from helpers.models.translation.model import Seq2SeqTransformer

    def meta_only(*args, **kwargs):
        if torch.empty(0).device.type != "meta":
            raise AssertionError("the model was built with real memory from an unchecked config")
        return Seq2SeqTransformer(*args, **kwargs)

    checkpoint_module.Seq2SeqTransformer = meta_only
    try:
        return checkpoint_module.load_checkpoint(path)
    finally:
        checkpoint_module.Seq2SeqTransformer = Seq2SeqTransformer


def test_refused_pickle_does_not_pass_on_torchs_advice(tmp_path, capsys):
    path = tmp_path / "pickled.pt"
    torch.save({"format": "attention-course translation checkpoint", "thing": _Pickled()}, path)
    assert main(["translate", "--checkpoint", str(path), "Ein Hund."]) == 2
    err = capsys.readouterr().err
    assert "is refused: it holds Python objects" in err and "could run code" in err
    assert "weights_only" not in err and "still be loaded" not in err


class _Pickled:
    """Any class: torch.load(weights_only=True) refuses to rebuild it."""


def test_missing_multi30k_files_name_command_line_options(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("MULTI30K_DIR", raising=False)
    argv = ["train", "--corpus", "multi30k", "--data-dir", str(tmp_path / "none"), "--out", str(tmp_path / "m.pt")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--download" in err and "--data-dir" in err and "MULTI30K_DIR" in err
    assert "data_dir=" not in err and "download=True" not in err and "load_corpus" not in err


def test_download_option_and_multi30k_dir_reach_the_loader(tmp_path, monkeypatch):
    calls = []

    def record(name, split, data_dir=None, download=False):
        calls.append((name, split, data_dir, download))
        raise FileNotFoundError("stop here")

    monkeypatch.setattr(cli, "load_corpus", record)
    main(["train", "--corpus", "multi30k", "--download", "--out", str(tmp_path / "m.pt")])
    assert calls == [("multi30k", "train", None, True)]
    monkeypatch.setenv("MULTI30K_DIR", str(MULTI30K_FIXTURE))  # six fixture files: nothing is missing
    calls.clear()
    main(["evaluate", "--checkpoint", str(tmp_path / "none.pt"), "--corpus", "multi30k"])  # no checkpoint: stops
    assert calls == []
    assert cli.missing_multi30k_files("test")[1] == []


def test_module_docstring_and_help_use_the_venv_python_and_no_shared_folder(capsys):
    assert "../shared" not in cli.__doc__
    for line in cli.__doc__.splitlines():
        if "-m helpers.models.translation" in line:
            assert ".venv/bin/python -m helpers.models.translation" in line or ".venv/bin/torchrun" in line, line
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    assert "--download" in capsys.readouterr().out


# --- --out and --resume never destroy what is not theirs -----------------------------------------------------


def test_out_that_exists_and_is_not_a_checkpoint_is_kept_unless_forced(tmp_path, capsys, monkeypatch):
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes")
    _refuse_training(monkeypatch)
    assert main(["train", "--out", str(notes), "--steps", "1"]) == 2
    err = capsys.readouterr().err
    assert f"--out {notes} exists and is not a checkpoint of this course" in err and "--force" in err
    assert notes.read_text() == "my notes"
    monkeypatch.undo()
    assert main(["train", "--out", str(notes), "--force", "--steps", "1", "--limit", "50", *TINY]) == 0
    assert load_checkpoint(notes)[1]["metrics"]["steps"] == 1


@pytest.mark.parametrize(("out", "state"), [("notes.txt", "notes.resume.txt"), ("m7.pt", "m7.resume.pt")])
def test_the_resume_file_beside_out_that_is_not_ours_is_kept_unless_forced(out, state, tmp_path, capsys, monkeypatch):
    """The run's state goes to OUT's name with .resume: a file of the user's there is refused, as --out is."""
    out, state = tmp_path / out, tmp_path / state
    state.write_text("my own notes")
    _refuse_training(monkeypatch)
    assert main(["train", "--out", str(out), "--steps", "1"]) == 2
    err = capsys.readouterr().err
    assert f"error: {state}, where the run's resume state for --out {out} goes, exists and is not a checkpoint" in err
    assert "--force" in err and state.read_text() == "my own notes" and not out.exists()
    monkeypatch.undo()
    assert main(["train", "--out", str(out), "--force", "--steps", "1", "--limit", "50", *TINY]) == 0
    assert "training" in load_checkpoint(state)[1]  # forced: replaced by the run's state


def test_a_resume_file_beside_out_that_is_a_folder_or_a_pipe_is_refused(tmp_path, capsys, monkeypatch):
    _refuse_training(monkeypatch)
    (tmp_path / "run.resume.pt").mkdir()
    assert main(["train", "--out", str(tmp_path / "run.pt"), "--steps", "1", "--force"]) == 2
    assert f"{tmp_path / 'run.resume.pt'} is a folder" in capsys.readouterr().err
    os.mkfifo(tmp_path / "pipe.resume.pt")
    assert main(["train", "--out", str(tmp_path / "pipe.pt"), "--steps", "1", "--force"]) == 2
    assert "exists and is not a regular file" in capsys.readouterr().err


def test_out_that_is_a_checkpoint_of_the_course_is_replaced(checkpoint, tmp_path):
    out = tmp_path / "again.pt"
    out.write_bytes(checkpoint.read_bytes())
    cli.check_out(out)  # no complaint: a checkpoint is what training writes


@pytest.mark.parametrize("force", [False, True])
def test_out_that_is_not_a_regular_file_is_refused(force, tmp_path, capsys, monkeypatch):
    _refuse_training(monkeypatch)
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    for out in (Path(os.devnull), pipe):
        assert main(["train", "--out", str(out), "--steps", "1", *(["--force"] if force else [])]) == 2
        assert f"--out {out} exists and is not a regular file" in capsys.readouterr().err
    assert Path(os.devnull).is_char_device() and stat.S_ISFIFO(pipe.stat().st_mode)


def test_out_equal_to_resume_is_refused_and_the_state_kept(checkpoint, tmp_path, capsys):
    state = tmp_path / "captions.resume.pt"
    state.write_bytes(checkpoint.with_name("captions.resume.pt").read_bytes())
    before = state.read_bytes()
    assert main(["train", "--resume", str(state), "--out", str(state)]) == 2
    err = capsys.readouterr().err
    assert "is the --resume file" in err and str(tmp_path / "captions.pt") in err
    assert state.read_bytes() == before


@pytest.mark.parametrize(
    ("options", "named"), [(["--corpus", "captions"], "corpus"), (["--data-dir", "data/captions"], "data_dir")]
)
def test_resume_refuses_a_corpus_or_data_folder(options, named, checkpoint, tmp_path, capsys):
    state = checkpoint.with_name("captions.resume.pt")
    assert main(["train", "--resume", str(state), "--out", str(tmp_path / "r.pt"), *options]) == 2
    assert f"--resume continues a run as it was set up; drop {named}" in capsys.readouterr().err


def _crafted_resume(checkpoint, tmp_path, training=None, info=None) -> Path:
    payload = torch.load(checkpoint.with_name("captions.resume.pt"), weights_only=True)
    payload["training"].update(training or {})
    payload["info"].update(info or {})
    path = tmp_path / "crafted.resume.pt"
    torch.save(payload, path)
    return path


@pytest.mark.parametrize(
    ("training", "info", "expected"),
    [
        ({"step": -1}, None, "training state field 'step' must be a finite number >= 0, got -1"),
        ({"position": "3"}, None, "training state field 'position' has a str"),
        ({"total_steps": -5}, None, "training state field 'total_steps' must be positive"),
        (None, {"limit": 0}, "info 'limit' must be a positive integer or None, got 0"),
        (None, {"corpus": "wmt"}, "info 'corpus' must be one of"),
    ],
)
def test_a_crafted_resume_file_is_refused_naming_its_field(training, info, expected, checkpoint, tmp_path, capsys):
    crafted = _crafted_resume(checkpoint, tmp_path, training, info)
    assert main(["train", "--resume", str(crafted), "--out", str(tmp_path / "crafted.pt")]) == 2
    err = capsys.readouterr().err
    assert f"error: {crafted}: {expected}" in err and "--limit" not in err
    assert not (tmp_path / "crafted.pt").exists()


@pytest.mark.integration  # a child process: make test, not make unit
def test_a_resume_file_with_a_wrong_shaped_adam_state_is_refused_not_a_crash(checkpoint, tmp_path):
    """torch's load_state_dict checks only the number of parameters; the fused AdamW kernel then reads and writes a
    wrong-shaped running average out of bounds and the process dies (SIGSEGV). Run in a child process, so that a
    crash is a failed test, not a dead test run."""
    import subprocess

    payload = torch.load(checkpoint.with_name("captions.resume.pt"), weights_only=True)
    payload["training"]["optimizer"]["state"][0]["exp_avg"] = torch.zeros(3)  # src_embedding's is (V, E)
    crafted = tmp_path / "crafted.resume.pt"
    torch.save(payload, crafted)
    argv = ["train", "--resume", str(crafted), "--out", str(tmp_path / "out.pt"), "--quiet"]
    child = subprocess.run(
        [sys.executable, "-m", "helpers.models.translation", "--threads", "1", *argv],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert child.returncode == 2, (child.returncode, child.stderr[-2000:])
    assert f"error: {crafted}: the optimiser state's exp_avg of src_embedding.embedding.weight is of shape (3,)" in (
        child.stderr
    ), child.stderr[-2000:]
    assert not (tmp_path / "out.pt").exists()


def test_ctrl_c_prints_one_line_with_the_command_that_continues(tmp_path, capsys, monkeypatch):
    real_save = cli.save_checkpoint

    def save_then_interrupt(path, translator, metrics=None, info=None, training=None):
        real_save(path, translator, metrics, info, training=training)
        if training is not None:
            raise KeyboardInterrupt

    monkeypatch.setattr(cli, "save_checkpoint", save_then_interrupt)
    out = tmp_path / "run.pt"
    assert main(["train", "--out", str(out), "--steps", "4", "--eval-every", "2", "--limit", "50", *TINY]) == 130
    err = capsys.readouterr().err.strip().splitlines()
    command = f"{sys.executable} -m helpers.models.translation train --resume {tmp_path / 'run.resume.pt'} --out {out}"
    assert err[-1] == f"interrupted: continue with `{command}` (the state saved last)"  # the whole command
    assert not any("Traceback" in line for line in err)


def test_ctrl_c_before_any_state_says_there_is_nothing_to_continue(tmp_path, capsys, monkeypatch):
    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "fit", interrupt)
    assert main(["train", "--out", str(tmp_path / "run.pt"), "--steps", "4", "--limit", "50", *TINY]) == 130
    err = capsys.readouterr().err
    assert "interrupted before a resume state was saved" in err and "Traceback" not in err


def test_temporary_files_of_a_killed_save_are_removed_at_the_next_start(tmp_path, capsys):
    out = tmp_path / "run.pt"
    stale = [tmp_path / ".run.pt.k1ll3d.part", tmp_path / ".run.resume.pt.x9.part"]
    other = tmp_path / ".notes.txt.ab.part"  # not ours: kept
    for path in [*stale, other]:
        path.write_bytes(b"half a checkpoint")
    assert main(["train", "--out", str(out), "--steps", "1", "--limit", "50", *TINY]) == 0
    assert not any(path.exists() for path in stale) and other.exists()
    assert "removed 2 temporary file(s) left by an interrupted save" in capsys.readouterr().err


def test_resume_from_the_command_line_continues_to_the_same_checkpoint(tmp_path, monkeypatch):
    args = ["train", "--corpus", "captions", "--limit", "200", "--steps", "6", "--eval-every", "3", *TINY]
    args += ["--batch-tokens", "300"]
    assert cli.main([*args, "--out", str(tmp_path / "straight.pt")]) == 0

    class Killed(Exception):
        pass

    real_save = cli.save_checkpoint

    def save_then_die_at_step_3(path, translator, metrics=None, info=None, training=None):
        real_save(path, translator, metrics, info, training=training)
        if training is not None and training["step"] == 3:
            raise Killed  # as if the machine went away right after the state was on disk

    monkeypatch.setattr(cli, "save_checkpoint", save_then_die_at_step_3)
    with pytest.raises(Killed):
        cli.main([*args, "--out", str(tmp_path / "cut.pt")])
    monkeypatch.setattr(cli, "save_checkpoint", real_save)
    state = tmp_path / "cut.resume.pt"
    assert cli.main(["train", "--resume", str(state), "--out", str(tmp_path / "cut.pt"), "--quiet"]) == 0

    # both the best weights (--out) and the last ones (the final resume state) are the same
    for best_or_last in ("{}.pt", "{}.resume.pt"):
        straight, straight_payload = load_checkpoint(tmp_path / best_or_last.format("straight"))
        resumed, resumed_payload = load_checkpoint(tmp_path / best_or_last.format("cut"))
        same = ("step", "steps", "final_loss", "best_step", "best_val_score")  # not the times
        assert {k: v for k, v in resumed_payload["metrics"].items() if k in same} == {
            k: v for k, v in straight_payload["metrics"].items() if k in same
        }
        assert 6 in (straight_payload["metrics"].get("steps"), straight_payload["metrics"].get("step"))
        for name, tensor in straight.model.state_dict().items():
            assert torch.equal(tensor, resumed.model.state_dict()[name]), name


def test_resume_refuses_settings_that_would_change_the_run(tmp_path, capsys):
    out = tmp_path / "run.pt"
    args = ["train", "--corpus", "captions", "--limit", "200", "--steps", "2", *TINY, "--batch-tokens", "300"]
    assert cli.main([*args, "--out", str(out)]) == 0
    assert cli.main(["train", "--resume", str(tmp_path / "run.resume.pt"), "--out", str(out), "--lr", "0.1"]) == 2
    assert "--resume continues a run as it was set up; drop lr" in capsys.readouterr().err
    assert cli.main(["train", "--resume", str(out), "--out", str(tmp_path / "other.pt")]) == 2  # best weights: no state
    assert "holds no training state" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("old", "new", "tied"),
    [("--tie-output-embedding", "--tie-embeddings", True), ("--no-tie-output-embedding", "--no-tie-embeddings", False)],
)
def test_the_old_tie_flag_sets_tie_embeddings_with_a_warning(capsys, old, new, tied):
    parsed = cli.build_parser().parse_args(["train", "--out", "x.pt", old])
    assert cli._train_config(parsed).tie_embeddings is tied
    assert f"warning: {old} is deprecated and will be removed; use {new}" in capsys.readouterr().err
    assert cli._train_config(cli.build_parser().parse_args(["train", "--out", "x.pt", new])).tie_embeddings is tied
    assert "deprecated" not in capsys.readouterr().err


def test_the_old_and_new_tie_flags_with_opposite_values_are_refused(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["train", "--out", str(tmp_path / "x.pt"), "--tie-embeddings", "--no-tie-output-embedding"])
    error = capsys.readouterr().err
    assert (
        "given under its old and its new name with different values" in error and "give only --tie-embeddings" in error
    )
