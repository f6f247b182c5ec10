"""check_chi_square: Pearson's goodness-of-fit test with the suite's pooling rule, and its known mistakes.

The answer is f(counts, law) -> (statistic, dof, p_value): counts a Counter {outcome: times seen}, law a dict
{outcome: probability}.  The rule (`specref.proof.stats.chi_square_gof`, notebook 03 states it in words): an
outcome the law forbids (probability 0) that was seen gives (inf, 0, 0.0); outcomes of probability 0 otherwise
take no part; an outcome expected at least MIN_EXPECTED = 20 times is a bin of its own, the rarer ones share one
bin, and while that bin expects fewer than 20 the next rarest outcomes join it; with fewer than two bins the
answer is (0.0, 0, 1.0); else X^2 = sum over bins (O - E)^2 / E, dof = bins - 1, p = P(chi2_dof >= X^2).

`check_chi_square` compares the three numbers with scipy's `scipy.stats.chisquare` over those bins (the
statistic and p-value to a relative 1e-9, the dof exactly) on CHI_SQUARE_CASES: no pooling, rare outcomes that
pool among themselves, a pool the next rarest outcome must top up, outcomes the law forbids (seen and unseen), an
outcome never seen, a single possible outcome and tuples as outcomes.  A failure names the known mistake whose
answers the function gives on every case, or else says on which case which number differs.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from typing import Callable

import numpy as np
from scipy import stats as sps

from specref.proof import stats
from specref.proof.verdict import Limits

from .grading import Result, _call, _Fail, _fmt, _grade, _not_answered, _pair


REL = 1e-9  # relative tolerance on the statistic and the p-value


def _counts(law: dict, n: int, seed: int, tilt: dict | None = None) -> Counter:
    """n draws from law (tilted: some outcomes' probabilities multiplied, then renormalized), as a Counter."""
    keys = [k for k, v in law.items() if v > 0]
    w = np.array([law[k] * (tilt or {}).get(k, 1.0) for k in keys])
    drawn = np.random.default_rng(seed).multinomial(n, w / w.sum())
    return Counter({k: int(c) for k, c in zip(keys, drawn) if c})


def _cases() -> list[tuple[str, Counter, dict]]:
    four = {0: 0.4, 1: 0.3, 2: 0.2, 3: 0.1}
    rare = {0: 0.6, 1: 0.3, 2: 0.05, 3: 0.03, 4: 0.01, 5: 0.006, 6: 0.004}  # n = 300: 2-6 expect 15, 9, 3, 1.8, 1.2
    topped = {"a": 0.45, "b": 0.45, "c": 0.07, "d": 0.02, "e": 0.01}       # n = 400: d + e expect 12; c joins them
    seqs = {(i, j): v for (i, j), v in zip([(i, j) for i in range(3) for j in range(3)],
                                           (0.25, 0.2, 0.15, 0.12, 0.1, 0.08, 0.05, 0.03, 0.02))}
    return [
        ("four outcomes, none pooled (n = 2000)", _counts(four, 2000, 1), four),
        ("four outcomes, a sample off the law (n = 2000)", _counts(four, 2000, 2, {3: 1.4}), four),
        ("rare outcomes pooled among themselves (n = 300)", _counts(rare, 300, 3), rare),
        ("a pool the next rarest outcome tops up (n = 400)", _counts(topped, 400, 4), topped),
        ("an outcome of probability 0, never seen (n = 1000)", _counts(four, 1000, 5), {**four, 4: 0.0}),
        ("an outcome the law forbids, seen once", _counts(four, 999, 6) + Counter({4: 1}), {**four, 4: 0.0}),
        ("an outcome seen though the law never names it", _counts(four, 999, 7) + Counter({9: 1}), four),
        ("an outcome never seen (n = 500)", Counter({0: 210, 1: 160, 2: 130}), four),
        ("one possible outcome", Counter({"x": 50}), {"x": 1.0, "y": 0.0}),
        ("everything in one pool (n = 30)", _counts(four, 30, 8), four),
        ("tuples as outcomes, sequences of two tokens (n = 1500)", _counts(seqs, 1500, 9, {(2, 2): 1.6}), seqs),
    ]


CHI_SQUARE_CASES = _cases()


def _reference(counts: Counter, law: dict, min_expected: float = stats.MIN_EXPECTED) -> tuple[float, int, float]:
    """The answer, by scipy's chisquare over the pooled bins (stats.pooled_bins' rule, at min_expected)."""
    n = sum(counts.values())
    if any(law.get(k, 0) <= 0 for k in counts):
        return math.inf, 0, 0.0
    bins = _bins(law, n, min_expected)
    if len(bins) < 2:
        return 0.0, 0, 1.0
    O = np.array([sum(counts.get(k, 0) for k in b) for b in bins], dtype=np.float64)
    E = np.array([n * sum(law[k] for k in b) for b in bins])
    result = sps.chisquare(O, E * (O.sum() / E.sum()))  # E sums to n up to rounding; scipy asks for equal sums
    return float(result.statistic), len(bins) - 1, float(result.pvalue)


def _bins(law: dict, n: int, min_expected: float, top_up: bool = True, zeros_out: bool = True) -> list[list]:
    live = sorted((k for k, v in law.items() if v > 0 or not zeros_out), key=law.get)
    i, pooled = 0, 0.0
    while i < len(live) and (n * law[live[i]] < min_expected or (top_up and 0 < pooled < min_expected)):
        pooled += n * law[live[i]]
        i += 1
    return ([live[:i]] if i else []) + [[k] for k in live[i:]]


def _pearson(counts, law, bins, *, neyman=False, dof_shift=-1, tail="sf"):  # the statistic over given bins
    n = sum(counts.values())
    O = np.array([sum(counts.get(k, 0) for k in b) for b in bins], dtype=np.float64)
    E = np.array([n * sum(law[k] for k in b) for b in bins])
    with np.errstate(all="ignore"):
        X2 = float(((O - E) ** 2 / (O if neyman else E)).sum())
    dof = len(bins) + dof_shift
    p = float(sps.chi2.sf(X2, dof) if tail == "sf" else sps.chi2.cdf(X2, dof))
    return X2, dof, p


def _mistake(*, min_expected=stats.MIN_EXPECTED, top_up=True, forbidden=True, zeros_out=True, **pearson):
    def f(counts, law):
        n = sum(counts.values())
        if forbidden and any(law.get(k, 0) <= 0 for k in counts):
            return math.inf, 0, 0.0
        bins = _bins(law, n, min_expected, top_up, zeros_out)
        if len(bins) < 2:
            return 0.0, 0, 1.0
        return _pearson(counts, law, bins, **pearson)
    return f


FORBIDDEN_SEEN = ("an outcome the law forbids was seen and the answer still tests the others: one impossible outcome "
                  "rejects at once, (inf, 0, 0.0)")
ZEROS_KEPT = "outcomes of probability 0 are kept: a bin that expects nothing divides by 0; leave them out of the bins"
# The learner-facing diagnosis of each known mistake, and the mistake itself.
CHI_SQUARE_MISTAKES = [
    ("no pooling: every outcome is a bin of its own, so rare outcomes (expected a few times or less) make the "
     "chi-square law a poor approximation; pool the outcomes expected fewer than 20 times",
     _mistake(min_expected=0)),
    ("pools below 5 expected, the textbook's rule, where the rule here is 20", _mistake(min_expected=5)),
    ("the shared bin is not topped up: while it expects fewer than 20, the next rarest outcomes must join it",
     _mistake(top_up=False)),
    ("dof = the number of bins: the counts add up to n, so one bin is fixed by the others; dof = bins - 1",
     _mistake(dof_shift=0)),
    ("the p-value is P(chi2 <= X^2), the lower tail: the p-value is the chance of missing by at least as much, "
     "P(chi2 >= X^2) = chi2.sf(X^2, dof)", _mistake(tail="cdf")),
    ("divides each squared miss by the observed count O (Neyman's statistic): Pearson's divides by the expected "
     "count E", _mistake(neyman=True)),
    (FORBIDDEN_SEEN, _mistake(forbidden=False)),
    (ZEROS_KEPT, _mistake(zeros_out=False)),
]


def _answer(f, limits: Limits, check: str, counts, law) -> tuple[float, int, float]:
    out = _call(limits, check, f, Counter(counts), dict(law), where=check)
    try:
        X2, dof, p = out
        X2, p = float(X2), float(p)
        if float(dof) != int(dof):
            raise ValueError
        dof = int(dof)
    except Exception:  # noqa: BLE001
        raise _Fail(check, f"returned {out!r}: expected three numbers (statistic, dof, p_value)") from None
    return X2, dof, p


def _close(a: float, b: float) -> bool:  # NaN is close to NaN only: a known mistake can give it
    return a == b or (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=REL, abs_tol=1e-300)


def _same(got, want) -> bool:
    return _close(got[0], want[0]) and got[1] == want[1] and _close(got[2], want[2])


def _safe(f, counts, law):
    try:
        X2, dof, p = f(Counter(counts), dict(law))
        return float(X2), int(dof), float(p)
    except Exception:  # noqa: BLE001
        return None


def _gap(f, name, got, want) -> str:
    parts = []
    for label, i in (("statistic", 0), ("dof", 1), ("p-value", 2)):
        if not (got[i] == want[i] if i == 1 else _close(got[i], want[i])):
            shown = (str(got[i]), str(want[i])) if i == 1 else _pair(got[i], want[i], _fmt)
            parts.append(f"{label} {shown[0]} where the test gives {shown[1]}")
    where = ", ".join(parts)
    answers = [_safe(f, c, lw) for _, c, lw in CHI_SQUARE_CASES]
    for label, wrong in CHI_SQUARE_MISTAKES:
        if all(a is not None and _same(a, wrong(c, lw)) for a, (_, c, lw) in zip(answers, CHI_SQUARE_CASES)):
            return f"{label} ({where})"
    if math.isinf(want[0]) and not math.isinf(got[0]):  # whatever else the answer did, it missed this
        return f"{FORBIDDEN_SEEN} ({where})"
    if math.isnan(got[0]) and any(v <= 0 for v in _case(name)[1].values()):
        return f"{ZEROS_KEPT} ({where})"
    here = [label.split(":")[0] for label, wrong in CHI_SQUARE_MISTAKES if _same(got, wrong(*_case(name)))]
    return f"{where} (here it gives a known mistake's answer, not everywhere: {here[0]})" if here else where


def _case(name):
    return next((c, lw) for n, c, lw in CHI_SQUARE_CASES if n == name)


def check_chi_square(f: Callable) -> Result:
    """Grade f(counts, law) -> (statistic, dof, p_value) as the pooled Pearson test (module docstring: the cases)."""
    def run(limits: Limits) -> str:
        _, counts, law = CHI_SQUARE_CASES[0]
        _not_answered(limits, f, Counter(counts), dict(law))
        for name, counts, law in CHI_SQUARE_CASES:
            got, want = _answer(f, limits, name, counts, law), _reference(counts, law)
            if not _same(got, want):
                raise _Fail(name, _gap(functools.partial(limits.call, f), name, got, want))
        return (f"statistic, dof and p-value equal to scipy.stats.chisquare over the pooled bins on "
                f"{len(CHI_SQUARE_CASES)} cases (no pooling, pooling, a topped-up pool, forbidden and unseen "
                "outcomes, one possible outcome)")
    return _grade("chi_square", run)
