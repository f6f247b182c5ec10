"""Modified rejection sampling (MRS) for a chain of drafts: K draft tokens in, exact target samples out.

This file stands alone (NumPy only): copy it into your code.  Its companion mrs_tree.py verifies
trees of drafts with the same `sample` and input checks: copy both for trees.  The portable vectors
(specref/proof/mrs_vectors.json) check a copy of this file against RANDOMNESS and SAMPLING below.

Vocabulary, used in this sense everywhere in specref:
    draft tokens     x_draft[0..K-1], proposed by the draft: x_draft[t] ~ p[t]
    accepted tokens  the draft tokens kept: a prefix of x_draft
    recovered token  drawn from the residual (q - p)_+ at the first rejection
    bonus token      drawn from q[K] when all K draft tokens are accepted
A verifier returns the accepted tokens and then one recovered or bonus token: 1 to K + 1 tokens.

Letters follow Chen et al. 2023, "Accelerating Large Language Model Decoding with
Speculative Sampling": p is the DRAFT distribution, q is the TARGET distribution, K is
the number of draft tokens.  Leviathan et al. 2023 swap the letters (their p is the
target, their q the draft, their gamma our K).  Every function here takes p before q.

The rule (Chen, section "Modified Rejection Sampling"; Leviathan, section 2.3):
a draft token x ~ p is accepted with probability min(1, q(x) / p(x)); on rejection a
token is drawn from the residual (q - p)_+ = max(0, q - p) / sum(max(0, q - p)).
Theorem 1 (Chen) / A.1 (Leviathan): the result is distributed exactly as q, because
P(X = x) = min(p(x), q(x)) + (1 - beta) * residual(x) = q(x) with
beta = sum_x min(p(x), q(x)), the acceptance probability at this prefix (Leviathan's alpha is its
average over prefixes).

Chen's Algorithm 2, the lines `verify` implements, numbered as in specref/sampling.py (the
paper prints no numbers: line 1 is "Given lookahead K ...", line 8 the target's K + 1 sets
of logits).  Chen's t runs 1..K, ours 0..K-1: Chen's x~_t is x_draft[t-1], his
p(x | x_1..x_{n+t-1}) is p[t-1], and the target after all K drafts is q[K].
     9      for t = 1 : K do
    10          Sample r ~ U[0, 1]
    11          if r < min(1, q(x~_t | ...) / p(x~_t | ...)) then set x_{n+t} <- x~_t, n <- n + 1
    12          else sample x_{n+t} ~ (q - p)_+ and exit the for loop
    13      end for
    14      If all K were accepted, sample x_{n+K+1} ~ q(x | x_1..x_n, x~_1..x~_K), n <- n + 1

Block verification (Sun, Mendlovic, Leviathan et al., "Block Verification Accelerates
Speculative Decoding", ICLR 2025, their Algorithm 2) takes the same inputs and decides on the
whole block at once; `verify_block` implements it.  Steps as restated, in our letters, in
docs/block_verification.md in the specref repository (1-based: p_i is p[i-1], q_i is q[i-1], q_{K+1} is q[K], x_i is x_draft[i-1]):
    1   w_0 = 1; for i = 1..K: w_i = min(1, w_{i-1} * q_i(x_i) / p_i(x_i))
    2   for i = 1..K-1: r_i(x) = max(0, w_i * q_{i+1}(x) - p_{i+1}(x)), s_i = sum_x r_i(x),
        h_i = s_i / (s_i + 1 - w_i) (1 when the denominator is 0); h_0 = 1, h_K = w_K
    3   tau = the largest i in 0..K with eta_i <= h_i, eta_1..eta_K independent uniforms
    4   output x_1..x_tau, then one token from q_{K+1} if tau = K, else from
        norm(max(0, w_tau * q_{tau+1} - p_{tau+1})) (for tau = 0 the usual (q_1 - p_1)_+)
It keeps the output exactly distributed as the target and maximises the expected number of
tokens per call (never below `verify`'s) among verifiers that see only these rows.

Randomness: RANDOMNESS below lists the uniforms each function draws, in order, and SAMPLING how
`sample` turns one uniform into a token; another implementation fed the same uniforms returns the
same tokens.

Numerical choices, made on purpose:
- accept iff u < q(x) / p(x) with u in [0, 1): the strict `<` means a token with
  q(x) = 0 is never accepted, even if u = 0 is drawn;
- p(x) = 0 for a drafted token is an error (it could not have been drawn from p);
- verify_block: a coin eta_i comes up iff eta_i < h_i (strict, like the accept test: the
  same law as the paper's <=, and h_i = 0 never stops there).  w_i is computed without
  dividing by anything that can be 0 and without forming q / p when w_{i-1} q_i(x_i) >= p_i(x_i)
  (then w_i = 1), so it cannot overflow or become NaN; q_i(x_i) = 0 makes w_i and every later
  w, r, s and h exactly 0, so x_i is never accepted.  A w_i below the smallest float64
  (about 5e-324) rounds to 0, which changes stopping probabilities by about that much.  When
  s_i + 1 - w_i = 0 (w_i = 1 and p_{i+1} == q_{i+1}), h_i = 1 as the paper defines it; then
  (in exact arithmetic) w_{i+1} = 1 and h_{i+1} = 1 as well, so the scan stops above i and
  the residual at i (all zero) is not needed; if rounding ever asks for it, it falls back to
  q[i] like `residual`, never NaN;
- when p == q the residual max(0, q - p) is all zeros (0 / 0 after normalising): it is
  never needed (acceptance is certain), and `residual` returns q instead of NaN;
- every computation is in float64; inputs must be valid distributions up to TOL.
"""

from __future__ import annotations

import numpy as np

# Inputs must sum to 1 within this absolute tolerance (float32 softmax over a
# 49152-token vocabulary is off by about 1e-6; anything beyond 1e-4 is a bug upstream).
TOL = 1e-4

# sample() works in blocks of this many tokens when V > 4 * _BLOCK.
_BLOCK = 256


# The documented use of rng (see "Randomness" above); the portable vectors quote these texts.
RANDOMNESS = """\
Randomness.  `rng` is anything whose random() returns a float u in [0, 1), such as
np.random.default_rng(seed); nothing else of it is used.  verify draws, in this order:
    for t = 0, 1, ..., K-1:
        one rng.random() = u for the accept test of x = x_draft[t]: accept iff u < q[t, x] / p[t, x];
        on rejection, one rng.random() for sample(max(0, q[t] - p[t])) (q[t] if that is all
        zero), which is the residual draw, and stop;
    if all K were accepted, one rng.random() for sample(q[K]), the bonus token.
A rejection at position t therefore uses t + 2 uniforms, accepting all K uses K + 1.
verify_lenient draws the same way (accept iff u < q[t, x] / (l p[t, x])); accept_or_resample is one step
of verify (one uniform, plus one for the residual on rejection); verify_greedy draws none.
verify_block draws, in this order:
    for i = K, K-1, ..., 1 (the stopping coins, last position first):
        one rng.random() = eta_i; if eta_i < h_i, then tau = i and the scan stops;
    if no coin came up, tau = 0 (h_0 = 1 needs no coin);
    then one rng.random() for the last token: sample(q[K]) if tau = K, the bonus token,
    else sample(max(0, w_tau q[tau] - p[tau])) (q[tau] if that is all zero), the residual draw.
Stopping at tau >= 1 therefore uses K - tau + 2 uniforms, tau = 0 uses K + 1.
"""

SAMPLING = """\
sample(d, rng) maps its one uniform u to the token of the inverse CDF of d / S, S = sum(d):
the smallest i with u * S < d[0] + ... + d[i].  A token with d[i] = 0 is never returned.
For V <= 1024 it computes exactly that with one cumulative sum (S by np.sum).  For
V > 1024 it works in two levels, because a cumulative sum over 49152 entries is slow: pad
d with zeros to a multiple of 256, let M[j] be the sum of block j (d[256 j : 256 (j+1)]),
S = M[0] + ... + M[-1] and target = u * S; take the smallest block j with
target < M[0] + ... + M[j], then inside block j the smallest i with
target - (M[0] + ... + M[j-1]) < d[256 j] + ... + d[256 j + i]; the token is 256 j + i.
In exact arithmetic both give the same token; in float64 the sums round differently, so
they can differ only when u lies within about V * 1e-16 of a step (d[0] + ... + d[i]) / S.  If rounding puts the target at
or past the total, the last token with d > 0 is returned.
"""


# ---------------------------------------------------------------- input checks

def check_distribution(d: np.ndarray, name: str, V: int | None = None) -> np.ndarray:  # [..., V] -> float64 [..., V]
    """Return `d` as float64 after checking that each row along the last axis is a probability distribution.

    Requires nothing; raises ValueError naming `name` if d is not finite, has a negative
    entry, a row not summing to 1 within TOL, an empty last axis, or a last axis other than V.
    """
    d = np.asarray(d, dtype=np.float64)
    if d.ndim == 0 or d.shape[-1] == 0:
        raise ValueError(f"{name} must be an array of probabilities with a last axis of size V >= 1, got shape {d.shape}")
    if V is not None and d.shape[-1] != V:
        raise ValueError(f"{name} has vocabulary size {d.shape[-1]} but {V} was expected (shape {d.shape})")
    if d.ndim == 1:  # fast path for one row, without NumPy calls on the scalars
        if _row_sum_if_valid(d) is not None:
            return d
    elif d.min() >= 0 and np.abs(d.sum(axis=-1) - 1.0).max() <= TOL:  # fast path for rows
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


def _row_sum_if_valid(d: np.ndarray) -> float | None:  # float64 [V] -> sum(d), or None if d fails the fast check
    total = float(d.sum())
    return total if d.min() >= 0 and abs(total - 1.0) <= TOL else None  # NaN fails both


def _check_pair(p, q, function: str, hint: str = "") -> tuple[np.ndarray, np.ndarray]:  # [V], [V] -> float64 [V], [V]
    p = check_distribution(p, "p (draft)")
    q = check_distribution(q, "q (target)", p.shape[-1])
    if p.ndim != 1 or q.ndim != 1:
        raise ValueError(f"{function} expects a single pair of distributions p [V], q [V], "
                         f"got shapes {p.shape} and {q.shape}{hint}")
    return p, q


def _check_token(x, V: int, name: str) -> int:
    if not (isinstance(x, (int, np.integer)) and 0 <= int(x) < V):
        raise ValueError(f"{name} must be a token id in [0, {V}), got {x!r}")
    return int(x)


def _check_drafted(x: int, p_x: float, t: int = 0) -> None:
    if not p_x > 0.0:
        raise ValueError(f"draft token {x} at position {t} has p(x) = 0 under the draft distribution: "
                         "it cannot have been drawn from p")


def _check_lenience(lenience: float) -> None:
    if not 0.0 < lenience <= 1.0:
        raise ValueError(f"lenience must be in (0, 1], got {lenience}")


def _check_verify_inputs(x_draft, p, q) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # [K], [K, V], [K+1, V]
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
    for t, x in enumerate(x_draft.tolist()):
        _check_drafted(x, p[t, x], t)
    return x_draft, p, q


# ---------------------------------------------------------------- the laws

def acceptance_rate(p: np.ndarray, q: np.ndarray) -> float | np.ndarray:  # [V], [V] -> scalar (or [..., V] -> [...])
    """beta = sum_x min(p(x), q(x)) = 1 - TV(p, q): the probability that a draft token from p is accepted (Leviathan Def. 3.1, Thm 3.5).

    Leviathan's acceptance rate alpha is the average of beta over the prefixes a run meets
    (Def. 3.2): pass the rows of those prefixes stacked and average the result.

    Requires: p and q distributions of the same shape [V] or stacked [..., V] (one beta per row).
    """
    p = check_distribution(p, "p (draft)")
    q = check_distribution(q, "q (target)", p.shape[-1])
    return float(np.minimum(p, q).sum(axis=-1)) if p.ndim == 1 else np.minimum(p, q).sum(axis=-1)


def _excess(p: np.ndarray, q: np.ndarray) -> np.ndarray:  # [V], [V] -> [V] unnormalised, inputs checked
    r = q - p
    np.maximum(r, 0.0, out=r)  # Alg. 2, line 12: (q(x) - p(x))_+, before normalising
    return r if r.sum() > 0.0 else q  # p == q (to float precision): nothing to resample; q (documented)


def _residual(p: np.ndarray, q: np.ndarray) -> np.ndarray:  # [V], [V] -> [V], inputs already checked
    r = _excess(p, q)
    return r / r.sum()


def residual(p: np.ndarray, q: np.ndarray) -> np.ndarray:  # [V], [V] -> [V]
    """norm(max(0, q - p)), the distribution sampled after a rejection; q itself when p == q.

    Requires: p and q distributions [V] (a single pair).
    """
    p, q = _check_pair(p, q, "residual")
    return _residual(p, q)


def output_law(p: np.ndarray, q: np.ndarray) -> np.ndarray:  # [V], [V] -> [V]
    """Exact law of accept_or_resample's output: min(p, q) + (1 - beta) * residual (Theorem 1's two terms), which equals q.

    Requires: p and q distributions [V] (a single pair).
    """
    p, q = _check_pair(p, q, "output_law")
    beta = np.minimum(p, q).sum()  # the acceptance probability at this prefix
    return np.minimum(p, q) + (1.0 - beta) * _residual(p, q)


def lenient_acceptance_rate(p: np.ndarray, q: np.ndarray, lenience: float) -> float:  # [V], [V] -> scalar
    """Leviathan A.5's acceptance probability with lenience l, at one prefix, in Chen's letters: beta_l = sum_x min(p(x), q(x) / l).

    Requires: p and q distributions [V] (a single pair); 0 < l <= 1.  Leviathan writes
    sum_x min(p(x) / l, q(x)) with the letters swapped.
    """
    p, q = _check_pair(p, q, "lenient_acceptance_rate")
    _check_lenience(lenience)
    return float(np.minimum(p, q / lenience).sum())


# ---------------------------------------------------------------- drawing one token

def _invert(w: np.ndarray, target: float, c: np.ndarray | None = None) -> int:  # [m] weights, 0 <= target < sum -> index
    # searchsorted on the cumulative sum c = np.cumsum(w) (computed here unless given) with side="right" gives the
    # smallest i with target < w[0] + ... + w[i]; it skips zero-width intervals, so a zero-weight entry is
    # never returned.  Rounding past the end falls back to the last entry with weight.
    i = int(np.searchsorted(np.cumsum(w) if c is None else c, target, side="right"))
    if i >= len(w) or w.item(i) <= 0.0:
        i = int(np.flatnonzero(w)[-1])
    return i


def sample(d: np.ndarray, rng: np.random.Generator) -> int:  # [V] nonnegative weights -> token id
    """Draw one token with probability d[i] / sum(d) by the inverse CDF of one rng.random() (see SAMPLING).

    Requires: d [V] finite and nonnegative (not re-checked here, for speed: callers pass checked
    distributions or their residuals) with sum(d) > 0; d need not be normalised.
    """
    if d.ndim != 1:
        raise ValueError(f"sample draws from one vector of weights [V], got shape {d.shape}")
    u = rng.random()
    V = d.shape[0]
    if V <= 4 * _BLOCK:
        total = d.sum()
        if not total > 0.0:
            raise ValueError(f"sample needs weights with a positive sum, got sum {total}")
        return _invert(d, u * total)
    n_blocks = -(-V // _BLOCK)
    padded = d if V == n_blocks * _BLOCK else np.concatenate([d, np.zeros(n_blocks * _BLOCK - V)])
    blocks = padded.reshape(n_blocks, _BLOCK)  # [n_blocks, _BLOCK]
    mass = blocks.sum(axis=1)  # [n_blocks] M[j]
    c = np.cumsum(mass)  # [n_blocks] M[0] + ... + M[j]
    S = c.item(-1)
    if not S > 0.0:
        raise ValueError(f"sample needs weights with a positive sum, got sum {S}")
    target = u * S
    j = _invert(mass, target, c)  # the block (it has mass > 0)
    below = c.item(j - 1) if j > 0 else 0.0
    return j * _BLOCK + _invert(blocks[j], min(max(target - below, 0.0), mass.item(j)))


# ---------------------------------------------------------------- exact MRS

def accept_or_resample(x: int, p: np.ndarray, q: np.ndarray, rng: np.random.Generator) -> tuple[int, bool]:  # id, [V], [V]
    """One draft token x ~ p in, one token ~ q out, and whether x was accepted (Chen, Theorem 1).

    Requires: p and q distributions [V] (a single pair); x a token id in [0, V) with p(x) > 0.
    """
    p, q = _check_pair(p, q, "accept_or_resample", "; use verify for K tokens")
    x = _check_token(x, p.shape[0], "x")
    _check_drafted(x, p[x])
    if rng.random() < q[x] / p[x]:  # Alg. 2, lines 10-11: r ~ U[0, 1]; if r < min(1, q(x) / p(x))
        return x, True  # line 11: then keep the draft
    return sample(_excess(p, q), rng), False  # line 12: else draw from (q - p)_+ (sample() normalises)


def verify(x_draft: np.ndarray, p: np.ndarray, q: np.ndarray,
           rng: np.random.Generator) -> np.ndarray:  # [K], [K, V], [K+1, V] -> [n], 1 <= n <= K+1
    """Chen's Algorithm 2, lines 9-14: the accepted prefix of x_draft plus one more token, distributed exactly as the target.

    Requires: x_draft [K] integer token ids, K >= 1; p [K, V] with p[t] the draft
    distribution x_draft[t] was drawn from, so p[t, x_draft[t]] > 0; q [K+1, V] with q[t]
    the target's distribution at the same position and q[K] the one after all K drafts.
    Uses rng as RANDOMNESS says: one uniform per accept test, one for the token
    after the last test.
    """
    x_draft, p, q = _check_verify_inputs(x_draft, p, q)
    K = x_draft.shape[0]
    out = []
    for t in range(K):  # line 9: for t = 1 : K (0-based here)
        x = int(x_draft[t])
        r = rng.random()  # line 10: sample r ~ U[0, 1]
        if r < q[t, x] / p[t, x]:  # line 11: if r < min(1, q(x) / p(x)); strict: q(x) = 0 never accepts
            out.append(x)  # line 11: then set x_{n+t} <- x~_t
        else:
            out.append(sample(_excess(p[t], q[t]), rng))  # line 12: else x_{n+t} ~ (q - p)_+, exit the loop
            return np.array(out, dtype=np.int64)
    out.append(sample(q[K], rng))  # line 14: all K accepted: extra token x_{n+K+1} ~ q[K]
    return np.array(out, dtype=np.int64)


def _block_w(x_draft: np.ndarray, p: np.ndarray, q: np.ndarray) -> np.ndarray:  # [K], [K, V], [K+1, V] -> [K+1]
    # Step 1 on checked inputs: w[i] = w_i, i = 0..K.
    K = x_draft.shape[0]
    w = np.ones(K + 1)  # w_0 = 1
    for i in range(1, K + 1):
        x = int(x_draft[i - 1])
        carried = w[i - 1] * q[i - 1, x]  # w_{i-1} q_i(x_i)
        # step 1: w_i = min(1, w_{i-1} q_i(x_i) / p_i(x_i)); divide only when the result is < 1
        w[i] = 1.0 if carried >= p[i - 1, x] else carried / p[i - 1, x]
    return w


def _block_residual(w_i: float, p_next: np.ndarray, q_next: np.ndarray) -> np.ndarray:  # [V], [V] -> [V] unnormalised
    # Step 2: r_i(x) = max(0, w_i q_{i+1}(x) - p_{i+1}(x)) (p[i], q[i] here); i = 0 gives (q_1 - p_1)_+.
    r = q_next * w_i
    r -= p_next
    return np.maximum(r, 0.0, out=r)


def _block_h(i: int, w: np.ndarray, p: np.ndarray, q: np.ndarray) -> tuple[float, np.ndarray | None]:  # 1 <= i <= K
    # Step 2: h_i, and r_i when it was computed.  h_K = w_K; h_i = s_i / (s_i + 1 - w_i) for i < K.
    # Two cases need no sum over the vocabulary: w_i = 0 makes r_i = 0, so h_i = 0 / 1 = 0; w_i = 1
    # makes it s_i / s_i = 1, or 0 / 0, which the paper defines as 1.  Otherwise 1 - w_i > 0.
    K = len(w) - 1
    if i == K or w[i] == 0.0 or w[i] == 1.0:
        return float(w[i]), None
    r = _block_residual(w[i], p[i], q[i])  # r_i
    s = float(r.sum())  # s_i
    return s / (s + (1.0 - w[i])), r


def verify_block(x_draft: np.ndarray, p: np.ndarray, q: np.ndarray,
                 rng: np.random.Generator) -> np.ndarray:  # [K], [K, V], [K+1, V] -> [n], 1 <= n <= K+1
    """Block verification (Sun et al. 2025, Algorithm 2): the longest prefix the whole block allows plus one more token, distributed exactly as the target.

    Requires: exactly verify's inputs (x_draft [K], K >= 1; p [K, V] with p[t, x_draft[t]] > 0;
    q [K+1, V]).  Returns, like verify, the kept drafts followed by one token; over the drafts
    and rng it keeps at least as many drafts on average as verify.  Uses rng as the module
    docstring says: stopping coins from the last position down, then one uniform for the last
    token.  h_i is computed only for the coins drawn (the scan usually stops early), which
    changes the cost, not the result.
    """
    x_draft, p, q = _check_verify_inputs(x_draft, p, q)
    K = x_draft.shape[0]
    w = _block_w(x_draft, p, q)  # step 1
    tau, r = 0, None  # step 3: h_0 = 1, so i = 0 always qualifies
    for i in range(K, 0, -1):  # step 3: the largest i with eta_i <= h_i, scanning down from K
        h_i, r_i = _block_h(i, w, p, q)
        if rng.random() < h_i:  # eta_i ~ U[0, 1) against step 2's h_i; strict: h_i = 0 never stops
            tau, r = i, r_i
            break
    out = [int(x) for x in x_draft[:tau]]  # step 4: keep x_1..x_tau
    if tau == K:
        out.append(sample(q[K], rng))  # step 4: all K kept: the bonus token from q_{K+1}
        return np.array(out, dtype=np.int64)
    if r is None:  # not computed by step 2 (tau = 0, or w_tau = 0 or 1)
        r = _block_residual(w[tau], p[tau], q[tau])  # step 4: norm(max(0, w_tau q_{tau+1} - p_{tau+1}))
    out.append(sample(r if r.sum() > 0.0 else q[tau], rng))  # sample() normalises; all zero: q (documented)
    return np.array(out, dtype=np.int64)


# ---------------------------------------------------------------- variants

def verify_lenient(x_draft: np.ndarray, p: np.ndarray, q: np.ndarray, rng: np.random.Generator,
                   lenience: float) -> np.ndarray:  # [K], [K, V], [K+1, V] -> [n], 1 <= n <= K+1
    """LOSSY verify with Leviathan's lenience l (A.5): accept iff u < q(x) / (l p(x)), otherwise exactly verify.

    Requires: verify's inputs, and 0 < l <= 1.  The output is no longer distributed as q;
    what still holds is that no token is emitted with probability above q(x) / l at any
    position (rare target tokens stay rare).  l = 1 is exact MRS.  Uses rng like verify.
    """
    _check_lenience(lenience)
    x_draft, p, q = _check_verify_inputs(x_draft, p, q)
    K = x_draft.shape[0]
    out = []
    for t in range(K):  # Alg. 2, line 9 (0-based here)
        x = int(x_draft[t])
        r = rng.random()  # line 10
        if r < q[t, x] / (lenience * p[t, x]):  # line 11 with Leviathan A.5's l: min(1, q(x) / (l p(x)))
            out.append(x)  # line 11: then set x_{n+t} <- x~_t
        else:
            out.append(sample(_excess(p[t], q[t]), rng))  # line 12: the usual residual (q - p)_+
            return np.array(out, dtype=np.int64)
    out.append(sample(q[K], rng))  # line 14: bonus token from q[K]
    return np.array(out, dtype=np.int64)


def verify_greedy(x_draft: np.ndarray, q: np.ndarray) -> np.ndarray:  # [K], [K+1, V] -> [n], 1 <= n <= K+1
    """Temperature 0: accept drafts while each equals the target's argmax, then add the target's argmax token.

    Requires: x_draft [K] integer token ids, K >= 1; q [K+1, V] finite scores (probabilities
    or logits).  Draws no randomness.  This is MRS with one-hot p and q (the Qualcomm post's
    greedy case): the draft is accepted iff it is the argmax, and the residual of one-hot q
    minus one-hot p is q's argmax.  Ties break to the lowest token id, as np.argmax does.
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
    for t in range(K):  # Alg. 2, line 9 with one-hot p and q
        if int(x_draft[t]) != int(best[t]):  # line 11: q(x) / p(x) is 1 or 0
            break
        out.append(int(x_draft[t]))  # line 11: then keep the draft
    out.append(int(best[len(out)]))  # line 12 (the correction after a mismatch) or 14 (the bonus token)
    return np.array(out, dtype=np.int64)
