"""Training beyond one process and one sitting: resumed runs, torchrun with DDP, readable logs.

Tiny models on the first 200 captions, so each run takes seconds.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from helpers import load_corpus
from helpers.models.translation import cli, load_checkpoint
from helpers.models.translation.config import LESSON_CONFIG
from helpers.models.translation.pipeline import build_translator, encode_pairs
from helpers.models.translation.training import train

ROOT = Path(__file__).resolve().parents[3]
TINY = [
    *("--d-model", "16", "--heads", "2", "--encoder-layers", "1", "--decoder-layers", "1"),
    *("--feedforward", "32", "--val-sentences", "8", "--batch-tokens", "300", "--quiet"),
]
TINY_CONFIG = replace(
    LESSON_CONFIG, d_model=16, heads=2, encoder_layers=1, decoder_layers=1, feedforward=32, batch_tokens=300
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def examples():
    corpus = load_corpus("captions", "train")
    translator = build_translator(corpus, TINY_CONFIG, "cpu")
    return translator, encode_pairs(translator, corpus)[:200]


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


def test_resume_from_the_command_line_continues_to_the_same_checkpoint(tmp_path, monkeypatch):
    args = ["train", "--corpus", "captions", "--limit", "200", "--steps", "6", "--eval-every", "3", *TINY]
    assert cli.main([*args, "--out", str(tmp_path / "straight.pt")]) == 0

    class Killed(Exception):
        pass

    real_save = cli.save_checkpoint

    def save_then_die_at_step_3(path, translator, metrics=None, info=None, training=None):
        real_save(path, translator, metrics, info, training=training)
        if training is not None and training["step"] == 3:
            raise Killed  # as if the machine went away right after the state was on disk

    monkeypatch.setattr(cli, "save_checkpoint", save_then_die_at_step_3)
    with pytest.raises(Killed):
        cli.main([*args, "--out", str(tmp_path / "cut.pt")])
    monkeypatch.setattr(cli, "save_checkpoint", real_save)
    state = tmp_path / "cut.resume.pt"
    assert cli.main(["train", "--resume", str(state), "--out", str(tmp_path / "cut.pt"), "--quiet"]) == 0

    # both the best weights (--out) and the last ones (the final resume state) are the same
    for best_or_last in ("{}.pt", "{}.resume.pt"):
        straight, straight_payload = load_checkpoint(tmp_path / best_or_last.format("straight"))
        resumed, resumed_payload = load_checkpoint(tmp_path / best_or_last.format("cut"))
        same = ("step", "steps", "final_loss", "best_step", "best_val_score")  # not the times
        assert {k: v for k, v in resumed_payload["metrics"].items() if k in same} == {
            k: v for k, v in straight_payload["metrics"].items() if k in same
        }
        assert 6 in (straight_payload["metrics"].get("steps"), straight_payload["metrics"].get("step"))
        for name, tensor in straight.model.state_dict().items():
            assert torch.equal(tensor, resumed.model.state_dict()[name]), name


def test_resume_refuses_settings_that_would_change_the_run(tmp_path, capsys):
    out = tmp_path / "run.pt"
    assert cli.main(["train", "--corpus", "captions", "--limit", "200", "--steps", "2", "--out", str(out), *TINY]) == 0
    assert cli.main(["train", "--resume", str(tmp_path / "run.resume.pt"), "--out", str(out), "--lr", "0.1"]) == 2
    assert "--resume continues a run as it was set up; drop lr" in capsys.readouterr().err
    assert cli.main(["train", "--resume", str(out), "--out", str(tmp_path / "other.pt")]) == 2  # best weights: no state
    assert "holds no training state" in capsys.readouterr().err


def test_a_log_file_gets_one_summary_line_per_interval_not_a_progress_bar(examples, capsys):
    translator, pairs = examples
    model = _fresh_model(translator)
    train(model, pairs, TINY_CONFIG, steps=5, progress=True, report_every_minutes=0.0)
    err = capsys.readouterr().err
    assert "\r" not in err  # no carriage-return updates of a bar
    lines = [line for line in err.splitlines() if line.startswith("step ")]
    assert len(lines) == 6  # one a step (the interval is 0 here) and one at the end
    assert lines[-2].startswith("step 5/5 | loss ") and "tok/s" in lines[-2] and "left" in lines[-2]


TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]


def _environment() -> dict[str, str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    env.pop("WORLD_SIZE", None)
    return env


@pytest.mark.skipif(not torch.distributed.is_available(), reason="this PyTorch build has no torch.distributed")
def test_two_processes_equal_one_process_with_the_same_global_batch(tmp_path):
    """Two ranks (gloo) each take one batch a step; one process accumulates the same two batches.

    The only difference is the order of floating-point additions (DDP averages the two gradients in one
    all-reduce; accumulation adds half of each), about 1e-7 relative per step, which six Adam steps on a
    tiny model keep far below 1e-4.
    """
    args = ["-m", "helpers.models.translation", "--threads", "1", "--device", "cpu", "train", "--corpus", "captions"]
    args += ["--limit", "200", "--steps", "6", *TINY]
    together = subprocess.run(
        [*TORCHRUN, *args, "--out", str(tmp_path / "ddp" / "run.pt")],
        capture_output=True,
        text=True,
        timeout=300,
        env=_environment(),
        cwd=ROOT,
    )
    assert together.returncode == 0, together.stderr[-3000:]
    alone = subprocess.run(
        [sys.executable, *args, "--accumulate", "2", "--out", str(tmp_path / "one" / "run.pt")],
        capture_output=True,
        text=True,
        timeout=300,
        env=_environment(),
        cwd=ROOT,
    )
    assert alone.returncode == 0, alone.stderr[-3000:]
    # rank 0 alone writes: the best weights and the resume state, each once
    assert sorted(p.name for p in (tmp_path / "ddp").iterdir()) == ["run.pt", "run.resume.pt"]
    assert together.stderr.count("saved ") == 1
    assert "x 2 process(es)" in together.stderr
    ddp, ddp_payload = load_checkpoint(tmp_path / "ddp" / "run.pt")
    one, one_payload = load_checkpoint(tmp_path / "one" / "run.pt")
    assert ddp_payload["metrics"]["steps"] == one_payload["metrics"]["steps"] == 6
    ddp_state = load_checkpoint(tmp_path / "ddp" / "run.resume.pt")[1]["training"]
    one_state = load_checkpoint(tmp_path / "one" / "run.resume.pt")[1]["training"]
    torch.testing.assert_close(ddp_state["history"]["losses"], one_state["history"]["losses"], rtol=1e-5, atol=1e-5)
    for name, tensor in one.model.state_dict().items():
        torch.testing.assert_close(ddp.model.state_dict()[name], tensor, rtol=1e-4, atol=1e-5, msg=name)


# A rank whose training step misbehaves at step 2: the loop looks ``train_step`` up in its module at every step.
MISBEHAVING_RANK = """
import os, signal, sys
from helpers.models.translation import cli, training
real_step = training.train_step
steps = []
def misbehaving_step(*args, **kwargs):
    import torch.distributed as dist
    steps.append(1)
    if dist.get_rank() == 1 and len(steps) == 2:
        if sys.argv[1] == "fail":
            raise RuntimeError("rank 1 fails on purpose")
        os.kill(os.getpid(), signal.SIGSTOP)  # stops without dying, as a suspended or swapped-out process does
    return real_step(*args, **kwargs)
training.train_step = misbehaving_step
sys.exit(cli.main(sys.argv[2:]))
"""


def _misbehaving_run(tmp_path, how: str, *options: str) -> subprocess.CompletedProcess:
    script = tmp_path / "misbehaving_rank.py"
    script.write_text(MISBEHAVING_RANK)
    args = ["--threads", "1", "--device", "cpu", "train", "--corpus", "captions", "--limit", "200", *options]
    return subprocess.run(
        [*TORCHRUN, str(script), how, *args, "--steps", "50", *TINY, "--out", str(tmp_path / "run.pt")],
        capture_output=True,
        text=True,
        timeout=240,  # rank 0 would otherwise wait for rank 1 at its next all-reduce for COLLECTIVE_TIMEOUT
        env=_environment(),
        cwd=ROOT,
    )


@pytest.mark.skipif(not torch.distributed.is_available(), reason="this PyTorch build has no torch.distributed")
def test_a_failing_rank_stops_the_others_instead_of_leaving_them_waiting(tmp_path):
    run = _misbehaving_run(tmp_path, "fail")
    assert run.returncode != 0
    assert "rank 1 fails on purpose" in run.stderr
    assert not (tmp_path / "run.pt").exists()


@pytest.mark.skipif(not torch.distributed.is_available(), reason="this PyTorch build has no torch.distributed")
def test_a_stopped_rank_makes_rank_0_give_up_with_a_message(tmp_path):
    run = _misbehaving_run(tmp_path, "stop", "--rank-timeout", "0.15")
    assert run.returncode != 0
    assert "rank 0: another training process did not answer for 0.15 minutes (--rank-timeout)" in run.stderr
    assert f"continue with `--resume {tmp_path / 'run.resume.pt'}`" in run.stderr


def test_device_choice_is_checked():
    from helpers.models.translation.distributed import choose_device

    assert choose_device("cpu").type == "cpu"
    assert choose_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ValueError, match="'auto', 'cpu' or 'cuda'"):
        choose_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA GPU"):
            choose_device("cuda")


@pytest.mark.skipif(not torch.distributed.is_available(), reason="this PyTorch build has no torch.distributed")
def test_ranks_agree_when_a_time_budget_ends(tmp_path):
    """Each rank's clock differs; rank 0's decides, so both stop at the same step and neither waits forever."""
    args = ["-m", "helpers.models.translation", "--threads", "1", "--device", "cpu", "train", "--corpus", "captions"]
    run = subprocess.run(
        [*TORCHRUN, *args, "--limit", "200", "--minutes", "0.1", *TINY, "--out", str(tmp_path / "run.pt")],
        capture_output=True,
        text=True,
        timeout=240,
        env=_environment(),
        cwd=ROOT,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    steps = load_checkpoint(tmp_path / "run.pt")[1]["metrics"]["steps"]
    assert steps >= 1 and f"of {steps} (" in run.stderr
