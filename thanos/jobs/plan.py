"""How the workflow's jobs run, decided once while Snakemake parses it (workflow/rules/config.smk): the GPUs
this machine's jobs see, the device check, the granularity (``thanos.jobs.granularity``), each kind of
job's GPUs, the figures job's processes, and the environment every job reads (``job_env``: set in the
scheduling process, it reaches jobs that Snakemake re-parses on a cluster, so both see the same rules)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from thanos.jobs.devices import detect_devices, resolve_devices
from thanos.jobs.granularity import choose_granularity
from thanos.recipes.fields import ConfigError

# the scheduling process's granularity and why, for the jobs Snakemake re-parses (cluster jobs)
GRANULARITY_ENV = ("THANOS_WF_GRANULARITY", "THANOS_WF_GRANULARITY_REASON")
MAX_FIGURE_PROCESSES = 8  # more would only plot figures that another process saves


def local_gpus(device: str, given: int | None, slots: Any) -> int:
    """GPUs the jobs of this machine can use at once: none on device cpu, ``given`` by ``--resources
    gpu=K``, else the devices of the slot pool (``slots``: the config's ``gpu_slots``); on device auto, no
    more than this machine shows (``gpu_slots: 4`` where it shows none: the jobs run on the CPU)."""
    if device == "cpu":
        return 0
    if given is not None:
        return int(given)
    pool = len(resolve_devices(slots))
    return min(pool, len(detect_devices())) if device == "auto" else pool


def check_device(device: str, *, local: bool, gpus: Callable[[], int]) -> None:
    """device: cuda where this machine's jobs (``local``: not a cluster's) would see no GPU fails in the first
    job: refused now, naming the key (a cluster's nodes have their own GPUs; ``--resources gpu=K`` says K are
    there). ``gpus`` is asked only then (it may run nvidia-smi)."""
    if str(device).startswith("cuda") and local and gpus() == 0:
        raise ConfigError(
            f"device: {device}, but the jobs of this machine would see no GPU (none in "
            "CUDA_VISIBLE_DEVICES or from nvidia-smi, no --resources gpu=K); set device: cpu or auto, or run "
            "on a GPU machine (on a cluster: --profile workflow/profiles/slurm)"
        )


def granularity(
    requested: str,
    recovered: Sequence[str],
    *,
    remote: bool,
    cluster: bool,
    gpus: Callable[[], int],
    environ: Mapping[str, str] = os.environ,
) -> tuple[str, str]:
    """``(granularity, reason)``: ``auto`` resolved once, by the Snakemake process that schedules the jobs
    (``choose_granularity``); a job Snakemake re-parses (``remote``) takes that choice from ``environ``."""
    name, reason = GRANULARITY_ENV
    if remote and name in environ:
        return environ[name], environ.get(reason, "")
    try:
        return choose_granularity(requested, cluster=cluster, gpus=gpus(), recovered=recovered)
    except ValueError as err:
        raise ConfigError(str(err)) from None


def check_eval_gpus(eval_gpus: int, device: str) -> None:
    """eval_gpus > 1 spreads an evaluated model over GPUs: it needs device auto or cuda."""
    if eval_gpus > 1 and device not in ("auto", "cuda"):
        raise ConfigError(
            f"eval_gpus: {eval_gpus} spreads evaluated models over several GPUs, which needs device: auto or"
            f" cuda (got device: {device}); set eval_gpus: 1"
        )


def job_gpus(device: str, count: int) -> int:
    """The GPUs a job asks for (its ``gpu`` resource: local ``--resources gpu=K`` caps it, SLURM's --gpus):
    none on device cpu, so that CPU-only clusters accept the jobs."""
    return 0 if device == "cpu" else count


def figure_processes(cluster: bool, cores: int | None) -> int:
    """The figures job's processes: a local run's cores up to 8; a cluster job, or a run without --cores,
    one."""
    return 1 if cluster else min(cores or 1, MAX_FIGURE_PROCESSES)


def slot_pool(device: str, slots: Any, count: int) -> str:
    """The GPU slot-pool wrapper of a job needing ``count`` GPUs (none on device: cpu)."""
    if device == "cpu":
        return ""
    return f"python -m thanos.jobs.devices --slots {slots} --count {count} --"


def job_env(config: dict[str, Any], granularity: str, reason: str) -> dict[str, str]:
    """The environment every job's shell command reads (not params: changing the device does not invalidate
    finished results): the device, each kind of job's slot-pool wrapper, where an evaluation puts the model
    (one device, or spread over eval_gpus GPUs), how a distillation job starts its processes (data parallel
    through torchrun when several, each a Python of its own: not forked from the local run's warm worker),
    zero-shot's offline switches, the granularity, the evaluations' batch sizes (they change no result:
    changed, no finished evaluation is run again)."""
    device, slots = config["device"], config["gpu_slots"]
    eval_gpus, processes = config["eval_gpus"], config["distill_processes"]
    torchrun = (
        f"env THANOS_WORKER=off python -m torch.distributed.run --standalone --nproc-per-node {processes}"
    )
    return {
        "THANOS_WF_DEVICE": device,
        "THANOS_WF_GPU": slot_pool(device, slots, 1),
        "THANOS_WF_EVAL_GPU": slot_pool(device, slots, eval_gpus),
        "THANOS_WF_EVAL_PLACEMENT": "--device-map auto" if eval_gpus > 1 else f"--device {device}",
        "THANOS_WF_DISTILL_GPU": slot_pool(device, slots, processes),
        "THANOS_WF_DISTILL": torchrun if processes > 1 else "python",
        "THANOS_WF_ZEROSHOT_ENV": "env HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1"
        if config["zeroshot"]["offline"]
        else "",
        GRANULARITY_ENV[0]: granularity,
        GRANULARITY_ENV[1]: reason,
        "THANOS_WF_PPL_BATCH": str(config["perplexity"]["batch_size"]),
        "THANOS_WF_ZEROSHOT_BATCH": str(config["zeroshot"]["batch_size"]),
    }
