"""Chen et al. 2023, Algorithm 1 (ArS) and Algorithm 2 (SpS), line by line.

Letters are Chen's: p = draft model, q = target model, K = draft tokens per loop.

The model protocol (the samplers, warps, drafts, trees and the real model all use it, from here):
a *model* is any callable `model(tokens) -> probs`, tokens an int array [n], probs [n, V] where row
i is the distribution of token i+1 given tokens[:i+1].  A model may also offer
`model.next_probs(tokens, k) -> [k, V]` (only the last k rows); real models do, so one loop step
costs one incremental forward pass instead of a recompute (`next_distributions`).  A draft may
offer `draft.draft_length(tokens, K) -> k`, 0 <= k <= K (`draft_length`).  A target may offer
`keep_path(nodes)`, called after a tree is verified (`keep_path`; the tree calls are
`specref.trees`).  The sampler knows nothing else about models: a Markov chain over 3 tokens and a
transformer are alike.

Algorithm 2 as printed, with the line numbers used in the comments below:
    1  Given lookahead K and minimum target sequence length T.
    2  Given target q, draft p and a prompt x_1..x_t.
    3  Initialise n <- t.
    4  while n < T do
    5      for t = 1 : K do
    6          Sample draft x~_t ~ p(x | x_1..x_n, x~_1..x~_{t-1})
    7      end for
    8      In parallel, compute K + 1 sets of logits q(x | x_1..x_n, x~_1..x~_j), j = 0..K
    9      for t = 1 : K do
    10         Sample r ~ U[0, 1]
    11         if r < min(1, q(x~_t | ...) / p(x~_t | ...)) then set x_{n+t} <- x~_t, n <- n + 1
    12         else sample x_{n+t} ~ (q - p)_+ and exit the for loop
    13     end for
    14     If all K were accepted, sample x_{n+K+1} ~ q(x | x_1..x_n, x~_1..x~_K), n <- n + 1
    15 end while
Lines 9-14 are `specref.mrs.verify` (or any verifier with its contract, passed as `verify`).
K is the most a call drafts: a draft that offers `draft_length` may draft k < K tokens in a
call, chosen from the context before drafting (so every call is still an exact modified rejection
sampling of k drafts); the target then scores k + 1 tokens, and with k = 0 the call is one step of
Algorithm 1.
Algorithm 1 is lines 3-4 with one target sample per loop.  Algorithm 2 may overshoot T by up to
K tokens; both functions return exactly N = T - t new tokens: the first N tokens of a longer
sample have the law of N tokens.

Trees of drafts go through the same loop (`speculative_sampling(..., tree=trees.Tree(...))`): lines
5-14 become one tree step, `tree.step` (`specref.trees.Tree.step`): draft a tree instead of a chain (several
children at a node), score the whole tree with one target call (a tree attention mask on the real
model), verify it with the tree verifier of specref/mrs_tree.py that is exact for the way the
children were drawn, and keep only the accepted path in the target's cache.  A chain of K drafts is
the tree with one child per node; without `tree` the loop is Algorithm 2 exactly as printed.

What a run did is reported through `on_step`: after every iteration the loop calls
`on_step(Step(...))`; `specref.runstats.RunStats.add` is such a callback and adds up a run's
statistics, so the statistics come from the loop itself, never from a second copy of it.  A callback that returns
True ends the run after that iteration (a command stops at a stop sequence this way).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import numpy as np

from specref import mrs

if TYPE_CHECKING:  # the loop calls a tree's own step; specref.trees imports this module, not the reverse
    from specref.trees import Tree

# on_step(step) -> None or a bool; True ends the run after this step
OnStep = Callable[["Step"], "bool | None"]


# ---------------------------------------------------------------- the model protocol

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


# ---------------------------------------------------------------- Algorithms 1 and 2

def _check_inputs(x, N: int, K: int | None = None) -> np.ndarray:
    x = check_tokens(x, name="the prompt x")
    if int(N) != N or N < 0:
        raise ValueError(f"N (number of new tokens) must be an integer >= 0, got {N}")
    if K is not None and (int(K) != K or K < 1):
        raise ValueError(f"K (draft tokens per loop) must be an integer >= 1, got {K}")
    return x


@dataclass(frozen=True)
class Step:
    """What one loop iteration did."""

    tokens: np.ndarray  # [m] tokens appended this iteration (after truncation to N)
    n_drafted: int  # draft tokens proposed (K for SpS unless the draft drafted fewer, 0 for ArS)
    n_accepted: int  # draft tokens accepted, before truncation to N
    draft_calls: int  # calls of the draft model
    levels_tested: int | None = None  # a tree's: the depths at which the walk tested children (None: a chain)

    @property
    def n_examined(self) -> int:
        """Draft positions that met the accept test: the accepted ones plus the first rejected, if any.

        For a tree, the levels the walk tested: each accepted node, and the node it ended at if that
        had children (all of them rejected)."""
        if self.levels_tested is not None:
            return self.levels_tested
        return self.n_accepted + (self.n_accepted < self.n_drafted)


def autoregressive_sampling(x: np.ndarray, model, N: int, rng: np.random.Generator,
                            on_step: OnStep | None = None) -> np.ndarray:  # [t] -> [t+N]
    """Chen Algorithm 1: x followed by N tokens sampled one target call at a time."""
    x = _check_inputs(x, N)
    T = len(x) + N  # Alg. 1: target length T
    while len(x) < T:  # "while n < T"
        q = next_distributions(model, x, 1)[0]  # q(x | x_1..x_n)
        token = mrs.sample(mrs.check_distribution(q, "target distribution"), rng)  # "Sample x_{n+1} ~ q"
        x = np.append(x, token)  # "n <- n + 1"
        if on_step is not None and on_step(Step(tokens=x[-1:], n_drafted=0, n_accepted=0, draft_calls=0)):
            break
    return x


def speculative_sampling(x: np.ndarray, draft_model, target_model, N: int, K: int, rng: np.random.Generator,
                         verify: Callable = mrs.verify, on_step: OnStep | None = None,
                         tree: "Tree | None" = None, verify_tree: Callable | None = None) -> np.ndarray:  # [t] -> [t+N]
    """Chen Algorithm 2: x followed by N tokens with the target's law, K drafts per target call
    (at most K if the draft offers `draft_length`).

    `verify(x_draft [K], p [K, V], q [K+1, V], rng) -> tokens` is lines 9-14 (`mrs.verify`
    by default; tests plug in deliberately broken variants here).

    tree: draft a tree of this shape per call instead of a chain (`specref.trees.Tree`; K must be its number of
    nodes, the most one call drafts), verified by `verify_tree(tokens, parents, p, q, rng)`, by
    default the tree verifier that is exact for the way `tree` draws its children.
    """
    x = _check_inputs(x, N, K)
    if tree is not None:
        if K != tree.size:
            raise ValueError(f"K = {K} but the tree {tree.name} has {tree.size} nodes: pass K = {tree.size}")
        verify_tree = verify_tree or tree.verifier
    T = len(x) + N  # line 1: minimum target length T (x holds the prompt: n = t, line 3)
    while len(x) < T:  # line 4
        if tree is None:  # Algorithm 2 as printed: a chain of k drafts
            k = draft_length(draft_model, x, K)  # K, or fewer if the draft says so (module docstring)
            y, p = x, []
            for _ in range(k):  # line 5
                p_t = next_distributions(draft_model, y, 1)[0]  # line 6: p(x | x_1..x_n, x~_1..x~_{t-1})
                y = np.append(y, mrs.sample(mrs.check_distribution(p_t, "draft distribution"), rng))  # x~_t ~ p
                p.append(p_t)
            x_draft = y[len(x):]  # [k] x~_1..x~_k
            q = next_distributions(target_model, y, k + 1)  # line 8: one target call, k + 1 rows
            new = verify(x_draft, np.stack(p), q, rng) if k else None  # lines 9-14: accepted prefix plus one token
            draft_calls, levels = k, None
        else:  # lines 5-14 for a tree: several children per node (specref.trees)
            new, k, draft_calls, levels = tree.step(draft_model, target_model, x, rng, verify_tree)
            if new is None:  # the draft proposed nothing: one step of Algorithm 1
                q = next_distributions(target_model, x, 1)
        if new is None:  # nothing to verify: line 14 alone, x_{n+1} ~ q (Algorithm 1's step)
            new = np.array([mrs.sample(mrs.check_distribution(q[0], "target distribution"), rng)])
        n_accepted = len(new) - 1
        new = new[: T - len(x)]  # Alg. 2 may overshoot T; keep the first N (same law)
        x = np.concatenate([x, new])  # n <- n + len(new)
        if on_step is not None and on_step(Step(tokens=new, n_drafted=k, n_accepted=n_accepted,
                                                draft_calls=draft_calls, levels_tested=levels)):
            break
    return x
