"""Exact laws and goodness-of-fit tests: the proof-by-simulation machinery.

The tests in `tests/`, notebook 03 and `tools/false_alarm.py` share these functions, so
the false-alarm rate and the power measured there are those of the suite itself.
Chen's letters: p = draft, q = target.

Outcomes are tuples of token ids (a whole output of `verify`, or a whole sequence), so
outputs of different lengths are different outcomes.
"""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Callable

import numpy as np
from scipy import stats as sps

from specref import mrs
from specref.sampling import next_distributions

# Significance level of every distribution test in the suite: a correct sampler fails a
# given test with probability LEVEL (its false-alarm rate) for a random seed; the seeds
# are fixed, so a run is reproducible.
LEVEL = 1e-3

# Outcomes whose expected count is below this are pooled into one bin (the usual
# validity condition of the chi-square approximation).
MIN_EXPECTED = 5.0


def chi_square_gof(counts: Counter, law: dict) -> tuple[float, int, float]:
    """Pearson chi-square of observed outcome counts against an exact law: (statistic, dof, p-value).

    An observed outcome the law gives probability 0 is impossible: the p-value is 0.
    """
    n = sum(counts.values())
    if n == 0:
        raise ValueError("no observations")
    if any(law.get(k, 0.0) <= 0.0 for k in counts):
        return float("inf"), 0, 0.0
    expected = {k: n * v for k, v in law.items() if v > 0}
    big = [k for k, e in expected.items() if e >= MIN_EXPECTED]
    small = [k for k, e in expected.items() if e < MIN_EXPECTED]
    obs = [counts.get(k, 0) for k in big]
    exp = [expected[k] for k in big]
    if small:
        obs.append(sum(counts.get(k, 0) for k in small))
        exp.append(sum(expected[k] for k in small))
    obs, exp = np.array(obs, dtype=np.float64), np.array(exp)
    if len(obs) < 2:
        return 0.0, 0, 1.0
    stat = float(((obs - exp) ** 2 / exp).sum())
    dof = len(obs) - 1
    return stat, dof, float(sps.chi2.sf(stat, dof))


def verify_law(p: np.ndarray, q: np.ndarray) -> dict[tuple, float]:  # [K, V], [K+1, V] -> law
    """Exact law of verify's output when draft t is drawn from the fixed row p[t].

    Accepting a prefix x_1..x_a has probability prod_t min(p_t, q_t)(x_t); then either
    position a is rejected (probability 1 - alpha_a) and y ~ residual_a, or a = K and
    the bonus y ~ q_K.
    """
    K, V = p.shape
    m = np.minimum(p, q[:K])  # [K, V] probability that position t drafts x and accepts it
    law = {}
    for a in range(K + 1):
        last = q[K] if a == K else (1.0 - m[a].sum()) * mrs.residual(p[a], q[a])  # [V]
        for prefix in itertools.product(range(V), repeat=a):
            w = float(np.prod([m[t, x] for t, x in enumerate(prefix)]))
            if w == 0.0:
                continue
            for y in range(V):
                if last[y] > 0:
                    law[prefix + (y,)] = w * float(last[y])
    return law


def accepted_count_law(p: np.ndarray, q: np.ndarray) -> np.ndarray:  # [K, V], [K+1, V] -> [K+1]
    """P(a draft tokens accepted), a = 0..K: prod_{t<a} alpha_t * (1 - alpha_a), alpha_K := 0."""
    alpha = np.append(np.minimum(p, q[: len(p)]).sum(axis=-1), 0.0)  # [K+1]
    return np.array([np.prod(alpha[:a]) * (1.0 - alpha[a]) for a in range(len(alpha))])


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


class MarkovChain:
    """A model whose next token depends on the previous `order` tokens: table[ctx] -> [V].

    table has shape [V] * order + [V]; a prefix shorter than `order` is left-padded with
    its first token.  A stand-in for a language model small enough to enumerate.
    """

    def __init__(self, table: np.ndarray):
        self.table = mrs.check_distribution(table, "Markov table")
        self.order = table.ndim - 1
        self.V = table.shape[-1]

    @classmethod
    def random(cls, V: int, order: int, rng: np.random.Generator, concentration: float = 1.0) -> "MarkovChain":
        return cls(rng.dirichlet(np.full(V, concentration), size=(V,) * order))

    def next_probs(self, tokens: np.ndarray, k: int) -> np.ndarray:  # [n] -> [k, V]
        tokens = np.asarray(tokens)
        padded = np.concatenate([np.full(self.order, tokens[0]), tokens])
        return np.stack([self.table[tuple(padded[i + 1: i + 1 + self.order])]
                         for i in range(len(tokens) - k, len(tokens))])

    def __call__(self, tokens: np.ndarray) -> np.ndarray:  # [n] -> [n, V]
        return self.next_probs(tokens, len(tokens))


def sequence_law(model, x: np.ndarray, N: int) -> dict[tuple, float]:
    """Exact law of the N tokens that follow prompt x under `model`, by enumerating every sequence."""
    law = {(): 1.0}
    for _ in range(N):
        nxt = {}
        for seq, w in law.items():
            q = next_distributions(model, np.concatenate([x, np.array(seq, dtype=np.int64)]), 1)[0]
            for y in np.flatnonzero(q):
                nxt[seq + (int(y),)] = w * float(q[y])
        law = nxt
    return law


def sample_sequences(sampler: Callable[[np.random.Generator], np.ndarray], n: int, t: int,
                     rng: np.random.Generator) -> Counter:
    """Counts of the tokens after position t over n runs of sampler(rng)."""
    return Counter(tuple(int(v) for v in sampler(rng)[t:]) for _ in range(n))
