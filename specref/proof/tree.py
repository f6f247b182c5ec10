"""Trees of drafts, proven: how a tree is drawn, the exact law of one verifier call, and the known bugs.

specref.mrs_tree verifies a tree of drafts three ways, and each is exact only for trees drawn its way.
For each algorithm of ALGORITHMS ("tree-topk", "tree-mss", "tree-rrs") this module holds what a
test or a conformance checker needs (an `Algorithm`):
- how its trees are drawn: `draw_tree` with the algorithm's `children` choice ("topk": the
  draft's most likely tokens, "iid": i.i.d. draws from the draft, "without_replacement"), and
  `tree_draws`, every tree with its exact chance;
- its reference verifier, from specref.mrs_tree;
- the exact law of one call: `Rule.law(tokens, parents, p, q)` for a fixed tree (over the
  verifier's uniforms), and `Algorithm.call_law`, with the drawing of the tree included;
  `fresh_children_law` computes the latter a second way, for the correct rules only;
- the known bugs, each a `TreeBug` (the shape of `broken.Bug`: name, about, sample, law), its
  docstring naming where it shipped.

The laws are written in plain Python arithmetic, independently of specref.mrs_tree's float code, so rows
of fractions.Fraction give exact laws.  A law is a dict: output tuple (the accepted path, then one
more token) -> probability.  Rows depend on the context: draft_row(prefix) and target_row(prefix)
are the next-token rows after the tokens `prefix` (a tuple, () at the root), as in
`stats.call_law`; a bug that reads the wrong node's row is invisible unless they do.
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

from specref import mrs, mrs_tree
from specref.trees import children_of, draw_children, node_paths
from specref.proof import broken, shipped, stats
from specref.protocol import next_distributions

# The suite's small tree: two children at the root and two under each (N = 6 nodes, depth 2).
WIDTHS = (2, 2)
# How each algorithm's trees are drawn: the draft's top tokens, i.i.d. draws, draws without replacement.
CHILDREN = ("topk", "iid", "without_replacement")


# ---------------------------------------------------------------- the shape of a tree

def tree_rows(tokens, parents, row: Callable) -> list:  # [N], [N] -> [N+1] rows [V]
    """[N+1] rows of a model on the tree: row(()) at the root, then row(path to node i) after node i."""
    return [row(())] + [row(path) for path in node_paths(tokens, parents)]


# ---------------------------------------------------------------- drawing a tree

def draw_tree(children: str, draft_row: Callable, widths, rng: np.random.Generator) -> tuple[list[int], list[int]]:
    """(tokens, parents) of a tree drawn level by level: each node at depth d gets its children from
    draft_row(path) by `draw_children` with width widths[d].  Nodes are numbered level by level, in the
    order they were drawn, so a parent comes before its children and siblings are in drawing order."""
    tokens, parents, frontier = [], [], [(-1, ())]  # frontier: (node, path) of the nodes to expand
    for width in widths:
        nxt = []
        for j, path in frontier:
            for x in draw_children(draft_row(path), width, children, rng):
                tokens.append(int(x))
                parents.append(j)
                nxt.append((len(tokens) - 1, path + (int(x),)))
        frontier = nxt
    return tokens, parents


def children_law(children: str, row, width: int) -> list[tuple[object, tuple]]:  # row [V]
    """Every outcome of `draw_children` with its exact chance: [(chance, tokens)] (fractions in, fractions out)."""
    live = [x for x in range(len(row)) if row[x] > 0]
    if children == "topk":
        return [(1, tuple(draw_children(row, width, "topk", None)))]
    if children == "iid":
        return [(math.prod(row[x] for x in xs), xs) for xs in itertools.product(live, repeat=width)]
    if children == "without_replacement":
        out = []
        for xs in itertools.permutations(live, min(width, len(live))):
            chance, used = 1, 0
            for x in xs:
                chance, used = chance * row[x] / (1 - used), used + row[x]
            out.append((chance, xs))
        return out
    raise ValueError(f"children must be one of {CHILDREN}, got {children!r}")


def tree_draws(children: str, draft_row: Callable, widths) -> list[tuple[object, list[int], list[int]]]:
    """Every tree `draw_tree` can return, numbered as it numbers them, with its exact chance: [(chance, tokens, parents)]."""
    states = [(1, [], [], [(-1, ())])]  # chance, tokens, parents, frontier
    for width in widths:
        nxt = []
        for chance, tokens, parents, frontier in states:
            options = [children_law(children, draft_row(path), width) for _, path in frontier]
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


# ---------------------------------------------------------------- the rule of a verifier, exactly

def _normalised(row):
    total = sum(row)
    return [v / total for v in row]


def _as_float(row) -> np.ndarray:
    return np.array([float(v) for v in row], dtype=np.float64)


class Coin:
    """An accept test with a uniform u and a ratio: u < ratio (strict, the correct one), or with `bits`,
    floor(u 2^bits) / 2^bits <= ratio: a coin on float32's grid that is 0 with chance 2^-bits, inclusive
    (SGLang #35771: a token the target gives 0 is accepted when the coin is 0)."""

    def __init__(self, inclusive: bool = False, bits: int = shipped.COIN_BITS):
        self.inclusive, self.bits = inclusive, bits

    def chance(self, ratio):
        """P(the test passes), exactly (ratio >= 0; +inf passes always)."""
        if not self.inclusive:
            return min(1, ratio)
        if ratio >= 1:
            return 1
        scale = 2 ** self.bits
        return Fraction(math.floor(ratio * scale) + 1, scale)  # the grid points 0, 1/scale, ... that are <= ratio

    def passes(self, u: float, ratio: float) -> bool:
        if not self.inclusive:
            return u < ratio
        return math.floor(u * 2 ** self.bits) / 2 ** self.bits <= ratio


STRICT = Coin()


def _same_row(row: int, children, parents) -> int:
    return row


def _own_bonus(q_row):
    return q_row


def _q_without(q_row, p_row, tried):  # [V], [V], tried tokens -> [V]: verify_tree_topk's recovered weights
    w = [0 * v if y in tried else v for y, v in enumerate(q_row)]
    return w if sum(w) > 0 else list(q_row)  # rounding left nothing: q itself (documented in specref.mrs)


class Rule:
    """One way of walking a tree of drafts, as specref.mrs's tree verifiers do, with pieces that can be swapped.

    test: "topk" (accept c_i with chance q(c_i) / (1 - q(c_1) - ... - q(c_{i-1}))), "mss" (min(1, q(c) / p(c)),
    then q <- norm(max(0, q - p))) or "rrs" (as mss, then p <- norm(p without c)).  The pieces (defaults:
    the correct ones): coin, the accept test; q_row(row, children, parents), the index of the q row read
    where row `row` should be; bonus(q_row), the weights of the token after a node without children;
    recovered(q_row, p_row, tried), "topk"'s weights after every child was rejected; merge_repeats, test a
    token only once per node (a repeated sibling is skipped: no uniform, no update).  `law` is the exact
    law of one call for a fixed tree, `sample` draws one call with a uniform per child tested and one for
    the last token, in specref.mrs's order.
    """

    def __init__(self, test: str, coin: Coin = STRICT, q_row: Callable = _same_row, bonus: Callable = _own_bonus,
                 recovered: Callable = _q_without, merge_repeats: bool = False):
        if test not in ("topk", "mss", "rrs"):
            raise ValueError(f"test must be 'topk', 'mss' or 'rrs', got {test!r}")
        self.test, self.coin, self.q_row, self.bonus = test, coin, q_row, bonus
        self.recovered, self.merge_repeats = recovered, merge_repeats
        self._nodes = {}  # cache of node(): many trees of an enumeration share a node

    def _ratio(self, x, q_row, rest, d_row):  # the accept test's ratio for child x
        if self.test == "topk":
            return q_row[x] / rest if rest > 0 else (math.inf if q_row[x] > 0 else 0)
        if not d_row[x] > 0:
            raise ValueError(f"a drafted token {x} has p(x) = 0 in the row it was drawn from")
        return q_row[x] / d_row[x]

    def node(self, xs: tuple, p_row, q_row) -> tuple[list, object, list]:  # [k], [V], [V]
        """One node with children tokens xs: ([(chance child k is accepted, k)], chance none is, weights of the last token then)."""
        key = (xs, id(p_row), id(q_row))  # rows by identity (kept alive in the cache): hashing fractions is slow
        if key in self._nodes:
            return self._nodes[key][:3]
        accepts, stay, tried = [], 1, []
        w, d, rest = list(q_row), list(p_row), 1
        for k, x in enumerate(xs):
            if (self.merge_repeats and x in tried) or not stay > 0:
                continue
            a = self.coin.chance(self._ratio(x, w, rest, d))
            accepts.append((stay * a, k))
            stay = stay * (1 - a)
            tried.append(x)
            if self.test == "topk":
                rest = rest - q_row[x]
                continue
            r = [max(0 * v, v - u) for u, v in zip(d, w)]  # q <- norm(max(0, q - p))
            if sum(r) > 0:
                w = _normalised(r)
            if self.test == "rrs":  # p <- norm(p without x)
                d = [0 * v if y == x else v for y, v in enumerate(d)]
                if sum(d) > 0:
                    d = _normalised(d)
        last = self.recovered(q_row, p_row, tried) if self.test == "topk" else w
        self._nodes[key] = (accepts, stay, last, p_row, q_row)
        return accepts, stay, last

    def law(self, tokens, parents, p, q) -> dict[tuple, object]:  # [N], [N], [N+1][V], [N+1][V]
        """Exact law of one call for this tree, over the uniforms (rows are not to change between calls: cached)."""
        if len(self._nodes) > 100_000:  # the cache keeps the rows it has seen alive: bound it
            self._nodes.clear()
        tokens, parents = [int(x) for x in tokens], [int(j) for j in parents]
        children = children_of(parents)

        def at(row):  # the law of what the walk outputs from the node of `row` on
            kids = children[row]
            q_row = q[self.q_row(row, children, parents)]
            if not kids:
                return self._ends(self.bonus, q_row)
            accepts, none, last = self.node(tuple(tokens[i] for i in kids), p[row], q_row)
            law = {}
            for chance, k in accepts:
                if chance > 0:
                    child = kids[k]
                    for rest, v in at(child + 1).items():
                        out = (tokens[child],) + rest
                        law[out] = law.get(out, 0) + chance * v
            if none > 0:
                for out, v in self._ends(None, last).items():
                    law[out] = law.get(out, 0) + none * v
            return law

        return at(0)

    def _ends(self, transform, row) -> dict:  # the law of one last token drawn from transform(row) (or row)
        key = ("end", transform, id(row))
        if key not in self._nodes:
            w = _normalised(row if transform is None else transform(row))
            self._nodes[key] = ({(y,): v for y, v in enumerate(w) if v > 0}, row)
        return self._nodes[key][0]

    def sample(self, tokens, parents, p, q, rng) -> np.ndarray:  # [N], [N], [N+1, V], [N+1, V] -> [n]
        """One call, in floats: a uniform per child tested (skipped repeats draw none), one for the last token."""
        tokens, parents = [int(x) for x in tokens], [int(j) for j in parents]
        p, q = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
        children = children_of(parents)
        out, row = [], 0
        while True:
            kids = children[row]
            q_row = q[self.q_row(row, children, parents)]
            if not kids:
                out.append(mrs.sample(_as_float(self.bonus(q_row)), rng))
                return np.array(out, dtype=np.int64)
            w, d, rest, tried, accepted = q_row.copy(), p[row].copy(), 1.0, [], None
            for i in kids:
                x = tokens[i]
                if self.merge_repeats and x in tried:
                    continue
                if self.coin.passes(rng.random(), self._ratio(x, w, rest, d)):
                    accepted = i
                    break
                tried.append(x)
                if self.test == "topk":
                    rest -= q_row[x]
                    continue
                r = np.maximum(w - d, 0.0)
                if r.sum() > 0:
                    w = r / r.sum()
                if self.test == "rrs":
                    d[x] = 0.0
                    if d.sum() > 0:
                        d = d / d.sum()
            if accepted is None:
                last = self.recovered(q_row, p[row], tried) if self.test == "topk" else w
                out.append(mrs.sample(_as_float(last), rng))
                return np.array(out, dtype=np.int64)
            out.append(tokens[accepted])
            row = accepted + 1


TOPK, MSS, RRS = Rule("topk"), Rule("mss"), Rule("rrs")


def topk_closed_law(tokens, parents, p, q) -> dict[tuple, object]:  # [N], [N], [N+1][V], [N+1][V]
    """verify_tree_topk's law in closed form (a check on `TOPK.law`): at each node child c is taken with chance q(c),
    and any other token y ends the walk with chance q(y); p is not used."""
    tokens, parents = [int(x) for x in tokens], [int(j) for j in parents]
    children = children_of(parents)

    def at(row):
        kids = children[row]
        law = {(y,): v for y, v in enumerate(q[row]) if v > 0 and y not in [tokens[i] for i in kids]}
        for i in kids:
            for rest, v in (at(i + 1).items() if q[row][tokens[i]] > 0 else []):
                law[(tokens[i],) + rest] = law.get((tokens[i],) + rest, 0) + q[row][tokens[i]] * v
        return law

    return at(0)


# ---------------------------------------------------------------- one call with its tree drawn

def call_law(law_given_tree: Callable, children: str, draft_row: Callable, target_row: Callable,
             widths) -> dict[tuple, object]:
    """Exact law of one call with the tree drawn as `children` says: the sum over `tree_draws` of each tree's
    chance times law_given_tree(tokens, parents, p, q) (a `Rule.law`, a bug's law), p and q the rows on that tree."""
    law = {}
    for chance, tokens, parents in tree_draws(children, draft_row, widths):
        p, q = tree_rows(tokens, parents, draft_row), tree_rows(tokens, parents, target_row)
        for out, v in law_given_tree(tokens, parents, p, q).items():
            law[out] = law.get(out, 0) + chance * v
    return law


def fresh_children_law(children: str, draft_row: Callable, target_row: Callable, widths) -> dict[tuple, object]:
    """The correct law of one call with the tree drawn, computed another way than `call_law`: at each node the
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
        elif children == "topk":
            xs = draw_children(draft_row(prefix), widths[len(prefix)], "topk", None)
            for y, v in enumerate(q_row):
                if v > 0:
                    add(law, v, at(prefix + (y,)) if y in xs else {(): 1}, (y,))
        else:
            p_row = draft_row(prefix)
            m = widths[len(prefix)] if children == "iid" else min(widths[len(prefix)], sum(1 for v in p_row if v > 0))
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
                    nd = d if children == "iid" else _normalised([0 * v if y == x else v for y, v in enumerate(d)])
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


def loop_law(law_given_tree: Callable, children: str, draft, target, prompt, N: int, widths) -> dict[tuple, float]:
    """Exact law of the N tokens a speculative loop with trees appends to `prompt`: each call draws a tree from the
    draft at the tokens so far (`children`'s way, `widths`), the target scores it, and the call's output has law
    law_given_tree(tokens, parents, p, q) (`Rule.law`, a bug's law); a call that overshoots N is cut to N.

    draft and target are models (specref.protocol); a model with an `order` (stats.MarkovChain) sees only its last
    `order` tokens, so one call law per such tail is computed.  For the correct rules this is the target's own
    sequence law (`stats.sequence_law`); for a bug it is that bug's law of whole sequences.
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
                call_laws[tail] = call_law(law_given_tree, children, _model_rows(draft, context),
                                           _model_rows(target, context), widths)
            for out, v in call_laws[tail].items():
                longer = seq + out
                into = done if len(longer) >= N else after
                into[longer[:N]] = into.get(longer[:N], 0.0) + w * float(v)
        frontier = after
    return done


def continued(law: dict, target_row: Callable, length: int) -> dict[tuple, object]:
    """A call's output law continued with target draws to `length` tokens (`stats.continued_law`)."""
    return stats.continued_law(law, target_row, length)


def target_law(target_row: Callable, length: int) -> dict[tuple, object]:
    """The target's law of `length` tokens: prod_t q(x_t | x_1..x_{t-1})."""
    return stats.continued_law({(): 1}, target_row, length)


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


def sample_calls(verifier: Callable, children: str, draft_row: Callable, target_row: Callable, widths, n: int,
                 rng: np.random.Generator) -> Counter:
    """Counts of the outputs of n calls, each on a fresh tree drawn by `draw_tree` from the draft (same rng)."""
    draft_f, target_f = float_rows(draft_row), float_rows(target_row)
    counts = Counter()
    for _ in range(n):
        tokens, parents = draw_tree(children, draft_f, widths, rng)
        p = np.array(tree_rows(tokens, parents, draft_f))
        q = np.array(tree_rows(tokens, parents, target_f))
        counts[tuple(int(y) for y in verifier(np.array(tokens), np.array(parents), p, q, rng))] += 1
    return counts


# ---------------------------------------------------------------- the known bugs

class TreeBug(broken.Bug):
    """A known way to get tree verification wrong: call it like `mrs_tree.verify_tree_mss` to sample it; `.law(tokens,
    parents, p, q)` is its exact law for a fixed tree (over its uniforms)."""

    def __call__(self, tokens, parents, p, q, rng):
        return self.sample(tokens, parents, p, q, rng)


def rule_bug(name: str, about: str, rule: Rule, sample: Callable | None = None) -> TreeBug:
    """A TreeBug whose law is `rule.law` and whose sampler is `rule.sample` (or `sample`, a verifier of specref.mrs)."""
    return TreeBug(name, about, sample or rule.sample, rule.law)


def _previous_row(row: int, children, parents) -> int:  # node i reads q[i], not q[i + 1]; the root q[0]
    return max(row - 1, 0)


def _first_sibling_row(row: int, children, parents) -> int:  # node i reads the row of its parent's first child
    return row if row == 0 else children[parents[row - 1] + 1][0] + 1


def _unwarped_bonus(q_row):  # the bonus token from softmax(logits): the rows without the request's temperature
    return shipped.unwarped(_as_float(q_row))


def _stale_residual(q_row, p_row, tried):  # [V], [V], tried tokens -> [V] weights
    # SGLang's kernel draws the recovered token from relu(q - draft_probs), where draft_probs holds q(c) at each
    # rejected child and, before the fix, whatever the buffer held elsewhere (empty_like): modelled as the
    # draft's own row p.  An all-zero relu gives the kernel's initial id, V - 1.
    stale = [q_row[y] if y in tried else v for y, v in enumerate(p_row)]
    r = [max(0 * v, v - u) for u, v in zip(stale, q_row)]
    return r if sum(r) > 0 else [0 * v for v in q_row[:-1]] + [1 + 0 * q_row[-1]]


def stale_draft_probs() -> TreeBug:
    """SGLang #12561 (the fix of issue #12512, output repetition): `draft_probs = torch.empty_like(target_probs)` in
    the spec v2 sampling path (eagle_info_v2.py), so tree_speculative_sampling_target_only built the recovered token's weights relu(q - draft_probs) from
    uninitialised memory; only the rejected children's entries were written (with q).  Modelled deterministically:
    the buffer holds the draft's rows p of the same call (a caching allocator handing back the block the draft's
    probabilities were just freed from), so the recovered token comes from max(0, q - p) with the rejected
    children removed.  Checked as tree-topk."""
    return rule_bug("stale_draft_probs", "draws the recovered token from max(0, q - draft_probs) with a draft_probs "
                    "buffer that was never cleared (stale rows, modelled as the draft's p; SGLang #12561)",
                    Rule("topk", recovered=_stale_residual))


def inclusive_zero_coin(test: str) -> TreeBug:
    """SGLang #35771 (fixed by PR #35798): tree_speculative_sampling_target_only accepted when `coin <= prob_acc /
    threshold_acc`, and torch.rand's float32 coin can be exactly 0, so a child the target gives probability 0 was
    accepted (EAGLE's evaluate_posterior tests `r <= acp` the same way).  Modelled with a coin on float32's grid
    (0 with chance 2^-24) and `<=`: the law moves by about 2^-24, which the exact tier sees and the u = 0 edge
    test catches for certain; a chi-square of 20 000 calls cannot."""
    return rule_bug("inclusive_zero_coin", "accepts iff coin <= ratio with a coin that is 0 with chance 2^-24: a child "
                    "the target gives probability 0 can be accepted (SGLang #35771, fixed by PR #35798)",
                    Rule(test, coin=Coin(inclusive=True)))


def wrong_logits_slice(test: str) -> TreeBug:
    """TensorRT-LLM #15098 (TRTLLM-13319): EAGLE3 dynamic-tree rejection sampling (added by PR #12588) verified
    with an incorrect slice of the target's logits until this fix.  Modelled as an off-by-one in the flattened rows: the children of
    node i are tested, and its last token drawn, against q[i] (the previous node's row: its parent's for node 0, a
    sibling's or a cousin's for the others) instead of q[i + 1]; the root's row is right."""
    return rule_bug("wrong_logits_slice", "reads the target row one before the node's own (q[i] for node i, an "
                    "off-by-one slice of the tree's logits; TensorRT-LLM #15098)", Rule(test, q_row=_previous_row))


def sibling_row(test: str) -> TreeBug:
    """Reading a sibling's row: every node reads the target row of its parent's first child, the row a chain
    verifier indexes by depth would read (right for first children, a sibling's row for the others)."""
    return rule_bug("sibling_row", "reads the target row of the node's first sibling (indexing rows by depth, as "
                    "for a chain), not its own", Rule(test, q_row=_first_sibling_row))


def bonus_unwarped(test: str) -> TreeBug:
    """EAGLE commit 8009b6d (eagle/model/utils.py, evaluate_posterior): after the deepest accepted node the token
    came from torch.softmax(logits) without the request's logits processor (temperature, top-p), while every test
    used the processed rows.  Modelled with temperature 0.7 (`shipped.REQUEST_TEMPERATURE`): the bonus token after
    a node without children is drawn from softmax(logits) = norm(q ** 0.7) instead of q."""
    return rule_bug("bonus_unwarped", f"draws the bonus token from the target row without the request's temperature "
                    f"{shipped.REQUEST_TEMPERATURE:g} (softmax of the raw logits; EAGLE 8009b6d)",
                    Rule(test, bonus=_unwarped_bonus))


def iid_rule_on_ranked_children() -> TreeBug:
    """Ranked (top-k) children verified with the i.i.d. ratio rule, min(1, q(c) / p(c)) and q <- norm(max(0, q - p)):
    exact only for children drawn i.i.d. from p, not for the draft's most likely tokens (llama.cpp's
    examples/speculative ranks the children of its draft tree and verifies them with the ratio rule).  The sampler is
    verify_tree_mss itself, handed top-k trees.  Checked as tree-topk."""
    return rule_bug("iid_rule_on_ranked_children", "verifies deterministic top-k children with SpecInfer's i.i.d. "
                    "ratio rule (min(1, q / p), residual max(0, q - p)): exact only for i.i.d. children", MSS,
                    mrs_tree.verify_tree_mss)


def rrs_without_zeroing_p() -> TreeBug:
    """Recursive rejection sampling without its second step: after a rejection q <- norm(max(0, q - p)) but p is
    not zeroed at the rejected token, so the next child (drawn without replacement, from p without the earlier
    ones) is tested against the wrong draft law.  The sampler is verify_tree_mss itself, handed trees drawn
    without replacement.  Checked as tree-rrs."""
    return rule_bug("rrs_without_zeroing_p", "verifies children drawn without replacement with SpecInfer's rule: "
                    "p is not zeroed at a rejected token, so later children are tested against the wrong draft law",
                    MSS, mrs_tree.verify_tree_mss)


def merged_repeated_siblings() -> TreeBug:
    """Duplicate siblings under SpecInfer: i.i.d. children repeat, and testing a token only once per node (a
    shortcut: a repeat of a rejected token would be rejected anyway) skips the second update
    q <- norm(max(0, q - p)) that the repeat's draw requires; merging identical siblings of a token tree (as trees
    built from several drafts' sequences merge common prefixes) loses it the same way.  Checked as tree-mss."""
    return rule_bug("merged_repeated_siblings", "tests a repeated i.i.d. sibling only once (identical siblings "
                    "merged): the repeat's residual update max(0, q - p) is skipped", Rule("mss", merge_repeats=True))


class SGLangThresholds(TreeBug):
    """SGLang's tree_speculative_sampling_target_only with --speculative-accept-threshold-single and -acc below 1:
    lossy by design.  At each node one coin u; walking the children c_1, c_2, ... with the cumulative target mass
    S_i = q(c_1) + ... + q(c_i), child c_i is accepted if u < S_i / threshold_acc or q(c_i) >= threshold_single;
    if none is, the token comes from q without the children.  At thresholds 1 this is exactly verify_tree_topk
    (the negative control); below 1 children are accepted too often.  Checked as tree-topk."""

    def __init__(self, single: float = 1.0, acc: float = 1.0):
        self.single, self.acc = Fraction(single), Fraction(acc)
        name = f"sglang_thresholds_single_{single:g}_acc_{acc:g}"
        super().__init__(name, f"SGLang's target-only tree sampler with threshold_single {single:g} and threshold_acc "
                               f"{acc:g}: accepts a child if u < S_i / {acc:g} or q(c_i) >= {single:g} (lossy below 1)")

    def _node(self, xs, q_row):  # [k], [V] -> [(chance c_k is the one accepted, k)], chance none is
        accepts, below, cum = [], 0, 0  # below: P(u < S_{i-1} / acc), already accepted
        for k, x in enumerate(xs):
            cum = cum + q_row[x]
            if q_row[x] > 0 and Fraction(q_row[x]) >= self.single:
                accepts.append((1 - below, k))
                return accepts, 0
            reach = min(1, cum / self.acc) if q_row[x] > 0 else below  # a q = 0 child is never accepted (PR #35798)
            accepts.append((reach - below, k))
            below = reach
        return accepts, 1 - below

    def law(self, tokens, parents, p, q) -> dict[tuple, object]:  # [N], [N], [N+1][V], [N+1][V]
        tokens, parents = [int(x) for x in tokens], [int(j) for j in parents]
        children = children_of(parents)

        def at(row):
            kids = children[row]
            if not kids:
                return {(y,): v for y, v in enumerate(q[row]) if v > 0}
            accepts, none = self._node([tokens[i] for i in kids], q[row])
            law = {}
            for chance, k in accepts:
                if chance > 0:
                    for rest, v in at(kids[k] + 1).items():
                        law[(tokens[kids[k]],) + rest] = law.get((tokens[kids[k]],) + rest, 0) + chance * v
            if none > 0:
                for y, v in enumerate(_normalised(_q_without(q[row], None, [tokens[i] for i in kids]))):
                    if v > 0:
                        law[(y,)] = law.get((y,), 0) + none * v
            return law

        return at(0)

    def sample(self, tokens, parents, p, q, rng) -> np.ndarray:  # [N], [N], [N+1, V], [N+1, V] -> [n]
        tokens, parents = [int(x) for x in tokens], [int(j) for j in parents]
        q = np.asarray(q, dtype=np.float64)
        children = children_of(parents)
        single, acc = float(self.single), float(self.acc)
        out, row = [], 0
        while True:
            kids, coin, cum, accepted = children[row], rng.random(), 0.0, None  # one coin per node, as the kernel
            for i in kids:
                cum += q[row, tokens[i]]
                if q[row, tokens[i]] > 0 and (coin < cum / acc or q[row, tokens[i]] >= single):
                    accepted = i
                    break
            if accepted is None:
                out.append(mrs.sample(_as_float(_q_without(q[row], None, [tokens[i] for i in kids])), rng))
                return np.array(out, dtype=np.int64)
            out.append(tokens[accepted])
            row = accepted + 1


# ---------------------------------------------------------------- the algorithms

@dataclass(frozen=True)
class Algorithm:
    """What a checker needs for one tree algorithm: how its trees are drawn, its verifier, its exact law, its bugs."""

    name: str  # "tree-topk", "tree-mss" or "tree-rrs"
    children: str  # how each node's children are drawn: "topk", "iid" or "without_replacement" (`draw_children`)
    verifier: Callable  # the reference: (tokens [N], parents [N], p [N+1, V], q [N+1, V], rng) -> tokens
    rule: Rule  # rule.law(tokens, parents, p, q): the exact law of one call for a fixed tree
    bugs: tuple  # the known bugs (TreeBug): diagnosis name (.name), sentence (.about), .sample, .law

    def draw(self, draft_row: Callable, widths, rng: np.random.Generator) -> tuple[list[int], list[int]]:
        """(tokens, parents) of a tree drawn the way this algorithm assumes."""
        return draw_tree(self.children, draft_row, widths, rng)

    def call_law(self, draft_row: Callable, target_row: Callable, widths, law: Callable | None = None) -> dict:
        """Exact law of one call (of the reference, or of `law`, a bug's) with the tree drawn this algorithm's way."""
        return call_law(law or self.rule.law, self.children, draft_row, target_row, widths)

    @property
    def bug(self) -> dict:
        """The known bugs by name."""
        return {b.name: b for b in self.bugs}


# SGLang's lossy thresholds at the settings the issue measures (both thresholds at once, as the flags are set).
THRESHOLDS = (SGLangThresholds(0.5, 0.5), SGLangThresholds(0.9, 0.9))

ALGORITHMS = {
    "tree-topk": Algorithm("tree-topk", "topk", mrs_tree.verify_tree_topk, TOPK, (
        stale_draft_probs(), inclusive_zero_coin("topk"), wrong_logits_slice("topk"), bonus_unwarped("topk"),
        *THRESHOLDS, iid_rule_on_ranked_children(), sibling_row("topk"))),
    "tree-mss": Algorithm("tree-mss", "iid", mrs_tree.verify_tree_mss, MSS, (
        inclusive_zero_coin("mss"), wrong_logits_slice("mss"), bonus_unwarped("mss"), sibling_row("mss"),
        merged_repeated_siblings())),
    "tree-rrs": Algorithm("tree-rrs", "without_replacement", mrs_tree.verify_tree_rrs, RRS, (
        inclusive_zero_coin("rrs"), wrong_logits_slice("rrs"), bonus_unwarped("rrs"), sibling_row("rrs"),
        rrs_without_zeroing_p())),
}
