"""The model protocol shared by the samplers, the warps and the drafts.

A *model* is any callable `model(tokens) -> probs`, tokens an int array [n], probs [n, V]
where row i is the distribution of token i+1 given tokens[:i+1].  A model may also offer
`model.next_probs(tokens, k) -> [k, V]`, the last k rows only; real models do, so that one
loop step costs one incremental forward pass.

A draft may also offer `draft.draft_length(tokens, K) -> k` with 0 <= k <= K: how many tokens to
draft after `tokens` in this call (fewer when it has nothing worth proposing; 0 makes the call a
plain decode step).  Without it a draft drafts K.  The length depends on the context alone and is
fixed before any draft token is drawn, so every call is still an exact modified rejection
sampling of k drafts, whatever k is.

A tree of drafted tokens after a prefix (the root is the prefix's last token) is given as
tokens [N] in topological order and parents [N]: -1 for a child of the root, else the index
j < i of node i's parent.  Its target rows [N+1, V] are row 0 after the prefix and row i+1 after
node i's root-to-node path (`tree_distributions`).  A model may offer
`model.score_tree(tokens, tree_tokens, parents) -> [N+1, V]`, all the rows in one call, and
`model.keep_path(nodes)` to keep only an accepted path's positions in its cache afterwards
(the real model does both); any other model is asked once per node.
"""

from __future__ import annotations

import numpy as np


def next_distributions(model, tokens: np.ndarray, k: int) -> np.ndarray:  # [n] -> [k, V]
    """The model's distributions for the last k positions (next_probs if offered, else a full call)."""
    f = getattr(model, "next_probs", None)
    out = f(tokens, k) if f is not None else np.asarray(model(tokens))[-k:]
    if out.ndim != 2 or out.shape[0] != k:
        raise ValueError(f"{model!r} returned shape {out.shape} for {len(tokens)} tokens; expected [{k}, V] rows")
    return out


def tree_distributions(model, tokens: np.ndarray, tree_tokens, parents) -> np.ndarray:  # [n], [N], [N] -> [N+1, V]
    """The model's rows for a tree after tokens: score_tree if offered, else each root-to-node path alone.

    Row 0 is the distribution after tokens; row i+1 the distribution after tokens + node i's path.
    """
    t, par = check_tree(tree_tokens, parents)
    f = getattr(model, "score_tree", None)
    if f is not None:
        out = f(tokens, t, par)
    else:
        prefix = check_tokens(tokens)
        rows, paths = [next_distributions(model, prefix, 1)[0]], []
        for i, j in enumerate(par):
            paths.append((paths[j] if j >= 0 else []) + [t[i]])           # node i's path from the root
            rows.append(next_distributions(model, np.concatenate([prefix, paths[i]]), 1)[0])
        out = np.stack(rows)
    if out.ndim != 2 or out.shape[0] != t.size + 1:
        raise ValueError(f"{model!r} returned shape {out.shape} for a tree of {t.size} nodes; "
                         f"expected [{t.size + 1}, V] rows")
    return out


def keep_path(model, nodes) -> None:  # [m] -> None
    """After tree_distributions: tell the model which root-to-node path was accepted (keep_path if offered)."""
    f = getattr(model, "keep_path", None)
    if f is not None:
        f(nodes)


def draft_length(draft, tokens: np.ndarray, K: int) -> int:
    """How many tokens `draft` drafts after `tokens` when allowed K: its draft_length if offered, else K."""
    f = getattr(draft, "draft_length", None)
    if f is None:
        return K
    k = f(tokens, K)
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 0 <= k <= K:
        raise ValueError(f"{draft!r}.draft_length returned {k!r} for K = {K}; expected an integer in [0, {K}]")
    return int(k)


def check_tokens(tokens, V: int | None = None, name: str = "tokens", allow_empty: bool = False) -> np.ndarray:  # [n] -> int64 [n]
    """`tokens` as an int64 array after checking it is a 1-D sequence of token ids (in [0, V) if V is given)."""
    a = np.asarray(list(tokens) if not isinstance(tokens, np.ndarray) and not np.isscalar(tokens) else tokens)
    if a.ndim != 1 or (a.size and not np.issubdtype(a.dtype, np.integer)):
        raise ValueError(f"{name} must be a 1-D sequence of integers (token ids), got shape {a.shape} dtype {a.dtype}")
    if a.size == 0 and not allow_empty:
        raise ValueError(f"{name} is empty; expected a non-empty 1-D sequence of token ids")
    if V is not None and a.size and (a.min() < 0 or a.max() >= V):
        bad = a[(a < 0) | (a >= V)][0]
        raise ValueError(f"token id {int(bad)} is out of range in {name}; token ids must be in [0, {V})")
    return a.astype(np.int64)


def check_tree(tokens, parents, V: int | None = None) -> tuple[np.ndarray, np.ndarray]:  # [N], [N] -> int64 [N], int64 [N]
    """(tokens, parents) as int64 arrays after checking they are a non-empty tree in topological order.

    tokens: N token ids (in [0, V) if V is given); parents: N integers, parents[i] = -1 for a child
    of the root, else the index j < i of node i's parent.
    """
    t = check_tokens(tokens, V, "tree tokens", allow_empty=True)
    if t.size == 0:
        raise ValueError("the tree is empty: give at least one node (tokens and parents of length N >= 1)")
    a = np.asarray(list(parents) if not isinstance(parents, np.ndarray) and not np.isscalar(parents) else parents)
    if a.ndim != 1 or a.size != t.size or not np.issubdtype(a.dtype, np.integer):
        raise ValueError(f"parents must be a 1-D sequence of {t.size} integers, one per tree token; "
                         f"got shape {a.shape} dtype {a.dtype}")
    bad = np.flatnonzero((a < -1) | (a >= np.arange(t.size)))
    if bad.size:
        i, j = int(bad[0]), int(a[bad[0]])
        if j < -1 or j >= t.size:
            raise ValueError(f"parents[{i}] = {j} is out of range: -1 for a child of the root, else a node "
                             f"index in [0, {t.size})")
        raise ValueError(f"parents[{i}] = {j} is not before node {i}: nodes must be in topological order "
                         f"(a parent before its children, parents[i] < i)")
    return t, a.astype(np.int64)
