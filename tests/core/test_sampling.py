"""Chen's Algorithms 1 and 2: whole sequences from SpS have exactly the target's law.

The target is a Markov chain whose next token depends on the previous two, so every
sequence of N tokens can be enumerated and its exact probability computed; SpS samples
are compared with that law by chi-square at level specref.proof.stats.LEVEL (1e-3), fixed seeds.
Negative controls: the same test must reject SpS run with the broken verifiers.
"""

import numpy as np
import pytest

from specref.proof import broken, stats
from specref import drafts, mrs, sampling
from specref.warps import Warp, Warped

V, N = 3, 5
PROMPT = np.array([0, 1])
rng0 = np.random.default_rng(7)
TARGET = stats.MarkovChain.random(V, order=2, rng=rng0, concentration=0.7)
DRAFT = stats.MarkovChain.random(V, order=1, rng=rng0, concentration=0.7)
LAW = stats.sequence_law(TARGET, PROMPT, N)
RUNS = 6_000


def _sps(K, verify=mrs.verify, draft=DRAFT, target=TARGET):
    def sampler(rng):
        return sampling.run(sampling.speculative_steps(PROMPT, draft, target, N, K, rng, verify=verify))[0]
    return sampler


def test_exact_law_sums_to_one_and_ars_matches_it():
    assert sum(LAW.values()) == pytest.approx(1.0)
    counts = stats.sample_sequences(lambda r: sampling.autoregressive_sampling(PROMPT, TARGET, N, r),
                                    RUNS, len(PROMPT), np.random.default_rng(1))
    assert stats.chi_square_gof(counts, LAW)[2] > stats.LEVEL


@pytest.mark.parametrize("K", [1, 2, 3, 4, 7])  # N = 5: K + 1 = 2, 3, 4 do not divide it; 7 overshoots
def test_speculative_sequences_have_the_target_law(K):
    counts = stats.sample_sequences(_sps(K), RUNS, len(PROMPT), np.random.default_rng(100 + K))
    assert all(len(s) == N for s in counts)
    stat, dof, pvalue = stats.chi_square_gof(counts, LAW)
    print(f"K={K}: chi2={stat:.1f} dof={dof} p={pvalue:.3g}")
    assert pvalue > stats.LEVEL


@pytest.mark.parametrize("draft", [drafts.UniformDraft(V), drafts.PromptLookupDraft(V, n=2),
                                   drafts.NGramDraft.fit([[0, 1, 2, 2, 1, 0, 1, 1]], V, n=2)])
def test_speculative_sequences_have_the_target_law_for_every_draft(draft):
    counts = stats.sample_sequences(_sps(3, draft=draft), RUNS, len(PROMPT), np.random.default_rng(3))
    assert stats.chi_square_gof(counts, LAW)[2] > stats.LEVEL


@pytest.mark.parametrize("name", ["always_accept", "ratio_inverted", "resample_from_q", "bonus_wrong_row",
                                  "greedy_draft_softmax_ratio", "one_uniform_reused"])
def test_sequence_test_rejects_broken_verifiers(name):
    counts = stats.sample_sequences(_sps(2, verify=broken.BROKEN[name]), RUNS, len(PROMPT), np.random.default_rng(102))
    stat, dof, pvalue = stats.chi_square_gof(counts, LAW)
    print(f"{name}: chi2={stat:.1f} dof={dof} p={pvalue:.3g}")
    assert pvalue < stats.LEVEL


def test_dropping_the_bonus_token_is_lossless_but_shows_in_the_trace():
    # Dropping the bonus keeps the law (the next loop samples that position anyway); it
    # only wastes a target call.  The per-loop token counts expose it: never K + 1.
    _, trace = sampling.run(sampling.speculative_steps(PROMPT, TARGET, TARGET, 50, 3, np.random.default_rng(0),
                                                       verify=broken.no_bonus))
    assert max(len(s.tokens) for s in trace.steps) <= 3
    _, trace = sampling.run(sampling.speculative_steps(PROMPT, TARGET, TARGET, 50, 3, np.random.default_rng(0)))
    assert max(len(s.tokens) for s in trace.steps[:-1]) == 4  # draft == target: everything accepted


@pytest.mark.parametrize("warp", [Warp(0.5), Warp(1.3, top_k=2), Warp(1.0, top_p=0.6), Warp(0.8, top_k=2, top_p=0.9)])
def test_warps_applied_to_both_models_keep_the_warped_target_law(warp):
    target = Warped(TARGET, warp.temperature, warp.top_k, warp.top_p)
    draft = Warped(DRAFT, warp.temperature, warp.top_k, warp.top_p)
    law = stats.sequence_law(target, PROMPT, N)
    counts = stats.sample_sequences(_sps(2, draft=draft, target=target), RUNS, len(PROMPT), np.random.default_rng(4))
    assert stats.chi_square_gof(counts, law)[2] > stats.LEVEL
    # negative control: warping only the target is still exact (the draft is just worse),
    # but comparing against the UNWARPED target's law must fail
    assert stats.chi_square_gof(counts, LAW)[2] < stats.LEVEL


def test_greedy_sps_equals_greedy_ars():
    target, draft = Warped(TARGET, 0.0), Warped(DRAFT, 0.0)
    expected = sampling.autoregressive_sampling(PROMPT, target, 30, np.random.default_rng(0))
    for K in [1, 2, 5]:
        for d in [draft, Warped(drafts.UniformDraft(V), 0.0), drafts.PromptLookupDraft(V)]:
            got = sampling.speculative_sampling(PROMPT, d, target, 30, K, np.random.default_rng(K))
            np.testing.assert_array_equal(got, expected)


def test_trace_statistics():
    x, trace = sampling.run(sampling.speculative_steps(PROMPT, DRAFT, TARGET, 200, 4, np.random.default_rng(9)))
    assert len(x) == len(PROMPT) + 200 and trace.n_new == 200
    np.testing.assert_array_equal(np.concatenate([PROMPT] + [s.tokens for s in trace.steps]), x)
    assert trace.target_calls == len(trace.steps) and trace.draft_calls == 4 * len(trace.steps)
    assert trace.n_drafted == 4 * len(trace.steps)
    assert all(0 <= a <= 4 for a in trace.accepted_per_iteration)
    assert 0 < trace.alpha_hat < 1 and trace.tokens_per_target_call > 1
    x2, trace2 = sampling.run(sampling.autoregressive_steps(PROMPT, TARGET, 10, np.random.default_rng(0)))
    assert trace2.target_calls == 10 and trace2.draft_calls == 0 and len(x2) == 12


def test_alpha_hat_estimates_alpha_under_iid_rows():
    # A model whose rows ignore the context: every position has the same alpha.
    class Const:
        def __init__(self, row):
            self.row = row

        def next_probs(self, tokens, k):
            return np.tile(self.row, (k, 1))

    p, q = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.3, 0.5])
    _, trace = sampling.run(sampling.speculative_steps(PROMPT, Const(p), Const(q), 20_000, 3, np.random.default_rng(2)))
    assert trace.alpha_hat == pytest.approx(mrs.acceptance_rate(p, q), abs=0.01)


def test_seeded_runs_are_reproducible_and_do_not_touch_global_state():
    np.random.seed(123)
    before = np.random.get_state()[1].copy()
    a = sampling.speculative_sampling(PROMPT, DRAFT, TARGET, 40, 3, np.random.default_rng(5))
    b = sampling.speculative_sampling(PROMPT, DRAFT, TARGET, 40, 3, np.random.default_rng(5))
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(np.random.get_state()[1], before)


@pytest.mark.parametrize("kwargs, message", [
    (dict(K=0), "K"), (dict(N=-1), "N"), (dict(x=np.array([], dtype=int)), "prompt"),
    (dict(x=np.array([0.5, 1.0])), "prompt"),
])
def test_bad_loop_inputs(kwargs, message):
    args = dict(x=PROMPT, N=3, K=2) | kwargs
    with pytest.raises(ValueError, match=message):
        sampling.speculative_sampling(args["x"], DRAFT, TARGET, args["N"], args["K"], np.random.default_rng(0))


def test_a_model_returning_the_wrong_shape_is_named():
    with pytest.raises(ValueError, match="expected \\[1, V\\]"):
        sampling.autoregressive_sampling(PROMPT, lambda t: np.ones((1, 3)) / 3 if len(t) < 0 else np.ones(3) / 3, 1,
                                         np.random.default_rng(0))


def test_timed_generation_counts_and_stops():
    greedy = Warp(0.0)
    ars = sampling.timed_generation(PROMPT, TARGET, None, 0, greedy, 30, np.random.default_rng(0))
    sps = sampling.timed_generation(PROMPT, TARGET, TARGET, 3, greedy, 30, np.random.default_rng(1))
    assert ars.tokens == sps.tokens and len(ars.tokens) == 30  # greedy: identical, exactly N
    assert ars.loops == 30 and ars.draft_calls == 0 and np.isnan(ars.alpha_hat)
    assert sps.draft_calls == 3 * sps.loops and sps.loops == 8 and sps.n_accepted == sps.n_examined == 24  # all accepted
    assert sps.seconds >= sps.target_seconds >= 0
    seen = []
    stopped = sampling.timed_generation(PROMPT, TARGET, DRAFT, 3, Warp(1.0), 30, np.random.default_rng(2),
                                        stop=lambda new: len(new) >= 5, on_step=seen.append)
    assert 5 <= len(stopped.tokens) <= 5 + 3 and len(seen) == stopped.loops
