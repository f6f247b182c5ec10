"""One run of the checker, chains and trees alike: `check`, and the single checks it is made of.

A run (`check`) adapts the function to the contract of its algorithm, guards every call (time limits, the
contract), runs the exact tier when the checker's uniforms reach the function, then the statistical tier
(every chi-square at FAMILY_LEVEL / m, every output watched) and a large-vocabulary edge case, and makes the
diagnosis; a contract violation or a time limit stops it at once.  What differs between chains and trees is
the per-shape module `algorithms.part(algorithm)` returns (`chain` or `tree`, the same names in each).
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Callable

import numpy as np

from specref import verifiers
from specref.proof import power
from specref.proof.conform import checks as levels
from specref.proof.conform.algorithms import part
from specref.proof.conform.adapter import Adapter, adapt
from specref.proof.conform.checks import FAMILY_LEVEL, probe_injectable
from specref.proof.conform.report import EXACT_NOT_RUN, Report, edge_names, round_up, summary
from specref.proof.conform.watch import Guarded, Watched, form_check
from specref.proof.verdict import Check, Limits, Stop, not_tested

# Time limits: a verdict within a stated time whatever the verifier does.  Each call of the verifier may
# take CALL_LIMIT seconds and a whole run RUN_LIMIT seconds (`check`'s call_limit and time_limit); a call
# that passes either ends the run with a failing "time limit" check.  A run of a NumPy verifier takes
# under two minutes (docs/conformance.md), transformers' PyTorch one about ten.
CALL_LIMIT = 10.0
RUN_LIMIT = 1800.0


# ---------------------------------------------------------------- the single checks

def exact_checks(verifier: Callable, algorithm: str = "token") -> list[Check]:
    """The exact tier on a verifier with the contract's signature that takes injected uniforms: the vectors, then two
    edge cases (a chain: `mrs.verify`'s signature) or three (a tree algorithm: the tree contract)."""
    algorithm = verifiers.law_of(algorithm)
    shape = part(algorithm)
    return [shape.vectors_check(verifier, algorithm), *shape.edge_checks(verifier, algorithm)]


def one_call_check(verifier: Callable, case, algorithm: str = "token", level: float = FAMILY_LEVEL,
                   rng: np.random.Generator | None = None) -> Check:
    """The chi-square check of one call's output law on `case` (a `Case` for a chain algorithm, with verify's
    signature; a `TreeCase` for a tree algorithm, with the tree contract), with a diagnosis if it fails."""
    rng = np.random.default_rng(0) if rng is None else rng
    algorithm = verifiers.law_of(algorithm)
    return part(algorithm).one_call(verifier, case, algorithm, level, rng)[0]


def sequence_check(verifier, K, level: float = FAMILY_LEVEL, rng: np.random.Generator | None = None,
                   runs: int | None = None, algorithm: str = "token") -> Check:
    """The chi-square check of `runs` whole sequences against the exact law of the Markov-chain target's sequences:
    of speculative_sampling through `verifier` (verify's signature), K drafts a call; or, for a tree algorithm, of a
    speculative loop with trees, K being the trees' widths (each call a tree drawn the algorithm's way from the draft
    at the tokens so far, the target's rows on it, the verifier).  runs: by default N_SEQUENCES (TREE_N_SEQUENCES)."""
    algorithm = verifiers.law_of(algorithm)
    shape = part(algorithm)
    rng = np.random.default_rng(0) if rng is None else rng
    return shape.sequence(verifier, K, algorithm, level, rng, shape.N_SEQUENCES if runs is None else runs)


# ---------------------------------------------------------------- a run

def check(function: Callable, adapter: Adapter = Adapter(), algorithm: str = "token", seed: int = 0,
          vectors_tier: bool = True, name: str | None = None, progress: Callable[[Check], None] | None = None,
          scale: float = 1.0, call_limit: float = CALL_LIMIT, time_limit: float = RUN_LIMIT) -> Report:
    """Run every check on `function` (through `adapter`) as a verifier of `algorithm`: "token" or "block" (a chain
    verifier), "tree-topk", "tree-mss" or "tree-rrs" (a tree verifier), or any other name of `specref.verifiers`,
    which is checked as the reference whose law its row names (`verifiers.law_of`).

    Requires: function behaves like `mrs.verify` once `adapter` is applied; for a tree algorithm like
    `mrs_tree.verify_tree_topk`, `verify_tree_mss` or `verify_tree_rrs` (tokens [N], parents [N], p [N+1, V],
    q [N+1, V], rng -> the accepted path's tokens, then one more), on trees the checker draws the way the
    algorithm assumes.  The exact tier runs when vectors_tier is true and the adapter hands the function the rng
    object itself; the statistical tier always, with `scale` times the default samples (less power, same
    false-alarm rate; a check too small to test anything is reported as not tested, and the run as INCOMPLETE).
    `progress(check)` is called after each check.

    Ensures a verdict in bounded time: each call of the function may take call_limit seconds and
    all of them together time_limit; an output outside the contract (not 1..K+1 tokens, or 1 to depth + 1 for a
    tree, not integer ids, an id outside [0, V)) or a call past a limit ends the run at once with a failing check
    named "contract" or "time limit" that says what was wrong.  The run then ends within
    time_limit + call_limit plus the checker's own work after the last call (a second or two).
    """
    if algorithm not in verifiers.CHAINS + verifiers.TREES:
        raise ValueError(f"algorithm must be one of {verifiers.CHAINS + verifiers.TREES}, "
                         f"got {algorithm!r}")
    algorithm = verifiers.law_of(algorithm)  # a new implementation of a known rule is checked as that rule
    shape = part(algorithm)
    start = time.perf_counter()
    limits = Limits(call_limit, time_limit, "verifier call")
    verifier = Guarded(adapt(function, adapter, algorithm), limits, shape.FORM)
    report = Report(name or getattr(function, "__qualname__", repr(function)), algorithm, seed, scale=scale)
    add, add_tested = _adders(report, progress, scale, algorithm)

    ll_sum = Counter()  # log-likelihood of each bug, summed over the diagnosed one-call checks
    try:
        for c in _exact_tier(verifier, algorithm, adapter, vectors_tier):
            add(c)

        jobs = shape.plan(algorithm, scale)  # (name, job(verifier, level, rng) -> (check, scores)) per chi-square
        level = levels.FAMILY_LEVEL / len(jobs)
        seeds = np.random.default_rng(seed).integers(2**63, size=len(jobs) + 1)
        watched = Watched(verifier, shape.FORM)
        for i, (check_name, job) in enumerate(jobs):
            try:
                c, scores = job(watched, level, np.random.default_rng(seeds[i]))
                if not c.passed:
                    ll_sum.update(scores)
            except Exception as e:  # noqa: BLE001  (a crash fails the check, with what it said)
                c = Check(check_name, "statistical", False, f"raised {type(e).__name__}: {e}", level=level)
            add_tested(c)
        add(form_check(watched, "every output seen"))
        try:
            c = shape.certain_check(verifier, algorithm, np.random.default_rng(seeds[-1]))
        except Exception as e:  # noqa: BLE001
            c = Check(shape.certain_name(algorithm), "edge", False, f"raised {type(e).__name__}: {e}")
        add(c)
    except Stop as stop:  # a contract violation or a time limit: the run ends here, failed, saying why
        return _stopped(report, stop, add, start)
    return _finished(report, ll_sum, start)


def assert_conforms(function: Callable, adapter: Adapter = Adapter(), **kwargs) -> Report:
    """`check`, raising AssertionError with the whole report if any check fails (for use inside a pytest test)."""
    report = check(function, adapter, **kwargs)
    if not report.passed:
        raise AssertionError("\n" + report.text())
    return report


def _adders(report: Report, progress, scale: float, algorithm: str) -> tuple[Callable, Callable]:
    """add(check): append it to the report and show it; add_tested(check): the same for a chi-square check, which if
    it found nothing wrong at a reduced scale must also show it tested something (_count_as_test)."""
    def add(c: Check) -> None:
        report.checks.append(c)
        if progress is not None:
            progress(c)

    def add_tested(c: Check) -> None:  # at the default sizes every check does (tests/proof/test_conform*.py)
        if c.passed and scale < 1:
            _count_as_test(c, algorithm)
        add(c)
    return add, add_tested


# What a user changes so that the exact tier runs on a function whose randomness the checker cannot reach.
TO_RUN_EXACT = ("to run it, hand the function the checker's generator (Adapter(rng='generator'), --rng generator) and "
                "draw only its random(), or let the function draw from Python's random, NumPy's global functions or "
                "torch's global generator (Adapter(rng='none'), --rng none), which the exact tier drives")


def _exact_tier(verifier, algorithm: str, adapter: Adapter, vectors_tier: bool) -> list:
    """The exact tier's checks, or one check saying why it was not run (turned off, a seed or a generator of the
    function's own, or randomness the probe finds the checker's uniforms do not reach), what that loses and what
    to change."""
    why_not = "" if vectors_tier and adapter.injectable else (
        "turned off" if not vectors_tier else "the adapter hands the function a seed or a generator of its own, "
                                              "which the checker's uniforms do not reach")
    if not why_not:
        why_not = probe_injectable(verifier, part(algorithm).probe_args())
    if why_not:
        fix = "" if not vectors_tier else f"; {TO_RUN_EXACT}"
        return [Check(EXACT_NOT_RUN, "exact", None, f"{why_not}; {part(algorithm).NEEDS}{fix}")]
    return exact_checks(verifier, algorithm)


def _count_as_test(c: Check, algorithm: str) -> Check:
    """Mark a passing chi-square check as not tested when its samples are too few to test anything (`power.untested`:
    one bin, or fewer than half the known bugs it sees at its default size seen), with the samples it needs."""
    laws = part(algorithm).check_laws(algorithm)[c.name]
    why, needs = power.untested(laws, c.samples, c.level)
    if why:
        n_full = laws[0]
        not_tested(c, f"{why}; it counts as a test from n = {needs:.0f} (scale {round_up(needs / n_full)})", needs)
    return c


def _stopped(report: Report, stop: Stop, add: Callable[[Check], None], start: float) -> Report:
    """The report of a run that a contract violation or a time limit ended: a failing check saying why."""
    add(Check(stop.check, "edge", False, str(stop)))
    named = edge_names(report)  # a known bug whose signature this stop (or an earlier edge check) is
    report.diagnosis = f"{stop.check}: {stop}" + (f"; {named}" if named else "")
    report.seconds = time.perf_counter() - start
    return report


def _finished(report: Report, ll_sum: Counter, start: float) -> Report:
    """The report of a run that went through every check: its diagnosis, raising reported as raising."""
    report.diagnosis = summary(report, ll_sum, part(report.algorithm).diagnosed(report.algorithm))
    if part(report.algorithm).NAMED_BY_VECTORS and report.diagnosis.startswith("no known bug"):
        named = [c for c in report.failed if c.tier == "exact" and c.diagnosis.startswith("the same tokens as ")]
        if named:
            report.diagnosis = f"{named[0].diagnosis} (the check '{named[0].name}' failed)"
    raised = [c for c in report.failed if c.detail.startswith("raised ")]
    if raised:  # a verifier that raises is reported as raising
        report.diagnosis = (f"the verifier raised ({raised[0].detail[len('raised '):]}) in {len(raised)} of the "
                            f"{len(report.failed)} failing checks" + (f"; {report.diagnosis}" if report.diagnosis else ""))
    report.seconds = time.perf_counter() - start
    return report
