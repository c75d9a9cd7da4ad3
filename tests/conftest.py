"""Shared fixtures: tiny random models of every supported family, saved like real checkpoints.

``make_tiny_model(tmp_path, family)`` builds a random model with ``thanos.demo.tiny.build_tiny_model`` (no
download) in the tests' shape: sharded safetensors, a word-level tokenizer over ``WORDS``, random biases
and norms. Other test files use it directly or through the ``tiny_model`` fixture (parametrised over
``FAMILIES``).
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

# The suite runs 4 workers and the processes they start (Snakemake jobs, `thanos prune-model`) on 2 cores:
# OpenMP threads that spin while they wait burn the cores the other processes need (docs/benchmarks.md:
# kernels 10-50x slower on a shared machine; here a prune-model run with perplexity took twice the CPU
# seconds). Set before torch is imported (the OpenMP runtime reads it when it loads); the processes the
# tests start inherit it. Only how idle threads wait: the same results.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# The README's test command installs without bytecode (`pip install --no-compile`: pip would compile the
# 17,600 modules installed, ~45 CPU-s, where the suite imports a few thousand of them). The suite's
# processes write the bytecode of what they import, so each module is compiled once, by the first process
# that imports it, even where PYTHONDONTWRITEBYTECODE is set (as on CI; without this, every Snakemake
# start and `python -m thanos` compiled torch, transformers and the package from source again). Set
# before torch is imported here; the workers and the processes the tests start inherit it.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False
# The default working directories of the runs that name none (`$THANOS_WORKDIR/<model>-<key>`, else under
# ~/.cache/thanos): under one directory of this session, made by the controller and inherited by its workers
# and every process they start, deleted at its end. A run never resumes what an earlier session of the suite
# left there (the same tiny model and options give the same key), nor fills the user's cache.
if "PYTEST_XDIST_WORKER" not in os.environ:
    os.environ["THANOS_WORKDIR"] = tempfile.mkdtemp(prefix="thanos-test-workdirs-")
# A process the suite starts that crashes (SIGSEGV, SIGABRT, ...) prints every thread's stack on its stderr,
# which the failing test's message shows: a rare crash names its frame the first time it is seen (one
# prune-model run ended with status -11 after its SIGTERM's resume line, once in ten runs of the suite)
os.environ.setdefault("PYTHONFAULTHANDLER", "1")

import pytest  # noqa: E402
import yaml  # noqa: E402
from helpers.cpu import Recorder  # noqa: E402
from helpers.warm_snakemake import WarmSnakemake  # noqa: E402

from thanos.demo.tiny import FAMILIES, build_tiny_model  # noqa: E402

if TYPE_CHECKING:
    import torch

REPO = Path(__file__).resolve().parents[1]

WORDS = (
    "the a one two three cat dog bird fish tree house river stone cloud light dark small big old new "
    "red green blue runs sees eats sleeps jumps sings walks flies swims reads writes under over near far "
    "and but or with without before after today tomorrow slowly quickly happily sadly again always never"
).split()
TINY_DEFAULTS = {"hidden_size": 32, "max_position_embeddings": 64, "max_shard_size": "40KB", "jitter": 0.1}
# more embedding rows (128) than the tokenizer has tokens, as padded vocabularies have
TINY_DEFAULTS |= {"words": (*WORDS, "."), "vocab_size": 128}


def corpus_sentences(count: int, seed: int = 0, words: int = 12) -> list[str]:
    """``count`` random sentences over the tiny tokenizer's vocabulary (deterministic for a seed)."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(words)) + " ." for _ in range(count)]


def make_tiny_model(tmp_path: Path, family: str, **options: Any) -> Path:
    """A tiny random model of ``family`` (``build_tiny_model`` with ``options``) in a directory under
    ``tmp_path`` named after its shape. Defaults: 2 blocks, hidden size 32, 64 positions, float32, shards
    of 40KB, a word-level tokenizer over ``WORDS``, random biases and norms (so that every parameter matters
    in equivalence tests)."""
    options = TINY_DEFAULTS | options
    shape = f"{options.get('num_blocks', 2)}b-{options['hidden_size']}h-{options.get('dtype', 'float32')}"
    return build_tiny_model(Path(tmp_path) / f"{family}-{shape}", family, **options)


def write_corpus(path: Path, docs: int = 24, words: int = 40, kind: str = "jsonl", seed: int = 0) -> Path:
    """A local calibration corpus: ``docs`` documents of ``words`` words as jsonl or plain text."""
    texts = [" ".join(corpus_sentences(words // 12 + 1, seed=seed + i)) for i in range(docs)]
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "jsonl":
        path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    else:
        path.write_text("\n\n".join(texts) + "\n")
    return path


@pytest.fixture(params=FAMILIES)
def tiny_model(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny 2-block model of each family."""
    return make_tiny_model(tmp_path_factory.mktemp("models"), request.param)


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    """A small jsonl calibration corpus."""
    return write_corpus(tmp_path / "corpus" / "calib.jsonl")


@pytest.fixture(scope="session")
def wheel(tmp_path_factory) -> Path:
    """The gensim 4.4.0 wheel of the demo data: $THANOS_GENSIM_WHEEL, else fetched once with pip (PyPI)."""
    from thanos.demo import wikidump

    local = os.environ.get("THANOS_GENSIM_WHEEL")
    if local:
        return Path(local)
    return wikidump.fetch_wheel(tmp_path_factory.mktemp("wheel-cache"))


# The files of more than ~15 s, longest first (their tests' seconds in a run of the suite: `python
# bench/suite_cpu.py`; a file missing here starts after every file listed, as test_params.py and
# test_distill.py did, in the run's last 90 s, which they ended alone). pytest-xdist's loadfile scheduling
# hands files to the workers in collection order (`--no-loadscope-reorder` in pyproject.toml: by default it
# would start the files with the most tests first, leaving the SLURM file, three tests, latency-bound, to run
# alone at the end): starting these first lets the short files fill in at the end.
# A worker is handed its next file while it still runs the last two tests of its current one: when the
# SLURM file had two tests, its worker held the fifth file until the SLURM file ended (~5 min, mostly
# waiting); the fifth stays a short one (test_recipes.py, seconds), so that it delays nothing wherever it
# goes, and the long ones go to the workers that free up first.
LONGEST_FIRST = (
    "test_slurm.py",
    "test_workflow.py",
    "test_workflow_structures.py",
    "test_prune_model.py",
    "test_recipes.py",
    "test_matrix.py",
    "test_faults.py",
    "test_params.py",
    "test_recovery.py",
    "test_real_model.py",
    "test_distill.py",
    "test_smoke.py",
    "test_memory.py",
    "test_readme_commands.py",
    "test_demo.py",
    "test_engine.py",
    "test_disk.py",
    "test_packaging.py",
    "test_report.py",
    "test_owl.py",
    "test_depth.py",
    "test_exclude.py",
    "test_zeroshot.py",
    "test_compact.py",
    "test_cli_errors.py",
    "test_worker.py",
    "test_heads.py",
    "test_block_map.py",
    "test_vocabulary.py",
    "test_granularity.py",
    "test_user_data.py",
    "test_output.py",
    "test_evaluate.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: a file keeps its order


_CPU: list[Recorder] = []


def pytest_configure(config: pytest.Config) -> None:
    """With ``THANOS_TEST_CPU=FILE`` (``bench/suite_cpu.py``), record each test's CPU seconds into FILE."""
    if path := os.environ.get("THANOS_TEST_CPU"):
        _CPU.append(Recorder(Path(path), controller=not hasattr(config, "workerinput")))


def pytest_unconfigure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # the controller: the session's default working directories
        shutil.rmtree(os.environ["THANOS_WORKDIR"], ignore_errors=True)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    if not _CPU:
        return (yield)
    measure = _CPU[0].measure(item.nodeid)
    next(measure)
    try:
        return (yield)
    finally:
        next(measure, None)


def pytest_sessionfinish(session: pytest.Session) -> None:
    if _CPU:
        _CPU[0].finish(session.testscollected)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Once the test files are imported (torch, transformers, the package: millions of objects that live as
    long as the process), put what is alive out of the cyclic garbage collector's reach: every full
    collection of a test's garbage traversed them all again (half the collector's CPU seconds in a pytest
    process of the in-process tests). What the tests create later is collected as before."""
    gc.collect()
    gc.freeze()


def workflow_config(source: str | Path, models: dict, recipes: dict, **over: Any) -> dict:
    """A small workflow config: calibration 8 x 32 tokens of ``source``, sequential chain, one job per
    recipe on the CPU, no evaluation and no report; ``over`` replaces top-level keys."""
    config = {
        "models": models,
        "calibration": {"source": str(source), "nsamples": 8, "seqlen": 32, "seed": 0},
        "chain": "sequential",
        "granularity": "recipe",
        "device": "cpu",
        "recipes": recipes,
        "perplexity": {"enabled": False},
        "zeroshot": {"enabled": False},
        "evaluate_dense": False,
        "report": False,
    }
    return config | over


def calibrated(results: Path) -> Path:
    """A workflow run's one calibration directory of a model (``results/{model}``): ``calib/{key}``, which
    holds its tokens, the chains' stores and the OWL plans (the recipes' pruned layers: ``pruned/{key}``)."""
    (tokens,) = (results / "calib").glob("*/tokens.zarr")
    return tokens.parent


_SHARED_WORKER: list[Any] = []


def shared_worker() -> dict[str, str]:
    """The environment that sends the ``python -m thanos`` jobs of a test's Snakemake run to one warm worker
    of this test process (``thanos.jobs.worker``: the Snakefile's ``onstart`` uses an enclosing run's worker
    when ``THANOS_WORKER`` is set), started on first use and ended with the process: torch and transformers
    are imported once per pytest worker instead of once per Snakemake run. The job's own environment
    (``OMP_NUM_THREADS``: the run's ``threads``) still sets its threads, and every job is still a fork of
    its own. Runs a test kills (``popen``) start their own worker, which ends with them."""
    from thanos.jobs.worker import LocalWorker

    if not _SHARED_WORKER:
        _SHARED_WORKER.append(LocalWorker(threads=1))
    return dict(_SHARED_WORKER[0].env)


# Snakemake's greedy scheduler in the tests' runs: its default (an ILP solved in a process of its own each
# time more jobs are ready than fit) spends CPU seconds that tiny jobs do not repay (the 20-model matrix run:
# 59 -> 51 CPU-s). Which ready job runs first changes no output: the runs' bytes are compared either way.
SCHEDULER = ("--scheduler", "greedy")


def snakemake_command(workdir: Path, *args: str | Path) -> list[str]:
    """The real ``snakemake`` on the repository's Snakefile in ``workdir`` with ``args``, as tests run it."""
    command = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(workdir)]
    return [*command, *SCHEDULER, *map(str, args)]


_WARM: list[WarmSnakemake] = []


def run_snakemake(cmd: list[str], env: dict[str, str] | None = None, cwd: Path | None = None):
    """``subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd)`` for a ``python -m snakemake``
    command that no test signals, run in a fork of this pytest process's warm Snakemake
    (``tests/helpers/warm_snakemake.py``): Snakemake is imported once per pytest worker, not per run."""
    if not _WARM:
        _WARM.append(WarmSnakemake())
    return _WARM[0].run(cmd, dict(os.environ) if env is None else env, cwd)


def snakemake(
    workdir: Path,
    config: dict,
    *extra: str,
    check: bool = True,
    popen: bool = False,
    env: dict[str, str] | None = None,
):
    """The real ``snakemake --cores 2`` on ``config`` (written to ``workdir/config.yaml``) in ``workdir``,
    with ``env`` added to the environment: the finished process (a test failure with its output tails if
    ``check`` and it failed), or with ``popen`` the running one (output on its stdout, in a new session so
    that a test can kill it)."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    config_file = workdir / "config.yaml"
    cmd = snakemake_command(workdir, "--configfile", config_file, "--cores", "2", "--nocolor", *extra)
    shared = {} if popen else shared_worker()  # a run the test kills starts its own worker, as users' runs do
    env = {**os.environ, **shared, **(env or {})}
    if popen:
        return subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True, env=env
        )
    proc = run_snakemake(cmd, env)
    if check and proc.returncode != 0:
        pytest.fail(f"snakemake failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
    return proc


def kill_once(
    proc: subprocess.Popen, path: Path | Callable[[], bool], seconds: float = 300, poll: float = 0.05
) -> None:
    """SIGKILL the process group of a run started with ``popen`` (a new session: Snakemake, its worker and
    its jobs) as soon as ``path`` exists (or ``path()`` is true); a test failure when the run ended first."""
    import signal
    import time

    ready = path if callable(path) else path.exists
    deadline = time.time() + seconds
    while time.time() < deadline and proc.poll() is None and not ready():
        time.sleep(poll)
    assert proc.poll() is None, f"the run finished before it could be killed (waiting for {path})"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


@contextlib.contextmanager
def stopped_holding(
    proc: subprocess.Popen, lock: Path | Callable[[], Path | None], seconds: float = 300
) -> Iterator[None]:
    """A run (``proc``) stopped (SIGSTOP) once the lock file ``lock`` (or the one ``lock()`` finds) names it
    as its holder, so that what the test does meanwhile meets the lock held; continued (SIGCONT) after,
    whatever happened. A test failure when the run ended first."""
    import signal
    import time

    def held() -> bool:
        path = lock() if callable(lock) else lock
        return path is not None and path.is_file() and f"pid {proc.pid} (" in path.read_text()

    deadline = time.time() + seconds
    while time.time() < deadline and proc.poll() is None and not held():
        time.sleep(0.02)
    assert proc.poll() is None and held(), f"the run ended, or never held {lock}"
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(proc.pid, signal.SIGCONT)


def expert_matrix(state: dict[str, torch.Tensor], name: str, shape: tuple[int, int]) -> torch.Tensor:
    """One expert's matrix ``NAME.{e}.weight`` of a checkpoint that holds every expert in one tensor
    (gpt-oss, GraniteMoE): slice e of ``NAME`` or ``NAME.weight``, stored (out, in) or (in, out), as a view
    of shape ``shape`` (out, in): told apart by the shapes, refused when they cannot tell."""
    base, expert = name.removesuffix(".weight").rsplit(".", 1)
    stored = state[base if base in state else f"{base}.weight"][int(expert)]
    assert shape[0] != shape[1], name  # a square expert would be ambiguous here
    assert shape in (tuple(stored.shape), tuple(stored.T.shape)), (name, shape, stored.shape)
    return stored if tuple(stored.shape) == shape else stored.T


def pruned_in_memory(model: Path, pruned: Path, out: Path) -> torch.nn.Module:
    """The input model with every pruned layer's weight set from the recipe's pruned layer files. Layers
    that are not module parameters (a mixture-of-experts expert's matrix, which transformers fuses on
    load, or a slice of the checkpoint's fused experts tensor) are set in the checkpoint's own tensors,
    which transformers then loads."""
    import shutil
    import tempfile

    import torch
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file
    from transformers import AutoModelForCausalLM

    report = json.loads((out / "pruning_report.json").read_text())
    pruned_weights = {}
    for entry in report["layers"]:
        file = pruned / f"block{entry['block']}" / f"{entry['layer']}.safetensors"
        with safe_open(str(file), framework="pt") as handle:
            pruned_weights[entry["tensor"]] = handle.get_tensor("weight")
    dense = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32)
    parameters = dict(dense.named_parameters())
    if all(name in parameters for name in pruned_weights):
        with torch.no_grad():
            for name, weight in pruned_weights.items():
                parameters[name].copy_(weight)
        return dense.eval()
    with tempfile.TemporaryDirectory() as tmp:
        state = {}
        for shard in sorted(model.glob("*.safetensors")):
            state |= load_file(shard)
        for name, weight in pruned_weights.items():
            if name in state:
                state[name] = weight
            else:
                expert_matrix(state, name, tuple(weight.shape)).copy_(weight)
        save_file(state, str(Path(tmp) / "model.safetensors"), metadata={"format": "pt"})
        shutil.copy(model / "config.json", tmp)
        return AutoModelForCausalLM.from_pretrained(tmp, dtype=torch.float32).eval()


# What makes a test end-to-end (``slow``): it starts a pipeline in processes of its own, the real Snakemake or
# a whole ``thanos prune-model`` / ``thanos workflow`` run. ``-m "not slow"`` is the unit suite, the
# specification that runs in minutes; an unmarked test that starts one (or whose fixture does) fails,
# naming the mark to add.
PIPELINE_COMMANDS = ("prune-model", "workflow")


def _pipeline(args: Any) -> str | None:
    """The command line of ``args`` when it starts a pipeline, else None."""
    argv = [str(arg) for arg in (args if isinstance(args, list | tuple) else str(args).split())]
    names = [Path(arg).name for arg in argv]
    module = names[names.index("-m") + 1 : names.index("-m") + 3] if "-m" in names else []
    thanos = module[1:] if module[:1] == ["thanos"] else names[1:2] if names[:1] == ["thanos"] else []
    if "snakemake" in names or module[:1] == ["snakemake"] or set(thanos) & set(PIPELINE_COMMANDS):
        return " ".join(argv)[:300]
    return None


@contextlib.contextmanager
def _watching_pipelines(item: pytest.Item) -> Iterator[None]:
    """Fail ``item``'s phase if it started a pipeline without being marked ``slow``."""
    if item.get_closest_marker("slow") is not None:
        yield
        return
    started: list[str] = []
    original = subprocess.Popen.__init__

    def watched(self: subprocess.Popen, args: Any, *rest: Any, **options: Any) -> None:
        if (command := _pipeline(args)) is not None:
            started.append(command)
        original(self, args, *rest, **options)

    subprocess.Popen.__init__ = watched  # type: ignore[method-assign]
    try:
        yield
    finally:
        subprocess.Popen.__init__ = original  # type: ignore[method-assign]
    if started:
        pytest.fail(f"starts a pipeline ({started[0]}) and is not marked: add @pytest.mark.slow", False)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Any:
    with _watching_pipelines(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    with _watching_pipelines(item):
        return (yield)


def thanos_here(
    *args: str | Path, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """``python -m thanos ARGS`` in ``cwd`` (``env`` added) run in this process as a new process runs it,
    without the process start (~4 s of imports): ``thanos.cli.main``, its stdout and stderr captured, and
    the root logger without handlers as in a new process (main's ``logging.basicConfig`` sends the log
    records to that stderr, as the command's own does, so that a test sees what a terminal would). For the
    runs whose test is not about the process (a rerun, a resume); usable by module-scoped fixtures, which
    the ``cli`` fixture is not. A test whose fixture or body runs a pipeline this way is still ``slow``."""
    import io
    import logging

    from thanos.cli import main

    root = logging.getLogger()
    handlers, level, here = root.handlers[:], root.level, os.getcwd()
    saved = {name: os.environ.get(name) for name in env or {}}
    out, err = io.StringIO(), io.StringIO()
    try:
        root.handlers = []
        os.chdir(cwd)
        os.environ.update(env or {})
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main([str(arg) for arg in args])
            except SystemExit as exit:  # the status a process ends with (a str: printed, status 1)
                code = exit.code if isinstance(exit.code, int) else 0 if exit.code is None else 1
                if isinstance(exit.code, str):
                    print(exit.code, file=sys.stderr)
    finally:
        root.handlers = handlers
        root.setLevel(level)
        os.chdir(here)
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    return subprocess.CompletedProcess(list(args), code, out.getvalue(), err.getvalue())


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Any:
    """``cli(*args, cwd=DIR, env={...})``: ``python -m thanos ARGS`` run in this process (``thanos.cli.main``,
    the command's own code, without a process start), as a finished process: returncode, stdout, stderr."""
    from thanos.cli import main

    def run(*args: str | Path, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        with monkeypatch.context() as patched:
            patched.chdir(cwd)
            for name, value in (env or {}).items():
                patched.setenv(name, value)
            capsys.readouterr()
            code = main([str(arg) for arg in args])
            out = capsys.readouterr()
        return subprocess.CompletedProcess(list(args), code, out.out, out.err)

    return run
