"""The suite's tiers (tests/conftest.py): `default_cases` runs a family's named cases by default and every case
with --slow, `slow_cases` the other way round, and a misspelt case id is an error rather than a family that
silently runs nothing by default.  Run in-process with pytest's own `pytester` on a copy of the conftest."""

from pathlib import Path

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
