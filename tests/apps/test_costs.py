"""The bench's timings: the decode step, the scoring calls and the floor passes are timed in the same rounds."""

import time
import types

import numpy as np
import pytest

from specref.apps import bench, costs
from tests.smollm2.test_fast import tiny_weights


class CountingModel:
    """Just what the timing needs: reset, next_probs and next_logits (each records its call's row count), config."""

    def __init__(self, V=16):
        self.config = types.SimpleNamespace(vocab_size=V)
        self.calls, self.resets = [], 0
        self.weights = tiny_weights()

    def reset(self):
        self.resets += 1

    def next_probs(self, tokens, k=1):
        self.calls.append(("score", k))
        return np.full((k, self.config.vocab_size), 1.0 / self.config.vocab_size)

    def next_logits(self, tokens, k=1):
        self.calls.append(("logits", k))
        return np.zeros((k, self.config.vocab_size), np.float32)


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


class Clock:
    """A fake time.perf_counter: only what the model and the passes say they took."""

    def __init__(self):
        self.t = 0.0

    def perf_counter(self):
        return self.t


def test_each_rounds_ratios_give_the_spread_beside_the_ratios_of_medians(monkeypatch):
    """In odd rounds the decode step takes 2 ms instead of 1, scoring 3 tokens 6 decode steps instead
    of 3 and the floor pass 0.5 ms instead of 1: each ratio is taken within its round, so the rounds'
    middle half is exactly [3, 6] for 3 tokens and [1, 4] for decode / floor."""
    clock = Clock()
    monkeypatch.setattr(costs, "time", clock)
    monkeypatch.setattr(costs, "verify_ms", lambda V, verifier=None: 0.1)
    calls = {}

    class Model(CountingModel):
        fast = types.SimpleNamespace(to_json=lambda: {})

        def next_probs(self, tokens, k=1):
            calls[k] = calls.get(k, -2 if k == 1 else -1) + 1  # this call's round (-1: the call that caches the prefix)
            odd = calls[k] % 2
            clock.t += 1e-3 * (1 + odd) * (k if k != 3 else 3 * (1 + odd))
            return super().next_probs(tokens, k)

    def floor_pass():
        calls["pass"] = calls.get("pass", -1) + 1
        clock.t += 1e-3 * (0.5 if calls["pass"] % 2 else 1.0)

    monkeypatch.setattr(costs, "stream_passes", lambda model: {"read": floor_pass})
    c = costs.measure_costs(Model(), repeats=4)
    assert c["score_ratio_rounds"][2] == pytest.approx([3.0, 6.0])   # K = 2: 3 tokens
    assert c["score_ratio_rounds"][1] == pytest.approx([2.0, 2.0]) and c["score_ratio_rounds"][8] == pytest.approx([9.0, 9.0])
    assert c["decode_over_stream_rounds"] == pytest.approx([1.0, 4.0])
    assert c["score_ratio"][2] == pytest.approx(7.5 / 1.5) and c["decode_over_stream"] == pytest.approx(1.5 / 0.75)
    table = bench.format_table({**c, "weights_stream_ms_by_pass": {"read": 0.75}, "cores": 2})
    assert "3.00-6.00" in table and "1.00-4.00" in table


def test_the_warp_is_timed_on_the_models_logits_over_the_text_given_and_refused_without_one():
    """warp_ratio warps the model's own logits over a real text (top-p's work depends on the rows) as the loop does
    (`Warp.from_logits`), alternating with decode steps, and counts only what the warp adds to the softmax the
    decode step already pays: a warp that sleeps 2 ms costs about 2 ms more than one that does nothing (control).  A
    text too short to give a row, or no text at all for measure_costs' warps, is refused."""
    model = CountingModel()

    class Slept:
        def __init__(self, ms):
            self.ms, self.rows = ms, []

        def from_logits(self, rows):
            self.rows.append(rows.shape)
            time.sleep(self.ms / 1e3)
            return rows

    slow, free = Slept(2.0), Slept(0.0)
    counted = model.next_probs

    def step(tokens, k=1):                                    # a decode step of at least 10 ms
        time.sleep(0.010)
        return counted(tokens, k)

    model.next_probs = step
    slow_ratio = costs.warp_ratio(model, slow, np.arange(5), repeats=6)
    free_ratio = costs.warp_ratio(model, free, np.arange(5), repeats=6)
    assert slow.rows == [(1, 16)] * 6 and free.rows == [(1, 16)] * 6
    assert model.calls == ([("logits", 4)] + [("score", 1)] * 6) * 2  # the text's logits once, then a step per warp
    assert 0.02 <= slow_ratio - free_ratio <= 0.5             # 2 ms over a step of 10 ms or more: about 0.2 (loose:
    #                                                           sleeps overrun on a loaded machine)
    assert abs(free_ratio) < 0.05                             # a free warp adds about nothing to a softmax of 16
    for bad in (np.arange(1), np.zeros((2, 3), np.int64), np.array([0.5, 1.5])):
        with pytest.raises(ValueError, match="at least 2 token ids"):
            costs.warp_ratio(model, free, bad)
    with pytest.raises(ValueError, match="needs warp_text"):
        costs.measure_costs(model, warps={"nucleus": free})
