"""What a conformance run reports, and how it ends in bounded time whatever the code under test does.

`Check` is one check's result (pass, FAIL, skipped, or not tested: it found nothing wrong but its
samples were too few to test anything) and `Verdict` what a report reads off its checks: PASSED,
FAILED, or INCOMPLETE when nothing failed but some check tested nothing; `Stop` and its
kinds end a run at once with a failing check; `Limits` puts a time limit on each call into the
code under test and on all of them together.  Shared by `conform` (verifiers) and `pipeline`
(whole generators).  `alarm` is the one SIGALRM timer they use, which leaves an enclosing one (a test
suite's own time limit, say) in force.
"""

from __future__ import annotations

import signal
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator


@dataclass
class Check:
    """One check's result."""

    name: str
    tier: str  # "exact", "statistical" or "edge"
    passed: bool | None  # None: skipped, or not tested (see `untested`)
    detail: str = ""
    pvalue: float | None = None
    level: float | None = None
    samples: int | None = None
    diagnosis: str = ""
    bug: str = ""  # the diagnosed bug's name, if any
    seconds: float = 0.0
    untested: str = ""  # why this check, which found nothing wrong, tested nothing (too few samples), if it did not
    needs: float | None = None  # with `untested`: the samples at which it would count as a test (inf: none)

    def line(self) -> str:
        status = "----" if self.untested else "SKIP" if self.passed is None else "pass" if self.passed else "FAIL"
        stat = f"p={self.pvalue:.3g} level={self.level:.2g} " if self.pvalue is not None else ""
        n = f"n={self.samples} " if self.samples is not None else ""
        out = f"{status}  {self.name:32s} {stat}{n}{self.detail}".rstrip()
        if self.untested:
            out += f"\n      NOT TESTED: {self.untested}"
        return out + (f"\n      diagnosis: {self.diagnosis}" if self.diagnosis else "")


def not_tested(check: Check, why: str, needs: float | None) -> Check:
    """`check`, which found nothing wrong, marked as having tested nothing: why, and the samples it needs (inf: no
    number would do; None: samples are not what it lacks)."""
    check.passed, check.untested, check.needs = None, why, needs
    return check


class Verdict:
    """What every run's report reads off its `checks`: whether it passed, which checks failed or tested nothing, the
    verdict line.  A run passes only when no check failed and every check that ran tested something: a run too small
    for some of its checks is INCOMPLETE, never a pass."""

    checks: list

    @property
    def passed(self) -> bool:
        return not self.failed and not self.untested

    @property
    def failed(self) -> list:
        return [c for c in self.checks if c.passed is False]

    @property
    def untested(self) -> list:
        return [c for c in self.checks if c.untested]

    def verdict(self) -> str:
        n, failed, untested = len(self.checks), len(self.failed), len(self.untested)
        if failed:
            return f"FAILED ({failed} of {n} checks" + (f"; {untested} not tested)" if untested else ")")
        return f"INCOMPLETE ({untested} of {n} checks not tested)" if untested else "PASSED"

    def status(self) -> int:
        """The command's exit status: 0 passed, 1 failed, 3 incomplete (nothing failed, some check tested nothing)."""
        return 1 if self.failed else 3 if self.untested else 0


class Stop(BaseException):
    """Ends a run at once with a failing verdict (a BaseException, so that no check's `except Exception` keeps it)."""

    check = "stop"


class ContractViolation(Stop):
    """An output outside the contract: not 1..K+1 tokens, not integer ids, an id outside [0, V)."""

    check = "contract"


class TimeLimit(Stop):
    """A call, or the whole run, took longer than its limit."""

    check = "time limit"


def alarms_work() -> bool:
    """Whether `alarm` can interrupt this thread: the main thread, where the platform has setitimer (not Windows)."""
    return threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer")


@contextmanager
def alarm(seconds: float, expired: Callable[[], BaseException]) -> Iterator[None]:
    """Raise expired() in the block if it runs longer than `seconds` of wall-clock time (SIGALRM; main thread only:
    see `alarms_work`).  It nests: an alarm already set that is due first stays in charge (its own handler raises),
    and one due later is set again when the block ends, less the time the block took."""
    start = time.monotonic()
    outer, _ = signal.getitimer(signal.ITIMER_REAL)
    if 0 < outer <= seconds:  # the enclosing alarm comes first: it stays in charge
        yield
        return

    def handler(signum, frame):
        raise expired()
    previous = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer > 0:  # the enclosing alarm again, with the time it had left (at once if that has run out)
            signal.setitimer(signal.ITIMER_REAL, max(outer - (time.monotonic() - start), 1e-6))


class Limits:
    """Time limits on calls into code under test: each call `per_call` seconds, all calls together end by `total` s.

    In the main thread a call is interrupted by SIGALRM (a sleeping or looping Python function stops at
    once; C code that never returns to the interpreter stops when it does); elsewhere the call runs in a
    daemon thread that is abandoned when its time is up.  Either way the caller gets TimeLimit in time.
    """

    def __init__(self, per_call: float, total: float, what: str = "call"):
        if not (per_call > 0 and total > 0):
            raise ValueError(f"time limits must be > 0 seconds, got {per_call} per call and {total} in all")
        self.per_call, self.total, self.what = float(per_call), float(total), what
        self.start, self.calls = time.monotonic(), 0

    def _message(self, limit: float) -> str:
        if limit < self.per_call:
            return (f"the run passed its time limit of {self.total:g} s during {self.what} {self.calls + 1} "
                    f"(after {time.monotonic() - self.start:.1f} s)")
        return f"{self.what} {self.calls + 1} did not return within its time limit of {self.per_call:g} s"

    def call(self, function: Callable, *args):
        limit = min(self.per_call, self.total - (time.monotonic() - self.start))
        if limit <= 0:
            raise TimeLimit(self._message(0.0))
        message = self._message(limit)
        if alarms_work():
            with alarm(limit, lambda: TimeLimit(message)):
                out = function(*args)
        else:
            box = {}

            def run():
                try:
                    box["out"] = function(*args)
                except BaseException as e:  # noqa: BLE001  (handed back to the caller)
                    box["error"] = e
            worker = threading.Thread(target=run, daemon=True)
            worker.start()
            worker.join(limit)
            if worker.is_alive():
                raise TimeLimit(message)
            if "error" in box:
                raise box["error"]
            out = box["out"]
        self.calls += 1
        return out
