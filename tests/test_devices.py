"""GPU slot pool (thanos.jobs.devices): real concurrent processes with a fake device count."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from thanos.jobs.devices import acquire, resolve_devices

RECORD = (
    "import json, os, sys, time; t0 = time.time(); time.sleep(float(sys.argv[2])); "
    "open(sys.argv[1], 'w').write(json.dumps({'dev': os.environ.get('CUDA_VISIBLE_DEVICES'), "
    "'slot': os.environ.get('THANOS_GPU_SLOT'), 'start': t0, 'end': time.time()}))"
)


def _run_pool(tmp_path, slots, jobs, hold=0.4, count=1):
    procs = []
    for i in range(jobs):
        cmd = [sys.executable, "-m", "thanos.jobs.devices", "--slots", str(slots), "--count", str(count)]
        cmd += ["--lock-dir", str(tmp_path / "locks")]
        cmd += ["--", sys.executable, "-c", RECORD, str(tmp_path / f"job{i}.json"), str(hold)]
        env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
        procs.append(subprocess.Popen(cmd, env=env))
    for proc in procs:
        assert proc.wait(timeout=120) == 0
    return [json.loads((tmp_path / f"job{i}.json").read_text()) for i in range(jobs)]


def test_concurrent_jobs_never_share_a_slot(tmp_path):
    records = _run_pool(tmp_path, slots=3, jobs=8)
    assert {r["dev"] for r in records} <= {"0", "1", "2"}
    for dev in {r["dev"] for r in records}:
        spans = sorted((r["start"], r["end"]) for r in records if r["dev"] == dev)
        for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
            assert start >= end, f"two jobs held device {dev} at once"
    # more than one device was used concurrently: the pool spreads jobs
    assert len({r["dev"] for r in records}) > 1


def test_multi_gpu_jobs_get_distinct_devices_never_shared(tmp_path):
    records = _run_pool(tmp_path, slots=3, jobs=5, count=2, hold=0.3)
    spans = []
    for r in records:
        devices = r["dev"].split(",")
        assert len(devices) == 2 and len(set(devices)) == 2 and set(devices) <= {"0", "1", "2"}
        spans += [(dev, r["start"], r["end"]) for dev in devices]
    for dev in {"0", "1", "2"}:
        held = sorted((start, end) for d, start, end in spans if d == dev)
        for (_, end), (start, _) in zip(held, held[1:], strict=False):
            assert start >= end, f"two jobs held device {dev} at once"
    too_many = subprocess.run(
        [sys.executable, "-m", "thanos.jobs.devices", "--slots", "2", "--count", "3", "--", "true"],
        capture_output=True,
        text=True,
    )
    assert too_many.returncode == 2 and "cannot lock 3 GPU slots: the pool has 2" in too_many.stderr


def test_lock_released_when_process_is_killed(tmp_path):
    lock_dir = tmp_path / "locks"
    cmd = [sys.executable, "-m", "thanos.jobs.devices", "--slots", "1", "--lock-dir", str(lock_dir), "--"]
    holder = subprocess.Popen([*cmd, sys.executable, "-c", "import time; time.sleep(60)"])
    deadline = time.time() + 30
    while not (lock_dir / "gpu-0.lock").exists() and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)
    with pytest.raises(TimeoutError):
        acquire(["0"], lock_dir, timeout=0.3)
    holder.kill()
    holder.wait()
    _, device, fd = acquire(["0"], lock_dir, timeout=10)
    os.close(fd)
    assert device == "0"


def test_resolve_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    assert resolve_devices("auto") == ["3", "5"]
    assert resolve_devices(1) == ["3"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert resolve_devices("auto") == []
    assert resolve_devices(0) == []
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert resolve_devices(2) == ["0", "1"]
    with pytest.raises(ValueError, match="gpu slots"):
        resolve_devices("many")


def test_no_slots_runs_command_unchanged(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    out = subprocess.run(
        [sys.executable, "-m", "thanos.jobs.devices", "--", "sh", "-c", "echo [$CUDA_VISIBLE_DEVICES]"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "[]"
