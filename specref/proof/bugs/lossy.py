"""LOSSY verifiers used in practice: fast, but their output is NOT distributed as the target.

They have verify's signature `(x_draft [K], p [K, V], q [K+1, V], rng) -> tokens` so they can
be plugged into `specref.sampling.speculative_sampling`, and they are here for one purpose:
to show that the suite's distribution tests catch a real-world lossy rule.  LOSSY holds them as
`broken.Bug`s (sampler and exact law together) with `mrs.verify_lenient` at three leniences.  Do not use them
where the target's law matters; the exact verifiers are `specref.mrs.verify` and
`specref.mrs.verify_block`.  Chen's letters: p = draft, q = target.
"""

from __future__ import annotations

import numpy as np

from specref import mrs
from specref.proof import laws
from specref.proof.bugs import Bug

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


def typical_call_law(x_draft, p, q, epsilon: float = EPSILON, delta: float = DELTA) -> dict:  # [K], [K][V], [K+1][V]
    """Exact law of `verify_typical`'s output for fixed drafts: `laws.token_call_law` keeping x iff q(x) is above
    the threshold, and drawing from q itself where a draft is not kept."""
    def keep(p_t, q_t, x):
        return 1.0 if q_t[x] > typical_threshold(np.asarray(q_t, dtype=np.float64), epsilon, delta) else 0.0

    return laws.token_call_law(x_draft, p, q, ratio=keep, resample=lambda p_t, q_t, x: q_t)


def lenient(lenience: float) -> Bug:
    """`mrs.verify_lenient` at one lenience, with its exact law (`laws.lenient_call_law`)."""
    return Bug(f"lenient_{lenience:g}", f"lenient acceptance: accepts with min(1, q / (l p)), l about {lenience:g} "
               "(Leviathan A.5; LOSSY)", lambda x_draft, p, q, rng: mrs.verify_lenient(x_draft, p, q, rng, lenience),
               lambda x_draft, p, q: laws.lenient_call_law(x_draft, p, q, lenience))


LOSSY = [Bug("typical_acceptance", "Medusa's typical acceptance: keeps drafts the target finds plausible, ignoring p "
             "(LOSSY)", verify_typical, typical_call_law),
         lenient(0.8), lenient(0.5), lenient(0.2)]
