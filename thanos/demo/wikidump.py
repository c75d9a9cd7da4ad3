"""The demo corpus: English Wikipedia articles from the sample dump inside the gensim 4.4.0 wheel.

The wheel is fetched once from PyPI with ``pip download`` (never from a model or data-set hub), for one
fixed platform tag so every machine gets the same bytes, and verified by sha256. The dump is read from
the wheel's zip without installing gensim, parsed with ``mwxml`` and turned into plain text with
``mwparserfromhell``. Wikipedia text is licensed CC BY-SA (https://creativecommons.org/licenses/by-sa/4.0/).
"""

from __future__ import annotations

import bz2
import hashlib
import io
import logging
import re
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from thanos.files.atomic import atomic_path, sha256_file

log = logging.getLogger(__name__)

GENSIM_VERSION = "4.4.0"
PLATFORM = "manylinux_2_28_x86_64"  # the tag pip is asked for; the wheel's own name lists 2_24 and 2_28
PYTHON_VERSION = "3.11"
WHEEL_NAME = f"gensim-{GENSIM_VERSION}-cp311-cp311-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl"
WHEEL_SHA256 = "91a7fa5e814e7b1bad4b2dffa8d62c1e55410d5cbdf930714c1997ffb4404db8"
# Other gensim 4.4.0 wheels that carry the very same dump (accepted with --wheel).
KNOWN_WHEELS = {
    WHEEL_SHA256: WHEEL_NAME,
    "5e2c1d584d1c7d16b2a0fe7d2f6f59a451422df7b5edb7e3ca46c8e462782127": (
        "gensim-4.4.0-cp311-cp311-win_amd64.whl"
    ),
    "05a027238b5eb544a17afe73ec227d6a7e0c6b4e2108b1131c0b8f291a0e0e2e": (
        "gensim-4.4.0-cp311-cp311-macosx_11_0_arm64.whl"
    ),
}
DUMP_MEMBER = "gensim/test/test_data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
DUMP_SHA256 = "a53f4648dec40467ebdcbc7a1307eddb51fe6e28e9309f6ebde81ba0d04bea2d"
LICENSE = (
    "Text from English Wikipedia (sample dump shipped in the gensim 4.4.0 wheel), licensed under "
    "CC BY-SA (https://creativecommons.org/licenses/by-sa/4.0/); authors: the Wikipedia contributors."
)

# Sections without running prose: dropped whole.
DROP_SECTIONS = {
    "references",
    "notes",
    "footnotes",
    "citations",
    "sources",
    "bibliography",
    "further reading",
    "external links",
    "see also",
    "notes and references",
    "references and notes",
    "works cited",
    "gallery",
    "selected works",
    "works",
    "filmography",
    "discography",
}
# Tags whose content is not prose (references, tables, formulas, galleries, ...).
DROP_TAGS = {
    "ref",
    "references",
    "table",
    "gallery",
    "math",
    "chem",
    "ce",
    "score",
    "timeline",
    "imagemap",
    "syntaxhighlight",
    "source",
    "pre",
    "code",
    "nowiki",
    "hiero",
    "poem",
    "div",
    "br",
}
LINK_NAMESPACES = (
    "file:",
    "image:",
    "category:",
    "media:",
    "wikipedia:",
    "wp:",
    "template:",
    "help:",
    "wikt:",
)
DROP_SECTION_KEYS = (
    "filmography",
    "discography",
    "bibliography",
    "references",
    "external links",
    "further reading",
)
LIST_TAGS = {"li", "dt", "dd"}
LIST_MARK = "\x00"
MIN_PARAGRAPH_WORDS = 8
_INTERWIKI = re.compile(r"^[a-z]{2,3}(-[a-z]+)?:")


@dataclass
class Article:
    title: str
    text: str  # plain text, paragraphs separated by a blank line


def _pip_download(dest: Path) -> Path:
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        f"gensim=={GENSIM_VERSION}",
        "--only-binary=:all:",
        "--platform",
        PLATFORM,
        "--python-version",
        PYTHON_VERSION,
        "--dest",
        str(dest),
        "--quiet",
    ]
    log.info("fetching the gensim %s wheel from PyPI: %s", GENSIM_VERSION, " ".join(cmd[2:]))
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise ValueError(
            f"pip download of gensim=={GENSIM_VERSION} failed (exit {proc.returncode}): "
            f"{proc.stderr.strip()[-800:]}; without PyPI access, "
            f"download {WHEEL_NAME} elsewhere and pass --wheel PATH"
        )
    wheels = sorted(dest.glob("gensim-*.whl"))
    if len(wheels) != 1:
        raise ValueError(f"pip download left {[w.name for w in wheels]} in {dest}, expected {WHEEL_NAME}")
    return wheels[0]


def fetch_wheel(cache_dir: str | Path) -> Path:
    """The gensim wheel in ``cache_dir`` (downloaded once, verified by sha256 every time)."""
    cache_dir = Path(cache_dir)
    target = cache_dir / WHEEL_NAME
    if not target.exists():
        cache_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=cache_dir, prefix=".pip-download.") as tmp:
            wheel = _pip_download(Path(tmp))
            digest = sha256_file(wheel)
            if digest != WHEEL_SHA256:
                raise ValueError(
                    f"downloaded {wheel.name} has sha256 {digest}, expected {WHEEL_SHA256}; "
                    "PyPI served a different file: refusing to use it"
                )
            with atomic_path(target) as out:
                wheel.replace(out)
    verify_wheel(target, strict=True)
    return target


def verify_wheel(path: str | Path, strict: bool = False) -> str:
    """sha256 of the wheel; raise if ``strict`` and it is not the pinned one, or if it is unknown and its dump
    differs from the pinned dump (checked by ``read_dump`` as well)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"gensim wheel not found: {path}")
    digest = sha256_file(path)
    if strict and digest != WHEEL_SHA256:
        raise ValueError(
            f"{path} has sha256 {digest}, expected {WHEEL_SHA256} ({WHEEL_NAME}); delete it to fetch it again"
        )
    if digest not in KNOWN_WHEELS:
        log.warning("%s is not a known gensim wheel (sha256 %s); checking its dump", path, digest)
    return digest


def read_dump(wheel: str | Path) -> bytes:
    """The bz2-compressed sample dump, read from the wheel's zip and verified by sha256."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            data = archive.read(DUMP_MEMBER)
    except (zipfile.BadZipFile, KeyError) as err:
        raise ValueError(f"{wheel} is not a gensim {GENSIM_VERSION} wheel with {DUMP_MEMBER}: {err}") from err
    digest = hashlib.sha256(data).hexdigest()
    if digest != DUMP_SHA256:
        raise ValueError(f"{DUMP_MEMBER} in {wheel} has sha256 {digest}, expected {DUMP_SHA256}")
    return data


def _drop_section(title: str) -> bool:
    title = " ".join(title.lower().split())
    return title in DROP_SECTIONS or any(key in title for key in DROP_SECTION_KEYS)


def _is_unwanted_link(node) -> bool:
    title = str(node.title).strip().lower().lstrip(":")
    return title.startswith(LINK_NAMESPACES) or bool(_INTERWIKI.match(title))


def _plain(nodes_, out: list[str]) -> None:
    """Append the visible prose of a node list to ``out`` (a walk of mwparserfromhell's tree)."""
    from mwparserfromhell import nodes

    for node in nodes_:
        if isinstance(node, nodes.Text):
            out.append(node.value)
        elif isinstance(node, nodes.Wikilink):
            if not _is_unwanted_link(node):
                _plain((node.text if node.text is not None else node.title).nodes, out)
        elif isinstance(node, nodes.ExternalLink):
            if node.brackets and node.title is not None:
                _plain(node.title.nodes, out)
        elif isinstance(node, nodes.HTMLEntity):
            out.append(node.normalize())
        elif isinstance(node, nodes.Tag):
            tag = str(node.tag).strip().lower()
            if tag in LIST_TAGS and node.wiki_markup:
                out.append(LIST_MARK)  # list item: dropped with its line
            elif tag not in DROP_TAGS and node.contents is not None and not node.self_closing:
                _plain(node.contents.nodes, out)
        # Template, Comment, Argument, Heading (handled by the caller): nothing visible


_SPACE = re.compile(r"[ \t\u00a0]+")
_EMPTY_PARENS = re.compile(r"\(\s*(?:[,;:]\s*)*\)")
_LEAD_PUNCT_IN_PARENS = re.compile(r"\(\s*[,;:]\s*")
_SPACE_BEFORE_PUNCT = re.compile(r"\s+([,.;:!?)])")
_LEFTOVER_MARKUP = re.compile(r"\{\||\|\}|\[\[|\]\]|\{\{|\}\}|^\s*\||=\s*$|<[a-z/]")


def _clean_paragraph(par: str) -> str:
    par = _SPACE.sub(" ", par.replace("\n", " ")).strip()
    par = _EMPTY_PARENS.sub("", par)
    par = _LEAD_PUNCT_IN_PARENS.sub("(", par)
    par = _SPACE_BEFORE_PUNCT.sub(r"\1", par)
    return _SPACE.sub(" ", par).strip()


def wikitext_to_text(wikitext: str) -> str:
    """Plain prose from wiki markup, by a walk of the tree that ``mwparserfromhell`` parses.

    Templates, references, tables, formulas, files, categories, interwiki links, list items, headings and
    non-prose sections (references, external links, see also, filmography, ...) are removed; links are
    replaced by their text. One paragraph per blank-line separated block; paragraphs under 8 words or with
    markup left over are dropped."""
    import mwparserfromhell
    from mwparserfromhell import nodes

    code = mwparserfromhell.parse(wikitext)
    out: list[str] = []
    skip_level = 0  # > 0: inside a dropped section of that heading level
    for node in code.nodes:
        if isinstance(node, nodes.Heading):
            if skip_level and node.level > skip_level:
                continue
            skip_level = node.level if _drop_section(node.title.strip_code()) else 0
            out.append("\n\n")
            continue
        if not skip_level:
            _plain([node], out)
    paragraphs = []
    for block in re.split(r"\n\s*\n", "".join(out)):
        lines = [ln for ln in block.split("\n") if ln.strip() and LIST_MARK not in ln]
        par = _clean_paragraph(" ".join(lines))
        if len(par.split()) < MIN_PARAGRAPH_WORDS or _LEFTOVER_MARKUP.search(par):
            continue
        paragraphs.append(par)
    return "\n\n".join(paragraphs)


def is_disambiguation(title: str, wikitext: str) -> bool:
    pattern = r"\{\{\s*(disambig|dab|hndis|geodis)"
    return "(disambiguation)" in title or bool(re.search(pattern, wikitext, re.I))


def extract_articles(dump_bz2: bytes, min_words: int = 50) -> list[Article]:
    """Main-namespace articles of the dump (redirects and disambiguation pages skipped), as plain text,
    in dump order. Articles with fewer than ``min_words`` words of prose are dropped."""
    import mwxml

    dump = mwxml.Dump.from_file(io.BytesIO(bz2.decompress(dump_bz2)))
    articles = []
    seen = set()
    for page in dump:
        revisions = list(page)
        if page.namespace != 0 or page.redirect or not revisions or page.title in seen:
            continue
        wikitext = revisions[-1].text or ""
        if wikitext.lstrip().lower().startswith("#redirect") or is_disambiguation(page.title, wikitext):
            continue
        text = wikitext_to_text(wikitext)
        if len(text.split()) < min_words:
            continue
        seen.add(page.title)
        articles.append(Article(title=page.title, text=text))
    if not articles:
        raise ValueError("no articles found in the dump")
    return articles
