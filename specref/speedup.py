"""The analytic speedup model of Leviathan et al. 2023, section 3, in Leviathan's letters.

beta   acceptance rate at one prefix: the chance that a draft token at that position is
       accepted, sum_x min(p(x), q(x)) over that position's two rows  (Def. 3.1, Thm 3.5)
alpha  expected acceptance rate, alpha = E[beta], the mean of beta over the prefixes met in
       generation  (section 3.1, Cor. 3.6); not beta of some average pair of rows
gamma  draft tokens per target call (Chen's K)
c      cost of one draft step / cost of one target decode step  (Def. 3.7)
c_hat  arithmetic operations per token of the draft / of the target  (Def. 3.10)

The functions here take (or return) alpha.  All assume Leviathan's simplification that the
betas of successive positions are iid with mean alpha.  The section 3.3 walltime model also
assumes that scoring gamma + 1 tokens in one target call costs the same as one decode step; on a
CPU it does not, so `walltime_improvement_measured` takes the measured cost of that call instead.
beta comes from specref.mrs for one pair of rows: `acceptance_rate`, or
`lenient_acceptance_rate` for Leviathan's A.5 lenience.  alpha is beta averaged over the
positions of a run; a run estimates it as its accepted drafts over the drafts examined
(`specref.runstats.RunStats.alpha_hat`, the maximum-likelihood alpha under the iid assumption).
"""

from __future__ import annotations

import numpy as np

from specref import trees


def _check(alpha, gamma=None, c=None, name_c="c"):
    a = np.asarray(alpha, dtype=np.float64)
    if np.any(~np.isfinite(a)) or np.any((a < 0) | (a > 1)):
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    if gamma is not None:
        g = np.asarray(gamma)
        if np.any(g < 0) or np.any(np.asarray(g, dtype=np.float64) != np.round(g)):
            raise ValueError(f"gamma must be an integer >= 0, got {gamma}")
    if c is not None and np.any(np.asarray(c, dtype=np.float64) < 0):
        raise ValueError(f"{name_c} must be >= 0, got {c}")
    return a


def expected_tokens(alpha, gamma):
    """Eq. 1: expected tokens per target call, (1 - alpha^(gamma+1)) / (1 - alpha); gamma + 1 at alpha = 1."""
    a = _check(alpha, gamma)
    g = np.asarray(gamma, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(a < 1.0, (1.0 - a ** (g + 1)) / (1.0 - a), g + 1.0)
    return out[()] if out.ndim == 0 else out


def walltime_improvement(alpha, gamma, c):
    """Theorem 3.8: (1 - alpha^(gamma+1)) / ((1 - alpha)(gamma c + 1)), over standard decoding."""
    _check(alpha, gamma, c)
    return expected_tokens(alpha, gamma) / (np.asarray(gamma) * np.asarray(c) + 1.0)


def operations_factor(alpha, gamma, c_hat):
    """Theorem 3.11: total arithmetic operations relative to standard decoding,
    (1 - alpha)(gamma c_hat + gamma + 1) / (1 - alpha^(gamma+1))."""
    _check(alpha, gamma, c_hat, "c_hat")
    return (np.asarray(gamma) * np.asarray(c_hat) + np.asarray(gamma) + 1.0) / expected_tokens(alpha, gamma)


def optimal_gamma(alpha: float, c: float, gamma_max: int = 64) -> int:
    """Section 3.5: the integer gamma in [1, gamma_max] that maximises Theorem 3.8 in float64 (smallest on ties).

    With c = 0 the exact improvement, 1 + alpha + ... + alpha^gamma, grows with gamma for every
    alpha > 0, but in float64 it stops growing once alpha^gamma is below about 1e-16, too small to
    change it: the answer is then the gamma where it stopped (16 for alpha = 0.1, 30 for 0.3, 53 for
    0.5), or gamma_max if it still grows there (alpha = 0.8, or 1, at gamma_max = 64).  With
    alpha = 0 no draft is ever accepted, every gamma gives 1, and the answer is 1.
    """
    _check(alpha, None, c)
    gammas = np.arange(1, gamma_max + 1)
    return int(gammas[np.argmax(walltime_improvement(alpha, gammas, c))])


def improvement_lower_bound(alpha, c):
    """Corollary 3.9: if alpha > c, gamma = 1 already gives (1 + alpha) / (1 + c) > 1."""
    _check(alpha, None, c)
    return (1.0 + np.asarray(alpha)) / (1.0 + np.asarray(c))


def walltime_improvement_measured(alpha, gamma, c, score_cost):
    """Theorem 3.8 with the target call's real cost: score_cost = time to score gamma + 1
    tokens in one call / time of one decode step (1 in Leviathan's model).

    One loop costs gamma c + score_cost decode steps and yields Eq. 1's tokens; standard
    decoding costs one decode step per token.
    """
    _check(alpha, gamma, c)
    if np.any(np.asarray(score_cost, dtype=np.float64) <= 0):
        raise ValueError(f"score_cost must be > 0, got {score_cost}")
    return expected_tokens(alpha, gamma) / (np.asarray(gamma) * np.asarray(c) + np.asarray(score_cost))


def plausible_score_cost(measured: float) -> tuple[float, bool]:
    """(the scoring cost to predict with, whether the measurement was noise).

    Scoring gamma + 1 tokens in one call does a decode step's work and more, so it cannot cost
    less than one decode step: a measured ratio below 1 is timing noise, and 1 is used instead,
    so that noise never predicts more speedup than free scoring.  Raises on a ratio that is not
    a positive number.
    """
    m = float(measured)
    if not m > 0 or m == float("inf"):
        raise ValueError(f"a measured scoring cost must be a positive finite ratio, got {measured}")
    return max(m, 1.0), m < 1.0


def monotone_fit(values) -> list[float]:
    """The non-decreasing sequence nearest to `values` in squared error (isotonic regression, by pooling adjacent
    violators): where a value dips below the one before it, the run of values involved is replaced by its mean.
    A curve of measured costs that should rise with the work done gets its dips averaged out, not ironed up to the
    highest reading as a running maximum would: one noisy high reading no longer raises the price of every call
    after it."""
    blocks: list[tuple[float, int]] = []  # (mean, count) of each pooled run, left to right
    for v in values:
        blocks.append((float(v), 1))
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            (m2, n2), (m1, n1) = blocks.pop(), blocks.pop()
            blocks.append(((m1 * n1 + m2 * n2) / (n1 + n2), n1 + n2))
    return [m for m, n in blocks for _ in range(n)]


def scoring_cost_curve(measured) -> list[float]:
    """The costs to predict with of scoring k + 1 tokens in one call, k = 1..n, from the measured ratios in that
    order: each at least 1 (`plausible_score_cost`), then made non-decreasing by `monotone_fit`.  A call that scores
    more tokens does all the work of one that scores fewer, so a measured dip (6 tokens timed cheaper than 5) is
    timing noise in one reading or the other: the two are priced at their mean, never a longer call below a
    shorter one."""
    return monotone_fit([plausible_score_cost(m)[0] for m in measured])


def tree_cost_curve(chain, tree: dict, nodes=None) -> list[float]:
    """The costs to predict with of scoring a tree of N nodes after its root, for N in `nodes` (increasing;
    default 1..len(chain)): the chain of N + 1 tokens' (`chain`, from `scoring_cost_curve`, one per N), or the
    tree's own cost where that is higher (`tree`: N -> measured ratio at a few sizes, made non-decreasing by
    `monotone_fit`, linear between them, none outside them), since a tree call also builds and applies its mask.
    Non-decreasing, like `scoring_cost_curve`: a tree larger than the largest measured costs at least as much."""
    measured = {int(n): ratio for n, ratio in tree.items()}  # keys may be strings, as stored in JSON
    sizes = sorted(measured)
    ratios = monotone_fit([plausible_score_cost(measured[n])[0] for n in sizes])
    out: list[float] = []
    for N, cost in zip(range(1, len(chain) + 1) if nodes is None else nodes, chain):
        if sizes and sizes[0] <= N <= sizes[-1]:
            cost = max(cost, float(np.interp(N, sizes, ratios)))
        out.append(max(cost, out[-1]) if out else cost)
    return out


def priced_costs(score_ratio: dict, tree_score_ratio: dict | None = None) -> tuple[dict, dict]:
    """({K: cost of scoring K + 1 tokens}, {N: cost of scoring a tree of N nodes}) to predict with, from the
    measured ratios by K and by N (`specref.apps.costs.measure_costs`; keys may be strings, as stored in JSON):
    `scoring_cost_curve` over the measured Ks in order, and `tree_cost_curve` on it for N = K."""
    score = {int(k): ratio for k, ratio in score_ratio.items()}
    ks = sorted(score)
    chain = scoring_cost_curve([score[k] for k in ks])
    return dict(zip(ks, chain)), dict(zip(ks, tree_cost_curve(chain, tree_score_ratio or {}, ks)))


def warped_costs(costs, warp: float) -> list[float]:
    """The costs of calls that score 2, 3, ... rows (costs[i]: i + 2 rows: a chain of K = i + 1 drafts, or a tree of
    N = i + 1 nodes, in decode steps) as a sampled loop pays them: each row it scores is also warped (temperature,
    top-p), at `warp` decode steps a row (`specref.apps.costs.warp_ratio`), and so is the one row of the decode step
    the costs are counted in: (cost + (i + 2) warp) / (1 + warp).  warp = 0 leaves them as they are; a warp below 0 is
    one cheaper than the softmax the costs were measured with (greedy, an argmax of the logits in its place, can come
    near 0 from either side), but never as cheap as -1 decode steps a row, which would make the decode step free."""
    if not (np.isfinite(warp) and warp > -1):
        raise ValueError(f"warp must be a finite cost > -1 in decode steps, got {warp}")
    return [(float(cost) + (i + 2) * warp) / (1.0 + warp) for i, cost in enumerate(costs)]


def predicted_from_timings(alpha, gamma, draft_call, target_call, base_call):
    """walltime_improvement_measured with costs read off one measured run: c = draft_call /
    base_call and score_cost = target_call / base_call (at least 1: `plausible_score_cost`),
    where base_call is the time of one decode step (a target call of standard decoding with the
    same warp), any time unit."""
    score_cost, _ = plausible_score_cost(target_call / base_call)
    return walltime_improvement_measured(min(alpha, 1.0), gamma, draft_call / base_call, score_cost)


def improvement_with_lengths(alpha, calls_by_gamma, c, score_cost):
    """walltime_improvement_measured for a draft that drafts a different number of tokens per call
    (`specref.sampling.draft_length`): calls_by_gamma[g] calls drafted g tokens (a histogram).

    Each call yields Eq. 1's tokens for its own gamma, so the tokens per call are Eq. 1 averaged
    over the calls; a call costs its gamma times c plus its scoring, in decode steps: score_cost
    is either one number, the mean target call, or one per gamma (score_cost[g] for a call that
    scored g + 1 tokens; 1 at g = 0, a decode step).  With every call at one gamma this is
    walltime_improvement_measured.
    """
    counts = np.asarray(calls_by_gamma, dtype=np.float64)
    if counts.ndim != 1 or counts.size == 0 or np.any(counts < 0) or counts.sum() <= 0:
        raise ValueError(f"calls_by_gamma must be a histogram of calls (counts >= 0, at least one call), got {calls_by_gamma}")
    gammas = np.arange(counts.size)
    _check(alpha, gammas, c)
    cost = np.asarray(score_cost, dtype=np.float64)
    if cost.ndim > 1 or (cost.ndim == 1 and cost.size != counts.size) or np.any(~(cost > 0)):
        raise ValueError(f"score_cost must be one positive number or one per gamma ({counts.size}), got {score_cost}")
    weights = counts / counts.sum()
    tokens = np.sum(weights * expected_tokens(alpha, gammas))
    return float(tokens / np.sum(weights * (gammas * float(c) + cost)))


def best_gamma_measured(alpha: float, c: float, score_cost) -> tuple[int, float]:
    """The gamma that maximises Theorem 3.8 with measured scoring costs, and its predicted improvement.

    score_cost[g - 1] is the cost of scoring g + 1 tokens in one target call, in decode steps, for
    g = 1..len(score_cost) (the gammas considered).  Returns (gamma, improvement); the smallest
    gamma on ties.  An improvement of at most 1 means that no gamma pays (`alpha_needed`).
    """
    cost = np.asarray(score_cost, dtype=np.float64)
    if cost.ndim != 1 or cost.size == 0 or np.any(~(cost > 0)):
        raise ValueError(f"score_cost must be one positive cost per gamma 1..G, got {score_cost}")
    gammas = np.arange(1, cost.size + 1)
    improvement = walltime_improvement_measured(alpha, gammas, c, cost)
    best = int(np.argmax(improvement))
    return int(gammas[best]), float(improvement[best])


def alpha_needed(c: float, score_cost, tol: float = 1e-9) -> float:
    """The smallest alpha at which some gamma in 1..len(score_cost) pays (`best_gamma_measured` above 1).

    Eq. 1's expected tokens 1 + alpha + ... + alpha^gamma grow with alpha, from 1 to gamma + 1, so
    for each gamma the break-even alpha solves expected_tokens = gamma c + score_cost[gamma - 1]
    (bisection); the answer is the least over gamma.  inf if no alpha < 1 makes any gamma pay
    (every call costs at least gamma + 1 decode steps).
    """
    cost = np.asarray(score_cost, dtype=np.float64)
    if cost.ndim != 1 or cost.size == 0 or np.any(~(cost > 0)):
        raise ValueError(f"score_cost must be one positive cost per gamma 1..G, got {score_cost}")
    _check(0.0, None, c)
    best = float("inf")
    for gamma, s in enumerate(cost, start=1):
        need = gamma * c + s                                   # decode steps one call costs
        if need >= gamma + 1:                                  # even alpha = 1 yields only gamma + 1 tokens
            continue
        if need < 1:                                           # cheaper than one decode step: any alpha pays
            return 0.0
        lo, hi = 0.0, 1.0
        while hi - lo > tol:
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if expected_tokens(mid, gamma) <= need else (lo, mid)
        best = min(best, hi)
    return best


# ---------------------------------------------------------------- trees of drafts
#
# A tree of drafts (`specref.trees.Tree`) is verified by walking down from the root: at each
# node the walk goes on to at most one child, tested in rank order (first drawn first).  The
# extension of Eq. 1 replaces alpha by a profile: accept[r] = the chance that the walk goes on to
# the child of rank r of a node it reached (r = 0 the first tested), the same at every node
# (Leviathan's iid assumption, rank by rank).  The ranks exclude each other, so sum(accept) <= 1.
# A chain has one child per node and accept = (alpha,).  What the profile is depends on the
# verifier: target-only top-k verification gives accept[r] = E[q(c_r)], the target's mass on the
# draft's r-th candidate; SpecInfer / recursive rejection sampling give accept[0] = alpha (the
# first child is an ordinary MRS draft) and later ranks what the residuals leave.

def _check_profile(accept) -> list[np.ndarray]:  # -> one row of chances by rank per depth (the last for deeper)
    rows = accept if len(accept) and all(np.ndim(a) == 1 for a in accept) else [accept]
    out = []
    for row in rows:
        try:
            a = np.asarray(row, dtype=np.float64)
        except (TypeError, ValueError):
            a = np.zeros((0, 0))  # not numbers, or ragged: the error below
        if a.ndim != 1 or a.size == 0 or np.any(~np.isfinite(a)) or np.any(a < 0) or a.sum() > 1 + 1e-9:
            raise ValueError("accept must be chances by rank (each >= 0, summing to at most 1), or one such list per "
                             f"depth, got {accept}")
        out.append(a)
    return out


def tree_expected_tokens(parents, accept) -> float:
    """Eq. 1 for a tree: expected tokens per target call, 1 + sum over nodes of the chance the walk reaches it.

    parents [N] as in `specref.trees.Tree` (siblings in rank order); accept[r] the chance the walk
    goes on to a node's child of rank r (ranks beyond len(accept) never), or accept[d][r] the same at
    depth d (the root's children are at depth 0; depths past the last row use the last row).  A node
    whose path from the root takes ranks r_1..r_d is reached with chance accept[r_1] ... accept[r_d]
    (accept[0][r_1] ... accept[d - 1][r_d] by depth).  A chain of gamma with accept = (alpha,) gives
    Eq. 1, (1 - alpha^(gamma+1)) / (1 - alpha).
    """
    rows, p = _check_profile(accept), trees.check_parents(parents).tolist()
    depth, reach, seen = trees.depths(p), [], {}  # reach[i]: the chance the walk reaches node i; seen[j]: children of j so far
    for i, j in enumerate(p):
        rank = seen.get(j, 0)
        seen[j] = rank + 1
        a = rows[min(int(depth[i]), len(rows) - 1)]
        reach.append((reach[j] if j >= 0 else 1.0) * (a[rank] if rank < a.size else 0.0))
    return 1.0 + float(sum(reach))


def tree_walltime_improvement(parents, accept, c, score_cost) -> float:
    """Theorem 3.8 for a tree of drafts: tree_expected_tokens / (rows c + score_cost), over standard decoding.

    rows = `specref.trees.draft_rows(parents)`, the draft calls one loop makes (each gives one row, and all of a
    node's children are drawn from it); c = one draft call / one decode step; score_cost = scoring
    the tree's N nodes, N + 1 rows, in one target call / one decode step (measured: on a CPU it is
    not 1).  A chain of gamma with accept = (alpha,) is `walltime_improvement_measured`.  A draft
    that pays per node rather than per row (drafting heads, say) would put N c in place of rows c.

    Where a tree loses: at equal N it scores as many rows as a chain of N, so it wins only when its
    extra candidates are accepted more often than the chain's deeper drafts, accept[1] + ... against
    alpha^2 + ...; a good draft (large alpha, little left for rank 1) makes the chain better, and on
    a CPU where scoring N + 1 rows costs several decode steps, the best tree and the best chain may
    both lose to plain decoding.
    """
    _check(0.0, None, c)
    if not float(score_cost) > 0:
        raise ValueError(f"score_cost must be > 0, got {score_cost}")
    return tree_expected_tokens(parents, accept) / (trees.draft_rows(parents) * float(c) + float(score_cost))
