"""The commands' timed loop (specref.apps.timing): counts, early stop, and times that add up."""

import numpy as np

from specref.apps.timing import timed_generation
from specref.proof import laws
from specref.warps import Warp

PROMPT = laws.SEQ_PROMPT
TARGET, DRAFT = laws.markov_pair()


def test_timed_generation_counts_and_stops():
    greedy = Warp(0.0)
    ars = timed_generation(PROMPT, TARGET, None, 0, greedy, 30, np.random.default_rng(0))
    sps = timed_generation(PROMPT, TARGET, TARGET, 3, greedy, 30, np.random.default_rng(1))
    assert ars.new_tokens == sps.new_tokens and len(ars.new_tokens) == 30  # greedy: identical, exactly N
    assert ars.loops == 30 and ars.draft_calls == 0 and np.isnan(ars.alpha_hat)
    assert sps.draft_calls == 3 * sps.loops and sps.loops == 8 and sps.n_accepted == sps.n_examined == 24  # all accepted
    assert sps.seconds >= sps.target_seconds >= 0 and sps.draft_seconds >= 0
    seen = []
    stopped = timed_generation(PROMPT, TARGET, DRAFT, 3, Warp(1.0), 30, np.random.default_rng(2),
                               stop=lambda new: len(new) >= 5, on_step=seen.append)
    assert 5 <= len(stopped.new_tokens) <= 5 + 3 and len(seen) == stopped.loops
