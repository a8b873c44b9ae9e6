"""Lesson 15's graduation tests: DeepSeek-V3.2's lightning indexer and its sparse latent attention
(``helpers.lightning_indexer``), against ``transformers``' ``DeepseekV32Indexer`` and ``DeepseekV32Attention``.

(1) The indexer's scores equal theirs and it chooses the same keys for every query, k = 5 of 12 tokens (the choice
matters) and k = 20 > 12 (every earlier key); (2) the whole V3.2 layer equals theirs, to 1e-12 against a float64
reference and to 1e-6 against their eager module as it is, with the same keys chosen; (3) the scores a later query
gets against cached keys are the prefill's; (4) bad sizes and inputs are refused, naming what was expected.

How their scores are read: their indexer returns only the chosen indices (its scores go straight into
``Tensor.topk``). A ``TorchFunctionMode`` (torch's own hook on every tensor call) records the tensor their
``topk`` ranks, unchanged: the causally masked scores, computed in float32 by design (``q.float()``), hence the
1e-6. Their rotary on the indexer is by halves, ours by adjacent pairs: the loader reorders the features, and a
copy without that reorder is shown to give other scores.

A float64 reference: their RMSNorm and eager softmax round through float32 by design, which caps agreement at
~1e-7. ``float64`` runs their module with torch's SDPA kernel (transformers' "sdpa" path) and their norms'
formula without the float32 cast, so what remains is the arithmetic: 1e-12."""

from __future__ import annotations

import pytest
import torch
from torch.overrides import TorchFunctionMode

from helpers.latent_attention import LatentConfig
from helpers.lightning_indexer import (
    LightningIndexer,
    SparseLatentAttention,
    indexer_from_transformers,
    sparse_latent_attention_from_transformers,
)
from helpers.rotary import rotary_cos_sin
from helpers.selection import causal_topk

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tiny models: one thread is fastest

N, T, E = 2, 12, 64
ROPE = 8  # qk_rope_head_dim: the rotated features of the attention's rope part and of the indexer's 16
TOPKS = pytest.mark.parametrize("topk", [5, 20], ids=["5 of 12 keys", "20 > 12 keys"])


def _reference(topk: int, implementation: str = "eager"):
    """Their DeepseekV32Attention (indexer inside), float64, every weight random (norms' weights, bias too)."""
    from transformers import DeepseekV32Config
    from transformers.models.deepseek_v32.modeling_deepseek_v32 import DeepseekV32Attention

    config = DeepseekV32Config(
        hidden_size=E, num_attention_heads=4, num_key_value_heads=4, q_lora_rank=24, kv_lora_rank=16,
        qk_nope_head_dim=8, qk_rope_head_dim=ROPE, v_head_dim=8, index_n_heads=4, index_head_dim=16,
        index_topk=topk, num_hidden_layers=1, vocab_size=10, attn_implementation=implementation,
    )  # fmt: skip
    torch.manual_seed(0)
    theirs = DeepseekV32Attention(config, layer_idx=0).double().eval()
    with torch.no_grad():
        for parameter in theirs.parameters():
            parameter.normal_(0.0, 0.3)  # norms start at 1 (and LayerNorm's bias at 0): that would test less
    return theirs


def _inputs():
    """x (N, T, E), positions (T,), their (cos, sin) (N, T, r) repeated for halves, their additive causal mask
    (N, 1, T, T) as DeepseekV32Model builds it for the eager path (0 may attend, the dtype's minimum blocked)."""
    x = torch.randn(N, T, E, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    positions = torch.arange(T)
    cos, sin = rotary_cos_sin(positions, ROPE, 10000.0, torch.float64)  # (T, r / 2)
    rotation = tuple(torch.cat((c, c), dim=-1).expand(N, T, ROPE) for c in (cos, sin))
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    mask = torch.zeros(T, T, dtype=torch.float64).masked_fill(future, torch.finfo(torch.float64).min)
    return x, positions, rotation, mask.expand(N, 1, T, T)


class RecordTopkInput(TorchFunctionMode):
    """Keeps every tensor ``Tensor.topk`` is called on: the scores their indexer ranks."""

    def __init__(self) -> None:
        super().__init__()
        self.ranked: list[torch.Tensor] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is torch.Tensor.topk:
            self.ranked.append(args[0].clone())
        return func(*args, **(kwargs or {}))


def _chosen(row: torch.Tensor, query: int) -> set[int]:
    """The real keys of one row of indices: ours pad with -1, theirs with masked keys after the query."""
    return {i for i in row.tolist() if 0 <= i <= query}


def _assert_same_choice(ours: torch.Tensor, theirs: torch.Tensor, scores: torch.Tensor, k: int) -> None:
    """Per query, the same keys; a swap between keys of equal score (a tie their topk breaks its own way) is
    accepted, nothing else. Our rows hold min(k, t + 1) keys, then -1."""
    assert ours.shape == (N, T, k)
    for n in range(N):
        for t in range(T):
            mine, reference = _chosen(ours[n, t], t), _chosen(theirs[n, t], t)
            assert len(mine) == min(k, t + 1) and (ours[n, t] >= 0).sum() == len(mine), (n, t, ours[n, t])
            if mine != reference:  # only a tie may differ: the chosen scores must then be the same numbers
                torch.testing.assert_close(
                    scores[n, t, sorted(mine)].sort().values, scores[n, t, sorted(reference)].sort().values
                )


def _boundary_ties(scores: torch.Tensor, k: int) -> int:
    """How many queries have their k-th and (k+1)-th best earlier keys scored within 1e-6: there the two
    libraries may break the tie apart and the outputs differ, so the layer's fixture must have none."""
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    ranked = scores.masked_fill(future, float("-inf")).sort(dim=-1, descending=True).values
    if k >= T:
        return 0
    return int(((ranked[..., k - 1] - ranked[..., k]).abs() < 1e-6).sum())


# ---------------------------------------------------------------------------------------------
# (1) the indexer
# ---------------------------------------------------------------------------------------------
@TOPKS
def test_the_indexer_scores_and_chooses_as_transformers(topk):
    theirs = _reference(topk).indexer
    ours = indexer_from_transformers(theirs)
    x, positions, rotation, mask = _inputs()
    query_latent = torch.randn(N, T, 24, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    may_attend = mask[:, 0] == 0  # (N, T, T) boolean, True = may attend: their indexer takes either
    with torch.no_grad(), RecordTopkInput() as recorder:
        their_indices = theirs(x, query_latent, rotation, may_attend, positions[None])
    (their_scores,) = recorder.ranked
    with torch.no_grad():
        scores = ours(x, positions, query_latent)  # (N, T, T), unmasked
        indices = causal_topk(scores, topk)
    assert scores.dtype == torch.float64 and scores.shape == (N, T, T)
    torch.testing.assert_close(
        scores.masked_fill(~may_attend, float("-inf")), their_scores.double(), rtol=1e-6, atol=1e-6
    )
    assert their_indices.shape == (N, T, min(topk, T))
    _assert_same_choice(indices, their_indices, scores, topk)
    # The reorder from halves to pairs is needed: their weights copied as they are score otherwise.
    with torch.no_grad():
        ours.query_proj.weight.copy_(theirs.wq_b.weight)
        ours.key_proj.weight.copy_(theirs.wk.weight)
        ours.key_norm.weight.copy_(theirs.k_norm.weight)
        ours.key_norm.bias.copy_(theirs.k_norm.bias)
        assert not torch.allclose(ours(x, positions, query_latent)[may_attend], scores[may_attend], atol=1e-3)


# ---------------------------------------------------------------------------------------------
# (2) the V3.2 attention layer
# ---------------------------------------------------------------------------------------------
def _float64_norms(theirs) -> None:
    """Their RMSNorm's formula, w · x / √(mean(x²) + ε), without its round trip through float32."""
    for norm in (theirs.q_a_layernorm, theirs.kv_a_layernorm):
        norm.forward = lambda x, norm=norm: (
            norm.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon))
        )


@pytest.mark.parametrize("reference", ["float64", "eager"])
@TOPKS
def test_sparse_latent_attention_equals_transformers(topk, reference):
    theirs = _reference(topk, "sdpa" if reference == "float64" else "eager")
    if reference == "float64":
        _float64_norms(theirs)
    ours = sparse_latent_attention_from_transformers(theirs)
    x, positions, rotation, mask = _inputs()
    their_indices = []
    theirs.indexer.register_forward_hook(lambda module, args, out: their_indices.append(out))
    with torch.no_grad():
        expected, _ = theirs(x, rotation, mask)
        out, indices = ours(x, positions, return_indices=True)
        absorbed = ours(x, positions, absorbed=True)
        scores = ours.indexer(x, positions, ours.query_norm(ours.q_down(x)))  # the query latent
    assert _boundary_ties(scores, topk) == 0, "the fixture must not leave a tie at the k-th key (see _boundary_ties)"
    _assert_same_choice(indices, their_indices[0], scores, topk)
    tolerance = 1e-12 if reference == "float64" else 1e-6
    torch.testing.assert_close(out, expected, rtol=0, atol=tolerance)
    torch.testing.assert_close(absorbed, out, rtol=0, atol=1e-12)  # lesson 11's absorbed form reads the choice too
    torch.testing.assert_close(ours.select_keys(x), indices, rtol=0, atol=0)


def test_the_choice_matters_with_fewer_keys_than_tokens():
    """5 of 12 keys is not dense attention (else the equality above would not test the selection)."""
    ours = sparse_latent_attention_from_transformers(_reference(5))
    x, positions, _, _ = _inputs()
    with torch.no_grad():
        sparse, indices = ours(x, positions, return_indices=True)
        ours.index_topk = T
        dense = ours(x, positions)
    assert (indices >= 0).sum(-1).lt(positions + 1).any()  # some queries lost keys
    assert not torch.allclose(sparse, dense, atol=1e-3)
    torch.testing.assert_close(sparse[:, :5], dense[:, :5], rtol=0, atol=1e-12)  # the first 5 queries read all


# ---------------------------------------------------------------------------------------------
# (3) cached keys: a later query scores against them as in the prefill
# ---------------------------------------------------------------------------------------------
def test_scores_against_cached_keys_are_the_prefills():
    torch.manual_seed(3)
    indexer = LightningIndexer(E, num_heads=4, head_dim=16, rotary_dim=8, query_dim=24).double()
    x, positions, _, _ = _inputs()
    query_input = torch.randn(N, T, 24, dtype=torch.float64)
    with torch.no_grad():
        prefill = indexer(x, positions, query_input)  # (N, T, T)
        cached = indexer.index_keys(x, positions)  # what a cache keeps: (N, T, d_I)
        later = indexer.index_scores(x[:, -3:], cached, positions[-3:], query_input[:, -3:])
    assert cached.shape == (N, T, indexer.cache_numbers_per_token())
    torch.testing.assert_close(later, prefill[:, -3:], rtol=0, atol=1e-12)


# ---------------------------------------------------------------------------------------------
# (4) refusals
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("sizes", "message"),
    [
        ({"rotary_dim": 3}, "rotary_dim must be even"),
        ({"rotary_dim": 18}, r"rotary_dim must be an int in 0 \.\. head_dim = 16"),
        ({"num_heads": 0}, "num_heads must be a positive int"),
        ({"rotary_base": -1.0}, "rotary_base must be a finite positive number"),
    ],
)
def test_the_indexer_refuses_bad_sizes(sizes, message):
    with pytest.raises(ValueError, match=message):
        LightningIndexer(E, **({"head_dim": 16} | sizes))


def test_the_indexer_refuses_inputs_of_the_wrong_shape():
    indexer = LightningIndexer(E, num_heads=4, head_dim=16, query_dim=24)
    x, positions = torch.randn(N, T, E), torch.arange(T)
    keys = indexer.index_keys(x, positions)
    with pytest.raises(ValueError, match=r"x must be a float tensor \(N, L, E\) with E = 64, got \(2, 12, 32\)"):
        indexer.index_keys(x[..., :32], positions)
    with pytest.raises(ValueError, match=r"positions must be \(L,\) = \(12,\)"):
        indexer.index_keys(x, positions[:5])
    with pytest.raises(TypeError, match="positions must be an integer tensor"):
        indexer.index_keys(x, positions.double())
    with pytest.raises(ValueError, match=r"keys must be \(N, S, d_I\) = \(2, S, 16\)"):
        indexer.index_scores(x, keys[..., :8], positions, torch.randn(N, T, 24))
    with pytest.raises(ValueError, match=r"query_input must be \(N, L, d_q'\) = \(2, 12, 24\)"):
        indexer.index_scores(x, keys, positions)  # the default, x, is 64 wide, not the query latent's 24


def test_the_layer_and_the_loaders_refuse_what_they_cannot_carry():
    with pytest.raises(ValueError, match="needs query_latent_dim"):
        SparseLatentAttention(LatentConfig(embed_dim=E, num_heads=4, head_dim=8, latent_dim=16, rotary_dim=8), 5)
    with pytest.raises(ValueError, match="index_topk must be a positive int"):
        SparseLatentAttention(LatentConfig(E, 4, 8, 16, rotary_dim=8, query_latent_dim=24), 0)
    with pytest.raises(TypeError, match="expects transformers' DeepseekV32Indexer"):
        indexer_from_transformers(LightningIndexer(E))
    theirs = _reference(5)
    theirs.config.v_head_dim = 16
    with pytest.raises(ValueError, match="v_head_dim = qk_nope_head_dim"):
        sparse_latent_attention_from_transformers(theirs)
