"""The training loop: one step in the open (train_step), the batches of each epoch, and the driver around them."""

from __future__ import annotations

import contextlib
import copy
from dataclasses import replace

import pytest
import torch

from helpers import load_corpus
from helpers.data.batching import make_batches
from helpers.models.translation.config import LESSON_CONFIG
from helpers.models.translation.pipeline import build_translator, encode_pairs
from helpers.models.translation.training import (
    check_training_state,
    dropout_seed,
    epoch_batches,
    learning_rate_factor,
    make_optimizer,
    teacher_forcing,
    train,
    train_step,
    translation_loss,
)

TINY_CONFIG = replace(
    LESSON_CONFIG, d_model=16, heads=2, encoder_layers=1, decoder_layers=1, feedforward=32, batch_tokens=300
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def examples():
    corpus = load_corpus("captions", "train")
    translator = build_translator(corpus, TINY_CONFIG, "cpu")
    return translator, encode_pairs(translator, corpus)[:120]


def _plain_loop(model, pairs, config, epochs, accumulate):
    """The loop as one function, written out: epochs of shuffled batches, ``accumulate`` of them a step,
    dropout seeded per step, warm-up and cosine by steps, AdamW, clipping. What ``train`` must equal."""
    src_ids, tgt_ids = [s for s, _ in pairs], [t for _, t in pairs]
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=config.lr, betas=(0.9, 0.98), eps=1e-9, weight_decay=config.weight_decay, fused=True
    )
    groups = len(make_batches(src_ids, tgt_ids, config.batch_tokens, shuffle=False)) // accumulate
    total, step, losses = epochs * groups, 0, []
    model.train()
    for epoch in range(epochs):
        batches = make_batches(src_ids, tgt_ids, config.batch_tokens, shuffle=True, seed=config.seed * 100_003 + epoch)
        for group in range(groups):
            torch.manual_seed((config.seed * 1_000_003 + step) * 1_009)
            for param_group in optimizer.param_groups:
                param_group["lr"] = config.lr * learning_rate_factor(step, step / total, config)
            optimizer.zero_grad()
            loss_sum = 0.0
            for batch in batches[group * accumulate : (group + 1) * accumulate]:
                tgt_in, tgt_out = batch.tgt[:, :-1], batch.tgt[:, 1:]
                loss = translation_loss(model(batch.src, tgt_in), tgt_out, config.label_smoothing)
                (loss / accumulate).backward()
                loss_sum += loss.item()
            torch.nn.utils.clip_grad_norm_(model.parameters(), config.clip_norm)
            optimizer.step()
            step += 1
            losses.append(round(loss_sum / accumulate, 4))
    return step, losses


@pytest.mark.parametrize(("dropout", "accumulate"), [(0.0, 1), (0.2, 2)])
def test_train_equals_the_loop_written_out_over_several_epochs(examples, dropout, accumulate):
    translator, pairs = examples
    config = replace(TINY_CONFIG, dropout=dropout)
    by_train, by_hand = copy.deepcopy(translator.model), copy.deepcopy(translator.model)
    history = train(by_train, pairs, config, epochs=3, accumulate=accumulate, progress=False, log_every=1)
    steps, losses = _plain_loop(by_hand, pairs, config, epochs=3, accumulate=accumulate)
    assert history.steps_done == steps > 3
    assert history.losses == losses
    for name, tensor in by_hand.state_dict().items():
        assert torch.equal(by_train.state_dict()[name], tensor), name  # the same seed, the same model


def test_epoch_batches_are_the_loops_batches_a_new_order_each_epoch(examples):
    _, pairs = examples
    first, again, second = (epoch_batches(pairs, TINY_CONFIG, epoch) for epoch in (0, 0, 1))
    assert [b.indices.tolist() for b in first] == [b.indices.tolist() for b in again]
    assert [b.indices.tolist() for b in first] != [b.indices.tolist() for b in second]
    assert sorted(i for b in second for i in b.indices.tolist()) == list(range(len(pairs)))
    other_seed = epoch_batches(pairs, replace(TINY_CONFIG, seed=1), 0)
    assert [b.indices.tolist() for b in first] != [b.indices.tolist() for b in other_seed]


def test_train_step_takes_one_step_on_the_mean_loss_of_its_batches(examples):
    translator, pairs = examples
    model = copy.deepcopy(translator.model).train()
    batches = epoch_batches(pairs, TINY_CONFIG, 0)[:2]
    optimizer = make_optimizer(model, TINY_CONFIG)
    with torch.no_grad():
        expected = [
            float(translation_loss(model(b.src, teacher_forcing(b.tgt)[0]), b.tgt[:, 1:], TINY_CONFIG.label_smoothing))
            for b in batches
        ]
    before = torch.nn.utils.parameters_to_vector(model.parameters()).clone()
    result = train_step(model, optimizer, batches, TINY_CONFIG, lr=1e-3)
    assert result.loss == pytest.approx(sum(expected) / 2, rel=1e-5)
    assert result.tokens == sum(b.num_tokens for b in batches)
    assert optimizer.param_groups[0]["lr"] == 1e-3
    assert not torch.equal(before, torch.nn.utils.parameters_to_vector(model.parameters()))
    entered = []

    @contextlib.contextmanager
    def precision():
        entered.append(True)
        yield

    train_step(model, optimizer, batches, TINY_CONFIG, lr=1e-3, precision=precision)
    assert len(entered) == 2  # one forward per batch runs in the precision context


def test_dropout_seed_differs_per_step_and_rank():
    seeds = {dropout_seed(TINY_CONFIG, step, rank) for step in range(50) for rank in range(4)}
    assert len(seeds) == 200


def _state(**changes):
    state = {
        "step": 3,
        "epoch": 0,
        "position": 3,
        "elapsed": 1.5,
        "total_steps": 6,
        "budget": None,
        "batches_per_step": 1,
        "optimizer": {},
        "history": {"steps_done": 3},
        "best_weights": None,
    }
    return {**state, **changes}


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"step": -1}, "'step' must be a finite number >= 0, got -1"),
        ({"position": -4}, "'position' must be a finite number >= 0"),
        ({"elapsed": float("nan")}, "'elapsed' must be a finite number >= 0"),
        ({"step": 2.5}, "'step' has a float"),
        ({"step": True}, "'step' has a bool"),
        ({"total_steps": 0}, "'total_steps' must be positive"),
        ({"total_steps": None}, "exactly one of total_steps and budget"),
        ({"budget": 60.0}, "exactly one of total_steps and budget"),
        ({"step": 9}, "step 9 is past its end"),
        ({"batches_per_step": 0}, "'batches_per_step' must be at least 1"),
        ({"history": {"losses": [], "nonsense": 1}}, "'history' is not a TrainingHistory"),
        ({"optimizer": [1]}, "'optimizer' has a list"),
    ],
)
def test_a_crafted_training_state_is_refused_naming_the_field(changes, expected):
    check_training_state(_state())
    with pytest.raises(ValueError, match=expected.replace("(", r"\(").replace("[", r"\[")):
        check_training_state(_state(**changes))


def test_a_state_missing_fields_or_from_another_setup_is_refused():
    with pytest.raises(ValueError, match="lacks epoch, step"):
        check_training_state({k: v for k, v in _state().items() if k not in ("step", "epoch")})
    with pytest.raises(ValueError, match="took 1 batches a step; this one would take 2"):
        check_training_state(_state(), batches_per_step=2)
