"""The documentation holds together: README.md stays a short front door, every page of docs/ is reachable
from it, and every relative link of README.md and docs/*.md points at a file that exists and, for
``page.md#anchor``, at a heading of that page (GitHub's anchors), so moving a section cannot leave a dead
link behind."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
PAGES = [README, *sorted((REPO / "docs").glob("*.md"))]
MAX_README_LINES = 300

FENCE = re.compile(r"^[ \t]*(```|~~~).*?^[ \t]*\1[^\n]*$", re.M | re.S)
CODE_SPAN = re.compile(r"`(?:[^`\n]|\n(?![ \t]*\n))*`")  # a span may wrap lines, not paragraphs
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$", re.M)
EXTERNAL = ("http://", "https://", "mailto:")


def prose(text: str) -> str:
    """The text without code blocks and code spans, where brackets are not links."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: the rendered text, lower case, punctuation dropped, spaces to '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading anchor of a page; a repeated heading gets -1, -2, ... as on GitHub."""
    seen: dict[str, int] = {}
    found = set()
    for match in HEADING.finditer(FENCE.sub("", page.read_text())):
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(page: Path) -> list[str]:
    return [t for t in LINK.findall(prose(page.read_text())) if not t.startswith(EXTERNAL)]


def test_readme_is_short() -> None:
    lines = len(README.read_text().splitlines())
    assert lines < MAX_README_LINES, f"README.md has {lines} lines: move a section into a page of docs/"


def test_every_page_is_linked_from_the_readme() -> None:
    linked = {(REPO / target.split("#")[0]).resolve() for target in links(README)}
    assert [p.name for p in PAGES[1:] if p.resolve() not in linked] == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(page: Path) -> None:
    dead = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            dead.append(f"{target}: no file {file}")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            dead.append(f"{target}: no heading #{anchor} in {file.name}")
    assert dead == [], dead


def test_slugs_are_githubs() -> None:
    """Anchors GitHub made for headings of these pages (the links that pointed at them worked)."""
    assert slug("One command against llm-compressor (`bench/peer_oneshot.py`)") == (
        "one-command-against-llm-compressor-benchpeer_oneshotpy"
    )
    assert slug("Smaller and faster: removing MLP neurons") == "smaller-and-faster-removing-mlp-neurons"
    assert slug("Chains: sequential and dense") == "chains-sequential-and-dense"


def test_architecture_names_every_module() -> None:
    """docs/architecture.md's list of modules is the one ``docs/modules.py`` writes from the modules'
    docstrings (current: no module added, moved or described anew without it), and it names every module
    of ``thanos/``, each with what it holds."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("docs_modules", REPO / "docs" / "modules.py")
    assert spec is not None and spec.loader is not None
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    page = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert generator.rewritten(page) == page, "docs/architecture.md is out of date: python docs/modules.py"
    listed = dict(generator.modules())
    on_disk = {p.relative_to(REPO).as_posix() for p in (REPO / "thanos").rglob("*.py")}
    assert set(listed) == on_disk
    assert all(f"| `{path}` | {text} |" in page and text != "(no docstring)" for path, text in listed.items())
