"""helpers.models.translation.checkpoint: save and load with weights_only, old checkpoints, clear errors."""

from __future__ import annotations

import re

import pytest
import torch
from tiny_translation import fake_translator, random_source

from helpers.attention import MultiHeadAttention
from helpers.data.tokenization import BOS_ID
from helpers.models.translation import (
    CheckpointError,
    Translator,
    load_checkpoint,
    save_checkpoint,
)
from helpers.models.translation.model import on_torch_layers

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_a_checkpoint_written_by_the_model_on_torchs_layers_loads_and_translates_the_same(tmp_path):
    """Checkpoints saved before the model used the course's own attention hold nn.Transformer's state dict: the
    parameter names are the same, so they load unchanged (format version 1)."""
    sentences = ["Ein Hund läuft.", "Eine Frau singt im Freien."]
    translator = fake_translator([*sentences, "A dog runs.", "A woman sings outdoors."])
    with torch.no_grad():
        for p in translator.model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    old = Translator(on_torch_layers(translator.model), translator.source_tokenizer, translator.target_tokenizer)
    path = save_checkpoint(tmp_path / "old.pt", old)
    assert torch.load(path, weights_only=True)["version"] == 1
    loaded, _ = load_checkpoint(path)
    assert isinstance(loaded.model.transformer.decoder.layers[0].multihead_attn, MultiHeadAttention)
    src = random_source(vocab=loaded.source_tokenizer.vocab_size)
    tgt_in = torch.tensor([[BOS_ID, 5, 6], [BOS_ID, 7, 8], [BOS_ID, 9, 4]])
    with torch.no_grad():
        torch.testing.assert_close(loaded.model(src, tgt_in), old.model.eval()(src, tgt_in), atol=1e-5, rtol=1e-5)
    assert loaded.translate(sentences) == translator.translate(sentences)


def test_checkpoint_round_trip_loads_with_weights_only_and_translates_the_same(tmp_path):
    sentences = ["Ein Hund läuft.", "Eine Frau singt im Freien."]
    translator = fake_translator([*sentences, "A dog runs.", "A woman sings outdoors."])
    path = save_checkpoint(tmp_path / "model.pt", translator, {"bleu": 12.5}, {"corpus": "captions"})
    raw = torch.load(path, weights_only=True)  # plain values only: no code runs on load
    assert raw["metrics"] == {"bleu": 12.5} and isinstance(raw["source_tokenizer"], str)
    loaded, payload = load_checkpoint(path)
    assert payload["info"]["corpus"] == "captions"
    assert loaded.translate(sentences) == translator.translate(sentences)
    assert list(tmp_path.iterdir()) == [path]  # no temporary file left behind


def test_truncated_foreign_and_missing_checkpoints_get_clear_errors(tmp_path):
    translator = fake_translator(["Ein Hund läuft.", "A dog runs."])
    good = save_checkpoint(tmp_path / "good.pt", translator)
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    with pytest.raises(CheckpointError, match="not a readable checkpoint"):
        load_checkpoint(truncated)
    foreign = tmp_path / "foreign.pt"
    torch.save({"model": torch.zeros(3)}, foreign)
    with pytest.raises(CheckpointError, match="not a translation checkpoint"):
        load_checkpoint(foreign)
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    with pytest.raises(CheckpointError):
        load_checkpoint(text)
    with pytest.raises(FileNotFoundError):
        load_checkpoint(tmp_path / "absent.pt")


def test_a_checkpoint_saved_with_the_old_config_names_loads_and_translates_the_same(tmp_path):
    """Checkpoints written before the config's fields took GPTConfig's names hold d_model, heads, ...: they load."""
    sentences = ["Ein Hund läuft.", "Eine Frau singt im Freien."]
    translator = fake_translator([*sentences, "A dog runs.", "A woman sings outdoors."])
    path = save_checkpoint(tmp_path / "model.pt", translator)
    payload = torch.load(path, weights_only=True)
    old_names = {"embed_dim": "d_model", "num_heads": "heads", "ff_dim": "feedforward"}
    old_names |= {"num_encoder_layers": "encoder_layers", "num_decoder_layers": "decoder_layers"}
    payload["config"] = {old_names.get(k, k): v for k, v in payload["config"].items()}
    assert "d_model" in payload["config"] and "embed_dim" not in payload["config"]
    torch.save(payload, path)
    with pytest.warns(DeprecationWarning, match="'d_model' is now 'embed_dim'"):
        loaded, _ = load_checkpoint(path)
    assert loaded.model.config == translator.model.config
    assert loaded.translate(sentences) == translator.translate(sentences)


def _with_weights(path, tmp_path, weights) -> object:
    payload = torch.load(path, weights_only=True)
    payload["weights"] = weights(payload["weights"])
    crafted = tmp_path / "crafted.pt"
    torch.save(payload, crafted)
    return crafted


def test_stride_0_weights_that_do_not_hold_their_numbers_are_refused(tmp_path):
    """A stride-0 tensor has the right shape over a storage of one number: its copy into the model allocates the
    whole shape, so shapes alone would let a tiny file describe any size of model."""
    translator = fake_translator(["Ein Hund läuft.", "A dog runs."])
    good = save_checkpoint(tmp_path / "good.pt", translator)
    crafted = _with_weights(good, tmp_path, lambda w: {k: torch.zeros(1).expand(v.shape) for k, v in w.items()})
    assert {t.stride() for t in torch.load(crafted, weights_only=True)["weights"].values() if t.dim() == 2} == {(0, 0)}
    with pytest.raises(CheckpointError, match=r"has strides \(0, 0\) over 4 bytes of storage, not the [\d,]+ bytes"):
        load_checkpoint(crafted)
    sliced = _with_weights(good, tmp_path, lambda w: {k: torch.randn((*v.shape, 2))[..., 0] for k, v in w.items()})
    load_checkpoint(sliced)  # strided views that hold their numbers (a slice of a bigger tensor) are fine


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_a_weight_holding_nan_or_infinity_is_refused_naming_the_tensor(tmp_path, bad):
    """One non-finite weight would load silently and make every translation NaN: the tensor is named instead."""
    translator = fake_translator(["Ein Hund läuft.", "A dog runs."])
    good = save_checkpoint(tmp_path / "good.pt", translator)
    name = next(k for k, v in torch.load(good, weights_only=True)["weights"].items() if v.is_floating_point())

    def damage(weights):
        weights[name] = weights[name].clone()
        weights[name].view(-1)[3] = bad
        return weights

    crafted = _with_weights(good, tmp_path, damage)
    kind = "1 NaN and 0 infinite" if bad != bad else "0 NaN and 1 infinite"
    expected = rf"stored weight {re.escape(name)} holds {kind} numbers.*expected finite"
    with pytest.raises(CheckpointError, match=expected):
        load_checkpoint(crafted)
    load_checkpoint(good)  # the same file undamaged loads


def test_a_small_file_describing_35_g_parameters_is_refused_before_anything_is_allocated(tmp_path, monkeypatch):
    """The red team's file: every size at its CONFIG_LIMITS bound, 35.4 G parameters as stride-0 tensors in under
    half a megabyte. Loading it must stop before the real model (141 GB of float32) is built."""
    import helpers.models.translation.checkpoint as checkpoint_module
    from helpers.models.translation.model import Seq2SeqTransformer

    translator = fake_translator(["Ein Hund läuft.", "A dog runs."])
    good = save_checkpoint(tmp_path / "good.pt", translator)
    payload = torch.load(good, weights_only=True)
    sizes = dict(embed_dim=4096, num_heads=128, ff_dim=32768, num_encoder_layers=48, num_decoder_layers=48)
    payload["config"] |= sizes
    vocab = translator.source_tokenizer.vocab_size, translator.target_tokenizer.vocab_size
    with torch.device("meta"):
        described = Seq2SeqTransformer(translator.model.config.__class__(**{**payload["config"]}), *vocab)
    assert described.num_parameters() > 35e9
    payload["weights"] = {k: torch.zeros(1).expand(v.shape) for k, v in described.state_dict().items()}
    crafted = tmp_path / "35g.pt"
    torch.save(payload, crafted)
    assert crafted.stat().st_size < 1_000_000

    def meta_only(*args, **kwargs):  # the real build would allocate 141 GB: make it a failure, not an OOM kill
        if torch.empty(0).device.type != "meta":
            raise AssertionError("the model was built with real memory from a file that does not hold its numbers")
        return Seq2SeqTransformer(*args, **kwargs)

    monkeypatch.setattr(checkpoint_module, "Seq2SeqTransformer", meta_only)
    with pytest.raises(CheckpointError, match=r"a model of 35,[\d,]+ parameters, more than the 1,000,000,000"):
        load_checkpoint(crafted)
