"""Modified rejection sampling, proven in three tiers: exact, property-based, statistical.

Statistical tests use chi-square goodness of fit at level specref.proof.stats.LEVEL (1e-3):
a correct sampler fails one of them with probability 1e-3 for a random seed (measured
by tools/false_alarm.py); seeds are fixed, so every run is the same.  Each test is
also run on the deliberately broken samplers of specref.proof.bugs.broken, which it must reject.
"""

import inspect
from collections import Counter
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from specref.proof import laws, stats
from specref.proof.bugs import broken
from specref import mrs


class FixedUniforms:
    """A stand-in for np.random.Generator whose random() returns the given numbers in turn."""

    def __init__(self, *u):
        self.u = list(u)

    def random(self):
        return self.u.pop(0)


P_D = np.array([0.4, 0.3, 0.2, 0.1])  # Qualcomm post, Figure 10: draft
P_T = np.array([0.30, 0.45, 0.10, 0.15])  # Qualcomm post, Figure 10: target


# ---------------------------------------------------------------- exact tier

def test_toy_example_from_the_qualcomm_post():
    assert mrs.acceptance_rate(P_D, P_T) == pytest.approx(0.8)
    np.testing.assert_allclose(mrs.residual(P_D, P_T), [0.0, 0.75, 0.0, 0.25])
    np.testing.assert_allclose(mrs.output_law(P_D, P_T), P_T)


def test_theorem1_with_exact_fractions():
    p = [Fraction(2, 5), Fraction(3, 10), Fraction(1, 5), Fraction(1, 10)]
    q = [Fraction(3, 10), Fraction(9, 20), Fraction(1, 10), Fraction(3, 20)]
    accept = [min(a, b) for a, b in zip(p, q)]  # P(draft x and accept it)
    reject = 1 - sum(accept)
    res = [max(Fraction(0), b - a) / sum(max(Fraction(0), b - a) for a, b in zip(p, q)) for a, b in zip(p, q)]
    assert [a + reject * r for a, r in zip(accept, res)] == q
    np.testing.assert_allclose(mrs.residual(P_D, P_T), [float(r) for r in res], rtol=0, atol=1e-15)


def test_accept_decision_is_exact_and_strict():
    # token 1: q/p = 0.45/0.3 = 1.5 -> always accepted; token 0: q/p = 0.75
    assert mrs.accept_or_resample(1, P_D, P_T, FixedUniforms(0.999999)) == (1, True)
    assert mrs.accept_or_resample(0, P_D, P_T, FixedUniforms(0.7499, 0.0)) == (0, True)
    # u equal to the ratio is a rejection (strict <); the residual draw u = 0.0 gives token 1
    assert mrs.accept_or_resample(0, np.array([0.5, 0.5]), np.array([0.25, 0.75]), FixedUniforms(0.5, 0.0)) == (1, False)
    # a draft token the target gives probability 0 is never accepted, even with u = 0
    assert mrs.accept_or_resample(0, np.array([0.5, 0.5]), np.array([0.0, 1.0]), FixedUniforms(0.0, 0.3)) == (1, False)


def test_p_equal_q_gives_no_nan_and_always_accepts():
    p = np.array([0.2, 0.5, 0.3])
    np.testing.assert_array_equal(mrs.residual(p, p), p)
    rng = np.random.default_rng(0)
    assert all(mrs.accept_or_resample(x, p, p, rng) == (x, True) for x in [0, 1, 2] * 50)


def test_verify_greedy_matches_verify_on_one_hot_distributions():
    rng = np.random.default_rng(1)
    V, K = 5, 4
    for _ in range(200):
        q = rng.dirichlet(np.ones(V), size=K + 1)
        best = np.argmax(q, axis=1)
        x_draft = np.where(rng.random(K) < 0.6, best[:K], rng.integers(0, V, K))
        one_hot_p = np.eye(V)[x_draft]
        one_hot_q = np.eye(V)[best]
        np.testing.assert_array_equal(mrs.verify_greedy(x_draft, q), mrs.verify(x_draft, one_hot_p, one_hot_q, rng))


def test_verify_greedy_examples():
    q = np.eye(4)[[2, 0, 3]]  # the target's argmax at positions 0, 1, 2
    np.testing.assert_array_equal(mrs.verify_greedy(np.array([2, 0]), q), [2, 0, 3])  # all accepted + bonus
    np.testing.assert_array_equal(mrs.verify_greedy(np.array([2, 1]), q), [2, 0])  # correction at 1
    np.testing.assert_array_equal(mrs.verify_greedy(np.array([1, 0]), q), [2])


# ---------------------------------------------------------------- property tier

def _distribution(V):
    return arrays(np.float64, V, elements=st.floats(0, 1)).filter(lambda a: a.sum() > 1e-3).map(lambda a: a / a.sum())


@st.composite
def pairs(draw):
    V = draw(st.integers(1, 8))
    p, q = draw(_distribution(V)), draw(_distribution(V))
    if draw(st.booleans()):  # often share mass exactly: p == q on some tokens
        mask = draw(arrays(np.bool_, V))
        q = np.where(mask, p, q)
        q = q / q.sum()
    return p, q


@settings(max_examples=300, deadline=None)
@given(pairs())
def test_theorem1_identity_for_arbitrary_distributions(pq):
    p, q = pq
    alpha = mrs.acceptance_rate(p, q)
    assert 0.0 <= alpha <= 1.0 + 1e-12
    r = mrs.residual(p, q)
    assert np.all(np.isfinite(r)) and r.sum() == pytest.approx(1.0)
    np.testing.assert_allclose(np.minimum(p, q) + (1.0 - alpha) * r, q, atol=1e-12)
    # Leviathan's D_LK: alpha = 1 - total variation
    assert alpha == pytest.approx(1.0 - 0.5 * np.abs(p - q).sum())


@settings(max_examples=200, deadline=None)
@given(pairs(), st.integers(0, 2**32 - 1))
def test_mrs_output_has_target_support(pq, seed):
    p, q = pq
    rng = np.random.default_rng(seed)
    x = int(rng.choice(len(p), p=p))
    y, accepted = mrs.accept_or_resample(x, p, q, rng)
    assert q[y] > 0
    assert y == x if accepted else True  # an accepted draft is returned unchanged


# ---------------------------------------------------------------- statistical tier

def _rows(rng, K, V, conc):
    return rng.dirichlet(np.full(V, conc), size=K), rng.dirichlet(np.full(V, conc), size=K + 1)


def _cases():
    rng = np.random.default_rng(2024)
    K, V = 2, 4
    cases = {}
    cases["random"] = _rows(rng, K, V, 1.0)
    cases["sharp"] = _rows(rng, K, V, 0.1)
    p, _ = _rows(rng, K, V, 1.0)
    cases["p_equals_q"] = (p, np.vstack([p, p[:1]]))
    cases["disjoint_supports"] = (np.array([[0.5, 0.5, 0, 0]] * K), np.array([[0, 0, 0.3, 0.7]] * (K + 1)))
    p, q = _rows(rng, K, V, 1.0)
    cases["one_hot_p"] = (np.eye(V)[[1, 2]], q)
    cases["one_hot_q"] = (p, np.eye(V)[[3, 0, 1]])
    p, q = _rows(rng, K, V, 1.0)
    p[:, 0] = 0
    q[:, 1] = 0
    cases["zeros_in_both"] = (p / p.sum(1, keepdims=True), q / q.sum(1, keepdims=True))
    return cases


CASES = _cases()
N_SAMPLES = 20_000


@pytest.mark.default_cases("random", "disjoint_supports", "zeros_in_both")
@pytest.mark.parametrize("case", list(CASES))
def test_verify_output_law_chi_square(case):
    p, q = CASES[case]
    counts = stats.sample_verify(mrs.verify, p, q, N_SAMPLES, np.random.default_rng(11))
    stat, dof, pvalue = stats.chi_square_gof(counts, laws.verify_law(p, q))
    print(f"{case}: chi2={stat:.1f} dof={dof} p={pvalue:.3g}")
    assert pvalue > stats.LEVEL


@pytest.mark.default_cases("random", "disjoint_supports", "p_equals_q")
@pytest.mark.parametrize("case", list(CASES))
def test_mrs_single_token_law_is_target(case):
    p, q = CASES[case][0][0], CASES[case][1][0]
    rng = np.random.default_rng(12)
    counts = Counter()
    for _ in range(N_SAMPLES):
        x = int(rng.choice(len(p), p=p))
        counts[(mrs.accept_or_resample(x, p, q, rng)[0],)] += 1
    stat, dof, pvalue = stats.chi_square_gof(counts, {(y,): float(v) for y, v in enumerate(q)})
    print(f"{case}: chi2={stat:.1f} dof={dof} p={pvalue:.3g}")
    assert pvalue > stats.LEVEL


def test_number_of_accepted_tokens_has_its_closed_form():
    rng = np.random.default_rng(13)
    K, V = 4, 5
    p, q = _rows(rng, K, V, 1.0)
    law = laws.accepted_count_law(p, q)
    assert law.sum() == pytest.approx(1.0)
    counts = Counter()
    for out, c in stats.sample_verify(mrs.verify, p, q, N_SAMPLES, rng).items():
        counts[(len(out) - 1,)] += c
    stat, dof, pvalue = stats.chi_square_gof(counts, {(a,): float(w) for a, w in enumerate(law)})
    print(f"accepted counts: chi2={stat:.1f} dof={dof} p={pvalue:.3g}")
    assert pvalue > stats.LEVEL
    # with equal rows it is Leviathan's capped geometric: alpha^a (1 - alpha), alpha^K
    alpha = mrs.acceptance_rate(p[0], q[0])
    capped = laws.accepted_count_law(np.repeat(p[:1], K, 0), np.repeat(q[:1], K + 1, 0))
    np.testing.assert_allclose(capped, [alpha**a * (1 - alpha) for a in range(K)] + [alpha**K])


# Negative controls: the same test must reject each broken sampler.
@pytest.mark.default_cases("always_accept", "resample_from_q", "ratio_inverted", "residual_only_rejected_entry")
@pytest.mark.parametrize("name", list(broken.BROKEN))
def test_verify_chi_square_rejects_broken_samplers(name):
    p, q = CASES["random"]
    counts = stats.sample_verify(broken.BROKEN[name], p, q, N_SAMPLES, np.random.default_rng(11))
    stat, dof, pvalue = stats.chi_square_gof(counts, laws.verify_law(p, q))
    print(f"{name}: chi2={stat:.1f} dof={dof} p={pvalue:.3g}")
    assert pvalue < stats.LEVEL


@pytest.mark.default_cases("ratio_inverted")
@pytest.mark.parametrize("name", ["always_accept", "ratio_inverted", "no_bonus", "one_uniform_reused"])
def test_accepted_count_test_rejects_broken_samplers(name):
    rng = np.random.default_rng(13)
    p, q = _rows(rng, 4, 5, 1.0)
    law = {(a,): float(w) for a, w in enumerate(laws.accepted_count_law(p, q))}
    counts = Counter()
    for out, c in stats.sample_verify(broken.BROKEN[name], p, q, N_SAMPLES, np.random.default_rng(1)).items():
        counts[(len(out) - 1,)] += c
    assert stats.chi_square_gof(counts, law)[2] < stats.LEVEL, name


# ---------------------------------------------------------------- lenience (Leviathan A.5)

@pytest.mark.default_cases("0.5")
@pytest.mark.parametrize("lenience", [1.0, 0.5, 0.2])
def test_lenience_guarantee_and_acceptance(lenience):
    p, q = P_D, P_T
    # exact law of the first output token: min(p, q/l) accepted + the rest resampled
    alpha_l = mrs.lenient_acceptance_rate(p, q, lenience)
    law = np.minimum(p, q / lenience) + (1 - alpha_l) * mrs.residual(p, q)
    assert law.sum() == pytest.approx(1.0)
    assert np.all(law <= q / lenience + 1e-12)  # no token above q(x) / l
    rng = np.random.default_rng(14)
    counts, accepted = Counter(), 0
    for _ in range(N_SAMPLES):
        x = np.array([rng.choice(4, p=p)])
        out = mrs.verify_lenient(x, p[None], np.stack([q, q]), rng, lenience)
        counts[(int(out[0]),)] += 1
        accepted += len(out) == 2
    assert stats.chi_square_gof(counts, {(y,): float(v) for y, v in enumerate(law)})[2] > stats.LEVEL
    assert accepted / N_SAMPLES == pytest.approx(alpha_l, abs=4 * np.sqrt(0.25 / N_SAMPLES))
    if lenience < 1.0:  # lossy: the same test against q rejects it
        assert stats.chi_square_gof(counts, {(y,): float(v) for y, v in enumerate(q)})[2] < stats.LEVEL


# ---------------------------------------------------------------- bad input

@pytest.mark.parametrize("p, q, message", [
    (np.array([0.5, 0.6]), np.array([0.5, 0.5]), "does not sum to 1"),
    (np.array([1.2, -0.2]), np.array([0.5, 0.5]), "negative"),
    (np.array([np.nan, 1.0]), np.array([0.5, 0.5]), "NaN"),
    (np.array([0.5, 0.5]), np.array([0.2, 0.3, 0.5]), "vocabulary size"),
    (np.array([]), np.array([]), "V >= 1"),
])
def test_bad_distributions_are_named(p, q, message):
    with pytest.raises(ValueError, match=message):
        mrs.accept_or_resample(0, p, q, np.random.default_rng(0))
    with pytest.raises(ValueError, match=message):
        mrs.acceptance_rate(p, q)


def test_bad_verify_inputs_are_named():
    rng = np.random.default_rng(0)
    p = np.array([[0.5, 0.5, 0.0]])
    q = np.full((2, 3), 1 / 3)
    with pytest.raises(ValueError, match="p\\(x\\) = 0"):
        mrs.verify(np.array([2]), p, q, rng)
    with pytest.raises(ValueError, match="K >= 1"):
        mrs.verify(np.array([], dtype=int), p[:0], q[:1], rng)
    with pytest.raises(ValueError, match=r"\[K \+ 1, V\]"):
        mrs.verify(np.array([0]), p, q[:1], rng)
    with pytest.raises(ValueError, match=r"\[K, V\]"):
        mrs.verify(np.array([0, 1]), p, q, rng)
    with pytest.raises(ValueError, match="outside"):
        mrs.verify(np.array([3]), p, q, rng)
    with pytest.raises(ValueError, match="token id"):
        mrs.accept_or_resample(5, p[0], q[0], rng)
    with pytest.raises(ValueError, match="lenience"):
        mrs.verify_lenient(np.array([0]), p, q, rng, 0.0)
    with pytest.raises(ValueError, match=r"\[K \+ 1, V\]"):
        mrs.verify_greedy(np.array([0, 1]), q)


def test_one_pair_functions_reject_stacked_rows():
    # output_law and lenient_acceptance_rate used to accept [n, V] and return wrong numbers
    # (output_law gave 0.25s instead of q; lenient_acceptance_rate gave 2.0 for two identical rows)
    p2, q2 = np.stack([P_D, P_D]), np.stack([P_T, P_T])
    for call in [lambda: mrs.output_law(p2, q2), lambda: mrs.lenient_acceptance_rate(p2, p2, 1.0),
                 lambda: mrs.residual(p2, q2), lambda: mrs.accept_or_resample(0, p2, q2, np.random.default_rng(0)),
                 lambda: mrs.output_law(P_D, q2)]:
        with pytest.raises(ValueError, match=r"single pair of distributions p \[V\], q \[V\]"):
            call()
    assert mrs.lenient_acceptance_rate(P_D, P_D, 1.0) == pytest.approx(1.0)
    np.testing.assert_allclose(mrs.acceptance_rate(p2, q2), [0.8, 0.8])  # stacked rows are fine here


def test_a_drafted_token_with_zero_draft_probability_is_named_with_its_position():
    p = np.array([[0.5, 0.5, 0.0], [0.5, 0.5, 0.0]])
    q = np.full((3, 3), 1 / 3)
    with pytest.raises(ValueError, match="draft token 2 at position 1 has p\\(x\\) = 0"):
        mrs.verify(np.array([0, 2]), p, q, FixedUniforms(0.9, 0.5))  # even though position 0 rejects
    with pytest.raises(ValueError, match="p\\(x\\) = 0"):
        mrs.accept_or_resample(2, p[0], q[0], FixedUniforms(0.0))


def test_sample_rejects_what_it_cannot_draw_from():
    with pytest.raises(ValueError, match="one vector of weights"):
        mrs.sample(np.full((2, 2), 0.25), FixedUniforms(0.5))
    for V in [3, 2000]:
        with pytest.raises(ValueError, match="positive sum"):
            mrs.sample(np.zeros(V), FixedUniforms(0.5))


class CountingRng:
    """np.random.Generator's random(), counting the calls."""

    def __init__(self, seed):
        self.rng, self.calls = np.random.default_rng(seed), 0

    def random(self):
        self.calls += 1
        return self.rng.random()


@pytest.mark.parametrize("sampler, correct", [(mrs.verify, True), (broken.no_bonus, False)])
def test_verify_draws_the_documented_number_of_uniforms(sampler, correct):
    # module docstring: a rejection at position t uses t + 2 uniforms, accepting all K uses K + 1
    p, q = CASES["random"]
    K = p.shape[0]
    ok = []
    for seed in range(300):
        rng = CountingRng(seed)
        x_draft = np.array([rng.rng.choice(p.shape[1], p=p[t]) for t in range(K)])
        out = sampler(x_draft, p, q, rng)
        ok.append(rng.calls == (K + 1 if len(out) == K + 1 else len(out) + 1))  # len(out) <= K: rejected at len(out) - 1
    assert all(ok) == correct


def test_verify_lenient_with_lenience_one_is_verify():
    p, q = CASES["random"]
    for seed in range(200):
        x_draft = np.array([np.random.default_rng(seed).choice(4, p=p[t]) for t in range(2)])
        np.testing.assert_array_equal(mrs.verify_lenient(x_draft, p, q, np.random.default_rng(seed), 1.0),
                                      mrs.verify(x_draft, p, q, np.random.default_rng(seed)))


def test_verify_is_exact_mrs_with_no_lenience_in_it():
    source = inspect.getsource(mrs.verify)
    assert "lenience" not in source and "verify_lenient" not in source
    assert "lenience" not in str(inspect.signature(mrs.verify))


@pytest.mark.parametrize("name", ["acceptance_rate", "residual", "accept_or_resample", "verify", "verify_lenient", "verify_greedy",
                                  "output_law", "lenient_acceptance_rate", "sample", "check_distribution"])
def test_public_functions_state_what_they_do_and_require(name):
    doc = inspect.getdoc(getattr(mrs, name))
    summary = doc.split("\n\n")[0]
    assert "\n" not in summary and summary.endswith("."), summary  # a one-sentence summary line
    assert "Requires" in doc, doc


def test_seeded_runs_are_reproducible():
    p, q = CASES["random"]
    a = stats.sample_verify(mrs.verify, p, q, 500, np.random.default_rng(5))
    b = stats.sample_verify(mrs.verify, p, q, 500, np.random.default_rng(5))
    assert a == b


# ---------------------------------------------------------------- sampling from a large vocabulary

def _block_structured(V=3000, seed=15):
    rng = np.random.default_rng(seed)
    d = np.zeros(V)
    support = np.concatenate([[0, 255, 256, 511, 512, V - 1], rng.choice(V, 14, replace=False)])  # block edges
    d[support] = rng.dirichlet(np.ones(len(support)))
    return d


def _sample_uniform_within_block(d, rng):
    """Broken: picks the block right, then any token with mass in it uniformly."""
    j = mrs.sample(d, rng) // mrs._BLOCK
    block = np.flatnonzero(d[j * mrs._BLOCK:(j + 1) * mrs._BLOCK])
    return j * mrs._BLOCK + int(rng.choice(block))


@pytest.mark.parametrize("sampler, correct", [(mrs.sample, True), (_sample_uniform_within_block, False)])
def test_two_level_sampling_of_a_large_vocabulary(sampler, correct):
    d = _block_structured()
    rng = np.random.default_rng(16)
    counts = Counter((sampler(d, rng),) for _ in range(N_SAMPLES))
    pvalue = stats.chi_square_gof(counts, {(i,): float(d[i]) for i in np.flatnonzero(d)})[2]
    assert (pvalue > stats.LEVEL) == correct, pvalue


@settings(max_examples=200, deadline=None)
@given(st.integers(1025, 5000), st.integers(0, 2**32 - 1), st.floats(0, 1, exclude_max=True))
def test_sample_never_returns_a_zero_weight_token(V, seed, u):
    rng = np.random.default_rng(seed)
    d = np.where(rng.random(V) < 0.01, rng.random(V), 0.0)
    d[rng.integers(V)] = 1e-300  # a tiny but positive weight
    assert d[mrs.sample(d, FixedUniforms(u))] > 0
