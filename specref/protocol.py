"""The model protocol shared by the samplers, the warps and the drafts.

A *model* is any callable `model(tokens) -> probs`, tokens an int array [n], probs [n, V]
where row i is the distribution of token i+1 given tokens[:i+1].  A model may also offer
`model.next_probs(tokens, k) -> [k, V]`, the last k rows only; real models do, so that one
loop step costs one incremental forward pass.
"""

from __future__ import annotations

import time

import numpy as np


def next_distributions(model, tokens: np.ndarray, k: int) -> np.ndarray:  # [n] -> [k, V]
    """The model's distributions for the last k positions (next_probs if offered, else a full call)."""
    f = getattr(model, "next_probs", None)
    out = f(tokens, k) if f is not None else np.asarray(model(tokens))[-k:]
    if out.ndim != 2 or out.shape[0] != k:
        raise ValueError(f"{model!r} returned shape {out.shape} for {len(tokens)} tokens; expected [{k}, V] rows")
    return out


class Timed:
    """A model that counts its calls and adds up the wall time spent in them (to measure c)."""

    def __init__(self, model):
        self.model, self.calls, self.seconds = model, 0, 0.0

    def next_probs(self, tokens: np.ndarray, k: int) -> np.ndarray:  # [n] -> [k, V]
        start = time.perf_counter()
        out = next_distributions(self.model, tokens, k)
        self.seconds += time.perf_counter() - start
        self.calls += 1
        return out

    def __call__(self, tokens: np.ndarray) -> np.ndarray:  # [n] -> [n, V]
        return self.next_probs(tokens, len(tokens))

    def __repr__(self) -> str:
        return f"Timed({self.model!r})"
