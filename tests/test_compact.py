"""MLP-neuron removal (``neurons:p``) and its compact output: the counts, the recipe checks, every family of
the tested matrix compacted to the logits of the zero-filled model, refusals, the workflow, ``thanos
prune-model`` and llama.cpp's converter on a compact model."""

from __future__ import annotations

import json
import math
import sys
from fractions import Fraction
from pathlib import Path

import pytest
import torch
from conftest import calibrated, make_tiny_model, snakemake, thanos_here, workflow_config, write_corpus
from helpers.models import (
    NO_NEURONS,
    OPTIONS,
    logits,
    prune_with_magnitude,
    stored_parameters,
)
from helpers.tools import (
    converted_to_gguf,
)
from helpers.vocabulary import PROSE, build_model

from thanos.demo.tested_models import TESTED_MODELS
from thanos.demo.tiny import build_tiny_model
from thanos.models import open_layout
from thanos.models.neurons import NeuronsError, mlp_layout
from thanos.pruning.layer import prune_layer
from thanos.pruning.sparsity import neuron_count, parse_sparsity
from thanos.recipes.fields import ConfigError
from thanos.recipes.names import from_name
from thanos.recipes.recipe import Recipe
from thanos.stages.assemble import assemble
from thanos.stages.prune import prune
from thanos.workflow.config import expand


def test_neuron_count_keeps_the_multiple_nearest_the_asked_width() -> None:
    """The kept width is the multiple of gcd(32, b) (halved while the width holds fewer than 4 of them)
    nearest b (1 - p): the removed fraction as close to p as a multiple allows, at least one multiple kept;
    ``width_multiple`` changes the multiple."""
    assert (
        parse_sparsity("neurons:0.3").kind == "neurons"
        and str(parse_sparsity("neurons:0.3")) == "neurons:0.3"
    )
    for b in (96, 100, 1536, 2048, 8192, 11008, 14336):
        for p in ("0.1", "0.2", "0.3", "0.5", "0.7"):
            kept = b - neuron_count(Fraction(p), b)
            m = math.gcd(32, b)
            while b // m < 4:  # the tiny 96: 16
                m //= 2
            assert kept % m == 0 and m <= kept <= b
            closest = min(range(m, b + 1, m), key=lambda k: abs(Fraction(b - k, b) - Fraction(p)))
            assert abs(Fraction(b - kept, b) - Fraction(p)) == abs(Fraction(b - closest, b) - Fraction(p))
    # SmolLM2's 1536 at 0.3: 1075.2 asked, 1088 = 34 x 32 kept (29.2 % removed); 1024 with 256 (k-quants)
    assert [1536 - neuron_count(Fraction(p), 1536) for p in ("0.2", "0.3", "0.5")] == [1216, 1088, 768]
    assert 1536 - neuron_count(Fraction("0.3"), 1536, 256) == 1024
    assert 1536 - neuron_count(Fraction("0.3"), 1536, 1) == 1075  # no rounding: the nearest whole neuron
    assert 100 - neuron_count(Fraction("0.3"), 100) == 72  # 100 is a multiple of 4 only: 70 -> 72
    assert 64 - neuron_count(Fraction("0.99"), 64) == 16  # at least one multiple (16: 4 in 64) kept
    assert 32 - neuron_count(Fraction("0.25"), 32) == 24  # 8: 4 multiples in 32
    recipe = Recipe(None, "thanos", "neurons:0.3", width_multiple=256)
    assert (recipe.name, recipe.sparsity.multiple) == ("thanos_n30_w256", 256)
    assert Recipe.from_dict(recipe.to_dict()) == recipe
    assert Recipe(None, "thanos", "neurons:0.3").sparsity.multiple == 32
    with pytest.raises(ConfigError, match="width_multiple: only neurons:p recipes"):
        Recipe(None, "thanos", "heads:0.3", width_multiple=32)
    with pytest.raises(ConfigError, match="width_multiple: expected a whole number >= 1"):
        Recipe(None, "thanos", "neurons:0.3", width_multiple=0)


@pytest.mark.slow
def test_llama_cpp_quantizes_the_rounded_width_as_the_dense_model(tmp_path: Path) -> None:
    """``neurons:0.3`` of a 128-wide MLP keeps 96 neurons, a multiple of 32 (the default ``width_multiple``):
    llama.cpp's converter at ``--outtype q8_0`` gives every 2-D weight of the pruned model the type the
    dense model's conversion gives it. Not rounded (``width_multiple=1``: 90 neurons), the MLP's down
    projection, whose rows are that wide, is stored in another type."""
    import io

    from thanos import prune_model

    dense = build_model(tmp_path / "dense", "byte-fallback", intermediate=128)
    text = tmp_path / "calib.txt"
    text.write_text("\n\n".join([" ".join(line for line in PROSE if line)] * 4) + "\n")
    options = {
        "calibration": str(text),
        "nsamples": 4,
        "seqlen": 32,
        "device": "cpu",
        "stream": io.StringIO(),
    }
    for name, multiple in (("rounded", None), ("unrounded", 1)):
        prune_model(dense, "thanos", "neurons:0.3", out=tmp_path / name, width_multiple=multiple, **options)
    widths = {
        name: json.loads((tmp_path / name / "config.json").read_text())["intermediate_size"]
        for name in ("rounded", "unrounded")
    }
    assert widths == {"rounded": 96, "unrounded": 90}
    types = {}
    for name, model in (
        ("dense", dense),
        ("rounded", tmp_path / "rounded"),
        ("unrounded", tmp_path / "unrounded"),
    ):
        with converted_to_gguf(model, tmp_path / f"{name}.gguf", "--outtype", "q8_0") as (_, reader):
            types[name] = {t.name: t.tensor_type.name for t in reader.tensors if len(t.shape) == 2}
    assert set(types["dense"].values()) == {"Q8_0"} and types["rounded"] == types["dense"]
    wider = {name for name, kind in types["unrounded"].items() if kind != "Q8_0"}
    assert wider == {f"blk.{i}.ffn_down.weight" for i in range(2)}, types["unrounded"]


def test_recipe_checks_compact_and_alpha() -> None:
    recipe = Recipe.from_dict({"name": "n", "method": "thanos", "sparsity": "neurons:0.3"})
    assert recipe.compact is True and str(recipe.sparsity) == "neurons:0.3"  # compact by default
    with pytest.raises(
        ConfigError,
        match=r"recipe\.compact: only neurons:p, heads:p and kv_heads:p recipes can be written compact",
    ):
        Recipe.from_dict({"name": "r", "method": "thanos", "sparsity": "structured:0.3", "compact": True})
    with pytest.raises(ConfigError, match=r"recipe\.alpha: neurons:0.3 removes whole neurons.*set alpha 0"):
        Recipe.from_dict({"name": "r", "method": "thanos", "sparsity": "neurons:0.3", "alpha": 0.1})
    with pytest.raises(ConfigError, match="expected true or false"):
        Recipe.from_dict({"name": "r", "method": "wanda", "sparsity": "neurons:0.3", "compact": "yes"})
    with pytest.raises(ConfigError, match=r"recipe_grid\[0\]\.alpha: neurons:0.3 removes whole neurons"):
        expand({"recipe_grid": [{"methods": ["thanos"], "sparsities": ["neurons:0.3"], "alpha": [0, 0.1]}]})
    assert from_name("thanos_n30_a0") == {"method": "thanos", "sparsity": "neurons:0.3", "alpha": 0.0}


@pytest.mark.parametrize("method", ["thanos", "sparsegpt", "wanda", "magnitude"])
def test_prune_layer_removes_whole_columns_and_names_them(method: str) -> None:
    generator = torch.Generator().manual_seed(0)
    W = torch.randn(16, 96, generator=generator)
    X = torch.randn(96, 400, generator=generator)
    H = 2 * X @ X.T / 400
    result = prune_layer(W, None if method == "magnitude" else H, method, "neurons:0.3")
    # 96 at 0.3: 64 = 4 x 16 kept (67.2 asked)
    assert result.columns is not None and result.columns.numel() == 32
    zero = (result.weight == 0).all(dim=0)
    assert zero[result.columns].all() and int(zero.sum()) == 32
    with pytest.raises(ValueError, match="no row can be kept dense"):
        prune_layer(W, H, "thanos", "neurons:0.3", alpha=0.1)


@pytest.mark.parametrize("model_type", [t for t in TESTED_MODELS if t not in NO_NEURONS])
def test_compact_model_gives_the_logits_of_the_zero_filled_one(tmp_path: Path, model_type: str) -> None:
    """Every family of the tested matrix: the compact model (intermediate width cut, config changed) and
    the same pruned layers written with zeros in the original shape give the same logits (fp32, <= 1e-5),
    both loaded with plain from_pretrained."""
    model = build_tiny_model(
        tmp_path / model_type,
        model_type,
        max_position_embeddings=64,
        jitter=0.1,
        **OPTIONS.get(model_type, {}),
    )
    pruned = tmp_path / "pruned"
    prune_with_magnitude(model, pruned)
    base = {"name": "m", "method": "magnitude", "sparsity": "neurons:0.3"}
    zeros = assemble(model, pruned, Recipe.from_dict(base | {"compact": False}), tmp_path / "zeros")
    compact = assemble(model, pruned, Recipe.from_dict(base), tmp_path / "compact")
    facts = compact["compact"]
    assert "compact" not in zeros
    width = facts["original_width"]
    assert facts["kept_width"] == width - neuron_count(Fraction("0.3"), width)
    assert facts["kept_width"] % 8 == 0
    config = json.loads((tmp_path / "compact" / "config.json").read_text())
    original = json.loads((model / "config.json").read_text())
    assert config == original | {facts["width_key"]: facts["kept_width"]}
    assert (tmp_path / "zeros" / "config.json").read_bytes() == (model / "config.json").read_bytes()
    assert [entry["layer"] for entry in compact["layers"]] == [
        facts["output_projection"]
    ] * 2  # the others: dense
    sidecar = json.loads((tmp_path / "compact" / "sparsity.json").read_text())
    assert sidecar["compact"]["kept_width"] == facts["kept_width"] and sidecar["structure"] == "neurons"
    assert (
        f"keeps {facts['kept_width']} of its {width} neurons"
        in (tmp_path / "compact" / "README.md").read_text()
    )
    ids = torch.randint(4, 120, (2, 24), generator=torch.Generator().manual_seed(1))
    a, b = logits(tmp_path / "compact", ids), logits(tmp_path / "zeros", ids)
    assert (a - b).abs().max() <= 1e-5
    assert facts["parameters"]["kept"] == stored_parameters(tmp_path / "compact")
    assert facts["parameters"]["original"] == stored_parameters(model) > facts["parameters"]["kept"]


def test_models_whose_neurons_cannot_be_removed_are_refused(tmp_path: Path) -> None:
    """One line naming the model type and why: a layer beside the MLP with the MLP's width (phi3's fused
    qkv_proj at the tiny default sizes), and a hidden size equal to the MLP width (ambiguous)."""
    phi3 = build_tiny_model(tmp_path / "phi3", "phi3", max_position_embeddings=64)
    with pytest.raises(
        NeuronsError, match=r"model_type 'phi3': cannot remove MLP neurons \(self_attn\.qkv_proj"
    ):
        mlp_layout(*open_layout(phi3)[1:])
    square = make_tiny_model(tmp_path, "llama", intermediate_size=32)
    with pytest.raises(NeuronsError, match=r"model_type 'llama': cannot remove MLP neurons \(.*take"):
        mlp_layout(*open_layout(square)[1:])
    with pytest.raises(ValueError, match="cannot remove MLP neurons"):
        prune(square, 0, Recipe("r", "magnitude", "neurons:0.3"), tmp_path / "p", device="cpu")


@pytest.mark.parametrize("model_type", NO_NEURONS)
def test_mixture_of_experts_rows_are_refused(tmp_path: Path, model_type: str) -> None:
    """The matrix's mixture-of-experts rows: neurons:p is refused naming the model type, not half done."""
    model = build_tiny_model(tmp_path / model_type, model_type, max_position_embeddings=64)
    with pytest.raises(NeuronsError, match=rf"model_type '{model_type}': cannot remove MLP neurons \("):
        mlp_layout(*open_layout(model)[1:])


def test_per_block_widths_are_refused() -> None:
    """Configs with one MLP width per block (a list), or none, cannot hold one kept width."""
    from thanos.models.neurons import mlp_width

    assert mlp_width("opt", {"ffn_dim": 96}) == ("ffn_dim", 96)
    with pytest.raises(NeuronsError, match=r"'x'.*intermediate_size is \[64, 96\], not one width for every"):
        mlp_width("x", {"intermediate_size": [64, 96]})
    with pytest.raises(NeuronsError, match="states no MLP width"):
        mlp_width("x", {})


def test_compact_is_refused_for_other_patterns(tmp_path: Path) -> None:
    model = make_tiny_model(tmp_path, "llama")
    pruned = tmp_path / "pruned"
    prune_with_magnitude(model, pruned, "structured:0.3")
    with pytest.raises(
        ValueError, match="only neurons:p, heads:p and kv_heads:p recipes"
    ):  # refused before anything runs
        assemble(model, pruned, Recipe("r", "magnitude", "structured:0.3", compact=True), tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_workflow_prunes_neurons_with_every_method(tmp_path: Path) -> None:
    """The real workflow: Thanos, Wanda and magnitude neuron removal, compact, and Thanos written with zeros;
    Thanos' compact model gives the zero-filled one's logits."""
    model = make_tiny_model(tmp_path, "llama", intermediate_size=96)
    corpus = write_corpus(tmp_path / "calib.jsonl")
    recipes = {
        "t30": {"method": "thanos", "sparsity": "neurons:0.3"},
        "t30z": {"method": "thanos", "sparsity": "neurons:0.3", "compact": False},
        "w30": {"method": "wanda", "sparsity": "neurons:0.3"},
        "m30": {"method": "magnitude", "sparsity": "neurons:0.3"},
    }
    snakemake(tmp_path / "run", workflow_config(corpus, {"tiny": {"path": str(model)}}, recipes))
    results = tmp_path / "run" / "results" / "tiny"
    for name in ("t30", "w30", "m30"):
        assert json.loads((results / name / "model" / "config.json").read_text())["intermediate_size"] == 64
    assert json.loads((results / "t30z" / "model" / "config.json").read_text())["intermediate_size"] == 96
    layers = results / "t30" / "pruned" / calibrated(results).name
    kept = layers / "block1" / "self_attn.q_proj.safetensors"  # not pruned: not copied
    assert kept.stat().st_size < 200 and json.loads(kept.with_suffix(".json").read_text())["kept_dense"]
    ids = torch.randint(4, 120, (2, 24), generator=torch.Generator().manual_seed(3))
    assert (
        logits(results / "t30" / "model", ids) - logits(results / "t30z" / "model", ids)
    ).abs().max() <= 1e-5
    assert not torch.equal(logits(results / "t30" / "model", ids), logits(results / "m30" / "model", ids))


@pytest.mark.slow
def test_workflow_per_layer_jobs_prune_neurons(tmp_path: Path) -> None:
    """granularity layer (one job per layer): the layers a neurons recipe leaves alone are jobs too."""
    model = make_tiny_model(tmp_path, "qwen2", intermediate_size=96)
    corpus = write_corpus(tmp_path / "calib.jsonl")
    recipes = {"m30": {"method": "magnitude", "sparsity": "neurons:0.3"}}
    config = workflow_config(corpus, {"tiny": {"path": str(model)}}, recipes, granularity="layer")
    snakemake(tmp_path / "run", config)
    out = tmp_path / "run" / "results" / "tiny" / "m30" / "model"
    assert json.loads((out / "config.json").read_text())["intermediate_size"] == 64
    report = json.loads((out / "pruning_report.json").read_text())
    assert [entry["layer"] for entry in report["layers"]] == ["mlp.down_proj"] * 2


@pytest.mark.slow
def test_prune_model_writes_a_compact_model(tmp_path: Path) -> None:
    model = make_tiny_model(tmp_path, "opt", intermediate_size=96)
    corpus = write_corpus(tmp_path / "calib.jsonl")
    command = [sys.executable, "-m", "thanos", "prune-model", "--model", str(model), "--method", "thanos"]
    command += [
        "--sparsity",
        "neurons:0.3",
        "--calibration",
        str(corpus),
        "--nsamples",
        "8",
        "--seqlen",
        "32",
    ]
    command += [
        "--device",
        "cpu",
        "--cores",
        "2",
        "--workdir",
        str(tmp_path / "work"),
        "--out",
        str(tmp_path / "out"),
    ]
    run = thanos_here(*command[3:], cwd=tmp_path)  # the command line, in this process
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    assert "compact: MLP width 96 -> 64 neurons per block (ffn_dim, a multiple of 16)" in run.stderr
    assert "% of the pruned weights are zero" not in run.stderr  # removed, not zeros
    assert json.loads((tmp_path / "out" / "config.json").read_text())["ffn_dim"] == 64
    report = json.loads((tmp_path / "out" / "pruning_report.json").read_text())
    assert report["recipe"]["name"] == "thanos_n30" and report["compact"]["kept_width"] == 64
    refused = thanos_here(*command[3:-1], str(tmp_path / "out2"), "--alpha", "0.1", cwd=tmp_path)
    assert refused.returncode != 0 and "removes whole neurons" in refused.stderr


@pytest.mark.slow
def test_llama_cpp_converts_a_compact_model(tmp_path: Path) -> None:
    """llama.cpp's converter reads the compact model: its feed-forward tensors have the kept width."""

    model = build_tiny_model(tmp_path / "tiny-llama", hidden_size=64, num_blocks=2, tokenizer="llama")
    pruned = tmp_path / "pruned"
    prune_with_magnitude(model, pruned)
    report = assemble(model, pruned, Recipe("m", "magnitude", "neurons:0.3"), tmp_path / "compact")
    kept = report["compact"]["kept_width"]
    with converted_to_gguf(tmp_path / "compact", tmp_path / "compact.gguf") as (_, reader):
        shapes = {t.name: [int(d) for d in t.shape] for t in reader.tensors}
        field = reader.fields["llama.feed_forward_length"]
        assert int(field.parts[field.data[0]][0]) == kept
    assert shapes["blk.0.ffn_down.weight"] == [kept, 64] and shapes["blk.0.ffn_up.weight"] == [64, kept]
