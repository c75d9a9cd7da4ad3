"""Where a run's model and texts come from, checked before anything runs: a local path or a hub name
(``is_local``), the hub reachable when a source needs it (``check_hub``, one line at once when it is not),
the calibration, perplexity and distillation sources resolved (``source_reference``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from thanos.data.textdata import check_files
from thanos.errors import MissingOption, Option, OptionError, PathError

HUB_SOURCES = {
    "calibration": "c4",
    "ppl_source": "wikitext2",
    "distill.source": "c4",
    "source": "c4",  # thanos distill --source
}  # the option: its hub dataset's name


def is_local(path: str | Path) -> bool:
    """A path the user means as a file or directory (exists, or is written like a path)."""
    text = str(path)
    return Path(text).expanduser().exists() or text.startswith((".", "/", "~"))


def hub_config(reference: str) -> Any:
    """A hub model's config (only config.json is downloaded): from the local cache when it is there, else
    from the hub, after a probe of it (5 s) so that an unreachable hub is one line at once rather than the
    hub client's retries (~25 s of warnings)."""
    from transformers import AutoConfig

    option = Option("model", reference)
    try:
        return AutoConfig.from_pretrained(reference, local_files_only=True)
    except (OSError, ValueError):
        pass
    unreachable = hub_unavailable(datasets=False)
    if unreachable is not None:
        raise MissingOption(
            option,
            f"not in the local cache, and the hub cannot be reached ({unreachable}): pass a local model "
            "directory, or run where the hub can be reached",
        )
    try:
        return AutoConfig.from_pretrained(reference)
    except (OSError, ValueError) as err:
        raise MissingOption(option, f"cannot read its config.json ({err})") from err


def hub_unavailable(datasets: bool = True, timeout: float = 5.0) -> str | None:
    """Why the hub (``HF_ENDPOINT``, default huggingface.co) cannot be used from here: offline mode set
    (``HF_HUB_OFFLINE``; ``HF_DATASETS_OFFLINE`` too for its ``datasets``), or no connection to it within
    ``timeout`` seconds; None when it can."""
    import socket
    from urllib.parse import urlsplit

    names = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE") if datasets else ("HF_HUB_OFFLINE",)
    for name in names:
        if os.environ.get(name, "").lower() in ("1", "true", "yes", "on"):
            return f"{name}=1"
    endpoint = urlsplit(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    host, port = (
        endpoint.hostname or "huggingface.co",
        endpoint.port or (80 if endpoint.scheme == "http" else 443),
    )
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as err:
        return f"{host}:{port} cannot be reached: {err.strerror or err}"
    return None


def source_reference(source: str | Path, option: str, text_field: str = "text", check: bool = True) -> str:
    """The hub's dataset of ``option`` (``c4``, ``wikitext2``) unchanged; a local file or directory as an
    absolute path. A local source must exist and, with ``check``, pass ``thanos.data.textdata.check_files``
    (types, encoding, first record): its problems are named now, not by a step after the pruning."""
    hub_name = HUB_SOURCES[option]
    if str(source) == hub_name:
        if check:
            check_hub(option)
        return hub_name
    path = Path(source).expanduser().resolve()
    if not path.exists():
        raise MissingOption(Option(option, str(source)), f"no such file or directory (or give {hub_name!r})")
    if check:
        check_text(path, option, source, text_field)
    return str(path)


def check_text(path: Path, option: str, given: str | Path, text_field: str = "text") -> None:
    """``check_files`` of the local text ``path``: its problem (the file and the fix) said of the ``option``
    that gave it (``given``: as it was written)."""
    try:
        check_files(path, text_field)
    except PathError as err:
        raise OptionError(Option(option, str(given)), str(err)) from None


def check_hub(option: str, given: str | None = None) -> None:
    """Refuse a hub source (``c4``, ``wikitext2``, ``hf:NAME``: ``given``) when the hub cannot be reached from
    here (offline mode, no network), naming the option that takes a local file instead, before anything
    runs."""
    if (why := hub_unavailable()) is not None:
        raise OptionError(
            Option(option, given or HUB_SOURCES[option]),
            f"the hub is not available ({why}); give a local text, jsonl or parquet file or directory: ",
            Option(option, "FILE"),
        )
