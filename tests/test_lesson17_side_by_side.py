"""``benchmarks/lesson17_side_by_side.py``: its table on a made-up log (translator seeds beside LoRA runs, every way
Multi30k can be missing), its count of the words lesson 06's translator does not know, a caption too long recorded
rather than raised, and the committed log being what the script says it measured. No training here: the model is
built untrained and tiny."""

from __future__ import annotations

import importlib.util
import json
from dataclasses import replace
from pathlib import Path

import pytest

from helpers.data.corpus import ParallelCorpus
from helpers.models.translation import build_translator
from helpers.models.translation.config import LESSON_CONFIG, LESSON_STEPS

ROOT = Path(__file__).resolve().parents[1]
LOG = ROOT / "benchmarks" / "lesson17_side_by_side.jsonl"


@pytest.fixture(scope="module")
def side_by_side():
    spec = importlib.util.spec_from_file_location(
        "lesson17_side_by_side", ROOT / "benchmarks" / "lesson17_side_by_side.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _machine(load: float) -> dict:
    return {"loadavg": [load, load, load], "torch_threads": 2, "omp_num_threads": "2", "cpus": 2}


def _translator_row(seed: int, multi30k: dict | None = None, status: str = "present") -> dict:
    row = {
        "model": "translator", "seed": seed, "threads": 1, "steps": 2000, "parameters": 302953, "trainable": 302953,
        "train_cpu_s": 50.4, "train_wall_s": 75.6, "issue": {"bleu": 100.0}, "held_out": {"bleu": 99.24},
        "multi30k_status": status, "machine_start": _machine(2.9), "machine_end": _machine(3.7),
    }  # fmt: skip
    if multi30k is not None:
        row["multi30k"] = multi30k
    return row


def _lora_row(targets: list[str], rank: int, seed: int, after_multi30k: float | None, captions: int, status: str):
    after = {"issue": {"bleu": 47.08}, "held_out": {"bleu": 53.36}}
    if after_multi30k is not None:
        after["multi30k"] = {"bleu": after_multi30k}
    return {
        "settings": {"targets": targets, "rank": rank, "seed": seed, "steps": 150, "issue_captions": 60,
                     "held_out": "100:400", "multi30k_captions": captions},
        "trainable": 460800, "parameters": 134515008, "step_s": {"total": 270.2}, "after": after,
        "multi30k": status, "machine_start": _machine(2.0), "machine_end": _machine(1.8),
    }  # fmt: skip


def test_the_table_puts_each_translator_seed_beside_each_lora_run(side_by_side):
    translators = [
        _translator_row(0, {"bleu": 5.94, "unknown_tokens": 350, "source_tokens": 1256}),
        _translator_row(1, status="absent (/nowhere)"),
        _translator_row(2, {"error": "sentence of 140 tokens (with BOS and EOS) exceeds the model's max_len=128"}),
    ]
    lora = [
        _lora_row(["q", "v"], 8, 0, 9.61, 100, "present"),
        _lora_row(["o"], 13, 1, None, 0, "present"),  # --multi30k 0: there, not scored
        _lora_row(["k"], 20, 0, None, 100, "checksum mismatch: ['test_2016_flickr.de.gz']"),
    ]
    lines = side_by_side.table(translators, lora).splitlines()
    assert len(lines) == 2 + 3 + 3
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    assert len(lines[1].strip("|").split("|")) == len(header)
    rows = [dict(zip(header, (c.strip() for c in line.strip("|").split("|")), strict=True)) for line in lines[2:]]
    first, absent, failed, qv, o, k = rows
    assert first["model"] == "lesson 06's translator" and first["seed"] == "0" and first["threads"] == "1"
    assert first["parameters trained"] == first["parameters in the model"] == "302,953"
    assert (first["training s, CPU"], first["training s, wall"]) == ("50", "76")
    assert (first["BLEU first 60 test"], first["BLEU test 100–399"]) == ("100.0", "99.2")
    assert first["Multi30k BLEU (first 100 test)"] == "5.9 (28 % of source words unknown)"
    assert first["load avg"] == "2.9/3.7"
    assert absent["Multi30k BLEU (first 100 test)"] == "absent (/nowhere)"
    assert failed["Multi30k BLEU (first 100 test)"].startswith("failed: sentence of 140 tokens")
    assert qv["model"] == "SmolLM2 + LoRA" and qv["targets, rank"] == "q,v, r 8" and qv["threads"] == "2"
    assert (qv["parameters trained"], qv["parameters in the model"], qv["steps"]) == ("460,800", "134,515,008", "150")
    assert (qv["training s, CPU"], qv["training s, wall"]) == ("–", "270")
    assert qv["Multi30k BLEU (first 100 test)"] == "9.6"
    assert o["Multi30k BLEU (first 100 test)"] == "not run"
    assert k["Multi30k BLEU (first 100 test)"].startswith("checksum mismatch")


def test_unknown_words_are_counted_and_a_too_long_caption_is_recorded(side_by_side, one_torch_thread):
    train = ParallelCorpus("tiny", "train", ["Ein Mann läuft.", "Eine Frau liest."], ["A man runs.", "A woman reads."])
    translator = build_translator(train, replace(LESSON_CONFIG, max_len=8), device="cpu")  # untrained
    counted = side_by_side.unknown_words(translator, ["Ein Hund läuft.", "Eine Frau liest."])
    assert (counted["source_tokens"], counted["unknown_tokens"], counted["captions_with_unknown"]) == (8, 1, 1)
    assert counted["first_source_tokens"] == ["Ein", "<unk>", "läuft", "."]

    short = ParallelCorpus("m", "test", ["Ein Hund läuft."], ["A dog runs."])
    scored = side_by_side.score_multi30k(translator, short)
    assert scored["sentences"] == 1 and scored["unknown_tokens"] == 1 and "bleu" in scored

    long = ParallelCorpus("m", "test", ["Ein Mann läuft und läuft und läuft und läuft."], ["A man runs."])
    recorded = side_by_side.score_multi30k(translator, long)
    assert "exceeds the model's max_len=8" in recorded["error"] and recorded["unknown_tokens"] == 3


def test_the_committed_log_is_lesson_06s_training():
    runs = [json.loads(line) for line in LOG.read_text(encoding="utf-8").splitlines() if line.strip()]
    latest = [r for r in runs if r["fingerprint"] == runs[-1]["fingerprint"]]
    assert sorted(r["seed"] for r in latest) == [0, 1, 2]
    for run in latest:
        assert run["model"] == "translator" and run["threads"] == 1
        assert run["steps"] == run["steps_taken"] == LESSON_STEPS
        assert run["trainable"] == run["parameters"], "lesson 06 trains every parameter"
        assert (run["issue"]["sentences"], run["held_out"]["sentences"]) == (60, 300)
        if run["multi30k_status"] == "present":
            assert run["multi30k"]["sentences"] == 100
        else:
            assert "multi30k" not in run
