"""check_verify: Chen's Algorithm 2, lines 9-14, graded in tiers, and the known mistakes of a verifier.

`check_verify` runs, in this order:
- contract: one call with a real generator returns 1 to K + 1 integer ids in [0, V) and leaves its inputs alone;
- randomness: the same uniforms give the same tokens, twelve times on each of two cases (no np.random, no
  generator of its own);
- exact law, in any order of the uniforms: on seven small cases (a rejection then the residual, a ratio above 1,
  p == q, q(x) = 0 at a drafted token, one-hot rows, residual entries of 2^-20 and 1/512 beside zeros, equal
  residual entries and a tied argmax) the law of the function's output over its uniforms is enumerated
  (`uniforms.exact_law`) and must equal `laws.token_call_law` computed in fractions (to TOL).  The cells start at every value where the correct rule or a known mistake can decide differently on
  these rows (a ratio q/p or p/q, a step of an inverse CDF); where the function decides inside a cell, the
  probes find the switch and the cell is cut there, so an answer that decides elsewhere is enumerated exactly
  too.  A function the enumeration cannot follow (too many uniforms or paths) is not graded exactly, and fails;
- edges with chosen uniforms (the conformance checker's): q(x) = 0 is rejected even with u = 0, and a rejection
  whose max(0, q - p) is all zero (p and q one rounding apart) gives a token of the vocabulary;
- chi-square: N_CALLS calls on the suite's random case (`cases.cases("token")[0]`, K = 2, V = 4) with
  np.random.default_rng(SEED), against `laws.verify_law` by `stats.chi_square_gof` at stats.LEVEL = 1e-3: a
  correct verifier fails it with probability 1e-3 over seeds (its false-alarm rate); the seed is fixed, so a
  verdict is reproducible;
- vectors: the 13 `verify` vectors of specref/proof/mrs_vectors.json give their recorded tokens when their
  uniforms are drawn in the order specref/mrs.py documents.
The controlled uniforms come through rng.random(), rng.random(size), rng.uniform() and rng.choice(a, p=...) (one
uniform a token by the inverse CDF, as NumPy's Generator.choice draws, with its checks and messages).  A
function that calls anything else on rng (rng.integers, rng.binomial, rng.standard_normal, ...) cannot be
graded exactly: it fails, saying what it called and what the chi-square alone found, which proves nothing
exactly.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from specref import mrs
from specref.proof import cases, laws, stats
from specref.proof.bugs import broken, shipped
from specref.proof.verdict import Limits

from .grading import (N_CALLS, SEED, TOL, F, Result, _Case, _case, _call, _Fail, _fmt, _grade, _likeliest,
                      _not_answered, _pair, _unchanged, _vectors)
from .uniforms import CONTROL, _Listed, _TooDeep, _Unsupported, exact_law, replay


# The verdict of a function whose randomness the grader cannot choose: it does not pass.
NOT_EXACT = "not graded exactly: draw uniforms with rng.random()"


# ---------------------------------------------------------------- the known mistakes (verify)

def _argmax_draws_sample(x_draft, p, q, rng):
    out = []
    for t, x in enumerate(x_draft):
        x = int(x)
        if rng.random() < q[t][x] / p[t][x]:
            out.append(x)
            continue
        return np.array(out + [laws.first_max(mrs.residual(p[t], q[t]))])
    return np.array(out + [laws.first_max(q[len(x_draft)])])


def _argmax_draws_law(x_draft, p, q) -> dict:
    return shipped.argmax_last_law(list(x_draft), p, q)


# Sampling made greedy inside the verifier: the draws after the accept tests are argmaxes.
argmax_draws = broken.Bug("argmax_draws", "takes the argmax of the residual and of q[K] where it should sample from them",
                          _argmax_draws_sample, _argmax_draws_law)


def _swapped_residual(p_t, q_t, x):  # norm(max(0, p - q)): the residual with the letters swapped (p where it is all zero)
    excess = np.maximum(np.asarray(p_t, dtype=np.float64) - np.asarray(q_t, dtype=np.float64), 0.0)
    return excess if excess.sum() > 0 else np.asarray(p_t, dtype=np.float64)


# Leviathan's rule read with Chen's letters: accept with min(1, p / q), resample from norm(max(0, p - q)).
letters_swapped = broken.TokenBug(
    "letters_swapped", "p and q swapped: accepts with min(1, p/q) and resamples from norm(max(0, p - q)), Leviathan's "
    "rule (his p is the target) read with Chen's letters (p is the draft)",
    ratio=lambda p, q, x: p[x] / q[x] if q[x] > 0 else np.inf, resample=_swapped_residual)

# The learner-facing diagnosis of each known mistake of a verifier, in the order they are tried.
VERIFY_MISTAKES = [
    (broken.resample_from_q, "resamples from q instead of the residual norm(max(0, q - p)) after a rejection"),
    (broken.no_bonus, "no bonus token: when all K drafts are accepted, one more token must be drawn from q[K]"),
    (broken.bonus_wrong_row, "the bonus token is drawn from q[K-1] (the last draft's row) instead of q[K]"),
    (argmax_draws, "argmax instead of sampling: the token after the accept tests is the argmax of the residual "
                   "(or of q[K]) instead of a draw from it"),
    (broken.greedy_draft_softmax_ratio, "argmax instead of sampling: verifies the argmax of p, not the drafted token"),
    (broken.one_uniform_reused, "reuses one uniform for the accept test and the draw after it (each decision needs "
                                "a fresh rng.random())"),
    (broken.residual_only_rejected_entry, "residual adjusted only at the rejected token (EAGLE #20): it is q with "
                                          "the rejected token removed, not norm(max(0, q - p))"),
    (letters_swapped, "p and q swapped (Leviathan's letters, feifeibear/LLMSpeculativeSampling #36): accepts with "
                      "min(1, p/q) and resamples from norm(max(0, p - q)); here p is the draft, q the target"),
    (broken.ratio_inverted, "p and q swapped in the ratio: accepts with min(1, p/q) instead of min(1, q/p)"),
    (broken.always_accept, "accepts every draft: the accept test min(1, q/p) is missing"),
    (shipped.ArgmaxWhileSampling(), "argmax instead of sampling: both the drafts and the draws are argmaxes "
                                    "(mistral.rs PR #2424)"),
    (shipped.TargetNotWarped(), "the target rows are unwarped before use: verify must use q as handed (vLLM #9834)"),
    (shipped.DraftFilterNotPassed(), "the drafts are redrawn from a filtered p: verify must judge the drafts it is "
                                     "handed with the p it is handed (transformers #47932)"),
]


def _verify_breakpoints(x_draft, p, q) -> list[float]:
    """Every value at which the correct rule or a known mistake can decide differently on these rows: the
    ratios q/p and p/q, and the steps of the inverse CDF of every row they draw from (q[t] without the
    rejected token: the drafted one, or p[t]'s argmax when that is verified instead)."""
    K, V = p.shape
    rows = [*p, *q]
    for t in range(K):
        rows += [np.maximum(q[t] - p[t], 0.0), np.maximum(p[t] - q[t], 0.0)]
        rows += [np.where(np.arange(V) == x, 0.0, q[t]) for x in {int(x_draft[t]), laws.first_max(p[t])}]
    edges = []
    for r in rows:
        if r.sum() > 0:
            edges += list((np.cumsum(r) / r.sum())[:-1])
    with np.errstate(divide="ignore", invalid="ignore"):
        for ratio in (q[:K] / p, p / q[:K]):
            edges += [float(v) for v in ratio.reshape(-1) if np.isfinite(v) and 0 < v < 1]
    return edges


# ---------------------------------------------------------------- check_verify

h, t, e, th, s = F(1, 2), F(1, 4), F(1, 8), F(1, 3), F(1, 16)  # halves, quarters, eighths, thirds, sixteenths
tiny, small = F(1, 2**20), F(1, 512)  # residual entries of about 4e-6 and 0.008 once normalised
# Small cases whose every decision boundary is a simple fraction: the exact tier enumerates each law.
VERIFY_CASES = [
    _case("a rejection then the residual", [0, 1], [[h, t, t, 0], [t, t, t, t]],
          [[t, h, 0, t], [h, e, 0, 3 * e], [e, 3 * e, t, t]]),
    _case("ratio above 1, residual with p and q apart", [0, 0], [[t, 3 * t, 0], [h, t, t]],
          [[h, t, t], [t, t, h], [h, 0, h]]),
    _case("p == q", [1, 2], [[h, t, t], [t, h, t]], [[h, t, t], [t, h, t], [t, t, h]]),
    _case("q(x) = 0 at a drafted token", [0, 2], [[h, h, 0], [th, th, th]], [[0, 3 * t, t], [h, h, 0], [th, th, th]]),
    _case("one-hot rows", [1, 2], [[0, 1, 0], [h, 0, h]], [[t, t, h], [0, 0, 1], [h, t, t]]),
    # max(0, q - p) = [0, 0, 2^-20, 1/512, 1/512, 1/4]: an answer that drops or rounds small entries fails here
    _case("small residual entries beside zeros", [0], [[h, t, e, s, s, 0]],
          [[t - small * 2 - tiny, t, e + tiny, s + small, s + small, t], [t, 0, t, t, t, 0]]),
    # max(0, q - p) = [0, 1/8, 1/8, 0], two equal entries; q[K] ties at its argmax (p == q above has ratios of 1)
    _case("ties: equal residual entries, a tied argmax", [0], [[h, e, e, t]], [[t, t, t, t], [3 * e, 3 * e, t, 0]]),
]
del h, t, e, th, s, tiny, small


def _tokens(out, x_draft: np.ndarray, V: int, check: str, where: str) -> tuple:
    """out as a tuple of ids if it is 1 to K + 1 integer ids in [0, V), else _Fail saying what is wrong."""
    K = len(x_draft)
    try:
        a = np.asarray(out)
    except Exception as e:  # noqa: BLE001
        raise _Fail(check, f"returned {type(out).__name__}, not an array of token ids ({e}; {where})") from None
    if a.ndim != 1:
        raise _Fail(check, f"returned an array of shape {a.shape}; return one 1-D array of token ids ({where})")
    if a.dtype.kind == "f" and np.isnan(a).any():
        raise _Fail(check, f"returned NaN among the token ids {a.tolist()} ({where})")
    if a.dtype.kind not in "iu":
        raise _Fail(check, f"returned {a.tolist()} of dtype {a.dtype}: token ids are integers, e.g. "
                           f"np.array(tokens, dtype=np.int64) ({where})")
    if not 1 <= len(a) <= K + 1:
        raise _Fail(check, f"returned {len(a)} tokens for K = {K}: the accepted drafts plus one token make 1 to "
                           f"K + 1 = {K + 1} ({where})")
    if ((a < 0) | (a >= V)).any():
        raise _Fail(check, f"returned {a.tolist()}: an id outside the vocabulary [0, {V}) ({where})")
    return tuple(int(v) for v in a)  # (a prefix other than the drafts is an outcome the exact law gives 0)


def _law_gap(law: dict, correct: dict, x_draft) -> str:  # the outcome where two laws differ most, in words
    k = max(set(law) | set(correct), key=lambda o: abs(law.get(o, 0.0) - float(correct.get(o, 0))))
    got, want = _pair(law.get(k, 0.0), correct.get(k, 0), _fmt)
    prefix = "" if list(k[:-1]) == list(x_draft[:len(k) - 1]) else ": its first tokens are not the drafts"
    return f"x_draft = {list(x_draft)}: P(output = {list(k)}) is {got} where the exact rule gives {want}{prefix}"


def _law_details(law: dict, case: _Case) -> str:
    """What a law that is not the target's does, in words: the first draft it keeps with the wrong probability,
    and the rarest output the exact rule gives that it never returns (a small residual entry dropped?)."""
    x_draft, K = list(case.x_draft), len(case.x_draft)
    said = []
    for t in range(K):
        reach = sum(v for o, v in law.items() if len(o) > t and list(o[:t]) == x_draft[:t])
        kept = sum(v for o, v in law.items() if len(o) > t + 1 and list(o[:t + 1]) == x_draft[:t + 1])
        ratio = min(F(1), case.q[t][x_draft[t]] / case.p[t][x_draft[t]])
        if reach > TOL and abs(kept / reach - float(ratio)) > TOL:
            got, want = _pair(kept / reach, ratio, _fmt)
            said.append(f"keeps draft {t} (token {x_draft[t]}) with probability {got} where min(1, q/p) = {want}")
            break
    correct = laws.token_call_law(x_draft, case.p, case.q)
    missing = [o for o, v in correct.items() if v > 0 and law.get(o, 0.0) <= TOL]
    if missing:
        o = min(missing, key=lambda o: correct[o])
        said.append(f"never returns {list(o)}, which the exact rule returns with probability {_fmt(correct[o])}"
                    + (" (a small entry of the residual dropped, or rounded to 0?)" if correct[o] < F(1, 100) else ""))
    return "; ".join(said)


def _is_greedy(outputs: list[tuple], cases: list[_Case]) -> bool:
    """Whether every token of every output is an argmax of its position's row of q or of the residual."""
    for out, case in zip(outputs, cases):
        for t, y in enumerate(out):
            rows = [case.q[t]] + ([[max(F(0), b - a) for a, b in zip(case.p[t], case.q[t])]] if t < len(case.p) else [])
            if not any(row[y] == max(row) for row in rows):
                return False
    return True


def _ignores_uniforms(f, limits: Limits, draws: bool) -> str:
    """The diagnosis of a function whose output is the same whatever the uniforms: what it returns instead."""
    outputs = []
    for case in VERIFY_CASES:
        x_draft, p, q = case.arrays()
        where = f"x_draft = {x_draft.tolist()}"
        out = _call(limits, "randomness", f, x_draft.copy(), p.copy(), q.copy(), _Listed([], tail=0.5), where=where)
        outputs.append(_tokens(out, x_draft, p.shape[1], "randomness", where))
    example = f"{list(outputs[0])} for x_draft = {list(VERIFY_CASES[0].x_draft)} whatever the uniforms"
    if _is_greedy(outputs, VERIFY_CASES):
        return (f"decides by argmax and ignores the uniforms: {'they change nothing' if draws else 'it draws none'}, "
                f"and every token it returns is an argmax of q or of the residual ({example}); keep draft x when "
                "rng.random() < q(x)/p(x), and draw the token after the tests from the residual or q[K]")
    drawn = "it draws uniforms and then ignores them" if draws else "it never draws from the rng it is handed"
    return (f"{drawn}, and returns the same tokens every call ({example}): a generator made inside with a fixed "
            "seed, or a rule without randomness?  Draw every uniform with the rng's random()")


def _bug_law(bug, case: _Case) -> dict | None:  # a known mistake's exact law on a case (None if it cannot run there)
    x_draft, p, q = case.arrays()
    try:
        return {k: float(v) for k, v in bug.law([int(x) for x in x_draft], p, q).items()}
    except Exception:  # noqa: BLE001  (a mistake whose law is undefined on these rows does not match)
        return None


def _named(case_laws: dict[str, dict]) -> str:
    """The diagnosis of the first known mistake whose exact law equals the enumerated one on every case, or ''."""
    for bug, label in VERIFY_MISTAKES:
        if all((theirs := _bug_law(bug, case)) is not None and stats.total_variation(case_laws[case.name], theirs) < TOL
               for case in VERIFY_CASES):
            return label
    return ""


def _verify_deterministic(f, limits: Limits) -> None:
    """The same uniforms must give the same tokens: randomness comes from rng alone."""
    # every uniform 0.7 rejects the first draft of case 0 (its residual has two tokens); 0.3 keeps both drafts of
    # case 2 (p == q) and draws the bonus token from a row of three
    for case, u in ((VERIFY_CASES[0], 0.7), (VERIFY_CASES[2], 0.3)):
        x_draft, p, q = case.arrays()
        where = f"x_draft = {x_draft.tolist()}, every uniform {u}"
        seen = {_tokens(_call(limits, "randomness", f, x_draft.copy(), p.copy(), q.copy(), _Listed([], tail=u),
                              where=where), x_draft, p.shape[1], "randomness", where) for _ in range(12)}
        if len(seen) > 1:
            raise _Fail("randomness", f"the same uniforms gave different tokens ({sorted(seen)}; {where}): draw "
                                      "every random number from the rng the function is handed, not from np.random "
                                      "or a new generator")


def _verify_exact(f, limits: Limits) -> str:
    """The exact tier: each case's law over f's uniforms (`uniforms.exact_law`), against `laws.token_call_law`;
    '' if every law was enumerated, else why not."""
    case_laws, wrong, deepest = {}, [], [0]  # deepest: the most uniforms a call drew
    for case in VERIFY_CASES:
        x_draft, p, q = case.arrays()
        check = f"exact law, case '{case.name}'"

        def run(rng, x_draft=x_draft, p=p, q=q, check=check):
            try:
                out = limits.call(f, x_draft.copy(), p.copy(), q.copy(), rng)
            except CONTROL:
                raise
            except Exception as e:  # noqa: BLE001
                raise _Fail(check, f"raised {type(e).__name__}: {e} (x_draft = {x_draft.tolist()}, after the "
                                   f"uniforms {[round(u, 4) for u in rng.drawn]})") from None
            deepest[0] = max(deepest[0], rng.used)
            return _tokens(out, x_draft, p.shape[1], check, f"x_draft = {x_draft.tolist()}")

        try:
            case_laws[case.name] = exact_law(run, _verify_breakpoints(x_draft, p, q))
        except _TooDeep as e:
            return f"{e} (case '{case.name}')"
        if stats.total_variation(case_laws[case.name], laws.token_call_law(list(case.x_draft), case.p, case.q)) > TOL:
            wrong.append((case, check))
    if all(len(law) == 1 for law in case_laws.values()):  # one output a case, whatever the uniforms
        raise _Fail("randomness", _ignores_uniforms(f, limits, draws=deepest[0] > 0))
    if not wrong:
        return ""
    case, check = wrong[0]
    gap = _law_gap(case_laws[case.name], laws.token_call_law(list(case.x_draft), case.p, case.q), case.x_draft)
    label = _named(case_laws)  # a known mistake's exact law, on every case (those that pass included)
    if label:
        raise _Fail(check, f"{label} ({gap})")
    details = _law_details(case_laws[case.name], case)
    raise _Fail(check, f"{gap}{'; it ' + details if details else ''} (no known mistake matches)")


# Two edge cases that need a chosen uniform (the conformance checker's, `specref.proof.conform.chain.edge_checks`).
_ZERO_P = np.array([[0.5, 0.5, 0.0, 0.0]])
_ZERO_Q = np.array([[0.0, 0.5, 0.5, 0.0], [0.25, 0.25, 0.25, 0.25]])
_APART_P = np.array([[0.25, 0.25, 0.25, 0.25]])
_APART_Q = np.array([[0.25 * (1 - 1e-12), 0.25, 0.25, 0.25], [0.1, 0.2, 0.3, 0.4]])


def _verify_edges(f, limits: Limits) -> None:
    name = "edge q(x) = 0, u = 0"
    where = "draft 0 with q(0) = 0, the first uniform 0.0"
    out = _call(limits, name, f, np.array([0]), _ZERO_P.copy(), _ZERO_Q.copy(), _Listed([0.0], tail=0.5), where=where)
    if _tokens(out, np.array([0]), 4, name, where)[0] == 0:
        raise _Fail(name, f"kept a draft the target gives probability 0 when u = 0 ({np.asarray(out).tolist()}): "
                          f"accept iff u < q(x)/p(x), strictly (u <= shipped in {shipped.edge_signature(name).where})")
    name = "edge all-zero residual"
    where = "p and q one rounding apart, the draft rejected: max(0, q - p) is all zero"
    try:
        out = _call(limits, name, f, np.array([0]), _APART_P.copy(), _APART_Q.copy(),
                    _Listed([1 - 2.0 ** -53], tail=0.5), where=where)
        _tokens(out, np.array([0]), 4, name, where)
    except _Fail as e:
        raise _Fail(name, f"{e.diagnosis}: draw from q there, never divide 0 by 0 (shipped in "
                          f"{shipped.edge_signature(name).where})") from None


def _replay(f, case: dict, limits: Limits | None):  # a vector's tokens from f, or what went wrong
    return replay(f, (np.array(case["x_draft"], dtype=np.int64), np.array(case["p"]), np.array(case["q"])),
                  case["uniforms"], limits)


def _vector_tokens(f, limits: Limits) -> tuple[list, list, list]:  # the vectors, f's tokens on them, those that differ
    chosen = _vectors("verify")
    got = [_replay(f, c, limits) for c in chosen]
    return chosen, got, [(c, g) for c, g in zip(chosen, got) if g != c["tokens"]]


def _verify_vectors(f, limits: Limits) -> int:
    """How many vectors give their tokens (all of them), or _Fail; run once the law is exact and passes the chi-square."""
    chosen, got, wrong = _vector_tokens(f, limits)
    if not wrong:
        return len(chosen)
    c, g = wrong[0]
    first = f"{len(wrong)} of {len(chosen)} vectors differ, e.g. '{c['name']}': expected {c['tokens']}, got {g}"
    same = [label for bug, label in VERIFY_MISTAKES if [_replay(bug, c, None) for c in chosen] == got]
    if same:
        raise _Fail("vectors", f"{same[0]} ({first})")
    raise _Fail("vectors", f"{first}; the law is exact (enumerated) and passes the chi-square, but the vectors need "
                           "the uniforms in the documented order: one rng.random() per accept test, then one for the "
                           "residual or bonus token (specref/mrs.py, 'Randomness')")


def _verify_chi_square(f, limits: Limits) -> str:
    case = cases.cases("token")[0]  # the suite's random case: K = 2, V = 4
    K, V = case.p.shape
    check = f"chi-square ({N_CALLS} calls, K = {K}, V = {V}, seed {SEED})"

    def guarded(x_draft, p, q, rng):
        out = _call(limits, check, f, x_draft, p.copy(), q.copy(), rng, where=f"x_draft = {x_draft.tolist()}")
        return _tokens(out, x_draft, V, check, f"x_draft = {x_draft.tolist()}")

    counts = stats.sample_verify(guarded, case.p, case.q, N_CALLS, np.random.default_rng(SEED))
    correct = laws.verify_law(case.p, case.q)
    stat, dof, pvalue = stats.chi_square_gof(counts, correct)
    if pvalue > stats.LEVEL:
        return f"chi-square p = {pvalue:.2g} ({N_CALLS} calls, seed {SEED})"
    case_laws = {bug.name: laws.rows_call_law(bug.law, case.p, case.q) for bug, _ in VERIFY_MISTAKES}
    found = _likeliest(counts, correct, case_laws)
    label = {bug.name: label for bug, label in VERIFY_MISTAKES}.get(found, "")
    what = f"chi2 = {stat:.1f} on {dof} dof, p = {pvalue:.2g} <= {stats.LEVEL:g}"
    raise _Fail(check, f"{label} ({what})" if label else f"the output law is not the target's ({what}; no known "
                                                         "mistake fits the counts)")


def _not_graded_exactly(f, limits: Limits, why: str) -> _Fail:
    """The verdict on a function the exact tier could not follow: it fails, with what the other tiers found."""
    try:
        stat = _verify_chi_square(f, limits)
    except _Fail as e:  # the chi-square alone shows the law is wrong
        return _Fail(e.check, f"{e.diagnosis}; and it is {NOT_EXACT}: {why}")
    try:
        chosen, _, wrong = _vector_tokens(f, limits)
        vectors = (f"but {len(wrong)} of {len(chosen)} vectors differ (documented order of the uniforms: one "
                   "rng.random() per accept test, then one for the token after them)" if wrong else
                   f"and the {len(chosen)} vectors pass")
    except _Unsupported:
        vectors = "and the vectors cannot run either"
    return _Fail("exact law", f"{NOT_EXACT}: {why}; the chi-square alone passes, {stat}, {vectors}, and a "
                              "chi-square proves nothing exactly")


def check_verify(f: Callable) -> Result:
    """Grade f(x_draft [K], p [K, V], q [K+1, V], rng) -> tokens as Chen's Alg. 2, lines 9-14 (checks: module docstring)."""
    def run(limits: Limits) -> str:
        case = cases.cases("token")[0]
        x_draft = np.array([1, 2])
        before = (x_draft.copy(), case.p.copy(), case.q.copy())
        args = (x_draft, case.p.copy(), case.q.copy())
        _not_answered(limits, f, x_draft.copy(), case.p.copy(), case.q.copy(), np.random.default_rng(SEED))
        out = _call(limits, "contract", f, *args, np.random.default_rng(SEED), where="K = 2, V = 4, a real generator")
        _tokens(out, x_draft, case.p.shape[1], "contract", "K = 2, V = 4")
        _unchanged("contract", before, args, ("x_draft", "p", "q"))
        try:
            _verify_deterministic(f, limits)
            skipped = _verify_exact(f, limits)
            _verify_edges(f, limits)
        except _Unsupported as e:
            raise _not_graded_exactly(f, limits, f"it calls {e}, whose draws the grader cannot choose, so the exact "
                                                 "law, the edges and the vectors cannot run") from None
        if skipped:
            raise _not_graded_exactly(f, limits, f"{skipped}, so its law cannot be enumerated (one uniform for "
                                                 "each decision keeps the paths few)")
        stat = _verify_chi_square(f, limits)
        try:
            n_vectors = _verify_vectors(f, limits)
        except _Unsupported as e:
            raise _not_graded_exactly(f, limits, f"it calls {e} on the vectors' rows") from None
        return f"exact law on {len(VERIFY_CASES)} cases, edges u = 0 and all-zero residual, {stat}, {n_vectors} vectors"
    return _grade("verify", run)
