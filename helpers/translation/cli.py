"""The command line: ``python -m helpers.translation train | evaluate | translate``.

python -m helpers.translation train --corpus captions --epochs 3 --out runs/captions.pt
python -m helpers.translation train --corpus multi30k --data-dir ../shared/data/multi30k --minutes 60 --out runs/m30k.pt
python -m helpers.translation evaluate --checkpoint runs/m30k.pt --split test --json
python -m helpers.translation translate --checkpoint runs/m30k.pt "Ein Hund läuft im Schnee."
python -m helpers.translation translate --checkpoint runs/m30k.pt --input sentences.de > sentences.en
python -m helpers.translation train --resume runs/m30k.resume.pt --out runs/m30k.pt     # continue a stopped run
torchrun --standalone --nproc_per_node 2 -m helpers.translation train --corpus multi30k --minutes 30 --out runs/m30k.pt
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path

import torch

from helpers.data import ParallelCorpus, load_corpus
from helpers.translation import distributed
from helpers.translation.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from helpers.translation.config import LESSON_CONFIG, TranslationConfig
from helpers.translation.evaluation import evaluate
from helpers.translation.pipeline import build_translator, fit

#: Model and training settings per corpus (each can be overridden by a flag).
#: captions: the lesson's model, word-level (the course corpus has under 1,000 word types per language).
#: multi30k: real captions need sub-words (BPE) and a wider model; sized for an hour on a 2-core CPU.
PRESETS: dict[str, TranslationConfig] = {
    "captions": replace(LESSON_CONFIG, eval_every=500),
    "multi30k": TranslationConfig(
        tokenizer="bpe",
        vocab_size=6000,
        d_model=256,
        heads=8,
        encoder_layers=3,
        decoder_layers=3,
        feedforward=512,
        dropout=0.1,
        steps=4000,
        batch_tokens=3000,
        lr=1.5e-3,
        warmup_steps=300,
        eval_every=250,
        val_sentences=300,
    ),
}
CORPUS_NAMES = {"captions": "captions", "course": "captions", "multi30k": "multi30k"}


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        return args.run(args)
    except (CheckpointError, FileNotFoundError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m helpers.translation",
        description="Train, evaluate and use a German->English transformer (the course's lesson 06 model).",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="CPU threads for PyTorch (default: PyTorch's choice; 1 is often fastest for the small "
        "captions model on a busy machine)",
    )
    parser.add_argument(
        "--device",
        choices=["auto", "cpu", "cuda"],
        default="auto",
        help="where to run: 'auto' (default) takes a CUDA GPU when PyTorch sees one, else the CPU; "
        "on a GPU, training runs in bfloat16 autocast",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="{train,evaluate,translate}")

    train = commands.add_parser(
        "train",
        help="train a model and save the best checkpoint",
        description="Train on a corpus's training split, validate BLEU on its validation split, "
        "and keep the best weights in --out (rewritten whenever validation improves).",
    )
    train.add_argument(
        "--corpus",
        choices=sorted(CORPUS_NAMES),
        default="captions",
        help="'captions' (alias 'course'): the course's own corpus; 'multi30k': real captions",
    )
    train.add_argument(
        "--data-dir",
        default=None,
        help="folder with the corpus files (default: data/captions, or $MULTI30K_DIR for multi30k)",
    )
    length = train.add_mutually_exclusive_group()
    length.add_argument("--minutes", type=float, help="train for this many minutes of wall-clock time")
    length.add_argument("--epochs", type=int, help="train for this many passes over the training split")
    length.add_argument("--steps", type=int, help="train for this many optimiser steps (default: the preset's)")
    train.add_argument(
        "--out",
        required=True,
        type=Path,
        help="checkpoint file to write (the best weights); the run's state for --resume goes beside it, "
        "in OUT's name with .resume before the suffix",
    )
    train.add_argument(
        "--resume",
        type=Path,
        default=None,
        help="continue the run whose state this file holds (written every --save-minutes, at each validation "
        "and at the end): same model, optimiser, schedule, step and data position, same end",
    )
    train.add_argument(
        "--save-minutes",
        type=float,
        default=5.0,
        help="write the resume state at least this often (default 5), so that a killed run loses little",
    )
    train.add_argument(
        "--accumulate",
        type=int,
        default=1,
        help="batches whose gradients each optimiser step averages (default 1); under torchrun each process "
        "takes this many, so P processes with --accumulate 1 equal one process with --accumulate P",
    )
    train.add_argument("--limit", type=int, default=None, help="use only the first N training pairs (quick trials)")
    for flag, field in [
        ("--tokenizer", "tokenizer"),
        ("--vocab-size", "vocab_size"),
        ("--d-model", "d_model"),
        ("--heads", "heads"),
        ("--encoder-layers", "encoder_layers"),
        ("--decoder-layers", "decoder_layers"),
        ("--feedforward", "feedforward"),
        ("--dropout", "dropout"),
        ("--batch-tokens", "batch_tokens"),
        ("--lr", "lr"),
        ("--warmup-steps", "warmup_steps"),
        ("--eval-every", "eval_every"),
        ("--val-sentences", "val_sentences"),
        ("--seed", "seed"),
    ]:
        kind = type(getattr(TranslationConfig(), field))
        train.add_argument(
            flag,
            dest=field,
            type=kind,
            default=None,
            help=f"override the corpus preset's {field} (captions: {getattr(PRESETS['captions'], field)}, "
            f"multi30k: {getattr(PRESETS['multi30k'], field)})",
        )
    train.add_argument("--quiet", action="store_true", help="no progress bar")
    train.set_defaults(run=run_train)

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
    evaluate_.add_argument("--data-dir", default=None, help="default: the folder used for training")
    evaluate_.add_argument("--beam", type=int, default=1, help="beam size (1 = greedy; 4 = beam search)")
    evaluate_.add_argument("--limit", type=int, default=None, help="score only the first N sentences")
    evaluate_.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object (bleu, chrf, signature, chrf_signature, sentences, ...)",
    )
    evaluate_.set_defaults(run=run_evaluate)

    translate = commands.add_parser(
        "translate",
        help="translate German sentences to English",
        description="Translate sentences given as arguments, or one per line from "
        "--input FILE ('-' for standard input); writes one translation a line.",
    )
    translate.add_argument("sentences", nargs="*", help="German sentences (quote each)")
    translate.add_argument("--checkpoint", required=True, type=Path)
    translate.add_argument("--input", default=None, help="file with one German sentence a line, '-' for standard input")
    translate.add_argument("--beam", type=int, default=1, help="beam size (1 = greedy; 4 = beam search)")
    translate.add_argument("--batch-size", type=int, default=250, help="sentences decoded together")
    translate.set_defaults(run=run_translate)
    return parser


def run_train(args: argparse.Namespace) -> int:
    ranks = distributed.ranks_from_environment()  # several under torchrun, else one
    device = distributed.choose_device(args.device, ranks)
    distributed.start(ranks, device)
    try:
        return _train(args, ranks, device)
    finally:
        distributed.stop()


def resume_path(out: Path) -> Path:
    """Where a run writing ``out`` keeps its resume state: ``runs/m30k.pt`` -> ``runs/m30k.resume.pt``."""
    return out.with_name(f"{out.stem}.resume{out.suffix or '.pt'}")


def _train(args: argparse.Namespace, ranks: distributed.Ranks, device: torch.device) -> int:
    overrides = {
        field: value
        for field, value in vars(args).items()
        if field in TranslationConfig.__dataclass_fields__ and value is not None
    }
    resume = None
    if args.resume is not None:
        given = sorted(overrides) + [flag for flag in ("steps", "epochs", "minutes", "limit") if getattr(args, flag)]
        if given:
            raise ValueError(f"--resume continues a run as it was set up; drop {', '.join(given)}")
        translator, payload = load_checkpoint(args.resume, device=device)
        if "training" not in payload:
            raise ValueError(f"{args.resume} holds no training state (use the .resume file written beside --out)")
        resume, info = payload["training"], payload["info"]
        corpus_name, data_dir, limit = info["corpus"], info["data_dir"], info.get("limit")
    else:
        corpus_name, data_dir, limit = CORPUS_NAMES[args.corpus], args.data_dir, args.limit
    train_corpus = _limited(load_corpus(corpus_name, "train", data_dir), limit)
    val_corpus = load_corpus(corpus_name, "val", data_dir)
    if resume is None:
        translator = build_translator(train_corpus, replace(PRESETS[corpus_name], **overrides), device)
        info = {
            "corpus": corpus_name,
            "data_dir": None if data_dir is None else str(Path(data_dir).resolve()),
            "train_pairs": len(train_corpus),
            "limit": limit,
            "parameters": translator.model.num_parameters(),
        }
    say = ranks.is_main  # one voice and one writer: rank 0
    if say:
        print(
            f"{corpus_name}: {len(train_corpus)} training pairs; model of {info['parameters']:,} parameters "
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
        val_corpus,
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
    corpus = _limited(load_corpus(corpus_name, args.split, data_dir), args.limit)
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
    translator, _ = load_checkpoint(args.checkpoint, device=distributed.choose_device(args.device))
    if args.input is not None:
        with nullcontext(sys.stdin) if args.input == "-" else open(args.input, encoding="utf-8") as handle:
            sentences = [line.strip() for line in handle]
    else:
        sentences = list(args.sentences)
    # Empty lines stay empty lines, so output line i always translates input line i.
    keep = [i for i, s in enumerate(sentences) if s]
    outputs = [""] * len(sentences)
    if keep:
        for i, text in zip(
            keep,
            translator.translate([sentences[i] for i in keep], beam_size=args.beam, batch_size=args.batch_size),
            strict=True,
        ):
            outputs[i] = text
    sys.stdout.write("".join(f"{line}\n" for line in outputs))
    return 0


def _limited(corpus: ParallelCorpus, limit: int | None) -> ParallelCorpus:
    if limit is None:
        return corpus
    if limit < 1:
        raise ValueError(f"--limit must be positive, got {limit}")
    gold = corpus.alignments[:limit] if corpus.alignments is not None else None
    return ParallelCorpus(corpus.name, corpus.split, corpus.de[:limit], corpus.en[:limit], gold)
