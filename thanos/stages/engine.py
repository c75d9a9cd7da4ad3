"""The engine: one recipe on one model, every stage in one process, resuming from the files it wrote.

``run_recipe`` runs, in order and each only when its output is missing or out of date:

    model-info -> calibrate -> embed (block 0's inputs) -> the dense chain's Hessians (block 0; every block
    for ``chain: dense`` and OWL, each pass writing the next block's inputs too) -> OWL's per-block
    sparsities -> the chain (per block: capture -> prune -> propagate, ``thanos.stages.chain``) -> assemble

(``depth:k`` chooses its blocks instead of the chain; ``vocab:`` has one step after the model's info)

at the workflow's paths (``thanos.files.layout``), so its files are the workflow's, byte for byte.

Out of date is decided as Snakemake decides it, by what each output was computed from, and the ledger
(``thanos.files.ledger``) keeps it: next to every output it writes, a record ``.{name}.inputs.json`` holds
that output's inputs (the model files' names, sizes and mtimes, the calibration source's files, the options,
and the modification times of the upstream outputs it read). An output whose record differs from what the
step would read now is deleted and computed again, its log naming the input that changed (``Steps.reruns``),
and the outputs downstream of it follow, since their records name its modification time.
A step killed half way left no output (stores and models are renamed into place when complete) or no
record (written last), so the next run computes it again; the chain step resumes at its first unfinished
block (``thanos.stages.chain``).

Two callers: ``thanos prune-model`` (``thanos.runner.one_recipe``) runs every step; the workflow's recipe
job (``thanos chain``, granularity ``recipe``) runs the chain alone, its upstream outputs made by the
workflow's own shared jobs (``Steps.given``: checked complete, never recomputed).
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from thanos.events import OnEvent, StepDone, StepStarted, ignore
from thanos.files.atomic import write_json
from thanos.files.layout import DENSE, MODEL_DIR_FORMAT, RECOVERED, Layout, StoreKind, store_name
from thanos.files.ledger import MISSING, Entry, Upstream, remove, source_identity
from thanos.recipes.reads import RecipeReads, recipe_reads
from thanos.recipes.recipe import Recipe
from thanos.stages.memory import release_free_memory, single_arena
from thanos.stages.outputs import store_complete

if TYPE_CHECKING:
    from thanos.models import ModelHandle

log = logging.getLogger(__name__)

# beside a recipe's pruned layers: they were deleted once the model was assembled (retention)
LAYERS_DELETED = ".layers-deleted.json"


@dataclass(frozen=True)
class Calibration:
    """The calibration windows: ``nsamples`` x ``seqlen`` tokens of ``source`` (``c4`` or a local path)."""

    source: str
    nsamples: int
    seqlen: int
    seed: int = 0
    text_field: str = "text"


@dataclass(frozen=True)
class RecipeFiles:
    """Where one recipe's run reads and writes. ``dense_dir``: the dense chain's stores (``inputs_l``,
    ``hessians_l``); ``chain_dir``: the recipe's sequential chain stores (blocks >= 1), None for the dense
    chain; ``summary``: the chain's summary, written when every block is done; ``model_dir``: the assembled
    model (None: no assemble). Paths of what the recipe does not need are None."""

    pruned_root: Path
    summary: Path
    model_info: Path | None = None
    tokens: Path | None = None
    dense_dir: Path | None = None
    chain_dir: Path | None = None
    owl: Path | None = None
    model_dir: Path | None = None
    depth: Path | None = None  # a depth:k recipe's choice of blocks (it prunes no layer)

    recovered: bool = False  # the recipe recovers its blocks: the model is assembled from them

    @property
    def layers_root(self) -> Path:
        """Where the layers the model is assembled from are: the pruned root, or its ``recovered``
        directory for a recipe with recovery."""
        return self.pruned_root / RECOVERED if self.recovered else self.pruned_root

    @classmethod
    def of(cls, layout: Layout, model: str, recipe: Recipe) -> RecipeFiles:
        """The workflow's paths of ``recipe`` on the model named ``model`` under ``layout``."""
        calibrated = recipe.needs_calibration
        sequential = layout.sequential and calibrated and recipe.needs_hessian

        def path(text: str, wanted: bool = True) -> Path | None:
            return Path(text) if wanted else None

        return cls(
            pruned_root=Path(layout.pruned(model, recipe.name)),
            summary=Path(layout.chain_summary(model, recipe.name)),
            model_info=Path(layout.model_info(model)),
            tokens=path(layout.tokens(model), calibrated),
            dense_dir=path(layout.chain_dir(model, DENSE), calibrated),
            chain_dir=path(layout.chain_dir(model, recipe.name), sequential),
            owl=path(layout.owl(model, recipe.name), recipe.owl),
            model_dir=Path(layout.model_dir(model, recipe.name)),
            depth=path(layout.depth(model, recipe.name), recipe.sparsity.structure.whole_blocks),
            recovered=recipe.recover is not None,
        )


@dataclass(frozen=True)
class RunOptions:
    """How the stages run: the device, samples per forward pass, the recipe's own stores deleted as each
    block is done and its pruned layers once the model is assembled (retention false), the largest
    assembled shard, what the pruning report records of the run
    (``thanos.stages.describe.provenance.RunRecord``; None: the engine's own) and the dtype the blocks are
    computed in (``thanos.stages.common.compute_dtype``)."""

    device: str = "auto"
    batch_size: int = 8
    drop: tuple[StoreKind, ...] = ()
    drop_layers: bool = False  # the pruned (and recovered) layers deleted once the model is assembled
    max_shard_size: str = "2GB"
    record: Any = None
    dtype: str = "auto"
    describe: bool = True  # the assembled model described (card, ``sparsity.json``, its files' digests)


@dataclass
class Steps:
    """Runs steps whose outputs are kept while their inputs stay the same (the module docstring).

    ``owned``: False where the upstream outputs were written by other jobs (the workflow's shared jobs):
    those are checked complete (``given``) and never recomputed. ``computed``/``reused``: the labels of
    the steps run and kept; ``reruns``: why each step computed again was not current (its label: the
    ledger's reason)."""

    on_event: OnEvent = ignore  # told when a step starts and when it is done (``thanos.events``)
    owned: bool = True
    computed: list[str] = field(default_factory=list)
    reused: list[str] = field(default_factory=list)
    reruns: dict[str, str] = field(default_factory=dict)
    seen: set[Path] = field(default_factory=set)  # the outputs this call already ran or kept

    @staticmethod
    def current(output: Path, inputs: dict[str, Any], complete: Callable[[Path], bool] = Path.exists) -> bool:
        """Whether ``output`` is complete and was computed from ``inputs`` (``run`` would keep it)."""
        return Entry.beside(output).current(inputs, complete)

    def run(
        self,
        label: str,
        output: Path,
        inputs: dict[str, Any],
        compute: Callable[[], object],
        complete: Callable[[Path], bool] = Path.exists,
        also: tuple[str, Path, dict[str, Any]] | None = None,
    ) -> None:
        """Compute ``output`` unless it is complete and was computed from ``inputs``
        (``thanos.files.ledger``); an output computed again says why (``reruns``). ``also``: (label,
        output, inputs) of another output ``compute`` writes beside it, recorded with it (not current, or
        not asked: ``also_wanted``)."""
        if output in self.seen:
            return
        self.seen.add(output)
        entry = Entry.beside(output)
        why = entry.reason(inputs, complete)
        if why is None:
            self.reused.append(label)
            return
        if why != MISSING:
            log.warning("%s: computing %s again: %s", label, output, why)
            self.reruns[label] = why
        entry.discard()
        if also is not None:
            Entry.beside(also[1]).discard()
        self._notify(label, None)
        started = time.monotonic()
        compute()
        gc.collect()  # one process runs every step: what a step held is returned before the next
        release_free_memory()
        entry.write(inputs)
        self.computed.append(label)
        if also is not None:
            Entry.beside(also[1]).write(also[2])
            self.seen.add(also[1])
            self.computed.append(also[0])
        self._notify(label, time.monotonic() - started)

    def also_wanted(
        self, label: str, output: Path, inputs: dict[str, Any], complete: Callable[[Path], bool] = Path.exists
    ) -> tuple[str, Path, dict[str, Any]] | None:
        """``run``'s ``also`` for an output a step can write beside its own: None where it is current or
        this call ran or kept it already."""
        if output in self.seen or self.current(output, inputs, complete):
            return None
        return label, output, inputs

    @staticmethod
    def given(output: Path, complete: Callable[[Path], bool] = Path.exists) -> Path:
        """An output another job wrote: refused when missing or incomplete, never computed here."""
        if not complete(output):
            raise FileNotFoundError(f"{output} is missing or incomplete; run the job that writes it first")
        return output

    def _notify(self, label: str, seconds: float | None) -> None:
        if seconds is None:
            log.info("%s: started", label)
        else:
            log.info("%s: done in %.1f s", label, seconds)
        self.on_event(StepStarted(label) if seconds is None else StepDone(label, seconds))


@dataclass
class _Run:
    """One ``run_recipe`` call: the model (opened once, passed to every stage), its files and the steps,
    with one method per stage."""

    model: ModelHandle
    recipe: Recipe
    files: RecipeFiles
    calibration: Calibration | None
    options: RunOptions
    steps: Steps
    num_blocks: int = 0
    compute_dtype: str = ""  # the dtype the blocks are computed in, resolved (the records hold it)

    @property
    def model_files(self) -> Any:
        """The model directory's fingerprint (the records' ``model``)."""
        return self.model.fingerprint

    def model_info(self) -> None:
        from thanos.stages.model_info import model_info

        output = self.files.model_info
        assert output is not None
        inputs = {"model": self.model.reference, "files": self.model_files}
        self.steps.run("read the model's structure", output, inputs, lambda: model_info(self.model, output))

    def tokens(self) -> Path:
        from thanos.stages.calibrate import calibrate

        output, calib = self.files.tokens, self.calibration
        assert output is not None and calib is not None
        inputs = {
            "model": self.model_files,
            "source": source_identity(calib.source),
            "calibration": [calib.nsamples, calib.seqlen, calib.seed, calib.text_field],
        }

        def compute() -> None:
            calibrate(
                self.model, calib.source, output, calib.nsamples, calib.seqlen, calib.seed, calib.text_field
            )

        self.steps.run("sample calibration tokens", output, inputs, compute, store_complete)
        return output

    def dense_store(self, kind: StoreKind, block: int) -> Path:
        """The dense chain's store of block ``block``, computed (with what it reads) when out of date."""
        from thanos.stages.capture import capture, embed, propagate

        assert self.files.dense_dir is not None
        output = self.files.dense_dir / store_name(kind, block)
        if not self.steps.owned:
            return self.steps.given(output, store_complete)
        device, batch_size, dtype = self.options.device, self.options.batch_size, self.options.dtype
        also = None
        if kind == "hessians":
            inputs_l = self.dense_store("inputs", block)
            label = f"Hessians of block {block} (dense)"
            read = inputs_l
            also = self._next_inputs(block, inputs_l)
            following = also[1] if also is not None else None
            compute = lambda: capture(  # noqa: E731
                self.model, block, inputs_l, output, batch_size, device, dtype, following
            )
        elif block == 0:
            tokens = self.tokens()
            label = "embed the calibration tokens (block 0 inputs)"
            read = tokens
            compute = lambda: embed(self.model, tokens, output, batch_size, device, dtype)  # noqa: E731
        else:
            previous = self.dense_store("inputs", block - 1)
            label = self._inputs_label(block)
            read = previous
            compute = lambda: propagate(  # noqa: E731
                self.model, block - 1, previous, output, None, batch_size, device, None, dtype
            )
        self.steps.run(label, output, self._store_inputs(read), compute, store_complete, also)
        return output

    def _store_inputs(self, read: Path) -> dict[str, Any]:
        """A dense chain store's record: the model, the store it was computed from, the dtype."""
        return {"model": self.model_files, "reads": Upstream(read), "compute_dtype": self.compute_dtype}

    @staticmethod
    def _inputs_label(block: int) -> str:
        return f"inputs of block {block} (dense)"

    def _next_inputs(self, block: int, inputs_l: Path) -> tuple[str, Path, dict[str, Any]] | None:
        """The dense chain's inputs of block ``block + 1`` as ``Steps.run``'s ``also`` of block ``block``'s
        Hessians, where the run reads them and they are out of date: the pass over block ``block`` that
        captures its Hessians writes its outputs too (``capture``'s ``outputs``), so that each block of the
        dense chain runs once, not once more to propagate (SmolLM2-135M, 16 windows of 256 tokens: 8 s)."""
        assert self.files.dense_dir is not None
        dense = self.reads().dense
        if ("inputs", block + 1) not in dense and ("hessians", block + 1) not in dense:
            return None
        output = self.files.dense_dir / store_name("inputs", block + 1)
        label = self._inputs_label(block + 1)
        return self.steps.also_wanted(label, output, self._store_inputs(inputs_l), store_complete)

    def reads(self) -> RecipeReads:
        """The stores the recipe reads (``thanos.recipes.reads``): sequential when it has its own chain."""
        return recipe_reads(self.recipe, self.num_blocks, sequential=self.files.chain_dir is not None)

    def chain_reads(self) -> list[Path]:
        """The dense chain's stores the recipe's chain reads (``RecipeReads.chain``), computed when out of
        date."""
        return [self.dense_store(kind, block) for kind, block in self.reads().chain]

    def owl(self) -> None:
        """An OWL recipe's per-block sparsities, from the dense chain's Hessians of every block."""
        from thanos.stages.owl_plan import owl

        output = self.files.owl
        if output is None:
            return
        if not self.steps.owned:
            self.steps.given(output)
            return
        hessians = [self.dense_store(kind, block) for kind, block in self.reads().owl]
        inputs = {
            "model": self.model_files,
            "recipe": self.recipe.to_dict(),
            "hessians": [Upstream(path) for path in hessians],
        }
        info = self.files.model_info
        self.steps.run(
            f"OWL sparsity per block ({self.recipe.name})",
            output,
            inputs,
            lambda: owl(self.model, hessians, self.recipe, output, info),
        )

    def depth(self) -> None:
        """A ``depth:k`` recipe's choice of blocks, from the dense chain's inputs of every block and the
        last block's output (``thanos.stages.depth.blocks``)."""
        from thanos.stages.depth.blocks import depth_plan, map_tensors
        from thanos.stages.depth.maps import REFIT_DAMP

        output = self.files.depth
        assert output is not None
        stores = [self.dense_store(kind, block) for kind, block in self.reads().depth]
        inputs = {
            "model": self.model_files,
            "recipe": self.recipe.to_dict(),
            "reads": [Upstream(p) for p in stores],
        }
        if self.recipe.block_map:  # maps of an earlier version (no refitted projection) are fitted again
            inputs["refit_damp"] = REFIT_DAMP
        self.steps.run(
            f"choose the blocks{' and fit their maps' if self.recipe.block_map else ''} ({self.recipe.name})",
            output,
            inputs,
            lambda: depth_plan(
                stores,
                self.recipe.sparsity,
                output,
                model=self.model,
                block_map=bool(self.recipe.block_map),
                device=self.options.device,
            ),
            lambda plan: plan.exists() and all(file.is_file() for file in map_tensors(plan).values()),
        )

    def vocabulary(self) -> None:
        """A ``vocab:`` recipe's model (``thanos.stages.vocab.write_vocabulary``): the tokens its text (the
        recipe's ``vocab_text``, else the calibration source) uses most kept, the dense model sliced."""
        from thanos.stages.vocab import write_vocabulary

        output, calib = self.files.model_dir, self.calibration
        if output is None or calib is None:
            raise ValueError(f"{self.recipe.name}: a vocabulary is chosen by a text: give its calibration")
        text = (str(self.recipe.vocab_text or calib.source), calib.text_field)
        # a combined recipe's last part: the whole recipe, its base model and earlier parts (its report's)
        combined = ((self.options.record and self.options.record.workflow) or {}).get("combined")
        inputs = {"model": self.model_files, "recipe": self.recipe.to_dict(), "combined": combined}
        inputs |= {"text": [source_identity(text[0]), text[1]], "format": MODEL_DIR_FORMAT}
        describe = self.options.describe
        inputs |= self.described()
        self.steps.run(
            f"choose the tokens and write the model ({self.recipe.name})", output, inputs,
            lambda: write_vocabulary(self.model.reference, output, self.recipe, text, combined, describe),
            _has_report,
        )  # fmt: skip

    def chain(self, reads: list[Path]) -> None:
        """Capture, prune and propagate every block (``thanos.stages.chain``: it resumes by itself)."""
        from thanos.stages.chain import ChainPaths, chain

        files, options = self.files, self.options
        paths = ChainPaths(files.pruned_root, files.dense_dir, files.chain_dir, files.owl)
        inputs = {
            "model": self.model_files,
            "recipe": self.recipe.to_dict(),
            "reads": [Upstream(path) for path in (*reads, files.owl)],
            "compute_dtype": self.compute_dtype,
        }
        deleted = files.pruned_root / LAYERS_DELETED

        def compute() -> None:
            remove(deleted)
            chain(
                self.model, self.recipe, paths, files.summary, options.batch_size, options.device,
                options.dtype, options.drop, self.steps.on_event,
            )  # fmt: skip

        def complete(summary: Path) -> bool:  # deleted layers: done while the model assembled from them is
            if not summary.exists():
                return False
            return self.assembled() if deleted.exists() else not self.unfinished_layers()

        self.steps.run(f"prune every block ({self.recipe.name})", files.summary, inputs, compute, complete)

    def unfinished_layers(self) -> dict[tuple[int, str], str]:
        """The recipe's layers under its pruned root that are not finished (a file deleted, edited since it
        was pruned: ``thanos.files.pruned_layers``): the chain runs again for them (it prunes those alone,
        propagating again where retention deleted a block's inputs)."""
        import json

        from thanos.stages.assemble import recipe_unfinished

        info_file = self.files.model_info
        if info_file is None or not info_file.is_file():
            return {}
        info = json.loads(info_file.read_text())
        return recipe_unfinished(self.files.pruned_root, self.recipe, info) if info.get("layers") else {}

    def assemble_inputs(self) -> dict[str, Any]:
        files = self.files
        return {
            "model": self.model_files,
            "recipe": self.recipe.to_dict(),
            "reads": [Upstream(path) for path in (files.summary, files.tokens, files.owl, files.depth)],
            "format": MODEL_DIR_FORMAT,
            "max_shard_size": self.options.max_shard_size,
        } | self.described()

    def described(self) -> dict[str, Any]:
        """What an output the run writes undescribed records of it (``RunOptions.describe`` false): an
        output described is never taken for one that is not, nor the other way."""
        return {} if self.options.describe else {"described": False}

    def assembled(self) -> bool:
        """Whether the assembled model is complete and current."""
        model_dir = self.files.model_dir
        return model_dir is not None and Steps.current(model_dir, self.assemble_inputs(), _has_report)

    def drop_layers(self) -> None:
        """Retention: delete the pruned (and recovered) layers once the model is assembled from them; the
        chain's summary stays valid while that model does (a marker says they were deleted)."""
        root = self.files.pruned_root
        if not self.options.drop_layers or self.files.model_dir is None or not self.assembled():
            return
        write_json(root / LAYERS_DELETED, {"deleted": "the layers are in the assembled model"})
        for path in [*root.glob("block*"), root / RECOVERED]:
            remove(path)

    def assemble(self) -> None:
        from thanos.stages.assemble import assemble

        files, options = self.files, self.options
        if files.model_dir is None:
            return
        self.steps.run(
            f"assemble the pruned model ({self.recipe.name})",
            files.model_dir,
            self.assemble_inputs(),
            lambda: assemble(
                self.model,
                files.layers_root,
                self.recipe,
                files.model_dir,
                files.model_info,
                files.owl,
                options.max_shard_size,
                options.record,
                files.depth,
                options.describe,
            ),  # fmt: skip
            _has_report,
        )


def _has_report(model_dir: Path) -> bool:
    return (model_dir / "pruning_report.json").is_file()


def resolved_compute_dtype(checkpoint: str, options: RunOptions) -> str:
    """The dtype ``options`` compute the blocks of a ``checkpoint``-dtype model in on this machine (``auto``
    resolved, ``thanos.stages.common.compute_dtype``): float32, bfloat16 or float16."""
    import torch

    from thanos.data.storage import dtype_name
    from thanos.stages.common import Compute

    return dtype_name(Compute.of(options.device, options.dtype, getattr(torch, checkpoint)).dtype)


def run_recipe(
    model: str | Path | ModelHandle,
    recipe: Recipe,
    files: RecipeFiles,
    calibration: Calibration | None = None,
    options: RunOptions | None = None,
    on_event: OnEvent = ignore,
) -> Steps:
    """Run every stage of ``recipe`` on ``model`` that is missing or out of date; return the steps run and
    kept. ``model`` is opened once (``thanos.models.ModelHandle``, with ``files.model_info``; a handle is
    used as it is) and that handle is passed to every stage.

    ``calibration`` None: the upstream outputs (model info, calibration tokens, the dense chain's stores,
    OWL's plan) were written by the workflow's own jobs; they are checked complete, never computed here.
    ``on_event``: told of each step's start and end, and of the chain's blocks (``thanos.events``).
    """
    single_arena()  # before any zarr worker thread allocates (``thanos.stages.memory``): flat RSS in depth
    # what is alive now (the imported modules: ~400k objects with transformers) is left out of each step's
    # collection (0.26 s each, 11 s of a size's cost table) until the recipe is done; what a caller froze
    # (``thanos.jobs.worker``: before its fork) stays frozen
    thawed = gc.get_freeze_count() == 0
    gc.freeze()
    try:
        return _run_stages(model, recipe, files, calibration, options or RunOptions(), on_event)
    finally:
        if thawed:
            gc.unfreeze()


def _run_stages(
    model: str | Path | ModelHandle,
    recipe: Recipe,
    files: RecipeFiles,
    calibration: Calibration | None,
    options: RunOptions,
    on_event: OnEvent,
) -> Steps:
    """``run_recipe``'s stages."""
    from thanos.models import ModelHandle

    steps = Steps(on_event, owned=calibration is not None)
    # the model opened once: its layout is read from model_info.json once the model-info step has
    # written it (the adapter's where there is none)
    handle = model if isinstance(model, ModelHandle) else ModelHandle.open(model, files.model_info)
    run = _Run(handle, recipe, files, calibration, options, steps)
    if steps.owned:
        run.model_info()
    layout = handle.layout
    run.num_blocks, run.compute_dtype = layout.num_blocks, resolved_compute_dtype(layout.dtype, options)
    run.owl()
    if recipe.sparsity.structure.tokens:  # the model sliced, no block pruned: its one step writes it
        run.vocabulary()
        return steps
    if files.depth is not None:  # whole blocks removed: scored on the dense chain, nothing pruned
        run.depth()
        steps.owned = True
    else:
        reads = run.chain_reads()
        steps.owned = True  # the chain and what follows are this call's own work
        run.chain(reads)
    run.assemble()
    run.drop_layers()
    return steps
