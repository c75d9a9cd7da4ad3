"""The structures' table (``thanos.pruning.structures``): what each kind of pattern declares, and that the
recipe's names, the combined recipes' order, the size's axes, ``sparsity.json`` and the tables' words are
read from it. Adding a structure is one entry there (its stage function, its model-side math and its
words aside): this test lists what an entry declares."""

from __future__ import annotations

import re
from pathlib import Path
from typing import get_args

import pytest

from thanos.pruning.sparsity import Kind, parse_sparsity
from thanos.pruning.structures import AXES, COMBINING, EVERY_LAYER, STRUCTURES, TAGS, kind_of, of_sidecar
from thanos.recipes.fields import ConfigError
from thanos.recipes.labels import STRUCTURE_NAMES, pattern_label, structure_label
from thanos.recipes.names import TAGS as RECIPE_TAGS
from thanos.recipes.names import from_name, pattern_tag
from thanos.recipes.recipe import Recipe
from thanos.report.collect import STRUCTURES as TABLE_STRUCTURES
from thanos.runner.patterns import combined_parts
from thanos.stages.describe.sparsity import structure

DECLARED = {  # kind: (tag, order in a combined recipe, a size axis, sparsity.json's structure, label, name,
    # the recipe options only it takes)
    "unstructured": ("u", None, False, None, "Unstructured", None, ("profile",)),
    "nm": (None, None, False, None, None, None, ()),
    "structured": ("s", None, False, None, "Structured", None, ()),
    "depth": ("d", 0, True, "depth", None, "whole blocks", ("block_map",)),
    "heads": ("h", 1, True, "heads", "Heads", "heads", ("compact",)),
    "kv_heads": ("g", 1, False, "heads", "KV groups", "KV groups", ("compact",)),
    "neurons": ("n", 2, True, "neurons", "MLP neurons", "MLP neurons", ("compact", "width_multiple")),
    "vocab": ("v", 3, True, "vocab", None, "vocabulary", ("vocab_text",)),
}


def test_every_kind_has_one_entry_declaring_what_it_is() -> None:
    assert set(STRUCTURES) == set(get_args(Kind)) == set(DECLARED)
    for kind, entry in STRUCTURES.items():
        declared = (
            entry.tag, entry.order, entry.size_axis, entry.sidecar, entry.label, entry.name, entry.options
        )  # fmt: skip
        assert declared == DECLARED[kind], kind
    assert [kind for kind, entry in STRUCTURES.items() if not entry.by_method] == ["depth", "vocab"]


def test_a_recipe_takes_only_its_kinds_options() -> None:
    """An option only some kinds take is refused on a recipe of another kind, defaulted on its own."""
    for option, value, kind_pattern in (
        ("block_map", False, "depth:1"), ("width_multiple", 64, "neurons:0.3"),
        ("vocab_text", "prose.txt", "vocab:0.3"), ("profile", "owl", "0.5"),
    ):  # fmt: skip
        assert Recipe("r", "thanos", kind_pattern, **{option: value})
        with pytest.raises(ConfigError, match=option):
            Recipe("r", "thanos", "2:4", **{option: value})
    assert (
        Recipe("r", "thanos", "depth:1").block_map is True and Recipe("r", "thanos", "0.5").block_map is None
    )
    assert Recipe("r", "thanos", "neurons:0.3").width_multiple == 32


def test_the_package_reads_the_table() -> None:
    """The recipe's tags, the combined order, the size's axes, the tables' structural kinds and the figure's
    structure names are the table's; a combined recipe runs in its order whatever the order written."""
    assert RECIPE_TAGS is TAGS and set(TABLE_STRUCTURES) == set(COMBINING)
    assert AXES == ("depth", "heads", "neurons", "vocab")
    assert combined_parts("vocab:0.3+neurons:0.3+depth:2") == ["depth:2", "neurons:0.3", "vocab:0.3"]
    assert STRUCTURE_NAMES == {kind: entry.name for kind, entry in STRUCTURES.items() if entry.name}
    for pattern, tag in (("neurons:0.3", "n30"), ("kv_heads:0.25", "g25"), ("vocab:0.3", "v30")):
        assert pattern_tag(parse_sparsity(pattern)) == tag
        assert str(from_name(f"thanos_{tag}")["sparsity"]) == pattern
    assert pattern_label("kv_heads", 0.5, "kv_heads:0.5") == "KV groups 50%"
    assert pattern_label("depth", float("nan"), "depth:2") == "depth:2"
    assert structure_label("vocab", "thanos") == "Vocabulary"
    assert structure_label("depth+neurons", "thanos") == "Thanos: whole blocks + MLP neurons"
    assert [structure(parse_sparsity(p), None) for p in ("kv_heads:0.5", "vocab:0.3", "0.5", "2:4")] == [
        "heads",
        "vocab",
        "unstructured",
        "unstructured",
    ]


REPO = Path(__file__).resolve().parents[1]
# a kind's name compared: ==/!= it, in/not in a literal holding it, startswith/isin/& a literal holding it
_NAME = r"""["'](%s)["']"""
_AFTER = r"""(==|!=)\s*%s|%s\s*(==|!=|in\b|not in\b)"""
_INSIDE = r"""(\bin|\bnot in|startswith|endswith|isin|&)\s*\(*\s*[\(\[{][^\n]*%s"""


def _comparison(kind: str) -> re.Pattern[str]:
    name = _NAME % re.escape(kind)
    return re.compile("|".join((_AFTER % (name, name), _INSIDE % name)))


def _module(path: Path) -> str:
    return ".".join(path.relative_to(REPO).with_suffix("").parts)


def _comparisons(kind: str) -> list[str]:
    """``file:line: code`` of every comparison of ``kind``'s name in the package and the workflow, comments
    left out, outside the modules the table lets compare it."""
    pattern = _comparison(kind)
    allowed = {"thanos.pruning.structures", "thanos.pruning.sparsity", *STRUCTURES[kind].modules}
    files = [
        REPO / "Snakefile",
        *sorted((REPO / "thanos").rglob("*.py")),
        *sorted((REPO / "workflow").rglob("*.smk")),
    ]
    found = []
    for path in files:
        if _module(path) in allowed:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if pattern.search(code):
                found.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    return found


@pytest.mark.parametrize("kind", list(STRUCTURES))
def test_no_module_switches_on_a_kinds_name(kind: str) -> None:
    """A kind's name is compared only in the table, the grammar and the modules its entry names (its stage
    function and its model-side math): the recipe, the request, the checks, the disk estimate, the size's
    axes, the labels, the card and the workflow ask the table what a kind does."""
    assert _comparisons(kind) == []


def test_the_grep_finds_a_comparison() -> None:
    """The test above would find one: each form it looks for, on code written the ways the package did."""
    for code in (
        'if recipe.sparsity.kind == "depth":',
        "if 'vocab' in mix:",
        'elif kind in ("heads", "kv_heads"):',
        'if part.startswith(("depth", "vocab")):',
        'pruned = frame[frame["kind"].isin(("unstructured", "nm"))]',
        'return bool(kinds & {"vocab", "params"})',
    ):
        names = [kind for kind in STRUCTURES if _comparison(kind).search(code)]
        assert names, code


def test_what_a_kind_runs_is_declared() -> None:
    """What runs each kind, as the table declares it: the layer-pruning kinds, the kinds written smaller,
    the one that removes whole blocks, the one that removes tokens, the ones that recover."""
    assert EVERY_LAYER == ("unstructured", "nm", "structured")
    assert [k for k, s in STRUCTURES.items() if s.shrinks] == ["depth", "heads", "kv_heads", "neurons"]
    assert {k: s.one_layer for k, s in STRUCTURES.items() if s.one_layer} == {
        "heads": "attention",
        "kv_heads": "attention",
        "neurons": "mlp",
    }
    assert [k for k, s in STRUCTURES.items() if s.whole_blocks] == ["depth"]
    assert [k for k, s in STRUCTURES.items() if s.tokens] == ["vocab"]
    assert [k for k, s in STRUCTURES.items() if not s.recovers] == ["depth", "vocab"]
    assert [k for k, s in STRUCTURES.items() if s.n_of_m] == ["nm"]
    assert [kind_of(p) for p in ("0.5", "2:4", "structured:0.3", "depth:2", "vocab:8000", "params:0.25")] == [
        "unstructured", "nm", "structured", "depth", "vocab", "params"
    ]  # fmt: skip
    assert of_sidecar("heads") is STRUCTURES["heads"] and of_sidecar("2:4") is None
    for kind, entry in STRUCTURES.items():  # the modules it names exist
        for module in entry.modules:
            assert (REPO / (module.replace(".", "/") + ".py")).is_file(), (kind, module)
