"""The outside tools the suite runs, installed once per machine into the cache: llama.cpp's converter (from
llama-cpp-python's source package) and vLLM's config parser, which a published model must satisfy, and
Snakemake's SLURM executor plugin."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

LLAMA_CPP = "0.3.36"  # llama-cpp-python's source package: llama.cpp's convert_hf_to_gguf.py and gguf-py


# vLLM's config parser (``vllm.config.ModelConfig``, its tokenizer loader) and what importing it needs beyond
# this project's own packages, installed without their dependencies (vLLM's own would replace torch with its
# CUDA build): enough to parse a model's config and tokenizer on a CPU, not to run a model
VLLM = (
    "vllm==0.33.0", "cbor2==6.3.0", "pyzmq==27.3.0", "openai-harmony==0.0.8", "openai==3.57.0",
    "sniffio==1.3.1", "msgspec==0.22.0", "pybase64==1.5.1", "cachetools==8.0.2", "uvloop==0.23.0",
    "py-cpuinfo==9.0.0", "prometheus-client==0.26.0", "xgrammar==0.2.9", "apache-tvm-ffi==0.1.15.post2",
    "fastapi==0.165.0", "starlette==1.10.0", "opentelemetry-api==1.45.2", "llguidance==1.9.1",
    "partial-json-parser==0.2.1.1.post7", "einops==0.8.2",
)  # fmt: skip


# Snakemake's SLURM executor plugin (the `slurm` extra: users who run on a cluster install it with the
# project) and the jobstep plugin a SLURM job runs Snakemake with, installed without their dependencies (the
# project's own: pandas, throttler, the Snakemake interfaces) and put on PYTHONPATH only where a test runs
# Snakemake with it. Installed into the suite's environment, every Snakemake start of the suite imported it,
# and with it pandas: `import snakemake.cli` took 1.01 CPU-s with it, 0.56 without, over ~130 starts.
SLURM_PLUGIN = ("snakemake-executor-plugin-slurm==2.8.0", "snakemake-executor-plugin-slurm-jobstep==0.6.1")


def cached_tool(name: str, marker: str, fetch: Callable[[Path], Path]) -> Path:
    """``name`` in the per-machine cache, made once: ``fetch(work)`` fills a scratch directory and returns
    the tree to keep (holding ``marker``, which says it is whole). When test processes race, the first
    copy is kept: moving another onto it fails, and a copy in use is never deleted."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "thanos-prune"
    target = cache / name
    if (target / marker).is_file():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as work:
        tree = fetch(Path(work))
        with contextlib.suppress(OSError):  # another test process made it first: theirs is kept
            os.replace(tree, target)
    return target


def pip_or_skip(args: list[str], what: str) -> None:
    """``pip`` with ``args``; when it fails (no package index), the test fails on CI and is skipped here."""
    run = subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True)
    if run.returncode != 0:
        message = f"cannot {what}: {run.stderr.strip()[-300:]}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


def installed_packages(name: str, packages: tuple[str, ...]) -> Path:
    """A directory (``name``-the first package's version, in the cache) holding ``packages`` (``pip``
    requirements, the first pinned with ``==``), installed once per machine without their dependencies or
    bytecode; put it on ``PYTHONPATH`` of a subprocess."""

    def fetch(work: Path) -> Path:
        site = work / "site"
        pip_or_skip(["install", "--no-deps", "--no-compile", "--target", str(site), *packages],
                    f"install {packages[0]}")  # fmt: skip
        (site / "complete").write_text("\n".join(packages) + "\n")
        return site

    return cached_tool(f"{name}-{packages[0].split('==')[1]}", "complete", fetch)


def llama_cpp_converter() -> Path:
    """llama.cpp's converter (``convert_hf_to_gguf.py``, ``conversion/``, ``gguf-py/``) from the source
    package of llama-cpp-python, downloaded once per machine into the cache."""

    def fetch(work: Path) -> Path:
        pip = ["download", "--no-deps", "--no-binary", ":all:", "-d", str(work)]
        pip_or_skip([*pip, f"llama-cpp-python=={LLAMA_CPP}"], f"download llama-cpp-python {LLAMA_CPP}")
        (archive,) = work.glob("llama_cpp_python-*.tar.gz")
        prefix = f"llama_cpp_python-{LLAMA_CPP}/vendor/llama.cpp/"
        wanted = ("convert_hf_to_gguf.py", "conversion/", "gguf-py/")
        with tarfile.open(archive) as tar:
            members = [m for m in tar.getmembers() if m.name.removeprefix(prefix).startswith(wanted)]
            tar.extractall(work, members=members, filter="data")
        return work / prefix

    return cached_tool(f"llama.cpp-{LLAMA_CPP}", "convert_hf_to_gguf.py", fetch)


def vllm_config_parser() -> Path:
    """A directory holding vLLM and what its config parser imports (``VLLM``), installed once per machine
    into the cache; put it on ``PYTHONPATH`` of a subprocess."""

    return installed_packages("vllm-config", VLLM)


def slurm_plugin() -> Path:
    """A directory holding Snakemake's SLURM executor plugins (``SLURM_PLUGIN``), installed once per machine
    into the cache; ``with_slurm_plugin`` puts it on a process's ``PYTHONPATH``."""

    return installed_packages("snakemake-slurm", SLURM_PLUGIN)


def with_slurm_plugin(env: dict[str, str]) -> dict[str, str]:
    """``env`` with the SLURM executor plugins (``slurm_plugin``) first on its ``PYTHONPATH``: a Snakemake
    process started with it can run ``--executor slurm``, and so can its SLURM jobs (sbatch
    ``--export=ALL``)."""
    paths = [str(slurm_plugin()), *filter(None, [env.get("PYTHONPATH")])]
    return env | {"PYTHONPATH": os.pathsep.join(paths)}


def vllm_reads(*model_dirs: Path) -> list[dict[str, Any]]:
    """What vLLM's config parser makes of each of ``model_dirs``: its architectures and vocabulary size, and
    its tokenizer's length and eos id (one subprocess for all: vLLM's import is most of its seconds; vLLM's
    failure fails it, with its output)."""
    script = (
        "import json, sys; from vllm.config import ModelConfig; from vllm.tokenizers import get_tokenizer\n"
        "for path in sys.argv[1:]:\n"
        "    config = ModelConfig(model=path); tokenizer = get_tokenizer(path)\n"
        "    print(json.dumps({'architectures': config.hf_config.architectures, 'vocab_size': "
        "config.get_vocab_size(), 'tokenizer': len(tokenizer), 'eos': tokenizer.eos_token_id}))"
    )
    env = os.environ | {"PYTHONPATH": str(vllm_config_parser()), "VLLM_TARGET_DEVICE": "cpu"}
    command = [sys.executable, "-c", script, *map(str, model_dirs)]
    run = subprocess.run(command, capture_output=True, text=True, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    return [json.loads(line) for line in run.stdout.strip().splitlines()[-len(model_dirs) :]]


def run_llama_cpp_converter(model_dir: Path, gguf_file: Path, *options: str) -> subprocess.CompletedProcess:
    """llama.cpp's converter run on ``model_dir`` as ``python convert_hf_to_gguf.py MODEL --outfile FILE
    OPTIONS`` runs it, but in this process (its imports, torch's and transformers', are this process's: ~3
    CPU-s a conversion less): its exit status, and its log and any error's traceback as its stderr. Its own
    ``gguf`` and ``conversion`` packages are imported for the run and taken out after it, so this process's
    other imports of them are not changed."""
    import io
    import logging
    import runpy
    import traceback

    converter = llama_cpp_converter()
    argv = [str(converter / "convert_hf_to_gguf.py"), str(model_dir), "--outfile", str(gguf_file), *options]
    ours = ("gguf", "conversion")
    kept = {name: sys.modules.pop(name) for name in list(sys.modules) if name.split(".")[0] in ours}
    saved_argv, saved_path = sys.argv, list(sys.path)
    root, stderr = logging.getLogger(), io.StringIO()
    handler, level = logging.StreamHandler(stderr), root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)  # what its logging.basicConfig(level=INFO) gives a new process
    status = 0
    try:
        sys.argv = argv
        sys.path[:0] = [str(converter), str(converter / "gguf-py")]
        runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as end:
        status = end.code if isinstance(end.code, int) else int(end.code is not None)
    except Exception:
        stderr.write(traceback.format_exc())
        status = 1
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
        root.removeHandler(handler)
        root.setLevel(level)
        for name in [name for name in sys.modules if name.split(".")[0] in ours]:
            del sys.modules[name]
        sys.modules.update(kept)
    return subprocess.CompletedProcess(argv, status, "", stderr.getvalue())


@contextlib.contextmanager
def converted_to_gguf(model_dir: Path, gguf_file: Path, *options: str) -> Iterator[tuple[Any, Any]]:
    """llama.cpp's converter run on ``model_dir`` (it must succeed); yields (its ``gguf`` package, a
    ``GGUFReader`` of the file it wrote)."""
    converter = llama_cpp_converter()
    run = run_llama_cpp_converter(model_dir, gguf_file, *options)
    assert run.returncode == 0, run.stderr[-3000:]
    sys.path.insert(0, str(converter / "gguf-py"))
    try:
        import gguf

        yield gguf, gguf.GGUFReader(gguf_file)
    finally:
        sys.path.remove(str(converter / "gguf-py"))
