"""Local text corpora: plain text, jsonl with a text field, parquet; a file or a directory of them.

Used by calibration (in place of C4) and by perplexity (in place of WikiText-2) on offline machines.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from thanos.errors import PathError

SUFFIXES = (".txt", ".raw", ".jsonl", ".json", ".parquet")


FORMATS = (
    ".txt/.raw (documents separated by blank lines), .jsonl/.json (one JSON object per line, the text in "
    "a field) or .parquet (the text in a column)"
)


def text_files(path: str | Path) -> list[Path]:
    """The corpus files at ``path`` (a file, or every supported file below a directory, sorted)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(
            f"text data not found: {path}; point the config at an existing file or directory"
        )
    if path.is_file():
        if path.suffix.lower() not in SUFFIXES:
            raise PathError(
                f"unsupported text file type {path.suffix or '(no suffix)'!r}",
                path,
                f"give {FORMATS}; rename a plain text file to .txt",
            )
        return [path]
    if not path.is_dir():  # a device, a pipe, a socket
        raise PathError("not a file nor a directory", path, f"give {FORMATS}, or a directory of them")
    files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in SUFFIXES)
    if not files:
        raise PathError(
            f"no text files in the directory (looked for {', '.join(SUFFIXES)})", path, f"add {FORMATS}"
        )
    return files


def read_text(file: Path) -> str:
    """A text file's content as UTF-8; a PathError naming the file and the byte when it is not UTF-8."""
    try:
        return file.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise _not_utf8(file, err) from None


def _not_utf8(file: Path, err: UnicodeDecodeError) -> PathError:
    return PathError(
        f"not UTF-8 text: byte 0x{err.object[err.start]:02x} at offset {err.start} cannot be decoded",
        file,
        "give UTF-8 text (convert it, e.g. `iconv -f latin1 -t utf-8`), or this is not a text file",
    )


def _jsonl_documents(file: Path, field: str) -> list[str]:
    return _jsonl_documents_of(read_text(file).splitlines(), file, field)


def _jsonl_documents_of(lines: list[str], file: Path, field: str) -> list[str]:
    docs = []
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as err:
            raise PathError(
                f"line {lineno} is not JSON ({err.msg})", file, "give one JSON object per line (JSON Lines)"
            ) from None
        if not isinstance(record, dict) or field not in record:
            raise PathError(
                f"line {lineno} has no {field!r} field", file, "set the text field name (--text-field)"
            )
        docs.append(str(record[field]))
    return docs


def _parquet_documents(file: Path, field: str) -> list[str]:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(file)
    except Exception as err:  # noqa: BLE001 - pyarrow's errors do not name the file
        raise PathError(
            f"cannot read as parquet ({err})", file, "give a parquet file, or a .txt/.jsonl"
        ) from None
    if field not in table.column_names:
        raise PathError(
            f"no {field!r} column (has {', '.join(table.column_names)})",
            file,
            "set the text field name (--text-field)",
        )
    return [str(x) for x in table.column(field).to_pylist() if x is not None]


def check_files(path: str | Path, field: str = "text", head: int = 1 << 20) -> None:
    """A quick look at a corpus before long work starts: its files exist and are of a supported type,
    their first ``head`` bytes decode as UTF-8, and a jsonl file's first record is JSON with ``field``.
    Raises what ``read_documents`` would (naming the file) for the problems found there; reads at most
    ``head`` bytes of each file (a parquet file only its schema). A source whose every file is empty (or
    blank) is refused."""
    blank = []
    for file in text_files(path):
        suffix = file.suffix.lower()
        if suffix == ".parquet":
            import pyarrow.parquet as pq

            try:
                names = pq.read_schema(file).names
            except Exception as err:  # noqa: BLE001 - pyarrow's errors do not name the file
                raise PathError(f"cannot read as parquet ({err})", file, "give a parquet file") from None
            if field not in names:
                raise PathError(f"no {field!r} column (has {', '.join(names)})", file, "set --text-field")
            continue
        with open(file, "rb") as handle:
            start = handle.read(head)
        if not start.strip():
            blank.append(file)
            continue
        try:
            text = start.decode("utf-8")
        except UnicodeDecodeError as err:
            if err.start < len(start) - 4 or len(start) < head:  # not a character cut by the head's end
                raise _not_utf8(file, err) from None
            text = start[: err.start].decode("utf-8")
        if suffix in (".jsonl", ".json"):
            first = next((line for line in text.splitlines() if line.strip()), None)
            if first is not None and (len(first) < len(text) or len(start) < head):
                _jsonl_documents_of([first], file, field)
    if blank and len(blank) == len(text_files(path)):
        raise PathError(
            "no text: the file is empty" if len(blank) == 1 else "no text: every file is empty",
            path,
            "give a file with text",
        )


def read_documents(path: str | Path, field: str = "text") -> list[str]:
    """Documents of a corpus, in a fixed order.

    - ``.txt``/``.raw``: one document per blank-line separated paragraph;
    - ``.jsonl``/``.json`` (one object per line): the ``field`` of each line;
    - ``.parquet``: the ``field`` column.
    Empty documents are dropped. Every problem raises a PathError naming the file and the fix: a file
    that is not UTF-8, a line that is not JSON, a missing field, nothing left.
    """
    docs: list[str] = []
    for file in text_files(path):
        suffix = file.suffix.lower()
        if suffix in (".txt", ".raw"):
            docs.extend(p.strip("\n") for p in read_text(file).split("\n\n"))
        elif suffix in (".jsonl", ".json"):
            docs.extend(_jsonl_documents(file, field))
        else:
            docs.extend(_parquet_documents(file, field))
    docs = [d for d in docs if d.strip()]
    if not docs:
        raise PathError(
            "the text data holds no text (every document is empty)", Path(path), f"give {FORMATS}"
        )
    return docs


def corpus_checksum(path: str | Path) -> str:
    """sha256 over the corpus files' relative names and bytes (stable across machines)."""
    root = Path(path)
    digest = hashlib.sha256()
    for file in text_files(root):
        rel = file.name if root.is_file() else str(file.relative_to(root))
        digest.update(rel.encode())
        digest.update(file.read_bytes())
    return digest.hexdigest()
