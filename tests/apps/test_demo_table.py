"""The demo's table flags a model check made from a scoring cost measured below one decode step; K is chosen from
the measured scoring costs, each priced at the call that scores K + 1 tokens."""

import types

import numpy as np
import pytest

from specref import speedup
from specref.apps import costs, demo, pilot as pilots


def run(method, target_ms, draft="-", K=0):
    stats = types.SimpleNamespace(ms_per_token=10.0, alpha_hat=0.5, tokens_per_target_call=2.0,
                                  target_ms_per_call=target_ms, draft_ms_per_call=0.1, n_examined=10,
                                  calls_by_drafted=[0] * K + [5])
    return demo.Run(method, draft, K, 0.0, None, [1, 2, 3], stats, verify="token" if K else "-")


@pytest.mark.parametrize("sps_call_ms, flagged", [(9.0, True), (12.0, False)])
def test_model_check_and_table_flag_an_sps_call_cheaper_than_a_decode_step(sps_call_ms, flagged):
    ars, sps = run("ArS", 10.0), run("SpS", sps_call_ms, "ngram", 4)
    demo.fill_model_check(sps, ars)
    assert sps.score_noise is flagged and sps.speedup == 1.0
    expected = speedup.walltime_improvement_measured(0.5, 4, 0.01, max(1.0, sps_call_ms / 10.0))
    assert sps.model_check == pytest.approx(float(expected))
    text = demo.table([ars, sps])
    assert ("timing noise" in text) is flagged
    assert text.splitlines()[3].endswith("x*") is flagged


# ---------------------------------------------------------------- K chosen per draft from measured costs

def pilot(alpha, draft_ms, examined=20, sps_call_ms=10.0):
    stats = types.SimpleNamespace(alpha_hat=alpha, n_examined=examined, draft_ms_per_call=draft_ms,
                                  target_ms_per_call=sps_call_ms)
    return demo.Run("SpS", "neural+lookup", demo.PILOT_K, 0.8, 0.95, [1], stats)


ZEN4_LIKE = [1.0, 1.05, 1.1, 1.15, 1.2, 1.3, 1.4, 1.5]      # scoring K + 1 tokens, in decode steps
AVX2_LIKE = [1.59, 1.75, 1.8, 1.9, 2.2, 2.3, 2.4, 2.5]


def test_choose_K_takes_theorem_3_8_s_best_K_with_the_pilots_alpha_and_c():
    base = run("ArS", 10.0)
    choice = demo.choose_K(pilot(0.8, 0.2), base, ZEN4_LIKE)       # c = 0.2 ms / 10 ms
    assert choice.c == pytest.approx(0.02) and choice.alpha == 0.8
    assert (choice.K, choice.predicted) == speedup.best_gamma_measured(0.8, 0.02, ZEN4_LIKE)
    assert choice.pays and f"K = {choice.K} predicts" in choice.why()
    # the same draft on a CPU where scoring costs much more: a smaller K
    assert demo.choose_K(pilot(0.8, 0.2), base, AVX2_LIKE).K < choice.K


def test_c_is_the_draft_step_over_the_decode_step_not_over_the_pilots_own_call():
    """The pilot's SpS call scores K + 1 tokens and costs more than a decode step (17 ms against 10 ms here, as on a
    CPU where scoring several tokens is dear): c is priced against the decode step of the ArS run.  Dividing by the
    pilot's call instead would give c = 1/17, K = 4 and 1.30x where Theorem 3.8 with c = 0.1 gives K = 3 and 1.21x."""
    choice = demo.choose_K(pilot(0.7, 1.0, sps_call_ms=17.0), run("ArS", 10.0), AVX2_LIKE)
    assert choice.c == pytest.approx(0.1)
    assert (choice.K, choice.predicted) == speedup.best_gamma_measured(0.7, 0.1, AVX2_LIKE)
    assert choice.why() == "alpha 0.70, c 0.100: K = 3 predicts 1.21x"


def test_where_no_K_pays_the_choice_says_so_and_gives_the_alpha_needed():
    choice = demo.choose_K(pilot(0.4, 1.0), run("ArS", 10.0), AVX2_LIKE)
    assert not choice.pays and choice.predicted < 1
    assert 0.4 < choice.needed < 1 and choice.needed == pytest.approx(speedup.alpha_needed(0.1, AVX2_LIKE))
    assert "no K pays" in choice.why() and f"alpha >= {choice.needed:.2f}" in choice.why()
    r = run("SpS", 12.0, "neural+lookup", choice.K)
    r.why_K = choice.why()
    assert "no K pays" in demo.verdicts([r])[0] and "K per draft" in demo.table([run("ArS", 10.0), r])


def test_a_pilot_that_examined_no_draft_counts_as_alpha_0():
    choice = demo.choose_K(pilot(float("nan"), 0.0, examined=0), run("ArS", 10.0), ZEN4_LIKE)
    assert choice.alpha == 0.0 and not choice.pays


# ---------------------------------------------------------------- the scoring costs K is chosen with

# Scoring n new tokens after a cached prefix takes SCORE_MS[n] on a fake clock: known timings in, the costs out.
# Scoring 3 tokens is timed cheaper than one decode step (noise): a cost below 1 is taken as 1.
SCORE_MS = {1: 10.0, 2: 11.0, 3: 9.5, 4: 13.0, 5: 15.0, 6: 16.0, 7: 18.0, 8: 21.0, 9: 25.0}


class TimedModel:
    """Just what `costs.timed_rounds` calls; each next_probs advances the fake clock by its known time."""

    def __init__(self, clock):
        self.clock, self.config = clock, types.SimpleNamespace(vocab_size=16)

    def reset(self):
        pass

    def next_probs(self, tokens, k=1):
        self.clock.t += SCORE_MS[k] / 1e3
        return np.full((k, 16), 1 / 16)


class Clock:
    """A fake time.perf_counter that moves only when the model says a call took time."""

    def __init__(self):
        self.t = 0.0

    def perf_counter(self):
        return self.t


def test_scoring_costs_price_K_drafts_at_the_call_that_scores_K_plus_1_tokens(monkeypatch):
    # K drafts are verified by one target call on K + 1 new tokens (the drafts and the bonus position), so K's cost
    # is ms[K + 1] / ms[1] in decode steps.  ms[K] / ms[1] (one token short) would make K = 1 free and lean K large.
    clock = Clock()
    monkeypatch.setattr(costs, "time", clock)
    got = demo.scoring_costs(TimedModel(clock), repeats=3)
    raw = [SCORE_MS[K + 1] / SCORE_MS[1] for K in range(1, pilots.K_CHOICES + 1)]
    assert raw[1] < 1.0 < raw[0]  # K = 2 timed cheaper than a decode step and than K = 1: noise
    assert len(got) == pilots.K_CHOICES == 8
    # K = 2 priced at 1 (never below a decode step), then the dip averaged with K = 1's 1.1: both at 1.05
    assert got == pytest.approx([1.05, 1.05, 1.3, 1.5, 1.6, 1.8, 2.1, 2.5])


class TreeTimedModel(TimedModel):
    """TimedModel with a tree call: scoring N nodes (N + 1 rows) takes TREE_EXTRA_MS more than a chain of N + 1
    tokens, keeping a path TREE_KEEP_MS."""

    def score_tree(self, tokens, tree_tokens, parents):
        self.clock.t += (SCORE_MS[len(tree_tokens) + 1] + TREE_EXTRA_MS) / 1e3
        return np.full((len(tree_tokens) + 1, 16), 1 / 16)

    def keep_path(self, nodes):
        self.clock.t += TREE_KEEP_MS / 1e3


TREE_EXTRA_MS, TREE_KEEP_MS = 0.5, 0.5


def test_call_costs_price_a_tree_call_with_its_mask_and_kept_path_and_never_below_its_chain(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(costs, "time", clock)
    chain, trees = demo.call_costs(TreeTimedModel(clock), repeats=3)
    assert chain == pytest.approx(demo.scoring_costs(TimedModel(clock), repeats=3))
    assert trees[0] == chain[0]                               # a tree of 1 node is the chain of 2 tokens
    for N in range(2, pilots.K_CHOICES + 1):                  # the tree call: a tenth of a decode step dearer
        assert trees[N - 1] == pytest.approx(max(chain[N - 1], (SCORE_MS[N + 1] + 1.0) / SCORE_MS[1], trees[N - 2]))
    assert all(t >= c for t, c in zip(trees, chain))          # never below the chain of N + 1 tokens
    assert all(t > c for t, c in zip(trees[2:], chain[2:]))  # and dearer where the chain's own cost is not higher
