"""Goodness-of-fit: how the suite decides that samples follow an exact law (specref.proof.laws).

The tests in `tests/`, notebook 03 and `tools/false_alarm.py` share these functions, so
the false-alarm rate and the power measured there are those of the suite itself.

Outcomes are tuples of token ids (a whole output of `verify`, or a whole sequence), so
outputs of different lengths are different outcomes.
"""

from __future__ import annotations

from collections import Counter
from typing import Callable

import numpy as np
from scipy import stats as sps

# Significance level of every distribution test in the suite: a correct sampler fails a
# given test with probability LEVEL (its false-alarm rate) for a random seed; the seeds
# are fixed, so a run is reproducible.
LEVEL = 1e-3

# The chi-square's bins (`pooled_bins`): an outcome expected at least MIN_EXPECTED times is a bin of
# its own; the rarer ones share one bin, joined by the next rarest while that bin expects fewer than
# MIN_EXPECTED.  Multinomial draws from the exact laws the suite and the conformance checker test
# against (`python3 -m tools.false_alarm --pooling`, 200 000 draws a law) show why: pooling only
# below 5 put 1.3e-3 to 1.5e-3 of correct samples below p = 1e-3 where many outcomes expect 5 to 20,
# and a pooled bin that itself expected 0.3 (the sharp rows) put 5e-3 to 6e-3 there; with this rule
# every law gives 0.9e-3 to 1.3e-3 (standard error 0.07e-3), and about 1e-4 at the checker's 1e-3 / 11.
MIN_EXPECTED = 20.0


def total_variation(a: dict, b: dict) -> float:
    """Half the L1 distance between two laws (dicts outcome -> probability)."""
    return 0.5 * sum(abs(a.get(k, 0.0) - b.get(k, 0.0)) for k in set(a) | set(b))


def pooled_bins(law: dict, n: int) -> list[list]:
    """The outcomes of `law` grouped into the chi-square's bins for n draws: the rarest pooled (see MIN_EXPECTED), the rest alone."""
    live = sorted((k for k, v in law.items() if v > 0), key=law.get)  # rarest first
    i, pooled = 0, 0.0
    while i < len(live) and (n * law[live[i]] < MIN_EXPECTED or 0 < pooled < MIN_EXPECTED):
        pooled += n * law[live[i]]
        i += 1
    return ([live[:i]] if i else []) + [[k] for k in live[i:]]


def chi_square_gof(counts: Counter, law: dict) -> tuple[float, int, float]:
    """Pearson chi-square of observed outcome counts against an exact law, over `pooled_bins`: (statistic, dof, p-value).

    An observed outcome the law gives probability 0 is impossible: the p-value is 0.
    """
    n = sum(counts.values())
    if n == 0:
        raise ValueError("no observations")
    if any(law.get(k, 0.0) <= 0.0 for k in counts):
        return float("inf"), 0, 0.0
    bins = pooled_bins(law, n)
    if len(bins) < 2:
        return 0.0, 0, 1.0
    obs = np.array([sum(counts.get(k, 0) for k in b) for b in bins], dtype=np.float64)
    exp = np.array([n * sum(float(law[k]) for k in b) for b in bins])
    stat = float(((obs - exp) ** 2 / exp).sum())
    dof = len(bins) - 1
    return stat, dof, float(sps.chi2.sf(stat, dof))


def sample_verify(verify: Callable, p: np.ndarray, q: np.ndarray, n: int, rng: np.random.Generator) -> Counter:
    """Counts of `verify`'s outputs over n calls, drafts drawn from the fixed rows p[t]."""
    K, V = p.shape
    counts = Counter()
    cdf = np.cumsum(p, axis=1)  # [K, V]
    for _ in range(n):
        u = rng.random(K)
        x_draft = np.array([min(int(np.searchsorted(cdf[t], u[t] * cdf[t, -1], side="right")), V - 1)
                            for t in range(K)])
        counts[tuple(int(v) for v in verify(x_draft, p, q, rng))] += 1
    return counts

def sample_sequences(sampler: Callable[[np.random.Generator], np.ndarray], n: int, t: int,
                     rng: np.random.Generator) -> Counter:
    """Counts of the tokens after position t over n runs of sampler(rng)."""
    return Counter(tuple(int(v) for v in sampler(rng)[t:]) for _ in range(n))
