"""The compiled path, on a machine without a GPU: every kernel of helpers.kernels compiles for a Hopper GPU
(sm_90: Triton's IR, then PTX, then a cubin by the ptxas Triton ships) in float16 and bfloat16, causal, windowed
and not. The interpreter proves the arithmetic, masks and pointers; this proves that the same source is also valid
compiled Triton (types that agree, constexpr branches, loops with bounds known only at run time), which the
interpreter never checks. Nothing is launched: running compiled needs a GPU (benchmarks/lesson16_speed.py).

It runs in a fresh interpreter that pretends CUDA is present, so that helpers.kernels.runtime chooses the compiled
path and ``@triton.jit`` makes compilable functions."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from helpers.kernels import TRITON_MISSING, triton_available

if not triton_available():
    pytest.skip(TRITON_MISSING, allow_module_level=True)

COMPILE_EVERY_KERNEL = r"""
import torch
torch.cuda.is_available = lambda: True  # pretend: the runtime then takes the compiled path; nothing is launched
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from helpers.kernels import runtime
from helpers.kernels.flash_backward import dkdv_kernel, dq_kernel, row_dot_kernel
from helpers.kernels.flash_forward import flash_forward_kernel
from helpers.kernels.naive_attention import scores_kernel, softmax_kernel, weighted_sum_kernel
from helpers.kernels.sparse_attention import sparse_attention_kernel

assert not runtime.INTERPRETED
POINTERS = {"Q", "K", "V", "Out", "DO", "DK", "DV", "DQ", "SC", "P", "LSE", "D", "IDX"}
FLOAT32 = {"LSE", "D", "SC", "P"}  # the log-sum-exp, D = rowsum(dO * O), the naive kernels' scores and weights


def compile_for_hopper(kernel, dtype, constants):
    signature = {}
    for name in kernel.arg_names:
        if name in constants:
            signature[name] = "constexpr"
        elif name == "IDX":
            signature[name] = "*i64"
        elif name in POINTERS:
            signature[name] = "*fp32" if name in FLOAT32 else f"*{dtype}"
        else:
            signature[name] = "fp32" if name == "scale" else "i32"
    compiled = triton.compile(ASTSource(kernel, signature, constexprs=constants), target=GPUTarget("cuda", 90, 32))
    assert compiled.asm["cubin"], kernel.__name__
    return kernel.__name__


done = []
for dtype in ("fp16", "bf16"):
    for causal, windowed in ((False, False), (True, False), (True, True)):
        rules = dict(CAUSAL=causal, WINDOWED=windowed, BM=64, BN=64, BD=64, PRECISION="tf32", UPCAST=False)
        for kernel in (flash_forward_kernel, dkdv_kernel, dq_kernel):
            done.append(compile_for_hopper(kernel, dtype, rules))
    done.append(compile_for_hopper(row_dot_kernel, dtype, dict(BM=64, BD=64)))
    done.append(compile_for_hopper(sparse_attention_kernel, dtype, dict(BM=16, BK=16, BD=64)))
naive = dict(BM=64, BN=64, BD=64, PRECISION="tf32", UPCAST=False)
done.append(compile_for_hopper(scores_kernel, "fp16", dict(naive, CAUSAL=True)))
done.append(compile_for_hopper(softmax_kernel, "fp16", dict(BM=16, BS=1024)))
done.append(compile_for_hopper(weighted_sum_kernel, "fp16", naive))
print(len(done), " ".join(sorted(set(done))))
"""


def test_every_kernel_compiles_for_a_hopper_gpu_without_one():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run(
        [sys.executable, "-c", COMPILE_EVERY_KERNEL], capture_output=True, text=True, env=env, timeout=900
    )
    assert done.returncode == 0, done.stderr[-4000:]
    count, names = done.stdout.split(maxsplit=1)
    assert int(count) == 25
    assert names.split() == sorted(
        ["dkdv_kernel", "dq_kernel", "flash_forward_kernel", "row_dot_kernel", "scores_kernel", "softmax_kernel",
         "sparse_attention_kernel", "weighted_sum_kernel"]
    )  # fmt: skip
