"""The locks (``thanos.files.locks``) as units: an output held by one writer (again by the same thread, a
size writing its choice; refused for another thread and another process, naming the holder), a dry run's
probe creating nothing, a shared working directory excluding its deletion. The runs that take them are
tested end to end in test_prune_model.py and test_params.py."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest

from thanos.errors import OptionError
from thanos.files.locks import deleting, exclusive_out, holder, out_lock, shared_workdir, this_process


def test_an_out_has_one_writer(tmp_path: Path) -> None:
    out = tmp_path / "results" / "out"
    with exclusive_out(out, probe=True):  # a dry run: nothing created
        pass
    assert not (tmp_path / "results").exists()
    with exclusive_out(out):
        assert out_lock(out) == tmp_path / "results" / ".out.thanos-lock"
        assert out_lock(out).read_text() == this_process() + "\n" and not out.exists()
        with exclusive_out(tmp_path / "results" / "." / "out"):  # the same thread again: passes
            pass
        refused: list[BaseException] = []

        def other_thread() -> None:
            try:
                with exclusive_out(out):
                    pass
            except OptionError as err:
                refused.append(err)

        thread = threading.Thread(target=other_thread)
        thread.start()
        thread.join()
        assert len(refused) == 1 and "another thread; wait for that run to finish" in str(refused[0])
        code = f"from thanos.files.locks import exclusive_out\nwith exclusive_out({str(out)!r}): pass"
        other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert other.returncode == 1 and f"--out {out} is being written by {this_process()}" in other.stderr
        probe = code.replace("): pass", ", probe=True): pass")  # a dry run says so too
        assert "probe=True" in probe
        other = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
        assert other.returncode == 1 and f"is being written by {this_process()}" in other.stderr
    assert out_lock(out).read_text() == ""  # released: the file stays, naming nobody
    with exclusive_out(out):  # free again
        pass
    under_a_file = tmp_path / "notes.txt"
    under_a_file.write_text("mine")
    with exclusive_out(under_a_file / "out"):  # nothing to lock: the run's own checks refuse such an --out
        pass
    assert under_a_file.read_text() == "mine"


def test_a_shared_directory_is_not_deleted(tmp_path: Path) -> None:
    work = tmp_path / "search"
    with shared_workdir(work), shared_workdir(work):  # the search and a candidate's job, side by side
        assert holder(work) == this_process()
        with pytest.raises(ValueError, match=r"a run is using it now \(pid "), deleting(work):
            pass
    assert holder(work) is None
    with deleting(work), pytest.raises(ValueError, match="is in use by"), shared_workdir(work):
        pass
