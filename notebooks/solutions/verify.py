"""The answer to the exercise `exercises.check_verify`: Chen's Algorithm 2, lines 9-14 (p = draft, q = target)."""

import numpy as np


def draw(weights, rng):  # [V] nonnegative, sum > 0 -> token id
    """One token with probability weights[i] / sum(weights): the inverse CDF of one rng.random()."""
    c = np.cumsum(weights)  # [V]
    i = int(np.searchsorted(c, rng.random() * c[-1], side="right"))  # the smallest i with u * sum < c[i]
    return min(i, int(np.flatnonzero(weights)[-1]))  # rounding can put u * sum past the last step: its token


def verify(x_draft, p, q, rng):  # [K], [K, V], [K+1, V] -> [n], 1 <= n <= K + 1
    """Keep each draft with probability min(1, q/p); after a rejection draw from norm(max(0, q - p)), else from q[K]."""
    K = len(x_draft)
    out = []
    for t in range(K):  # line 9: for t = 1 : K (0-based here)
        x = int(x_draft[t])
        if rng.random() < q[t, x] / p[t, x]:  # lines 10-11: r < min(1, q/p) (r < 1 makes the min needless);
            # strict <, so a draft with q(x) = 0 is never kept, even when r = 0
            out.append(x)
            continue
        excess = np.maximum(q[t] - p[t], 0.0)  # line 12: (q - p)+
        out.append(draw(excess if excess.sum() > 0 else q[t], rng))  # all zero (p == q up to rounding): q
        return np.array(out, dtype=np.int64)
    out.append(draw(q[K], rng))  # line 14: all K accepted: the bonus token from q[K]
    return np.array(out, dtype=np.int64)
