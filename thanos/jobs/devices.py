"""GPU slot pool: give each concurrent Snakemake job its own device.

Snakemake's ``--resources gpu=K`` caps how many GPU jobs run at once but does not say *which* GPU a job
may use. Every GPU rule therefore runs its command through this module::

    python -m thanos.jobs.devices [--slots K|auto] [--lock-dir DIR] [--count N] -- python -m thanos ...

It takes a free slot among K with a non-blocking ``fcntl.flock`` on ``DIR/gpu-{device}.lock`` (polling
until one is free; ``--count N`` locks N at once, for an evaluation spread over N GPUs), sets
``CUDA_VISIBLE_DEVICES`` to the locked device(s) and ``exec``s the command. The lock file
descriptor is inherited across ``exec``, so the slot is held exactly as long as the stage process lives and
the kernel releases it when that process exits, however it exits (including SIGKILL): no stale locks.

Slots:
- ``--slots auto`` (default, or ``THANOS_GPU_SLOTS``): the devices listed in ``CUDA_VISIBLE_DEVICES`` if it
  is set (e.g. by SLURM), else the GPUs that ``nvidia-smi -L`` lists, else none.
- ``--slots K``: devices ``0..K-1`` (or the first K entries of ``CUDA_VISIBLE_DEVICES``).
- No slots (a CPU machine): the command runs unchanged, without locking.

Lock files are named by the physical device id, so jobs of different Snakemake runs on one machine (or
SLURM jobs that were given different GPUs of one node) share the pool correctly. The default lock
directory is ``$THANOS_GPU_LOCK_DIR`` or ``{tmp}/thanos-gpu-slots-{uid}`` (node-local).
"""

from __future__ import annotations

import argparse
import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ENV_SLOTS = "THANOS_GPU_SLOTS"
ENV_LOCK_DIR = "THANOS_GPU_LOCK_DIR"
ENV_SLOT = "THANOS_GPU_SLOT"  # set for the stage: the slot index it holds


def default_lock_dir() -> Path:
    env = os.environ.get(ENV_LOCK_DIR)
    if env:
        return Path(env)
    return Path(tempfile.gettempdir()) / f"thanos-gpu-slots-{os.getuid()}"


def detect_devices() -> list[str]:
    """Physical device ids this process may use: CUDA_VISIBLE_DEVICES, else nvidia-smi, else none."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [d.strip() for d in visible.split(",") if d.strip() and d.strip() != "-1"]
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [str(i) for i, line in enumerate(out.splitlines()) if line.startswith("GPU ")]


def resolve_devices(slots: str | int | None) -> list[str]:
    """The devices of the pool: ``auto`` (detect) or the first K of the visible devices (0..K-1)."""
    if slots is None:
        slots = os.environ.get(ENV_SLOTS, "auto")
    slots = str(slots).strip().lower()
    if slots == "auto":
        return detect_devices()
    try:
        k = int(slots)
    except ValueError:
        raise ValueError(f"gpu slots must be 'auto' or an integer >= 0, got {slots!r}") from None
    if k < 0:
        raise ValueError(f"gpu slots must be 'auto' or an integer >= 0, got {k}")
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        devices = [d.strip() for d in visible.split(",") if d.strip() and d.strip() != "-1"]
        if len(devices) >= k:
            return devices[:k]
    return [str(i) for i in range(k)]


def _try_lock(path: Path) -> int | None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def acquire(
    devices: list[str],
    lock_dir: str | os.PathLike | None = None,
    poll: float = 0.05,
    timeout: float | None = None,
) -> tuple[int, str, int]:
    """Lock a free slot; return (slot index, device id, locked fd). Polls until one is free."""
    [(slot, device, fd)] = acquire_many(devices, 1, lock_dir, poll, timeout)
    return slot, device, fd


def acquire_many(
    devices: list[str],
    count: int,
    lock_dir: str | os.PathLike | None = None,
    poll: float = 0.05,
    timeout: float | None = None,
) -> list[tuple[int, str, int]]:
    """Lock ``count`` free slots at once; return [(slot index, device id, locked fd)]. Polls until enough
    are free. A try that gets fewer releases what it got, so two multi-slot jobs never deadlock."""
    if not devices:
        raise ValueError("acquire() needs at least one device")
    if not 1 <= count <= len(devices):
        raise ValueError(f"cannot lock {count} GPU slots: the pool has {len(devices)} ({devices})")
    lock_dir = Path(lock_dir) if lock_dir is not None else default_lock_dir()
    lock_dir.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    warned = False
    # start at a pid-dependent slot so that concurrent starters spread out instead of racing for slot 0
    offset = os.getpid() % len(devices)
    while True:
        held = []
        for k in range(len(devices)):
            slot = (offset + k) % len(devices)
            fd = _try_lock(lock_dir / f"gpu-{devices[slot]}.lock")
            if fd is not None:
                held.append((slot, devices[slot], fd))
                if len(held) == count:
                    for _, _, lock_fd in held:
                        os.ftruncate(lock_fd, 0)
                        os.write(lock_fd, f"{os.getpid()}\n".encode())
                    return sorted(held)
        for _, _, lock_fd in held:
            os.close(lock_fd)
        waited = time.monotonic() - start
        if timeout is not None and waited > timeout:
            raise TimeoutError(
                f"no {count} free GPU slot(s) among {devices} in {lock_dir} after {waited:.0f} s"
            )
        if not warned and waited > 10:
            print(
                f"thanos.jobs.devices: waiting for {count} free GPU slot(s) among {devices} ({lock_dir})",
                file=sys.stderr,
            )
            warned = True
        time.sleep(poll * (1 + (os.getpid() % 7) / 7))  # desynchronise competing multi-slot pollers


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m thanos.jobs.devices",
        description="Run a command on a free GPU slot (sets CUDA_VISIBLE_DEVICES); see the module docstring.",
    )
    parser.add_argument("--slots", default=None, help=f"'auto' (default, or ${ENV_SLOTS}) or K slots")
    parser.add_argument("--lock-dir", default=None, help=f"default ${ENV_LOCK_DIR} or a node-local tmp dir")
    parser.add_argument(
        "--count",
        type=int,
        default=1,
        help="slots (GPUs) the command needs at once, e.g. 2 for a model spread over two GPUs (default 1)",
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- command and arguments")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given (use: python -m thanos.jobs.devices [options] -- COMMAND ...)")
    try:
        devices = resolve_devices(args.slots)
    except ValueError as err:
        parser.error(str(err))
    env = dict(os.environ)
    if devices:
        try:
            held = acquire_many(devices, args.count, args.lock_dir)
        except ValueError as err:
            parser.error(str(err))
        for _, _, fd in held:
            os.set_inheritable(fd, True)  # the stage process keeps the locks until it exits
        env["CUDA_VISIBLE_DEVICES"] = ",".join(device for _, device, _ in held)
        env[ENV_SLOT] = ",".join(str(slot) for slot, _, _ in held)
    try:
        os.execvpe(command[0], command, env)
    except OSError as err:
        print(f"thanos.jobs.devices: cannot run {command[0]!r}: {err}", file=sys.stderr)
        return 127
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
