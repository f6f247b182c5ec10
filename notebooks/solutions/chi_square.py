"""The answer to the exercise `exercises.check_chi_square`: Pearson's test with the pooling rule of notebook 03."""

import numpy as np
from scipy import stats


def chi_square(counts, law, min_expected=20):  # Counter {outcome: count}, {outcome: probability} -> (X^2, dof, p)
    """Rare outcomes share one bin until it expects min_expected; X^2 over the bins, dof = bins - 1, p = P(chi2 >= X^2)."""
    if any(law.get(k, 0) <= 0 for k in counts):
        return np.inf, 0, 0.0  # an outcome the law forbids was seen: that alone rejects
    n = sum(counts.values())
    rarest_first = sorted((k for k in law if law[k] > 0), key=law.get)  # outcomes of probability 0 take no part
    shared, expected = [], 0.0
    for k in rarest_first:
        if n * law[k] >= min_expected and not 0 < expected < min_expected:
            break
        shared.append(k)  # rare, or the shared bin still expects too few: it joins the shared bin
        expected += n * law[k]
    bins = ([shared] if shared else []) + [[k] for k in rarest_first[len(shared):]]
    if len(bins) < 2:
        return 0.0, 0, 1.0  # one bin: nothing to compare
    O = np.array([sum(counts.get(k, 0) for k in b) for b in bins], dtype=np.float64)  # observed per bin
    E = np.array([n * sum(law[k] for k in b) for b in bins])  # expected per bin
    X2 = float(((O - E) ** 2 / E).sum())
    dof = len(bins) - 1
    return X2, dof, float(stats.chi2.sf(X2, dof))
