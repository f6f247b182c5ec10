"""What the four exercises share: the verdict (`Result`), grading under time limits, the seed and the tolerance,
and the pieces more than one check uses (cases in exact fractions, the portable vectors, the known mistake an
answer matches, the known law counts point to).

Each call of the graded function may take CALL_LIMIT seconds and a whole check TIME_LIMIT.
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import io
import json
import time
import warnings
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction
from typing import Callable

import numpy as np

from specref.proof import conform, stats, vectors
from specref.proof.verdict import Limits, Stop

from .uniforms import _Unsupported


# The fixed seed of check_verify's chi-square (and of the real generator its contract call gets).
SEED = 2024
# Calls in check_verify's chi-square: the correct law has 70 outcomes, in 20 bins at this size; about 1 s.
N_CALLS = 10_000
# Seconds one call of the graded function may take, and a whole check (a verdict always comes by then).
CALL_LIMIT = 5.0
TIME_LIMIT = 20.0
# Relative tolerance of the exact comparisons of numbers (floats against exact fractions).
TOL = 1e-9

F = Fraction


# ---------------------------------------------------------------- the verdict

class Result:
    """What a check found: true when it passed; `.passed`, `.diagnosis`, `.check` (the failing one), `.checked`."""

    def __init__(self, exercise: str, passed: bool, checked: str = "", check: str = "", diagnosis: str = "",
                 seconds: float = 0.0):
        self.exercise, self.passed, self.checked = exercise, passed, checked
        self.check, self.diagnosis, self.seconds = check, diagnosis, seconds
        self._shown_in = None  # the notebook cell (IPython execution count) that already printed the verdict

    @property
    def verdict(self) -> str:
        return f"pass: {self.checked}" if self.passed else f"FAIL: {self.check}: {self.diagnosis}"

    def __bool__(self) -> bool:
        return self.passed

    def __repr__(self) -> str:
        return self.verdict

    __str__ = __repr__

    def _ipython_display_(self) -> None:
        # A notebook cell ending with the check displays its value: the check printed the line already in this
        # cell, so only a later cell (`result` on its own) prints it again.
        if self._shown_in is None or self._shown_in != _cell():
            print(self.verdict)


def _cell():
    """The running notebook cell's execution count, or None outside IPython (IPython puts get_ipython in builtins)."""
    shell = getattr(builtins, "get_ipython", lambda: None)()
    return getattr(shell, "execution_count", None)


def _show(shown):  # print a Result's (or a Table's) text once and remember in which cell
    print(shown)
    shown._shown_in = _cell()
    return shown


class _Fail(Exception):
    """Ends a check: the failing check's name and the diagnosis."""

    def __init__(self, check: str, diagnosis: str):
        super().__init__(f"{check}: {diagnosis}")
        self.check, self.diagnosis = check, diagnosis


def _grade(exercise: str, run: Callable[[Limits], str]) -> Result:
    """Run one exercise's checks (`run(limits)` returns what passed, or raises _Fail), quietly; print the verdict."""
    start = time.perf_counter()
    limits = Limits(CALL_LIMIT, TIME_LIMIT, "call of your function")
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"), \
                contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            checked = run(limits)
        result = Result(exercise, True, checked)
    except _Fail as e:
        result = Result(exercise, False, check=e.check, diagnosis=e.diagnosis)
    except Stop as e:  # a call past its time limit, or all of them past TIME_LIMIT
        why = "an endless loop?" if "did not return" in str(e) else "a check makes about 10 000 calls; each should " \
            "take well under a millisecond"
        result = Result(exercise, False, check="time limit", diagnosis=f"{e} ({why})")
    result.seconds = time.perf_counter() - start
    return _show(result)


def _call(limits: Limits, check: str, f: Callable, *args, where: str = ""):
    """f(*args) under the time limits; an exception it raises fails `check`, saying where."""
    try:
        return limits.call(f, *args)
    except _Unsupported:
        raise
    except Exception as e:  # noqa: BLE001  (whatever the learner's code raises is the verdict)
        raise _Fail(check, f"raised {type(e).__name__}: {e}" + (f" ({where})" if where else "")) from None


def _number(limits: Limits, check: str, f: Callable, *args, where: str) -> float:
    """f(*args) under the time limits, as one finite float; anything else fails `check`, saying where."""
    out = _call(limits, check, f, *args, where=where)
    try:
        v = np.asarray(out, dtype=np.float64)
    except Exception:  # noqa: BLE001
        raise _Fail(check, f"returned {out!r} for {where}: expected one number") from None
    if v.size != 1:
        raise _Fail(check, f"returned an array of shape {v.shape} for {where}: expected one number")
    if not np.isfinite(v.item()):
        raise _Fail(check, f"returned {v.item()} for {where}")
    return float(v.item())


def _not_answered(limits: Limits, f: Callable, *args) -> None:
    """Fail "not answered yet" when f(*args) raises NotImplementedError (the starter stub); any other error is left
    to the checks that follow, which report it where it happens."""
    try:
        limits.call(f, *args)
    except NotImplementedError:
        raise _Fail("not answered yet", f"{getattr(f, '__name__', 'the function')} raises NotImplementedError: "
                                        "replace the raise with your code") from None
    except Exception:  # noqa: BLE001
        pass


def _fmt(v, digits: int = 6) -> str:
    return f"{float(v):.{digits}g}"


def _row(a, digits: int = 6) -> str:
    return "[" + ", ".join(_fmt(v, digits) for v in np.asarray(a, dtype=np.float64).reshape(-1)) + "]"


def _pair(a, b, show: Callable = _row) -> tuple[str, str]:
    """a and b shown (by _row, or _fmt for numbers) with 6 significant digits, or as many more (9, 12, 17) as it
    takes to tell them apart."""
    for digits in (6, 9, 12, 17):
        shown = show(a, digits), show(b, digits)
        if shown[0] != shown[1]:
            break
    return shown


# ---------------------------------------------------------------- shared by the checks

def _fr(rows) -> list[list[Fraction]]:
    return [[F(v) for v in row] for row in rows]


@dataclass(frozen=True)
class _Case:
    """One call's inputs: x_draft [K], p [K, V], q [K+1, V], as exact fractions (the function gets float64)."""

    name: str
    x_draft: tuple
    p: tuple
    q: tuple

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return (np.array(self.x_draft, dtype=np.int64), np.array(self.p, dtype=np.float64),
                np.array(self.q, dtype=np.float64))


def _case(name, x_draft, p, q) -> _Case:
    return _Case(name, tuple(x_draft), tuple(map(tuple, _fr(p))), tuple(map(tuple, _fr(q))))


def _unchanged(check: str, before: tuple, after: tuple, names: tuple) -> None:
    for b, a, name in zip(before, after, names):
        if not np.array_equal(b, a):
            raise _Fail(check, f"changes its input {name} in place: compute on a copy (q - p makes a new array)")


@functools.cache
def _vectors(function: str) -> tuple[dict, ...]:
    return tuple(c for c in json.loads(vectors.PATH.read_text())["cases"] if c["function"] == function)


def _first_match(mistakes, f_outcomes: list, outcome_of: Callable) -> str:
    """The label of the first known mistake that gives f's answers on every case (f_outcomes holds them), or ''.
    outcome_of(wrong, i) is the mistake's answer on case i."""
    return next((label for label, wrong in mistakes
                 if all(_same(o, outcome_of(wrong, i)) for i, o in enumerate(f_outcomes))), "")


def _same(a, b) -> bool:
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=1e-9, atol=1e-12, equal_nan=True))


def _likeliest(counts: Counter, correct: dict, laws: dict[str, dict]) -> str:
    """The known law the counts point to by the conformance checker's rule (LOG_MARGIN, FIT_LEVEL), or ''."""
    if not laws:
        return ""
    ll = {name: conform.log_likelihood(counts, law) for name, law in laws.items()}
    ranked = sorted(ll, key=ll.get, reverse=True)
    best = ranked[0]
    others = max([ll[n] for n in ranked[1:]] + [conform.log_likelihood(counts, correct)])
    if ll[best] - others >= conform.LOG_MARGIN and stats.chi_square_gof(counts, laws[best])[2] > conform.FIT_LEVEL:
        return best
    return ""
