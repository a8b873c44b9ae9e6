"""Qwen3-Next's gated attention in the GPT's attention: a sigmoid gate, computed from the attention's input, on each
head's output before the output projection; with its QK-norm and partial rotary. Equal in float64 to
``transformers``' ``Qwen3NextAttention`` (eager) for rotary fractions 1/4, 1/2 and 1; a zero gate halves the heads'
outputs; gradients reach the gate; a cached GPT with gates, sinks and partial rotary decodes as it runs whole;
the config refuses fractions it cannot rotate."""

from __future__ import annotations

import pytest
import torch

from helpers.gpt import GPT, GPTConfig
from helpers.models.reference_attention import attention_from_qwen3_next
from helpers.rotary import rotary_cos_sin

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tiny models: one thread is fastest

N, h, h_kv, d, E, T = 2, 4, 2, 8, 32, 7


def _qwen3_next_pair(fraction: float, reference: str):
    """Our gated layer and Qwen3NextAttention with the same random weights (norm weights too), float64.

    ``reference``: "eager", transformers' module as it is, whose eager softmax and RMSNorm round through float32
    by design; or "float64": the same module with torch's SDPA kernel (transformers' "sdpa" attention, float64
    throughout) and its norms' own ``_norm`` applied in float64."""
    from transformers import Qwen3NextConfig
    from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextAttention

    theirs_config = Qwen3NextConfig(
        vocab_size=50, hidden_size=E, num_attention_heads=h, num_key_value_heads=h_kv, head_dim=d,
        num_hidden_layers=4, partial_rotary_factor=fraction, rms_norm_eps=1e-6, attention_bias=False,
        attention_dropout=0.0, attn_implementation="eager" if reference == "eager" else "sdpa",
    )  # fmt: skip
    torch.manual_seed(20)
    theirs = Qwen3NextAttention(theirs_config, layer_idx=3).double().eval()
    with torch.no_grad():
        for parameter in theirs.parameters():
            parameter.normal_(0.0, 0.3)  # the norms' weights too: they start at 0, which would test less
    if reference == "float64":
        for norm in (theirs.q_norm, theirs.k_norm):  # its forward is _norm(x.float()) * (1 + w): without .float()
            norm.forward = lambda x, norm=norm: norm._norm(x) * (1.0 + norm.weight)
    ours = attention_from_qwen3_next(theirs)
    return ours, theirs, ours.rotary_dim


@pytest.mark.parametrize("reference", ["float64", "eager"])
@pytest.mark.parametrize("fraction", [0.25, 0.5, 1.0], ids=["r = d/4", "r = d/2", "r = d"])
def test_gated_attention_equals_transformers_qwen3_next_attention(fraction, reference):
    """To 1e-12 against the float64 reference; to 1e-6 (and the weights too) against the eager module as it is."""
    ours, theirs, r = _qwen3_next_pair(fraction, reference)
    assert r == int(d * fraction)
    x = torch.randn(N, T, E, dtype=torch.float64, generator=torch.Generator().manual_seed(21))
    positions = torch.arange(T)
    cos, sin = rotary_cos_sin(positions, r, 10000.0, torch.float64)  # (T, r / 2)
    # Qwen3-Next rotates halves of the first r features: its cos and sin repeat the r / 2 angles twice, (N, T, r).
    cos_r, sin_r = (torch.cat((c, c), dim=-1).expand(N, T, r) for c in (cos, sin))
    blocked = torch.ones(T, T, dtype=torch.bool).triu(1)
    mask = torch.zeros(T, T, dtype=torch.float64).masked_fill(blocked, torch.finfo(torch.float64).min)
    with torch.no_grad():
        expected, expected_weights = theirs(x, (cos_r, sin_r), mask.expand(N, 1, T, T))
        out, _, weights = ours(x, positions, need_weights=True)
        fused_out, _ = ours(x, positions)  # torch's fused kernel for the heads, then the same gate
    tolerance = 1e-12 if reference == "float64" else 1e-6
    if reference == "eager":
        torch.testing.assert_close(weights, expected_weights, rtol=0, atol=tolerance)
    torch.testing.assert_close(out, expected, rtol=0, atol=tolerance)
    torch.testing.assert_close(fused_out, expected, rtol=0, atol=tolerance)
    ours.gate_proj = None  # without the gate the numbers differ: the comparison above saw it
    with torch.no_grad():
        assert not torch.allclose(ours(x, positions)[0], expected, atol=1e-3)


def _gated_gpt(**changes) -> GPT:
    torch.manual_seed(0)
    config = dict(vocab_size=20, embed_dim=E, num_heads=h, num_kv_heads=h_kv, num_layers=2, ff_dim=48,
                  output_gate=True)  # fmt: skip
    return GPT(GPTConfig(**(config | changes))).eval()


def test_a_zero_gate_halves_every_heads_output_and_the_gate_is_a_parameter_the_loss_reaches():
    gated, plain = _gated_gpt(), _gated_gpt(output_gate=False)
    assert set(gated.state_dict()) - set(plain.state_dict()) == {
        f"blocks.{i}.attention.gate_proj.weight" for i in (0, 1)
    }
    assert gated.blocks[0].attention.gate_proj.weight.shape == (h * (E // h), E)
    plain.load_state_dict({k: v for k, v in gated.state_dict().items() if "gate_proj" not in k})
    ids = torch.randint(20, (2, 6), generator=torch.Generator().manual_seed(3))
    gated(ids).logsumexp(-1).sum().backward()
    assert all(block.attention.gate_proj.weight.grad.abs().sum() > 0 for block in gated.blocks)
    with torch.no_grad():
        for g, p in zip(gated.blocks, plain.blocks, strict=True):
            g.attention.gate_proj.weight.zero_()  # sigmoid(0) = 1/2 on every feature of every head
            p.attention.projections.out_proj.weight.mul_(0.5)
        torch.testing.assert_close(gated(ids), plain(ids), rtol=0, atol=1e-6)


def test_a_gpt_with_gates_sinks_and_partial_rotary_decodes_with_the_cache_as_it_runs_whole():
    model = _gated_gpt(attention_sinks=True, rotary_fraction=0.5, layer_kinds=("local", "global"), window=3)
    with torch.no_grad():
        for block in model.blocks:
            block.attention.sinks.normal_()
    ids = torch.randint(20, (2, 9), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        whole = model(ids)
        cache, steps = model.new_cache(rolling=True), []
        for t in range(ids.size(1)):
            steps.append(model(ids[:, t : t + 1], cache))
    torch.testing.assert_close(torch.cat(steps, dim=1), whole, rtol=0, atol=1e-5)


@pytest.mark.parametrize(("zeroed", "moves"), [("rotated", False), ("unrotated", True)])
def test_partial_rotary_rotates_the_first_r_features_of_each_head_only(zeroed, moves):
    """Queries and keys with only their last d - r features (zeroed = "rotated") see no position: the output does
    not change when the tokens are rotated as if they stood 3 apart. With only their first r features, it does."""
    attention = _gated_gpt(rotary_fraction=0.5).blocks[0].attention
    r = attention.rotary_dim
    assert r == (E // h) // 2
    with torch.no_grad():
        for projection in (attention.projections.q_proj, attention.projections.k_proj):
            features = torch.arange(projection.weight.size(0)) % (E // h)  # each row's feature within its head
            projection.weight[features < r if zeroed == "rotated" else features >= r] = 0.0
    x = torch.randn(1, 5, E, generator=torch.Generator().manual_seed(5))
    positions = torch.arange(5)
    with torch.no_grad():
        near, _ = attention(x, positions)
        spread, _ = attention(x, positions, rotation=rotary_cos_sin(3 * positions, r))  # RoPE sees offsets only
    assert torch.allclose(near, spread, atol=1e-6) != moves


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"rotary_fraction": 0.0}, r"in \(0, 1\]"),
        ({"rotary_fraction": 1.5}, r"in \(0, 1\]"),
        ({"rotary_fraction": True}, r"in \(0, 1\]"),
        ({"rotary_fraction": 0.375, "head_dim": 8}, "rotates 3 features: it must be an even number"),
        ({"output_gate": "yes"}, "output_gate must be True or False"),
        ({"attention_sinks": 1}, "attention_sinks must be True or False"),
    ],
)
def test_the_config_refuses_gates_sinks_and_fractions_it_cannot_build(changes, message):
    with pytest.raises(ValueError, match=message):
        GPTConfig(vocab_size=10, **changes)


def _qwen3_next(**changes):
    from transformers import Qwen3NextConfig
    from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextAttention

    config = dict(vocab_size=50, hidden_size=E, num_attention_heads=h, num_key_value_heads=h_kv, head_dim=d,
                  num_hidden_layers=4, attention_bias=False)  # fmt: skip
    return Qwen3NextAttention(Qwen3NextConfig(**(config | changes)), layer_idx=3)


def test_attention_from_qwen3_next_reads_the_fraction_and_eps_and_refuses_what_it_cannot_carry():
    ours = attention_from_qwen3_next(_qwen3_next(partial_rotary_factor=0.5, rms_norm_eps=1e-5))
    assert ours.rotary_dim == d // 2 and ours.q_norm.eps == 1e-5
    assert torch.equal(ours.q_norm.weight, torch.ones(d))  # their zero weights scale by 1 + 0
    with pytest.raises(ValueError, match="no projection biases"):
        attention_from_qwen3_next(_qwen3_next(attention_bias=True))
    theirs = _qwen3_next()
    theirs.q_proj = torch.nn.Linear(E, h * d, bias=False)  # no gate rows
    with pytest.raises(ValueError, match=r"q_proj.weight has shape \(32, 32\), but .* give \(64, 32\)"):
        attention_from_qwen3_next(theirs)
    with pytest.raises(TypeError, match="expects transformers' Qwen3NextAttention, got GptOssAttention"):
        from transformers import GptOssConfig
        from transformers.models.gpt_oss.modeling_gpt_oss import GptOssAttention

        attention_from_qwen3_next(
            GptOssAttention(
                GptOssConfig(
                    hidden_size=E, num_attention_heads=h, num_key_value_heads=h_kv, head_dim=d, num_hidden_layers=1
                ),
                layer_idx=0,
            )
        )
