"""Leviathan's analytic model: internal consistency, simulation, and his Table 1."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specref import mrs, speedup

# Leviathan et al. 2023, Table 1 (c = c_hat = 0): alpha, gamma, operations factor, speed.
# Values as printed in the paper, two decimals.
TABLE1 = [
    (0.6, 2, 1.53, 1.96),
    (0.7, 3, 1.58, 2.53),
    (0.8, 2, 1.23, 2.44),
    (0.8, 5, 1.63, 3.69),
    (0.9, 2, 1.11, 2.71),
    (0.9, 10, 1.60, 6.86),
]


@pytest.mark.parametrize("alpha, gamma, ops, speed", TABLE1)
def test_reproduces_leviathan_table1(alpha, gamma, ops, speed):
    assert round(float(speedup.walltime_improvement(alpha, gamma, 0.0)), 2) == speed
    assert round(float(speedup.operations_factor(alpha, gamma, 0.0)), 2) == ops


@settings(max_examples=200, deadline=None)
@given(st.floats(0, 0.999), st.integers(0, 30), st.floats(0, 2))
def test_formulas_agree_with_each_other(alpha, gamma, c):
    n = speedup.expected_tokens(alpha, gamma)
    assert n == pytest.approx(sum(alpha**i for i in range(gamma + 1)))  # geometric series form
    assert 1.0 <= n <= gamma + 1 + 1e-9
    assert speedup.walltime_improvement(alpha, gamma, c) == pytest.approx(n / (gamma * c + 1))
    assert speedup.walltime_improvement_measured(alpha, gamma, c, 1.0) == pytest.approx(
        speedup.walltime_improvement(alpha, gamma, c))
    assert speedup.operations_factor(alpha, gamma, c) == pytest.approx((gamma * c + gamma + 1) / n)


def test_alpha_one_limit():
    assert speedup.expected_tokens(1.0, 4) == 5.0
    assert speedup.walltime_improvement(1.0, 4, 0.25) == pytest.approx(2.5)


@pytest.mark.parametrize("alpha, gamma", [(0.3, 2), (0.6, 4), (0.85, 7)])
def test_eq1_matches_simulated_iid_acceptances(alpha, gamma):
    # each run: accept while Bernoulli(alpha) succeeds, at most gamma, plus one target token
    rng = np.random.default_rng(0)
    u = rng.random((200_000, gamma))
    accepted = np.where((u >= alpha).any(axis=1), np.argmax(u >= alpha, axis=1), gamma)
    tokens = accepted + 1
    se = tokens.std() / np.sqrt(len(tokens))
    assert tokens.mean() == pytest.approx(speedup.expected_tokens(alpha, gamma), abs=5 * se)


@settings(max_examples=100, deadline=None)
@given(st.floats(0.01, 0.99), st.floats(0, 1))
def test_optimal_gamma_is_the_brute_force_argmax(alpha, c):
    g = speedup.optimal_gamma(alpha, c)
    values = [speedup.walltime_improvement(alpha, k, c) for k in range(1, 65)]
    assert values[g - 1] == max(values)


def test_optimal_gamma_with_free_drafts_is_as_documented():
    # alpha = 0: nothing is ever accepted, every gamma gives 1, the smallest wins
    assert speedup.optimal_gamma(0.0, 0.0) == 1
    # alpha = 1, or large: the improvement still grows at gamma_max
    assert speedup.optimal_gamma(1.0, 0.0) == 64 and speedup.optimal_gamma(1.0, 0.0, gamma_max=10) == 10
    assert speedup.optimal_gamma(0.8, 0.0) == 64
    # small alpha: float64 stops growing once alpha^gamma is below about 1e-16, and the first such gamma wins
    for alpha, expected in ((0.1, 16), (0.3, 30), (0.5, 53)):
        g = speedup.optimal_gamma(alpha, 0.0)
        values = [float(speedup.walltime_improvement(alpha, k, 0.0)) for k in range(1, 65)]
        assert g == expected
        assert values[g - 2] < values[g - 1] == max(values) == values[-1]
        assert 1e-17 < alpha ** g < 1e-15


@settings(max_examples=100, deadline=None)
@given(st.floats(0.01, 0.99), st.floats(0, 0.99))
def test_corollary_3_9(alpha, c):
    if alpha > c:
        best = max(speedup.walltime_improvement(alpha, k, c) for k in range(1, 65))
        assert best >= speedup.improvement_lower_bound(alpha, c) - 1e-12 > 1.0 - 1e-12


def test_measured_scoring_cost_lowers_the_prediction():
    # scoring 5 tokens at 2.2x a decode step (a CPU) vs Leviathan's 1x assumption
    ideal = speedup.walltime_improvement(0.6, 4, 0.0)
    cpu = speedup.walltime_improvement_measured(0.6, 4, 0.0, 2.2)
    assert cpu == pytest.approx(ideal / 2.2)


def test_prediction_from_timings_is_thm_3_8_with_measured_costs():
    # draft step 0.5 ms, SpS call 12 ms, decode step 10 ms: c = 0.05, score_cost = 1.2
    assert speedup.predicted_from_timings(0.6, 4, 0.5, 12.0, 10.0) == pytest.approx(
        speedup.expected_tokens(0.6, 4) / (4 * 0.05 + 1.2))
    assert speedup.predicted_from_timings(1.0000001, 2, 0.0, 10.0, 10.0) == pytest.approx(3.0)  # alpha capped at 1


def test_lenient_acceptance_rate():
    # Leviathan A.5 (alpha with lenience, which feeds Theorem 3.8) lives in mrs; speedup no longer aliases it
    p, q = np.array([0.4, 0.3, 0.2, 0.1]), np.array([0.30, 0.45, 0.10, 0.15])
    assert mrs.lenient_acceptance_rate(p, q, 1.0) == pytest.approx(mrs.acceptance_rate(p, q))
    alphas = [mrs.lenient_acceptance_rate(p, q, lam) for lam in [1.0, 0.5, 0.3, 0.1]]
    assert alphas == sorted(alphas) and alphas[-1] == pytest.approx(1.0)
    assert not hasattr(speedup, "lenient_alpha")


@pytest.mark.parametrize("call, message", [
    (lambda: speedup.expected_tokens(1.5, 2), "alpha"),
    (lambda: speedup.expected_tokens(0.5, -1), "gamma"),
    (lambda: speedup.walltime_improvement(0.5, 2.5, 0), "gamma"),
    (lambda: speedup.walltime_improvement(0.5, 2, -0.1), "c must"),
    (lambda: speedup.walltime_improvement_measured(0.5, 2, 0, 0), "score_cost"),
    (lambda: mrs.lenient_acceptance_rate(np.array([1.0]), np.array([1.0]), 2.0), "lenience"),
])
def test_bad_inputs(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_a_scoring_cost_measured_below_one_decode_step_is_noise_and_predicts_with_one():
    assert speedup.plausible_score_cost(1.3) == (1.3, False)
    assert speedup.plausible_score_cost(1.0) == (1.0, False)
    assert speedup.plausible_score_cost(0.9) == (1.0, True)
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="positive finite"):
            speedup.plausible_score_cost(bad)
    # an SpS call timed at 9 ms against a 10 ms decode step predicts as if it took 10 ms, not more
    assert speedup.predicted_from_timings(0.6, 4, 0.5, 9.0, 10.0) == pytest.approx(
        speedup.predicted_from_timings(0.6, 4, 0.5, 10.0, 10.0))
    # negative control: the unclamped formula would have predicted more
    assert speedup.walltime_improvement_measured(0.6, 4, 0.05, 0.9) > speedup.predicted_from_timings(0.6, 4, 0.5, 9.0, 10.0)


def test_improvement_with_lengths_is_theorem_3_8_call_by_call():
    # every call at one gamma: exactly walltime_improvement_measured
    assert speedup.improvement_with_lengths(0.6, [0, 0, 0, 0, 7], 0.05, 1.3) == pytest.approx(
        speedup.walltime_improvement_measured(0.6, 4, 0.05, 1.3))
    # half the calls draft nothing (1 token, cost 1), half draft 2 (1 + 0.5 + 0.25 tokens, cost 2 c + 1.2)
    assert speedup.improvement_with_lengths(0.5, [3, 0, 3], 0.1, [1.0, 1.1, 1.2]) == pytest.approx(
        (0.5 * 1 + 0.5 * 1.75) / (0.5 * 1.0 + 0.5 * (0.2 + 1.2)))
    # one mean score cost for all calls: the mean gamma pays c
    assert speedup.improvement_with_lengths(0.5, [1, 1], 0.1, 1.1) == pytest.approx((1 + 1.5) / 2 / (0.05 + 1.1))
    # alpha plays no part when no call drafted
    assert speedup.improvement_with_lengths(0.0, [5], 0.3, 1.0) == speedup.improvement_with_lengths(0.9, [5], 0.3, 1.0) == 1.0


@pytest.mark.parametrize("args, message", [
    ((0.5, [], 0.1, 1.0), "histogram of calls"), ((0.5, [0, 0], 0.1, 1.0), "histogram of calls"),
    ((0.5, [1, -1], 0.1, 1.0), "histogram of calls"), ((0.5, [[1, 2]], 0.1, 1.0), "histogram of calls"),
    ((1.5, [1, 2], 0.1, 1.0), "alpha"), ((0.5, [1, 2], -0.1, 1.0), "c must be"),
    ((0.5, [1, 2], 0.1, 0.0), "score_cost"), ((0.5, [1, 2], 0.1, [1.0, 1.1, 1.2]), "one per gamma"),
    ((0.5, [1, 2], 0.1, float("nan")), "score_cost"),
])
def test_improvement_with_lengths_rejects_bad_input(args, message):
    with pytest.raises(ValueError, match=message):
        speedup.improvement_with_lengths(*args)


# ---------------------------------------------------------------- choosing K from measured costs

def test_best_gamma_measured_is_the_argmax_of_theorem_3_8_with_measured_costs():
    costs = [1.02, 1.10, 1.16, 1.20, 1.40, 1.45, 1.50, 1.55]     # scoring g + 1 tokens, in decode steps
    for alpha, c in [(0.8, 0.0), (0.4, 0.1), (0.95, 0.02), (0.2, 0.3)]:
        gamma, value = speedup.best_gamma_measured(alpha, c, costs)
        brute = [speedup.walltime_improvement_measured(alpha, g, c, costs[g - 1]) for g in range(1, 9)]
        assert gamma == 1 + int(np.argmax(brute)) and value == pytest.approx(max(brute))
    # with free scoring (Leviathan's assumption) it is optimal_gamma over the same range
    assert speedup.best_gamma_measured(0.8, 0.05, [1.0] * 8)[0] == speedup.optimal_gamma(0.8, 0.05, 8)
    with pytest.raises(ValueError, match="one positive cost per gamma"):
        speedup.best_gamma_measured(0.5, 0.1, [1.0, 0.0])


def test_alpha_needed_is_the_break_even_of_the_best_gamma():
    costs = [1.59, 1.9, 2.2, 2.5]                                 # an AVX2-only CPU: 2 tokens cost 1.59 steps
    need = speedup.alpha_needed(0.1, costs)
    assert 0 < need < 1
    assert speedup.best_gamma_measured(need + 1e-6, 0.1, costs)[1] > 1 > speedup.best_gamma_measured(need - 1e-6, 0.1, costs)[1]
    # K = 1 alone: 1 + alpha = c + s  ->  alpha = c + s - 1
    assert speedup.alpha_needed(0.1, [1.59]) == pytest.approx(0.69, abs=1e-8)
    assert speedup.alpha_needed(0.0, [0.9]) == 0.0                # cheaper than a decode step: any alpha
    assert speedup.alpha_needed(1.0, [3.0, 4.0]) == float("inf")  # every call costs more than it can yield


def test_a_measured_dip_in_scoring_costs_is_priced_as_noise():
    # 6 tokens timed cheaper than 5 (as on the Xeon 6/167: 1.24 against 1.30) and a ratio below 1 are noise:
    # the dip and the reading before it are priced at their mean, the ratio below 1 at 1
    assert speedup.scoring_cost_curve([0.95, 1.20, 1.30, 1.24, 1.40]) == pytest.approx([1.0, 1.20, 1.27, 1.27, 1.40])
    # a high reading in the middle (5 tokens at 1.11, 6 at 1.08, 7 at 1.09: the Zen 4's kind) is averaged with
    # the readings after it that fall below it, not carried over them as a running maximum would
    assert speedup.scoring_cost_curve([1.02, 1.11, 1.08, 1.09, 1.30]) == pytest.approx([1.02, 1.0933333, 1.0933333,
                                                                                       1.0933333, 1.30])
    assert speedup.scoring_cost_curve([]) == []
    with pytest.raises(ValueError, match="positive finite ratio"):
        speedup.scoring_cost_curve([1.1, 0.0])


_ratios = st.lists(st.floats(0.5, 3.0, allow_nan=False), min_size=1, max_size=12)


def _running_max(values):  # the control: monotone, but not the nearest monotone curve
    return list(np.maximum.accumulate(values))


@pytest.mark.parametrize("fit, must_match", [(speedup.monotone_fit, True), (_running_max, False)])
@settings(max_examples=200, deadline=None, derandomize=True)
@given(values=_ratios)
def test_monotone_fit_is_scipys_isotonic_regression(fit, must_match, values):
    """Against an independent implementation (scipy.optimize.isotonic_regression, equal weights).  The control, a
    running maximum, is also non-decreasing and passes through every reading of a rising curve; this comparison must
    tell it apart on any input with a dip, and the first dip hypothesis tries is one."""
    from scipy.optimize import isotonic_regression
    expected = isotonic_regression(np.asarray(values)).x
    got = np.asarray(fit(values))
    assert np.all(np.diff(got) >= -1e-12)
    same = np.allclose(got, expected, rtol=0, atol=1e-9)
    if must_match:
        assert same
    elif np.any(np.diff(values) < -1e-6):
        assert not same


def test_a_tree_is_priced_at_its_own_measured_cost_where_that_is_higher():
    chain = speedup.scoring_cost_curve([1.0, 1.2, 1.22, 1.30, 1.30, 1.40, 1.44, 1.51])
    tree = speedup.tree_cost_curve(chain, {"4": 1.26, "8": 1.50, "16": 1.87})  # as stored in JSON
    assert tree[:4] == chain[:4]                        # below the smallest tree measured, and where the chain costs more
    assert tree[4] == pytest.approx(1.32)               # 5 nodes: between the trees of 4 and 8, above the chain's 1.30
    assert tree[5] == pytest.approx(1.40)               # 6 nodes: the chain's 1.40 is higher than the trees' 1.38
    assert all(b >= a for a, b in zip(tree, tree[1:]))
    assert speedup.tree_cost_curve(chain, {}) == chain  # no tree measured: the chain of N + 1 tokens
    # as the commands price a run's measured costs: by K and N, keys as JSON stores them
    by_k, by_n = speedup.priced_costs({str(k): c for k, c in enumerate([1.0, 1.2, 1.22, 1.30, 1.24], 1)},
                                      {"4": 1.26, "8": 1.50})
    assert by_k == pytest.approx({1: 1.0, 2: 1.2, 3: 1.22, 4: 1.27, 5: 1.27})  # the dip at K = 5 averaged with K = 4
    assert by_n[4] == pytest.approx(1.27) and by_n[5] == pytest.approx(1.32)
    # a tree measured cheaper at 5 nodes than at 4 (the Zen 4's 1.11 and 1.08) is priced at their mean at both
    assert speedup.tree_cost_curve([1.0] * 5, {"4": 1.11, "5": 1.08})[3:] == pytest.approx([1.095, 1.095])
    assert speedup.priced_costs({4: 2.0}) == ({4: 2.0}, {4: 2.0})  # a K measured alone is priced at its own N


def test_warped_costs_add_the_warp_of_every_row_scored_in_decode_steps_that_warp_one():
    """A call scoring K + 1 rows pays K + 1 warps; the decode step it is counted in pays one.  With a warp of 0.05 a
    call of 2 rows that cost 1.0 bare costs (1.0 + 0.1) / 1.05, and one of 9 rows at 1.5, (1.5 + 0.45) / 1.05."""
    out = speedup.warped_costs([1.0] + [1.2] * 6 + [1.5], 0.05)
    assert out[0] == pytest.approx(1.1 / 1.05) and out[-1] == pytest.approx(1.95 / 1.05)
    assert speedup.warped_costs([1.0, 1.3], 0.0) == [1.0, 1.3]     # control: no warp, no change
    assert all(w > c for w, c in zip(speedup.warped_costs([1.0, 1.3], 0.05), [1.0, 1.3]))
    assert all(w < c for w, c in zip(speedup.warped_costs([1.2, 1.3], -0.01), [1.2, 1.3]))  # a warp cheaper than softmax
    for bad in (-1.0, -1.5, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="warp must be a finite cost > -1"):
            speedup.warped_costs([1.0], bad)
