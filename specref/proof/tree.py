"""Trees of drafts, proven: how a tree is drawn and the exact law of one verifier call with its tree drawn.

specref.mrs_tree verifies a tree of drafts three ways, and each is exact only for trees drawn its way.
For each algorithm of ALGORITHMS ("tree-topk", "tree-mss", "tree-rrs") this module holds what a
test or a conformance checker needs (an `Algorithm`):
- how its trees are drawn: `draw_tree` with the algorithm's `drawing` ("topk": the
  draft's most likely tokens, "iid": i.i.d. draws from the draft, "without_replacement"), and
  `tree_draws`, every tree with its exact chance;
- its reference verifier, from specref.verifiers;
- the exact law of one call: its rule's law for a fixed tree (`specref.proof.tree_rule.Rule.law`, over
  the verifier's uniforms), and `Algorithm.call_law`, with the drawing of the tree included;
  `fresh_children_law` computes the latter a second way, for the correct rules only;
- its known bugs, from specref.proof.bugs.tree.

The laws are written in plain Python arithmetic, independently of specref.mrs_tree's float code, so rows
of fractions.Fraction give exact laws.  A law is a dict: output tuple (the accepted path, then one
more token) -> probability.  Rows depend on the context: draft_row(prefix) and target_row(prefix)
are the next-token rows after the tokens `prefix` (a tuple, () at the root), as in
`laws.chain_call_law`; a bug that reads the wrong node's row is invisible unless they do.
Chen's letters: p = draft, q = target.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction
from typing import Callable

import numpy as np

from specref import verifiers
from specref.proof import laws
from specref.proof.bugs import tree as tree_bugs
from specref.proof.tree_rule import MSS, RRS, TOPK, Rule, _as_float, _normalised
from specref.sampling import next_distributions
from specref.trees import DRAWINGS, draw_children, node_paths  # DRAWINGS: how each algorithm's trees are drawn

# The suite's small tree: two children at the root and two under each (N = 6 nodes, depth 2).
WIDTHS = (2, 2)


# ---------------------------------------------------------------- the shape of a tree

def tree_rows(tokens, parents, row: Callable) -> list:  # [N], [N] -> [N+1] rows [V]
    """[N+1] rows of a model on the tree: row(()) at the root, then row(path to node i) after node i."""
    return [row(())] + [row(path) for path in node_paths(tokens, parents)]


# ---------------------------------------------------------------- drawing a tree

def draw_tree(drawing: str, draft_row: Callable, widths, rng: np.random.Generator) -> tuple[list[int], list[int]]:
    """(tokens, parents) of a tree drawn level by level: each node at depth d gets its children from
    draft_row(path) by `draw_children` with width widths[d].  Nodes are numbered level by level, in the
    order they were drawn, so a parent comes before its children and siblings are in drawing order."""
    tokens, parents, frontier = [], [], [(-1, ())]  # frontier: (node, path) of the nodes to expand
    for width in widths:
        nxt = []
        for j, path in frontier:
            for x in draw_children(draft_row(path), width, drawing, rng):
                tokens.append(int(x))
                parents.append(j)
                nxt.append((len(tokens) - 1, path + (int(x),)))
        frontier = nxt
    return tokens, parents


def children_law(drawing: str, row, width: int) -> list[tuple[object, tuple]]:  # row [V]
    """Every outcome of `draw_children` with its exact chance: [(chance, tokens)] (fractions in, fractions out)."""
    live = [x for x in range(len(row)) if row[x] > 0]
    if drawing == "topk":
        return [(1, tuple(draw_children(row, width, "topk", None)))]
    if drawing == "iid":
        return [(math.prod(row[x] for x in xs), xs) for xs in itertools.product(live, repeat=width)]
    if drawing == "without_replacement":
        out = []
        for xs in itertools.permutations(live, min(width, len(live))):
            chance, used = 1, 0
            for x in xs:
                chance, used = chance * row[x] / (1 - used), used + row[x]
            out.append((chance, xs))
        return out
    raise ValueError(f"drawing must be one of {DRAWINGS}, got {drawing!r}")


def tree_draws(drawing: str, draft_row: Callable, widths) -> list[tuple[object, list[int], list[int]]]:
    """Every tree `draw_tree` can return, numbered as it numbers them, with its exact chance: [(chance, tokens, parents)]."""
    states = [(1, [], [], [(-1, ())])]  # chance, tokens, parents, frontier
    for width in widths:
        nxt = []
        for chance, tokens, parents, frontier in states:
            options = [children_law(drawing, draft_row(path), width) for _, path in frontier]
            for combo in itertools.product(*options):
                c, toks, pars, front = chance, list(tokens), list(parents), []
                for (j, path), (cc, xs) in zip(frontier, combo):
                    c = c * cc
                    for x in xs:
                        toks.append(x)
                        pars.append(j)
                        front.append((len(toks) - 1, path + (x,)))
                nxt.append((c, toks, pars, front))
        states = nxt
    return [(c, t, p) for c, t, p, _ in states if c > 0]


# ---------------------------------------------------------------- one call with its tree drawn

def tree_call_law(law_given_tree: Callable, drawing: str, draft_row: Callable, target_row: Callable,
             widths) -> dict[tuple, object]:
    """Exact law of one call with the tree drawn as `drawing` says: the sum over `tree_draws` of each tree's
    chance times law_given_tree(tokens, parents, p, q) (a `Rule.law`, a bug's law), p and q the rows on that tree."""
    law = {}
    for chance, tokens, parents in tree_draws(drawing, draft_row, widths):
        p, q = tree_rows(tokens, parents, draft_row), tree_rows(tokens, parents, target_row)
        for out, v in law_given_tree(tokens, parents, p, q).items():
            law[out] = law.get(out, 0) + chance * v
    return law


def fresh_children_law(drawing: str, draft_row: Callable, target_row: Callable, widths) -> dict[tuple, object]:
    """The correct law of one call with the tree drawn, computed another way than `tree_call_law`: at each node the
    next child is a fresh draw from the draft (given the earlier children: i.i.d., or without them), and only
    the subtree of an accepted child matters, so the law follows from one recursion over contexts, without
    enumerating trees.  For "topk" it is the closed form: y ~ q, followed into the tree when y is a child."""
    memo = {}

    def add(law, chance, more, head=()):
        for out, v in more.items():
            law[head + out] = law.get(head + out, 0) + chance * v

    def at(prefix):  # the law of the output from the node after `prefix`
        if prefix in memo:
            return memo[prefix]
        q_row, law = target_row(prefix), {}
        if len(prefix) == len(widths):  # a leaf: the bonus token
            law = {(y,): v for y, v in enumerate(q_row) if v > 0}
        elif drawing == "topk":
            xs = draw_children(draft_row(prefix), widths[len(prefix)], "topk", None)
            for y, v in enumerate(q_row):
                if v > 0:
                    add(law, v, at(prefix + (y,)) if y in xs else {(): 1}, (y,))
        else:
            p_row = draft_row(prefix)
            m = widths[len(prefix)] if drawing == "iid" else min(widths[len(prefix)], sum(1 for v in p_row if v > 0))
            law = tests(prefix, list(q_row), list(p_row), m)
        memo[prefix] = law
        return law

    def tests(prefix, w, d, m):  # m children left to draw (from d) and test against the current q, w
        if m == 0:
            return {(y,): v for y, v in enumerate(w) if v > 0}
        law = {}
        for x, dx in enumerate(d):
            if dx > 0:
                a = min(1, w[x] / dx)
                if a > 0:  # x drawn and accepted: the walk goes on below x
                    add(law, dx * a, at(prefix + (x,)), (x,))
                if a < 1:  # x drawn and rejected: q <- norm(max(0, q - p)); without replacement also p <- p without x
                    r = [max(0 * v, v - u) for u, v in zip(d, w)]
                    nd = d if drawing == "iid" else _normalised([0 * v if y == x else v for y, v in enumerate(d)])
                    add(law, dx * (1 - a), tests(prefix, _normalised(r), nd, m - 1))
        return law

    return at(())


def _model_rows(model, context: tuple) -> Callable:  # path -> the model's row after context + path, each once
    seen = {}

    def row(path: tuple) -> np.ndarray:
        if path not in seen:
            seen[path] = next_distributions(model, np.array(context + path, dtype=np.int64), 1)[0]
        return seen[path]
    return row


def loop_law(law_given_tree: Callable, drawing: str, draft, target, prompt, N: int, widths) -> dict[tuple, float]:
    """Exact law of the N tokens a speculative loop with trees appends to `prompt`: each call draws a tree from the
    draft at the tokens so far (`drawing`'s way, `widths`), the target scores it, and the call's output has law
    law_given_tree(tokens, parents, p, q) (`Rule.law`, a bug's law); a call that overshoots N is cut to N.

    draft and target are models (specref.sampling); a model with an `order` (laws.MarkovChain) sees only its last
    `order` tokens, so one call law per such tail is computed.  For the correct rules this is the target's own
    sequence law (`laws.sequence_law`); for a bug it is that bug's law of whole sequences.
    """
    x = tuple(int(t) for t in prompt)
    orders = [getattr(model, "order", None) for model in (draft, target)]
    order = None if None in orders else max(orders)
    call_laws, done, frontier = {}, {}, {(): 1.0}  # finished sequences; unfinished ones with their probabilities
    while frontier:  # one round of calls: every unfinished sequence gets one more
        after = {}
        for seq, w in frontier.items():
            context = x + seq
            tail = context[-order:] if order and len(context) >= order else context
            if tail not in call_laws:
                call_laws[tail] = tree_call_law(law_given_tree, drawing, _model_rows(draft, context),
                                           _model_rows(target, context), widths)
            for out, v in call_laws[tail].items():
                longer = seq + out
                into = done if len(longer) >= N else after
                into[longer[:N]] = into.get(longer[:N], 0.0) + w * float(v)
        frontier = after
    return done


def continued(law: dict, target_row: Callable, length: int) -> dict[tuple, object]:
    """A call's output law continued with target draws to `length` tokens (`laws.continued_law`)."""
    return laws.continued_law(law, target_row, length)


def target_law(target_row: Callable, length: int) -> dict[tuple, object]:
    """The target's law of `length` tokens: prod_t q(x_t | x_1..x_{t-1})."""
    return laws.continued_law({(): 1}, target_row, length)


def largest_difference(law: dict, target: dict) -> tuple[object, tuple | None]:
    """(the largest |law - target| over the outcomes, where it is): 0 and None when the laws are equal."""
    worst, where = 0, None
    for k in set(law) | set(target):
        diff = abs(law.get(k, 0) - target.get(k, 0))
        if diff > worst:
            worst, where = diff, k
    return worst, where


# ---------------------------------------------------------------- rows for the tests

def context_rows(seed: int, V: int = 4, zeros: float = 0.3, close: bool = False) -> tuple[Callable, Callable]:
    """(draft_row, target_row): rows of small integer weights, in fractions, drawn afresh for every context.

    Each target weight is 0 with chance `zeros`, else an integer 1..9; each draft weight likewise, or, when
    `close`, the target's weight plus an integer in -2..2 (at least 0): a draft that mostly agrees, so that
    walks reach the leaves, and that proposes tokens the target gives 0.  Every row keeps one token at
    least.  The rows of a prefix are fixed by (seed, prefix), so a model is a function of the context.
    """
    def weights(rng) -> np.ndarray:
        w = np.where(rng.random(V) < zeros, 0, rng.integers(1, 10, size=V))
        if not w.any():
            w[rng.integers(V)] = 1
        return w

    def make(which: int) -> Callable:
        cache = {}

        def row(prefix: tuple):
            if prefix not in cache:
                w = weights(np.random.default_rng([seed, 1, len(prefix), *[int(t) for t in prefix]]))  # the target's
                if which == 0:  # the draft's
                    rng = np.random.default_rng([seed, 0, len(prefix), *[int(t) for t in prefix]])
                    w = np.maximum(w + rng.integers(-2, 3, size=V), 0) if close else weights(rng)
                    if not w.any():
                        w[rng.integers(V)] = 1
                total = int(w.sum())
                cache[prefix] = [Fraction(int(v), total) for v in w]
            return cache[prefix]
        return row

    return make(0), make(1)


# The suite's one-call cases on WIDTHS (V = 4): (seed, context_rows options).  Both have zeros in p and q and rows
# that depend on the context; "close" also drafts children the target gives 0.  On each, every known bug but
# inclusive_zero_coin moves the law enough for a chi-square of at most about 4 200 calls to see it with
# 99.9% power (computed from the exact laws by power.check_power; the seeds were picked for that).
CASES = {"independent": (36, {"zeros": 0.15}), "close": (20, {"zeros": 0.15, "close": True})}


def case_rows(name: str) -> tuple[Callable, Callable]:
    """(draft_row, target_row) of one of CASES."""
    seed, options = CASES[name]
    return context_rows(seed, **options)


def float_rows(row: Callable) -> Callable:
    """A row function in float64 (cached per context), for sampling."""
    cache = {}

    def f(prefix: tuple) -> np.ndarray:
        if prefix not in cache:
            cache[prefix] = _as_float(row(prefix))
        return cache[prefix]
    return f


def sample_calls(verifier: Callable, drawing: str, draft_row: Callable, target_row: Callable, widths, n: int,
                 rng: np.random.Generator) -> Counter:
    """Counts of the outputs of n calls, each on a fresh tree drawn by `draw_tree` from the draft (same rng)."""
    draft_f, target_f = float_rows(draft_row), float_rows(target_row)
    counts = Counter()
    for _ in range(n):
        tokens, parents = draw_tree(drawing, draft_f, widths, rng)
        p = np.array(tree_rows(tokens, parents, draft_f))
        q = np.array(tree_rows(tokens, parents, target_f))
        counts[tuple(int(y) for y in verifier(np.array(tokens), np.array(parents), p, q, rng))] += 1
    return counts


# ---------------------------------------------------------------- the algorithms

@dataclass(frozen=True)
class Algorithm:
    """What a checker needs for one tree verifier: how its trees are drawn, the verifier, its exact law, its bugs."""

    name: str  # its name in specref.verifiers: "tree-topk", "tree-mss" or "tree-rrs"
    drawing: str  # how each node's children are drawn: "topk", "iid" or "without_replacement" (`draw_children`)
    verifier: Callable  # the reference: (tokens [N], parents [N], p [N+1, V], q [N+1, V], rng) -> tokens
    rule: Rule  # rule.law(tokens, parents, p, q): the exact law of one call for a fixed tree
    bugs: tuple  # the known bugs (specref.proof.bugs.tree.TreeBug): .name, .about, .sample, .law

    def draw(self, draft_row: Callable, widths, rng: np.random.Generator) -> tuple[list[int], list[int]]:
        """(tokens, parents) of a tree drawn the way this algorithm assumes."""
        return draw_tree(self.drawing, draft_row, widths, rng)

    def call_law(self, draft_row: Callable, target_row: Callable, widths, law: Callable | None = None) -> dict:
        """Exact law of one call (of the reference, or of `law`, a bug's) with the tree drawn this algorithm's way."""
        return tree_call_law(law or self.rule.law, self.drawing, draft_row, target_row, widths)

    @property
    def bug(self) -> dict:
        """The known bugs by name."""
        return {b.name: b for b in self.bugs}


# Each reference tree verifier of specref.verifiers (a row that is its own law) with its correct rule and its known bugs.
RULES = {"tree-topk": TOPK, "tree-mss": MSS, "tree-rrs": RRS}
ALGORITHMS = {name: Algorithm(name, verifiers.REGISTRY[name].drafts, verifiers.REGISTRY[name].function, RULES[name],
                              tree_bugs.BUGS[name]) for name in verifiers.references(verifiers.TREES)
              if name in RULES and name in tree_bugs.BUGS}  # a law without both fails tests/proof/test_registry.py
