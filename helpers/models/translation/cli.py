"""The command line: ``.venv/bin/python -m helpers.models.translation train | evaluate | translate``.

Run it with the course's own interpreter (``.venv/bin/python``, made by ``make setup``), from the
repository's folder::

    .venv/bin/python -m helpers.models.translation train --corpus captions --epochs 3 --out runs/captions.pt
    .venv/bin/python -m helpers.models.translation train --corpus multi30k --download --minutes 60 --out runs/m30k.pt
    .venv/bin/python -m helpers.models.translation train --corpus multi30k --data-dir /data/multi30k --out runs/m30k.pt
    .venv/bin/python -m helpers.models.translation evaluate --checkpoint runs/m30k.pt --split test --json
    .venv/bin/python -m helpers.models.translation translate --checkpoint runs/m30k.pt "Ein Hund läuft im Schnee."
    .venv/bin/python -m helpers.models.translation translate --checkpoint runs/m30k.pt --input in.de > out.en
    .venv/bin/python -m helpers.models.translation train --resume runs/m30k.resume.pt --out runs/m30k.pt  # continue
    .venv/bin/torchrun --standalone --nproc_per_node 2 -m helpers.models.translation train --corpus multi30k \
        --out runs/m30k.pt

Multi30k is read from ``--data-dir``, else from the folder in the environment variable
``MULTI30K_DIR``, else from the download cache; ``--download`` fetches missing files there
(checksummed). Every option is checked before anything is loaded or trained, and ``--out`` is
checked to be writable before training starts, so a mistake costs seconds, not an hour.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import torch

from helpers.data.corpus import CorpusError, ParallelCorpus, load_corpus, missing_multi30k_files, text_lines
from helpers.models.translation import distributed
from helpers.models.translation.checkpoint import CheckpointError, load_checkpoint, read_checkpoint, save_checkpoint
from helpers.models.translation.config import LESSON_CONFIG, TranslationConfig
from helpers.models.translation.evaluation import evaluate
from helpers.models.translation.pipeline import build_translator, fit
from helpers.models.translation.training import check_training_state
from helpers.models.translation.translator import Translator
from helpers.tools.files import TEMPORARY_SUFFIX
from helpers.tools.threads import follow_load_during_run, threads_from_environment

#: Model and training settings per corpus (each can be overridden by a flag).
#: captions: the lesson's model, word-level (the course corpus has under 1,000 word types per language).
#: multi30k: real captions need sub-words (BPE) and a wider model, sized for 10-60 minutes on one CPU core: 4,000
#: sub-words, the output layer tied to the English embedding, a short warm-up to a high peak (a 30-minute run has
#: about 1,500 steps). How these were chosen: benchmarks/RESULTS.md, "Multi30k".
PRESETS: dict[str, TranslationConfig] = {
    "captions": replace(LESSON_CONFIG, eval_every=500),
    "multi30k": TranslationConfig(
        tokenizer="bpe",
        vocab_size=4000,
        embed_dim=256,
        num_heads=8,
        num_encoder_layers=3,
        num_decoder_layers=3,
        ff_dim=512,
        dropout=0.1,
        tie_embeddings=True,
        steps=4000,
        batch_tokens=3000,
        lr=2e-3,
        warmup_steps=200,
        eval_every=250,
        val_sentences=300,
    ),
}
CORPUS_NAMES = {"captions": "captions", "course": "captions", "multi30k": "multi30k"}
DEFAULT_CORPUS = "captions"
#: The smallest vocabulary that holds a word besides the four special tokens (<pad>, <bos>, <eos>, <unk>).
MIN_VOCAB_SIZE = 5


#: Model flags renamed with the config's fields (one vocabulary, the README's notation): the old spelling of a
#: learner's saved command still works, with a warning naming the new one.
RENAMED_FLAGS = {
    "--d-model": "--embed-dim",
    "--heads": "--num-heads",
    "--encoder-layers": "--num-encoder-layers",
    "--decoder-layers": "--num-decoder-layers",
    "--feedforward": "--ff-dim",
    "--tie-output-embedding": "--tie-embeddings",
    "--no-tie-output-embedding": "--no-tie-embeddings",
}


class _RenamedFlag(argparse.Action):
    """Stores a model flag's value; given under its old name, it also says the new one on standard error.

    Printed rather than left to ``warnings``: Python hides a DeprecationWarning raised outside ``__main__``,
    and the person to tell is the one who typed the command. Given under both names with different values
    (``--d-model 64 --embed-dim 128``: an old saved command with a new flag added), it is refused: the last
    would win, silently, and which one was meant cannot be known (``renamed_fields`` refuses a config the same).
    """

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        _store_spelling(self, namespace, values, option_string)


class _RenamedSwitch(argparse.BooleanOptionalAction):
    """A yes/no model flag (``--tie-embeddings`` / ``--no-tie-embeddings``) that also answers to its old name,
    saying the new one and refusing the two names with opposite values, as ``_RenamedFlag`` does."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        if option_string in self.option_strings:
            _store_spelling(self, namespace, not option_string.startswith("--no-"), option_string)


def _store_spelling(action: argparse.Action, namespace, value, option_string: str | None) -> None:
    """Set ``action.dest`` to ``value``; an old spelling (``RENAMED_FLAGS``) warns, and two spellings with
    different values are refused."""
    if option_string in RENAMED_FLAGS:
        print(
            f"warning: {option_string} is deprecated and will be removed; use {RENAMED_FLAGS[option_string]}",
            file=sys.stderr,
        )
    switch = option_string is not None and option_string.startswith("--no-")
    spelling = option_string[len("--no") :] if switch and option_string else option_string  # --no-x is --x's
    given = namespace.__dict__.setdefault(_SPELLINGS, {}).setdefault(action.dest, {})
    given[spelling] = (option_string, value)
    if len({v for _, v in given.values()}) > 1:  # two spellings (one value each, the last): they disagree
        spelled = " and ".join(f"{flag} {v}" if not isinstance(v, bool) else flag for flag, v in given.values())
        new = next(flag for flag, _ in given.values() if flag not in RENAMED_FLAGS)
        raise argparse.ArgumentError(
            action, f"given under its old and its new name with different values, {spelled}; give only {new}"
        )
    setattr(namespace, action.dest, value)


# The namespace's record of which spelling of each renamed flag gave which value (kept out of the config's fields).
_SPELLINGS = "_renamed_flag_spellings"
Number = TypeVar("Number", int, float)  # what _number parses: the type it is given


class CommandLineError(Exception):
    """A problem with what the user asked for; printed as ``error: message``, exit status 2."""


# ---------------------------------------------------------------------------------------------
# Option types: each checks one value while the command line is parsed, before anything loads,
# and says what was expected. Reuse them for new options.
# ---------------------------------------------------------------------------------------------
def _number(text: str, kind: type[Number]) -> Number:
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected {'an integer' if kind is int else 'a number'}, got {text!r}"
        ) from None
    if kind is float and not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def int_at_least(low: int) -> Callable[[str], int]:
    """An argparse type: an integer ``>= low``."""

    def parse(text: str) -> int:
        value = _number(text, int)
        if value < low:
            raise argparse.ArgumentTypeError(f"expected an integer of at least {low}, got {text}")
        return value

    parse.__name__ = f"integer >= {low}"  # what argparse names in its own messages
    return parse


positive_int = int_at_least(1)
non_negative_int = int_at_least(0)


def positive_float(text: str) -> float:
    """An argparse type: a finite number > 0."""
    value = _number(text, float)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a number greater than 0, got {text}")
    return value


def fraction(text: str) -> float:
    """An argparse type: a probability in [0, 1) (dropout: 1 would drop everything)."""
    value = _number(text, float)
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1), got {text}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.threads:
        # Refused here, where a lesson would only warn (threads.pick_threads): a command started on purpose can stop
        # before anything loads, rather than train for an hour, on every torchrun rank, on threads nobody chose.
        try:
            threads_from_environment()
        except ValueError as error:
            parser.error(f"{error}: set it to a count, unset it, or give --threads N")
    if args.command == "train":
        try:  # combinations of options (embed_dim divisible by num_heads) are checked before anything loads, too
            args.config = _train_config(args)
        except ValueError as error:
            parser.error(str(error))
    # Torch's own default (every core) runs up to 50x slower when another process holds a core: see threads.py.
    if args.threads:
        torch.set_num_threads(args.threads)
    else:  # the free cores now, and again every few seconds while it runs: the machine's load changes
        follow_load_during_run()
    try:
        return args.run(args)
    except KeyboardInterrupt:
        _interrupted(args)
        return 130
    except PermissionError as error:
        print(f"error: permission denied: {error.filename or error}", file=sys.stderr)
    except FileNotFoundError as error:  # before OSError: ours carry a message that says what to do
        print(f"error: {error}", file=sys.stderr)
    except OSError as error:  # a full disk, a vanished folder: the file and the reason, not a traceback
        where = f"{error.filename}: " if error.filename else ""
        print(f"error: {where}{error.strerror or error}", file=sys.stderr)
    except (CommandLineError, CheckpointError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
    return 2


def _interrupted(args: argparse.Namespace) -> None:
    """One line after Ctrl-C: where the run's last saved state is, and the command that continues it."""
    if args.command != "train":
        print("interrupted", file=sys.stderr)
        return
    if not distributed.ranks_from_environment().is_main:
        return  # rank 0 speaks for all
    state = resume_path(args.out)
    if state.is_file():
        options = (f" --threads {args.threads}" if args.threads else "") + (
            f" --device {args.device}" if args.device != "auto" else ""
        )
        command = f"{sys.executable} -m helpers.models.translation{options} train --resume {state} --out {args.out}"
        print(f"interrupted: continue with `{command}` (the state saved last)", file=sys.stderr)
    else:
        print(
            f"interrupted before a resume state was saved (every --save-minutes and at each validation); "
            f"nothing to continue from {state}",
            file=sys.stderr,
        )


def build_parser() -> argparse.ArgumentParser:
    """The command line: the options every command shares, then ``train``, ``evaluate`` and ``translate``."""
    parser = argparse.ArgumentParser(
        prog="python -m helpers.models.translation",
        description="Train, evaluate and use a German->English transformer (the course's lesson 06 model).",
    )
    parser.add_argument(
        "--threads",
        type=positive_int,
        default=None,
        help="CPU threads for PyTorch (default: $OMP_NUM_THREADS if set, else the cores no other process is "
        "busy on, shared among torchrun's processes: on a busy machine, threads beside another process's wait for it)",
    )
    parser.add_argument(
        "--device",
        choices=["auto", "cpu", "cuda"],
        default="auto",
        help="where to run: 'auto' (default) takes a CUDA GPU when PyTorch sees one, else the CPU; "
        "on a GPU, training runs in bfloat16 autocast",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="{train,evaluate,translate}")
    _add_train(commands)
    _add_evaluate(commands)
    _add_translate(commands)
    return parser


def _add_train(commands: argparse._SubParsersAction) -> None:
    """``train``: its corpus, its length and checkpoint, how it runs, the preset's overrides."""
    train = commands.add_parser(
        "train",
        help="train a model and save the best checkpoint",
        description="Train on a corpus's training split, validate BLEU on its validation split, "
        "and keep the best weights in --out (rewritten whenever validation improves).",
    )
    _add_training_data(train)
    _add_length_and_output(train)
    _add_run_options(train)
    _add_preset_overrides(train)
    train.add_argument("--quiet", action="store_true", help="no progress bar")
    train.set_defaults(run=run_train)


def _add_training_data(train: argparse.ArgumentParser) -> None:
    """Which corpus, from where (``--corpus``, ``--data-dir``, ``--download``)."""
    train.add_argument(
        "--corpus",
        choices=sorted(CORPUS_NAMES),
        default=None,
        help="'captions' (the default; alias 'course'): the course's own corpus; 'multi30k': real captions",
    )
    train.add_argument(
        "--data-dir",
        default=None,
        help="folder with the corpus files (default: data/captions; for multi30k $MULTI30K_DIR if set, "
        "else the download cache)",
    )
    _add_download(train)


def _add_length_and_output(train: argparse.ArgumentParser) -> None:
    """How long (one of ``--minutes``, ``--epochs``, ``--steps``) and where the checkpoint goes."""
    length = train.add_mutually_exclusive_group()
    length.add_argument("--minutes", type=positive_float, help="train for this many minutes of wall-clock time")
    length.add_argument("--epochs", type=positive_int, help="train for this many passes over the training split")
    length.add_argument(
        "--steps", type=positive_int, help="train for this many optimiser steps (default: the preset's)"
    )
    train.add_argument(
        "--out",
        required=True,
        type=Path,
        help="checkpoint file to write (the best weights; checked before training); the run's state for --resume "
        "goes beside it, in OUT's name with .resume before the suffix. An existing file is replaced only if it is "
        "a checkpoint of this course (or with --force)",
    )
    train.add_argument(
        "--force",
        action="store_true",
        help="replace an existing --out file (or the .resume file beside it) even if it is not a checkpoint of this "
        "course",
    )


def _add_run_options(train: argparse.ArgumentParser) -> None:
    """Resuming, saving, waiting for other ranks, accumulating, and a limit for quick trials."""
    train.add_argument(
        "--resume",
        type=Path,
        default=None,
        help="continue the run whose state this file holds (written every --save-minutes, at each validation "
        "and at the end): same model, optimiser, schedule, step and data position, same end",
    )
    train.add_argument(
        "--save-minutes",
        type=positive_float,
        default=5.0,
        help="write the resume state at least this often (default 5), so that a killed run loses little",
    )
    train.add_argument(
        "--rank-timeout",
        type=positive_float,
        default=distributed.COLLECTIVE_TIMEOUT.total_seconds() / 60,
        help="under torchrun: minutes a process waits for the others before it gives up with a message "
        f"(default {distributed.COLLECTIVE_TIMEOUT.total_seconds() / 60:g}; must exceed the longest validation)",
    )
    train.add_argument(
        "--accumulate",
        type=positive_int,
        default=1,
        help="batches whose gradients each optimiser step averages (default 1); under torchrun each process "
        "takes this many, so P processes with --accumulate 1 equal one process with --accumulate P",
    )
    train.add_argument(
        "--limit", type=positive_int, default=None, help="use only the first N training pairs (quick trials)"
    )


def _add_preset_overrides(train: argparse.ArgumentParser) -> None:
    """One flag per setting of the corpus preset (``TranslationConfig``), each with its old name if it had one."""
    flags: list[tuple[str, str, Callable[[str], Any], str]] = [
        ("--tokenizer", "tokenizer", str, ""),
        ("--vocab-size", "vocab_size", int_at_least(MIN_VOCAB_SIZE), ""),
        ("--embed-dim", "embed_dim", positive_int, "; E"),
        ("--num-heads", "num_heads", positive_int, "; h, must divide --embed-dim"),
        ("--num-encoder-layers", "num_encoder_layers", positive_int, ""),
        ("--num-decoder-layers", "num_decoder_layers", positive_int, ""),
        ("--ff-dim", "ff_dim", positive_int, "; F"),
        ("--dropout", "dropout", fraction, "; in [0, 1)"),
        ("--batch-tokens", "batch_tokens", positive_int, ""),
        ("--lr", "lr", positive_float, ""),
        ("--warmup-steps", "warmup_steps", non_negative_int, ""),
        ("--eval-every", "eval_every", non_negative_int, "; 0 = only at the end"),
        ("--val-sentences", "val_sentences", positive_int, ""),
        ("--seed", "seed", non_negative_int, ""),
    ]
    for flag, field, kind, note in flags:
        old = [name for name, new in RENAMED_FLAGS.items() if new == flag]
        train.add_argument(
            flag,
            *old,
            dest=field,
            type=kind,
            default=None,
            choices=["word", "bpe"] if field == "tokenizer" else None,
            action=_RenamedFlag if old else "store",
            help=f"override the corpus preset's {field} (captions: {getattr(PRESETS['captions'], field)}, "
            f"multi30k: {getattr(PRESETS['multi30k'], field)}){note}" + (f" ({old[0]} is its old name)" if old else ""),
        )
    train.add_argument(
        "--tie-embeddings",
        "--tie-output-embedding",
        dest="tie_embeddings",
        action=_RenamedSwitch,
        default=None,
        help="one table for the English embedding and the output layer (captions: "
        f"{PRESETS['captions'].tie_embeddings}, multi30k: {PRESETS['multi30k'].tie_embeddings}; "
        "--tie-output-embedding is its old name)",
    )


def _add_evaluate(commands: argparse._SubParsersAction) -> None:
    """``evaluate``: a checkpoint scored with sacreBLEU."""
    evaluate_ = commands.add_parser(
        "evaluate",
        help="score a checkpoint with sacreBLEU (BLEU, chrF)",
        description="Translate a split of the checkpoint's corpus and score it with "
        "sacreBLEU; prints BLEU, chrF and sacreBLEU's signature.",
    )
    evaluate_.add_argument("--checkpoint", required=True, type=Path)
    evaluate_.add_argument("--split", choices=["train", "val", "test"], default="test")
    evaluate_.add_argument(
        "--corpus", choices=sorted(CORPUS_NAMES), default=None, help="default: the corpus the checkpoint was trained on"
    )
    evaluate_.add_argument(
        "--data-dir", default=None, help="default: the folder used for training (multi30k: else $MULTI30K_DIR)"
    )
    _add_download(evaluate_)
    evaluate_.add_argument("--beam", type=positive_int, default=1, help="beam size (1 = greedy; 4 = beam search)")
    evaluate_.add_argument("--limit", type=positive_int, default=None, help="score only the first N sentences")
    evaluate_.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object (bleu, chrf, signature, chrf_signature, sentences, ...)",
    )
    evaluate_.set_defaults(run=run_evaluate)


def _add_translate(commands: argparse._SubParsersAction) -> None:
    """``translate``: sentences from the arguments or a file."""
    translate = commands.add_parser(
        "translate",
        help="translate German sentences to English",
        description="Translate sentences given as arguments, or one per line from "
        "--input FILE ('-' for standard input); writes one translation a line.",
    )
    translate.add_argument("sentences", nargs="*", help="German sentences (quote each)")
    translate.add_argument("--checkpoint", required=True, type=Path)
    translate.add_argument(
        "--input",
        default=None,
        help="UTF-8 text file with one German sentence a line (ending in \\n, \\r\\n or an old Mac's \\r), "
        "'-' for standard input",
    )
    translate.add_argument("--beam", type=positive_int, default=1, help="beam size (1 = greedy; 4 = beam search)")
    translate.add_argument("--batch-size", type=positive_int, default=250, help="sentences decoded together")
    translate.set_defaults(run=run_translate)


def _add_download(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--download",
        action="store_true",
        help="multi30k: fetch missing files (about 5 MB, SHA-256 checked) into --data-dir, $MULTI30K_DIR or the "
        "download cache",
    )


def _overrides(args: argparse.Namespace) -> dict:
    """The model and training settings given on the command line (those left out are None)."""
    return {
        field: value
        for field, value in vars(args).items()
        if field in TranslationConfig.__dataclass_fields__ and value is not None
    }


def _train_config(args: argparse.Namespace) -> TranslationConfig:
    """The preset with the options given; raises ValueError for a combination that cannot work."""
    return replace(PRESETS[CORPUS_NAMES[args.corpus or DEFAULT_CORPUS]], **_overrides(args))


def check_writable(path: Path) -> None:
    """Make sure a checkpoint can be written at ``path`` (creating its folder): probe it before training.

    Raises :class:`CommandLineError` ``cannot write checkpoint PATH: reason``. The probe writes and removes
    a temporary file in the folder, which is what saving does (then renames it over ``path``).
    """
    if path.is_dir():
        raise CommandLineError(
            f"cannot write checkpoint {path}: it is a folder; give a file name such as {path}/model.pt"
        )
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        descriptor, probe = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".probe")
        os.close(descriptor)
        os.unlink(probe)
    except OSError as error:
        reason = error.strerror or str(error)
        if isinstance(error, (FileExistsError, NotADirectoryError)):
            reason = f"{reason} (a part of the folder path is a file, not a folder)"
        raise CommandLineError(f"cannot write checkpoint {path}: {reason}") from None


def check_out(out: Path, resume: Path | None = None, force: bool = False) -> None:
    """Refuse an ``--out`` that training would harm, then probe that it can be written (:func:`check_writable`).

    Refused: anything that exists and is not a regular file (a device such as /dev/null, a pipe), an existing file
    that is not a checkpoint of this course (unless ``force``), and the ``resume`` file itself (the best weights
    written over it would drop the run's state). The file the run's resume state goes to (:func:`resume_path`,
    ``notes.txt`` -> ``notes.resume.txt``) is checked the same way, so that it never replaces a file of the user's.
    """
    if resume is not None and out.resolve() == resume.resolve():
        suggestion = out.with_name(out.name.replace(".resume", "")) if ".resume" in out.name else None
        raise CommandLineError(
            f"--out {out} is the --resume file: the best weights written there would drop the run's state; give the "
            f"checkpoint's own name{f' ({suggestion})' if suggestion else ''}"
        )
    _check_replaceable(out, f"--out {out}", force)
    state = resume_path(out)
    if state.is_dir():
        raise CommandLineError(
            f"{state} is a folder, and the run's resume state for --out {out} goes there; give another --out"
        )
    _check_replaceable(state, f"{state}, where the run's resume state for --out {out} goes,", force)
    check_writable(out)


def _check_replaceable(path: Path, named: str, force: bool) -> None:
    """Refuse to let a checkpoint replace ``path`` (called ``named`` in the message) unless it is ours or absent."""
    if not path.exists() or path.is_dir():  # a folder is refused by check_writable, which names what to give
        return
    if not path.is_file():
        raise CommandLineError(
            f"{named} exists and is not a regular file (a device, a pipe or a socket); refusing to replace "
            "it with a checkpoint: give a file name"
        )
    if not force:
        try:
            read_checkpoint(path)
        except (CheckpointError, OSError):
            raise CommandLineError(
                f"{named} exists and is not a checkpoint of this course; refusing to replace it (give "
                "another --out, or add --force to replace it)"
            ) from None


def remove_stale_parts(out: Path) -> list[Path]:
    """Remove the temporary files that a killed save of ``out`` or of its resume state left behind; say so."""
    names = (out.name, resume_path(out).name)
    folder = out.parent
    stale = sorted(
        path
        for name in names
        for path in (folder.glob(f".{name}.*{TEMPORARY_SUFFIX}") if folder.is_dir() else [])
        if path.is_file()
    )
    for path in stale:
        path.unlink(missing_ok=True)
    if stale:
        print(
            f"removed {len(stale)} temporary file(s) left by an interrupted save: {', '.join(p.name for p in stale)}",
            file=sys.stderr,
        )
    return stale


def _check_info(info: object) -> tuple[str, str | None, int | None]:
    """(corpus, data folder, limit) from a resume file's ``info``, checked; raises ValueError naming the field."""
    if not isinstance(info, dict):
        raise ValueError("the resume file has no 'info' dict saying which corpus the run trains on")
    corpus, data_dir, limit = info.get("corpus"), info.get("data_dir"), info.get("limit")
    if corpus not in set(CORPUS_NAMES.values()):
        raise ValueError(f"info 'corpus' must be one of {sorted(set(CORPUS_NAMES.values()))}, got {corpus!r}")
    if data_dir is not None and not isinstance(data_dir, str):
        raise ValueError(f"info 'data_dir' must be a folder name or None, got {data_dir!r}")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValueError(f"info 'limit' must be a positive integer or None, got {limit!r}")
    return corpus, data_dir, limit


def _load(corpus_name: str, split: str, data_dir: str | None, download: bool) -> ParallelCorpus:
    """Load one split; missing Multi30k files get advice in command-line terms."""
    if corpus_name == "multi30k" and not download:
        folder, missing = missing_multi30k_files(split, data_dir)
        if missing:
            raise CommandLineError(
                f"Multi30k files {', '.join(missing)} not found in {folder}"
                f"{' (or changed since they were downloaded)' if data_dir is None else ''}. Add --download to "
                "fetch them (checksummed), or point --data-dir (or the environment variable MULTI30K_DIR) at a "
                "folder holding the six task-1 raw files (train, val, test_2016_flickr x de, en, .gz)."
            )
    return load_corpus(corpus_name, split, data_dir, download=download)


def run_train(args: argparse.Namespace) -> int:
    ranks = distributed.ranks_from_environment()  # several under torchrun, else one
    device = distributed.choose_device(args.device, ranks)
    timeout = timedelta(minutes=args.rank_timeout)
    distributed.start(ranks, device, timeout)
    finished = False
    try:
        status = _train(args, ranks, device)
        finished = True
        return status
    except RuntimeError as error:
        if not distributed.timed_out(error):
            raise
        raise CommandLineError(
            f"rank {ranks.rank}: another training process did not answer for {args.rank_timeout:g} minutes "
            f"(--rank-timeout): it stopped or hung; the run ends here, continue with `--resume "
            f"{resume_path(args.out)}`"
        ) from None
    finally:
        distributed.stop(finished)


def resume_path(out: Path) -> Path:
    """Where a run writing ``out`` keeps its resume state: ``runs/m30k.pt`` -> ``runs/m30k.resume.pt``."""
    return out.with_name(f"{out.stem}.resume{out.suffix or '.pt'}")


@dataclass
class _Run:
    """What a training run starts from: its translator, its corpus and the ``info`` its checkpoints carry, and, for
    a resumed run, the training state it continues (None for a fresh one)."""

    translator: Translator
    corpus_name: str
    train_corpus: ParallelCorpus
    val_corpus: ParallelCorpus
    info: dict
    resume: dict | None = None


def _resumed_run(args: argparse.Namespace, device: torch.device) -> _Run:
    """The run that the ``--resume`` file describes: its weights, state, corpus, data folder and limit, checked."""
    flags = ("steps", "epochs", "minutes", "limit", "corpus", "data_dir")
    given = sorted(_overrides(args)) + [flag for flag in flags if getattr(args, flag) is not None]
    if given:
        raise ValueError(f"--resume continues a run as it was set up; drop {', '.join(given)}")
    translator, payload = load_checkpoint(args.resume, device=device)
    if "training" not in payload:
        raise ValueError(f"{args.resume} holds no training state (use the .resume file written beside --out)")
    resume, info = payload["training"], payload.get("info")
    try:
        check_training_state(resume, model=translator.model)
        corpus_name, data_dir, limit = _check_info(info)
    except ValueError as error:
        raise CheckpointError(f"{args.resume}: {error}") from None
    assert isinstance(info, dict), "_check_info refuses anything else"
    train_corpus, val_corpus = _corpora(corpus_name, data_dir, limit, args.download)
    return _Run(translator, corpus_name, train_corpus, val_corpus, info, resume)


def _fresh_run(args: argparse.Namespace, device: torch.device) -> _Run:
    """A new run from the options: the corpus preset and flags, a translator built on the training split."""
    corpus_name, data_dir, limit = CORPUS_NAMES[args.corpus or DEFAULT_CORPUS], args.data_dir, args.limit
    train_corpus, val_corpus = _corpora(corpus_name, data_dir, limit, args.download)
    config = args.config if "config" in args else _train_config(args)
    translator = build_translator(train_corpus, config, device)
    info = {
        "corpus": corpus_name,
        "data_dir": None if data_dir is None else str(Path(data_dir).resolve()),
        "train_pairs": len(train_corpus),
        "limit": limit,
        "parameters": translator.model.num_parameters(),
    }
    return _Run(translator, corpus_name, train_corpus, val_corpus, info)


def _corpora(name: str, data_dir: str | None, limit: int | None, download: bool) -> tuple[ParallelCorpus, ...]:
    """The training split (its first ``limit`` pairs) and the validation split."""
    return _limited(_load(name, "train", data_dir, download), limit), _load(name, "val", data_dir, download)


def _train(args: argparse.Namespace, ranks: distributed.Ranks, device: torch.device) -> int:
    check_out(args.out, args.resume, args.force)  # before minutes of loading and an hour of training
    if ranks.is_main:
        remove_stale_parts(args.out)
    run = _resumed_run(args, device) if args.resume is not None else _fresh_run(args, device)
    translator, train_corpus, info, resume = run.translator, run.train_corpus, run.info, run.resume
    say = ranks.is_main  # one voice and one writer: rank 0
    if say:
        print(
            f"{run.corpus_name}: {len(train_corpus)} training pairs; model of {info['parameters']:,} parameters "
            f"on {device} x {ranks.world_size} process(es); vocabularies {translator.source_tokenizer.vocab_size} "
            f"(de) / {translator.target_tokenizer.vocab_size} (en)"
            + (f"; resuming at step {resume['step']}" if resume else ""),
            file=sys.stderr,
        )

    def keep_best(_model, history) -> None:  # the best weights so far are on disk even if training is cut short
        save_checkpoint(
            args.out, translator, {"best_val_bleu": history.best_score, "best_step": history.best_step}, info
        )

    def keep_state(state: dict) -> None:  # the current weights and everything else a resumed run needs
        save_checkpoint(resume_path(args.out), translator, {"step": state["step"]}, info, training=state)

    history = fit(
        translator,
        train_corpus,
        run.val_corpus,
        steps=args.steps,
        epochs=args.epochs,
        minutes=args.minutes,
        progress=not args.quiet,
        on_best=keep_best,
        accumulate=args.accumulate,
        resume=resume,
        on_state=keep_state,
        state_every_minutes=args.save_minutes,
    )
    if say:
        metrics = {**history.to_dict(), "val_bleu": history.best_score}
        save_checkpoint(args.out, translator, metrics, info)
        print(
            f"best validation BLEU {history.best_score:.2f} at step {history.best_step} of {history.steps_done}"
            f" ({history.seconds:.0f} s); saved {args.out}",
            file=sys.stderr,
        )
    return 0


def run_evaluate(args: argparse.Namespace) -> int:
    translator, payload = load_checkpoint(args.checkpoint, device=distributed.choose_device(args.device))
    info = payload.get("info", {})
    corpus_name = CORPUS_NAMES[args.corpus] if args.corpus else info.get("corpus", "captions")
    data_dir = (
        args.data_dir
        if args.data_dir is not None
        else (info.get("data_dir") if corpus_name == info.get("corpus") else None)
    )
    corpus = _limited(_load(corpus_name, args.split, data_dir, args.download), args.limit)
    start = time.perf_counter()
    scores, _ = evaluate(translator, corpus, beam_size=args.beam)
    seconds = time.perf_counter() - start
    if args.json:
        print(
            json.dumps(
                {
                    **scores.to_dict(),
                    "corpus": corpus_name,
                    "split": args.split,
                    "beam": args.beam,
                    "seconds": round(seconds, 2),
                }
            )
        )
    else:
        print(f"{corpus_name} {args.split}: {scores} [{seconds:.1f} s, beam {args.beam}]")
    return 0


def run_translate(args: argparse.Namespace) -> int:
    if args.input is not None and args.sentences:
        raise ValueError("give sentences as arguments or --input FILE, not both")
    if args.input is None and not args.sentences:
        raise ValueError("nothing to translate: give sentences as arguments or --input FILE ('-' for standard input)")
    sentences = _read_sentences(args.input) if args.input is not None else list(args.sentences)
    translator, _ = load_checkpoint(args.checkpoint, device=distributed.choose_device(args.device))
    # Empty lines stay empty lines, so output line i always translates input line i.
    keep = [i for i, s in enumerate(sentences) if s]
    outputs = [""] * len(sentences)
    if keep:
        translations = translator.translate(
            [sentences[i] for i in keep], beam_size=args.beam, batch_size=args.batch_size
        )
        for i, text in zip(keep, translations, strict=True):
            outputs[i] = text
    sys.stdout.write("".join(f"{line}\n" for line in outputs))
    return 0


def _read_sentences(source: str) -> list[str]:
    """Lines of a UTF-8 file, or of standard input for ``-``, as an editor shows them; errors name the file, the
    line and the encoding, or the character that editors disagree about (:func:`helpers.data.corpus.text_lines`)."""
    name = "standard input" if source == "-" else source
    try:
        if source == "-":
            stream = getattr(sys.stdin, "buffer", None)
            raw = stream.read() if stream is not None else sys.stdin.read().encode("utf-8")
        else:
            raw = Path(source).read_bytes()
    except IsADirectoryError:
        raise CommandLineError(
            f"--input {source} is a folder; expected a UTF-8 text file, one sentence a line"
        ) from None
    except FileNotFoundError:
        raise CommandLineError(f"--input {source}: no such file") from None
    except OSError as error:
        raise CommandLineError(f"cannot read --input {source}: {error.strerror or error}") from None
    hint = "the input must be UTF-8 text (a file saved as Latin-1 or Windows-1252 can be converted with "
    try:  # lines as an editor shows them, or a clear refusal (helpers.data.corpus.text_lines)
        lines = text_lines(raw, name, hint + "`iconv -f latin1 -t utf-8`)")
    except CorpusError as error:
        raise CommandLineError(str(error)) from None
    return [line.strip() for line in lines]


def _limited(corpus: ParallelCorpus, limit: int | None) -> ParallelCorpus:
    if limit is None:
        return corpus
    if limit < 1:  # the parser checks --limit; a resumed run reads it from its checkpoint
        raise ValueError(f"--limit must be positive, got {limit}")
    gold = corpus.alignments[:limit] if corpus.alignments is not None else None
    return ParallelCorpus(corpus.name, corpus.split, corpus.de[:limit], corpus.en[:limit], gold)
