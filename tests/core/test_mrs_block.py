"""Block verification (mrs.verify_block), proven in the suite's three tiers: exact, property-based, statistical.

Exact: by enumeration of every draft block, the output of one call continued with target
draws has exactly the target's joint law (context-dependent p and q); the paper's toy example
gives 11/9 accepted drafts per call against token-level's 10/9; the code takes exactly the
decisions of the exact law (fixed uniforms on both sides of every threshold).  Property: block
verification never expects fewer tokens per call than token-level.  Statistical: chi-square at
level stats.LEVEL (1e-3), fixed seeds, of verify_block's output against its exact law and of
whole SpS sequences against the target.  Negative controls: the five misreadings in
broken.BROKEN_BLOCK and the LOSSY typical acceptance of specref.proof.bugs.lossy.
"""

import inspect
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specref import mrs, sampling
from specref.proof import laws, stats
from specref.proof.bugs import broken, lossy
from specref.proof.vectors import ListedUniforms


def _max_error(law: dict, other: dict) -> float:
    return max(abs(float(law.get(k, 0)) - float(other.get(k, 0))) for k in set(law) | set(other))


def _continued_error(law_given_drafts, draft_row, target_row, K, V) -> float:
    law = laws.chain_call_law(law_given_drafts, draft_row, target_row, K, V)
    return _max_error(laws.continued_law(law, target_row, K + 1), laws.target_joint_law(target_row, V, K + 1))


def _context_dependent(V, seed, concentration=1.0):
    rng = np.random.default_rng(seed)
    return laws.random_conditionals(V, rng, concentration), laws.random_conditionals(V, rng, concentration)


# ---------------------------------------------------------------- exact tier

@pytest.mark.parametrize("V, K, seed", [(2, 1, 0), (2, 4, 1), (3, 2, 2), (3, 3, 3), (4, 2, 4), (4, 3, 5), (5, 2, 6)])
def test_block_law_continued_is_the_target_joint_law(V, K, seed):
    draft_row, target_row = _context_dependent(V, seed, concentration=0.5)
    error = _continued_error(laws.block_call_law, draft_row, target_row, K, V)
    law = laws.chain_call_law(laws.block_call_law, draft_row, target_row, K, V)
    token = laws.chain_call_law(laws.token_call_law, draft_row, target_row, K, V)
    print(f"V={V} K={K}: max error {error:.2g}; tokens per call {laws.mean_output_length(law):.4f} "
          f"(token-level {laws.mean_output_length(token):.4f})")
    assert error < 1e-14
    assert laws.mean_output_length(law) >= laws.mean_output_length(token) - 1e-12


@pytest.mark.parametrize("K, block, token", [(2, Fraction(11, 9), Fraction(10, 9)), (3, Fraction(15, 9), Fraction(38, 27))])
def test_toy_example_of_the_paper_exactly(K, block, token):
    # binary vocabulary, context-independent: target (1/3, 2/3), draft (2/3, 1/3)
    p, q = laws.fixed_rows([[Fraction(2, 3), Fraction(1, 3)]] * K), laws.fixed_rows([[Fraction(1, 3), Fraction(2, 3)]] * (K + 1))
    block_law = laws.chain_call_law(laws.block_call_law, p, q, K, 2)
    token_law = laws.chain_call_law(laws.token_call_law, p, q, K, 2)
    assert laws.mean_output_length(block_law) - 1 == block  # accepted drafts per call
    assert laws.mean_output_length(token_law) - 1 == token
    joint = laws.target_joint_law(q, 2, K + 1)
    assert laws.continued_law(block_law, q, K + 1) == joint  # exactly, in rational arithmetic
    assert laws.continued_law(token_law, q, K + 1) == joint


@pytest.mark.parametrize("name", list(broken.BROKEN_BLOCK))
def test_exact_tier_rejects_every_misreading(name):
    # V = 3, K = 3, context-dependent p and q: each misreading's continued law is off
    draft_row, target_row = _context_dependent(3, 3, concentration=0.5)
    correct = _continued_error(laws.block_call_law, draft_row, target_row, 3, 3)
    error = _continued_error(broken.BROKEN_BLOCK[name].law, draft_row, target_row, 3, 3)
    print(f"{name}: max error of the continued law {error:.2g} (correct: {correct:.2g})")
    assert correct < 1e-14 and error > 1e-6  # ten orders of magnitude above rounding


def _forcing_uniforms(h, tau, K):
    """Coins eta_K..eta_{tau+1} that fail and eta_tau that comes up, for the documented scan order."""
    etas = []
    for i in range(K, tau, -1):
        assert h[i] < 1.0
        etas.append((1.0 + h[i]) / 2)  # >= h_i: fails
    if tau > 0:
        assert h[tau] > 0.0
        etas.append(h[tau] / 2)  # < h_i: stops here
    return etas


def _decisions(verifier, seeds=range(30), V=4, K=3):
    """For random rows and drafts, every reachable tau and three last uniforms: verifier's tokens vs the exact law's."""
    mismatches, checked = [], 0
    for seed in seeds:
        rng = np.random.default_rng(seed)
        p, q = rng.dirichlet(np.full(V, 0.7), K), rng.dirichlet(np.full(V, 0.7), K + 1)
        x_draft = np.array([rng.choice(V, p=p[t]) for t in range(K)])
        w, h, r = laws.block_weights(x_draft.tolist(), p.tolist(), q.tolist())
        for tau, chance in enumerate(laws.stopping_law(h)):
            if chance < 1e-9 or not all(h[i] < 1 - 1e-9 for i in range(tau + 1, K + 1)) or (tau and h[tau] < 1e-9):
                continue
            last = np.array(q[K] if tau == K else r[tau])
            cdf = np.cumsum(last) / last.sum()
            for u in (0.05, 0.5, 0.95):
                if np.min(np.abs(cdf - u)) < 1e-9:
                    continue
                expected = list(x_draft[:tau]) + [int(np.searchsorted(cdf, u, side="right"))]
                rng_listed = ListedUniforms(_forcing_uniforms(h, tau, K) + [u])
                try:
                    got = verifier(x_draft, p, q, rng_listed).tolist()
                    rng_listed.check_all_used()
                except Exception as e:  # a different number of uniforms is a mismatch too
                    got = repr(e)
                checked += 1
                if got != expected:
                    mismatches.append((seed, tau, u, expected, got))
    return mismatches, checked


def test_code_takes_the_exact_laws_decisions():
    mismatches, checked = _decisions(mrs.verify_block)
    print(f"{checked} forced decisions checked")
    assert checked > 100 and mismatches == []


@pytest.mark.parametrize("name", list(broken.BROKEN_BLOCK))
def test_decision_check_rejects_every_misreading(name):
    mismatches, checked = _decisions(broken.BROKEN_BLOCK[name])
    print(f"{name}: {len(mismatches)} of {checked} forced decisions differ")
    assert mismatches


def test_greedy_inputs_give_verify_greedys_tokens():
    rng = np.random.default_rng(1)
    V, K = 5, 4
    for _ in range(300):
        q = rng.dirichlet(np.ones(V), size=K + 1)
        best = np.argmax(q, axis=1)
        x_draft = np.where(rng.random(K) < 0.6, best[:K], rng.integers(0, V, K))
        np.testing.assert_array_equal(mrs.verify_block(x_draft, np.eye(V)[x_draft], np.eye(V)[best], rng),
                                      mrs.verify_greedy(x_draft, q))


def test_with_a_one_hot_draft_block_verification_is_token_level():
    # A deterministic draft (prompt lookup, a greedy draft) gives w_i = q_1(x_1)...q_i(x_i), the chance that
    # token-level keeps the first i drafts, and h_i makes the stopping law the same: nothing to gain.
    rng = np.random.default_rng(3)
    for _ in range(50):
        K, V = int(rng.integers(1, 5)), int(rng.integers(2, 6))
        q = rng.dirichlet(np.full(V, 0.5), K + 1)
        x_draft = rng.integers(0, V, K)
        p = np.eye(V)[x_draft]
        token = laws.token_call_law(x_draft.tolist(), p.tolist(), q.tolist())
        block = laws.block_call_law(x_draft.tolist(), p.tolist(), q.tolist())
        assert _max_error(token, block) < 1e-15


def test_numerical_edges():
    V, K = 4, 3
    rng = np.random.default_rng(0)
    p = rng.dirichlet(np.ones(V), K)
    # p == q: every w_i = 1, every s_i = 0 (0 / 0 -> h_i = 1): all K accepted, no NaN
    q = np.vstack([p, p[:1]])
    assert all(len(mrs.verify_block(np.array([0, 1, 2]), p, q, rng)) == K + 1 for _ in range(50))
    # q(x) = 0 for the second draft: never accepted, even with every coin at 0
    q = rng.dirichlet(np.ones(V), K + 1)
    q[1, 2] = 0.0
    q[1] /= q[1].sum()
    assert all(len(mrs.verify_block(np.array([0, 2, 1]), p, q, rng)) <= 2 for _ in range(200))
    out = mrs.verify_block(np.array([0, 2, 1]), p, q, ListedUniforms([0.0, 0.0, 0.0, 0.5]))  # h_3 = h_2 = 0
    assert len(out) <= 2
    # w underflow: two ratios of 2e-200 take w_2 below the smallest float64; it is 0, nothing is NaN
    p = np.array([[0.25, 0.25, 0.5, 0.0]] * K)
    q = np.array([[0.5, 0.5 - 1e-200, 1e-200, 0.0]] * (K + 1))
    w = mrs._block_w(np.array([2, 2, 2]), p, q)
    h = [mrs._block_h(i, w, p, q)[0] for i in (1, 2, 3)]
    assert w[1] == 2e-200 and w[2] == 0.0 and w[3] == 0.0 and h == [0.0, 0.0, 0.0]
    assert all(len(mrs.verify_block(np.array([2, 2, 2]), p, q, rng)) <= 2 for _ in range(50))
    # huge ratios: q(x) / p(x) would overflow; w is 1 without dividing
    p = np.array([[1e-320, 1.0 - 1e-320], [0.5, 0.5]])
    q = np.array([[1.0, 0.0], [0.5, 0.5], [0.5, 0.5]])
    w = mrs._block_w(np.array([0, 0]), p, q)
    assert list(w) == [1.0, 1.0, 1.0] and [mrs._block_h(i, w, p, q)[0] for i in (1, 2)] == [1.0, 1.0]


def test_bad_inputs_are_named_like_verify():
    rng = np.random.default_rng(0)
    p = np.array([[0.5, 0.5, 0.0]])
    q = np.full((2, 3), 1 / 3)
    for args, message in [((np.array([2]), p, q), "p\\(x\\) = 0"), ((np.array([], dtype=int), p[:0], q[:1]), "K >= 1"),
                          ((np.array([0]), p, q[:1]), r"\[K \+ 1, V\]"), ((np.array([0, 1]), p, q), r"\[K, V\]"),
                          ((np.array([3]), p, q), "outside"), ((np.array([0]), np.array([[0.5, 0.6, 0.0]]), q), "sum to 1")]:
        for f in (mrs.verify, mrs.verify_block):
            with pytest.raises(ValueError, match=message):
                f(*args, rng)


def test_verify_block_states_what_it_does_and_requires():
    doc = inspect.getdoc(mrs.verify_block)
    assert "\n" not in doc.split("\n\n")[0] and "Requires" in doc
    assert inspect.signature(mrs.verify_block).parameters.keys() == inspect.signature(mrs.verify).parameters.keys()


# ---------------------------------------------------------------- property tier

@settings(max_examples=150, deadline=None)
@given(st.integers(2, 4), st.integers(1, 3), st.floats(0.2, 3.0), st.integers(0, 2**32 - 1))
def test_block_never_expects_fewer_tokens_than_token_level(V, K, concentration, seed):
    draft_row, target_row = _context_dependent(V, seed, concentration)
    block = laws.mean_output_length(laws.chain_call_law(laws.block_call_law, draft_row, target_row, K, V))
    token = laws.mean_output_length(laws.chain_call_law(laws.token_call_law, draft_row, target_row, K, V))
    assert block >= token - 1e-12


# ---------------------------------------------------------------- statistical tier

def _rows(rng, K, V, conc):
    return rng.dirichlet(np.full(V, conc), size=K), rng.dirichlet(np.full(V, conc), size=K + 1)


def _cases():
    rng = np.random.default_rng(2025)
    K, V = 3, 3
    cases = {"random": _rows(rng, K, V, 1.0), "sharp": _rows(rng, K, V, 0.1)}
    p, _ = _rows(rng, K, V, 1.0)
    cases["p_equals_q"] = (p, np.vstack([p, p[:1]]))
    cases["disjoint_supports"] = (np.array([[0.6, 0.4, 0.0]] * K), np.array([[0.0, 0.0, 1.0]] * (K + 1)))
    p, q = _rows(rng, K, V, 1.0)
    cases["one_hot_p"] = (np.eye(V)[[1, 2, 0]], q)
    cases["one_hot_q"] = (p, np.eye(V)[[2, 0, 1, 1]])
    p, q = _rows(rng, K, V, 1.0)
    p[:, 0] = 0
    q[:, 1] = 0
    cases["zeros_in_both"] = (p / p.sum(1, keepdims=True), q / q.sum(1, keepdims=True))
    return cases


CASES = _cases()
N_SAMPLES = 20_000


def block_law(p, q):
    """The exact law of one verify_block call with drafts from the fixed rows p[t]."""
    return laws.chain_call_law(laws.block_call_law, laws.fixed_rows(p), laws.fixed_rows(q), len(p), p.shape[1])


def verify_block_pvalue(verifier, case, seed, n=N_SAMPLES):
    p, q = CASES[case]
    counts = stats.sample_verify(verifier, p, q, n, np.random.default_rng(seed))
    return stats.chi_square_gof(counts, block_law(p, q))


@pytest.mark.default_cases("random", "zeros_in_both")
@pytest.mark.parametrize("case", list(CASES))
def test_verify_block_output_law_chi_square(case):
    stat, dof, pvalue = verify_block_pvalue(mrs.verify_block, case, 21)
    print(f"{case}: chi2={stat:.1f} dof={dof} p={pvalue:.3g}")
    assert pvalue > stats.LEVEL


# Negative controls of the chi-square tier, on the "random" case (the power over fresh seeds
# is measured by `python3 -m tools.false_alarm --block`).
@pytest.mark.default_cases("residual_without_w", "smallest_qualifying")
@pytest.mark.parametrize("name", list(broken.BROKEN_BLOCK))
def test_verify_block_chi_square_rejects_misreadings(name):
    stat, dof, pvalue = verify_block_pvalue(broken.BROKEN_BLOCK[name], "random", 21)
    print(f"{name}: chi2={stat:.1f} dof={dof} p={pvalue:.3g}")
    assert pvalue < stats.LEVEL


# Whole sequences: SpS with verify_block on the suite's Markov-chain target (laws.markov_pair).
V, N, PROMPT = laws.SEQ_V, laws.SEQ_N, laws.SEQ_PROMPT
TARGET, DRAFT = laws.markov_pair()
LAW = laws.sequence_law(TARGET, PROMPT, N)
RUNS = 6_000


def sequence_pvalue(verify, K, seed):
    def sampler(rng):
        return sampling.speculative_sampling(PROMPT, DRAFT, TARGET, N, K, rng, verify=verify)
    return stats.chi_square_gof(stats.sample_sequences(sampler, RUNS, len(PROMPT), np.random.default_rng(seed)), LAW)


@pytest.mark.default_cases("2")
@pytest.mark.parametrize("K", [1, 2, 3, 4])
def test_speculative_sequences_with_verify_block_have_the_target_law(K):
    stat, dof, pvalue = sequence_pvalue(mrs.verify_block, K, 200 + K)
    print(f"K={K}: chi2={stat:.1f} dof={dof} p={pvalue:.3g}")
    assert pvalue > stats.LEVEL


@pytest.mark.default_cases("residual_without_w")
@pytest.mark.parametrize("name", list(broken.BROKEN_BLOCK))
def test_sequence_test_rejects_misreadings(name):
    stat, dof, pvalue = sequence_pvalue(broken.BROKEN_BLOCK[name], 2, 202)
    print(f"{name}: chi2={stat:.1f} dof={dof} p={pvalue:.3g}")
    assert pvalue < stats.LEVEL


def test_typical_acceptance_is_rejected_as_lossy():
    stat, dof, pvalue = sequence_pvalue(lossy.verify_typical, 3, 203)
    print(f"typical acceptance: chi2={stat:.1f} dof={dof} p={pvalue:.3g}")
    assert pvalue < stats.LEVEL


def test_lossy_verifiers_are_labelled_and_not_in_mrs():
    assert lossy.verify_typical.__doc__.startswith("LOSSY") and "LOSSY" in lossy.__doc__
    assert not hasattr(mrs, "verify_typical")
