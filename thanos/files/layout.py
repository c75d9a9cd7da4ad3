"""Where the workflow's files live under the results directory: the one description of the layout.

The Snakemake rules build every path from a ``Layout``; the ``chain`` stage finds its stores with
``reads_dense_chain`` and ``store_name``; the report skips ``NOT_MODELS``. docs/cli.md ("Results layout")
shows the tree. The public part (``{model}/{recipe}/model/``, ``{model}/{variant}/eval/*.json``,
``tables/``, ``figures/``) does not change between versions: users' scripts read it.

A chain is where a block's calibration inputs come from: ``dense`` (the dense model's activations,
shared by every recipe) or a recipe's own sequential chain (the outputs of its pruned blocks). Block 0's
inputs are the embeddings of the calibration tokens, the same for every recipe, so block 0 always reads
the dense chain; with ``chain: dense`` every block does.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from typing import Any, Literal

StoreKind = Literal["inputs", "hessians"]

DENSE = "dense"  # the dense chain's name, and the variant name of the unpruned model
# names used next to the recipes under results/{model}/, or by the results root's own directories and
# the demo's: no recipe may take one
RESERVED = (
    "dense",
    "chains",
    "calib",
    "model",
    "data",
    "eval",
    "pruned",
    "tables",
    "figures",
    "logs",
    "tiny",
    "demo",
)
NOT_MODELS = ("tables", "figures", "logs")  # directories of the results root that are not models
RECIPE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*")


def calibration_key(calibration: dict[str, Any]) -> str:
    """The short name of what a calibration's tokens are computed from: ``{nsamples}x{seqlen}-{digest}``,
    the digest (8 hex digits) of the source (a local path normalised, or the hub's ``c4``), nsamples,
    seqlen, seed and text_field. The workflow keeps each calibration's tokens under its own key, so that a
    config changed and changed back finds its tokens where it left them."""
    source = str(calibration["source"])
    identity = {
        "source": source if source == "c4" else os.path.normpath(os.path.expanduser(source)),
        **{name: calibration[name] for name in ("nsamples", "seqlen", "seed", "text_field")},
    }
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:8]
    return f"{calibration['nsamples']}x{calibration['seqlen']}-{digest}"


def reads_dense_chain(block: int | str, sequential: bool) -> bool:
    """Whether ``block`` reads the dense chain's stores: block 0 always, every block of a dense chain."""
    return not sequential or int(block) == 0


def chain_of(chain: str, block: int | str, sequential: bool) -> str:
    """The chain whose stores block ``block`` of ``chain`` (a recipe, or ``dense``) reads."""
    return DENSE if reads_dense_chain(block, sequential) else chain


def store_name(kind: StoreKind, block: int | str) -> str:
    """``inputs_{l}.zarr`` (block l's inputs) or ``hessians_{l}.zarr`` (its Hessians) of a chain."""
    return f"{kind}_{block}.zarr"


def pruned_block_name(block: int | str) -> str:
    """The directory of a recipe's pruned layers of block l: ``PRUNED/block{l}``."""
    return f"block{block}"


def pruned_layer_name(layer: str, ext: str) -> str:
    """``{layer}.safetensors`` (tensor ``weight``, the original dtype) or ``{layer}.json`` (its stats)."""
    return f"{layer}.{ext}"


# the pruned layers' directory of a recipe that reads no calibration (magnitude), beside those of the
# calibrations' keys (``Layout.pruned``)
UNCALIBRATED = "uncalibrated"
CHAIN_SUMMARY = "chain.json"  # PRUNED/chain.json: written last by a recipe's chain job
# PRUNED/recovered/block{l}: a recovered recipe's block l after recovery (its layers, and recovery.json last)
RECOVERED = "recovered"
RECOVERY_RECORD = "recovery.json"
# A distillation's checkpoints directory (``thanos distill --work``): what its checkpoints are of (the resume
# key), and what they are for in words (``thanos workdirs`` lists them)
DISTILL_RUN = "run.json"
DISTILL_ABOUT = "about.json"
# a size's record of its search, written in its --out beside the model (``thanos.runner.size``): the tool's,
# never kept for the user when another model is published there
SEARCH_RECORD = "search.json"
# a model directory's weight files (a checkpoint's formats): never copied from another model, never kept
# in an output beside the model's own
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".msgpack", ".h5", ".ckpt")
# What an assembled model directory holds, as a number the assemble rule passes as a parameter: a change
# makes Snakemake assemble existing results again (its params trigger), without pruning again.
# 1: sparsity in config.json (compressed-tensors); 2: config.json as the input's, sparsity.json beside it.
MODEL_DIR_FORMAT = 2


@dataclass(frozen=True)
class Layout:
    """Every path of one results root. ``sequential``: the config's ``chain: sequential`` (else dense).
    ``calibration``: the calibration's key (``calibration_key``: the workflow's tokens under
    ``calib/{key}/``); empty: one calibration per results root (``thanos prune-model``'s working directory,
    whose name already holds it).

    Arguments are names or Snakemake wildcard patterns (``"{model}"``): the methods only format text,
    except ``inputs``/``hessians``, which choose the chain (block 0 and dense chains read ``dense``).
    """

    root: str
    sequential: bool = True
    calibration: str = ""

    def model_info(self, model: str) -> str:
        return f"{self.root}/{model}/model_info.json"

    def fingerprint(self, model: str) -> str:
        """The model's input fingerprint (``thanos.files.fingerprint``), for a local model the workflow
        reads."""
        return f"{self.root}/{model}/fingerprint.json"

    def calibrated(self, model: str) -> str:
        """What is computed from the calibration and belongs to no recipe's published files: ``calib/{key}``
        with a key (its tokens, the chains' stores, the OWL plans), ``calib`` without one (its tokens)."""
        return "/".join(filter(None, (f"{self.root}/{model}/calib", self.calibration)))

    def tokens(self, model: str) -> str:
        """The calibration tokens: ``calib/{key}/tokens.zarr`` (``calib/tokens.zarr`` without a key)."""
        return f"{self.calibrated(model)}/tokens.zarr"

    def chain_dir(self, model: str, chain: str) -> str:
        """A chain's stores: ``calib/{key}/chains/{chain}`` (``chains/{chain}`` without a key)."""
        if self.calibration:
            return f"{self.calibrated(model)}/chains/{chain}"
        return f"{self.root}/{model}/chains/{chain}"

    def store(self, model: str, chain: str, kind: StoreKind, block: int | str) -> str:
        """The store of ``chain`` itself (rule outputs): no choice of chain."""
        return f"{self.chain_dir(model, chain)}/{store_name(kind, block)}"

    def inputs(self, model: str, chain: str, block: int | str) -> str:
        """Block ``block``'s inputs as ``chain`` (a recipe or ``dense``) reads them."""
        return self.store(model, chain_of(chain, block, self.sequential), "inputs", block)

    def hessians(self, model: str, chain: str, block: int | str) -> str:
        """Block ``block``'s Hessians as ``chain`` (a recipe or ``dense``) reads them."""
        return self.store(model, chain_of(chain, block, self.sequential), "hessians", block)

    def pruned(self, model: str, recipe: str, calibration: str = "") -> str:
        """A recipe's pruned layers: ``{recipe}/pruned/{calibration}`` (the workflow: the calibration's key,
        or ``UNCALIBRATED`` for a recipe that reads none, so that a changed calibration leaves it be),
        ``{recipe}/pruned`` without one."""
        return "/".join(filter(None, (f"{self.root}/{model}/{recipe}/pruned", calibration)))

    def pruned_block(self, model: str, recipe: str, block: int | str, calibration: str = "") -> str:
        return f"{self.pruned(model, recipe, calibration)}/{pruned_block_name(block)}"

    def pruned_layer(
        self, model: str, recipe: str, block: int | str, layer: str, ext: str, calibration: str = ""
    ) -> str:
        return f"{self.pruned_block(model, recipe, block, calibration)}/{pruned_layer_name(layer, ext)}"

    def chain_summary(self, model: str, recipe: str, calibration: str = "") -> str:
        return f"{self.pruned(model, recipe, calibration)}/{CHAIN_SUMMARY}"

    def owl(self, model: str, recipe: str) -> str:
        """An OWL recipe's per-block sparsities (``thanos.stages.owl_plan``), read by its prune jobs:
        ``calib/{key}/owl/{recipe}.json`` (``{recipe}/owl.json`` without a key)."""
        if self.calibration:
            return f"{self.calibrated(model)}/owl/{recipe}.json"
        return f"{self.root}/{model}/{recipe}/owl.json"

    def depth(self, model: str, recipe: str, calibration: str = "") -> str:
        """A ``depth:k`` recipe's choice of blocks (``thanos.stages.depth.blocks``; its maps in
        ``depth_maps/`` beside it), read by its assembly: ``{recipe}/pruned/{calibration}/depth.json`` with a
        calibration (the workflow: computed from it, kept beside another's), ``{recipe}/depth.json``
        without."""
        if calibration:
            return f"{self.pruned(model, recipe, calibration)}/depth.json"
        return f"{self.root}/{model}/{recipe}/depth.json"

    def part(self, model: str, recipe: str, part: int | str) -> str:
        """Part ``part`` (0, 1, ...) of a combined recipe (``depth:4+neurons:0.3``): its working directory,
        laid out as ``thanos prune-model``'s (``thanos.stages.parts``), and its model ``part/model``, read
        by the next part (the last part writes ``model_dir``)."""
        return f"{self.root}/{model}/{recipe}/parts/{part}"

    def one_command(self, model: str, recipe: str) -> str:
        """A recipe one ``thanos prune-model`` job writes (a vocabulary, a size: workflow/rules/search.smk):
        its working directory (``--workdir``), under the calibration's key."""
        return "/".join(filter(None, (f"{self.root}/{model}/{recipe}/work", self.calibration)))

    def candidate(self, model: str, recipe: str, candidate: str) -> str:
        """A size search's candidate measured by a job of its own (``candidate``: its mix without colons,
        ``depth2``): its measurement, where ``thanos prune-model``'s search finds it."""
        return f"{self.one_command(model, recipe)}/search/candidates/{candidate}/measurement.json"

    def model_dir(self, model: str, recipe: str) -> str:
        """The assembled Hugging Face directory (with pruning_report.json)."""
        return f"{self.root}/{model}/{recipe}/model"

    def distill_work(self, model: str, recipe: str) -> str:
        """A distilled recipe's checkpoints (``thanos.stages.distill.distill``): kept when its job fails, so
        that the job started again continues from the last one."""
        return f"{self.root}/{model}/{recipe}/distill"

    def evaluation(self, model: str, variant: str, name: str) -> str:
        """``name``: ``perplexity`` or ``zeroshot``; ``variant``: a recipe or ``dense``."""
        return f"{self.root}/{model}/{variant}/eval/{name}.json"

    @property
    def tables(self) -> str:
        return f"{self.root}/tables"

    @property
    def figures(self) -> str:
        return f"{self.root}/figures"

    @property
    def logs(self) -> str:
        return f"{self.root}/logs"
