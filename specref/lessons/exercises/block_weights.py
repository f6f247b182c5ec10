"""check_block_weights: block verification's weights w [K+1] (Sun et al. 2025), and their known mistakes.

`check_block_weights` checks `laws.block_weights` on the 11 block vectors and five edge cases, saying how far
block verification with wrong weights is from the target's law (exact, K = 3, V = 3).
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction
from typing import Callable

import numpy as np

from specref.proof import laws, stats
from specref.proof.verdict import Limits

from .grading import (SEED, TOL, F, Result, _call, _Case, _case, _Fail, _first_match, _fr, _grade, _not_answered,
                      _pair, _row, _unchanged, _vectors)


_h, _q = F(1, 2), F(1, 4)
BLOCK_EDGE_CASES = [
    _case("q(x) = 0 at a drafted token (w is 0 from there on)", [1, 0, 2], [[_q, _h, _q], [_h, _q, _q], [_q, _q, _h]],
          [[_h, 0, _h], [_h, _q, _q], [_q, _q, _h], [_q, _h, _q]]),
    _case("p == q (every w is 1)", [0, 2], [[_h, _q, _q], [_q, _q, _h]], [[_h, _q, _q], [_q, _q, _h], [_h, 0, _h]]),
    _case("a one-hot draft row", [2, 0], [[0, 0, 1], [_h, _h, 0]], [[_q, _q, _h], [_q, _h, _q], [_h, _q, _q]]),
    _case("a ratio above 1, then below (the cap)", [0, 1, 1], [[_q, _h, _q], [_h, _q, _q], [_q, _h, _q]],
          [[_h, _q, _q], [_h, _q, _q], [_q, _q, _h], [_q, _q, _h]]),
    _case("ratios that drift below 1 (the carried product)", [0, 0, 0], [[_h, _q, _q]] * 3, [[_q, _h, _q]] * 4),
]
del _h, _q


def _block_cases() -> list[_Case]:
    out = [_Case(c["name"], tuple(c["x_draft"]), tuple(map(tuple, _fr(c["p"]))), tuple(map(tuple, _fr(c["q"]))))
           for c in _vectors("verify_block")]
    return out + BLOCK_EDGE_CASES


def _weights_exact(case: _Case) -> list[Fraction]:
    return laws.block_weights(list(case.x_draft), case.p, case.q)[0]


# The learner-facing diagnosis of each known mistake of the weights, and the mistake itself.
BLOCK_MISTAKES = [
    ("the ratio is not carried along the block: w_i = min(1, w_{i-1} q_i(x_i)/p_i(x_i)), not min(1, q_i(x_i)/p_i(x_i))",
     lambda x, p, q: np.concatenate([[1.0], [min(1.0, q[i, v] / p[i, v]) for i, v in enumerate(x)]])),
    ("the min(1, .) is missing: w_i may exceed 1",
     lambda x, p, q: np.cumprod(np.concatenate([[1.0], [q[i, v] / p[i, v] for i, v in enumerate(x)]]))),
    ("caps only the running product, min(1, prod q_j/p_j): w_i = min(1, w_{i-1} q_i/p_i) caps at every step",
     lambda x, p, q: np.minimum(1.0, np.cumprod(np.concatenate([[1.0], [q[i, v] / p[i, v] for i, v in enumerate(x)]])))),
    ("the min(1, .) caps the carried weight before the ratio multiplies it: w_i = min(1, w_{i-1}) q_i/p_i may exceed "
     "1; cap the product, w_i = min(1, w_{i-1} q_i/p_i)", lambda x, p, q: _capped(x, p, q, "carried")),
    ("the min(1, .) caps each ratio, not the running product: w_i = w_{i-1} min(1, q_i/p_i) never recovers after a "
     "ratio below 1; cap the product, w_i = min(1, w_{i-1} q_i/p_i)", lambda x, p, q: _capped(x, p, q, "ratio")),
    ("p and q swapped: the ratio is target over draft, q_i(x_i) / p_i(x_i)",
     lambda x, p, q: _carried(x, q, p)),
    ("scores x_i against the next position's target row: x_i (drawn from p[i-1]) is judged by q[i-1], not q[i]",
     lambda x, p, q: _carried(x, p, q, shift=1)),
]


def _capped(x, p, q, where: str) -> np.ndarray:  # the min(1, .) misplaced: on w_{i-1} ("carried") or on q_i/p_i ("ratio")
    w = [1.0]
    for i, v in enumerate(x):
        ratio = q[i, v] / p[i, v]
        w.append(min(1.0, w[-1]) * ratio if where == "carried" else w[-1] * min(1.0, ratio))
    return np.array(w)


def _carried(x, p, q, shift: int = 0) -> np.ndarray:  # w_i = min(1, w_{i-1} q[i-1+shift, x_i] / p[i-1, x_i])
    w = [1.0]
    for i, v in enumerate(x):
        w.append(min(1.0, w[-1] * q[i + shift, v] / p[i, v]) if p[i, v] > 0 else math.inf)
    return np.array(w)


def _block_law_gap(f_weights: Callable) -> str:
    """How far block verification with these weights is from the target's law: K = 3, V = 3 Dirichlet rows, exact."""
    rng = np.random.default_rng(SEED)
    p, q = rng.dirichlet(np.ones(3), size=3), rng.dirichlet(np.ones(3), size=4)

    def law_given_drafts(xs, p_rows, q_rows):
        w = [float(v) for v in f_weights(np.array(xs), np.array(p_rows), np.array(q_rows))]
        _, h, r = laws.block_weights(xs, p_rows, q_rows, w)
        h = [min(1.0, max(0.0, v)) for v in h]
        last = [r[i] if sum(r[i]) > 0 else list(q_rows[i]) for i in range(len(xs))] + [list(q_rows[len(xs)])]
        return laws.stopped_law(xs, laws.stopping_law(h), last)
    try:
        law = laws.continued_law(laws.chain_call_law(law_given_drafts, laws.fixed_rows(p), laws.fixed_rows(q), 3, 3),
                                  laws.fixed_rows(q), 4)
        target = laws.target_joint_law(laws.fixed_rows(q), 3, 4)
        return (f"; with these weights block verification's 4-token output is "
                f"{stats.total_variation(law, target):.3f} from the target's law in total variation (K = 3, V = 3)")
    except Exception:  # noqa: BLE001  (weights that break block verification itself: no law to show)
        return ""


def check_block_weights(f: Callable) -> Result:
    """Grade f(x_draft [K], p [K, V], q [K+1, V]) -> w [K+1] as block verification's weights (checks: module docstring)."""
    def run(limits: Limits) -> str:
        all_cases = _block_cases()
        _not_answered(limits, f, *all_cases[0].arrays())
        for case in all_cases:
            x_draft, p, q = case.arrays()
            K = len(x_draft)
            check = f"exact, case '{case.name}'"
            before, args = (x_draft.copy(), p.copy(), q.copy()), (x_draft.copy(), p.copy(), q.copy())
            out = _call(limits, check, f, *args, where=f"x_draft = {x_draft.tolist()}")
            _unchanged(check, before, args, ("x_draft", "p", "q"))
            try:
                w = np.asarray(out, dtype=np.float64)
            except Exception as e:  # noqa: BLE001
                raise _Fail(check, f"returned {type(out).__name__}, not an array of K + 1 weights ({e})") from None
            want = np.array([float(v) for v in _weights_exact(case)])
            problem = ""
            if w.shape != (K + 1,):
                problem = (f"returned shape {w.shape} for K = {K}: w has K + 1 = {K + 1} entries, w_0 = 1 first"
                           + (" (w_0 is missing)" if w.shape == (K,) else ""))
            elif np.isnan(w).any():
                problem = f"returned NaN: {_row(w)}"
            elif not np.allclose(w, want, rtol=TOL, atol=1e-15):
                problem = "x_draft = {}: returned {}, expected {}".format(x_draft.tolist(), *_pair(w, want))
            if problem:
                timed = functools.partial(limits.call, f)  # a call that loops ends the check, as above
                label = _first_match(BLOCK_MISTAKES, [_outcome_block(timed, c) for c in all_cases],
                                     lambda wrong, i: _outcome_block(wrong, all_cases[i]))
                gap = _block_law_gap(timed) if w.shape == (K + 1,) and not np.isnan(w).any() else ""
                raise _Fail(check, (f"{label} ({problem})" if label else problem) + gap)
        return (f"w exact on {len(all_cases)} cases: the 11 block vectors, q(x) = 0 at a draft, p == q, a one-hot row, "
                "the cap")
    return _grade("block_weights", run)


def _outcome_block(f, case: _Case):
    x_draft, p, q = case.arrays()
    try:
        return np.asarray(f(x_draft, p, q), dtype=np.float64)
    except Exception as e:  # noqa: BLE001
        return type(e).__name__
