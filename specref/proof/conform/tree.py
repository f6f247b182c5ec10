"""What is particular to checking a tree verifier ("tree-topk", "tree-mss", "tree-rrs": `mrs_tree.verify_tree_*`'s contract).

The same names as `chain`, which the checker calls through `algorithms.part`.  The checker draws every tree
itself, the way the algorithm assumes (tree_algorithm(...).drawing: the draft's top-k, i.i.d. draws,
draws without replacement; siblings in drawing order), and compares the output with the exact law of one
call, the tree's drawing included (cases.tree_call_law).  Here: the known bugs of each algorithm, the
exact laws of a run's checks and which known bugs a run catches, the call's form, the exact tier (the
vectors of tree_vectors.json and three edge cases with chosen uniforms), one call's outputs on the tree
cases, whole sequences of a loop with trees, and the large-vocabulary case whose every call keeps a
whole path.
"""

from __future__ import annotations

import functools
import json
import time
from collections import Counter
from dataclasses import replace
from typing import Callable

import numpy as np

from specref import trees, verifiers
from specref.proof import power, tree_vectors, vectors
from specref.proof import tree as prooftree
from specref.proof.cases import LARGE_V, TREE_N_SEQUENCES, TREE_SEQ_WIDTHS, TreeCase, TreeSetting, tree_call_law, \
    tree_cases, tree_sequence_law
from specref.proof.conform.checks import SEQ_N, SEQ_PROMPT, U_MAX, law_check, replayed_vectors_check, sequences_check
from specref.proof.conform.watch import TREE_CALL
from specref.proof.verdict import Check

FORM = TREE_CALL
NEEDS = "the u = 0, certain-accept and all-zero residual edge cases need injected uniforms"
NAMED_BY_VECTORS = True  # a run whose failures no law names takes the diagnosis of its failing vectors
N_SEQUENCES = TREE_N_SEQUENCES


# ---------------------------------------------------------------- the known bugs of tree verifiers

# A failing exact-tier edge check of a tree run names this known bug of its algorithm (its `bug[...]`).
TREE_EDGE_BUGS = {"edge q(x) = 0, u = 0": "inclusive_zero_coin"}


def tree_algorithm(algorithm: str) -> prooftree.Algorithm:
    """A tree algorithm's way of drawing children (.drawing), reference verifier and known bugs (.bugs, .bug)."""
    return prooftree.ALGORITHMS[algorithm]


def known_bugs(algorithm: str) -> tuple:
    """The known bugs the checks of `algorithm` are there for (what the power computations measure them on)."""
    return tuple(tree_algorithm(algorithm).bugs)


def diagnosed(algorithm: str) -> list:
    """The known bugs a failing check of `algorithm` is compared with (the one-call laws, the vectors' tokens): for a
    tree verifier the same bugs its checks are measured on."""
    return list(known_bugs(algorithm))


def edge_bug(algorithm: str, check: str):
    """The algorithm's own known bug that the failing edge check named `check` is the signature of, or None."""
    return tree_algorithm(algorithm).bug[TREE_EDGE_BUGS[check]] if check in TREE_EDGE_BUGS else None


@functools.lru_cache(maxsize=None)
def check_laws(algorithm: str) -> dict:
    """Every chi-square check of a run: name -> (default n, correct law, the known bugs' laws): one call on each of
    cases.tree_cases() (cases.tree_call_law) and the tree loop's sequences (cases.tree_sequence_law)."""
    bugs, out = known_bugs(algorithm), {}
    for case in tree_cases():
        out[f"one call: {case.name}"] = (case.n, tree_call_law(algorithm, case.name),
                                         tuple(tree_call_law(algorithm, case.name, bug.name) for bug in bugs))
    for widths in TREE_SEQ_WIDTHS:
        out[sequence_name(widths)] = (TREE_N_SEQUENCES, tree_sequence_law(algorithm, widths),
                                      tuple(tree_sequence_law(algorithm, widths, bug.name) for bug in bugs))
    return out


def bug_powers(algorithm: str, counted: dict, level: float, edges: set[str]) -> tuple[list[str], list[str]]:
    """(the known bugs a run with these per-check samples catches with >= 95% power, the others), each with its
    power, from the exact laws of every check, the sequence checks included (their laws being exact,
    `specref.proof.tree.loop_law`); a bug in `edges` is caught for certain by an exact-tier edge check that ran."""
    laws = check_laws(algorithm)
    yes, no = [], []
    for k, bug in enumerate(known_bugs(algorithm)):
        if bug.name in edges:
            yes.append(f"{bug.name} (edge check)")
            continue
        miss = 1.0
        for name, n in counted.items():
            _, correct, bug_laws = laws[name]
            miss *= 1.0 - power.check_power(bug_laws[k], correct, n, level)
        (yes if 1.0 - miss >= 0.95 else no).append(f"{bug.name} ({1.0 - miss:.0%})")
    return yes, no


def caught(algorithm: str, counted: dict, level: float, exact_ran: set[str]) -> tuple[str, list[str], list[str]]:
    """(what the known bugs are, those a run with these per-check samples catches with >= 95% power, the others):
    for a tree verifier its algorithm's known bugs (`bug_powers`; every check counted, and an edge check that ran
    catches its bug for certain)."""
    edges = {bug for check, bug in TREE_EDGE_BUGS.items() if check in exact_ran}
    yes, no = bug_powers(algorithm, counted, level, edges)
    return "known tree bugs (specref/proof/tree.py)", yes, no


def probe_args() -> tuple:
    """A call's arguments, but the rng, on which to find whether a verifier uses more than random()."""
    return (np.array([0, 1]), np.array([-1, -1]), np.full((3, 4), 0.25),
            np.array([[0.30, 0.45, 0.10, 0.15], [0.25] * 4, [0.25] * 4]))


# ---------------------------------------------------------------- the exact tier

def vectors_check(verifier, algorithm: str) -> Check:
    """The portable vectors of specref/proof/tree_vectors.json for this algorithm's verifier: same uniforms, same
    tokens; if some differ, the known bugs that give the same tokens on every vector."""
    function = verifiers.reference(algorithm).function.__name__
    chosen = [c for c in json.loads(tree_vectors.PATH.read_text())["cases"] if c["function"] == function]
    return replayed_vectors_check(
        verifier, function, chosen, lambda c: (np.array(c["tokens"], dtype=np.int64),
                                               np.array(c["parents"], dtype=np.int64), np.array(c["p"]),
                                               np.array(c["q"])),
        "tokens_out", diagnosed(algorithm), 'specref/mrs_tree.py\'s RANDOMNESS')


def _edge(name: str, verifier, args, judge: Callable) -> Check:
    """One injected-uniform edge case: judge(out) -> (passed, why if not); a raise fails it, reported as a raise."""
    tokens, parents = args[0], args[1]
    try:
        out = np.asarray(verifier(*args))
        ok, why = judge(out)
        detail = f"tokens={tokens.tolist()} parents={parents.tolist()} -> {out.tolist()}" + ("" if ok else f" ({why})")
    except Exception as e:  # noqa: BLE001
        ok, detail = False, f"raised {type(e).__name__}: {e}"
    return Check(name, "exact", bool(ok), detail)


def edge_checks(verifier, algorithm: str) -> list[Check]:
    """The exact tier's edge cases for a tree verifier, each with chosen uniforms: q(x) = 0 at a child with u = 0
    (never accepted), a child accepted for certain (ratio exactly 1) with u = 1 - 2^-53, and a rejection that leaves
    an all-zero residual (rounding): a token of the vocabulary, never NaN or the id V."""
    flat, leaf = np.full(4, 0.25), [0.05, 0.15, 0.5, 0.3]
    q0 = [0.0, 0.5, 0.25, 0.25]
    checks = [_edge("edge q(x) = 0, u = 0", verifier, (np.array([0, 1]), np.array([-1, -1]), np.tile(flat, (3, 1)),
                    np.array([q0, leaf, leaf]), vectors.ListedUniforms([0.0], tail=0.5)),
                    lambda out: (int(out[0]) != 0, "kept a child the target never emits, at u = 0: the test must be "
                                                   "strict, u < ratio"))]
    tokens, parents = np.array([0, 1, 2, 3, 1, 3]), np.array([-1, -1, 0, 0, 1, 1])
    if algorithm == "tree-topk":  # q's mass on a node's two children: the second's ratio q(c_2) / (1 - q(c_1)) is 1
        q = np.array([[0.25, 0.75, 0, 0], leaf, [0, 0.25, 0, 0.75], leaf, leaf, leaf, leaf])
        p, path, name, why = np.tile(flat, (7, 1)), [1, 3], "edge certain accept, u -> 1", \
            "q(c_2) / (1 - q(c_1)) = 1: the second child must be kept even with u = 1 - 2^-53"
    else:  # p == q: every ratio is 1, so the first child at every node is kept
        p = np.array([[0.4, 0.3, 0.2, 0.1], flat, [0.1, 0.2, 0.3, 0.4], leaf, leaf, leaf, leaf])
        q, path, name, why = p.copy(), [0, 2], "edge p == q, u -> 1", \
            "with p == q every ratio is 1: the first child must be kept even with u = 1 - 2^-53"
    checks.append(_edge(name, verifier, (tokens, parents, p, q, vectors.ListedUniforms([], tail=U_MAX)),
                        lambda out: (len(out) == 3 and [int(y) for y in out[:2]] == path, f"expected the path {path}"
                                     f" and one more token: {why}")))
    if algorithm == "tree-topk":  # the children hold all of q's mass, to rounding: q without them is all zero
        near = 1 - 1e-6
        args = (np.array([0, 1]), np.array([-1, -1]), np.tile(flat, (3, 1)),
                np.array([[0.5 * near, 0.5 * near, 0, 0], leaf, leaf]), vectors.ListedUniforms([U_MAX] * 2, tail=0.5))
        rest = "both children rejected, q without them is all zero (the children hold q's mass, to rounding)"
    else:  # p and q one rounding apart: q(x) / p(x) = 1 - 1e-12 < u = 1 - 2^-53 rejects x, max(0, q - p) is all zero
        args = (np.array([0]), np.array([-1]), np.tile(flat, (2, 1)),
                np.array([[0.25 * (1 - 1e-12), 0.25, 0.25, 0.25], leaf]), vectors.ListedUniforms([U_MAX], tail=0.5))
        rest = "the child rejected, max(0, q - p) is all zero (p and q one rounding apart)"
    checks.append(_edge("edge all-zero residual", verifier, args, lambda out: (
        out.ndim == 1 and 1 <= len(out) <= 2 and np.isfinite(out).all() and np.all((out >= 0) & (out < 4)),
        f"{rest}: the last token must fall back to q, never NaN or an id outside the vocabulary: GHSA-8wr5-jm2h-8r4f")))
    return checks


# ---------------------------------------------------------------- the statistical tier

def one_call(verifier, case: TreeCase, algorithm: str, level: float, rng) -> tuple[Check, dict]:
    """The chi-square check of one call's output on `case`, trees drawn the algorithm's way, against the exact law;
    if it fails, the known bug of the algorithm it looks like."""
    alg, setting = tree_algorithm(algorithm), TreeSetting(case)

    def sample():
        counts = Counter()
        for _ in range(case.n):
            tokens, parents, p, q = setting.call(alg.drawing, rng)
            counts[tuple(int(y) for y in verifier(tokens, parents, p, q, rng))] += 1
        return counts, tree_call_law(algorithm, case.name)

    def bug_laws():
        return {b.name: tree_call_law(algorithm, case.name, b.name) for b in alg.bugs}

    return law_check(f"one call: {case.name}", sample, bug_laws, diagnosed(algorithm), level, case.n,
                     f" ({case.shape} trees, V={case.V})")


def sequence_name(widths: tuple) -> str:
    return f"sequences {'x'.join(str(w) for w in widths)}"


def sequence(verifier, widths: tuple, algorithm: str, level: float, rng, runs: int) -> Check:
    """The chi-square check of `runs` whole sequences of a speculative loop with trees (each call: a tree of `widths`
    drawn the algorithm's way from the draft at the tokens so far, the target's rows on it, the verifier; until
    SEQ_N new tokens) against the exact law of the Markov-chain target's sequences (tree.loop_law: the same)."""
    drawing = tree_algorithm(algorithm).drawing

    def loop(target, draft):
        def run(r):
            x = [int(t) for t in SEQ_PROMPT]
            while len(x) < len(SEQ_PROMPT) + SEQ_N:
                context = tuple(x)  # at least `order` tokens: the Markov chains read the last ones

                def draft_row(path, context=context):
                    return draft.table[(context + path)[-draft.order:]]

                def target_row(path, context=context):
                    return target.table[(context + path)[-target.order:]]

                tokens, parents = prooftree.draw_tree(drawing, draft_row, widths, r)
                p = np.array(prooftree.tree_rows(tokens, parents, draft_row))
                q = np.array(prooftree.tree_rows(tokens, parents, target_row))
                x.extend(int(y) for y in verifier(np.array(tokens), np.array(parents), p, q, r))
            return np.array(x[: len(SEQ_PROMPT) + SEQ_N])
        return run

    shape = "x".join(str(w) for w in widths)
    return sequences_check(sequence_name(widths), loop, f"{shape} trees, Markov-chain target", level, rng, runs)


def plan(algorithm: str, scale: float) -> list[tuple]:
    """A run's chi-square checks, each (name, job(verifier, level, rng) -> (check, scores the run's diagnosis sums)):
    one call on each tree case, whole sequences for each tree shape of TREE_SEQ_WIDTHS; `scale` times the default
    samples of each."""
    jobs = []
    for c in tree_cases():
        case = replace(c, n=max(1, round(c.n * scale)))
        jobs.append((f"one call: {case.name}", lambda v, level, rng, case=case: one_call(v, case, algorithm, level,
                                                                                         rng)))
    runs = max(1, round(TREE_N_SEQUENCES * scale))
    for widths in TREE_SEQ_WIDTHS:
        jobs.append((sequence_name(widths), lambda v, level, rng, widths=widths: (
            sequence(v, widths, algorithm, level, rng, runs), {})))
    return jobs


# ---------------------------------------------------------------- the large-vocabulary edge

def certain_name(algorithm: str) -> str:
    return "edge q on the children, large V" if algorithm == "tree-topk" else "edge p == q, large V"


def certain_check(verifier, algorithm: str, rng) -> Check:
    """Over a large dense vocabulary, rows under which every call keeps a whole path: p == q (every ratio 1, the
    first child kept) for tree-mss and tree-rrs; q's mass only on a node's two top-k children for tree-topk."""
    start = time.perf_counter()
    calls, widths = 50, (2, 2)
    dense = rng.dirichlet(np.full(LARGE_V, 0.5), size=len(widths) + 1)  # [depth + 1, V]: the rows at each depth
    target = dense.copy()  # p == q
    if algorithm == "tree-topk":  # q's mass on each node's two children (the top 2 of p), and nothing else
        for d in range(len(widths)):
            target[d] = 0.0
            target[d, trees.draw_children(dense[d], 2, "topk", rng)] = [0.25, 0.75]

    def draft_row(path):  # the rows depend on the depth only
        return dense[len(path)]

    def target_row(path):
        return target[len(path)]

    drawing, short = tree_algorithm(algorithm).drawing, 0
    fixed = prooftree.draw_tree(drawing, draft_row, widths, rng) if drawing == "topk" else None  # (no randomness)
    for _ in range(calls):
        tokens, parents = fixed or prooftree.draw_tree(drawing, draft_row, widths, rng)
        p, q = np.array(prooftree.tree_rows(tokens, parents, draft_row)), np.array(prooftree.tree_rows(tokens, parents,
                                                                                                target_row))
        if len(verifier(np.array(tokens), np.array(parents), p, q, rng)) != len(widths) + 1:
            short += 1
    why = ("with q's mass on a node's two children the walk always goes on" if algorithm == "tree-topk" else
           "with p == q every ratio is 1: the first child is always kept")
    return Check(certain_name(algorithm), "edge", short == 0, f"V={LARGE_V}, 2x2 trees: {calls - short} of {calls} "
                 "calls kept a whole path" + ("" if short == 0 else f" ({why})"), seconds=time.perf_counter() - start)
