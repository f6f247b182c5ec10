"""Draft models that cost (almost) nothing: uniform random, n-gram, prompt lookup.

Leviathan et al. 2023, section 3.6 ("Approximation Models"): any model can draft, since MRS
keeps the target's law whatever p is; negligible-cost drafts (c ~ 0) include n-gram
models, a copy-from-context heuristic and even random tokens.  Each class here is a model
in the sense of `specref.sampling`: `draft(tokens) -> [n, V]` plus `next_probs(tokens, k)`.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Iterable

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from specref.sampling import check_tokens
from specref.trees import draw_children


class _RowModel:
    """A model defined by one function: the next-token distribution after a prefix."""

    V: int

    def row(self, tokens: np.ndarray) -> np.ndarray:  # [n] -> [V]
        raise NotImplementedError

    def next_probs(self, tokens: np.ndarray, k: int) -> np.ndarray:  # [n] -> [k, V]
        tokens = check_tokens(tokens, self.V)
        if not 1 <= k <= len(tokens):
            raise ValueError(f"k must be in [1, {len(tokens)}] for {len(tokens)} tokens, got {k}")
        return np.stack([self.row(tokens[: len(tokens) - k + 1 + i]) for i in range(k)])

    def __call__(self, tokens: np.ndarray) -> np.ndarray:  # [n] -> [n, V]
        return self.next_probs(tokens, len(np.asarray(tokens)))


class UniformDraft(_RowModel):
    """Every token equally likely: Leviathan's random approximation model (alpha = sum_x min(1/V, q(x)))."""

    def __init__(self, V: int):
        if V < 1:
            raise ValueError(f"V must be >= 1, got {V}")
        self.V = V
        self._row = np.full(V, 1.0 / V)

    def row(self, tokens: np.ndarray) -> np.ndarray:  # [n] -> [V]
        return self._row

    def __repr__(self) -> str:
        return f"UniformDraft(V={self.V})"


class NGramDraft(_RowModel):
    """An n-gram model with Witten-Bell interpolated backoff, fitted from token sequences.

    P(w | h) = lam(h) * c(h, w) / c(h) + (1 - lam(h)) * P(w | h minus its oldest token),
    lam(h) = c(h) / (c(h) + u(h)), u(h) = number of distinct tokens seen after h; the
    recursion ends in the unigram with add-one smoothing, so every token keeps p > 0 and
    the draft can propose anything (n = 1 is Leviathan's unigram, n = 2 the bigram).
    """

    def __init__(self, V: int, n: int, counts: list[dict[tuple, Counter]]):
        self.V, self.n = V, n
        self._counts = counts  # counts[j][context of length j] -> Counter of next tokens
        unigram = np.ones(V)  # add-one
        for w, c in counts[0].get((), Counter()).items():
            unigram[w] += c
        self._unigram = unigram / unigram.sum()  # [V]
        # per context: (token ids [m], ML probabilities [m], lambda), built lazily
        self._tables: dict[tuple, tuple[np.ndarray, np.ndarray, float]] = {}

    @classmethod
    def fit(cls, sequences: Iterable[Iterable[int]], V: int, n: int = 2) -> "NGramDraft":
        """Count every n-gram order 1..n in the sequences."""
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        counts: list[dict[tuple, Counter]] = [defaultdict(Counter) for _ in range(n)]
        for seq in sequences:
            seq = [int(t) for t in seq]
            if any(not 0 <= t < V for t in seq):
                raise ValueError(f"a training sequence has token ids outside [0, {V})")
            for i, w in enumerate(seq):
                for j in range(min(n - 1, i) + 1):  # context length j = 0..n-1
                    counts[j][tuple(seq[i - j: i])][w] += 1
        return cls(V, n, [dict(c) for c in counts])

    def _table(self, h: tuple):
        if h not in self._tables:
            c = self._counts[len(h)].get(h)
            if c is None:
                self._tables[h] = None
            else:
                ids = np.fromiter(c.keys(), dtype=np.int64)
                cnt = np.fromiter(c.values(), dtype=np.float64)
                total = cnt.sum()
                self._tables[h] = (ids, cnt / total, total / (total + len(ids)))
        return self._tables[h]

    def row(self, tokens: np.ndarray) -> np.ndarray:  # [n] -> [V]
        out = self._unigram.copy()
        for j in range(1, min(self.n - 1, len(tokens)) + 1):  # longer contexts refine the estimate
            t = self._table(tuple(int(v) for v in tokens[len(tokens) - j:]))
            if t is None:
                break  # an unseen context has no longer seen extension either
            ids, ml, lam = t
            out *= 1.0 - lam
            out[ids] += lam * ml
        return out

    def __repr__(self) -> str:
        return f"NGramDraft(V={self.V}, n={self.n})"


class PromptLookupDraft(_RowModel):
    """Copy from the context (Leviathan 3.6): find the latest earlier occurrence of the last
    n tokens and propose the token that followed it, as a one-hot p (deterministic).

    With no match for n tokens it backs off to n - 1, ..., 1; with no match at all it
    proposes the last token again.  Drafting K tokens continues the copy, because each
    drafted token becomes part of the context the next lookup sees.

    adaptive=True adds `draft_length` (`specref.sampling`): a call drafts only as far as the copy
    reaches, that is, nothing unless the last 2 or more tokens occurred earlier (a 1-token match is
    mostly chance), and at most the tokens that followed that occurrence up to the end of the
    context, never more than K.  A call without a copy is then a plain decode step instead of
    scoring K guesses.  The adaptive draft matches up to n = ADAPTIVE_N = 8 tokens by default: the
    longer the suffix that occurred before, the surer it is that the text repeats from there.  When
    a model loops, 3 tokens often recur at several points of the loop and the latest is the wrong
    one.  Replayed against the target's own greedy continuation of HumanEval/5's prompt (128 tokens,
    K = 10; `python3 -m tools.lookup_replay` counts the calls), matching up to 3 tokens took 52 calls
    (2.46 tokens per call, 295 tokens drafted), up to 6 or more 36 calls (3.56 per call, 143 drafted;
    6, 8, 16 and 32 alike); on the two chat workloads of tools/hf_prompt_lookup.py 77 and 76 calls
    became 77 and 74.
    """

    MIN_MATCH = 2    # the shortest match an adaptive draft copies from
    PLAIN_N = 3      # the default n of the plain draft
    ADAPTIVE_N = 8   # the default n of the adaptive draft (class docstring)

    def __init__(self, V: int, n: int | None = None, adaptive: bool = False):
        if n is None:
            n = self.ADAPTIVE_N if adaptive else self.PLAIN_N
        if V < 1 or n < 1:
            raise ValueError(f"V and n must be >= 1, got V={V}, n={n}")
        if adaptive and n < self.MIN_MATCH:
            raise ValueError(f"an adaptive prompt-lookup draft needs n >= {self.MIN_MATCH}, got n={n}")
        self.V, self.n, self.adaptive = V, n, adaptive

    def match(self, tokens: np.ndarray, shortest: int = 1) -> tuple[int, int]:
        """(m, i): the longest m in [shortest, n] whose last m tokens occurred earlier, and the index
        of the token that followed their latest earlier occurrence; (0, -1) if there is none."""
        L = len(tokens)
        for m in range(min(self.n, L - 1), shortest - 1, -1):
            windows = sliding_window_view(tokens[: L - 1], m)  # [L - m, m]; each has a follower
            hits = np.flatnonzero((windows == tokens[L - m:]).all(axis=1))
            if hits.size:
                return m, int(hits[-1] + m)  # the latest earlier match's continuation
        return 0, -1

    def propose(self, tokens: np.ndarray) -> int:
        """The token the draft puts all its mass on after `tokens`."""
        m, i = self.match(tokens)
        return int(tokens[i]) if m else int(tokens[-1])

    def candidates(self, tokens: np.ndarray, k: int) -> list[int]:
        """Up to k distinct tokens the copy proposes after `tokens`, best first, for a tree of drafts
        (`specref.trees.draft_tree`): the tokens that followed the earlier occurrences of the longest
        matching suffix, the latest occurrence first (the first is `propose`'s token), then those of
        shorter suffixes.  With no match: the last token again, or with adaptive=True (matches of
        MIN_MATCH tokens or more only) nothing.  Deterministic, so verify_tree_topk verifies them."""
        tokens = check_tokens(tokens, self.V)
        L, out = len(tokens), []
        for m in range(min(self.n, L - 1), (self.MIN_MATCH if self.adaptive else 1) - 1, -1):
            windows = sliding_window_view(tokens[: L - 1], m)  # [L - m, m]; each has a follower
            for hit in np.flatnonzero((windows == tokens[L - m:]).all(axis=1))[::-1]:  # the latest first
                token = int(tokens[hit + m])
                if token not in out:
                    out.append(token)
                    if len(out) == k:
                        return out
        return out if out or self.adaptive else [int(tokens[-1])]

    def draft_length(self, tokens: np.ndarray, K: int) -> int:
        """K, or with adaptive=True how far the copy reaches (class docstring)."""
        if not self.adaptive:
            return K
        tokens = check_tokens(tokens, self.V)
        m, i = self.match(tokens, shortest=self.MIN_MATCH)
        return min(K, len(tokens) - i) if m else 0

    def row(self, tokens: np.ndarray) -> np.ndarray:  # [n] -> [V]
        out = np.zeros(self.V)
        out[self.propose(tokens)] = 1.0
        return out

    def __repr__(self) -> str:
        return f"PromptLookupDraft(V={self.V}, n={self.n}{', adaptive=True' if self.adaptive else ''})"


class CopyOrModel:
    """Copy where the context repeats itself, a draft model elsewhere.

    If the last n tokens occurred earlier in the context, p is one-hot at the token that followed
    their latest occurrence (prompt lookup without backoff); otherwise p is `model`'s row.  The
    choice depends only on the tokens, so each row is a fixed distribution given its prefix, which
    is all modified rejection sampling needs.  A long match is strong evidence of copying (code that
    repeats a name or a line of the prompt), where a one-hot guess is cheap and often right.
    """

    def __init__(self, model, V: int, n: int = 3):
        if V < 1 or n < 1:
            raise ValueError(f"V and n must be >= 1, got V={V}, n={n}")
        self.model, self.V, self.n = model, V, n
        self.copies = 0  # rows that were copies (the rest came from the model)
        self._last = (None, None)  # (tokens, the model's row after them): candidates() reuses next_probs' row

    def copy(self, tokens: np.ndarray) -> int | None:
        """The token after the latest earlier occurrence of the last n tokens, or None if there is none."""
        L = len(tokens)
        if L <= self.n:
            return None
        windows = sliding_window_view(tokens[: L - 1], self.n)  # [L - n, n]; each has a follower
        hits = np.flatnonzero((windows == tokens[L - self.n:]).all(axis=1))
        return int(tokens[hits[-1] + self.n]) if hits.size else None

    def next_probs(self, tokens: np.ndarray, k: int) -> np.ndarray:  # [n] -> [k, V]
        tokens = check_tokens(tokens, self.V)
        if not 1 <= k <= len(tokens):
            raise ValueError(f"k must be in [1, {len(tokens)}] for {len(tokens)} tokens, got {k}")
        rows = []
        for end in range(len(tokens) - k + 1, len(tokens) + 1):  # the prefix each row conditions on
            token = self.copy(tokens[:end])
            if token is None:
                rows.append(self._model_row(tokens[:end]))
            else:
                row = np.zeros(self.V)
                row[token] = 1.0
                rows.append(row)
                self.copies += 1
        return np.stack(rows)

    def _model_row(self, tokens: np.ndarray) -> np.ndarray:  # [n] -> [V]
        if self._last[0] is None or not np.array_equal(self._last[0], tokens):
            self._last = (tokens.copy(), np.asarray(self.model.next_probs(tokens, 1))[0])
        return self._last[1]

    def candidates(self, tokens: np.ndarray, k: int) -> list[int]:
        """Up to k distinct tokens to propose after `tokens`, best first, for a tree of drafts
        (`specref.trees.draft_tree`): the copy, if the context repeats, then the model's most likely
        tokens (`specref.trees.draw_children`'s top-k of its row).  Deterministic, so
        verify_tree_topk verifies them."""
        tokens = check_tokens(tokens, self.V)
        token = self.copy(tokens)
        out = [] if token is None else [token]
        if len(out) < k:
            out += [x for x in draw_children(self._model_row(tokens), k, "topk", None) if x != token][: k - len(out)]
        return out

    def __call__(self, tokens: np.ndarray) -> np.ndarray:  # [n] -> [n, V]
        return self.next_probs(tokens, len(tokens))

    def __repr__(self) -> str:
        return f"CopyOrModel({self.model!r}, n={self.n})"
