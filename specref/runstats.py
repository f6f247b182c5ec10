"""A sampling run's statistics, added up from the steps the loop reports (`specref.sampling.Step`).

`RunStats.add` is an `on_step` callback for `specref.sampling`'s loops: the counts and times come
from the loop itself, never from a second copy of it.  Kept out of `specref.sampling` so that the
loops read as Chen's algorithms and nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Iterable, Mapping

from specref.sampling import Step


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
