"""The checks' common machinery, the same for chains and trees: levels, the chi-square of one call's outputs and
of whole sequences against their exact laws, the diagnosis that names a known bug from the counts, the replay of
the portable vectors, and the probe that tells whether the checker's uniforms reach a verifier.

What is sampled (which rows, which trees, which loop) is the per-shape modules' (`chain`, `tree`).
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Callable

import numpy as np

from specref.proof import laws, stats, vectors
from specref.proof.conform import globalrng
from specref.proof.verdict import Check

# Family-wise false-alarm rate of one run's chi-square checks (split between them, Bonferroni).  A run reads it here
# when it starts (`run.check`) and the report when it states it.
FAMILY_LEVEL = stats.LEVEL
# A diagnosis needs the counts e^LOG_MARGIN (a million) times likelier under the bug's law than under
# the correct law and under every other bug's, and to fit the bug's law: chi-square p > FIT_LEVEL.
LOG_MARGIN = float(np.log(1e6))
FIT_LEVEL = 1e-6
# Probability given to an outcome a law calls impossible, in the log-likelihood (log 1e-12 = -27.6).
FLOOR = 1e-12
# The largest float64 below 1: a uniform that a test u < ratio passes only when the ratio is at least 1.
U_MAX = 1.0 - 2.0 ** -53
# Whole sequences: the suite's Markov-chain target and draft (laws.markov_pair).
SEQ_V, SEQ_N, SEQ_PROMPT = laws.SEQ_V, laws.SEQ_N, laws.SEQ_PROMPT


# ---------------------------------------------------------------- the diagnosis

def frequency_distance(counts: Counter, law: dict) -> float:
    """The total variation between the observed frequencies (counts / n) and a law: half the L1 distance."""
    n = sum(counts.values())
    return 0.5 * sum(abs(counts.get(k, 0) / n - law.get(k, 0.0)) for k in set(counts) | set(law))


def log_likelihood(counts: Counter, law: dict) -> float:
    """log P(counts | law), up to the multinomial coefficient; an impossible outcome counts as probability FLOOR."""
    return float(sum(c * np.log(max(law.get(k, 0.0), FLOOR)) for k, c in counts.items()))


def _diagnose(counts: Counter, correct: dict, signature_laws: dict) -> tuple[str, dict]:
    """(the known bug the counts point to, or "ambiguous: ..." or "", each bug's log-likelihood)."""
    ll = {name: log_likelihood(counts, law) for name, law in signature_laws.items()}
    if not ll:
        return "", ll
    ranked = sorted(ll, key=ll.get, reverse=True)
    best = ranked[0]
    others = max([ll[n] for n in ranked[1:]] + [log_likelihood(counts, correct)])
    fits = stats.chi_square_gof(counts, signature_laws[best])[2] > FIT_LEVEL
    if ll[best] - others >= LOG_MARGIN and fits:
        return best, ll
    near = [n for n in ranked if ll[best] - ll[n] < LOG_MARGIN]
    if len(near) > 1 and ll[best] - log_likelihood(counts, correct) >= LOG_MARGIN:
        return "ambiguous: " + " or ".join(near[:3]), ll
    return "", ll


def _name_the_bug(check: Check, counts: Counter, law: dict, bug_laws: dict, signatures: list) -> dict:
    """Diagnose a failing check from its counts: the known bug (laws: name -> exact law) they point to goes into
    check.bug and check.diagnosis.  Returns each bug's log-likelihood, for the run's summary."""
    found, scores = _diagnose(counts, law, bug_laws)
    by_name = {s.name: s for s in signatures}
    if found in by_name:
        check.bug = found
        check.diagnosis = (f"looks like {found}: {by_name[found].about} (total variation "
                           f"{frequency_distance(counts, bug_laws[found]):.3f}; from the correct law "
                           f"{frequency_distance(counts, law):.3f})")
    else:
        evidence = forbidden(counts, law) or largest_deviation(counts, law)
        check.diagnosis = f"{found}; {evidence}" if found else NO_BUG_FITS + evidence
    return scores


# ---------------------------------------------------------------- outputs the law forbids

def left_the_law(output, law: dict) -> str:
    """Where `output` (a tuple of tokens) leaves the support of `law`: the first token that no output of positive
    probability has there after the same tokens (a token before the last must be followed as it is; the last must
    end an output of the same length)."""
    if not isinstance(output, tuple) or not output:
        return ""
    possible = [k for k, v in law.items() if v > 0 and isinstance(k, tuple)]
    n = len(output)
    for i in range(n):
        if i < n - 1 and any(len(k) > i + 1 and k[:i + 1] == output[:i + 1] for k in possible):
            continue
        where = "the last token" if i == n - 1 else f"token {i + 1} of {n}"
        return f", leaving the law at {where} ({output[i]} after {list(output[:i])})"
    return ""


def forbidden(counts: Counter, law: dict) -> str:
    """'' if every counted output has positive probability under `law`, else which outputs do not: how many, the most
    frequent with its count and where it leaves the law."""
    bad = Counter({k: c for k, c in counts.items() if not law.get(k, 0.0) > 0.0})
    if not bad:
        return ""
    (first, count), n = bad.most_common(1)[0], sum(counts.values())
    shown = list(first) if isinstance(first, tuple) else first
    more = f"; {len(bad) - 1} other forbidden outputs, {sum(bad.values()) - count} times" if len(bad) > 1 else ""
    return (f"{sum(bad.values())} of {n} outputs have probability 0 under the exact law: {shown} seen {count} times"
            f"{left_the_law(first, law)}{more}")


def largest_deviation(counts: Counter, law: dict) -> str:
    """The output whose count is furthest from the law's expectation (in standard deviations), with both counts."""
    n = sum(counts.values())
    def z(k):
        expected = n * float(law.get(k, 0.0))
        return abs(counts.get(k, 0) - expected) / np.sqrt(max(expected, 1.0))
    k = max(set(counts) | {k for k, v in law.items() if v > 0}, key=z)
    shown = list(k) if isinstance(k, tuple) else k
    return f"the output {shown} seen {counts.get(k, 0)} times in {n} where the exact law expects " \
           f"{n * float(law.get(k, 0.0)):.1f}"


# A failing check's diagnosis when no known bug's law fits its counts: this, then the evidence.
NO_BUG_FITS = "no known bug's law fits: "


# ---------------------------------------------------------------- chi-square checks

def law_check(name: str, sample: Callable[[], tuple[Counter, dict]], bug_laws: Callable[[], dict], signatures: list,
              level: float, n: int, about: str = "") -> tuple[Check, dict]:
    """The chi-square check `name` of the counts `sample()` returns against the exact law it returns with them
    (n: calls sampled; about: said after the statistic); if it fails, the known bug among `signatures` (bug_laws():
    name -> exact law) the counts point to.  Returns (the check, each bug's log-likelihood if it failed, else {})."""
    start = time.perf_counter()
    counts, law = sample()
    stat, dof, pvalue = stats.chi_square_gof(counts, law)
    impossible = forbidden(counts, law)
    statistic = impossible if impossible else f"chi2={stat:.1f} dof={dof}"
    check = Check(name, "statistical", pvalue > level, f"{statistic}{about}", pvalue, level, n)
    scores = {}
    if not check.passed:
        scores = _name_the_bug(check, counts, law, bug_laws(), signatures)
    check.seconds = time.perf_counter() - start
    return check, scores


def sequences_check(name: str, loop: Callable, setting: str, level: float, rng: np.random.Generator,
                    runs: int) -> Check:
    """The chi-square check `name` of `runs` whole sequences (loop(target, draft) -> run(rng) -> one sequence, on the
    suite's Markov-chain target and draft) against the exact law of the target's sequences: what plain sampling
    gives.  setting: the loop's trees and target, for the detail."""
    start = time.perf_counter()
    target, draft = laws.markov_pair()
    law = laws.sequence_law(target, SEQ_PROMPT, SEQ_N)  # the target's: what plain sampling gives
    counts = stats.sample_sequences(loop(target, draft), runs, len(SEQ_PROMPT), rng)
    stat, dof, pvalue = stats.chi_square_gof(counts, law)
    statistic = forbidden(counts, law) or f"chi2={stat:.1f} dof={dof}"
    return Check(name, "statistical", pvalue > level, f"{statistic} (all {SEQ_V ** SEQ_N} sequences "
                 f"of {SEQ_N} tokens, {setting})", pvalue, level, runs, seconds=time.perf_counter() - start)


# ---------------------------------------------------------------- the exact tier's common parts

def replayed_vectors_check(verifier, function: str, chosen: list[dict], args: Callable, recorded: str,
                           bugs: list, documented: str) -> Check:
    """Replay the vectors `chosen` of `function` on `verifier` with their listed uniforms: f(*args(case), rng) must
    give case[recorded] and draw every uniform; if some differ, the `bugs` that give the same outcomes on every
    vector are the diagnosis (`documented`: where the order of uniforms is written down)."""
    start = time.perf_counter()

    def outcomes(f) -> list:  # per vector: the tokens, or what went wrong
        got = []
        for case in chosen:
            rng = vectors.ListedUniforms(case["uniforms"])
            try:
                tokens = [int(y) for y in f(*args(case), rng)]
                got.append(tokens if rng.used == len(rng.uniforms) else
                           f"drew {rng.used} of the {len(rng.uniforms)} listed uniforms")
            except Exception as e:  # noqa: BLE001  (a crash, or a different number of uniforms, is an outcome)
                got.append(f"raised {type(e).__name__}")
        return got

    got = outcomes(verifier)
    wrong = [(c["name"], c[recorded], g) for c, g in zip(chosen, got) if g != c[recorded]]
    loose = {c["name"]: unnormalised(c) for c in chosen if unnormalised(c)}
    check = Check(f"vectors ({function})", "exact", not wrong, f"{len(chosen) - len(wrong)} of {len(chosen)} vectors give "
                  "the recorded tokens" + (f"; first: {wrong[0][0]} expected {wrong[0][1]}, got {wrong[0][2]}"
                                           if wrong else ""), samples=len(chosen))
    if wrong:
        same = [b.name for b in bugs if outcomes(b) == got]
        only_loose = all(name in loose for name, _, _ in wrong)
        check.diagnosis = (f"the same tokens as {' and '.join(same)} on every vector" if same else
                           "only vectors whose rows do not sum to 1 give other tokens ("
                           + "; ".join(f"{name}: {loose[name]}" for name, _, _ in wrong) +
                           "): code that renormalises p or q gives other tokens there and may still be right; the "
                           "law checks decide" if only_loose else
                           "no known bug gives these tokens (if the law checks pass, the uniforms may be drawn in "
                           f"another order than {documented} documents)")
    check.seconds = time.perf_counter() - start
    return check


def unnormalised(case: dict) -> str:
    """'' if a vector's p and q rows each sum to 1 (to 1e-9), else which do not and their sums."""
    out = []
    for key in ("p", "q"):
        if key in case:
            sums = np.asarray(case[key], dtype=np.float64).sum(axis=-1).reshape(-1)
            if np.any(np.abs(sums - 1.0) > 1e-9):
                out.append(f"{key}'s rows sum to {', '.join(f'{s:.9g}' for s in sums)}")
    return " and ".join(out)


def probe_injectable(verifier, args: tuple) -> str:
    """'' if the verifier, called with `args` and injected uniforms (an rng that has only random(), which the global
    generators also draw from: `adapt`), draws at least one of them and nothing else from it, else why the exact
    tier is not run."""
    uniforms = vectors.ListedUniforms([], tail=0.5)
    try:
        verifier(*args, uniforms)
    except (AttributeError, TypeError) as e:
        return f"the verifier uses more of the generator than random() ({type(e).__name__}: {e})"
    except globalrng.NotDriven as e:
        return f"the verifier draws from a global generator in a way the checker cannot drive ({e})"
    except Exception:  # noqa: BLE001  (another error is for the checks to report)
        return ""
    if uniforms.used == 0:
        return ("the verifier drew none of the checker's uniforms: its randomness comes from a generator the checker "
                "does not reach (one it makes itself, one handed a seed, or a name imported before the run such as "
                "`from random import random`)")
    return ""
