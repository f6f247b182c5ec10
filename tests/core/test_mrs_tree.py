"""The tree verifiers of specref.mrs (verify_tree_topk, verify_tree_mss, verify_tree_rrs): contract, input
checks, the edges with injected uniforms, the documented order of uniforms, and a chain is `verify`.  Their speed
is a benchmark's (`python -m specref bench`: verify_tree_ms), not a test's.

Their laws are proven in tests/proof/test_tree_laws.py and their portable vectors checked in
tests/core/test_mrs_tree_vectors.py.  Chen's letters: p = draft, q = target.
"""

import ast
import inspect
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from specref import mrs, mrs_tree, trees
from specref.proof import laws, tree, tree_vectors
from specref.proof.vectors import ListedUniforms
from specref.proof import tree_rule

VERIFIERS = [mrs_tree.verify_tree_topk, mrs_tree.verify_tree_mss, mrs_tree.verify_tree_rrs]
NAMES = [f.__name__ for f in VERIFIERS]
# A six-node tree: the root's children 0 (token 0) and 1 (token 1); 2, 3 under node 0; 4, 5 under node 1.
TOKENS, PARENTS = np.array([0, 1, 2, 3, 1, 3]), np.array([-1, -1, 0, 0, 1, 1])
P = np.tile([0.4, 0.3, 0.2, 0.1], (7, 1))
Q = np.tile([0.3, 0.45, 0.1, 0.15], (7, 1))


def _random_tree(rng, N: int, V: int, distinct: bool) -> tuple[np.ndarray, np.ndarray]:
    """N nodes, each with a random earlier parent (or the root); siblings distinct if asked (then V >= N)."""
    parents = np.array([rng.integers(-1, i) for i in range(N)])
    tokens = np.zeros(N, dtype=np.int64)
    for j in range(-1, N):
        kids = np.flatnonzero(parents == j)
        tokens[kids] = rng.choice(V, size=len(kids), replace=not distinct)
    return tokens, parents


def _rows(rng, n: int, V: int, zeros: float = 0.3) -> np.ndarray:  # [n, V] Dirichlet rows with zeros
    rows = rng.dirichlet(np.ones(V), size=n) * (rng.random((n, V)) >= zeros)
    rows[np.arange(n), rng.integers(0, V, n)] += 0.1  # every row keeps a token
    return rows / rows.sum(axis=1, keepdims=True)


def _drafted_rows(rng, tokens, parents, V):  # p [N+1, V] with p(x) > 0 at each drafted token
    p = _rows(rng, len(tokens) + 1, V)
    p[parents + 1, tokens] += 0.2
    return p / p.sum(axis=1, keepdims=True)


# ---------------------------------------------------------------- the contract

@pytest.mark.parametrize("verify", VERIFIERS, ids=NAMES)
def test_output_is_a_path_from_the_root_then_one_token(verify):
    rng = np.random.default_rng(1)
    for _ in range(150):
        V, N = int(rng.integers(2, 7)), int(rng.integers(1, 9))
        tokens, parents = _random_tree(rng, N, max(V, N), distinct=True)
        V = max(V, N)
        p, q = _drafted_rows(rng, tokens, parents, V), _rows(rng, N + 1, V)
        out = verify(tokens, parents, p, q, rng)
        assert out.ndim == 1 and out.dtype == np.int64 and 1 <= len(out) <= trees.depth(parents) + 1
        node = -1
        for x in out[:-1]:  # each accepted token is a child of the node before it
            kids = [i for i in np.flatnonzero(parents == node) if tokens[i] == x]
            assert kids, (out, tokens, parents)
            node = kids[0]
        assert 0 <= out[-1] < V and q[node + 1, out[-1]] > 0  # the last token: one the deepest node's q allows


@pytest.mark.parametrize("verify", VERIFIERS, ids=NAMES)
def test_inputs_are_not_changed(verify):
    tokens, parents, p, q = TOKENS.copy(), PARENTS.copy(), P.copy(), Q.copy()
    rng = np.random.default_rng(2)
    for _ in range(50):
        verify(tokens, parents, p, q, rng)
    assert (tokens == TOKENS).all() and (parents == PARENTS).all() and (p == P).all() and (q == Q).all()


def _bad(verify, match, tokens=TOKENS, parents=PARENTS, p=P, q=Q):
    with pytest.raises(ValueError, match=match) as e:
        verify(np.asarray(tokens), np.asarray(parents), np.asarray(p, dtype=float), np.asarray(q, dtype=float),
               np.random.default_rng(0))
    print(f"{verify.__name__}: {e.value}")


@pytest.mark.parametrize("verify", VERIFIERS, ids=NAMES)
def test_bad_input_is_a_clear_value_error(verify):
    _bad(verify, r"not in topological order: parents\[1\] = 1", parents=[-1, 1, 0, 0, 1, 1])
    _bad(verify, r"not in topological order: parents\[2\] = 3", parents=[-1, -1, 3, 0, 1, 1])
    _bad(verify, r"parents\[0\] = -2 is out of range", parents=[-2, -1, 0, 0, 1, 1])
    _bad(verify, r"parents\[5\] = 6 is out of range", parents=[-1, -1, 0, 0, 1, 6])
    _bad(verify, r"parents must be a 1-D integer array with one entry per node \(N = 6\)", parents=[-1, -1, 0])
    _bad(verify, r"parents must be a 1-D integer array", parents=[-1.0, -1, 0, 0, 1, 1])
    _bad(verify, r"tokens\[2\] = 4 is not a token id in \[0, 4\)", tokens=[0, 1, 4, 3, 1, 3])
    _bad(verify, r"tokens\[0\] = -1 is not a token id", tokens=[-1, 1, 2, 3, 1, 3])
    _bad(verify, r"tokens must be a 1-D integer array of N >= 1", tokens=[])
    _bad(verify, r"tokens must be a 1-D integer array", tokens=[0.0, 1, 2, 3, 1, 3])
    _bad(verify, r"q \(target\) row 0 does not sum to 1", q=Q * 1.5)
    _bad(verify, r"q \(target\) row 0 has negative probabilities", q=Q + np.array([[0.5, -0.5, 0, 0]]))
    _bad(verify, r"q \(target\) row 0 contains NaN", q=np.where(np.arange(4) == 2, np.nan, Q))
    _bad(verify, r"q must have shape \[N \+ 1, V\] = \[7, V\]", q=Q[:6])
    _bad(verify, r"p must have shape \[N \+ 1, V\] = \[7, 4\] like q", p=P[:, :3])
    _bad(verify, r"p must have shape \[N \+ 1, V\] = \[7, 4\] like q", p=P[:6])


# Rows whose walk is certain: at the root the target puts all its mass on token 0 (node 0) and the draft half
# (so node 1, token 1, could have been drawn), so every verifier accepts node 0 in every call and goes on to
# row 1 (node 0's children); node 1's row 2 and the rows of its children 4, 5 (rows 5, 6) are never reached.
SURE_P = np.vstack([[0.5, 0.5, 0.0, 0.0], P[1:]])
SURE_Q = np.vstack([[1.0, 0.0, 0.0, 0.0], Q[1:]])


def _with_row(a, row, values):
    a = a.copy()
    a[row] = values
    return a


@pytest.mark.parametrize("verify", VERIFIERS, ids=NAMES)
def test_q_rows_are_checked_when_the_walk_reaches_them(verify):
    _bad(verify, r"q \(target\) row 1 does not sum to 1", p=SURE_P, q=_with_row(SURE_Q, 1, Q[1] * 2))
    _bad(verify, r"q \(target\) row 1 contains NaN", p=SURE_P, q=_with_row(SURE_Q, 1, np.nan))
    # negative control of the laziness: rows off the walk are not read, whatever they hold
    off = _with_row(_with_row(SURE_Q, 2, np.nan), 6, -1.0)
    for seed in range(20):
        out = verify(TOKENS, PARENTS, SURE_P, off, np.random.default_rng(seed))
        assert out[0] == 0 and len(out) >= 2


@pytest.mark.parametrize("verify", [mrs_tree.verify_tree_mss, mrs_tree.verify_tree_rrs], ids=NAMES[1:])
def test_p_is_checked_where_it_is_read(verify):
    _bad(verify, r"p \(draft\) row 0 does not sum to 1", p=np.vstack([P[:1] * 2, P[1:]]))
    _bad(verify, r"p \(draft\) row 1 does not sum to 1", p=_with_row(SURE_P, 1, P[1] * 2), q=SURE_Q)
    _bad(verify, r"node 3's token 3 has p\(x\) = 0 in the row p\[1\] it was drawn from",
         p=_with_row(SURE_P, 1, [0.5, 0.25, 0.25, 0.0]), q=SURE_Q)
    # the rows of the leaves (nodes 2-5: rows 3-6) are never read, and neither is node 1's row 2 on this walk
    out = verify(TOKENS, PARENTS, np.vstack([SURE_P[:2], np.full((5, 4), np.nan)]), SURE_Q, np.random.default_rng(0))
    assert out[0] == 0


def test_topk_reads_no_p_row():
    out = mrs_tree.verify_tree_topk(TOKENS, PARENTS, np.full((7, 4), np.nan), Q, np.random.default_rng(0))
    assert out.ndim == 1
    _bad(mrs_tree.verify_tree_topk, r"p must have shape", p=np.full((7, 3), np.nan))


def test_duplicate_siblings_are_refused_where_the_rule_forbids_them():
    dup = [0, 1, 2, 2, 1, 3]  # nodes 2 and 3, both children of node 0, have token 2
    _bad(mrs_tree.verify_tree_topk, r"nodes 2 and 3 are siblings with the same token 2: verify_tree_topk needs distinct", dup)
    _bad(mrs_tree.verify_tree_rrs, r"nodes 2 and 3 are siblings with the same token 2: children drawn without replacement",
         dup)
    out = mrs_tree.verify_tree_mss(np.array(dup), PARENTS, P, Q, np.random.default_rng(0))  # i.i.d. draws repeat
    assert out.ndim == 1
    # the same token under different parents is no duplicate
    for verify in VERIFIERS:
        verify(np.array([0, 1, 2, 3, 2, 3]), PARENTS, P, Q, np.random.default_rng(0))


@pytest.mark.parametrize("name", NAMES)
def test_public_functions_state_what_they_do_and_require(name):
    doc = inspect.getdoc(getattr(mrs_tree, name))
    summary = doc.split("\n\n")[0]
    assert "\n" not in summary and summary.endswith("."), summary  # a one-sentence summary line
    assert "Requires" in doc, doc


def test_the_tree_companion_imports_only_numpy_and_mrs_and_states_how_it_draws():
    imported = set()
    for node in ast.walk(ast.parse(Path(mrs_tree.__file__).read_text())):
        if isinstance(node, ast.Import):
            imported |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add("." * node.level + (node.module or ""))
    assert imported == {"__future__", "numpy", "mrs", "."}, imported  # `from . import mrs` inside specref
    order = tree_vectors.uniform_order()
    assert order[0].startswith("Randomness of the tree verifiers.") and any("verify_tree_rrs:" in line for line in order)


# ---------------------------------------------------------------- edges, with injected uniforms

def _run(verify, tokens, parents, p, q, uniforms):
    rng = ListedUniforms(uniforms)
    out = verify(np.array(tokens), np.array(parents), np.array(p, dtype=float), np.array(q, dtype=float), rng)
    rng.check_all_used()
    return [int(y) for y in out]


U4 = [0.25, 0.25, 0.25, 0.25]
LEAF = [0.1, 0.2, 0.3, 0.4]


@pytest.mark.parametrize("verify", VERIFIERS, ids=NAMES)
def test_a_child_with_q_zero_is_never_accepted_even_at_u_zero(verify):
    q0 = [0.0, 0.5, 0.25, 0.25]  # q(0) = 0
    # child token 0 tested with u = 0: rejected; child token 1 then tested with u = 0: accepted (q > 0)
    assert _run(verify, [0, 1], [-1, -1], [U4] * 3, [q0, LEAF, LEAF], [0.0, 0.0, 0.0]) == [1, 0]
    # as the only child: rejected at u = 0, and the last token (u = 0) is the first token with mass in q
    assert _run(verify, [0], [-1], [U4] * 2, [q0, LEAF], [0.0, 0.0]) == [1]


def test_topk_boundaries_are_strict():
    q = [0.25, 0.375, 0.25, 0.125]  # children 0 and 1: c_1 against .25, c_2 against .375 / .75 = .5
    kids = dict(tokens=[0, 1], parents=[-1, -1], p=[U4] * 3)
    assert _run(mrs_tree.verify_tree_topk, **kids, q=[q, LEAF, LEAF], uniforms=[0.25, 0.5, 0.0]) == [2]  # both on: rejected
    below = np.nextafter(0.25, 0)
    assert _run(mrs_tree.verify_tree_topk, **kids, q=[q, LEAF, LEAF], uniforms=[below, 0.0]) == [0, 0]
    assert _run(mrs_tree.verify_tree_topk, **kids, q=[q, LEAF, LEAF], uniforms=[0.25, np.nextafter(0.5, 0), 0.0]) == [1, 0]
    # the recovered token: q without 0 and 1 is [0, 0, .25, .125] / .375; u = 2/3 sits on the step: the next token
    assert _run(mrs_tree.verify_tree_topk, **kids, q=[q, LEAF, LEAF], uniforms=[0.5, 0.75, 2 / 3]) == [3]


@pytest.mark.parametrize("verify", [mrs_tree.verify_tree_mss, mrs_tree.verify_tree_rrs], ids=NAMES[1:])
def test_ratio_boundaries_are_strict(verify):
    p, q = [0.5, 0.25, 0.125, 0.125], [0.25, 0.25, 0.25, 0.25]  # child 0: q/p = .5
    # u = .5 on the boundary: rejected; the residual is [0, 0, .125, .125] / .25, and u = 0 gives its first token
    assert _run(verify, [0], [-1], [p, U4], [q, LEAF], [0.5, 0.0]) == [2]
    assert _run(verify, [0], [-1], [p, U4], [q, LEAF], [np.nextafter(0.5, 0), 0.0]) == [0, 0]
    # u = .5 on the residual's step gives token 3
    assert _run(verify, [0], [-1], [p, U4], [q, LEAF], [0.9, 0.5]) == [3]


@pytest.mark.parametrize("verify", [mrs_tree.verify_tree_mss, mrs_tree.verify_tree_rrs], ids=NAMES[1:])
def test_p_equals_q_accepts_every_first_child(verify):
    rng = np.random.default_rng(4)
    top = np.nextafter(1.0, 0)  # the largest uniform below 1
    for _ in range(100):
        tokens, parents = _random_tree(rng, 7, 8, distinct=True)
        p = _drafted_rows(rng, tokens, parents, 8)
        path, node = [], -1
        while (kids := np.flatnonzero(parents == node)).size:
            node = int(kids[0])  # the first child, accepted even with the largest u
            path.append(int(tokens[node]))
        listed = ListedUniforms([], tail=top)
        out = verify(tokens, parents, p, p, listed)
        assert out[:-1].tolist() == path and listed.used == len(path) + 1


@pytest.mark.parametrize("verify", VERIFIERS, ids=NAMES)
def test_an_all_zero_residual_gives_a_token_of_the_row_never_nan(verify):
    near = 1 - 1e-6  # q one rounding-sized step under p: inside TOL, and max(0, q - p) is all zero
    p = [0.4, 0.3, 0.2, 0.1]
    q = [v * near for v in p] if verify is not mrs_tree.verify_tree_topk else [0.5 * near, 0.5 * near, 0, 0]
    tokens = [1] if verify is not mrs_tree.verify_tree_topk else [0, 1]
    parents = [-1] * len(tokens)
    for u in [0.0, 0.3, 0.7, np.nextafter(1.0, 0)]:
        out = _run(verify, tokens, parents, [p] + [U4] * len(tokens), [q] + [LEAF] * len(tokens),
                   [np.nextafter(1.0, 0)] * len(tokens) + [u])
        assert len(out) == 1 and q[out[0]] > 0, out  # rejected, then a token q gives mass to


def test_rrs_residual_keeps_its_scale_when_the_draft_mass_left_is_denormal():
    """After rejecting token 0, the draft's row without it is [0, 5e-324, 5e-324, 0]: D = 1e-323, so S / D
    overflows and the shortcut max(0, w / (S / D) - d) would be all zero (w would stay [0, 0, .3, .3], and u = .1
    would give token 2).  The documented fallback max(0, w / S - d / D) gives [0, 0, 0, .5]: token 3, as the exact
    rule in fractions does."""
    tiny = 5e-324
    p, q = [1.0, tiny, tiny, 0.0], [0.4, 0.0, 0.3, 0.3]
    with np.errstate(all="raise"):
        out = _run(mrs_tree.verify_tree_rrs, [0, 1], [-1, -1], [p, U4, U4], [q, LEAF, LEAF], [0.9, 0.5, 0.1])
    exact, trace, _ = tree_vectors.exact_walk("verify_tree_rrs", [0, 1], [-1, -1], [p, U4, U4], [q, LEAF, LEAF],
                                              [0.9, 0.5, 0.1])
    assert out == exact == [3], trace
    with np.errstate(over="ignore"):
        assert not np.isfinite(0.6 / (2 * tiny))  # the case is one where the shortcut's scale overflows


def _rrs_after_a_dominant_child():
    """A draft row whose first child holds all but 3.9e-13 of its mass: p without that child is 3.9e-13, and
    sum(p) - p(x) computed in float64 is off by 2.3e-4 of it (sum(p) rounds to 1 + 2.2e-16).  The second child,
    token 5, is tested against its exact ratio (fractions) with u just under it: accepted."""
    p = np.array([1.0, 3e-14, 5e-14, 7e-14, 1.1e-13, 1.3e-13])
    p /= p.sum()
    q = [0.5, 0.1, 0.1, 0.1, 0.1, 0.1]
    w = [max(Fraction(0), Fraction(a) - Fraction(b)) for a, b in zip(q, p)]  # the residual after rejecting token 0
    left = sum(Fraction(v) for v in p[1:])  # the mass of p without token 0
    ratio = (w[5] * left) / (sum(w) * Fraction(p[5]))
    assert 0.5 < ratio < 0.7
    leaf = [1 / 6] * 6
    return [0, 5], [-1, -1], [p.tolist(), leaf, leaf], [q, leaf, leaf], [0.9, float(ratio) * (1 - 1e-6), 0.6]


def test_rrs_mass_left_keeps_its_precision_after_a_dominant_child(monkeypatch):
    tokens, parents, p, q, uniforms = _rrs_after_a_dominant_child()
    out = _run(mrs_tree.verify_tree_rrs, tokens, parents, p, q, uniforms)
    exact, trace, _ = tree_vectors.exact_walk("verify_tree_rrs", tokens, parents, p, q, uniforms)
    assert out == exact == [5, 3], trace
    d = np.array(p[0])
    true_left = sum(Fraction(v) for v in d[1:])
    assert abs(Fraction(mrs_tree._mass_left(d, float(d.sum()), [0])) - true_left) < 1e-12 * true_left
    # negative control: the mass left as sum(p) - p(x) alone, without the recount, rejects token 5
    monkeypatch.setattr(mrs_tree, "_mass_left", lambda d, total, rejected: total - sum(d.item(y) for y in rejected))
    assert _run(mrs_tree.verify_tree_rrs, tokens, parents, p, q, uniforms)[0] != 5


@pytest.mark.parametrize("verify", VERIFIERS, ids=NAMES)
def test_large_vocabulary_p_equals_q_no_nan_and_ids_in_range(verify):
    V, rng = 49_152, np.random.default_rng(5)
    tokens, parents = np.arange(16), np.array([-1] * 4 + [i for i in range(4) for _ in range(3)])
    p = rng.dirichlet(np.full(V, 0.05), size=17)
    p[parents + 1, tokens] += 1e-3
    p /= p.sum(axis=1, keepdims=True)
    with np.errstate(all="raise"):
        for q in (p, rng.dirichlet(np.full(V, 0.05), size=17)):
            for _ in range(8):
                out = verify(tokens, parents, p, q, rng)
                assert ((0 <= out) & (out < V)).all()


# ---------------------------------------------------------------- the documented order of uniforms

@pytest.mark.parametrize("function", tree_vectors.FUNCTIONS)
def test_float_code_is_the_documented_rule_uniform_for_uniform(function):
    """Random trees and uniforms: specref.mrs_tree draws as many uniforms as the exact replay of the documented rule
    (tree_vectors.exact_walk, in fractions) and returns the same tokens, wherever no uniform is within 1e-9 of a
    boundary (the others are counted, not compared)."""
    verify, rng, close, compared = getattr(mrs_tree, function), np.random.default_rng(6), 0, 0
    for _ in range(150):
        V, N = int(rng.integers(2, 6)), int(rng.integers(1, 8))
        distinct = function != "verify_tree_mss"
        tokens, parents = _random_tree(rng, N, max(V, N) if distinct else V, distinct)
        V = max(V, N) if distinct else V
        p, q = _drafted_rows(rng, tokens, parents, V), _rows(rng, N + 1, V)
        uniforms = list(rng.random(N + 1))
        listed = ListedUniforms(uniforms)
        out = [int(y) for y in verify(tokens, parents, p, q, listed)]
        exact, _, margin = tree_vectors.exact_walk(function, tokens.tolist(), parents.tolist(), p.tolist(),
                                                   q.tolist(), uniforms[:listed.used])
        if margin < tree_vectors.MARGIN:
            close += 1
            continue
        compared += 1
        assert out == exact, (tokens, parents, uniforms)
    print(f"{function}: {compared} calls compared, {close} left out (a uniform within 1e-9 of a boundary)")
    assert compared >= 145


# ---------------------------------------------------------------- a chain is verify

@pytest.mark.parametrize("verify", [mrs_tree.verify_tree_mss, mrs_tree.verify_tree_rrs], ids=NAMES[1:])
def test_a_chain_is_verify_uniform_for_uniform(verify):
    rng = np.random.default_rng(7)
    for _ in range(150):
        K, V = int(rng.integers(1, 6)), int(rng.integers(2, 7))
        p, q = _rows(rng, K + 1, V, 0.2), _rows(rng, K + 1, V, 0.2)
        x = np.array([mrs.sample(p[t], rng) for t in range(K)])
        seed = int(rng.integers(2**32))
        chain = verify(x, np.arange(K) - 1, p, q, np.random.default_rng(seed))
        np.testing.assert_array_equal(chain, mrs.verify(x, p[:K], q, np.random.default_rng(seed)))


def test_a_chain_through_mss_has_verify_law_exactly():
    """tree_rule.MSS.law (the rule of verify_tree_mss, in fractions) on a chain equals laws.token_call_law (verify's law)
    for fixed drafts, and with the drafts drawn (widths 1, 1, 1) equals laws.chain_call_law of verify, exactly."""
    for seed in range(6):
        draft, target = tree.context_rows(seed, zeros=0.2)
        K = 3
        for x in [(0, 1, 2), (3, 3, 0), (1, 0, 1)]:
            p = [draft(x[:t]) for t in range(K)] + [draft(x)]
            q = [target(x[:t]) for t in range(K + 1)]
            if any(p[t][x[t]] == 0 for t in range(K)):
                continue
            assert tree_rule.MSS.law(x, [-1, 0, 1], p, q) == laws.token_call_law(list(x), p[:K], q)
            assert tree_rule.RRS.law(x, [-1, 0, 1], p, q) == laws.token_call_law(list(x), p[:K], q)
        drawn = tree.tree_call_law(tree_rule.MSS.law, "iid", draft, target, (1, 1, 1))
        assert drawn == laws.chain_call_law(laws.token_call_law, draft, target, K, 4)
        assert isinstance(next(iter(drawn.values())), Fraction)
