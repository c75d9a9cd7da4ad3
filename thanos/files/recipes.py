"""Recipes: a method, a sparsity pattern and optional hyper-parameters, under a name.

A ``Recipe`` travels as itself, or as its JSON text (``to_json``/``from_json``) across a process
boundary (the workflow's ``assemble --recipe-json``). ``expand`` turns the config's ``recipes:`` and
``recipe_grid:`` into named recipes, with errors that name the offending config key; the grid names its
recipes ``{method}_{pattern}[_a{alpha}][_owl]`` (``pattern_tag``), and ``from_name`` reads such a name back.
``profile: owl`` (with ``owl_m``, ``owl_lambda``) sets a sparsity per block (``thanos.pruning.owl``).
Torch-free: the workflow imports this module when it parses its config.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, fields
from fractions import Fraction
from typing import Any

from thanos.files.layout import RECIPE_NAME, RESERVED
from thanos.pruning import methods
from thanos.pruning.sparsity import parse_sparsity

HYPERPARAMETERS = ("blocksize", "alpha", "damp")  # optional; unset: the method's default
PROFILES = ("uniform", "owl")  # the sparsity of every block, or per block by its outliers (OWL)
OWL_OPTIONS = ("owl_m", "owl_lambda")  # OWL's M and lambda; unset: thanos.pruning.owl's defaults


class ConfigError(ValueError):
    """A config value the schema cannot check; the message names the key."""


@dataclass(frozen=True)
class Recipe:
    """``sparsity`` is the canonical text (``unstructured:0.5``, ``2:4``, ``structured:0.3``); ``chain``
    (``sequential`` or ``dense``) is recorded by the workflow for the pruning report. Values are kept as
    written (an ``alpha: 0`` stays the integer 0), so the options and JSON a recipe produces are stable."""

    name: str
    method: str
    sparsity: str
    blocksize: int | None = None
    alpha: float | None = None
    damp: float | None = None
    exclude: tuple[str, ...] | None = None  # regular expressions: the layers they match stay dense
    chain: str | None = None
    compact: bool | None = None  # neurons:p: write the model without the removed neurons (unset: yes)
    profile: str | None = None  # None or "uniform": every block at ``sparsity``; "owl": per block
    owl_m: float | None = None
    owl_lambda: float | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any], key: str = "recipe") -> Recipe:
        """A checked recipe; errors name ``key`` (e.g. ``recipes.thanos_u50``) and the field."""
        if not isinstance(data, dict):
            raise ConfigError(f"{key}: expected an object {{name, method, sparsity, ...}}, got {data!r}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(
                f"{key}: unknown field(s) {', '.join(unknown)}; allowed: {', '.join(sorted(known))}"
            )
        for required in ("name", "method", "sparsity"):
            if data.get(required) is None:
                raise ConfigError(f"{key}: {required} is missing")
        try:
            methods.get(data["method"], key=f"{key}.method")
        except ValueError as err:
            raise ConfigError(str(err)) from None
        for name in HYPERPARAMETERS:
            value = data.get(name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
                raise ConfigError(f"{key}.{name}: expected a number, got {value!r}")
        sparsity = sparsity_text(f"{key}.sparsity", data["sparsity"])
        check_alpha(f"{key}.alpha", sparsity, data.get("alpha"))
        exclude = check_exclude(f"{key}.exclude", data.get("exclude"))
        check_compact(key, sparsity, data.get("alpha"), data.get("compact"))
        check_profile(key, sparsity, data.get("profile"), data.get("owl_m"), data.get("owl_lambda"))
        return cls(**dict(data, sparsity=sparsity, exclude=exclude))

    @classmethod
    def from_json(cls, text: str, key: str = "recipe") -> Recipe:
        try:
            data = json.loads(text)
        except ValueError as err:
            raise ConfigError(f'{key}: not JSON ({err}); pass {{"name": ..., "method": ...}}') from None
        return cls.from_dict(data, key)

    def to_dict(self) -> dict[str, Any]:
        """The fields that are set, keys sorted (the ``recipe`` of pruning_report.json)."""
        data = {name: value for name, value in sorted(vars(self).items()) if value is not None}
        if self.exclude is not None:
            data["exclude"] = list(self.exclude)
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    def options(self) -> str:
        """The recipe as options of ``python -m thanos prune`` and ``chain`` (``thanos.commands._args``)."""
        words = [f"--method {self.method}", f"--sparsity {self.sparsity}"]
        words += [
            f"--{name} {getattr(self, name)}" for name in HYPERPARAMETERS if getattr(self, name) is not None
        ]
        words += [f"--exclude {shlex.quote(pattern)}" for pattern in self.exclude or ()]
        return " ".join(words)

    def layers(self, layers: Sequence[str], within: Sequence[str] | None = None) -> list[str]:
        """The layers of a block this recipe prunes: ``layers`` less those ``exclude`` matches (each
        pattern must match a layer of ``within``, the model's layers; default ``layers``)."""
        return select_layers(layers, self.exclude or (), within)

    @property
    def owl(self) -> bool:
        """Whether the blocks get OWL's sparsities (an ``owl.json`` of the recipe, read by its prune jobs)."""
        return self.profile == "owl"

    def owl_parameters(self) -> tuple[float, float]:
        """(M, lambda) of an OWL recipe, the defaults where unset."""
        from thanos.pruning.owl import DEFAULT_LAMBDA, DEFAULT_M

        m = DEFAULT_M if self.owl_m is None else self.owl_m
        return float(m), float(DEFAULT_LAMBDA if self.owl_lambda is None else self.owl_lambda)

    @property
    def needs_hessian(self) -> bool:
        """Whether the method prunes with Hessians (its prune jobs read a hessians store)."""
        return methods.get(self.method).needs_hessian

    @property
    def needs_calibration(self) -> bool:
        """Whether the method needs Hessians (calibration tokens, inputs and capture jobs); OWL needs the
        dense model's (its outlier ratios), for magnitude too."""
        return methods.get(self.method).needs_hessian or self.owl


def check_exclude(key: str, value: Any) -> tuple[str, ...] | None:
    """A list of regular expressions (None or empty: nothing excluded); the error names ``key``."""
    if value is None or value == [] or value == ():
        return None
    if isinstance(value, str) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{key}: expected a list of regular expressions, got {value!r}")
    for pattern in value:
        try:
            re.compile(pattern)
        except re.error as err:
            raise ConfigError(f"{key}: {pattern!r} is not a regular expression ({err})") from None
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


def sparsity_text(key: str, value: Any) -> str:
    """Check a sparsity value and return its canonical text; the error names ``key``."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 1:
        raise ConfigError(
            f"{key}: got {value}; quote n:m patterns in YAML ('2:4'), "
            "an unquoted 2:4 is read as the number 124"
        )
    try:
        return str(parse_sparsity(value))
    except ValueError as err:
        raise ConfigError(
            f"{key}: {err} (allowed: a fraction like 0.5, 'unstructured:0.5', 'N:M' like '2:4', "
            "'structured:0.3')"
        ) from None


def check_alpha(key: str, sparsity: str, alpha: float | None) -> None:
    """Outlier rows (alpha > 0) exist for n:m and structured sparsity only; the error names ``key``."""
    if alpha and parse_sparsity(sparsity).kind == "unstructured":
        raise ConfigError(
            f"{key}: alpha {alpha} keeps outlier rows dense, which n:m and structured sparsity do; with "
            f"unstructured sparsity {sparsity} set alpha to 0 or leave it out"
        )


def check_compact(key: str, sparsity: str, alpha: float | None, compact: Any) -> None:
    """``compact`` is a boolean, for ``neurons:p`` only, whose alpha is 0; the error names ``key``."""
    kind = parse_sparsity(sparsity).kind
    if compact is not None and not isinstance(compact, bool):
        raise ConfigError(f"{key}.compact: expected true or false, got {compact!r}")
    if compact and kind != "neurons":
        raise ConfigError(f"{key}.compact: only neurons:p recipes can be written compact, not {sparsity}")
    if alpha and kind == "neurons":
        raise ConfigError(
            f"{key}.alpha: {sparsity} removes whole neurons, so no row can be kept dense: set alpha 0"
        )


def check_profile(key: str, sparsity: str, profile: Any, owl_m: Any, owl_lambda: Any) -> None:
    """``profile`` is uniform or owl; OWL sets per-block unstructured sparsity only, and its M and lambda
    are positive numbers; the error names ``key``."""
    if profile is not None and profile not in PROFILES:
        raise ConfigError(f"{key}.profile: {profile!r} is not one of {', '.join(PROFILES)}")
    for name, value in (("owl_m", owl_m), ("owl_lambda", owl_lambda)):
        if value is None:
            continue
        if profile != "owl":
            raise ConfigError(
                f"{key}.{name}: set only with profile: owl (got profile {profile or 'uniform'})"
            )
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise ConfigError(f"{key}.{name}: expected a number > 0, got {value!r}")
    if profile == "owl" and parse_sparsity(sparsity).kind != "unstructured":
        raise ConfigError(
            f"{key}.profile: owl sets a sparsity per block, which only unstructured sparsity allows; "
            f"{sparsity} is fixed by definition (n:m keeps m - n of every m weights in every block, "
            "structured removes whole columns): use an unstructured sparsity or profile uniform"
        )
    if profile == "owl" and owl_lambda is not None and not owl_lambda < 0.5:
        raise ConfigError(
            f"{key}.owl_lambda: {owl_lambda} spans the sparsities over 2 lambda >= 1; use < 0.5"
        )


def pattern_tag(sparsity: str) -> str:
    """The pattern in a grid recipe's name: 0.5 -> u50, 2:4 -> 2-4, structured:0.3 -> s30, neurons:0.3 ->
    n30."""
    pattern = parse_sparsity(sparsity)
    if pattern.kind == "nm":
        return f"{pattern.n}-{pattern.m}"
    return f"{pattern.kind[0]}{float(pattern.p) * 100:g}"


def grid_name(
    method: str, sparsity: str, alpha: float | None, several_alphas: bool, profile: str | None = None
) -> str:
    """``{method}_{pattern}``, with ``_a{alpha}`` when the grid entry lists several alphas and ``_owl``
    for profile owl."""
    name = f"{method}_{pattern_tag(sparsity)}"
    name = f"{name}_a{alpha:g}" if several_alphas else name
    return f"{name}_owl" if profile == "owl" else name


def from_name(name: str) -> dict[str, Any] | None:
    """``method``, ``sparsity`` and ``alpha`` (and ``profile`` for an OWL recipe) read back from a
    ``grid_name``; None for other names."""
    alternatives = "|".join(re.escape(m) for m in sorted(methods.METHODS, key=len, reverse=True))
    match = re.match(
        rf"^(?P<method>{alternatives})_(?P<tag>[usn][\d.]+|\d+-\d+)(?:_a(?P<alpha>[\d.]+))?(?P<owl>_owl)?",
        name,
    )
    if not match:
        return None
    tag = match["tag"]
    try:
        if tag[0] in "usn":
            kind = {"u": "unstructured", "s": "structured", "n": "neurons"}[tag[0]]
            sparsity = str(parse_sparsity(f"{kind}:{Fraction(tag[1:]) / 100}"))
        else:
            sparsity = str(parse_sparsity(tag.replace("-", ":")))
        alpha = float(match["alpha"]) if match["alpha"] else None
    except ValueError:
        return None
    found = {"method": match["method"], "sparsity": sparsity, "alpha": alpha}
    return found | {"profile": "owl"} if match["owl"] else found


def expand(config: dict[str, Any]) -> dict[str, Recipe]:
    """The named recipes of a validated workflow config: ``recipe_grid`` entries first, then ``recipes``."""
    chain = config.get("chain")
    recipes: dict[str, Recipe] = {}
    for i, entry in enumerate(config.get("recipe_grid") or []):
        alphas = entry.get("alpha", [None])
        profile = entry.get("profile")
        owl = {key: entry[key] for key in OWL_OPTIONS if key in entry}
        for j, method in enumerate(entry["methods"]):
            try:
                methods.get(method, key=f"recipe_grid[{i}].methods[{j}]")
            except ValueError as err:
                raise ConfigError(str(err)) from None
            for k, value in enumerate(entry["sparsities"]):
                sparsity = sparsity_text(f"recipe_grid[{i}].sparsities[{k}]", value)
                for alpha in alphas:
                    check_alpha(f"recipe_grid[{i}].alpha", sparsity, alpha)
                    check_compact(f"recipe_grid[{i}]", sparsity, alpha, None)
                    check_profile(
                        f"recipe_grid[{i}]", sparsity, profile, owl.get("owl_m"), owl.get("owl_lambda")
                    )
                    name = grid_name(method, sparsity, alpha, len(alphas) > 1, profile)
                    if name in recipes:
                        raise ConfigError(
                            f"recipe_grid[{i}] makes recipe {name!r} a second time: "
                            "list each method x sparsity x alpha once"
                        )
                    extra = {key: entry[key] for key in ("blocksize", "damp") if key in entry}
                    exclude = check_exclude(f"recipe_grid[{i}].exclude", entry.get("exclude"))
                    recipes[name] = Recipe(
                        name,
                        method,
                        sparsity,
                        alpha=alpha,
                        chain=chain,
                        exclude=exclude,
                        profile=profile,
                        **extra,
                        **owl,
                    )
    for name, entry in (config.get("recipes") or {}).items():
        if name in recipes:
            raise ConfigError(
                f"recipes.{name}: recipe_grid already makes a recipe of that name: rename one of them"
            )
        recipes[name] = Recipe.from_dict({**entry, "name": name, "chain": chain}, key=f"recipes.{name}")
    for name in recipes:
        if name in RESERVED or not RECIPE_NAME.fullmatch(name):
            raise ConfigError(
                f"recipe name {name!r} is reserved or invalid: use letters, digits and _.+- (starting with "
                f"a letter or digit), and none of {', '.join(RESERVED)}"
            )
    if not recipes:
        raise ConfigError("no recipes: define `recipes:` ({name: {method, sparsity}}) or `recipe_grid:`")
    return recipes
