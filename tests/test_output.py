"""A published model is a plain checkpoint: ``thanos prune-model`` outputs of a 2:4 and an unstructured
recipe load with plain transformers in a process where ``compressed_tensors`` cannot be imported, with the
logits of the model carrying the pruned weights in memory; ``config.json`` is the input's; ``sparsity.json``
counts the zeros of the written weights; llama.cpp's converter turns the 2:4 output into a GGUF that keeps
every zero (real files, real Snakemake, real transformers, the real converter)."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import pruned_in_memory, thanos_here
from helpers.tools import (
    converted_to_gguf,
)
from safetensors import safe_open

from thanos.demo.tiny import build_tiny_model

RECIPES = {"2of4": ("wanda", "2:4"), "u50": ("sparsegpt", "0.5")}
WORDS = "the a model prunes weights layer block sparse dense matrix input output token row column".split()
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
