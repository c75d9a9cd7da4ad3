"""Atomic writes: complete-or-nothing, in place, normal permissions, no orphans left by killed jobs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from thanos.files.atomic import atomic_path, write_json

REPO = Path(__file__).resolve().parent.parent


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


WRITER = """
import sys, time
from pathlib import Path
from thanos.files.atomic import atomic_path

with atomic_path(Path(sys.argv[1]), is_dir=True) as a, atomic_path(Path(sys.argv[1] + ".x")) as b:
    (a / "weights").write_text("half")
    b.write_text("half")
    print("writing", flush=True)
    time.sleep(600)
"""


def writer(target: Path) -> subprocess.Popen:
    """A process in the middle of atomic writes of ``target`` and ``target.x`` (temporaries exist)."""
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    process = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(target)], stdout=subprocess.PIPE, text=True, env=env
    )
    assert process.stdout.readline() == "writing\n"
    return process


def test_killed_writers_temporaries_are_removed_by_the_next_write(tmp_path: Path) -> None:
    target = tmp_path / "model"
    killed = writer(target)
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    orphans = sorted(p.name for p in tmp_path.iterdir())
    assert len(orphans) == 2 and all(name.endswith(".tmp") for name in orphans), orphans
    legacy = tmp_path / ".model.k3j9x_0q.tmp"  # the temporary name of earlier versions
    legacy.mkdir()
    with atomic_path(target, is_dir=True) as tmp:
        (tmp / "weights").write_text("v1")
    left = sorted(p.name for p in tmp_path.iterdir())
    # model's orphans are gone; the orphan of the other output model.x is not model's to remove
    assert left[1:] == ["model"] and left[0].startswith(".model.x."), left
    with atomic_path(tmp_path / "model.x") as tmp:
        tmp.write_text("v1")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model", "model.x"]


def test_running_writers_temporary_is_kept(tmp_path: Path) -> None:
    target = tmp_path / "model"
    running = writer(target)
    try:
        with atomic_path(target, is_dir=True) as tmp:
            (tmp / "weights").write_text("v1")
        assert len([p for p in tmp_path.iterdir() if p.name.startswith(".model.")]) == 2
    finally:
        running.send_signal(signal.SIGKILL)
        running.wait()
    with atomic_path(target, is_dir=True) as tmp:  # now its temporaries are orphans
        (tmp / "weights").write_text("v2")
    hidden = [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]
    assert len(hidden) == 1 and hidden[0].startswith(".model.x."), hidden
    assert (target / "weights").read_text() == "v2"


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o002])
def test_published_safetensors_follow_the_umask(tmp_path: Path, umask: int) -> None:
    """safetensors (and mkstemp) create 0600 files; published files get 0666 minus the umask."""
    from safetensors.torch import save_file

    old = os.umask(umask)
    try:
        single = tmp_path / "layer.safetensors"
        with atomic_path(single) as tmp:
            save_file({"weight": torch.ones(2, 2)}, str(tmp))
        model = tmp_path / "model"
        with atomic_path(model, is_dir=True) as tmp:
            save_file({"weight": torch.ones(2, 2)}, str(tmp / "model.safetensors"))
            (tmp / "sub").mkdir(mode=0o700)
            save_file({"weight": torch.ones(2, 2)}, str(tmp / "sub" / "shard.safetensors"))
    finally:
        os.umask(old)
    for file in (single, model / "model.safetensors", model / "sub" / "shard.safetensors"):
        assert file.stat().st_mode & 0o777 == 0o666 & ~umask, (file, oct(file.stat().st_mode))
    for folder in (model, model / "sub"):
        assert folder.stat().st_mode & 0o777 == 0o777 & ~umask, (folder, oct(folder.stat().st_mode))


def test_a_file_never_takes_a_directorys_place(tmp_path: Path) -> None:
    """A JSON written where a directory is fails, naming it, and the directory and its files stay (the
    directory was deleted and the file put in its place)."""
    folder = tmp_path / "pruned"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"weights")
    with pytest.raises(IsADirectoryError, match="a directory is there") as raised:
        write_json(folder, {"ppl": 1.0})
    assert raised.value.filename == str(folder)
    assert [path.name for path in tmp_path.iterdir()] == ["pruned"]
    assert (folder / "model.safetensors").read_bytes() == b"weights"
