"""Atomic writes: complete-or-nothing, replacing in place, normal permissions."""

from __future__ import annotations

import json
import os

import pytest

from thanos.atomic import atomic_path, write_json


def test_write_json_and_permissions(tmp_path) -> None:
    target = tmp_path / "a" / "stats.json"
    write_json(target, {"x": 1})
    assert json.loads(target.read_text()) == {"x": 1}
    umask = os.umask(0)
    os.umask(umask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~umask
    assert [p.name for p in target.parent.iterdir()] == ["stats.json"]


def test_failed_write_leaves_old_content_and_no_temporary(tmp_path) -> None:
    target = tmp_path / "model"
    with atomic_path(target, is_dir=True) as tmp:
        (tmp / "weights").write_text("v1")
    with pytest.raises(RuntimeError), atomic_path(target, is_dir=True) as tmp:
        (tmp / "weights").write_text("half")
        raise RuntimeError("killed mid-write")
    assert (target / "weights").read_text() == "v1"
    assert [p.name for p in tmp_path.iterdir()] == ["model"]
    with atomic_path(target, is_dir=True) as tmp:
        (tmp / "weights").write_text("v2")
    assert (target / "weights").read_text() == "v2"
    assert [p.name for p in tmp_path.iterdir()] == ["model"]
