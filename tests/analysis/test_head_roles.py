"""Head-role scores on hand-made attention maps, and the ablation tools on a small random encoder."""

from __future__ import annotations

import math

import pytest
import torch

from helpers.analysis.head_roles import (
    PARAPHRASE_PAIRS,
    ROLES,
    HeadRoles,
    SimilarityTask,
    ablation_costs,
    gated_heads,
    gradient_importance,
    head_gates,
    pruning_curve,
    role_sums,
    spearman,
    token_kinds,
)
from helpers.models.pretrained import EncoderConfig, PretrainedEncoder

TOKENS = [
    ["[CLS]", "a", "dog", "runs", ".", "[SEP]"],  # T = 6
    ["[CLS]", "hi", "!", "[SEP]"],  # 4 real tokens + 2 padding
]
MASK = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]])


def planted_heads() -> torch.Tensor:
    """(layers=1, N=2, h=5, T=6, T=6): previous-token, next-token, self, all-on-[CLS], uniform heads.

    Rows of padded queries hold junk (all on key 5), which the scores must ignore. The first token of the
    previous-token head looks at itself, and the last real token of the next-token head too.
    """
    N, T = MASK.shape
    weights = torch.zeros(1, N, 5, T, T)
    for n in range(N):
        length = int(MASK[n].sum())
        for t in range(T):
            if t >= length:
                weights[0, n, :, t, 5] = 1.0  # junk in padded rows
                continue
            weights[0, n, 0, t, max(t - 1, 0)] = 1.0
            weights[0, n, 1, t, min(t + 1, length - 1)] = 1.0
            weights[0, n, 2, t, t] = 1.0
            weights[0, n, 3, t, 0] = 1.0
            weights[0, n, 4, t, :length] = 1.0 / length
    return weights


def roles_of(weights: torch.Tensor) -> HeadRoles:
    sums, counts = role_sums(weights, MASK, token_kinds(TOKENS, MASK.size(1)))
    return HeadRoles(sums / counts[:, None, None], sentences=MASK.size(0))


def test_token_kinds_flag_cls_sep_and_punctuation_only_on_real_tokens():
    kinds = token_kinds(TOKENS, 6)
    assert kinds["[CLS]"].nonzero().tolist() == [[0, 0], [1, 0]]
    assert kinds["[SEP]"].nonzero().tolist() == [[0, 5], [1, 3]]
    assert kinds["punctuation"].nonzero().tolist() == [[0, 4], [1, 2]]


def test_planted_heads_get_the_roles_they_were_built_for():
    roles = roles_of(planted_heads())
    # 8 (query, previous key) pairs: 5 in sentence 0, 3 in sentence 1.
    # The [CLS] head's second row is a previous-token look (2 of the 8 pairs); the uniform head gives 1/6 to the
    # previous token in sentence 0 (5 pairs) and 1/4 in sentence 1 (3 pairs).
    assert roles["previous"][0].tolist() == pytest.approx([1.0, 0.0, 0.0, 2 / 8, (5 / 6 + 3 / 4) / 8])
    assert roles["next"][0, 1] == pytest.approx(1.0)
    assert roles["next"][0, 0] == pytest.approx(0.0)
    assert roles["same"][0].tolist()[:3] == pytest.approx([2 / 10, 2 / 10, 1.0])  # first rows look at themselves
    assert roles["[CLS]"][0, 3] == pytest.approx(1.0)
    # Entropy: 0 for every one-hot head, ln(length) averaged over the 10 real rows for the uniform head.
    assert roles["entropy"][0, :4].tolist() == pytest.approx([0.0] * 4, abs=1e-6)
    assert roles["entropy"][0, 4] == pytest.approx((6 * math.log(6) + 4 * math.log(4)) / 10)


def test_sink_scores_add_up_with_the_weight_on_every_kind():
    roles = roles_of(planted_heads())
    uniform_sink = (6 * 3 / 6 + 4 * 3 / 4) / 10  # [CLS], one punctuation mark and [SEP] in each sentence
    assert float(roles.sink[0, 4]) == pytest.approx(uniform_sink)
    assert float(roles.sink[0, 3]) == pytest.approx(1.0)


def test_specialists_name_exactly_the_planted_heads():
    found = {(role, layer, head) for role, layer, head, _ in roles_of(planted_heads()).specialists(0.9)}
    assert found == {("previous", 0, 0), ("next", 0, 1), ("same", 0, 2), ("[CLS]", 0, 3)}


def test_role_sums_rejects_weights_of_the_wrong_shape():
    with pytest.raises(ValueError, match="layers, N, h, T, T"):
        role_sums(torch.ones(2, 5, 6, 6), MASK, token_kinds(TOKENS, 6))
    with pytest.raises(KeyError, match="unknown role"):
        roles_of(planted_heads())["cls"]
    assert len(ROLES) == roles_of(planted_heads()).scores.size(0)


def test_spearman_agrees_with_scipy():
    generator = torch.Generator().manual_seed(3)
    a, b = torch.randn(6, 12, generator=generator), torch.randn(6, 12, generator=generator)
    from scipy.stats import spearmanr  # here, not at the top: scipy.stats costs every worker 0.8 s of collection

    assert spearman(a, b) == pytest.approx(spearmanr(a.flatten(), b.flatten()).statistic, abs=1e-9)
    assert spearman(a, 2 * a + 1) == pytest.approx(1.0)
    assert spearman(a, -a) == pytest.approx(-1.0)


# ---------------------------------------------------------------------------------------------
# Ablation tools, on a small random encoder with a stand-in tokenizer
# ---------------------------------------------------------------------------------------------
class CharacterTokenizer:
    """Just enough of a Hugging Face tokenizer for SimilarityTask: characters as ids, [CLS] 1 ... [SEP] 2."""

    def __call__(self, sentences, padding=True, return_tensors="pt"):
        rows = [[1, *[3 + ord(c) % 40 for c in s], 2] for s in sentences]
        T = max(map(len, rows))
        ids = torch.tensor([r + [0] * (T - len(r)) for r in rows])
        return {"input_ids": ids, "attention_mask": (ids != 0).long()}

    def convert_ids_to_tokens(self, ids):
        return [str(i) for i in ids]


@pytest.fixture(scope="module")
def small():
    torch.manual_seed(0)
    config = EncoderConfig(vocab_size=50, max_positions=64, embed_dim=16, num_heads=4, num_layers=2, ff_dim=32)
    model = PretrainedEncoder(config).eval()
    return model, SimilarityTask(CharacterTokenizer(), PARAPHRASE_PAIRS[:6])


def test_silencing_a_head_equals_zeroing_its_columns_of_the_output_projection(small):
    model, task = small
    with torch.no_grad(), gated_heads(model, head_gates(model, [(1, 2)])):
        gated = task.cosines(model)
    assert all(layer.head_gate is None for layer in model.layers), "the gates are removed on exit"
    out_proj = model.layers[1].self_attn.out_proj
    saved = out_proj.weight.detach().clone()
    with torch.no_grad():
        out_proj.weight[:, 8:12] = 0.0  # head 2 of 4 owns features 8..11 (d = 4)
        zeroed = task.cosines(model)
        out_proj.weight.copy_(saved)
        untouched = task.cosines(model)
    torch.testing.assert_close(gated, zeroed)
    assert not torch.allclose(gated, untouched)


def test_ablation_costs_match_full_reruns(small):
    model, task = small
    full, costs = ablation_costs(model, task)  # reuses the lower layers' inputs
    for layer, head in [(0, 1), (1, 3)]:
        with gated_heads(model, head_gates(model, [(layer, head)])):
            rerun = task.score(model)  # every layer from the embeddings
        assert costs[layer, head] == pytest.approx(full.margin - rerun.margin, abs=1e-6)


def test_the_ablation_and_pruning_sweeps_say_each_tenth_under_a_label_and_compute_the_same(small, capsys):
    model, task = small
    quiet = ablation_costs(model, task)
    assert capsys.readouterr().out == ""
    spoken = ablation_costs(model, task, progress="ablation")  # 2 layers x 4 heads
    lines = capsys.readouterr().out.splitlines()
    assert spoken[0] == quiet[0] and torch.equal(spoken[1], quiet[1])
    assert [line.split(" (")[0] for line in lines] == [f"ablation: {p}%" for p in (10, 20, 30, 50, 60, 70, 80, 100)]
    assert lines[-1].startswith("ablation: 100% (8/8 heads), ") and lines[-1].endswith(" s elapsed")
    order = [(layer, head) for layer in range(2) for head in range(4)]
    assert pruning_curve(model, task, order, [0, 8], progress="pruning") == pruning_curve(model, task, order, [0, 8])
    assert [line.split(" (")[0] for line in capsys.readouterr().out.splitlines()] == ["pruning: 50%", "pruning: 100%"]


def test_gradient_importance_is_the_derivative_of_the_margin_with_respect_to_a_gate(small):
    model, task = small
    gradient = gradient_importance(model, task)
    eps = 1e-3
    for layer, head in [(0, 0), (1, 2)]:
        gates = head_gates(model)
        gates[layer, head] = 1.0 + eps
        with torch.no_grad(), gated_heads(model, gates):
            up = float(task.margin(model))
        gates[layer, head] = 1.0 - eps
        with torch.no_grad(), gated_heads(model, gates):
            down = float(task.margin(model))
        assert gradient[layer, head] == pytest.approx((up - down) / (2 * eps), rel=2e-2, abs=1e-4)


def test_pruning_curve_starts_at_the_full_score_and_checks_its_counts(small):
    model, task = small
    order = [(layer, head) for layer in range(2) for head in range(4)]
    curve = pruning_curve(model, task, order, [0, 8])
    assert curve[0] == task.score(model)
    assert curve[1] != curve[0]
    with pytest.raises(ValueError, match="cannot silence 9 heads"):
        pruning_curve(model, task, order, [9])
    with pytest.raises(ValueError, match="gates must have shape"), gated_heads(model, torch.ones(3, 4)):
        pass


def test_task_score_on_known_cosines(small, monkeypatch):
    model, task = small
    cosines = torch.tensor(
        [[0.9, 0.1, 0.2, 0.0, 0.0, 0.0]] + [[0.0] * i + [1.0] + [0.0] * (5 - i) for i in range(1, 6)]
    )
    cosines[1, 0] = 2.0  # the second first-sentence is nearer to the first paraphrase: one miss in six
    monkeypatch.setattr(task, "cosines", lambda *args: cosines)
    score = task.score(model)
    assert score.accuracy == pytest.approx(5 / 6)
    assert score.paraphrase_cosine == pytest.approx((0.9 + 5) / 6)
    assert score.unrelated_cosine == pytest.approx((0.1 + 0.2 + 2.0) / 30)
    assert score.margin == pytest.approx(score.paraphrase_cosine - score.unrelated_cosine)


def test_similarity_task_needs_two_pairs():
    with pytest.raises(ValueError, match="at least two pairs"):
        SimilarityTask(CharacterTokenizer(), PARAPHRASE_PAIRS[:1])
