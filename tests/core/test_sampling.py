"""Chen's Algorithms 1 and 2: whole sequences from SpS have exactly the target's law.

The target is a Markov chain whose next token depends on the previous two, so every
sequence of N tokens can be enumerated and its exact probability computed; SpS samples
are compared with that law by chi-square at level specref.proof.stats.LEVEL (1e-3), fixed seeds.
Negative controls: the same test must reject SpS run with the broken verifiers.
"""

import numpy as np
import pytest

from specref.proof import laws, stats
from specref.proof.bugs import broken
from specref import drafts, mrs, sampling
from specref.runstats import RunStats
from specref.warps import Warp, Warped

V, N, PROMPT = laws.SEQ_V, laws.SEQ_N, laws.SEQ_PROMPT
TARGET, DRAFT = laws.markov_pair()
LAW = laws.sequence_law(TARGET, PROMPT, N)
RUNS = 6_000
WARP_RUNS = 2_000


def _sps(K, verify=mrs.verify, draft=DRAFT, target=TARGET):
    def sampler(rng):
        return sampling.speculative_sampling(PROMPT, draft, target, N, K, rng, verify=verify)
    return sampler


def test_exact_law_sums_to_one_and_ars_matches_it():
    assert sum(LAW.values()) == pytest.approx(1.0)
    counts = stats.sample_sequences(lambda r: sampling.autoregressive_sampling(PROMPT, TARGET, N, r),
                                    RUNS, len(PROMPT), np.random.default_rng(1))
    assert stats.chi_square_gof(counts, LAW)[2] > stats.LEVEL


@pytest.mark.default_cases("2")
@pytest.mark.parametrize("K", [1, 2, 3, 4, 7])  # N = 5: K + 1 = 2, 3, 4 do not divide it; 7 overshoots
def test_speculative_sequences_have_the_target_law(K):
    counts = stats.sample_sequences(_sps(K), RUNS, len(PROMPT), np.random.default_rng(100 + K))
    assert all(len(s) == N for s in counts)
    stat, dof, pvalue = stats.chi_square_gof(counts, LAW)
    print(f"K={K}: chi2={stat:.1f} dof={dof} p={pvalue:.3g}")
    assert pvalue > stats.LEVEL


class VariableLength:
    """DRAFT, drafting a context-dependent number of tokens in 0..K per call (every length occurs)."""

    def __init__(self, draft=DRAFT):
        self.draft, self.lengths = draft, []

    def next_probs(self, tokens, k):
        return self.draft.next_probs(tokens, k)

    def draft_length(self, tokens, K):
        k = int(3 * tokens[-1] + len(tokens)) % (K + 1)
        self.lengths.append(k)
        return k


@pytest.mark.default_cases("1")
@pytest.mark.parametrize("K", [1, 3])
def test_speculative_sequences_have_the_target_law_when_the_draft_length_varies(K):
    draft = VariableLength()
    counts = stats.sample_sequences(_sps(K, draft=draft), RUNS, len(PROMPT), np.random.default_rng(200 + K))
    assert set(draft.lengths) == set(range(K + 1))  # every length, 0 (a plain decode step) included
    stat, dof, pvalue = stats.chi_square_gof(counts, LAW)
    print(f"K={K}: chi2={stat:.1f} dof={dof} p={pvalue:.3g}")
    assert pvalue > stats.LEVEL


@pytest.mark.default_cases("resample_from_q")
@pytest.mark.parametrize("name", ["always_accept", "resample_from_q", "bonus_wrong_row"])
def test_sequence_test_rejects_broken_verifiers_when_the_draft_length_varies(name):
    counts = stats.sample_sequences(_sps(3, verify=broken.BROKEN[name], draft=VariableLength()), RUNS, len(PROMPT),
                                    np.random.default_rng(202))
    stat, dof, pvalue = stats.chi_square_gof(counts, LAW)
    print(f"{name}: chi2={stat:.1f} dof={dof} p={pvalue:.3g}")
    assert pvalue < stats.LEVEL


def test_draft_lengths_are_counted_and_a_bad_one_is_named():
    trace = RunStats()
    sampling.speculative_sampling(PROMPT, VariableLength(), TARGET, 40, 3, np.random.default_rng(4), on_step=trace.add)
    assert sum(trace.calls_by_drafted) == trace.loops and len(trace.calls_by_drafted) == 4
    assert trace.n_drafted == sum(k * n for k, n in enumerate(trace.calls_by_drafted)) == trace.draft_calls
    assert all(s.n_drafted == 0 and s.n_accepted == 0 and len(s.tokens) == 1 for s in trace.steps if not s.draft_calls)
    total = RunStats.total([trace.counts(), RunStats(calls_by_drafted=[1]).counts()])
    assert total.calls_by_drafted == [trace.calls_by_drafted[0] + 1] + trace.calls_by_drafted[1:]

    class TooLong(VariableLength):
        def draft_length(self, tokens, K):
            return K + 1

    with pytest.raises(ValueError, match=r"draft_length returned 4 for K = 3; expected an integer in \[0, 3\]"):
        sampling.speculative_sampling(PROMPT, TooLong(), TARGET, 10, 3, np.random.default_rng(0))


@pytest.mark.default_cases("draft0")
@pytest.mark.parametrize("draft", [drafts.UniformDraft(V), drafts.PromptLookupDraft(V, n=2),
                                   drafts.PromptLookupDraft(V, n=2, adaptive=True),
                                   drafts.NGramDraft.fit([[0, 1, 2, 2, 1, 0, 1, 1]], V, n=2)])
def test_speculative_sequences_have_the_target_law_for_every_draft(draft):
    counts = stats.sample_sequences(_sps(3, draft=draft), RUNS, len(PROMPT), np.random.default_rng(3))
    assert stats.chi_square_gof(counts, LAW)[2] > stats.LEVEL


@pytest.mark.default_cases("resample_from_q")
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
    trace = RunStats()
    sampling.speculative_sampling(PROMPT, TARGET, TARGET, 50, 3, np.random.default_rng(0), verify=broken.no_bonus,
                                  on_step=trace.add)
    assert max(len(s.tokens) for s in trace.steps) <= 3
    trace = RunStats()
    sampling.speculative_sampling(PROMPT, TARGET, TARGET, 50, 3, np.random.default_rng(0), on_step=trace.add)
    assert max(len(s.tokens) for s in trace.steps[:-1]) == 4  # draft == target: everything accepted


@pytest.mark.default_cases("warp0")
@pytest.mark.parametrize("warp", [Warp(0.5), Warp(1.3, top_k=2), Warp(1.0, top_p=0.6), Warp(0.8, top_k=2, top_p=0.9)])
def test_warps_applied_to_both_models_keep_the_warped_target_law(warp):
    # WARP_RUNS, a third of RUNS: every warp moves the law far (total variation 0.36 to 0.76 from the unwarped
    # one), so the control below fails by far; the tests above, at RUNS, are the ones that look for small errors
    target = Warped(TARGET, warp.temperature, warp.top_k, warp.top_p)
    draft = Warped(DRAFT, warp.temperature, warp.top_k, warp.top_p)
    law = laws.sequence_law(target, PROMPT, N)
    counts = stats.sample_sequences(_sps(2, draft=draft, target=target), WARP_RUNS, len(PROMPT), np.random.default_rng(4))
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
    trace = RunStats()
    x = sampling.speculative_sampling(PROMPT, DRAFT, TARGET, 200, 4, np.random.default_rng(9), on_step=trace.add)
    assert len(x) == len(PROMPT) + 200 and trace.tokens == 200
    np.testing.assert_array_equal(np.concatenate([PROMPT] + [s.tokens for s in trace.steps]), x)
    np.testing.assert_array_equal(trace.new_tokens, x[len(PROMPT):])
    assert trace.loops == len(trace.steps) and trace.draft_calls == 4 * len(trace.steps)
    assert trace.n_drafted == 4 * len(trace.steps)
    assert all(0 <= a <= 4 for a in trace.accepted_per_iteration)
    assert 0 < trace.alpha_hat < 1 and trace.tokens_per_target_call > 1
    # the same statistics survive a round trip through JSON rows (how a resumed benchmark adds them up)
    assert RunStats.total([trace.counts(), RunStats().counts()]) == trace
    trace2 = RunStats()
    x2 = sampling.autoregressive_sampling(PROMPT, TARGET, 10, np.random.default_rng(0), on_step=trace2.add)
    assert trace2.loops == 10 and trace2.draft_calls == 0 and len(x2) == 12


def test_alpha_hat_estimates_alpha_under_iid_rows():
    # A model whose rows ignore the context: every position has the same alpha.
    class Const:
        def __init__(self, row):
            self.row = row

        def next_probs(self, tokens, k):
            return np.tile(self.row, (k, 1))

    p, q = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.3, 0.5])
    trace = RunStats()
    sampling.speculative_sampling(PROMPT, Const(p), Const(q), 20_000, 3, np.random.default_rng(2), on_step=trace.add)
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


def test_on_step_returning_true_ends_the_run():
    seen = []
    x = sampling.speculative_sampling(PROMPT, DRAFT, TARGET, 30, 3, np.random.default_rng(2),
                                      on_step=lambda step: seen.append(step) or len(seen) == 2)
    assert len(seen) == 2 and len(x) == len(PROMPT) + sum(len(s.tokens) for s in seen)
    x = sampling.autoregressive_sampling(PROMPT, TARGET, 30, np.random.default_rng(2), on_step=lambda step: True)
    assert len(x) == len(PROMPT) + 1
