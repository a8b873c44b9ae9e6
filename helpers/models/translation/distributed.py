"""Training on several processes with PyTorch's own engine: ``torchrun`` and ``DistributedDataParallel``.

``torchrun --nproc_per_node P -m helpers.models.translation train ...`` starts P copies of the command line, each
with ``RANK``, ``WORLD_SIZE`` and a rendezvous address in its environment. Each copy (a *rank*) holds the
whole model, trains on its own share of every step's batches, and DDP averages the gradients, so all
ranks take the same optimiser step. Rank 0 alone validates, logs and writes checkpoints.

Gradients are averaged over ranks, so one step of P ranks equals one step of a single process that
accumulates the same P batches (``accumulate=P`` in :func:`helpers.models.translation.training.train`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

#: How long a rank waits for the others at a collective before giving up. A rank that dies makes torchrun
#: stop the others at once; this bound covers a rank that hangs instead (it must exceed rank 0's longest
#: validation, during which the others wait).
COLLECTIVE_TIMEOUT = timedelta(minutes=20)


@dataclass(frozen=True)
class Ranks:
    """Where this process stands among the training processes."""

    rank: int = 0  # this process, 0 .. world_size - 1
    world_size: int = 1  # processes training together
    local_rank: int = 0  # this process among those on the same machine (picks its GPU)

    @property
    def is_main(self) -> bool:
        """Rank 0: the one that validates, logs and writes checkpoints."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def ranks_from_environment() -> Ranks:
    """The ranks torchrun announces in the environment; a single process without it."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size < 1:
        raise ValueError(f"WORLD_SIZE must be at least 1, got {world_size}")
    return Ranks(int(os.environ.get("RANK", "0")), world_size, int(os.environ.get("LOCAL_RANK", "0")))


def choose_device(choice: str, ranks: Ranks = Ranks()) -> torch.device:
    """``auto`` takes a GPU when present, else the CPU; each rank on a machine takes its own GPU."""
    if choice not in ("auto", "cpu", "cuda"):
        raise ValueError(f"device must be 'auto', 'cpu' or 'cuda', got {choice!r}")
    if choice == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: no CUDA GPU is available to PyTorch here (use --device cpu or auto)")
    if choice == "cpu" or (choice == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    return torch.device("cuda", ranks.local_rank % torch.cuda.device_count())


def start(ranks: Ranks, device: torch.device, timeout: timedelta = COLLECTIVE_TIMEOUT) -> None:
    """Join the process group when torchrun started several ranks (gloo on the CPU, NCCL on GPUs).

    ``timeout``: how long a rank waits for the others at a collective before it raises (see :func:`timed_out`).
    """
    if not ranks.distributed or dist.is_initialized():
        return
    if device.type == "cuda":
        torch.cuda.set_device(device)
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend, rank=ranks.rank, world_size=ranks.world_size, timeout=timeout)


def stop(finished: bool = True) -> None:
    """Leave the process group (a no-op for a single process).

    After a run that ``finished``, every rank first waits for the others at a barrier: otherwise a rank that
    is done early closes its connections while rank 0 is still validating and saving, and gloo can abort a
    process whose peer closed a connection under it. After an error there is no barrier to wait at:
    torchrun stops the other ranks.
    """
    if dist.is_initialized():
        if finished:
            dist.barrier()
        dist.destroy_process_group()


def current_ranks() -> Ranks:
    """The ranks of the process group this process has joined, or a single process."""
    if dist.is_available() and dist.is_initialized():
        return Ranks(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", "0")))
    return Ranks()


def timed_out(error: BaseException) -> bool:
    """Whether ``error`` is a collective that gave up waiting for another rank (a rank stopped or hung)."""
    return isinstance(error, RuntimeError) and any(
        word in str(error).lower() for word in ("timed out", "timeout", "time out")
    )
