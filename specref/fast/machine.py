"""The machine a plan is measured on: its cores, its CPU, the key a plan is cached under, how busy it is.

Holds `cores`, `cpu_identity`, `cpu_label`, `machine_key` (what a plan depends on) and `LoadWatch`
(the load of other processes while a plan is measured).  Where a plan is cached under that key,
and whether a plan measured under load is kept, is cache.py's.
"""

import os
import pathlib
import platform
import time

import numpy as np

from specref.fast.blas import openblas_info
from specref.smollm2.weights import Weights


def cores() -> int:
    """Processors this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


SIMD_FLAGS = ("sse4", "avx", "fma", "amx", "asimd", "sve", "neon")   # CPU flags that decide which BLAS kernels run


def cpu_identity(cpuinfo: str) -> dict:
    """The first processor of a /proc/cpuinfo text: model name, family/model/stepping, SIMD flags.

    The model name alone does not tell CPUs apart: virtual machines on an AMD EPYC with AVX-512
    (Zen 4) and on one without (Zen 3) both report "AMD EPYC", and OpenBLAS runs different kernels
    on them, so a plan measured on one is wrong for the other.
    """
    fields = {}
    for line in cpuinfo.splitlines():
        if not line.strip():
            if fields:
                break                                          # the first processor is enough
            continue
        name, _, value = line.partition(":")
        fields.setdefault(name.strip(), value.strip())
    flags = fields.get("flags", fields.get("Features", "")).split()
    return {"cpu": fields.get("model name", ""),
            "cpu_id": "/".join(fields.get(k, "?") for k in ("cpu family", "model", "stepping")),
            "simd": sorted(f for f in flags if f.startswith(SIMD_FLAGS))}


def cpu_label(key: dict) -> str:
    """'AMD EPYC (family/model/stepping 25/1/1; SIMD avx avx2 ...)' from a machine key."""
    return (f"{key.get('cpu')} (family/model/stepping {key.get('cpu_id', '?')}; "
            f"SIMD {' '.join(key.get('simd', [])) or 'unknown'})")


def machine_key(weights: Weights) -> dict:
    """What a plan depends on: the CPU (name, family/model/stepping, SIMD flags), cores, NumPy and
    its BLAS, the core type whose kernels OpenBLAS runs (`specref.fast.blas`: OPENBLAS_CORETYPE can
    force another, and a plan measured under one is wrong under the other), the matrices' shapes.
    Not the process's BLAS-thread setting: the fast path's products pick their own threads
    (`Team`), so a notebook and a command share one plan."""
    cpu = {"cpu": "", "cpu_id": "?/?/?", "simd": []}
    try:
        cpu = cpu_identity(pathlib.Path("/proc/cpuinfo").read_text())
    except OSError:                                            # not Linux: the platform's own description
        pass
    cpu["cpu"] = cpu["cpu"] or platform.processor() or platform.machine()
    try:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        blas = f"{blas.get('name')} {blas.get('version')}"
    except Exception:  # older NumPy: no dict mode
        blas = "unknown"
    shapes = [list(m.shape) for m in weights.matrices()[:4]] + [list(weights.head.shape)]
    return {**cpu, "cores": cores(), "numpy": np.__version__, "blas": blas,
            "blas_core": openblas_info()["core"] or "unknown", "matrices": len(weights.matrices()), "shapes": shapes}


class LoadWatch:
    """How many cores other processes kept busy, on average, since this watch started (Linux: /proc/stat).

    The machine's busy time (every CPU's user, system, interrupt and stolen time) less this
    process's own CPU time, over the wall time.  `others()` is None where /proc/stat cannot be read,
    and for a watch shorter than MIN_SECONDS (the counters tick every 10 ms: too coarse to tell).
    """
    MIN_SECONDS = 1.0

    def __init__(self):
        self.start = self._sample()

    @staticmethod
    def _sample():
        try:
            fields = pathlib.Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
            user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[:8])
        except (OSError, ValueError):
            return None
        busy = (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")
        mine = os.times()
        return time.perf_counter(), busy, mine.user + mine.system

    def others(self) -> float | None:
        end = self._sample()
        if self.start is None or end is None or end[0] - self.start[0] < self.MIN_SECONDS:
            return None
        (t0, busy0, mine0), (t1, busy1, mine1) = self.start, end
        return max(0.0, (busy1 - busy0) - (mine1 - mine0)) / (t1 - t0)
