"""LOSSY verifiers used in practice: fast, but their output is NOT distributed as the target.

They have verify's signature `(x_draft [K], p [K, V], q [K+1, V], rng) -> tokens` so they can
be plugged into `specref.sampling.speculative_sampling`, and they are here for one purpose:
to show that the suite's distribution tests catch a real-world lossy rule.  Do not use them
where the target's law matters; the exact verifiers are `specref.mrs.verify` and
`specref.mrs.verify_block`.  Chen's letters: p = draft, q = target.
"""

from __future__ import annotations

import numpy as np

from specref import mrs

# Medusa's defaults (Cai et al. 2024, "Medusa", section 2.3.1; their posterior_threshold and
# posterior_alpha): epsilon is the hard threshold, delta scales the entropy-dependent one.
EPSILON = 0.09
DELTA = 0.3


def typical_threshold(q_row: np.ndarray, epsilon: float = EPSILON, delta: float = DELTA) -> float:  # [V] -> scalar
    """Medusa's typical-acceptance threshold for one target row: min(epsilon, delta * exp(-H(q)))."""
    nz = q_row[q_row > 0]
    entropy = float(-(nz * np.log(nz)).sum())
    return min(epsilon, delta * float(np.exp(-entropy)))


def verify_typical(x_draft: np.ndarray, p: np.ndarray, q: np.ndarray, rng: np.random.Generator,
                   epsilon: float = EPSILON, delta: float = DELTA) -> np.ndarray:  # [K], [K, V], [K+1, V] -> [n]
    """LOSSY: Medusa's typical acceptance: keep drafts while q(x) > min(epsilon, delta exp(-H(q))), then draw one token from q.

    Requires: verify's inputs.  The decision ignores p entirely (no ratio, no residual): a
    draft the target finds merely plausible is kept, so tokens the draft favours come out
    more often than the target would emit them.  Uses one rng.random(): the inverse-CDF draw
    of the token after the kept drafts (from q at that position, or q[K] if all were kept).
    """
    x_draft, p, q = mrs._check_verify_inputs(x_draft, p, q)
    out = []
    for t, x in enumerate(x_draft.tolist()):
        if not q[t, x] > typical_threshold(q[t], epsilon, delta):
            break
        out.append(x)
    out.append(mrs.sample(q[len(out)], rng))  # a fresh target draw at the first position not kept
    return np.array(out, dtype=np.int64)
