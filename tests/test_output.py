"""A published model is a plain checkpoint: ``thanos prune-model`` outputs of a 2:4 and an unstructured
recipe load with plain transformers in a process where ``compressed_tensors`` cannot be imported, with the
logits of the model carrying the pruned weights in memory; ``config.json`` is the input's; ``sparsity.json``
counts the zeros of the written weights; llama.cpp's converter turns the 2:4 output into a GGUF that keeps
every zero (real files, real Snakemake, real transformers, the real converter)."""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import pruned_in_memory, thanos_here
from safetensors import safe_open

from thanos.demo.tiny import build_tiny_model

RECIPES = {"2of4": ("wanda", "2:4"), "u50": ("sparsegpt", "0.5")}
WORDS = "the a model prunes weights layer block sparse dense matrix input output token row column".split()
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
# run first in a process that must load the models without compressed-tensors: None in sys.modules makes
# `import compressed_tensors` fail and importlib.util.find_spec (transformers' check) report it missing.
# argv: the token ids, then (model directory, result file) pairs: the logits, or the error that stopped it
NO_COMPRESSED_TENSORS = """
import sys
import traceback
sys.modules["compressed_tensors"] = None
try:
    import compressed_tensors  # noqa: F401
except ImportError:
    pass
else:
    raise SystemExit("compressed_tensors could be imported")
import torch
from transformers import AutoModelForCausalLM

ids = torch.load(sys.argv[1])
for model_dir, result in zip(sys.argv[2::2], sys.argv[3::2]):
    try:
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        with torch.no_grad():
            torch.save(model(ids).logits, result)
    except Exception:
        open(result + ".error", "w").write(traceback.format_exc())
"""
IDS = torch.randint(4, 261, (2, 24), generator=torch.Generator().manual_seed(0))


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> tuple[Path, dict[str, tuple[Path, Path]]]:
    """A tiny Llama with Llama 2's kind of tokenizer, and per recipe: (published output, pruned layers)."""
    root = tmp_path_factory.mktemp("output")
    model = build_tiny_model(root / "tiny-llama", hidden_size=64, num_blocks=2, tokenizer="llama")
    rng = random.Random(0)
    calib = root / "calib.jsonl"
    lines = (json.dumps({"text": " ".join(rng.choice(WORDS) for _ in range(60))}) for _ in range(40))
    calib.write_text("\n".join(lines) + "\n")
    found = {}
    for name, (method, sparsity) in RECIPES.items():
        out = root / name
        # --keep all: the tests compare the output with the pruned layers; the command runs in this process
        # (thanos_here): what is tested is the published files, loaded in a process of their own below
        run = thanos_here(
            "prune-model", "--model", model, "--method", method, "--sparsity", sparsity,
            "--calibration", calib, "--nsamples", "8", "--seqlen", "32", "--device", "cpu", "--cores", "2",
            "--workdir", root / "work", "--out", out, "--keep", "all", cwd=root,
        )  # fmt: skip
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
        recipe = json.loads((out / "pruning_report.json").read_text())["recipe"]["name"]
        (pruned,) = (root / "work" / "results").glob(f"*/{recipe}/pruned")
        found[name] = (out, pruned)
    return model, found


def weights(model_dir: Path) -> dict[str, torch.Tensor]:
    tensors = {}
    for file in sorted(model_dir.glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as handle:
            tensors |= {name: handle.get_tensor(name) for name in handle.keys()}  # noqa: SIM118
    return tensors


@pytest.fixture(scope="module")
def loaded(outputs, tmp_path_factory) -> dict[str, tuple[torch.Tensor | None, str]]:
    """Each output, and a copy of it with the compressed-tensors block that earlier versions wrote in its
    config, loaded in one process where compressed_tensors is missing: {directory name: (logits or None,
    the error that stopped it or "")}."""
    root = tmp_path_factory.mktemp("loaded")
    torch.save(IDS, root / "ids.pt")
    directories = []
    for out, _ in outputs[1].values():
        old = root / f"{out.name}-old-format"
        shutil.copytree(out, old)
        config = json.loads((old / "config.json").read_text())
        config["quantization_config"] = {
            "quant_method": "compressed-tensors",
            "sparsity_config": {"format": "dense", "sparsity_structure": "2:4", "targets": ["Linear"]},
        }
        (old / "config.json").write_text(json.dumps(config))
        directories += [out, old]
    pairs = [str(arg) for d in directories for arg in (d, root / f"{d.name}-logits.pt")]
    run = subprocess.run(
        [sys.executable, "-c", NO_COMPRESSED_TENSORS, str(root / "ids.pt"), *pairs],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    results = {}
    for d in directories:
        logits, error = root / f"{d.name}-logits.pt", root / f"{d.name}-logits.pt.error"
        results[d.name] = (
            torch.load(logits) if logits.exists() else None,
            error.read_text() if error.exists() else "",
        )
    return results


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(RECIPES))
def test_output_loads_without_compressed_tensors(outputs, loaded, name) -> None:
    model, found = outputs
    out, pruned = found[name]
    logits, error = loaded[out.name]
    assert logits is not None, error[-3000:]
    with torch.no_grad():
        expected = pruned_in_memory(model, pruned, out)(IDS).logits
    assert torch.equal(logits, expected)
    # the check can fail: the same files with the compressed-tensors block earlier versions wrote do not load
    logits, error = loaded[f"{out.name}-old-format"]
    assert logits is None and "compressed" in error.lower(), error[-2000:]


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(RECIPES))
def test_config_is_the_inputs_and_sidecar_counts_the_zeros(outputs, name) -> None:
    model, found = outputs
    out, _ = found[name]
    assert (out / "config.json").read_bytes() == (model / "config.json").read_bytes()
    report = json.loads((out / "pruning_report.json").read_text())
    assert "sparsity.json" in report["files"]  # digested, so publish verified it
    facts = json.loads((out / "sparsity.json").read_text())
    tensors = weights(out)
    assert set(facts["layers"]) == {entry["tensor"] for entry in report["layers"]}
    for tensor, counts in facts["layers"].items():
        w = tensors[tensor]
        assert counts["zeros"] == int((w == 0).sum()), tensor
        assert counts["shape"] == list(w.shape) and counts["sparsity"] == counts["zeros"] / w.numel()
    every = facts["all_parameters"]
    assert every["parameters"] == sum(w.numel() for w in tensors.values())
    assert every["zeros"] == sum(int((w == 0).sum()) for w in tensors.values())
    pruned = facts["pruned_layers"]
    assert pruned["zeros"] == sum(c["zeros"] for c in facts["layers"].values())
    assert pruned["layers"] == 2 * 7 and facts["dense_linear"] == ["lm_head"]
    method, sparsity = RECIPES[name]
    assert (facts["method"], facts["sparsity"]) == (method, report["recipe"]["sparsity"])
    assert facts["sparsity"] == ("2:4" if sparsity == "2:4" else "unstructured:0.5")
    assert facts["structure"] == ("2:4" if sparsity == "2:4" else "unstructured")
    assert facts["tool"] == {"name": "thanos-prune", "version": report["versions"]["thanos"]}
    assert pruned["sparsity"] == pytest.approx(0.5, abs=0.01)


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

    def fetch(work: Path) -> Path:
        site = work / "site"
        pip = ["install", "--no-deps", "--no-compile", "--target", str(site), *VLLM]
        pip_or_skip(pip, f"install {VLLM[0]}")
        (site / "complete").write_text("\n".join(VLLM) + "\n")
        return site

    return cached_tool(f"vllm-config-{VLLM[0].split('==')[1]}", "complete", fetch)


def vllm_reads(model_dir: Path) -> dict[str, Any]:
    """What vLLM's config parser makes of ``model_dir``: its architectures and vocabulary size, and its
    tokenizer's length and eos id (a subprocess; vLLM's failure fails it, with its output)."""
    script = (
        "import json; from vllm.config import ModelConfig; from vllm.tokenizers import get_tokenizer\n"
        f"config = ModelConfig(model={str(model_dir)!r}); tokenizer = get_tokenizer({str(model_dir)!r})\n"
        "print(json.dumps({'architectures': config.hf_config.architectures, 'vocab_size': "
        "config.get_vocab_size(), 'tokenizer': len(tokenizer), 'eos': tokenizer.eos_token_id}))"
    )
    env = os.environ | {"PYTHONPATH": str(vllm_config_parser()), "VLLM_TARGET_DEVICE": "cpu"}
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def run_llama_cpp_converter(model_dir: Path, gguf_file: Path, *options: str) -> Any:
    """llama.cpp's converter run on ``model_dir`` (its ``CompletedProcess``, text output captured)."""
    converter = llama_cpp_converter()
    return subprocess.run(
        [
            sys.executable,
            str(converter / "convert_hf_to_gguf.py"),
            str(model_dir),
            "--outfile",
            str(gguf_file),
        ]
        + list(options),
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(converter / "gguf-py")},
    )


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


@pytest.mark.slow
def test_llama_cpp_converts_a_2of4_output_and_keeps_its_zeros(outputs, tmp_path) -> None:
    _, found = outputs
    out, _ = found["2of4"]
    with converted_to_gguf(out, tmp_path / "model.gguf", "--outtype", "f32") as (gguf, reader):
        written = {tensor.name: torch.from_numpy(tensor.data.copy()) for tensor in reader.tensors}
        names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 2)
    facts = json.loads((out / "sparsity.json").read_text())
    for tensor, counts in facts["layers"].items():
        converted = written[names.get_name(tensor, try_suffixes=(".weight",))]
        assert converted.numel() == counts["shape"][0] * counts["shape"][1], tensor
        assert int((converted == 0).sum()) == counts["zeros"], tensor  # rows may be permuted, zeros kept
