"""Arguments shared by several commands, defined once: the recipe, the device, batching, model placement
and offline mode of the evaluations, and text sources. Torch-free, like every ``add_arguments``."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from thanos import options
from thanos.runner.recipe_options import RecipeOptions, positive  # noqa: F401 - positive: the commands' type
from thanos.runner.request import DTYPES, CalibrationOptions

if TYPE_CHECKING:
    from thanos.recipes.recipe import Recipe

DEVICE_HELP = "auto (CUDA if available, else CPU), cpu, cuda or cuda:N (default: auto)"
DTYPE_CHOICES = DTYPES  # the dtypes a model is computed in, named without torch
DTYPE_AUTO = (
    "auto: the checkpoint's dtype where the device multiplies it faster than float32 (a GPU; a CPU where it "
    "measured at least 1.2x the float32 rate, once per machine), else float32"
)


# --sparsity of the stage commands that prune layers one recipe at a time (what they take, where the rest go)
LAYER_SPARSITY = (
    "one structure of the layers: 0.5 (unstructured), 2:4, 4:8, structured:0.3, neurons:0.3, heads:0.33, "
    "kv_heads:0.25 (depth:K is thanos depth's; vocab:P, structures joined with + and params:P run whole "
    "with thanos prune-model)"
)


def add_recipe(parser: argparse.ArgumentParser, sparsity: str | None = None) -> None:
    """The recipe: ``--recipe JSON`` (``thanos.recipes.recipe.Recipe.to_json``, what the workflow's jobs
    pass), or --method, --sparsity and the optional options by hand, as ``thanos prune-model`` takes them
    (the fields of ``thanos.runner.recipe_options.RecipeOptions``; ``sparsity``: the help of --sparsity
    where the command takes fewer forms); ``recipe(args)`` builds the ``Recipe``."""
    group = parser.add_argument_group("recipe (--recipe JSON, or --method and --sparsity with options)")
    group.add_argument(
        "--recipe", default=None, metavar="JSON", help='the recipe as JSON: {"method": ..., "sparsity": ...}'
    )
    for name in RECIPE_OPTIONS:
        add_option(group, name, sparsity if name == "sparsity" else None)


def add_option(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup, name: str, help: str | None = None
) -> None:
    """The recipe option ``name`` as ``thanos prune-model`` declares it (``RecipeOptions``' field), not
    required (``help``: the command's own words for it)."""
    options.add_option(parser, options.named(RecipeOptions, name), required=False, help=help)


def add_owl(parser: argparse.ArgumentParser) -> None:
    """--owl: the recipe's owl.json (``thanos owl``), each block pruned at its sparsity there."""
    parser.add_argument(
        "--owl",
        default=None,
        help="owl.json of `thanos owl`: prune each block at its OWL sparsity (--sparsity is the target)",
    )


RECIPE_OPTIONS = ("method", "sparsity", "blocksize", "alpha", "damp", "exclude")


OWL_OPTIONS = ("owl_m", "owl_lambda")  # ``thanos owl``'s recipe options besides RECIPE_OPTIONS


def recipe(args: argparse.Namespace, owl: bool = False) -> Recipe:
    """The ``Recipe`` of ``--recipe JSON``, or of --method, --sparsity and the options (not both); ``owl``:
    the recipe of ``thanos owl`` (profile owl, with --owl-m and --owl-lambda when given)."""
    from thanos.recipes.fields import ConfigError
    from thanos.recipes.recipe import Recipe

    names = RECIPE_OPTIONS + (OWL_OPTIONS if owl else ())
    given = {name: getattr(args, name) for name in names if getattr(args, name) is not None}
    if args.recipe is not None:
        if given:
            raise ConfigError(f"--recipe: give the recipe as JSON or as --{', --'.join(given)}, not both")
        return Recipe.from_json(args.recipe, key="--recipe")
    if "method" not in given or "sparsity" not in given:
        raise ConfigError("--recipe JSON, or --method and --sparsity, are required")
    return Recipe.from_dict(given | ({"profile": "owl"} if owl else {}), key="recipe")


def add_model_info(parser: argparse.ArgumentParser) -> None:
    """--model-info: the layers by name from ``model_info.json``, without building the model."""
    parser.add_argument(
        "--model-info",
        default=None,
        help="the model's model_info.json (`thanos model-info`): its layers by name, without building the "
        "model (default: found from the model's transformers code)",
    )


def add_device(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", default="auto", help=DEVICE_HELP)


def add_compute_dtype(parser: argparse.ArgumentParser) -> None:
    """--compute-dtype: the dtype the model's blocks run in (``thanos.stages.common.compute_dtype``)."""
    parser.add_argument(
        "--compute-dtype",
        default="auto",
        choices=DTYPE_CHOICES,
        help=f"the dtype the blocks are computed in (default {DTYPE_AUTO}: bf16 on an AVX2 CPU runs at a "
        "quarter of its fp32 rate); Hessians are float32 and the stores and written weights keep the "
        "checkpoint's dtype",
    )


def add_batch_size(parser: argparse.ArgumentParser, default: int, unit: str) -> None:
    """--batch-size: ``unit`` per forward pass (samples, windows)."""
    parser.add_argument(
        "--batch-size", type=positive, default=default, help=f"{unit} per forward pass (default: {default})"
    )


def add_placement(parser: argparse.ArgumentParser) -> None:
    """Where and in which dtype an evaluated model is loaded: --device, --device-map, --dtype."""
    add_device(parser)
    parser.add_argument(
        "--device-map",
        choices=["auto"],
        default=None,
        help="'auto': spread the model over all visible GPUs (for models that do not fit one GPU); "
        "overrides --device",
    )
    parser.add_argument(
        "--dtype",
        default="auto",
        choices=DTYPE_CHOICES,
        help=f"the dtype the model is loaded and run in (default {DTYPE_AUTO})",
    )


def placement(args: argparse.Namespace) -> dict[str, Any]:
    """The placement arguments as keywords of the evaluation functions."""
    return {"device": args.device, "device_map": args.device_map, "dtype": args.dtype}


def add_evaluation(parser: argparse.ArgumentParser) -> None:
    """The options every evaluation shares: model placement, --offline and the output JSON."""
    add_placement(parser)
    parser.add_argument(
        "--offline",
        action="store_true",
        help="never contact the hub: sets HF_DATASETS_OFFLINE=1 and HF_HUB_OFFLINE=1 (models and datasets "
        "must be local or cached)",
    )
    parser.add_argument("--out", required=True, help="output JSON (written atomically)")


def check_json_out(path: str, name: str, reads: Sequence[tuple[str, str]], option: str = "out") -> None:
    """Refuse, before any work, an output JSON (``option``, ``path``; ``name``: the file name to suggest)
    that its write at the end would fail on or that would destroy what is there: a directory (the file
    would take its place), a path under a file or in a directory that cannot be written, one of the files
    the command reads or a path inside a directory it reads (``reads``: (option, path) pairs, the model's
    among them: a model directory holds the model's own files, and a published model refuses one added;
    a hub name reads no local file)."""
    from thanos.errors import Option, OptionError

    given, target = Option(option, path), Path(path).expanduser()
    if not path.strip() or path.endswith(("/", os.sep)) or target.name in ("", ".", ".."):
        raise OptionError(given, f"give a file path, such as {name}")
    if target.is_dir():
        raise OptionError(given, f" is a directory; give a file path, such as {target / name}")
    target = target.resolve()
    parent = next(folder for folder in target.parents if folder.exists())
    if not parent.is_dir():
        raise OptionError(given, f"{parent} is a file, not a directory; give a path in a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OptionError(given, f"{parent} cannot be written to; give a path in a directory you can write")
    _check_apart(given, target, reads)
    if target.is_file() and not _json_object(target):  # a result's JSON is replaced; anything else is not
        raise OptionError(
            given, " holds a file that is not a JSON result (this command's earlier output); give another "
            f"path, such as {target.parent / name}, or delete it first",
        )  # fmt: skip


def _json_object(path: Path) -> bool:
    """Whether ``path`` holds a JSON object (an earlier result's), read up to 64 MB."""
    import json

    try:
        if path.stat().st_size > 1 << 26:
            return False
        return isinstance(json.loads(path.read_text(encoding="utf-8")), dict)
    except (OSError, ValueError):
        return False


def wrote(path: str) -> None:
    """Say where a command's result went (the last line of its log)."""
    import logging

    logging.getLogger("thanos").info("wrote %s", path)


def check_store_out(path: str, reads: Sequence[tuple[str, str]], option: str = "out") -> None:
    """Refuse, before any work, a zarr store's output (``option``, ``path``) that would replace what the
    command reads (``reads``: (option, path) pairs): one of them, a directory holding one (the store is
    written beside its path, then renamed over it), or a path inside an input store (a model directory may
    hold stores of its own)."""
    from thanos.errors import Option, OptionError

    given, target = Option(option, path), Path(path).expanduser().resolve()
    _check_apart(given, target, reads, inside=lambda name: name != "model")
    for option_read, read in reads:
        source = Path(read).expanduser()
        if source.exists() and target in source.resolve().parents:
            raise OptionError(
                given, " holds ", Option(option_read, read),
                ", which the command reads, and the store would replace it; give the store a path of its own",
            )  # fmt: skip


def _check_apart(
    given: Any, target: Path, reads: Sequence[tuple[str, str]], inside: Callable[[str], bool] = lambda _: True
) -> None:
    """Refuse an output ``target`` (resolved; ``given``: its option) that is one of ``reads`` or inside one
    that is a directory and whose option ``inside`` names (a hub name reads no local file)."""
    from thanos.errors import Option, OptionError

    for option_read, read in reads:
        source = Path(read).expanduser()
        if not source.exists():
            continue
        source = source.resolve()
        if target == source:
            raise OptionError(
                given, " is ", Option(option_read, read), ", which the command reads; give another path"
            )
        if inside(option_read) and source.is_dir() and source in target.parents:
            raise OptionError(
                given, " is inside ", Option(option_read, read),
                ", a directory the command reads (a model directory holds the model's files only); give a "
                "path outside it",
            )  # fmt: skip


def add_only(parser: argparse.ArgumentParser) -> None:
    """--only MODEL/VARIANT ...: the report commands' (tables, figures) choice of what they show."""
    parser.add_argument(
        "--only",
        nargs="+",
        default=None,
        metavar="MODEL/VARIANT",
        help="show only these models' variants (dense or a recipe's name); the workflow passes its config's, "
        "so that a recipe the config no longer names, evaluated under other settings, is left out "
        "(default: every one under --results)",
    )


def apply_offline(args: argparse.Namespace) -> None:
    """Set the offline environment before datasets, transformers or lm_eval are imported: ``--offline``, or
    a hub that cannot be reached where the command may read from it (a hub model id or dataset, the
    built-in zero-shot tasks): its cache read at once, where the clients retried for half a minute."""
    import logging

    from thanos.evaluation.loading import set_offline

    if args.offline:
        set_offline()
        return
    local = [Path(path).expanduser().exists() for path in (args.model, getattr(args, "source", None)) if path]
    if all(local) and not hasattr(args, "tasks") or os.environ.get("HF_HUB_OFFLINE") == "1":
        return  # nothing from the hub (a zero-shot task's documents may be)
    from thanos.runner.sources import hub_unavailable

    if (why := hub_unavailable()) is not None:
        logging.getLogger("thanos").info(
            "the hub is not available (%s): models and datasets from its local cache only", why
        )
        set_offline()


def add_text_source(parser: argparse.ArgumentParser, default: str, hub: str) -> None:
    """--source (``default`` names the hub dataset described by ``hub``, or a local path) and --text-field."""
    parser.add_argument(
        "--source",
        default=default,
        help=f"'{default}' ({hub}) or a local text/jsonl/parquet file or directory (default: %(default)s)",
    )
    parser.add_argument(
        "--text-field", default="text", help="jsonl/parquet field holding the text (default: text)"
    )


WINDOWS = ("nsamples", "seqlen", "seed")  # the calibration windows' options a stage command takes


def add_windows(parser: Any) -> None:
    """--nsamples, --seqlen and --seed as ``thanos prune-model`` declares them (``CalibrationOptions``'
    fields: their help, type and default, declared once)."""
    for name in WINDOWS:
        options.add_option(parser, options.named(CalibrationOptions, name))


def windows(args: argparse.Namespace) -> CalibrationOptions:
    """The calibration options on the command line (``add_windows``'; ``--text-field``), the declared
    defaults for the others (``options.given``): a ``CalibrationOptions``, checked as ``thanos prune-model``
    checks them."""
    return CalibrationOptions(**options.given(args, CalibrationOptions))
