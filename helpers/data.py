"""Parallel German–English corpora: the course's own ``captions`` corpus and Multi30k, behind one loader.

Both corpora use Multi30k's layout: one sentence per line, line i of ``<split>.de`` translating line i
of ``<split>.en``, optionally gzip-compressed (``.gz``). The course's corpus adds ``<split>.align``: gold
word alignments in Pharaoh format, one line per pair, ``i-j`` meaning German whitespace token i is
aligned with English whitespace token j (both counted from 0).

    >>> corpus = load_corpus("captions", "train")                  # committed under data/captions
    >>> real = load_corpus("multi30k", "test", data_dir="/path/to/multi30k")   # a local folder
    >>> real = load_corpus("multi30k", "test", download=True)      # or a checksummed download

Every problem with a file (missing, misaligned, empty line, bad encoding, truncated gzip, bad checksum)
raises an error that names the file, so a learner knows which file to fix or fetch again.
"""

from __future__ import annotations

import gzip
import hashlib
import http.client
import os
import re
import tempfile
import urllib.error
import urllib.request
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from tqdm.auto import tqdm

Alignment = list[tuple[int, int]]  # (German token index, English token index) pairs of one sentence pair

CORPORA = ("captions", "multi30k")
SPLITS = ("train", "val", "test")
LANGUAGES = ("de", "en")

#: The committed course corpus: ``<repo>/data/captions``.
CAPTIONS_DIR = Path(__file__).resolve().parents[1] / "data" / "captions"

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
#: Seconds to wait for the server: short, so that a machine without network fails fast.
DOWNLOAD_TIMEOUT = 10.0


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
        return iter(zip(self.de, self.en))

    def pairs(self) -> list[tuple[str, str]]:
        """All ``(German, English)`` pairs, in file order."""
        return list(zip(self.de, self.en))

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
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        line_number = raw[: error.start].count(b"\n") + 1
        raise CorpusError(
            f"{path}: line {line_number} is not valid UTF-8 (byte {raw[error.start]:#04x}); "
            "corpus files must be UTF-8 text"
        ) from error
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the newline that ends the last line
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
    for number, (line, source, target) in enumerate(zip(lines, de, en), start=1):
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


def download_multi30k(
    cache_dir: str | Path | None = None,
    splits: tuple[str, ...] = SPLITS,
    *,
    base_url: str | None = None,
    checksums: Mapping[str, str] | None = None,
    timeout: float | None = None,
    progress: bool = True,
) -> Path:
    """Download the Multi30k files of ``splits`` into ``cache_dir`` (default: the cache), checking SHA-256.

    Files already there with the right checksum are kept. Each file is written to a temporary file in
    the same folder, flushed to disk, checked, and only then renamed into place, so an interrupted or
    corrupt download never leaves a half-written file under the real name. ``base_url`` (a mirror),
    ``checksums`` and ``timeout`` default to this module's ``MULTI30K_URL``, ``MULTI30K_SHA256`` and
    ``DOWNLOAD_TIMEOUT``, read at call time so that tests can point them at a local server. Returns the
    folder.

    Raises :class:`ChecksumError` (nothing kept) on a mismatch and :class:`DownloadError` when the server
    cannot be reached or answers with an error; both messages say how to use a local folder instead.
    """
    base_url = MULTI30K_URL if base_url is None else base_url
    checksums = MULTI30K_SHA256 if checksums is None else checksums
    timeout = DOWNLOAD_TIMEOUT if timeout is None else timeout
    folder = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir() / "multi30k"
    folder.mkdir(parents=True, exist_ok=True)
    for file_name in multi30k_files(splits):
        target = folder / file_name
        if target.is_file() and sha256_of(target) == checksums[file_name]:
            continue
        _download_file(f"{base_url.rstrip('/')}/{file_name}", target, checksums[file_name], timeout, progress)
    return folder


def _download_file(url: str, target: Path, expected_sha256: str, timeout: float, progress: bool) -> None:
    """Fetch ``url`` into ``target`` atomically, keeping it only if its SHA-256 is ``expected_sha256``."""
    handle, temp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=target.parent)
    temp_path = Path(temp_name)
    try:
        with os.fdopen(handle, "wb") as out:
            actual = _fetch(url, out, timeout, progress, label=target.name)
            out.flush()
            os.fsync(out.fileno())  # on disk before the rename, so a crash cannot leave a hollow file
        if actual != expected_sha256:
            raise ChecksumError(
                f"checksum mismatch for {target.name} from {url}: expected SHA-256 {expected_sha256}, "
                f"got {actual}; the download was deleted. {_LOCAL_FOLDER_HINT}"
            )
        os.chmod(temp_path, 0o644)  # mkstemp makes it private; a cache may be shared
        os.replace(temp_path, target)  # atomic on one file system: the real name appears only when complete
    finally:
        temp_path.unlink(missing_ok=True)  # after a failure; after success the name is already gone


def _fetch(url: str, out, timeout: float, progress: bool, label: str) -> str:
    """Stream ``url`` into the open binary file ``out``; return the SHA-256 of what arrived.

    Every network failure becomes a :class:`DownloadError` that says how to work from a local folder.
    """
    digest = hashlib.sha256()
    received = 0
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            total = int(response.headers.get("Content-Length") or 0) or None
            with tqdm(total=total, unit="B", unit_scale=True, desc=label, disable=not progress) as bar:
                for block in iter(lambda: response.read(1 << 16), b""):
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
        folder = multi30k_dir(data_dir)
        missing = [f for f in multi30k_files((split,)) if _find_file(folder, f.removesuffix(".gz")) is None]
        if missing:
            if not download:
                raise FileNotFoundError(
                    f"Multi30k files {missing} not found in {folder}. {_LOCAL_FOLDER_HINT} "
                    "Or pass download=True to fetch them (checksummed) from the dataset's public repository."
                )
            download_multi30k(folder, (split,))
        return read_parallel(folder, MULTI30K_FILE_SPLITS[split], name, split, alignments=False)
    raise ValueError(f"name must be one of {CORPORA}, got {name!r}")
