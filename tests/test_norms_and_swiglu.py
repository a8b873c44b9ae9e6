"""RMSNorm equals torch.nn.RMSNorm (values and gradients); SwiGLU is down(silu(gate x) * up x); bad sizes refused."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from helpers.norms import RMSNorm
from helpers.swiglu import SwiGLU


@pytest.mark.parametrize("eps", [1e-5, 1e-2])
def test_rmsnorm_equals_torchs(eps):
    torch.manual_seed(0)
    ours, theirs = RMSNorm(16, eps=eps), nn.RMSNorm(16, eps=eps)
    with torch.no_grad():
        ours.weight.normal_()
    theirs.load_state_dict(ours.state_dict())
    x = (torch.randn(3, 5, 16) * 0.1).requires_grad_()
    x2 = x.detach().clone().requires_grad_()
    torch.testing.assert_close(ours(x), theirs(x2))
    ours(x).square().sum().backward()
    theirs(x2).square().sum().backward()
    torch.testing.assert_close(x.grad, x2.grad)
    torch.testing.assert_close(ours.weight.grad, theirs.weight.grad)
    assert not torch.allclose(ours(x), nn.LayerNorm(16, elementwise_affine=False)(x) * ours.weight, atol=1e-3)


def test_rmsnorm_keeps_half_precision_inputs_half():
    x = torch.randn(4, 8, dtype=torch.bfloat16)
    assert RMSNorm(8).to(torch.bfloat16)(x).dtype == torch.bfloat16


def test_swiglu_is_the_gated_formula():
    torch.manual_seed(1)
    block = SwiGLU(8, 20)
    x = torch.randn(2, 3, 8)
    expected = (F.silu(x @ block.gate_proj.weight.T) * (x @ block.up_proj.weight.T)) @ block.down_proj.weight.T
    torch.testing.assert_close(block(x), expected)
    ungated = F.gelu(x @ block.gate_proj.weight.T) @ block.down_proj.weight.T
    assert not torch.allclose(block(x), ungated, atol=1e-3)
    assert sum(p.numel() for p in block.parameters()) == 3 * 8 * 20  # three matrices, no bias


def test_bad_sizes_name_the_argument():
    for bad in (0, -1, 2.5):
        with pytest.raises(ValueError, match="embed_dim"):
            RMSNorm(bad)
        with pytest.raises(ValueError, match="ff_dim"):
            SwiGLU(8, bad)
    with pytest.raises(ValueError, match="eps"):
        RMSNorm(8, eps=0)
    with pytest.raises(ValueError, match=r"\(\.\.\., 8\)"):
        RMSNorm(8)(torch.randn(2, 7))
