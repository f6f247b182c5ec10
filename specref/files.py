"""Files written whole or not at all.

What specref keeps on disk (the weights it extracts, the machine's plan, a trained draft and its
training shards, the reports and caches of long runs) is written through `replacing`: into a
temporary file beside its name, and renamed onto that name only once it is complete and on disk.
An interrupt, a full disk or an exception therefore never leaves a half-written file, and a file
that was there before stays as it was; a reader sees the old file or the new one, never a mix.
"""

import contextlib
import os
import pathlib
import tempfile

MODES = ("w", "wb")        # text (UTF-8) or bytes


@contextlib.contextmanager
def replacing(path, mode: str = "w"):  # -> a file object open for writing
    """A new file that takes `path`'s place when the `with` block ends normally, and never otherwise.

    The file is a temporary one in `path`'s directory (created if missing), so the final rename
    stays within one filesystem and is atomic.  When the block ends it is flushed, fsync'ed, given
    the mode an ordinary new file gets (mkstemp makes it private), renamed onto `path`, and the
    directory is fsync'ed so that the rename survives a crash (a filesystem that refuses the mode
    leaves mkstemp's, and the file is written all the same).  If the block raises (including
    KeyboardInterrupt), the temporary file is removed, `path` is untouched, and the error goes on.
    mode: "w" for text in UTF-8, "wb" for bytes.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES} (text or bytes, written from the start), not {mode!r}")
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, mode, **({"encoding": "utf-8"} if mode == "w" else {})) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
            with contextlib.suppress(OSError):         # best effort: some filesystems keep their own modes
                os.fchmod(f.fileno(), 0o666 & ~umask())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    fsync_directory(path.parent)


def write_text(path, text: str) -> None:
    """Write `text` (UTF-8) to `path` whole or not at all (see `replacing`)."""
    with replacing(path, "w") as f:
        f.write(text)


def umask() -> int:
    """The process's file-creation mask (read by setting and restoring it)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def fsync_directory(directory) -> None:
    """Make renames in `directory` durable (best effort: some filesystems refuse to sync a directory)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
