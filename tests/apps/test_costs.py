"""The bench's timings: the decode step, the scoring calls and the floor passes are timed in the same rounds."""

import types

import numpy as np

from specref.apps import costs
from tests.smollm2.test_plan import tiny_weights


class CountingModel:
    """Just what the timing needs: reset, next_probs (records each call's new-token count), config."""

    def __init__(self, V=16):
        self.config = types.SimpleNamespace(vocab_size=V)
        self.calls, self.resets = [], 0
        self.weights = tiny_weights()

    def reset(self):
        self.resets += 1

    def next_probs(self, tokens, k=1):
        self.calls.append(("score", k))
        return np.full((k, self.config.vocab_size), 1.0 / self.config.vocab_size)


def test_scoring_and_floor_passes_are_timed_in_every_round_interleaved():
    model = CountingModel()
    order = []
    passes = {name: (lambda name=name: (order.append(name), model.calls.append(("pass", name))))
              for name in ("a", "b")}
    score, stream = costs.scoring_and_stream_ms(model, repeats=4, k_max=3, passes=passes)
    assert set(score) == {1, 2, 3, 4} and set(stream) == {"a", "b"}
    assert all(v >= 0 for v in list(score.values()) + list(stream.values()))
    timed = model.calls[1:]                                    # the first call caches the prefix
    assert len(timed) == 4 * (4 + 2)                           # every job once per round
    rounds = [timed[6 * r:6 * r + 6] for r in range(4)]
    for r in rounds:                                           # each round holds every job once
        assert sorted(map(str, r)) == sorted(map(str, [("score", n) for n in (1, 2, 3, 4)] + [("pass", "a"), ("pass", "b")]))
    assert len({tuple(map(str, r)) for r in rounds}) > 1       # in a shuffled order, not a fixed one
    assert model.resets == 2


def test_stream_passes_read_every_matrix_on_one_and_on_every_core():
    model = types.SimpleNamespace(weights=tiny_weights())
    passes = costs.stream_passes(model, threads=2)
    assert set(passes) == {"gemv panels, 1 thread", "gemv plain, 1 thread", "gemv plain, 2 threads", "read, 2 threads"}
    for f in passes.values():
        f()
    assert set(costs.stream_passes(model, threads=1)) == {"gemv panels, 1 thread", "gemv plain, 1 thread", "read, 1 thread"}
