"""Modified rejection sampling (MRS): turn draft tokens into exact target samples.

This file stands alone (NumPy only) so it can be copied into other code.

Letters follow Chen et al. 2023, "Accelerating Large Language Model Decoding with
Speculative Sampling": p is the DRAFT distribution, q is the TARGET distribution, K is
the number of draft tokens.  Leviathan et al. 2023 swap the letters (their p is the
target, their q the draft, their gamma our K).  Every function here takes p before q.

The rule (Chen, section "Modified Rejection Sampling"; Leviathan, section 2.3):
a draft token x ~ p is accepted with probability min(1, q(x) / p(x)); on rejection a
token is drawn from the residual (q - p)_+ = max(0, q - p) / sum(max(0, q - p)).
Theorem 1 (Chen) / A.1 (Leviathan): the result is distributed exactly as q, because
P(X = x) = min(p(x), q(x)) + (1 - alpha) * residual(x) = q(x) with
alpha = sum_x min(p(x), q(x)).

Numerical choices, made on purpose:
- accept iff u < q(x) / p(x) with u ~ U[0, 1): the strict `<` means a token with
  q(x) = 0 is never accepted, even if u = 0 is drawn;
- p(x) = 0 for a drafted token is an error (it could not have been drawn from p);
- when p == q the residual is all zeros (0 / 0): it is never needed (acceptance is
  certain), and `residual` returns q instead of NaN;
- every computation is in float64; inputs must be valid distributions up to TOL.
"""

from __future__ import annotations

import numpy as np

# Inputs must sum to 1 within this absolute tolerance (float32 softmax over a
# 49152-token vocabulary is off by about 1e-6; anything beyond 1e-4 is a bug upstream).
TOL = 1e-4


def check_distribution(d: np.ndarray, name: str, V: int | None = None) -> np.ndarray:  # [..., V] -> float64 [..., V]
    """Return `d` as float64 after checking that each row is a probability distribution."""
    d = np.asarray(d, dtype=np.float64)
    if d.ndim == 0 or d.shape[-1] == 0:
        raise ValueError(f"{name} must be an array of probabilities with a last axis of size V >= 1, got shape {d.shape}")
    if V is not None and d.shape[-1] != V:
        raise ValueError(f"{name} has vocabulary size {d.shape[-1]} but {V} was expected (shape {d.shape})")
    if d.min() >= 0 and np.abs(d.sum(axis=-1) - 1.0).max() <= TOL:  # fast path (NaN fails `>=`)
        return d
    if not np.all(np.isfinite(d)):
        raise ValueError(f"{name} contains NaN or infinity")
    if np.any(d < 0):
        raise ValueError(f"{name} has negative probabilities (min {d.min():.3g}); expected values in [0, 1]")
    sums = d.sum(axis=-1)
    worst = np.max(np.abs(sums - 1.0))
    if worst > TOL:
        raise ValueError(f"{name} does not sum to 1 (off by {worst:.3g} > tolerance {TOL:g}); pass normalised probabilities")
    return d


def acceptance_rate(p: np.ndarray, q: np.ndarray) -> float:  # [V], [V] -> scalar (or [..., V] -> [...])
    """alpha = sum_x min(p(x), q(x)) = 1 - total variation distance (Leviathan Def. 3.1, Thm 3.5).

    For stacked rows [..., V] it returns one alpha per row.
    """
    p = check_distribution(p, "p (draft)")
    q = check_distribution(q, "q (target)", p.shape[-1])
    return float(np.minimum(p, q).sum(axis=-1)) if p.ndim == 1 else np.minimum(p, q).sum(axis=-1)


def _excess(p: np.ndarray, q: np.ndarray) -> np.ndarray:  # [V], [V] -> [V] unnormalised, inputs checked
    r = q - p
    np.maximum(r, 0.0, out=r)  # Chen, MRS section: (q(x) - p(x))_+ before normalising
    return r if r.sum() > 0.0 else q  # p == q (to float precision): nothing to resample; q (documented)


def _residual(p: np.ndarray, q: np.ndarray) -> np.ndarray:  # [V], [V] -> [V], inputs already checked
    r = _excess(p, q)
    return r / r.sum()


def residual(p: np.ndarray, q: np.ndarray) -> np.ndarray:  # [V], [V] -> [V]
    """norm(max(0, q - p)), the distribution sampled after a rejection; q itself when p == q."""
    p = check_distribution(p, "p (draft)")
    q = check_distribution(q, "q (target)", p.shape[-1])
    if p.ndim != 1:
        raise ValueError(f"residual takes one pair of distributions [V], got shape {p.shape}")
    return _residual(p, q)


# Inverse-CDF sampling in two levels: a cumulative sum over 49152 entries is a slow,
# sequential pass, so sum blocks of _BLOCK entries (a fast vectorised reduction), pick the
# block by the cumulative sum of the block sums, then the token inside that block.  This is
# exact: the two steps together are the inverse CDF.
_BLOCK = 256


def _invert(w: np.ndarray, target: float) -> int:  # [m] nonnegative weights, 0 <= target < sum -> index
    # searchsorted on the cumulative sum with side="right" skips zero-width intervals, so a
    # zero-weight entry is never returned; rounding past the end falls back to the last entry
    # with weight.
    i = int(np.searchsorted(np.cumsum(w), target, side="right"))
    if i >= len(w) or w[i] <= 0.0:
        i = int(np.flatnonzero(w)[-1])
    return i


def sample(d: np.ndarray, rng: np.random.Generator) -> int:  # [V] nonnegative weights -> token id
    """Draw one token with probability proportional to d (need not be normalised), one uniform from rng."""
    u = rng.random()
    V = d.shape[0]
    if V <= 4 * _BLOCK:
        return _invert(d, u * d.sum())
    n_blocks = -(-V // _BLOCK)
    padded = d if V == n_blocks * _BLOCK else np.concatenate([d, np.zeros(n_blocks * _BLOCK - V)])
    blocks = padded.reshape(n_blocks, _BLOCK)  # [n_blocks, _BLOCK]
    mass = blocks.sum(axis=1)  # [n_blocks]
    c = np.cumsum(mass)
    target = u * c[-1]
    j = _invert(mass, target)  # the block (it has mass > 0)
    below = c[j - 1] if j > 0 else 0.0
    return j * _BLOCK + _invert(blocks[j], min(max(target - below, 0.0), mass[j]))


def _check_token(x, V: int, name: str) -> int:
    if not (isinstance(x, (int, np.integer)) and 0 <= int(x) < V):
        raise ValueError(f"{name} must be a token id in [0, {V}), got {x!r}")
    return int(x)


def _accept(x: int, p: np.ndarray, q: np.ndarray, u: float, lenience: float = 1.0) -> bool:
    # Chen Alg. 2, line "if r < min(1, q(x)/p(x))"; with lenience l (Leviathan A.5) the
    # draft's probability is scaled by l first: accept iff u < q(x) / (l * p(x)).
    if p[x] <= 0.0:
        raise ValueError(f"draft token {x} has p(x) = 0 under the draft distribution: it cannot have been drawn from p")
    return u < q[x] / (lenience * p[x])


def mrs(x: int, p: np.ndarray, q: np.ndarray, rng: np.random.Generator) -> tuple[int, bool]:  # id, [V], [V]
    """One draft token x ~ p in, one token ~ q out, and whether x was accepted (Chen, Theorem 1)."""
    p = check_distribution(p, "p (draft)")
    q = check_distribution(q, "q (target)", p.shape[-1])
    if p.ndim != 1:
        raise ValueError(f"mrs takes one pair of distributions [V], got shape {p.shape}; use verify for K tokens")
    x = _check_token(x, p.shape[-1], "x")
    if _accept(x, p, q, rng.random()):
        return x, True
    return sample(_excess(p, q), rng), False  # sample() normalises


def _check_block(x_draft, p, q) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    x_draft = np.asarray(x_draft)
    if x_draft.ndim != 1 or x_draft.size < 1 or not np.issubdtype(x_draft.dtype, np.integer):
        raise ValueError(f"x_draft must be a 1-D integer array of K >= 1 draft tokens, got shape {x_draft.shape} dtype {x_draft.dtype}")
    K = x_draft.shape[0]
    p = check_distribution(p, "p (draft)")
    if p.ndim != 2 or p.shape[0] != K:
        raise ValueError(f"p must have shape [K, V] = [{K}, V] (one draft distribution per draft token), got {p.shape}")
    V = p.shape[1]
    q = check_distribution(q, "q (target)", V)
    if q.ndim != 2 or q.shape[0] != K + 1:
        raise ValueError(f"q must have shape [K + 1, V] = [{K + 1}, {V}] (target after 0..K draft tokens), got {q.shape}")
    if np.any((x_draft < 0) | (x_draft >= V)):
        raise ValueError(f"x_draft has token ids outside [0, {V}): {x_draft.tolist()}")
    return x_draft, p, q


def _verify(x_draft, p, q, rng, lenience: float) -> np.ndarray:  # [K], [K, V], [K+1, V] -> [n]
    x_draft, p, q = _check_block(x_draft, p, q)
    K = x_draft.shape[0]
    out = []
    for t in range(K):  # Alg. 2, "for t = 1 : K" (0-based here)
        x = int(x_draft[t])
        u = rng.random()  # Alg. 2, "Sample r ~ U[0, 1]": one fresh draw per position
        if _accept(x, p[t], q[t], u, lenience):  # Alg. 2, "if r < min(1, q/p)"
            out.append(x)  # "set x_{n+t} <- x~_t"
        else:  # "sample x_{n+t} ~ (q - p)_+ and exit for loop"
            out.append(sample(_excess(p[t], q[t]), rng))  # sample() normalises
            return np.array(out, dtype=np.int64)
    out.append(sample(q[K], rng))  # Alg. 2, "if all tokens are accepted, sample extra token"
    return np.array(out, dtype=np.int64)


def verify(x_draft: np.ndarray, p: np.ndarray, q: np.ndarray,
           rng: np.random.Generator) -> np.ndarray:  # [K], [K, V], [K+1, V] -> [n], 1 <= n <= K+1
    """Chen Alg. 2's accept/reject loop: the accepted prefix of x_draft plus one token from the target.

    p[t] is the draft distribution x_draft[t] was drawn from; q[t] is the target's
    distribution at the same position, q[K] the one after all K drafts.  The extra token
    is a draw from the residual (q[t] - p[t])_+ after a rejection at t, or the bonus token
    from q[K] when every draft is accepted.
    """
    return _verify(x_draft, p, q, rng, 1.0)


def verify_lenient(x_draft: np.ndarray, p: np.ndarray, q: np.ndarray, rng: np.random.Generator,
                   lenience: float) -> np.ndarray:  # [K], [K, V], [K+1, V] -> [n]
    """LOSSY verify with Leviathan's lenience l in (0, 1] (A.5): accept iff u < q(x) / (l p(x)).

    The output is no longer distributed as q.  What still holds: no token is emitted with
    probability above q(x) / l at any position (rare target tokens stay rare).  l = 1 is
    exact MRS.  The residual after a rejection is the usual (q - p)_+.
    """
    if not 0.0 < lenience <= 1.0:
        raise ValueError(f"lenience must be in (0, 1], got {lenience}")
    return _verify(x_draft, p, q, rng, lenience)


def verify_greedy(x_draft: np.ndarray, q: np.ndarray) -> np.ndarray:  # [K], [K+1, V] -> [n]
    """Temperature 0: accept drafts while each equals the target's argmax, then add the target's token.

    This is MRS with one-hot p and q (the Qualcomm post's greedy case): the draft is
    accepted iff it is the argmax; the residual of one-hot q minus one-hot p is q's argmax.
    Ties break to the lowest token id, as np.argmax does.
    """
    x_draft = np.asarray(x_draft)
    q = np.asarray(q)
    if x_draft.ndim != 1 or x_draft.size < 1 or not np.issubdtype(x_draft.dtype, np.integer):
        raise ValueError(f"x_draft must be a 1-D integer array of K >= 1 draft tokens, got shape {x_draft.shape}")
    K = x_draft.shape[0]
    if q.ndim != 2 or q.shape[0] != K + 1:
        raise ValueError(f"q must have shape [K + 1, V] = [{K + 1}, V], got {q.shape}")
    if not np.all(np.isfinite(q)):
        raise ValueError("q contains NaN or infinity")
    best = np.argmax(q, axis=-1)  # [K+1] the target's greedy token at each position
    out = []
    for t in range(K):
        if int(x_draft[t]) != int(best[t]):
            break
        out.append(int(x_draft[t]))
    out.append(int(best[len(out)]))  # correction after a mismatch, or the bonus token
    return np.array(out, dtype=np.int64)


def output_law(p: np.ndarray, q: np.ndarray) -> np.ndarray:  # [V], [V] -> [V]
    """Exact law of mrs's output: min(p, q) + (1 - alpha) * residual (Theorem 1's two terms)."""
    p = check_distribution(p, "p (draft)")
    q = check_distribution(q, "q (target)", p.shape[-1])
    alpha = np.minimum(p, q).sum()
    return np.minimum(p, q) + (1.0 - alpha) * _residual(p, q)


def lenient_acceptance_rate(p: np.ndarray, q: np.ndarray, lenience: float) -> float:  # [V], [V] -> scalar
    """Leviathan A.5 in Chen's letters: alpha_l = sum_x min(p(x), q(x) / l)."""
    p = check_distribution(p, "p (draft)")
    q = check_distribution(q, "q (target)", p.shape[-1])
    if not 0.0 < lenience <= 1.0:
        raise ValueError(f"lenience must be in (0, 1], got {lenience}")
    return float(np.minimum(p, q / lenience).sum())
