"""Portable test vectors for the tree verifiers of specref/mrs_tree.py: `python3 -m specref.proof.tree_vectors`
rewrites tree_vectors.json.

Each vector is a named case: the inputs of one call of `mrs_tree.verify_tree_topk`, `mrs_tree.verify_tree_mss` or
`mrs_tree.verify_tree_rrs` (tokens [N], parents [N], p and q [N+1, V]), the uniforms that call draws from its
rng in the order it draws them, and the tokens it returns.  Another implementation that draws its
uniforms in the order specref/mrs_tree.py states (its RANDOMNESS, with mrs.SAMPLING, copied into the JSON
as "uniform_order") must return the same tokens.  Chen's letters: p = draft,
q = target.

Every expected output is computed twice: by specref.mrs_tree, and by `exact_walk` below, an independent
replay of the documented rule in exact rational arithmetic (fractions.Fraction of the float64 inputs).
The generator refuses to write a vector on which the two disagree, or whose uniforms lie within MARGIN
of a decision boundary (an accept ratio strictly between 0 and 1, or a step of an inverse CDF), so float
rounding in any implementation cannot change a vector's tokens.  (A ratio of exactly 0 cannot move by
rounding: 0 / x is 0.)
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np

from specref import mrs, mrs_tree, verifiers
from specref.files import write_text
from specref.trees import children_of
from specref.proof import vectors
from specref.proof.vectors import ListedUniforms, _inverse_cdf, dumps

FORMAT = "specref-tree-vectors"
VERSION = 1
PATH = Path(__file__).with_name("tree_vectors.json")
# the reference tree verifiers of the registry
FUNCTIONS = tuple(verifiers.REGISTRY[name].function.__name__ for name in verifiers.references(verifiers.TREES))

# No uniform of a vector is closer than this to a decision boundary.
MARGIN = 1e-9


def uniform_order() -> list[str]:
    """specref/mrs_tree.py's documented use of rng (mrs_tree.RANDOMNESS), then how mrs.sample turns a uniform
    into a token (mrs.SAMPLING), one line per entry."""
    return [line.rstrip() for line in (mrs_tree.RANDOMNESS.strip() + "\n\n" + mrs.SAMPLING.strip()).splitlines()]


# ---------------------------------------------------------------- replaying a vector

def replay(case: dict, module=mrs_tree) -> list[int]:
    """Run one vector's call on `module` (specref.mrs_tree, a copy, or any object with the function) with its
    listed uniforms; raise if it does not draw exactly those."""
    rng = ListedUniforms(case["uniforms"])
    out = getattr(module, case["function"])(np.array(case["tokens"], dtype=np.int64),
                                            np.array(case["parents"], dtype=np.int64),
                                            np.array(case["p"]), np.array(case["q"]), rng)
    rng.check_all_used()
    return [int(y) for y in out]


def mismatches(doc: dict, module=mrs_tree, only: str | None = None) -> list[str]:
    """One line per vector whose replay on `module` differs from its recorded tokens (or raises); [] if all match."""
    return vectors.mismatches(doc, module, only, replay=replay, expected=lambda case: case["tokens_out"])


# ---------------------------------------------------------------- the exact reference

def _test_margin(u: Fraction, ratio: Fraction) -> Fraction:  # distance to a boundary that rounding could move
    return abs(u - ratio) if 0 < ratio <= 1 else Fraction(1)


def exact_walk(function: str, tokens, parents, p, q, uniforms) -> tuple[list[int], list[str], float]:
    """Replay one call by the documented rule in exact arithmetic: (tokens, trace, smallest margin of its uniforms)."""
    p = [[Fraction(v) for v in row] for row in p]
    q = [[Fraction(v) for v in row] for row in q]
    tokens, children = [int(x) for x in tokens], children_of(parents)
    rng = ListedUniforms(uniforms)
    out, trace, margin, row = [], [], Fraction(1), 0
    while True:
        where = "root" if row == 0 else f"node {row - 1}"
        w, S, d, D, rest = q[row], Fraction(1), p[row], Fraction(1), Fraction(1)
        accepted = None
        for i in children[row]:
            x, u = tokens[i], Fraction(rng.random())
            if function == "verify_tree_topk":  # u * max(0, 1 - q(c_1) - ... - q(c_{i-1})) < q(c)
                ratio = q[row][x] / rest if rest > 0 else Fraction(1 if q[row][x] > 0 else 0)
                passed = u * max(rest, Fraction(0)) < q[row][x]
                rest -= q[row][x]
            else:  # u < (w(c) D) / (S d(c)): the current q over the current p
                ratio = (w[x] * D) / (S * d[x])
                passed = u < ratio
            margin = min(margin, _test_margin(u, ratio))
            step = f"{where}: node {i} (token {x}) u={float(u)} vs {float(ratio):.6g}"
            if passed:
                trace.append(step + ": accept")
                accepted = i
                break
            trace.append(step + ": reject")
            if function == "verify_tree_topk":
                continue
            r = [max(Fraction(0), a / (S / D) - b) for a, b in zip(w, d)]  # max(0, w / (S / D) - d): scaled by D
            if sum(r) > 0:
                w, S = r, sum(r)
            if function == "verify_tree_rrs":
                d = [Fraction(0) if y == x else v for y, v in enumerate(d)]
                D = sum(d)
        if accepted is not None:
            out.append(tokens[accepted])
            row = accepted + 1
            continue
        if not children[row]:
            last, what = q[row], "bonus token from its q row"
        elif function == "verify_tree_topk":
            kids = {tokens[i] for i in children[row]}
            last = [Fraction(0) if y in kids else v for y, v in enumerate(q[row])]
            what = "recovered token from q without the children"
            if not sum(last) > 0:
                last, what = q[row], "recovered token: q without the children is all zero, so q itself"
        else:
            last, what = w, "recovered token from the last residual" if w is not q[row] else \
                "recovered token: every residual was all zero, so q itself"
        u = Fraction(rng.random())
        y, m = _inverse_cdf(last, u)
        margin = min(margin, m)
        trace.append(f"{where}: {what}, u={float(u)} -> {y}")
        out.append(y)
        rng.check_all_used()
        return out, trace, float(margin)


def exact_case(case: dict) -> tuple[list[int], list[str], float]:
    """`exact_walk` on a vector."""
    return exact_walk(case["function"], case["tokens"], case["parents"], case["p"], case["q"], case["uniforms"])


# ---------------------------------------------------------------- the vectors

# Rows of 4 tokens (Chen's letters: p = draft, q = target); R* at the root, A* and B* after its children.
PR, QR = [0.4, 0.3, 0.2, 0.1], [0.30, 0.45, 0.10, 0.15]  # q/p = .75, 1.5, .5, 1.5 (the Qualcomm post's Figure 10)
PA, QA = [0.25, 0.25, 0.25, 0.25], [0.1, 0.2, 0.3, 0.4]  # q/p = .4, .8, 1.2, 1.6
PB, QB = [0.1, 0.2, 0.3, 0.4], [0.2, 0.1, 0.3, 0.4]  # q/p = 2, .5, 1, 1
Q3 = [0.05, 0.15, 0.5, 0.3]  # a leaf's row
UNIFORM = [0.25, 0.25, 0.25, 0.25]


def _sparse(V: int, mass: dict[int, float]) -> list[float]:
    d = [0.0] * V
    for i, m in mass.items():
        d[i] = m
    return d


def _case(function: str, name: str, about: str, tokens, parents, p, q, uniforms) -> dict:
    return {"name": name, "function": function, "about": about, "tokens": tokens, "parents": parents,
            "p": p, "q": q, "uniforms": uniforms}


def cases() -> list[dict]:
    """The inputs of every vector (without outputs), in the order they are written."""
    # Six nodes: the root's children 0 (token 0) and 1 (token 1); nodes 2, 3 (tokens 2, 3) under node 0; nodes 4, 5
    # (tokens 1, 3) under node 1.  Row 0 (the root): PR, QR; row 1 (after node 0): PA, QA; row 2: PB, QB; leaves: Q3.
    tree = dict(tokens=[0, 1, 2, 3, 1, 3], parents=[-1, -1, 0, 0, 1, 1],
                p=[PR, PA, PB, UNIFORM, UNIFORM, UNIFORM, UNIFORM], q=[QR, QA, QB, Q3, Q3, Q3, Q3])
    pair = dict(parents=[-1, -1])  # two children of the root, both leaves
    V = 1025  # just above 4 * 256: sample's two-level path, with a padded last block
    big_p = [_sparse(V, {3: 0.5, 256: 0.3, 1024: 0.2}), _sparse(V, {0: 1.0}), _sparse(V, {0: 1.0})]
    big_q = [_sparse(V, {255: 0.2, 256: 0.3, 511: 0.1, 1024: 0.4}), _sparse(V, {0: 0.1, 512: 0.6, 1024: 0.3}),
             _sparse(V, {7: 1.0})]
    near = 1 - 1e-6  # rows that sum to 1 - 1e-6: inside TOL, one rounding-sized step from a distribution
    skew_p, skew_q = [0.5, 0.25, 0.25, 0.0], [0.2, 0.4, 0.2, 0.2]
    topk, mss, rrs = "verify_tree_topk", "verify_tree_mss", "verify_tree_rrs"
    return [
        _case(topk, "topk_accept_first_child_then_bonus", "root: node 0 (q = .3) accepted with u = .2; under it node 2 "
              "(q = .3) rejected with u = .5, node 3 tested against .4 / (1 - .3) = .571 and accepted with u = .5; the "
              "bonus from node 3's row (u = .22 -> token 2; softmax without the temperature would give token 1)",
              **tree, uniforms=[0.2, 0.5, 0.5, 0.22]),
        _case(topk, "topk_second_child_conditional", "root: node 0 rejected (u = .35 >= .3); node 1 tested against "
              "q(1) / (1 - q(0)) = .45 / .7 = .643 and accepted with u = .6; under it, in node 1's own row (node 0's "
              "would give .2), node 4 (q = .1) rejected with u = .15 and node 5 tested against .4 / .9 = .444 and "
              "accepted with u = .3; the bonus (u = .3 -> token 2)", **tree, uniforms=[0.35, 0.6, 0.15, 0.3, 0.3]),
        _case(topk, "topk_none_accepted_recovered", "root: both children rejected (.31 >= .3; .65 >= .643): the "
              "recovered token from q without tokens 0 and 1, [0, 0, .4, .6] (u = .3 -> token 2)", **tree,
              uniforms=[0.31, 0.65, 0.3]),
        _case(topk, "topk_q_zero_child_never_accepted", "q(0) = 0 at the root: node 0 is rejected even with u = 0 "
              "(strict <); node 1 (q = .5 of the 1 left) accepted with u = .4; the bonus (u = .9 -> token 3)", [0, 1],
              **pair, p=[UNIFORM] * 3, q=[[0.0, 0.5, 0.25, 0.25], Q3, Q3], uniforms=[0.0, 0.4, 0.9]),
        _case(topk, "topk_children_cover_q_rounding", f"q = {near} * [.5, .5, 0, 0]: node 1 is tested against "
              ".4999995 / .5000005 and rejected with u = .9999995; q without the children is all zero, so the last "
              "token comes from q itself (u = .7 -> token 1): never NaN, never id V", [0, 1], **pair, p=[UNIFORM] * 3,
              q=[[0.5 * near, 0.5 * near, 0.0, 0.0], Q3, Q3], uniforms=[0.9999, 0.9999995, 0.7]),
        _case(mss, "mss_accept_twice_then_bonus", "root: node 0 (q/p = .75) accepted with u = .5; under it node 2 "
              "(q/p = .3 / .25 = 1.2) accepted with u = .99; the bonus from its row (u = .25 -> token 2)", **tree,
              uniforms=[0.5, 0.99, 0.25]),
        _case(mss, "mss_residual_for_the_second_child", "root: node 0 rejected (u = .8 >= .75), q <- norm(max(0, q - p)) "
              "= [0, .75, 0, .25]; node 1 tested against .75 / .3 = 2.5: accepted; under it, in node 1's own rows "
              "(node 0's q would give 1), node 4 (q/p = .1 / .2 = .5) rejected with u = .6, q <- [1, 0, 0, 0]; node 5 "
              "(q = 0 now) rejected; the recovered token 0", **tree, uniforms=[0.8, 0.999, 0.6, 0.5, 0.5]),
        _case(mss, "mss_q_zero_child_never_accepted", "q(0) = 0 at the root: node 0 is rejected even with u = 0 "
              "(strict <), q <- [0, 1, 0, 0]; node 1 tested against 1 / .25 = 4: accepted; the bonus (u = .9 -> token 3)",
              [0, 1], **pair, p=[UNIFORM] * 3, q=[[0.0, 0.5, 0.25, 0.25], Q3, Q3], uniforms=[0.0, 0.4, 0.9]),
        _case(mss, "mss_all_rejected_recovered", "root: token 0 rejected (u = .9 >= .75), q <- [0, .75, 0, .25]; token 2 "
              "(q = 0 now) rejected; q <- norm(max(0, q - p)) = [0, .75, 0, .25] again; the recovered token (u = .5 -> "
              "token 1)", [0, 2], **pair, p=[PR, UNIFORM, UNIFORM], q=[QR, Q3, Q3], uniforms=[0.9, 0.5, 0.5]),
        _case(mss, "mss_duplicate_siblings", "i.i.d. children repeat: two children with token 0 (q = 0); each is "
              "rejected and updates the residual: [0, .6, .4, 0], then [0, .5, .5, 0] (u = .55 -> token 2; merging the "
              "repeat would stop at the first, giving token 1)", [0, 0], **pair, p=[[0.5, 0.3, 0.1, 0.1], UNIFORM, UNIFORM],
              q=[[0.0, 0.6, 0.3, 0.1], Q3, Q3], uniforms=[0.2, 0.1, 0.55]),
        _case(mss, "mss_chain_is_verify", "a chain (parents -1, 0, 1) with the rows and uniforms of mrs_vectors' "
              "accept_all_with_bonus: verify's tokens [0, 2, 1, 2]", [0, 2, 1], [-1, 0, 1], [PR, PB, PA, UNIFORM],
              [QR, QB, QA, Q3], [0.5, 0.3, 0.6, 0.65]),
        _case(mss, "mss_p_equals_q", "p == q at the root and at node 0: each first child has q/p = 1 > u, accepted even "
              "with u = .999; the bonus from node 2's row QR (u = .35 -> token 1)", [3, 1, 2, 0], [-1, -1, 0, 0],
              [PA, PB, PR, PR, PR], [PA, PB, QR, QR, QR], [0.999, 0.999, 0.35]),
        _case(mss, "mss_all_zero_residual", f"q = {near} * p at the root (within TOL): q/p < 1, the child is rejected "
              "with u = .9999995, and max(0, q - p) is all zero: w stays q, and the last token comes from it "
              "(u = .5 -> token 1): never NaN, never id V", [1], [-1], [PR, UNIFORM],
              [[v * near for v in PR], Q3], [0.9999995, 0.5]),
        _case(mss, "mss_second_child_against_unchanged_p", "token 0 (q/p = .4) rejected with u = .7, q <- [0, .43, 0, "
              ".57]; token 1 is tested against .43 / .25 = 1.71 (p unchanged) and accepted with u = .9; the bonus "
              "(u = .5 -> token 2)", [0, 1], **pair, p=[skew_p, UNIFORM, UNIFORM], q=[skew_q, Q3, Q3],
              uniforms=[0.7, 0.9, 0.5]),
        _case(rrs, "rrs_second_child_against_zeroed_p", "the inputs and uniforms of mss_second_child_against_unchanged_p: "
              "after the rejection p <- [0, .5, .5, 0], so token 1 is tested against .43 / .5 = .857 and rejected with "
              "u = .9; q <- norm(max(0, q - p)) = [0, 0, 0, 1] (u = .5 -> token 3)", [0, 1], **pair,
              p=[skew_p, UNIFORM, UNIFORM], q=[skew_q, Q3, Q3], uniforms=[0.7, 0.9, 0.5]),
        _case(rrs, "rrs_reject_then_zero_p", "root: node 0 rejected (u = .8 >= .75); q <- [0, .75, 0, .25] and p <- p "
              "without token 0 = [0, .5, .33, .17]; node 1 tested against .75 / .5 = 1.5: accepted; under it node 4 "
              "(q/p = .5 in node 1's own rows) rejected with u = .6: q <- [1, 0, 0, 0], p <- [.125, 0, .375, .5]; node 5 "
              "(q = 0 now) rejected; the recovered token 0", **tree, uniforms=[0.8, 0.999, 0.6, 0.5, 0.5]),
        _case(rrs, "rrs_accept_then_bonus", "root: node 0 (q/p = .75) accepted with u = .5; under it, in node 0's rows "
              "(the root's q would give .4), node 2 (q/p = .3 / .25 = 1.2) accepted with u = .9; the bonus from its row "
              "(u = .22 -> token 2; softmax without the temperature would give token 1)", **tree,
              uniforms=[0.5, 0.9, 0.22]),
        _case(rrs, "rrs_q_zero_child_never_accepted", "q(0) = 0 at the root: node 0 is rejected even with u = 0 "
              "(strict <), q <- [0, 1, 0, 0], p <- [0, 1/3, 1/3, 1/3]; node 1 tested against 3: accepted; the bonus "
              "(u = .9 -> token 3)", [0, 1], **pair, p=[UNIFORM] * 3, q=[[0.0, 0.5, 0.25, 0.25], Q3, Q3],
              uniforms=[0.0, 0.4, 0.9]),
        _case(rrs, "rrs_all_rejected_recovered", "token 0 (q/p = .25) rejected with u = .9: q <- [0, .67, .33, 0], "
              "p <- [0, .5, .33, .17]; token 3 (q = 0 now) rejected; q <- norm(max(0, q - p)) = [0, 1, 0, 0] "
              "(u = .5 -> token 1)", [0, 3], **pair, p=[PR, UNIFORM, UNIFORM], q=[[0.1, 0.5, 0.3, 0.1], Q3, Q3],
              uniforms=[0.9, 0.95, 0.5]),
        _case(topk, "topk_large_vocabulary_two_level", f"V = {V} > 1024: children 256 (q = .3, u = .5) and 1024 "
              "(.4 / .7, u = .9) rejected; the recovered token from q without them, {255: 2/3, 511: 1/3}, drawn in "
              "blocks of 256 (u = .6 -> 255)", [256, 1024], **pair, p=big_p, q=big_q, uniforms=[0.5, 0.9, 0.6]),
        _case(mss, "mss_large_vocabulary_two_level", f"V = {V}: child 256 (q/p = 1) accepted; the bonus from its row "
              "{0: .1, 512: .6, 1024: .3} in blocks of 256 (u = .75 -> 1024, the last id, in the padded block)",
              [256, 1024], **pair, p=big_p, q=big_q, uniforms=[0.9, 0.75]),
        _case(rrs, "rrs_large_vocabulary_two_level", f"V = {V}: token 3 (q = 0) rejected, q <- {{255: .4, 511: .2, "
              "1024: .4}, p <- {256: .6, 1024: .4}; token 256 (q = 0 now) rejected, q <- {255: 2/3, 511: 1/3}, drawn "
              "in blocks of 256 (u = .8 -> 511)", [3, 256], **pair, p=big_p, q=big_q, uniforms=[0.3, 0.2, 0.8]),
    ]


def build() -> dict:
    """All vectors with their outputs, checked against the exact replay and the margin; raises if any fails."""
    out = []
    for case in cases():
        tokens = replay(case)
        exact, trace, margin = exact_case(case)
        if tokens != exact:
            raise AssertionError(f"{case['name']}: specref.mrs_tree gives {tokens}, the exact replay {exact}")
        if margin < MARGIN:
            raise AssertionError(f"{case['name']}: a uniform lies {margin:.3g} < {MARGIN:g} from a decision boundary")
        out.append({**case, "tokens_out": tokens, "trace": trace})
    return {
        "format": FORMAT,
        "version": VERSION,
        "description": [
            "Test vectors for tree verification (specref/mrs_tree.py: verify_tree_topk, verify_tree_mss, verify_tree_rrs),",
            "written by `python3 -m specref.proof.tree_vectors`; Chen's letters: p = draft, q = target.",
            "Each case calls `function` on tokens [N], parents [N] (-1: a child of the root), p and q [N+1, V] (row 0",
            "at the root, row i + 1 after node i) with an rng whose random() returns `uniforms` in order; the call",
            "must draw exactly those uniforms and return `tokens_out`.  `trace` shows the decisions.",
            f"No uniform lies within {MARGIN:g} of a decision boundary, so float rounding cannot change a result.",
        ],
        "uniform_order": uniform_order(),
        "cases": out,
    }


def main() -> None:
    doc = build()
    write_text(PATH, dumps(doc))
    print(f"wrote {len(doc['cases'])} vectors to {PATH}")


if __name__ == "__main__":
    main()
