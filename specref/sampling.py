"""Chen et al. 2023, Algorithm 1 (ArS) and Algorithm 2 (SpS), line by line.

Letters are Chen's: p = draft model, q = target model, K = draft tokens per loop.

A *model* is any callable `model(tokens) -> probs`, tokens an int array [n], probs [n, V]
where row i is the distribution of token i+1 given tokens[:i+1].  A model may also offer
`model.next_probs(tokens, k) -> [k, V]` (only the last k rows); real models do, so one
loop step costs one incremental forward pass instead of a recompute.  The sampler knows
nothing else about models: a Markov chain over 3 tokens and a transformer are alike.

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
K is the most a call drafts: a draft that offers `draft_length` (`specref.protocol`) may draft
k < K tokens in a call, chosen from the context before drafting; the target then scores k + 1
tokens, and with k = 0 the call is one step of Algorithm 1.
Algorithm 1 is lines 3-4 with one target sample per loop.  Algorithm 2 may overshoot T by up to
K tokens; both functions return exactly N = T - t new tokens: the first N tokens of a longer
sample have the law of N tokens.

Trees of drafts go through the same loop (`speculative_sampling(..., tree=Tree(...))`): lines
5-7 draft a tree instead of a chain, several children at a node (`draft_tree`, with each node's
children drawn by `draw_children`), line 8 scores the whole tree with one target call
(`specref.protocol.tree_distributions`, a tree attention mask on the real model), lines 9-14 are
a tree verifier (`specref.mrs_tree.verify_tree_topk`, `verify_tree_mss` or `verify_tree_rrs`: the one
that is exact for the way the children were drawn), and the target's cache then keeps only the
accepted path (`specref.protocol.keep_path`).  A chain of K drafts is the tree with one child per
node; without `tree` the loop is Algorithm 2 exactly as printed.  The draft is asked for its row
after each node's root-to-node path, like any call of a model: a draft that caches by shared
prefix (the real model, `specref.smollm2.draft.NeuralDraft`) recomputes only where a path leaves
the last one, so its cache stays consistent whichever branch was accepted.

What a run did is reported through `on_step`: after every iteration the loop calls
`on_step(Step(...))`; `specref.runstats.RunStats.add` is such a callback and adds up a run's
statistics, so the statistics come from the loop itself, never from a second copy of it.  A callback that returns
True ends the run after that iteration (a command stops at a stop sequence this way).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from specref import mrs, mrs_tree
from specref.protocol import (check_tokens, check_tree, draft_length, keep_path, next_distributions,
                              tree_distributions)

# on_step(step) -> None or a bool; True ends the run after this step
OnStep = Callable[["Step"], "bool | None"]


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

    tree: draft a tree of this shape per call instead of a chain (`Tree`; K must be its number of
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
        levels = None
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
            draft_calls = k
        else:  # the same lines for a tree: several children per node (module docstring)
            tokens, parents, p, draft_calls = draft_tree(draft_model, x, tree, rng)  # lines 5-7
            k = len(tokens)
            if k:
                q = tree_distributions(target_model, x, tokens, parents)  # line 8: one target call, a row per node
                new = verify_tree(tokens, parents, p, q, rng)  # lines 9-14: accepted path plus one token
                path = path_nodes(tokens, parents, new[:-1])
                keep_path(target_model, path)  # the target's cache keeps the accepted path, not the rest
                levels = len(path) + bool(np.any(parents == (path[-1] if path else -1)))  # + the last node's tests
            else:  # the draft proposed nothing: one step of Algorithm 1
                q, new = next_distributions(target_model, x, 1), None
        if new is None:  # nothing to verify: line 14 alone, x_{n+1} ~ q (Algorithm 1's step)
            new = np.array([mrs.sample(mrs.check_distribution(q[0], "target distribution"), rng)])
        n_accepted = len(new) - 1
        new = new[: T - len(x)]  # Alg. 2 may overshoot T; keep the first N (same law)
        x = np.concatenate([x, new])  # n <- n + len(new)
        if on_step is not None and on_step(Step(tokens=new, n_drafted=k, n_accepted=n_accepted,
                                                draft_calls=draft_calls, levels_tested=levels)):
            break
    return x


# ---------------------------------------------------------------- trees of drafts

# How a node's children are drawn (`draw_children`), and the tree verifier that is exact for each.
TREE_VERIFIERS = {"topk": mrs_tree.verify_tree_topk, "iid": mrs_tree.verify_tree_mss, "without_replacement": mrs_tree.verify_tree_rrs}


@dataclass(frozen=True)
class Tree:
    """The shape of a tree of drafts and how its children are drawn (which fixes its exact verifier).

    parents is a template [N] in topological order (-1 for a child of the root, else j < i); the
    children of a node are drawn together, in index order (for "topk" the best first).  A drawn
    tree has this shape, less any node its parent's row could not fill (`draft_tree`).  `parse`
    reads the names the commands use:
        "2x1"   widths per depth: every node at depth d gets the d-th number of children
                (2 children of the root, 1 under each: 4 nodes); "1x1x1x1" is a chain of 4
        "3+1"   a spine: 3 children of the root, 1 under its first child (4 nodes);
                "2+1+1": 2, then 1 under the first, then 1 under that (4 nodes); "1+1+1+1" a chain
    """

    parents: tuple[int, ...]
    children: str = "topk"  # "topk", "iid" or "without_replacement" (`draw_children`)
    name: str = ""  # how the commands write the shape; made from parents if not given

    def __post_init__(self):
        _, parents = check_tree(np.zeros(len(self.parents), np.int64), np.asarray(self.parents, np.int64))
        if self.children not in TREE_VERIFIERS:
            raise ValueError(f"children must be one of {', '.join(TREE_VERIFIERS)}, got {self.children!r}")
        object.__setattr__(self, "parents", tuple(int(j) for j in parents))
        if not self.name:
            object.__setattr__(self, "name", ",".join(map(str, self.parents)))

    @classmethod
    def parse(cls, text: str, children: str = "topk") -> "Tree":
        """The tree named `text` ("2x1", "3+1", ...: the class docstring); ValueError if it is not one."""
        t = "".join(str(text).split()).lower()
        sep = "+" if "+" in t else "x"
        parts = t.split(sep)
        if not t or not all(s.isdigit() and int(s) >= 1 for s in parts):
            raise ValueError(f"a tree is written like 2x1 (children per node at each depth) or 3+1 (children of "
                             f"the root, then under its first child, ...), each number >= 1; got {text!r}")
        widths, parents = [int(s) for s in parts], []
        frontier = [-1]  # the nodes that get the next depth's children
        for w in widths:
            nxt = []
            for j in frontier:
                nxt += list(range(len(parents), len(parents) + w))
                parents += [j] * w
            frontier = nxt if sep == "x" else nxt[:1]  # a spine grows under the first child only
        return cls(tuple(parents), children, sep.join(parts))

    @classmethod
    def chain(cls, K: int, children: str = "iid") -> "Tree":
        """K drafts in a row: the tree Algorithm 2 drafts (with i.i.d. children, verify_tree_mss is `mrs.verify`)."""
        return cls(tuple(range(-1, K - 1)), children, "x".join(["1"] * K))

    @property
    def size(self) -> int:
        """N, the nodes of the shape: the most drafts one call scores."""
        return len(self.parents)

    @property
    def depth(self) -> int:
        """The most drafts one call can accept (nodes on the longest path from the root)."""
        d = []
        for j in self.parents:
            d.append(d[j] + 1 if j >= 0 else 1)
        return max(d)

    @property
    def rows(self) -> int:
        """Draft rows one call needs: the root and every node with children (K for a chain of K)."""
        return len(set(self.parents))

    @property
    def verifier(self) -> Callable:
        """The tree verifier that is exact for children drawn this tree's way (`TREE_VERIFIERS`)."""
        return TREE_VERIFIERS[self.children]

    def with_children(self, children: str) -> "Tree":
        """The same shape with children drawn another way."""
        return Tree(self.parents, children, self.name)


def draw_children(p: np.ndarray, width: int, children: str, rng: np.random.Generator) -> list[int]:  # [V] -> [<= width]
    """One node's children, drawn from the draft's row p as `children` says; each way has its exact verifier.

    "topk"                 the `width` tokens with the largest p (ties to the lower id; never a token with
                           p = 0, so fewer if fewer have p > 0); no randomness.  verify_tree_topk is exact
                           for children chosen in any way that does not look at the target, so a draft may
                           rank them itself instead (its `candidates(tokens, k)`: `draft_tree`).
    "iid"                  `width` independent draws from p (`mrs.sample`, one uniform each); they may
                           repeat.  Verified by verify_tree_mss (SpecInfer).
    "without_replacement"  min(width, tokens with p > 0) draws, each from p without the tokens already
                           drawn (one uniform each).  Verified by verify_tree_rrs (recursive rejection sampling).
    The children are returned in the order drawn, which is the order the verifiers test them in.
    """
    if children == "topk":
        live = np.flatnonzero(p > 0)
        if width < live.size:  # the width-th largest value, then every token above it and the lowest ids at it
            kth = np.partition(p[live], live.size - width)[live.size - width]
            above, at = live[p[live] > kth], live[p[live] == kth]
            live = np.concatenate([above, at[: width - above.size]])
        return [int(v) for v in live[np.lexsort((live, -p[live]))]]  # largest p first, ties to the lower id
    if children == "iid":
        return [mrs.sample(p, rng) for _ in range(width)]
    if children == "without_replacement":
        left, out = p.copy(), []
        for _ in range(min(width, int(np.count_nonzero(p > 0)))):
            out.append(mrs.sample(left, rng))
            left[out[-1]] = 0.0
        return out
    raise ValueError(f"children must be one of {', '.join(TREE_VERIFIERS)}, got {children!r}")


def draft_tree(draft_model, x: np.ndarray, tree: Tree, rng: np.random.Generator
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:  # [n] -> tokens [m], parents [m], p [m+1, V], calls
    """Lines 5-7 for a tree: the drafted tokens, their parents, the draft's rows and the draft calls made.

    The nodes of `tree`'s shape get their children parent by parent (the root first, then node 0,
    node 1, ...): the draft's row after the node's root-to-node path, then `draw_children` with the
    number of children the shape gives it.  With "topk" a draft that offers `candidates(tokens, k)`
    (the k tokens it would propose, best first; prompt lookup's several matches) names them itself.
    A node its parent's row could not fill (fewer tokens with p > 0, or fewer candidates, than the
    shape asks) is left out with its subtree, so m <= N.  p holds the row each node's children were
    drawn from: row 0 at the root, row i + 1 after node i, zeros after a node without children (no
    verifier reads those rows; verify_tree_topk reads none).
    """
    shape = tree.parents
    kids = [[] for _ in range(len(shape) + 1)]  # kids[r]: template nodes under template row r (0: the root)
    for i, j in enumerate(shape):
        kids[j + 1].append(i)
    candidates = getattr(draft_model, "candidates", None) if tree.children == "topk" else None
    token, path, rows, calls = {}, {-1: x}, {}, 0  # per template node: its token, its tokens from the prompt, its row
    for r, under in enumerate(kids):  # template row r: the root (r = 0) or template node r - 1
        if not under or (r - 1) not in path:  # a leaf, or a node left out
            continue
        p_r = mrs.check_distribution(next_distributions(draft_model, path[r - 1], 1)[0], "draft distribution")
        calls += 1
        rows[r - 1] = p_r
        if candidates is not None:
            xs = [int(v) for v in candidates(path[r - 1], len(under))]
            if len(xs) > len(under) or len(set(xs)) < len(xs):
                raise ValueError(f"{draft_model!r}.candidates returned {xs} for k = {len(under)}; expected at most "
                                 f"{len(under)} distinct token ids")
        else:
            xs = draw_children(p_r, len(under), tree.children, rng)
        for i, v in zip(under, xs):  # children the row could not fill stay out
            token[i], path[i] = v, np.append(path[r - 1], v)
    kept = sorted(token)  # template nodes drawn, in template order (parents before children)
    index = {i: n for n, i in enumerate(kept)}
    parents = np.array([index[shape[i]] if shape[i] >= 0 else -1 for i in kept], dtype=np.int64)
    tokens = np.array([token[i] for i in kept], dtype=np.int64)
    p = np.zeros((len(kept) + 1, rows[-1].shape[0]))  # [m+1, V]
    p[0] = rows[-1]
    for i in kept:
        if i in rows:
            p[index[i] + 1] = rows[i]
    return tokens, parents, p, calls


def path_nodes(tokens: np.ndarray, parents: np.ndarray, path) -> list[int]:  # [N], [N], [m] -> [m] node indices
    """The nodes of a tree whose tokens are `path`, from a child of the root down: the accepted path
    a tree verifier returned (its output without the last token), as `keep_path` wants it.

    At each depth the path goes on at a child with the path's next token; siblings that repeat a
    token (i.i.d. children may) have the same root-to-node tokens and so the same rows and cache
    entries, and the first whose subtree holds the rest of the path is taken.  ValueError if no
    path of the tree has these tokens.
    """
    tokens, parents = np.asarray(tokens), np.asarray(parents)
    path = [int(v) for v in path]

    def walk(node: int, depth: int) -> list[int] | None:
        if depth == len(path):
            return []
        for i in np.flatnonzero((parents == node) & (tokens == path[depth])):
            rest = walk(int(i), depth + 1)
            if rest is not None:
                return [int(i)] + rest
        return None

    nodes = walk(-1, 0)
    if nodes is None:
        raise ValueError(f"the tokens {path} are not a path from the root of the tree (tokens {tokens.tolist()}, "
                         f"parents {parents.tolist()}): the tree verifier returned tokens it was not given")
    return nodes
