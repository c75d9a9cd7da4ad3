"""Removed blocks replaced by a fitted linear map (``depth:k`` with ``block_map``): the fit is the
least-squares optimum, the map folds into the output projection exactly, every row of the tested models
written with it gives the logits of the in-memory model with the map applied between the kept blocks (or,
where no map can be folded, says why and gives those of the blocks skipped), and the refusals are named."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from helpers.models import (
    OPTIONS,
    dense_stores,
    skipped_logits,
)
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from thanos.demo.tested_models import TESTED_MODELS
from thanos.demo.tiny import build_tiny_model
from thanos.models import ModelHandle
from thanos.models.generic import find_layers
from thanos.models.neurons import mlp_layout
from thanos.pruning.block_map import MapFit, fold
from thanos.pruning.sparsity import parse_sparsity
from thanos.recipes.fields import ConfigError
from thanos.recipes.recipe import Recipe
from thanos.stages.assemble import assemble
from thanos.stages.depth.blocks import depth_plan
from thanos.stages.depth.maps import NO_BLOCK_BEFORE, NO_OUTPUT_PROJECTION, REFIT_DAMP, runs
from thanos.stages.model_info import model_info

POST_MLP_NORM = ("gemma2", "gemma3_text", "olmo2")  # a norm between the MLP and the residual: no fold
MIXTURES = (
    "mixtral",
    "qwen3_moe",
    "gpt_oss",
    "granitemoe",
    "glm4_moe",
    "deepseek_v3",
    "qwen3_next",
)


def outlier_features(tokens: int, width: int, seed: int) -> torch.Tensor:
    """Activations as LLMs make them: a few features 10-100x larger than the rest."""
    generator = torch.Generator().manual_seed(seed)
    scale = torch.ones(width)
    scale[torch.randperm(width, generator=generator)[:3]] = torch.tensor([10.0, 40.0, 100.0])
    return torch.randn(tokens, width, generator=generator) * scale


def test_the_fit_is_the_least_squares_optimum_and_its_error_is_exact() -> None:
    d, tokens = 24, 300
    M = outlier_features(tokens, d, 0)
    Y = outlier_features(tokens, d, 1)
    X = (
        Y
        + M @ torch.randn(d, d, generator=torch.Generator().manual_seed(2))
        + 0.1 * outlier_features(tokens, d, 3)
    )
    fit = MapFit(d)
    for part in range(3):  # accumulated in batches of tokens
        rows = slice(100 * part, 100 * (part + 1))
        fit.add(M[rows], Y[rows], X[rows])
    T = fit.solve()
    reference = torch.linalg.lstsq(M.double(), (X - Y).double()).solution
    assert torch.allclose(T.double(), reference, rtol=1e-4, atol=1e-5)
    residual = (M.double() @ T.double() + Y.double() - X.double()).square().sum() / X.double().square().sum()
    assert abs(fit.error(T) - float(residual)) <= 1e-6
    assert fit.error(T) < fit.identity_error()  # the map does better than leaving the blocks out
    W, b = torch.randn(d, 40), torch.randn(d)
    A = torch.randn(7, 40)
    folded, folded_bias = fold(W, T, b)
    assert torch.allclose(A @ folded.T + folded_bias, (A @ W.T + b) @ T, atol=1e-4)
    with pytest.raises(ValueError, match="no token was added"):
        MapFit(4).solve()


def test_a_map_fitted_on_fewer_tokens_than_features_stays_near_leaving_the_blocks_out() -> None:
    """With fewer tokens than features the least-squares map is not determined: the one ``solve`` finds
    maps the features the tokens never spanned anywhere (SmolLM2, ``depth:2`` on 512 tokens: perplexity
    5,132); ``solve_where_determined`` pulls them toward the identity (the blocks left out), so that on
    tokens it was not fitted on it does better than both; with enough tokens it is ``solve``, bit for bit."""
    d = 32
    T_true = torch.eye(d) + 0.05 * torch.randn(d, d, generator=torch.Generator().manual_seed(4))
    M = torch.randn(400, d, generator=torch.Generator().manual_seed(5)) * torch.linspace(0.5, 3, d)
    Y = outlier_features(400, d, 6)
    X = Y + M @ T_true + 0.01 * outlier_features(400, d, 7)
    few, unseen = slice(0, 20), slice(200, 400)  # 20 tokens of 32 features; judged on 200 others
    fit = MapFit(d)
    fit.add(M[few], Y[few], X[few])
    judge = MapFit(d)
    judge.add(M[unseen], Y[unseen], X[unseen])
    ridge = fit.solve_where_determined(torch.eye(d), REFIT_DAMP)
    assert judge.error(ridge) < judge.identity_error() < judge.error(fit.solve())
    enough = MapFit(d)
    enough.add(M[:200], Y[:200], X[:200])
    assert torch.equal(enough.solve_where_determined(torch.eye(d), REFIT_DAMP), enough.solve())


def test_runs_group_consecutive_blocks() -> None:
    assert runs([5, 1, 2, 7, 8, 9]) == [(1, 2), (5, 5), (7, 9)]
    assert runs([]) == []


# every dense row, and two mixtures of experts (routed experts only; dense first blocks) for the refusal
ROWS = [t for t in TESTED_MODELS if t not in MIXTURES] + ["mixtral", "deepseek_v3"]


@pytest.mark.parametrize("model_type", ROWS)
def test_the_written_model_is_the_model_with_the_map_between_its_kept_blocks(
    tmp_path: Path, model_type: str
) -> None:
    """Every row of the tested models, two of four blocks removed: with a map, the written model (same
    architecture, fewer blocks, parameters no more than without the map) gives the logits of the dense model
    with the removed blocks skipped and the map applied to the MLP output of the block before them (fp32,
    1e-5); the map is the least-squares optimum on the stored activations. Where no map can be folded
    (a mixture of experts, a norm after the MLP), depth.json says why and the blocks are simply left out."""
    blocks = 4
    model = build_tiny_model(
        tmp_path / model_type, model_type, num_blocks=blocks, max_position_embeddings=64, jitter=0.1,
        **OPTIONS.get(model_type, {}),
    )  # fmt: skip
    ids = torch.randint(4, 120, (12, 24), generator=torch.Generator().manual_seed(0))
    stores = dense_stores(model, ids, tmp_path)
    handle = ModelHandle.open(model)
    plan = depth_plan(
        stores, parse_sparsity("depth:2"), tmp_path / "r" / "depth.json", "replaced", handle, True
    )
    info = tmp_path / "model_info.json"
    model_info(model, info)
    recipe = Recipe("d", "thanos", "depth:2")
    assemble(model, tmp_path / "unused", recipe, tmp_path / "out", info, depth=tmp_path / "r" / "depth.json")
    test_ids = torch.randint(4, 120, (2, 24), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        short = (
            AutoModelForCausalLM.from_pretrained(tmp_path / "out", dtype=torch.float32)
            .eval()(test_ids)
            .logits
        )
    if model_type in MIXTURES:
        assert plan["metric"] == "influence"  # no map to score runs by: single blocks chosen instead
        assert all(e["map"] is None for e in plan["maps"])
        assert {e["why"] for e in plan["maps"]} <= {NO_BLOCK_BEFORE, NO_OUTPUT_PROJECTION}
        assert NO_OUTPUT_PROJECTION in {e["why"] for e in plan["maps"]}
        assert (short - skipped_logits(model, plan["removed"], test_ids)).abs().max() <= 1e-5
        return
    if model_type in POST_MLP_NORM:  # no map folds: the blocks are chosen by influence and left out
        assert plan["metric"] == "influence" and all(e["map"] is None for e in plan["maps"])
        assert any("not its MLP output plus the rest" in e["why"] for e in plan["maps"])
        assert (short - skipped_logits(model, plan["removed"], test_ids)).abs().max() <= 1e-5
        return
    (entry,) = plan["maps"]  # one run of two blocks, after block 0
    layer = mlp_layout(handle.layout, handle.checkpoint).output
    before = entry["folded_into"]
    assert before == plan["removed"][0] - 1
    assert entry["error"] <= entry["error_map_alone"] < entry["error_without_map"]
    T = load_file(str(tmp_path / "r" / entry["map"]))["map"]
    files = {name.rpartition(".")[2]: load_file(str(tmp_path / "r" / f))["weight"] for name, f in
             entry["tensors"].items()}  # fmt: skip
    W, b = files["weight"], files.get("bias")
    reference = skipped_logits(model, plan["removed"], test_ids, layer=layer, projections={before: (W, b)})
    assert (short - reference).abs().max() <= 1e-5
    assert not torch.allclose(reference, skipped_logits(model, plan["removed"], test_ids), atol=1e-3)
    # the least-squares optima on the stored activations, from the block's own forward on its inputs: the
    # map T from its MLP output M, the projection from the neurons' activations A toward T folded in
    dense = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).eval()
    _, layers = find_layers(dense, blocks)
    seen: dict[str, torch.Tensor] = {}

    def keep(name: str):
        def hook(module: torch.nn.Module, args: tuple, out: object) -> None:
            seen[name] = out[0] if isinstance(out, tuple) else out
            seen[f"{name} input"] = args[0]

        return hook

    linear = layers[before].get_submodule(layer)
    linear.register_forward_hook(keep("M"))
    layers[before].register_forward_hook(keep("out"))
    with torch.inference_mode():
        dense(ids)
    M = seen["M"].reshape(seen["out"].shape)  # OPT runs its MLP on (tokens, hidden)
    M, Y = M.flatten(0, 1), (seen["out"] - M).flatten(0, 1)
    A = seen["M input"].reshape(M.shape[0], -1)
    from thanos.data.storage import Activations

    X = Activations(stores[plan["removed"][-1] + 1]).read(0, 12).flatten(0, 1)
    optimum = torch.linalg.lstsq(M.double(), (X - Y).double()).solution
    assert torch.allclose(T.double(), optimum, rtol=1e-3, atol=1e-4 * float(optimum.abs().max()))
    # ridge least squares as one stacked system: [F; sqrt(lambda) I] S = [X - Y; sqrt(lambda) S_T]
    folded = T.double().T @ linear.weight.detach().double()
    S_T = folded.T
    F = A.double()
    if linear.bias is not None:
        F = torch.cat([F, torch.ones(F.shape[0], 1, dtype=F.dtype)], dim=1)
        S_T = torch.cat([S_T, (T.double().T @ linear.bias.detach().double())[None]])
    lam = REFIT_DAMP * float((F.T @ F).diagonal().mean())
    stacked = torch.cat([F, lam**0.5 * torch.eye(F.shape[1], dtype=F.dtype)])
    target = torch.cat([(X - Y).double(), lam**0.5 * S_T])
    ridge = torch.linalg.lstsq(stacked, target).solution
    written = torch.cat([W.double().T, b.double()[None]]) if b is not None else W.double().T
    assert torch.allclose(written, ridge, rtol=1e-3, atol=1e-4 * float(ridge.abs().max()))


def test_a_run_from_block_0_and_the_option_on_other_recipes_are_named(tmp_path: Path) -> None:
    """A run that starts at block 0 has no block to fold a map into: left out, and depth.json says so; the
    option is refused, named, on recipes that remove no block and when not a boolean."""
    from thanos.stages.depth.maps import replace_runs

    model = build_tiny_model(tmp_path / "llama", num_blocks=3, max_position_embeddings=64, jitter=0.1)
    ids = torch.randint(4, 120, (8, 24), generator=torch.Generator().manual_seed(0))
    stores = dense_stores(model, ids, tmp_path)
    (entry,) = replace_runs(ModelHandle.open(model), stores, [0], tmp_path / "maps")
    assert entry == {"blocks": [0, 0], "map": None, "why": NO_BLOCK_BEFORE}
    assert not (tmp_path / "maps").exists()
    with pytest.raises(ConfigError, match="block_map: only depth:k recipes replace removed blocks by maps"):
        Recipe("r", "thanos", "neurons:0.3", block_map=True)
    with pytest.raises(ConfigError, match="block_map: expected true or false, got 'yes'"):
        Recipe("r", "thanos", "depth:1", block_map="yes")
    assert Recipe(None, "thanos", "depth:1", block_map=False).name == "thanos_depth1_nomap"
    assert Recipe(None, "thanos", "depth:1").block_map is True
    assert "block_map" not in Recipe(None, "thanos", "2:4").to_dict()


def test_both_fronts_name_the_option_on_a_recipe_without_blocks(tmp_path: Path, cli: Any) -> None:
    """``--no-block-map`` / ``block_map=False`` on a recipe that removes no block: refused before anything
    runs, in each front's words, and nothing written."""
    from thanos import prune_model

    with pytest.raises(
        ValueError, match=r"^block_map=False: only depth:k recipes replace removed blocks by maps"
    ):
        prune_model(tmp_path / "model", "thanos", "neurons:0.3", out=tmp_path / "out", block_map=False)
    run = cli(
        "prune-model", "--model", tmp_path / "model", "--method", "thanos", "--sparsity", "2:4",
        "--out", tmp_path / "out", "--no-block-map", cwd=tmp_path,
    )  # fmt: skip
    assert run.returncode != 0
    assert "--no-block-map: only depth:k recipes replace removed blocks by maps, not 2:4" in run.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_runs_are_ranked_on_the_first_windows_and_the_shortlist_fitted_on_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``replaced``: every run's map fitted alone on the first windows ranks the runs; the best few are
    fitted again on every window, their projections refitted, and the lowest of those errors wins, its map
    and projection the ones fitted on every window."""
    import thanos.stages.depth.maps as block_maps

    monkeypatch.setattr(block_maps, "PRESELECT_SAMPLES", 3)
    monkeypatch.setattr(block_maps, "SHORTLIST", 2)
    model = build_tiny_model(tmp_path / "llama", num_blocks=5, max_position_embeddings=64, jitter=0.1)
    ids = torch.randint(4, 120, (10, 24), generator=torch.Generator().manual_seed(3))
    stores = dense_stores(model, ids, tmp_path)
    handle = ModelHandle.open(model)
    layer = block_maps.output_layer(handle)
    scores, errors, best = block_maps.run_candidates(handle, stores, 2)
    quick = {
        first: block_maps.fit_run(handle, stores, first, first + 1, layer, nsamples=3, refit=False)
        for first in (1, 2, 3)
    }
    assert scores == [None, quick[1].error, quick[2].error, quick[3].error, None]
    shortlist = sorted((1, 2, 3), key=lambda first: (scores[first], -first))[:2]
    full = {first: block_maps.fit_run(handle, stores, first, first + 1, layer) for first in shortlist}
    assert errors == {first: full[first].error for first in sorted(shortlist)}
    winner = min(shortlist, key=lambda first: (full[first].error, -first))
    assert best is not None and (best.first, best.last) == (winner, winner + 1)
    assert torch.equal(best.T, full[winner].T) and not torch.equal(best.T, quick[winner].T)
    assert torch.equal(best.weight, full[winner].weight) and best.error <= best.error_map
    assert all(run.error == run.error_map for run in quick.values())  # the map alone


def test_a_cost_tables_depth_points_run_each_kept_block_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While a size's cost table keeps them (``thanos.pruning.kept``), ``depth:1`` .. ``depth:3`` run each
    kept block on each chunk of windows once, its passes read by the next points, and every score, error
    and fitted run is the one each point computes alone, bit for bit; the table measured, nothing is
    kept."""
    from collections import Counter

    import thanos.stages.depth.maps as block_maps
    from thanos.pruning import kept

    monkeypatch.setattr(block_maps, "PRESELECT_SAMPLES", 3)
    model = build_tiny_model(tmp_path / "llama", num_blocks=5, max_position_embeddings=64, jitter=0.1)
    ids = torch.randint(4, 120, (10, 24), generator=torch.Generator().manual_seed(3))
    stores = dense_stores(model, ids, tmp_path)
    handle = ModelHandle.open(model)
    passes: list[tuple[int, float]] = []  # (block, its inputs' sum): a block run on a chunk of windows
    original = block_maps._run

    def counted(h: Any, module: Any, linear: Any, block: int, x: torch.Tensor) -> Any:
        passes.append((block, round(float(x.sum()), 2)))
        return original(h, module, linear, block, x)

    monkeypatch.setattr(block_maps, "_run", counted)
    alone = [block_maps.run_candidates(handle, stores, k) for k in (1, 2, 3)]
    runs_alone, passes[:] = len(passes), []
    with kept.keeping():
        shared = [block_maps.run_candidates(handle, stores, k) for k in (1, 2, 3)]
        assert block_maps._passes.values
    assert not block_maps._passes.values
    for (scores, errors, best), (kept_scores, kept_errors, kept_best) in zip(alone, shared, strict=True):
        assert kept_scores == scores and kept_errors == errors
        assert best is not None and kept_best is not None
        assert (kept_best.first, kept_best.last) == (best.first, best.last)
        assert torch.equal(kept_best.T, best.T) and torch.equal(kept_best.weight, best.weight)
    counts = Counter(passes)
    fold_check = passes[1]  # block 0 on its first 2 windows, after the preselection's first pass
    assert counts.pop(fold_check) == 3  # checked once for each k (not a pass the fits share)
    assert set(counts.values()) == {1} and len(passes) < runs_alone, (passes, runs_alone)


def test_several_sizes_writes_share_the_block_scores_and_passes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Several sizes in one command keep the block scores and the kept blocks' passes of their writes'
    depth parts for each other (``thanos.runner.sizes.WRITES_SHARE``), through a later size's table (read,
    its own scope ended): ``depth:1`` then ``depth:2`` score the blocks once and run each kept block's pass
    once, and write the plan each writes alone, bit for bit (its maps' files too)."""
    import thanos.stages.depth.blocks as blocks
    import thanos.stages.depth.maps as block_maps
    from thanos.pruning import kept
    from thanos.runner.sizes import WRITES_SHARE

    model = build_tiny_model(tmp_path / "llama", num_blocks=5, max_position_embeddings=64, jitter=0.1)
    ids = torch.randint(4, 120, (10, 24), generator=torch.Generator().manual_seed(4))
    stores = dense_stores(model, ids, tmp_path)
    handle = ModelHandle.open(model)
    scored, passes = [], []
    original_scores, original_run = blocks._scores_of, block_maps._run
    monkeypatch.setattr(blocks, "_scores_of", lambda *args: scored.append(1) or original_scores(*args))
    monkeypatch.setattr(block_maps, "_run", lambda *args: passes.append(1) or original_run(*args))

    def plans(where: str) -> list[tuple[dict, dict[str, bytes]]]:
        written = []
        for k in (1, 2):
            out = tmp_path / where / f"depth{k}" / "depth.json"
            plan = depth_plan(stores, parse_sparsity(f"depth:{k}"), out, model=handle, block_map=True)
            maps = {f.name: f.read_bytes() for f in (out.parent / blocks.MAPS_DIR).iterdir()}
            written.append((plan, maps))
            with kept.keeping():  # the next size's table, read from an earlier run: its scope ends at once
                pass
        return written

    alone = plans("alone")
    scored_alone, passes_alone, scored[:], passes[:] = len(scored), len(passes), [], []
    with kept.keeping(kinds=WRITES_SHARE):
        shared = plans("shared")
        assert block_maps._passes.values and blocks._scores.values
    assert not block_maps._passes.values and not blocks._scores.values
    assert shared == alone
    assert scored_alone == 2 and len(scored) == 1
    assert len(passes) < passes_alone, (len(passes), passes_alone)
