"""The conformance checker's one-call cases: the rows a verifier is called with, and the correct law of each call.

`conform` runs its one-call chi-square checks on these cases (and its sequence checks with the sizes
below) and `power` computes, from the same cases, what those checks can see.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from specref.proof import stats

# Samples per one-call check and per large-vocabulary check.
N_CALLS = 20_000
N_LARGE_V = 3_000
# The whole-sequence checks: runs of `speculative_sampling` per check, and its K, on stats.markov_pair().
N_SEQUENCES = 6_000
SEQ_K = (2, 3)
# The large vocabulary (GPT-2's 50257): the law is checked on tokens spread across it.
LARGE_V = 50_257
# The exact law of one call of a correct verifier, per algorithm.
CORRECT = {"token": stats.token_call_law, "block": stats.block_call_law}


@dataclass(frozen=True)
class Case:
    """One call's rows: drafts are drawn from p [K, V]; q [K+1, V] are the target's rows."""

    name: str
    p: np.ndarray  # [K, V]
    q: np.ndarray  # [K+1, V]
    n: int  # calls sampled


def _rows(rng, K, V, concentration):
    return rng.dirichlet(np.full(V, concentration), size=K), rng.dirichlet(np.full(V, concentration), size=K + 1)


def cases(algorithm: str) -> list[Case]:
    """The suite's cases for one call: random, sharp and degenerate rows (K = 2, V = 4 token-level; K = 3, V = 3 block)."""
    K, V, seed = (2, 4, 2024) if algorithm == "token" else (3, 3, 2025)  # the rows of test_mrs.py, test_mrs_block.py
    rng = np.random.default_rng(seed)
    out = [Case("random", *_rows(rng, K, V, 1.0), N_CALLS), Case("sharp", *_rows(rng, K, V, 0.1), N_CALLS)]
    p, _ = _rows(rng, K, V, 1.0)
    out.append(Case("p_equals_q", p, np.vstack([p, p[:1]]), N_CALLS))
    lower, upper = np.arange(V) < V // 2, np.arange(V) >= V // 2  # the draft's tokens, the target's
    p = np.where(lower, 1.0, 0.0) / lower.sum()
    q = np.where(upper, np.arange(1.0, V + 1), 0.0)
    out.append(Case("disjoint_supports", np.tile(p, (K, 1)), np.tile(q / q.sum(), (K + 1, 1)), N_CALLS))
    p, q = _rows(rng, K, V, 1.0)
    out.append(Case("one_hot_p", np.eye(V)[np.arange(1, K + 1) % V], q, N_CALLS))
    out.append(Case("one_hot_q", p, np.eye(V)[(np.arange(K + 1) * 3 + V - 1) % V], N_CALLS))
    p, q = _rows(rng, K, V, 1.0)
    p[:, 0], q[:, 1] = 0.0, 0.0
    out.append(Case("zeros_in_both", p / p.sum(1, keepdims=True), q / q.sum(1, keepdims=True), N_CALLS))
    out.append(_large_vocabulary(K, rng))
    return out


def _large_vocabulary(K: int, rng) -> Case:
    # LARGE_V tokens; mass on a few ids at block edges (255, 256, 1023, 1024, ...) and on the last id.
    live = np.array([0, 255, 256, 1023, 1024, 4097, 32767, 32768, LARGE_V - 1])
    p, q = np.zeros((K, LARGE_V)), np.zeros((K + 1, LARGE_V))
    p[:, live[:6]] = rng.dirichlet(np.ones(6), size=K)
    q[:, live[3:]] = rng.dirichlet(np.ones(6), size=K + 1)
    return Case("large_vocabulary", p, q, N_LARGE_V)


def accepted_count_case() -> Case:
    """K = 4, V = 5, random rows: the law of the number of accepted drafts."""
    p, q = _rows(np.random.default_rng(13), 4, 5, 1.0)
    return Case("accepted_count", p, q, N_CALLS)


def count_marginal(law_or_counts):
    """A law or counts of whole outputs -> of the number of accepted drafts, keyed (a,)."""
    out = Counter() if isinstance(law_or_counts, Counter) else {}
    for o, v in law_or_counts.items():
        out[(len(o) - 1,)] = out.get((len(o) - 1,), 0) + v
    return out
