"""The package's layers: ``ls thanos/`` shows them, each opens with a docstring, and imports only point
down (read from the source, function-level imports included, so a lazy import cannot hide an edge)."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import thanos

PACKAGE = Path(thanos.__file__).parent
# bottom to top: a module may import its own layer and the layers before it
LAYERS = (
    "errors",  # PathError: every layer names the file it failed on
    "options",  # each option declared once (a field's metadata) and the command lines generated from it
    "pruning",  # the math of one layer
    "files",  # names, atomic writes, digests, fingerprints
    "recipes",  # the recipe and its words: parsed, checked, named, what it reads, how shown (torch-free)
    "events",  # what a run reports while it runs: typed progress events, stages -> display (a module)
    "data",  # calibration windows, text corpora, zarr stores, safetensors reading
    "models",  # the adapter (the generic one), the layout read by name, checkpoints
    "stages",  # one function per pipeline stage: assembly with its model card, publishing
    "evaluation",  # perplexity, zero-shot
    "demo",  # the offline demo's corpus, task and model; tiny models of the tested types
    "jobs",  # what a job and the workflow's parse import: the job worker, GPU slots, granularity, job logs
    "report",  # results/ collected: the paper's tables, figures, orderings
    "runner",  # the Snakemake run in this process, its progress, one recipe in one call
    "workflow",  # the workflow's config as recipes (built by the request's code) and its inputs (torch-free)
    "commands",  # one module per `python -m thanos` command
    "cli",
    "__main__",
)
# the only edges up, each with its reason
UPWARD = {
    ("thanos.jobs.worker", "thanos.cli"): "the worker runs the CLI in its forked children",
}
FACE = ("__init__.py", "__main__.py", "cli.py", "errors.py")


@cache
def modules() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its own name)."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if "_workflow" in parts:
            continue
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(name: str, path: Path) -> set[str]:
    """The ``thanos`` modules that ``name`` imports, anywhere in its source."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            known = modules()
            names = [f"{target}.{alias.name}" for alias in node.names]
            found |= {n for n in names if n in known} or {target}
    return {n for n in found if n == "thanos" or n.startswith("thanos.")}


def layer(name: str) -> str:
    return name.split(".")[1] if "." in name else "thanos"


def test_top_level_shows_the_layers() -> None:
    entries = {p.name for p in PACKAGE.iterdir() if p.name not in ("__pycache__", "_workflow")}
    rooms = {name for name in LAYERS if (PACKAGE / name).is_dir()}
    assert entries == set(FACE) | rooms | {
        f"{name}.py" for name in LAYERS if (PACKAGE / f"{name}.py").is_file()
    }
    # a room per layer that holds more than one module; loose only the face and two one-module layers
    assert len(rooms) <= 13, sorted(rooms)
    assert sorted(entries - rooms) == sorted([*FACE, "events.py", "options.py"])


def test_every_subpackage_opens_with_a_docstring() -> None:
    for init in PACKAGE.rglob("__init__.py"):
        if "_workflow" in init.parts:
            continue
        docstring = ast.get_docstring(ast.parse(init.read_text()))
        assert docstring and len(docstring) > 40, f"{init} needs a docstring: what lives there"
    for name in LAYERS:
        if (PACKAGE / name).is_dir():
            text = ast.get_docstring(ast.parse((PACKAGE / name / "__init__.py").read_text())) or ""
            assert "import" in text.lower(), f"thanos/{name}/__init__.py: say what it may import"


def test_imports_point_down() -> None:
    wrong = []
    for name, path in modules().items():
        if name == "thanos":  # the package's face: its names are imported on first use
            continue
        here = layer(name)
        for target in imports(name, path):
            there = layer(target)
            if there == "thanos":
                wrong.append(f"{name} imports the package's face {target}: import the module instead")
            elif LAYERS.index(there) > LAYERS.index(here) and (name, target) not in UPWARD:
                wrong.append(f"{name} ({here}) imports {target} ({there}), a layer above it")
    assert not wrong, "\n".join(wrong)


def test_the_checker_sees_an_upward_import(tmp_path) -> None:
    """The test above can fail: a stage importing the job worker is caught, a lazy import too."""
    source = tmp_path / "chain.py"
    source.write_text("def f():\n    from thanos.jobs import worker\n")
    assert imports("thanos.stages.chain", source) == {"thanos.jobs.worker"}
    assert LAYERS.index(layer("thanos.jobs.worker")) > LAYERS.index(layer("thanos.stages.chain"))


def test_upward_edges_exist() -> None:
    """An exception that no longer happens is deleted, not kept."""
    for source, target in UPWARD:
        assert target in imports(source, modules()[source]), (source, target)


def test_test_files_share_helpers_not_each_other() -> None:
    """What test files share lives in ``tests/helpers/`` (or ``conftest.py``): no test file imports another,
    so that running one file never imports (and collects the fixtures of) another."""
    tests = Path(__file__).parent
    imports = []
    for file in sorted(tests.glob("test_*.py")):
        for node in ast.walk(ast.parse(file.read_text())):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            names += [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            imports += [f"{file.name} imports {name}" for name in names if name.startswith("test_")]
    assert not imports, imports
