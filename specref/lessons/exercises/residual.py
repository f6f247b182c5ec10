"""check_residual: norm(max(0, q - p)), the law a token is drawn from after a rejection, and its known mistakes.

`check_residual` checks norm(max(0, q - p)) on ten cases (overlapping rows, q(x) = 0, one-hot p and q, disjoint
supports, p == q, p and q one rounding apart, entries of 2^-20 and 1/512 beside zeros, three equal entries,
V = 50257), saying what Theorem 1's law min(p, q) + (1 - beta) r becomes with a wrong r, with as many digits as
it takes to show the difference; then Theorem 1 by simulation: N_CALLS tokens of one MRS step (x ~ p, kept with
probability min(1, q/p), else drawn from the answer's residual) on Dirichlet rows over V = 6, by
`stats.chi_square_gof` against q at stats.LEVEL = 1e-3, seed SEED.
"""

from __future__ import annotations

import functools
from collections import Counter
from typing import Callable

import numpy as np

from specref.proof import stats
from specref.proof.verdict import Limits

from .grading import (N_CALLS, SEED, TOL, F, Result, _call, _Fail, _first_match, _fmt, _grade, _not_answered,
                      _pair, _row, _unchanged)


# Cases of (p, q); the answer is computed from them in exact arithmetic.
_h, _q, _e, _s = F(1, 2), F(1, 4), F(1, 8), F(1, 16)
_tiny, _small = F(1, 2**20), F(1, 512)
RESIDUAL_CASES = [
    ("rows that overlap", [F(1, 2), _e, _e, _q], [_q, _q, 3 * _e, _e]),
    ("q(x) = 0 where p has mass", [_q, _q, F(1, 2)], [F(1, 2), F(1, 2), 0]),
    ("one-hot p", [0, 1, 0, 0], [_q, _q, _q, _q]),
    ("one-hot q", [_q, _q, _q, _q], [0, 0, 1, 0]),
    ("disjoint supports", [F(1, 2), F(1, 2), 0, 0], [0, 0, _q, 3 * _q]),
    ("p == q (the excess is all zero: q)", [F(1, 2), _q, _q], [F(1, 2), _q, _q]),
    ("p and q one rounding apart (all zero: q)", [_q, _q, _q, _q], [F(0.25 * (1 - 1e-12)), _q, _q, _q]),
    # max(0, q - p) = [0, 0, 2^-20, 1/512, 1/512, 1/4]: an answer that drops or rounds small entries fails here
    ("small entries beside zeros", [_h, _q, _e, _s, _s, 0],
     [_q - 2 * _small - _tiny, _q, _e + _tiny, _s + _small, _s + _small, _q]),
    ("ties: three equal entries", [_h, _e, _e, _q, 0], [_q, _q, _q, _e, _e]),  # max(0, q - p) = [0, 1/8, 1/8, 0, 1/8]
]
del _h, _q, _e, _s, _tiny, _small


def _residual_exact(p, q) -> list:  # norm(max(0, q - p)), q where it is all zero, exact
    excess = [max(F(0), F(b) - F(a)) for a, b in zip(p, q)]
    total = sum(excess)
    return [v / total for v in excess] if total > 0 else [F(v) for v in q]


def _large_residual_case() -> tuple[str, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(SEED)
    p, q = rng.dirichlet(np.full(50_257, 0.1), size=2)
    return "a large vocabulary (V = 50257)", p, q


def _norm_excess(p, q, sign=1.0, fallback=None):  # norm(max(0, sign (q - p))); fallback where it is all zero
    d = np.maximum(sign * (np.asarray(q, float) - np.asarray(p, float)), 0.0)
    return d / d.sum() if d.sum() > 0 or fallback is None else np.asarray(fallback, float)


# The learner-facing diagnosis of each known mistake of a residual, and the mistake itself as it is usually written.
RESIDUAL_MISTAKES = [
    ("divides by sum(max(0, q - p)) without a guard: 0 / 0 is NaN when p == q; return q there",
     lambda p, q: np.maximum(q - p, 0.0) / np.maximum(q - p, 0.0).sum()),
    ("not normalised: max(0, q - p) must be divided by its sum", lambda p, q: np.maximum(q - p, 0.0)),
    ("resamples from q instead of the residual: returns q itself", lambda p, q: q),
    ("p and q swapped: this is norm(max(0, p - q)), the draft's excess over the target",
     lambda p, q: np.maximum(p - q, 0.0) / np.maximum(p - q, 0.0).sum()),
    ("uses |q - p| where max(0, q - p) belongs", lambda p, q: np.abs(q - p) / np.abs(q - p).sum()),
    ("has negative entries: the max(0, .) is missing", lambda p, q: (q - p) / np.maximum(q - p, 0.0).sum()),
    ("norm(min(p, q)) is the law of the accepted drafts, not of the token drawn after a rejection",
     lambda p, q: np.minimum(p, q) / np.minimum(p, q).sum()),
    ("when max(0, q - p) is all zero, return q (the residual is then never drawn from, and q keeps Theorem 1 "
     "exact)", lambda p, q: _norm_excess(p, q, 1.0, np.full(len(p), 1.0 / len(p)))),
]


def _outcome(f, p, q):  # f's answer on a case, or the exception's type (for comparing with the known mistakes)
    try:
        return np.asarray(f(p.copy(), q.copy()), dtype=np.float64)
    except Exception as e:  # noqa: BLE001
        return type(e).__name__


def check_residual(f: Callable) -> Result:
    """Grade f(p [V], q [V]) -> [V] as norm(max(0, q - p)), q itself when that is all zero (checks: module docstring)."""
    def run(limits: Limits) -> str:
        named = [(name, np.array(p, dtype=np.float64), np.array(q, dtype=np.float64), _residual_exact(p, q))
                 for name, p, q in RESIDUAL_CASES]
        name, p, q = _large_residual_case()
        named.append((name, p, q, None))
        _not_answered(limits, f, named[0][1].copy(), named[0][2].copy())
        for name, p, q, exact in named:
            check = f"exact, case '{name}'"
            before, args = (p.copy(), q.copy()), (p.copy(), q.copy())
            out = _call(limits, check, f, *args, where=f"p = {_row(p) if len(p) < 10 else 'V = ' + str(len(p))}")
            _unchanged(check, before, args, ("p", "q"))
            want = np.array([float(v) for v in exact]) if exact is not None else _norm_excess(p, q, 1.0, q)
            try:
                r = np.asarray(out, dtype=np.float64)
            except Exception as e:  # noqa: BLE001
                raise _Fail(check, f"returned {type(out).__name__}, not an array of probabilities ({e})") from None
            problem = ""
            if r.shape != p.shape:
                problem = f"returned shape {r.shape}; the residual has one probability per token, shape {p.shape}"
            elif np.isnan(r).any():
                problem = f"returned NaN ({_row(r) if len(r) < 10 else 'NaN entries'})"
            elif not np.allclose(r, want, rtol=TOL, atol=1e-12):
                problem = f"returned {_difference(r, want, out)}"
                beta = float(np.minimum(p, q).sum())  # the acceptance probability for this pair of rows
                law = np.minimum(p, q) + (1 - beta) * np.where(np.isfinite(r), r, 0.0)
                if beta < 1 and len(r) < 10:
                    problem += "; Theorem 1's law min(p, q) + (1 - beta) r is then {}, not q = {}".format(*_pair(law, q))
            if problem:
                timed = functools.partial(limits.call, f)  # a call that loops ends the check, as above
                label = _first_match(RESIDUAL_MISTAKES, [_outcome(timed, c[1], c[2]) for c in named],
                                     lambda wrong, i: _outcome(wrong, named[i][1], named[i][2]))
                raise _Fail(check, f"{label} ({problem})" if label else problem)
        stat = _residual_chi_square(f, limits)
        return f"norm(max(0, q - p)) exact on {len(named)} cases, {stat}"
    return _grade("residual", run)


def _difference(r: np.ndarray, want: np.ndarray, out) -> str:
    """r against the exact residual, with the digits that tell them apart; where 6 digits do not, the largest
    difference, and whether its size is float32's rounding."""
    gap = np.abs(r - want)
    i = int(np.argmax(gap))
    if len(r) >= 10:
        return f"entries up to {gap[i]:.3g} from the answer (at token {i})"
    said = "{}, expected {}".format(*_pair(r, want))
    dropped = np.flatnonzero((r == 0) & (want > 0))
    if dropped.size and (want[dropped] < 0.05).all():
        said += (f": 0 at token{'s' if dropped.size > 1 else ''} {', '.join(map(str, dropped))}, where the residual is "
                 f"{', '.join(_fmt(v) for v in want[dropped])} (small entries dropped, or rounded to 0?)")
    if _row(r) != _row(want):
        return said
    said += f" (the largest difference is {gap[i]:.2g}, at token {i})"
    relative = float(np.max(gap[want > 0] / want[want > 0])) if (want > 0).any() else 0.0
    if getattr(out, "dtype", None) == np.float32:
        said += ": it returns float32; compute and return float64"
    elif relative <= 2.0 ** -21 and not (gap[want == 0] > 0).any():
        said += (f": relative differences up to {relative:.2g}, the size of float32's rounding (6e-08): is it "
                 "computed in float32?  compute in float64")
    return said


def _residual_chi_square(f, limits: Limits) -> str:
    """Theorem 1 with f's residual: N_CALLS tokens of one MRS step (x ~ p, kept with probability min(1, q/p), else a draw
    from f(p, q)) on Dirichlet rows over V = 6, by stats.chi_square_gof against q at stats.LEVEL (seed SEED)."""
    rng = np.random.default_rng(SEED)
    p, q = rng.dirichlet(np.ones(6), size=2)
    check = f"chi-square of Theorem 1 ({N_CALLS} tokens, V = 6, seed {SEED})"
    r = np.asarray(_call(limits, check, f, p.copy(), q.copy()), dtype=np.float64)  # a function of p and q alone
    x = _inverse_cdf(p, rng.random(N_CALLS))  # [N] the drafts
    kept = rng.random(N_CALLS) < q[x] / p[x]  # [N] Alg. 2, line 11
    y = np.where(kept, x, _inverse_cdf(r, rng.random(N_CALLS)))  # [N] line 12: the rejected draw from r
    counts = Counter((int(v),) for v in y)
    stat, dof, pvalue = stats.chi_square_gof(counts, {(i,): float(v) for i, v in enumerate(q)})
    if pvalue <= stats.LEVEL:
        raise _Fail(check, f"MRS with this residual does not give q (chi2 = {stat:.1f} on {dof} dof, p = {pvalue:.2g})")
    return f"Theorem 1's chi-square p = {pvalue:.2g} ({N_CALLS} tokens, seed {SEED})"


def _inverse_cdf(weights: np.ndarray, u: np.ndarray) -> np.ndarray:  # [V] weights, [N] uniforms -> [N] tokens
    c = np.cumsum(weights)
    return np.minimum(np.searchsorted(c, u * c[-1], side="right"), len(weights) - 1)
