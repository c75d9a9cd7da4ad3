"""Whole blocks removed (``depth:k``): the counts, the block scores, every row of the tested matrix written
without blocks to the logits of the same model with those blocks skipped in memory, the config's per-block
settings, the refusals, and ``thanos prune-model --sparsity depth:1`` as a user runs it."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import make_tiny_model, thanos_here, write_corpus
from helpers.models import (
    HEADS_ROWS,
    NO_NEURONS,
    OPTIONS,
    dense_stores,
    logits,
    prune_with_magnitude,
    skipped_logits,
    stored_parameters,
)
from helpers.tools import (
    converted_to_gguf,
)
from transformers import AutoModelForCausalLM

from thanos.data.storage import Activations
from thanos.demo.tested_models import TESTED_MODELS
from thanos.demo.tiny import build_tiny_model
from thanos.pruning.sparsity import depth_count, parse_sparsity
from thanos.recipes.names import from_name
from thanos.recipes.recipe import Recipe
from thanos.stages.assemble import assemble
from thanos.stages.depth.blocks import DepthError, check_depth, choose, shortened_config
from thanos.stages.describe.card import reproduce_command
from thanos.stages.model_info import model_info


def test_depth_counts_and_names() -> None:
    assert str(parse_sparsity("depth:6")) == "depth:6" and parse_sparsity("depth:6").n == 6
    assert depth_count(parse_sparsity("depth:6"), 30) == 6
    assert (
        depth_count(parse_sparsity("depth:0.2"), 30) == 6
        and depth_count(parse_sparsity("depth:0.21"), 30) == 7
    )
    with pytest.raises(ValueError, match="removes 30 of the model's 30 blocks, which leaves none"):
        depth_count(parse_sparsity("depth:30"), 30)
    with pytest.raises(
        ValueError, match="40 of the model's 30 blocks.*at most 29 can go.*give depth:29 or less"
    ):
        depth_count(parse_sparsity("depth:40"), 30)
    with pytest.raises(ValueError, match="whole number of blocks"):
        parse_sparsity("depth:1.5")
    for ambiguous in ("depth:1.0", "depth:1e0"):  # one block, or the fraction 1?
        with pytest.raises(ValueError, match="neither as blocks nor as a fraction: .*'depth:1'"):
            parse_sparsity(ambiguous)
    assert Recipe(None, "thanos", "depth:6").name == "thanos_depth6"
    assert from_name("thanos_depth6")["sparsity"] == "depth:6"
    assert from_name("wanda_d20")["sparsity"] == "depth:0.2"
    with pytest.raises(ValueError, match="removes whole blocks, which have no outlier rows"):
        Recipe("r", "thanos", "depth:2", alpha=0.1)


def test_choose_takes_the_lowest_scores_later_blocks_first_on_ties() -> None:
    assert choose([0.3, 0.1, 0.2, 0.1, 0.5], 2) == [1, 3]
    assert choose([0.3, 0.1, 0.2, 0.1, 0.5], 1) == [3]


def test_config_settings_follow_the_kept_blocks() -> None:
    config = {
        "num_hidden_layers": 4,
        "layer_types": ["sliding", "full", "sliding", "full"],
        "mlp_only_layers": [0, 3],
        "first_k_dense_replace": 2,
        "max_window_layers": 3,
        "hidden_size": 4,
    }
    new = shortened_config("x", config, [0, 2, 3])
    assert new == {
        "num_hidden_layers": 3,
        "layer_types": ["sliding", "sliding", "full"],
        "mlp_only_layers": [0, 2],
        "first_k_dense_replace": 1,
        "max_window_layers": 2,
        "hidden_size": 4,
    }
    with pytest.raises(DepthError, match="'x': cannot remove whole blocks .*decoder_sparse_step = 2"):
        shortened_config("x", {"num_hidden_layers": 4, "decoder_sparse_step": 2}, [0, 1])


@pytest.mark.parametrize("model_type", list(TESTED_MODELS))
def test_fewer_blocks_give_the_logits_of_the_blocks_skipped(tmp_path: Path, model_type: str) -> None:
    """Every row of the tested matrix: the model written without a block (renumbered, config changed) and
    the dense model with that block skipped in memory give the same logits (fp32, <= 1e-5), loaded with
    plain from_pretrained. A dense-first mixture of experts loses its dense block."""
    blocks = 4
    model = build_tiny_model(
        tmp_path / model_type, model_type, num_blocks=blocks, max_position_embeddings=64, jitter=0.1
    )
    config = json.loads((model / "config.json").read_text())
    removed = [0] if config.get("first_k_dense_replace") else [1]
    check_depth(model, model_type, parse_sparsity("depth:1"), blocks)
    info = tmp_path / "model_info.json"
    model_info(model, info)
    depth = tmp_path / "depth.json"
    kept = [b for b in range(blocks) if b not in removed]
    plan = {"num_blocks": blocks, "metric": "influence", "scores": {"influence": [0.0] * blocks}}
    depth.write_text(json.dumps(plan | {"removed": removed, "kept": kept}))
    recipe = Recipe("d", "magnitude", "depth:1")
    report = assemble(model, tmp_path / "unused", recipe, tmp_path / "out", info, depth=depth)
    written = json.loads((tmp_path / "out" / "config.json").read_text())
    assert written["num_hidden_layers"] == blocks - 1
    if "layer_types" in config:
        assert written["layer_types"] == [config["layer_types"][b] for b in kept]
    facts = report["compact"]
    assert facts["removed_blocks"] == removed and facts["kept_blocks"] == blocks - 1
    assert (
        facts["parameters"]["kept"] == stored_parameters(tmp_path / "out") < facts["parameters"]["original"]
    )
    card = (tmp_path / "out" / "README.md").read_text()
    assert "Whole blocks are removed: the model keeps 3 of its 4" in card and "blocksize" not in card
    assert f"| removed | 1 of the 4 blocks (index {removed[0]}, counted from 0): " in card
    assert json.loads((tmp_path / "out" / "sparsity.json").read_text())["structure"] == "depth"
    ids = torch.randint(4, 120, (2, 24), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        short = AutoModelForCausalLM.from_pretrained(tmp_path / "out", dtype=torch.float32).eval()(ids).logits
    reference = skipped_logits(model, removed, ids)
    assert (short - reference).abs().max() <= 1e-5
    assert not torch.allclose(reference, skipped_logits(model, [], ids), atol=1e-3)  # the block mattered


@pytest.mark.slow
def test_prune_model_replaces_the_run_of_the_lowest_fitted_error(tmp_path: Path) -> None:
    """``thanos prune-model --sparsity depth:1``: depth.json scores every block from the dense chain's
    stores (influence: 1 - mean cosine of a block's input and output; replaced: the relative error of the
    map fitted in place of the block, ranked on the first windows, then fitted again on every window), the
    block of the lowest error on every window is removed and its map folded
    into the block before, the card and summary say so; a second run resumes with nothing to do;
    ``--no-block-map`` removes the lowest-influence block without a map; depth:3 of 3 blocks is refused
    up front."""
    model = make_tiny_model(tmp_path, "llama", num_blocks=3)
    corpus = write_corpus(tmp_path / "calib.jsonl")
    work = tmp_path / "work"
    command = [sys.executable, "-m", "thanos", "prune-model", "--model", str(model), "--method", "thanos"]
    command += ["--sparsity", "depth:1", "--calibration", str(corpus), "--nsamples", "8", "--seqlen", "32"]
    command += ["--device", "cpu", "--workdir", str(work), "--keep", "all", "--out", str(tmp_path / "out")]
    run = subprocess.run(command, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    plan_file = next(work.glob("results/*/thanos_depth1/depth.json"))
    plan = json.loads(plan_file.read_text())
    stores = sorted(
        plan_file.parents[1].glob("chains/dense/inputs_*"), key=lambda p: int(p.stem.split("_")[1])
    )
    assert len(stores) == 4
    x, y = Activations(stores[1]).read(0, 8).float(), Activations(stores[2]).read(0, 8).float()
    influence = 1 - torch.nn.functional.cosine_similarity(x.flatten(0, 1), y.flatten(0, 1), dim=1).mean()
    assert abs(plan["scores"]["influence"][1] - float(influence)) < 1e-5
    replaced, every = plan["scores"]["replaced"], plan["replaced_on_every_window"]
    assert replaced[0] is None  # no block before block 0 to fold a map into
    assert replaced[1] is not None and replaced[2] is not None  # ranked on the first quarter of the windows
    lowest = min((1, 2), key=lambda b: every[str(b)])  # both shortlisted: fitted again on every window
    assert plan["metric"] == "replaced" and plan["removed"] == [lowest]
    (entry,) = plan["maps"]
    assert entry["folded_into"] == lowest - 1
    assert entry["error"] == every[str(lowest)] <= entry["error_map_alone"] < entry["error_without_map"]
    assert f"(removed block {lowest}; replaced by a linear map in block {lowest - 1})" in run.stderr
    assert json.loads((tmp_path / "out" / "config.json").read_text())["num_hidden_layers"] == 2
    assert json.loads((tmp_path / "out" / "pruning_report.json").read_text())["depth"] == plan
    here = command[3:]  # the reruns in this process (thanos_here), as a new process runs them
    again = thanos_here(*here, cwd=tmp_path)
    assert again.returncode == 0 and "nothing to do" in again.stderr
    plain = thanos_here(*here[:-1], tmp_path / "plain", "--no-block-map", cwd=tmp_path)
    assert plain.returncode == 0, plain.stderr[-3000:]
    plain_plan = json.loads(next(work.glob("results/*/thanos_depth1_nomap/depth.json")).read_text())
    assert "--no-block-map" in (tmp_path / "plain" / "README.md").read_text()  # its card's command
    assert "--no-block-map" not in (tmp_path / "out" / "README.md").read_text()
    assert "## Achieved sparsity per layer type" not in (tmp_path / "out" / "README.md").read_text()  # none
    by_influence = min(range(3), key=lambda b: (plan["scores"]["influence"][b], -b))
    assert plain_plan["metric"] == "influence" and plain_plan["removed"] == [by_influence]
    assert "maps" not in plain_plan
    refused = thanos_here(*here[:6], "depth:3", *here[7:-1], tmp_path / "out3", cwd=tmp_path)
    assert (
        refused.returncode != 0 and "removes 3 of the model's 3 blocks, which leaves none" in refused.stderr
    )


def test_prune_model_combines_depth_and_neurons(tmp_path: Path, cli: Any) -> None:
    """``--sparsity neurons:0.3+depth:1``: depth runs first, then neurons on the shortened model; the output
    has both (fewer blocks, a narrower MLP) and loads; a part that removes no structure is refused. The dense
    perplexity printed and on the card is the input model's (not the model the last part read), the number
    ``thanos perplexity`` gives it."""
    from thanos import prune_model

    model = make_tiny_model(tmp_path, "llama", num_blocks=3, intermediate_size=96)
    corpus = write_corpus(tmp_path / "calib.jsonl")
    ppl = write_corpus(tmp_path / "ppl.txt", kind="txt", seed=7)
    options = {"calibration": str(corpus), "nsamples": 8, "seqlen": 32, "device": "cpu"}
    options |= {"evaluate": "ppl", "ppl_source": ppl, "ppl_seqlen": 16}
    stream = io.StringIO()
    report = prune_model(
        model, "thanos", "neurons:0.3+depth:1", out=tmp_path / "out", workdir=tmp_path / "work",
        stream=stream, **options,
    )  # fmt: skip
    measured = cli(
        "perplexity", "--model", model, "--source", ppl, "--seqlen", 16, "--out", tmp_path / "dense.json",
        cwd=tmp_path,
    )  # fmt: skip
    assert measured.returncode == 0, measured.stderr
    dense = json.loads((tmp_path / "dense.json").read_text())["ppl"]
    assert report["evaluation"]["dense"]["perplexity"]["ppl"] == dense  # the same number, every digit
    assert f"; the dense model {dense:.2f})" in stream.getvalue()
    assert f"; the dense model: {dense:.2f})" in (tmp_path / "out" / "README.md").read_text()
    assert [part["sparsity"] for part in report["parts"]] == ["depth:1", "neurons:0.3"]
    assert report["parts"][1]["model"] == report["parts"][0]["out"]
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert (
        config["num_hidden_layers"] == 2 and config["intermediate_size"] == 64
    )  # 96 at 0.3, multiples of 16
    intermediates = f"{model.name}-combined"  # listed under the input model's name
    assert sorted(p.name for p in (tmp_path / "work").iterdir()) == [
        intermediates,
        "part1",
        "part2-neurons0.3",
    ]
    from thanos.runner.workdirs import scan

    listed = {w.path.name: w for w in scan(tmp_path / "work")}  # the intermediate models' directory too
    assert listed[intermediates].recipes == ["depth:1+neurons:0.3"]
    # --keep needed: --out is the model, the intermediate one is gone; the same call again does nothing
    assert not Path(report["parts"][0]["out"]).exists()
    assert not list((tmp_path / "work" / intermediates).rglob("*.safetensors"))
    again = prune_model(
        model, "thanos", "neurons:0.3+depth:1", out=tmp_path / "out", workdir=tmp_path / "work", **options
    )
    assert again["parts"] == report["parts"] and not Path(report["parts"][0]["out"]).exists()
    with torch.inference_mode():
        AutoModelForCausalLM.from_pretrained(tmp_path / "out")(torch.tensor([[5, 6, 7]]))
    card = (tmp_path / "out" / "README.md").read_text()
    assert f"the last part of the combined recipe `depth:1+neurons:0.3` on `{model.name}`" in card
    assert f"--model {model.name} --method thanos --sparsity depth:1+neurons:0.3" in card
    assert card.startswith("---") and f"# {model.name}: Thanos `depth:1+neurons:0.3`" in card
    assert f"| base model | `{model.name}` (" in card and str(tmp_path) not in card  # no local path
    facts = json.loads((tmp_path / "out" / "sparsity.json").read_text())
    before, after = stored_parameters(model), stored_parameters(tmp_path / "out")  # counted on the weights
    assert facts["structure"] == "depth+neurons" and facts["combined"] == {
        "sparsity": "depth:1+neurons:0.3",
        "parts": ["depth:1", "neurons:0.3"],
        "base_model": model.name,
        "parameters": {"base_model": before, "written": after},
    }
    assert (before, after) == (
        report["parts"][0]["compact"]["parameters"]["original"],
        report["compact"]["parameters"]["kept"],
    )
    assert f"Against the base model: {after:,} of {before:,} parameters" in card
    dry = prune_model(
        model, "thanos", "heads:0.5+neurons:0.3", out=tmp_path / "dry-out", workdir=tmp_path / "dry",
        dry_run=True, **options,
    )  # fmt: skip
    assert [part["sparsity"] for part in dry["parts"]] == ["heads:0.5"]  # the next parts need its model
    assert not (tmp_path / "dry").exists() and not (tmp_path / "dry-out").exists()
    with pytest.raises(ValueError, match=r"a part is empty; join depth:K, heads:P"):
        prune_model(model, "thanos", "depth:1+", out=tmp_path / "out2", **options)
    with pytest.raises(ValueError, match=r"0.5.*cannot be combined; a combined recipe joins depth:K"):
        prune_model(model, "thanos", "0.5+depth:1", out=tmp_path / "out2", **options)
    with pytest.raises(ValueError, match="each of depth, heads, neurons and vocab at most once"):
        prune_model(model, "thanos", "heads:0.5+kv_heads:0.5", out=tmp_path / "out2", **options)


def test_combined_parts_with_other_options_write_other_intermediate_models(tmp_path: Path) -> None:
    """The intermediate model of a combined recipe's first part is keyed by its options: the same recipe
    with and without the maps (``--no-block-map``) writes two, so that running one never redoes or replaces
    the other's; the same request twice, one."""
    from thanos.runner.combined import _part
    from thanos.runner.request import build_request
    from thanos.stages.engine import Calibration

    calibration = Calibration("c4", 128, 2048)

    def intermediate(**options) -> Path:
        request = build_request("base", "thanos", "depth:1+neurons:0.3", options | {"out": "out"})
        return Path(_part(request, 0, "base", (tmp_path, calibration), "base", []).output.out)

    assert intermediate() == intermediate(block_map=True)
    assert intermediate(block_map=False) != intermediate()
    assert intermediate(block_map=False).name == intermediate().name == "depth1"
    # the card's command rebuilds the model: the combined recipe's depth part without maps says so
    last = build_request("base", "thanos", "depth:1+neurons:0.3", {"out": "out"}).recipes[-1]
    for block_map, flag in ((False, True), (True, False)):
        part = {"sparsity": "depth:1", "block_map": block_map}
        combined = {"sparsity": "depth:1+neurons:0.3", "base_model": "base", "parts": [part]}
        report = {"recipe": last.to_dict(), "model": {"path": "part1"}, "workflow": {"combined": combined}}
        command = reproduce_command(report, "out")
        assert command.startswith("thanos prune-model --model base ")
        assert ("--no-block-map" in command) is flag, command


def test_renumbered_blocks_never_overwrite_each_other(tmp_path: Path) -> None:
    """12 blocks without block 3: block 10 becomes block 9 while the checkpoint's own block 9 (sorted after
    block 10 by name) becomes block 8; every block is written once, and the logits are those of the skip."""
    model = build_tiny_model(tmp_path / "llama12", num_blocks=12, max_position_embeddings=64, jitter=0.1)
    depth = tmp_path / "depth.json"
    kept = [b for b in range(12) if b != 3]
    plan = {"num_blocks": 12, "metric": "influence", "scores": {"influence": [0.0] * 12}}
    depth.write_text(json.dumps(plan | {"removed": [3], "kept": kept}))
    assemble(model, tmp_path / "unused", Recipe("d", "magnitude", "depth:1"), tmp_path / "out", depth=depth)
    ids = torch.randint(4, 120, (2, 24), generator=torch.Generator().manual_seed(2))
    with torch.inference_mode():
        short = AutoModelForCausalLM.from_pretrained(tmp_path / "out", dtype=torch.float32).eval()(ids).logits
    assert (short - skipped_logits(model, [3], ids)).abs().max() <= 1e-5


def test_the_workflow_config_takes_depth_and_combined_recipes() -> None:
    """A ``depth:K`` recipe is a recipe of the workflow, a combined pattern a ``Combined`` whose parts are the
    recipes ``thanos prune-model`` runs, in their order (a vocabulary its last part); a vocabulary alone and a
    size are ``OneCommand`` recipes
    (one ``thanos prune-model`` job); what the workflow still cannot run is refused at the config check naming
    the key, the reason and ``thanos prune-model``."""
    from dataclasses import replace

    from thanos.recipes.fields import ConfigError
    from thanos.runner.request import build_request
    from thanos.workflow.config import Combined, OneCommand, expand

    depth = expand({"recipes": {"d": {"method": "thanos", "sparsity": "depth:4"}}})["d"]
    assert isinstance(depth, Recipe) and depth.sparsity.kind == "depth" and depth.block_map
    grid = {"recipe_grid": [{"methods": ["wanda"], "sparsities": ["neurons:0.3+depth:1"]}]}
    (name, combined), *_ = expand(grid | {"chain": "dense"}).items()
    assert name == "wanda_depth1+n30" and isinstance(combined, Combined)
    assert combined.sparsity == "depth:1+neurons:0.3" and combined.needs_calibration
    assert [part.to_dict() for part in combined.parts] == [
        replace(part, chain="dense").to_dict()
        for part in build_request("m", "wanda", "depth:1+neurons:0.3", {"out": "o"}).recipes
    ]
    named = {"c": {"method": "thanos", "sparsity": "depth:1+heads:0.25", "block_map": False}}
    assert expand({"recipes": named})["c"].parts[0].block_map is False
    # a vocabulary alone and a size: one `thanos prune-model` job each; a vocabulary ending a combined
    # pattern is its last part job
    for sparsity in ("vocab:100", "params:0.3"):
        one = expand({"recipes": {"c": {"method": "thanos", "sparsity": sparsity}}})["c"]
        assert isinstance(one, OneCommand) and one.flags() == ["--method", "thanos", "--sparsity", sparsity]
    ending = expand({"recipes": {"c": {"method": "thanos", "sparsity": "depth:1+vocab:100"}}})["c"]
    assert isinstance(ending, Combined) and [str(part.sparsity) for part in ending.parts] == [
        "depth:1",
        "vocab:100",
    ]
    refused = {
        r"recipes\.c: sparsity='0\.5\+depth:1': unstructured:0\.5 cannot be combined": ("0.5+depth:1", {}),
        r"recipes\.c: profile=owl: OWL sets an unstructured sparsity per block, and params:0\.3 removes": (
            "params:0.3",
            {"profile": "owl"},
        ),
    }
    for message, (sparsity, options) in refused.items():
        with pytest.raises(ConfigError, match=message):
            expand({"recipes": {"c": {"method": "thanos", "sparsity": sparsity} | options}})
    distilled = {"method": "thanos", "sparsity": "depth:1+neurons:0.3", "distill": {"tokens": 4096}}
    with pytest.raises(ConfigError, match=r"recipes\.c\.distill: a combined recipe .*`thanos prune-model"):
        expand({"recipes": {"c": distilled}})


@pytest.mark.slow
def test_llama_cpp_converts_a_model_with_fewer_blocks(tmp_path: Path) -> None:
    """llama.cpp's converter reads the shortened model with its block replaced by a map: its block count is
    the kept one, every block there, and the folded output projection is the written one."""
    from safetensors.torch import load_file

    from thanos.models import ModelHandle
    from thanos.stages.depth.blocks import depth_plan

    model = build_tiny_model(tmp_path / "tiny-llama", hidden_size=64, num_blocks=3, tokenizer="llama")
    ids = torch.randint(4, 120, (8, 24), generator=torch.Generator().manual_seed(0))
    stores = dense_stores(model, ids, tmp_path)
    depth = tmp_path / "r" / "depth.json"
    plan = depth_plan(stores, parse_sparsity("depth:1"), depth, model=ModelHandle.open(model), block_map=True)
    (entry,) = plan["maps"]
    before = entry["folded_into"]
    assemble(model, tmp_path / "unused", Recipe("d", "magnitude", "depth:1"), tmp_path / "short", depth=depth)
    name = f"model.layers.{before}.mlp.down_proj.weight"
    written = load_file(str(tmp_path / "short" / "model.safetensors"))[name]
    assert not torch.equal(written, load_file(str(model / "model.safetensors"))[name])  # the map is in it
    with converted_to_gguf(tmp_path / "short", tmp_path / "short.gguf") as (_, reader):
        field = reader.fields["llama.block_count"]
        assert int(field.parts[field.data[0]][0]) == 2
        tensors = {t.name: t for t in reader.tensors}
    assert "blk.1.attn_q.weight" in tensors and "blk.2.attn_q.weight" not in tensors
    down = torch.from_numpy(tensors[f"blk.{before}.ffn_down.weight"].data.copy()).reshape(written.shape)
    assert torch.allclose(down.float(), written.float(), rtol=1e-2, atol=1e-3)


@pytest.mark.parametrize("model_type", [t for t in HEADS_ROWS if t not in NO_NEURONS])
def test_depth_heads_and_neurons_combined_on_the_dense_rows(tmp_path: Path, model_type: str) -> None:
    """Every dense row where all three structures come out: a block removed, then heads, then neurons, each
    on the model the previous step wrote (as a combined recipe runs them); the last step's compact model
    gives the logits of its zero-filled one, and its config holds all three changes."""
    model = build_tiny_model(
        tmp_path / model_type, model_type, num_blocks=3, max_position_embeddings=64, jitter=0.1,
        **OPTIONS.get(model_type, {}),
    )  # fmt: skip
    depth = tmp_path / "depth.json"
    plan = {"num_blocks": 3, "metric": "influence", "scores": {"influence": [0.0] * 3}}
    depth.write_text(json.dumps(plan | {"removed": [1], "kept": [0, 2]}))
    short = tmp_path / "short"
    assemble(model, tmp_path / "unused", Recipe("d", "magnitude", "depth:1"), short, depth=depth)
    prune_with_magnitude(short, tmp_path / "heads", "heads:0.5")
    fewer_heads = tmp_path / "fewer-heads"
    assemble(short, tmp_path / "heads", Recipe("h", "magnitude", "heads:0.5"), fewer_heads)
    prune_with_magnitude(fewer_heads, tmp_path / "neurons", "neurons:0.3")
    recipe = {"name": "n", "method": "magnitude", "sparsity": "neurons:0.3"}
    assemble(fewer_heads, tmp_path / "neurons", Recipe.from_dict(recipe), tmp_path / "all")
    assemble(
        fewer_heads, tmp_path / "neurons", Recipe.from_dict(recipe | {"compact": False}), tmp_path / "zeros"
    )
    original = json.loads((model / "config.json").read_text())
    config = json.loads((tmp_path / "all" / "config.json").read_text())
    assert config["num_hidden_layers"] == 2
    assert config["num_attention_heads"] == original["num_attention_heads"] // 2
    width = next(key for key in ("intermediate_size", "ffn_dim") if key in original)
    assert config[width] < original[width]
    ids = torch.randint(4, 120, (2, 24), generator=torch.Generator().manual_seed(4))
    assert (logits(tmp_path / "all", ids) - logits(tmp_path / "zeros", ids)).abs().max() <= 1e-5
    assert stored_parameters(tmp_path / "all") < stored_parameters(short) < stored_parameters(model)
