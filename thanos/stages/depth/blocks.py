"""Whole blocks removed (``depth:k``): which blocks, and the model written without them.

**Which.** Every block is scored on the calibration windows from the dense model's activations, the inputs of
block l and of block l + 1 (its output), which the dense chain stores anyway (``inputs_0 .. inputs_L``):

- ``influence`` (ShortGPT's block influence, Men et al. 2024): BI_l = 1 - E_t[cos(x_l,t, x_l+1,t)], how much
  the block turns the residual stream, averaged over every calibration token;
- ``relative``: E_t[||x_l+1,t - x_l,t|| / ||x_l,t||], how much it changes its length;
- ``replaced`` (with maps): every run of k consecutive blocks s .. s + k - 1 (s >= 1) by the relative error
  of the linear map fitted in its place (``thanos.stages.depth.maps``): how well the model without the run
  still writes the run's output, as ReplaceMe replaces one run. Every run is ranked on the first windows,
  the best few fitted again on all of them (``replaced_on_every_window`` in depth.json).

With maps (``block_map``, the default) the run of the lowest ``replaced`` error goes (``DEFAULT_METRIC``);
without, the k single blocks of the lowest influence (``DEFAULT_BLOCKS``; docs/structures.md compares them
on SmolLM2). ``depth.json`` holds the scores, the metric used, the removed and the kept blocks and the maps
(each run's map, the block it is folded into, its errors, or why none): an artifact of its own, read by the
assembly (which writes the folded weights), the report and the card.

**Written without them.** The kept blocks' tensors are renamed to consecutive block numbers, the removed
ones' left out; ``config.json`` gets ``num_hidden_layers`` and every per-block setting of the kept blocks:
lists with one entry per block (``layer_types``, ``no_rope_layers``, ...) keep the kept blocks' entries,
``mlp_only_layers`` is renumbered, ``first_k_dense_replace`` and ``max_window_layers`` count the kept blocks
below them. A period that the removal would break (``sliding_window_pattern`` without ``layer_types``,
``decoder_sparse_step``) is refused, and ``check_depth`` builds the shortened model on the meta device and
compares every kept block's parameters with the original's, so that a block is never given another
block's kind.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from thanos.data.storage import Activations
from thanos.files.atomic import write_json
from thanos.pruning import kept
from thanos.pruning.sparsity import Sparsity, depth_count
from thanos.stages.compact import Compaction

if TYPE_CHECKING:
    from thanos.models import ModelHandle

log = logging.getLogger(__name__)

METRICS = ("influence", "relative", "replaced")
DEFAULT_BLOCKS = "influence"  # the metric of single blocks, where no map can be fitted
DEFAULT_METRIC = "replaced"
MAPS_DIR = "depth_maps"
BLOCKS_KEY = "num_hidden_layers"
# per-block settings given as a period or a count: what the kept blocks' setting becomes, or None: refused
PERIODIC = ("sliding_window_pattern", "decoder_sparse_step", "moe_layer_freq", "interleave_moe_layer_step")


class DepthError(ValueError):
    """The model's blocks cannot be removed (the message names the model type and why)."""


def _refuse(model_type: str, why: str) -> DepthError:
    return DepthError(f"model_type {model_type!r}: cannot remove whole blocks ({why})")


# the scores a size's depth points and the depth parts of several sizes' writes read from the same stores
# (``thanos.pruning.kept``; SmolLM2-135M on 64 windows: 4 s a run)
_scores = kept.Kept(kept.BLOCK_SCORES, lambda scores: 16 * sum(map(len, scores.values())))


def block_scores(stores: Sequence[str | Path], samples: int = 4) -> dict[str, list[float]]:
    """``influence`` and ``relative`` for blocks 0..L-1 from the dense activation stores ``inputs_0 ..
    inputs_L`` (L + 1 stores), a few samples in memory at a time, in fp32 (those of the same stores as
    written, when a scope keeps them)."""
    key = (tuple(kept.as_written(store) for store in stores), samples)
    if (scores := _scores.get(key)) is not None:
        return {metric: list(values) for metric, values in scores.items()}
    scores = _scores_of(stores, samples)
    _scores.put(key, {metric: list(values) for metric, values in scores.items()}, _scores.budget())
    return scores


def _scores_of(stores: Sequence[str | Path], samples: int) -> dict[str, list[float]]:
    scores: dict[str, list[float]] = {"influence": [], "relative": []}
    for before_path, after_path in zip(stores[:-1], stores[1:], strict=True):
        before, after = Activations(before_path), Activations(after_path)
        cos = rel = 0.0
        tokens = 0
        for start in range(0, before.nsamples, samples):
            stop = min(start + samples, before.nsamples)
            x = before.read(start, stop).float().flatten(0, 1)
            y = after.read(start, stop).float().flatten(0, 1)
            cos += float(torch.nn.functional.cosine_similarity(x, y, dim=1).sum(dtype=torch.float64))
            rel += float(((y - x).norm(dim=1) / x.norm(dim=1).clamp_min(1e-12)).sum(dtype=torch.float64))
            tokens += x.shape[0]
        scores["influence"].append(1 - cos / tokens)
        scores["relative"].append(rel / tokens)
    return scores


def choose(scores: Sequence[float], k: int) -> list[int]:
    """The ``k`` blocks of the lowest score (ties: the later block first, which leaves the early blocks that
    every later one builds on), in block order."""
    order = sorted(range(len(scores)), key=lambda block: (scores[block], -block))
    return sorted(order[:k])


def depth_plan(
    stores: Sequence[str | Path],
    pattern: Sparsity,
    out: str | Path,
    metric: str | None = None,
    model: ModelHandle | None = None,
    block_map: bool = False,
    device: str = "cpu",
) -> dict:
    """Score every block (``block_scores``), choose the removed ones by ``metric`` and write ``out``
    (depth.json): the scores, the metric, the removed and the kept blocks, and with ``block_map`` the
    maps that replace each run of removed blocks (``thanos.stages.depth.maps``, files in ``MAPS_DIR``
    beside ``out``). ``metric`` defaults to ``DEFAULT_METRIC`` with maps, ``DEFAULT_BLOCKS`` without;
    ``replaced`` and ``block_map`` need the ``model``, whose blocks run on ``device`` to fit the maps."""
    from thanos.stages.depth.maps import replace_runs, run_candidates

    metric = metric or (DEFAULT_METRIC if block_map else DEFAULT_BLOCKS)
    if metric not in METRICS:
        raise ValueError(f"unknown depth metric {metric!r}; choose one of {', '.join(METRICS)}")
    blocks = len(stores) - 1
    k = depth_count(pattern, blocks)
    scores: dict[str, list[float | None]] = dict(block_scores(stores))
    best, shortlist = None, {}
    if metric == "replaced":
        assert model is not None, "the replaced metric fits maps on the model's blocks"
        scores["replaced"], shortlist, best = run_candidates(model, stores, k, device)
        if best is None:
            log.info("depth: no map can be folded into this model's blocks; choosing by %s", DEFAULT_BLOCKS)
            metric = DEFAULT_BLOCKS
    removed = list(range(best.first, best.last + 1)) if best is not None else choose(scores[metric], k)
    plan: dict[str, Any] = {
        "pattern": str(pattern),
        "num_blocks": blocks,
        "metric": metric,
        "scores": scores,
        "removed": removed,
        "kept": [block for block in range(blocks) if block not in removed],
    }
    if best is not None:
        plan["replaced_on_every_window"] = {str(first): error for first, error in shortlist.items()}
    maps_dir = Path(out).parent / MAPS_DIR
    shutil.rmtree(maps_dir, ignore_errors=True)  # an earlier choice's maps
    if block_map:
        assert model is not None, "the maps are fitted on the model's blocks"
        plan["maps"] = replace_runs(model, stores, removed, maps_dir, best, device)
    write_json(Path(out), plan)
    log.info("depth: removing blocks %s of %d (lowest %s)", removed, blocks, metric)
    return plan


def map_tensors(depth_file: str | Path) -> dict[str, Path]:
    """The tensors a depth.json's maps replace: {original tensor name: file holding it as ``weight``}."""
    depth_file = Path(depth_file)
    choice = json.loads(depth_file.read_text())
    return {
        name: depth_file.parent / file
        for entry in choice.get("maps") or []
        for name, file in (entry.get("tensors") or {}).items()
    }


def shortened_config(model_type: str, config: dict[str, Any], kept: list[int]) -> dict[str, Any]:
    """``config`` (config.json's content) for the model of the ``kept`` blocks (other keys and their order
    unchanged); a per-block setting that cannot follow is refused, named."""
    blocks = config[BLOCKS_KEY]
    new = dict(config)
    new[BLOCKS_KEY] = len(kept)
    for key, value in config.items():
        if isinstance(value, list) and len(value) == blocks and key != BLOCKS_KEY:
            new[key] = [value[block] for block in kept]
    if isinstance(config.get("mlp_only_layers"), list):
        new["mlp_only_layers"] = [i for i, block in enumerate(kept) if block in config["mlp_only_layers"]]
    for key in ("first_k_dense_replace", "max_window_layers"):
        if isinstance(config.get(key), int):
            new[key] = sum(1 for block in kept if block < config[key])
    for key in PERIODIC:
        value = config.get(key)
        if (
            isinstance(value, int)
            and value > 1
            and not (key == "sliding_window_pattern" and "layer_types" in config)
        ):
            raise _refuse(model_type, f"its config's {key} = {value} is a period the removal would break")
    return new


def removal(
    model: str | Path | ModelHandle, names: list[str], depth_file: str | Path, model_info: Any = None
) -> Compaction:
    """The assembly's plan (``Compaction``: its ``rename``) to write ``model`` (a directory, hub id or
    handle; its tensor ``names``) without the blocks that ``depth_file`` (depth.json) removes."""
    from thanos.models import as_handle

    handle = as_handle(model, model_info)
    model_dir, layout, checkpoint = handle.path, handle.layout, handle.checkpoint
    choice = json.loads(Path(depth_file).read_text())
    if choice["num_blocks"] != layout.num_blocks:
        raise ValueError(
            f"{depth_file}: planned for {choice['num_blocks']} blocks, the model has {layout.num_blocks}"
        )
    kept = list(choice["kept"])
    prefixes = [layout.block_prefix(block) for block in range(layout.num_blocks)]
    new_prefix = {prefixes[block]: layout.block_prefix(i) for i, block in enumerate(kept)}
    rename = {}
    for name in names:
        prefix = next((p for p in prefixes if name.startswith(p)), None)
        if prefix is None:
            rename[name] = name
        elif prefix in new_prefix:
            rename[name] = new_prefix[prefix] + name[len(prefix) :]
    config = json.loads((Path(model_dir) / "config.json").read_text())
    settings = shortened_config(layout.model_type, config, kept)
    settings = {key: value for key, value in settings.items() if config.get(key) != value}
    plan = Compaction(settings, rename=rename)
    plan.facts = {
        "structure": "depth",
        "model_type": layout.model_type,
        "original_blocks": layout.num_blocks,
        "kept_blocks": len(kept),
        "removed_blocks": choice["removed"],
        "metric": choice["metric"],
        "scores": choice["scores"][choice["metric"]],
        "maps": [
            {key: entry[key] for key in ("blocks", "folded_into", "why") if key in entry}
            for entry in choice.get("maps") or []
        ],
        "parameters": plan.parameters(checkpoint, names),
    }
    return plan


def check_depth(model_dir: str | Path, model_type: str, pattern: Sparsity, blocks: int) -> None:
    """Refuse, before anything runs, a model that cannot lose ``pattern``'s blocks: the config's per-block
    settings (``shortened_config``), and the model built on the meta device without them, whose every block
    must have the parameters of the original block it stands for. Every choice of blocks is checked that
    changes which kind of block comes where at the ends: the first k and the last k removed."""
    from transformers import AutoConfig, AutoModelForCausalLM

    k = depth_count(pattern, blocks)
    original = json.loads((Path(model_dir) / "config.json").read_text())
    base = AutoConfig.from_pretrained(str(model_dir))
    with torch.device("meta"):
        reference = _block_shapes(AutoModelForCausalLM.from_config(base), blocks)
    choices = {tuple(range(k)), tuple(range(blocks - k, blocks))}
    for removed in choices:
        kept = [block for block in range(blocks) if block not in removed]
        settings = shortened_config(model_type, original, kept)
        config = AutoConfig.from_pretrained(str(model_dir))
        for key, value in settings.items():
            if original.get(key) != value:
                setattr(config, key, value)
        try:
            with torch.device("meta"):
                shapes = _block_shapes(AutoModelForCausalLM.from_config(config), len(kept))
        except Exception as err:  # noqa: BLE001 - whatever the model's code raises on the new config
            raise _refuse(
                model_type, f"its code refuses {len(kept)} blocks: {type(err).__name__}: {err}"
            ) from None
        for i, block in enumerate(kept):
            if shapes[i] != reference[block]:
                raise _refuse(
                    model_type,
                    f"without blocks {list(removed)} its block {i} is built unlike the original block "
                    f"{block} (a per-block setting of its config does not follow)",
                )


def _block_shapes(model: torch.nn.Module, blocks: int) -> list[dict[str, tuple[int, ...]]]:
    """Each block's parameter shapes by name within the block, from a model's state dict."""
    from thanos.models.generic import find_layers

    _, layers = find_layers(model, blocks)
    return [{name: tuple(t.shape) for name, t in layer.state_dict().items()} for layer in layers]
