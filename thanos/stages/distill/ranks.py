"""The processes of a data-parallel distillation: ``torchrun`` starts them (``WORLD_SIZE`` > 1), each joins
the process group (NCCL on GPUs, one GPU per process; gloo on CPUs) and trains its share of every step's
windows through ``torch.nn.parallel.DistributedDataParallel`` (every process holds the whole student, its
gradients and AdamW's moments) or, sharded, through FSDP (``torch.distributed.fsdp.fully_shard``: each
process holds 1/N of them and of the teacher). Without torchrun: one process, rank 0 of 1.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

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

    def sum(self, value: float, device: torch.device) -> float:
        """``value`` summed over the processes."""
        if self.world == 1:
            return value
        tensor = torch.tensor([value], dtype=torch.float64, device=device)
        torch.distributed.all_reduce(tensor)
        return float(tensor)

    def mean(self, value: float, device: torch.device) -> float:
        """``value`` averaged over the processes."""
        return self.sum(value, device) / self.world


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


def device_mesh(device: torch.device) -> Any:
    """The processes as the one-dimensional mesh FSDP shards over (every process calls it)."""
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh(device.type, (torch.distributed.get_world_size(),))


def shard(model: nn.Module, mesh: Any) -> nn.Module:
    """``model`` sharded over ``mesh`` by FSDP (``fully_shard``): each of its blocks (the module classes
    transformers keeps whole, ``_no_split_modules``: the decoder layers), then the rest (embeddings, final
    norm, head). Its parameters become DTensors of which this process holds one slice, on the mesh's device;
    a forward gathers a block's weights just before the block runs and frees them after it."""
    from torch.distributed.fsdp import fully_shard

    whole = set(getattr(model, "_no_split_modules", None) or ())
    for module in model.modules():
        if type(module).__name__ in whole:
            fully_shard(module, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def local(tensor: torch.Tensor) -> torch.Tensor:
    """This process's slice of a sharded (DTensor) tensor; the tensor itself otherwise."""
    from torch.distributed.tensor import DTensor

    return tensor.to_local() if isinstance(tensor, DTensor) else tensor
