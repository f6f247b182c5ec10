"""Portable test vectors for specref/mrs.py: `python3 -m specref.proof.vectors` rewrites mrs_vectors.json.

Each vector is a named case: the inputs of one call of `mrs.verify`, `mrs.verify_block`,
`mrs.verify_lenient`, `mrs.verify_greedy` or `mrs.accept_or_resample`, the uniforms that call draws from its rng in the order it
draws them, and the tokens it returns.  Another implementation that draws its uniforms in
the order specref/mrs.py states (its RANDOMNESS and SAMPLING, copied into the JSON as
"uniform_order") must return the same tokens.  Chen's letters: p = draft, q = target.

Every expected output is computed twice: by specref.mrs, and by `exact_walk` below, an
independent replay of the documented rule in exact rational arithmetic (fractions.Fraction
of the float64 inputs; block verification's weights by `specref.proof.stats.block_weights`, greedy's
tokens by `laws.greedy_call_law`).  The generator refuses to write a vector on which the two disagree,
or whose uniforms lie within MARGIN of a decision boundary (an accept ratio, or a step
(d[0] + ... + d[i]) / sum(d) of an inverse CDF), so float rounding in any implementation
cannot change a vector's tokens.
"""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import numpy as np

from specref import mrs
from specref.files import write_text
from specref.proof import laws

FORMAT = "specref-mrs-vectors"
VERSION = 2
PATH = Path(__file__).with_name("mrs_vectors.json")

# No uniform of a vector is closer than this to a decision boundary.
MARGIN = 1e-9


class ListedUniforms:
    """A stand-in for np.random.Generator: random() returns the listed uniforms in order, random(n) the next n;
    then `tail` for ever, or raise (the vectors, and the conformance checker's injected uniforms)."""

    def __init__(self, uniforms: list[float], tail: float | None = None):
        self.uniforms, self.tail, self.used = [float(u) for u in uniforms], tail, 0

    def _next(self) -> float:
        if self.used >= len(self.uniforms) and self.tail is None:
            raise RuntimeError(f"asked for uniform number {self.used + 1} but the vector lists only {len(self.uniforms)}")
        self.used += 1
        return self.uniforms[self.used - 1] if self.used <= len(self.uniforms) else self.tail

    def random(self, size=None):
        if size is None:
            return self._next()
        return np.array([self._next() for _ in range(int(np.prod(size)))]).reshape(size)

    def check_all_used(self) -> None:
        """Raise if fewer uniforms were drawn than the vector lists."""
        if self.used != len(self.uniforms):
            raise RuntimeError(f"drew {self.used} uniforms but the vector lists {len(self.uniforms)}")


def uniform_order() -> list[str]:
    """specref/mrs.py's documented use of rng (mrs.RANDOMNESS, then mrs.SAMPLING), one line per entry."""
    return [line.rstrip() for line in (mrs.RANDOMNESS.strip() + "\n\n" + mrs.SAMPLING.strip()).splitlines()]


# ---------------------------------------------------------------- replaying a vector

def replay(case: dict, module=mrs) -> dict:  # -> {"tokens": [...]} (+ "accepted" for accept_or_resample)
    """Run one vector's call on `module` (specref.mrs or a copy) with its listed uniforms; check all were drawn."""
    rng = ListedUniforms(case["uniforms"])
    function = case["function"]
    if function == "accept_or_resample":
        y, accepted = module.accept_or_resample(case["x"], np.array(case["p"]), np.array(case["q"]), rng)
        out = {"tokens": [int(y)], "accepted": bool(accepted)}
    elif function == "verify_greedy":
        out = {"tokens": [int(y) for y in module.verify_greedy(np.array(case["x_draft"], dtype=np.int64), np.array(case["q"]))]}
    else:
        args = (np.array(case["x_draft"], dtype=np.int64), np.array(case["p"]), np.array(case["q"]), rng)
        if function == "verify":
            tokens = module.verify(*args)
        elif function == "verify_block":
            tokens = module.verify_block(*args)
        elif function == "verify_lenient":
            tokens = module.verify_lenient(*args, case["lenience"])
        else:
            raise ValueError(f"unknown function {function!r} in vector {case['name']!r}")
        out = {"tokens": [int(y) for y in tokens]}
    rng.check_all_used()
    return out


def expected(case: dict) -> dict:
    """The outputs a vector records."""
    return {k: case[k] for k in ("tokens", "accepted") if k in case}


def mismatches(doc: dict, module=mrs, only: str | None = None, replay=replay, expected=expected) -> list[str]:
    """One line per vector whose replay on `module` differs from its recorded output (or raises); [] if all match.

    `module` is specref.mrs, a copy of it, or any object with its functions (for instance a
    namespace holding a broken `verify` from specref.proof.bugs.broken); `only` limits the replay
    to the vectors of one function.  `replay(case, module)` and `expected(case)` give what the
    replay returned and what was recorded (specref.proof.tree_vectors passes its own).
    """
    found = []
    for case in doc["cases"]:
        if only is not None and case["function"] != only:
            continue
        try:
            got = replay(case, module)
        except Exception as e:  # a crash or a wrong number of uniforms is a mismatch too
            found.append(f"{case['name']}: raised {type(e).__name__}: {e}")
            continue
        if got != expected(case):
            found.append(f"{case['name']}: expected {expected(case)}, got {got}")
    return found


# ---------------------------------------------------------------- the exact reference

def _inverse_cdf(w: list[Fraction], u: Fraction) -> tuple[int, Fraction]:  # weights, uniform -> token, margin
    total = sum(w)
    token, margin, c = None, Fraction(1), Fraction(0)
    for i, wi in enumerate(w):
        c += wi
        if 0 < c < total:  # an interior step of the CDF
            margin = min(margin, abs(u - c / total))
        if token is None and u * total < c:
            token = i
    return token, margin


def exact_walk(case: dict) -> tuple[dict, list[str], float]:
    """Replay a vector by the documented rule in exact arithmetic: (outputs, trace, smallest margin of its uniforms)."""
    if case["function"] == "verify_greedy":
        best = [laws.first_max(row) for row in case["q"]]  # ties go to the lowest id
        (tokens,) = map(list, laws.greedy_call_law(case["x_draft"], None, case["q"]))  # its one output
        trace = [f"target argmax per position {best}: the first {len(tokens) - 1} drafts match"]
        return {"tokens": tokens}, trace, float("inf")
    if case["function"] == "verify_block":
        return _exact_block_walk(case)
    single = case["function"] == "accept_or_resample"
    x_draft = [case["x"]] if single else case["x_draft"]  # [K]
    p = [case["p"]] if single else case["p"]  # [K][V]
    q = [case["q"]] if single else case["q"]  # [K+1][V] ([1][V] for accept_or_resample)
    lenience = Fraction(case.get("lenience", 1.0))
    rng = ListedUniforms(case["uniforms"])
    ratio = "q/p" if lenience == 1 else "q/(l p)"
    tokens, trace, margin, accepted = [], [], Fraction(1), 0
    for t, x in enumerate(x_draft):
        u = Fraction(rng.random())  # the accept test
        bound = Fraction(q[t][x]) / (lenience * Fraction(p[t][x]))
        margin = min(margin, abs(u - bound))
        if u < bound:
            tokens.append(x)
            accepted += 1
            trace.append(f"t={t}: u={float(u)} < {ratio}={float(bound):.6g}: accept draft {x}")
            continue
        excess = [max(Fraction(0), Fraction(b) - Fraction(a)) for a, b in zip(p[t], q[t])]
        if sum(excess) == 0:
            excess = [Fraction(b) for b in q[t]]  # p == q: the documented fallback to q
        u_reject = u
        u = Fraction(rng.random())  # the residual draw
        y, m = _inverse_cdf(excess, u)
        margin = min(margin, m)
        tokens.append(y)
        trace.append(f"t={t}: u={float(u_reject)} >= {ratio}={float(bound):.6g}: reject draft {x}; "
                     f"residual draw u={float(u)} -> {y}")
        break
    if accepted == len(x_draft) and not single:
        u = Fraction(rng.random())  # the bonus draw
        y, m = _inverse_cdf([Fraction(b) for b in q[len(x_draft)]], u)
        margin = min(margin, m)
        tokens.append(y)
        trace.append(f"all {len(x_draft)} accepted; bonus draw from q[{len(x_draft)}] u={float(u)} -> {y}")
    rng.check_all_used()
    out = {"tokens": tokens, "accepted": accepted == 1} if single else {"tokens": tokens}
    return out, trace, float(margin)


def _exact_block_walk(case: dict) -> tuple[dict, list[str], float]:
    x_draft = case["x_draft"]
    K = len(x_draft)
    p = [[Fraction(v) for v in row] for row in case["p"]]
    q = [[Fraction(v) for v in row] for row in case["q"]]
    w, h, r = laws.block_weights(x_draft, p, q)
    rng = ListedUniforms(case["uniforms"])
    trace = [f"w = {[float(v) for v in w]}, h = {[round(float(v), 6) for v in h]}"]
    tau, margin = 0, Fraction(1)
    for i in range(K, 0, -1):  # the stopping coins, last position first
        eta = Fraction(rng.random())
        margin = min(margin, abs(eta - h[i]))
        if eta < h[i]:
            trace.append(f"i={i}: eta={float(eta)} < h={float(h[i]):.6g}: stop, keep {x_draft[:i]}")
            tau = i
            break
        trace.append(f"i={i}: eta={float(eta)} >= h={float(h[i]):.6g}")
    if tau == K:
        last, what = q[K], f"bonus draw from q[{K}]"
    elif sum(r[tau]) > 0:
        last, what = r[tau], f"residual draw from max(0, w_{tau} q[{tau}] - p[{tau}])"
    else:
        last, what = q[tau], f"residual all zero: draw from q[{tau}]"
    u = Fraction(rng.random())
    y, m = _inverse_cdf(last, u)
    margin = min(margin, m)
    trace.append(f"tau={tau}; {what} u={float(u)} -> {y}")
    rng.check_all_used()
    return {"tokens": list(x_draft[:tau]) + [y]}, trace, float(margin)


# ---------------------------------------------------------------- the vectors

# Chen's letters: p = draft, q = target.  Rows of 4 tokens with distinct accept ratios.
P0, Q0 = [0.4, 0.3, 0.2, 0.1], [0.30, 0.45, 0.10, 0.15]  # the Qualcomm post's Figure 10; q/p = .75, 1.5, .5, 1.5
P1, Q1 = [0.1, 0.2, 0.3, 0.4], [0.2, 0.1, 0.3, 0.4]  # q/p = 2, .5, 1, 1; residual is one-hot on token 0
P2, Q2 = [0.25, 0.25, 0.25, 0.25], [0.1, 0.2, 0.3, 0.4]  # q/p = .4, .8, 1.2, 1.6
Q3 = [0.05, 0.15, 0.5, 0.3]  # the bonus row after three drafts


def _sparse(V: int, mass: dict[int, float]) -> list[float]:
    d = [0.0] * V
    for i, m in mass.items():
        d[i] = m
    return d


def _verify(name, about, x_draft, p, q, uniforms, **extra) -> dict:
    return {"name": name, "function": "verify", "about": about, "x_draft": x_draft, "p": p, "q": q,
            "uniforms": uniforms, **extra}


def _block(name, about, x_draft, p, q, uniforms) -> dict:
    return {"name": name, "function": "verify_block", "about": about, "x_draft": x_draft, "p": p, "q": q,
            "uniforms": uniforms}


def cases() -> list[dict]:
    """The inputs of every vector (without outputs), in the order they are written."""
    V = 1025  # just above 4 * 256: sample's two-level path, with a padded last block
    big_p = [_sparse(V, {3: 0.5, 256: 0.5})]
    big_q = [_sparse(V, {255: 0.2, 256: 0.3, 511: 0.1, 1024: 0.4}), _sparse(V, {0: 0.1, 512: 0.6, 1024: 0.3})]
    return [
        _verify("accept_all_with_bonus", "all three drafts accepted, then the bonus token from q[3] (not q[2])",
                [0, 2, 1], [P0, P1, P2], [Q0, Q1, Q2, Q3], [0.5, 0.3, 0.6, 0.65]),
        _verify("reject_at_first", "position 0 (token 0) rejected: u >= q/p = 0.75; residual [0, .75, 0, .25]",
                [0, 2, 1], [P0, P1, P2], [Q0, Q1, Q2, Q3], [0.8, 0.9]),
        _verify("reject_in_middle", "position 1 (token 1, q/p = 0.5) rejected; its residual is one-hot on token 0",
                [1, 1, 3], [P0, P1, P2], [Q0, Q1, Q2, Q3], [0.2, 0.55, 0.5]),
        _verify("reject_at_last", "positions 0 and 1 accepted, position 2 rejected; residual [0, 0, .25, .75]",
                [0, 2, 1], [P0, P1, P2], [Q0, Q1, Q2, Q3], [0.1, 0.99, 0.85, 0.2]),
        _verify("residual_draw_first_of_two", "position 0 rejected; the residual draw u = 0.74 lands just below the step at 0.75",
                [0], [P0], [Q0, Q3], [0.76, 0.74]),
        _verify("ratio_above_one_always_accepted", "q/p = 1.5 > 1: accepted even with u close to 1",
                [1, 3], [P0, P0], [Q0, Q0, Q3], [0.999, 0.998, 0.01]),
        _verify("p_equals_q", "p == q: every ratio is 1, so every draft is accepted; the bonus comes from q[K]",
                [3, 0], [P2, Q0], [P2, Q0, Q2], [0.999, 0.5, 0.35]),
        _verify("disjoint_supports", "q(x) = 0 for every draft: rejected at once; the residual is q itself",
                [0, 1], [[0.5, 0.5, 0.0, 0.0]] * 2, [[0.0, 0.0, 0.3, 0.7]] * 3, [0.25, 0.2]),
        _verify("one_hot_p", "p one-hot: accept iff u < q(x); the residual is q without x, renormalised",
                [1, 2], [[0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0]],
                [[0.1, 0.6, 0.2, 0.1], [0.3, 0.3, 0.1, 0.3], [0.4, 0.3, 0.2, 0.1]], [0.5, 0.5, 0.9]),
        _verify("one_hot_q", "q one-hot: a draft equal to q's token is accepted, any other rejected for q's token",
                [3, 2], [P0, P1], [[0.0, 0.0, 0.0, 1.0], [1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0]],
                [0.95, 0.01, 0.6]),
        _verify("zeros_in_both_target_zero_rejected", "p(0) = 0 and q(1) = 0: draft 1 is rejected even with u = 0.001",
                [1, 2], [[0.0, 0.5, 0.3, 0.2], [0.0, 0.2, 0.2, 0.6]],
                [[0.4, 0.0, 0.3, 0.3], [0.5, 0.0, 0.25, 0.25], [0.25, 0.0, 0.5, 0.25]], [0.001, 0.85]),
        _verify("zeros_in_both_accept_all", "p(0) = 0 and q(1) = 0: both drafts accepted, bonus from q[2]",
                [2, 3], [[0.0, 0.5, 0.3, 0.2], [0.0, 0.2, 0.2, 0.6]],
                [[0.4, 0.0, 0.3, 0.3], [0.5, 0.0, 0.25, 0.25], [0.25, 0.0, 0.5, 0.25]], [0.3, 0.2, 0.1]),
        _verify("large_vocabulary_two_level", f"V = {V} > 1024: sample works in blocks of 256; draft 256 rejected "
                "(q/p = 0.6), residual on tokens 255, 511, 1024 (the last, in a padded block)",
                [256], big_p, big_q, [0.7, 0.35]),
        _block("block_accept_all_with_bonus", "h_3 = w_3 = 0.6 and eta_3 = 0.3: all three drafts kept, bonus from q[3]",
               [0, 2, 1], [P0, P1, P2], [Q0, Q1, Q2, Q3], [0.3, 0.65]),
        _block("block_stop_at_one", "coins 3 and 2 fail, coin 1 (h_1 = 1/6) comes up; residual max(0, 0.75 q[1] - p[1]) "
               "is one-hot on token 0", [0, 2, 1], [P0, P1, P2], [Q0, Q1, Q2, Q3], [0.9, 0.5, 0.1, 0.5]),
        _block("block_weighted_residual", "coin 2 (h_2 = 1/6) comes up with w_2 = 0.75: the residual max(0, 0.75 q[2] - p[2]) "
               "is one-hot on token 3 (without the weight it would give token 2 a quarter)", [0, 2, 1], [P0, P1, P2],
               [Q0, Q1, Q2, Q3], [0.9, 0.1, 0.1]),
        _block("block_tau_zero", "every coin fails: tau = 0 and the residual is the usual (q[0] - p[0])_+ = [0, .75, 0, .25]",
               [0, 2, 1], [P0, P1, P2], [Q0, Q1, Q2, Q3], [0.9, 0.5, 0.5, 0.5]),
        _block("block_keeps_what_token_level_may_reject", "q/p = 0.5 for draft 0 (verify keeps it half the time), "
               "but w_2 = min(1, 0.5 * 2) = 1 so h_2 = 1: both drafts are always kept", [2, 0, 0], [P0, P1, P2],
               [Q0, Q1, Q2, Q3], [0.7, 0.99, 0.3]),
        _block("block_toy_example", "the paper's toy example (draft (2/3, 1/3), target (1/3, 2/3)), drafts a b: w = 1, 1/2, 1, "
               "so h_2 = 1 and both are kept", [0, 1], [[2 / 3, 1 / 3]] * 2, [[1 / 3, 2 / 3]] * 3, [0.999, 0.4]),
        _block("block_p_equals_q", "p == q: w_i = 1, s_i = 0 (h_1 = 1 by definition, never NaN); all kept, bonus from q[K]",
               [3, 0], [P2, Q0], [P2, Q0, Q2], [0.999, 0.35]),
        _block("block_disjoint_supports", "q(x) = 0 for every draft: every w, h is 0 and even eta = 0.001 fails; residual q",
               [0, 1], [[0.5, 0.5, 0.0, 0.0]] * 2, [[0.0, 0.0, 0.3, 0.7]] * 3, [0.25, 0.001, 0.2]),
        _block("block_one_hot_q", "q one-hot: draft 0 matches (w_1 = 1, h_1 = 1), draft 1 does not (w_2 = 0); "
               "greedy's tokens", [3, 2], [P0, P1], [[0.0, 0.0, 0.0, 1.0], [1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0]],
               [0.5, 0.999, 0.6]),
        _block("block_target_zero_never_kept", "q[0](1) = 0: w and h are 0 from position 1 on; nothing is kept",
               [1, 2], [[0.0, 0.5, 0.3, 0.2], [0.0, 0.2, 0.2, 0.6]],
               [[0.4, 0.0, 0.3, 0.3], [0.5, 0.0, 0.25, 0.25], [0.25, 0.0, 0.5, 0.25]], [0.001, 0.001, 0.85]),
        _block("block_large_vocabulary_two_level", f"V = {V}, K = 1: h_1 = w_1 = 0.6, eta_1 = 0.7 fails; the residual "
               "(q - p)_+ drawn in blocks of 256", [256], big_p, big_q, [0.7, 0.35]),
        {"name": "lenient_accepts_what_exact_rejects", "function": "verify_lenient", "lenience": 0.5,
         "about": "l = 0.5: q/(l p) = 1.5 for draft 0, accepted with u = 0.8 (verify would reject it)",
         "x_draft": [0], "p": [P0], "q": [Q0, Q3], "uniforms": [0.8, 0.3]},
        {"name": "lenient_reject", "function": "verify_lenient", "lenience": 0.8,
         "about": "l = 0.8: q/(l p) = 0.625 for draft 2, rejected with u = 0.7; the residual is the exact one",
         "x_draft": [2], "p": [P0], "q": [Q0, Q3], "uniforms": [0.7, 0.8]},
        {"name": "greedy_accept_all_with_bonus", "function": "verify_greedy",
         "about": "both drafts are the target's argmax; the bonus is q[2]'s argmax",
         "x_draft": [2, 0], "q": [[0.1, 0.2, 0.6, 0.1], [0.5, 0.3, 0.1, 0.1], [0.2, 0.1, 0.3, 0.4]], "uniforms": []},
        {"name": "greedy_mismatch_first", "function": "verify_greedy", "about": "draft 0 is not the argmax: q[0]'s argmax",
         "x_draft": [1, 0], "q": [[0.1, 0.2, 0.6, 0.1], [0.5, 0.3, 0.1, 0.1], [0.2, 0.1, 0.3, 0.4]], "uniforms": []},
        {"name": "greedy_mismatch_middle", "function": "verify_greedy", "about": "draft 1 is not the argmax: q[1]'s argmax",
         "x_draft": [2, 1], "q": [[0.1, 0.2, 0.6, 0.1], [0.5, 0.3, 0.1, 0.1], [0.2, 0.1, 0.3, 0.4]], "uniforms": []},
        {"name": "greedy_tie_goes_to_lowest_id", "function": "verify_greedy",
         "about": "q[0] ties tokens 1 and 2: the argmax is 1", "x_draft": [2],
         "q": [[0.2, 0.4, 0.4], [0.3, 0.3, 0.4]], "uniforms": []},
        {"name": "greedy_on_logits", "function": "verify_greedy", "about": "scores need not be probabilities",
         "x_draft": [2, 2], "q": [[1.5, -2.0, 3.0], [0.0, 4.0, -1.0], [2.0, 1.0, 0.5]], "uniforms": []},
        {"name": "mrs_accept", "function": "accept_or_resample", "about": "q/p = 0.75 and u = 0.7: accepted",
         "x": 0, "p": P0, "q": Q0, "uniforms": [0.7]},
        {"name": "mrs_reject_then_residual", "function": "accept_or_resample", "about": "q/p = 0.75 and u = 0.76: rejected; residual draw",
         "x": 0, "p": P0, "q": Q0, "uniforms": [0.76, 0.74]},
        {"name": "mrs_ratio_above_one", "function": "accept_or_resample", "about": "q/p = 1.5: accepted with u = 0.999",
         "x": 1, "p": P0, "q": Q0, "uniforms": [0.999]},
        {"name": "mrs_target_zero_never_accepted", "function": "accept_or_resample", "about": "q(x) = 0: rejected even with u = 0.001",
         "x": 0, "p": [0.5, 0.5], "q": [0.0, 1.0], "uniforms": [0.001, 0.3]},
    ]


def build() -> dict:
    """All vectors with their outputs, checked against the exact replay and the margin; raises if any fails."""
    vectors = []
    for case in cases():
        out = replay(case)
        exact, trace, margin = exact_walk(case)
        if out != exact:
            raise AssertionError(f"{case['name']}: specref.mrs gives {out}, the exact replay {exact}")
        if margin < MARGIN:
            raise AssertionError(f"{case['name']}: a uniform lies {margin:.3g} < {MARGIN:g} from a decision boundary")
        vectors.append({**case, **out, "trace": trace})
    return {
        "format": FORMAT,
        "version": VERSION,
        "description": [
            "Test vectors for modified rejection sampling (speculative sampling, Chen et al. 2023, Algorithm 2),",
            "written by `python3 -m specref.proof.vectors` from specref/mrs.py; Chen's letters: p = draft, q = target.",
            "Each case calls `function` (verify, verify_block, verify_lenient, verify_greedy or accept_or_resample of specref/mrs.py) on x_draft",
            "(or x for accept_or_resample), p, q (and lenience) with an rng whose random() returns `uniforms` in order; the call must",
            "draw exactly those uniforms and return `tokens` (and `accepted` for accept_or_resample).  `trace` shows the decisions.",
            f"No uniform lies within {MARGIN:g} of a decision boundary, so float rounding cannot change a result.",
        ],
        "uniform_order": uniform_order(),
        "cases": vectors,
    }


def _dump(value, indent: str) -> str:
    inner = indent + "  "
    if isinstance(value, dict):
        items = [f"{inner}{json.dumps(k)}: {_dump(v, inner)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + indent + "}"
    if isinstance(value, list) and any(isinstance(v, (dict, list, str)) for v in value):
        return "[\n" + ",\n".join(inner + _dump(v, inner) for v in value) + "\n" + indent + "]"
    return json.dumps(value)  # scalars, and lists of numbers on one line


def dumps(doc: dict) -> str:
    """The JSON text of the vectors: one line per distribution row, so a diff shows what changed."""
    text = _dump(doc, "") + "\n"
    if json.loads(text) != doc:
        raise AssertionError("the JSON writer lost information")
    return text


def main() -> None:
    doc = build()
    write_text(PATH, dumps(doc))
    print(f"wrote {len(doc['cases'])} vectors to {PATH}")


if __name__ == "__main__":
    main()
