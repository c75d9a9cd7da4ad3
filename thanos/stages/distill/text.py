"""A distillation's text: documents packed into windows of tokens, the first ones held out.

The documents of the source (``thanos.data.calibration.load_source``: a local text/jsonl/parquet file or
directory, or ``c4``; or ``hf:NAME[:CONFIG]``, a dataset of the hub streamed by ``datasets``, its ``train``
split read only as far as the run needs) in their order, each tokenized alone and followed by the end-of-text
token, concatenated and cut into windows; tokenizing stops once the windows a run needs are full.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from thanos.data.calibration import load_source
from thanos.errors import PathError
from thanos.recipes.training import streamed_dataset


@dataclass
class Text:
    """The windows of the text: ``heldout`` and ``train`` (int64, (windows, seqlen)) and where they came
    from (``provenance``: the source and its checksum; ``sha256`` of the windows' tokens)."""

    heldout: torch.Tensor
    train: torch.Tensor
    provenance: dict[str, Any]
    sha256: str


def stream_documents(source: str, text_field: str) -> Iterator[str]:
    """The documents of ``hf:NAME[:CONFIG]``'s ``train`` split, streamed (``datasets``, nothing downloaded
    beyond what is read); NAME may be a local dataset directory."""
    from datasets import load_dataset

    name, config = streamed_dataset(source) or (source, None)
    try:
        for record in load_dataset(name, config, split="train", streaming=True):
            if text_field not in record:
                raise PathError(
                    f"the dataset's records have no field {text_field!r} (they have {', '.join(record)})",
                    source,
                    "give the field holding the text (--text-field)",
                )
            yield str(record[text_field])
    except PathError:
        raise
    except (OSError, ValueError) as err:
        raise PathError(
            f"the dataset cannot be streamed ({err})", source, "check the name and the network"
        ) from err


def pack_windows(documents: Iterable[str], tokenizer: Any, seqlen: int, needed: int) -> torch.Tensor:
    """The documents tokenized in order, each followed by the end-of-text token, packed and cut into windows
    of ``seqlen`` tokens; tokenizing stops once ``needed`` windows are full."""
    eos = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    ids: list[int] = []
    for document in documents:
        ids += tokenizer(document)["input_ids"] + eos
        if len(ids) >= needed * seqlen:
            break
    count = min(needed, len(ids) // seqlen)
    return torch.tensor(ids[: count * seqlen], dtype=torch.int64).view(count, seqlen)


def load_text(
    source: str, tokenizer: Any, seqlen: int, heldout: int, tokens: int, text_field: str = "text"
) -> Text:
    """The first ``heldout`` windows of ``seqlen`` tokens of ``source``, and the training windows after them:
    as many as ``tokens`` needs, or as the text has."""
    if streamed_dataset(source):  # what was read is the windows: their sha256 is the checksum
        documents: Iterable[str] = stream_documents(source, text_field)
        provenance: dict[str, Any] = {"source": source, "split": "train", "streamed": True}
    else:
        documents, provenance = load_source(source, text_field)
    budget = math.ceil(tokens / seqlen)
    windows = pack_windows(documents, tokenizer, seqlen, heldout + budget)
    if windows.shape[0] <= heldout:
        raise PathError(
            f"the text gives {windows.shape[0]} window(s) of {seqlen} tokens: not more than the "
            f"{heldout} held out",
            source,
            "give a longer text, a smaller --seqlen or fewer --heldout windows",
        )
    train = windows[heldout:]
    sha = hashlib.sha256(windows.numpy().tobytes()).hexdigest()
    return Text(windows[:heldout], train, provenance, sha)


def passes_note(text: Text, tokens: int) -> str | None:
    """What to say when the budget of ``tokens`` goes over the training windows more than once."""
    seqlen, windows = text.train.shape[1], text.train.shape[0]
    budget = math.ceil(tokens / seqlen)
    if windows >= budget:
        return None
    return (
        f"the text gives {windows} training windows of {seqlen} tokens; the budget of {tokens:,} tokens goes "
        f"over them {budget / windows:.1f} times (each pass in a new order)"
    )
