"""The uniforms the grader chooses: a stand-in for np.random.Generator whose draws the grader controls, and the
exact law of a function's output over its uniforms, enumerated cell by cell (check_verify's exact tier).

A verifier decides by comparing a uniform with a threshold (u < q(x)/p(x), a step of an inverse CDF), so its output
is constant on boxes of uniforms.  `exact_law(run, edges)` cuts [0, 1) at `edges` into cells and runs the function
once per path of cells (a cell for each uniform it draws), at the cells' midpoints, weighting each outcome by the
product of the cells' widths: that is the exact law when no decision switches inside a cell.  It then looks for
one: each path is run again with every uniform a hair (PROBE) inside its cell's low end, and again inside its high
end.  Where the outcome (or the number of uniforms drawn) differs from the midpoint's, the uniforms are moved back
one at a time to find the one that decides, the switch is located by bisection (to 1e-15) and cuts the cells of
that uniform (the j-th drawn), and the enumeration runs again, until no probe differs (at most MAX_ROUNDS times).
What it cannot see: a switch within PROBE of a cell edge (the law is then off by at most PROBE for each such
switch, far below the checks' tolerance); a sliver of another outcome strictly inside a cell, holding neither the
cell's ends nor its midpoint (a threshold test or an inverse CDF never makes one: its outcomes at a cell's two ends
differ when a switch lies between them); and a switch whose two sides give the same output at every probe of every
path (a decision that matters only at points no probe visits).  When the function draws too many uniforms, has too many paths, or
keeps switching inside cells, `_TooDeep` says so and no law is claimed.
"""

from __future__ import annotations

from collections import Counter
from typing import Callable

import numpy as np


# Paths of one enumeration, and uniforms one call may draw there, before the exact tier gives way.
MAX_LEAVES = 5_000
MAX_DEPTH = 12
# How far inside a cell its ends are probed; edges closer than MERGE are one; refinements before giving way.
PROBE = 1e-11
MERGE = 1e-13
MAX_ROUNDS = 6


class _Unsupported(AttributeError):
    """The function asked the controlled generator for something other than uniforms."""


class _TooDeep(Exception):
    """The function draws more uniforms, has more paths, or switches more often than the enumeration follows."""


class _Beyond(Exception):
    """A probe's function drew more uniforms than the path it probes."""


# What the controlled uniforms raise through the graded function: the grader's signals, never the function's error.
CONTROL = (_Unsupported, _TooDeep, _Beyond)


class _Uniforms:
    """A stand-in for np.random.Generator whose uniforms the grader chooses: random(), random(size), uniform(),
    and choice(a, p=...) (one uniform a draw, by the inverse CDF, as Generator.choice does); `_next()` gives them,
    `drawn` lists them.  Anything else (another method, float32 uniforms) raises _Unsupported."""

    used = 0

    def _next(self) -> float:
        raise NotImplementedError

    def _draw(self) -> float:
        u = self._next()
        self.drawn.append(u)
        return u

    def random(self, size=None, dtype=np.float64, out=None):
        if np.dtype(dtype) != np.float64:
            raise _Unsupported(f"rng.random(dtype={np.dtype(dtype)})")
        if out is not None:
            out[...] = self.random(np.shape(out))
            return out
        if size is None:
            return self._draw()
        return np.array([self._draw() for _ in range(int(np.prod(size)))]).reshape(size)

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
            return pool[min(int(np.searchsorted(cdf, self._draw(), side="right")), n - 1)]
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
        self.uniforms, self.tail, self.used, self.drawn = [float(u) for u in uniforms], tail, 0, []

    def _next(self) -> float:
        if self.used >= len(self.uniforms) and self.tail is None:
            raise _Exhausted()
        self.used += 1
        return self.uniforms[self.used - 1] if self.used <= len(self.uniforms) else self.tail


def replay(f, args: tuple, uniforms, limits=None):  # a vector's inputs and uniforms -> f's tokens, or what went wrong
    """f(*args, rng) with rng drawing exactly `uniforms` (a vector's), under `limits` (a verdict.Limits) if given:
    its output as a list of ints, or a sentence saying what went wrong (an exception, a draw past the list, or
    uniforms left over).  _Unsupported (a draw other than random()) propagates: the caller says what it means."""
    rng = _Listed(uniforms)
    try:
        out = limits.call(f, *args, rng) if limits is not None else f(*args, rng)
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


class _Cells:
    """The cells of [0, 1) for each uniform a call draws, the first, the second, ...: the edges all share, and
    those found for one of them (a switch is found for the j-th uniform drawn, and cuts only its cells)."""

    def __init__(self, edges, found: dict[int, list[float]] | None = None):
        self.edges, self.found = list(edges), found or {}
        self._bounds = {}

    def bounds(self, j: int) -> np.ndarray:  # [m + 1]: 0, the edges in (0, 1) (those closer than MERGE made one), 1
        return self._of(j)[0]

    def mids(self, j: int) -> np.ndarray:  # [m]
        return self._of(j)[1]

    def _of(self, j: int) -> tuple[np.ndarray, np.ndarray]:
        key = j if j in self.found else -1
        if key not in self._bounds:
            e = np.unique(np.clip(np.asarray(self.edges + self.found.get(j, []), dtype=np.float64), 0.0, 1.0))
            e = e[(e > MERGE) & (e < 1.0 - MERGE)]
            keep = np.concatenate([[True], np.diff(e) > MERGE]) if e.size else e.astype(bool)
            b = np.concatenate([[0.0], e[keep], [1.0]])
            self._bounds[key] = b, (b[:-1] + b[1:]) / 2
        return self._bounds[key]

    def cut(self, found: list[tuple[int, float]]) -> "_Cells | None":
        """These cells cut at the switches found, (j, u) each; None if none cuts a cell (all within MERGE of an edge)."""
        more = {j: list(v) for j, v in self.found.items()}
        for j, u in found:
            more.setdefault(j, []).append(u)
        finer = _Cells(self.edges, more)
        return finer if any(len(finer.bounds(j)) > len(self.bounds(j)) for j, _ in found) else None


class _Path(_Uniforms):
    """One path of the enumeration: the i-th uniform drawn is the midpoint of its cell path[i] (path extended with
    cell 0)."""

    def __init__(self, cells: _Cells, path: list[int]):
        self.cells, self.path, self.used, self.drawn = cells, path, 0, []

    def _next(self) -> float:
        if self.used >= MAX_DEPTH:
            raise _TooDeep(f"it draws more than {MAX_DEPTH} uniforms a call")
        if self.used == len(self.path):
            self.path.append(0)
        self.used += 1
        return float(self.cells.mids(self.used - 1)[self.path[self.used - 1]])


class _Point(_Uniforms):
    """A probe: the listed uniforms in order; one more raises _Beyond."""

    def __init__(self, values):
        self.values, self.used, self.drawn = [float(v) for v in values], 0, []

    def _next(self) -> float:
        if self.used >= len(self.values):
            raise _Beyond()
        self.used += 1
        return self.values[self.used - 1]


def _leaves(run: Callable[[_Uniforms], tuple], cells: _Cells) -> list[tuple[tuple, tuple]]:
    """Every path of cells run once at the cells' midpoints, like an odometer: [(path, outcome)]."""
    leaves, path = [], []
    while True:
        rng = _Path(cells, path)
        outcome = run(rng)
        del path[rng.used:]  # the uniforms it did not draw
        leaves.append((tuple(path), outcome))
        if len(leaves) > MAX_LEAVES:
            raise _TooDeep(f"its draws have more than {MAX_LEAVES} paths to enumerate")
        while path and path[-1] == len(cells.mids(len(path) - 1)) - 1:  # the next path
            path.pop()
        if not path:
            return leaves
        path[-1] += 1


def _at(run: Callable[[_Uniforms], tuple], values) -> tuple:
    """run's outcome and the number of uniforms it drew, with these uniforms (('beyond',) if it draws more)."""
    rng = _Point(values)
    try:
        return run(rng), rng.used
    except _Beyond:
        return ("beyond",)


def _switch(run, x: np.ndarray, j: int, same: float, other: float, ref: tuple) -> float:
    """Where run's outcome switches on uniform j (the others at x) between `same` (outcome ref) and `other`."""
    x = x.copy()
    for _ in range(64):
        if abs(other - same) <= 1e-15:
            break
        x[j] = (same + other) / 2
        if _at(run, x) == ref:
            same = x[j]
        else:
            other = x[j]
    return (same + other) / 2


def _switches_inside(run, cells: _Cells, leaves) -> list[tuple[int, float]]:
    """The switches (j, u) of a decision on the j-th uniform inside a cell, found by probing each path a hair
    inside its cells' low ends, then their high ends."""
    found = []
    for path, outcome in leaves:
        if not path:
            continue
        lo = np.array([cells.bounds(j)[c] for j, c in enumerate(path)])
        hi = np.array([cells.bounds(j)[c + 1] for j, c in enumerate(path)])
        mid, d, ref = (lo + hi) / 2, np.minimum(PROBE, (hi - lo) / 4), (outcome, len(path))
        for near in (lo + d, hi - d):
            if _at(run, near) == ref:
                continue
            x = mid.copy()
            for j in range(len(path)):  # move the uniforms to `near` one at a time: the j-th decides
                before = x.copy()
                x[j] = near[j]
                if _at(run, x) != ref:
                    break
            if any(i == j and min(mid[j], near[j]) < u < max(mid[j], near[j]) for i, u in found):
                continue  # a switch found already lies there: the next round probes the pieces
            found.append((j, _switch(run, before, j, mid[j], near[j], ref)))
    return found


def exact_law(run: Callable[[_Uniforms], tuple], edges) -> dict[tuple, float]:
    """The exact law of run(rng)'s outcome over its uniforms, cells cut at `edges` and refined where a decision
    switches inside one (module docstring); _TooDeep when it cannot be enumerated."""
    cells = _Cells(edges)
    for _ in range(MAX_ROUNDS):
        leaves = _leaves(run, cells)
        found = _switches_inside(run, cells, leaves)
        if not found:
            law = Counter()
            for path, outcome in leaves:
                law[outcome] += float(np.prod([np.diff(cells.bounds(j))[c] for j, c in enumerate(path)]))
            return dict(law)
        cells = cells.cut(found)
        if cells is None:
            break  # the switches found sit on edges already (within MERGE): refining cannot settle them
    raise _TooDeep(f"its decisions switch inside the grader's cells after {MAX_ROUNDS} refinements")
