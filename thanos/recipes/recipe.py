"""The recipe: a method, a sparsity pattern and its options, parsed and checked once, defaults filled.

A ``Recipe`` is what crosses every boundary: the workflow's config expands into recipes
(``thanos.workflow_config.expand``), ``prune_model`` builds one from its keywords, a job takes one as JSON
text (``--recipe``, ``to_json``) and a stage takes ``recipe: Recipe``. Constructing one checks it (errors
name the config key and the field), so a recipe that exists is valid, and fills every unset option by one
policy, the method's defaults (``thanos.pruning.methods``): n:m is exact n:m (alpha 0) for every method,
Thanos structured keeps 10 % of the rows dense (alpha 0.1), Thanos's block size is 128 unstructured and 512
n:m, damping 0.01.

One naming function, ``Recipe.default_name``: ``{method}_{pattern}`` and then only the options that differ
from those defaults (``thanos_2-4``, ``thanos_2-4_a0.1``, ``sparsegpt_u50_B64``, ``wanda_u70_owl``,
``thanos_n30_zeros``, ``thanos_u70_rec``, ``thanos_n30_kd131072``); ``from_name`` reads method, sparsity
and alpha back. A new recipe option is one field here (with its check and its name tag). Torch-free: the
workflow imports this module while it parses.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Sequence
from dataclasses import InitVar, dataclass, fields, replace
from typing import Any

from thanos.files.layout import RECIPE_NAME, RESERVED
from thanos.pruning import methods
from thanos.pruning.owl import DEFAULT_LAMBDA, DEFAULT_M
from thanos.pruning.sparsity import (
    COMPACT_KINDS,
    WIDTH_MULTIPLE,
    Sparsity,
    UnknownForm,
    check_alpha,
    parse_sparsity,
    sparsity_problem,
)
from thanos.pruning.structures import takes
from thanos.recipes.fields import ConfigError, check_fields, check_number, invalid
from thanos.recipes.names import pattern_tag
from thanos.recipes.training import Distillation, Recovery

PROFILES = ("uniform", "owl")  # the sparsity of every block, or per block by its outliers (OWL)
CHAINS = ("sequential", "dense")  # where a block's calibration inputs come from (README: chains)
DEFAULT_DAMP = 0.01
OWL_DEFAULTS = {"owl_m": DEFAULT_M, "owl_lambda": DEFAULT_LAMBDA}  # OWL's M and lambda


@dataclass(frozen=True)
class Recipe:
    """One way to prune a model. Every field is set after construction: ``Recipe("r", "thanos", "2:4")``
    has alpha 0.0, blocksize 512, damp 0.01, profile uniform; ``name=None`` takes ``default_name()``.

    ``chain`` (sequential or dense) is the workflow's: it decides which inputs calibrate each block.
    ``compact`` (neurons:p, heads:p, kv_heads:p only): write the model without the removed neurons or heads
    (their default). ``block_map`` (depth:k only): replace each run of removed blocks by a linear map fitted
    on the calibration activations and folded into the block before it (their default).
    """

    name: str | None
    method: str
    sparsity: Sparsity
    blocksize: int | None = None
    alpha: float | None = None
    damp: float | None = None
    exclude: tuple[str, ...] = ()  # regular expressions: the layers they match stay dense
    compact: bool | None = None
    profile: str | None = None  # "uniform": every block at ``sparsity``; "owl": per block (OWL)
    owl_m: float | None = None
    owl_lambda: float | None = None
    recover: Recovery | None = None  # recovery of every pruned block (``Recovery``), none by default
    block_map: bool | None = None  # depth:k only: each run of removed blocks replaced by a fitted map
    width_multiple: int | None = None  # neurons:p only: the kept MLP width's multiple (``neuron_count``)
    vocab_text: str | None = None  # vocab:N/vocab:p only: the text choosing the tokens (None: calibration)
    distill: Distillation | None = None  # the pruned model distilled toward the dense one, none by default
    chain: str = "sequential"
    key: InitVar[str] = "recipe"  # the config key errors name

    def __post_init__(self, key: str) -> None:
        set_ = object.__setattr__  # frozen: the parsed values and defaults are set once, here
        spec = methods.METHODS.get(self.method) if isinstance(self.method, str) else None
        if spec is None:
            choices = ", ".join(methods.METHODS)
            raise invalid(key, "method", f"unknown method {self.method!r}; choose one of {choices}")
        pattern = check_sparsity(key, self.sparsity)
        set_(self, "sparsity", pattern)
        for name in ("alpha", "damp", "owl_m", "owl_lambda"):
            check_number(key, name, getattr(self, name))
        alpha = spec.default_alpha(pattern.kind) if self.alpha is None else float(self.alpha)
        try:
            check_alpha(pattern, alpha)
        except ValueError as err:
            raise invalid(key, "alpha", str(err)) from None
        set_(self, "alpha", alpha)
        blocksize = spec.default_blocksize(pattern.kind) if self.blocksize is None else self.blocksize
        if blocksize is not None and (
            isinstance(blocksize, bool) or not isinstance(blocksize, int) or blocksize < 1
        ):
            raise invalid(key, "blocksize", f"expected a positive integer, got {blocksize!r}")
        set_(self, "blocksize", blocksize)
        damp = DEFAULT_DAMP if self.damp is None else float(self.damp)
        if not damp > 0:
            raise invalid(key, "damp", f"expected a number > 0 (a fraction of mean(diag H)), got {damp}")
        set_(self, "damp", damp)
        set_(self, "exclude", check_exclude(key, self.exclude))
        set_(self, "compact", _compact(key, pattern, self.compact))
        set_(self, "block_map", _block_map(key, pattern, self.block_map))
        set_(self, "width_multiple", _width_multiple(key, pattern, self.width_multiple))
        if self.width_multiple is not None:
            set_(self, "sparsity", replace(pattern, multiple=self.width_multiple))
        set_(self, "vocab_text", _vocab_text(key, pattern, self.vocab_text))
        set_(self, "profile", self.profile or "uniform")
        for name, value in _owl(key, pattern, self.profile, self.owl_m, self.owl_lambda).items():
            set_(self, name, value)
        set_(self, "recover", Recovery.parse(key, self.recover))
        if self.recover is not None and not self.needs_hessian:
            raise invalid(
                key,
                "recover",
                f"recovery trains on the calibration windows; method {self.method} uses none "
                "(use wanda, sparsegpt or thanos)",
            )
        set_(self, "distill", Distillation.parse(key, self.distill))
        if self.chain not in CHAINS:
            raise invalid(key, "chain", f"{self.chain!r} is not one of {', '.join(CHAINS)}")
        set_(self, "name", self.default_name() if self.name is None else self.name)
        if not isinstance(self.name, str) or not RECIPE_NAME.fullmatch(self.name) or self.name in RESERVED:
            raise ConfigError(
                f"{key}: recipe name {self.name!r} is reserved or invalid: use letters, digits and _.+- "
                f"(starting with a letter or digit), and none of {', '.join(RESERVED)}"
            )

    @classmethod
    def from_dict(cls, data: dict[str, Any], key: str = "recipe") -> Recipe:
        """A recipe from a config entry or ``to_dict``; unknown or missing fields are named."""
        if not isinstance(data, dict):
            raise ConfigError(f"{key}: expected an object {{name, method, sparsity, ...}}, got {data!r}")
        check_fields(key, data, cls, "field")
        for required in ("method", "sparsity"):
            if data.get(required) is None:
                raise ConfigError(f"{key}: {required} is missing")
        values = {name: value for name, value in data.items() if value is not None}
        return cls(**{"name": None, **values}, key=key)

    @classmethod
    def from_report(cls, data: dict[str, Any]) -> Recipe:
        """The recipe a pruning report records (``to_dict``); fields this version does not know (a report
        of another version) are left out."""
        known = {f.name for f in fields(cls)}
        return cls.from_dict({key: value for key, value in data.items() if key in known} | {"name": None})

    @classmethod
    def from_json(cls, text: str, key: str = "recipe") -> Recipe:
        try:
            data = json.loads(text)
        except ValueError as err:
            raise ConfigError(f'{key}: not JSON ({err}); pass {{"name": ..., "method": ...}}') from None
        return cls.from_dict(data, key)

    def to_dict(self) -> dict[str, Any]:
        """Every field, keys sorted, the sparsity as its canonical text (the report's ``recipe``); OWL's
        M and lambda only for an OWL recipe, ``exclude`` only when it excludes something."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data |= {"sparsity": str(self.sparsity), "exclude": list(self.exclude) or None}
        data["recover"] = self.recover.to_dict() if self.recover is not None else None
        data["distill"] = self.distill.to_dict() if self.distill is not None else None
        return {name: value for name, value in sorted(data.items()) if value is not None}

    def to_json(self) -> str:
        """The recipe as one argument of a job (``python -m thanos prune --recipe``)."""
        return json.dumps(self.to_dict(), sort_keys=True)

    def default_name(self, always: Sequence[str] = ()) -> str:
        """``{method}_{pattern}`` (``u50``, ``2-4``, ``s30``, ``n30``), then each option that differs from
        the method's default, or is named in ``always``: ``_a{alpha}``, ``_B{blocksize}``,
        ``_damp{damp}``, ``_owl`` (``-m{M}``, ``-l{lambda}``), ``_x`` and a digest of the ``exclude``
        patterns, ``_zeros`` (neurons:p written in the original shape), ``_nomap`` (depth:k without maps),
        ``_w{multiple}`` (neurons:p with a kept width of another multiple), ``_t`` and a digest of the
        ``vocab_text`` (a vocabulary chosen by another text than the calibration).
        Different recipes of one model get different names."""
        spec, kind = methods.get(self.method), self.sparsity.kind
        name = f"{self.method}_{pattern_tag(self.sparsity)}"
        if "alpha" in always or self.alpha != spec.default_alpha(kind):
            name += f"_a{self.alpha:g}"
        if "blocksize" in always or self.blocksize != spec.default_blocksize(kind):
            name += f"_B{self.blocksize}"
        if "damp" in always or self.damp != DEFAULT_DAMP:
            name += f"_damp{self.damp:g}"
        if self.owl:
            name += "_owl" + "".join(
                f"-{option[4]}{getattr(self, option):g}"
                for option, default in OWL_DEFAULTS.items()
                if option in always or getattr(self, option) != default
            )
        if self.exclude:
            name += "_x" + hashlib.sha256(json.dumps(list(self.exclude)).encode()).hexdigest()[:8]
        if kind in COMPACT_KINDS and not self.compact:
            name += "_zeros"
        if self.block_map is False:  # a depth recipe without its maps
            name += "_nomap"
        if self.width_multiple is not None and (
            "width_multiple" in always or self.width_multiple != WIDTH_MULTIPLE
        ):
            name += f"_w{self.width_multiple}"
        if self.vocab_text is not None:
            name += "_t" + hashlib.sha256(self.vocab_text.encode()).hexdigest()[:8]
        if self.recover is not None:
            name += self.recover.tag()
        if self.distill is not None:
            name += self.distill.tag()
        return name

    def layers(self, layers: Sequence[str], within: Sequence[str] | None = None) -> list[str]:
        """The layers of a block this recipe prunes: ``layers`` less those ``exclude`` matches (each
        pattern must match a layer of ``within``, the model's layers; default ``layers``)."""
        return select_layers(layers, self.exclude, within)

    @property
    def pruned(self) -> Recipe:
        """The recipe without its distillation: what is pruned (and assembled) before it distils, named
        by ``default_name``."""
        return replace(self, name=None, distill=None) if self.distill is not None else self

    @property
    def owl(self) -> bool:
        """Whether the blocks get OWL's sparsities (an ``owl.json`` of the recipe, read by its prune jobs)."""
        return self.profile == "owl"

    @property
    def needs_hessian(self) -> bool:
        """Whether the method prunes with Hessians (its prune jobs read a hessians store)."""
        return methods.get(self.method).needs_hessian

    @property
    def needs_calibration(self) -> bool:
        """Whether the recipe needs calibration windows (Hessians for the method, or the dense model's for
        OWL's outlier ratios, or its activations for a ``depth:k`` recipe's block scores, for magnitude too);
        a vocabulary reads its text's documents, not windows, whatever the method."""
        if self.sparsity.structure.tokens:
            return False
        return self.needs_hessian or self.owl or self.sparsity.structure.whole_blocks

    @property
    def sequential(self) -> bool:
        """Whether block l+1 is calibrated on the pruned block l (the paper's chain), not on dense inputs."""
        return self.chain == "sequential"


def check_sparsity(key: str, value: Any, field: str = "sparsity") -> Sparsity:
    """A sparsity value parsed; the error names ``key.field`` and the forms allowed."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 1:
        raise invalid(
            key,
            field,
            f"got {value}; quote n:m patterns in YAML ('2:4'), an unquoted 2:4 is read as the number 124",
        )
    try:
        return parse_sparsity(value)
    except ValueError as err:
        allowed = (
            " (allowed: a fraction like 0.5, 'unstructured:0.5', 'N:M' like '2:4', 'structured:0.3', "
            "'neurons:0.3', 'heads:0.33', 'kv_heads:0.25', 'depth:6', structures joined with '+' like "
            "'depth:4+neurons:0.3', 'vocab:0.3', or a size alone, 'params:0.25')"
        )
        if isinstance(err, UnknownForm):  # its message lists the forms of one structure: the others
            allowed = ", structures joined with '+' ('depth:4+neurons:0.3') or a size alone ('params:0.25')"
        said = str(err).removeprefix("sparsity: ")  # the config's words name the value, a front's its own
        problem = sparsity_problem(err, value) + allowed
        if isinstance(value, str) and ("+" in value or value.strip().lower().startswith("params:")):
            whole = (
                f"{value!r} is a combined recipe or a size, which `thanos prune-model` (and the workflow) "
                "runs part by part; one recipe, as this takes it, holds one structure"
            )
            raise ConfigError(f"{key}.{field}: {whole}", field, whole) from None
        raise ConfigError(f"{key}.{field}: {said}{allowed}", field, problem) from None


def _compact(key: str, pattern: Sparsity, compact: Any) -> bool:
    """``compact`` is a boolean, true only for neurons, heads and kv_heads (their default)."""
    if compact is None:
        return pattern.kind in COMPACT_KINDS
    if not isinstance(compact, bool):
        raise invalid(key, "compact", f"expected true or false, got {compact!r}")
    if compact and pattern.kind not in COMPACT_KINDS:
        raise invalid(
            key,
            "compact",
            f"only neurons:p, heads:p and kv_heads:p recipes can be written compact, not {pattern}",
        )
    return compact


def _block_map(key: str, pattern: Sparsity, block_map: Any) -> bool | None:
    """``block_map`` is a boolean, for depth recipes only (true by default); None for the others."""
    if block_map is None:
        return True if takes(pattern.kind, "block_map") else None
    if not isinstance(block_map, bool):
        raise invalid(key, "block_map", f"expected true or false, got {block_map!r}")
    if not takes(pattern.kind, "block_map"):
        raise invalid(key, "block_map", f"only depth:k recipes replace removed blocks by maps, not {pattern}")
    return block_map


def _width_multiple(key: str, pattern: Sparsity, multiple: Any) -> int | None:
    """``width_multiple``, a whole number >= 1 for neurons recipes (default ``WIDTH_MULTIPLE``); None for
    the others (heads are whole heads: their width is a multiple of ``head_dim``)."""
    if multiple is None:
        return WIDTH_MULTIPLE if takes(pattern.kind, "width_multiple") else None
    if isinstance(multiple, bool) or not isinstance(multiple, int) or multiple < 1:
        raise invalid(
            key, "width_multiple", f"expected a whole number >= 1 (e.g. 32 or 256), got {multiple!r}"
        )
    if not takes(pattern.kind, "width_multiple"):
        raise invalid(
            key, "width_multiple", f"only neurons:p recipes round the kept MLP width, not {pattern}"
        )
    return multiple


def _vocab_text(key: str, pattern: Sparsity, text: Any) -> str | None:
    """``vocab_text``, the text a vocab recipe's tokens are chosen by (a path or ``c4``), as a string; only
    vocab recipes take one."""
    if text is None:
        return None
    if isinstance(text, bool) or not isinstance(text, str | os.PathLike) or not str(text).strip():
        raise invalid(key, "vocab_text", f"expected a text/jsonl/parquet file or directory, got {text!r}")
    if not takes(pattern.kind, "vocab_text"):
        raise invalid(
            key, "vocab_text", f"only vocab:N and vocab:p recipes choose tokens by a text, not {pattern}"
        )
    return str(text)


def _owl(key: str, pattern: Sparsity, profile: Any, owl_m: Any, owl_lambda: Any) -> dict[str, float | None]:
    """OWL's M and lambda (defaults filled) for ``profile: owl``, None for uniform; OWL sets per-block
    unstructured sparsity only, and its M and lambda are positive numbers."""
    if profile is not None and profile not in PROFILES:
        raise invalid(key, "profile", f"{profile!r} is not one of {', '.join(PROFILES)}")
    given = {"owl_m": owl_m, "owl_lambda": owl_lambda}
    for name, value in given.items():
        if value is None:
            continue
        if profile != "owl":
            raise invalid(key, name, f"set only with the owl profile (got profile {profile or 'uniform'})")
        if not value > 0:
            raise invalid(key, name, f"expected a number > 0, got {value!r}")
    if profile != "owl":
        return {name: None for name in given}
    if not takes(pattern.kind, "profile"):
        raise invalid(
            key,
            "profile",
            "owl sets a sparsity per block, which only unstructured sparsity allows; "
            f"{pattern} is fixed by definition (n:m keeps m - n of every m weights in every block, "
            "structured removes whole columns): use an unstructured sparsity or profile uniform",
        )
    if owl_lambda is not None and not owl_lambda < 0.5:
        raise invalid(key, "owl_lambda", f"{owl_lambda} spans the sparsities over 2 lambda >= 1; use < 0.5")
    return {name: float(OWL_DEFAULTS[name] if value is None else value) for name, value in given.items()}


def check_exclude(key: str, value: Any) -> tuple[str, ...]:
    """A list of regular expressions (None or empty: nothing excluded); the error names ``key.exclude``."""
    if value is None or (isinstance(value, list | tuple) and not value):
        return ()
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise invalid(key, "exclude", f"expected a list of regular expressions, got {value!r}")
    for pattern in value:
        try:
            re.compile(pattern)
        except re.error as err:
            raise invalid(key, "exclude", f"{pattern!r} is not a regular expression ({err})") from None
    return tuple(value)


def select_layers(
    layers: Sequence[str], exclude: Sequence[str], within: Sequence[str] | None = None
) -> list[str]:
    """``layers`` (names relative to a block) less those an ``exclude`` pattern matches (``re.search``).
    A pattern that matches none of ``within`` (the model's layers, of every kind of block; default
    ``layers``), or patterns that leave none of ``layers``, are refused, naming them: a typo would
    otherwise prune what the user meant to keep."""
    within = layers if within is None else within
    kept = list(layers)
    for pattern in exclude:
        try:
            regex = re.compile(pattern)
        except re.error as err:
            raise ConfigError(f"exclude pattern {pattern!r} is not a regular expression ({err})") from None
        if not any(regex.search(layer) for layer in within):
            shown = ", ".join(within[:12]) + (", ..." if len(within) > 12 else "")
            raise ConfigError(f"exclude pattern {pattern!r} matches no prunable layer (a block has {shown})")
        kept = [layer for layer in kept if not regex.search(layer)]
    if not kept:
        raise ConfigError(f"exclude patterns {list(exclude)} leave no layer to prune")
    return kept
