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


def test_more_than_one_openblas_thread_gets_a_note_saying_how_to_avoid_it_and_one_thread_none():
    info = {"version": "scipy-openblas 0.3.31", "core": "SkylakeX", "threads": 2, "forced_core": None,
            "threads_var": None}
    note = blas.threads_note(info)
    assert note and "2 threads" in note and "OPENBLAS_NUM_THREADS=1 before NumPy is imported" in note
    assert blas.threads_note({**info, "threads": 1}) is None            # control: one thread, nothing to say
    assert blas.threads_note({**info, "threads": None}) is None         # unreadable: nothing claimed


def test_load_fast_passes_the_threads_note_on(monkeypatch):
    import types
    import specref.fast as fast
    said, model = [], types.SimpleNamespace(weights=None)
    monkeypatch.setattr(fast, "load_smollm2", lambda cache_dir, progress: model)
    monkeypatch.setattr(fast, "cached_plan", lambda weights, cache_dir: None)   # no plan: the plain model back
    monkeypatch.setattr(fast, "threads_note", lambda: "NOTE")
    assert fast.load_fast(progress=said.append) is model and said[0] == "NOTE"
    monkeypatch.setattr(fast, "threads_note", lambda: None)                     # control: one thread
    said.clear()
    assert fast.load_fast(progress=said.append) is model and "NOTE" not in said and len(said) == 1
