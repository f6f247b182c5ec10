"""The answer to the exercise `exercises.check_residual` (Chen's letters: p = draft, q = target)."""

import numpy as np


def residual(p, q):  # [V], [V] -> [V]
    """norm(max(0, q - p)), the law drawn from after a rejection; q itself when that excess is all zero (p == q)."""
    excess = np.maximum(q - p, 0.0)  # a new array: p and q are left as they were
    total = excess.sum()
    if total > 0:
        return excess / total
    return np.array(q, dtype=np.float64)  # p == q: a rejection never happens, and q keeps Theorem 1 exact
