"""The processes of a data-parallel distillation: ``torchrun`` starts them (``WORLD_SIZE`` > 1), each joins
the process group (NCCL on GPUs, one GPU per process; gloo on CPUs) and trains its share of every step's
windows through ``torch.nn.parallel.DistributedDataParallel``. Without torchrun: one process, rank 0 of 1.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from thanos.stages.common import resolve_device


@dataclass(frozen=True)
class Ranks:
    """This process among the data-parallel ones (``rank`` 0 of 1 without torchrun)."""

    rank: int = 0
    world: int = 1

    @property
    def main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.world > 1:
            torch.distributed.barrier()

    def mean(self, value: float, device: torch.device) -> float:
        """``value`` averaged over the processes."""
        if self.world == 1:
            return value
        tensor = torch.tensor([value], dtype=torch.float64, device=device)
        torch.distributed.all_reduce(tensor)
        return float(tensor) / self.world


def start_ranks(device: str) -> tuple[Ranks, torch.device]:
    """The process group torchrun asks for (``WORLD_SIZE`` > 1), and this process's device: ``device``, or
    ``cuda:LOCAL_RANK`` when several processes share the GPUs of a machine."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return Ranks(), resolve_device(device)
    local = int(os.environ.get("LOCAL_RANK", "0"))
    dev = resolve_device(device)
    if dev.type == "cuda":
        dev = resolve_device(f"cuda:{local}")
        torch.cuda.set_device(dev)
    if not torch.distributed.is_initialized():
        torch.distributed.init_process_group("nccl" if dev.type == "cuda" else "gloo")
    return Ranks(torch.distributed.get_rank(), world), dev
