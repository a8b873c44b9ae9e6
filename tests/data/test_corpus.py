"""Tests for helpers.data.corpus: reading both corpora, clear errors that name the file, the checksummed download.

The download tests serve small fixture files from a local HTTP server on 127.0.0.1; nothing here
contacts the internet.
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import hashlib
import http.server
import os
import shutil
import socket
import threading
import time
from pathlib import Path

import pytest

from helpers.data import corpus as data
from helpers.data.corpus import (
    ChecksumError,
    CorpusError,
    DownloadError,
    ParallelCorpus,
    download_multi30k,
    load_corpus,
    parse_alignment,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CAPTIONS_FIXTURE = FIXTURES / "captions"
MULTI30K_FIXTURE = FIXTURES / "multi30k"
REPO = Path(__file__).resolve().parents[2]
RUNNING_EXAMPLE = "Eine Mutter und ihr kleiner Sohn genießen einen schönen Tag im Freien."


def fixture_checksums() -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in MULTI30K_FIXTURE.glob("*.gz")}


def copy_captions(tmp_path: Path) -> Path:
    folder = tmp_path / "captions"
    shutil.copytree(CAPTIONS_FIXTURE, folder)
    return folder


# ---------------------------------------------------------------------------------------------
# The course corpus layout (fixture files until the generated corpus exists)
# ---------------------------------------------------------------------------------------------
def test_captions_fixture_loads_every_split_with_alignments():
    expected_sizes = {"train": 3, "val": 1, "test": 2}
    for split, size in expected_sizes.items():
        corpus = load_corpus("captions", split, data_dir=CAPTIONS_FIXTURE)
        assert (corpus.name, corpus.split, len(corpus)) == ("captions", split, size)
        assert corpus.alignments is not None and len(corpus.alignments) == size
    test = load_corpus("captions", "test", data_dir=CAPTIONS_FIXTURE)
    assert test[0] == (RUNNING_EXAMPLE, "A mother and her little son are enjoying a beautiful day outdoors.")
    assert test.pairs() == list(zip(test.de, test.en, strict=False)) == list(test)
    # "genießen" (6) → "are enjoying" (6, 7): one German word, two English words
    assert (6, 6) in test.alignments[0] and (6, 7) in test.alignments[0]


def test_plain_and_gzip_files_read_the_same(tmp_path):
    folder = copy_captions(tmp_path)
    for language in ("de", "en"):
        plain = folder / f"train.{language}"
        (folder / f"train.{language}.gz").write_bytes(gzip.compress(plain.read_bytes()))
        plain.unlink()
    assert (
        load_corpus("captions", "train", data_dir=folder).pairs()
        == load_corpus("captions", "train", data_dir=CAPTIONS_FIXTURE).pairs()
    )


def test_surrounding_spaces_and_crlf_are_stripped(tmp_path):
    folder = copy_captions(tmp_path)
    (folder / "val.de").write_bytes("  Zwei Männer sitzen auf einer Bank. \r\n".encode())
    assert load_corpus("captions", "val", data_dir=folder).de == ["Zwei Männer sitzen auf einer Bank."]


def test_parse_alignment():
    assert parse_alignment("0-0 2-1  1-3\n") == [(0, 0), (2, 1), (1, 3)]
    assert parse_alignment("") == []
    for bad in ("0-", "a-1", "1:2", "-1-2", "0-01-1"):
        with pytest.raises(ValueError, match="i-j"):
            parse_alignment(bad)


# ---------------------------------------------------------------------------------------------
# Errors that name the file
# ---------------------------------------------------------------------------------------------
def test_misaligned_files_name_both_files_and_counts(tmp_path):
    folder = copy_captions(tmp_path)
    (folder / "train.en").write_text("A dog is running in the park.\nA little girl is playing.\n", encoding="utf-8")
    with pytest.raises(CorpusError) as error:
        load_corpus("captions", "train", data_dir=folder)
    message = str(error.value)
    assert "train.de" in message and "train.en" in message
    assert "3 lines" in message and "has 2" in message


def test_empty_line_names_file_and_line(tmp_path):
    folder = copy_captions(tmp_path)
    (folder / "train.en").write_text("A dog is running.\n   \nA woman is getting on the bus.\n", encoding="utf-8")
    with pytest.raises(CorpusError, match=r"train\.en: line 2 is empty"):
        load_corpus("captions", "train", data_dir=folder)


def test_bad_encoding_names_file_and_line(tmp_path):
    folder = copy_captions(tmp_path)
    lines = (folder / "train.de").read_text(encoding="utf-8").splitlines()
    latin1 = "\n".join(lines).encode("latin-1") + b"\n"  # "läuft" in line 1 becomes the lone byte 0xe4
    (folder / "train.de").write_bytes(latin1)
    with pytest.raises(CorpusError, match=r"train\.de: line 1 is not valid UTF-8 \(byte 0xe4\)"):
        load_corpus("captions", "train", data_dir=folder)


def test_truncated_gzip_names_the_file(tmp_path):
    folder = tmp_path / "multi30k"
    shutil.copytree(MULTI30K_FIXTURE, folder)
    whole = (folder / "val.en.gz").read_bytes()
    (folder / "val.en.gz").write_bytes(whole[: len(whole) // 2])
    with pytest.raises(CorpusError, match=r"val\.en\.gz: truncated or corrupt gzip"):
        load_corpus("multi30k", "val", data_dir=folder)


def test_not_gzip_at_all_names_the_file(tmp_path):
    folder = tmp_path / "multi30k"
    shutil.copytree(MULTI30K_FIXTURE, folder)
    (folder / "val.de.gz").write_text("<html>rate limited</html>\n")
    with pytest.raises(CorpusError, match=r"val\.de\.gz: truncated or corrupt gzip"):
        load_corpus("multi30k", "val", data_dir=folder)


def test_alignment_errors_name_file_and_line(tmp_path):
    folder = copy_captions(tmp_path)
    (folder / "val.align").write_text("0-0 6-1\n")  # the German side has 6 tokens: 0..5
    out_of_range = r"val\.align: line 1: alignment 6-1 is out of range for 6 German and 7 English"
    with pytest.raises(CorpusError, match=out_of_range):
        load_corpus("captions", "val", data_dir=folder)
    (folder / "val.align").write_text("0-0 x\n")
    with pytest.raises(CorpusError, match=r"val\.align: line 1: expected 'i-j'"):
        load_corpus("captions", "val", data_dir=folder)
    (folder / "val.align").write_text("0-0\n1-1\n")
    with pytest.raises(CorpusError, match=r"val\.align: 2 lines, but the sentence files have 1"):
        load_corpus("captions", "val", data_dir=folder)


def test_missing_files_and_bad_arguments(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"no train\.de or train\.de\.gz"):
        load_corpus("captions", "train", data_dir=tmp_path)
    folder = copy_captions(tmp_path)
    (folder / "test.align").unlink()
    with pytest.raises(FileNotFoundError, match=r"no test\.align"):
        load_corpus("captions", "test", data_dir=folder)
    with pytest.raises(ValueError, match="split must be one of"):
        load_corpus("captions", "dev", data_dir=CAPTIONS_FIXTURE)
    with pytest.raises(ValueError, match="name must be one of"):
        load_corpus("wmt14", "train")


def test_parallel_corpus_rejects_unequal_sides():
    with pytest.raises(CorpusError, match="2 German but 1 English"):
        ParallelCorpus("x", "train", ["a", "b"], ["a"])
    with pytest.raises(CorpusError, match="1 alignment lines for 2"):
        ParallelCorpus("x", "train", ["a", "b"], ["a", "b"], alignments=[[]])


# ---------------------------------------------------------------------------------------------
# Multi30k from a local folder
# ---------------------------------------------------------------------------------------------
def test_multi30k_from_data_dir_and_from_env(monkeypatch):
    corpus = load_corpus("multi30k", "test", data_dir=MULTI30K_FIXTURE)
    assert corpus.alignments is None
    assert corpus.de == ["Ein Mann schläft.", RUNNING_EXAMPLE]
    monkeypatch.setenv("MULTI30K_DIR", str(MULTI30K_FIXTURE))
    assert load_corpus("multi30k", "val").pairs() == [
        ("Ein Kind schläft.", "A child is sleeping."),
        ("Zwei Hunde spielen im Schnee.", "Two dogs play in the snow."),
    ]


def test_multi30k_missing_without_download_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.delenv("MULTI30K_DIR", raising=False)
    monkeypatch.setenv("ATTENTION_COURSE_CACHE", str(tmp_path / "cache"))
    with pytest.raises(FileNotFoundError) as error:
        load_corpus("multi30k", "train")
    message = str(error.value)
    assert "train.de.gz" in message and str(tmp_path / "cache" / "multi30k") in message
    assert "data_dir=" in message and "MULTI30K_DIR" in message and "download=True" in message


# ---------------------------------------------------------------------------------------------
# The download, against a local HTTP server
# ---------------------------------------------------------------------------------------------
class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    requests: list[str]

    def log_message(self, format, *args):  # keep test output clean
        pass

    def do_GET(self):
        self.requests.append(self.path)
        super().do_GET()


@pytest.fixture
def server(tmp_path):
    """A local server of a copy of the Multi30k fixture folder: yields (base URL, served folder, request log)."""
    served = tmp_path / "served"
    shutil.copytree(MULTI30K_FIXTURE, served / "raw")  # a base URL with a path, like the real one
    requests: list[str] = []
    handler = type("Handler", (_QuietHandler,), {"requests": requests})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(handler, directory=str(served)))
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/raw", served, requests
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".") or p.suffix == ".part")


def test_download_success_is_checked_and_complete(server, tmp_path):
    base_url, _served, requests = server
    cache = tmp_path / "cache"
    folder = download_multi30k(cache, base_url=base_url, checksums=fixture_checksums(), progress=False)
    assert folder == cache
    for path in MULTI30K_FIXTURE.glob("*.gz"):
        assert (cache / path.name).read_bytes() == path.read_bytes()
    assert leftovers(cache) == []
    assert len(requests) == 6
    # files already there with the right checksum are not fetched again
    download_multi30k(cache, base_url=base_url, checksums=fixture_checksums(), progress=False)
    assert len(requests) == 6


def test_download_replaces_a_corrupt_cached_file(server, tmp_path):
    base_url, _served, requests = server
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "val.de.gz").write_bytes(b"half a file")
    download_multi30k(cache, ("val",), base_url=base_url, checksums=fixture_checksums(), progress=False)
    assert (cache / "val.de.gz").read_bytes() == (MULTI30K_FIXTURE / "val.de.gz").read_bytes()
    assert sorted(requests) == ["/raw/val.de.gz", "/raw/val.en.gz"]


def test_load_corpus_downloads_only_the_split_it_needs(server, tmp_path, monkeypatch):
    base_url, _served, requests = server
    monkeypatch.setattr(data, "MULTI30K_URL", base_url)
    monkeypatch.setattr(data, "MULTI30K_SHA256", fixture_checksums())
    monkeypatch.delenv("MULTI30K_DIR", raising=False)
    monkeypatch.setenv("ATTENTION_COURSE_CACHE", str(tmp_path / "cache"))
    corpus = load_corpus("multi30k", "test", download=True)
    assert corpus.de[1] == RUNNING_EXAMPLE
    assert sorted(requests) == ["/raw/test_2016_flickr.de.gz", "/raw/test_2016_flickr.en.gz"]
    assert sorted(p.name for p in (tmp_path / "cache" / "multi30k").iterdir()) == [
        "test_2016_flickr.de.gz",
        "test_2016_flickr.en.gz",
    ]


def test_checksum_mismatch_keeps_nothing_and_names_both_hashes(server, tmp_path):
    base_url, _served, _ = server
    checksums = fixture_checksums()
    expected = "0" * 64
    checksums["val.en.gz"] = expected
    cache = tmp_path / "cache"
    with pytest.raises(ChecksumError) as error:
        download_multi30k(cache, ("val",), base_url=base_url, checksums=checksums, progress=False)
    message = str(error.value)
    actual = hashlib.sha256((MULTI30K_FIXTURE / "val.en.gz").read_bytes()).hexdigest()
    assert "val.en.gz" in message and expected in message and actual in message
    assert "data_dir=" in message
    assert not (cache / "val.en.gz").exists()
    assert leftovers(cache) == []
    assert (cache / "val.de.gz").exists()  # the good file before it is kept, complete


def test_missing_file_on_server_is_a_clear_error(server, tmp_path):
    base_url, served, _ = server
    (served / "raw" / "train.en.gz").unlink()
    cache = tmp_path / "cache"
    with pytest.raises(DownloadError, match=r"train\.en\.gz: HTTP 404") as error:
        download_multi30k(cache, ("train",), base_url=base_url, checksums=fixture_checksums(), progress=False)
    assert "MULTI30K_DIR" in str(error.value)
    assert not (cache / "train.en.gz").exists()
    assert leftovers(cache) == []


@pytest.fixture
def refusing_port():
    """A port on 127.0.0.1 bound but not listening, for the whole test: connecting to it is refused at once, and no
    other test (or parallel worker) can start listening on it meanwhile."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


def test_refused_connection_fails_with_local_folder_advice(tmp_path, refusing_port):
    cache = tmp_path / "cache"
    with pytest.raises(DownloadError) as error:
        download_multi30k(
            cache,
            ("val",),
            base_url=f"http://127.0.0.1:{refusing_port}/raw",
            checksums=fixture_checksums(),
            timeout=60,  # a refusal is immediate: the timeout never decides this test
            progress=False,
        )
    message = str(error.value)
    assert "no network?" in message and "refused" in message.lower()
    assert "data_dir=" in message and "MULTI30K_DIR" in message
    assert list(cache.iterdir()) == []


def test_pinned_download_source_matches_the_dataset_readme():
    assert data.MULTI30K_URL == (
        "https://github.com/multi30k/dataset/raw/a3d2e0d26b56f3846f66a952536ffed4e401d05a/data/task1/raw"
    )
    assert sorted(data.MULTI30K_SHA256) == sorted(data.multi30k_files())
    assert all(len(h) == 64 and int(h, 16) >= 0 for h in data.MULTI30K_SHA256.values())


# ---------------------------------------------------------------------------------------------
# The real Multi30k files (present in CI next to the repository)
# ---------------------------------------------------------------------------------------------
def real_multi30k_dir() -> Path | None:
    candidates = [os.environ.get("MULTI30K_DIR"), REPO.parent / "shared" / "data" / "multi30k"]
    for candidate in candidates:
        if candidate and (Path(candidate) / "test_2016_flickr.de.gz").is_file():
            return Path(candidate)
    return None


REAL = real_multi30k_dir()
needs_real = pytest.mark.skipif(
    REAL is None, reason="real Multi30k files not found (../shared/data/multi30k or $MULTI30K_DIR)"
)


@needs_real
@pytest.mark.parametrize("split, size", [("train", 29_000), ("val", 1_014), ("test", 1_000)])
def test_real_multi30k_sizes(split, size):
    corpus = load_corpus("multi30k", split, data_dir=REAL)
    assert len(corpus.de) == len(corpus.en) == size


@needs_real
def test_real_multi30k_running_example_and_checksums():
    test = load_corpus("multi30k", "test", data_dir=REAL)
    assert test.de[10] == RUNNING_EXAMPLE  # line 11, counting from 1
    assert test.en[10].startswith("A mother and her young")
    for name, expected in data.MULTI30K_SHA256.items():
        assert data.sha256_of(REAL / name) == expected, name
        assert (REAL / name).stat().st_size == data.MULTI30K_SIZES[name], name


# ---------------------------------------------------------------------------------------------
# The committed course corpus (generated into data/captions)
# ---------------------------------------------------------------------------------------------
def test_committed_captions_corpus_loads_with_valid_alignments():
    for split in ("train", "val", "test"):
        corpus = load_corpus("captions", split)  # the default folder: <repo>/data/captions
        assert len(corpus) > 0 and len(corpus.de) == len(corpus.en) == len(corpus.alignments)
        for de, en, alignment in zip(corpus.de, corpus.en, corpus.alignments, strict=False):
            n_de, n_en = len(de.split()), len(en.split())
            assert alignment, (de, en)
            assert all(0 <= i < n_de and 0 <= j < n_en for i, j in alignment)
    assert RUNNING_EXAMPLE in load_corpus("captions", "test").de


def test_empty_file_and_slicing(tmp_path):
    folder = copy_captions(tmp_path)
    (folder / "val.en").write_text("")
    with pytest.raises(CorpusError, match=r"val\.en: the file is empty"):
        load_corpus("captions", "val", data_dir=folder)
    train = load_corpus("captions", "train", data_dir=CAPTIONS_FIXTURE)
    head = train[:2]
    assert isinstance(head, ParallelCorpus) and len(head) == 2
    assert head.pairs() == train.pairs()[:2] and head.alignments == train.alignments[:2]
    assert train[-1] == (train.de[2], train.en[2])


def test_gzipped_alignments_read_the_same(tmp_path):
    folder = copy_captions(tmp_path)
    align = folder / "train.align"
    (folder / "train.align.gz").write_bytes(gzip.compress(align.read_bytes()))
    align.unlink()
    assert (
        load_corpus("captions", "train", data_dir=folder).alignments
        == load_corpus("captions", "train", data_dir=CAPTIONS_FIXTURE).alignments
    )


class _CutOffHandler(http.server.BaseHTTPRequestHandler):
    """Promises 1000 bytes, sends 10, hangs up: a connection lost half-way."""

    def log_message(self, format, *args):
        pass

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "1000")
        self.end_headers()
        self.wfile.write(b"\x1f\x8b" + b"\0" * 8)
        self.wfile.flush()
        self.close_connection = True


def test_connection_lost_half_way_keeps_nothing(tmp_path):
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _CutOffHandler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    cache = tmp_path / "cache"
    try:
        with pytest.raises(DownloadError, match=r"val\.de\.gz: the connection closed after 10 of 1000 bytes"):
            download_multi30k(
                cache,
                ("val",),
                base_url=f"http://127.0.0.1:{httpd.server_address[1]}",
                checksums=fixture_checksums(),
                progress=True,  # the progress bar path runs too
            )
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()
    assert list(cache.iterdir()) == []


def test_a_server_that_never_answers_times_out(tmp_path):
    """A listening socket that never replies: the short timeout turns a hang into a clear error."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        cache = tmp_path / "cache"
        with pytest.raises(DownloadError, match="no network") as error:
            download_multi30k(
                cache,
                ("val",),
                base_url=f"http://127.0.0.1:{silent.getsockname()[1]}",
                checksums=fixture_checksums(),
                timeout=0.5,
                progress=False,
            )
        assert "timed out" in str(error.value)
    assert list(cache.iterdir()) == []


def test_missing_course_corpus_says_how_to_regenerate(tmp_path, monkeypatch):
    monkeypatch.setattr(data, "CAPTIONS_DIR", tmp_path / "captions")
    with pytest.raises(FileNotFoundError, match="make corpus"):
        load_corpus("captions", "train")


# ---------------------------------------------------------------------------------------------
# Cached files re-checked, a deadline and a size bound per file, byte-order marks, stale temporary files
# ---------------------------------------------------------------------------------------------
def test_byte_order_mark_does_not_leak_into_the_first_sentence(tmp_path):
    folder = copy_captions(tmp_path)
    for language in ("de", "en"):
        path = folder / f"test.{language}"
        path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    corpus = load_corpus("captions", "test", data_dir=folder)
    reference = load_corpus("captions", "test", data_dir=CAPTIONS_FIXTURE)
    assert corpus.de == reference.de and corpus.en == reference.en
    assert not corpus.de[0].startswith("\ufeff")


def test_a_tampered_file_in_the_download_cache_is_not_loaded(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    shutil.copytree(MULTI30K_FIXTURE, cache / "multi30k")
    monkeypatch.setattr(data, "MULTI30K_SHA256", fixture_checksums())
    monkeypatch.delenv("MULTI30K_DIR", raising=False)
    monkeypatch.setenv("ATTENTION_COURSE_CACHE", str(cache))
    assert load_corpus("multi30k", "val").de[0] == "Ein Kind schläft."  # untouched: loads
    tampered = gzip.compress("Ein Hund schläft.\nZwei Hunde spielen im Schnee.\n".encode())
    (cache / "multi30k" / "val.de.gz").write_bytes(tampered)
    with pytest.raises(FileNotFoundError, match=r"val\.de\.gz.*changed since they were downloaded"):
        load_corpus("multi30k", "val")


def test_a_tampered_cached_file_is_downloaded_again(server, tmp_path, monkeypatch):
    base_url, _served, requests = server
    cache = tmp_path / "cache"
    shutil.copytree(MULTI30K_FIXTURE, cache / "multi30k")
    (cache / "multi30k" / "val.de.gz").write_bytes(gzip.compress(b"Ein Hund.\nZwei.\n"))
    monkeypatch.setattr(data, "MULTI30K_URL", base_url)
    monkeypatch.setattr(data, "MULTI30K_SHA256", fixture_checksums())
    monkeypatch.delenv("MULTI30K_DIR", raising=False)
    monkeypatch.setenv("ATTENTION_COURSE_CACHE", str(cache))
    assert load_corpus("multi30k", "val", download=True).de[0] == "Ein Kind schläft."
    assert requests == ["/raw/val.de.gz"]


@contextlib.contextmanager
def serving(handler: type[http.server.BaseHTTPRequestHandler]):
    """Serve ``handler`` on 127.0.0.1 in a thread; yields the base URL."""
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    httpd.block_on_close = False  # a handler still stalled or streaming does not hold up the test's end
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


class FakeClock:
    """A monotonic clock that moves only when read: each reading is ``step`` seconds after the last."""

    def __init__(self, step: float) -> None:
        self.now, self.step, self.readings = 0.0, step, 0

    def __call__(self) -> float:
        self.now += self.step
        self.readings += 1
        return self.now


def stalling_handler(release: threading.Event, first: bytes = b"\x1f\x8b"):
    """A handler that promises 100,000 bytes, sends ``first`` and then stalls until ``release`` is set."""

    class Stalling(http.server.BaseHTTPRequestHandler):
        def log_message(self, format, *args):
            pass

        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", "100000")
            self.end_headers()
            self.wfile.write(first)
            self.wfile.flush()
            release.wait(timeout=60)

    return Stalling


def test_a_slow_server_hits_the_overall_deadline(tmp_path):
    """The deadline is read from the download's clock, so a fake one decides it: no race with the read timeout."""
    release = threading.Event()
    clock = FakeClock(step=1.0)  # every look at the clock is one second later
    cache = tmp_path / "cache"
    with serving(stalling_handler(release)) as base_url:
        try:
            with pytest.raises(DownloadError, match=r"only 0 bytes arrived in 0\.5 s \(the server is too slow\)"):
                download_multi30k(
                    cache,
                    ("val",),
                    base_url=base_url,
                    checksums=fixture_checksums(),
                    sizes={name: 100_000 for name in fixture_checksums()},  # what the server announces
                    timeout=60,  # the server stalls after its first bytes: only the deadline can end this
                    deadline=0.5,  # over at the first look after the start
                    clock=clock,
                    progress=False,
                )
        finally:
            release.set()
    assert clock.readings == 2  # the start, and the check after the first block
    assert list(cache.iterdir()) == []


def test_within_the_deadline_the_clock_does_not_interrupt(server, tmp_path):
    base_url, _served, _ = server
    clock = FakeClock(step=1.0)
    download_multi30k(
        tmp_path / "cache",
        ("val",),
        base_url=base_url,
        checksums=fixture_checksums(),
        deadline=100,
        clock=clock,
        progress=False,
    )
    assert clock.readings >= 4  # two files, each read at the start and after each block
    assert (tmp_path / "cache" / "val.de.gz").read_bytes() == (MULTI30K_FIXTURE / "val.de.gz").read_bytes()


class _EndlessHandler(http.server.BaseHTTPRequestHandler):
    """Answers with no Content-Length and streams zeros: up to 8 MiB here, for ever from a broken server."""

    sent: list[int]

    def log_message(self, format, *args):
        pass

    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        chunk = b"\0" * (1 << 16)
        try:
            for _ in range(128):
                self.wfile.write(chunk)
        except OSError:  # the client hung up: that is the point
            pass


def test_an_endless_response_stops_at_a_bound_above_the_pinned_size(tmp_path):
    cache = tmp_path / "cache"
    sizes = {name: 1000 for name in fixture_checksums()}
    with serving(_EndlessHandler) as base_url, pytest.raises(DownloadError) as error:
        download_multi30k(
            cache, ("val",), base_url=base_url, checksums=fixture_checksums(), sizes=sizes, progress=False
        )
    bound = data.size_bound(1000)
    assert 1000 < bound < 8 * 2**20
    message = str(error.value)
    assert f"the server sent more than {bound} bytes for val.de.gz, whose pinned size is 1000" in message
    assert "too slow" not in message and "MULTI30K_DIR" in message
    assert list(cache.iterdir()) == []  # nothing half-written


def test_an_announced_length_over_the_bound_is_refused_before_reading(tmp_path):
    release = threading.Event()
    cache = tmp_path / "cache"
    sizes = {name: 10 for name in fixture_checksums()}  # the stalling server announces 100,000 bytes
    with serving(stalling_handler(release)) as base_url:
        try:
            with pytest.raises(DownloadError, match=r"announced 100000 bytes for val\.de\.gz, whose pinned size is 10"):
                download_multi30k(
                    cache,
                    ("val",),
                    base_url=base_url,
                    checksums=fixture_checksums(),
                    sizes=sizes,
                    timeout=60,
                    progress=False,
                )
        finally:
            release.set()
    assert list(cache.iterdir()) == []


def test_the_pinned_sizes_bound_every_file():
    assert sorted(data.MULTI30K_SIZES) == sorted(data.MULTI30K_SHA256)
    for name, size in data.MULTI30K_SIZES.items():
        assert size < data.size_bound(size) <= 2 * size + 2**16, name


def test_stale_partial_downloads_are_cleaned_up(server, tmp_path):
    base_url, _served, _ = server
    cache = tmp_path / "cache"
    cache.mkdir()
    stale, fresh = cache / ".val.de.gz.abc123.part", cache / ".val.en.gz.def456.part"
    stale.write_bytes(b"killed half-way")
    fresh.write_bytes(b"another process is still downloading")
    os.utime(stale, (time.time() - 3600, time.time() - 3600))
    download_multi30k(cache, ("val",), base_url=base_url, checksums=fixture_checksums(), deadline=60, progress=False)
    assert not stale.exists()
    assert fresh.exists()  # younger than the deadline: it may belong to a live download
    assert (cache / "val.de.gz").is_file() and (cache / "val.en.gz").is_file()


def test_downloaded_files_follow_the_umask(server, tmp_path):
    base_url, _served, _ = server
    previous = os.umask(0o002)  # a group-shared cache
    try:
        download_multi30k(
            tmp_path / "cache", ("val",), base_url=base_url, checksums=fixture_checksums(), progress=False
        )
    finally:
        os.umask(previous)
    assert (tmp_path / "cache" / "val.de.gz").stat().st_mode & 0o777 == 0o664
