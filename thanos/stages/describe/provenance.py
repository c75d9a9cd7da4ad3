"""What a pruned model's report records beside the model: where it came from and what it cost.

``assemble`` writes these into ``pruning_report.json``: the calibration store's provenance (its
attributes: source, windows, seed, checksum), the versions of Python and of the packages that shape the
result, and the bytes on disk of the run's intermediates (token, activation and Hessian stores, pruned
layers). The model card states the calibration provenance.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Any

VERSION_PACKAGES = ("torch", "transformers", "safetensors", "zarr", "numpy", "snakemake", "thanos-prune")


@dataclass(frozen=True)
class RunRecord:
    """What a pruning report records of the run besides the model and the recipe: the model's name in the
    config, the calibration tokens store (its provenance), the intermediates whose disk use is reported, and
    how the workflow ran (e.g. its granularity and why), recorded as is."""

    model_name: str | None = None
    calibration: str | os.PathLike | None = None
    intermediates: tuple[str | os.PathLike, ...] = ()
    workflow: dict[str, Any] | None = None


def calibration_provenance(tokens: str | os.PathLike | None) -> dict[str, Any] | None:
    """The attributes of a complete calibration token store (its provenance), or None without one."""
    if tokens is None:
        return None
    import zarr

    path = Path(tokens)
    if not path.exists():
        raise FileNotFoundError(f"calibration store {path} not found")
    attrs = dict(zarr.open_group(str(path), mode="r").attrs)
    if not attrs.get("complete"):
        raise ValueError(
            f"calibration store {path} is incomplete (no complete attribute); delete it and rerun"
        )
    return attrs


def disk_usage(paths: list[str | os.PathLike]) -> dict[str, int]:
    """Bytes on disk of each file or directory (``path_bytes``)."""
    return {str(p): path_bytes(p) for p in paths}


def path_bytes(path: str | os.PathLike) -> int:
    """The bytes of a file, or of the files under a directory (symlinks not followed, directories and block
    rounding left out); 0 for a missing path. A file removed while the directory is walked (a run writing
    it) is left out."""
    path = Path(path)
    if path.is_file():
        return path.stat().st_size
    total = 0
    for dirpath, _, files in os.walk(path):  # nothing for a missing path
        for name in files:
            file = Path(dirpath) / name
            try:
                total += 0 if file.is_symlink() else file.stat().st_size
            except FileNotFoundError:
                pass
    return total


def package_versions() -> dict[str, str | None]:
    """Python and the versions of the packages that shape the result (None: not installed)."""
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for package in VERSION_PACKAGES:
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = None
    versions["thanos"] = versions.pop("thanos-prune")
    return versions
