"""Removed blocks replaced by a fitted linear map (``depth:k`` recipes; ``thanos.pruning.block_map``).

For a run of removed blocks s .. e, the kept block p = s - 1 is run again on its stored dense inputs
(``inputs_p``): a hook on its MLP output projection gives M, its output minus M gives Y, and the dense
chain's ``inputs_{e+1}`` (the run's output) is the target. The map T is fitted on every calibration
token and folded into the output projection's weight (``fold``); in the same pass the projection is then
refitted from the neurons' activations by ridge least squares toward that folded weight (``REFIT_DAMP``;
``thanos.pruning.block_map``), so that the written model has the same architecture, fewer blocks and no
added parameter.

No map is fitted, and the run is simply left out, where there is nowhere to fold it, and ``depth.json``
says why: a run that starts at block 0 (no kept block before it), a block whose MLP has no single output
projection (a mixture of experts), or a block whose output is not its MLP output plus the rest (a norm
after the MLP: checked on the first samples with the map folded in).

``run_candidates`` scores every run of k consecutive blocks by the relative error of its fitted map (the
``replaced`` metric of ``thanos.stages.depth.blocks``): one pass of the kept block before each candidate over
the first quarter of the windows, at most ``PRESELECT_SAMPLES`` (``preselect_windows``; the map alone),
then the ``SHORTLIST`` best fitted again on every window, the projection refitted too, and ranked by that
final error, so that the choice costs about a third of a pass over the model on 64 windows instead of a
whole one. On 16 windows (a size search's cost table) a quarter ranks as all 16 did: SmolLM2-135M,
``depth:2, 4, 8, 11``, the same runs removed with the same errors, 24 s instead of 54 s.

A cost table's depth points fit runs of every length after the same kept blocks on the same windows, and so
do the depth parts of several sizes' writes: while a scope keeps them (``thanos.pruning.kept``: the table
measured, the sizes written), each kept block's pass over them (``BlockPass``: its outputs and the sums of
F^T F) is kept and read by the next points, which read only their runs' targets; the fits are those of each
point alone, bit for bit.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from thanos.data.storage import Activations
from thanos.models import ModelHandle
from thanos.models.neurons import NeuronsError, mlp_layout
from thanos.pruning import kept
from thanos.pruning.block_map import MapFit, fold
from thanos.stages.common import resolve_device

log = logging.getLogger(__name__)

NO_OUTPUT_PROJECTION = (
    "the blocks have no single MLP output projection to fold a map into (a mixture of experts, or an MLP "
    "whose width is not the config's intermediate_size)"
)
NO_BLOCK_BEFORE = "no kept block before the run to fold a map into"
FOLD_TOLERANCE = 1e-3  # relative error of the block's output, new projection, vs Y + A W'^T + b'
PRESELECT_SAMPLES = 16  # the most windows every candidate run's map is fitted on, to rank them
PRESELECT_SHARE = 4  # ranked on this fraction of the calibration windows (1/4: 16 of 64), up to that most
SHORTLIST = 3  # the candidate runs of the lowest errors then fitted on every window
REFIT_DAMP = 0.1  # the projection's ridge toward the map's weight, a fraction of mean(diag A^T A)


@dataclass
class FittedRun:
    """A run of removed blocks ``first .. last`` replaced in block ``before``'s ``layer``: its map ``T``
    and the projection written (the map folded in, then refitted; the map folded in alone when
    ``fit_run`` was asked for no refit)."""

    first: int
    last: int
    before: int
    layer: str
    T: torch.Tensor
    weight: torch.Tensor  # the output projection written, float32
    bias: torch.Tensor | None
    error: float  # relative error with that projection
    error_map: float  # relative error with the map alone folded in
    error_without: float  # relative error with the blocks simply left out


def runs(removed: Sequence[int]) -> list[tuple[int, int]]:
    """The removed blocks as runs of consecutive blocks (first, last), in order."""
    out: list[tuple[int, int]] = []
    for block in sorted(removed):
        if out and out[-1][1] == block - 1:
            out[-1] = (out[-1][0], block)
        else:
            out.append((block, block))
    return out


def output_layer(handle: ModelHandle) -> str:
    """The MLP output projection of the blocks (``mlp.down_proj``); refused (``NeuronsError``) for a model
    without one per block."""
    return mlp_layout(handle.layout, handle.checkpoint).output


def _load(
    handle: ModelHandle, block: int, layer: str, device: str
) -> tuple[torch.nn.Module, torch.nn.Linear, torch.device]:
    """Block ``block`` on ``device`` in float32, its ``layer`` (the MLP output projection) and the device."""
    dev = resolve_device(device)
    module = handle.adapter.load_block(handle.checkpoint, block).to(dev, torch.float32)
    return module, handle.adapter.linear(module, layer), dev


def _run(
    handle: ModelHandle, module: torch.nn.Module, linear: torch.nn.Linear, block: int, x: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(the block's output, its MLP output M: what ``linear`` adds to the residual stream, the neurons'
    activations: ``linear``'s input, tokens x width) for ``x``."""
    captured: list[torch.Tensor] = []
    hook = linear.register_forward_hook(lambda m, a, out: captured.extend((a[0], out)))
    try:
        out = handle.adapter.run_block(module, block, x)
    finally:
        hook.remove()
    A, M = captured
    return out, M.reshape(out.shape), A.reshape(-1, A.shape[-1])  # OPT runs its MLP on (tokens, hidden)


def _with_ones(A: torch.Tensor, bias: bool) -> torch.Tensor:
    """The projection's features: the activations, and a column of ones where it has a bias."""
    return torch.cat([A, A.new_ones(A.shape[0], 1)], dim=1) if bias else A


Chunk = tuple[int, int, torch.Tensor, torch.Tensor, torch.Tensor | None]


@dataclass
class BlockPass:
    """The kept block p run on its stored dense inputs (windows ``start .. stop`` a chunk at a time): each
    chunk's MLP output M, the rest of the block's output Y and, for a refit, the projection's features F
    (float32), and the sums F^T F of the map's features M and of the projection's (float64): all a run
    after p fitted on the same windows reads but its target."""

    chunks: list[Chunk]
    map_gram: torch.Tensor
    projection_gram: torch.Tensor | None

    @property
    def nbytes(self) -> int:
        tensors = [t for chunk in self.chunks for t in chunk[2:] if t is not None]
        tensors += [t for t in (self.map_gram, self.projection_gram) if t is not None]
        return sum(t.nbytes for t in tensors)


# the block passes a cost table's depth points share (``thanos.pruning.kept``: depth:2, 4, 8 and 11 run each
# kept block on the same windows; SmolLM2-135M, 4 windows of 16: 4.7 MB a block), and several sizes' writes
# (16 windows of 64: 21.5 MB a block)
_passes = kept.Kept(kept.BLOCK_PASSES, lambda passed: passed.nbytes)


def _chunks(
    handle: ModelHandle, module: torch.nn.Module, linear: torch.nn.Linear, block: int, inputs: Activations,
    end: int, samples: int, refit: bool,
) -> Iterator[Chunk]:  # fmt: skip
    """Block ``block`` (``module``, the kept block p) run on its inputs' windows ``0 .. end``, ``samples`` at
    a time: each chunk's (start, stop, M, Y, F), F the projection's features for a ``refit`` (else None)."""
    dev = linear.weight.device
    for start in range(0, end, samples):
        stop = min(start + samples, end)
        out, M, A = _run(handle, module, linear, block, inputs.read(start, stop).to(dev, torch.float32))
        yield start, stop, M, out - M, _with_ones(A, linear.bias is not None) if refit else None


def fit_run(
    handle: ModelHandle,
    stores: Sequence[str | Path],
    first: int,
    last: int,
    layer: str,
    nsamples: int | None = None,
    samples: int = 4,
    device: str = "cpu",
    refit: bool = True,
) -> FittedRun:
    """The map of the run ``first .. last`` (first >= 1), fitted on the dense stores ``inputs_0 ..
    inputs_L`` (their first ``nsamples`` windows; default all), ``samples`` windows at a time, on
    ``device`` in float32, and folded into block ``first - 1``'s ``layer``; with ``refit``, that layer then
    refitted on the same tokens toward the folded weight (the results on the CPU)."""
    before = first - 1
    module, linear, dev = _load(handle, before, layer, device)
    inputs, targets = Activations(stores[before]), Activations(stores[last + 1])
    hidden, width = (int(n) for n in linear.weight.shape)
    has_bias = linear.bias is not None
    fit = MapFit(hidden, dev)
    projection = MapFit(hidden, dev, features=width + has_bias) if refit else None
    end = inputs.nsamples if nsamples is None else min(nsamples, inputs.nsamples)
    key = (str(handle.path), kept.as_written(stores[before]), before, layer, end, samples,
           str(dev), refit)  # fmt: skip
    passed = _passes.get(key)  # a cost table's other depth points (or an earlier size's write) ran it
    chunks = passed.chunks if passed else _chunks(handle, module, linear, before, inputs, end, samples, refit)
    recorded: list[Chunk] | None = [] if passed is None and _passes.budget() else None
    for start, stop, M, Y, F in chunks:
        X = targets.read(start, stop).to(dev, torch.float32)
        fit.add(M, Y, X, gram=passed is None)
        if projection is not None and F is not None:
            projection.add(F, Y, X, gram=passed is None)
        if recorded is not None:
            recorded.append((start, stop, M, Y, F))
    if passed is not None:  # the sums of F^T F over the same features, kept: added whole
        fit.A += passed.map_gram
        if projection is not None and passed.projection_gram is not None:
            projection.A += passed.projection_gram
    elif recorded is not None:
        passed = BlockPass(recorded, fit.A.clone(), projection.A.clone() if projection else None)
        _passes.put(key, passed, _passes.budget())
    T = fit.solve_where_determined(torch.eye(hidden, device=dev), REFIT_DAMP)  # few tokens: toward no map
    weight, bias = fold(linear.weight.detach(), T, linear.bias.detach() if has_bias else None)
    error = error_map = fit.error(T)
    if projection is not None:  # features x d: the weight's transpose, the bias its last row
        folded = torch.cat([weight.T, bias[None]]) if bias is not None else weight.T
        solution = projection.solve_toward(folded, REFIT_DAMP)
        error = projection.error(solution)
        weight, bias = solution[:width].T.contiguous(), solution[width] if has_bias else None
    bias = None if bias is None else bias.cpu()
    return FittedRun(
        first, last, before, layer, T.cpu(), weight.cpu(), bias, error, error_map, fit.identity_error()
    )


def check_fold(
    handle: ModelHandle, stores: Sequence[str | Path], run: FittedRun, samples: int = 2, device: str = "cpu"
) -> str | None:
    """None when block ``run.before`` with the written projection (weight W', bias b') writes
    Y + A W'^T + b' on its first stored samples; else why not (its output is not linear in the MLP
    output: a norm after the MLP)."""
    module, linear, dev = _load(handle, run.before, run.layer, device)
    inputs = Activations(stores[run.before])
    x = inputs.read(0, min(samples, inputs.nsamples)).to(dev, torch.float32)
    out, M, A = _run(handle, module, linear, run.before, x)
    written = A @ run.weight.to(dev).T + (0 if run.bias is None else run.bias.to(dev))
    expected = out - M + written.reshape(out.shape)
    with torch.no_grad():
        linear.weight.copy_(run.weight.to(dev))
        if run.bias is not None:
            linear.bias.copy_(run.bias.to(dev))
    folded = handle.adapter.run_block(module, run.before, x)
    error = float((folded - expected).norm() / expected.norm().clamp_min(1e-12))
    if error > FOLD_TOLERANCE:
        return (
            f"block {run.before}'s output is not its MLP output plus the rest (relative error {error:.2e} "
            "with the map folded in: a norm after the MLP?)"
        )
    return None


def replace_runs(
    handle: ModelHandle, stores: Sequence[str | Path], removed: Sequence[int], out_dir: Path,
    fitted: FittedRun | None = None, device: str = "cpu",
) -> list[dict[str, Any]]:  # fmt: skip
    """For every run of ``removed`` blocks, its map fitted (or ``fitted``, when it is that run), checked
    and written to ``out_dir`` (``block{p}.safetensors``: ``map`` T in float32, ``weight`` the folded
    weight in the checkpoint's dtype; ``block{p}_bias.safetensors`` for a bias). Returns depth.json's
    ``maps`` entries: the run, the block it is folded into, its tensors and files, the relative errors
    with and without the map, or why no map."""
    entries: list[dict[str, Any]] = []
    try:
        layer: str | None = output_layer(handle)
        no_layer = ""
    except NeuronsError:
        layer, no_layer = None, NO_OUTPUT_PROJECTION
    for first, last in runs(removed):
        entry: dict[str, Any] = {"blocks": [first, last]}
        why = NO_BLOCK_BEFORE if first == 0 else no_layer
        if not why:
            assert layer is not None
            same = fitted is not None and (fitted.first, fitted.last) == (first, last)
            run = fitted if same else fit_run(handle, stores, first, last, layer, device=device)
            why = check_fold(handle, stores, run, device=device) or ""
        if why:
            log.info("depth: blocks %d..%d left out without a map: %s", first, last, why)
            entries.append(entry | {"map": None, "why": why})
            continue
        entries.append(entry | _write(handle, run, out_dir))
    return entries


def _write(handle: ModelHandle, run: FittedRun, out_dir: Path) -> dict[str, Any]:
    """The run's files and its ``maps`` entry (tensor and file names relative to ``out_dir``'s parent)."""
    prefix = handle.layout.block_prefix(run.before) + run.layer
    checkpoint = handle.checkpoint
    out_dir.mkdir(parents=True, exist_ok=True)
    weight_name = f"{prefix}.weight"
    dtype = checkpoint.tensor(weight_name).dtype
    file = out_dir / f"block{run.before}.safetensors"
    save_file({"map": run.T.contiguous(), "weight": run.weight.to(dtype).contiguous()}, str(file))
    tensors = {weight_name: f"{out_dir.name}/{file.name}"}
    if run.bias is not None:
        bias_file = out_dir / f"block{run.before}_bias.safetensors"
        save_file({"weight": run.bias.to(dtype).contiguous()}, str(bias_file))
        tensors[f"{prefix}.bias"] = f"{out_dir.name}/{bias_file.name}"
    log.info(
        "depth: blocks %d..%d replaced by a map folded into %s and refitted (relative error %.4f; the "
        "map alone %.4f; %.4f without)", run.first, run.last, weight_name, run.error, run.error_map,
        run.error_without,
    )  # fmt: skip
    return {
        "map": f"{out_dir.name}/{file.name}",
        "folded_into": run.before,
        "tensors": tensors,
        "error": run.error,
        "error_map_alone": run.error_map,
        "error_without_map": run.error_without,
        "refit_damp": REFIT_DAMP,
    }


def preselect_windows(total: int) -> int:
    """The first windows every candidate run is ranked on: a quarter of the ``total`` calibration windows
    (rounded up), at most ``PRESELECT_SAMPLES``."""
    return min(PRESELECT_SAMPLES, max(1, math.ceil(total / PRESELECT_SHARE)))


def run_candidates(
    handle: ModelHandle, stores: Sequence[str | Path], k: int, device: str = "cpu"
) -> tuple[list[float | None], dict[int, float], FittedRun | None]:
    """Every run of ``k`` consecutive blocks s .. s + k - 1 with s >= 1 scored by its fitted map's relative
    error (None for s = 0), each map fitted alone on the first ``preselect_windows`` windows; the
    ``SHORTLIST`` runs of the lowest errors fitted again on every window (the projection refitted too), and
    the best of them by that error (the later one on a tie) returned fitted, with the shortlist's errors on
    every window by first block. Every score is None, and
    no run returned, where no map can be folded into the blocks (no single output projection, or a norm
    after the MLP). One fitted run is held at a time."""
    blocks = len(stores) - 1
    scores: list[float | None] = [None] * blocks
    try:
        layer = output_layer(handle)
    except NeuronsError:
        return scores, {}, None
    first = Activations(stores[0])
    total = first.nsamples
    quick = preselect_windows(total)
    if quick * first.seqlen < first.hidden_size:
        log.warning(
            "depth: the runs are ranked on %d calibration tokens (%d windows of %d), fewer than the hidden "
            "size %d: a map fitted on so few is pulled toward leaving its blocks out; calibrate on more "
            "(--nsamples x --seqlen at least %d) for maps that replace the blocks",
            quick * first.seqlen, quick, first.seqlen, first.hidden_size, PRESELECT_SHARE * first.hidden_size,
        )  # fmt: skip
    for first in range(1, blocks - k + 1):
        run = fit_run(handle, stores, first, first + k - 1, layer, nsamples=quick, device=device, refit=False)
        why = (
            check_fold(handle, stores, run, device=device) if first == 1 else None
        )  # the architecture's, checked once
        if why:
            log.info("depth: no run can be replaced by a map: %s", why)
            return [None] * blocks, {}, None
        scores[first] = run.error
        log.info("depth: blocks %d..%d replaced: relative error %.5f", first, first + k - 1, run.error)
    candidates = [first for first, score in enumerate(scores) if score is not None]
    shortlist = sorted(candidates, key=lambda first: (scores[first], -first))[:SHORTLIST]
    best: FittedRun | None = None
    errors: dict[int, float] = {}
    for first in sorted(shortlist):
        run = fit_run(handle, stores, first, first + k - 1, layer, device=device)
        errors[first] = run.error
        if best is None or run.error <= best.error:
            best = run
    return scores, errors, best
