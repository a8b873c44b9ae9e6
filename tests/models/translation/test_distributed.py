"""helpers.models.translation.distributed: torchrun with DDP equals one process, and ranks stop together.

Tiny models on the first 200 captions, so each run takes seconds.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch

from helpers.models.translation import cli, load_checkpoint

ROOT = Path(__file__).resolve().parents[3]
TINY = [
    *("--embed-dim", "16", "--num-heads", "2", "--num-encoder-layers", "1", "--num-decoder-layers", "1"),
    *("--ff-dim", "32", "--val-sentences", "8", "--batch-tokens", "300", "--quiet"),
]

pytestmark = pytest.mark.usefixtures("one_torch_thread")


TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]


def _torchrun(*args: str, timeout: int) -> subprocess.CompletedProcess:
    """Two processes under torchrun, run from the repository with the tests' environment; output captured."""
    return subprocess.run(
        [*TORCHRUN, *args], capture_output=True, text=True, timeout=timeout, env=_environment(), cwd=ROOT
    )


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
    together = _torchrun(*args, "--out", str(tmp_path / "ddp" / "run.pt"), timeout=300)
    assert together.returncode == 0, together.stderr[-3000:]
    # the one process is this one: the same command line, without another interpreter to start
    assert cli.main([*args[2:], "--accumulate", "2", "--out", str(tmp_path / "one" / "run.pt")]) == 0
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
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "stopped_rank.pid"), "w") as pid:
            pid.write(str(os.getpid()))
        os.kill(os.getpid(), signal.SIGSTOP)  # stops without dying, as a suspended or swapped-out process does
    return real_step(*args, **kwargs)
training.train_step = misbehaving_step
sys.exit(cli.main(sys.argv[2:]))
"""


def _misbehaving_run(tmp_path, how: str, *options: str) -> subprocess.CompletedProcess:
    script = tmp_path / "misbehaving_rank.py"
    script.write_text(MISBEHAVING_RANK)
    args = ["--threads", "1", "--device", "cpu", "train", "--corpus", "captions", "--limit", "200", *options]
    command = [*TORCHRUN, str(script), how, *args, "--steps", "50", *TINY, "--out", str(tmp_path / "run.pt")]
    stopped = tmp_path / "stopped_rank.pid"
    lines = []
    with subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=_environment(), cwd=ROOT
    ) as run:
        watchdog = threading.Timer(240, run.kill)  # rank 0 would otherwise wait for rank 1 for COLLECTIVE_TIMEOUT
        watchdog.start()
        try:
            for line in run.stderr:
                lines.append(line)
                if "did not answer" in line and stopped.exists():
                    # torchrun's SIGTERM cannot end a stopped rank, and it sends SIGKILL only 30 s later
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(int(stopped.read_text()), signal.SIGKILL)
            returncode = run.wait()
        finally:
            watchdog.cancel()
    return subprocess.CompletedProcess(command, returncode, "", "".join(lines))


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


# Each rank's clock is injected: a training step moves rank 0's on by 15 s and rank 1's by 30 s, so a one-minute
# budget is spent after 4 steps for rank 0 and after 2 for rank 1. Each rank writes the learning rate of every step
# it takes to lr<rank>.txt beside the script.
CLOCKS_THAT_DIFFER = """
import os, sys, time, types
import torch.distributed as dist
from helpers.models.translation import cli, training
now = [0.0]
real_step = training.train_step
def timed_step(net, optimizer, batches, config, lr, *args, **kwargs):
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), f"lr{dist.get_rank()}.txt"), "a") as log:
        log.write(f"{lr!r}\\n")
    result = real_step(net, optimizer, batches, config, lr, *args, **kwargs)
    now[0] += 15.0 if dist.get_rank() == 0 else 30.0
    return result
training.train_step = timed_step
training.time = types.SimpleNamespace(perf_counter=lambda: now[0], process_time=time.process_time)
sys.exit(cli.main(sys.argv[1:]))
"""


@pytest.mark.skipif(not torch.distributed.is_available(), reason="this PyTorch build has no torch.distributed")
def test_ranks_agree_when_a_time_budget_ends(tmp_path):
    """Each rank's clock differs; rank 0's decides, so both stop at the same step and neither waits forever, and
    both take every step at the same learning rate (the schedule follows the budget), or their weights would part."""
    script = tmp_path / "clocks_that_differ.py"
    script.write_text(CLOCKS_THAT_DIFFER)
    args = ["--threads", "1", "--device", "cpu", "train", "--corpus", "captions", "--limit", "200", "--minutes", "1"]
    run = _torchrun(str(script), *args, "--rank-timeout", "0.5", *TINY, "--out", str(tmp_path / "run.pt"), timeout=240)
    assert run.returncode == 0, run.stderr[-3000:]
    steps = load_checkpoint(tmp_path / "run.pt")[1]["metrics"]["steps"]
    assert steps == 4 and "of 4 (" in run.stderr  # rank 0's clock ended the run, and rank 1 went on with it
    rates = [(tmp_path / f"lr{rank}.txt").read_text().split() for rank in (0, 1)]
    assert len(rates[0]) == 4 and rates[0] == rates[1], rates
    assert len(set(rates[0])) > 1  # the schedule moved, so a rank reading its own clock would have differed
