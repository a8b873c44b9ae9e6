"""Lesson 12's tools on small course GPTs (grouped-query, rotary, RMSNorm, as SmolLM2 is): the IOI batch, the logit
difference, the residual stream, the logit lens, direct logit attribution (its parts add up exactly, a per-part
norm does not), residual patching and path patching (against a block-by-block computation, and right for shared
key/value heads)."""

from __future__ import annotations

import re

import pytest
import torch

from helpers.analysis.attribution import direct_logit_attribution, logit_lens, residual_stream
from helpers.analysis.circuits import head_hooks, record_head_outputs
from helpers.analysis.ioi import TEMPLATES, ioi_batch, logit_difference, name_pairs
from helpers.analysis.patching import path_patching, query_heads_moved, residual_patching
from helpers.gpt import GPT, GPTConfig

NAMES = ["Mary", "John", "Alice", "Bob", "Tom", "Anna"]


class WordTokenizer:
    """Each word (with its leading space) or punctuation mark is one token; "Mary-Ann" is two."""

    def __init__(self) -> None:
        self.vocab: dict[str, int] = {}

    def __call__(self, text: str) -> dict[str, list[int]]:
        pieces = re.findall(r" ?[A-Za-z]+| ?[^A-Za-z ]", text)
        return {"input_ids": [self.vocab.setdefault(p, len(self.vocab)) for p in pieces]}


@pytest.fixture(scope="module")
def batch():
    return ioi_batch(WordTokenizer(), TEMPLATES[0], name_pairs(NAMES))


def small_gpt(norm: str = "rms", seed: int = 0, vocab: int = 64) -> GPT:
    torch.manual_seed(seed)
    config = GPTConfig(vocab_size=vocab, embed_dim=24, num_heads=6, num_kv_heads=2, num_layers=3, ff_dim=32,
                       positions="rotary", norm=norm, feed_forward="swiglu" if norm == "rms" else "gelu")  # fmt: skip
    return GPT(config).eval()


# --- the task -------------------------------------------------------------------------------------------------
def test_the_batch_holds_both_roles_and_orders_and_the_roles_positions(batch):
    assert len(batch.prompts) == 12 and batch.ids.shape == batch.corrupted.shape
    assert batch.prompts[0] == "When Mary and John went to the store, John gave a drink to"  # IO = Mary, ABB
    assert batch.prompts[1] == "When John and Mary went to the store, John gave a drink to"  # IO = Mary, BAB
    assert batch.prompts[2] == "When John and Mary went to the store, Mary gave a drink to"  # IO = John, ABB
    assert batch.prompts[3] == "When Mary and John went to the store, Mary gave a drink to"  # IO = John, BAB
    assert (batch.io[0::4] == batch.s[2::4]).all()  # each name once as IO, once as S: a liked name cancels
    rows = torch.arange(12)
    assert (batch.ids[rows, batch.positions["IO"]] == batch.io).all()
    assert (batch.ids[rows, batch.positions["S1"]] == batch.s).all()
    assert (batch.ids[rows, batch.positions["S2"]] == batch.s).all()
    assert batch.positions["IO"][0] == 1 and batch.positions["S1"][1] == 1  # ABB: IO first; BAB: S first
    # the corrupted prompt differs at S2 alone, where it names the third name
    differs = batch.ids != batch.corrupted
    assert (differs.sum(1) == 1).all() and (differs.float().argmax(1) == batch.positions["S2"]).all()
    assert (batch.corrupted[rows, batch.positions["S2"]] == batch.c).all()
    assert (batch.c != batch.io).all() and (batch.c != batch.s).all()


@pytest.mark.parametrize(
    ("template", "names", "error"),
    [
        ("When {A} and {B} went out, gave a drink to", NAMES, r"\{S\} 0 times"),
        ("When {B} and {A} went out, {S} gave a drink to", NAMES, "then"),
        ("When {A} and {B} went out, {S} gave a drink to ", NAMES, "trailing space"),
        (TEMPLATES[0], ["Mary", "John", "Alice", "Bob-Tom"], "one token"),
        (TEMPLATES[0], ["Mary", "John", "Alice"], "even number"),
        (TEMPLATES[0], ["Mary", "John", "Mary", "Bob"], "must all differ"),
        ("When {A} and {B} met {C}, {S} gave a drink to", NAMES, r"\{A\}, \{B\} and \{S\} alone .*got \{C\}"),
        ("When {A} and {B} met {0}, {S} gave a drink to", NAMES, r"alone .*got \{0\}"),
        ("When {A:>8} and {B} went out, {S} gave a drink to", NAMES, r"alone .*got \{A:>8\}"),
        ("When {A} and {B} went out {, {S} gave a drink to", NAMES, "braces must pair up"),
    ],
)
def test_bad_templates_and_names_are_refused(template, names, error):
    with pytest.raises(ValueError, match=error):
        ioi_batch(WordTokenizer(), template, name_pairs(names))


@pytest.mark.parametrize(
    ("names", "error"),
    [
        ("abcd", r"a sequence of names .*got str 'abcd' \(a string would be read letter by letter\)"),
        (["Mary", "John", 3, "Bob"], "each name is a non-empty string, got 3"),
        (["Mary", "John", "", "Bob"], "each name is a non-empty string, got ''"),
    ],
)
def test_names_that_are_not_a_sequence_of_strings_are_refused(names, error):
    with pytest.raises(TypeError, match=error):
        name_pairs(names)


@pytest.mark.parametrize("pairs", ["abc", ["abc"], [("Mary", "John", 3)]])
def test_triples_that_are_not_three_names_are_refused(pairs):
    with pytest.raises(TypeError, match=r"triple"):
        ioi_batch(WordTokenizer(), TEMPLATES[0], pairs)


def test_the_logit_difference_reads_io_minus_s_at_the_last_position(batch):
    logits = torch.zeros(12, batch.ids.size(1), 100)
    rows = torch.arange(12)
    logits[rows, -1, batch.io] = 3.0
    logits[rows, -1, batch.s] = 1.0
    logits[rows, -2, batch.s] = 50.0  # another position: not read
    assert float(logit_difference(logits, batch)) == 2.0
    assert logit_difference(logits, batch, per_prompt=True).shape == (12,)
    with pytest.raises(ValueError, match="N = 12"):
        logit_difference(logits[:3], batch)


# --- the residual stream, the lens, attribution ----------------------------------------------------------------
def test_the_residual_stream_starts_at_the_embedding_and_ends_at_the_logits(batch):
    model = small_gpt()
    stream = residual_stream(model, batch.ids)
    assert stream.shape == (4, 12, batch.ids.size(1), 24)
    with torch.no_grad():
        torch.testing.assert_close(stream[0], model.token_embedding(batch.ids))
        torch.testing.assert_close(model.lm_head(model.norm(stream[-1])), model(batch.ids))


def test_the_lens_last_reading_is_the_models_logit_difference(batch):
    model = small_gpt()
    lens = logit_lens(model, batch)
    assert lens.shape == (4,)
    with torch.no_grad():
        torch.testing.assert_close(lens[-1], logit_difference(model(batch.ids), batch))


@pytest.mark.parametrize("norm", ["rms", "layer"])
def test_the_parts_add_up_to_the_logit_difference(batch, norm):
    model = small_gpt(norm)
    parts = direct_logit_attribution(model, batch)
    assert parts.heads.shape == (3, 6) and parts.mlps.shape == (3,)
    torch.testing.assert_close(parts.parts_sum(), parts.total, atol=1e-4, rtol=0)
    with torch.no_grad():
        torch.testing.assert_close(parts.total, logit_difference(model(batch.ids), batch))
    # the test can fail: a norm recomputed for each part alone does not add up
    stream = residual_stream(model, batch.ids)[:, :, -1]  # (4, N, E)
    direction = model.lm_head.weight[batch.io] - model.lm_head.weight[batch.s]
    with torch.no_grad():
        per_part = sum((model.norm(stream[i + 1] - stream[i]) * direction).sum(-1).mean() for i in range(3))
        per_part = per_part + (model.norm(stream[0]) * direction).sum(-1).mean()
    assert abs(float(per_part) - float(parts.total)) > 1e-2


def test_a_model_with_a_delta_rule_layer_is_refused_by_name(batch):
    """Attribution reads each head's output projection, which a recurrent-state layer (lesson 14) has not: the
    error names the layer, instead of an AttributeError from inside the hooks."""
    torch.manual_seed(0)
    config = GPTConfig(vocab_size=64, embed_dim=24, num_heads=6, num_kv_heads=6, num_layers=3, ff_dim=32,
                       positions="rotary", layer_kinds=("global", "delta", "global"))  # fmt: skip
    with pytest.raises(ValueError, match=re.escape("layers [1] are of another kind")):
        direct_logit_attribution(GPT(config).eval(), batch)


def test_a_head_that_writes_nothing_has_no_direct_effect(batch):
    model = small_gpt()
    with torch.no_grad():
        model.blocks[1].attention.projections.out_proj.weight[:, 2 * 4 : 3 * 4] = 0  # head 2 of layer 1 (d = 4)
    parts = direct_logit_attribution(model, batch)
    assert float(parts.heads[1, 2]) == 0.0 and float(parts.heads[1].abs().sum()) > 0


# --- patching ----------------------------------------------------------------------------------------------------
def test_residual_patching_restores_where_the_prompts_differ(batch):
    model = small_gpt()
    metric = lambda logits: logit_difference(logits, batch)  # noqa: E731
    s2, io = batch.positions["S2"], batch.positions["IO"]
    result = residual_patching(model, batch.ids, batch.corrupted, metric, [s2, io, -1 % batch.ids.size(1)])
    assert result.shape == (4, 3)
    assert result[0, 0] == pytest.approx(1.0, abs=1e-4)  # the embedding at S2 is the only difference
    assert result[0, 1] == pytest.approx(0.0, abs=1e-4)  # at IO the two runs agree until a later query mixes them
    assert result[3, 2] == pytest.approx(1.0, abs=1e-4)  # the last residual at END is all the logits see
    with pytest.raises(ValueError, match="position is an int or an"):
        residual_patching(model, batch.ids, batch.corrupted, metric, [99])


def test_residual_patching_equals_a_hooked_run_of_the_whole_model(batch, monkeypatch):
    """Each entry against its definition: the whole corrupted run with one pre-hook putting the clean residual at
    one layer and position. Run with batches of one patch (MAX_ROWS = N) and of several side by side."""
    from helpers.analysis import patching

    model = small_gpt(seed=5)
    metric = lambda logits: logit_difference(logits, batch)  # noqa: E731
    s2, end = batch.positions["S2"], batch.positions["END"]
    layer, rows = 2, torch.arange(batch.ids.size(0))
    clean_residual = residual_stream(model, batch.ids)[layer]

    def patch(_, args):
        x = args[0].clone()
        x[rows, s2] = clean_residual[rows, s2]
        return (x, *args[1:])

    with torch.no_grad():
        clean, corrupted = float(metric(model(batch.ids))), float(metric(model(batch.corrupted)))
        handle = model.blocks[layer].register_forward_pre_hook(patch)
        try:
            patched = float(metric(model(batch.corrupted)))
        finally:
            handle.remove()
    expected = (patched - corrupted) / (clean - corrupted)
    assert abs(expected) > 0.05  # the patch moves something: the comparison below is not 0 = 0
    for rows_per_batch in (batch.ids.size(0), patching.MAX_ROWS):
        monkeypatch.setattr(patching, "MAX_ROWS", rows_per_batch)
        result = residual_patching(model, batch.ids, batch.corrupted, metric, [end, s2], layers=[layer])
        assert float(result[layer, 1]) == pytest.approx(expected, abs=1e-5)
        assert torch.isnan(result[0]).all() and not torch.isnan(result[layer]).any()


def test_run_from_a_layer_finishes_the_forward_pass(batch):
    model = small_gpt(seed=2)
    residuals = residual_stream(model, batch.ids)
    with torch.no_grad():
        logits = model(batch.ids)
        for layer in (0, 1, 3):
            assert torch.allclose(model.run_from(residuals[layer], layer), logits, atol=1e-5)
        assert torch.allclose(model.run_from(residuals[1], 1, last_only=True), logits[:, -1:], atol=1e-5)
    with pytest.raises(ValueError, match=r"layer must be an int in 0 \.\. n_layers = 3"):
        model.run_from(residuals[0], 4)
    with pytest.raises(ValueError, match=r"residual stream \(N, L, E\) with E = 24"):
        model.run_from(residuals[0][..., :8], 0)


def test_path_patching_map_is_the_same_whatever_the_batch(batch, monkeypatch):
    """Senders of one layer run side by side; with one sender per batch the map must not change."""
    from helpers.analysis import patching
    from helpers.analysis.patching import path_patching_map

    model = small_gpt(seed=3)
    metric = lambda logits: logit_difference(logits, batch)  # noqa: E731
    together = path_patching_map(model, batch.ids, batch.corrupted, metric, [(2, 1)])
    monkeypatch.setattr(patching, "MAX_ROWS", 1)
    one_by_one = path_patching_map(model, batch.ids, batch.corrupted, metric, [(2, 1)])
    assert torch.allclose(together[:2], one_by_one[:2], atol=1e-5) and together[:2].abs().max() > 0.01


def _block_by_block_path_patch(model, clean, corrupted, metric, sender, receivers_layer, heads):
    """Path patching into queries, computed with the model's own modules one block at a time (no hooks): the
    residual entering the receivers' layer with every head frozen clean but the sender's corrupted, MLPs run."""
    from helpers.analysis.circuits import record_head_outputs

    c = model.config
    projections = [b.attention.projections.out_proj for b in model.blocks]
    with torch.no_grad(), record_head_outputs(projections, c.num_heads) as recorded:
        model(clean)
        clean_heads = list(recorded)
        model(corrupted)
        sender_heads = recorded[sender[0]]
    with torch.no_grad():
        x = model.token_embedding(clean)
        for layer in range(receivers_layer):
            outputs = clean_heads[layer].clone()
            if layer == sender[0]:
                outputs[:, :, sender[1]] = sender_heads[:, :, sender[1]]
            x = x + projections[layer](outputs.flatten(-2))
            block = model.blocks[layer]
            x = x + block.feed_forward(block.norm2(x))
        attention = model.blocks[receivers_layer]
        q_new = attention.attention.projections.q_proj(attention.norm1(x))
        d = c.head_dim

        def patch(_, __, out):
            out = out.clone()
            for head in heads:
                out[..., head * d : (head + 1) * d] = q_new[..., head * d : (head + 1) * d]
            return out

        handle = attention.attention.projections.q_proj.register_forward_hook(patch)
        try:
            return float(metric(model(clean)))
        finally:
            handle.remove()


def test_path_patching_into_queries_equals_a_block_by_block_computation(batch):
    model = small_gpt(seed=3)
    metric = lambda logits: logit_difference(logits, batch)  # noqa: E731
    result = path_patching(model, batch.ids, batch.corrupted, metric, sender=(0, 4), receivers=[(2, 1), (2, 5)])
    expected = _block_by_block_path_patch(model, batch.ids, batch.corrupted, metric, (0, 4), 2, [1, 5])
    assert result.patched == pytest.approx(expected, abs=1e-5)
    assert result.patched != pytest.approx(result.clean, abs=1e-6)  # the path carries something: not a no-op
    with torch.no_grad():
        assert result.clean == pytest.approx(float(metric(model(batch.ids))), abs=1e-6)


def test_a_silent_sender_moves_nothing(batch):
    model = small_gpt(seed=3)
    with torch.no_grad():
        model.blocks[0].attention.projections.out_proj.weight[:, 4 * 4 : 5 * 4] = 0  # head 4 of layer 0 writes 0
    metric = lambda logits: logit_difference(logits, batch)  # noqa: E731
    result = path_patching(model, batch.ids, batch.corrupted, metric, sender=(0, 4), receivers=[(2, 1)])
    assert result.patched == pytest.approx(result.clean, abs=1e-6) and result.effect == pytest.approx(0.0, abs=1e-5)


def test_patching_a_key_value_head_moves_every_query_head_of_its_group(batch):
    """SmolLM2-style grouped queries (h = 6, h_kv = 2, g = 3): the keys of kv head 1 feed query heads 3, 4, 5."""
    model = small_gpt(seed=5)
    attention = model.blocks[2].attention
    seen: list[torch.Tensor] = []

    def recorded_softmax(scores, may_attend, positions):
        weights = scores.masked_fill(~may_attend, float("-inf")).softmax(dim=-1)
        seen.append(weights)
        return weights

    attention.weights_from_scores = recorded_softmax
    try:
        metric = lambda logits: logit_difference(logits, batch)  # noqa: E731
        path_patching(model, batch.ids, batch.corrupted, metric, sender=(0, 0), receivers=[(2, 1)], kind="k")
    finally:
        attention.weights_from_scores = None
    clean_weights, patched_weights = seen[0], seen[-1]  # the first clean run and the final patched run
    moved = [h for h in range(6) if not torch.allclose(clean_weights[:, h], patched_weights[:, h], atol=1e-7)]
    assert moved == [3, 4, 5] == [head for _, head in query_heads_moved(model, "k", [(2, 1)])]
    assert query_heads_moved(model, "q", [(2, 1)]) == [(2, 1)]


@pytest.mark.parametrize(
    ("sender", "receivers", "kind", "error"),
    [
        ((0, 6), [(2, 1)], "q", "sender query head must be an int in 0 .. 5"),
        ((True, 0), [(2, 1)], "q", "sender layer"),
        ((2, 0), [(1, 1)], "q", "later layer than the sender"),
        ((0, 0), [(2, 2)], "k", "key/value head .* in 0 .. 1"),
        ((0, 0), [(2, 1)], "o", "kind must be"),
        ((0, 0), [], "q", "at least one receiver"),
        ((0, 1, 2), [(2, 1)], "q", r"each sender head is one head written \(layer, head\).*got \(0, 1, 2\)"),
        ([(0, 1), (1,)], [(2, 1)], "q", r"each sender head is one head .*got \(1,\)"),
        ("01", [(2, 1)], "q", r"the sender heads are a collection of \(layer, head\) pairs .*got str '01'"),
        ((0, 0), "21", "q", r"the receiver heads are a collection .*got str '21'"),
        ((0, 0), [(2, 1, 0)], "q", r"each receiver head is one head .*got \(2, 1, 0\)"),
    ],
)
def test_bad_senders_and_receivers_are_refused(batch, sender, receivers, kind, error):
    model = small_gpt()
    metric = lambda logits: logit_difference(logits, batch)  # noqa: E731
    with pytest.raises(ValueError, match=error):
        path_patching(model, batch.ids, batch.corrupted, metric, sender=sender, receivers=receivers, kind=kind)


def test_the_map_gives_each_senders_single_path_patch(batch):
    from helpers.analysis.patching import path_patching_map

    model = small_gpt(seed=3)
    metric = lambda logits: logit_difference(logits, batch)  # noqa: E731
    receivers = [(2, 1), (2, 5)]
    effects = path_patching_map(model, batch.ids, batch.corrupted, metric, receivers, senders=[(0, 4), (1, 2)])
    assert effects.shape == (3, 6) and torch.isnan(effects).sum() == 18 - 2
    for sender in [(0, 4), (1, 2)]:
        single = path_patching(model, batch.ids, batch.corrupted, metric, sender=sender, receivers=receivers)
        assert float(effects[sender]) == pytest.approx(single.effect, abs=1e-5)
    every = path_patching_map(model, batch.ids, batch.corrupted, metric, receivers)  # every head before layer 2
    assert not torch.isnan(every[:2]).any() and torch.isnan(every[2]).all()


def test_the_patching_sweeps_say_each_tenth_of_their_layers_under_a_label_and_compute_the_same(batch, capsys):
    from helpers.analysis.patching import path_patching_map

    model = small_gpt(seed=3)
    metric = lambda logits: logit_difference(logits, batch)  # noqa: E731
    places = [batch.positions["S2"], -1 % batch.ids.size(1)]
    quiet = residual_patching(model, batch.ids, batch.corrupted, metric, places)
    assert capsys.readouterr().out == ""
    spoken = residual_patching(model, batch.ids, batch.corrupted, metric, places, progress="residual")
    lines = capsys.readouterr().out.splitlines()
    assert torch.equal(quiet.nan_to_num(7.0), spoken.nan_to_num(7.0))
    assert [line.split(" (")[0] for line in lines] == [f"residual: {share}%" for share in (20, 50, 70, 100)]
    assert lines[-1].startswith("residual: 100% (4/4 layers), ")  # the 3 blocks' residuals and the final norm's
    path_patching_map(model, batch.ids, batch.corrupted, metric, [(2, 1)], progress="paths")
    assert [line.split(" (")[0] for line in capsys.readouterr().out.splitlines()] == ["paths: 50%", "paths: 100%"]


def test_a_name_the_model_just_likes_cancels_in_the_mean(batch):
    """The embedding of END is the same in every prompt, so alone it can only prefer one name over another; with
    each name once as IO and once as S, that preference cancels: the lens reads 0 there, whatever the model."""
    for seed in (0, 1):
        lens = logit_lens(small_gpt(seed=seed), batch, per_prompt=True)
        assert float(lens[0].abs().max()) > 1e-3  # per prompt it is not 0 ...
        assert float(lens[0].mean()) == pytest.approx(0.0, abs=1e-5)  # ... but over the balanced batch it is


def test_a_knock_out_keeping_every_head_changes_nothing_and_one_head_is_its_mean(batch):
    from helpers.analysis.patching import knock_out

    model = small_gpt(seed=4)
    metric = lambda logits: logit_difference(logits, batch)  # noqa: E731
    every = [(layer, head) for layer in range(3) for head in range(6)]
    with torch.no_grad():
        clean = float(metric(model(batch.ids)))
    assert knock_out(model, batch.ids, batch.corrupted, metric, keep=every) == pytest.approx(clean, abs=1e-6)
    # Everything but head (1, 2) removed, by hand: each removed head's output is its mean over the reference.
    projections = [b.attention.projections.out_proj for b in model.blocks]
    with torch.no_grad(), record_head_outputs(projections, 6) as recorded:
        model(batch.corrupted)
        means = [r.mean(0, keepdim=True).expand(batch.ids.size(0), -1, -1, -1).clone() for r in recorded]
    others = [pair for pair in every if pair != (1, 2)]
    with torch.no_grad(), head_hooks(projections, 6, others, means):
        by_hand = float(metric(model(batch.ids)))
    result = knock_out(model, batch.ids, batch.corrupted, metric, keep=[(1, 2)])
    assert result == pytest.approx(by_hand, abs=1e-5) and result != pytest.approx(clean, abs=1e-3)
    with pytest.raises(ValueError, match=r"kept head must be an int in 0 \.\. 5"):
        knock_out(model, batch.ids, batch.corrupted, metric, keep=[(0, 6)])
    with pytest.raises(ValueError, match="one length T"):
        knock_out(model, batch.ids, batch.corrupted[:, :-1], metric, keep=[])
    with pytest.raises(ValueError, match=r"the kept heads are a collection of \(layer, head\) pairs .*got str '01'"):
        knock_out(model, batch.ids, batch.corrupted, metric, keep="01")  # not heads 0 and 1 of layer 0
    with pytest.raises(ValueError, match=r"each kept head is one head written \(layer, head\).*got \(0, 1, 2\)"):
        knock_out(model, batch.ids, batch.corrupted, metric, keep=[(0, 1, 2)])
