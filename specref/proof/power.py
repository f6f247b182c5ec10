"""Power and sample size of the conformance checker's chi-square checks, from exact laws.

A check draws n outcomes and rejects when Pearson's chi-square against the correct law, over
`stats.pooled_bins(correct, n)`, exceeds the critical value at its level (or when an outcome the
correct law calls impossible is seen).  If the outcomes follow a bug's law instead, the statistic
is approximately non-central chi-square with dof = bins - 1 and noncentrality

    lambda = n * sum over the bins of (p_bug(bin) - p_0(bin))^2 / p_0(bin),

so its power is ncx2.sf(critical value, dof, lambda), and an outcome impossible under the correct
law (mass eps under the bug) adds 1 - (1 - eps)^n.  A run of the checker fails if any of its
independent checks does; the sequence checks are left out here, so a run's power computed here is a
lower bound and its sample size for 95% power an upper bound.

Whether a check of a given size tests anything at all (`counts_as_test`): at least two bins, and at
least half of the known bugs it sees at its default size seen at that size.  It reads a check's
exact laws, (default n, correct law, the known bugs' laws): `check_laws` gives them for a chain
verifier's run (the sequence checks included through `laws.speculative_sequence_law`); the tree
checks' come from their exact laws in `specref.proof.conform.tree`.
"""

from __future__ import annotations

import functools
import math

from scipy import stats as sps

from specref.proof import cases, laws, stats
from specref.proof.bugs import shipped
from specref.proof.stats import total_variation


def noncentrality(bug: dict, correct: dict, n: int) -> tuple[float, int, float]:
    """(lambda, dof, eps) of the chi-square check of n draws of `bug` against `correct` (see the module docstring)."""
    bins = stats.pooled_bins(correct, n)
    lam = 0.0
    for b in bins:
        p0 = sum(correct[k] for k in b)
        p1 = sum(bug.get(k, 0.0) for k in b)
        lam += (p1 - p0) ** 2 / p0
    eps = sum(v for k, v in bug.items() if correct.get(k, 0.0) <= 0.0 and v > 0)
    return n * lam, len(bins) - 1, float(eps)


def check_power(bug: dict, correct: dict, n: int, level: float) -> float:
    """P(the chi-square check of n draws rejects at `level`) when the draws follow `bug`."""
    lam, dof, eps = noncentrality(bug, correct, n)
    if dof < 1:
        chi = 0.0
    else:
        crit = sps.chi2.isf(level, dof)
        chi = float(sps.ncx2.sf(crit, dof, lam)) if lam > 0 else float(sps.chi2.sf(crit, dof))
    return 1.0 - (1.0 - chi) * math.exp(n * math.log1p(-eps)) if eps < 1 else 1.0


def smallest_n(power_at, target: float = 0.95, n_max: float = 1e12) -> float:
    """The smallest n (to within 1%) with power_at(n) >= target, by doubling then bisection; inf beyond n_max."""
    lo, hi = 1, 16
    while power_at(hi) < target:
        lo, hi = hi, hi * 2
        if hi > n_max:
            return math.inf
    while hi - lo > max(1, lo // 100):
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if power_at(mid) >= target else (mid, hi)
    return float(hi)


# ---------------------------------------------------------------- the checker's checks

def _checks(algorithm: str) -> list[tuple[str, cases.Case, bool]]:  # (check name, case, count marginal?)
    out = [(f"one call: {c.name}", c, False) for c in cases.cases(algorithm)]
    return out + [("accepted count (K=4, V=5)", cases.accepted_count_case(), True)]


@functools.lru_cache(maxsize=None)
def _correct_laws(algorithm: str) -> tuple[dict, ...]:  # per one-call and accepted-count check: the correct law
    return tuple(laws.rows_call_law(cases.CORRECT[algorithm], case.p, case.q) for _, case, _ in _checks(algorithm))


@functools.lru_cache(maxsize=None)
def bug_laws(bug, algorithm: str) -> tuple[tuple[str, int, dict, dict], ...]:
    """Per chi-square check of the checker (the sequence checks aside): (name, default n, correct law, bug's law)."""
    out = []
    for (name, case, marginal), correct in zip(_checks(algorithm), _correct_laws(algorithm)):
        law = laws.rows_call_law(bug.law, case.p, case.q)
        if marginal:
            correct, law = cases.count_marginal(correct), cases.count_marginal(law)
        out.append((name, case.n, correct, law))
    return tuple(out)


def run_power(bug, algorithm: str, samples: dict | None = None, scale: float = 1.0,
              level: float | None = None) -> float:
    """P(a run of the checker fails on bug's single-call form), from its one-call and accepted-count checks.

    samples: check name -> n (default: each check's default n times `scale`); level: each check's level
    (default FAMILY_LEVEL / 11, the run's Bonferroni share).  Checks missing from `samples` are left out."""
    level = stats.LEVEL / 11 if level is None else level
    miss = 1.0
    for name, n0, correct, law in bug_laws(bug, algorithm):
        n = max(1, round(n0 * scale)) if samples is None else samples.get(name)
        if n:
            miss *= 1.0 - check_power(law, correct, n, level)
    return 1.0 - miss


def run_scale_for_power(bug, algorithm: str, target: float = 0.95, level: float | None = None) -> float:
    """The factor on every check's default n (the checker's `scale`) that gives a run `target` power; inf if none."""
    n = smallest_n(lambda m: run_power(bug, algorithm, scale=m / 1000, level=level), target, n_max=1e10)
    return n / 1000


def best_check(bug, algorithm: str, level: float | None = None) -> tuple[str, float]:
    """(the check that needs the fewest draws for 95% power alone, that n; inf if none ever does)."""
    level = stats.LEVEL / 11 if level is None else level
    best = ("", math.inf)
    for name, _, correct, law in bug_laws(bug, algorithm):
        if total_variation(law, correct) > 0:
            n = smallest_n(lambda m: check_power(law, correct, m, level), n_max=1e10)
            if n < best[1]:
                best = (name, n)
    return best


def row(entry, level: float | None = None) -> dict:
    """One line of the power table for a `shipped.Shipped` entry: largest total variation over the checker's
    cases, its case, the run's power at the default sizes, the scale and the best single check for 95% power."""
    tvs = [(total_variation(law, correct), name) for name, _, correct, law in bug_laws(entry.bug, entry.algorithm)]
    tv, where = max(tvs)
    name, n = best_check(entry.bug, entry.algorithm, level)
    return {"signature": entry.name, "where": entry.where, "tier": entry.tier, "tv": tv, "tv_check": where,
            "power_default": run_power(entry.bug, entry.algorithm, level=level),
            "scale_95": run_scale_for_power(entry.bug, entry.algorithm, level=level), "best_check": name,
            "best_n_95": n}


# ---------------------------------------------------------------- does a check of this size test anything?
#
# A check run with fewer draws than its default (the checker's `scale` below 1) pools more outcomes into
# one bin.  With a single bin its statistic is 0 whatever the law; with a few it may still see nothing the
# check is there for.  A check counts as a test when its bins leave at least one degree of freedom and it
# sees (rejects with power >= SEES) at least half of the known bugs that it sees at its default size.

SEES = 0.95  # a check sees a law when it rejects it with at least this power


def sees(correct: dict, laws, n: int, level: float) -> int:
    """How many of `laws` a chi-square check of n draws against `correct` at `level` rejects with power >= SEES."""
    return sum(check_power(law, correct, n, level) >= SEES for law in laws)


def sequence_law(law_given_drafts, K: int) -> dict:
    """The law of the sequence checks' SEQ_N tokens (laws.markov_pair, SEQ_PROMPT, K drafts a call), given a call's."""
    target, draft = laws.markov_pair()
    return laws.speculative_sequence_law(law_given_drafts, target, draft, laws.SEQ_PROMPT, laws.SEQ_N, K)


@functools.lru_cache(maxsize=None)
def check_laws(algorithm: str, bugs: tuple) -> dict:
    """Every chi-square check of a chain verifier's run (the sequence checks too): name -> (default n, correct law,
    the laws of `bugs`), each bug with its exact call law (the chain part's known bugs, `conform.chain.SIGNATURES`)."""
    out = {}
    for i, ((name, case, marginal), correct) in enumerate(zip(_checks(algorithm), _correct_laws(algorithm))):
        out[name] = (case.n, cases.count_marginal(correct) if marginal else correct,
                     tuple(bug_laws(bug, algorithm)[i][3] for bug in bugs))
    target, _ = laws.markov_pair()
    correct = laws.sequence_law(target, laws.SEQ_PROMPT, laws.SEQ_N)
    for K in cases.SEQ_K:
        out[f"sequences K={K}"] = (cases.N_SEQUENCES, correct, tuple(sequence_law(bug.law, K) for bug in bugs))
    return out


def counts_as_test(laws: tuple, n: int, level: float, full: int | None = None) -> bool:
    """Whether a check of n draws with these exact laws, (default n, correct law, the known bugs' laws), tests
    anything (see above): at least two bins, and at least half the known bugs it sees at its default size seen at
    this one (full: how many that is, if already counted)."""
    n_full, correct, bug_laws = laws
    if len(stats.pooled_bins(correct, n)) < 2:
        return False
    if n >= n_full:
        return True
    full = sees(correct, bug_laws, n_full, level) if full is None else full
    return 2 * sees(correct, bug_laws, n, level) >= full


def untested(laws: tuple, n: int, level: float) -> tuple[str, float]:
    """('', 0) if a check of n draws with these exact laws counts as a test; else (why not, the smallest n at which
    it does)."""
    n_full, correct, bug_laws = laws
    full = sees(correct, bug_laws, n_full, level)
    if counts_as_test(laws, n, level, full):
        return "", 0.0
    needs = smallest_n(lambda m: float(counts_as_test(laws, m, level, full)), target=1.0, n_max=1e10)
    bins = len(stats.pooled_bins(correct, n))
    if bins < 2:
        why = f"its {n} draws pool every outcome into one bin (dof 0): its chi-square is 0 whatever the law"
    else:
        why = (f"its {bins} bins at {n} draws see {sees(correct, bug_laws, n, level)} of the "
               f"{full} known bugs it sees at its default {n_full} draws "
               f"(power >= {SEES:.0%}): fewer than half")
    return why, needs


def caught(algorithm: str, samples: dict, level: float, exact_ran: set[str]) -> tuple[list[str], list[str]]:
    """(shipped signatures a run with these per-check samples catches with >= 95% power, the others with why).

    exact_ran: the names of the exact-tier checks that ran (an edge case is caught by its check for certain)."""
    yes, no = [], []
    for s in shipped.GALLERY:
        if s.algorithm != algorithm:
            continue
        if s.edge_check:
            (yes if s.edge_check in exact_ran else no).append(
                f"{s.name} ({s.edge_check}{'' if s.edge_check in exact_ran else ': did not run'})")
            continue
        pw = run_power(s.bug, algorithm, samples, level=level)
        (yes if pw >= 0.95 else no).append(f"{s.name} ({pw:.0%})")
    return yes, no
