"""Layers left dense by pattern: a recipe's ``exclude`` (config) or ``--exclude`` (``thanos prune-model``)
keeps the layers whose name within a block matches a regular expression unpruned, at every granularity;
changing the patterns of a recipe publishes exactly the new set (no pruned file of an earlier run leaks
in). Real Snakemake runs on tiny random models; bad patterns are refused naming them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import make_tiny_model, snakemake, workflow_config, write_corpus
from safetensors.torch import load_file

from thanos.files.layout import Layout
from thanos.recipes.fields import ConfigError
from thanos.recipes.recipe import Recipe, select_layers
from thanos.workflow.config import expand

LAYERS = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
          "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]  # fmt: skip


def test_patterns_select_layers_and_bad_ones_are_named() -> None:
    assert select_layers(LAYERS, ["self_attn"]) == ["mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]
    assert select_layers(LAYERS, [r"mlp\.(gate|up)", "^self_attn.[qk]"]) == [
        "self_attn.v_proj", "self_attn.o_proj", "mlp.down_proj"
    ]  # fmt: skip
    with pytest.raises(ConfigError, match=r"exclude pattern 'mlp\.fc1' matches no prunable layer"):
        select_layers(LAYERS, ["mlp.fc1"])
    with pytest.raises(ConfigError, match="leave no layer to prune"):
        select_layers(LAYERS, ["proj"])
    with pytest.raises(ConfigError, match=r"recipes\.r\.exclude: '\(' is not a regular expression"):
        Recipe.from_dict({"name": "r", "method": "wanda", "sparsity": 0.5, "exclude": ["("]}, "recipes.r")
    with pytest.raises(ConfigError, match=r"recipe_grid\[0\]\.exclude: expected a list"):
        expand({"recipe_grid": [{"methods": ["wanda"], "sparsities": [0.5], "exclude": "self_attn"}]})
    recipe = Recipe.from_dict({"name": "r", "method": "wanda", "sparsity": 0.5, "exclude": [r"mlp\.down"]})
    assert Recipe.from_json(recipe.to_json()) == recipe
    plain = Recipe.from_dict({"name": "r", "method": "wanda", "sparsity": 0.5, "exclude": []})
    assert "exclude" not in plain.to_json() and plain.exclude == ()


def published(out: Path) -> tuple[set[str], set[str]]:
    """(layers of block 0 written pruned, linear layers sparsity.json lists as dense) of a model dir."""
    report = json.loads((out / "pruning_report.json").read_text())
    sidecar = json.loads((out / "sparsity.json").read_text())
    return {e["layer"] for e in report["layers"] if e["block"] == 0}, set(sidecar["dense_linear"])


@pytest.mark.slow
@pytest.mark.parametrize("granularity", ["recipe", "layer"])
def test_excluded_layers_stay_dense_and_a_change_republishes(tmp_path: Path, granularity: str) -> None:
    """exclude: [self_attn] leaves every attention projection bit-identical to the input's and prunes the
    MLP; then the same recipe with exclude: [mlp] publishes the attention pruned and the MLP dense, though
    the first run's MLP files are still on disk."""
    model = make_tiny_model(tmp_path, "llama")
    corpus = write_corpus(tmp_path / "calib.jsonl")
    models = {"tiny": {"path": str(model)}}
    recipe = {"method": "sparsegpt", "sparsity": 0.5, "exclude": ["self_attn"]}
    config = workflow_config(corpus, models, {"r": recipe}, granularity=granularity)
    snakemake(tmp_path, config)
    out = Path(Layout(str(tmp_path / "results"), sequential=True).model_dir("tiny", "r"))
    original = {}
    for shard in model.glob("*.safetensors"):
        original |= load_file(shard)
    written = load_file(out / "model.safetensors")
    pruned, dense = published(out)
    assert pruned == {"mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"}
    assert {f"model.layers.{b}.self_attn.{p}_proj" for b in (0, 1) for p in "qkvo"} <= dense
    for name, tensor in written.items():
        if ".self_attn." in name:
            assert (tensor == original[name]).all(), name
        elif name.endswith("mlp.down_proj.weight"):
            assert int((tensor == 0).sum()) == tensor.numel() // 2, name

    config["recipes"]["r"]["exclude"] = ["mlp"]
    snakemake(tmp_path, config)
    pruned, dense = published(out)
    assert pruned == {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj"}
    written = load_file(out / "model.safetensors")
    assert all((written[n] == original[n]).all() for n in written if ".mlp." in n)
