"""The patterns of ``prune_model``'s ``sparsity`` beyond one structure: a combined recipe
(``depth:4+neurons:0.3+vocab:0.3``, its parts in the order they run) and a size asked for (``params:0.25``:
the mix chosen by ``thanos.runner.size``). Torch-free: the command's ``--help`` imports it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any

from thanos.errors import Option, OptionError
from thanos.options import option
from thanos.pruning.sparsity import UnknownForm, did_you_mean, exact, parse_sparsity, sparsity_problem
from thanos.pruning.structures import AXES, COMBINING

# a combined recipe's parts run in the order of ``COMBINING`` whatever the order written (blocks, heads,
# neurons, then the vocabulary on the model the width parts wrote: ``thanos.pruning.structures``)
JOINED = "depth:K, heads:P (or kv_heads:P), neurons:P and vocab:P (or vocab:N)"


def combined_parts(sparsity: Any) -> list[str] | None:
    """The parts of a combined pattern (``depth:4+neurons:0.3``) in the order they run; None for one
    pattern. Refused: a part that removes no structure (unstructured, n:m, structured), a kind twice."""
    if not isinstance(sparsity, str) or "+" not in sparsity:
        return None
    if any(not part.strip() for part in sparsity.split("+")):
        raise OptionError(
            Option("sparsity", repr(sparsity)),
            f"a part is empty; join {JOINED} with '+', e.g. depth:4+neurons:0.3",
        )
    parts = []
    for text in sparsity.split("+"):
        try:
            parts.append(parse_sparsity(text))
        except UnknownForm:
            said = f"is no structure{did_you_mean(text)}; a combined recipe joins {JOINED} with '+'"
            raise OptionError(
                Option("sparsity", repr(sparsity)), f"its part {text.strip()!r} {said}"
            ) from None
        except ValueError as err:
            said = sparsity_problem(err, text)
            raise OptionError(
                Option("sparsity", repr(sparsity)), f"its part {text.strip()!r}: {said}"
            ) from None
    for part in parts:
        if part.kind not in COMBINING:
            raise OptionError(
                Option("sparsity", repr(sparsity)),
                f"{part} cannot be combined; a combined recipe joins {JOINED} with '+', e.g. "
                "depth:4+neurons:0.3",
            )
    ranks = [COMBINING[part.kind] for part in parts]
    if len(set(ranks)) != len(ranks):
        raise OptionError(
            Option("sparsity", repr(sparsity)), "each of depth, heads, neurons and vocab at most once"
        )
    return [str(part) for part in sorted(parts, key=lambda part: COMBINING[part.kind])]


@dataclass(frozen=True)
class SizeOptions:
    """``params:P`` only: the structures the search may combine."""

    axes: str | Sequence[str] | None = field(
        default=None,
        metadata=option(
            "params:P only: the structures the search combines, comma-separated (default "
            f"{','.join(AXES)}; vocab where the tokenizer is BPE)"
        ),
    )

    def __post_init__(self) -> None:
        if self.axes is None:
            return
        words = self.axes.split(",") if isinstance(self.axes, str) else list(self.axes)
        axes = [str(word).strip() for word in words if str(word).strip()]
        unknown = [axis for axis in axes if axis not in AXES]
        if unknown or not axes:
            raise OptionError(Option("axes", ",".join(map(str, words))), f"choose from {', '.join(AXES)}")
        object.__setattr__(self, "axes", tuple(axis for axis in AXES if axis in axes))


@dataclass(frozen=True)
class SizeGoal:
    """A size as the request: remove at least the fraction ``p`` of the parameters, with the mix of ``axes``
    that loses least (``thanos.runner.size``); ``options``: the recipe options every candidate takes
    (``thanos.runner.recipe_options.RecipeOptions``, its ``sparsity`` each candidate's)."""

    p: Fraction
    axes: tuple[str, ...]
    given: bool  # the axes named by --axes (else every axis the model has)
    options: Any
    sizes: tuple[Fraction, ...] = ()  # params:P1,P2,...: every size asked, smallest first (``p`` the first)

    def __str__(self) -> str:
        return "params:" + ",".join(f"{float(p):g}" for p in self.sizes or (self.p,))

    def each(self) -> list[SizeGoal]:
        """One goal per size asked (this one when it is one)."""
        return [replace(self, p=p, sizes=()) for p in self.sizes] if self.sizes else [self]


def params_fraction(sparsity: Any) -> Fraction | None:
    """The fraction of ``params:P`` (the smallest of ``params:P1,P2,...``); None for any other pattern.
    ``params:P`` is the whole request."""
    fractions = params_fractions(sparsity)
    return fractions[0] if fractions else None


def params_fractions(sparsity: Any) -> tuple[Fraction, ...] | None:
    """The fractions of ``params:P`` or ``params:P1,P2,...`` (several sizes), smallest first; None for any
    other pattern."""
    if not isinstance(sparsity, str) or "params" not in sparsity.lower():
        return None
    text = sparsity.strip().lower()
    if "+" in text or not text.startswith("params:"):
        raise OptionError(
            Option("sparsity", repr(sparsity)),
            "params:P asks for a size and the tool chooses the mix; give it alone (e.g. params:0.25, or "
            "several sizes params:0.15,0.25,0.35)",
        )
    fractions = []
    for word in text.split(":", 1)[1].split(","):
        try:
            p = exact(word.strip())
        except (ValueError, ZeroDivisionError):
            p = Fraction(-1)
        if not 0 < p < 1:
            raise OptionError(
                Option("sparsity", repr(sparsity)),
                "params takes the fraction of the parameters removed, in (0, 1), or several separated by "
                "commas (params:0.15,0.25,0.35)",
            )
        if p in fractions:  # params:0.2,0.2 (one size: its model went to --out itself, not params0.2/)
            raise OptionError(
                Option("sparsity", repr(sparsity)), f"names the size {float(p):g} twice; give each size once"
            )
        fractions.append(p)
    return tuple(sorted(fractions))
