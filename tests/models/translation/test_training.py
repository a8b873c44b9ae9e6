"""helpers.models.translation.training: train_step, the batches of each epoch, the driver, resumed runs, log lines."""

from __future__ import annotations

import contextlib
import copy
import re
import time
from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch
from tiny_translation import TINY, copy_task

from helpers import load_corpus
from helpers.data.batching import make_batches
from helpers.data.tokenization import BOS_ID, EOS_ID, PAD_ID
from helpers.models.translation import Seq2SeqTransformer, TranslationConfig, training
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
    LESSON_CONFIG, embed_dim=16, num_heads=2, num_encoder_layers=1, num_decoder_layers=1, ff_dim=32, batch_tokens=300
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


def test_teacher_forcing_shifts_the_target_by_one():
    tgt = torch.tensor([[BOS_ID, 5, 6, EOS_ID], [BOS_ID, 7, EOS_ID, PAD_ID]])
    tgt_in, tgt_out = teacher_forcing(tgt)
    assert tgt_in.tolist() == [[BOS_ID, 5, 6], [BOS_ID, 7, EOS_ID]]
    assert tgt_out.tolist() == [[5, 6, EOS_ID], [7, EOS_ID, PAD_ID]]


def test_learning_rate_warms_up_then_decays():
    config = TranslationConfig(warmup_steps=10, min_lr_ratio=0.1)
    assert learning_rate_factor(0, 0.0, config) == pytest.approx(0.1)
    assert learning_rate_factor(9, 0.0, config) == pytest.approx(1.0)
    assert learning_rate_factor(50, 0.5, config) == pytest.approx(0.55)
    assert learning_rate_factor(100, 1.0, config) == pytest.approx(0.1)


def test_training_is_seeded_lowers_the_loss_and_keeps_the_best_weights():
    config = TranslationConfig(**{**TINY, "max_len": 32}, lr=3e-3, warmup_steps=5, batch_tokens=64, eval_every=10)
    runs = []
    for _ in range(2):
        torch.manual_seed(0)
        model = Seq2SeqTransformer(config, 11, 11)
        scores = iter([1.0, 3.0, 2.0])  # validation peaks at step 20: those weights must come back
        saved = {}

        def validate(m, scores=scores, saved=saved):
            score = next(scores)
            saved[score] = copy.deepcopy(m.state_dict())
            return score

        history = train(model, copy_task(), config, steps=30, validate=validate, progress=False, log_every=1)
        runs.append((model, history, saved))
    (model, history, saved), (_model2, history2, _) = runs
    assert history.losses == history2.losses  # same seed, same run
    assert history.losses[-1] < history.losses[0]
    assert history.best_step == 20 and history.val_steps == [10, 20, 30]
    assert all(torch.equal(model.state_dict()[k], saved[3.0][k]) for k in saved[3.0])
    with pytest.raises(ValueError, match="at most one"):
        train(model, copy_task(), config, steps=1, minutes=1.0)


def test_an_epoch_count_or_a_time_budget_ends_training(monkeypatch):
    config = TranslationConfig(**TINY, batch_tokens=64, eval_every=0)
    examples = copy_task()
    batches = len(make_batches([s for s, _ in examples], [t for _, t in examples], 64, shuffle=False))
    torch.manual_seed(0)
    history = train(Seq2SeqTransformer(config, 11, 11), examples, config, epochs=2, progress=False)
    assert history.steps_done == 2 * batches
    # A time budget, on an injected clock that each training step moves on by 10 s: 0.5 minutes is 3 steps.
    now = [0.0]
    real_step = training.train_step

    def ten_seconds_a_step(*args, **kwargs):
        result = real_step(*args, **kwargs)
        now[0] += 10.0
        return result

    monkeypatch.setattr(training, "train_step", ten_seconds_a_step)
    monkeypatch.setattr(training, "time", SimpleNamespace(perf_counter=lambda: now[0], process_time=time.process_time))
    torch.manual_seed(0)
    history = train(Seq2SeqTransformer(config, 11, 11), examples, config, minutes=0.5, progress=False)
    assert history.steps_done == 3 and history.seconds == 30.0  # it stopped by itself once the budget was spent


def _fresh_model(translator):
    torch.manual_seed(0)
    model = type(translator.model)(
        translator.model.config, translator.source_tokenizer.vocab_size, translator.target_tokenizer.vocab_size
    )
    return model


def _weights(model) -> dict[str, torch.Tensor]:
    return {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}


@pytest.mark.parametrize("dropout", [0.0, 0.3])
def test_a_resumed_run_ends_with_the_weights_of_an_uninterrupted_one(examples, dropout):
    translator, pairs = examples
    config = replace(TINY_CONFIG, dropout=dropout, eval_every=3)
    straight = _fresh_model(translator)
    saved = {}  # step -> (training state, the weights at that step): what a resume file holds

    def keep(state):
        saved[state["step"]] = (copy.deepcopy(state), _weights(straight))

    def validate(model):  # any score that changes with the weights, so "best" weights move around
        return -float(sum(p.abs().sum() for p in model.parameters()))

    train(straight, pairs, config, steps=7, validate=validate, on_state=keep, progress=False)
    assert sorted(saved) == [3, 6, 7]  # at every validation and at the end

    state, weights = saved[3]
    resumed = _fresh_model(translator)
    resumed.load_state_dict(weights)
    torch.manual_seed(123)  # whatever the global random state, the resumed run draws the same dropout masks
    history = train(resumed, pairs, config, steps=999, validate=validate, resume=state, progress=False)
    assert history.steps_done == 7  # the stored end wins over the new call's
    assert history.val_steps == [3, 6, 7]
    for name, tensor in _weights(straight).items():
        assert torch.equal(tensor, resumed.state_dict()[name]), name


def test_a_log_file_gets_one_summary_line_per_interval_not_a_progress_bar(examples, capsys):
    translator, pairs = examples
    model = _fresh_model(translator)
    train(model, pairs, TINY_CONFIG, steps=5, progress=True, report_every_minutes=0.0)
    err = capsys.readouterr().err
    assert "\r" not in err  # no carriage-return updates of a bar
    lines = [line for line in err.splitlines() if line.startswith("step ")]
    assert len(lines) == 6  # one a step (the interval is 0 here) and one at the end
    assert lines[-2].startswith("step 5/5 | loss ") and "tok/s" in lines[-2] and "left" in lines[-2]


def test_a_log_file_hears_from_the_first_step_not_only_after_a_minute(examples, capsys):
    translator, pairs = examples
    model = _fresh_model(translator)
    train(model, pairs, TINY_CONFIG, steps=3, progress=True, report_every_minutes=60.0)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("step ")]
    assert lines[0].startswith("step 1/3 | loss ")  # at once, though the interval is an hour
    assert len(lines) == 2  # then nothing until the end's line


def test_a_notebook_gets_a_line_at_every_tenth_not_a_bar_nor_a_log(examples, capsys, monkeypatch):
    import helpers.models.translation.training as training

    monkeypatch.setattr(training, "in_notebook", lambda: True)
    translator, pairs = examples
    train(_fresh_model(translator), pairs, TINY_CONFIG, steps=5, progress=True, report_every_minutes=0.0)
    out, err = capsys.readouterr()
    assert "\r" not in err and not [line for line in err.splitlines() if line.startswith("step ")]
    lines = out.splitlines()
    assert [line.split(" (")[0] for line in lines] == [f"training: {share}%" for share in (20, 40, 60, 80, 100)]
    assert lines[-1].startswith("training: 100% (5/5 steps), loss ") and lines[-1].endswith(" s elapsed")


def _real_state(examples):
    """A training state saved after two steps of a tiny run, and the model it belongs to."""
    translator, pairs = examples
    model, saved = _fresh_model(translator), []
    train(model, pairs, TINY_CONFIG, steps=2, on_state=lambda state: saved.append(copy.deepcopy(state)), progress=False)
    return saved[-1], model


def _set(state: dict, path: tuple, value) -> dict:
    state = copy.deepcopy(state)
    *above, last = path
    place = state
    for key in above:
        place = place[key]
    if value is _DROP:
        del place[last]
    else:
        place[last] = value
    return state


_DROP, _STRIDE_0 = object(), object()  # remove the entry; a stride-0 tensor of the parameter's shape


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        (("optimizer", "state", 0, "exp_avg"), torch.zeros(3), "exp_avg of src_embedding.embedding.weight is of shape"),
        (("optimizer", "state", 1, "exp_avg_sq"), _STRIDE_0, "exp_avg_sq of tgt_embedding.embedding.weight of shape"),
        (("optimizer", "state", 2, "exp_avg"), torch.zeros(48, 16, dtype=torch.long), "torch.int64; expected a float"),
        (("optimizer", "state", 0, "step"), torch.tensor(float("nan")), "step of src_embedding.embedding.weight must"),
        (("optimizer", "state", 0, "exp_avg_sq"), _DROP, "holds ['exp_avg', 'step'], expected"),
        (("optimizer", "state", 99), {}, "an entry for parameter 99"),
        (("optimizer", "param_groups", 0, "params"), [0, 1], "holds parameters [0, 1] (2), but the model has"),
        (("optimizer", "state"), [], "is not an optimiser state dict"),
        (("best_weights",), {}, "but the stored best weight is missing"),
    ],
)
def test_an_optimizer_state_that_does_not_fit_the_model_is_refused_before_it_is_loaded(examples, path, value, expected):
    """Fused AdamW runs over its state's tensors without checking them against the parameters (a wrong-shaped
    exp_avg crashes the process): each one is checked, by name, before optimizer.load_state_dict."""
    state, model = _real_state(examples)
    check_training_state(state, model=model)  # the real one passes
    if path[0] == "best_weights":
        state["best_weights"] = model.state_dict()
        check_training_state(state, model=model)
    if value is _STRIDE_0:
        value = torch.zeros(1).expand(dict(model.named_parameters())["tgt_embedding.embedding.weight"].shape)
    crafted = _set(state, path, value)
    with pytest.raises(ValueError, match=re.escape(expected)):
        check_training_state(crafted, model=model)


def test_a_resumed_training_state_gives_back_the_state_it_was_built_from(examples):
    """TrainingState.resumed(saved).to_dict() is saved again: where the run stands, its end, its optimiser."""
    from helpers.models.translation.training import TrainingState

    saved, model = _real_state(examples)
    state = TrainingState.resumed(model, make_optimizer(model, TINY_CONFIG), 1, copy.deepcopy(saved))
    again = state.to_dict()
    plain = ("step", "epoch", "position", "total_steps", "budget", "batches_per_step")
    assert {k: again[k] for k in plain} == {k: saved[k] for k in plain} and again["step"] == 2
    assert again["elapsed"] >= saved["elapsed"]  # the clock goes on from the time already spent
    assert {k: v for k, v in again["history"].items() if "seconds" not in k} == {
        k: v for k, v in saved["history"].items() if "seconds" not in k
    }
    for index, values in saved["optimizer"]["state"].items():
        for key, tensor in values.items():
            assert torch.equal(again["optimizer"]["state"][index][key], tensor), (index, key)
    with pytest.raises(ValueError, match="took 1 batches a step; this one would take 2"):
        TrainingState.resumed(model, make_optimizer(model, TINY_CONFIG), 2, saved)


def test_an_options_object_trains_as_the_same_keywords_do_and_keywords_amend_it(examples):
    translator, pairs = examples
    by_keywords = train(_fresh_model(translator), pairs, TINY_CONFIG, steps=4, progress=False, log_every=1)
    options = training.TrainingOptions(steps=99, progress=False, log_every=1)
    by_options = train(_fresh_model(translator), pairs, TINY_CONFIG, options, steps=4)
    assert by_options.steps == by_keywords.steps == [1, 2, 3, 4]
    assert by_options.losses == by_keywords.losses
    assert options.steps == 99  # the keyword amended a copy, not the caller's options


def test_an_unknown_training_option_is_refused_naming_the_known_ones(examples):
    translator, pairs = examples
    with pytest.raises(TypeError, match=r"unknown options \['step'\].*steps, epochs, minutes"):
        train(_fresh_model(translator), pairs, TINY_CONFIG, step=4)
    with pytest.raises(ValueError, match="accumulate must be at least 1, got 0"):
        training.TrainingOptions(accumulate=0)
