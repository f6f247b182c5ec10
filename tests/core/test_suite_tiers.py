"""The suite's tiers (tests/conftest.py): `default_cases` runs a family's named cases by default and every case
with --slow, `slow_cases` the other way round, and a misspelt case id is an error rather than a family that
silently runs nothing by default; a test past its time limit fails, named, instead of hanging the run.  Run
in-process with pytest's own `pytester` on a copy of the conftest."""

import signal
import time
from pathlib import Path

import pytest

from specref.proof import verdict

CONFTEST = (Path(__file__).resolve().parents[1] / "conftest.py").read_text()

FAMILY = '''import pytest

@pytest.mark.default_cases("b")
@pytest.mark.parametrize("x", ["a", "b", "c"])
def test_family(x):
    pass

@pytest.mark.slow_cases("c")
@pytest.mark.parametrize("x", ["a", "b", "c"])
def test_mostly_fast(x):
    pass
'''


def test_default_runs_the_named_cases_and_slow_runs_all(pytester, monkeypatch):
    monkeypatch.delenv("SPECREF_SLOW", raising=False)
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_it=FAMILY)
    default = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    default.assert_outcomes(passed=3, skipped=3)
    passed = {r.nodeid.split("::")[1] for r in default.reprec.getreports("pytest_runtest_logreport")
              if r.when == "call" and r.passed}
    assert passed == {"test_family[b]", "test_mostly_fast[a]", "test_mostly_fast[b]"}
    pytester.runpytest_inprocess("-p", "no:cacheprovider", "--slow").assert_outcomes(passed=6)


def test_a_misspelt_case_is_an_error(pytester, monkeypatch):  # negative control: no default case is refused
    monkeypatch.delenv("SPECREF_SLOW", raising=False)
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_it=FAMILY.replace('default_cases("b")', 'default_cases("B")'))
    r = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    assert r.ret == 4
    assert "its marker names ['B'], which are not among its cases ['a', 'b', 'c']" in r.stderr.str() + r.stdout.str()


# ---------------------------------------------------------------- the time limit: a hang becomes a named failure

HANGS = '''import time

import numpy as np
import pytest

from specref import trees


def verify_tree_stuck(tokens, parents, p, q, rng):
    """verify_tree_mss's walk with one fault: after accepting node i it moves to row i, not i + 1, so with p = q
    (every child accepted) it accepts the first child of the same row forever."""
    children, out, row = trees.children_of(parents), [], 0
    while True:
        for i in children[row]:
            if rng.random() < q[row, tokens[i]] / p[row, tokens[i]]:
                out.append(int(tokens[i]))
                row = i
                break
        else:
            return np.array(out + [int(np.argmax(q[row]))])


def test_stuck():
    rows = np.full((3, 4), 0.25)
    verify_tree_stuck(np.array([1, 2]), np.array([-1, 0]), rows, rows, np.random.default_rng(0))


def test_in_time():
    time.sleep(0.1)


@pytest.mark.time_limit(10)
def test_slow_but_marked():
    time.sleep(1.5)


@pytest.mark.time_limit(1.2)
def test_past_its_own_limit():
    time.sleep(5)
'''


def test_a_test_that_loops_forever_fails_named_within_its_time_limit(pytester, monkeypatch):
    monkeypatch.delenv("SPECREF_SLOW", raising=False)
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_it=HANGS)
    start = time.monotonic()
    r = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--time-limit", "1")
    seconds = time.monotonic() - start
    print(r.stdout.str()[-3000:], f"{seconds:.1f} s")
    # the controls: a test within the limit passes, and so does one that needs more and is marked so
    r.assert_outcomes(passed=2, failed=2)
    out = r.stdout.str()
    assert "test_it.py::test_stuck exceeded its time limit of 1 s in its call" in out
    assert "in verify_tree_stuck" in out  # the traceback shows where it looped
    assert "test_it.py::test_past_its_own_limit exceeded its time limit of 1.2 s in its call" in out
    assert seconds < 60  # it ended: the loop alone would never have


def test_the_checkers_call_limit_leaves_an_enclosing_alarm_in_force():
    # verdict.alarm nests: a conformance run inside a test keeps the test's own time limit
    class Outer(BaseException):
        pass

    guard, _ = signal.getitimer(signal.ITIMER_REAL)  # this test's own time limit (tests/conftest.py), if set
    with pytest.raises(Outer):
        with verdict.alarm(1.0, Outer):
            limits = verdict.Limits(0.2, 60.0)
            assert limits.call(lambda: 7) == 7  # a call within its limit ...
            with pytest.raises(verdict.TimeLimit, match="did not return within its time limit of 0.2 s"):
                limits.call(time.sleep, 5)  # ... one past it (the inner limit, due first) ...
            remaining, _ = signal.getitimer(signal.ITIMER_REAL)
            assert 0 < remaining < 1.0  # ... and the enclosing alarm is still set, with the time it had left
            time.sleep(5)  # so it fires
    after, _ = signal.getitimer(signal.ITIMER_REAL)  # and the test's own is back, less the time spent
    assert (after == 0) == (guard == 0) and after <= guard


def test_the_files_run_first_exist_and_go_first():
    """conftest.LONGEST_FIRST names files of this suite (a renamed file would silently drop out of the order), and
    a collection puts them first in that order, the rest after in their own order."""
    from tests import conftest
    root = Path(__file__).resolve().parents[2]
    assert all((root / path).is_file() for path in conftest.LONGEST_FIRST), conftest.LONGEST_FIRST
    assert len(set(conftest.LONGEST_FIRST)) == len(conftest.LONGEST_FIRST)

    class Item:
        def __init__(self, nodeid):
            self.nodeid = nodeid
    first, second = conftest.LONGEST_FIRST[:2]
    items = [Item(n) for n in ("tests/a.py::x", f"{second}::y", "tests/b.py::z", f"{first}::w", f"{second}::v")]
    conftest.pytest_collection_modifyitems_longest_first(items)
    assert [i.nodeid for i in items] == [f"{first}::w", f"{second}::y", f"{second}::v", "tests/a.py::x", "tests/b.py::z"]
