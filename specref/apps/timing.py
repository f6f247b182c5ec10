"""Timed generation for the commands: wall time of the sampling loop and of the calls inside it.

The algorithm module (`specref.sampling`) does no timing; this wraps its loop.  The models are
wrapped in `Timed`, which adds up the time spent in their calls, and the loop's own wall time is
measured around `speculative_sampling` / `autoregressive_sampling` minus the time spent in the
caller's `on_step` (printing a streamed token is not part of sampling).  Everything lands in
one `specref.runstats.RunStats`.
"""

from __future__ import annotations

import time
from typing import Callable

import numpy as np

from specref import mrs
from specref.runstats import RunStats
from specref.sampling import (Step, autoregressive_sampling, draft_length, keep_path, next_distributions,
                              speculative_sampling)
from specref.trees import Tree, tree_distributions
from specref.warps import Warp, Warped



class Timed:
    """A model that counts its calls and adds up the wall time spent in them (to measure c).

    It passes on what the wrapped model offers for trees of drafts: score_tree and keep_path (a
    target's), candidates (a draft's, `specref.trees.draft_tree`), their time counted as the model's."""

    def __init__(self, model):
        self.model, self.calls, self.seconds = model, 0, 0.0
        if getattr(model, "candidates", None) is not None:  # offered only if the wrapped draft offers it
            self.candidates = self._candidates

    def next_probs(self, tokens: np.ndarray, k: int) -> np.ndarray:  # [n] -> [k, V]
        start = time.perf_counter()
        out = next_distributions(self.model, tokens, k)
        self.seconds += time.perf_counter() - start
        self.calls += 1
        return out

    def __call__(self, tokens: np.ndarray) -> np.ndarray:  # [n] -> [n, V]
        return self.next_probs(tokens, len(tokens))

    def score_tree(self, tokens: np.ndarray, tree_tokens, parents) -> np.ndarray:  # [n], [N], [N] -> [N+1, V]
        start = time.perf_counter()
        out = tree_distributions(self.model, tokens, tree_tokens, parents)
        self.seconds += time.perf_counter() - start
        self.calls += 1
        return out

    def keep_path(self, nodes) -> None:
        """The wrapped model's; its time counts as the model's (keeping the accepted path is part of the call)."""
        start = time.perf_counter()
        keep_path(self.model, nodes)
        self.seconds += time.perf_counter() - start

    def _candidates(self, tokens: np.ndarray, k: int) -> list[int]:
        """The wrapped draft's candidates; their time counts as the draft's, not as a call (its row was one)."""
        start = time.perf_counter()
        out = self.model.candidates(tokens, k)
        self.seconds += time.perf_counter() - start
        return out

    def draft_length(self, tokens: np.ndarray, K: int) -> int:
        """The wrapped model's; its time counts as the model's (deciding how far to draft is drafting), not as a call."""
        start = time.perf_counter()
        k = draft_length(self.model, tokens, K)
        self.seconds += time.perf_counter() - start
        return k

    def __repr__(self) -> str:
        return f"Timed({self.model!r})"


def timed_generation(x: np.ndarray, target_model, draft_model, K: int, warp: Warp, N: int, rng: np.random.Generator,
                     stop: Callable[[list[int]], bool] | None = None, on_step: Callable[[Step], object] | None = None,
                     verify: Callable = mrs.verify, tree: Tree | None = None,
                     verify_tree: Callable | None = None) -> RunStats:
    """ArS (draft_model None) or SpS with `warp` applied to target and draft alike, timed.

    tree: SpS drafts a tree of this shape per call (`specref.sampling.speculative_sampling`; K must be
    its size), verified by `verify_tree` (None: its exact tree verifier).  Top-k children are ranked by the draft's own
    rows, unwarped: verify_tree_topk never reads them, and a warp could only cut children (top-p) or
    leave one (greedy).

    The prompt is run through the target before the clock starts (a model with a cache keeps
    it), so the time is the sampling loop's alone.  After each step, on_step(step) is called
    and stop(new tokens so far) may end the run early.  Returns the run's statistics with its
    times; `stats.new_tokens` holds the tokens.
    """
    x = np.asarray(x)
    next_distributions(target_model, x, 1)  # prefill, untimed
    target = Timed(Warped(target_model, warp.temperature, warp.top_k, warp.top_p))
    draft = None if draft_model is None else \
        Timed(draft_model if tree is not None and tree.drawing == "topk" else
              Warped(draft_model, warp.temperature, warp.top_k, warp.top_p))
    stats = RunStats()
    outside = 0.0  # seconds spent in the caller's callbacks, not in sampling
    new: list[int] = []

    def step_done(step: Step) -> bool:
        nonlocal outside
        start = time.perf_counter()
        stats.add(step)
        new.extend(int(t) for t in step.tokens)
        if on_step is not None:
            on_step(step)
        end = stop is not None and bool(stop(new))
        outside += time.perf_counter() - start
        return end

    start = time.perf_counter()
    if draft is None:
        autoregressive_sampling(x, target, N, rng, on_step=step_done)
    else:
        speculative_sampling(x, draft, target, N, K, rng, verify=verify, on_step=step_done, tree=tree,
                             verify_tree=verify_tree)
    stats.seconds = time.perf_counter() - start - outside
    stats.target_seconds = target.seconds
    stats.draft_seconds = draft.seconds if draft is not None else 0.0
    return stats
