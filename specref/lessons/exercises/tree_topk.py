"""check_tree_topk: the target-only tree verifier (`mrs_tree.verify_tree_topk`), and its known mistakes.

The answer is f(tokens [N], parents [N], p [N+1, V], q [N+1, V], rng) -> the accepted path, then one more token.
Nodes are in topological order; parents[i] is -1 for a child of the root, else node i's parent; row 0 of p and q is
the root's, row i + 1 the one after node i's path.  At a node with children c_1, c_2, ... (ascending node index) and
target row q, c_i is accepted with probability q(c_i) / (1 - q(c_1) - ... - q(c_{i-1})) and the walk goes on from
it; when every child is rejected, the last token is drawn from q without the children's entries (renormalised); at
a node without children it is the bonus token, drawn from q.  p is never needed.  One rng.random() per child tested,
then one for the last token (specref/mrs_tree.py, RANDOMNESS).

`check_tree_topk` runs the tiers of `check_verify` on trees: a call with a real generator (the output's shape and
ids), the same uniforms twice (randomness from rng alone), then the exact law of one call on each tree of
TREE_CASES, enumerated over uniforms the grader chooses (`uniforms.exact_law`) and compared with the rule's law in
exact fractions (`specref.proof.tree_rule.TOPK`); the edge u = 0 on a child the target forbids; a chi-square of
N_TREE_CALLS calls on the suite's tree case (`specref.proof.tree.CASES["close"]`, each call's tree drawn as top-k,
level 1e-3, seed SEED) against `Algorithm.call_law`; then the portable vectors of verify_tree_topk
(specref/proof/tree_vectors.json), which fix the order of the uniforms.  A wrong law is named by the known mistake
(TREE_MISTAKES) whose exact law it has on every tree, else by the output whose probability it gets wrong.  An answer
that draws its randomness other than by rng.random(), rng.uniform() or rng.choice() is "not graded exactly" and does
not pass.
"""

from __future__ import annotations

import functools
import json
from typing import Callable

import numpy as np

from specref.proof import stats, tree, tree_vectors
from specref.proof.bugs import tree as tree_bugs
from specref.proof.tree_rule import MSS, TOPK, Rule
from specref.proof.verdict import Limits
from specref.trees import children_of

from .grading import SEED, TOL, F, Result, _call, _Fail, _fmt, _grade, _likeliest, _not_answered, _pair
from .uniforms import CONTROL, _Listed, _TooDeep, _Unsupported, exact_law, replay
from .verify import NOT_EXACT


# Calls in the chi-square on the suite's tree case (V = 4, two children per node, depth 2).
N_TREE_CALLS = 4_000

_h, _q, _e = F(1, 2), F(1, 4), F(1, 8)
_tiny, _small = F(1, 2**20), F(1, 512)
# Trees whose every decision boundary is a simple fraction: (name, tokens, parents, p rows, q rows).  Each row of q
# differs from the others, so an answer that reads another node's row gets another law; the children are the top
# tokens of their p row (ties to the lower id), as a top-k draft picks them.
TREE_CASES = [
    ("two children at the root, the first with a child of its own", [0, 1, 2], [-1, -1, 0],
     [[_h, _q, _q, 0], [0, _q, _h, _q], [_q, _q, _q, _q], [_q, _q, _q, _q]],
     [[_q, _q, _h, 0], [0, _q, _q, _h], [_h, 0, _q, _q], [_q, _h, 0, _q]]),
    ("a chain of two", [3, 1], [-1, 0],
     [[0, _q, _q, _h], [_q, _h, _q, 0], [_q, _q, _q, _q]],
     [[_q, 0, _q, _h], [_h, _q, _q, 0], [0, _h, _q, _q]]),
    ("three children, the first one the target forbids", [2, 0, 1], [-1, -1, -1],
     [[_q, _q, _h, 0], [_q, _q, _q, _q], [_q, _q, _q, _q], [_q, _q, _q, _q]],
     [[_h, _q, 0, _q], [_q, _q, _q, _q], [0, 0, _h, _h], [_h, _h, 0, 0]]),
    ("children that hold all of q's mass", [1, 3], [-1, -1],
     [[0, _h, _e, 3 * _e], [_q, _q, _q, _q], [_q, _q, _q, _q]],
     [[0, 3 * _q, 0, _q], [_q, _q, _h, 0], [0, _h, 0, _h]]),
    # q without the child: [0, 1/4 + 1/512, 2^-20, 1/512, ...]: an answer that drops small entries fails here
    ("small entries beside zeros", [0], [-1],
     [[_h, _q, _e, F(1, 16), F(1, 16), 0], [_q, _q, _q, _q, 0, 0]],
     [[_q, _q + _small, _tiny, _small, _h - 2 * _small - _tiny, 0], [_q, 0, _q, _q, _q, 0]]),
]
del _h, _q, _e, _tiny, _small


class _Unscaled(Rule):
    """The top-k walk with c_i accepted with probability q(c_i), not divided by the mass not yet tried."""

    def _ratio(self, x, q_row, rest, d_row):
        return q_row[x]


def _leaf_reads_parent(row: int, children, parents) -> int:  # a leaf's bonus from its parent's row
    return parents[row - 1] + 1 if row and not children[row] else row


def _chain_residual(q_row, p_row, tried):  # norm(max(0, q - p)), the chain's residual, as the recovered weights
    r = [max(0 * v, v - u) for u, v in zip(p_row, q_row)]
    return r if sum(r) > 0 else list(q_row)


def _one_level_law(tokens, parents, p, q) -> dict:
    """The walk ended after the root's children: an accepted child's bonus token from its own row, whatever lies
    below it."""
    top = [i for i, j in enumerate(parents) if j == -1]
    rows = [p[0]] + [p[i + 1] for i in top], [q[0]] + [q[i + 1] for i in top]
    return TOPK.law([tokens[i] for i in top], [-1] * len(top), *rows)


# The learner-facing diagnosis of each known mistake, and its exact law for a fixed tree.
TREE_MISTAKES = [
    ("reads the target row q[i] for node i where its row is q[i + 1] (row 0 is the root's, so node i's children "
     "and its bonus token read q[i + 1]); the off-by-one slice of TensorRT-LLM #15098",
     tree_bugs.wrong_logits_slice("topk").law),
    ("reads the row of the node's first sibling (rows indexed by depth, as in a chain): node i's row is q[i + 1]",
     tree_bugs.sibling_row("topk").law),
    ("accepts c_i with probability q(c_i): after c_1 .. c_{i-1} were rejected it is q(c_i) / (1 - q(c_1) - ... - "
     "q(c_{i-1})), the chance of c_i among the tokens not yet tried", _Unscaled("topk").law),
    ("draws the recovered token from q itself: after every child was rejected, q's entries at the children must be "
     "set to 0 (and the rest renormalised), or a rejected child can come back",
     Rule("topk", recovered=lambda q_row, p_row, tried: list(q_row)).law),
    ("draws the recovered token from norm(max(0, q - p)), the chain's residual: the top-k rule never reads p; it "
     "draws from q without the children", Rule("topk", recovered=_chain_residual).law),
    ("tests min(1, q(c)/p(c)) and moves q to norm(max(0, q - p)) after a rejection: SpecInfer's rule, exact for "
     "children drawn i.i.d. from p, not for the draft's top-k tokens", MSS.law),
    ("draws the bonus token after a leaf from its parent's row: a leaf's bonus comes from the leaf's own row "
     "q[i + 1]", Rule("topk", q_row=_leaf_reads_parent).law),
    ("accepts iff coin <= ratio with a coin that can be exactly 0: a child the target gives probability 0 can be "
     "accepted; the test is strict, u < ratio (SGLang #35771)", tree_bugs.inclusive_zero_coin("topk").law),
    ("draws the recovered token from max(0, q - draft_probs) with a buffer never cleared (SGLang #12561): it comes "
     "from q without the children", tree_bugs.stale_draft_probs().law),
    ("draws the bonus token from the target row without the request's temperature (as EAGLE's evaluate_posterior once did): q is the row "
     "to draw from, as handed", tree_bugs.bonus_unwarped("topk").law),
    ("stops after the root's children: an accepted child's own children must be tested too, down the tree",
     _one_level_law),
]


def _arrays(case) -> tuple[np.ndarray, ...]:
    _, tokens, parents, p, q = case
    return (np.array(tokens, dtype=np.int64), np.array(parents, dtype=np.int64),
            np.array(p, dtype=np.float64), np.array(q, dtype=np.float64))


def _tokens(out, parents, V: int, check: str, where: str) -> tuple:
    """out as a tuple of ids if it is 1 to depth + 1 integer ids in [0, V), else _Fail saying what is wrong."""
    depths = []
    for j in parents:  # topological order: a parent's depth is known before its children's
        depths.append(0 if j < 0 else depths[j] + 1)
    longest = max(depths, default=-1) + 2  # the deepest path, then one more token
    try:
        a = np.asarray(out)
    except Exception as e:  # noqa: BLE001
        raise _Fail(check, f"returned {type(out).__name__}, not an array of token ids ({e}; {where})") from None
    if a.ndim != 1:
        raise _Fail(check, f"returned an array of shape {a.shape}; return one 1-D array of token ids ({where})")
    if a.dtype.kind not in "iu":
        raise _Fail(check, f"returned {a.tolist()} of dtype {a.dtype}: token ids are integers, e.g. "
                           f"np.array(tokens, dtype=np.int64) ({where})")
    if not 1 <= len(a) <= longest:
        raise _Fail(check, f"returned {len(a)} tokens: the accepted path and one more token make 1 to {longest} on "
                           f"this tree ({where})")
    if ((a < 0) | (a >= V)).any():
        raise _Fail(check, f"returned {a.tolist()}: an id outside the vocabulary [0, {V}) ({where})")
    return tuple(int(v) for v in a)


def _edges(tokens, parents, p, q) -> list[float]:
    """Where the rule or a known mistake can decide: each child's ratios (over the mass not yet tried, and not), the
    steps of the inverse CDF of every row the last token can come from."""
    children, edges = children_of(parents), []
    rows = list(q)
    for row, kids in enumerate(children):
        rest = 1.0
        for i in kids:
            x = int(tokens[i])
            edges += [q[row, x], q[row, x] / rest if rest > 0 else 1.0, min(1.0, q[row, x] / p[row, x])
                      if p[row, x] > 0 else 1.0]
            rest -= q[row, x]
        if kids:
            rows.append(np.where(np.isin(np.arange(q.shape[1]), tokens[kids]), 0.0, q[row]))
            rows.append(np.maximum(q[row] - p[row], 0.0))
    for r in rows:
        if r.sum() > 0:
            edges += list((np.cumsum(r) / r.sum())[:-1])
    return [float(e) for e in edges if 0 < e < 1]


def _law_of(f, limits: Limits, case, deepest: list) -> dict:
    tokens, parents, p, q = _arrays(case)
    check = f"exact law, tree '{case[0]}'"

    def run(rng):
        try:
            out = limits.call(f, tokens.copy(), parents.copy(), p.copy(), q.copy(), rng)
        except CONTROL:
            raise
        except Exception as e:  # noqa: BLE001
            raise _Fail(check, f"raised {type(e).__name__}: {e} (after the uniforms "
                               f"{[round(u, 4) for u in rng.drawn]})") from None
        deepest[0] = max(deepest[0], rng.used)
        return _tokens(out, parents, q.shape[1], check, f"tree '{case[0]}'")

    return exact_law(run, _edges(tokens, parents, p, q))


def _exact(case, law_fn=TOPK.law) -> dict:
    _, tokens, parents, p, q = case
    return {k: float(v) for k, v in law_fn(tokens, parents, p, q).items()}


def _gap(law: dict, correct: dict) -> str:  # the output where two laws differ most, in words
    k = max(set(law) | set(correct), key=lambda o: abs(law.get(o, 0.0) - correct.get(o, 0.0)))
    got, want = _pair(law.get(k, 0.0), correct.get(k, 0.0), _fmt)
    said = f"P(output = {list(k)}) is {got} where the top-k rule gives {want}"
    missing = [o for o, v in correct.items() if v > 0 and law.get(o, 0.0) <= TOL]
    if missing:
        o = min(missing, key=correct.get)
        said += (f"; it never returns {list(o)}, which the rule returns with probability {_fmt(correct[o])}"
                 + (" (a small entry dropped, or rounded to 0?)" if correct[o] < 0.01 else ""))
    return said


def _tree_exact(f, limits: Limits) -> str:
    """The exact tier: each tree's law over f's uniforms against the rule's; '' if every law was enumerated, else why
    not."""
    laws, deepest = {}, [0]
    for case in TREE_CASES:
        try:
            laws[case[0]] = _law_of(f, limits, case, deepest)
        except _TooDeep as e:
            return f"{e} (tree '{case[0]}')"
    if all(len(law) == 1 for law in laws.values()):
        example = next(iter(laws[TREE_CASES[0][0]]))
        raise _Fail("randomness", f"returns the same tokens whatever the uniforms ({list(example)} on tree "
                                  f"'{TREE_CASES[0][0]}'{'' if deepest[0] else ', and never draws from the rng'}): "
                                  "test each child with rng.random() and draw the last token with one more")
    wrong = [c for c in TREE_CASES if stats.total_variation(laws[c[0]], _exact(c)) > TOL]
    if not wrong:
        return ""
    case = wrong[0]
    gap = _gap(laws[case[0]], _exact(case))
    label = next((label for label, law_fn in TREE_MISTAKES
                  if all(stats.total_variation(laws[c[0]], _exact(c, law_fn)) < TOL for c in TREE_CASES)), "")
    raise _Fail(f"exact law, tree '{case[0]}'", f"{label} ({gap})" if label else f"{gap} (no known mistake matches)")


def _tree_edge(f, limits: Limits) -> None:
    name = "edge q(c) = 0, u = 0"
    tokens, parents, p, q = _arrays(TREE_CASES[2])  # its first child, token 2, has q = 0 at the root
    where = "the root's first child has q(c) = 0, the first uniform 0.0"
    out = _call(limits, name, f, tokens, parents, p, q, _Listed([0.0], tail=0.3), where=where)
    if _tokens(out, parents, q.shape[1], name, where)[0] == int(tokens[0]):
        raise _Fail(name, f"accepted a child the target gives probability 0 when u = 0 "
                          f"({np.asarray(out).tolist()}): accept iff u < q(c_i) / (1 - q(c_1) - ...), strictly "
                          "(u <= shipped in SGLang, #35771)")


def _tree_chi_square(f, limits: Limits) -> str:
    algorithm = tree.ALGORITHMS["tree-topk"]
    draft_row, target_row = tree.case_rows("close")
    check = f"chi-square ({N_TREE_CALLS} calls, the suite's tree case, seed {SEED})"

    def guarded(tokens, parents, p, q, rng):
        out = _call(limits, check, f, tokens, parents, p.copy(), q.copy(), rng)
        return np.array(_tokens(out, parents, q.shape[1], check, f"tokens {tokens.tolist()}"))

    counts = tree.sample_calls(guarded, algorithm.drawing, draft_row, target_row, tree.WIDTHS, N_TREE_CALLS,
                               np.random.default_rng(SEED))
    correct = {k: float(v) for k, v in algorithm.call_law(draft_row, target_row, tree.WIDTHS).items()}
    stat, dof, pvalue = stats.chi_square_gof(counts, correct)
    if pvalue > stats.LEVEL:
        return f"chi-square p = {pvalue:.2g} ({N_TREE_CALLS} calls, seed {SEED})"
    bug_laws = {label: {k: float(v) for k, v in tree.tree_call_law(law_fn, algorithm.drawing, draft_row, target_row,
                                                                    tree.WIDTHS).items()}
                for label, law_fn in TREE_MISTAKES}
    found = _likeliest(counts, correct, bug_laws)
    what = f"chi2 = {stat:.1f} on {dof} dof, p = {pvalue:.2g} <= {stats.LEVEL:g}"
    raise _Fail(check, f"{found} ({what})" if found else f"the output law is not the target's ({what}; no known "
                                                         "mistake fits the counts)")


def _replay(f, case: dict, limits: Limits):  # a vector's tokens from f, or what went wrong
    return replay(f, (np.array(case["tokens"], dtype=np.int64), np.array(case["parents"], dtype=np.int64),
                      np.array(case["p"], dtype=np.float64), np.array(case["q"], dtype=np.float64)),
                  case["uniforms"], limits)


@functools.cache
def _tree_vectors_of(function: str) -> tuple[dict, ...]:
    return tuple(c for c in json.loads(tree_vectors.PATH.read_text())["cases"] if c["function"] == function)


def _tree_vectors(f, limits: Limits) -> int:
    chosen = _tree_vectors_of("verify_tree_topk")
    wrong = [(c, g) for c in chosen if (g := _replay(f, c, limits)) != c["tokens_out"]]
    if wrong:
        c, g = wrong[0]
        raise _Fail("vectors", f"{len(wrong)} of {len(chosen)} vectors differ, e.g. '{c['name']}': expected "
                               f"{c['tokens_out']}, got {g}; the law is exact (enumerated) and passes the "
                               "chi-square, but the vectors need the uniforms in the documented order: one "
                               "rng.random() per child tested, in ascending node index, then one for the last token "
                               "(specref/mrs_tree.py, RANDOMNESS)")
    return len(chosen)


def _deterministic(f, limits: Limits) -> None:
    tokens, parents, p, q = _arrays(TREE_CASES[0])
    for u in (0.1, 0.6):
        where = f"tree '{TREE_CASES[0][0]}', every uniform {u}"
        seen = {_tokens(_call(limits, "randomness", f, tokens.copy(), parents.copy(), p.copy(), q.copy(),
                              _Listed([], tail=u), where=where), parents, q.shape[1], "randomness", where)
                for _ in range(8)}
        if len(seen) > 1:
            raise _Fail("randomness", f"the same uniforms gave different tokens ({sorted(seen)}; {where}): draw every "
                                      "random number from the rng the function is handed")


def check_tree_topk(f: Callable) -> Result:
    """Grade f(tokens [N], parents [N], p [N+1, V], q [N+1, V], rng) -> tokens as the top-k tree verifier (module
    docstring: the checks)."""
    if not callable(f):
        raise TypeError(f"check_tree_topk takes your function, check_tree_topk(verify_tree); got {type(f).__name__}")

    def run(limits: Limits) -> str:
        tokens, parents, p, q = _arrays(TREE_CASES[0])
        _not_answered(limits, f, tokens.copy(), parents.copy(), p.copy(), q.copy(), np.random.default_rng(SEED))
        out = _call(limits, "contract", f, tokens.copy(), parents.copy(), p.copy(), q.copy(),
                    np.random.default_rng(SEED), where="a real generator")
        _tokens(out, parents, q.shape[1], "contract", f"tree '{TREE_CASES[0][0]}'")
        try:
            _deterministic(f, limits)
            skipped = _tree_exact(f, limits)
            _tree_edge(f, limits)
        except _Unsupported as e:
            raise _Fail("exact law", f"{NOT_EXACT}: it calls {e}, whose draws the grader cannot choose") from None
        if skipped:
            raise _Fail("exact law", f"{NOT_EXACT}: {skipped}, so its law cannot be enumerated")
        stat = _tree_chi_square(f, limits)
        try:
            n_vectors = _tree_vectors(f, limits)
        except _Unsupported as e:
            raise _Fail("vectors", f"{NOT_EXACT}: it calls {e} on the vectors' trees") from None
        return (f"exact law on {len(TREE_CASES)} trees, the edge u = 0 on a child the target forbids, {stat}, "
                f"{n_vectors} vectors")
    return _grade("tree_topk", run)
