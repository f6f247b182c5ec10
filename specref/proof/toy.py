"""A small speculative sampler on two Markov chains, correct: the whole-pipeline check's test bed.

`Toy` drafts from a draft chain and verifies against a target chain (order 1, V tokens), both warped by the
request's temperature, top-k and top-p as `specref.warps` does, K drafts a call, and knows the exact law of
its first L tokens.  The known bugs around the verifier are Toys with one piece changed (their pipeline
forms, in specref.proof.bugs.shipped); `specref.proof.pipeline` checks a pipeline against plain sampling.
"""

from __future__ import annotations

import numpy as np

from specref import warps
from specref.proof import laws


def _draw(rows: np.ndarray, rng: np.random.Generator) -> np.ndarray:  # [m, V] (unnormalised weights) -> [m]
    cdf = np.cumsum(rows, axis=1)
    u = rng.random(len(rows)) * cdf[:, -1]
    return np.minimum((cdf <= u[:, None]).sum(axis=1), rows.shape[1] - 1)


CHUNK = 1 << 20  # sequences generated at once by Toy.generate


class Toy:
    """A small speculative sampler, correct: a target and a draft Markov chain (order 1) over V tokens, warped alike.

    generate(n, seed) is Chen's Algorithm 2 (K drafts a call, token-level verification) run on n
    sequences at once; plain(n, seed) samples the warped target alone; law() is the exact law of L
    tokens of generate.  The pieces below are what the pipeline forms of the known bugs change, one each
    (specref.proof.bugs.shipped.PIPELINE_BUGS):
    drafted_by (rows the drafts are drawn from), verify_p and verify_q (rows handed to the
    verifier), emitted_by (what the target's token is drawn from, given its row).
    """

    about = "correct: the draft's and the target's rows warped alike, the drafts' own rows handed to the verifier"

    def __init__(self, V: int = 6, K: int = 2, L: int = 4, temperature: float = 0.9, top_k: int | None = 4,
                 top_p: float | None = 0.95, prompt: int = 0, seed: int = 11):
        rng = np.random.default_rng(seed)
        self.V, self.K, self.L, self.prompt = V, K, L, prompt
        self.q_raw = rng.dirichlet(np.full(V, 0.6), size=V)  # [V, V] the target's row given the previous token
        self.p_raw = 0.5 * self.q_raw + 0.5 * rng.dirichlet(np.full(V, 0.6), size=V)  # [V, V] the draft's
        self.warp = warps.Warp(temperature, top_k, top_p)
        self.p_warped, self.q_warped = self.warp(self.p_raw), self.warp(self.q_raw)  # [V, V] each

    # the pieces (each bug changes one)
    def drafted_by(self) -> np.ndarray:  # [V, V] the law each draft token is drawn from, given the previous token
        return self.p_warped

    def verify_p(self) -> np.ndarray:  # [V, V] the draft rows handed to the verifier
        return self.p_warped

    def verify_q(self) -> np.ndarray:  # [V, V] the target rows handed to the verifier
        return self.q_warped

    def emitted_by(self, rows: np.ndarray) -> np.ndarray:  # [..., V] the target's row (residual or bonus) -> law drawn
        return rows

    # sampling
    def generate(self, n: int, seed: int) -> np.ndarray:  # -> [n, L]
        rng = np.random.default_rng(seed)
        return np.concatenate([self._generate(min(CHUNK, n - i), rng) for i in range(0, n, CHUNK)] or
                              [np.zeros((0, self.L), dtype=np.int64)])

    def _generate(self, n: int, rng: np.random.Generator) -> np.ndarray:  # -> [n, L], n <= CHUNK (bounded memory)
        K, L = self.K, self.L
        drafted, p_rows, q_rows = self.drafted_by(), self.verify_p(), self.verify_q()
        out = np.zeros((n, L + K + 1), dtype=np.int64)
        length = np.zeros(n, dtype=np.int64)
        last = np.full(n, self.prompt, dtype=np.int64)
        active = np.arange(n)
        while active.size:
            m = active.size
            context = [last[active]]
            for _ in range(K):  # the drafts, one after the other
                context.append(_draw(drafted[context[-1]], rng))
            C = np.stack(context, axis=1)  # [m, K+1]: C[:, t] is the token before position t; C[:, 1:] the drafts
            X = C[:, 1:]  # [m, K]
            p, q = p_rows[C[:, :K]], q_rows[C]  # [m, K, V], [m, K+1, V]
            px = np.take_along_axis(p, X[..., None], axis=2)[..., 0]  # [m, K]
            qx = np.take_along_axis(q[:, :K], X[..., None], axis=2)[..., 0]
            with np.errstate(divide="ignore", invalid="ignore"):
                kept = rng.random((m, K)) < qx / px
            a = np.cumprod(kept, axis=1).sum(axis=1)  # [m] drafts accepted
            rows = q[np.arange(m), a].copy()  # [m, V]: the bonus row where a == K
            rejected = a < K
            ar = np.minimum(a, K - 1)
            residual = np.maximum(q[np.arange(m), ar] - p[np.arange(m), ar], 0.0)  # [m, V]
            zero = residual.sum(axis=1) <= 0
            residual[zero] = q[np.arange(m), ar][zero]  # an all-zero residual falls back to q
            rows[rejected] = residual[rejected]
            y = _draw(self.emitted_by(rows / rows.sum(axis=1, keepdims=True)), rng)  # [m]
            new = np.concatenate([X, y[:, None]], axis=1)  # [m, K+1]
            for j in range(K + 1):  # write the a accepted drafts, then y
                token = np.where(j < a, new[:, j], y)
                write = j <= a
                out[active[write], length[active[write]] + j] = token[write]
            length[active] += a + 1
            last[active] = y
            active = active[length[active] < L]
        return out[:, :L]

    def plain(self, n: int, seed: int) -> np.ndarray:  # -> [n, L]
        rng = np.random.default_rng(seed)
        out = np.zeros((n, self.L), dtype=np.int64)
        last = np.full(n, self.prompt, dtype=np.int64)
        for i in range(self.L):
            last = out[:, i] = _draw(self.q_warped[last], rng)
        return out

    # exact laws
    def call_law(self, previous: int) -> dict[tuple, float]:
        """Exact law of one call's new tokens after the token `previous`, from the same pieces as generate."""
        K, V = self.K, self.V
        drafted, p_rows, q_rows = self.drafted_by(), self.verify_p(), self.verify_q()
        drafted = drafted / drafted.sum(axis=1, keepdims=True)
        emitted = (lambda row: list(self.emitted_by(np.asarray(row, dtype=np.float64)[None] / np.sum(row))[0]))
        law = {}
        for xs in np.ndindex(*(V,) * K):
            context = (previous, *xs)
            chance = float(np.prod([drafted[context[t], xs[t]] for t in range(K)]))
            if chance == 0:
                continue
            p = [list(p_rows[context[t]]) for t in range(K)]
            q = [list(q_rows[context[t]]) for t in range(K + 1)]
            q[K] = emitted(q[K])  # the bonus token's law (only the bonus reads row K)

            def resample(p_t, q_t, x):
                excess = [max(0.0, b - a) for a, b in zip(p_t, q_t)]
                return emitted(excess if sum(excess) > 0 else q_t)
            for out, v in laws.token_call_law(list(xs), p, q, resample=resample).items():
                law[out] = law.get(out, 0.0) + chance * v
        return law

    def law(self) -> dict[tuple, float]:
        """Exact law of generate's L tokens: calls continued until L tokens, the first L kept."""
        calls = {v: self.call_law(v) for v in range(self.V)}
        done, frontier = {}, {(): 1.0}
        while frontier:
            nxt = {}
            for seq, w in frontier.items():
                for out, v in calls[seq[-1] if seq else self.prompt].items():
                    s = (seq + out)[: self.L]
                    target = done if len(s) == self.L else nxt
                    target[s] = target.get(s, 0.0) + w * v
            frontier = nxt
        return done

    def plain_law(self) -> dict[tuple, float]:
        """Exact law of plain's L tokens: the warped target's chain."""
        return laws.continued_law({(): 1.0}, lambda s: self.q_warped[s[-1] if s else self.prompt], self.L)

    def acceptance(self) -> float:
        """Expected share of drafts accepted in the first call (the pipeline's alpha after the prompt)."""
        law = self.call_law(self.prompt)
        return sum(v * min(len(o) - 1, self.K) for o, v in law.items()) / self.K
