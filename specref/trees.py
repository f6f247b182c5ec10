"""Trees of drafts: their shape, how their children are drawn, and the tree step of Algorithm 2.

Vocabulary (the same in mrs_tree.py, the model and the proofs).  A tree of N drafted nodes after a
prefix (the root is the prefix's last token) is
    tokens   [N]       the drafted token of each node, in topological order (a parent before its children)
    parents  [N]       -1 for a child of the root, else the index j < i of node i's parent
    rows     [N+1, V]  a model's rows on the tree: row 0 after the prefix, row i + 1 after node i's
                       root-to-node path (`tree_distributions`)
    depth of a node    0 for a child of the root (its RoPE position is the prefix's length + depth)
    depth of a tree    the nodes on its longest path: the most drafts one call can accept
    drawing            how a node's children are drawn ("topk", "iid", "without_replacement"),
                       which fixes the verifier that is exact for them (`specref.verifiers`)
A chain of K drafts is the tree with parents [-1, 0, ..., K-2].

A model may offer `model.score_tree(tokens, tree_tokens, parents) -> [N+1, V]`, all the rows in one
call, and `model.keep_path(nodes)` (`specref.sampling.keep_path`) to keep only an accepted path's
positions in its cache afterwards (the real model does both); any other model is asked once per node.

`Tree.step` is lines 5-14 of Chen's Algorithm 2 for a tree (`specref.sampling.speculative_sampling`
hands them here): draft a tree (`draft_tree`, each node's children by `draw_children`), score it in
one target call (`tree_distributions`), verify it (a verifier of specref/mrs_tree.py) and keep the
accepted path in the target's cache.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from specref import mrs, verifiers
from specref.sampling import check_tokens, keep_path, next_distributions

# How a node's children can be drawn (`draw_children`): "topk", "iid", "without_replacement"; each has its exact
# verifier (`verifiers.for_drawing`).
DRAWINGS = tuple(verifiers.REGISTRY[name].drafts for name in verifiers.references(verifiers.TREES))


# ---------------------------------------------------------------- the shape of a tree

def check_parents(parents, N: int | None = None) -> np.ndarray:  # [N] -> int64 [N]
    """`parents` as an int64 array after checking it is a non-empty tree in topological order (of N nodes if given):
    parents[i] = -1 for a child of the root, else the index j < i of node i's parent."""
    a = np.asarray(list(parents) if not isinstance(parents, np.ndarray) and not np.isscalar(parents) else parents)
    n = a.size if N is None else N
    if n == 0:
        raise ValueError("the tree is empty: give at least one node (tokens and parents of length N >= 1)")
    if a.ndim != 1 or a.size != n or not np.issubdtype(a.dtype, np.integer):
        raise ValueError(f"parents must be a 1-D sequence of {n} integers, one per tree token; "
                         f"got shape {a.shape} dtype {a.dtype}")
    bad = np.flatnonzero((a < -1) | (a >= np.arange(n)))
    if bad.size:
        i, j = int(bad[0]), int(a[bad[0]])
        if j < -1 or j >= n:
            raise ValueError(f"parents[{i}] = {j} is out of range: -1 for a child of the root, else a node "
                             f"index in [0, {n})")
        raise ValueError(f"parents[{i}] = {j} is not before node {i}: nodes must be in topological order "
                         f"(a parent before its children, parents[i] < i)")
    return a.astype(np.int64)


def check_tree(tokens, parents, V: int | None = None) -> tuple[np.ndarray, np.ndarray]:  # [N], [N] -> int64 [N], int64 [N]
    """(tokens, parents) as int64 arrays after checking they are a non-empty tree in topological order.

    tokens: N token ids (in [0, V) if V is given); parents as `check_parents` says.
    """
    t = check_tokens(tokens, V, "tree tokens", allow_empty=True)
    return t, check_parents(parents, t.size)


def children_of(parents) -> list[list[int]]:  # [N] -> N + 1 lists
    """children[row]: the nodes whose parent is the node of that row (row 0: the root, row i + 1: node i), ascending."""
    children = [[] for _ in range(len(parents) + 1)]
    for i, j in enumerate(parents):
        children[int(j) + 1].append(i)
    return children


def depths(parents) -> np.ndarray:  # [N] -> int64 [N]
    """Depth of each node below the root: 0 for a child of the root (node i's RoPE position is the prefix's
    length + its depth, the position it would have in the chain of its path)."""
    d = np.zeros(len(parents), np.int64)  # [N]
    for i, j in enumerate(parents):
        d[i] = 0 if j < 0 else d[j] + 1
    return d


def depth(parents) -> int:  # [N] -> the longest path
    """The number of nodes on the longest path from the root (a chain of K drafts has depth K; 0 for no nodes)."""
    return int(depths(parents).max()) + 1 if len(parents) else 0


def draft_rows(parents) -> int:  # [N] -> int
    """Draft rows one call of the tree needs: the root and every node with children (K for a chain of K)."""
    return len(set(int(j) for j in parents))


def node_paths(tokens, parents) -> list[tuple]:  # [N], [N] -> N tuples
    """The tokens from the root down to each node, that node's token last (parents before children)."""
    paths = []
    for x, j in zip(tokens, parents):
        paths.append((paths[j] if j >= 0 else ()) + (int(x),))
    return paths


def ancestors(parents) -> np.ndarray:  # [N] -> bool [N, N]
    """on_path[i, j]: node j is node i or one of its ancestors (what node i may attend to in the tree)."""
    on_path = np.eye(len(parents), dtype=bool)  # [N, N]
    for i, j in enumerate(parents):
        if j >= 0:
            on_path[i] |= on_path[j]  # j < i: node j's row is already complete
    return on_path



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


# ---------------------------------------------------------------- a model's rows on a tree

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
        out = np.stack([next_distributions(model, np.concatenate([prefix, path]).astype(np.int64), 1)[0]
                        for path in [()] + node_paths(t, par)])  # the root's row, then one after each node's path
    if out.ndim != 2 or out.shape[0] != t.size + 1:
        raise ValueError(f"{model!r} returned shape {out.shape} for a tree of {t.size} nodes; "
                         f"expected [{t.size + 1}, V] rows")
    return out


# ---------------------------------------------------------------- drawing a tree

def draw_children(p: np.ndarray, width: int, drawing: str, rng: np.random.Generator) -> list[int]:  # [V] -> [<= width]
    """One node's children, drawn from the draft's row p as `drawing` says; each way has its exact verifier.

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
    p = np.asarray(p, dtype=np.float64)
    if drawing == "topk":
        live = np.flatnonzero(p > 0)
        if width < live.size:  # the width-th largest value, then every token above it and the lowest ids at it
            kth = np.partition(p[live], live.size - width)[live.size - width]
            above, at = live[p[live] > kth], live[p[live] == kth]
            live = np.concatenate([above, at[: width - above.size]])
        return [int(v) for v in live[np.lexsort((live, -p[live]))]]  # largest p first, ties to the lower id
    if drawing == "iid":
        return [mrs.sample(p, rng) for _ in range(width)]
    if drawing == "without_replacement":
        left, out = p.copy(), []
        for _ in range(min(width, int(np.count_nonzero(p > 0)))):
            out.append(mrs.sample(left, rng))
            left[out[-1]] = 0.0
        return out
    raise ValueError(f"drawing must be one of {', '.join(DRAWINGS)}, got {drawing!r}")


def draft_tree(draft_model, x: np.ndarray, tree: "Tree", rng: np.random.Generator
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
    kids = children_of(shape)  # kids[r]: template nodes under template row r (0: the root)
    candidates = getattr(draft_model, "candidates", None) if tree.drawing == "topk" else None
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
            xs = draw_children(p_r, len(under), tree.drawing, rng)
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


# ---------------------------------------------------------------- the shape a loop drafts, and its step of Algorithm 2

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
    drawing: str = "topk"  # "topk", "iid" or "without_replacement" (`draw_children`)
    name: str = ""  # how the commands write the shape; made from parents if not given

    def __post_init__(self):
        _, parents = check_tree(np.zeros(len(self.parents), np.int64), np.asarray(self.parents, np.int64))
        verifiers.for_drawing(self.drawing)  # ValueError unless a verifier is exact for this way of drawing
        object.__setattr__(self, "parents", tuple(int(j) for j in parents))
        if not self.name:
            object.__setattr__(self, "name", ",".join(map(str, self.parents)))

    @classmethod
    def parse(cls, text: str, drawing: str = "topk") -> "Tree":
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
        return cls(tuple(parents), drawing, sep.join(parts))

    @classmethod
    def chain(cls, K: int, drawing: str = "iid") -> "Tree":
        """K drafts in a row: the tree Algorithm 2 drafts (with i.i.d. children, verify_tree_mss is `mrs.verify`)."""
        return cls(tuple(range(-1, K - 1)), drawing, "x".join(["1"] * K))

    @property
    def size(self) -> int:
        """N, the nodes of the shape: the most drafts one call scores."""
        return len(self.parents)

    @property
    def depth(self) -> int:
        """The most drafts one call can accept (nodes on the longest path from the root)."""
        return depth(self.parents)

    @property
    def rows(self) -> int:
        """Draft rows one call needs: the root and every node with children (K for a chain of K)."""
        return draft_rows(self.parents)

    @property
    def verifier(self) -> Callable:
        """The tree verifier that is exact for children drawn this tree's way (`verifiers.for_drawing`)."""
        return verifiers.for_drawing(self.drawing).function

    def with_drawing(self, drawing: str) -> "Tree":
        """The same shape with children drawn another way."""
        return Tree(self.parents, drawing, self.name)

    def step(self, draft_model, target_model, x: np.ndarray, rng: np.random.Generator,
             verify_tree: Callable) -> tuple[np.ndarray | None, int, int, int | None]:  # [n] -> new [m], ...
        """Lines 5-14 of Algorithm 2 for a tree: (the accepted path plus one token, or None if the draft
        proposed nothing; the nodes drafted; the draft calls made; the levels of the tree tested).

        With nothing drafted the caller takes one step of Algorithm 1 (line 14 alone); `levels` is None then.
        """
        tokens, parents, p, draft_calls = draft_tree(draft_model, x, self, rng)  # lines 5-7
        if not len(tokens):
            return None, 0, draft_calls, None
        q = tree_distributions(target_model, x, tokens, parents)  # line 8: one target call, a row per node
        new = verify_tree(tokens, parents, p, q, rng)  # lines 9-14: accepted path plus one token
        path = path_nodes(tokens, parents, new[:-1])
        keep_path(target_model, path)  # the target's cache keeps the accepted path, not the rest
        levels = len(path) + bool(np.any(parents == (path[-1] if path else -1)))  # + the last node's tests
        return new, len(tokens), draft_calls, levels
