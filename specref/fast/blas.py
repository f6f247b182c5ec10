"""Which OpenBLAS NumPy is running: its version, the core type whose kernels it picked, its threads.

`numpy.show_config()` names the BLAS NumPy was built with, and the kernels it was built for, but
not the ones that run: NumPy's bundled OpenBLAS is built for many CPUs (DYNAMIC_ARCH) and picks a
core type when it loads, from the CPU or from the environment variable OPENBLAS_CORETYPE.  The
commands and notebooks print it beside their timings, and a fast-path plan is keyed on it
(`specref.fast.machine.machine_key`), because the same CPU runs small products at very different
speeds under different kernels (docs/performance.md).
"""

from __future__ import annotations

import ctypes
import os
import pathlib

import numpy as np

CORETYPE_VAR = "OPENBLAS_CORETYPE"    # forces OpenBLAS's kernels when set (read once, when it loads)
THREADS_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")


def _loaded_openblas():
    """The OpenBLAS library this process has loaded (NumPy's), as ctypes sees it; None if none is found (not Linux)."""
    try:
        maps = pathlib.Path("/proc/self/maps").read_text()
    except OSError:
        return None
    paths = {line.split()[-1] for line in maps.splitlines() if "openblas" in line.lower() and "/" in line}
    for path in sorted(paths):
        try:
            return ctypes.CDLL(path)                          # already loaded: the same copy NumPy calls
        except OSError:
            continue
    return None


def _call(lib, name: str, restype):
    """lib's `name` under the prefixes and suffixes OpenBLAS builds use (scipy-openblas, 64-bit ints); None if absent."""
    for prefix in ("scipy_openblas_", "openblas_"):
        for suffix in ("64_", ""):
            fn = getattr(lib, f"{prefix}{name}{suffix}", None)
            if fn is not None:
                fn.restype = restype
                return fn()
    return None


def openblas_info() -> dict:
    """{'version', 'core', 'threads', 'forced_core', 'threads_var'}: what OpenBLAS reports at run time
    (None where it cannot be read), and the environment variables that set the core type and threads."""
    info = {"version": None, "core": None, "threads": None,
            "forced_core": os.environ.get(CORETYPE_VAR) or None,
            "threads_var": next((f"{v}={os.environ[v]}" for v in THREADS_VARS if os.environ.get(v)), None)}
    try:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        info["version"] = f"{blas.get('name')} {blas.get('version')}"
    except Exception:  # an older NumPy has no dict mode
        pass
    lib = _loaded_openblas()
    if lib is not None:
        core = _call(lib, "get_corename", ctypes.c_char_p)
        info["core"] = core.decode() if core else None
        info["threads"] = _call(lib, "get_num_threads", ctypes.c_int)
    return info


def openblas_description(info: dict | None = None) -> str:
    """One line: 'NumPy's BLAS: scipy-openblas 0.3.31, SkylakeX kernels (OpenBLAS's choice for this CPU), 2 threads'."""
    info = info or openblas_info()
    core = info["core"] or "unknown"
    why = (f"forced by {CORETYPE_VAR}={info['forced_core']}" if info["forced_core"]
           else "OpenBLAS's choice for this CPU")
    threads = "threads unknown" if info["threads"] is None else f"{info['threads']} thread{'s' * (info['threads'] != 1)}"
    if info["threads_var"]:
        threads += f" ({info['threads_var']})"
    return f"NumPy's BLAS: {info['version'] or 'unknown'}, {core} kernels ({why}), {threads}"


def forced_note(info: dict | None = None) -> str | None:
    """When OPENBLAS_CORETYPE forces the kernels, a sentence saying so and where their cost is measured; else None."""
    info = info or openblas_info()
    if not info["forced_core"]:
        return None
    return (f"{CORETYPE_VAR}={info['forced_core']} is set: OpenBLAS runs {info['core'] or 'those'} kernels, not the "
            f"ones it would pick for this CPU, and small products (scoring K + 1 tokens) can cost far more under "
            f"them.  `python3 -m specref bench` measures both here; to run as a user's machine does, unset it for "
            f"one command: env -u {CORETYPE_VAR} python3 -m specref ...")


def threads_note(info: dict | None = None) -> str | None:
    """When OpenBLAS runs more than one thread, a sentence saying what that costs the fast path and how to avoid it;
    else None (one thread, or a count that cannot be read)."""
    info = info or openblas_info()
    if info["threads"] is None or info["threads"] <= 1:
        return None
    return (f"OpenBLAS runs {info['threads']} threads here: between the fast path's products they spin on the cores "
            f"its own thread team uses, and target calls that follow a draft's can take up to half as long again "
            f"(docs/performance.md).  Set OPENBLAS_NUM_THREADS=1 before NumPy is imported, as `python3 -m specref` "
            f"does.")


def describe_kernels(info: dict | None = None) -> str:
    """The description line, followed by the forced-kernels sentence when it applies (what the commands print)."""
    info = info or openblas_info()
    note = forced_note(info)
    return openblas_description(info) + (f"\n{note}" if note else "")

