"""Sampling warps: temperature, top-k, top-p (nucleus) and greedy as adjusted distributions.

Leviathan et al. 2023, section 2.2 ("Standardized Sampling"): every usual decoding method
is plain sampling from an adjusted distribution.  Speculative sampling then returns exactly
the warped target's law when MRS is handed the WARPED target rows, and as the draft rows the
distribution each draft token was ACTUALLY sampled from.  The draft's warp is free: any
adjustment of the draft, or none, keeps the output exact, and changes only how often drafts are
accepted (Leviathan's Discussion, section 6, suggests transforming the draft differently).
Warping the draft like the target is the usual choice, not a condition of exactness.  `Warped`
wraps a model: the target with the request's warp, the draft with the warp it samples from.  A
model that offers its logits (SmolLM2) is warped from them (`Warp.from_logits`: softmax(x / T), the
same law as warping its probabilities, in under half the time on a row of 49152).

Order of operations (as in common decoders): temperature, then top-k, then top-p.
Greedy (temperature 0) is its own branch: a one-hot at the argmax, ties to the lowest id.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specref.sampling import draft_length, keep_path, next_distributions
from specref.trees import check_tree, tree_distributions

# top-p first sorts only the tokens above these probabilities (one O(V) comparison instead
# of an O(V log V) sort of 49152 entries); if they do not reach the requested mass the
# nucleus is not inside them and the next threshold is tried, 0 meaning every token.  When
# their mass does reach it, every token of the nucleus is among them, so the result is the
# same as sorting the whole row.
_TOP_P_THRESHOLDS = (1e-3, 1e-6, 0.0)


@dataclass(frozen=True)
class Warp:
    temperature: float = 1.0  # 0 = greedy (one-hot argmax); otherwise probs ** (1 / T), renormalised
    top_k: int | None = None  # keep the k most likely tokens (None = all)
    top_p: float | None = None  # keep the smallest set of most likely tokens with mass >= top_p (None = all)

    def __post_init__(self):
        if not (np.isfinite(self.temperature) and self.temperature >= 0):
            raise ValueError(f"temperature must be a finite number >= 0 (0 = greedy), got {self.temperature}")
        if self.top_k is not None and (int(self.top_k) != self.top_k or self.top_k < 1):
            raise ValueError(f"top_k must be an integer >= 1 or None, got {self.top_k}")
        if self.top_p is not None and not (0.0 < self.top_p <= 1.0):
            raise ValueError(f"top_p must be in (0, 1] or None, got {self.top_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def __call__(self, probs: np.ndarray) -> np.ndarray:  # [..., V] -> float64 [..., V]
        """Apply the warp to each row of probabilities."""
        probs = np.asarray(probs, dtype=np.float64)
        if self.greedy:
            return greedy(probs)
        support = np.flatnonzero(np.any(probs > 0, axis=tuple(range(probs.ndim - 1))))  # columns some row uses
        if 2 * len(support) < probs.shape[-1]:  # a draft over part of the vocabulary: warp only those columns (every
            out = np.zeros_like(probs)          # step keeps a zero at zero, and top-k and top-p never pick one)
            out[..., support] = self(probs[..., support])
            return out
        if np.all(np.count_nonzero(probs, axis=-1) == 1):  # one-hot rows (a deterministic draft) are a fixed point
            return probs
        out = probs if self.temperature == 1.0 else temperature(probs, self.temperature)
        return self._truncate(out)

    def from_logits(self, logits: np.ndarray) -> np.ndarray:  # [..., V] -> float64 [..., V]
        """The rows self(softmax(logits)) gives, computed from the logits: softmax(x / T) is the same law as
        softmax(log softmax(x) / T), and one exp over the row replaces an exp, a log and a second exp.  The loop
        warps every row it scores (a tree of 5 nodes: 6 rows a call), so this is the cheap way for a target that
        offers its logits (`Warped`).  Greedy is the argmax of the logits, the same token as the probabilities'."""
        x = np.asarray(logits)
        if not np.issubdtype(x.dtype, np.floating) or x.ndim < 1 or x.shape[-1] == 0:
            raise ValueError(f"logits must be a non-empty float array [..., V], got {x.dtype} {x.shape}")
        top = x.max(axis=-1, keepdims=True)
        if not np.all(np.isfinite(top)):
            raise ValueError("every row of logits needs a finite largest entry (NaN, +inf, or a row of -inf found)")
        if self.greedy:
            return greedy(x)
        out = np.subtract(x, top, dtype=np.float64)  # in float64 straight from float32: exact, no copy first
        if self.temperature != 1.0:
            out /= self.temperature
        np.exp(out, out=out)
        out /= out.sum(axis=-1, keepdims=True)
        return self._truncate(out)

    def _truncate(self, out: np.ndarray) -> np.ndarray:  # [..., V] -> [..., V]
        """top-k, then top-p, after the temperature."""
        if self.top_k is not None:
            out = top_k(out, self.top_k)
        if self.top_p is not None and self.top_p < 1.0:
            out = top_p(out, self.top_p)
        return out


def greedy(probs: np.ndarray) -> np.ndarray:  # [..., V] -> [..., V] one-hot
    """One-hot at the argmax of each row (ties: lowest token id)."""
    out = np.zeros(probs.shape, dtype=np.float64)
    np.put_along_axis(out, np.argmax(probs, axis=-1)[..., None], 1.0, axis=-1)
    return out


def temperature(probs: np.ndarray, T: float) -> np.ndarray:  # [..., V] -> [..., V]
    """softmax(log(probs) / T): the same as dividing the logits by T. Zero stays zero."""
    with np.errstate(divide="ignore"):
        logp = np.log(probs) / T  # [..., V], -inf where probs == 0
    logp -= logp.max(axis=-1, keepdims=True)
    e = np.exp(logp)
    return e / e.sum(axis=-1, keepdims=True)


def top_k(probs: np.ndarray, k: int) -> np.ndarray:  # [..., V] -> [..., V]
    """Keep the k most likely tokens of each row (ties at the boundary: argpartition's pick), renormalise."""
    V = probs.shape[-1]
    if k >= V:
        return probs
    keep = np.argpartition(-probs, k - 1, axis=-1)[..., :k]  # [..., k]
    out = np.zeros_like(probs)
    np.put_along_axis(out, keep, np.take_along_axis(probs, keep, axis=-1), axis=-1)
    return out / out.sum(axis=-1, keepdims=True)


def _top_p_row(row: np.ndarray, p: float) -> np.ndarray:  # [V] -> [V]
    target = p * row.sum()
    order = None
    for threshold in _TOP_P_THRESHOLDS:  # look at the likely tokens first; all of them last
        cand = np.flatnonzero(row > threshold) if threshold > 0 else np.arange(row.shape[0])
        order = cand[np.argsort(-row[cand], kind="stable")]  # ties keep index order, as a full sort would
        cum = np.cumsum(row[order])
        if cum.size and cum[-1] >= target:  # the nucleus lies inside the candidates
            break
    n = min(int(np.searchsorted(cum, target, side="left")) + 1, len(order))  # keep the crossing token
    out = np.zeros_like(row)
    out[order[:n]] = row[order[:n]]
    return out / out.sum()


def top_p(probs: np.ndarray, p: float) -> np.ndarray:  # [..., V] -> [..., V]
    """Nucleus: keep the smallest set of most likely tokens whose mass is >= p, renormalise."""
    flat = probs.reshape(-1, probs.shape[-1])  # [rows, V]
    return np.stack([_top_p_row(r, p) for r in flat]).reshape(probs.shape)


class Warped:
    """A model whose every output row is adjusted by `warp`: the target with the request's warp, the draft with any."""

    def __init__(self, model, temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None):
        self.model = model
        self.warp = Warp(temperature, top_k, top_p)

    def __call__(self, tokens: np.ndarray) -> np.ndarray:  # [n] -> [n, V]
        return self.next_probs(tokens, len(tokens))

    def next_probs(self, tokens: np.ndarray, k: int) -> np.ndarray:  # [n] -> [k, V]
        """The wrapped model's rows for the last k positions, warped: from its logits if it offers them
        (`Warp.from_logits`, one softmax at the temperature), else from its probabilities."""
        logits = getattr(self.model, "next_logits", None)
        if logits is None:
            return self.warp(next_distributions(self.model, tokens, k))
        return _rows(self.warp.from_logits(logits(tokens, k)), k, self.model, len(tokens))

    def draft_length(self, tokens: np.ndarray, K: int) -> int:
        """The wrapped model's (a warp does not change how far a draft drafts)."""
        return draft_length(self.model, tokens, K)

    def score_tree(self, tokens: np.ndarray, tree_tokens, parents) -> np.ndarray:  # [n], [N], [N] -> [N+1, V]
        """The wrapped model's rows for a tree of drafts (`specref.trees.tree_distributions`), warped: from its
        logits if it offers them (`tree_logits`), as `next_probs`."""
        logits = getattr(self.model, "tree_logits", None)
        if logits is None:
            return self.warp(tree_distributions(self.model, tokens, tree_tokens, parents))
        t, par = check_tree(tree_tokens, parents)
        return _rows(self.warp.from_logits(logits(tokens, t, par)), t.size + 1, self.model, len(tokens))

    def keep_path(self, nodes) -> None:  # [m] -> None
        """The wrapped model's (`specref.sampling.keep_path`)."""
        keep_path(self.model, nodes)

    def __repr__(self) -> str:
        return f"Warped({self.model!r}, {self.warp})"


def _rows(out: np.ndarray, k: int, model, n: int) -> np.ndarray:  # [k, V] -> [k, V]
    """out, after checking the model gave k rows (for n tokens)."""
    if out.ndim != 2 or out.shape[0] != k:
        raise ValueError(f"{model!r} returned logits of shape {out.shape} for {n} tokens; expected [{k}, V] rows")
    return out
