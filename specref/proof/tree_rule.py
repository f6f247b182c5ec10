"""The rule of a tree verifier, exactly: the law of one call for a fixed tree, in plain Python arithmetic.

`Rule(test)` walks a tree as specref/mrs_tree.py documents, with the accept test `test` ("topk", "mss" or
"rrs": verify_tree_topk's, verify_tree_mss's, verify_tree_rrs's) and pieces a known bug may change (the
coin, the target row a node reads, the bonus token's row, the recovered token's weights, the token output for an
accepted node).  `.law` is the
exact law of one call (rows of fractions.Fraction give exact laws), `.sample` draws it with a generator.
TOPK, MSS and RRS are the three correct rules; specref.proof.bugs.tree builds the known bugs from them.
Independent of specref/mrs_tree.py's float code.  Chen's letters: p = draft, q = target.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Callable

import numpy as np

from specref import mrs
from specref.proof.bugs.shipped import COIN_BITS
from specref.trees import children_of


def _normalised(row):
    total = sum(row)
    return [v / total for v in row]


def _as_float(row) -> np.ndarray:
    if isinstance(row, np.ndarray) and row.dtype.kind == "f":  # the sampler's rows: already floats (a copy)
        return row.astype(np.float64)
    return np.array([float(v) for v in row], dtype=np.float64)  # the law's rows: Fractions


class Coin:
    """An accept test with a uniform u and a ratio: u < ratio (strict, the correct one), or with `bits`,
    floor(u 2^bits) / 2^bits <= ratio: a coin on float32's grid that is 0 with chance 2^-bits, inclusive
    (SGLang #35771: a token the target gives 0 is accepted when the coin is 0)."""

    def __init__(self, inclusive: bool = False, bits: int = COIN_BITS):
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


def _own_token(tokens, node: int, accepted: int, last: int) -> int:
    return tokens[node]


def _q_without(q_row, p_row, tried):  # [V], [V], tried tokens -> [V]: verify_tree_topk's recovered weights
    if isinstance(q_row, np.ndarray):  # the sampler's float rows, in O(V) array operations
        w = q_row.copy()
        w[list(tried)] = 0.0
        return w if w.sum() > 0 else q_row.copy()
    w = [0 * v if y in tried else v for y, v in enumerate(q_row)]
    return w if sum(w) > 0 else list(q_row)  # rounding left nothing: q itself (documented in specref.mrs)


class Rule:
    """One way of walking a tree of drafts, as specref.mrs's tree verifiers do, with pieces that can be swapped.

    test: "topk" (accept c_i with chance q(c_i) / (1 - q(c_1) - ... - q(c_{i-1}))), "mss" (min(1, q(c) / p(c)),
    then q <- norm(max(0, q - p))) or "rrs" (as mss, then p <- norm(p without c)).  The pieces (defaults:
    the correct ones): coin, the accept test; q_row(row, children, parents), the index of the q row read
    where row `row` should be; bonus(q_row), the weights of the token after a node without children;
    recovered(q_row, p_row, tried), "topk"'s weights after every child was rejected; merge_repeats, test a
    token only once per node (a repeated sibling is skipped: no uniform, no update); path_token(tokens, node,
    accepted, last), the token output for accepted node `node` on a path of `accepted` nodes that ends with the
    token `last` (the correct one: tokens[node]).  `law` is the exact
    law of one call for a fixed tree, `sample` draws one call with a uniform per child tested and one for
    the last token, in specref.mrs's order.
    """

    def __init__(self, test: str, coin: Coin = STRICT, q_row: Callable = _same_row, bonus: Callable = _own_bonus,
                 recovered: Callable = _q_without, merge_repeats: bool = False, path_token: Callable = _own_token):
        if test not in ("topk", "mss", "rrs"):
            raise ValueError(f"test must be 'topk', 'mss' or 'rrs', got {test!r}")
        self.test, self.coin, self.q_row, self.bonus = test, coin, q_row, bonus
        self.recovered, self.merge_repeats, self.path_token = recovered, merge_repeats, path_token
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

        def at(row, depth):  # the law of what the walk outputs from the node of `row` on, `depth` nodes accepted
            kids = children[row]
            q_row = q[self.q_row(row, children, parents)]
            if not kids:
                return self._ends(self.bonus, q_row)
            accepts, none, last = self.node(tuple(tokens[i] for i in kids), p[row], q_row)
            law = {}
            for chance, k in accepts:
                if chance > 0:
                    child = kids[k]
                    for rest, v in at(child + 1, depth + 1).items():  # a path of depth + len(rest) nodes
                        out = (self.path_token(tokens, child, depth + len(rest), rest[-1]),) + rest
                        law[out] = law.get(out, 0) + chance * v
            if none > 0:
                for out, v in self._ends(None, last).items():
                    law[out] = law.get(out, 0) + none * v
            return law

        return at(0, 0)

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
        path, row = [], 0  # the accepted nodes

        def output(last: int) -> np.ndarray:
            return np.array([self.path_token(tokens, i, len(path), last) for i in path] + [last], dtype=np.int64)

        while True:
            kids = children[row]
            q_row = q[self.q_row(row, children, parents)]
            if not kids:
                return output(mrs.sample(_as_float(self.bonus(q_row)), rng))
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
                return output(mrs.sample(_as_float(last), rng))
            path.append(accepted)
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
