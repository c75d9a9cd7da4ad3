"""Local text corpora: plain text, jsonl with a text field, parquet; a file or a directory of them.

Used by calibration (in place of C4) and by perplexity (in place of WikiText-2) on offline machines.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

SUFFIXES = (".txt", ".raw", ".jsonl", ".json", ".parquet")


def text_files(path: str | Path) -> list[Path]:
    """The corpus files at ``path`` (a file, or every supported file below a directory, sorted)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(
            f"text data not found: {path}; point the config at an existing file or directory"
        )
    if path.is_file():
        return [path]
    files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in SUFFIXES)
    if not files:
        raise ValueError(f"no {', '.join(SUFFIXES)} files under {path}")
    return files


def read_documents(path: str | Path, field: str = "text") -> list[str]:
    """Documents of a corpus, in a fixed order.

    - ``.txt``/``.raw``: one document per blank-line separated paragraph;
    - ``.jsonl``/``.json`` (one object per line): the ``field`` of each line;
    - ``.parquet``: the ``field`` column.
    Empty documents are dropped. Raises ValueError if nothing is left.
    """
    docs: list[str] = []
    for file in text_files(path):
        if file.suffix in (".txt", ".raw"):
            text = file.read_text(encoding="utf-8")
            docs.extend(p.strip("\n") for p in text.split("\n\n"))
        elif file.suffix in (".jsonl", ".json"):
            with open(file, encoding="utf-8") as handle:
                for lineno, line in enumerate(handle, 1):
                    if not line.strip():
                        continue
                    record = json.loads(line)
                    if field not in record:
                        raise ValueError(f"{file}:{lineno}: no {field!r} field; set the text field name")
                    docs.append(record[field])
        else:
            import pyarrow.parquet as pq

            table = pq.read_table(file)
            if field not in table.column_names:
                raise ValueError(f"{file}: no {field!r} column (has {table.column_names})")
            docs.extend(str(x) for x in table.column(field).to_pylist() if x is not None)
    docs = [d for d in docs if d.strip()]
    if not docs:
        raise ValueError(f"text data at {path} is empty")
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
