"""OWL (per-block sparsity by outlier ratio): the rule's arithmetic, the pipeline's owl.json against a
direct computation from the dense model's activations, the exact counts of the written model, refusals,
and a real Snakemake run that resumes."""

from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path

import pytest
import torch
from conftest import calibrated, snakemake, workflow_config

from thanos.pruning import owl
from thanos.recipes.fields import ConfigError
from thanos.recipes.names import from_name
from thanos.recipes.recipe import Recipe
from thanos.workflow.config import expand

TINY = {"hidden_size": 32, "num_blocks": 3, "num_heads": 4}
MODELS = {"llama": {"path": "models/llama", "tiny": {"family": "llama", **TINY}}}
RECIPES = {
    "thanos_u70_owl": {"method": "thanos", "sparsity": 0.7, "profile": "owl"},
    "wanda_u70_owl": {"method": "wanda", "sparsity": 0.7, "profile": "owl"},
    "magnitude_u70_owl": {"method": "magnitude", "sparsity": 0.7, "profile": "owl", "owl_m": 3},
    "sparsegpt_u70_owl": {"method": "sparsegpt", "sparsity": 0.7, "profile": "owl", "owl_lambda": 0.1},
}
LAYERS_PER_BLOCK = 7  # q, k, v, o, gate, up, down


def llm_compressor_rule(ratios: list[float], sparsity: float, lam: float) -> list[float]:
    """llm-compressor 0.14's ``_infer_owl_layer_sparsity`` after the ratios (plain mean over blocks)."""
    lo, hi = min(ratios), max(ratios)
    r = [(d - lo) * (1 / (hi - lo) * lam * 2) for d in ratios]
    mean = sum(r) / len(r)
    return [1 - (x - mean + (1 - sparsity)) for x in r]


def test_block_sparsities_follow_the_reference_rule_and_keep_the_mean():
    ratios = [0.012, 0.004, 0.007, 0.02, 0.0055]
    ours = owl.block_sparsities(ratios, Fraction(7, 10), 0.08)
    assert ours == pytest.approx(llm_compressor_rule(ratios, 0.7, 0.08), abs=1e-12)
    assert sum(ours) / len(ours) == pytest.approx(0.7, abs=1e-12)
    assert max(ours) - min(ours) == pytest.approx(0.16)
    assert ours.index(min(ours)) == ratios.index(max(ratios))  # most outliers: least pruned
    # blocks of different sizes: the parameter-weighted mean is the target
    sizes = [100, 300, 100, 50, 450]
    weighted = owl.block_sparsities(ratios, Fraction(7, 10), 0.08, sizes)
    assert sum(s * n for s, n in zip(weighted, sizes, strict=True)) / sum(sizes) == pytest.approx(0.7)
    assert owl.block_sparsities([0.01, 0.01], 0.5, 0.08) == [0.5, 0.5]  # no spread: uniform
    with pytest.raises(ValueError, match="outside"):
        owl.block_sparsities([0.0, 1.0], 0.95, 0.08)


def test_block_counts_are_exact():
    sizes = [10240, 10240, 10241, 777]
    sparsities = owl.block_sparsities([0.3, 0.1, 0.2, 0.25], Fraction(7, 10), 0.08, sizes)
    counts = owl.block_counts(sparsities, sizes, Fraction(7, 10))
    assert sum(counts) == math.floor(Fraction(7, 10) * sum(sizes))
    for k, s, n in zip(counts, sparsities, sizes, strict=True):
        assert abs(k - s * n) < 1 + 1e-9


def test_block_outliers_take_the_mean_over_the_whole_block():
    W1 = torch.tensor([[1.0, 1.0], [1.0, 100.0]])
    W2 = torch.ones(2, 4)
    x1, x2 = torch.ones(2), torch.ones(4)
    found = owl.block_outliers([(W1, x1), (W2, x2)], m=5)
    # mean over the 12 scores: (103 + 8) / 12 = 9.25; only 100 exceeds 46.25
    assert (found.outliers, found.entries) == (1, 12)
    assert found.threshold == pytest.approx(5 * 111 / 12)
    lazily = owl.block_outliers([lambda: (W1, x1), lambda: (W2, x2)], m=5)
    assert lazily == found


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"sparsity": "2:4", "profile": "owl"}, "n:m keeps m - n of every m weights"),
        ({"sparsity": "structured:0.3", "profile": "owl"}, "only unstructured sparsity"),
        ({"sparsity": 0.7, "owl_m": 5}, "owl_m: set only with the owl profile"),
        ({"sparsity": 0.7, "profile": "owl", "owl_lambda": -1}, "owl_lambda: expected a number > 0"),
        ({"sparsity": 0.7, "profile": "layerwise"}, "not one of uniform, owl"),
    ],
)
def test_config_refusals(entry, message):
    with pytest.raises(ConfigError, match=message):
        Recipe.from_dict({"name": "r", "method": "wanda", **entry}, key="recipes.r")


def test_grid_names_and_reads_back_owl_recipes():
    recipes = expand(
        {"recipe_grid": [{"methods": ["wanda", "thanos"], "sparsities": ["0.7"], "profile": "owl"}]}
    )
    assert sorted(recipes) == ["thanos_u70_owl", "wanda_u70_owl"]
    assert recipes["wanda_u70_owl"].owl and recipes["wanda_u70_owl"].needs_calibration
    assert (recipes["wanda_u70_owl"].owl_m, recipes["wanda_u70_owl"].owl_lambda) == (5.0, 0.08)
    assert from_name("wanda_u70_owl") == {
        "method": "wanda",
        "sparsity": "unstructured:0.7",
        "alpha": None,
        "profile": "owl",
    }
    assert "profile" not in from_name("wanda_u70")
    with pytest.raises(ConfigError, match="only unstructured"):
        expand({"recipe_grid": [{"methods": ["wanda"], "sparsities": ["2:4"], "profile": "owl"}]})


@pytest.fixture(scope="module")
def text(tmp_path_factory) -> Path:
    import random

    words = "the a model prunes weights layer block sparse dense matrix input output token row column".split()
    rng = random.Random(0)
    path = tmp_path_factory.mktemp("owl-data") / "text.jsonl"
    with path.open("w") as handle:
        for _ in range(120):
            handle.write(json.dumps({"text": " ".join(rng.choice(words) for _ in range(40))}) + "\n")
    return path


@pytest.fixture(scope="module")
def run(tmp_path_factory, text) -> Path:
    """A real run: four OWL recipes (every method) and a uniform one, sequential chain, one job per layer
    (the OWL rule asks for the dense chain's stores of every block)."""
    workdir = tmp_path_factory.mktemp("owl-run")
    recipes = RECIPES | {"thanos_u70": {"method": "thanos", "sparsity": 0.7}}
    snakemake(workdir, workflow_config(text, MODELS, recipes, granularity="block"))
    return workdir


def _direct_norms(model_dir: Path, tokens: Path) -> dict[int, dict[str, torch.Tensor]]:
    """||X_j|| of every linear layer's input, per block, from one forward of the dense Hugging Face model
    over the calibration tokens (no Hessian, no store), keyed by the adapter's groups."""
    from transformers import AutoModelForCausalLM

    from thanos.data.storage import read_tokens
    from thanos.models import open_model

    _, adapter, _ = open_model(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    ids, _ = read_tokens(tokens)
    squares: dict[tuple[int, str], torch.Tensor] = {}
    handles = []
    for block, layer in enumerate(model.model.layers):
        for name in adapter.layers:
            module = layer.get_submodule(name)

            def hook(_m, args, key=(block, name)):
                x = args[0].to(torch.float64)
                squares[key] = squares.get(key, 0) + (x**2).reshape(-1, x.shape[-1]).sum(0)

            handles.append(module.register_forward_pre_hook(hook))
    with torch.no_grad():
        model(torch.from_numpy(ids.astype("int64")))
    for handle in handles:
        handle.remove()
    return {
        block: {adapter.group_of(name): squares[(block, name)].sqrt() for name in adapter.layers}
        for block in range(adapter.num_blocks)
    }


@pytest.mark.slow
def test_owl_json_agrees_with_the_dense_activations(run):
    """The artifact (from the dense chain's Hessian stores) and a direct computation (the dense HF model's
    activations in memory) give the same outliers and sparsities."""
    from thanos.stages.owl_plan import compute

    calibration = calibrated(run / "results" / "llama")
    norms = _direct_norms(run / "models" / "llama", calibration / "tokens.zarr")
    for recipe, entry in RECIPES.items():
        artifact = json.loads((calibration / "owl" / f"{recipe}.json").read_text())
        direct = compute(
            run / "models" / "llama", None, Recipe.from_dict({"name": recipe, **entry}), xnorms=norms
        )
        assert [b["outliers"] for b in artifact["blocks"]] == [b["outliers"] for b in direct["blocks"]]
        assert [b["removed"] for b in artifact["blocks"]] == [b["removed"] for b in direct["blocks"]]
        assert [b["sparsity"] for b in artifact["blocks"]] == pytest.approx(
            [b["sparsity"] for b in direct["blocks"]], abs=1e-12
        )
        sparsities = [b["sparsity"] for b in artifact["blocks"]]
        assert max(sparsities) - min(sparsities) > 0.05  # the blocks do differ
        assert artifact["removed"] == math.floor(Fraction(7, 10) * artifact["parameters"])


def _written_zeros(model_dir: Path) -> dict[int, tuple[int, int]]:
    """{block: (weights, zeros)} of the pruned layers, counted on the written safetensors."""
    from safetensors import safe_open

    report = json.loads((model_dir / "pruning_report.json").read_text())
    found: dict[int, list[int]] = {}
    with safe_open(str(model_dir / "model.safetensors"), framework="pt") as handle:
        for entry in report["layers"]:
            weight = handle.get_tensor(entry["tensor"])
            counts = found.setdefault(int(entry["block"]), [0, 0])
            counts[0] += weight.numel()
            counts[1] += int((weight == 0).sum())
    return {block: (w, z) for block, (w, z) in found.items()}


@pytest.mark.slow
@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_written_model_has_the_target_sparsity(run, recipe):
    """Per block, the written zeros are OWL's count (floor per layer: within one weight per layer for
    Thanos and magnitude, per column block for SparseGPT, per row for Wanda, as at uniform sparsity); over
    the model, the parameter-weighted sparsity is the target within one weight per layer."""
    model_dir = run / "results" / "llama" / recipe / "model"
    plan = json.loads((calibrated(run / "results" / "llama") / "owl" / f"{recipe}.json").read_text())
    written = _written_zeros(model_dir)
    rows_per_block = 4 * TINY["hidden_size"] + 2 * 86 + TINY["hidden_size"]  # q k v o, gate up (86), down
    slack = {"thanos": 1, "magnitude": 1, "sparsegpt": 1, "wanda": rows_per_block / LAYERS_PER_BLOCK}
    method = RECIPES[recipe]["method"]
    for block in plan["blocks"]:
        weights, zeros = written[block["block"]]
        assert weights == block["parameters"]
        assert 0 <= block["removed"] - zeros <= slack[method] * LAYERS_PER_BLOCK, (block, zeros)
    weights = sum(w for w, _ in written.values())
    zeros = sum(z for _, z in written.values())
    target = Fraction(7, 10) * weights
    if method != "wanda":
        assert abs(zeros - target) <= LAYERS_PER_BLOCK * TINY["num_blocks"]
    report = json.loads((model_dir / "pruning_report.json").read_text())
    assert report["owl"]["written_sparsity"] == zeros / weights
    assert [b["written_zeros"] for b in report["owl"]["blocks"]] == [written[b][1] for b in sorted(written)]
    sidecar = json.loads((model_dir / "sparsity.json").read_text())
    assert sidecar["profile"]["name"] == "owl" and len(sidecar["blocks"]) == TINY["num_blocks"]
    assert "Sparsity per block (OWL)" in (model_dir / "README.md").read_text()


@pytest.mark.slow
def test_owl_change_reruns_its_recipe_only(run, text):
    changed = RECIPES | {
        "thanos_u70": {"method": "thanos", "sparsity": 0.7},
        "wanda_u70_owl": {"method": "wanda", "sparsity": 0.7, "profile": "owl", "owl_lambda": 0.05},
    }
    config = workflow_config(text, MODELS, changed, granularity="block")
    dry = snakemake(run, config, "-n", "--quiet", "rules")
    lines = (dry.stdout + dry.stderr).splitlines()
    rows = {
        line.split()[0]: int(line.split()[1])
        for line in lines
        if len(line.split()) == 2 and line.split()[1].isdigit()
    }
    # wanda_u70_owl only: its owl job, its prune blocks, its own sequential chain (blocks >= 1: capture,
    # propagate) and its assembly; not the dense chain, nor another recipe
    later = TINY["num_blocks"] - 1
    assert rows.get("owl") == 1 and rows.get("assemble") == 1, rows
    assert rows.get("prune_block") == TINY["num_blocks"], rows
    assert rows.get("capture") == later and rows.get("propagate") == later, rows
    assert rows.get("total") == 2 + TINY["num_blocks"] + 2 * later + 1, rows


@pytest.mark.slow
def test_owl_with_nm_is_refused_by_the_workflow(tmp_path, text):
    recipes = {"wanda_owl": {"method": "wanda", "sparsity": "2:4", "profile": "owl"}}
    proc = snakemake(tmp_path, workflow_config(text, MODELS, recipes), "-n", check=False)
    assert proc.returncode != 0
    assert "recipes.wanda_owl.profile: owl sets a sparsity per block" in proc.stderr + proc.stdout


@pytest.mark.slow
def test_report_rows_keep_owl_beside_uniform(run):
    from thanos.report.collect import collect, labelled_recipes

    frame, _ = collect(run / "results")
    rows = labelled_recipes(frame)
    labels = dict(zip(rows["recipe"], rows["label"], strict=True))
    assert labels["thanos_u70"] == "Thanos (α=0)"  # every recipe's alpha is known: the default's
    assert labels["thanos_u70_owl"] == "Thanos (α=0) + OWL"
    assert labels["wanda_u70_owl"] == "Wanda + OWL"
    order = [recipe for _, recipe in sorted(zip(rows["order"], rows["recipe"], strict=True))]
    assert order.index("thanos_u70") + 1 == order.index("thanos_u70_owl")


@pytest.mark.slow
def test_prune_model_with_owl(tmp_path, text):
    """``thanos prune-model --profile owl``: the sequential chain plus the dense chain's Hessians; the
    published card and sidecar state the per-block sparsities and the command that reproduces them (the
    commands run in this process: ``thanos_here``)."""
    from conftest import thanos_here

    def thanos(*args):
        run = thanos_here(*args, cwd=tmp_path)
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
        return run

    model = tmp_path / "tiny"
    thanos("make-tiny-model", "--hidden-size", "32", "--num-blocks", "3", "--out", model)
    args = ["prune-model", "--model", model, "--method", "wanda", "--sparsity", "0.7", "--profile", "owl"]
    args += ["--owl-lambda", "0.1", "--calibration", text, "--nsamples", "8", "--seqlen", "32"]
    thanos(
        *args, "--device", "cpu", "--cores", "2", "--workdir", tmp_path / "work", "--out", tmp_path / "out"
    )
    sidecar = json.loads((tmp_path / "out" / "sparsity.json").read_text())
    assert sidecar["profile"]["owl_lambda"] == 0.1 and len(sidecar["blocks"]) == 3
    card = (tmp_path / "out" / "README.md").read_text()
    assert "--profile owl --owl-m 5 --owl-lambda 0.1" in card
    refused = thanos_here(*args[:6], "2:4", "--profile", "owl", "--out", "x", cwd=tmp_path)
    assert refused.returncode != 0 and "--profile 'owl': owl sets a sparsity per block" in refused.stderr


def test_orderings_compare_uniform_recipes_only():
    import pandas as pd

    from thanos.report.orderings import check_orderings

    rows = [
        ("magnitude", "uniform", 60.0),
        ("wanda", "uniform", 57.0),
        ("sparsegpt", "uniform", 50.0),
        ("sparsegpt", "owl", 49.5),  # better than Thanos: must not stand in for SparseGPT
        ("thanos", "uniform", 49.8),
    ]
    frame = pd.DataFrame(
        [
            {"model": "m", "method": method, "profile": profile, "ppl": ppl, "kind": "unstructured"}
            | {"sparsity": "unstructured:0.7", "fraction": 0.7, "m": float("nan"), "alpha": float("nan")}
            for method, profile, ppl in rows
        ]
    )
    (claim,) = check_orderings(frame)
    assert claim.verdict == "holds" and "SparseGPT 50.000" in claim.detail, claim


@pytest.mark.slow
def test_dense_chain_owl_reuses_the_recipes_hessians(run, tmp_path, text):
    """With ``chain: dense`` the OWL rule reads the Hessian stores the recipes prune with: no extra capture
    or propagate job (one per dense block, shared), and the owl.json equals the sequential run's (the dense
    chain's stores are the same in both modes)."""
    recipes = {
        "thanos_u70": {"method": "thanos", "sparsity": 0.7},
        "thanos_u70_owl": {"method": "thanos", "sparsity": 0.7, "profile": "owl"},
    }
    proc = snakemake(tmp_path, workflow_config(text, MODELS, recipes, chain="dense"))
    out = proc.stdout + proc.stderr
    blocks = TINY["num_blocks"]
    assert out.count("rule capture:") == blocks and out.count("rule propagate:") == blocks - 1, out[-3000:]
    assert out.count("rule owl:") == 1
    calibration = calibrated(tmp_path / "results" / "llama")
    owl_json = json.loads((calibration / "owl" / "thanos_u70_owl.json").read_text())
    stores = calibration.relative_to(tmp_path) / "chains" / "dense"
    assert owl_json["hessians"] == [f"{stores}/hessians_{b}.zarr" for b in range(blocks)]
    sequential_plan = calibrated(run / "results" / "llama") / "owl" / "thanos_u70_owl.json"
    sequential = json.loads(sequential_plan.read_text())
    assert owl_json["blocks"] == sequential["blocks"]
