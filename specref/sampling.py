"""Chen et al. 2023, Algorithm 1 (ArS) and Algorithm 2 (SpS), line by line.

Letters are Chen's: p = draft model, q = target model, K = draft tokens per loop.

A *model* is any callable `model(tokens) -> probs`, tokens an int array [n], probs [n, V]
where row i is the distribution of token i+1 given tokens[:i+1].  A model may also offer
`model.next_probs(tokens, k) -> [k, V]` (only the last k rows); real models do, so one
loop step costs one incremental forward pass instead of a recompute.  The sampler knows
nothing else about models: a Markov chain over 3 tokens and a transformer are alike.

Algorithm 2 as printed, with the line numbers used in the comments below:
    1  Given lookahead K and minimum target sequence length T.
    2  Given target q, draft p and a prompt x_1..x_t.
    3  Initialise n <- t.
    4  while n < T do
    5      for t = 1 : K do
    6          Sample draft x~_t ~ p(x | x_1..x_n, x~_1..x~_{t-1})
    7      end for
    8      In parallel, compute K + 1 sets of logits q(x | x_1..x_n, x~_1..x~_j), j = 0..K
    9      for t = 1 : K do
    10         Sample r ~ U[0, 1]
    11         if r < min(1, q(x~_t | ...) / p(x~_t | ...)) then set x_{n+t} <- x~_t, n <- n + 1
    12         else sample x_{n+t} ~ (q - p)_+ and exit the for loop
    13     end for
    14     If all K were accepted, sample x_{n+K+1} ~ q(x | x_1..x_n, x~_1..x~_K), n <- n + 1
    15 end while
Lines 9-14 are `specref.mrs.verify`.  Algorithm 1 is lines 3-4 with one target sample
per loop.  Algorithm 2 may overshoot T by up to K tokens; both functions return exactly
N = T - t new tokens: the first N tokens of a longer sample have the law of N tokens.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Iterator

import numpy as np

from specref import mrs
from specref.protocol import Timed, next_distributions  # noqa: F401 (re-exported)
from specref.warps import Warped


def _check_inputs(x, N: int, K: int | None = None) -> np.ndarray:
    x = np.asarray(x)
    if x.ndim != 1 or x.size < 1 or not np.issubdtype(x.dtype, np.integer):
        raise ValueError(f"the prompt x must be a non-empty 1-D array of token ids, got shape {x.shape} dtype {x.dtype}")
    if int(N) != N or N < 0:
        raise ValueError(f"N (number of new tokens) must be an integer >= 0, got {N}")
    if K is not None and (int(K) != K or K < 1):
        raise ValueError(f"K (draft tokens per loop) must be an integer >= 1, got {K}")
    return x.astype(np.int64)


@dataclass(frozen=True)
class Step:
    """What one loop iteration did."""

    tokens: np.ndarray  # [m] tokens appended this iteration (after truncation to N)
    n_drafted: int  # draft tokens proposed (K for SpS, 0 for ArS)
    n_accepted: int  # draft tokens accepted, before truncation to N
    draft_calls: int  # calls of the draft model
    target_calls: int  # calls of the target model

    @property
    def n_examined(self) -> int:
        """Draft positions that met the accept test: the accepted ones plus the first rejected, if any."""
        return self.n_accepted + (self.n_accepted < self.n_drafted)


@dataclass
class Trace:
    """The steps of one run and the statistics derived from them."""

    steps: list[Step] = field(default_factory=list)

    @property
    def n_new(self) -> int:
        return sum(len(s.tokens) for s in self.steps)

    @property
    def target_calls(self) -> int:
        return sum(s.target_calls for s in self.steps)

    @property
    def draft_calls(self) -> int:
        return sum(s.draft_calls for s in self.steps)

    @property
    def n_drafted(self) -> int:
        return sum(s.n_drafted for s in self.steps)

    @property
    def n_accepted(self) -> int:
        return sum(s.n_accepted for s in self.steps)

    @property
    def accepted_per_iteration(self) -> list[int]:
        return [s.n_accepted for s in self.steps]

    @property
    def acceptance_rate(self) -> float:
        """Accepted / drafted draft tokens (Chen Fig. 1 divides accepted by K + 1 instead)."""
        return self.n_accepted / self.n_drafted if self.n_drafted else float("nan")

    @property
    def alpha_hat(self) -> float:
        """Estimate of Leviathan's alpha: accepted / draft tokens examined.

        Every examined draft position is one accept/reject trial; a loop that accepts
        a < K drafts examined a + 1 of them (the last was rejected), one that accepts all
        K examined K.  Under Leviathan's iid assumption this is the maximum-likelihood alpha.
        """
        examined = sum(s.n_examined for s in self.steps)
        return self.n_accepted / examined if examined else float("nan")

    @property
    def tokens_per_target_call(self) -> float:
        return self.n_new / self.target_calls if self.target_calls else float("nan")


def run(steps: Iterator[Step]) -> tuple[np.ndarray, Trace]:
    """Drive a step generator to the end: the final tokens and the trace of every step."""
    trace = Trace()
    while True:
        try:
            trace.steps.append(next(steps))
        except StopIteration as stop:
            return stop.value, trace


def autoregressive_steps(x: np.ndarray, model, N: int, rng: np.random.Generator) -> Iterator[Step]:
    """Algorithm 1, one Step per target call; returns (as StopIteration.value) x plus N tokens."""
    x = _check_inputs(x, N)
    T = len(x) + N  # Alg. 1: target length T
    while len(x) < T:  # "while n < T"
        q = next_distributions(model, x, 1)[0]  # q(x | x_1..x_n)
        token = mrs.sample(mrs.check_distribution(q, "target distribution"), rng)  # "Sample x_{n+1} ~ q"
        x = np.append(x, token)  # "n <- n + 1"
        yield Step(np.array([token]), 0, 0, 0, 1)
    return x


def speculative_steps(x: np.ndarray, draft_model, target_model, N: int, K: int, rng: np.random.Generator,
                      verify: Callable = mrs.verify) -> Iterator[Step]:
    """Algorithm 2, one Step per draft-then-verify loop; returns x plus exactly N tokens.

    `verify(x_draft [K], p [K, V], q [K+1, V], rng) -> tokens` is lines 9-14; it is a
    parameter so that tests can plug in deliberately broken variants.
    """
    x = _check_inputs(x, N, K)
    T = len(x) + N  # line 1
    while len(x) < T:  # line 4
        y = x
        p = []
        for _ in range(K):  # line 5
            p_t = next_distributions(draft_model, y, 1)[0]  # line 6: p(x | x_1..x_n, x~_1..x~_{t-1})
            y = np.append(y, mrs.sample(mrs.check_distribution(p_t, "draft distribution"), rng))
            p.append(p_t)
        x_draft = y[len(x):]  # [K]
        q = next_distributions(target_model, y, K + 1)  # line 8: one target call, K + 1 rows
        new = verify(x_draft, np.stack(p), q, rng)  # lines 9-14
        n_accepted = len(new) - 1  # verify returns the accepted prefix plus one target token
        new = new[: T - len(x)]  # Alg. 2 may overshoot T; keep the first N (same law)
        x = np.concatenate([x, new])
        yield Step(new, K, n_accepted, K, 1)
    return x


@dataclass
class Timing:
    """A generation loop measured: its new tokens, wall time and counts."""

    tokens: list[int]  # every new token the loop produced, up to the step at which it stopped
    seconds: float  # wall time inside the loop (the prompt's prefill excluded)
    loops: int  # iterations (= target calls)
    target_seconds: float  # of which in target calls
    draft_calls: int
    draft_seconds: float  # of which in draft calls
    n_drafted: int
    n_accepted: int
    n_examined: int  # draft positions that met the accept test (see Step.n_examined)

    @property
    def alpha_hat(self) -> float:
        return self.n_accepted / self.n_examined if self.n_examined else float("nan")


def timed_generation(x: np.ndarray, target_model, draft_model, K: int, warp, N: int, rng: np.random.Generator,
                     stop: Callable[[list[int]], bool] | None = None, on_step=None) -> Timing:
    """ArS (draft_model None) or SpS with `warp` applied to target and draft alike, timed.

    The prompt is run through the target before the clock starts (a model with a cache keeps
    it), so the time is the sampling loop's alone.  After each step, on_step(step) is called
    and stop(new tokens so far) may end the run early.
    """
    x = _check_inputs(x, N, K if draft_model is not None else None)
    next_distributions(target_model, x, 1)  # prefill, untimed
    target = Timed(Warped(target_model, warp.temperature, warp.top_k, warp.top_p))
    draft = None if draft_model is None else Timed(Warped(draft_model, warp.temperature, warp.top_k, warp.top_p))
    steps = (autoregressive_steps(x, target, N, rng) if draft is None
             else speculative_steps(x, draft, target, N, K, rng))
    new: list[int] = []
    seconds, loops, n_drafted, n_accepted, n_examined = 0.0, 0, 0, 0, 0
    while True:
        start = time.perf_counter()
        try:
            step = next(steps)
        except StopIteration:
            break
        finally:
            seconds += time.perf_counter() - start
        loops += 1
        n_drafted, n_accepted, n_examined = n_drafted + step.n_drafted, n_accepted + step.n_accepted, \
            n_examined + step.n_examined
        new.extend(int(t) for t in step.tokens)
        if on_step is not None:
            on_step(step)
        if stop is not None and stop(new):
            break
    steps.close()
    return Timing(new, seconds, loops, target.seconds, draft.calls if draft else 0,
                  draft.seconds if draft else 0.0, n_drafted, n_accepted, n_examined)


def autoregressive_sampling(x: np.ndarray, model, N: int, rng: np.random.Generator) -> np.ndarray:  # [t] -> [t+N]
    """Chen Algorithm 1: x followed by N tokens sampled one target call at a time."""
    return run(autoregressive_steps(x, model, N, rng))[0]


def speculative_sampling(x: np.ndarray, draft_model, target_model, N: int, K: int,
                         rng: np.random.Generator) -> np.ndarray:  # [t] -> [t+N]
    """Chen Algorithm 2: x followed by N tokens with the target's law, K drafts per target call."""
    return run(speculative_steps(x, draft_model, target_model, N, K, rng))[0]
