"""One part of a combined recipe (``depth:4+neurons:0.3``) as a workflow job: every stage of the part
(``thanos.stages.parts.run_part``: the engine, as ``thanos prune-model`` runs each part) on the model the
part before wrote, in its own working directory, which a killed job resumes from. The first part reads the
workflow's tokens and dense chain of the input model (--model-info, --tokens, --dense-dir); the later ones
calibrate on the model they read (--source, --nsamples, --seqlen, --seed, --text-field). The last part
(--combined) records the whole recipe in its report."""

from __future__ import annotations

import argparse
from pathlib import Path

from thanos.commands import _args

HELP = "one part of a combined recipe on the previous part's model, every stage in one process -> its model"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model", required=True, help="the model the part reads: the input model, or the part before's"
    )
    _args.add_recipe(parser)
    parser.add_argument("--work", required=True, help="the part's working directory (results/M/R/parts/I)")
    given = parser.add_argument_group("the first part: what the workflow's jobs wrote of the input model")
    given.add_argument("--model-info", default=None, help="the input model's model_info.json")
    given.add_argument("--tokens", default=None, help="the calibration tokens.zarr")
    given.add_argument("--dense-dir", default=None, help="the dense chain's stores")
    own = parser.add_argument_group("a later part: its calibration (computed on the model it reads)")
    _args.add_text_source(own, "c4", "hub: allenai/c4")
    _args.add_windows(own)
    last = parser.add_argument_group("the last part: what its report records of the whole recipe")
    last.add_argument(
        "--combined", default=None, metavar="PATTERN", help="the whole pattern (depth:4+neurons:0.3)"
    )
    last.add_argument("--base-model", default=None, help="the model the first part read")
    last.add_argument("--earlier", nargs="*", default=[], help="the earlier parts' models, in order")
    parser.add_argument("--model-name", default=None, help="the model's name in the config (for the report)")
    parser.add_argument("--granularity", default=None, help="how the workflow ran (for the report)")
    parser.add_argument("--granularity-reason", default=None, help="why that granularity (for the report)")
    parser.add_argument("--max-shard-size", default="2GB", help="largest safetensors shard (default 2GB)")
    for kind in ("activations", "hessians", "layers"):
        parser.add_argument(
            f"--drop-{kind}", action="store_true", help=f"retention: delete the part's {kind}"
        )
    _args.add_device(parser)
    _args.add_compute_dtype(parser)
    parser.add_argument("--out", required=True, help="the part's model directory")


def run(args: argparse.Namespace) -> None:
    from thanos.files.locks import exclusive_out
    from thanos.stages.describe.provenance import RunRecord
    from thanos.stages.engine import Calibration, RunOptions
    from thanos.stages.parts import Given, combined_record, run_part

    first = args.model_info is not None
    optional = {name: getattr(args, name) for name in ("tokens", "dense_dir")}
    given = Given(Path(args.model_info), **{k: Path(v) for k, v in optional.items() if v}) if first else None
    calibration = None
    if not first:
        windows = _args.windows(args)
        calibration = Calibration(
            args.source, windows.nsamples, windows.seqlen, windows.seed, args.text_field
        )
    how = {"granularity": args.granularity, "granularity_reason": args.granularity_reason}
    if args.combined:
        how["combined"] = combined_record(args.combined, args.base_model, [Path(m) for m in args.earlier])
    work, recipe = Path(args.work), _args.recipe(args)
    record = RunRecord(args.model_name, workflow=how if args.granularity or args.combined else None)
    drop = tuple(k for k, d in (("inputs", args.drop_activations), ("hessians", args.drop_hessians)) if d)
    options = RunOptions(
        args.device, drop=drop, drop_layers=args.drop_layers, max_shard_size=args.max_shard_size,
        record=record, dtype=args.compute_dtype,
    )  # fmt: skip
    with exclusive_out(args.out):  # one writer of --out
        run_part(args.model, recipe, work, Path(args.out), calibration, given, options)
