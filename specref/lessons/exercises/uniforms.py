"""The uniforms the grader chooses: a stand-in for np.random.Generator whose draws the grader controls, and the
exact law of a function's output over its uniforms, enumerated cell by cell (check_verify's exact tier)."""

from __future__ import annotations

from collections import Counter
from typing import Callable

import numpy as np


# Leaves of one exact enumeration, and uniforms one call may draw there, before the exact tier gives way.
MAX_LEAVES = 20_000
MAX_DEPTH = 12


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
