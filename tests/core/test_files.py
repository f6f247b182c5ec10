"""specref.files: a file is replaced whole when its `with` block ends, and never otherwise."""

import os
import stat

import numpy as np
import pytest

from specref import files


def names(directory):
    return sorted(p.name for p in directory.iterdir())


def test_a_finished_block_replaces_the_file_in_the_usual_mode_and_leaves_nothing_else(tmp_path):
    path = tmp_path / "report.json"
    path.write_text("old")
    with files.replacing(path) as f:
        f.write("new, ünïcode")
        assert path.read_text() == "old"                       # a reader meanwhile sees the old file whole
    assert path.read_text(encoding="utf-8") == "new, ünïcode"
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~files.umask()   # not mkstemp's private 0600
    assert names(tmp_path) == ["report.json"]


def test_bytes_go_through_and_missing_directories_are_made(tmp_path):
    path = tmp_path / "a" / "b" / "arrays.npz"
    with files.replacing(path, "wb") as f:
        np.savez(f, x=np.arange(5))
    assert np.array_equal(np.load(path)["x"], np.arange(5))
    files.write_text(tmp_path / "c" / "t.txt", "text")
    assert (tmp_path / "c" / "t.txt").read_text() == "text"


@pytest.mark.parametrize("error", [ValueError("bad data"), KeyboardInterrupt()])
@pytest.mark.parametrize("existed", [True, False])
def test_a_block_that_raises_leaves_the_old_file_as_it_was_and_no_temporary(tmp_path, error, existed):
    path = tmp_path / "plan.json"
    if existed:
        path.write_text("old")
    with pytest.raises(type(error)):
        with files.replacing(path) as f:
            f.write("half of the new")
            raise error
    assert names(tmp_path) == (["plan.json"] if existed else [])
    if existed:
        assert path.read_text() == "old"


def test_a_failed_rename_removes_the_temporary_and_raises(tmp_path, monkeypatch):
    path = tmp_path / "draft.npz"
    path.write_bytes(b"old")

    def full_disk(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files.os, "replace", full_disk)
    with pytest.raises(OSError, match="No space"):
        files.write_text(path, "new")
    assert names(tmp_path) == ["draft.npz"] and path.read_bytes() == b"old"


def test_a_filesystem_that_refuses_the_mode_still_gets_the_file(tmp_path, monkeypatch):
    def refuse(fd, mode):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(files.os, "fchmod", refuse)
    files.write_text(tmp_path / "report.json", "whole")
    assert (tmp_path / "report.json").read_text() == "whole" and names(tmp_path) == ["report.json"]


@pytest.mark.parametrize("mode", ["a", "r+", "x", "w+", "r"])
def test_modes_other_than_writing_from_the_start_are_refused(tmp_path, mode):
    with pytest.raises(ValueError, match="text or bytes, written from the start"):
        with files.replacing(tmp_path / "f", mode):
            pass
    assert names(tmp_path) == []


def test_the_umask_is_read_without_being_changed():
    before = os.umask(0o027)
    try:
        assert files.umask() == 0o027
        assert os.umask(0o027) == 0o027                       # still what it was
    finally:
        os.umask(before)
