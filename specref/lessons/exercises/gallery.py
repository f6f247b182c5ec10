"""The gallery: mistakes people make, most of them shipped, each run through the chi-square the correct pipeline passes.

MISTAKES is a gallery of mistakes people make, each a `Mistake`; those that shipped are read from the shipped
gallery (`specref.proof.bugs.shipped.GALLERY`: where, what, the single-call form).  `show_mistakes()` runs the
correct pipeline and each mistake's (drafting and verification on two small Markov chains, the request's warp
applied by `specref.warps`) and tests the GALLERY_L tokens after the prompt of N_GALLERY sequences with the
same `stats.chi_square_gof`, against the exact law of plain sampling from the warped target, at stats.LEVEL =
1e-3, row i with np.random.default_rng((GALLERY_SEED, i)).  The correct pipeline passes and every mistake fails;
the diagnosis column names the mistake whose exact pipeline law (`pipeline_law`) the counts fit, by the
conformance checker's likelihood rule.
"""

from __future__ import annotations

import functools
import math
import time
from collections import Counter
from dataclasses import dataclass
from typing import Callable

import numpy as np

from specref import mrs, warps
from specref.proof import laws, stats
from specref.proof.bugs import broken, shipped

from .grading import Result, _likeliest, _show
from .verify import letters_swapped


# The gallery's pipeline: a target and a draft Markov chain (order 1) over GALLERY_V tokens, the request's warp
# (temperature, then top-k) applied to both by `specref.warps`, GALLERY_K drafts a call, the GALLERY_L tokens
# after the prompt token 0 compared with plain sampling's exact law.  With these settings the weakest mistake
# (one_uniform_reused) has noncentrality 289 on 22 dof at N_GALLERY sequences (`power.noncentrality`): each
# mistake fails with certainty for practical purposes, whatever the seed.
GALLERY_V, GALLERY_K, GALLERY_L, GALLERY_PROMPT = 5, 2, 3, 0
REQUEST = warps.Warp(temperature=0.7, top_k=3)  # the request's sampling settings
GALLERY_SEED = 3  # the chains' seed, and the first entropy of each row's generator
N_GALLERY = 3_000  # sequences a row: all seven rows in about 2 s


@dataclass(frozen=True)
class Mistake:
    """A mistake that shipped: the verifier a pipeline runs, and how the pipeline around it differs from Algorithm 2.

    Called like `mrs.verify` it runs `bug`, the mistake's single-call form (a `broken.Bug`: `.law(x_draft, p, q)`
    is its exact law), so `check_verify(mistake)` grades it; `show_mistakes` runs the whole pipeline.
    """

    name: str
    label: str  # the mistake in a few words (the table's first column)
    where: str  # where it shipped
    about: str  # what the code does
    bug: broken.Bug  # the single-call form (for the verifier's own mistakes, the verifier the pipeline runs)
    drafting: str = "sample"  # how the draft picks its token from its warped row: "sample", or "argmax"
    draft_rows: str = "warped"  # the p handed to the verifier: "warped" (the rows drafted from) or "unfiltered"
    target_rows: str = "warped"  # the q handed to the verifier: "warped" (plain sampling's rows) or "raw"

    @property
    def around(self) -> bool:
        """Whether the mistake is around the verifier (the verifier itself is then mrs.verify)."""
        return (self.drafting, self.draft_rows, self.target_rows) != ("sample", "warped", "warped")

    @property
    def verifier(self) -> Callable:
        return mrs.verify if self.around else self.bug

    def __call__(self, x_draft, p, q, rng):
        return self.bug(x_draft, p, q, rng)

    def __repr__(self) -> str:
        return f"<Mistake {self.name}: {self.about} ({self.where})>"


def _shipped(name: str, label: str, **pieces) -> Mistake:
    """A bug of the shipped gallery (`specref.proof.bugs.shipped.GALLERY`: where it shipped, what it does, its
    single-call form), with this table's short label and the pieces of the pipeline it changes."""
    s = shipped.BY_NAME[name]
    return Mistake(s.name, label, s.where, (s.pipeline or s.bug).about, s.bug, **pieces)


MISTAKES = [
    _shipped("greedy_draft_softmax_ratio", "argmax draft, p's probabilities verified", drafting="argmax"),
    _shipped("draft_filter_not_passed", "draft filtered, unfiltered p verified", draft_rows="unfiltered"),
    _shipped("target_not_warped", "target rows not warped", target_rows="raw"),
    _shipped("residual_only_rejected_entry", "residual at the rejected token only"),
    Mistake("one_uniform_reused", "one uniform reused for the draw", "-",
            "one uniform decides the accept tests and draws the token after them (a generator reseeded inside the "
            "loop does this)", broken.one_uniform_reused),
    Mistake("letters_swapped", "p and q swapped", "asked in LLMSpeculativeSampling #36",
            "Leviathan's rule (his p is the target) run on Chen's letters (p is the draft): accept with min(1, p/q), "
            "resample from norm(max(0, p - q)); the code in #36 is right in its own letters", letters_swapped),
]
CORRECT = Mistake("correct", "none: Algorithm 2 (mrs.verify)", "-", "Chen's Algorithm 2 as written",
                  broken.Bug("verify", "mrs.verify", mrs.verify, laws.token_call_law))


@functools.cache
def gallery_chains() -> dict[str, np.ndarray]:
    """The gallery's rows [V, V] given the previous token: target and draft, raw, warped, and the draft unfiltered."""
    rng = np.random.default_rng(GALLERY_SEED)
    target = rng.dirichlet(np.full(GALLERY_V, 0.7), size=GALLERY_V)  # [V, V]
    draft = 0.5 * target + 0.5 * rng.dirichlet(np.full(GALLERY_V, 0.7), size=GALLERY_V)  # [V, V]
    return {"target_raw": target, "target": REQUEST(target), "draft": REQUEST(draft),
            "draft_unfiltered": warps.Warp(temperature=REQUEST.temperature)(draft)}


def _pipeline_rows(m: Mistake):  # -> the draft's rows, the p rows handed on, the q rows handed on ([V, V] each)
    c = gallery_chains()
    return (c["draft"], c["draft"] if m.draft_rows == "warped" else c["draft_unfiltered"],
            c["target"] if m.target_rows == "warped" else c["target_raw"])


def pipeline_generate(m: Mistake, rng: np.random.Generator) -> tuple:
    """One run of Chen's Alg. 2 with the pieces of mistake m: the GALLERY_L tokens after the prompt."""
    drafted, p_rows, q_rows = _pipeline_rows(m)
    K, out, last = GALLERY_K, [], GALLERY_PROMPT
    while len(out) < GALLERY_L:
        context = [last]
        for _ in range(K):  # Alg. 2, lines 5-7: each draft from the draft's warped row (or its argmax)
            row = drafted[context[-1]]
            context.append(laws.first_max(row) if m.drafting == "argmax" else mrs.sample(row, rng))
        x_draft = np.array(context[1:], dtype=np.int64)  # [K]
        p, q = p_rows[context[:K]], q_rows[context]  # [K, V], [K+1, V]: the rows handed to the verifier
        new = [int(v) for v in m.verifier(x_draft, p, q, rng)]  # lines 9-14
        out += new
        last = new[-1]
    return tuple(out[:GALLERY_L])


def pipeline_law(m: Mistake) -> dict[tuple, float]:
    """The exact law of pipeline_generate(m): each call's law summed over its drafts, calls continued to GALLERY_L tokens."""
    drafted, p_rows, q_rows = _pipeline_rows(m)
    K, V = GALLERY_K, GALLERY_V
    law_given_drafts = m.verifier.law if m.verifier is not mrs.verify else laws.token_call_law

    def call(previous: int) -> dict:
        law = {}
        blocks = [tuple(0 for _ in range(K))] if m.drafting == "argmax" else list(np.ndindex(*(V,) * K))
        for xs in blocks:
            context = [previous]
            chance = 1.0
            for t in range(K):
                row = drafted[context[-1]]
                if m.drafting == "argmax":
                    context.append(laws.first_max(row))
                else:
                    context.append(int(xs[t]))
                    chance *= float(row[xs[t]])
            if chance == 0:
                continue
            for out, v in law_given_drafts(context[1:], p_rows[context[:K]], q_rows[context]).items():
                law[out] = law.get(out, 0.0) + chance * float(v)
        return law
    calls = {v: call(v) for v in range(V)}
    done, frontier = {}, {(): 1.0}
    while frontier:
        nxt = {}
        for seq, w in frontier.items():
            for out, v in calls[seq[-1] if seq else GALLERY_PROMPT].items():
                s = (seq + out)[:GALLERY_L]
                into = done if len(s) == GALLERY_L else nxt
                into[s] = into.get(s, 0.0) + w * v
        frontier = nxt
    return done


def plain_law() -> dict[tuple, float]:
    """The exact law of GALLERY_L tokens of plain sampling from the warped target: what every pipeline must match."""
    target = gallery_chains()["target"]
    return laws.continued_law({(): 1.0}, lambda s: target[s[-1] if s else GALLERY_PROMPT], GALLERY_L)


@dataclass(frozen=True)
class Row:
    """One row of show_mistakes' table."""

    name: str
    label: str
    where: str
    statistic: float
    dof: int
    pvalue: float
    diagnosis: str  # the mistake whose pipeline law the counts fit ('' when none does, or for a pass)

    @property
    def passed(self) -> bool:
        return self.pvalue > stats.LEVEL


class Table:
    """show_mistakes' rows; its repr is the table."""

    def __init__(self, rows: list[Row], n: int, seconds: float):
        self.rows, self.n, self.seconds = rows, n, seconds
        self._shown_in = None

    def __repr__(self) -> str:
        cols = ["mistake", "where it shipped", "chi2", "dof", "p-value", "verdict", "diagnosis"]
        cells = [[r.label, r.where, f"{r.statistic:.1f}", str(r.dof), f"{r.pvalue:.2g}", "pass" if r.passed else "FAIL",
                  r.diagnosis or ("-" if r.passed else "no known mistake fits")] for r in self.rows]
        width = [max(len(c[i]) for c in cells + [cols]) for i in range(len(cols))]

        def line(c):
            return "  ".join(v.ljust(w) for v, w in zip(c, width)).rstrip()
        lines = [f"{self.n} sequences a row: the {GALLERY_L} tokens after the prompt (V = {GALLERY_V}, K = {GALLERY_K}, "
                 f"warp T = {REQUEST.temperature:g}, top-k {REQUEST.top_k}) against plain sampling's exact law, "
                 f"level {stats.LEVEL:g}", line(cols)] + [line(c) for c in cells]
        if any(math.isinf(r.statistic) for r in self.rows):
            lines.append("chi2 inf: a sequence plain sampling never produces was seen")
        return "\n".join(lines)

    __str__ = __repr__
    _ipython_display_ = Result._ipython_display_

    @property
    def verdict(self) -> str:
        return repr(self)


def mistake_rows(n: int = N_GALLERY, seed: int = GALLERY_SEED) -> list[Row]:
    """The correct pipeline and each of MISTAKES through the same chi-square: n sequences each, row i drawn with
    np.random.default_rng((seed, i))."""
    reference = plain_law()
    mistake_laws = {m.name: pipeline_law(m) for m in MISTAKES}
    rows = []
    for i, m in enumerate([CORRECT, *MISTAKES]):
        rng = np.random.default_rng((seed, i))
        counts = Counter(pipeline_generate(m, rng) for _ in range(n))
        stat, dof, pvalue = stats.chi_square_gof(counts, reference)
        found = "" if pvalue > stats.LEVEL else _likeliest(counts, reference, mistake_laws)
        rows.append(Row(m.name, m.label, m.where, stat, dof, pvalue, f"fits {found}" if found else ""))
    return rows


def show_mistakes(n: int = N_GALLERY, seed: int = GALLERY_SEED) -> Table:
    """Run the correct pipeline and each of MISTAKES through the same chi-square and print the table (module docstring)."""
    start = time.perf_counter()
    rows = mistake_rows(n, seed)
    return _show(Table(rows, n, time.perf_counter() - start))
