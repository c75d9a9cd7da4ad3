"""Assemble stage: loadable HF dir, exact zeros, original dtype, sharding, deterministic bytes, errors."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from thanos.demo.tiny import build_tiny_model
from thanos.models import Checkpoint
from thanos.recipes.recipe import Recipe
from thanos.stages.assemble import assemble
from thanos.stages.describe.provenance import RunRecord

LAYERS = ["self_attn.q_proj", "mlp.down_proj"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("assemble")
    model = build_tiny_model(root / "model", family="llama", hidden_size=32, num_blocks=2, dtype="bfloat16")
    pruned = root / "pruned"
    checkpoint = Checkpoint(model)
    for block in range(2):
        (pruned / f"block{block}").mkdir(parents=True)
        for layer in LAYERS:
            name = f"model.layers.{block}.{layer}.weight"
            w = checkpoint.tensor(name).clone()
            w.view(-1)[::2] = 0  # exactly half removed
            save_file({"weight": w}, str(pruned / f"block{block}" / f"{layer}.safetensors"))
            stats = {"achieved_sparsity": 0.5, "objective": 1.0, "seconds": 0.1, "device": "cpu"}
            (pruned / f"block{block}" / f"{layer}.json").write_text(json.dumps(stats))
    return root, model, pruned


def _run(root, model, pruned, out, recipe=None, **kw):
    recipe = recipe or Recipe(name="r", method="thanos", sparsity="unstructured:0.5")
    return assemble(model, pruned, recipe, root / out, record=RunRecord(intermediates=(pruned,)), **kw)


def test_assembled_model_loads_with_zeros_and_dtype(tiny):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    root, model, pruned = tiny
    report = _run(root, model, pruned, "out", max_shard_size="20KB")
    out = root / "out"
    index = json.loads((out / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 1, "small max_shard_size must give several shards"
    loaded = AutoModelForCausalLM.from_pretrained(out, dtype=torch.bfloat16)
    original = AutoModelForCausalLM.from_pretrained(model, dtype=torch.bfloat16)
    params = dict(loaded.named_parameters())
    for name, p in original.named_parameters():
        layer = name.split(".", 3)[-1].removesuffix(".weight")
        if name.startswith("model.layers.") and layer in LAYERS:
            assert params[name].dtype == torch.bfloat16
            assert int((params[name] == 0).sum()) >= p.numel() // 2
            assert torch.equal(params[name].view(-1)[1::2], p.view(-1)[1::2])
        else:
            assert torch.equal(params[name], p), name
    AutoTokenizer.from_pretrained(out)
    assert (out / "generation_config.json").is_file()
    saved = json.loads((out / "pruning_report.json").read_text())
    assert saved["overall_sparsity"] == pytest.approx(0.5)
    assert len(saved["layers"]) == 4 and saved["recipe"]["method"] == "thanos"
    assert saved["versions"]["torch"] and saved["intermediates_bytes"] > 0
    assert saved["calibration"] is None
    assert report["num_pruned_layers"] == 4


def test_deterministic_bytes(tiny):
    root, model, pruned = tiny
    _run(root, model, pruned, "a", max_shard_size="20KB")
    _run(root, model, pruned, "b", max_shard_size="20KB")
    files = sorted(p.name for p in (root / "a").iterdir())
    assert files == sorted(p.name for p in (root / "b").iterdir())
    for name in files:
        assert (root / "a" / name).read_bytes() == (root / "b" / name).read_bytes(), name


def test_shape_mismatch_is_refused_and_nothing_written(tiny, tmp_path):
    root, model, _ = tiny
    bad = tmp_path / "pruned" / "block0"
    bad.mkdir(parents=True)
    save_file({"weight": torch.zeros(3, 3, dtype=torch.bfloat16)}, str(bad / "self_attn.q_proj.safetensors"))
    with pytest.raises(ValueError, match="differ from the original"):
        assemble(model, tmp_path / "pruned", Recipe("x", "magnitude", 0.5), tmp_path / "out")
    assert not (tmp_path / "out").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out")]


def test_layers_pruned_by_another_recipe_are_refused_without_a_model_info(tiny, tmp_path):
    """Without ``--model-info`` too, layers whose stats record another method or sparsity are refused: the
    model was published with the card of the recipe given (``SparseGPT unstructured 50 %`` over layers that
    Thanos pruned 2:4)."""
    root, model, pruned = tiny
    other = tmp_path / "pruned"
    shutil.copytree(pruned, other)
    thanos = Recipe(name="r", method="thanos", sparsity="2:4")
    options = {name: thanos.to_dict()[name] for name in ("blocksize", "alpha", "damp")}
    for stats_file in other.rglob("*.json"):
        stats = json.loads(stats_file.read_text())
        stats_file.write_text(json.dumps(stats | {"method": "thanos", "sparsity": "2:4", "options": options}))
    with pytest.raises(ValueError, match=r"4 pruned layer\(s\) are not of recipe r .*pruned by thanos, not"):
        _run(tmp_path, model, other, "x", recipe=Recipe(name="r", method="sparsegpt", sparsity=0.5))
    assert not (tmp_path / "x").exists()
    _run(tmp_path, model, other, "y", recipe=thanos)


def test_missing_pruned_root(tiny, tmp_path):
    _, model, _ = tiny
    with pytest.raises(FileNotFoundError, match="prune stage"):
        assemble(model, tmp_path / "nope", Recipe("x", "magnitude", 0.5), tmp_path / "out")


def test_config_is_copied_as_it_is_and_the_sidecar_counts_zeros(tiny, tmp_path):
    """config.json is the input's byte for byte, a quantized input's quantization_config included (no
    sparsity block is added); sparsity.json counts the zeros of the written weights."""
    root, model, pruned = tiny
    quantized = tmp_path / "quantized"
    shutil.copytree(model, quantized)
    config = json.loads((quantized / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "fp8", "activation_scheme": "dynamic"}
    (quantized / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    _run(tmp_path, quantized, pruned, "out")
    out = tmp_path / "out"
    assert (out / "config.json").read_bytes() == (quantized / "config.json").read_bytes()
    facts = json.loads((out / "sparsity.json").read_text())
    with safe_open(str(out / "model.safetensors"), framework="pt") as handle:
        for tensor, counts in facts["layers"].items():
            assert counts["zeros"] == int((handle.get_tensor(tensor) == 0).sum()), tensor
    assert len(facts["layers"]) == 4 and facts["pruned_layers"]["sparsity"] == 0.5
    assert facts["structure"] == "unstructured" and "lm_head" in facts["dense_linear"]
