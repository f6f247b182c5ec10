"""A run's report, chains and trees alike: its checks, its text, what it covers, and its diagnosis.

`Report` reads its verdict off its checks (`verdict.Verdict`), states the run's false-alarm rate,
which checks tested nothing and at what scale they would, and which known bugs a run of its sizes
catches (`coverage`).  `summary` makes the run's diagnosis from its failing checks: the known bug the
failing edge or contract checks are the signature of, and the one under which all the failing
one-call checks' counts together are likeliest.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from specref.proof.bugs import shipped
from specref.proof.conform import algorithms, checks as levels
from specref.proof.verdict import Check, Verdict


# The name of the check that stands for an exact tier that did not run.
EXACT_NOT_RUN = "exact tier not run"


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
        family = levels.FAMILY_LEVEL
        head = [f"conformance of {self.verifier} as {algorithms.CHECKED_AS[self.algorithm]} (seed {self.seed})",
                f"chi-square checks: {m}, each at level {family:g} / {m}: a correct verifier fails this run "
                f"with probability about {family:g} (the nominal rate, which the chi-square approximation keeps only "
                "roughly); the other checks never fail a correct verifier"]
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

    @property
    def exact_not_run(self) -> bool:
        """Whether the exact tier did not run (turned off, or the checker's uniforms could not reach the function)."""
        return any(c.name == EXACT_NOT_RUN for c in self.checks)

    def verdict(self) -> str:
        """Verdict's, except that a pass without the exact tier says so: the bugs only chosen uniforms see (a coin
        u <= ratio that keeps a token of probability 0 at u = 0) were not looked for."""
        verdict = super().verdict()
        if verdict == "PASSED" and self.exact_not_run:
            return "PASSED THE STATISTICAL TIER ONLY (exact tier not run: see its line)"
        return verdict

    def untested_line(self) -> str:
        """Which checks tested nothing at this run's sizes, and the scale at which all of them would."""
        names = ", ".join(c.name for c in self.untested)
        scales = [c.needs / c.samples * self.scale for c in self.untested if c.needs and c.samples]
        if not scales or np.isinf(max(scales)):
            return f"not tested at these sample sizes: {names}"
        they = "all of them count" if len(self.untested) > 1 else "it counts"
        return f"not tested at these sample sizes: {names}; {they} as tests from scale {round_up(max(scales))} " \
               f"(this run: {self.scale:g})"

    def coverage(self) -> str:
        """Which known bugs a run of these sample sizes catches with at least 95% power (its part's `caught`): for a
        chain the bugs that shipped (specref.proof.bugs.shipped; the edge cases when the exact tier ran, the others by
        `power.run_power` from exact laws, sequences left out), for a tree its algorithm's known bugs.  A check that
        tested nothing (`untested`) counts for nothing."""
        stat = [c for c in self.checks if c.tier == "statistical" and c.samples and c.level]
        if not stat:
            return ""
        exact_ran = {c.name for c in self.checks if c.tier == "exact" and c.passed is not None}
        counted = {c.name: c.samples for c in stat if not c.untested}
        unseen = [c.name for c in stat if c.untested]
        what, yes, no = algorithms.part(self.algorithm).caught(self.algorithm, counted, min(c.level for c in stat),
                                                               exact_ran)
        sized = algorithms.sized_at(yes)
        return (f"{what} this run catches with >= 95% power: {', '.join(yes) or 'none'}"
                + (f"; with less: {', '.join(no)}" if no else "")
                + (f" (not counted, having tested nothing: {', '.join(unseen)})" if unseen else "")
                + (f"; {sized}" if sized else ""))

    def to_json(self) -> dict:
        return {"verifier": self.verifier, "algorithm": self.algorithm, "seed": self.seed, "passed": self.passed,
                "verdict": self.verdict(), "family_level": levels.FAMILY_LEVEL, "scale": self.scale,
                "seconds": self.seconds, "diagnosis": self.diagnosis, "checks": [vars(c) for c in self.checks]}


def round_up(x: float) -> str:
    """x rounded up to two significant digits, as text."""
    step = 10.0 ** (np.floor(np.log10(x)) - 1)
    return f"{np.ceil(x / step - 1e-9) * step:.2g}"


# ---------------------------------------------------------------- the diagnosis

def edge_names(report: Report) -> str:
    """The known bugs that the run's failing edge or contract checks are the signature of: for a tree verifier first
    its algorithm's own (its part's `edge_bug`), then the shipped bugs (specref.proof.bugs.shipped)."""
    found = []
    for c in report.failed:
        bug = algorithms.part(report.algorithm).edge_bug(report.algorithm, c.name)
        if bug is not None:
            found.append((c, bug.name, bug.about))
            continue
        s = shipped.edge_signature(c.name, c.detail)
        if s is not None:
            found.append((c, s.name, s.bug.about))
    return "; ".join(f"{name}: {about} (the check '{c.name}' failed)" for c, name, about in found)


def evidence(report: Report) -> str:
    """The most telling evidence among the failing checks when no known bug explains them: an output the exact law
    forbids (a statistical check's, then the every-output watch's), else the largest deviation of the first failing
    check whose counts no known law fits."""
    failed = report.failed
    for c in failed:
        if c.tier == "statistical" and "have probability 0 under the exact law" in c.detail:
            return f"'{c.name}': {c.detail}"
    for c in failed:
        if c.name == "every output seen":
            return f"'{c.name}': {c.detail}"
    for c in failed:
        if c.diagnosis.startswith(levels.NO_BUG_FITS):
            return f"'{c.name}': {c.diagnosis[len(levels.NO_BUG_FITS):]}"
    return ""


def unknown(report: Report) -> str:
    """The diagnosis when no known bug explains the failing checks: said first, then the evidence."""
    shown = evidence(report)
    return "no known bug explains the failing checks" + (f"; the evidence: {shown}" if shown else
                                                          " (see the failing checks)")


def summary(report: Report, ll_sum: Counter, signatures: list) -> str:
    """The diagnosis of a run that went through every check: the known bug that the failing edge checks are the
    signature of, and the bug that a failing one-call check names (its law fits the counts, and is likelier than the
    correct law and every other bug's), the one under which all their counts together are likeliest (ll_sum: each
    bug's summed log-likelihood).  When no known bug's law fits, it says so first and shows the evidence (`unknown`):
    a bug is never named only for being the least unlikely."""
    if not report.failed:
        return ""
    edge = edge_names(report)
    named = Counter(c.bug for c in report.failed if c.bug)
    if not named:
        return edge or unknown(report)
    best = max(named, key=lambda name: (ll_sum.get(name, float("-inf")), named[name]))
    looks_like = {s.name: s.about for s in signatures}[best]
    found = f"{best}: {looks_like} (named by {named[best]} of the {len(report.failed)} failing checks)"
    return f"{edge}; {found}" if edge else found
