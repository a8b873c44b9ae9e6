"""The path the kernels take (helpers.kernels.runtime), each case in a fresh interpreter, since the decision is made
once, before Triton's first import: interpreted where there is no CUDA device (TRITON_INTERPRET=1 set for it), a
clear refusal where Triton was imported too early or told to compile for no GPU, and a clear ImportError where
Triton is missing; ``import helpers`` never imports Triton."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from helpers.kernels import TRITON_MISSING, triton_available

if not triton_available():
    pytest.skip(TRITON_MISSING, allow_module_level=True)
if torch.cuda.is_available():
    pytest.skip("these cases are about a machine without CUDA", allow_module_level=True)


def run(code: str, **environment: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"} | environment
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)


def test_without_cuda_the_runtime_switches_the_interpreter_on_before_importing_triton():
    done = run(
        "import os, sys\n"
        "import helpers.kernels.runtime as runtime\n"
        "import triton.runtime.interpreter as interpreter, triton.language as tl\n"
        "print(runtime.INTERPRETED, os.environ['TRITON_INTERPRET'], runtime.DEVICE,\n"
        "      isinstance(tl.zeros, interpreter.InterpretedFunction))\n"
        "print(runtime.describe_path())\n"
    )
    assert done.returncode == 0, done.stderr
    first, second = done.stdout.splitlines()
    assert first == "True 1 cpu True"
    assert second.startswith("interpreted")


def test_triton_imported_first_without_the_switch_is_refused_by_name():
    done = run("import triton\nimport helpers.kernels.flash_attention\n")
    assert done.returncode != 0
    assert "RuntimeError: Triton was imported before helpers.kernels without TRITON_INTERPRET=1" in done.stderr


def test_asking_for_compiled_kernels_without_a_gpu_is_refused():
    done = run("import helpers.kernels.runtime\n", TRITON_INTERPRET="0")
    assert done.returncode != 0 and "asks for compiled kernels, but torch sees no CUDA device" in done.stderr


def test_where_triton_is_missing_helpers_still_imports_and_the_kernels_say_where_to_run():
    done = run(
        "import importlib.util\n"
        "found = importlib.util.find_spec\n"  # hide Triton, as on macOS or Windows
        "importlib.util.find_spec = lambda name, *rest: None if name == 'triton' else found(name, *rest)\n"
        "import helpers, helpers.attention, helpers.kernels\n"
        "print(helpers.kernels.triton_available(), helpers.topk_attention_dense.__name__)\n"
        "try:\n"
        "    import helpers.kernels.flash_attention\n"
        "except ImportError as error:\n"
        "    print(error)\n"
    )
    assert done.returncode == 0, done.stderr
    first, second = done.stdout.splitlines()
    assert first == "False topk_attention_dense"
    assert "Linux only" in second and "WSL 2" in second


def test_importing_helpers_and_its_attention_does_not_import_triton():
    done = run("import sys, helpers, helpers.attention, helpers.kernels\nprint('triton' in sys.modules)\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
