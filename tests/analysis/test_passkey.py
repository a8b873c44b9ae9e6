"""``helpers.analysis.passkey`` on a tiny hybrid GPT and a tokenizer of one token per character: the prompt's length
and the key's place (more than ``gap`` tokens before the question, with the fewest filler copies), the variants
changing only the chosen layers' windows and restored afterwards, the greedy answer, and what counts as fetched."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from helpers.analysis.passkey import (
    PASSKEY_HEAD,
    PASSKEY_QUESTION,
    PasskeyTrial,
    answer_greedily,
    count_fetched,
    global_layers,
    is_fetched,
    made_local,
    passkey_prompt,
    passkey_trials,
    passkey_variants,
)
from helpers.gpt import GPT, GPTConfig, generate

pytestmark = pytest.mark.usefixtures("one_torch_thread")

WINDOW = 8
KINDS = ("local", "global", "local", "global")
FILLER = "The sun is warm. "


class CharTokenizer:
    """One token per character: <bos> = 0 in front, "\\n" = 1, the printable ASCII characters 2 .. 96."""

    vocab_size = 97

    def __call__(self, text: str) -> SimpleNamespace:
        return SimpleNamespace(input_ids=[0] + [1 if c == "\n" else ord(c) - 30 for c in text])

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        return "".join("\n" if i == 1 else chr(i + 30) if i else ("" if skip_special_tokens else "<bos>") for i in ids)


class MergingTokenizer(CharTokenizer):
    """As ``CharTokenizer``, but ".\\n" is one token (96): a boundary the prompt's positions cannot be read at."""

    def __call__(self, text: str) -> SimpleNamespace:
        ids = super().__call__(text.replace(".\n", "\x7f")).input_ids
        return SimpleNamespace(input_ids=[96 if i == 127 - 30 else i for i in ids])


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    config = GPTConfig(
        vocab_size=CharTokenizer.vocab_size, embed_dim=32, num_heads=4, num_kv_heads=2, num_layers=4, ff_dim=48,
        norm="rms", window=WINDOW, layer_kinds=KINDS, local_rotary_base=100.0, rotary_base=1000.0,
    )  # fmt: skip
    return GPT(config).eval()


@pytest.mark.parametrize("gap", [0, 20, 57])
def test_the_key_lies_more_than_gap_tokens_before_the_question_with_the_fewest_copies(gap):
    tokenizer = CharTokenizer()
    prompt = passkey_prompt(tokenizer, 48213, FILLER, gap)
    stated = PASSKEY_HEAD.format(key="48213")
    text = stated + FILLER * prompt.repeats + PASSKEY_QUESTION
    assert prompt.ids.tolist() == [tokenizer(text).input_ids]  # the whole text, tokenized once
    assert prompt.ids.size(1) == 1 + len(text)
    # by hand: the head's tail after the key's last mention, the copies, and the question's first character
    tail = len(stated) - (stated.rfind("48213") + 5)
    assert prompt.distance == tail + len(FILLER) * prompt.repeats + 1
    assert prompt.distance > gap
    assert prompt.repeats == 0 or prompt.distance - len(FILLER) <= gap  # one copy fewer would not do
    assert (prompt.repeats == 0) == (gap == 0)
    ids = prompt.ids[0].tolist()
    assert tokenizer.decode(ids[prompt.key_position - 4 : prompt.key_position + 1]) == "48213"
    assert tokenizer.decode(ids[prompt.question_position :]) == PASSKEY_QUESTION
    assert prompt.key == "48213"


def test_a_key_a_filler_a_head_and_a_question_of_ones_own():
    prompt = passkey_prompt(CharTokenizer(), "007", "x y. ", 30, head="Code {key}.", question=" Code:")
    assert CharTokenizer().decode(prompt.ids[0].tolist(), skip_special_tokens=True).startswith("Code 007.x y. ")
    assert prompt.distance > 30


def test_a_boundary_the_tokenizer_merges_is_refused():
    with pytest.raises(ValueError, match="filler's end"):
        passkey_prompt(MergingTokenizer(), 123, "The sun is warm.", 20)
    with pytest.raises(ValueError, match="key must be"):
        passkey_prompt(CharTokenizer(), "12a", FILLER, 20)
    with pytest.raises(ValueError, match="gap"):
        passkey_prompt(CharTokenizer(), 12, FILLER, -1)
    with pytest.raises(ValueError, match="filler"):
        passkey_prompt(CharTokenizer(), 12, "  ", 10)
    with pytest.raises(ValueError, match="holding"):
        passkey_prompt(CharTokenizer(), 12, FILLER, 10, head="no key here")


def test_made_local_changes_only_those_layers_windows_and_restores_them(tiny):
    ids = passkey_prompt(CharTokenizer(), 48213, FILLER, 40).ids
    windows = [block.attention.window for block in tiny.blocks]
    bases = [block.attention.rotary_base for block in tiny.blocks]
    assert windows == [WINDOW, None, WINDOW, None] and global_layers(tiny) == (1, 3)
    with torch.no_grad():
        intact = tiny(ids, last_only=True)
        with made_local(tiny, [3]) as model:
            assert model is tiny
            assert [block.attention.window for block in tiny.blocks] == [WINDOW, None, WINDOW, WINDOW]
            assert [block.attention.rotary_base for block in tiny.blocks] == bases
            changed = tiny(ids, last_only=True)
            cache = tiny.new_cache(rolling=True)
            tiny(ids, cache)
            assert [entry[0].size(2) for entry in cache.layers] == [WINDOW, ids.size(1), WINDOW, WINDOW]
    assert [block.attention.window for block in tiny.blocks] == windows
    assert float((changed - intact).abs().max()) > 1e-4  # layer 3 no longer reads the whole prompt
    with pytest.raises(RuntimeError), made_local(tiny, [1, 3], window=3):
        assert [block.attention.window for block in tiny.blocks] == [WINDOW, 3, WINDOW, 3]
        raise RuntimeError("inside")
    assert [block.attention.window for block in tiny.blocks] == windows
    with pytest.raises(ValueError, match="local already"), made_local(tiny, [0]):
        pass
    with pytest.raises(ValueError, match="layers must be"), made_local(tiny, [4]):
        pass
    assert [block.attention.window for block in tiny.blocks] == windows


def test_the_variants_are_intact_every_layer_local_and_each_global_layer_alone(tiny):
    assert passkey_variants(tiny) == {
        "intact": (),
        "every layer local": (1, 3),
        "layer 1 local": (1,),
        "layer 3 local": (3,),
    }


def test_the_answer_is_the_greedy_continuation_with_the_cache(tiny):
    tokenizer = CharTokenizer()
    ids = passkey_prompt(tokenizer, 48213, FILLER, 40).ids
    text = answer_greedily(tiny, tokenizer, ids, new_tokens=6)
    recomputed, _ = generate(tiny, ids, 6, use_cache=False)
    assert text == tokenizer.decode(recomputed[0, ids.size(1) :].tolist(), skip_special_tokens=True)
    with made_local(tiny, [1, 3]):  # the rolling cache bounds the layers made local too, and answers the same
        assert answer_greedily(tiny, tokenizer, ids, 6, rolling=True) == answer_greedily(tiny, tokenizer, ids, 6)


@pytest.mark.parametrize(
    ("answer", "fetched"),
    [(" 48213.", True), (" the key 48213, yes", True), ("48213", True), (" 482130", False), (" 4821 3", False),
     (" 12 48213", False), (" a key", False), ("", False)],
)  # fmt: skip
def test_fetched_means_the_first_number_is_the_key(answer, fetched):
    assert is_fetched(answer, 48213) is fetched
    assert is_fetched(answer, "48213") is fetched


def test_trials_run_every_prompt_under_every_variant_and_are_counted(tiny):
    tokenizer, seen = CharTokenizer(), []
    trials = passkey_trials(
        tiny, tokenizer, [111, "22"], [FILLER, "Go on. "], [20, 30], new_tokens=3, on_trial=seen.append
    )
    assert trials == seen and len(trials) == 2 * 2 * 2 * 4
    assert [block.attention.window for block in tiny.blocks] == [WINDOW, None, WINDOW, None]
    first = trials[0]
    prompt = passkey_prompt(tokenizer, 111, FILLER, 20)
    assert (first.variant, first.key, first.filler, first.gap) == ("intact", "111", 0, 20)
    assert (first.T, first.distance) == (prompt.ids.size(1), prompt.distance)
    assert first.answer == answer_greedily(tiny, tokenizer, prompt.ids, 3)
    assert all(t.fetched == is_fetched(t.answer, t.key) for t in trials)
    assert {t.variant: t.layers for t in trials} == passkey_variants(tiny)
    counts = count_fetched(trials)
    assert list(counts) == list(passkey_variants(tiny)) and all(total == 8 for _, total in counts.values())


def test_count_fetched_counts_by_one_field_or_several():
    def trial(variant, gap, fetched):
        return PasskeyTrial(variant, (), "1", 0, gap, 10, 5, "", fetched)

    trials = [trial("intact", 5, True), trial("intact", 9, False), trial("local", 5, False), trial("intact", 5, True)]
    assert count_fetched(trials) == {"intact": (2, 3), "local": (0, 1)}
    assert count_fetched(trials, by=("variant", "gap")) == {("intact", 5): (2, 2), ("intact", 9): (0, 1),
                                                           ("local", 5): (0, 1)}  # fmt: skip
    with pytest.raises(ValueError, match="fields of PasskeyTrial"):
        count_fetched(trials, by="colour")
