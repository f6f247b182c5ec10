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

Trees of drafts (their shape, and a model's rows on a tree) are `specref.trees`; `keep_path` below
is the one tree call a model may offer that the loop makes after verifying.
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


def keep_path(model, nodes) -> None:  # [m] -> None
    """After `specref.trees.tree_distributions`: tell the model which root-to-node path was accepted (keep_path if offered)."""
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
