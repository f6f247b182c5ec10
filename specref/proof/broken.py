"""Deliberately broken variants of `specref.mrs.verify` and `specref.mrs.verify_block`: the negative controls.

Each has verify's signature `(x_draft [K], p [K, V], q [K+1, V], rng) -> tokens`.  The
token-level ones (BROKEN) reproduce bugs seen in public implementations; the block ones
(BROKEN_BLOCK) are plausible misreadings of block verification, each of which breaks exactness
(shown by enumeration in the suite) and each carrying its own exact law, `.law(x_draft, p, q)`.  The distribution tests in
`tests/` and notebook 03 must reject every one of them; a test that cannot tell them
from the real `verify` proves nothing.  Chen's letters: p = draft, q = target.
"""

from __future__ import annotations

import numpy as np

from specref.mrs import residual, sample
from specref.proof import stats


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


def residual_only_rejected_entry(x_draft, p, q, rng):
    """After rejecting x draws from q with only x's own entry adjusted (max(0, q(x) - p(x)) = 0),
    the other entries left at q(y) instead of max(0, q(y) - p(y))."""
    out = []
    for t, x in enumerate(x_draft):
        if rng.random() < q[t][x] / p[t][x]:
            out.append(int(x))
            continue
        r = np.array(q[t], dtype=np.float64)
        r[x] = 0.0  # the one entry adjusted
        return np.array(out + [sample(r, rng)])
    return np.array(out + [sample(q[len(x_draft)], rng)])


def flatter(p_row):
    """The draft row at twice its temperature, norm(sqrt(p)): the probabilities of logits warped differently."""
    r = np.sqrt(np.asarray(p_row, dtype=np.float64))
    return r / r.sum()


def draft_warped_differently(x_draft, p, q, rng):
    """The drafts were drawn from p (the draft's logits at its temperature) but the ratio and the residual
    use the probabilities of differently warped logits, here flatter(p): q / p is inflated for likely drafts."""
    return _loop(x_draft, p, q, rng, ratio=lambda p, q, x: q[x] / flatter(p)[x],
                 resample=lambda p, q: residual(flatter(p), q))


BROKEN = {
    "always_accept": always_accept,
    "ratio_inverted": ratio_inverted,
    "resample_from_q": resample_from_q,
    "no_bonus": no_bonus,
    "bonus_wrong_row": bonus_wrong_row,
    "greedy_draft_softmax_ratio": greedy_draft_softmax_ratio,
    "one_uniform_reused": one_uniform_reused,
    "residual_only_rejected_entry": residual_only_rejected_entry,
    "draft_warped_differently": draft_warped_differently,
}


# ---------------------------------------------------------------- misreadings of block verification

class BlockVariant:
    """`mrs.verify_block` with one step misread, as a sampler (call it like verify) and as an exact law (`.law`).

    carry_w: w_i = min(1, w_{i-1} q_i/p_i) (True, correct) or min(1, q_i/p_i) (False);
    h_slack: h_i = s_i / (s_i + 1 - w_i) (True, correct) or s_i / (s_i + 1) (False);
    weighted_residual: the last token from max(0, w_tau q - p) (True, correct) or max(0, q - p);
    choose: "largest" i with eta_i <= h_i (correct), "smallest" i >= 1 with it (0 if none),
    or "forward": scan i = 1, 2, ... and stop before the first coin that fails.
    """

    def __init__(self, name: str, doc: str, carry_w=True, h_slack=True, weighted_residual=True, choose="largest"):
        self.__name__, self.__doc__ = name, doc
        self.carry_w, self.h_slack, self.weighted_residual, self.choose = carry_w, h_slack, weighted_residual, choose

    def _parts(self, x_draft, p, q):  # -> h [K+1], last-token rows [K+1] (unnormalised)
        K = len(x_draft)
        if self.carry_w:
            w, h, r = stats.block_weights(x_draft, p, q)
        else:  # w_i = min(1, q_i(x_i) / p_i(x_i)): the ratio not carried along the block
            w = [1.0] + [min(1.0, q[i][x] / p[i][x]) for i, x in enumerate(x_draft)]
            r = [[max(0.0, w[i] * b - a) for a, b in zip(p[i], q[i])] for i in range(K)]
            h = [1.0] + [sum(r[i]) / (sum(r[i]) + (1 - w[i])) if sum(r[i]) + (1 - w[i]) > 0 else 1.0
                         for i in range(1, K)] + [w[K]]
        if not self.h_slack:  # h_i = s_i / (s_i + 1)
            h = [h[0]] + [sum(r[i]) / (sum(r[i]) + 1) for i in range(1, K)] + [h[K]]
        if not self.weighted_residual:
            r = [[max(0.0, b - a) for a, b in zip(p[i], q[i])] for i in range(K)]
        last = [r[i] if sum(r[i]) > 0 else list(q[i]) for i in range(K)] + [list(q[K])]
        return [float(v) for v in h], [np.asarray(row, dtype=np.float64) for row in last]

    def _stopping_law(self, h):  # P(tau = i), i = 0..K
        K = len(h) - 1
        if self.choose == "largest":
            return stats.stopping_law(h)
        if self.choose == "smallest":
            out, below = [0.0] * (K + 1), 1.0
            for i in range(1, K + 1):
                out[i], below = below * h[i], below * (1 - h[i])
            out[0] = below
            return out
        out, passed = [], 1.0  # forward: coins 1..i came up, coin i+1 failed
        for i in range(K + 1):
            out.append(passed * (1 - (h[i + 1] if i < K else 0.0)))
            if i < K:
                passed *= h[i + 1]
        return out

    def law(self, x_draft, p, q) -> dict:
        """Exact law of this variant's output for fixed drafts (like `stats.block_call_law`)."""
        h, last = self._parts(list(x_draft), p, q)
        law = {}
        for tau, weight in enumerate(self._stopping_law(h)):
            if weight > 0:
                for y, v in enumerate(last[tau] / last[tau].sum()):
                    if v > 0:
                        law[tuple(int(x) for x in x_draft[:tau]) + (y,)] = weight * v
        return law

    def __call__(self, x_draft, p, q, rng):
        x_draft = [int(x) for x in x_draft]
        K = len(x_draft)
        h, last = self._parts(x_draft, p, q)
        tau = 0
        if self.choose == "largest":
            tau = next((i for i in range(K, 0, -1) if rng.random() < h[i]), 0)
        elif self.choose == "smallest":
            tau = next((i for i in range(1, K + 1) if rng.random() < h[i]), 0)
        else:
            while tau < K and rng.random() < h[tau + 1]:
                tau += 1
        return np.array(x_draft[:tau] + [sample(last[tau], rng)])


BROKEN_BLOCK = {v.__name__: v for v in [
    BlockVariant("residual_without_w", "The residual after stopping at tau is max(0, q - p), without the w_tau weight.",
                 weighted_residual=False),
    BlockVariant("h_without_slack", "h_i = s_i / (s_i + 1): the (1 - w_i) term of the denominator left out.",
                 h_slack=False),
    BlockVariant("smallest_qualifying", "tau is the smallest i >= 1 whose coin comes up, not the largest.",
                 choose="smallest"),
    BlockVariant("forward_first_failure", "Scans i = 1, 2, ... and stops at the first failed coin, like token-level.",
                 choose="forward"),
    BlockVariant("w_not_carried", "w_i = min(1, q_i(x_i) / p_i(x_i)): the ratio is not carried along the block.",
                 carry_w=False),
]}
