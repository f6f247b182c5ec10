"""Verification of a tree of drafts: the companion of mrs.py for trees (NumPy and mrs.py only: copy both).

Letters and vocabulary as in mrs.py (Chen's: p is the draft, q the target; accepted, recovered and
bonus tokens).  The portable vectors (specref/proof/tree_vectors.json) check a copy of the two files
against RANDOMNESS below.

Trees of drafts.  verify_tree_topk, verify_tree_mss and verify_tree_rrs verify several
candidates at once: a tree of drafted tokens, scored by one target call with a tree attention
mask.  One contract serves all three:
    tokens   [N]       the drafted token of each node, nodes in topological order (a parent
                       before its children)
    parents  [N]       -1 for a child of the root, else the index j < i of node i's parent
    p, q     [N+1, V]  the draft's and the target's rows: row 0 at the root, row i + 1 after
                       node i's token (node i's children were drawn from p[i + 1])
    returns  [n]       the tokens of the accepted path from the root, then one more token
The children of a node are the nodes whose parent it is, in ascending index.  A chain of K
drafts is the tree with parents = [-1, 0, 1, ..., K-2]; on it verify_tree_mss and
verify_tree_rrs are mrs.verify (the same uniforms give the same tokens; p[K] is not read).  The
three differ in how the children were drawn, and each is exact only for its own way:
    verify_tree_topk  distinct children chosen in any way that does not look at the target
                      (EAGLE-2's top-k of the draft; SGLang's tree_speculative_sampling_target_only
                      at thresholds 1).  The target alone decides; p is not read.  Child c_i is
                      accepted with probability q(c_i) / (1 - q(c_1) - ... - q(c_{i-1})); if none
                      is, the token comes from q without the children's mass, renormalised.  In
                      effect the walk draws y ~ q and follows y if it is a child, which is why it
                      is exact however the children were chosen and in whatever order.
    verify_tree_mss   children drawn i.i.d. from the node's p row (SpecInfer's multi-step
                      speculative sampling, Miao et al. 2024, Algorithm 2, lines 24-44):
                      accept c with probability min(1, q(c) / p(c)); on a rejection
                      q <- norm(max(0, q - p)) and p stays; if all are rejected, the token comes
                      from the last q.  Siblings may repeat, as i.i.d. draws do.
    verify_tree_rrs   children drawn from the node's p row without replacement (recursive
                      rejection sampling, Jeon et al. 2024, arXiv 2402.14160; EAGLE-1's
                      evaluate_posterior, Sequoia's SpecTree.accept_step): as verify_tree_mss, and
                      on a rejection also p <- p with the rejected token zeroed, renormalised.
SpecInfer picks the next child to test at random (its "s ~ rand(H)", line 29).  These verifiers
test the children in the order given and draw nothing to shuffle them.  For verify_tree_mss that
is the same law: i.i.d. children are exchangeable, so any order fixed without looking at their
tokens is as good as a random one.  verify_tree_rrs needs the order they were drawn in: each
child's law depends on the ones drawn before it (draws without replacement are not exchangeable),
and a shuffle would break it.  An order that looks at the tokens (sorted by p, say) breaks both:
hand the children over in the order they were drawn.

Randomness: RANDOMNESS below lists the uniforms each verifier draws, in order.

Numerical choices for trees, made on purpose:
- every test is strict: a child with q(c) = 0 (or w(c) = 0 after rejections) is never accepted,
  even with u = 0; no test divides by 0 (p(c) > 0 is checked, S and D stay positive), and a
  ratio that overflows to +inf accepts;
- the all-zero residual: in exact arithmetic a rejection always leaves mass to draw from; when
  rounding leaves none (p and q one rounding apart, or q summing to slightly under 1), w stays as
  it was, so the last token comes from the node's q or its last nonzero residual: never NaN,
  never an id outside [0, V);
- a row is read, and checked, only when the walk reaches its node: the q row of each node on the
  walk, and (verify_tree_mss, verify_tree_rrs) the p row its children were drawn from, with
  p(x) > 0 at each of those children.  A bad row off the walk therefore raises only in the calls
  that reach it.  This keeps a call's cost to the few rows it uses: checking all N + 1 rows first
  would read the whole of q, 17 rows of 49 152 floats for a 16-node tree, several times the cost
  of the walk itself.  verify_tree_topk reads no p row (only p's shape is checked);
- duplicate siblings are an error for verify_tree_topk (the rule would count that token's mass
  twice) and verify_tree_rrs (draws without replacement cannot repeat); verify_tree_mss takes
  them, as it must: a repeat of a rejected token is rejected (w is 0 there) and updates the
  residual once more, which i.i.d. draws need.  Merging repeated siblings breaks exactness.
"""

from __future__ import annotations

import numpy as np

if __package__:  # inside the specref package
    from . import mrs
else:  # copied beside mrs.py
    import mrs

# The smallest normal float64 (about 2.2e-308): below it a float keeps fewer significant bits.
_TINY = float(np.finfo(np.float64).tiny)

# The documented use of rng (see "Randomness" above); the portable vectors quote this text.
RANDOMNESS = """\
Randomness of the tree verifiers.  `rng` is anything whose random() returns a float u in [0, 1);
nothing else of it is used, and `sample` is mrs.sample (mrs.SAMPLING).  Each verifier walks down
from the root and draws, in this order:
    at the current node (the root first), for each child c in ascending node index:
        one rng.random() = u for the test of c (below); if it passes, c is accepted: its token
        is output, c becomes the current node, and its own children are tested next;
    when the current node has no children, or all of them were rejected, one rng.random() for
    sample(w), the last token, and stop: w is the node's q row if it has no children (the
    bonus token), else what the rejections left of it (the recovered token).
A call that tests m children in all therefore uses m + 1 uniforms.  The test of the i-th child
c = c_i of a node whose rows are p and q, and the w that is left:
    verify_tree_topk: accept iff u * max(0, 1 - (q(c_1) + ... + q(c_{i-1}))) < q(c), the sum
        taken in float64 in the children's order; w = q with its entries at the node's
        children set to 0 (q itself if that leaves nothing).
    verify_tree_mss: w = q and S = 1 when the node is reached; accept iff u < w(c) / (S p(c));
        on rejection r = max(0, w / S - p), and if sum(r) > 0 then w = r and S = sum(r)
        (else w and S stay).
    verify_tree_rrs: as verify_tree_mss, with d = p and D = 1 when the node is reached in place
        of p: accept iff u < (w(c) D) / (S d(c)); on rejection r = max(0, w / (S / D) - d), the
        residual scaled by D (max(0, w - d) if S / D == 1; max(0, w / S - d / D) if S / D is not
        a normal float), kept as above; then, unless c is the node's last child, D = the mass of
        p without the children rejected so far: sum(p) minus their p, or, if that is below
        sum(p) / 1024, the sum of p with their entries set to 0.  d stays p: at a rejected token
        the residual is 0 already, so its entry of d changes nothing but D.  (With D = 1 the
        first form is verify_tree_mss's.)
"""


def _check_tree_inputs(tokens, parents, p, q, function: str,
                       distinct: str | None) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[list[int]]]:
    # [N], [N], [N+1, V], [N+1, V] -> tokens, p, q (not converted), children[row] (row 0: the root's, row i + 1:
    # node i's).  Checks everything but the rows' values: those are checked when the walk reaches them
    # (_q_row, _p_row), so a call reads only the rows it uses.  distinct: None if siblings may repeat, else why
    # they may not (for the error message).
    tokens, parents, p, q = np.asarray(tokens), np.asarray(parents), np.asarray(p), np.asarray(q)
    # (plain Python on the N ids below, not NumPy: for a tree of tens of nodes a NumPy call costs more than the loop)
    if tokens.ndim != 1 or tokens.size < 1 or tokens.dtype.kind not in "iu":
        raise ValueError(f"{function}: tokens must be a 1-D integer array of N >= 1 drafted tokens, "
                         f"got shape {tokens.shape} dtype {tokens.dtype}")
    N = tokens.shape[0]
    if parents.shape != (N,) or parents.dtype.kind not in "iu":
        raise ValueError(f"{function}: parents must be a 1-D integer array with one entry per node (N = {N}), "
                         f"got shape {parents.shape} dtype {parents.dtype}")
    if q.ndim != 2 or q.shape[0] != N + 1 or q.shape[1] < 1:
        raise ValueError(f"{function}: q must have shape [N + 1, V] = [{N + 1}, V] (the root's row, then one row "
                         f"after each node), got {q.shape}")
    V = q.shape[1]
    if p.shape != (N + 1, V):
        raise ValueError(f"{function}: p must have shape [N + 1, V] = [{N + 1}, {V}] like q, got {p.shape}")
    x = tokens.tolist()
    for i, t in enumerate(x):
        if not 0 <= t < V:
            raise ValueError(f"{function}: tokens[{i}] = {t} is not a token id in [0, {V})")
    children = [[] for _ in range(N + 1)]  # children[j + 1]: node j's children in ascending index; [0]: the root's
    for i, j in enumerate(parents.tolist()):
        if not -1 <= j < N:
            raise ValueError(f"{function}: parents[{i}] = {j} is out of range: expected -1 (a child of the root) "
                             f"or the index of another node, in [0, {N})")
        if j >= i:
            raise ValueError(f"{function}: the nodes are not in topological order: parents[{i}] = {j}, but a node's "
                             f"parent must come before it (expected -1 or an index below {i})")
        children[j + 1].append(i)
    if distinct is not None:
        for kids in children:
            seen = {}
            for i in kids:
                if x[i] in seen:
                    raise ValueError(f"{function}: nodes {seen[x[i]]} and {i} are siblings with the same token "
                                     f"{x[i]}: {distinct}")
                seen[x[i]] = i
    return tokens, p, q, children


def _q_row(q: np.ndarray, row: int) -> np.ndarray:  # [N+1, V] -> float64 [V], checked
    return mrs.check_distribution(q[row], f"q (target) row {row}")


def _rejected(w: np.ndarray, S: float, d: np.ndarray, D: float, scratch: list) -> tuple[np.ndarray, float]:
    # [V] weights w (sum S), [V] draft weights d (sum D) -> (w, S) after a rejection.  The new residual is
    # max(0, w / S - d / D) scaled by D, that is max(0, w / (S / D) - d), and its sum: one pass over V fewer than
    # normalising both rows, and none when S == D (then it is max(0, w - d)).  With D = 1 (verify_tree_mss) it is
    # max(0, w / S - d) exactly.  If S / D is not a normal float (only when S or D is below about 1e-308) it is
    # max(0, w / S - d / D) written out, the scale that keeps the precision.  Computed in a scratch row that does
    # not hold w: scratch is [None] until the first rejection of a call, then two rows of V (allocated once per
    # call, a tenth of a rejection's cost at V = 49 152).  If the sum is 0 (rounding left nothing: documented) w
    # and S stay.
    if scratch[0] is None:
        scratch[:] = list(np.empty((2, w.shape[0])))
    r = scratch[1] if w is scratch[0] else scratch[0]
    c = S / D
    if c == 1.0:
        np.subtract(w, d, out=r)
    elif _TINY <= c < np.inf:
        np.subtract(np.divide(w, c, out=r), d, out=r)
    else:  # d / D may overflow to inf at rejected tokens (verify_tree_rrs keeps their d): the clip makes it 0 there
        with np.errstate(over="ignore"):
            np.subtract(np.divide(w, S, out=r), np.divide(d, D), out=r)
    np.maximum(r, 0.0, out=r)
    s = float(r.sum())
    return (r, s) if s > 0.0 else (w, S)


def _p_row(p: np.ndarray, row: int, kids: list[int], tokens: np.ndarray, function: str) -> tuple[np.ndarray, float]:
    # [N+1, V] -> (float64 [V], its sum): the row the children `kids` were drawn from, checked (as
    # check_distribution, which names what is wrong), and p(x) > 0 at each child
    d = np.asarray(p[row], dtype=np.float64)
    total = mrs._row_sum_if_valid(d)
    if total is None:
        mrs.check_distribution(d, f"p (draft) row {row}")  # raises, saying what is wrong
    for i in kids:
        if not d[tokens[i]] > 0.0:
            raise ValueError(f"{function}: node {i}'s token {tokens[i]} has p(x) = 0 in the row p[{row}] it was "
                             "drawn from: it cannot have been drawn from p")
    return d, total


def _mass_left(d: np.ndarray, total: float, rejected: list[int]) -> float:  # [V], sum(d), ids -> float
    # sum(d) without its entries at `rejected`: total minus theirs, unless that cancels below total / 1024 (it
    # would keep fewer than 43 of the 53 bits): then the sum of a copy with those entries set to 0.  Either way the
    # relative error is of the order of 1e-12 at most, and the result is > 0 whenever an entry left is.
    D = total - sum(d.item(y) for y in rejected)
    if D < total / 1024:
        left = d.copy()
        left[rejected] = 0.0
        D = float(left.sum())
    return D


def verify_tree_topk(tokens: np.ndarray, parents: np.ndarray, p: np.ndarray, q: np.ndarray,
                     rng: np.random.Generator) -> np.ndarray:  # [N], [N], [N+1, V], [N+1, V] -> [n], 1 <= n <= depth + 1
    """Target-only verification of a tree of distinct children chosen without the target (EAGLE-2's top-k): the accepted path plus one more token, distributed exactly as the target.

    At a node with children c_1..c_k (ascending node index) and target row q, c_i is accepted
    with probability q(c_i) / (1 - q(c_1) - ... - q(c_{i-1})), and the walk goes on from it; if
    none is accepted, the last token is drawn from q with the children's entries set to 0
    (renormalised); at a node without children it is the bonus token, drawn from q.  So the
    output at each node is y ~ q, followed into the tree when y is a child: exact however the
    children were chosen (their draft probabilities are not needed, and p is not read).  This is
    SpecInfer's rule (verify_tree_mss) with a one-hot draft row at each child, and SGLang's
    tree_speculative_sampling_target_only at thresholds 1.  Uses rng as RANDOMNESS says: one uniform per child tested, one for the last token.

    Requires: the contract in the module docstring (tokens [N], N >= 1, parents [N] in topological
    order, p and q [N+1, V]); q rows that are distributions (each checked when the walk reaches
    it); distinct siblings.  p is not read, only its shape is checked.
    """
    tokens, p, q, children = _check_tree_inputs(
        tokens, parents, p, q, "verify_tree_topk",
        distinct="verify_tree_topk needs distinct siblings (merge them, or use verify_tree_mss for i.i.d. children)")
    out, row = [], 0  # row: the current node's row, 0 at the root and i + 1 after node i
    while True:
        qr = _q_row(q, row)  # [V] the target's row at this node
        rest = 1.0  # 1 - q(c_1) - ... - q(c_{i-1}): the target's mass not yet tried at this node
        for i in children[row]:
            x = int(tokens[i])
            # accept c_i with probability q(c_i) / rest, tested as u * rest < q(c_i): strict (q = 0 never
            # passes, even at u = 0) and no division (rest can round to 0 or below: then any q(c_i) > 0 passes).
            # EAGLE-2's evaluate_posterior writes it as SpecInfer's line 30 with p(c) = 1 (r <= q(c)), then
            # q(c) <- 0 and q renormalised, which is what dividing by rest does.
            if rng.random() * max(rest, 0.0) < qr.item(x):
                out.append(x)  # accepted: the walk goes on from c_i
                row = i + 1
                break
            rest -= qr.item(x)
        else:  # no child accepted (or none to test)
            w = qr
            if children[row]:
                w = w.copy()
                w[tokens[children[row]]] = 0.0  # the recovered token: q without the children's mass
                if not w.sum() > 0.0:
                    w = qr  # rounding left nothing (documented): q itself
            out.append(mrs.sample(w, rng))  # the recovered token, or the bonus token from the leaf's row
            return np.array(out, dtype=np.int64)


def verify_tree_mss(tokens: np.ndarray, parents: np.ndarray, p: np.ndarray, q: np.ndarray,
                    rng: np.random.Generator) -> np.ndarray:  # [N], [N], [N+1, V], [N+1, V] -> [n], 1 <= n <= depth + 1
    """SpecInfer's multi-step speculative sampling for a tree of children drawn i.i.d. from the draft: the accepted path plus one more token, distributed exactly as the target.

    At a node with draft row p and target row q, its children c (ascending node index; i.i.d.
    draws from p, so the order given is as good as SpecInfer's random one) are tested in turn:
    c is accepted with probability min(1, q(c) / p(c)) and the walk goes on from it; on a
    rejection q <- norm(max(0, q - p)) and p stays.  If all are rejected the last token is drawn
    from the last q (the recovered token); at a node without children it is the bonus token,
    drawn from q.  On a chain (parents = [-1, 0, ..., K-2]) this is `verify`, uniform for uniform.
    Uses rng as RANDOMNESS says.

    Requires: the contract in the module docstring; q rows, and the p rows of the root and of nodes
    with children, that are distributions; p(x) > 0 at every drafted token in the row it was
    drawn from (each row checked when the walk reaches its node).  Siblings may repeat.
    """
    tokens, p, q, children = _check_tree_inputs(tokens, parents, p, q, "verify_tree_mss", distinct=None)
    # SpecInfer's Algorithm 2 (VerifyStochastic, lines 24-44), in Chen's letters: its P(x | u, LLM) is q, its
    # P(x | u, SSM_s) is p (one draft here for every child).
    out, row, scratch = [], 0, [None]  # line 25: u <- the root; row: u's row, 0 at the root and i + 1 after node i
    while True:  # line 26: while u is a non-leaf node (a leaf falls through to line 42 at once)
        w, S = _q_row(q, row), 1.0  # the target's row at u, as weights w with sum S (q counts as normalised)
        d = _p_row(p, row, children[row], tokens, "verify_tree_mss")[0] if children[row] else None  # the draft's row
        for i in children[row]:  # lines 27-28: H = child(u); line 29: s ~ rand(H), here in the order drawn
            x = int(tokens[i])
            # lines 29-30: r ~ U(0, 1); if r <= q(x_s) / p(x_s): strict here, so q = 0 is never accepted
            if rng.random() < w.item(x) / (S * d.item(x)):
                out.append(x)  # lines 32-34: V.append(x_s), u = s, break
                row = i + 1
                break
            # line 37: q := norm(max(0, q - p)), kept unnormalised as w with its sum S (w / 1.0 is w: skipped);
            # line 38: H.pop(s) is the for loop moving on
            w, S = _rejected(w, S, d, 1.0, scratch)  # max(0, w / S - p); if nothing is left, w stays
        else:  # lines 39-43: H is empty (all rejected) or u is a leaf: x_next ~ q, V.append(x_next)
            out.append(mrs.sample(w, rng))
            return np.array(out, dtype=np.int64)


def verify_tree_rrs(tokens: np.ndarray, parents: np.ndarray, p: np.ndarray, q: np.ndarray,
                    rng: np.random.Generator) -> np.ndarray:  # [N], [N], [N+1, V], [N+1, V] -> [n], 1 <= n <= depth + 1
    """Recursive rejection sampling (Jeon et al. 2024) for a tree of children drawn from the draft without replacement: the accepted path plus one more token, distributed exactly as the target.

    As verify_tree_mss, with one more step after each rejection: at a node with draft row p and
    target row q, child c (ascending node index, which must be the order the children were drawn
    in) is accepted with probability min(1, q(c) / p(c));
    on a rejection q <- norm(max(0, q - p)), then p <- p with p(c) set to 0, renormalised (the
    law the next child was drawn from).  If all are rejected the last token is drawn from the
    last q; at a node without children it is the bonus token, drawn from q.  EAGLE-1's
    evaluate_posterior and Sequoia's SpecTree.accept_step verify this way.  Uses rng as RANDOMNESS says.

    Requires: the contract in the module docstring; q rows, and the p rows of the root and of nodes
    with children, that are distributions; p(x) > 0 at every drafted token in the row it was
    drawn from (each row checked when the walk reaches its node); distinct siblings.
    """
    tokens, p, q, children = _check_tree_inputs(
        tokens, parents, p, q, "verify_tree_rrs",
        distinct="children drawn without replacement cannot repeat (use verify_tree_mss for i.i.d. children)")
    out, row, scratch = [], 0, [None]  # row: the current node's row, 0 at the root and i + 1 after node i
    while True:
        w, S = _q_row(q, row), 1.0  # the target's row as weights w with sum S (q counts as normalised)
        kids = children[row]
        if kids:  # the draft's row d, never changed, and D: the mass of p without the rejected children
            d, total = _p_row(p, row, kids, tokens, "verify_tree_rrs")
            D, rejected = 1.0, []
        for i in kids:
            x = int(tokens[i])
            # as SpecInfer's line 30: accept iff u < q(x) / p(x), with the current q and p; strict
            if rng.random() < (w.item(x) * D) / (S * d.item(x)):
                out.append(x)  # accepted: the walk goes on from x
                row = i + 1
                break
            # rejected: q <- norm(max(0, q - p)) (SpecInfer's line 37) with the current q = w / S and p = d / D, where
            # d still has its entries at the rejected tokens: the residual is 0 there already (w(y) / S < d(y) / D is
            # what rejected y), so subtracting them changes nothing and only D needs to leave them out
            w, S = _rejected(w, S, d, D, scratch)  # max(0, w / (S / D) - d), scaled by D; if nothing is left, w stays
            if i == kids[-1]:
                continue  # the last child: no other was drawn after it, so p without it is never used
            # the step recursive rejection sampling adds: p <- norm(p without x), the law the next child was drawn from
            rejected.append(x)
            D = _mass_left(d, total, rejected)  # > 0: the next child x' is another token with p(x') > 0
        else:  # all rejected (or a leaf): the last token from the last q
            out.append(mrs.sample(w, rng))
            return np.array(out, dtype=np.int64)
