"""Toy models over V = 8 tokens that copy the token LAG = 4 back, for the pilot's checks on sampled text.

`Sticky` is a target whose copying comes in runs, as code that repeats its prompt does; `Copier` and `Soft` are
drafts that copy it.  `tests/apps/test_pilot.py` asserts on them and `tools/pilot_given_text.py` prints the same
comparisons on more texts, so both read these.
"""

from __future__ import annotations

import numpy as np


class Sticky:
    """A toy target over V = 8 tokens that copies the token LAG back with chance 0.95 after a copied token and 0.3
    otherwise (the rest uniform): copying comes in runs, as code that repeats its prompt does."""

    V, LAG = 8, 4

    def row(self, tokens):
        copied = len(tokens) > self.LAG and tokens[-1] == tokens[-1 - self.LAG]
        a = 0.95 if copied else 0.3
        out = np.full(self.V, (1 - a) / self.V)
        out[tokens[-self.LAG]] += a
        return out

    def next_probs(self, tokens, k):
        return np.stack([self.row(tokens[:len(tokens) - k + 1 + i]) for i in range(k)])


class Copier(Sticky):
    """A draft with all its mass on the token LAG back (a one-hot copy, like prompt lookup)."""

    def row(self, tokens):
        return np.eye(self.V)[tokens[-self.LAG]]


class Soft(Sticky):
    """A draft that puts 0.7 on the token LAG back and spreads the rest: its top-k children differ from its top 1."""

    def row(self, tokens):
        out = np.full(self.V, 0.3 / self.V)
        out[tokens[-self.LAG]] += 0.7
        return out
