"""One ``prune_model`` request, as both fronts give it: ``thanos.prune_model``'s keywords and ``thanos
prune-model``'s options are the fields below, declared once (help texts included), and both build one frozen
``PruneRequest`` (model, recipe, calibration, resources, evaluation, output), checked once here: the
values themselves (types, ranges, choices, the recipe). What the values point at (the model, the files, the
disk) is checked by ``thanos.runner.checks`` before the first step.

A bad value raises ``thanos.errors.OptionError`` naming its option; each front words it in its own
vocabulary: ``PYTHON`` (``seqlen=4096``, ``recover['epochs']=0``) or ``FLAGS`` (``--seqlen 4096``,
``--recover-epochs 0``). Torch-free: the command's ``--help`` imports this module.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from thanos.errors import FlagWords, KeywordWords, Option, OptionError
from thanos.options import flags, option
from thanos.pruning.sparsity import parse_sparsity
from thanos.pruning.structures import takes
from thanos.recipes.labels import counted
from thanos.recipes.recipe import Recipe
from thanos.recipes.training import Distillation, Recovery
from thanos.runner.disk import KEEP  # what the working directory keeps
from thanos.runner.patterns import AXES, SizeGoal, SizeOptions, combined_parts, params_fractions
from thanos.runner.recipe_options import RecipeOptions, positive

EVALUATIONS = ("ppl", "zeroshot")
DEVICE = re.compile(r"auto|cpu|cuda(:\d+)?")
DTYPES = ("auto", "float32", "bfloat16", "float16")  # ``thanos.stages.common.COMPUTE_DTYPES`` without torch
DEFAULT_NSAMPLES = 128

# the options whose words are not the keyword's name (a flag that sets False; a keyword's dict's entries)
PYTHON = KeywordWords({"disk_check": "disk_check=False"})


@dataclass(frozen=True)
class CalibrationOptions:
    """The calibration windows: ``nsamples`` windows of ``seqlen`` tokens sampled with ``seed`` from
    ``calibration``."""

    calibration: str = field(
        default="c4",
        metadata=option("c4 (the hub, default) or a local text/jsonl/parquet file or directory"),
    )
    nsamples: int = field(
        default=DEFAULT_NSAMPLES,
        metadata=option(f"calibration windows (default {DEFAULT_NSAMPLES})", type=positive),
    )
    seqlen: int | None = field(
        default=None,
        metadata=option("tokens per window (default min(2048, the model's max positions))", type=positive),
    )
    seed: int = field(default=0, metadata=option("calibration sampling seed (default 0)", type=int))
    text_field: str = field(default="text", metadata=option("jsonl/parquet field holding the text"))

    def __post_init__(self) -> None:
        for name in ("nsamples", "seqlen"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise OptionError(Option(name, repr(value)), "expected a whole number >= 1")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise OptionError(Option("seed", repr(self.seed)), "expected a whole number")
        object.__setattr__(self, "calibration", str(self.calibration))


@dataclass(frozen=True)
class Resources:
    """Where and how the run computes, and what it keeps on disk."""

    device: str = field(default="auto", metadata=option("auto (CUDA if visible), cpu, cuda, cuda:N"))
    compute_dtype: str = field(
        default="auto",
        metadata=option(
            "the dtype the blocks (and a size's held-out measurements) are computed in (default auto: "
            "the checkpoint's dtype where the device "
            "multiplies it faster than float32 (a GPU; a CPU where bf16 measured at least 1.2x the fp32 "
            "rate, once per machine), else float32); Hessians are float32 and the stores and written "
            "weights keep the checkpoint's dtype",
            choices=list(DTYPES),
        ),
    )
    cores: int | None = field(
        default=None,
        metadata=option("CPU cores to use (default: all this process may run on; more are not used)",
                        type=positive),
    )  # fmt: skip
    workdir: str | Path | None = field(
        default=None, metadata=option("where intermediates go (default: see below)")
    )
    keep: str = field(
        default="needed",
        metadata=option(
            "what the workdir keeps: needed (default: what a resume and another recipe on the same "
            "calibration need; each block's own inputs and Hessians go once the block is done, the pruned "
            "layers once the model is assembled) or all (every intermediate)",
            choices=list(KEEP),
        ),
    )
    disk_check: bool = field(
        default=True,
        metadata=option(
            "run even when the estimated disk use exceeds the free space",
            flag="--no-disk-check",
            action="store_false",
        ),
    )

    def __post_init__(self) -> None:
        if self.keep not in KEEP:
            raise OptionError(Option("keep", repr(self.keep)), f"choose {' or '.join(KEEP)}")
        if not isinstance(self.device, str) or not DEVICE.fullmatch(self.device):
            raise OptionError(Option("device", repr(self.device)), "choose auto, cpu, cuda or cuda:N")
        cores = self.cores
        if cores is not None and (isinstance(cores, bool) or not isinstance(cores, int) or cores < 1):
            raise OptionError(Option("cores", repr(cores)), "expected a whole number >= 1")
        object.__setattr__(self, "cores", cores or usable_cores())

    @property
    def threads(self) -> int:
        """The threads the run computes with: ``cores``, no more than this process may run on."""
        return min(self.cores, usable_cores())  # type: ignore[type-var]

    @property
    def cores_text(self) -> str:
        """The cores the run uses, and the ``--cores`` asked where this process may run on fewer."""
        text = counted(self.threads, "core")
        if self.threads < self.cores:  # type: ignore[operator]
            text += f" (--cores {self.cores}: this process may run on {self.threads})"
        return text


def usable_cores() -> int:
    """The CPUs this process may run on (its affinity: a SLURM job's allocation, ``taskset``), not the
    machine's: threads beyond them only wait for each other."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # no affinity on this platform
        return os.cpu_count() or 1


@dataclass(frozen=True)
class Evaluation:
    """The evaluations of the published model (and of the dense one beside it)."""

    evaluate: str | Sequence[str] = field(
        default=(), metadata=option("ppl and/or zeroshot, comma-separated (default none)")
    )
    ppl_source: str | Path = field(
        default="wikitext2", metadata=option("perplexity text: wikitext2 (the hub, default) or a local file")
    )
    ppl_seqlen: int | None = field(
        default=None,
        metadata=option(
            "perplexity window in tokens (default min(2048, the model's max positions))", type=positive
        ),
    )
    tasks: str | Sequence[str] | None = field(
        default=None, metadata=option("zero-shot lm-eval tasks, comma-separated (default: the paper's 7)")
    )
    include_path: str | Path | None = field(
        default=None, metadata=option("directory of local lm-eval task YAMLs (for --tasks defined there)")
    )

    def __post_init__(self) -> None:
        kinds = _words(self.evaluate)
        unknown = [kind for kind in kinds if kind not in EVALUATIONS]
        if unknown:
            raise OptionError(Option("evaluate", ",".join(unknown)), f"choose from {', '.join(EVALUATIONS)}")
        object.__setattr__(self, "evaluate", tuple(kinds))
        if self.tasks is not None:
            object.__setattr__(self, "tasks", _words(self.tasks))
        seqlen = self.ppl_seqlen
        if seqlen is not None and (isinstance(seqlen, bool) or not isinstance(seqlen, int) or seqlen < 2):
            raise OptionError(Option("ppl_seqlen", repr(seqlen)), "expected a whole number of tokens >= 2")

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(self.evaluate)


@dataclass(frozen=True)
class Output:
    """Where the pruned model is published."""

    out: str | Path = field(metadata=option("output directory (new, empty, or a previous result)"))
    overwrite: bool = field(
        default=False,
        metadata=option(
            "replace an --out that holds another model's or another recipe's result", action="store_true"
        ),
    )


@dataclass(frozen=True)
class PruneRequest:
    """One ``prune_model`` call: the model, the recipe (several for a combined pattern, in the order they
    run), where the calibration comes from, where it runs, what is evaluated, where it is published.
    ``part_of``: for a combined recipe's part after the first, what its report records of the recipe so far
    (the pattern up to this part, the base model, the parts before it)."""

    model: str = field(metadata=option("Hugging Face model directory or hub id"))
    recipes: tuple[Recipe, ...]
    sparsity: str  # the pattern as given: ``depth:4+neurons:0.3`` for a combined recipe
    calibration: CalibrationOptions
    resources: Resources
    evaluation: Evaluation
    output: Output
    dry_run: bool = field(
        default=False,
        metadata=option(
            "check everything and print what the run would do and the disk it needs; run nothing",
            action="store_true",
        ),
    )
    table_only: bool = field(
        default=False,
        metadata=option(
            "params:P only: measure the cost table of the size's search and print the mix it predicts for "
            "each size, its parameters and loss; write no model (a later run of the size reads the table)",
            action="store_true",
        ),
    )
    part_of: dict[str, Any] | None = None
    size: SizeGoal | None = None  # params:P: the recipes are chosen by ``thanos.runner.size``
    # False: the model stays where the run assembles it, undescribed (no card, no sparsity.json), and ``out``
    # is not written: a size's table point, measured there and deleted (``thanos.runner.size_search``)
    publish: bool = True

    @property
    def recipe(self) -> Recipe:
        """The one recipe of a request that is not combined."""
        if len(self.recipes) != 1:
            raise ValueError(f"{self.sparsity} is a combined recipe: run its parts (thanos.runner.combined)")
        return self.recipes[0]

    @property
    def combined(self) -> bool:
        return len(self.recipes) > 1


# the request's groups as the command's --help shows them: (title, fields, the prefix of their options)
GROUPS = (
    ("output", Output, ""),
    ("recipe", RecipeOptions, ""),
    (
        "recovery (each pruned block's kept weights trained to match the dense block's outputs; zeros kept)",
        Recovery,
        "recover_",
    ),
    (
        "distillation (the pruned model trained toward the dense model's next-token distributions on text; "
        "zeros kept; --distill-tokens N turns it on; docs/distillation.md)",
        Distillation,
        "distill_",
    ),
    ("size as the request (params:P)", SizeOptions, ""),
    ("calibration", CalibrationOptions, ""),
    ("where and how it runs", Resources, ""),
    ("evaluation of the pruned model (and of the dense model beside it)", Evaluation, ""),
)
FLAGS = FlagWords(flags(PruneRequest, *(group for _, group, _ in GROUPS)))


def build_request(
    model: Any, method: str | Recipe, sparsity: str | float | None, options: dict[str, Any]
) -> PruneRequest:
    """The request of ``prune_model``'s keywords (``options``: the keywords after ``sparsity``; those not
    given take their defaults). ``method`` may be a ``Recipe`` (then ``sparsity`` and the recipe's own
    keywords are not given)."""
    if not isinstance(model, str | os.PathLike):
        raise TypeError(
            f"model: give a Hugging Face model directory or hub id, not a loaded {type(model).__name__}; "
            "save it with model.save_pretrained(DIR) and tokenizer.save_pretrained(DIR), then pass DIR"
        )
    out = options.get("out")
    if not isinstance(out, str | os.PathLike) or not str(out).strip():
        raise OptionError(Option("out", out), "give the directory the pruned model is written to (a path)")
    recipe_fields = {f.name for f in dataclasses.fields(RecipeOptions)} - {"method", "sparsity"}
    size = _size_goal(method, sparsity, options, recipe_fields)
    if isinstance(method, Recipe):
        mixed = ["sparsity"] if sparsity is not None else []
        mixed += sorted(name for name in recipe_fields if options.get(name) is not None)
        if mixed:
            raise OptionError(
                [Option(name) for name in mixed],
                "the Recipe given as the method holds the recipe; set them in the Recipe",
                join=", ",
            )
        recipes, pattern = (method,), str(method.sparsity)
    else:
        recipe_options = RecipeOptions(method, sparsity, **{n: options.get(n) for n in recipe_fields})  # type: ignore[arg-type]
        recipes, pattern = recipe_options.recipes() if size is None else (), str(sparsity)
    return PruneRequest(
        str(model),
        recipes,
        pattern,
        _group(CalibrationOptions, options),
        _group(Resources, options),
        _group(Evaluation, options),
        _group(Output, options),
        bool(options.get("dry_run", False)),
        table_only=bool(options.get("table_only", False)),
        size=size,
    )


def _size_goal(method: Any, sparsity: Any, options: dict[str, Any], fields: set[str]) -> SizeGoal | None:
    """The size asked by ``params:P`` (its recipe options checked on the mix of every axis), else None;
    ``axes`` without ``params:P`` is refused."""
    fractions, axes = params_fractions(sparsity), _group(SizeOptions, options).axes
    if fractions is None:
        if axes is not None:
            raise OptionError(Option("axes", ",".join(axes)), f"is for params:P; {sparsity} names its mix")
        if options.get("table_only"):
            why = f"is for params:P (it measures a size's cost table); {sparsity} names its mix"
            raise OptionError(Option("table_only"), why)
        return None
    if isinstance(method, Recipe):
        raise OptionError(Option("sparsity", str(sparsity)), "give params:P with a method name, not a Recipe")
    owl = [name for name in ("profile", "owl_m", "owl_lambda") if options.get(name) is not None]
    if owl:
        raise OptionError(
            Option(owl[0], options[owl[0]]),
            f"OWL sets an unstructured sparsity per block, and {sparsity} removes structures; leave it out",
        )
    recipe = RecipeOptions(method, sparsity, **{name: options.get(name) for name in fields})  # type: ignore[arg-type]
    if recipe.vocab_text is not None and not any(takes(axis, "vocab_text") for axis in axes or AXES):
        raise OptionError(
            (Option("vocab_text", recipe.vocab_text), Option("axes", ",".join(axes or ()))),
            "the text chooses a vocabulary, and the axes leave the vocabulary out; add vocab or leave it out",
            join=" with ",
        )
    _check_axes(recipe, str(sparsity), list(axes or AXES))
    several = fractions if len(fractions) > 1 else ()
    return SizeGoal(fractions[0], tuple(axes or AXES), axes is not None, recipe, several)


# the recipe options of a size that only some kinds take: given for the parts that take them (the vocab
# part's text, the neurons part's width multiple), left out of a mix or a point without such a part
PART_OPTIONS = ("vocab_text", "width_multiple")


def for_pattern(recipe: RecipeOptions, pattern: str) -> RecipeOptions:
    """A size's recipe options for one of its mixes (``pattern``, explicit): without the options of
    ``PART_OPTIONS`` that no part of it takes (``depth:1`` of a size asked with ``--width-multiple 64``)."""
    kinds = [parse_sparsity(part).kind for part in combined_parts(pattern) or [pattern]]
    left_out = {name: None for name in PART_OPTIONS if not any(takes(kind, name) for kind in kinds)}
    return dataclasses.replace(recipe, sparsity=pattern, **left_out)


def _check_axes(recipe: RecipeOptions, size: str, axes: list[str]) -> None:
    """A size's recipe options checked on what it prunes: each axis alone (the points of its cost table),
    then every axis together (a mix it may write); what one of them refuses is said of the size, naming
    the axis (``--recover`` with the depth axis: its cost table measures depth alone, which recovers
    nothing: the axes that recover named)."""
    mix = {"depth": "depth:1", "heads": "heads:0.5", "neurons": "neurons:0.5", "vocab": "vocab:0.5"}
    if recipe.recover not in (None, False) and (
        idle := [a for a in axes if not parse_sparsity(mix[a]).structure.recovers]
    ):
        trained = [axis for axis in axes if axis not in idle]
        instead = ("give ", Option("axes", ",".join(trained)), " (the axes recovery trains), or ")
        raise OptionError(
            (Option("recover"), Option("sparsity", size)),
            f"its cost table measures each axis alone, and {' and '.join(idle)} "
            f"{'prune' if len(idle) > 1 else 'prunes'} no weight to recover; ",
            *(instead if trained else ()),
            "leave it out and run the chosen mix's recipe with ",
            Option("recover"),
        )
    parts = [mix[axis] for axis in axes]
    for pattern in (*parts, "+".join(parts)):
        try:
            for_pattern(recipe, pattern).recipes()
        except OptionError as err:
            if "+" in pattern:
                raise
            given = tuple(option for option in err.subject if option.name != "sparsity")
            first, *rest = err.problem or ("",)
            if not isinstance(first, str):
                first, rest = "", [first, *rest]
            said = f"its cost table prunes each axis alone, and {pattern}"
            said += first if first.startswith(" ") else ": " + first
            raise OptionError((*given, Option("sparsity", size)), said, *rest) from None


def _group(cls: type, options: dict[str, Any]) -> Any:
    """``cls`` with the ``options`` that are its fields (None: the field's default)."""
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{name: value for name, value in options.items() if name in names and value is not None})


def _words(value: str | Sequence[str]) -> list[str]:
    """A comma-separated text or a sequence, as a list of stripped non-empty words."""
    if isinstance(value, str):
        value = value.split(",")
    return [word.strip() for word in value if str(word).strip()]
