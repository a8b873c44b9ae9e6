"""Text read line by line as an editor shows it (helpers.data.corpus.text_lines), or refused naming the character.

Every reader of lines in the course goes through it: the corpus files and gold alignments (``load_corpus``) and the
translator's ``--input`` (a file or standard input). A line ends in ``\\n``, ``\\r\\n``, or a lone ``\\r`` in a file
that uses nothing else (an old Mac file). The other characters ``str.splitlines`` splits on, which editors and
line tools disagree about, and a stray ``\\r`` among ``\\n`` lines, are refused with the file, line and character.
"""

from __future__ import annotations

import gzip
import io
import re
import shutil
import sys
from pathlib import Path

import pytest

from helpers.data.corpus import CorpusError, load_corpus, text_lines
from helpers.models.translation import cli

CAPTIONS_FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "captions"
MULTI30K_FIXTURE = CAPTIONS_FIXTURE.parent / "multi30k"
SENTENCES = ["Ein Hund läuft im Park.", "Im Park spielt ein kleines Mädchen.", "Eine Frau steigt in den Bus ein."]

# Each character str.splitlines splits on beyond \n and \r, with the words that name it.
OTHER_BREAKS = {
    "\x0b": "a vertical tab (U+000B)",
    "\x0c": "a form feed (U+000C)",
    "\x1c": "a file separator (U+001C)",
    "\x1d": "a group separator (U+001D)",
    "\x1e": "a record separator (U+001E)",
    "\x85": "a next-line character (U+0085, NEL)",
    "\u2028": "a line separator (U+2028)",
    "\u2029": "a paragraph separator (U+2029)",
}


def test_the_table_covers_every_character_splitlines_splits_on():
    splits = {chr(c) for c in range(sys.maxunicode + 1) if len(f"a{chr(c)}b".splitlines()) == 2}
    assert splits == {"\n", "\r", *OTHER_BREAKS}


@pytest.mark.parametrize("end", ["\n", "\r\n", "\r"], ids=["unix", "windows", "old mac"])
@pytest.mark.parametrize("last", [True, False], ids=["ending", "unended"])
def test_each_kind_of_line_end_gives_the_lines_an_editor_shows(end, last):
    raw = (end.join(SENTENCES) + (end if last else "")).encode()
    assert text_lines(raw, "f") == SENTENCES


def test_empty_lines_and_a_byte_order_mark_are_kept_as_an_editor_shows_them():
    assert text_lines(b"\xef\xbb\xbfa\r\rb\r", "f") == ["a", "", "b"]
    assert text_lines(b"a\r\n\r\nb", "f") == ["a", "", "b"]
    assert text_lines(b"", "f") == []


@pytest.mark.parametrize("character", OTHER_BREAKS, ids=[f"U+{ord(c):04X}" for c in OTHER_BREAKS])
def test_another_line_break_is_refused_naming_the_character_and_the_line(character):
    raw = f"{SENTENCES[0]}\r\n{SENTENCES[1]}{character}{SENTENCES[2]}\r\n".encode()
    with pytest.raises(CorpusError) as error:
        text_lines(raw, "train.de")
    assert str(error.value).startswith(f"train.de: line 2 holds {OTHER_BREAKS[character]}, which some programs")


@pytest.mark.parametrize("others", ["\n", "\r\n"])
def test_a_stray_carriage_return_among_line_feeds_is_refused_naming_its_line(others):
    raw = f"{SENTENCES[0]}{others}{SENTENCES[1]}\r{SENTENCES[2]}{others}".encode()
    with pytest.raises(CorpusError, match=r"^f: line 2 ends in a carriage return alone \(\\r\), but other lines"):
        text_lines(raw, "f")


def test_a_line_that_is_not_utf8_is_counted_as_an_editor_counts():
    with pytest.raises(CorpusError, match=r"^f: line 3 is not valid UTF-8 \(byte 0xe4\); say what to do$"):
        text_lines("a\rb\r\xe4".encode("latin-1"), "f", "say what to do")


# --------------------------------------------------------------------------------------------- the corpus
def copy_captions(tmp_path: Path) -> Path:
    folder = tmp_path / "captions"
    shutil.copytree(CAPTIONS_FIXTURE, folder)
    return folder


@pytest.mark.parametrize("name", ["train.de", "train.en", "train.align"])
def test_an_old_mac_corpus_file_is_read_line_by_line(tmp_path, name):
    folder = copy_captions(tmp_path)
    expected = load_corpus("captions", "train", data_dir=folder)
    path = folder / name
    path.write_bytes(path.read_bytes().replace(b"\n", b"\r"))
    corpus = load_corpus("captions", "train", data_dir=folder)
    assert (corpus.de, corpus.en, corpus.alignments) == (expected.de, expected.en, expected.alignments)


@pytest.mark.parametrize("character", OTHER_BREAKS, ids=[f"U+{ord(c):04X}" for c in OTHER_BREAKS])
@pytest.mark.parametrize("name", ["train.de", "train.align"])
def test_a_corpus_file_holding_another_line_break_is_refused_naming_file_line_and_character(tmp_path, name, character):
    folder = copy_captions(tmp_path)
    path = folder / name
    lines = path.read_text(encoding="utf-8").split("\n")
    lines[1] = lines[1].replace(" ", character, 1)  # two sentences (or pairs) in one line, to splitlines
    path.write_text("\n".join(lines), encoding="utf-8")
    with pytest.raises(CorpusError) as error:
        load_corpus("captions", "train", data_dir=folder)
    assert f"{name}: line 2 holds {OTHER_BREAKS[character]}" in str(error.value)


@pytest.mark.parametrize(("end", "refused"), [("\r", None), ("\u2029", "a paragraph separator (U+2029)")])
def test_multi30k_files_gzipped_are_read_through_the_same_reader(tmp_path, end, refused):
    folder = tmp_path / "multi30k"
    shutil.copytree(MULTI30K_FIXTURE, folder)
    expected = load_corpus("multi30k", "val", data_dir=folder)
    path = folder / "val.en.gz"
    path.write_bytes(gzip.compress(gzip.decompress(path.read_bytes()).replace(b"\n", end.encode())))
    if refused is None:
        assert load_corpus("multi30k", "val", data_dir=folder).en == expected.en
    else:
        with pytest.raises(CorpusError, match=rf"val\.en\.gz: line 1 holds {re.escape(refused)}"):
            load_corpus("multi30k", "val", data_dir=folder)


# --------------------------------------------------------------------------------------------- the translator
class Upper:
    """Stands for a trained translator: each sentence in capitals."""

    def translate(self, sentences, beam_size, batch_size):
        return [sentence.upper() for sentence in sentences]


def translated(monkeypatch, capsys, source: str) -> tuple[int, list[str], str]:
    monkeypatch.setattr(cli, "load_checkpoint", lambda path, device: (Upper(), None))
    status = cli.main(["translate", "--checkpoint", "unused.pt", "--input", source])
    captured = capsys.readouterr()
    return status, captured.out.split("\n")[:-1], captured.err


@pytest.mark.parametrize("end", ["\r", "\r\n", "\n"], ids=["old mac", "windows", "unix"])
def test_translator_input_gives_one_output_line_per_line_an_editor_shows(monkeypatch, capsys, tmp_path, end):
    path = tmp_path / "in.de"
    path.write_bytes(end.join(SENTENCES).encode())
    status, out, _ = translated(monkeypatch, capsys, str(path))
    assert status == 0 and out == [sentence.upper() for sentence in SENTENCES]


@pytest.mark.parametrize("character", OTHER_BREAKS, ids=[f"U+{ord(c):04X}" for c in OTHER_BREAKS])
def test_translator_input_holding_another_line_break_is_refused_naming_it(monkeypatch, capsys, tmp_path, character):
    path = tmp_path / "in.de"
    path.write_text(f"{SENTENCES[0]}{character}{SENTENCES[1]}\n", encoding="utf-8")
    status, out, err = translated(monkeypatch, capsys, str(path))
    assert status == 2 and out == []
    assert f"{path}: line 1 holds {OTHER_BREAKS[character]}" in err


def test_translator_standard_input_with_a_stray_carriage_return_is_refused(monkeypatch, capsys):
    text = f"{SENTENCES[0]}\n{SENTENCES[1]}\r{SENTENCES[2]}\n".encode()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text), encoding="utf-8"))
    status, out, err = translated(monkeypatch, capsys, "-")
    assert status == 2 and out == []
    assert "standard input: line 2 ends in a carriage return alone" in err
