"""helpers.analysis.circuits: the repeated task, the attention-only model, head scores, composition and hooks."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from helpers.analysis.circuits import (
    AttentionOnlyTransformer,
    composition_scores,
    duplicate_token_score,
    head_hooks,
    head_scores,
    induction_score,
    mean_head_outputs,
    output_projections,
    patching_map,
    previous_token_score,
    record_head_outputs,
    repeated_batch,
    repeated_loss,
    train_induction,
)


def small_model(seed: int = 0, layers: int = 2) -> AttentionOnlyTransformer:
    torch.manual_seed(seed)
    return AttentionOnlyTransformer(vocab_size=20, embed_dim=16, num_heads=4, num_layers=layers, max_len=24).eval()


# --- the task ---------------------------------------------------------------------------------
def test_repeated_batch_repeats_one_segment_right_after_itself():
    batch = repeated_batch(50, 40, 30, (4, 12), torch.Generator().manual_seed(0))
    assert batch.ids.shape == batch.predictable.shape == (50, 40)
    for n in range(50):
        s, L = int(batch.start[n]), int(batch.length[n])
        assert 4 <= L <= 12 and 0 <= s <= 40 - 2 * L
        assert torch.equal(batch.ids[n, s + L : s + 2 * L], batch.ids[n, s : s + L])
        marked = batch.predictable[n].nonzero().flatten().tolist()
        assert marked == list(range(s + L, s + 2 * L - 1))  # the last token of the copy predicts a random one
    assert len(set(batch.length.tolist())) > 3 and len(set(batch.start.tolist())) > 3


def test_a_fixed_length_puts_every_copy_at_the_same_distance():
    batch = repeated_batch(20, 40, 30, (8, 8), torch.Generator().manual_seed(1))
    assert set(batch.length.tolist()) == {8}
    assert set(batch.predictable.sum(1).tolist()) == {7}


@pytest.mark.parametrize("lengths", [(1, 4), (6, 5), (4, 21)])
def test_repeated_batch_rejects_lengths_that_do_not_fit(lengths):
    with pytest.raises(ValueError, match="lengths must satisfy"):
        repeated_batch(2, 40, 10, lengths)


# --- the model ------------------------------------------------------------------------------
def test_a_layer_equals_torch_multihead_attention_with_a_causal_mask():
    model = small_model()
    layer = model.layers[0]
    torch_mha = nn.MultiheadAttention(16, 4, bias=False, batch_first=True)
    with torch.no_grad():
        torch_mha.in_proj_weight.copy_(torch.cat([layer.q_proj.weight, layer.k_proj.weight, layer.v_proj.weight]))
        torch_mha.out_proj.weight.copy_(layer.out_proj.weight)
    x = torch.randn(3, 10, 16)
    blocked = torch.ones(10, 10, dtype=torch.bool).triu(1)
    expected, expected_weights = torch_mha(x, x, x, attn_mask=blocked, average_attn_weights=False)
    out, weights = layer(x)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(weights, expected_weights, atol=1e-5, rtol=1e-5)


def test_the_model_returns_logits_and_one_weight_tensor_per_layer():
    model = small_model(layers=3)
    ids = torch.randint(20, (2, 24))
    logits, weights = model(ids, need_weights=True)
    assert logits.shape == (2, 24, 20) and len(weights) == 3 and weights[0].shape == (2, 4, 24, 24)
    torch.testing.assert_close(model(ids), logits)
    assert torch.all(weights[2].triu(1) == 0)  # causal
    with pytest.raises(ValueError, match="at most 24"):
        model(torch.zeros(1, 25, dtype=torch.long))


def test_repeated_loss_counts_only_the_predictable_targets():
    batch = repeated_batch(4, 24, 20, (3, 6), torch.Generator().manual_seed(2))
    logits = torch.randn(4, 24, 20)
    keep = batch.predictable[:, :-1]
    manual = F.cross_entropy(logits[:, :-1][keep], batch.ids[:, 1:][keep])
    torch.testing.assert_close(repeated_loss(logits, batch), manual)
    perfect = F.one_hot(batch.ids.roll(-1, 1), 20).float() * 100
    assert repeated_loss(perfect, batch) < 1e-6


# --- scores ---------------------------------------------------------------------------------
def brute_force(weights, ids, shift):
    """Loops: per head, mean over queries with a target of the weight on keys j < i, ids[j - shift] == ids[i]."""
    N, h, T, _ = weights.shape
    total, count = torch.zeros(h), 0
    for n in range(N):
        for i in range(T):
            keys = [j for j in range(i) if j - shift >= 0 and ids[n, j - shift] == ids[n, i]]
            if keys:
                total += weights[n, :, i, keys].sum(-1)
                count += 1
    return total / count


def causal_weights(N, h, T, seed=0):
    scores = torch.randn(N, h, T, T, generator=torch.Generator().manual_seed(seed))
    return scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf")).softmax(-1)


def test_induction_and_duplicate_scores_equal_loops():
    ids = torch.randint(5, (3, 12), generator=torch.Generator().manual_seed(3))  # many recurring tokens
    weights = causal_weights(3, 2, 12)
    torch.testing.assert_close(induction_score(weights, ids), brute_force(weights, ids, 1))
    torch.testing.assert_close(duplicate_token_score(weights, ids), brute_force(weights, ids, 0))


def test_a_perfect_induction_head_scores_one_and_a_previous_token_head_scores_one():
    batch = repeated_batch(1, 30, 10**6, (10, 10), torch.Generator().manual_seed(4))
    s, L = int(batch.start[0]), int(batch.length[0])
    T = 30
    induction = torch.zeros(1, 1, T, T)
    induction[0, 0, :, 0] = 1.0
    for i in range(s + L, s + 2 * L):
        induction[0, 0, i] = 0.0
        induction[0, 0, i, i - L + 1] = 1.0
    previous = torch.zeros(1, 1, T, T)
    previous[0, 0, 0, 0] = 1.0
    previous[0, 0, torch.arange(1, T), torch.arange(T - 1)] = 1.0
    assert induction_score(induction, batch.ids).item() == pytest.approx(1.0)
    assert previous_token_score(previous).item() == pytest.approx(1.0)
    assert induction_score(previous, batch.ids).item() < 0.2
    assert duplicate_token_score(induction, batch.ids).item() == pytest.approx(0.0)


def test_scores_reject_wrong_shapes_and_batches_without_repeats():
    with pytest.raises(ValueError, match=r"\(N, h, T, T\)"):
        previous_token_score(torch.zeros(2, 3, 4))
    with pytest.raises(ValueError, match=r"ids should be \(N, T\)"):
        induction_score(torch.zeros(2, 1, 4, 4), torch.zeros(2, 5, dtype=torch.long))
    with pytest.raises(ValueError, match="no query"):
        induction_score(causal_weights(1, 1, 4), torch.arange(4)[None])


def test_head_scores_stacks_layers():
    weights = [causal_weights(2, 3, 6, seed) for seed in range(2)]
    stacked = head_scores(weights, previous_token_score)
    assert stacked.shape == (2, 3)
    torch.testing.assert_close(stacked[1], previous_token_score(weights[1]))


# --- composition ----------------------------------------------------------------------------
def test_composition_scores_follow_their_definition():
    model = small_model(5)
    d = 4
    l0, l1 = model.layers
    i, j = 2, 1
    rows = slice(i * d, (i + 1) * d)
    ov = l0.v_proj.weight[rows].T @ l0.out_proj.weight[:, rows].T
    rows = slice(j * d, (j + 1) * d)
    qk = l1.q_proj.weight[rows].T @ l1.k_proj.weight[rows]
    ov_later = l1.v_proj.weight[rows].T @ l1.out_proj.weight[:, rows].T

    def score(a, b):
        return ((a @ b).norm() / (a.norm() * b.norm())).item()

    for kind, expected in {"Q": score(ov, qk), "K": score(qk, ov.T), "V": score(ov, ov_later)}.items():
        assert composition_scores(model, kind)[i, j].item() == pytest.approx(expected, rel=1e-5)


def test_a_key_that_reads_exactly_what_a_head_writes_composes_more_than_the_rest():
    model = small_model(6)
    with torch.no_grad():
        # layer-1 head 0's keys read the four directions layer-0 head 3 writes to.
        written = model.layers[0].out_proj.weight[:, 12:16]  # (E, d): the columns head 3 writes with
        model.layers[1].k_proj.weight[0:4] = written.T
    k = composition_scores(model, "K")
    assert k.argmax().item() == 3 * 4 + 0
    with pytest.raises(ValueError, match="kind"):
        composition_scores(model, "O")
    with pytest.raises(ValueError, match="earlier"):
        composition_scores(model, "K", 1, 1)


# --- hooks ----------------------------------------------------------------------------------
def test_zeroing_a_head_equals_zeroing_its_columns_of_the_output_projection():
    model = small_model(7)
    ids = torch.randint(20, (2, 24))
    with head_hooks(model.output_projections(), 4, [(1, 2), (0, 0)]):
        ablated = model(ids)
    plain = model(ids)
    surgery = small_model(7)
    with torch.no_grad():
        surgery.layers[1].out_proj.weight[:, 8:12] = 0
        surgery.layers[0].out_proj.weight[:, 0:4] = 0
    torch.testing.assert_close(ablated, surgery(ids))
    torch.testing.assert_close(model(ids), plain)  # the hooks are gone
    assert not torch.allclose(ablated, plain)


def test_mean_ablation_puts_the_recorded_mean_at_every_position():
    model = small_model(8, layers=1)
    ids = torch.randint(20, (3, 24))
    projections = model.output_projections()
    means = mean_head_outputs(model, projections, 4, ids)
    with record_head_outputs(projections, 4) as recorded:
        model(ids)
    assert [m.shape for m in means] == [(4, 4)]
    torch.testing.assert_close(means[0], recorded[0].mean(dim=(0, 1)))
    with head_hooks(projections, 4, [(0, 1)], means):
        ablated = model(ids)
    heads = recorded[0].clone()
    heads[:, :, 1] = means[0][1]
    x = model.embed(ids) + model.position(torch.arange(24))
    torch.testing.assert_close(ablated, model.unembed(x + projections[0](heads.flatten(-2))))


def test_patching_every_head_from_the_clean_run_gives_the_clean_logits():
    model = small_model(9)
    clean, corrupted = torch.randint(20, (2, 2, 24))
    projections = model.output_projections()
    with record_head_outputs(projections, 4) as recorded:
        expected = model(clean)
    everything = [(layer, head) for layer in range(2) for head in range(4)]
    with head_hooks(projections, 4, everything, recorded):
        patched = model(corrupted)
    # Embeddings still differ, so only the heads' part of the stream matches: compare with a direct computation.
    x = model.embed(corrupted) + model.position(torch.arange(24))
    for layer in range(2):
        x = x + projections[layer](recorded[layer].flatten(-2))
    torch.testing.assert_close(patched, model.unembed(x))
    assert not torch.allclose(patched, expected)
    with pytest.raises(ValueError, match="no head"), head_hooks(projections, 4, [(2, 0)]):
        pass
    with pytest.raises(ValueError, match="same shape"), head_hooks(projections, 4, [(0, 0)], recorded):
        model(corrupted[:1])


def test_patching_map_is_the_recovered_fraction_of_the_metric():
    model = small_model(10)
    clean = torch.randint(20, (4, 24), generator=torch.Generator().manual_seed(0))
    corrupted = torch.randint(20, (4, 24), generator=torch.Generator().manual_seed(1))

    def metric(logits):
        return logits[:, -1, 0].mean()

    result = patching_map(model, model.output_projections(), 4, clean, corrupted, metric)
    assert result.shape == (2, 4)
    projections = model.output_projections()
    with record_head_outputs(projections, 4) as recorded:
        m_clean = metric(model(clean))
    m_corrupted = metric(model(corrupted))
    with head_hooks(projections, 4, [(1, 3)], recorded):
        m_patched = metric(model(corrupted))
    expected = (m_patched - m_corrupted) / (m_clean - m_corrupted)
    assert result[1, 3].item() == pytest.approx(expected.item(), rel=1e-4)
    some = patching_map(model, projections, 4, clean, corrupted, metric, heads=[(1, 3), (0, 2)])
    assert torch.isnan(some).sum() == 6 and some[1, 3] == result[1, 3] and some[0, 2] == result[0, 2]


def test_output_projections_finds_each_layers_out_proj_in_order():
    model = small_model(layers=3)
    assert output_projections(model) == model.output_projections()
    with pytest.raises(ValueError, match="no submodule named out_proj"):
        output_projections(nn.Linear(2, 2))


# --- training -------------------------------------------------------------------------------
def test_training_records_the_fixed_steps_and_is_seeded():
    runs = []
    for _ in range(2):
        model = small_model(11)
        runs.append(train_induction(model, steps=12, lengths=(3, 8), batch_size=8, every=5, eval_size=16, seed=3))
    first, second = runs
    assert first.steps == [0, 5, 10, 12]
    assert first.loss == second.loss
    assert first.induction[0].shape == first.previous[0].shape == (2, 4)
    assert first.loss[-1] < first.loss[0] + 1.0
    assert first.first_step_below(-1.0) is None and first.first_step_below(100.0) == 0


def test_training_with_a_progress_label_prints_a_line_at_every_tenth_and_trains_the_same(capsys):
    quiet, spoken = small_model(11), small_model(11)
    quiet_run = train_induction(quiet, steps=20, lengths=(3, 8), batch_size=8, every=5, eval_size=16, seed=3)
    assert capsys.readouterr().out == ""  # no label: silent
    spoken_run = train_induction(
        spoken, steps=20, lengths=(3, 8), batch_size=8, every=5, eval_size=16, seed=3, progress="two layers"
    )
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(" (")[0] for line in lines] == [f"two layers: {10 * k}%" for k in range(1, 11)]
    assert lines[-1].startswith("two layers: 100% (20/20 steps), ") and lines[-1].endswith(" s elapsed")
    assert spoken_run.loss == quiet_run.loss  # the lines change nothing in the training


def test_lesson_11s_training_passes_its_progress_label_on(capsys):
    from helpers.analysis.cache_budget import build_variant, train_repeated

    torch.manual_seed(0)
    result = train_repeated(build_variant("MQA", vocab_size=20), steps=5, batch_size=4, eval_size=8, progress="MQA")
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(" (")[0] for line in lines] == [f"MQA: {20 * k}%" for k in range(1, 6)]
    assert result.history.steps[-1] == 5


def test_the_hooks_work_on_the_course_gpt_too():
    from helpers.gpt import GPT, GPTConfig

    torch.manual_seed(12)
    gpt = GPT(GPTConfig(vocab_size=20, embed_dim=16, num_heads=4, num_kv_heads=2, num_layers=2)).eval()
    projections = output_projections(gpt)
    assert len(projections) == 2 and projections[0].in_features == 16
    ids = torch.randint(20, (2, 10))
    with torch.no_grad(), head_hooks(projections, 4, [(1, 1)]):
        ablated = gpt(ids)
    with torch.no_grad():
        projections[1].weight[:, 4:8] = 0  # head 1's columns of the last layer's output projection
        expected = gpt(ids)
    torch.testing.assert_close(ablated, expected)
