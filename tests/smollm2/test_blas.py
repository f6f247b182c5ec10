"""specref.fast.blas: the line notebooks print about NumPy's OpenBLAS."""

import sys

import pytest

from specref.fast import blas


def test_the_running_openblas_is_read_on_linux():
    info = blas.openblas_info()
    if not sys.platform.startswith("linux"):
        pytest.skip("the loaded library is found through /proc/self/maps")
    assert info["core"], "NumPy's OpenBLAS should report its core type"
    assert info["threads"] >= 1


def test_the_description_says_when_the_environment_forced_the_kernels():
    info = {"version": "scipy-openblas 0.3.31", "core": "Haswell", "threads": 1,
            "forced_core": "Haswell", "threads_var": "OPENBLAS_NUM_THREADS=1"}
    line = blas.openblas_description(info)
    assert "Haswell kernels (forced by OPENBLAS_CORETYPE=Haswell)" in line
    assert "1 thread (OPENBLAS_NUM_THREADS=1)" in line
    chosen = blas.openblas_description({**info, "core": "SkylakeX", "forced_core": None, "threads": 2,
                                        "threads_var": None})
    assert "SkylakeX kernels (OpenBLAS's choice for this CPU), 2 threads" in chosen


def test_the_forcing_variable_is_read_from_the_environment(monkeypatch):
    monkeypatch.setenv("OPENBLAS_CORETYPE", "Zen")
    assert blas.openblas_info()["forced_core"] == "Zen"
    monkeypatch.delenv("OPENBLAS_CORETYPE")
    assert blas.openblas_info()["forced_core"] is None
