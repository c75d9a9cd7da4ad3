"""The training a recipe may add after pruning: recovery of each pruned block (``Recovery``) and
distillation of the pruned model toward the dense one (``Distillation``), each parsed from what a config or
a call gives and checked, its defaults filled. Torch-free."""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field, fields
from typing import Any

from thanos.errors import Option, OptionError
from thanos.options import option
from thanos.recipes.fields import ConfigError, check_fields, check_number, finite, invalid

RECOVERY_TARGETS = ("dense", "block")  # the dense model's outputs, or the dense block on the chain's inputs


@dataclass(frozen=True)
class Recovery:
    """Recovery of each pruned block (``thanos.pruning.recovery``): its kept weights trained for
    ``epochs`` passes over the calibration windows, Adam at learning rate ``lr`` (decayed linearly to 0),
    ``batch_size`` windows per step, the last ``holdout`` fraction of the windows held out for validation
    (the best epoch on them is kept). ``target``: ``dense``, the dense model's outputs of the block, or
    ``block``, the dense block applied to the block's own inputs (the pruned chain's)."""

    epochs: int = field(default=2, metadata=option("passes over the calibration windows"))
    lr: float = field(default=3e-3, metadata=option("Adam's learning rate, decayed linearly to 0"))
    batch_size: int = field(default=4, metadata=option("windows per step"))
    holdout: float = field(
        default=0.125, metadata=option("fraction of the windows held out to pick the best epoch")
    )
    target: str = field(
        default="dense",
        metadata=option(
            "dense: the dense model's outputs of each block (default); block: the dense block on the pruned "
            "chain's inputs",
            choices=list(RECOVERY_TARGETS),
        ),
    )

    @classmethod
    def parse(cls, key: str, value: Any, field: str = "recover") -> Recovery | None:
        """``recover`` as a config or a call gives it: None/false (none), true (the defaults), a mapping of
        options or a ``Recovery``; every option checked, the error naming ``key.option``."""
        if value is None or value is False:
            return None
        if value is True:
            return cls()
        if isinstance(value, Recovery):
            value = value.to_dict()
        if not isinstance(value, dict):
            raise invalid(key, field, "expected true, false or {epochs, lr, batch_size, holdout, target}")
        check_fields(f"{key}.{field}", value, cls, "option")
        options = {name: option for name, option in value.items() if option is not None}
        for name in ("epochs", "batch_size"):
            number = options.get(name, 1)
            if isinstance(number, bool) or not isinstance(number, int) or number < 1:
                raise invalid(key, f"{field}.{name}", f"expected a whole number >= 1, got {number!r}")
        for name, low, high in (("lr", 0, None), ("holdout", 0, 1)):
            number = options.get(name, getattr(cls, name))
            check_number(key, f"{field}.{name}", number)
            if not (number > low and (high is None or number < high)):
                bounds = f"> {low}" + (f" and < {high}" if high is not None else "")
                raise invalid(key, f"{field}.{name}", f"expected a number {bounds}, got {number!r}")
        if options.get("target", "dense") not in RECOVERY_TARGETS:
            targets = ", ".join(RECOVERY_TARGETS)
            raise invalid(key, f"{field}.target", f"{options['target']!r} is not one of {targets}")
        return cls(**{name: float(v) if name in ("lr", "holdout") else v for name, v in options.items()})

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def held_out(self, nsamples: int) -> int:
        """How many of ``nsamples`` calibration windows are held out for validation: ceil(holdout * n), at
        least 1; refused when that leaves none for training."""
        held = max(1, math.ceil(self.holdout * nsamples))
        if held >= nsamples:
            raise ConfigError(
                f"{held} of the {nsamples} calibration windows would be held out for validation and none "
                "left for training; use more calibration windows or a smaller holdout"
            )
        return held

    def tag(self) -> str:
        """``_rec`` and each option that differs from its default: ``_rec-e4-lr0.0003``."""
        short = {"epochs": "e", "lr": "lr", "batch_size": "b", "holdout": "h", "target": "t"}
        return "_rec" + "".join(
            f"-{short[f.name]}{getattr(self, f.name):g}"
            if not isinstance(getattr(self, f.name), str)
            else f"-{short[f.name]}{getattr(self, f.name)}"
            for f in fields(self)
            if getattr(self, f.name) != f.default
        )


STREAMED = "hf:"  # a distillation source streamed with ``datasets``: hf:NAME or hf:NAME:CONFIG


def streamed_dataset(source: str) -> tuple[str, str | None] | None:
    """(NAME, CONFIG or None) of an ``hf:NAME[:CONFIG]`` source (a hub dataset, or a local dataset
    directory, read by ``datasets`` in streaming mode); None for any other source."""
    if not source.startswith(STREAMED):
        return None
    name, _, config = source.removeprefix(STREAMED).partition(":")
    return name, config or None


@dataclass(frozen=True)
class Distillation:
    """Distillation of the pruned model toward the dense one (``thanos.stages.distill.distill``): ``tokens``
    (the budget: windows trained on x seqlen) of ``source`` (``c4``, ``hf:NAME[:CONFIG]`` streamed from the
    hub, or a local text/jsonl/parquet file or directory; ``text_field`` of its records), ``seqlen``,
    ``batch_size`` windows per optimizer step over every process, ``micro_batch`` windows per forward, ``lr``
    (AdamW's peak), ``warmup`` steps (None: a tenth of the steps), ``heldout`` windows of the text, a
    checkpoint every ``checkpoint_every`` steps, ``seed`` of the windows' order, ``hidden_weight`` (the
    hidden-state loss's weight; 0: the logits' KL alone). Torch-free: the recipe's ``distill``, the workflow's
    config, ``thanos distill`` and ``prune-model``'s ``--distill-*`` options all take it."""

    tokens: int = field(
        metadata=option("the token budget: windows trained on x seqlen", type=int, metavar="N")
    )
    source: str = field(
        default="c4",
        metadata=option(
            "c4 (the first English training shard of allenai/c4, from the hub), hf:NAME[:CONFIG] (the train "
            "split of a hub dataset, streamed, read only as far as the budget needs) or a local "
            "text/jsonl/parquet file or directory"
        ),
    )
    text_field: str = field(default="text", metadata=option("jsonl/parquet field holding the text"))
    seqlen: int = field(default=512, metadata=option("window length in tokens"))
    batch_size: int = field(default=8, metadata=option("windows per optimizer step, over every process"))
    micro_batch: int = field(default=1, metadata=option("windows per forward pass: gradient accumulation"))
    lr: float = field(default=1e-4, metadata=option("peak learning rate of AdamW"))
    warmup: int | None = field(
        default=None, metadata=option("warm-up steps (default: a tenth of the steps)", type=int)
    )
    heldout: int = field(default=8, metadata=option("windows of the text held out"))
    checkpoint_every: int = field(default=50, metadata=option("steps between checkpoints"))
    seed: int = field(default=0, metadata=option("seed of the windows' order"))
    hidden_weight: float = field(
        default=0.0,
        metadata=option(
            "add the hidden-state loss with this weight: each student block's output matched to the output "
            "of the teacher block it stands for (relative squared error; blocks removed by depth:k are read "
            "from the student's pruning report); default 0: the logits' KL only"
        ),
    )

    def __post_init__(self) -> None:
        at_least = {"tokens": 1, "seqlen": 2, "batch_size": 1, "micro_batch": 1, "heldout": 1}
        at_least |= {"checkpoint_every": 1, "warmup": 0, "seed": 0}
        for name, low in at_least.items():
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < low):
                raise OptionError(Option(name, repr(value)), f"give a whole number >= {low}")
        if not (finite(self.lr) and self.lr > 0):
            raise OptionError(Option("lr", repr(self.lr)), "give a positive learning rate (e.g. 1e-4)")
        if not (finite(self.hidden_weight) and self.hidden_weight >= 0):
            raise OptionError(
                Option("hidden_weight", repr(self.hidden_weight)), "give a number >= 0 (0: logits only)"
            )
        object.__setattr__(self, "lr", float(self.lr))
        object.__setattr__(self, "hidden_weight", float(self.hidden_weight))
        for name in ("source", "text_field"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise OptionError(Option(name, repr(getattr(self, name))), "give a non-empty text")
        if (dataset := streamed_dataset(self.source)) is not None and not dataset[0].strip():
            raise OptionError(
                Option("source", repr(self.source)),
                "names no dataset; give hf:NAME or hf:NAME:CONFIG (hf:allenai/c4:en)",
            )

    @classmethod
    def parse(cls, key: str, value: Any, field: str = "distill") -> Distillation | None:
        """``distill`` as a config or a call gives it: None/false (none), a mapping of options with at
        least ``tokens``, or a ``Distillation``; every option checked, the error naming ``key.option``."""
        if value is None or value is False:
            return None
        if isinstance(value, Distillation):
            return value
        if not isinstance(value, dict) or "tokens" not in value:
            raise invalid(key, field, f"expected {{tokens, source, lr, ...}} (tokens needed), got {value!r}")
        check_fields(f"{key}.{field}", value, cls, "option")
        try:
            return cls(**{name: option for name, option in value.items() if option is not None})
        except OptionError as err:
            option, problem = err.subject[0], str(err.problem[-1])
            name = f"{field}.{option.name}"
            raise ConfigError(f"{key}.{name}: got {option.value}; {problem}", name, problem) from None

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @property
    def steps(self) -> int:
        """Optimizer steps: the budget in windows of seqlen tokens, ceil-divided by the batch."""
        return math.ceil(math.ceil(self.tokens / self.seqlen) / self.batch_size)

    @property
    def warmup_steps(self) -> int:
        return self.warmup if self.warmup is not None else max(1, self.steps // 10)

    def tag(self) -> str:
        """``_kd{tokens}`` and each option that differs from its default (``_kd131072-lr0.0003-b4``), the
        source as a digest of its text (``-s1a2b3c4d``)."""
        short = {"seqlen": "L", "batch_size": "b", "micro_batch": "mb", "lr": "lr", "warmup": "w"}
        short |= {
            "heldout": "h",
            "checkpoint_every": "c",
            "seed": "seed",
            "text_field": "f",
            "hidden_weight": "hw",
        }
        name = f"_kd{self.tokens}"
        if self.source != "c4":
            name += "-s" + hashlib.sha256(self.source.encode()).hexdigest()[:8]
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in short and value != f.default:
                name += (
                    f"-{short[f.name]}{value:g}" if isinstance(value, float) else f"-{short[f.name]}{value}"
                )
        return name
