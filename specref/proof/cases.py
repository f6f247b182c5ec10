"""The conformance checker's one-call cases: the rows a verifier is called with, and the correct law of each call.

`conform` runs its one-call chi-square checks on these cases (and its sequence checks with the sizes
below) and `power` computes, from the same cases, what those checks can see.  The same for tree
verifiers: `tree_cases`, each tree drawn by the checker, and the exact laws `tree_call_law` and
`tree_sequence_law`.
"""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import dataclass
from typing import Callable

import numpy as np

from specref import trees
from specref.proof import laws, tree

# Samples per one-call check and per large-vocabulary check.
N_CALLS = 20_000
N_LARGE_V = 3_000
# The whole-sequence checks: runs of `speculative_sampling` per check, and its K, on laws.markov_pair().
N_SEQUENCES = 6_000
SEQ_K = (2, 3)
# The large vocabulary (GPT-2's 50257): the law is checked on tokens spread across it.
LARGE_V = 50_257
# The exact law of one call of a correct verifier, per algorithm.
CORRECT = {"token": laws.token_call_law, "block": laws.block_call_law}


@dataclass(frozen=True)
class Case:
    """One call's rows: drafts are drawn from p [K, V]; q [K+1, V] are the target's rows."""

    name: str
    p: np.ndarray  # [K, V]
    q: np.ndarray  # [K+1, V]
    n: int  # calls sampled


def _rows(rng, K, V, concentration):
    return rng.dirichlet(np.full(V, concentration), size=K), rng.dirichlet(np.full(V, concentration), size=K + 1)


def cases(algorithm: str) -> list[Case]:
    """The suite's cases for one call: random, sharp and degenerate rows (K = 2, V = 4 token-level; K = 3, V = 3 block)."""
    K, V, seed = (2, 4, 2024) if algorithm == "token" else (3, 3, 2025)  # the rows of test_mrs.py, test_mrs_block.py
    rng = np.random.default_rng(seed)
    out = [Case("random", *_rows(rng, K, V, 1.0), N_CALLS), Case("sharp", *_rows(rng, K, V, 0.1), N_CALLS)]
    p, _ = _rows(rng, K, V, 1.0)
    out.append(Case("p_equals_q", p, np.vstack([p, p[:1]]), N_CALLS))
    lower, upper = np.arange(V) < V // 2, np.arange(V) >= V // 2  # the draft's tokens, the target's
    p = np.where(lower, 1.0, 0.0) / lower.sum()
    q = np.where(upper, np.arange(1.0, V + 1), 0.0)
    out.append(Case("disjoint_supports", np.tile(p, (K, 1)), np.tile(q / q.sum(), (K + 1, 1)), N_CALLS))
    p, q = _rows(rng, K, V, 1.0)
    out.append(Case("one_hot_p", np.eye(V)[np.arange(1, K + 1) % V], q, N_CALLS))
    out.append(Case("one_hot_q", p, np.eye(V)[(np.arange(K + 1) * 3 + V - 1) % V], N_CALLS))
    p, q = _rows(rng, K, V, 1.0)
    p[:, 0], q[:, 1] = 0.0, 0.0
    out.append(Case("zeros_in_both", p / p.sum(1, keepdims=True), q / q.sum(1, keepdims=True), N_CALLS))
    out.append(_large_vocabulary(K, rng))
    return out


def _large_vocabulary(K: int, rng) -> Case:
    # LARGE_V tokens; mass on a few ids at block edges (255, 256, 1023, 1024, ...) and on the last id.
    live = np.array([0, 255, 256, 1023, 1024, 4097, 32767, 32768, LARGE_V - 1])
    p, q = np.zeros((K, LARGE_V)), np.zeros((K + 1, LARGE_V))
    p[:, live[:6]] = rng.dirichlet(np.ones(6), size=K)
    q[:, live[3:]] = rng.dirichlet(np.ones(6), size=K + 1)
    return Case("large_vocabulary", p, q, N_LARGE_V)


def accepted_count_case() -> Case:
    """K = 4, V = 5, random rows: the law of the number of accepted drafts."""
    p, q = _rows(np.random.default_rng(13), 4, 5, 1.0)
    return Case("accepted_count", p, q, N_CALLS)


def count_marginal(law_or_counts):
    """A law or counts of whole outputs -> of the number of accepted drafts, keyed (a,)."""
    out = Counter() if isinstance(law_or_counts, Counter) else {}
    for o, v in law_or_counts.items():
        out[(len(o) - 1,)] = out.get((len(o) - 1,), 0) + v
    return out


# ---------------------------------------------------------------- trees of drafts (specref.proof.tree)
#
# A tree verifier (`mrs.verify_tree_*`'s contract) is checked on trees the checker draws itself, the way its
# algorithm assumes (tree.ALGORITHMS[...].drawing), from rows that depend on the context (a bug that reads
# another node's row is invisible otherwise).  The exact law of one call, the tree's drawing included, is
# tree.tree_call_law in fractions.

# Calls per one-call check (V = 4) and on the large vocabulary; runs of the tree loop per sequence check.
TREE_N_CALLS = 10_000
TREE_N_LARGE_V = 1_000
TREE_N_SEQUENCES = 6_000
# The sequence checks' trees: children per depth (2x2: two at each of two depths; 1x1x1: a chain of 3).
TREE_SEQ_WIDTHS = ((2, 2), (1, 1, 1))
# The large vocabulary's live ids (block edges, the last id): the rows' entries 0..5 are these tokens of LARGE_V.
TREE_LARGE_IDS = (0, 255, 256, 1023, 32768, LARGE_V - 1)


@dataclass(frozen=True)
class TreeCase:
    """One tree call's setting: a tree is drawn from draft_row with widths[d] children at depth d, and both models'
    rows on it are handed to the verifier.  The rows are fractions over len(ids) entries, entry j being token
    ids[j] of a vocabulary of V, and depend on the context: row(prefix), prefix a tuple of entries."""

    name: str
    draft_row: Callable  # prefix (tuple of entries) -> [len(ids)] fractions
    target_row: Callable
    widths: tuple  # children per depth
    n: int  # calls sampled
    ids: tuple  # entry -> token id
    V: int  # the vocabulary the verifier sees
    depth_first: bool = False  # nodes numbered depth first (siblings still in drawing order), not level by level
    uneven: bool = False  # only the root's first child keeps its descendants (`first_branch_only`): the branches end
    # at different depths, as in the padded trees EAGLE and Medusa hand their verifiers

    @property
    def shape(self) -> str:
        drawn = "x".join(str(w) for w in self.widths)
        return f"uneven (drawn {drawn}, one branch kept deep)" if self.uneven else drawn


def tree_cases() -> list[TreeCase]:
    """The one-call cases of a tree check: tree.CASES on 2x2 trees (V = 4), "close" again on uneven trees numbered
    depth first (3x1 drawn, then only the root's first child keeps its child: branches of depths 2, 1 and 1), and
    2x1 trees on a 50 257-token vocabulary with six live ids."""
    small = tuple(range(4))
    independent, close = tree.case_rows("independent"), tree.case_rows("close")
    return [TreeCase("independent", *independent, (2, 2), TREE_N_CALLS, small, 4),
            TreeCase("close", *close, (2, 2), TREE_N_CALLS, small, 4),
            TreeCase("close_uneven_depth_first", *close, (3, 1), TREE_N_CALLS, small, 4, depth_first=True,
                     uneven=True),
            TreeCase("large_vocabulary", *tree.context_rows(41, V=len(TREE_LARGE_IDS), zeros=0.2), (2, 1),
                     TREE_N_LARGE_V, TREE_LARGE_IDS, LARGE_V)]


def first_branch_only(tokens, parents) -> tuple[list[int], list[int], list[int]]:  # [N], [N] -> [M], [M], [M]
    """The tree with only the root's first child keeping its descendants: (tokens, parents, the kept nodes' old
    numbers), nodes in their old order, so parents still come first and siblings keep their order."""
    first = next(i for i, parent in enumerate(parents) if parent < 0)
    kept = []
    for i, parent in enumerate(parents):  # parents come first: a kept parent is already in `kept`
        if parent < 0 or (parent in kept and (parent == first or parents[parent] >= 0)):
            kept.append(i)
    new = {old: k for k, old in enumerate(kept)}
    return [int(tokens[i]) for i in kept], [new[parents[i]] if parents[i] >= 0 else -1 for i in kept], kept


def _on_first_branch(law: Callable) -> Callable:
    """law(tokens, parents, p, q) of the tree `first_branch_only` makes of the one it is handed (rows: root first)."""
    def pruned(tokens, parents, p, q):
        tokens, parents, kept = first_branch_only(tokens, parents)
        rows = [0] + [i + 1 for i in kept]
        return law(tokens, parents, [p[r] for r in rows], [q[r] for r in rows])
    return pruned


def depth_first(tokens, parents) -> tuple[list[int], list[int]]:  # [N], [N] -> [N], [N]
    """The same tree numbered depth first: each node right after its parent's earlier children's subtrees (siblings
    keep their order, parents still come first)."""
    children = trees.children_of(parents)
    order = []

    def visit(row):  # row 0: the root, i + 1: node i
        for i in children[row]:
            order.append(i)
            visit(i + 1)
    visit(0)
    new = {old: k for k, old in enumerate(order)}
    return [int(tokens[i]) for i in order], [new[parents[i]] if parents[i] >= 0 else -1 for i in order]


class TreeSetting:
    """A TreeCase's rows in float64, each context's computed once, and the calls a verifier is handed."""

    def __init__(self, case: TreeCase):
        self.case, self.ids = case, np.array(case.ids)
        self.draft, self.target = tree.float_rows(case.draft_row), tree.float_rows(case.target_row)

    def call(self, drawing: str, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(tokens [N], parents [N], p [N+1, V], q [N+1, V]) of one call: a tree drawn `drawing`'s way, its rows.
        (The tree is drawn over the case's entries, then its tokens named by their ids: the same law as drawing
        from the rows over the whole vocabulary, at the cost of the few live entries.)"""
        entries, parents = tree.draw_tree(drawing, self.draft, self.case.widths, rng)
        if self.case.uneven:
            entries, parents, _ = first_branch_only(entries, parents)
        if self.case.depth_first:
            entries, parents = depth_first(entries, parents)
        p, q = np.array(tree.tree_rows(entries, parents, self.draft)), np.array(tree.tree_rows(entries, parents,
                                                                                                self.target))
        if self.case.V != len(self.ids):  # the rows over the whole vocabulary: [N+1, V]
            p, q = self._spread(p), self._spread(q)
        return self.ids[entries], np.array(parents, dtype=np.int64), p, q

    def _spread(self, rows: np.ndarray) -> np.ndarray:  # [N+1, len(ids)] -> [N+1, V]
        out = np.zeros((len(rows), self.case.V))
        out[:, self.ids] = rows
        return out


@functools.lru_cache(maxsize=None)
def _tree_case(name: str) -> TreeCase:
    return next(c for c in tree_cases() if c.name == name)


@functools.lru_cache(maxsize=None)
def tree_call_law(algorithm: str, case: str, bug: str | None = None) -> dict[tuple, float]:
    """The exact law of one call on the tree case named `case` (tree drawn as `algorithm` draws it) of the
    algorithm's verifier, or of its known bug named `bug`; outputs in the vocabulary's token ids, floats."""
    alg, c = tree.ALGORITHMS[algorithm], _tree_case(case)
    given_tree = alg.bug[bug].law if bug else alg.rule.law
    law = alg.call_law(c.draft_row, c.target_row, c.widths, _on_first_branch(given_tree) if c.uneven else given_tree)
    return {tuple(c.ids[j] for j in out): float(v) for out, v in law.items()}


@functools.lru_cache(maxsize=None)
def tree_sequence_law(algorithm: str, widths: tuple, bug: str | None = None) -> dict[tuple, float]:
    """The exact law of the SEQ_N tokens the tree loop appends (laws.markov_pair, laws.SEQ_PROMPT; trees of
    `widths` drawn the algorithm's way) with its verifier (the target's own law) or its known bug `bug`."""
    alg, (target, draft) = tree.ALGORITHMS[algorithm], laws.markov_pair()
    if bug is None:
        return laws.sequence_law(target, laws.SEQ_PROMPT, laws.SEQ_N)
    return tree.loop_law(alg.bug[bug].law, alg.drawing, draft, target, laws.SEQ_PROMPT, laws.SEQ_N, widths)
