"""Exercises graded by the suite's own proofs: vectors, exact laws and a chi-square, pointed at a learner's function.

    from specref.notebooks import exercises
    exercises.check_verify(my_verify)      # a cell ending here shows one line: "pass: ..." or "FAIL: ...: ..."

Letters are Chen's: p is the DRAFT distribution, q the TARGET, K the drafts per call (Leviathan's gamma in
`check_expected_tokens`, whose formula is his).  The answers live apart, in notebooks/solutions/.

    check_verify(f)           f(x_draft [K], p [K, V], q [K+1, V], rng) -> tokens [n]: Chen's Alg. 2, lines 9-14
    check_residual(f)         f(p [V], q [V]) -> [V]: norm(max(0, q - p)), and q itself when that is all zero
    check_expected_tokens(f)  f(alpha, gamma) -> float: Leviathan's Eq. 1, gamma + 1 at alpha = 1
    check_block_weights(f)    f(x_draft [K], p [K, V], q [K+1, V]) -> w [K+1]: block verification's weights

Each prints one verdict line, "pass: <what was checked>" or "FAIL: <check>: <diagnosis>", and returns a `Result`:
true when it passed, with `.passed` and `.diagnosis`; its repr is the verdict line, and a notebook cell that ends
with the call shows the line once.  The first failing check is the verdict, and its diagnosis names the known
mistake the failure matches when it matches one.  A function that raises, loops, changes its inputs, returns the
wrong shape or dtype, NaN or an id outside the vocabulary fails with a message saying so; the grader does not
crash.  Warnings and whatever the function prints are held back while it is graded.  Each call may take
CALL_LIMIT seconds and a whole check TIME_LIMIT; with a NumPy answer a check takes 0.1 to 3 s (`.seconds`; the
line itself holds no timing, so that a notebook's saved output does not change from run to run).

`check_verify` runs, in this order:
- contract: one call with a real generator returns 1 to K + 1 integer ids in [0, V) and leaves its inputs alone;
- randomness: the same uniforms give the same tokens, twelve times on each of two cases (no np.random, no
  generator of its own);
- exact law, in any order of the uniforms: on five small cases (a rejection then the residual, a ratio above 1,
  p == q, q(x) = 0 at a drafted token, one-hot rows) the law of the function's output over its uniforms is
  enumerated.  Every decision the correct rule or a known mistake can take on these rows switches at one of a
  few values of a uniform (a ratio q/p or p/q, a step of an inverse CDF), so the function is handed the
  midpoint of each cell between those values, every path of cells once, each weighted by its cells' widths,
  and the law must equal `stats.token_call_law` computed in fractions (to TOL).  A law that moves when the
  cells are halved was not enumerated exactly (the function decides elsewhere): this tier then stands aside;
- edges with chosen uniforms (the conformance checker's): q(x) = 0 is rejected even with u = 0, and a rejection
  whose max(0, q - p) is all zero (p and q one rounding apart) gives a token of the vocabulary;
- chi-square: N_CALLS calls on the suite's random case (`cases.cases("token")[0]`, K = 2, V = 4) with
  np.random.default_rng(SEED), against `stats.verify_law` by `stats.chi_square_gof` at stats.LEVEL = 1e-3: a
  correct verifier fails it with probability 1e-3 over seeds (its false-alarm rate); the seed is fixed, so a
  verdict is reproducible;
- vectors: the 13 `verify` vectors of specref/proof/mrs_vectors.json give their recorded tokens when their
  uniforms are drawn in the order specref/mrs.py documents.
The controlled uniforms come through rng.random(), rng.random(size), rng.uniform() and rng.choice(a, p=...) (one
uniform a token by the inverse CDF, as NumPy's Generator.choice draws, with its checks and messages).  A
function that calls anything else on rng is judged by the contract and the chi-square alone, and the verdict
says so.

The other three exercises answer with numbers, which are compared with exact fractions (to TOL) before anything
statistical runs:
- `check_residual`: norm(max(0, q - p)) on eight cases (overlapping rows, q(x) = 0, one-hot p and q, disjoint
  supports, p == q, p and q one rounding apart, V = 50257), saying what Theorem 1's law min(p, q) + (1 - beta) r
  becomes with a wrong r; then Theorem 1 by simulation: N_CALLS tokens of one MRS step (x ~ p, kept with
  probability min(1, q/p), else drawn from the answer's residual) on Dirichlet rows over V = 6, by
  `stats.chi_square_gof` against q at stats.LEVEL = 1e-3, seed SEED;
- `check_expected_tokens`: Eq. 1 (`specref.speedup.expected_tokens`, here in fractions) on 36 (alpha, gamma) and
  at alpha = 1 for 6 gammas, then the exact mean length of `mrs.verify`'s output on rows whose acceptance rate
  is alpha (`stats.verify_law`, 6 cases), then its simulated mean over N_SIMULATED calls (alpha = 0.75,
  gamma = 4, seed SEED): a two-sided z-test at stats.LEVEL = 1e-3;
- `check_block_weights`: `stats.block_weights` on the 11 block vectors and five edge cases, saying how far block
  verification with wrong weights is from the target's law (exact, K = 3, V = 3).
With a fixed seed a statistical check's verdict on a given answer never changes, on any machine: a correct
residual or Eq. 1 gets the solutions' p-values, and so does a verify that draws its uniforms as they do.

MISTAKES is a gallery of mistakes people make, most of them shipped, each a `Mistake`.  `show_mistakes()` runs
the correct pipeline and each mistake's (drafting and verification on two small Markov chains, the request's
warp applied by `specref.warps`) and tests the GALLERY_L tokens after the prompt of N_GALLERY sequences with the
same `stats.chi_square_gof`, against the exact law of plain sampling from the warped target, at stats.LEVEL =
1e-3, row i with np.random.default_rng((GALLERY_SEED, i)).  The correct pipeline passes and every mistake fails;
the diagnosis column names the mistake whose exact pipeline law (`pipeline_law`) the counts fit, by the
conformance checker's likelihood rule.  The module imports no model code (notebooks 01-04 load none).
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import io
import json
import math
import time
import warnings
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction
from typing import Callable

import numpy as np

from specref import mrs, warps
from specref.proof import broken, cases, conform, shipped, stats, vectors
from specref.proof.verdict import Limits, Stop

# The fixed seed of check_verify's chi-square (and of the real generator its contract call gets).
SEED = 2024
# Calls in check_verify's chi-square: the correct law has 70 outcomes, in 20 bins at this size; about 1 s.
N_CALLS = 10_000
# Calls of mrs.verify in check_expected_tokens' simulation (once a session: its result is kept).
N_SIMULATED = 4_000
# Seconds one call of the graded function may take, and a whole check (a verdict always comes by then).
CALL_LIMIT = 5.0
TIME_LIMIT = 20.0
# Leaves of one exact enumeration, and uniforms one call may draw there, before the exact tier gives way.
MAX_LEAVES = 20_000
MAX_DEPTH = 12
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


def _fmt(v) -> str:
    return f"{float(v):.6g}"


def _row(a) -> str:
    return "[" + ", ".join(_fmt(v) for v in np.asarray(a, dtype=np.float64).reshape(-1)) + "]"


# ---------------------------------------------------------------- uniforms the grader chooses

class _Unsupported(AttributeError):
    """The function asked the controlled generator for something other than uniforms."""


class _Uniforms:
    """A stand-in for np.random.Generator whose uniforms the grader chooses: random(), random(size), uniform(),
    and choice(a, p=...) (one uniform a draw, by the inverse CDF, as Generator.choice does); `_next()` gives them."""

    used = 0

    def _next(self) -> float:
        raise NotImplementedError

    def random(self, size=None, dtype=np.float64, out=None):
        if size is None:
            return self._next()
        return np.array([self._next() for _ in range(int(np.prod(size)))]).reshape(size)

    def uniform(self, low=0.0, high=1.0, size=None):
        u = self.random(size)
        return low + (high - low) * u

    def choice(self, a, size=None, replace=True, p=None, axis=0, shuffle=True):
        pool = np.arange(a) if np.ndim(a) == 0 else np.asarray(a)
        n = len(pool)
        if p is None:
            weights = np.full(n, 1.0 / n)
        else:  # Generator.choice's own checks, with its messages
            weights = np.asarray(p, dtype=np.float64)
            if weights.ndim != 1:
                raise ValueError("p must be 1-dimensional")
            if len(weights) != n:
                raise ValueError("a and p must have same size")
            if np.isnan(weights).any():
                raise ValueError("probabilities contain NaN")
            if (weights < 0).any():
                raise ValueError("probabilities are not non-negative")
            if abs(weights.sum() - 1.0) > np.sqrt(np.finfo(np.float64).eps):
                raise ValueError("probabilities do not sum to 1")
        cdf = np.cumsum(weights)
        cdf /= cdf[-1]

        def one():
            return pool[min(int(np.searchsorted(cdf, self._next(), side="right")), n - 1)]
        if size is None:
            return one()
        return np.array([one() for _ in range(int(np.prod(size)))]).reshape(size)

    def __getattr__(self, name: str):
        raise _Unsupported(f"rng.{name}")


class _Exhausted(Exception):
    """The function drew more uniforms than a vector lists."""


class _Listed(_Uniforms):
    """The listed uniforms in order, then `tail` for ever (_Exhausted if tail is None): a vector's, an edge case's."""

    def __init__(self, uniforms, tail: float | None = None):
        self.uniforms, self.tail, self.used = [float(u) for u in uniforms], tail, 0

    def _next(self) -> float:
        if self.used >= len(self.uniforms) and self.tail is None:
            raise _Exhausted()
        self.used += 1
        return self.uniforms[self.used - 1] if self.used <= len(self.uniforms) else self.tail


class _TooDeep(Exception):
    """The function draws more uniforms, or has more paths, than the enumeration follows."""


class _Path(_Uniforms):
    """One path of the enumeration: the i-th uniform drawn is the midpoint of cell path[i] (extended with cell 0)."""

    def __init__(self, mids: np.ndarray, path: list[int]):
        self.mids, self.path, self.used = mids, path, 0

    def _next(self) -> float:
        if self.used >= MAX_DEPTH:
            raise _TooDeep(f"it draws more than {MAX_DEPTH} uniforms a call")
        if self.used == len(self.path):
            self.path.append(0)
        self.used += 1
        return float(self.mids[self.path[self.used - 1]])


def _cells(edges) -> tuple[np.ndarray, np.ndarray]:  # boundaries in (0, 1) -> midpoints [m], widths [m] of [0, 1)'s cells
    e = np.unique(np.clip(np.asarray(sorted(edges), dtype=np.float64), 0.0, 1.0))
    e = e[(e > 1e-12) & (e < 1.0 - 1e-12)]
    keep = np.concatenate([[True], np.diff(e) > 1e-12]) if e.size else e.astype(bool)
    bounds = np.concatenate([[0.0], e[keep], [1.0]])
    return (bounds[:-1] + bounds[1:]) / 2, np.diff(bounds)


def _enumerate(run: Callable[[_Uniforms], tuple], mids: np.ndarray, widths: np.ndarray) -> dict[tuple, float]:
    """The exact law of run(rng)'s outcome over its uniforms, when every decision it takes on a uniform has its
    boundary at a cell edge: each path of cells is run once, at the cells' midpoints, weighted by their widths."""
    law, path, leaves = Counter(), [], 0
    while True:
        rng = _Path(mids, path)
        outcome = run(rng)
        del path[rng.used:]  # the uniforms it did not draw
        law[outcome] += float(np.prod(widths[path])) if path else 1.0
        leaves += 1
        if leaves > MAX_LEAVES:
            raise _TooDeep(f"its draws have more than {MAX_LEAVES} paths to enumerate")
        while path and path[-1] == len(mids) - 1:  # the next path, like an odometer
            path.pop()
        if not path:
            return dict(law)
        path[-1] += 1


def _halved(edges) -> list[float]:  # the cell edges with every cell's midpoint added
    mids, _ = _cells(edges)
    return list(edges) + list(mids)


# ---------------------------------------------------------------- the known mistakes (verify)


def _argmax_draws_sample(x_draft, p, q, rng):
    out = []
    for t, x in enumerate(x_draft):
        x = int(x)
        if rng.random() < q[t][x] / p[t][x]:
            out.append(x)
            continue
        return np.array(out + [stats.first_max(mrs.residual(p[t], q[t]))])
    return np.array(out + [stats.first_max(q[len(x_draft)])])


def _argmax_draws_law(x_draft, p, q) -> dict:
    return shipped.argmax_last_law(list(x_draft), p, q)


# Sampling made greedy inside the verifier: the draws after the accept tests are argmaxes.
argmax_draws = broken.Bug("argmax_draws", "takes the argmax of the residual and of q[K] where it should sample from them",
                          _argmax_draws_sample, _argmax_draws_law)


def _swapped_residual(p_t, q_t, x):  # norm(max(0, p - q)): the residual with the letters swapped (p where it is all zero)
    excess = np.maximum(np.asarray(p_t, dtype=np.float64) - np.asarray(q_t, dtype=np.float64), 0.0)
    return excess if excess.sum() > 0 else np.asarray(p_t, dtype=np.float64)


# Leviathan's rule read with Chen's letters: accept with min(1, p / q), resample from norm(max(0, p - q)).
letters_swapped = broken.TokenBug(
    "letters_swapped", "p and q swapped: accepts with min(1, p/q) and resamples from norm(max(0, p - q)), Leviathan's "
    "rule (his p is the target) read with Chen's letters (p is the draft)",
    ratio=lambda p, q, x: p[x] / q[x] if q[x] > 0 else np.inf, resample=_swapped_residual)

# The learner-facing diagnosis of each known mistake of a verifier, in the order they are tried.
VERIFY_MISTAKES = [
    (broken.resample_from_q, "resamples from q instead of the residual norm(max(0, q - p)) after a rejection"),
    (broken.no_bonus, "no bonus token: when all K drafts are accepted, one more token must be drawn from q[K]"),
    (broken.bonus_wrong_row, "the bonus token is drawn from q[K-1] (the last draft's row) instead of q[K]"),
    (argmax_draws, "argmax instead of sampling: the token after the accept tests is the argmax of the residual "
                   "(or of q[K]) instead of a draw from it"),
    (broken.greedy_draft_softmax_ratio, "argmax instead of sampling: verifies the argmax of p, not the drafted token"),
    (broken.one_uniform_reused, "reuses one uniform for the accept test and the draw after it (each decision needs "
                                "a fresh rng.random())"),
    (broken.residual_only_rejected_entry, "residual adjusted only at the rejected token (EAGLE #20): it is q with "
                                          "the rejected token removed, not norm(max(0, q - p))"),
    (letters_swapped, "p and q swapped (Leviathan's letters, feifeibear/LLMSpeculativeSampling #36): accepts with "
                      "min(1, p/q) and resamples from norm(max(0, p - q)); here p is the draft, q the target"),
    (broken.ratio_inverted, "p and q swapped in the ratio: accepts with min(1, p/q) instead of min(1, q/p)"),
    (broken.always_accept, "accepts every draft: the accept test min(1, q/p) is missing"),
    (shipped.ArgmaxWhileSampling(), "argmax instead of sampling: both the drafts and the draws are argmaxes "
                                    "(mistral.rs PR #2424)"),
    (shipped.TargetNotWarped(), "the target rows are unwarped before use: verify must use q as handed (vLLM #9834)"),
    (shipped.DraftFilterNotPassed(), "the drafts are redrawn from a filtered p: verify must judge the drafts it is "
                                     "handed with the p it is handed (transformers #47932)"),
]


def _verify_breakpoints(x_draft, p, q) -> list[float]:
    """Every value at which the correct rule or a known mistake can decide differently on these rows: the
    ratios q/p and p/q, and the steps of the inverse CDF of every row they draw from."""
    K, V = p.shape
    rows = [*p, *q]
    for t in range(K):
        rows += [np.maximum(q[t] - p[t], 0.0), np.maximum(p[t] - q[t], 0.0)]
        rows += [np.where(np.arange(V) == x, 0.0, q[t]) for x in range(V)]
    edges = []
    for r in rows:
        if r.sum() > 0:
            edges += list((np.cumsum(r) / r.sum())[:-1])
    with np.errstate(divide="ignore", invalid="ignore"):
        for ratio in (q[:K] / p, p / q[:K]):
            edges += [float(v) for v in ratio.reshape(-1) if np.isfinite(v) and 0 < v < 1]
    return edges


# ---------------------------------------------------------------- check_verify

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


h, t, e, th = F(1, 2), F(1, 4), F(1, 8), F(1, 3)  # halves, quarters, eighths, thirds
# Small cases whose every decision boundary is a simple fraction: the exact tier enumerates each law.
VERIFY_CASES = [
    _case("a rejection then the residual", [0, 1], [[h, t, t, 0], [t, t, t, t]],
          [[t, h, 0, t], [h, e, 0, 3 * e], [e, 3 * e, t, t]]),
    _case("ratio above 1, residual with p and q apart", [0, 0], [[t, 3 * t, 0], [h, t, t]],
          [[h, t, t], [t, t, h], [h, 0, h]]),
    _case("p == q", [1, 2], [[h, t, t], [t, h, t]], [[h, t, t], [t, h, t], [t, t, h]]),
    _case("q(x) = 0 at a drafted token", [0, 2], [[h, h, 0], [th, th, th]], [[0, 3 * t, t], [h, h, 0], [th, th, th]]),
    _case("one-hot rows", [1, 2], [[0, 1, 0], [h, 0, h]], [[t, t, h], [0, 0, 1], [h, t, t]]),
]
del h, t, e, th


def _tokens(out, x_draft: np.ndarray, V: int, check: str, where: str) -> tuple:
    """out as a tuple of ids if it is 1 to K + 1 integer ids in [0, V), else _Fail saying what is wrong."""
    K = len(x_draft)
    try:
        a = np.asarray(out)
    except Exception as e:  # noqa: BLE001
        raise _Fail(check, f"returned {type(out).__name__}, not an array of token ids ({e}; {where})") from None
    if a.ndim != 1:
        raise _Fail(check, f"returned an array of shape {a.shape}; return one 1-D array of token ids ({where})")
    if a.dtype.kind == "f" and np.isnan(a).any():
        raise _Fail(check, f"returned NaN among the token ids {a.tolist()} ({where})")
    if a.dtype.kind not in "iu":
        raise _Fail(check, f"returned {a.tolist()} of dtype {a.dtype}: token ids are integers, e.g. "
                           f"np.array(tokens, dtype=np.int64) ({where})")
    if not 1 <= len(a) <= K + 1:
        raise _Fail(check, f"returned {len(a)} tokens for K = {K}: the accepted drafts plus one token make 1 to "
                           f"K + 1 = {K + 1} ({where})")
    if ((a < 0) | (a >= V)).any():
        raise _Fail(check, f"returned {a.tolist()}: an id outside the vocabulary [0, {V}) ({where})")
    return tuple(int(v) for v in a)  # (a prefix other than the drafts is an outcome the exact law gives 0)


def _unchanged(check: str, before: tuple, after: tuple, names: tuple) -> None:
    for b, a, name in zip(before, after, names):
        if not np.array_equal(b, a):
            raise _Fail(check, f"changes its input {name} in place: compute on a copy (q - p makes a new array)")


def _law_gap(law: dict, correct: dict, x_draft) -> str:  # the outcome where two laws differ most, in words
    k = max(set(law) | set(correct), key=lambda o: abs(law.get(o, 0.0) - float(correct.get(o, 0))))
    got, want = law.get(k, 0.0), float(correct.get(k, 0))
    prefix = "" if list(k[:-1]) == list(x_draft[:len(k) - 1]) else ": its first tokens are not the drafts"
    return (f"x_draft = {list(x_draft)}: P(output = {list(k)}) is {_fmt(got)} where the exact rule gives "
            f"{_fmt(want)}{prefix}")


def _bug_law(bug, case: _Case) -> dict | None:  # a known mistake's exact law on a case (None if it cannot run there)
    x_draft, p, q = case.arrays()
    try:
        return {k: float(v) for k, v in bug.law([int(x) for x in x_draft], p, q).items()}
    except Exception:  # noqa: BLE001  (a mistake whose law is undefined on these rows does not match)
        return None


def _named(laws: dict[str, dict]) -> str:
    """The diagnosis of the first known mistake whose exact law equals the enumerated one on every case, or ''."""
    for bug, label in VERIFY_MISTAKES:
        if all((theirs := _bug_law(bug, case)) is not None and stats.total_variation(laws[case.name], theirs) < TOL
               for case in VERIFY_CASES):
            return label
    return ""


def _verify_deterministic(f, limits: Limits) -> None:
    """The same uniforms must give the same tokens: randomness comes from rng alone."""
    # every uniform 0.7 rejects the first draft of case 0 (its residual has two tokens); 0.3 keeps both drafts of
    # case 2 (p == q) and draws the bonus token from a row of three
    for case, u in ((VERIFY_CASES[0], 0.7), (VERIFY_CASES[2], 0.3)):
        x_draft, p, q = case.arrays()
        where = f"x_draft = {x_draft.tolist()}, every uniform {u}"
        seen = {_tokens(_call(limits, "randomness", f, x_draft.copy(), p.copy(), q.copy(), _Listed([], tail=u),
                              where=where), x_draft, p.shape[1], "randomness", where) for _ in range(12)}
        if len(seen) > 1:
            raise _Fail("randomness", f"the same uniforms gave different tokens ({sorted(seen)}; {where}): draw "
                                      "every random number from the rng the function is handed, not from np.random "
                                      "or a new generator")


def _verify_exact(f, limits: Limits) -> str:
    """The exact tier: each case's law over f's uniforms, against `stats.token_call_law`; '' if it ran, else why not."""
    laws, wrong = {}, []
    for case in VERIFY_CASES:
        x_draft, p, q = case.arrays()
        check = f"exact law, case '{case.name}'"
        deepest = [0]

        def run(rng, x_draft=x_draft, p=p, q=q, check=check, deepest=deepest):
            try:
                out = limits.call(f, x_draft.copy(), p.copy(), q.copy(), rng)
            except (_Unsupported, _TooDeep):
                raise
            except Exception as e:  # noqa: BLE001
                raise _Fail(check, f"raised {type(e).__name__}: {e} (x_draft = {x_draft.tolist()}, after the "
                                   f"uniforms {[round(float(u), 4) for u in rng.mids[rng.path[:rng.used]]]})") from None
            deepest[0] = max(deepest[0], rng.used)
            return _tokens(out, x_draft, p.shape[1], check, f"x_draft = {x_draft.tolist()}")

        edges = _verify_breakpoints(x_draft, p, q)
        try:
            laws[case.name] = _enumerate(run, *_cells(edges))
        except _TooDeep as e:
            return str(e)
        correct = stats.token_call_law(list(case.x_draft), case.p, case.q)
        if deepest[0] == 0 and len(correct) > 1:
            raise _Fail("randomness", "the function never draws from the rng it is handed (np.random's global "
                                      "generator, or a new generator made inside, instead of rng?)")
        if stats.total_variation(laws[case.name], correct) > TOL:
            wrong.append((case, run, edges, check, _law_gap(laws[case.name], correct, case.x_draft)))
    if not wrong:
        return ""
    case, run, edges, check, gap = wrong[0]
    label = _named(laws)  # a known mistake's exact law, on every case (those that pass included)
    if label:
        raise _Fail(check, f"{label} ({gap})")
    for case, run, edges, *_ in wrong:  # no known law: is the enumeration exact for this function?
        try:
            finer = _enumerate(run, *_cells(_halved(edges)))
        except _TooDeep as e:
            return str(e)
        if stats.total_variation(laws[case.name], finer) > TOL:
            return "its decisions fall between the grader's cells"
    raise _Fail(check, f"{gap} (no known mistake matches)")


# Two edge cases that need a chosen uniform (the conformance checker's, `conform._injected_edge_checks`).
_ZERO_P = np.array([[0.5, 0.5, 0.0, 0.0]])
_ZERO_Q = np.array([[0.0, 0.5, 0.5, 0.0], [0.25, 0.25, 0.25, 0.25]])
_APART_P = np.array([[0.25, 0.25, 0.25, 0.25]])
_APART_Q = np.array([[0.25 * (1 - 1e-12), 0.25, 0.25, 0.25], [0.1, 0.2, 0.3, 0.4]])


def _verify_edges(f, limits: Limits) -> None:
    name = "edge q(x) = 0, u = 0"
    where = "draft 0 with q(0) = 0, the first uniform 0.0"
    out = _call(limits, name, f, np.array([0]), _ZERO_P.copy(), _ZERO_Q.copy(), _Listed([0.0], tail=0.5), where=where)
    if _tokens(out, np.array([0]), 4, name, where)[0] == 0:
        raise _Fail(name, f"kept a draft the target gives probability 0 when u = 0 ({np.asarray(out).tolist()}): "
                          f"accept iff u < q(x)/p(x), strictly (u <= shipped in {shipped.edge_signature(name).where})")
    name = "edge all-zero residual"
    where = "p and q one rounding apart, the draft rejected: max(0, q - p) is all zero"
    try:
        out = _call(limits, name, f, np.array([0]), _APART_P.copy(), _APART_Q.copy(),
                    _Listed([1 - 2.0 ** -53], tail=0.5), where=where)
        _tokens(out, np.array([0]), 4, name, where)
    except _Fail as e:
        raise _Fail(name, f"{e.diagnosis}: draw from q there, never divide 0 by 0 (shipped in "
                          f"{shipped.edge_signature(name).where})") from None


@functools.cache
def _vectors(function: str) -> tuple[dict, ...]:
    return tuple(c for c in json.loads(vectors.PATH.read_text())["cases"] if c["function"] == function)


def _replay(f, case: dict, limits: Limits | None):  # a vector's tokens from f, or what went wrong
    rng = _Listed(case["uniforms"])
    args = (np.array(case["x_draft"], dtype=np.int64), np.array(case["p"]), np.array(case["q"]), rng)
    try:
        out = limits.call(f, *args) if limits is not None else f(*args)
        tokens = [int(v) for v in np.asarray(out).reshape(-1)]
    except _Unsupported:
        raise
    except _Exhausted:
        return f"a draw past the {len(rng.uniforms)} listed uniforms"
    except Exception as e:  # noqa: BLE001
        return f"raised {type(e).__name__}: {e}"
    if rng.used != len(rng.uniforms):
        return f"{tokens} after drawing {rng.used} of the {len(rng.uniforms)} listed uniforms"
    return tokens


def _verify_vectors(f, limits: Limits, law_exact: bool) -> int:
    chosen = _vectors("verify")
    got = [_replay(f, c, limits) for c in chosen]
    wrong = [(c, g) for c, g in zip(chosen, got) if g != c["tokens"]]
    if not wrong:
        return len(chosen)
    c, g = wrong[0]
    first = f"{len(wrong)} of {len(chosen)} vectors differ, e.g. '{c['name']}': expected {c['tokens']}, got {g}"
    same = [label for bug, label in VERIFY_MISTAKES if [_replay(bug, c, None) for c in chosen] == got]
    if same:
        raise _Fail("vectors", f"{same[0]} ({first})")
    passed = "the law is exact (enumerated) and passes the chi-square" if law_exact else "the law passes the chi-square"
    raise _Fail("vectors", f"{first}; {passed}, but the vectors need the uniforms in the documented order: one "
                           "rng.random() per accept test, then one for the residual or bonus token (specref/mrs.py, "
                           "'Randomness')")


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


def _verify_chi_square(f, limits: Limits) -> str:
    case = cases.cases("token")[0]  # the suite's random case: K = 2, V = 4
    K, V = case.p.shape
    check = f"chi-square ({N_CALLS} calls, K = {K}, V = {V}, seed {SEED})"

    def guarded(x_draft, p, q, rng):
        out = _call(limits, check, f, x_draft, p.copy(), q.copy(), rng, where=f"x_draft = {x_draft.tolist()}")
        return _tokens(out, x_draft, V, check, f"x_draft = {x_draft.tolist()}")

    counts = stats.sample_verify(guarded, case.p, case.q, N_CALLS, np.random.default_rng(SEED))
    correct = stats.verify_law(case.p, case.q)
    stat, dof, pvalue = stats.chi_square_gof(counts, correct)
    if pvalue > stats.LEVEL:
        return f"chi-square p = {pvalue:.2g} ({N_CALLS} calls, seed {SEED})"
    laws = {bug.name: stats.rows_call_law(bug.law, case.p, case.q) for bug, _ in VERIFY_MISTAKES}
    found = _likeliest(counts, correct, laws)
    label = {bug.name: label for bug, label in VERIFY_MISTAKES}.get(found, "")
    what = f"chi2 = {stat:.1f} on {dof} dof, p = {pvalue:.2g} <= {stats.LEVEL:g}"
    raise _Fail(check, f"{label} ({what})" if label else f"the output law is not the target's ({what}; no known "
                                                         "mistake fits the counts)")


def check_verify(f: Callable) -> Result:
    """Grade f(x_draft [K], p [K, V], q [K+1, V], rng) -> tokens as Chen's Alg. 2, lines 9-14 (checks: module docstring)."""
    def run(limits: Limits) -> str:
        case = cases.cases("token")[0]
        x_draft = np.array([1, 2])
        before = (x_draft.copy(), case.p.copy(), case.q.copy())
        args = (x_draft, case.p.copy(), case.q.copy())
        out = _call(limits, "contract", f, *args, np.random.default_rng(SEED), where="K = 2, V = 4, a real generator")
        _tokens(out, x_draft, case.p.shape[1], "contract", "K = 2, V = 4")
        _unchanged("contract", before, args, ("x_draft", "p", "q"))
        skipped, unsupported = "", "the grader's controlled uniforms offer only random(), uniform() and choice()"
        try:
            _verify_deterministic(f, limits)
            skipped = _verify_exact(f, limits)
            _verify_edges(f, limits)
        except _Unsupported as e:
            stat = _verify_chi_square(f, limits)
            return f"{stat}; exact law, edges and vectors skipped: it calls {e} ({unsupported})"
        stat = _verify_chi_square(f, limits)
        try:
            n_vectors = _verify_vectors(f, limits, law_exact=not skipped)
        except _Unsupported as e:
            return f"exact law and edges passed, {stat}; vectors skipped: it calls {e} ({unsupported})"
        exact = ("exact law on 5 cases" if not skipped else
                 f"exact law skipped ({skipped})")
        return f"{exact}, edges u = 0 and all-zero residual, {stat}, {n_vectors} vectors"
    return _grade("verify", run)


# ---------------------------------------------------------------- check_residual

# Cases of (p, q); the answer is computed from them in exact arithmetic.
_q, _e = F(1, 4), F(1, 8)
RESIDUAL_CASES = [
    ("rows that overlap", [F(1, 2), _e, _e, _q], [_q, _q, 3 * _e, _e]),
    ("q(x) = 0 where p has mass", [_q, _q, F(1, 2)], [F(1, 2), F(1, 2), 0]),
    ("one-hot p", [0, 1, 0, 0], [_q, _q, _q, _q]),
    ("one-hot q", [_q, _q, _q, _q], [0, 0, 1, 0]),
    ("disjoint supports", [F(1, 2), F(1, 2), 0, 0], [0, 0, _q, 3 * _q]),
    ("p == q (the excess is all zero: q)", [F(1, 2), _q, _q], [F(1, 2), _q, _q]),
    ("p and q one rounding apart (all zero: q)", [_q, _q, _q, _q], [F(0.25 * (1 - 1e-12)), _q, _q, _q]),
]
del _q, _e


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


def _first_match(mistakes, f_outcomes: list, outcome_of: Callable) -> str:
    """The label of the first known mistake that gives f's answers on every case up to f's first wrong one
    (f_outcomes holds those), or ''.  outcome_of(wrong, i) is the mistake's answer on case i."""
    return next((label for label, wrong in mistakes
                 if all(_same(o, outcome_of(wrong, i)) for i, o in enumerate(f_outcomes))), "")


def _outcome(f, p, q):  # f's answer on a case, or the exception's type (for comparing with the known mistakes)
    try:
        return np.asarray(f(p.copy(), q.copy()), dtype=np.float64)
    except Exception as e:  # noqa: BLE001
        return type(e).__name__


def _same(a, b) -> bool:
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=1e-9, atol=1e-12, equal_nan=True))


def check_residual(f: Callable) -> Result:
    """Grade f(p [V], q [V]) -> [V] as norm(max(0, q - p)), q itself when that is all zero (checks: module docstring)."""
    def run(limits: Limits) -> str:
        named = [(name, np.array(p, dtype=np.float64), np.array(q, dtype=np.float64), _residual_exact(p, q))
                 for name, p, q in RESIDUAL_CASES]
        name, p, q = _large_residual_case()
        named.append((name, p, q, None))
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
                shown = f"{_row(r)}, expected {_row(want)}" if len(r) < 10 else \
                    f"{np.abs(r - want).max():.3g} from the answer at most"
                problem = f"returned {shown}"
                beta = float(np.minimum(p, q).sum())  # the acceptance probability for this pair of rows
                law = np.minimum(p, q) + (1 - beta) * np.where(np.isfinite(r), r, 0.0)
                if beta < 1 and len(r) < 10:
                    problem += f"; Theorem 1's law min(p, q) + (1 - beta) r is then {_row(law)}, not q = {_row(q)}"
            if problem:
                upto = named[:[c[0] for c in named].index(name) + 1]
                timed = functools.partial(limits.call, f)  # a call that loops ends the check, as above
                label = _first_match(RESIDUAL_MISTAKES, [_outcome(timed, c[1], c[2]) for c in upto],
                                     lambda wrong, i: _outcome(wrong, upto[i][1], upto[i][2]))
                raise _Fail(check, f"{label} ({problem})" if label else problem)
        stat = _residual_chi_square(f, limits)
        return f"norm(max(0, q - p)) exact on {len(named)} cases, {stat}"
    return _grade("residual", run)


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


# ---------------------------------------------------------------- check_expected_tokens

# The grid Eq. 1 is checked on (alpha = 1 apart), the telling cases first: a failure shows the first it meets.
EXPECTED_ALPHAS = (0.5, 0.8, 0.9, 0.99, 0.1, 0.0)
EXPECTED_GAMMAS = (1, 2, 3, 5, 8, 0)
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


def _eq1_exact(alpha: Fraction, gamma: int) -> Fraction:
    return sum(alpha ** i for i in range(gamma + 1))


def _rows_with_acceptance(alpha: Fraction, K: int) -> tuple[np.ndarray, np.ndarray]:  # p [K, 3], q [K+1, 3]: alpha at each t
    p = [F(1, 2), F(1, 2), 0]
    q = [alpha - F(1, 2), F(1, 2), 1 - alpha] if alpha >= F(1, 2) else [0, alpha, 1 - alpha]
    return np.array([p] * K, dtype=np.float64), np.array([q] * (K + 1), dtype=np.float64)


def _number(f, limits: Limits, check: str, alpha, gamma) -> float:  # f(alpha, gamma) as a float, or _Fail
    where = f"alpha = {alpha}, gamma = {gamma}"
    out = _call(limits, check, f, alpha, gamma, where=where)
    try:
        v = np.asarray(out, dtype=np.float64)
    except Exception:  # noqa: BLE001
        raise _Fail(check, f"returned {out!r} for {where}: expected one number") from None
    if v.size != 1:
        raise _Fail(check, f"returned an array of shape {v.shape} for {where}: expected one number")
    if not np.isfinite(v.item()):
        raise _Fail(check, f"returned {v.item()} for {where}")
    return float(v.item())


def _eq1_gap(f, alpha, gamma, got, want) -> str:  # what is wrong, with the known mistake it matches
    where = f"alpha = {alpha}, gamma = {gamma}: got {_fmt(got)}, Eq. 1 gives {_fmt(want)}"
    for label, wrong in EXPECTED_MISTAKES:
        if all(math.isclose(_safe(f, a, g), wrong(a, g), rel_tol=TOL, abs_tol=1e-12)
               for a in EXPECTED_ALPHAS for g in EXPECTED_GAMMAS):
            return f"{label} ({where})"
    return where


def check_expected_tokens(f: Callable) -> Result:
    """Grade f(alpha, gamma) -> float as Leviathan's Eq. 1, gamma + 1 at alpha = 1 (module docstring: the checks)."""
    def run(limits: Limits) -> str:
        check = "Eq. 1"
        for alpha in EXPECTED_ALPHAS:
            for gamma in EXPECTED_GAMMAS:
                got, want = _number(f, limits, check, alpha, gamma), float(_eq1_exact(F(alpha), gamma))
                if not math.isclose(got, want, rel_tol=TOL, abs_tol=1e-12):
                    raise _Fail(check, _eq1_gap(functools.partial(limits.call, f), alpha, gamma, got, want))
        check = "alpha = 1"
        for gamma in EXPECTED_GAMMAS:
            try:
                got = _number(f, limits, check, 1.0, gamma)
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
                mean = stats.expected_tokens(stats.verify_law(p, q))
                got = _number(f, limits, check, float(alpha), K)
                if not math.isclose(got, mean, rel_tol=TOL):
                    raise _Fail(check, f"{_eq1_gap(functools.partial(limits.call, f), float(alpha), K, got, mean)}; "
                                       "that is mrs.verify's exact mean "
                                       f"output length for K = {K} on rows whose acceptance rate is {float(alpha)}")
        check = f"simulation ({N_SIMULATED} calls of mrs.verify, alpha = 0.75, gamma = 4, seed {SEED})"
        mean, se = _simulated_tokens()
        got = _number(f, limits, check, 0.75, 4)
        pvalue = math.erfc(abs(mean - got) / se / math.sqrt(2))  # two-sided, the normal approximation
        if pvalue <= stats.LEVEL:
            raise _Fail(check, f"mrs.verify made {mean:.4f} +- {se:.4f} tokens a call, the answer says {_fmt(got)} "
                               f"(z-test p = {pvalue:.2g})")
        return (f"Eq. 1 exact on {(len(EXPECTED_ALPHAS) + 1) * len(EXPECTED_GAMMAS)} (alpha, gamma) with alpha = 1, equal "
                f"to mrs.verify's exact mean output length on 6 cases, and to its simulated mean (z-test p = "
                f"{pvalue:.2g}, seed {SEED})")
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


# ---------------------------------------------------------------- check_block_weights

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
    return stats.block_weights(list(case.x_draft), case.p, case.q)[0]


# The learner-facing diagnosis of each known mistake of the weights, and the mistake itself.
BLOCK_MISTAKES = [
    ("the ratio is not carried along the block: w_i = min(1, w_{i-1} q_i(x_i)/p_i(x_i)), not min(1, q_i(x_i)/p_i(x_i))",
     lambda x, p, q: np.concatenate([[1.0], [min(1.0, q[i, v] / p[i, v]) for i, v in enumerate(x)]])),
    ("the min(1, .) is missing: w_i may exceed 1",
     lambda x, p, q: np.cumprod(np.concatenate([[1.0], [q[i, v] / p[i, v] for i, v in enumerate(x)]]))),
    ("caps only the running product, min(1, prod q_j/p_j): w_i = min(1, w_{i-1} q_i/p_i) caps at every step",
     lambda x, p, q: np.minimum(1.0, np.cumprod(np.concatenate([[1.0], [q[i, v] / p[i, v] for i, v in enumerate(x)]])))),
    ("p and q swapped: the ratio is target over draft, q_i(x_i) / p_i(x_i)",
     lambda x, p, q: _carried(x, q, p)),
    ("scores x_i against the next position's target row: x_i (drawn from p[i-1]) is judged by q[i-1], not q[i]",
     lambda x, p, q: _carried(x, p, q, shift=1)),
]


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
        _, h, r = stats.block_weights(xs, p_rows, q_rows, w)
        h = [min(1.0, max(0.0, v)) for v in h]
        last = [r[i] if sum(r[i]) > 0 else list(q_rows[i]) for i in range(len(xs))] + [list(q_rows[len(xs)])]
        return stats.stopped_law(xs, stats.stopping_law(h), last)
    try:
        law = stats.continued_law(stats.call_law(law_given_drafts, stats.fixed_rows(p), stats.fixed_rows(q), 3, 3),
                                  stats.fixed_rows(q), 4)
        target = stats.target_joint_law(stats.fixed_rows(q), 3, 4)
        return (f"; with these weights block verification's 4-token output is "
                f"{stats.total_variation(law, target):.3f} from the target's law in total variation (K = 3, V = 3)")
    except Exception:  # noqa: BLE001  (weights that break block verification itself: no law to show)
        return ""


def check_block_weights(f: Callable) -> Result:
    """Grade f(x_draft [K], p [K, V], q [K+1, V]) -> w [K+1] as block verification's weights (checks: module docstring)."""
    def run(limits: Limits) -> str:
        all_cases = _block_cases()
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
                problem = f"x_draft = {x_draft.tolist()}: returned {_row(w)}, expected {_row(want)}"
            if problem:
                upto = all_cases[:all_cases.index(case) + 1]
                timed = functools.partial(limits.call, f)  # a call that loops ends the check, as above
                label = _first_match(BLOCK_MISTAKES, [_outcome_block(timed, c) for c in upto],
                                     lambda wrong, i: _outcome_block(wrong, upto[i]))
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


# ---------------------------------------------------------------- the gallery: mistakes that shipped

# The gallery's pipeline: a target and a draft Markov chain (order 1) over GALLERY_V tokens, the request's warp
# (temperature, then top-k) applied to both by `specref.warps`, GALLERY_K drafts a call, the GALLERY_L tokens
# after the prompt token 0 compared with plain sampling's exact law.  With these settings the weakest mistake
# (one_uniform_reused) has noncentrality 289 on 22 dof at N_GALLERY sequences (`power.noncentrality`): each
# mistake fails with certainty for practical purposes, whatever the seed.
GALLERY_V, GALLERY_K, GALLERY_L, GALLERY_PROMPT = 5, 2, 3, 0
REQUEST = warps.Warp(temperature=0.7, top_k=3)  # the request's sampling settings
GALLERY_SEED = 3  # the chains' seed, and the first entropy of each row's generator
N_GALLERY = 3_000  # sequences a row: all seven rows in about 2 s


@dataclass(frozen=True)
class Mistake:
    """A mistake that shipped: the verifier a pipeline runs, and how the pipeline around it differs from Algorithm 2.

    Called like `mrs.verify` it runs `bug`, the mistake's single-call form (a `broken.Bug`: `.law(x_draft, p, q)`
    is its exact law), so `check_verify(mistake)` grades it; `show_mistakes` runs the whole pipeline.
    """

    name: str
    label: str  # the mistake in a few words (the table's first column)
    where: str  # where it shipped
    about: str  # what the code does
    bug: broken.Bug  # the single-call form (for the verifier's own mistakes, the verifier the pipeline runs)
    drafting: str = "sample"  # how the draft picks its token from its warped row: "sample", or "argmax"
    draft_rows: str = "warped"  # the p handed to the verifier: "warped" (the rows drafted from) or "unfiltered"
    target_rows: str = "warped"  # the q handed to the verifier: "warped" (plain sampling's rows) or "raw"

    @property
    def around(self) -> bool:
        """Whether the mistake is around the verifier (the verifier itself is then mrs.verify)."""
        return (self.drafting, self.draft_rows, self.target_rows) != ("sample", "warped", "warped")

    @property
    def verifier(self) -> Callable:
        return mrs.verify if self.around else self.bug

    def __call__(self, x_draft, p, q, rng):
        return self.bug(x_draft, p, q, rng)

    def __repr__(self) -> str:
        return f"<Mistake {self.name}: {self.about} ({self.where})>"


MISTAKES = [
    Mistake("argmax_draft", "argmax draft, p's probabilities verified", "jaymody/speculative-sampling #3 (#4)",
            "the draft's token is the argmax of its row while the verifier is handed that row's probabilities, as if "
            "the token had been sampled", broken.greedy_draft_softmax_ratio, drafting="argmax"),
    Mistake("draft_filter_not_passed", "draft filtered, unfiltered p verified", "transformers #47932",
            "the draft samples from its top-k filtered row; the verifier is handed the row before the filter",
            shipped.DraftFilterNotPassed(), draft_rows="unfiltered"),
    Mistake("target_not_warped", "target rows not warped", "vLLM #9834",
            "the verifier is handed the target's rows without the request's temperature and top-k, which plain "
            "sampling applies", shipped.TargetNotWarped(), target_rows="raw"),
    Mistake("residual_only_rejected_entry", "residual at the rejected token only", "EAGLE #20",
            "after a rejection the token is drawn from q with the rejected token removed, not from norm(max(0, q - p))",
            broken.residual_only_rejected_entry),
    Mistake("one_uniform_reused", "one uniform reused for the draw", "-",
            "one uniform decides the accept tests and draws the token after them (a generator reseeded inside the "
            "loop does this)", broken.one_uniform_reused),
    Mistake("letters_swapped", "p and q swapped", "asked in LLMSpeculativeSampling #36",
            "Leviathan's rule (his p is the target) run on Chen's letters (p is the draft): accept with min(1, p/q), "
            "resample from norm(max(0, p - q)); the code in #36 is right in its own letters", letters_swapped),
]
CORRECT = Mistake("correct", "none: Algorithm 2 (mrs.verify)", "-", "Chen's Algorithm 2 as written",
                  broken.Bug("verify", "mrs.verify", mrs.verify, stats.token_call_law))


@functools.cache
def gallery_chains() -> dict[str, np.ndarray]:
    """The gallery's rows [V, V] given the previous token: target and draft, raw, warped, and the draft unfiltered."""
    rng = np.random.default_rng(GALLERY_SEED)
    target = rng.dirichlet(np.full(GALLERY_V, 0.7), size=GALLERY_V)  # [V, V]
    draft = 0.5 * target + 0.5 * rng.dirichlet(np.full(GALLERY_V, 0.7), size=GALLERY_V)  # [V, V]
    return {"target_raw": target, "target": REQUEST(target), "draft": REQUEST(draft),
            "draft_unfiltered": warps.Warp(temperature=REQUEST.temperature)(draft)}


def _pipeline_rows(m: Mistake):  # -> the draft's rows, the p rows handed on, the q rows handed on ([V, V] each)
    c = gallery_chains()
    return (c["draft"], c["draft"] if m.draft_rows == "warped" else c["draft_unfiltered"],
            c["target"] if m.target_rows == "warped" else c["target_raw"])


def pipeline_generate(m: Mistake, rng: np.random.Generator) -> tuple:
    """One run of Chen's Alg. 2 with the pieces of mistake m: the GALLERY_L tokens after the prompt."""
    drafted, p_rows, q_rows = _pipeline_rows(m)
    K, out, last = GALLERY_K, [], GALLERY_PROMPT
    while len(out) < GALLERY_L:
        context = [last]
        for _ in range(K):  # Alg. 2, lines 5-7: each draft from the draft's warped row (or its argmax)
            row = drafted[context[-1]]
            context.append(stats.first_max(row) if m.drafting == "argmax" else mrs.sample(row, rng))
        x_draft = np.array(context[1:], dtype=np.int64)  # [K]
        p, q = p_rows[context[:K]], q_rows[context]  # [K, V], [K+1, V]: the rows handed to the verifier
        new = [int(v) for v in m.verifier(x_draft, p, q, rng)]  # lines 9-14
        out += new
        last = new[-1]
    return tuple(out[:GALLERY_L])


def pipeline_law(m: Mistake) -> dict[tuple, float]:
    """The exact law of pipeline_generate(m): each call's law summed over its drafts, calls continued to GALLERY_L tokens."""
    drafted, p_rows, q_rows = _pipeline_rows(m)
    K, V = GALLERY_K, GALLERY_V
    law_given_drafts = m.verifier.law if m.verifier is not mrs.verify else stats.token_call_law

    def call(previous: int) -> dict:
        law = {}
        blocks = [tuple(0 for _ in range(K))] if m.drafting == "argmax" else list(np.ndindex(*(V,) * K))
        for xs in blocks:
            context = [previous]
            chance = 1.0
            for t in range(K):
                row = drafted[context[-1]]
                if m.drafting == "argmax":
                    context.append(stats.first_max(row))
                else:
                    context.append(int(xs[t]))
                    chance *= float(row[xs[t]])
            if chance == 0:
                continue
            for out, v in law_given_drafts(context[1:], p_rows[context[:K]], q_rows[context]).items():
                law[out] = law.get(out, 0.0) + chance * float(v)
        return law
    calls = {v: call(v) for v in range(V)}
    done, frontier = {}, {(): 1.0}
    while frontier:
        nxt = {}
        for seq, w in frontier.items():
            for out, v in calls[seq[-1] if seq else GALLERY_PROMPT].items():
                s = (seq + out)[:GALLERY_L]
                into = done if len(s) == GALLERY_L else nxt
                into[s] = into.get(s, 0.0) + w * v
        frontier = nxt
    return done


def plain_law() -> dict[tuple, float]:
    """The exact law of GALLERY_L tokens of plain sampling from the warped target: what every pipeline must match."""
    target = gallery_chains()["target"]
    return stats.continued_law({(): 1.0}, lambda s: target[s[-1] if s else GALLERY_PROMPT], GALLERY_L)


@dataclass(frozen=True)
class Row:
    """One row of show_mistakes' table."""

    name: str
    label: str
    where: str
    statistic: float
    dof: int
    pvalue: float
    diagnosis: str  # the mistake whose pipeline law the counts fit ('' when none does, or for a pass)

    @property
    def passed(self) -> bool:
        return self.pvalue > stats.LEVEL


class Table:
    """show_mistakes' rows; its repr is the table."""

    def __init__(self, rows: list[Row], n: int, seconds: float):
        self.rows, self.n, self.seconds = rows, n, seconds
        self._shown_in = None

    def __repr__(self) -> str:
        cols = ["mistake", "where it shipped", "chi2", "dof", "p-value", "verdict", "diagnosis"]
        cells = [[r.label, r.where, f"{r.statistic:.1f}", str(r.dof), f"{r.pvalue:.2g}", "pass" if r.passed else "FAIL",
                  r.diagnosis or ("-" if r.passed else "no known mistake fits")] for r in self.rows]
        width = [max(len(c[i]) for c in cells + [cols]) for i in range(len(cols))]

        def line(c):
            return "  ".join(v.ljust(w) for v, w in zip(c, width)).rstrip()
        lines = [f"{self.n} sequences a row: the {GALLERY_L} tokens after the prompt (V = {GALLERY_V}, K = {GALLERY_K}, "
                 f"warp T = {REQUEST.temperature:g}, top-k {REQUEST.top_k}) against plain sampling's exact law, "
                 f"level {stats.LEVEL:g}", line(cols)] + [line(c) for c in cells]
        if any(math.isinf(r.statistic) for r in self.rows):
            lines.append("chi2 inf: a sequence plain sampling never produces was seen")
        return "\n".join(lines)

    __str__ = __repr__
    _ipython_display_ = Result._ipython_display_

    @property
    def verdict(self) -> str:
        return repr(self)


def mistake_rows(n: int = N_GALLERY, seed: int = GALLERY_SEED) -> list[Row]:
    """The correct pipeline and each of MISTAKES through the same chi-square: n sequences each, row i drawn with
    np.random.default_rng((seed, i))."""
    reference = plain_law()
    laws = {m.name: pipeline_law(m) for m in MISTAKES}
    rows = []
    for i, m in enumerate([CORRECT, *MISTAKES]):
        rng = np.random.default_rng((seed, i))
        counts = Counter(pipeline_generate(m, rng) for _ in range(n))
        stat, dof, pvalue = stats.chi_square_gof(counts, reference)
        found = "" if pvalue > stats.LEVEL else _likeliest(counts, reference, laws)
        rows.append(Row(m.name, m.label, m.where, stat, dof, pvalue, f"fits {found}" if found else ""))
    return rows


def show_mistakes(n: int = N_GALLERY, seed: int = GALLERY_SEED) -> Table:
    """Run the correct pipeline and each of MISTAKES through the same chi-square and print the table (module docstring)."""
    start = time.perf_counter()
    rows = mistake_rows(n, seed)
    return _show(Table(rows, n, time.perf_counter() - start))
