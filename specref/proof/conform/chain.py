"""What is particular to checking a chain verifier ("token", "block": `mrs.verify`'s contract).

The same names as `tree`, which the checker calls through `algorithms.part`: the known bugs its checks are
measured on and its diagnosis names, the exact laws of its checks and which known bugs a run catches, the
call's form, the exact tier
(the vectors of mrs_vectors.json and two edge cases with chosen uniforms), one call's outputs sampled
on the suite's cases (`cases.cases`) and the number of accepted drafts, whole sequences of
`speculative_sampling`, and the large-vocabulary case where p == q keeps every draft.
"""

from __future__ import annotations

import json
import time

import numpy as np

from specref import mrs, sampling, verifiers
from specref.proof import laws, power, stats, vectors
from specref.proof.bugs import broken, lossy, shipped
from specref.proof.cases import CORRECT, LARGE_V, N_SEQUENCES, SEQ_K, Case, accepted_count_case, cases, count_marginal
from specref.proof.conform.checks import SEQ_N, SEQ_PROMPT, U_MAX, law_check, replayed_vectors_check, sequences_check
from specref.proof.conform.watch import CHAIN_CALL
from specref.proof.verdict import Check

FORM = CHAIN_CALL
NEEDS = "the all-zero residual and u = 0 edge cases need injected uniforms"  # what a skipped exact tier loses
NAMED_BY_VECTORS = False  # whether a run no law names takes its diagnosis from the vectors (a tree run's does)


# ---------------------------------------------------------------- the known bugs of chain verifiers

# Each is a `broken.Bug`: its sampler (for the vectors' comparison and the power tests) and its exact
# law for fixed drafts, law(x_draft, p, q) -> {output: probability}, summed over the drafts by
# laws.rows_call_law.  Besides the bugs and the lossy rules, each exact verifier is a known way to be
# wrong about the other.
# (Defined in specref.proof.bugs.shipped, whose gallery uses TOKEN_LEVEL for vllm-ascend #7807.)
TOKEN_LEVEL, BLOCK = shipped.TOKEN_LEVEL, shipped.BLOCK
# The laws a verifier checked as token-level, or as block verification, is compared with when it fails.
SIGNATURES = {"token": [*broken.BROKEN.values(), *lossy.LOSSY, BLOCK],
              "block": [*broken.BROKEN_BLOCK.values(), TOKEN_LEVEL, *lossy.LOSSY]}
# The checker's power is measured on every law it can name, through that law's own sampler checked
# as each algorithm whose diagnosis knows it ("name/algorithm" -> (bug, algorithm)):
# tests/proof/test_conform.py and `python3 -m tools.conform_false_alarm`.
REFERENCES = verifiers.references(verifiers.CHAINS)  # the chain verifiers that are their own law: ("token", "block")
KNOWN_BUGS = {f"{bug.name}/{algorithm}": (bug, algorithm) for algorithm in REFERENCES
              for bug in SIGNATURES.get(algorithm, ())}  # a law without its known bugs fails tests/proof/test_registry.py
# The one-call diagnosis also knows the single-call forms of the bugs that shipped (specref.proof.bugs.shipped,
# docs/shipped_bugs.md; those already among SIGNATURES once); the exact-tier edge checks name the shipped
# edge-case bugs (shipped.edge_signature) in the run's diagnosis.
DIAGNOSED = {a: SIGNATURES.get(a, []) + [b for b in shipped.signatures(a) if b not in SIGNATURES.get(a, [])]
             for a in REFERENCES}


def known_bugs(algorithm: str) -> tuple:
    """The known bugs the checks of `algorithm` are there for (what `power` measures them on)."""
    return tuple(SIGNATURES[algorithm])


def diagnosed(algorithm: str) -> list:
    """The known bugs a failing check of `algorithm` is compared with (the one-call laws, the vectors' tokens)."""
    return DIAGNOSED[algorithm]


def edge_bug(algorithm: str, check: str):
    """The algorithm's own known bug that a failing edge check is the signature of: none for a chain (its edge
    checks name the shipped bugs, `shipped.edge_signature`)."""
    return None


def check_laws(algorithm: str) -> dict:
    """Every chi-square check of a run: name -> (default n, correct law, the known bugs' laws) (`power.check_laws`)."""
    return power.check_laws(algorithm, known_bugs(algorithm))


def caught(algorithm: str, counted: dict, level: float, exact_ran: set[str]) -> tuple[str, list[str], list[str]]:
    """(what the known bugs are, those a run with these per-check samples catches with >= 95% power, the others):
    for a chain verifier the bugs that shipped (`power.caught`; an edge case when its exact check ran)."""
    yes, no = power.caught(algorithm, counted, level, exact_ran)
    return "bugs that shipped (docs/shipped_bugs.md)", yes, no


def probe_args() -> tuple:
    """A call's arguments, but the rng, on which to find whether a verifier uses more than random()."""
    return np.array([0]), np.array([[0.4, 0.3, 0.2, 0.1]]), np.array([[0.30, 0.45, 0.10, 0.15], [0.25] * 4])


# ---------------------------------------------------------------- the exact tier

def vectors_check(verifier, algorithm: str) -> Check:
    """The portable vectors of specref/proof/mrs_vectors.json for `algorithm`'s reference: same uniforms, same tokens;
    if some differ, the known bugs that give the same tokens on every vector."""
    function = verifiers.reference(algorithm).function.__name__
    chosen = [c for c in json.loads(vectors.PATH.read_text())["cases"] if c["function"] == function]
    return replayed_vectors_check(
        verifier, function, chosen, lambda c: (np.array(c["x_draft"], dtype=np.int64), np.array(c["p"]),
                                               np.array(c["q"])), "tokens", diagnosed(algorithm),
        "specref/mrs.py")


def edge_checks(verifier, algorithm: str) -> list[Check]:
    """The exact tier's edge cases, each with a chosen uniform: q(x) = 0 is not accepted even with u = 0, and a
    rejection whose residual max(0, q - p) is all zero yields a token of the vocabulary."""
    checks = []
    # q(x) = 0 with u = 0: a strict u < q / p never keeps x; u <= q / p would.
    p = np.array([[0.5, 0.5, 0.0, 0.0]])
    q = np.array([[0.0, 0.5, 0.5, 0.0], [0.25, 0.25, 0.25, 0.25]])
    try:
        out = np.asarray(verifier(np.array([0]), p, q, vectors.ListedUniforms([0.0], tail=0.5)))
        ok = len(out) >= 1 and int(out[0]) != 0 and 0 <= int(out[0]) < 4
        detail = f"draft 0 with q(0) = 0 and every uniform 0.0 -> {out.tolist()}"
        why = "" if ok else " (a kept draft the target never emits)" if len(out) >= 1 and int(out[0]) == 0 else \
            " (not a token of the vocabulary)"
    except Exception as e:  # noqa: BLE001
        ok, detail, why = False, f"raised {type(e).__name__}: {e}", ""  # a raise is reported as a raise
    checks.append(Check("edge q(x) = 0, u = 0", "exact", ok, detail + why))
    # p and q one rounding apart: q(x) / p(x) = 1 - 1e-12 < u = 1 - 2^-53 rejects x, and max(0, q - p) is all zero.
    p = np.array([[0.25, 0.25, 0.25, 0.25]])
    q = np.array([[0.25 * (1 - 1e-12), 0.25, 0.25, 0.25], [0.1, 0.2, 0.3, 0.4]])
    try:
        out = np.asarray(verifier(np.array([0]), p, q, vectors.ListedUniforms([U_MAX], tail=0.5)))
        ok = out.ndim == 1 and 1 <= len(out) <= 2 and np.all(np.isfinite(out)) and np.all((out >= 0) & (out < 4))
        detail = f"rejection with an all-zero residual (p and q one rounding apart) -> {out.tolist()}"
    except Exception as e:  # noqa: BLE001
        ok, detail = False, f"rejection with an all-zero residual raised {type(e).__name__}: {e}"
    checks.append(Check("edge all-zero residual", "exact", bool(ok), detail + ("" if ok else
                        " (must fall back to q, never NaN or an id outside the vocabulary: GHSA-8wr5-jm2h-8r4f)")))
    return checks


# ---------------------------------------------------------------- the statistical tier

def one_call(verifier, case: Case, algorithm: str, level: float, rng, name: str | None = None,
             marginal=None) -> tuple[Check, dict]:
    """The chi-square check of one call's output on `case` (drafts drawn from its p) against the algorithm's exact
    law, or of marginal(outputs) against marginal(law); if it fails, the diagnosed bug it looks like."""
    signatures = diagnosed(algorithm)

    def sample():
        counts = stats.sample_verify(verifier, case.p, case.q, case.n, rng)
        law = laws.rows_call_law(CORRECT[algorithm], case.p, case.q)
        return (counts, law) if marginal is None else (marginal(counts), marginal(law))

    def bug_laws():
        bug_laws = {}
        for s in signatures:
            bug = laws.rows_call_law(s.law, case.p, case.q)
            bug_laws[s.name] = marginal(bug) if marginal is not None else bug
        return bug_laws

    return law_check(name or f"one call: {case.name}", sample, bug_laws, signatures, level, case.n)


def sequence_name(K: int) -> str:
    return f"sequences K={K}"


def sequence(verifier, K: int, algorithm: str, level: float, rng, runs: int) -> Check:
    """The chi-square check of `runs` whole sequences of speculative_sampling through `verifier`, K drafts a call,
    against the exact law of the Markov-chain target's sequences."""
    def loop(target, draft):
        def run(r):
            return sampling.speculative_sampling(SEQ_PROMPT, draft, target, SEQ_N, K, r, verify=verifier)
        return run

    return sequences_check(sequence_name(K), loop, "Markov-chain target", level, rng, runs)


def plan(algorithm: str, scale: float) -> list[tuple]:
    """A run's chi-square checks, each (name, job(verifier, level, rng) -> (check, scores the run's diagnosis sums)):
    one call on each case, the number of accepted drafts, whole sequences for each K of SEQ_K; `scale` times the
    default samples of each."""
    jobs = []
    for c in cases(algorithm):
        case = Case(c.name, c.p, c.q, max(1, round(c.n * scale)))
        jobs.append((f"one call: {case.name}", lambda v, level, rng, case=case: one_call(v, case, algorithm, level,
                                                                                         rng)))
    counted = accepted_count_case()
    counted = Case(counted.name, counted.p, counted.q, max(1, round(counted.n * scale)))
    name = "accepted count (K=4, V=5)"
    jobs.append((name, lambda v, level, rng: (one_call(v, counted, algorithm, level, rng, name, count_marginal)[0],
                                              {})))  # (its likelihoods are not summed)
    runs = max(1, round(N_SEQUENCES * scale))
    for K in SEQ_K:
        jobs.append((sequence_name(K), lambda v, level, rng, K=K: (sequence(v, K, algorithm, level, rng, runs), {})))
    return jobs


# ---------------------------------------------------------------- the large-vocabulary edge

def certain_name(algorithm: str) -> str:
    return "edge p == q, large V"


def certain_check(verifier, algorithm: str, rng) -> Check:
    """p == q over a large dense vocabulary: every ratio is 1 (every w_i and h_i too), so every draft is kept; the
    residual max(0, q - p) is all zero and must not turn into NaN or a crash."""
    start = time.perf_counter()
    K, calls = 4, 50
    p = rng.dirichlet(np.full(LARGE_V, 0.5), size=K)
    q = np.vstack([p, rng.dirichlet(np.full(LARGE_V, 0.5), size=1)])
    short = 0
    for _ in range(calls):
        x_draft = np.array([mrs.sample(p[t], rng) for t in range(K)])
        if len(verifier(x_draft, p, q, rng)) != K + 1:
            short += 1
    detail = f"V={LARGE_V}, K={K}: {calls - short} of {calls} calls kept every draft"
    return Check(certain_name(algorithm), "edge", short == 0, detail + ("" if short == 0 else
                 " (with p == q every ratio is 1: all must be kept)"), seconds=time.perf_counter() - start)

