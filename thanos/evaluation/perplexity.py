"""WikiText-2 perplexity, the paper's protocol (SparseGPT/Wanda evaluation).

The test split of WikiText-2 raw v1 (hub: ``datasets.load_dataset("wikitext", "wikitext-2-raw-v1",
split="test")``), its rows joined with ``"\\n\\n"``, tokenized once; non-overlapping windows of
``seqlen = min(2048, max_position_embeddings)`` tokens, the remainder dropped; each window is scored on its
own (no context carried over); ``ppl = exp(mean token NLL)`` over every predicted token of every window.
``max_windows`` scores only the first windows, for quick runs (recorded in the result).

**Bits per byte**, for models whose tokenizers differ (a pruned vocabulary cuts the same text into more
tokens, so a perplexity per token is not comparable): ``bytes`` is the UTF-8 length of the text the
predicted tokens cover, in each window from the end of its first token (which is not predicted) to the end
of its last one (the tokenizer's offsets: a character split between tokens counts where its first piece
ends), summed over the windows scored; ``bits_per_byte = total_nll / ln 2 / bytes``. Against the dense
model's result on the same text, ``thanos.recipes.labels.per_original_token`` converts it back to a perplexity
per dense token, ``exp(total_nll / bytes * dense bytes / dense tokens)``: both models' loss per byte of
the text each scored, times the dense model's bytes per token, so the dense model's own is exactly its
perplexity. A tokenizer without offsets (a slow, Python-only one) records no bytes (None).

Offline: ``source`` may be a local file or directory instead of ``wikitext2``:
- ``*.raw`` (e.g. ``wiki.test.raw`` of the original WikiText release): every line is one dataset row, so
  the text is exactly what the hub path evaluates;
- ``.txt``/``.jsonl``/``.parquet`` (see :mod:`thanos.data.textdata`): the documents joined with ``"\\n\\n"``.
"""

from __future__ import annotations

import hashlib
import logging
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from thanos.errors import PathError
from thanos.models.base import max_positions

log = logging.getLogger(__name__)

WIKITEXT2 = "wikitext2"
HUB_DATASET = ("wikitext", "wikitext-2-raw-v1", "test")
DEFAULT_SEQLEN = 2048
# windows per forward pass: the default of ``thanos perplexity``, ``thanos evaluate``, ``prune-model
# --evaluate`` and the workflow's ``perplexity.batch_size``, so that each scores a model the same (a batch
# changes the rounding of a half-precision model's products)
DEFAULT_BATCH_SIZE = 8
PLACEMENT = ("device", "dtype", "device_map")  # load_model's keywords evaluate_perplexity passes on


@dataclass
class EvalText:
    text: str
    dataset: str  # "wikitext/wikitext-2-raw-v1:test" or the local path
    checksum: str  # sha256 of the exact text that is tokenized


def _raw_rows(path: Path) -> list[str]:
    """Rows of a WikiText ``.raw`` file as the hub's loader yields them: one per line, blank lines empty."""
    from thanos.data.textdata import read_text

    return [line if line.strip() else "" for line in read_text(path).splitlines(keepends=True)]


def load_eval_text(source: str, text_field: str = "text") -> EvalText:
    """The text to score: WikiText-2 test from the hub (``wikitext2``) or a local file/directory."""
    if source == WIKITEXT2:
        import datasets

        name, config, split = HUB_DATASET
        try:
            rows = datasets.load_dataset(name, config, split=split)["text"]
        except Exception as err:  # offline, not cached, hub unreachable
            raise ValueError(
                f"cannot load WikiText-2 ({name}/{config}, split {split}) from the hub: {err}; "
                "on an offline machine pass --source PATH with the raw test file (wiki.test.raw) "
                "or a local text/jsonl/parquet corpus"
            ) from err
        text, dataset = "\n\n".join(rows), f"{name}/{config}:{split}"
    else:
        from thanos.data import textdata

        path = Path(source)
        if not path.exists():
            raise FileNotFoundError(
                f"evaluation data not found: {source}; pass --source wikitext2 (hub) or an existing "
                "wiki.test.raw / text / jsonl / parquet file or directory"
            )
        files = textdata.text_files(path)
        if all(f.suffix == ".raw" for f in files):
            rows = [row for f in files for row in _raw_rows(f)]
            if not any(r.strip() for r in rows):
                raise PathError("the evaluation text is empty", path, "give a file with text")
        else:
            rows = textdata.read_documents(path, field=text_field)
        text, dataset = "\n\n".join(rows), str(path)
    return EvalText(text, dataset, hashlib.sha256(text.encode("utf-8")).hexdigest())


def resolve_seqlen(config: Any, seqlen: int | None, option: str = "--seqlen") -> int:
    """The window length: ``seqlen`` if given (checked against the model), else min(2048, max positions).
    ``option``: the option that sets it, as errors name it."""
    limit = max_positions(config)
    if limit is not None and limit < 2:
        raise ValueError(
            f"the model takes {limit} position (max_position_embeddings): a window of perplexity needs at "
            "least 2 tokens, so this model cannot be scored"
        )
    if seqlen is None:
        return min(DEFAULT_SEQLEN, limit) if limit else DEFAULT_SEQLEN
    if seqlen < 2:
        raise ValueError(f"{option} {seqlen}: a window needs at least 2 tokens")
    if limit is not None and seqlen > limit:
        raise ValueError(
            f"{option} {seqlen} is longer than the model supports (max_position_embeddings = {limit}); "
            f"set {option} {limit} or less (default: min({DEFAULT_SEQLEN}, {limit}))"
        )
    return seqlen


def tokenize_windows(
    tokenizer: Any, text: str, seqlen: int, dataset: str = "", option: str = "--seqlen"
) -> tuple[Any, int]:
    """Token ids of ``text`` cut into non-overlapping windows: a (windows, seqlen) int64 tensor, and the
    number of tokens of the whole text (the remainder after the last full window is dropped). Too short
    a text raises a PathError naming ``dataset`` (where the text came from) and ``option`` (the window's)."""
    return cut_windows(encode(tokenizer, text)[0], seqlen, dataset, option)


def cut_windows(ids: Any, seqlen: int, dataset: str = "", option: str = "--seqlen") -> tuple[Any, int]:
    """``ids`` (1-D) cut into non-overlapping windows, as ``tokenize_windows``."""
    windows = ids.numel() // seqlen
    if windows == 0:
        fix = "use a longer text" + (f", or {option} {ids.numel()} or less" if ids.numel() >= 2 else "")
        raise PathError(
            f"the evaluation text has {ids.numel()} tokens, fewer than one window of seqlen={seqlen}",
            dataset or "evaluation text",
            fix,
        )
    return ids[: windows * seqlen].view(windows, seqlen), int(ids.numel())


def encode(tokenizer: Any, text: str) -> tuple[Any, Any]:
    """The token ids of ``text`` (a 1-D int64 tensor) and the UTF-8 byte offset where each token ends (a
    non-decreasing int64 array; None for a tokenizer without offsets)."""
    import numpy as np
    import torch

    try:
        encoded = tokenizer(text, return_offsets_mapping=True)
    except NotImplementedError:  # a slow tokenizer: no offsets
        return torch.tensor(tokenizer(text).input_ids, dtype=torch.long), None
    codes = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    widths = 1 + (codes >= 0x80) + (codes >= 0x800) + (codes >= 0x10000)
    byte_at = np.concatenate([[0], np.cumsum(widths, dtype=np.int64)])  # char offset -> byte offset
    char_ends = np.array([end for _, end in encoded["offset_mapping"]], dtype=np.int64)
    ends = np.maximum.accumulate(byte_at[char_ends]) if char_ends.size else char_ends
    return torch.tensor(encoded["input_ids"], dtype=torch.long), ends


def scored_bytes(ends: Any, windows: int, seqlen: int) -> int | None:
    """The UTF-8 bytes the predicted tokens of the first ``windows`` windows cover (``encode``'s ``ends``):
    in each window, from the end of its first token to the end of its last."""
    if ends is None:
        return None
    starts = ends[0 : windows * seqlen : seqlen]
    lasts = ends[seqlen - 1 : windows * seqlen : seqlen]
    return int((lasts - starts).sum())


def window_nll(model: Any, windows: Any, device: str, batch_size: int = 1, progress: bool = True) -> float:
    """Sum of the token NLLs (natural log) of every window, each scored on its own; float64 accumulation."""
    import torch
    import torch.nn.functional as F
    from tqdm import tqdm

    total = 0.0
    bar = tqdm(total=windows.shape[0], desc="perplexity", unit="window", disable=not progress)
    with torch.inference_mode():
        for start in range(0, windows.shape[0], batch_size):
            batch = windows[start : start + batch_size].to(device)
            logits = model(input_ids=batch, use_cache=False).logits
            shift = logits[:, :-1, :].float()
            target = batch[:, 1:].to(shift.device)
            nll = F.cross_entropy(shift.reshape(-1, shift.shape[-1]), target.reshape(-1), reduction="sum")
            if not torch.isfinite(nll):
                log.warning("non-finite NLL in windows %d..%d", start, start + batch.shape[0] - 1)
            total += float(nll.double())
            bar.update(batch.shape[0])
    bar.close()
    return total


@dataclass
class PerplexityResult:
    ppl: float
    nll: float  # mean token NLL (nats)
    tokens: int  # predicted tokens scored: windows * (seqlen - 1)
    windows: int  # windows scored
    seqlen: int  # window length
    dataset: str
    checksum: str  # sha256 of the evaluated text
    seconds: float
    device: str
    text_tokens: int  # tokens of the whole text (before the remainder was dropped)
    dtype: str
    batch_size: int
    model: str
    max_windows: int | None  # the cap on windows scored (None: every window, the paper's protocol)
    total_nll: float = math.nan  # sum of the token NLLs (nats)
    bytes: int | None = None  # UTF-8 bytes of the text the predicted tokens cover (None: no offsets)
    bits_per_byte: float | None = None  # total_nll / ln 2 / bytes

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def bits_per_byte(total_nll: float, scored: int | None) -> float | None:
    """The loss in bits per byte of text: ``total_nll`` nats over ``scored`` bytes (None without them)."""
    return total_nll / math.log(2) / scored if scored else None


def evaluate_perplexity(
    model_path: str,
    source: str = WIKITEXT2,
    seqlen: int | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    text_field: str = "text",
    progress: bool = True,
    max_windows: int | None = None,
    loaded: Any = None,
    seqlen_option: str = "--seqlen",
    **placement: str | None,
) -> PerplexityResult:
    """Perplexity of the model at ``model_path`` on ``source`` (see the module docstring); only the first
    ``max_windows`` windows when given (None: every window, the paper's protocol). ``loaded``: the model
    already loaded by ``load_model`` (``thanos evaluate`` loads it once for both evaluations); else it is
    loaded with ``placement``: ``load_model``'s ``device`` ("auto"), ``dtype`` ("auto") and ``device_map``
    (None), the only keywords taken besides those named. ``seqlen_option``: the option that sets ``seqlen``,
    as errors about the window name it (``thanos prune-model``'s ``--ppl-seqlen``)."""
    from thanos.evaluation.loading import load_model
    from thanos.models import model_config

    unknown = [key for key in placement if key not in PLACEMENT]
    if unknown:
        raise TypeError(
            f"evaluate_perplexity() got an unexpected keyword argument {unknown[0]!r} (placement keywords: "
            f"{', '.join(PLACEMENT)})"
        )
    if batch_size < 1:
        raise ValueError(f"--batch-size {batch_size}: must be at least 1")
    if max_windows is not None and max_windows < 1:
        raise ValueError(f"--max-windows {max_windows}: must be at least 1 (leave it out for every window)")
    data = load_eval_text(source, text_field)  # fail on missing data before loading a big model
    config = model_config(model_path)
    seqlen = resolve_seqlen(config, seqlen, seqlen_option)
    if loaded is None:
        loaded = load_model(model_path, **placement)
    ids, ends = encode(loaded.tokenizer, data.text)
    windows, text_tokens = cut_windows(ids, seqlen, data.dataset, seqlen_option)
    windows = windows[:max_windows]
    start = time.perf_counter()
    total = window_nll(loaded.model, windows, loaded.device, batch_size, progress)
    seconds = time.perf_counter() - start
    n_windows = windows.shape[0]
    tokens = n_windows * (seqlen - 1)
    scored = scored_bytes(ends, n_windows, seqlen)
    nll = total / tokens
    if not math.isfinite(nll):
        raise PathError(
            f"the model's loss on the text is {nll} (computed in {loaded.dtype}): its weights hold NaN or "
            "Inf, or its activations overflow",
            model_path,
            "`thanos model-info --model M --out info.json` names a tensor holding NaN or Inf; a model that "
            "overflows in float16 runs in float32 with --dtype float32; nothing was written",
        )
    ppl = math.exp(nll) if nll < 700 else float("inf")
    log.info("ppl %.4f over %d windows of %d tokens (%s)", ppl, n_windows, seqlen, data.dataset)
    return PerplexityResult(
        ppl=ppl,
        nll=nll,
        tokens=tokens,
        windows=n_windows,
        seqlen=seqlen,
        dataset=data.dataset,
        checksum=data.checksum,
        seconds=round(seconds, 3),
        device=loaded.placement,
        text_tokens=text_tokens,
        dtype=loaded.dtype,
        batch_size=batch_size,
        model=str(model_path),
        max_windows=max_windows,
        total_nll=total,
        bytes=scored,
        bits_per_byte=bits_per_byte(total, scored),
    )
