"""Conformance check for anyone's speculative-sampling verifier: the suite's proofs pointed at other code.

    from specref.proof import conform
    report = conform.check(my_verify)            # or conform.check(f, conform.Adapter(log_probs=True), ...)
    assert report.passed, report.text()
    report = conform.check(my_verify_tree, algorithm="tree-mss")   # a tree verifier (see below)

or from a shell: `python -m specref conform MODULE:FUNCTION [options]`.

The contract is `specref.mrs.verify`'s: `verify(x_draft [K], p [K, V], q [K+1, V], rng) -> tokens`,
the accepted prefix of the drafts plus one more token, with p the draft rows the drafts were drawn
from and q the target rows (Chen's letters: p = draft, q = target).  `Adapter` maps the common
other shapes onto it (a batch dimension, log-probabilities, a seed or a torch generator instead of
a NumPy one, a function that returns the number accepted and the extra token); anything else
takes a wrapper of a few lines.

What runs, in two tiers:
- exact, when the verifier lets uniforms be injected (it takes an object whose random() returns
  them): the portable vectors of `specref/proof/mrs_vectors.json` (same uniforms in the documented
  order -> same tokens), and two edge cases that need a chosen uniform: q(x) = 0 is not accepted
  even with u = 0, and a rejection whose residual max(0, q - p) is all zero (p and q one rounding
  apart) yields a token of the vocabulary (vLLM's advisory GHSA-8wr5-jm2h-8r4f);
- statistical, always: chi-square goodness of fit of the output of one call against its exact
  law on the suite's random, sharp and degenerate cases and a large vocabulary, of the number of
  accepted drafts, and of whole sequences of `speculative_sampling` against a Markov-chain
  target's exact law; with checks on every output seen (1 <= length <= K + 1, the drafts as
  prefix, ids in [0, V), q(x) = 0 never kept) and p == q over a large vocabulary (no NaN, no crash,
  every draft kept).

False alarms: the chi-square checks share one family-wise level, FAMILY_LEVEL = 1e-3
(`stats.LEVEL`): each of the m checks runs at FAMILY_LEVEL / m (Bonferroni), so a correct verifier
fails a whole run with probability at most 1e-3 for a random seed.  The other checks cannot fail a
correct verifier.  The seed is fixed (default 0), so a run is reproducible;
`python3 -m tools.conform_false_alarm` measures the rate over fresh seeds.

Tree verifiers (`check(f, algorithm="tree-topk" | "tree-mss" | "tree-rrs")`, or `check_tree`): the contract
of `mrs_tree.verify_tree_topk`, `verify_tree_mss` and `verify_tree_rrs`, (tokens [N], parents [N], p [N+1, V],
q [N+1, V], rng) -> the accepted path and one more token.  The checker draws every tree itself, the way
the algorithm assumes (specref.proof.tree.ALGORITHMS[...]: the draft's top-k, i.i.d. children, children
without replacement in drawing order), and runs the same tiers: the vectors of tree_vectors.json and
three edge cases with chosen uniforms (u = 0 at a child with q = 0, a ratio of exactly 1 at
u = 1 - 2^-53, an all-zero residual); chi-square of one call against its exact law, the tree's drawing
included, on four tree cases, and of whole sequences of a loop with trees (2x2 trees, a chain of 3),
six checks at FAMILY_LEVEL / 6; every output's path along the tree's edges; the diagnosis names the
algorithm's known bugs (tree.ALGORITHMS[...].bugs).

Too few samples: a run with `scale` below 1 pools more outcomes into one bin.  A chi-square check
that found nothing wrong but whose bins leave no degree of freedom, or that sees fewer than half
of the known bugs it sees at its default size (`power.counts_as_test`), is reported as not tested,
with the samples from which it counts as a test; the run is then INCOMPLETE (`report.passed` is
false, the command's exit status 3), never a pass, and the coverage line leaves the check out.

Diagnosis: when a one-call check fails, its counts are compared with the exact laws of known bugs
(`SIGNATURES`: the `broken.Bug`s of `specref.proof.bugs.broken` and `lossy.LOSSY`, and the other
algorithm).  The bug under which the counts are most likely names the failure if it is more likely
than the correct law and than every other bug by a factor of at least e^LOG_MARGIN and the counts
also fit it (chi-square p above FIT_LEVEL); the total variation to it and to the correct law is
printed beside it.  (Total variation alone cannot tell a bug that adds a few impossible outcomes
from the correct law; the likelihood can.)  A failing vector is compared with the same bugs' tokens
on the vectors.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Callable

import numpy as np

from specref import mrs, mrs_tree, sampling, trees
from specref.proof import pipeline, power, stats, tree, tree_vectors, vectors
from specref.proof.bugs import broken, lossy, shipped
from specref.proof.cases import (CORRECT, LARGE_V, N_CALLS, N_LARGE_V, N_SEQUENCES, SEQ_K, Case,  # noqa: F401
                                 accepted_count_case, cases)
from specref.proof.cases import (TREE_N_SEQUENCES, TREE_SEQ_WIDTHS, TreeCase, TreeSetting, tree_call_law,  # noqa: F401
                                 tree_cases)
from specref.proof.cases import count_marginal as _count_marginal
from specref.proof.verdict import Check, ContractViolation, Limits, Stop, TimeLimit, Verdict, not_tested  # noqa: F401

# Family-wise false-alarm rate of one run's chi-square checks (split between them, Bonferroni).
FAMILY_LEVEL = stats.LEVEL
# A diagnosis needs the counts e^LOG_MARGIN (a million) times likelier under the bug's law than under
# the correct law and under every other bug's, and to fit the bug's law: chi-square p > FIT_LEVEL.
LOG_MARGIN = float(np.log(1e6))
FIT_LEVEL = 1e-6
# Probability given to an outcome a law calls impossible, in the log-likelihood (log 1e-12 = -27.6).
FLOOR = 1e-12
ALGORITHMS = ("token", "block")
# Tree verifiers (`mrs_tree.verify_tree_*`'s contract), each checked on trees drawn its way: `check_tree`.
TREE_ALGORITHMS = tuple(tree.ALGORITHMS)  # "tree-topk", "tree-mss", "tree-rrs"
# What a run checks its function as, in the report's first line.
CHECKED_AS = {"token": "token-level verification", "block": "block verification",
              "tree-topk": "tree verification, deterministic top-k children (tree-topk)",
              "tree-mss": "tree verification, i.i.d. children (tree-mss, SpecInfer)",
              "tree-rrs": "tree verification, children without replacement (tree-rrs)"}
# Time limits: a verdict within a stated time whatever the verifier does.  Each call of the verifier may
# take CALL_LIMIT seconds and a whole run RUN_LIMIT seconds (`check`'s call_limit and time_limit); a call
# that passes either ends the run with a failing "time limit" check.  A run of a NumPy verifier takes
# under two minutes (docs/conformance.md), transformers' PyTorch one about ten.
CALL_LIMIT = 10.0
RUN_LIMIT = 1800.0


# ---------------------------------------------------------------- the adapter

@dataclass(frozen=True)
class Adapter:
    """How to call a verifier whose signature differs from `mrs.verify`'s; the defaults are verify's own."""

    batch: bool = False  # takes x_draft [1, K], p [1, K, V], q [1, K+1, V] and returns [1, n] (or (counts [1], tokens [1]))
    log_probs: bool = False  # takes log p and log q (log 0 = -inf) instead of probabilities
    rng: str | Callable = "generator"  # "generator": an object with .random(); "seed": an int; "none": no rng
    # argument (the function draws its own); or a callable seed -> the function's generator (a torch.Generator)
    returns: str = "tokens"  # "tokens": [n] accepted drafts + one; "count_and_token": (number accepted, extra token)
    array: Callable = np.asarray  # applied to each array argument (for example torch.from_numpy)

    def __post_init__(self):
        if not (callable(self.rng) or self.rng in ("generator", "seed", "none")):
            raise ValueError(f"Adapter.rng must be 'generator', 'seed', 'none' or a callable seed -> generator, got {self.rng!r}")
        if self.returns not in ("tokens", "count_and_token"):
            raise ValueError(f"Adapter.returns must be 'tokens' or 'count_and_token', got {self.returns!r}")

    @property
    def injectable(self) -> bool:
        """Whether the checker's own uniforms can reach the function (it is handed the rng object itself)."""
        return self.rng == "generator"


def _flat(value) -> np.ndarray:  # a NumPy array, a torch tensor, a list, a scalar -> 1-D array
    if hasattr(value, "detach"):  # a torch tensor: np.asarray needs it on the CPU, without grad
        value = value.detach().cpu()
    return np.asarray(value).reshape(-1)


def _rng_argument(adapter: Adapter, rng) -> list:
    """What the function takes last, as `adapter.rng` says: [rng], [a seed drawn from it], [its generator], or []."""
    if callable(adapter.rng):
        return [adapter.rng(int(rng.integers(2**63)))]
    if adapter.rng == "seed":
        return [int(rng.integers(2**63))]
    return [rng] if adapter.rng == "generator" else []


def adapt(function: Callable, adapter: Adapter = Adapter()) -> Callable:
    """`function` as a verifier with `mrs.verify`'s signature: (x_draft [K], p [K, V], q [K+1, V], rng) -> tokens [n]."""
    def verify(x_draft, p, q, rng):  # [K], [K, V], [K+1, V] -> [n]
        x_draft = np.asarray(x_draft, dtype=np.int64)
        if adapter.log_probs:
            with np.errstate(divide="ignore"):
                p, q = np.log(p), np.log(q)  # log 0 = -inf
        if adapter.batch:
            x_draft, p, q = x_draft[None], p[None], q[None]  # [1, K], [1, K, V], [1, K+1, V]
        out = function(adapter.array(x_draft), adapter.array(p), adapter.array(q), *_rng_argument(adapter, rng))
        if adapter.returns == "count_and_token":
            n, extra = out
            n = int(_flat(n)[0])
            tokens = np.append(np.asarray(x_draft).reshape(-1)[:n], _flat(extra)[:1])
        else:
            tokens = _flat(out[0] if adapter.batch and not np.isscalar(out) and len(out) == 1 else out)
        return tokens

    verify.__name__ = getattr(function, "__name__", "verify")
    return verify


# ---------------------------------------------------------------- the known bugs

# Each is a `broken.Bug`: its sampler (for the vectors' comparison and the power tests) and its exact
# law for fixed drafts, law(x_draft, p, q) -> {output: probability}, summed over the drafts by
# stats.rows_call_law.  Besides the bugs and the lossy rules, each exact verifier is a known way to be
# wrong about the other.
# (Defined in specref.proof.bugs.shipped, whose gallery uses TOKEN_LEVEL for vllm-ascend #7807.)
TOKEN_LEVEL, BLOCK = shipped.TOKEN_LEVEL, shipped.BLOCK
# The laws a verifier checked as token-level, or as block verification, is compared with when it fails.
SIGNATURES = {"token": [*broken.BROKEN.values(), *lossy.LOSSY, BLOCK],
              "block": [*broken.BROKEN_BLOCK.values(), TOKEN_LEVEL, *lossy.LOSSY]}
# The checker's power is measured on every law it can name, through that law's own sampler checked
# as each algorithm whose diagnosis knows it ("name/algorithm" -> (bug, algorithm)):
# tests/proof/test_conform.py and `python3 -m tools.conform_false_alarm`.
KNOWN_BUGS = {f"{bug.name}/{algorithm}": (bug, algorithm) for algorithm in ALGORITHMS for bug in SIGNATURES[algorithm]}
# The one-call diagnosis also knows the single-call forms of the bugs that shipped (specref.proof.bugs.shipped,
# docs/shipped_bugs.md; those already among SIGNATURES once); the exact-tier edge checks name the shipped
# edge-case bugs (shipped.edge_signature) in the run's diagnosis.
DIAGNOSED = {a: SIGNATURES[a] + [b for b in shipped.signatures(a) if b not in SIGNATURES[a]] for a in ALGORITHMS}


def total_variation(counts: Counter, law: dict) -> float:
    """Half the L1 distance between the observed frequencies and a law."""
    n = sum(counts.values())
    return 0.5 * sum(abs(counts.get(k, 0) / n - law.get(k, 0.0)) for k in set(counts) | set(law))


# Whole sequences: the suite's Markov-chain target and draft (stats.markov_pair), K = 2 and 3.
SEQ_V, SEQ_N, SEQ_PROMPT = stats.SEQ_V, stats.SEQ_N, stats.SEQ_PROMPT


# ---------------------------------------------------------------- the report

@dataclass
class Report(Verdict):
    """Every check of one run, and what the run's false-alarm rate is."""

    verifier: str
    algorithm: str
    seed: int
    checks: list[Check] = field(default_factory=list)
    seconds: float = 0.0
    diagnosis: str = ""
    scale: float = 1.0  # the run's factor on every statistical check's default samples

    def text(self) -> str:
        m = sum(1 for c in self.checks if c.level is not None)
        head = [f"conformance of {self.verifier} as {CHECKED_AS[self.algorithm]} (seed {self.seed})",
                f"chi-square checks: {m}, each at level {FAMILY_LEVEL:g} / {m}: a correct verifier fails this run "
                f"with probability at most {FAMILY_LEVEL:g}; the other checks never fail a correct verifier"]
        lines = head + [c.line() for c in self.checks]
        lines.append(f"{self.verdict()} in {self.seconds:.0f} s")
        if self.untested:
            lines.append(self.untested_line())
        if self.diagnosis:
            lines.append(f"diagnosis: {self.diagnosis}")
        coverage = self.coverage()
        if coverage:
            lines.append(coverage)
        return "\n".join(lines)

    __str__ = text

    def untested_line(self) -> str:
        """Which checks tested nothing at this run's sizes, and the scale at which all of them would."""
        names = ", ".join(c.name for c in self.untested)
        scales = [c.needs / c.samples * self.scale for c in self.untested if c.needs and c.samples]
        if not scales or np.isinf(max(scales)):
            return f"not tested at these sample sizes: {names}"
        they = "all of them count" if len(self.untested) > 1 else "it counts"
        return f"not tested at these sample sizes: {names}; {they} as tests from scale {_round_up(max(scales))} " \
               f"(this run: {self.scale:g})"

    def coverage(self) -> str:
        """Which bugs that shipped (specref.proof.bugs.shipped) a run of these sample sizes catches with at least 95% power:
        the edge cases when the exact tier ran, the others by `power.run_power` from exact laws (sequences left out).
        A check that tested nothing (`untested`) counts for nothing."""
        stat = [c for c in self.checks if c.tier == "statistical" and c.samples and c.level]
        if not stat:
            return ""
        exact_ran = {c.name for c in self.checks if c.tier == "exact" and c.passed is not None}
        counted = {c.name: c.samples for c in stat if not c.untested}
        unseen = [c.name for c in stat if c.untested]
        if self.algorithm in TREE_ALGORITHMS:  # the known bugs of specref/proof/tree.py, every check counted
            edges = {bug for check, bug in TREE_EDGE_BUGS.items() if check in exact_ran}
            yes, no = power.tree_caught(self.algorithm, counted, min(c.level for c in stat), edges)
            what = "known tree bugs (specref/proof/tree.py)"
        else:
            yes, no = power.caught(self.algorithm, counted, min(c.level for c in stat), exact_ran)
            what = "bugs that shipped (docs/shipped_bugs.md)"
        return (f"{what} this run catches with >= 95% power: {', '.join(yes) or 'none'}"
                + (f"; with less: {', '.join(no)}" if no else "")
                + (f" (not counted, having tested nothing: {', '.join(unseen)})" if unseen else ""))

    def to_json(self) -> dict:
        return {"verifier": self.verifier, "algorithm": self.algorithm, "seed": self.seed, "passed": self.passed,
                "verdict": self.verdict(), "family_level": FAMILY_LEVEL, "scale": self.scale, "seconds": self.seconds,
                "diagnosis": self.diagnosis, "checks": [vars(c) for c in self.checks]}


def _round_up(x: float) -> str:
    """x rounded up to two significant digits, as text."""
    step = 10.0 ** (np.floor(np.log10(x)) - 1)
    return f"{np.ceil(x / step - 1e-9) * step:.2g}"


# ---------------------------------------------------------------- watching every output

def token_ids_problem(out, V: int, longest: int, length_error) -> str:
    """'' if `out` is 1-D with 1..longest integer token ids in [0, V), else what is wrong; `length_error(n)`
    words a length outside 1..longest (the one wording that depends on what was called)."""
    try:
        out = np.asarray(out)
    except Exception as e:  # noqa: BLE001  (whatever it returned)
        return f"returned something that is not an array of token ids ({type(e).__name__}: {e})"
    if out.ndim != 1:
        return f"returned an array of shape {out.shape}, not a 1-D array of token ids"
    if not 1 <= len(out) <= longest:
        return length_error(len(out))
    if out.dtype.kind == "f":
        if not (np.all(np.isfinite(out)) and np.all(out == np.round(out))):
            return f"returned {out.tolist()}: not integer token ids"
    elif out.dtype.kind not in "iub":
        return f"returned {out.tolist()!r} of dtype {out.dtype}: not integer token ids"
    if np.any((out < 0) | (out >= V)):
        return f"returned {out.tolist()}: a token id outside the vocabulary [0, {V})"
    return ""


def contract_problem(out, K: int, V: int) -> str:
    """'' if `out` is a possible output of a verifier call (1-D, 1..K+1 integer ids in [0, V)), else what is wrong."""
    return token_ids_problem(out, V, K + 1, lambda n: f"returned {n} tokens for K = {K} (must be 1 to K + 1 = {K + 1})")


class Guarded:
    """A verifier (verify's signature) under `limits`, whose every output must keep the contract (else ContractViolation)."""

    def __init__(self, verifier: Callable, limits: Limits):
        self.verifier, self.limits = verifier, limits
        self.__name__ = getattr(verifier, "__name__", "verify")

    def __call__(self, x_draft, p, q, rng):
        out = self.limits.call(self.verifier, x_draft, p, q, rng)
        K, V = np.shape(p)
        problem = contract_problem(out, K, V)
        if problem:
            raise ContractViolation(f"{problem}; call {self.limits.calls}, x_draft={np.asarray(x_draft).tolist()}")
        return np.asarray(out)


class Watched:
    """A verifier that records what is wrong with any of its outputs: length, prefix, ids, a kept q(x) = 0 draft."""

    KEEPS = "length in 1..K+1, drafts as prefix, ids in [0, V), no draft with q(x) = 0 kept"  # what every output must

    def __init__(self, verifier: Callable):
        self.verifier, self.calls, self.problems = verifier, 0, Counter()
        self.example = {}

    def _problem(self, kind: str, example: str) -> None:
        self.problems[kind] += 1
        self.example.setdefault(kind, example)

    def __call__(self, x_draft, p, q, rng):
        out = self.verifier(x_draft, p, q, rng)
        self.calls += 1
        K, V = p.shape
        where = f"x_draft={list(map(int, x_draft))} -> {np.asarray(out).tolist()}"
        out = np.asarray(out)
        if out.ndim != 1 or not 1 <= len(out) <= K + 1:
            self._problem("length not in 1..K+1", where)
            return out
        if out.dtype.kind not in "iu" and not (out.dtype.kind == "f" and np.all(np.isfinite(out))
                                               and np.all(out == np.round(out))):
            self._problem("not integer token ids", where)
            return out
        out = out.astype(np.int64)
        if np.any((out < 0) | (out >= V)):
            self._problem(f"token id outside [0, {V})", where)
            return out
        n = len(out) - 1
        if np.any(out[:n] != np.asarray(x_draft)[:n]):
            self._problem("the output's prefix is not the drafts", where)
        elif n and np.any(q[np.arange(n), out[:n]] == 0.0):
            self._problem("kept a draft with q(x) = 0", where)
        return out


def _form_check(watched: Watched, name: str) -> Check:
    if watched.calls == 0:
        return Check(name, "edge", None, "no output to look at: every call raised")
    if not watched.problems:
        return Check(name, "edge", True, f"{watched.calls} outputs: {watched.KEEPS}")
    detail = "; ".join(f"{kind}: {count} of {watched.calls} outputs, e.g. {watched.example[kind]}"
                       for kind, count in watched.problems.items())
    return Check(name, "edge", False, detail)


# ---------------------------------------------------------------- the checks

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


def _law_check(name, verifier, case: Case, correct_law: Callable, signatures: list[broken.Bug], level: float,
               rng, marginal: Callable | None = None) -> tuple[Check, dict]:
    start = time.perf_counter()
    counts = stats.sample_verify(verifier, case.p, case.q, case.n, rng)
    law = stats.rows_call_law(correct_law, case.p, case.q)
    if marginal is not None:
        counts, law = marginal(counts), marginal(law)
    stat, dof, pvalue = stats.chi_square_gof(counts, law)
    check = Check(name, "statistical", pvalue > level, f"chi2={stat:.1f} dof={dof}", pvalue, level, case.n)
    scores = {}
    if not check.passed:
        laws = {}
        for s in signatures:
            bug = stats.rows_call_law(s.law, case.p, case.q)
            laws[s.name] = marginal(bug) if marginal is not None else bug
        scores = _name_the_bug(check, counts, law, laws, signatures)
    check.seconds = time.perf_counter() - start
    return check, scores


def _name_the_bug(check: Check, counts: Counter, law: dict, laws: dict, signatures: list) -> dict:
    """Diagnose a failing check from its counts: the known bug (laws: name -> exact law) they point to goes into
    check.bug and check.diagnosis.  Returns each bug's log-likelihood, for the run's summary."""
    found, scores = _diagnose(counts, law, laws)
    by_name = {s.name: s for s in signatures}
    if found in by_name:
        check.bug = found
        check.diagnosis = (f"looks like {found}: {by_name[found].about} (total variation "
                           f"{total_variation(counts, laws[found]):.3f}; from the correct law "
                           f"{total_variation(counts, law):.3f})")
    else:
        check.diagnosis = found
    return scores


def sequence_check(verifier, K: int, level: float = FAMILY_LEVEL, rng: np.random.Generator | None = None,
                   runs: int = N_SEQUENCES) -> Check:
    """The chi-square check of `runs` whole sequences of speculative_sampling through `verifier` (verify's signature),
    K drafts a call, against the exact law of the Markov-chain target's sequences."""
    rng = np.random.default_rng(0) if rng is None else rng
    start = time.perf_counter()
    target, draft = stats.markov_pair()
    law = stats.sequence_law(target, SEQ_PROMPT, SEQ_N)  # the target's: what plain sampling gives

    def run(r):
        return sampling.speculative_sampling(SEQ_PROMPT, draft, target, SEQ_N, K, r, verify=verifier)

    counts = stats.sample_sequences(run, runs, len(SEQ_PROMPT), rng)
    stat, dof, pvalue = stats.chi_square_gof(counts, law)
    return Check(f"sequences K={K}", "statistical", pvalue > level, f"chi2={stat:.1f} dof={dof} "
                 f"(all {SEQ_V ** SEQ_N} sequences of {SEQ_N} tokens, Markov-chain target)", pvalue, level,
                 runs, seconds=time.perf_counter() - start)


def _p_equals_q_check(verifier, algorithm: str, rng) -> Check:
    # p == q over a large dense vocabulary: every ratio is 1 (every w_i and h_i too), so every draft
    # is kept; the residual max(0, q - p) is all zero and must not turn into NaN or a crash.
    start = time.perf_counter()
    K, calls = 4, 50
    p = rng.dirichlet(np.full(LARGE_V, 0.5), size=K)
    q = np.vstack([p, rng.dirichlet(np.full(LARGE_V, 0.5), size=1)])
    short = 0
    for _ in range(calls):
        x_draft = np.array([mrs.sample(p[t], rng) for t in range(K)])
        if len(verifier(x_draft, p, q, rng)) != K + 1:
            short += 1
    detail = f"V={LARGE_V}, K={K}: {calls - short} of {calls} calls kept every draft"
    return Check("edge p == q, large V", "edge", short == 0, detail + ("" if short == 0 else
                 " (with p == q every ratio is 1: all must be kept)"), seconds=time.perf_counter() - start)


def _replayed_vectors_check(verifier, function: str, chosen: list[dict], args: Callable, recorded: str,
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
    check = Check(f"vectors ({function})", "exact", not wrong, f"{len(chosen) - len(wrong)} of {len(chosen)} vectors give "
                  "the recorded tokens" + (f"; first: {wrong[0][0]} expected {wrong[0][1]}, got {wrong[0][2]}"
                                           if wrong else ""), samples=len(chosen))
    if wrong:
        same = [b.name for b in bugs if outcomes(b) == got]
        check.diagnosis = (f"the same tokens as {' and '.join(same)} on every vector" if same else
                           "no known bug gives these tokens (if the law checks pass, the uniforms may be drawn in "
                           f"another order than {documented} documents)")
    check.seconds = time.perf_counter() - start
    return check


def _vectors_check(verifier, algorithm: str, signatures: list[broken.Bug]) -> Check:
    function = "verify" if algorithm == "token" else "verify_block"
    chosen = [c for c in json.loads(vectors.PATH.read_text())["cases"] if c["function"] == function]
    return _replayed_vectors_check(
        verifier, function, chosen, lambda c: (np.array(c["x_draft"], dtype=np.int64), np.array(c["p"]),
                                               np.array(c["q"])), "tokens", signatures, "specref/mrs.py")


def _injected_edge_checks(verifier) -> list[Check]:
    checks = []
    # q(x) = 0 with u = 0: a strict u < q / p never keeps x; u <= q / p would.
    p = np.array([[0.5, 0.5, 0.0, 0.0]])
    q = np.array([[0.0, 0.5, 0.5, 0.0], [0.25, 0.25, 0.25, 0.25]])
    try:
        out = np.asarray(verifier(np.array([0]), p, q, vectors.ListedUniforms([0.0], tail=0.5)))
        ok = len(out) >= 1 and int(out[0]) != 0 and 0 <= int(out[0]) < 4
        detail = f"draft 0 with q(0) = 0 and every uniform 0.0 -> {out.tolist()}"
        why = "" if ok else " (a kept draft the target never emits)" if len(out) >= 1 and int(out[0]) == 0 else \
            " (not a token of the vocabulary)"
    except Exception as e:  # noqa: BLE001
        ok, detail, why = False, f"raised {type(e).__name__}: {e}", ""  # a raise is reported as a raise
    checks.append(Check("edge q(x) = 0, u = 0", "exact", ok, detail + why))
    # p and q one rounding apart: q(x) / p(x) = 1 - 1e-12 < u = 1 - 2^-53 rejects x, and max(0, q - p) is all zero.
    p = np.array([[0.25, 0.25, 0.25, 0.25]])
    q = np.array([[0.25 * (1 - 1e-12), 0.25, 0.25, 0.25], [0.1, 0.2, 0.3, 0.4]])
    try:
        out = np.asarray(verifier(np.array([0]), p, q, vectors.ListedUniforms([1 - 2.0 ** -53], tail=0.5)))
        ok = out.ndim == 1 and 1 <= len(out) <= 2 and np.all(np.isfinite(out)) and np.all((out >= 0) & (out < 4))
        detail = f"rejection with an all-zero residual (p and q one rounding apart) -> {out.tolist()}"
    except Exception as e:  # noqa: BLE001
        ok, detail = False, f"rejection with an all-zero residual raised {type(e).__name__}: {e}"
    checks.append(Check("edge all-zero residual", "exact", bool(ok), detail + ("" if ok else
                        " (must fall back to q, never NaN or an id outside the vocabulary: GHSA-8wr5-jm2h-8r4f)")))
    return checks


def _probe_injectable(verifier) -> str:
    """'' if the verifier draws only random() from the rng it is handed, else why the exact tier is skipped."""
    p = np.array([[0.4, 0.3, 0.2, 0.1]])
    q = np.array([[0.30, 0.45, 0.10, 0.15], [0.25] * 4])
    try:
        verifier(np.array([0]), p, q, vectors.ListedUniforms([], tail=0.5))
    except (AttributeError, TypeError) as e:
        return f"the verifier uses more of the generator than random() ({type(e).__name__}: {e})"
    except Exception:  # noqa: BLE001  (another error is for the checks to report)
        return ""
    return ""


def exact_checks(verifier: Callable, algorithm: str = "token") -> list[Check]:
    """The exact tier on a verifier with `mrs.verify`'s signature that takes injected uniforms: the vectors, two edge
    cases; for a tree algorithm, on a verifier with the tree contract: its vectors and three edge cases."""
    if algorithm in TREE_ALGORITHMS:
        return [_tree_vectors_check(verifier, algorithm), *_tree_edge_checks(verifier, algorithm)]
    return [_vectors_check(verifier, algorithm, DIAGNOSED[algorithm]), *_injected_edge_checks(verifier)]


def one_call_check(verifier: Callable, case: Case, algorithm: str = "token", level: float = FAMILY_LEVEL,
                   rng: np.random.Generator | None = None) -> Check:
    """The chi-square check of one call's output law on `case`, with a diagnosis if it fails (verify's signature)."""
    rng = np.random.default_rng(0) if rng is None else rng
    return _law_check(f"one call: {case.name}", verifier, case, CORRECT[algorithm], DIAGNOSED[algorithm], level, rng)[0]


def check(function: Callable, adapter: Adapter = Adapter(), algorithm: str = "token", seed: int = 0,
          vectors_tier: bool = True, name: str | None = None, progress: Callable[[Check], None] | None = None,
          scale: float = 1.0, call_limit: float = CALL_LIMIT, time_limit: float = RUN_LIMIT) -> Report:
    """Run every check on `function` (through `adapter`) as a verifier of `algorithm` ("token" or "block").

    Requires: function behaves like `mrs.verify` once `adapter` is applied.  The exact tier runs
    when vectors_tier is true and the adapter hands the function the rng object itself; the
    statistical tier always, with `scale` times the default samples (less power, same false-alarm
    rate; a check too small to test anything is reported as not tested, and the run as INCOMPLETE).
    `progress(check)` is called after each check.

    Ensures a verdict in bounded time: each call of the function may take call_limit seconds and
    all of them together time_limit; an output outside the contract (not 1..K+1 tokens, not integer
    ids, an id outside [0, V)) or a call past a limit ends the run at once with a failing check
    named "contract" or "time limit" that says what was wrong.  The run then ends within
    time_limit + call_limit plus the checker's own work after the last call (a second or two).

    A tree algorithm ("tree-topk", "tree-mss", "tree-rrs") checks a tree verifier instead: `check_tree`.
    """
    if algorithm in TREE_ALGORITHMS:
        return check_tree(function, adapter, algorithm, seed=seed, vectors_tier=vectors_tier, name=name,
                          progress=progress, scale=scale, call_limit=call_limit, time_limit=time_limit)
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm must be one of {ALGORITHMS + TREE_ALGORITHMS}, got {algorithm!r}")
    start = time.perf_counter()
    limits = Limits(call_limit, time_limit, "verifier call")
    verifier = Guarded(adapt(function, adapter), limits)
    report = Report(name or getattr(function, "__qualname__", repr(function)), algorithm, seed, scale=scale)
    signatures = DIAGNOSED[algorithm]

    add, add_tested = _adders(report, progress, scale, algorithm)

    ll_sum = Counter()  # log-likelihood of each bug, summed over the diagnosed one-call checks
    try:
        for c in _exact_tier(verifier, algorithm, adapter, vectors_tier, _probe_injectable,
                             "the all-zero residual and u = 0 edge cases need injected uniforms"):
            add(c)

        case_list = [Case(c.name, c.p, c.q, max(1, round(c.n * scale))) for c in cases(algorithm)]
        m = len(case_list) + 1 + len(SEQ_K)  # chi-square checks in this run
        level = FAMILY_LEVEL / m
        rng = np.random.default_rng(seed)
        seeds = rng.integers(2**63, size=m + 1)
        watched = Watched(verifier)
        for i, case in enumerate(case_list):
            try:
                c, scores = _law_check(f"one call: {case.name}", watched, case, CORRECT[algorithm], signatures, level,
                                    np.random.default_rng(seeds[i]))
                if not c.passed:
                    ll_sum.update(scores)
            except Exception as e:  # noqa: BLE001  (a crash fails the check, with what it said)
                c = Check(f"one call: {case.name}", "statistical", False, f"raised {type(e).__name__}: {e}", level=level)
            add_tested(c)
        try:
            counted = accepted_count_case()
            counted = Case(counted.name, counted.p, counted.q, max(1, round(counted.n * scale)))
            c, scores = _law_check("accepted count (K=4, V=5)", watched, counted, CORRECT[algorithm], signatures,
                                   level, np.random.default_rng(seeds[len(case_list)]), marginal=_count_marginal)
        except Exception as e:  # noqa: BLE001
            c = Check("accepted count (K=4, V=5)", "statistical", False, f"raised {type(e).__name__}: {e}", level=level)
        add_tested(c)
        for j, K in enumerate(SEQ_K):
            try:
                c = sequence_check(watched, K, level, np.random.default_rng(seeds[len(case_list) + 1 + j]),
                                   max(1, round(N_SEQUENCES * scale)))
            except Exception as e:  # noqa: BLE001
                c = Check(f"sequences K={K}", "statistical", False, f"raised {type(e).__name__}: {e}", level=level)
            add_tested(c)
        add(_form_check(watched, "every output seen"))
        try:
            c = _p_equals_q_check(verifier, algorithm, np.random.default_rng(seeds[-1]))
        except Exception as e:  # noqa: BLE001
            c = Check("edge p == q, large V", "edge", False, f"raised {type(e).__name__}: {e}")
        add(c)

    except Stop as stop:  # a contract violation or a time limit: the run ends here, failed, saying why
        return _stopped(report, stop, add, start)
    return _finished(report, ll_sum, signatures, start)


def _adders(report: Report, progress, scale: float, algorithm: str) -> tuple[Callable, Callable]:
    """add(check): append it to the report and show it; add_tested(check): the same for a chi-square check, which if
    it found nothing wrong at a reduced scale must also show it tested something (_count_as_test)."""
    def add(c: Check) -> None:
        report.checks.append(c)
        if progress is not None:
            progress(c)

    def add_tested(c: Check) -> None:  # at the default sizes every check does (tests/proof/test_conform*.py)
        if c.passed and scale < 1:
            _count_as_test(c, algorithm)
        add(c)
    return add, add_tested


def _exact_tier(verifier, algorithm: str, adapter: Adapter, vectors_tier: bool, probe: Callable, needs: str) -> list:
    """The exact tier's checks, or one check saying why it was skipped (turned off, no injectable generator, or a
    function that uses more of the generator than random(), which `probe` finds); `needs`: what the skip loses."""
    why_not = "" if vectors_tier and adapter.injectable else (
        "turned off" if not vectors_tier else "the adapter does not hand the function the checker's generator")
    if not why_not:
        why_not = probe(verifier)
    if why_not:
        return [Check("exact tier", "exact", None, f"skipped: {why_not}; {needs}")]
    return exact_checks(verifier, algorithm)


def _stopped(report: Report, stop: Stop, add: Callable[[Check], None], start: float) -> Report:
    """The report of a run that a contract violation or a time limit ended: a failing check saying why."""
    add(Check(stop.check, "edge", False, str(stop)))
    named = _edge_names(report)  # a known bug whose signature this stop (or an earlier edge check) is
    report.diagnosis = f"{stop.check}: {stop}" + (f"; {named}" if named else "")
    report.seconds = time.perf_counter() - start
    return report


def _finished(report: Report, ll_sum: Counter, signatures: list, start: float) -> Report:
    """The report of a run that went through every check: its diagnosis, raising reported as raising."""
    report.diagnosis = _summary(report, ll_sum, signatures)
    if report.algorithm in TREE_ALGORITHMS and report.diagnosis.startswith("no known bug"):  # the vectors may name one
        named = [c for c in report.failed if c.tier == "exact" and c.diagnosis.startswith("the same tokens as ")]
        if named:
            report.diagnosis = f"{named[0].diagnosis} (the check '{named[0].name}' failed)"
    raised = [c for c in report.failed if c.detail.startswith("raised ")]
    if raised:  # a verifier that raises is reported as raising
        report.diagnosis = (f"the verifier raised ({raised[0].detail[len('raised '):]}) in {len(raised)} of the "
                            f"{len(report.failed)} failing checks" + (f"; {report.diagnosis}" if report.diagnosis else ""))
    report.seconds = time.perf_counter() - start
    return report


def _count_as_test(c: Check, algorithm: str) -> Check:
    """Mark a passing chi-square check as not tested when its samples are too few to test anything (`power.untested`:
    one bin, or fewer than half the known bugs it sees at its default size seen), with the samples it needs."""
    bugs = tuple(tree.ALGORITHMS[algorithm].bugs if algorithm in TREE_ALGORITHMS else SIGNATURES[algorithm])
    why, needs = power.untested(algorithm, bugs, c.name, c.samples, c.level)
    if why:
        n_full = power.check_laws(algorithm, bugs)[c.name][0]
        not_tested(c, f"{why}; it counts as a test from n = {needs:.0f} (scale {_round_up(needs / n_full)})", needs)
    return c


def _edge_names(report: Report) -> str:
    """The known bugs that the run's failing edge or contract checks are the signature of: the shipped bugs
    (specref.proof.bugs.shipped), and for a tree verifier first its algorithm's own (TREE_EDGE_BUGS)."""
    found = []
    for c in report.failed:
        if report.algorithm in TREE_ALGORITHMS and c.name in TREE_EDGE_BUGS:
            bug = tree.ALGORITHMS[report.algorithm].bug[TREE_EDGE_BUGS[c.name]]
            found.append((c, bug.name, bug.about))
            continue
        s = shipped.edge_signature(c.name, c.detail)
        if s is not None:
            found.append((c, s.name, s.bug.about))
    return "; ".join(f"{name}: {about} (the check '{c.name}' failed)" for c, name, about in found)


def _summary(report: Report, ll_sum: Counter, signatures: list[broken.Bug]) -> str:
    # Over every failing one-call check: the bug under which all their counts together are likeliest.
    # A failing exact-tier edge check names the shipped bug it is the signature of.
    if not report.failed:
        return ""
    edge = _edge_names(report)
    if not ll_sum:
        return edge or "no known bug's signature matches (see the failing checks)"
    best = max(ll_sum, key=ll_sum.get)
    named = Counter(c.bug for c in report.failed if c.bug)
    looks_like = {s.name: s.about for s in signatures}[best]
    if named[best]:
        found = f"{best}: {looks_like} (named by {named[best]} of the {len(report.failed)} failing checks)"
    else:
        found = f"no check is conclusive; the likeliest known bug is {best}: {looks_like}"
    return f"{edge}; {found}" if edge else found


# ---------------------------------------------------------------- trees of drafts
#
# A tree verifier has the contract of specref.mrs's verify_tree_topk, verify_tree_mss and verify_tree_rrs:
# (tokens [N], parents [N], p [N+1, V], q [N+1, V], rng) -> the accepted path's tokens, then one more token.  The
# checker draws each tree itself, the way the algorithm assumes (specref.proof.tree.ALGORITHMS[...].children),
# and compares the output with the exact law of one call, the tree's drawing included (tree.call_law).

# A failing exact-tier edge check of a tree run names this known bug of its algorithm (tree.ALGORITHMS[...].bug).
TREE_EDGE_BUGS = {"edge q(x) = 0, u = 0": "inclusive_zero_coin"}
# The largest float64 below 1: a uniform that a test u < ratio passes only when the ratio is at least 1.
U_MAX = 1.0 - 2.0 ** -53


def adapt_tree(function: Callable, adapter: Adapter = Adapter()) -> Callable:
    """`function` as a tree verifier with `mrs_tree.verify_tree_mss`'s signature: (tokens [N], parents [N], p [N+1, V],
    q [N+1, V], rng) -> tokens [n].  `adapter.batch` adds a leading dimension of 1 to all four arrays; a tree
    verifier returns its tokens (returns="count_and_token" names no path: refused)."""
    if adapter.returns != "tokens":
        raise ValueError("a tree verifier returns the path's tokens and one more: Adapter.returns must be 'tokens' "
                         f"(a count does not say which path), got {adapter.returns!r}")

    def verify_tree(tokens, parents, p, q, rng):  # [N], [N], [N+1, V], [N+1, V] -> [n]
        arrays = [np.asarray(tokens, dtype=np.int64), np.asarray(parents, dtype=np.int64), p, q]
        if adapter.log_probs:
            with np.errstate(divide="ignore"):
                arrays[2:] = np.log(p), np.log(q)  # log 0 = -inf
        if adapter.batch:
            arrays = [a[None] for a in arrays]  # [1, N], [1, N], [1, N+1, V], [1, N+1, V]
        out = function(*[adapter.array(a) for a in arrays], *_rng_argument(adapter, rng))
        return _flat(out[0] if adapter.batch and not np.isscalar(out) and len(out) == 1 else out)

    verify_tree.__name__ = getattr(function, "__name__", "verify_tree")
    return verify_tree


def tree_contract_problem(out, parents, V: int) -> str:  # [n], [N] -> 
    """'' if `out` can be a tree verifier's output for a tree with these parents (1-D, 1 to depth + 1 integer ids in
    [0, V)), else what is wrong.  (Whether the path follows the tree's edges is `WatchedTree`'s to see.)"""
    depth = trees.depth(np.asarray(parents).tolist())
    return token_ids_problem(out, V, depth + 1, lambda n: f"returned {n} tokens for a tree of depth {depth} "
                                                         f"(must be 1 to depth + 1 = {depth + 1})")


class GuardedTree:
    """A tree verifier under `limits`, whose every output must keep the contract (else ContractViolation)."""

    def __init__(self, verifier: Callable, limits: Limits):
        self.verifier, self.limits = verifier, limits
        self.__name__ = getattr(verifier, "__name__", "verify_tree")

    def __call__(self, tokens, parents, p, q, rng):
        out = self.limits.call(self.verifier, tokens, parents, p, q, rng)
        problem = tree_contract_problem(out, parents, np.shape(q)[1])
        if problem:
            raise ContractViolation(f"{problem}; call {self.limits.calls}, tokens={np.asarray(tokens).tolist()}, "
                                    f"parents={np.asarray(parents).tolist()}")
        return np.asarray(out)


def path_problem(out, tokens, parents, q) -> str:  # [n], [N], [N], [N+1, V] -> 
    """'' if out[:-1] walks down the tree's edges from the root (each token a child of the node before) and keeps
    no child the target gives q(x) = 0 in its parent's row, else which of the two it does not."""
    children = trees.children_of(parents)
    rows = [0]  # the rows of the nodes the path so far may be at (siblings may repeat a token under tree-mss)
    for y in out[:-1]:
        kept = [(row, i) for row in rows for i in children[row] if tokens[i] == y]  # (parent's row, child)
        if not kept:
            return "the path does not follow the tree's edges"
        if any(q[row, y] == 0.0 for row, _ in kept):
            return "kept a child with q(x) = 0"
        rows = [i + 1 for _, i in kept]
    return ""


class WatchedTree(Watched):
    """A tree verifier that records what is wrong with any of its outputs: length, ids, a path off the tree's edges,
    a kept child with q(x) = 0."""

    KEEPS = "length 1 to depth + 1, ids in [0, V), the path along the tree's edges, no child with q(x) = 0 kept"

    def __call__(self, tokens, parents, p, q, rng):
        out = self.verifier(tokens, parents, p, q, rng)
        self.calls += 1
        where = f"tokens={list(map(int, tokens))} parents={list(map(int, parents))} -> {np.asarray(out).tolist()}"
        problem = "" if isinstance(self.verifier, GuardedTree) else tree_contract_problem(out, parents, q.shape[1])
        if problem:  # (GuardedTree stops the run on these before they get here)
            self._problem(problem.split(":")[0].split(" (")[0], where)
            return np.asarray(out)
        out = np.asarray(out).astype(np.int64)
        problem = path_problem(out.tolist(), np.asarray(tokens).tolist(), np.asarray(parents).tolist(), q)
        if problem:
            self._problem(problem, where)
        return out


def _probe_injectable_tree(verifier) -> str:
    """'' if the tree verifier draws only random() from the rng it is handed, else why the exact tier is skipped."""
    p = np.full((3, 4), 0.25)
    q = np.array([[0.30, 0.45, 0.10, 0.15], [0.25] * 4, [0.25] * 4])
    try:
        verifier(np.array([0, 1]), np.array([-1, -1]), p, q, vectors.ListedUniforms([], tail=0.5))
    except (AttributeError, TypeError) as e:
        return f"the verifier uses more of the generator than random() ({type(e).__name__}: {e})"
    except Exception:  # noqa: BLE001  (another error is for the checks to report)
        return ""
    return ""


def _tree_vectors_check(verifier, algorithm: str) -> Check:
    """The portable vectors of specref/proof/tree_vectors.json for this algorithm's verifier: same uniforms, same tokens;
    if some differ, the known bugs that give the same tokens on every vector."""
    function = "verify_" + algorithm.replace("-", "_")  # "tree-mss" -> "verify_tree_mss"
    chosen = [c for c in json.loads(tree_vectors.PATH.read_text())["cases"] if c["function"] == function]
    return _replayed_vectors_check(
        verifier, function, chosen, lambda c: (np.array(c["tokens"], dtype=np.int64),
                                               np.array(c["parents"], dtype=np.int64), np.array(c["p"]),
                                               np.array(c["q"])),
        "tokens_out", list(tree.ALGORITHMS[algorithm].bugs),
        'specref/mrs.py\'s "Randomness of the tree verifiers"')


def _edge(name: str, verifier, args, judge: Callable) -> Check:
    """One injected-uniform edge case: judge(out) -> (passed, why if not); a raise fails it, reported as a raise."""
    tokens, parents = args[0], args[1]
    try:
        out = np.asarray(verifier(*args))
        ok, why = judge(out)
        detail = f"tokens={tokens.tolist()} parents={parents.tolist()} -> {out.tolist()}" + ("" if ok else f" ({why})")
    except Exception as e:  # noqa: BLE001
        ok, detail = False, f"raised {type(e).__name__}: {e}"
    return Check(name, "exact", bool(ok), detail)


def _tree_edge_checks(verifier, algorithm: str) -> list[Check]:
    """The exact tier's edge cases for a tree verifier, each with chosen uniforms: q(x) = 0 at a child with u = 0
    (never accepted), a child accepted for certain (ratio exactly 1) with u = 1 - 2^-53, and a rejection that leaves
    an all-zero residual (rounding): a token of the vocabulary, never NaN or the id V."""
    flat, leaf = np.full(4, 0.25), [0.05, 0.15, 0.5, 0.3]
    q0 = [0.0, 0.5, 0.25, 0.25]
    checks = [_edge("edge q(x) = 0, u = 0", verifier, (np.array([0, 1]), np.array([-1, -1]), np.tile(flat, (3, 1)),
                    np.array([q0, leaf, leaf]), vectors.ListedUniforms([0.0], tail=0.5)),
                    lambda out: (int(out[0]) != 0, "kept a child the target never emits, at u = 0: the test must be "
                                                   "strict, u < ratio"))]
    tokens, parents = np.array([0, 1, 2, 3, 1, 3]), np.array([-1, -1, 0, 0, 1, 1])
    if algorithm == "tree-topk":  # q's mass on a node's two children: the second's ratio q(c_2) / (1 - q(c_1)) is 1
        q = np.array([[0.25, 0.75, 0, 0], leaf, [0, 0.25, 0, 0.75], leaf, leaf, leaf, leaf])
        p, path, name, why = np.tile(flat, (7, 1)), [1, 3], "edge certain accept, u -> 1", \
            "q(c_2) / (1 - q(c_1)) = 1: the second child must be kept even with u = 1 - 2^-53"
    else:  # p == q: every ratio is 1, so the first child at every node is kept
        p = np.array([[0.4, 0.3, 0.2, 0.1], flat, [0.1, 0.2, 0.3, 0.4], leaf, leaf, leaf, leaf])
        q, path, name, why = p.copy(), [0, 2], "edge p == q, u -> 1", \
            "with p == q every ratio is 1: the first child must be kept even with u = 1 - 2^-53"
    checks.append(_edge(name, verifier, (tokens, parents, p, q, vectors.ListedUniforms([], tail=U_MAX)),
                        lambda out: (len(out) == 3 and [int(y) for y in out[:2]] == path, f"expected the path {path}"
                                     f" and one more token: {why}")))
    if algorithm == "tree-topk":  # the children hold all of q's mass, to rounding: q without them is all zero
        near = 1 - 1e-6
        args = (np.array([0, 1]), np.array([-1, -1]), np.tile(flat, (3, 1)),
                np.array([[0.5 * near, 0.5 * near, 0, 0], leaf, leaf]), vectors.ListedUniforms([U_MAX] * 2, tail=0.5))
        rest = "both children rejected, q without them is all zero (the children hold q's mass, to rounding)"
    else:  # p and q one rounding apart: q(x) / p(x) = 1 - 1e-12 < u = 1 - 2^-53 rejects x, max(0, q - p) is all zero
        args = (np.array([0]), np.array([-1]), np.tile(flat, (2, 1)),
                np.array([[0.25 * (1 - 1e-12), 0.25, 0.25, 0.25], leaf]), vectors.ListedUniforms([U_MAX], tail=0.5))
        rest = "the child rejected, max(0, q - p) is all zero (p and q one rounding apart)"
    checks.append(_edge("edge all-zero residual", verifier, args, lambda out: (
        out.ndim == 1 and 1 <= len(out) <= 2 and np.isfinite(out).all() and np.all((out >= 0) & (out < 4)),
        f"{rest}: the last token must fall back to q, never NaN or an id outside the vocabulary: GHSA-8wr5-jm2h-8r4f")))
    return checks


def _tree_law_check(verifier, algorithm: str, case: TreeCase, level: float, rng) -> tuple[Check, dict]:
    """The chi-square check of one call's output on `case`, trees drawn the algorithm's way, against the exact law;
    if it fails, the known bug of tree.ALGORITHMS[algorithm] it looks like."""
    start = time.perf_counter()
    alg, setting = tree.ALGORITHMS[algorithm], TreeSetting(case)
    counts = Counter()
    for _ in range(case.n):
        tokens, parents, p, q = setting.call(alg.children, rng)
        counts[tuple(int(y) for y in verifier(tokens, parents, p, q, rng))] += 1
    law = tree_call_law(algorithm, case.name)
    stat, dof, pvalue = stats.chi_square_gof(counts, law)
    check = Check(f"one call: {case.name}", "statistical", pvalue > level,
                  f"chi2={stat:.1f} dof={dof} ({case.shape} trees, V={case.V})", pvalue, level, case.n)
    scores = {}
    if not check.passed:
        laws = {b.name: tree_call_law(algorithm, case.name, b.name) for b in alg.bugs}
        scores = _name_the_bug(check, counts, law, laws, list(alg.bugs))
    check.seconds = time.perf_counter() - start
    return check, scores


def tree_one_call_check(verifier: Callable, case: TreeCase, algorithm: str = "tree-mss", level: float = FAMILY_LEVEL,
                        rng: np.random.Generator | None = None) -> Check:
    """The chi-square check of one call's output law on a tree case (the tree contract), with a diagnosis if it fails."""
    return _tree_law_check(verifier, algorithm, case, level, np.random.default_rng(0) if rng is None else rng)[0]


def tree_sequence_check(verifier: Callable, algorithm: str, widths: tuple, level: float = FAMILY_LEVEL,
                        rng: np.random.Generator | None = None, runs: int = TREE_N_SEQUENCES) -> Check:
    """The chi-square check of `runs` whole sequences of a speculative loop with trees (each call: a tree of `widths`
    drawn the algorithm's way from the draft at the tokens so far, the target's rows on it, the verifier; until
    SEQ_N new tokens) against the exact law of the Markov-chain target's sequences (tree.loop_law: the same)."""
    rng = np.random.default_rng(0) if rng is None else rng
    start = time.perf_counter()
    children = tree.ALGORITHMS[algorithm].children
    target, draft = stats.markov_pair()
    law = stats.sequence_law(target, SEQ_PROMPT, SEQ_N)  # the target's: what plain sampling gives

    def run(r):
        x = [int(t) for t in SEQ_PROMPT]
        while len(x) < len(SEQ_PROMPT) + SEQ_N:
            context = tuple(x)  # at least `order` tokens: the Markov chains read the last ones

            def draft_row(path, context=context):
                return draft.table[(context + path)[-draft.order:]]

            def target_row(path, context=context):
                return target.table[(context + path)[-target.order:]]

            tokens, parents = tree.draw_tree(children, draft_row, widths, r)
            p, q = np.array(tree.tree_rows(tokens, parents, draft_row)), np.array(tree.tree_rows(tokens, parents,
                                                                                                  target_row))
            x.extend(int(y) for y in verifier(np.array(tokens), np.array(parents), p, q, r))
        return np.array(x[: len(SEQ_PROMPT) + SEQ_N])

    counts = stats.sample_sequences(run, runs, len(SEQ_PROMPT), rng)
    stat, dof, pvalue = stats.chi_square_gof(counts, law)
    shape = "x".join(str(w) for w in widths)
    return Check(f"sequences {shape}", "statistical", pvalue > level, f"chi2={stat:.1f} dof={dof} (all "
                 f"{SEQ_V ** SEQ_N} sequences of {SEQ_N} tokens, {shape} trees, Markov-chain target)", pvalue, level,
                 runs, seconds=time.perf_counter() - start)


def _tree_certain_check(verifier, algorithm: str, rng) -> Check:
    """Over a large dense vocabulary, rows under which every call keeps a whole path: p == q (every ratio 1, the
    first child kept) for tree-mss and tree-rrs; q's mass only on a node's two top-k children for tree-topk."""
    start = time.perf_counter()
    calls, widths = 50, (2, 2)
    dense = rng.dirichlet(np.full(LARGE_V, 0.5), size=len(widths) + 1)  # [depth + 1, V]: the rows at each depth
    target = dense.copy()  # p == q
    if algorithm == "tree-topk":  # q's mass on each node's two children (the top 2 of p), and nothing else
        for d in range(len(widths)):
            target[d] = 0.0
            target[d, trees.draw_children(dense[d], 2, "topk", rng)] = [0.25, 0.75]

    def draft_row(path):  # the rows depend on the depth only
        return dense[len(path)]

    def target_row(path):
        return target[len(path)]

    children, short = tree.ALGORITHMS[algorithm].children, 0
    fixed = tree.draw_tree(children, draft_row, widths, rng) if children == "topk" else None  # (no randomness)
    for _ in range(calls):
        tokens, parents = fixed or tree.draw_tree(children, draft_row, widths, rng)
        p, q = np.array(tree.tree_rows(tokens, parents, draft_row)), np.array(tree.tree_rows(tokens, parents,
                                                                                              target_row))
        if len(verifier(np.array(tokens), np.array(parents), p, q, rng)) != len(widths) + 1:
            short += 1
    if algorithm == "tree-topk":
        name, why = "edge q on the children, large V", "with q's mass on a node's two children the walk always goes on"
    else:
        name, why = "edge p == q, large V", "with p == q every ratio is 1: the first child is always kept"
    return Check(name, "edge", short == 0, f"V={LARGE_V}, 2x2 trees: {calls - short} of {calls} calls kept a whole "
                 "path" + ("" if short == 0 else f" ({why})"), seconds=time.perf_counter() - start)


def check_tree(function: Callable, adapter: Adapter = Adapter(), algorithm: str = "tree-mss", seed: int = 0,
               vectors_tier: bool = True, name: str | None = None, progress: Callable[[Check], None] | None = None,
               scale: float = 1.0, call_limit: float = CALL_LIMIT, time_limit: float = RUN_LIMIT) -> Report:
    """Run every check on `function` (through `adapter`) as a tree verifier of `algorithm` (TREE_ALGORITHMS).

    Requires: function behaves like specref.mrs_tree.verify_tree_topk, verify_tree_mss or verify_tree_rrs (tokens [N],
    parents [N], p [N+1, V], q [N+1, V], rng -> the accepted path's tokens, then one more) once `adapter` is
    applied.  The checker draws every tree the way the algorithm assumes (tree.ALGORITHMS[algorithm].children:
    the draft's top-k, i.i.d. draws, draws without replacement; siblings in drawing order).  Tiers as `check`:
    exact (the vectors of tree_vectors.json and three edge cases with chosen uniforms) when the function is handed
    the checker's generator; statistical always (one call against its exact law on four tree cases, whole
    sequences of a tree loop for two tree shapes, each at FAMILY_LEVEL / 6; every output watched; a large-vocabulary
    case whose every call keeps a whole path).  Same time limits, contract stop (1 to depth + 1 integer ids in
    [0, V)), not-tested rule and diagnosis (the known bugs of tree.ALGORITHMS[algorithm]).
    """
    if algorithm not in TREE_ALGORITHMS:
        raise ValueError(f"algorithm must be one of {TREE_ALGORITHMS} for a tree verifier, got {algorithm!r}")
    start = time.perf_counter()
    limits = Limits(call_limit, time_limit, "verifier call")
    verifier = GuardedTree(adapt_tree(function, adapter), limits)
    report = Report(name or getattr(function, "__qualname__", repr(function)), algorithm, seed, scale=scale)
    bugs = list(tree.ALGORITHMS[algorithm].bugs)

    add, add_tested = _adders(report, progress, scale, algorithm)

    ll_sum = Counter()  # log-likelihood of each bug, summed over the diagnosed one-call checks
    try:
        for c in _exact_tier(verifier, algorithm, adapter, vectors_tier, _probe_injectable_tree,
                             "the u = 0, certain-accept and all-zero residual edge cases need injected uniforms"):
            add(c)

        case_list = [replace(c, n=max(1, round(c.n * scale))) for c in tree_cases()]
        m = len(case_list) + len(TREE_SEQ_WIDTHS)  # chi-square checks in this run
        level = FAMILY_LEVEL / m
        seeds = np.random.default_rng(seed).integers(2**63, size=m + 1)
        watched = WatchedTree(verifier)
        for i, case in enumerate(case_list):
            try:
                c, scores = _tree_law_check(watched, algorithm, case, level, np.random.default_rng(seeds[i]))
                if not c.passed:
                    ll_sum.update(scores)
            except Exception as e:  # noqa: BLE001  (a crash fails the check, with what it said)
                c = Check(f"one call: {case.name}", "statistical", False, f"raised {type(e).__name__}: {e}", level=level)
            add_tested(c)
        for j, widths in enumerate(TREE_SEQ_WIDTHS):
            runs = max(1, round(TREE_N_SEQUENCES * scale))
            try:
                c = tree_sequence_check(watched, algorithm, widths, level,
                                        np.random.default_rng(seeds[len(case_list) + j]), runs)
            except Exception as e:  # noqa: BLE001
                c = Check(f"sequences {'x'.join(map(str, widths))}", "statistical", False,
                          f"raised {type(e).__name__}: {e}", level=level)
            add_tested(c)
        add(_form_check(watched, "every output seen"))
        try:
            c = _tree_certain_check(verifier, algorithm, np.random.default_rng(seeds[-1]))
        except Exception as e:  # noqa: BLE001
            c = Check("edge p == q, large V" if algorithm != "tree-topk" else "edge q on the children, large V",
                      "edge", False, f"raised {type(e).__name__}: {e}")
        add(c)
    except Stop as stop:  # a contract violation or a time limit: the run ends here, failed, saying why
        return _stopped(report, stop, add, start)
    return _finished(report, ll_sum, bugs, start)


def assert_conforms(function: Callable, adapter: Adapter = Adapter(), **kwargs) -> Report:
    """`check`, raising AssertionError with the whole report if any check fails (for use inside a pytest test)."""
    report = check(function, adapter, **kwargs)
    if not report.passed:
        raise AssertionError("\n" + report.text())
    return report


# A whole speculative generator against the same models' plain sampling (see specref.proof.pipeline).
check_pipeline = pipeline.check_pipeline
