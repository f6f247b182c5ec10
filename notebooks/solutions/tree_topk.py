"""The answer to the exercise `exercises.check_tree_topk`: the target-only verifier of a tree of top-k drafts."""

import numpy as np


def draw(weights, rng):  # [V] nonnegative, sum > 0 -> token id
    """One token with probability weights[i] / sum(weights): the inverse CDF of one rng.random()."""
    c = np.cumsum(weights)  # [V]
    i = int(np.searchsorted(c, rng.random() * c[-1], side="right"))  # the smallest i with u * sum < c[i]
    return min(i, int(np.flatnonzero(weights)[-1]))  # rounding can put u * sum past the last step: its token


def tree_topk(tokens, parents, p, q, rng):  # [N], [N], [N+1, V], [N+1, V] -> [n]: the accepted path, then one token
    """At each node, child c_i is kept with probability q(c_i) / (1 - q(c_1) - ... - q(c_{i-1})); if none is, the last
    token comes from q without the children's entries; at a node without children, from q (the bonus).  p is unused."""
    children = [[] for _ in range(len(tokens) + 1)]  # children[row]: the nodes under row (0: the root, i + 1: node i)
    for i, j in enumerate(parents):
        children[j + 1].append(i)
    out, row = [], 0  # row: the current node's row of q, 0 at the root and i + 1 after node i
    while True:
        rest = 1.0  # the target's mass not yet tried at this node
        for i in children[row]:
            x = int(tokens[i])
            if rng.random() * rest < q[row, x]:  # u < q(x) / rest, without dividing; strict: q(x) = 0 never passes
                out.append(x)
                row = i + 1  # the walk goes on from node i
                break
            rest -= q[row, x]
        else:  # a node without children (the bonus token), or every child rejected (the recovered token)
            w = q[row].copy()
            w[[int(tokens[i]) for i in children[row]]] = 0.0  # q without the children's mass
            out.append(draw(w if w.sum() > 0 else q[row], rng))
            return np.array(out, dtype=np.int64)
