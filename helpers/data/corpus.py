"""Parallel German–English corpora: the course's own ``captions`` corpus and Multi30k, behind one loader.

Both corpora use Multi30k's layout: one sentence per line, line i of ``<split>.de`` translating line i
of ``<split>.en``, optionally gzip-compressed (``.gz``). The course's corpus adds ``<split>.align``: gold
word alignments in Pharaoh format, one line per pair, ``i-j`` meaning German whitespace token i is
aligned with English whitespace token j (both counted from 0).

    >>> corpus = load_corpus("captions", "train")                  # committed under data/captions
    >>> real = load_corpus("multi30k", "test", data_dir="/path/to/multi30k")   # a local folder
    >>> real = load_corpus("multi30k", "test", download=True)      # or a checksummed download

Every problem with a file (missing, misaligned, empty line, bad encoding, truncated gzip, bad checksum, a
character that editors disagree on as a line end) raises an error that names the file, so a learner knows which
file to fix or fetch again. Lines are read as an editor shows them (:func:`text_lines`).
"""

from __future__ import annotations

import gzip
import hashlib
import http.client
import os
import re
import time
import urllib.error
import urllib.request
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from tqdm.auto import tqdm

from helpers.tools.files import TEMPORARY_SUFFIX, atomic_target

Alignment = list[tuple[int, int]]  # (German token index, English token index) pairs of one sentence pair

CORPORA = ("captions", "multi30k")
SPLITS = ("train", "val", "test")
LANGUAGES = ("de", "en")

#: The committed course corpus: ``<repo>/data/captions``.
CAPTIONS_DIR = Path(__file__).resolve().parents[2] / "data" / "captions"

#: Multi30k task-1 raw files, pinned to one commit of the dataset's public repository.
MULTI30K_COMMIT = "a3d2e0d26b56f3846f66a952536ffed4e401d05a"
MULTI30K_URL = f"https://github.com/multi30k/dataset/raw/{MULTI30K_COMMIT}/data/task1/raw"
#: Our split names → Multi30k's file stems ("test" is the 2016 Flickr test set).
MULTI30K_FILE_SPLITS = {"train": "train", "val": "val", "test": "test_2016_flickr"}
#: SHA-256 of each file at MULTI30K_COMMIT: a download that differs is rejected.
MULTI30K_SHA256 = {
    "train.de.gz": "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
    "train.en.gz": "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
    "val.de.gz": "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
    "val.en.gz": "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
    "test_2016_flickr.de.gz": "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
    "test_2016_flickr.en.gz": "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
}
#: Size in bytes of each file at MULTI30K_COMMIT: a download is cut off once it runs past :func:`size_bound`.
MULTI30K_SIZES = {
    "train.de.gz": 637_044,
    "train.en.gz": 568_929,
    "val.de.gz": 24_681,
    "val.en.gz": 21_650,
    "test_2016_flickr.de.gz": 22_890,
    "test_2016_flickr.en.gz": 21_077,
}
#: Seconds to wait for the server: short, so that a machine without network fails fast.
DOWNLOAD_TIMEOUT = 10.0
#: Seconds one file's whole download may take: a server that trickles bytes cannot hold a learner for ever
#: (the largest file, 2.6 MB, needs ~4 KB/s to arrive in time).
DOWNLOAD_DEADLINE = 600.0


def size_bound(pinned_size: int) -> int:
    """The most bytes a download of a file whose pinned size is ``pinned_size`` may send: 10 % + 64 KiB above it.

    A file a little off its pinned size still arrives whole and is refused by its checksum, with both hashes;
    an endless or wrong response stops here instead of filling the disk.
    """
    return pinned_size + pinned_size // 10 + (1 << 16)


class CorpusError(ValueError):
    """A corpus file exists but its content is unusable (the message names the file and line)."""


class DownloadError(OSError):
    """A Multi30k file could not be downloaded (the message says how to use a local folder instead)."""


class ChecksumError(DownloadError):
    """A downloaded file's SHA-256 differs from the pinned one; nothing was kept."""


# ---------------------------------------------------------------------------------------------
# The corpus object
# ---------------------------------------------------------------------------------------------
@dataclass
class ParallelCorpus:
    """Aligned sentence pairs of one split: ``de[i]`` translates ``en[i]``.

    ``alignments[i]`` (course corpus only, else ``None``) lists the gold word alignment of pair i as
    ``(German token index, English token index)`` pairs over *whitespace* tokens: ``de[i].split()`` and
    ``en[i].split()``.
    """

    name: str
    split: str
    de: list[str]
    en: list[str]
    alignments: list[Alignment] | None = None

    def __post_init__(self) -> None:
        if len(self.de) != len(self.en):
            raise CorpusError(f"{self.name}/{self.split}: {len(self.de)} German but {len(self.en)} English sentences")
        if self.alignments is not None and len(self.alignments) != len(self.de):
            raise CorpusError(
                f"{self.name}/{self.split}: {len(self.alignments)} alignment lines for {len(self.de)} sentence pairs"
            )

    def __len__(self) -> int:
        return len(self.de)

    def __getitem__(self, index: int | slice) -> tuple[str, str] | ParallelCorpus:
        """The pair ``(German, English)`` at ``index``; a slice gives a smaller corpus (``corpus[:1000]``)."""
        if isinstance(index, slice):
            gold = self.alignments[index] if self.alignments is not None else None
            return ParallelCorpus(self.name, self.split, self.de[index], self.en[index], gold)
        return self.de[index], self.en[index]

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter(zip(self.de, self.en, strict=True))

    def pairs(self) -> list[tuple[str, str]]:
        """All ``(German, English)`` pairs, in file order."""
        return list(zip(self.de, self.en, strict=True))

    def __repr__(self) -> str:
        gold = "with" if self.alignments is not None else "without"
        return f"ParallelCorpus(name={self.name!r}, split={self.split!r}, {len(self)} pairs, {gold} gold alignments)"


# ---------------------------------------------------------------------------------------------
# Reading files
# ---------------------------------------------------------------------------------------------
def read_lines(path: str | Path) -> list[str]:
    """The lines of a UTF-8 text file, plain or gzip (by the ``.gz`` suffix), stripped of surrounding spaces.

    Raises :class:`CorpusError` naming the file (and line) for bad encoding, a truncated or corrupt
    gzip stream, or an empty line (a sentence pair with nothing in it would silently shift nothing but
    teach the model to translate nothing).
    """
    path = Path(path)
    stripped = [line.strip() for line in _read_text_lines(path)]
    if not stripped:
        raise CorpusError(f"{path}: the file is empty; expected one sentence per line")
    for number, line in enumerate(stripped, start=1):
        if not line:
            raise CorpusError(f"{path}: line {number} is empty; every line must hold one sentence")
    return stripped


def _read_text_lines(path: Path) -> list[str]:
    """Lines of a UTF-8 file, gunzipped if its name ends in ``.gz``; errors name the file (and line)."""
    try:
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    except (EOFError, gzip.BadGzipFile, zlib.error) as error:
        raise CorpusError(f"{path}: truncated or corrupt gzip file ({error}); download or copy it again") from error
    return text_lines(raw, str(path), "corpus files must be UTF-8 text")


# Line ends as every editor shows them: "\r\n" (Windows), "\n" (Unix), and a lone "\r" (classic Mac OS) in a file
# that ends its lines with nothing else.
_LINE_END = re.compile(r"\r\n|\r|\n")
_LONE_CARRIAGE_RETURN = re.compile(r"\r(?!\n)")
# What Python's str.splitlines also splits on, but editors and line-based tools (wc -l, paste, sacreBLEU) do not
# agree on: some show a line end, some a symbol, some nothing. A file holding one is refused, naming it.
_OTHER_BREAKS = {
    "\x0b": "a vertical tab (U+000B)",
    "\x0c": "a form feed (U+000C)",
    "\x1c": "a file separator (U+001C)",
    "\x1d": "a group separator (U+001D)",
    "\x1e": "a record separator (U+001E)",
    "\x85": "a next-line character (U+0085, NEL)",
    "\u2028": "a line separator (U+2028)",
    "\u2029": "a paragraph separator (U+2029)",
}
_OTHER_BREAK = re.compile("[" + "".join(_OTHER_BREAKS) + "]")


def _line_of(text: str, position: int) -> int:
    """The number (from 1) of the line, as an editor counts them, that holds ``text[position]``."""
    return len(_LINE_END.findall(text, 0, position)) + 1


def text_lines(raw: bytes, name: str, not_utf8: str = "the file must be UTF-8 text") -> list[str]:
    r"""The lines of UTF-8 text ``raw`` (a byte-order mark first is dropped), as a text editor shows them.

    A line ends in ``"\n"``, ``"\r\n"``, or a lone ``"\r"`` where the file ends its lines in nothing else (an old
    Mac file); the ends are not part of the lines, and the last line's end is optional. Raises
    :class:`CorpusError`, naming ``name``, the line (counted as an editor counts) and the character, for bytes that
    are not UTF-8 (``not_utf8`` says what to do), a lone ``"\r"`` in a file whose other lines end in ``"\n"``
    (editors disagree: a line end to some, a symbol to others), and the other characters Python's
    ``str.splitlines`` splits on: U+2028, U+2029, U+000B, U+000C, U+001C-U+001E and U+0085. Every reader of text
    line by line in the course (corpus files, gold alignments, the translator's ``--input``) reads through this
    one, so a sentence is never silently merged with the next or split in two.
    """
    try:
        text = raw.decode("utf-8-sig")  # -sig: a byte-order mark (Windows editors add one) is not part of line 1
    except UnicodeDecodeError as error:
        line_number = len(_LINE_END.findall(raw[: error.start].decode("utf-8", "replace"))) + 1
        raise CorpusError(
            f"{name}: line {line_number} is not valid UTF-8 (byte {raw[error.start]:#04x}); {not_utf8}"
        ) from error
    odd = _OTHER_BREAK.search(text)
    if odd is not None:
        raise CorpusError(
            f"{name}: line {_line_of(text, odd.start())} holds {_OTHER_BREAKS[odd.group()]}, which some programs "
            "read as a line end and others do not; replace it with a space (or with a line end, where a sentence "
            "ends there)"
        )
    lone = _LONE_CARRIAGE_RETURN.search(text)
    if lone is not None and "\n" in text:
        raise CorpusError(
            f"{name}: line {_line_of(text, lone.start())} ends in a carriage return alone (\\r), but other lines end "
            "in a line feed (\\n): editors disagree on whether it ends the line. Save the file with one kind of line "
            "end (`mac2unix FILE` converts an old Mac file; otherwise remove the stray \\r)"
        )
    lines = _LINE_END.split(text)
    if lines and lines[-1] == "":
        lines.pop()  # the end of the last line
    return lines


_ALIGNMENT_PAIR = re.compile(r"(\d+)-(\d+)")
_ALIGNMENT_LINE = re.compile(r"\s*(?:\d+-\d+(?:\s+|\Z))*")  # pairs separated by whitespace, nothing else


def parse_alignment(line: str) -> Alignment:
    """Pharaoh ``"0-0 1-2 2-1"`` → ``[(0, 0), (1, 2), (2, 1)]``; raises ValueError on anything else."""
    if _ALIGNMENT_LINE.fullmatch(line):  # one regex per line: the training split has ~250,000 pairs
        return [(int(i), int(j)) for i, j in _ALIGNMENT_PAIR.findall(line)]
    bad = next(item for item in line.split() if not _ALIGNMENT_PAIR.fullmatch(item))
    raise ValueError(f"expected 'i-j' with non-negative integers, got {bad!r}")


def read_alignments(path: str | Path, de: list[str], en: list[str]) -> list[Alignment]:
    """Gold alignments from a Pharaoh file, checked against the whitespace tokens of ``de`` and ``en``.

    Unlike sentence files, an alignment line may be empty (a pair with no aligned words).
    """
    path = Path(path)
    lines = _read_text_lines(path)
    if len(lines) != len(de):
        raise CorpusError(
            f"{path}: {len(lines)} lines, but the sentence files have {len(de)}; they must match line for line"
        )
    alignments = []
    for number, (line, source, target) in enumerate(zip(lines, de, en, strict=True), start=1):
        try:
            pairs = parse_alignment(line)
        except ValueError as error:
            raise CorpusError(f"{path}: line {number}: {error}") from error
        n_de, n_en = len(source.split()), len(target.split())
        for i, j in pairs:
            if i >= n_de or j >= n_en:
                raise CorpusError(
                    f"{path}: line {number}: alignment {i}-{j} is out of range for "
                    f"{n_de} German and {n_en} English tokens"
                )
        alignments.append(pairs)
    return alignments


def _find_file(folder: Path, stem: str) -> Path | None:
    """``folder/stem`` or ``folder/stem.gz``, whichever exists (plain first)."""
    for candidate in (folder / stem, folder / f"{stem}.gz"):
        if candidate.is_file():
            return candidate
    return None


def read_parallel(folder: str | Path, file_split: str, name: str, split: str, alignments: bool) -> ParallelCorpus:
    """Read ``<file_split>.de`` / ``.en`` (plain or ``.gz``) and, if ``alignments``, ``<file_split>.align``."""
    folder = Path(folder)
    paths = {}
    for language in LANGUAGES:
        path = _find_file(folder, f"{file_split}.{language}")
        if path is None:
            raise FileNotFoundError(f"{folder}: no {file_split}.{language} or {file_split}.{language}.gz")
        paths[language] = path
    de, en = read_lines(paths["de"]), read_lines(paths["en"])
    if len(de) != len(en):
        raise CorpusError(
            f"misaligned files: {paths['de']} has {len(de)} lines but {paths['en']} has {len(en)}; "
            "line i of each must translate the other"
        )
    gold = None
    if alignments:
        align_path = _find_file(folder, f"{file_split}.align")
        if align_path is None:
            raise FileNotFoundError(f"{folder}: no {file_split}.align (gold alignments)")
        gold = read_alignments(align_path, de, en)
    return ParallelCorpus(name=name, split=split, de=de, en=en, alignments=gold)


# ---------------------------------------------------------------------------------------------
# Multi30k: local folder or checksummed download
# ---------------------------------------------------------------------------------------------
def default_cache_dir() -> Path:
    """Where downloads go: ``$ATTENTION_COURSE_CACHE``, else ``$XDG_CACHE_HOME/attention-course``,
    else ``~/.cache/attention-course``."""
    if os.environ.get("ATTENTION_COURSE_CACHE"):
        return Path(os.environ["ATTENTION_COURSE_CACHE"])
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "attention-course"


def multi30k_files(splits: tuple[str, ...] = SPLITS) -> list[str]:
    """File names of the given splits, e.g. ``["test_2016_flickr.de.gz", "test_2016_flickr.en.gz"]``."""
    return [f"{MULTI30K_FILE_SPLITS[_check_split(split)]}.{language}.gz" for split in splits for language in LANGUAGES]


def multi30k_dir(data_dir: str | Path | None = None) -> Path:
    """The folder the loader reads Multi30k from: ``data_dir``, else ``$MULTI30K_DIR``, else the cache."""
    if data_dir is not None:
        return Path(data_dir).expanduser()
    if os.environ.get("MULTI30K_DIR"):
        return Path(os.environ["MULTI30K_DIR"]).expanduser()
    return default_cache_dir() / "multi30k"


def sha256_of(path: str | Path) -> str:
    """Hex SHA-256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


_LOCAL_FOLDER_HINT = (
    "To work offline, copy the six Multi30k task-1 raw files (train, val, test_2016_flickr × de, en, .gz) "
    "into a folder and pass load_corpus('multi30k', split, data_dir='that/folder'), "
    "or set the environment variable MULTI30K_DIR to it."
)


def missing_multi30k_files(split: str, data_dir: str | Path | None = None) -> tuple[Path, list[str]]:
    """The folder :func:`load_corpus` would read ``split`` from, and the Multi30k files missing there.

    In the download cache (no ``data_dir``, no ``$MULTI30K_DIR``) a file whose SHA-256 is no longer the
    pinned one counts as missing: a cached download is checked every time it is used, not only once.
    """
    folder = multi30k_dir(data_dir)
    checked = data_dir is None and not os.environ.get("MULTI30K_DIR")
    missing = []
    for file_name in multi30k_files((split,)):
        found = _find_file(folder, file_name.removesuffix(".gz"))
        if found is None or (checked and not _matches_pinned(found, file_name)):
            missing.append(file_name)
    return folder, missing


def _matches_pinned(path: Path, file_name: str, checksums: Mapping[str, str] | None = None) -> bool:
    """Whether ``path`` holds exactly the pinned bytes of ``file_name`` (a plain file never does)."""
    checksums = MULTI30K_SHA256 if checksums is None else checksums
    return path.name == file_name and sha256_of(path) == checksums[file_name]


def _remove_stale_partials(folder: Path, file_name: str, older_than_s: float) -> None:
    """Delete ``.<file_name>.*.part`` left by a killed download (older than any download still running)."""
    now = time.time()
    for partial in folder.glob(f".{file_name}.*{TEMPORARY_SUFFIX}"):
        try:
            if now - partial.stat().st_mtime > older_than_s:
                partial.unlink()
        except FileNotFoundError:  # another process cleaned it up first
            pass


def download_multi30k(
    cache_dir: str | Path | None = None,
    splits: tuple[str, ...] = SPLITS,
    *,
    base_url: str | None = None,
    checksums: Mapping[str, str] | None = None,
    sizes: Mapping[str, int] | None = None,
    timeout: float | None = None,
    deadline: float | None = None,
    clock: Callable[[], float] = time.monotonic,
    progress: bool = True,
) -> Path:
    """Download the Multi30k files of ``splits`` into ``cache_dir`` (default: the cache), checking SHA-256.

    Files already there with the right checksum are kept. Each file is written to a temporary file in
    the same folder, flushed to disk, checked, and only then renamed into place, so an interrupted or
    corrupt download never leaves a half-written file under the real name; temporary files that a killed
    download left behind are deleted once they are older than the deadline (no live download can be).
    ``timeout`` bounds each wait for the server, ``deadline`` the whole download of one file (in seconds of
    ``clock``), and ``size_bound(sizes[file])`` the bytes one file may send. ``base_url`` (a mirror),
    ``checksums``, ``sizes``, ``timeout`` and ``deadline`` default to this module's ``MULTI30K_URL``,
    ``MULTI30K_SHA256``, ``MULTI30K_SIZES``, ``DOWNLOAD_TIMEOUT`` and ``DOWNLOAD_DEADLINE``, read at call
    time so that tests can point them at a local server. Returns the folder.

    Raises :class:`ChecksumError` (nothing kept) on a mismatch and :class:`DownloadError` when the server
    cannot be reached, answers with an error, is too slow or sends more than the bound; every message says
    how to use a local folder instead.
    """
    base_url = MULTI30K_URL if base_url is None else base_url
    checksums = MULTI30K_SHA256 if checksums is None else checksums
    sizes = MULTI30K_SIZES if sizes is None else sizes
    timeout = DOWNLOAD_TIMEOUT if timeout is None else timeout
    deadline = DOWNLOAD_DEADLINE if deadline is None else deadline
    folder = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir() / "multi30k"
    folder.mkdir(parents=True, exist_ok=True)
    for file_name in multi30k_files(splits):
        _remove_stale_partials(folder, file_name, older_than_s=deadline + timeout)
        target = folder / file_name
        if target.is_file() and _matches_pinned(target, file_name, checksums):
            continue
        url = f"{base_url.rstrip('/')}/{file_name}"
        limits = _Limits(timeout, deadline, sizes[file_name], clock)
        _download_file(url, target, checksums[file_name], limits, progress)
    return folder


@dataclass(frozen=True)
class _Limits:
    """What one file's download may take: ``timeout`` s per wait, ``deadline`` s of ``clock`` in all, and
    at most ``size_bound(pinned_size)`` bytes."""

    timeout: float
    deadline: float
    pinned_size: int
    clock: Callable[[], float]


def _download_file(url: str, target: Path, expected_sha256: str, limits: _Limits, progress: bool) -> None:
    """Fetch ``url`` into ``target`` atomically, keeping it only if its SHA-256 is ``expected_sha256``."""
    with atomic_target(target) as temporary, open(temporary, "wb") as out:
        actual = _fetch(url, out, limits, progress, label=target.name)
        out.flush()
        if actual != expected_sha256:  # raising inside the block deletes the temporary file
            raise ChecksumError(
                f"checksum mismatch for {target.name} from {url}: expected SHA-256 {expected_sha256}, "
                f"got {actual}; the download was deleted. {_LOCAL_FOLDER_HINT}"
            )


def _fetch(url: str, out, limits: _Limits, progress: bool, label: str) -> str:
    """Stream ``url`` into the open binary file ``out`` within ``limits``; return its SHA-256.

    Every network failure, and a response too slow or too long, becomes a :class:`DownloadError` that says
    how to work from a local folder.
    """
    digest = hashlib.sha256()
    received = 0
    bound = size_bound(limits.pinned_size)
    pinned = f"for {label}, whose pinned size is {limits.pinned_size}; nothing was kept. {_LOCAL_FOLDER_HINT}"
    give_up_at = limits.clock() + limits.deadline
    try:
        with urllib.request.urlopen(url, timeout=limits.timeout) as response:
            total = int(response.headers.get("Content-Length") or 0) or None
            if total is not None and total > bound:
                raise DownloadError(f"could not download {url}: the server announced {total} bytes {pinned}")
            with tqdm(total=total, unit="B", unit_scale=True, desc=label, disable=not progress) as bar:
                # read1 returns whatever has arrived; read(n) would wait for n bytes, past the deadline.
                for block in iter(lambda: response.read1(1 << 16), b""):
                    if received + len(block) > bound:
                        raise DownloadError(
                            f"could not download {url}: the server sent more than {bound} bytes {pinned}"
                        )
                    if limits.clock() > give_up_at:  # each read waits at most `timeout`: this bounds the total
                        raise DownloadError(
                            f"could not download {url}: only {received} bytes arrived in {limits.deadline:g} s "
                            f"(the server is too slow). {_LOCAL_FOLDER_HINT}"
                        )
                    out.write(block)
                    digest.update(block)
                    received += len(block)
                    bar.update(len(block))
    except urllib.error.HTTPError as error:
        raise DownloadError(
            f"could not download {url}: HTTP {error.code} {error.reason}. {_LOCAL_FOLDER_HINT}"
        ) from error
    except (urllib.error.URLError, TimeoutError, ConnectionError, http.client.HTTPException) as error:
        reason = getattr(error, "reason", error)
        raise DownloadError(f"could not download {url} (no network? {reason}). {_LOCAL_FOLDER_HINT}") from error
    if total is not None and received != total:
        raise DownloadError(
            f"could not download {url}: the connection closed after {received} of {total} bytes. {_LOCAL_FOLDER_HINT}"
        )
    return digest.hexdigest()


# ---------------------------------------------------------------------------------------------
# The one loader
# ---------------------------------------------------------------------------------------------
def _check_split(split: str) -> str:
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    return split


def load_corpus(
    name: str = "captions",
    split: str = "train",
    data_dir: str | Path | None = None,
    download: bool = False,
) -> ParallelCorpus:
    """Load one split of a German–English corpus.

    Args:
        name: ``"captions"`` (the course's generated corpus, with gold alignments) or ``"multi30k"``.
        split: ``"train"``, ``"val"`` or ``"test"`` (for Multi30k: the 2016 Flickr test set).
        data_dir: the folder holding the files. Default for ``captions``: the repository's
            ``data/captions``; for ``multi30k``: ``$MULTI30K_DIR`` if set, else the download cache.
        download: for ``multi30k``, fetch missing files (checksummed) into ``data_dir`` / the cache.
            Ignored for ``captions``, which ships with the course.

    Returns:
        a :class:`ParallelCorpus`; ``alignments`` is ``None`` for Multi30k.
    """
    _check_split(split)
    if name == "captions":
        folder = Path(data_dir).expanduser() if data_dir is not None else CAPTIONS_DIR
        try:
            return read_parallel(folder, split, name, split, alignments=True)
        except FileNotFoundError as error:
            if data_dir is not None:
                raise
            hint = "the course corpus ships in data/captions: `make corpus` regenerates it"
            raise FileNotFoundError(f"{error}; {hint}") from error
    if name == "multi30k":
        folder, missing = missing_multi30k_files(split, data_dir)
        if missing:
            if not download:
                raise FileNotFoundError(
                    f"Multi30k files {missing} not found in {folder} (or, in the download cache, changed since "
                    f"they were downloaded). {_LOCAL_FOLDER_HINT} "
                    "Or pass download=True to fetch them (checksummed) from the dataset's public repository."
                )
            download_multi30k(folder, (split,))
        return read_parallel(folder, MULTI30K_FILE_SPLITS[split], name, split, alignments=False)
    raise ValueError(f"name must be one of {CORPORA}, got {name!r}")
