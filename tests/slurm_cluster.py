"""A real single-node SLURM cluster on localhost, for tests.

`slurm_cluster(tmp_dir)` is a context manager that

1. installs Debian's `slurm-wlm` and `munge` with apt-get when `slurmctld` is missing (CI starts from a
   fresh machine; needs root),
2. writes a private munge key and a `slurm.conf` for this machine (its hostname, its CPU count, its
   memory) into `tmp_dir`, with free TCP ports, so that several clusters (other test runs on a shared
   machine) never collide and nothing under /etc is touched,
3. starts `munged`, `slurmctld` and `slurmd` as background processes (no systemd) and waits until
   `sinfo` shows the node idle,
4. yields a `SlurmCluster` whose `env` (SLURM_CONF, PATH) makes `sbatch`, `squeue`, `sacct`, `scancel`
   and the Snakemake SLURM executor plugin talk to this cluster,
5. on exit cancels every job still queued, stops the daemons and leaves their logs in `tmp_dir`.

Configuration choices (they work in a container without cgroups or systemd):
- ProctrackType=proctrack/linuxproc, TaskPlugin=task/none, JobAcctGatherType=jobacct_gather/none.
- AccountingStorageType=accounting_storage/none: no slurmdbd, no database. `squeue` is the status
  command that works here; MinJobAge is a day so that finished jobs stay visible to `squeue` and
  `scontrol show job` for the whole test session, however slow the machine (the plugin only trusts
  `squeue` when MinJobAge >= 3 x init-seconds-before-status-checks; a job finished 600 s before the test
  read its GPU request was once gone on a slow CI machine).
  JobCompType=jobcomp/filetxt writes one line per finished job to `jobcomp.txt` (a record of what ran).
  Without slurmdbd, `sacct` answers "Slurm accounting storage is disabled": see
  `SlurmCluster.sacct_works()`.
- The node advertises `gpus` generic resources without device files (gres.conf `Count=N`, no `File=`),
  so that the profile's `--gpus=1` requests are accepted and really scheduled (they bound how many GPU
  jobs run at once); the jobs themselves run on the CPU. The CPU count and memory are the machine's.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

SBIN_DIRS = ("/usr/sbin", "/sbin", "/usr/local/sbin")
FAKE_GPU_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/urandom")


def _path_with_sbin() -> str:
    parts = os.environ.get("PATH", "").split(os.pathsep)
    return os.pathsep.join(parts + [d for d in SBIN_DIRS if d not in parts])


def _which(name: str) -> str | None:
    return shutil.which(name, path=_path_with_sbin())


def ensure_slurm_installed() -> None:
    """Install slurm-wlm and munge from Debian's packages when slurmctld is not on PATH."""
    if _which("slurmctld") and _which("munged") and _which("sbatch"):
        return
    if not shutil.which("apt-get"):
        raise RuntimeError("slurmctld is not installed and apt-get is not available to install slurm-wlm")
    prefix = [] if os.geteuid() == 0 else ["sudo", "-n"]
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(prefix + ["apt-get", "update", "-q"], check=True, env=env, stdout=subprocess.DEVNULL)
    subprocess.run(
        prefix + ["apt-get", "install", "-y", "-q", "--no-install-recommends", "slurm-wlm", "munge"],
        check=True,
        env=env,
        stdout=subprocess.DEVNULL,
    )
    if not _which("slurmctld"):
        raise RuntimeError("apt-get installed slurm-wlm but slurmctld is still not on PATH")


_TAKEN: set[int] = set()  # the ports this process has handed out


def _free_port() -> int:
    """A free port below the kernel's ephemeral range. A port the kernel hands out (bind to port 0) may be
    taken again by any outgoing connection (another cluster's RPCs, torchrun's rendezvous) before slurmd
    binds it seconds later ("Unable to bind listen port: Address already in use"); below the range, only
    an explicit bind can take it."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    while True:
        port = 10000 + secrets.randbelow(max(low - 10000, 1000))
        if port in _TAKEN:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _TAKEN.add(port)
        return port


def _mem_total_mb() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024
    raise RuntimeError("MemTotal not found in /proc/meminfo")


@dataclass
class SlurmCluster:
    root: Path
    hostname: str
    cpus: int
    mem_mb: int
    gpus: int
    partition: str
    env: dict[str, str]
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def ctld_log(self) -> Path:
        return self.root / "slurmctld.log"

    @property
    def jobcomp(self) -> Path:
        return self.root / "jobcomp.txt"

    def run(self, *cmd: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess:
        return subprocess.run(
            list(cmd), env=self.env, check=check, capture_output=True, text=True, timeout=timeout
        )

    def squeue(self) -> list[dict[str, str]]:
        """All jobs slurmctld still knows (pending, running and finished ones younger than MinJobAge)."""
        out = self.run("squeue", "--states=all", "--noheader", "--format=%i|%j|%T").stdout
        jobs = []
        for line in out.splitlines():
            if line.strip():
                job_id, name, state = line.strip().split("|", 2)
                jobs.append({"id": job_id, "name": name, "state": state})
        return jobs

    def completed_jobs(self) -> list[dict[str, str]]:
        """Finished jobs as recorded by jobcomp/filetxt (one dict of KEY=VALUE fields per job)."""
        if not self.jobcomp.exists():
            return []
        jobs = []
        for line in self.jobcomp.read_text().splitlines():
            fields = dict(item.split("=", 1) for item in line.split() if "=" in item)
            if fields:
                jobs.append(fields)
        return jobs

    def job(self, job_id: str) -> dict[str, str]:
        """`scontrol show job` fields of a job slurmctld still knows (finished less than MinJobAge ago)."""
        out = self.run("scontrol", "-o", "show", "job", job_id).stdout
        return dict(item.split("=", 1) for item in out.split() if "=" in item)

    def sacct_works(self) -> bool:
        return self.run("sacct", "-X", "--noheader", "--parsable2", check=False).returncode == 0

    def wait_idle(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            self._check_alive()
            res = self.run("sinfo", "--noheader", "--format=%T", check=False)
            last = (res.stdout + res.stderr).strip()
            if res.returncode == 0 and last.rstrip("*") == "idle":
                return
            time.sleep(0.5)
        raise RuntimeError(f"SLURM node not idle after {timeout} s (sinfo: {last!r}); logs in {self.root}")

    def wait_no_jobs_active(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            active = [j for j in self.squeue() if j["state"] in ("PENDING", "RUNNING", "COMPLETING")]
            if not active:
                return
            time.sleep(0.5)
        raise RuntimeError(f"SLURM jobs still active after {timeout} s: {self.squeue()}")

    def _check_alive(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with status {proc.returncode}; see logs in {self.root}")


def _write_configs(root: Path, hostname: str, cpus: int, mem_mb: int, gpus: int, partition: str) -> dict:
    munge_dir = root / "munge"
    munge_dir.mkdir(mode=0o700)
    key = munge_dir / "munge.key"
    key.write_bytes(secrets.token_bytes(1024))
    key.chmod(0o600)
    socket_path = munge_dir / "munge.socket"
    for d in ("state", "spool"):
        (root / d).mkdir()
    user = "root" if os.geteuid() == 0 else os.environ.get("USER") or subprocess.getoutput("id -un")
    gres = f" Gres=gpu:{gpus}" if gpus else ""
    conf = f"""\
# Generated by tests/slurm_cluster.py: a single-node cluster on localhost for tests.
ClusterName=thanostest
SlurmctldHost={hostname}(127.0.0.1)
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
SlurmUser={user}
SlurmdUser={user}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={socket_path}
StateSaveLocation={root / "state"}
SlurmdSpoolDir={root / "spool"}
SlurmctldPidFile={root / "slurmctld.pid"}
SlurmdPidFile={root / "slurmd.pid"}
SlurmctldLogFile={root / "slurmctld.log"}
SlurmdLogFile={root / "slurmd.log"}
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc={root / "jobcomp.txt"}
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
GresTypes=gpu
MinJobAge=86400
DefMemPerCPU=512
ReturnToService=2
KillWait=5
InactiveLimit=0
MpiDefault=none
NodeName={hostname} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={mem_mb}{gres} State=UNKNOWN
PartitionName={partition} Nodes={hostname} Default=YES MaxTime=INFINITE State=UP
"""
    (root / "slurm.conf").write_text(conf)
    # SLURM drops GPUs without a device file from the node's GRES list and wants a character device:
    # stand-in GPUs are harmless character devices (the jobs run on the CPU).
    if gpus > len(FAKE_GPU_DEVICES):
        raise ValueError(f"at most {len(FAKE_GPU_DEVICES)} stand-in GPUs")
    gres_conf = "AutoDetect=off\n"
    for dev in FAKE_GPU_DEVICES[:gpus]:
        gres_conf += f"NodeName={hostname} Name=gpu File={dev}\n"
    (root / "gres.conf").write_text(gres_conf)
    return {"socket": socket_path, "key": key, "munge_dir": munge_dir}


def _stop(proc: subprocess.Popen, timeout: float = 15) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=timeout)


@contextlib.contextmanager
def slurm_cluster(root: Path | str, gpus: int = 2, partition: str = "debug") -> Iterator[SlurmCluster]:
    """Start a single-node SLURM cluster with its files under `root`; stop it on exit."""
    ensure_slurm_installed()
    root = Path(root).resolve()
    root.mkdir(parents=True, exist_ok=True)
    if any(root.iterdir()):
        raise ValueError(f"{root} is not empty: a cluster needs a fresh directory")
    hostname = socket.gethostname().split(".")[0]
    cpus = os.cpu_count() or 1
    mem_mb = _mem_total_mb()
    paths = _write_configs(root, hostname, cpus, mem_mb, gpus, partition)
    # The jobstep plugin (snakemake-executor-plugin-slurm-jobstep) drops every SLURM_* variable but the
    # job's identity before its nested `srun`, SLURM_CONF included, so inside a job `srun` would look
    # for /etc/slurm/slurm.conf. Clusters keep their config there (or run configless); this private
    # cluster does not touch /etc, so an `srun` first on PATH sets SLURM_CONF and runs the real srun.
    bin_dir = root / "bin"
    bin_dir.mkdir()
    srun = bin_dir / "srun"
    srun.write_text(f'#!/bin/sh\nSLURM_CONF={root / "slurm.conf"} exec {_which("srun")} "$@"\n')
    srun.chmod(0o755)
    env = dict(
        os.environ,
        SLURM_CONF=str(root / "slurm.conf"),
        PATH=os.pathsep.join([str(bin_dir), _path_with_sbin()]),
    )
    for var in [v for v in env if v.startswith(("SLURM_", "SBATCH_", "SRUN_", "SALLOC_"))]:
        if var != "SLURM_CONF":
            del env[var]
    cluster = SlurmCluster(root, hostname, cpus, mem_mb, gpus, partition, env)
    logs = []
    try:
        munge_log = root / "munged.log"
        munge_out = open(root / "munged.stdout", "w")  # noqa: SIM115 (closed in finally)
        logs.append(munge_out)
        cluster.procs["munged"] = subprocess.Popen(
            [
                _which("munged"),
                "--foreground",
                "--force",
                f"--socket={paths['socket']}",
                f"--key-file={paths['key']}",
                f"--pid-file={paths['munge_dir'] / 'munged.pid'}",
                f"--log-file={munge_log}",
                f"--seed-file={paths['munge_dir'] / 'munged.seed'}",
            ],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=munge_out,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 20
        while not paths["socket"].exists():
            cluster._check_alive()
            if time.monotonic() > deadline:
                raise RuntimeError(f"munged did not create its socket; see {munge_log}")
            time.sleep(0.1)
        for name, args in (
            ("slurmctld", ["-D", "-i", "-f", str(cluster.conf)]),
            ("slurmd", ["-D", "-N", hostname, "-f", str(cluster.conf)]),
        ):
            out = open(root / f"{name}.stdout", "w")  # noqa: SIM115 (closed in finally)
            logs.append(out)
            cluster.procs[name] = subprocess.Popen(
                [_which(name), *args], env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT
            )
            if name == "slurmctld":
                _wait_ctld(cluster)
        cluster.wait_idle()
        yield cluster
    finally:
        if "slurmctld" in cluster.procs and cluster.procs["slurmctld"].poll() is None:
            with contextlib.suppress(Exception):
                cluster.run("scancel", "--full", f"--partition={partition}", check=False)
                cluster.wait_no_jobs_active(timeout=30)
        for name in ("slurmd", "slurmctld", "munged"):
            if name in cluster.procs:
                _stop(cluster.procs[name])
        for f in logs:
            f.close()


def _wait_ctld(cluster: SlurmCluster, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        cluster._check_alive()
        if cluster.run("scontrol", "ping", check=False).stdout.find("UP") >= 0:
            return
        time.sleep(0.3)
    raise RuntimeError(f"slurmctld did not answer 'scontrol ping' within {timeout} s; see {cluster.ctld_log}")
