"""Deliberately broken variants of `specref.mrs.verify`: the negative controls.

Each has verify's signature `(x_draft [K], p [K, V], q [K+1, V], rng) -> tokens` and
each reproduces a bug seen in public implementations.  The distribution tests in
`tests/` and notebook 03 must reject every one of them; a test that cannot tell them
from the real `verify` proves nothing.  Chen's letters: p = draft, q = target.
"""

from __future__ import annotations

import numpy as np

from specref.mrs import residual, sample


def _loop(x_draft, p, q, rng, ratio=lambda p, q, x: q[x] / p[x], resample=residual,
          bonus_row=lambda K: K, propose=lambda p_t, x: int(x)):
    """verify's loop with one piece swappable; the defaults are the correct MRS."""
    out = []
    for t, x in enumerate(x_draft):
        x = propose(p[t], x)
        if rng.random() < ratio(p[t], q[t], x):
            out.append(x)
        else:
            return np.array(out + [sample(resample(p[t], q[t]), rng)])
    K = len(x_draft)
    return np.array(out + [sample(q[bonus_row(K)], rng)]) if bonus_row(K) is not None else np.array(out)


def always_accept(x_draft, p, q, rng):
    """Accepts every draft token: the output follows the draft, not the target."""
    return _loop(x_draft, p, q, rng, ratio=lambda p, q, x: np.inf)


def ratio_inverted(x_draft, p, q, rng):
    """Accepts with min(1, p/q) instead of min(1, q/p) (the letters swapped between the papers)."""
    return _loop(x_draft, p, q, rng, ratio=lambda p, q, x: p[x] / q[x] if q[x] > 0 else np.inf)


def resample_from_q(x_draft, p, q, rng):
    """After a rejection draws from q itself instead of the residual (q - p)_+."""
    return _loop(x_draft, p, q, rng, resample=lambda p, q: q)


def no_bonus(x_draft, p, q, rng):
    """Returns only the K drafts when all are accepted, dropping the bonus token from q[K]."""
    return _loop(x_draft, p, q, rng, bonus_row=lambda K: None)


def bonus_wrong_row(x_draft, p, q, rng):
    """Draws the bonus token from q[K-1] (the last draft's position) instead of q[K]."""
    return _loop(x_draft, p, q, rng, bonus_row=lambda K: K - 1)


def greedy_draft_softmax_ratio(x_draft, p, q, rng):
    """The draft proposes its argmax token but the ratio uses its softmax probability p(x);
    the draft was really one-hot, so the ratio should have used p(x) = 1."""
    return _loop(x_draft, p, q, rng, propose=lambda p_t, x: int(np.argmax(p_t)))


def one_uniform_reused(x_draft, p, q, rng):
    """Draws one uniform per call and reuses it for every decision and draw (what reseeding
    the generator inside the loop does): the accept decisions become dependent."""
    u = rng.random()

    class Frozen:  # a generator that always returns the same number
        def random(self):
            return u

    return _loop(x_draft, p, q, Frozen())


BROKEN = {
    "always_accept": always_accept,
    "ratio_inverted": ratio_inverted,
    "resample_from_q": resample_from_q,
    "no_bonus": no_bonus,
    "bonus_wrong_row": bonus_wrong_row,
    "greedy_draft_softmax_ratio": greedy_draft_softmax_ratio,
    "one_uniform_reused": one_uniform_reused,
}
