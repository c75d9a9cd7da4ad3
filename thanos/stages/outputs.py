"""What the resuming stages ask of a zarr store: is it finished (what identifies an output, and how it is
deleted: ``thanos.files.ledger``)."""

from __future__ import annotations

from pathlib import Path


def store_complete(path: Path) -> bool:
    """A finished zarr store (stores are renamed into place; ``complete`` is their last attribute)."""
    from thanos.data.storage import open_complete

    try:
        open_complete(path, "store")
    except (FileNotFoundError, ValueError):
        return False
    return True
