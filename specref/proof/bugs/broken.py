"""Deliberately broken variants of `specref.mrs.verify` and `specref.mrs.verify_block`: the negative controls.

Each is a `specref.proof.bugs.Bug`: called with verify's signature `(x_draft [K], p [K, V], q [K+1, V], rng)
-> tokens` it samples, `.law(x_draft, p, q)` is its exact output law for fixed drafts (like
`laws.token_call_law`), and `.about` says what it does (the conformance checker's diagnosis).  The
token-level ones (BROKEN) reproduce bugs seen in public implementations; most swap one of the four
pieces of `laws.token_call_law`, and their sampler and law are made from that same piece.  The block
ones (BROKEN_BLOCK) are plausible misreadings of block verification, each of which breaks exactness
(shown by enumeration in the suite).  The distribution tests in `tests/` and notebook 03 must reject
every one of them; a test that cannot tell them from the real `verify` proves nothing.  Chen's
letters: p = draft, q = target.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from specref import mrs
from specref.proof import laws
from specref.proof.bugs import Bug


def _loop(x_draft, p, q, rng, ratio=None, resample=None, bonus_row=None, propose=None):
    """verify's loop with the pieces of `laws.token_call_law` (None: verify's own), drawing verify's uniforms."""
    out = []
    for t, x in enumerate(x_draft):
        x = int(x) if propose is None else propose(p[t], x)
        if rng.random() < (q[t][x] / p[t][x] if ratio is None else ratio(p[t], q[t], x)):
            out.append(x)
            continue
        weights = mrs.residual(p[t], q[t]) if resample is None else resample(p[t], q[t], x)
        return np.array(out + [mrs.sample(np.asarray(weights, dtype=np.float64), rng)])
    K = len(x_draft)
    bonus = K if bonus_row is None else bonus_row(K)
    return np.array(out if bonus is None else out + [mrs.sample(q[bonus], rng)])


class TokenBug(Bug):
    """`mrs.verify` with some of the pieces of `laws.token_call_law` swapped; its sampler and its law take the same pieces."""

    def __init__(self, name: str, about: str, **pieces: Callable):
        super().__init__(name, about)
        self.pieces = pieces  # ratio, resample, bonus_row, propose: see laws.token_call_law

    def sample(self, x_draft, p, q, rng):
        return _loop(x_draft, p, q, rng, **self.pieces)

    def law(self, x_draft, p, q) -> dict:
        return laws.token_call_law(x_draft, p, q, **self.pieces)


def _only_rejected_entry(p_row, q_row, x):  # q with only the rejected x's entry adjusted (to max(0, q(x) - p(x)) = 0)
    r = np.array(q_row, dtype=np.float64)
    r[x] = 0.0
    return r if r.sum() > 0 else np.asarray(q_row, dtype=np.float64)


def flatter(p_row):
    """The draft row at twice its temperature, norm(sqrt(p)): the probabilities of logits warped differently."""
    r = np.sqrt(np.asarray(p_row, dtype=np.float64))
    return r / r.sum()


always_accept = TokenBug("always_accept", "accepts every draft: the output follows the draft, not the target",
                         ratio=lambda p, q, x: np.inf)
ratio_inverted = TokenBug("ratio_inverted", "accepts with min(1, p / q) instead of min(1, q / p): the letters of the "
                          "two papers swapped", ratio=lambda p, q, x: p[x] / q[x] if q[x] > 0 else np.inf)
resample_from_q = TokenBug("resample_from_q", "resamples from q instead of the residual (q - p)+ after a rejection",
                           resample=lambda p, q, x: q)
no_bonus = TokenBug("no_bonus", "drops the bonus token when every draft is accepted", bonus_row=lambda K: None)
bonus_wrong_row = TokenBug("bonus_wrong_row", "draws the bonus token from q[K-1] (the last draft's row) instead of q[K]",
                           bonus_row=lambda K: K - 1)
# The draft was really one-hot (greedy), so the ratio should have used p(x) = 1.
greedy_draft_softmax_ratio = TokenBug("greedy_draft_softmax_ratio", "proposes the draft's argmax but divides by its "
                                      "softmax probability p(x)", propose=lambda p_t, x: int(np.argmax(p_t)))
residual_only_rejected_entry = TokenBug("residual_only_rejected_entry", "after a rejection draws from q with only the "
                                        "rejected token removed, instead of (q - p)+ (a residual that adjusts only the "
                                        "rejected entry)", resample=_only_rejected_entry)
# The drafts were drawn from p (the draft's logits at its temperature), but the ratio and the residual use
# the probabilities of differently warped logits, flatter(p): q / p is inflated for likely drafts.
draft_warped_differently = TokenBug("draft_warped_differently", "the ratio and residual use draft probabilities warped "
                                    "differently from those the drafts were drawn from (flatter: the ratio is inflated)",
                                    ratio=lambda p, q, x: q[x] / flatter(p)[x],
                                    resample=lambda p, q, x: mrs.residual(flatter(p), q))


class _Frozen:  # a generator that always returns the same number
    def __init__(self, u: float):
        self.u = u

    def random(self) -> float:
        return self.u


def _one_uniform_sample(x_draft, p, q, rng):  # one uniform per call, reused by every decision and draw
    return _loop(x_draft, p, q, _Frozen(rng.random()))


def _inverse_cdf_mass(row, lo: float, hi: float) -> list[tuple[int, float]]:  # tokens hit by u in [lo, hi), with mass
    c = np.cumsum(np.asarray(row, dtype=np.float64))
    c = c / c[-1]
    below = np.concatenate([[0.0], c[:-1]])
    mass = np.clip(np.minimum(c, hi) - np.maximum(below, lo), 0.0, None)
    return [(int(y), float(m)) for y, m in enumerate(mass) if m > 0]


def _one_uniform_law(x_draft, p, q) -> dict:  # one u decides every test and draws the last token
    K = len(x_draft)
    law, hi, prefix = {}, 1.0, ()
    for t in range(K):
        x = int(x_draft[t])
        ratio = q[t][x] / p[t][x]
        if ratio < hi:  # u in [ratio, hi): the first t accepted, x rejected; the same u draws the residual
            for y, m in _inverse_cdf_mass(mrs.residual(p[t], q[t]), ratio, hi):
                law[prefix + (y,)] = law.get(prefix + (y,), 0.0) + m
            hi = ratio
        prefix = prefix + (x,)
        if hi <= 0.0:
            return law
    for y, m in _inverse_cdf_mass(q[K], 0.0, hi):
        law[prefix + (y,)] = law.get(prefix + (y,), 0.0) + m
    return law


one_uniform_reused = Bug("one_uniform_reused", "reuses one uniform for every decision and draw of a call (a generator "
                         "reseeded inside the loop)", _one_uniform_sample, _one_uniform_law)


BROKEN = {b.name: b for b in [always_accept, ratio_inverted, resample_from_q, no_bonus, bonus_wrong_row,
                              greedy_draft_softmax_ratio, one_uniform_reused, residual_only_rejected_entry,
                              draft_warped_differently]}


# ---------------------------------------------------------------- misreadings of block verification

class BlockBug(Bug):
    """`mrs.verify_block` with one step misread.

    carry_w: w_i = min(1, w_{i-1} q_i/p_i) (True, correct) or min(1, q_i/p_i) (False);
    h_slack: h_i = s_i / (s_i + 1 - w_i) (True, correct) or s_i / (s_i + 1) (False);
    weighted_residual: the last token from max(0, w_tau q - p) (True, correct) or max(0, q - p);
    choose: "largest" i with eta_i <= h_i (correct), "smallest" i >= 1 with it (0 if none),
    or "forward": scan i = 1, 2, ... and stop before the first coin that fails.
    """

    def __init__(self, name: str, about: str, carry_w=True, h_slack=True, weighted_residual=True, choose="largest"):
        super().__init__(name, about)
        self.carry_w, self.h_slack, self.weighted_residual, self.choose = carry_w, h_slack, weighted_residual, choose

    def _parts(self, x_draft, p, q):  # -> h [K+1], last-token rows [K+1] (unnormalised)
        K = len(x_draft)
        # carry_w False: w_i = min(1, q_i(x_i) / p_i(x_i)), the ratio not carried along the block
        w = None if self.carry_w else [1.0] + [min(1.0, q[i][x] / p[i][x]) for i, x in enumerate(x_draft)]
        w, h, r = laws.block_weights(x_draft, p, q, w)
        if not self.h_slack:  # h_i = s_i / (s_i + 1)
            h = [h[0]] + [sum(r[i]) / (sum(r[i]) + 1) for i in range(1, K)] + [h[K]]
        if not self.weighted_residual:
            r = [[max(0.0, b - a) for a, b in zip(p[i], q[i])] for i in range(K)]
        last = [r[i] if sum(r[i]) > 0 else list(q[i]) for i in range(K)] + [list(q[K])]
        return [float(v) for v in h], [np.asarray(row, dtype=np.float64) for row in last]

    def _stopping_law(self, h):  # P(tau = i), i = 0..K
        K = len(h) - 1
        if self.choose == "largest":
            return laws.stopping_law(h)
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
        h, last = self._parts(list(x_draft), p, q)
        return laws.stopped_law(x_draft, self._stopping_law(h), last)

    def sample(self, x_draft, p, q, rng):
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
        return np.array(x_draft[:tau] + [mrs.sample(last[tau], rng)])


BROKEN_BLOCK = {b.name: b for b in [
    BlockBug("residual_without_w", "The residual after stopping at tau is max(0, q - p), without the w_tau weight.",
             weighted_residual=False),
    BlockBug("h_without_slack", "h_i = s_i / (s_i + 1): the (1 - w_i) term of the denominator left out.", h_slack=False),
    BlockBug("smallest_qualifying", "tau is the smallest i >= 1 whose coin comes up, not the largest.", choose="smallest"),
    BlockBug("forward_first_failure", "Scans i = 1, 2, ... and stops at the first failed coin, like token-level.",
             choose="forward"),
    BlockBug("w_not_carried", "w_i = min(1, q_i(x_i) / p_i(x_i)): the ratio is not carried along the block.",
             carry_w=False),
]}
