"""check_expected_tokens: Leviathan's Eq. 1, the expected tokens per call, and its known mistakes.

`check_expected_tokens` checks Eq. 1 (`specref.speedup.expected_tokens`, here in fractions, to TOL) on 36 (alpha,
gamma); then on every gamma from 0 to MAX_GAMMA at alphas near 0 and near 1 (EDGE_ALPHAS) and at N_RANDOM_ALPHAS
alphas drawn uniformly from [0, 1) with seed SEED; then at alpha = 1, where the contract asks for gamma + 1, on
every gamma from 0 to MAX_GAMMA.  The alpha nearest 1 is 1 - 2^-20: closer to 1, the textbook formula's own
rounding in float64 (about 1e-16 / (1 - alpha), relative) would exceed TOL.  Then the exact mean length of
`mrs.verify`'s output on rows whose acceptance rate is alpha (`laws.verify_law`, 6 cases), then its simulated
mean over N_SIMULATED calls (alpha = 0.75, gamma = 4, seed SEED): a two-sided z-test at stats.LEVEL = 1e-3, which
a correct answer fails with probability 1e-3 over seeds (the seed is fixed: the verdict does not change).
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction
from typing import Callable

import numpy as np

from specref import mrs
from specref.proof import laws, stats
from specref.proof.verdict import Limits

from .grading import SEED, TOL, F, Result, _Fail, _fmt, _grade, _not_answered, _number, _pair


# Calls of mrs.verify in check_expected_tokens' simulation (once a session: its result is kept).
N_SIMULATED = 4_000


# The grid Eq. 1 is checked on (alpha = 1 apart), the telling cases first: a failure shows the first it meets.
EXPECTED_ALPHAS = (0.5, 0.8, 0.9, 0.99, 0.1, 0.0)
EXPECTED_GAMMAS = (1, 2, 3, 5, 8, 0)
# Then every gamma up to MAX_GAMMA, at alphas near 0 and near 1 and at N_RANDOM_ALPHAS uniform ones (seed SEED).
MAX_GAMMA = 64
EDGE_ALPHAS = (1e-12, 1e-6, 1e-3, 0.999, 1 - 2.0 ** -20)
N_RANDOM_ALPHAS = 16


def _range_alphas() -> tuple[float, ...]:  # the alphas checked on every gamma up to MAX_GAMMA
    return EDGE_ALPHAS + tuple(float(a) for a in np.random.default_rng(SEED).random(N_RANDOM_ALPHAS))


# The learner-facing diagnosis of each known mistake of Eq. 1, and the mistake itself (for alpha < 1).
EXPECTED_MISTAKES = [
    ("alpha**gamma where Eq. 1 has alpha**(gamma + 1): the call's extra token (the residual or bonus token) is "
     "left out", lambda a, g: (1 - a ** g) / (1 - a)),
    ("counts the accepted drafts only: every call also yields one token of its own (Eq. 1 = 1 + alpha + ... + "
     "alpha**gamma)", lambda a, g: a * (1 - a ** g) / (1 - a)),
    ("1 / (1 - alpha) is the gamma -> infinity limit: a call scores only gamma drafts",
     lambda a, g: 1 / (1 - a)),
    ("1 + gamma alpha: the i-th draft counts only if all before it were accepted, so it adds alpha**i, not alpha",
     lambda a, g: 1 + g * a),
]


@functools.cache
def _eq1_floats(alpha: float) -> tuple[float, ...]:
    """Eq. 1 = 1 + alpha + ... + alpha**gamma for gamma = 0 .. MAX_GAMMA, summed in fractions, then rounded."""
    a, power, total, out = F(alpha), F(1), F(0), []
    for _ in range(MAX_GAMMA + 1):
        total += power
        power *= a
        out.append(float(total))
    return tuple(out)


def _rows_with_acceptance(alpha: Fraction, K: int) -> tuple[np.ndarray, np.ndarray]:  # p [K, 3], q [K+1, 3]: alpha at each t
    p = [F(1, 2), F(1, 2), 0]
    q = [alpha - F(1, 2), F(1, 2), 1 - alpha] if alpha >= F(1, 2) else [0, alpha, 1 - alpha]
    return np.array([p] * K, dtype=np.float64), np.array([q] * (K + 1), dtype=np.float64)


def _eq1_number(f, limits: Limits, check: str, alpha, gamma) -> float:  # f(alpha, gamma) as a float, or _Fail
    return _number(limits, check, f, alpha, gamma, where=f"alpha = {alpha}, gamma = {gamma}")


def _eq1_gap(f, alpha, gamma, got, want) -> str:  # what is wrong, with the known mistake it matches
    where = "alpha = {}, gamma = {}: got {}, Eq. 1 gives {}".format(alpha, gamma, *_pair(got, want, _fmt))
    points = [(a, g) for a in EXPECTED_ALPHAS for g in EXPECTED_GAMMAS]
    points += [(a, g) for a in _range_alphas() for g in range(MAX_GAMMA + 1)]
    for label, wrong in EXPECTED_MISTAKES:
        if all(math.isclose(_safe(f, a, g), wrong(a, g), rel_tol=TOL, abs_tol=1e-12) for a, g in points):
            return f"{label} ({where})"
    here = [label.split(":")[0] for label, wrong in EXPECTED_MISTAKES
            if alpha < 1 and math.isclose(got, wrong(alpha, gamma), rel_tol=TOL, abs_tol=1e-12)]
    return f"{where} (here it gives a known mistake's value, not everywhere: {here[0]})" if here else where


def _check_eq1(f, limits: Limits, points) -> None:  # Eq. 1 at each (alpha, gamma), in order; _Fail at the first miss
    for alpha, gamma in points:
        got, want = _eq1_number(f, limits, "Eq. 1", alpha, gamma), _eq1_floats(alpha)[gamma]
        if not math.isclose(got, want, rel_tol=TOL, abs_tol=1e-12):
            raise _Fail("Eq. 1", _eq1_gap(functools.partial(limits.call, f), alpha, gamma, got, want))


def check_expected_tokens(f: Callable) -> Result:
    """Grade f(alpha, gamma) -> float as Leviathan's Eq. 1, gamma + 1 at alpha = 1 (module docstring: the checks)."""
    def run(limits: Limits) -> str:
        _not_answered(limits, f, 0.5, 2)
        _check_eq1(f, limits, [(a, g) for a in EXPECTED_ALPHAS for g in EXPECTED_GAMMAS])
        _check_eq1(f, limits, [(a, g) for a in _range_alphas() for g in range(MAX_GAMMA + 1)])
        check = "alpha = 1"
        for gamma in range(MAX_GAMMA + 1):
            try:
                got = _eq1_number(f, limits, check, 1.0, gamma)
            except _Fail as e:
                raise _Fail(check, f"{e.diagnosis}; at alpha = 1 the formula is 0 / 0: give it its limit gamma + 1 "
                                   "in a branch of its own") from None
            if not math.isclose(got, gamma + 1, rel_tol=TOL):
                raise _Fail(check, f"alpha = 1, gamma = {gamma}: got {_fmt(got)}; at alpha = 1 every draft is "
                                   f"accepted, so a call yields gamma + 1 = {gamma + 1} tokens")
        check = "the mean length of mrs.verify's output"
        for alpha in (F(3, 4), F(1, 2)):
            for K in (1, 2, 3):
                p, q = _rows_with_acceptance(alpha, K)
                mean = laws.mean_output_length(laws.verify_law(p, q))
                got = _eq1_number(f, limits, check, float(alpha), K)
                if not math.isclose(got, mean, rel_tol=TOL):
                    raise _Fail(check, f"{_eq1_gap(functools.partial(limits.call, f), float(alpha), K, got, mean)}; "
                                       "that is mrs.verify's exact mean "
                                       f"output length for K = {K} on rows whose acceptance rate is {float(alpha)}")
        check = f"simulation ({N_SIMULATED} calls of mrs.verify, alpha = 0.75, gamma = 4, seed {SEED})"
        mean, se = _simulated_tokens()
        got = _eq1_number(f, limits, check, 0.75, 4)
        pvalue = math.erfc(abs(mean - got) / se / math.sqrt(2))  # two-sided, the normal approximation
        if pvalue <= stats.LEVEL:
            raise _Fail(check, f"mrs.verify made {mean:.4f} +- {se:.4f} tokens a call, the answer says {_fmt(got)} "
                               f"(z-test p = {pvalue:.2g})")
        n = len(EXPECTED_ALPHAS) * len(EXPECTED_GAMMAS) + (len(_range_alphas()) + 1) * (MAX_GAMMA + 1)
        return (f"Eq. 1 exact on {n} (alpha, gamma): gamma 0 to {MAX_GAMMA} at alpha = 1, near 0, near 1 and "
                f"{N_RANDOM_ALPHAS} random (seed {SEED}); equal to mrs.verify's exact mean output length on 6 cases, "
                f"and to its simulated mean (z-test p = {pvalue:.2g}, seed {SEED})")
    return _grade("expected_tokens", run)


@functools.cache
def _simulated_tokens() -> tuple[float, float]:
    """The mean number of tokens of N_SIMULATED calls of mrs.verify (gamma = 4 drafts, acceptance rate 0.75 at each
    position, seed SEED), and its standard error."""
    p, q = _rows_with_acceptance(F(3, 4), 4)
    counts = stats.sample_verify(mrs.verify, p, q, N_SIMULATED, np.random.default_rng(SEED))
    lengths = np.array([len(out) for out in counts.elements()], dtype=np.float64)
    return float(lengths.mean()), float(lengths.std(ddof=1) / np.sqrt(len(lengths)))


def _safe(f, alpha, gamma) -> float:  # f(alpha, gamma) as a float, NaN if it raises or returns no number
    try:
        return float(np.asarray(f(alpha, gamma), dtype=np.float64).item())
    except Exception:  # noqa: BLE001
        return math.nan
