"""helpers.models.translation.model: the model against stock PyTorch, inspectable layers, head ablation, tied output."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch
from tiny_translation import TINY, copy_task, naive_greedy, random_source, tiny_model
from torch import nn

from helpers.data.tokenization import BOS_ID, EOS_ID, PAD_ID, train_tokenizer
from helpers.models.translation import (
    Seq2SeqTransformer,
    TranslationConfig,
    Translator,
    ablated_heads,
    greedy_decode,
    load_checkpoint,
    save_checkpoint,
    train,
    translation_loss,
)
from helpers.models.translation.model import on_torch_layers

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def stock_copy(model: Seq2SeqTransformer) -> nn.Transformer:
    """nn.Transformer with stock nn.TransformerDecoderLayer, loaded with the model's weights."""
    c = model.config
    stock = nn.Transformer(
        c.embed_dim, c.num_heads, c.num_encoder_layers, c.num_decoder_layers, c.ff_dim, 0.0, batch_first=True
    )
    stock.load_state_dict(model.transformer.state_dict())
    return stock.eval()


def test_model_equals_stock_transformer_with_scaled_embeddings_and_sinusoidal_positions():
    from helpers.embeddings import sinusoidal_positional_encoding

    model = tiny_model()
    src = random_source()
    tgt_in = torch.tensor([[BOS_ID, 5, 6, 7], [BOS_ID, 8, 9, PAD_ID], [BOS_ID, 4, PAD_ID, PAD_ID]])
    E = model.config.embed_dim
    pe = sinusoidal_positional_encoding(32, E)
    src_x = model.src_embedding.weight[src] * math.sqrt(E) + pe[: src.size(1)]
    tgt_x = model.tgt_embedding.weight[tgt_in] * math.sqrt(E) + pe[: tgt_in.size(1)]
    stock = stock_copy(model)
    hidden = stock(
        src_x,
        tgt_x,
        tgt_mask=nn.Transformer.generate_square_subsequent_mask(4).bool(),
        src_key_padding_mask=src.eq(PAD_ID),
        tgt_key_padding_mask=tgt_in.eq(PAD_ID),
        memory_key_padding_mask=src.eq(PAD_ID),
    )
    expected = model.generator(hidden)
    with torch.no_grad():
        got = model(src, tgt_in)
        with model.recording():
            recorded = model(src, tgt_in)
    real = tgt_in.ne(PAD_ID)
    assert torch.allclose(got[real], expected[real], atol=1e-5)
    assert torch.allclose(recorded[real], expected[real], atol=1e-5)  # recording does not change the output


@pytest.mark.parametrize("norm_first", [False, True])
def test_model_on_our_attention_equals_the_model_on_torchs_layers_in_outputs_and_gradients(norm_first):
    torch.manual_seed(0)
    ours = Seq2SeqTransformer(TranslationConfig(**{**TINY, "norm_first": norm_first}), 11, 13)
    with torch.no_grad():  # non-zero biases and norms, so that a missed term shows up
        for p in ours.parameters():
            p.add_(0.05 * torch.randn_like(p))
    theirs = on_torch_layers(ours)
    assert list(theirs.state_dict()) == list(ours.state_dict())  # the same keys: checkpoints move both ways
    src = random_source()
    tgt_in = torch.tensor([[BOS_ID, 5, 6, 7], [BOS_ID, 8, 9, PAD_ID], [BOS_ID, 4, PAD_ID, PAD_ID]])
    tgt_out = torch.tensor([[5, 6, 7, EOS_ID], [8, 9, EOS_ID, PAD_ID], [4, EOS_ID, PAD_ID, PAD_ID]])
    real = tgt_in.ne(PAD_ID)
    for model in (ours, theirs):
        model.train()
        model.loss = translation_loss(model(src, tgt_in), tgt_out, label_smoothing=0.1)
        model.loss.backward()
        with torch.no_grad():
            model.logits = model.eval()(src, tgt_in)
    torch.testing.assert_close(ours.loss, theirs.loss, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(ours.logits[real], theirs.logits[real], atol=1e-5, rtol=1e-5)
    their_parameters = dict(theirs.named_parameters())
    for name, p in ours.named_parameters():
        torch.testing.assert_close(p.grad, their_parameters[name].grad, atol=1e-5, rtol=1e-4, msg=name)
    # Decoding agrees too (greedy on our cache against torch's layers re-run on the whole prefix).
    assert greedy_decode(ours, src, max_len=8).ids == [naive_greedy(theirs, row, 8) for row in src]


def test_decoder_layers_are_inspectable_and_record_cross_attention_per_head_only_on_request():
    from helpers.layers import InspectableDecoderLayer

    model = tiny_model()
    assert all(isinstance(layer, InspectableDecoderLayer) for layer in model.decoder_layers)
    src = random_source()
    tgt_in = torch.tensor([[BOS_ID, 5, 6], [BOS_ID, 7, 8], [BOS_ID, 9, 4]])
    with torch.no_grad():
        model(src, tgt_in)
    assert all(layer.cross_attn_weights is None for layer in model.decoder_layers)  # off while training
    with torch.no_grad(), model.recording():
        model(src, tgt_in)
    weights = model.cross_attention()
    assert weights.shape == (2, 3, 2, 3, 7)  # (n_layers, N, h, L, S)
    assert torch.allclose(weights.sum(-1), torch.ones(2, 3, 2, 3), atol=1e-5)
    assert weights[:, 2, :, :, 5:].abs().max() == 0  # sentence 2 has 5 real source tokens: padding gets nothing


def test_ablating_a_head_equals_zeroing_its_attention_output_in_multihead_attention():
    model = tiny_model(seed=2)
    mha = model.decoder_layers[1].multihead_attn
    x, mem = torch.randn(2, 3, 16), torch.randn(2, 5, 16)
    d = 8
    with torch.no_grad():
        # By hand: per-head outputs from torch's own attention, head 1 dropped, then the output projection.
        q, k, v = (
            torch.nn.functional.linear(t, w, b)
            for t, w, b in zip((x, mem, mem), mha.in_proj_weight.chunk(3), mha.in_proj_bias.chunk(3), strict=True)
        )
        heads = torch.nn.functional.scaled_dot_product_attention(
            q.view(2, 3, 2, d).transpose(1, 2), k.view(2, 5, 2, d).transpose(1, 2), v.view(2, 5, 2, d).transpose(1, 2)
        )
        heads[:, 1] = 0.0  # (N, h, L, d): silence head 1
        expected = mha.out_proj(heads.transpose(1, 2).reshape(2, 3, 16))
        before = mha.out_proj.weight.clone()
        with ablated_heads(model, {(1, 1)}):
            got, _ = mha(x, mem, mem)
        assert torch.allclose(got, expected, atol=1e-5)
        assert torch.equal(mha.out_proj.weight, before)  # restored afterwards


def test_ablating_every_cross_attention_head_cuts_the_decoder_off_from_the_source():
    model = tiny_model(seed=2)
    tgt_in = torch.tensor([[BOS_ID, 5, 6]])
    everything = {(layer, head) for layer in range(2) for head in range(2)}
    with torch.no_grad(), ablated_heads(model, everything):
        a = model(random_source(N=1, seed=1), tgt_in)
        b = model(random_source(N=1, seed=9), tgt_in)
    assert torch.allclose(a, b, atol=1e-5)
    with pytest.raises(ValueError, match="layer, head"), ablated_heads(model, {(2, 0)}):
        pass


def test_ablating_every_encoder_head_leaves_each_source_token_to_itself():
    model = tiny_model(seed=2)
    src = random_source(N=1, seed=1)
    changed = src.clone()
    changed[0, 2] = 4 if int(src[0, 2]) != 4 else 5  # another word at position 2 only
    everything = {
        (layer, head) for layer in range(model.config.num_encoder_layers) for head in range(model.config.num_heads)
    }
    with torch.no_grad():
        mixed = (model.encode(src)[0] - model.encode(changed)[0]).abs().amax(dim=-1)  # (1, S)
        with ablated_heads(model, everything, attention="encoder"):
            alone = (model.encode(src)[0] - model.encode(changed)[0]).abs().amax(dim=-1)
    others = [s for s in range(src.size(1)) if s != 2]
    assert mixed[0, others].min() > 1e-4  # self-attention carries the change to every other token
    assert alone[0, others].max() < 1e-6 and alone[0, 2] > 1e-4  # silenced: each token sees only itself
    with pytest.raises(ValueError, match="'cross', 'decoder' or 'encoder'"), ablated_heads(model, set(), "memory"):
        pass


def test_a_tied_output_layer_is_the_target_embedding_through_training_and_a_checkpoint(tmp_path):
    config = TranslationConfig(**{**TINY, "max_len": 32}, tie_embeddings=True, lr=3e-3, warmup_steps=5)
    torch.manual_seed(0)
    model = Seq2SeqTransformer(config, 11, 11)
    untied = Seq2SeqTransformer(replace(config, tie_embeddings=False), 11, 11)
    assert model.generator.weight is model.tgt_embedding.weight
    assert untied.num_parameters() - model.num_parameters() == 11 * TINY["embed_dim"]  # one (V, E) table fewer
    start = model.generator.weight.detach().clone()
    train(model, copy_task(), config, steps=5, progress=False)
    assert not torch.equal(model.generator.weight, start)  # trained, and still one table
    assert model.generator.weight is model.tgt_embedding.weight
    translator = Translator(model, *[train_tokenizer([str(i) for i in range(7)], kind="word", min_frequency=1)] * 2)
    loaded, _ = load_checkpoint(save_checkpoint(tmp_path / "tied.pt", translator))
    assert loaded.model.generator.weight is loaded.model.tgt_embedding.weight  # tied again after loading
    assert torch.equal(loaded.model.generator.weight, model.generator.weight)
    # a checkpoint written before the field existed loads untied, as it was trained
    before_the_field = {k: v for k, v in config.to_dict().items() if k != "tie_embeddings"}
    assert TranslationConfig.from_dict(before_the_field).tie_embeddings is False


def test_a_checkpoint_saved_with_tie_output_embedding_reads_as_tie_embeddings_with_a_warning():
    """The translator's tie had its own name; it is now GPTConfig's ``tie_embeddings``, and an older checkpoint's
    config (saved under the old name) still loads, tied as it was trained."""
    saved = {**TranslationConfig(**TINY).to_dict(), "tie_embeddings": None}
    del saved["tie_embeddings"]
    saved["tie_output_embedding"] = True
    with pytest.warns(DeprecationWarning, match="'tie_output_embedding' is now 'tie_embeddings'"):
        assert TranslationConfig.from_dict(saved).tie_embeddings is True
