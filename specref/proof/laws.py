"""Exact laws: what a verifier call, or a whole speculative run, must output, by enumeration.

The suite compares samples with these laws (specref.proof.stats); the conformance checker, the
notebooks and the known bugs (specref.proof.bugs) compute theirs with the same functions.
Chen's letters: p = draft, q = target.  A law is a dict outcome -> probability, an outcome a
tuple of token ids (a whole output of `verify`, or a whole sequence), so outputs of different
lengths are different outcomes.  The small models the laws are enumerated on (`MarkovChain`,
`random_conditionals`) live here too.
"""

from __future__ import annotations

import itertools
import time
from typing import Callable

import numpy as np

from specref import mrs
from specref.sampling import next_distributions


def accepted_count_law(p: np.ndarray, q: np.ndarray) -> np.ndarray:  # [K, V], [K+1, V] -> [K+1]
    """P(a draft tokens accepted), a = 0..K: prod_{t<a} alpha_t * (1 - alpha_a), alpha_K := 0."""
    alpha = np.append(np.minimum(p, q[: len(p)]).sum(axis=-1), 0.0)  # [K+1]
    return np.array([np.prod(alpha[:a]) * (1.0 - alpha[a]) for a in range(len(alpha))])


class MarkovChain:
    """A model whose next token depends on the previous `order` tokens: table[ctx] -> [V].

    table has shape [V] * order + [V]; a prefix shorter than `order` is left-padded with
    its first token.  A stand-in for a language model small enough to enumerate.
    """

    def __init__(self, table: np.ndarray):
        self.table = mrs.check_distribution(table, "Markov table")
        self.order = table.ndim - 1
        self.V = table.shape[-1]

    @classmethod
    def random(cls, V: int, order: int, rng: np.random.Generator, concentration: float = 1.0) -> "MarkovChain":
        return cls(rng.dirichlet(np.full(V, concentration), size=(V,) * order))

    def next_probs(self, tokens: np.ndarray, k: int) -> np.ndarray:  # [n] -> [k, V]
        tokens = np.asarray(tokens)
        padded = np.concatenate([np.full(self.order, tokens[0]), tokens])
        return np.stack([self.table[tuple(padded[i + 1: i + 1 + self.order])]
                         for i in range(len(tokens) - k, len(tokens))])

    def __call__(self, tokens: np.ndarray) -> np.ndarray:  # [n] -> [n, V]
        return self.next_probs(tokens, len(tokens))


# The whole-sequence setting the suite and the conformance checker share, small enough that the law
# of every continuation is enumerated (SEQ_V ** SEQ_N sequences).
SEQ_V, SEQ_N = 3, 5                  # vocabulary, new tokens
SEQ_PROMPT = np.array([0, 1])
SEQ_PROMPT.flags.writeable = False


def markov_pair() -> tuple[MarkovChain, MarkovChain]:
    """(target, draft): a random order-2 and order-1 Markov chain on SEQ_V tokens (seed 7, Dirichlet 0.7)."""
    rng = np.random.default_rng(7)
    target = MarkovChain.random(SEQ_V, order=2, rng=rng, concentration=0.7)
    return target, MarkovChain.random(SEQ_V, order=1, rng=rng, concentration=0.7)


def sequence_law(model, x: np.ndarray, N: int) -> dict[tuple, float]:
    """Exact law of the N tokens that follow prompt x under `model`, by enumerating every sequence."""
    law = {(): 1.0}
    for _ in range(N):
        nxt = {}
        for seq, w in law.items():
            q = next_distributions(model, np.concatenate([x, np.array(seq, dtype=np.int64)]), 1)[0]
            for y in np.flatnonzero(q):
                nxt[seq + (int(y),)] = w * float(q[y])
        law = nxt
    return law


def _rows_after(model, context: np.ndarray) -> Callable:
    """prefix (a tuple of ids) -> the model's next-token row after context + prefix, each computed once."""
    seen = {}

    def row(prefix: tuple) -> np.ndarray:
        if prefix not in seen:
            seen[prefix] = next_distributions(model, np.concatenate([context, np.array(prefix, dtype=np.int64)]), 1)[0]
        return seen[prefix]
    return row


def speculative_sequence_law(law_given_drafts: Callable, target, draft, x: np.ndarray, N: int,
                             K: int) -> dict[tuple, float]:
    """Exact law of the N tokens `sampling.speculative_sampling` appends to prompt x, K drafts a call, when each
    call's output has the law law_given_drafts(x_draft, p, q) (`token_call_law`: the target's own law, Chen's theorem;
    a `broken.Bug`'s .law: that bug's law of whole sequences).  Each call's drafts are drawn from the draft's rows
    after the tokens so far (`chain_call_law`); a call that overshoots N is cut to N, as the loop does."""
    x = np.asarray(x, dtype=np.int64)
    V = next_distributions(draft, x, 1).shape[1]
    # Models that see only their last `order` tokens (MarkovChain) have one call law per such tail: computed once.
    orders = [getattr(model, "order", None) for model in (draft, target)]
    order = None if None in orders else max(orders)
    call_laws = {}
    done, frontier = {}, {(): 1.0}  # finished sequences, and the unfinished ones with their probabilities
    while frontier:  # one round of calls: every unfinished sequence gets one more call
        after = {}
        for seq, w in frontier.items():
            context = np.concatenate([x, np.array(seq, dtype=np.int64)])
            tail = tuple(context[-order:].tolist()) if order and len(context) >= order else tuple(context.tolist())
            if tail not in call_laws:
                call_laws[tail] = chain_call_law(law_given_drafts, _rows_after(draft, context), _rows_after(target, context),
                                           K, V)
            for out, v in call_laws[tail].items():
                longer = seq + out
                into = done if len(longer) >= N else after
                into[longer[:N]] = into.get(longer[:N], 0.0) + w * v
        frontier = after
    return done


# ---------------------------------------------------------------- one verifier call, exactly
#
# The laws below are written in plain Python arithmetic, independently of specref.mrs, so
# they take float rows or fractions.Fraction rows alike (Fractions give exact numbers such
# as the 11/9 of the block-verification paper's toy example).  A row is a sequence of V
# probabilities; p is K draft rows, q is K + 1 target rows, as in `mrs.verify`.

def _normalised(row):
    total = sum(row)
    return [v / total for v in row]


def _excess(w, q_row, p_row):  # max(0, w q - p), elementwise
    return [max(0 * v, w * v - u) for u, v in zip(p_row, q_row)]


def stopped_law(kept, stopping, last) -> dict[tuple, object]:  # [K], [K+1], [K+1] rows or None -> law
    """Law of a call that keeps the drafts kept[:tau] with probability stopping[tau], then draws one token
    from the weights last[tau] (normalised here; None: no token): token-level and block verification's laws below."""
    law = {}
    for tau, weight in enumerate(stopping):
        if not weight > 0:
            continue
        prefix = tuple(int(x) for x in kept[:tau])
        if last[tau] is None:
            law[prefix] = law.get(prefix, 0) + weight
            continue
        for y, v in enumerate(_normalised(last[tau])):
            if v > 0:
                law[prefix + (y,)] = law.get(prefix + (y,), 0) + weight * v
    return law


def token_call_law(x_draft, p, q, ratio=None, resample=None, bonus_row=None, propose=None) -> dict[tuple, object]:
    """Law of `mrs.verify`'s output for fixed drafts, over its uniforms: x_t is kept with probability
    min(1, q_t(x_t) / p_t(x_t)); at the first rejection one token from max(0, q_t - p_t) (q_t where that is
    all zero); if every draft is kept, the bonus token from q_K.  [K], [K][V], [K+1][V] -> law.

    Each of the four pieces can be swapped (the bugs of `specref.proof.bugs.broken` and the lossy rules do):
    ratio(p_t, q_t, x), kept with probability min(1, ratio); resample(p_t, q_t, x), the weights drawn
    from after rejecting x; bonus_row(K), the row of the bonus token (None: no bonus); propose(p_t, x),
    the token verified in place of the draft x.
    """
    K = len(x_draft)
    kept = [x if propose is None else propose(p[t], x) for t, x in enumerate(x_draft)]
    stopping, last, path = [], [], 1
    for t, x in enumerate(kept):
        accept = min(1, q[t][x] / p[t][x] if ratio is None else ratio(p[t], q[t], x))
        stopping.append(path * (1 - accept))  # kept x_1..x_t-1, rejected x_t
        if resample is not None:
            last.append(resample(p[t], q[t], x) if stopping[-1] > 0 else None)
        else:
            excess = _excess(1, q[t], p[t])
            last.append(excess if sum(excess) > 0 else q[t])
        path = path * accept
    bonus = K if bonus_row is None else bonus_row(K)
    return stopped_law(kept, stopping + [path], last + [None if bonus is None else q[bonus]])


def lenient_call_law(x_draft, p, q, lenience) -> dict[tuple, object]:  # [K], [K][V], [K+1][V] -> law
    """Law of `mrs.verify_lenient`'s output for fixed drafts: `token_call_law` with the ratio q / (l p) (LOSSY for l < 1)."""
    return token_call_law(x_draft, p, q, ratio=lambda p_t, q_t, x: q_t[x] / (lenience * p_t[x]))


def first_max(row) -> int:
    """The id of a row's largest score, the lowest id on a tie (as np.argmax and `mrs.verify_greedy` break them)."""
    row = list(row)
    return row.index(max(row))


def greedy_call_law(x_draft, p, q) -> dict[tuple, object]:  # [K], unused, [K+1][V] scores -> law
    """Law of `mrs.verify_greedy`'s output (it looks at the target's scores only; p is not used): with probability 1,
    the drafts while each is its row's `first_max`, then the next row's."""
    best = [first_max(row) for row in q]
    n = next((t for t, x in enumerate(x_draft) if x != best[t]), len(x_draft))
    return {tuple(int(x) for x in x_draft[:n]) + (best[n],): 1}


def block_weights(x_draft, p, q, w=None) -> tuple[list, list, list]:  # [K], [K][V], [K+1][V] -> w [K+1], h [K+1], r [K][V]
    """Block verification's w_i, h_i and unnormalised residuals r_i (steps 1-2 of docs/block_verification.md), i = 0..K."""
    # Given w (a misreading's weights, `broken.w_not_carried`), only r and h are computed, from it.
    K = len(x_draft)
    if w is None:
        w = [1 + 0 * q[0][0]]  # w_0 = 1 (a Fraction when the rows are Fractions)
        for i in range(1, K + 1):
            x = x_draft[i - 1]
            w.append(min(1, w[-1] * q[i - 1][x] / p[i - 1][x]))  # w_i = min(1, w_{i-1} q_i(x_i) / p_i(x_i))
    r = [_excess(w[i], q[i], p[i]) for i in range(K)]  # r_i = max(0, w_i q_{i+1} - p_{i+1}), i = 0..K-1
    h = [1 + 0 * w[0]]  # h_0 = 1
    for i in range(1, K):
        s = sum(r[i])
        h.append(s / (s + (1 - w[i])) if s + (1 - w[i]) > 0 else 1 + 0 * s)  # h_i; 1 when 0 / 0
    h.append(w[K])  # h_K = w_K
    return w, h, r


def stopping_law(h) -> list:  # h [K+1] -> [K+1]
    """P(tau = i) for block verification: h_i times the chance that every coin above i failed, prod_{j>i} (1 - h_j)."""
    out, above = [], 1
    for i in range(len(h) - 1, -1, -1):
        out.append(above * h[i])
        above = above * (1 - h[i])
    return out[::-1]


def block_call_law(x_draft, p, q) -> dict[tuple, object]:  # [K], [K][V], [K+1][V] -> law
    """Law of `mrs.verify_block`'s output for fixed drafts, over its uniforms: tau by `stopping_law`, then the w_tau-residual or the bonus."""
    K = len(x_draft)
    w, h, r = block_weights(x_draft, p, q)
    return stopped_law(x_draft, stopping_law(h), [r[i] if sum(r[i]) > 0 else q[i] for i in range(K)] + [q[K]])


def chain_call_law(law_given_drafts: Callable, draft_row: Callable, target_row: Callable, K: int, V: int) -> dict[tuple, object]:
    """Exact law of one verifier call, the drafts drawn from the draft: sum over all V^K draft blocks.

    draft_row(prefix) and target_row(prefix) give the model's next-token row after the tokens
    `prefix` (a tuple, () for the first position), so p and q may depend on the context;
    law_given_drafts is `token_call_law`, `block_call_law` or any function with their signature.
    """
    law = {}
    for xs in itertools.product(range(V), repeat=K):
        p = [draft_row(xs[:t]) for t in range(K)]  # p_t given the drafts before it
        chance = 1
        for t, x in enumerate(xs):
            chance = chance * p[t][x]
        if chance == 0:
            continue
        q = [target_row(xs[:t]) for t in range(K + 1)]
        for out, v in law_given_drafts(list(xs), p, q).items():
            law[out] = law.get(out, 0) + chance * v
    return law


def fixed_rows(rows) -> Callable:
    """The row function of a context-independent model position by position: prefix -> rows[len(prefix)]."""
    return lambda prefix: rows[len(prefix)]


def rows_call_law(law_given_drafts: Callable, p: np.ndarray, q: np.ndarray) -> dict[tuple, float]:  # [K, V], [K+1, V]
    """`call_law` with the drafts drawn from the fixed rows p[t], summed over the tokens where p or q has mass.

    A large vocabulary with few live tokens costs what a small one does; outputs are in the vocabulary's own ids.
    """
    p, q = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
    K, V = p.shape
    live = np.flatnonzero((p > 0).any(axis=0) | (q > 0).any(axis=0))  # [S] ids with mass somewhere
    law = chain_call_law(law_given_drafts, fixed_rows(p[:, live]), fixed_rows(q[:, live]), K, len(live))
    return {tuple(int(live[i]) for i in out): float(v) for out, v in law.items()}


def verify_law(p: np.ndarray, q: np.ndarray) -> dict[tuple, float]:  # [K, V], [K+1, V] -> law
    """Exact law of `mrs.verify`'s output when draft t is drawn from the fixed row p[t]: `token_call_law` over every draft block."""
    return rows_call_law(token_call_law, p, q)


def continued_law(law: dict, target_row: Callable, length: int) -> dict[tuple, object]:
    """A call's output law continued with target draws to `length` tokens (the test of exactness: it must be the target's)."""
    out = {}
    for seq, v in law.items():
        partial = {seq: v}
        for _ in range(length - len(seq)):
            partial = {s + (y,): w * c for s, w in partial.items() for y, c in enumerate(target_row(s)) if c > 0}
        for s, w in partial.items():
            out[s] = out.get(s, 0) + w
    return out


def target_joint_law(target_row: Callable, V: int, length: int) -> dict[tuple, object]:
    """The target's joint law of `length` tokens: prod_t q(x_t | x_1..x_{t-1})."""
    return continued_law({(): 1}, target_row, length)


def mean_output_length(law: dict):
    """Expected number of tokens a call returns (accepted drafts + 1), from its exact output law."""
    return sum(len(out) * v for out, v in law.items())


def random_conditionals(V: int, rng: np.random.Generator, concentration: float = 1.0) -> Callable:
    """A model whose next-token row depends on the whole prefix: prefix -> Dirichlet row, drawn once per prefix."""
    rows = {}

    def row(prefix: tuple) -> np.ndarray:
        if prefix not in rows:
            rows[prefix] = rng.dirichlet(np.full(V, concentration))
        return rows[prefix]

    return row


# ---------------------------------------------------------------- expected tokens on real rows

def expected_tokens_given_drafts(x_draft: np.ndarray, p: np.ndarray, q: np.ndarray) -> tuple[float, float]:
    """(token-level, block) expected tokens of one call for these drafts and rows, over the verifier's uniforms only.

    Vectorised for a large V (it only needs p_i(x_i), q_i(x_i) and the sums s_i).  Averaged over
    the calls of a run it estimates each verifier's expected tokens per target call on the
    contexts the run visited, for both verifiers from the same draft blocks.
    """
    K = len(x_draft)
    idx = np.arange(K)
    ratio = q[idx, x_draft] / p[idx, x_draft]  # [K]
    token = 1.0 + float(np.cumprod(np.minimum(1.0, ratio)).sum())  # 1 + sum_a P(first a accepted)
    w = np.ones(K + 1)
    for i in range(1, K + 1):
        w[i] = min(1.0, w[i - 1] * ratio[i - 1])
    h = [1.0] + [float(w[i]) for i in range(1, K + 1)]  # w_i = 0 or 1 gives h_i = w_i (no sum needed)
    for i in range(1, K):
        if 0.0 < w[i] < 1.0:
            s = float(np.maximum(w[i] * q[i] - p[i], 0.0).sum())  # s_i
            h[i] = s / (s + (1.0 - w[i]))
    block = 1.0 + float(sum(i * v for i, v in enumerate(stopping_law(h))))
    return token, block


class ExpectedTokens:
    """A verifier that runs `verify` and adds up both verifiers' expected tokens for each call's drafts.

    Pass it as a sampler's `verify`; `token / calls` and `block / calls` are then the analytic
    tokens per target call of `mrs.verify` and `mrs.verify_block` on the run's draft blocks,
    next to the measured one of whichever verifier ran.  `seconds` is the time spent computing
    them (a timed run subtracts it: it is not part of sampling).
    """

    def __init__(self, verify: Callable):
        self.verify, self.calls, self.token, self.block, self.seconds = verify, 0, 0.0, 0.0, 0.0

    def __call__(self, x_draft, p, q, rng):
        start = time.perf_counter()
        token, block = expected_tokens_given_drafts(np.asarray(x_draft), np.asarray(p, dtype=np.float64),
                                                    np.asarray(q, dtype=np.float64))
        self.calls, self.token, self.block = self.calls + 1, self.token + token, self.block + block
        self.seconds += time.perf_counter() - start
        return self.verify(x_draft, p, q, rng)

    def add_undrafted_calls(self, n: int) -> None:
        """Count n target calls that scored no drafts (the draft's `draft_length` was 0): they are
        not verified, and yield exactly one token under either verifier."""
        self.calls, self.token, self.block = self.calls + n, self.token + n, self.block + n
