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
Lines 9-14 are `specref.mrs.verify` (or any verifier with its contract, passed as `verify`).
K is the most a call drafts: a draft that offers `draft_length` (`specref.protocol`) may draft
k < K tokens in a call, chosen from the context before drafting; the target then scores k + 1
tokens, and with k = 0 the call is one step of Algorithm 1.
Algorithm 1 is lines 3-4 with one target sample per loop.  Algorithm 2 may overshoot T by up to
K tokens; both functions return exactly N = T - t new tokens: the first N tokens of a longer
sample have the law of N tokens.

What a run did is reported through `on_step`: after every iteration the loop calls
`on_step(Step(...))`; `RunStats.add` is such a callback and adds up a run's statistics, so the
statistics come from the loop itself, never from a second copy of it.  A callback that returns
True ends the run after that iteration (a command stops at a stop sequence this way).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Callable, Iterable, Mapping

import numpy as np

from specref import mrs
from specref.protocol import check_tokens, draft_length, next_distributions

# on_step(step) -> None or a bool; True ends the run after this step
OnStep = Callable[["Step"], "bool | None"]


def _check_inputs(x, N: int, K: int | None = None) -> np.ndarray:
    x = check_tokens(x, name="the prompt x")
    if int(N) != N or N < 0:
        raise ValueError(f"N (number of new tokens) must be an integer >= 0, got {N}")
    if K is not None and (int(K) != K or K < 1):
        raise ValueError(f"K (draft tokens per loop) must be an integer >= 1, got {K}")
    return x


@dataclass(frozen=True)
class Step:
    """What one loop iteration did."""

    tokens: np.ndarray  # [m] tokens appended this iteration (after truncation to N)
    n_drafted: int  # draft tokens proposed (K for SpS unless the draft drafted fewer, 0 for ArS)
    n_accepted: int  # draft tokens accepted, before truncation to N
    draft_calls: int  # calls of the draft model

    @property
    def n_examined(self) -> int:
        """Draft positions that met the accept test: the accepted ones plus the first rejected, if any."""
        return self.n_accepted + (self.n_accepted < self.n_drafted)


@dataclass
class RunStats:
    """A run's statistics, added up from its steps; the one record the tests, commands and notebooks use.

    Pass `stats.add` as a sampler's `on_step`.  The three times stay 0 unless a timed run
    (`specref.apps.timing`) measured them.  `counts()` / `RunStats.total(...)` turn records into
    JSON rows and back, so a resumed benchmark adds up stored runs with the same code.
    """

    tokens: int = 0  # new tokens
    loops: int = 0  # loop iterations; each calls the target once
    draft_calls: int = 0
    n_drafted: int = 0
    n_accepted: int = 0
    n_examined: int = 0  # draft positions that met the accept test (see Step.n_examined)
    calls_by_drafted: list[int] = field(default_factory=list)  # [k]: loop iterations that drafted k tokens
    seconds: float = 0.0  # wall time of the loop (prefill excluded), if timed
    target_seconds: float = 0.0  # of which in target calls
    draft_seconds: float = 0.0  # of which in draft calls
    steps: list[Step] = field(default_factory=list, repr=False, compare=False)  # every step added, in order

    def add(self, step: Step) -> None:
        """Count one step (an `on_step` callback: returns None, so the run goes on)."""
        self.steps.append(step)
        self.tokens += len(step.tokens)
        self.loops += 1
        self.draft_calls += step.draft_calls
        self.n_drafted += step.n_drafted
        self.n_accepted += step.n_accepted
        self.n_examined += step.n_examined
        k = step.n_drafted
        self.calls_by_drafted += [0] * (k + 1 - len(self.calls_by_drafted))
        self.calls_by_drafted[k] += 1

    def counts(self) -> dict:
        """The counters and times as a plain dict (a JSON row); the steps are left out."""
        return {f.name: list(v) if isinstance(v := getattr(self, f.name), list) else v
                for f in fields(self) if f.name != "steps"}

    @classmethod
    def total(cls, rows: Iterable[Mapping]) -> "RunStats":
        """The sum of several runs' `counts()` rows (extra keys in a row are ignored)."""
        out = cls()
        for row in rows:
            for f in fields(cls):
                if f.name == "calls_by_drafted":  # a histogram: add bin by bin
                    a, b = out.calls_by_drafted, row[f.name]
                    out.calls_by_drafted = [sum(h[k] for h in (a, b) if k < len(h)) for k in range(max(len(a), len(b)))]
                elif f.name != "steps":
                    setattr(out, f.name, getattr(out, f.name) + row[f.name])
        return out

    @property
    def new_tokens(self) -> list[int]:
        """Every new token, in order (from the steps kept by `add`)."""
        return [int(t) for s in self.steps for t in s.tokens]

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
        return self.n_accepted / self.n_examined if self.n_examined else float("nan")

    @property
    def tokens_per_target_call(self) -> float:
        return self.tokens / self.loops if self.loops else float("nan")

    @property
    def ms_per_token(self) -> float:
        return 1000 * self.seconds / self.tokens if self.tokens else float("nan")

    @property
    def target_ms_per_call(self) -> float:
        return 1000 * self.target_seconds / self.loops if self.loops else float("nan")

    @property
    def draft_ms_per_call(self) -> float:
        """Mean time of one draft call; 0 for a run without a draft (ArS)."""
        return 1000 * self.draft_seconds / self.draft_calls if self.draft_calls else 0.0


def autoregressive_sampling(x: np.ndarray, model, N: int, rng: np.random.Generator,
                            on_step: OnStep | None = None) -> np.ndarray:  # [t] -> [t+N]
    """Chen Algorithm 1: x followed by N tokens sampled one target call at a time."""
    x = _check_inputs(x, N)
    T = len(x) + N  # Alg. 1: target length T
    while len(x) < T:  # "while n < T"
        q = next_distributions(model, x, 1)[0]  # q(x | x_1..x_n)
        token = mrs.sample(mrs.check_distribution(q, "target distribution"), rng)  # "Sample x_{n+1} ~ q"
        x = np.append(x, token)  # "n <- n + 1"
        if on_step is not None and on_step(Step(tokens=x[-1:], n_drafted=0, n_accepted=0, draft_calls=0)):
            break
    return x


def speculative_sampling(x: np.ndarray, draft_model, target_model, N: int, K: int, rng: np.random.Generator,
                         verify: Callable = mrs.verify, on_step: OnStep | None = None) -> np.ndarray:  # [t] -> [t+N]
    """Chen Algorithm 2: x followed by N tokens with the target's law, K drafts per target call
    (at most K if the draft offers `draft_length`).

    `verify(x_draft [K], p [K, V], q [K+1, V], rng) -> tokens` is lines 9-14 (`mrs.verify`
    by default; tests plug in deliberately broken variants here).
    """
    x = _check_inputs(x, N, K)
    T = len(x) + N  # line 1: minimum target length T (x holds the prompt: n = t, line 3)
    while len(x) < T:  # line 4
        k = draft_length(draft_model, x, K)  # K, or fewer if the draft says so (module docstring)
        y, p = x, []
        for _ in range(k):  # line 5
            p_t = next_distributions(draft_model, y, 1)[0]  # line 6: p(x | x_1..x_n, x~_1..x~_{t-1})
            y = np.append(y, mrs.sample(mrs.check_distribution(p_t, "draft distribution"), rng))  # x~_t ~ p
            p.append(p_t)
        x_draft = y[len(x):]  # [k] x~_1..x~_k
        q = next_distributions(target_model, y, k + 1)  # line 8: one target call, k + 1 rows
        if k:
            new = verify(x_draft, np.stack(p), q, rng)  # lines 9-14: accepted prefix plus one target token
        else:  # nothing to verify: line 14 alone, x_{n+1} ~ q (Algorithm 1's step)
            new = np.array([mrs.sample(mrs.check_distribution(q[0], "target distribution"), rng)])
        n_accepted = len(new) - 1
        new = new[: T - len(x)]  # Alg. 2 may overshoot T; keep the first N (same law)
        x = np.concatenate([x, new])  # n <- n + len(new)
        if on_step is not None and on_step(Step(tokens=new, n_drafted=k, n_accepted=n_accepted, draft_calls=k)):
            break
    return x
