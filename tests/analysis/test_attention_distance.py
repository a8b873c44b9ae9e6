"""``helpers.analysis.attention_distance``: the mean look-back distance sum_j w_ij (i - j) per head, by hand, by a
brute-force loop, and on a tiny hybrid GPT, where a local head stays within its window and a global one does not."""

from __future__ import annotations

import pytest
import torch

from helpers.analysis.attention_distance import attention_distances, distance_by_kind, layer_kinds, mean_distance
from helpers.gpt import GPT, GPTConfig
from helpers.layer_kind import seeing

pytestmark = pytest.mark.usefixtures("one_torch_thread")

WINDOW = 4
KINDS = ("local", "global", "local")


@pytest.fixture(scope="module")
def hybrid():
    torch.manual_seed(0)
    config = GPTConfig(
        vocab_size=40, embed_dim=32, num_heads=4, num_kv_heads=2, num_layers=3, ff_dim=48, norm="rms",
        window=WINDOW, layer_kinds=KINDS, local_rotary_base=100.0,
    )  # fmt: skip
    return GPT(config).eval()


def test_a_hand_computed_case():
    uniform = torch.tensor([[1, 0, 0], [1 / 2, 1 / 2, 0], [1 / 3, 1 / 3, 1 / 3]])  # causal, evenly spread
    diagonal = torch.eye(3)  # each token on itself: distance 0
    first = torch.tensor([[1.0, 0, 0], [1, 0, 0], [1, 0, 0]])  # every token on token 0: distance i
    weights = torch.stack([uniform, diagonal, first])[None]  # (1, 3, 3, 3)
    # query distances: uniform 0, 1/2, 1; diagonal 0, 0, 0; first 0, 1, 2
    torch.testing.assert_close(mean_distance(weights), torch.tensor([0.5, 0.0, 1.0]))
    torch.testing.assert_close(mean_distance(weights, start=1), torch.tensor([0.75, 0.0, 1.5]))
    # one query of a cached step: it sits at the last position (2) of the three keys
    step = torch.tensor([0.5, 0.0, 0.5]).view(1, 1, 1, 3)
    torch.testing.assert_close(mean_distance(step), torch.tensor([1.0]))


def test_the_first_key_left_out_renormalises_the_rest():
    """A head with most of its weight on token 0 (a sink) reads far back only because token 0 is far back: with
    it left out, the distance is that of the rest of its weight, renormalised."""
    sink = torch.tensor([[1.0, 0, 0, 0], [0.5, 0.5, 0, 0], [0.8, 0.1, 0.1, 0], [0.6, 0, 0.2, 0.2]])[None, None]
    # with key 0: query 3 looks back 0.6*3 + 0.2*1 = 2.0; query 2: 0.8*2 + 0.1*1 = 1.7; query 1: 0.5
    torch.testing.assert_close(mean_distance(sink, start=1), torch.tensor([(0.5 + 1.7 + 2.0) / 3]))
    # without it: query 1 only itself (0); query 2 keys 1, 2 at 1/2 each (0.5); query 3 keys 2, 3 at 1/2 (0.5)
    torch.testing.assert_close(mean_distance(sink, start=1, first_key_out=True), torch.tensor([1 / 3]))
    with pytest.raises(ValueError, match="start must be >= 1"):
        mean_distance(sink, first_key_out=True)
    with pytest.raises(TypeError, match="True or False"):
        mean_distance(sink, start=1, first_key_out=1)


def test_the_first_key_left_out_equals_a_brute_force_loop_on_a_model(hybrid):
    ids = torch.randint(0, 40, (2, 12), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        _, weights = hybrid(ids, need_weights=True)
    table = attention_distances(hybrid, ids, start=3, first_key_out=True)
    for layer, w in enumerate(weights):
        rest = w[..., 1:] / w[..., 1:].sum(-1, keepdim=True)
        expected = _brute_force(torch.cat([torch.zeros_like(w[..., :1]), rest], dim=-1), 3)
        torch.testing.assert_close(table[layer], expected, atol=1e-5, rtol=1e-5)
        assert not torch.allclose(table[layer], _brute_force(w, 3))  # leaving key 0 out changes something


def _brute_force(weights: torch.Tensor, start: int) -> torch.Tensor:
    N, h, L, T = weights.shape
    out = torch.zeros(h)
    for head in range(h):
        total, count = 0.0, 0
        for n in range(N):
            for row in range(L):
                i = T - L + row
                if i < start:
                    continue
                total += sum(float(weights[n, head, row, j]) * (i - j) for j in range(T))
                count += 1
        out[head] = total / count
    return out


@pytest.mark.parametrize("start", [0, 5])
def test_equal_to_a_brute_force_loop(hybrid, start):
    ids = torch.randint(0, 40, (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        _, weights = hybrid(ids, need_weights=True)
    table = attention_distances(hybrid, ids, start=start)
    assert table.shape == (3, 4)
    for layer, w in enumerate(weights):
        expected = _brute_force(w, start)
        torch.testing.assert_close(mean_distance(w, start), expected, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(table[layer], expected, atol=1e-5, rtol=1e-5)


def test_local_heads_stay_within_the_window_and_a_global_one_looks_further(hybrid):
    ids = torch.randint(0, 40, (1, 48), generator=torch.Generator().manual_seed(2))
    table = attention_distances(hybrid, ids, start=WINDOW)
    assert layer_kinds(hybrid) == KINDS
    local, full = table[[0, 2]], table[1]
    assert float(local.max()) <= WINDOW - 1
    assert float(local.min()) > 0  # they do look back, within the window
    assert float(full.max()) > WINDOW - 1  # a random global head spreads its weight over all 48 tokens
    rows = distance_by_kind(table, layer_kinds(hybrid))
    assert [(row.kind, row.layers, row.heads) for row in rows] == [("local", (0, 2), 8), ("global", (1,), 4)]
    assert rows[0].high == pytest.approx(float(local.max())) and rows[0].low == pytest.approx(float(local.min()))
    assert rows[1].mean == pytest.approx(float(full.mean()))
    # the test can fail: with the window lifted, the "local" layers' heads look beyond it too
    with seeing(hybrid, (0, 2), window=None):
        lifted = attention_distances(hybrid, ids, start=WINDOW)
        assert layer_kinds(hybrid) == ("global",) * 3
    assert float(lifted[[0, 2]].max()) > WINDOW - 1


def test_texts_of_different_lengths_count_each_query_once(hybrid):
    short = torch.randint(0, 40, (1, 8), generator=torch.Generator().manual_seed(3))
    long = torch.randint(0, 40, (1, 20), generator=torch.Generator().manual_seed(4))
    both = attention_distances(hybrid, [short, long], start=2)
    expected = (attention_distances(hybrid, short, 2) * 6 + attention_distances(hybrid, long, 2) * 18) / 24
    torch.testing.assert_close(both, expected)


def test_bad_input_is_refused_saying_what_was_expected(hybrid):
    with pytest.raises(ValueError, match=r"\(N, h, L, T\)"):
        mean_distance(torch.ones(3, 3))
    with pytest.raises(ValueError, match="start"):
        mean_distance(torch.ones(1, 1, 3, 3), start=3)
    with pytest.raises(ValueError, match="L <= T"):
        mean_distance(torch.ones(1, 1, 4, 3))
    with pytest.raises(TypeError, match="GPT"):
        attention_distances(torch.nn.Linear(2, 2), torch.zeros(1, 3, dtype=torch.long))
    with pytest.raises(ValueError, match=r"ids \(N, T\)"):
        attention_distances(hybrid, [torch.zeros(3, dtype=torch.long)])
    with pytest.raises(ValueError, match="one kind per layer"):
        distance_by_kind(torch.zeros(3, 4), ["local"])
