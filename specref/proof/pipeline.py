"""Whole-pipeline conformance: a speculative generator against the same models' plain sampling.

    from specref.proof import conform
    report = conform.check_pipeline(my_speculative_generate, my_plain_generate)
    assert report.passed, report.text()

or `python -m specref conform --pipeline MODULE:GENERATE --reference MODULE:PLAIN`.

The verifier check (`conform.check`) cannot see bugs around the verifier: rows handed to it that are
not the rows the drafts were drawn from, a target whose rows miss the request's warps, a draft that
decodes greedily.  This check looks at what comes out of the whole pipeline.  GENERATE(n_samples,
seed) and PLAIN(n_samples, seed) each return n_samples generated sequences, an integer array
[n_samples, L]: GENERATE through speculative sampling, PLAIN by the same target's ordinary sampling
with the same settings (the pipeline owns its models and its prompt).  A correct speculative
sampler gives its sequences the plain sampler's law, so the two samples must look alike:

- output checks, on each sample: an integer array of n_samples rows and at least L columns, ids in
  [0, V) when the vocabulary is given, and no sequence the reference law (when given) calls
  impossible;
- without the vocabulary ids cannot be range-checked: the ids GENERATE returned beyond every id
  PLAIN returned are named, and make that check not tested (`id_check`): a correct pipeline may
  draw a rare id its reference did not, a broken one an id outside the vocabulary, and only the
  vocabulary tells them apart;
- a two-sample chi-square test of homogeneity on whole L-token sequences: each sequence seen at
  least MIN_EXPECTED times in the smaller sample's share of the pooled counts is a bin of its own,
  the rarer ones share bins as in `stats.pooled_bins`.  The bins depend on the pooled counts only,
  so given them the split between the two samples is what a correct pipeline makes it; the level
  is the checker's family-wise FAMILY_LEVEL (this is the run's one chi-square check).  With one
  bin (too few sequences, or one sequence in every row of both) it tests nothing: not tested, with
  about the sample size that gives it two bins.  A failure's diagnosis names a sample that returned
  one sequence in nearly every row (a seed or random state reused for every row).

A check that tested nothing makes the run INCOMPLETE (`report.passed` is false, the command's exit
status 3), never a pass.

Each call of GENERATE or PLAIN may take CALL_LIMIT seconds and the whole run RUN_LIMIT: a call past
its limit, or an output that is not what the contract says, ends the run at once with a failing
check that says what was wrong.

The pipeline forms of the known around-the-verifier bugs are `Toy` pipelines (two Markov chains
over V = 6 tokens, warped by temperature, top-k and top-p as `specref.warps` does, K = 2 drafts a
call) in which one method differs from the correct `Toy`: see PIPELINE_BUGS.  Each has its exact
law of L tokens (`Toy.law`), so the false-alarm rate and the power below are checked against exact
arithmetic, not only measured: `python -m specref.proof.pipeline` measures them over fresh seeds.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
from scipy import stats as sps

from specref.proof import stats
from specref.proof.bugs.shipped import PIPELINE_BUGS, Bf16Draft
from specref.proof.toy import Toy
from specref.proof.power import smallest_n
from specref.proof.stats import total_variation
from specref.proof.verdict import Check, ContractViolation, Limits, Stop, Verdict, not_tested

FAMILY_LEVEL = stats.LEVEL  # the conformance checker's family-wise false-alarm level
SAMPLES = 20_000  # sequences in each sample by default
CALL_LIMIT = 900.0  # seconds for one call of GENERATE or PLAIN (all n_samples sequences)
RUN_LIMIT = 1800.0  # seconds for the whole run
REPEATED = 0.9  # a sample whose most frequent sequence fills this share of its rows is named in a failure's diagnosis
IDS = "ids (no vocabulary given)"  # the name of the check on ids when the vocabulary is not known


# ---------------------------------------------------------------- the test

def two_sample_chi_square(a: Counter, b: Counter) -> tuple[float, int, float]:
    """Pearson chi-square of homogeneity of two samples of outcomes, over pooled sparse bins: (statistic, dof, p-value).

    The bins are `stats.pooled_bins` of the pooled frequencies for the smaller sample: an outcome
    expected at least stats.MIN_EXPECTED times in each sample is a bin of its own, the rarer ones
    are pooled.  They depend on the pooled counts only.
    """
    na, nb = sum(a.values()), sum(b.values())
    if na == 0 or nb == 0:
        raise ValueError("no observations")
    total = na + nb
    pooled = {k: (a.get(k, 0) + b.get(k, 0)) / total for k in set(a) | set(b)}
    bins = stats.pooled_bins(pooled, min(na, nb))
    if len(bins) < 2:
        return 0.0, 0, 1.0
    obs = np.array([[sum(c.get(k, 0) for k in group) for group in bins] for c in (a, b)], dtype=np.float64)  # [2, B]
    share = obs.sum(axis=0) / total  # [B]
    exp = np.outer([na, nb], share)  # [2, B]
    stat = float(((obs - exp) ** 2 / exp).sum())
    dof = len(bins) - 1
    return stat, dof, float(sps.chi2.sf(stat, dof))


def sequences(out, n: int, L: int | None, V: int | None, what: str) -> tuple[np.ndarray | None, str]:
    """(out as an int64 array [n, L], '') if it is n sequences of at least L token ids in [0, V); else (None, what is wrong)."""
    if out is None or isinstance(out, (str, bytes)):
        shown = "None" if out is None else f"a {type(out).__name__}, {out!r:.40}"
        return None, f"{what} returned {shown}, not an array [{n}, L] of token ids"
    try:
        if hasattr(out, "detach"):  # a torch tensor
            out = out.detach().cpu()
        arr = np.asarray(out)
    except Exception as e:  # noqa: BLE001  (whatever it returned)
        lengths = _row_lengths(out)
        if len(lengths) > 1:
            return None, (f"{what} returned rows of different lengths ({min(lengths)} to {max(lengths)} tokens), "
                          f"not an array [{n}, L]")
        return None, f"{what} returned something that is not an array ({type(e).__name__}: {e})"
    if arr.ndim != 2 or arr.shape[0] != n:
        return None, f"{what} returned an array of shape {arr.shape}, not [{n}, L] ({n} sequences)"
    if L is not None and arr.shape[1] < L:
        return None, f"{what} returned {arr.shape[1]} tokens a sequence, fewer than the {L} asked for"
    if arr.shape[1] == 0:
        return None, f"{what} returned sequences of 0 tokens"
    if arr.dtype.kind == "f":
        if not (np.all(np.isfinite(arr)) and np.all(arr == np.round(arr))):
            bad = arr[~(np.isfinite(arr) & (arr == np.round(arr)))]
            return None, f"{what} returned values that are not integer token ids, e.g. {bad.reshape(-1)[0]}"
    elif arr.dtype.kind not in "iub":
        return None, f"{what} returned an array of dtype {arr.dtype}, not integer token ids"
    if arr.size and ((arr.dtype.kind == "f" and np.abs(arr).max() >= 2.0**63)
                     or (arr.dtype.kind == "u" and arr.max() > np.iinfo(np.int64).max)):
        return None, f"{what} returned token id {arr.reshape(-1)[np.argmax(np.abs(arr.reshape(-1)))]}, beyond int64"
    arr = arr.astype(np.int64)[:, : (L if L is not None else arr.shape[1])]
    bad = arr[(arr < 0) | (arr >= (V if V is not None else np.iinfo(np.int64).max))]
    if bad.size:
        return None, f"{what} returned token id {int(bad[0])}, outside [0, {V if V is not None else 'inf'})"
    return arr, ""


def _remedy(check: Check) -> str:  # what makes a check that tested nothing test something
    if check.name == IDS:
        return "give --vocabulary V"
    if check.needs is not None and math.isfinite(check.needs):
        return f"run with --samples {check.needs:.0f} or more"
    return "no sample size helps"


def _row_lengths(out) -> set:  # the lengths of the rows of a list of sequences, as far as they have any
    try:
        return {len(row) for row in out}
    except TypeError:
        return set()


@dataclass
class PipelineReport(Verdict):
    """The checks of one pipeline run."""

    generate: str
    reference: str
    seed: int
    checks: list = field(default_factory=list)
    seconds: float = 0.0
    diagnosis: str = ""

    def text(self) -> str:
        lines = [f"pipeline conformance of {self.generate} against {self.reference} (seed {self.seed})",
                 f"one chi-square check at level {FAMILY_LEVEL:g}: a correct pipeline fails this run with probability "
                 f"about {FAMILY_LEVEL:g} (the nominal rate, which the chi-square approximation keeps only roughly); "
                 "the other checks never fail a correct pipeline"]
        lines += [c.line() for c in self.checks]
        lines.append(f"{self.verdict()} in {self.seconds:.1f} s")
        if self.untested:
            lines.append(self.untested_line())
        if self.diagnosis:
            lines.append(f"diagnosis: {self.diagnosis}")
        return "\n".join(lines)

    __str__ = text

    def untested_line(self) -> str:
        """Which checks tested nothing, and what would make them test something."""
        return "not tested: " + "; ".join(f"{c.name}: {_remedy(c)}" for c in self.untested)

    def to_json(self) -> dict:
        return {"generate": self.generate, "reference": self.reference, "seed": self.seed, "passed": self.passed,
                "verdict": self.verdict(), "family_level": FAMILY_LEVEL, "seconds": self.seconds,
                "diagnosis": self.diagnosis, "checks": [vars(c) for c in self.checks]}


def check_pipeline(generate: Callable, reference: Callable, new_tokens: int | None = None, samples: int = SAMPLES,
                   seed: int = 0, vocabulary: int | None = None, law: dict | None = None,
                   call_limit: float = CALL_LIMIT, time_limit: float = RUN_LIMIT, name: str | None = None,
                   reference_name: str | None = None, progress: Callable | None = None) -> PipelineReport:
    """Check that generate(samples, seed) -> [samples, L] ids has the law of reference(samples, seed) (module docstring).

    new_tokens: compare the first L = new_tokens tokens of each sequence (default: every column
    GENERATE returns; PLAIN must return as many).  vocabulary: ids must be in [0, V).  law: the
    exact law of L tokens, {tuple of L ids: probability}, if known: a sequence it gives probability
    0 fails the run.  The two functions get different seeds drawn from `seed`.
    """
    if samples < 1 or int(samples) != samples:
        raise ValueError(f"samples must be an integer >= 1, got {samples}")
    if new_tokens is not None and (int(new_tokens) != new_tokens or new_tokens < 1):
        raise ValueError(f"new_tokens must be an integer >= 1, got {new_tokens}")
    start = time.perf_counter()
    report = PipelineReport(name or getattr(generate, "__qualname__", repr(generate)),
                            reference_name or getattr(reference, "__qualname__", repr(reference)), seed)

    def add(c) -> None:
        report.checks.append(c)
        if progress is not None:
            progress(c)

    limits = Limits(call_limit, time_limit, "pipeline call")
    seed_g, seed_r = (int(s) for s in np.random.default_rng(seed).integers(2**31, size=2))
    got = {}
    try:
        for what, function, s in (("speculative", generate, seed_g), ("plain", reference, seed_r)):
            t0 = time.perf_counter()
            try:
                out = limits.call(function, samples, s)
            except Exception as e:  # noqa: BLE001  (a crash is the verdict, reported as a crash)
                raise _Raised(f"{what} ({what == 'speculative' and 'GENERATE' or 'PLAIN'}) raised {type(e).__name__}: {e}")
            L = new_tokens if new_tokens is not None else (got["speculative"].shape[1] if got else None)
            arr, problem = sequences(out, samples, L, vocabulary, "GENERATE" if what == "speculative" else "PLAIN")
            if problem:
                raise ContractViolation(problem)
            got[what] = arr
            add(Check(f"output: {what}", "edge", True, f"{samples} sequences of {arr.shape[1]} token ids"
                              + (f" in [0, {vocabulary})" if vocabulary is not None else " >= 0"),
                              seconds=time.perf_counter() - t0))
    except _Raised as e:
        add(Check("raised", "edge", False, str(e)))
        report.diagnosis = str(e)
    except Stop as stop:
        add(Check(stop.check, "edge", False, str(stop)))
        report.diagnosis = f"{stop.check}: {stop}"
    if report.diagnosis:
        report.seconds = time.perf_counter() - start
        return report

    if vocabulary is None:
        add(id_check(got["speculative"], got["plain"]))
    counts = {what: _count(arr) for what, arr in got.items()}
    if law is not None:
        impossible = {what: sum(c for s, c in counts[what].items() if law.get(s, 0.0) <= 0.0) for what in counts}
        ok = not any(impossible.values())
        example = next((s for what in counts for s in counts[what] if law.get(s, 0.0) <= 0.0), None)
        add(Check("no impossible sequence", "edge", ok,
                          f"sequences the reference law gives probability 0: {impossible['speculative']} speculative, "
                          f"{impossible['plain']} plain" + ("" if ok else f", e.g. {list(example)}")))
    t0 = time.perf_counter()
    stat, dof, pvalue = two_sample_chi_square(counts["speculative"], counts["plain"])
    check = Check(f"sequences of {got['plain'].shape[1]} tokens", "statistical", pvalue > FAMILY_LEVEL,
                  f"chi2={stat:.1f} dof={dof} two-sample, {len(counts['speculative'])} and {len(counts['plain'])} "
                  "distinct sequences", pvalue, FAMILY_LEVEL, samples, seconds=time.perf_counter() - t0)
    if check.passed and dof == 0:
        not_tested(check, *_one_bin(counts, samples))
    add(check)
    if report.failed:
        report.diagnosis = "; ".join(
            ["the speculative pipeline's sequences do not have the plain sampler's law" if check.passed is False
             else "impossible sequences"] + _repeated(counts, samples))
    report.seconds = time.perf_counter() - start
    return report


def id_check(generated: np.ndarray, plain: np.ndarray) -> Check:
    """Without the vocabulary, ids cannot be range-checked; the ids GENERATE returned beyond every id PLAIN returned
    are named, and make the check not tested (a correct pipeline may draw a rare id PLAIN did not; a broken one, an id
    outside the vocabulary: only the vocabulary tells them apart).  [n, L], [n, L] ids >= 0."""
    top = int(plain.max())
    beyond = generated > top  # [n, L]
    if not beyond.any():
        return Check(IDS, "edge", True, f"every id GENERATE returned is at most {top}, the largest PLAIN returned; "
                                        "not range-checked against the vocabulary: give --vocabulary V (vocabulary=V)")
    ids = np.unique(generated[beyond])
    shown = ", ".join(str(int(i)) for i in ids[:5]) + (", ..." if len(ids) > 5 else "")
    rows = int(beyond.any(axis=1).sum())
    check = Check(IDS, "edge", None, f"GENERATE returned ids that PLAIN never did, beyond every id it returned "
                                     f"(at most {top}): {shown} in {rows} of {len(generated)} sequences")
    return not_tested(check, "the vocabulary is not known, so these ids were not range-checked: run again with "
                             "--vocabulary V (vocabulary=V in Python)", None)


def _one_bin(counts: dict, n: int) -> tuple[str, float]:
    """Why a two-sample check with one bin tested nothing, and about how many sequences a sample give it two bins."""
    pooled = counts["speculative"] + counts["plain"]
    if len(pooled) == 1:
        return ("every row of both samples is the same sequence: nothing to compare (are both deterministic, or do "
                "both ignore their seeds?)"), math.inf
    total = sum(pooled.values())
    freq = {k: v / total for k, v in pooled.items()}
    needs = smallest_n(lambda m: float(len(stats.pooled_bins(freq, m)) >= 2), target=1.0)
    return (f"its {n} + {n} sequences pool into one bin (dof 0): its chi-square is 0 whatever the laws; by the "
            f"frequencies seen here it has two bins from about {needs:.0f} sequences a sample (--samples)"), needs


def _repeated(counts: dict, n: int) -> list[str]:
    """For each sample whose most frequent sequence fills at least REPEATED of its rows: that sequence, and how often
    the other sample has it (a pipeline that reuses one seed or random state for every row)."""
    out = []
    for what, name, other, other_name in (("speculative", "GENERATE", "plain", "PLAIN"),
                                          ("plain", "PLAIN", "speculative", "GENERATE")):
        seq, c = counts[what].most_common(1)[0]
        if c >= REPEATED * n:
            shown = list(seq[:8]) + (["..."] if len(seq) > 8 else [])
            out.append(f"{name} returned the same sequence {shown} in {c} of {n} rows, {other_name} in "
                       f"{counts[other].get(seq, 0)}: does {name} reuse one seed or random state for every row?")
    return out


def _count(arr: np.ndarray) -> Counter:  # [n, L] ids >= 0 -> {sequence: count}
    base = int(arr.max()) + 1 if arr.size else 1
    if base ** arr.shape[1] < 2**62:  # each sequence as one integer in base `base`: one fast 1-D unique
        codes, n = np.unique(arr @ base ** np.arange(arr.shape[1] - 1, -1, -1, dtype=np.int64), return_counts=True)
        rows = (codes[:, None] // base ** np.arange(arr.shape[1] - 1, -1, -1, dtype=np.int64)) % base
    else:
        rows, n = np.unique(arr, axis=0, return_counts=True)
    return Counter({tuple(int(v) for v in r): int(c) for r, c in zip(rows, n)})


class _Raised(Exception):
    pass


# ---------------------------------------------------------------- the toy pipelines, for the command line

# For the command line: specref.proof.pipeline:TOY.generate against specref.proof.pipeline:TOY.plain, and each bug.
TOY = Toy()
unfiltered_draft_rows, greedy_draft, target_not_warped, argmax_after_filters, bf16_draft = (
    cls() for cls in PIPELINE_BUGS.values())


def samples_to_see(law: dict, reference: dict, power: float = 0.5, level: float = FAMILY_LEVEL) -> float:
    """Sequences per sample at which the two-sample test rejects with probability `power` (inf beyond 1e12), by the
    noncentral chi-square with the bins of the pooled law at that size (equal samples: lambda = n/2 * sum (a-b)^2/mean)."""
    mean = {k: (law.get(k, 0.0) + reference.get(k, 0.0)) / 2 for k in set(law) | set(reference)}

    def chance(n: int) -> float:
        bins = stats.pooled_bins(mean, n)
        a = np.array([sum(law.get(k, 0.0) for k in g) for g in bins])
        b = np.array([sum(reference.get(k, 0.0) for k in g) for g in bins])
        lam = n / 2 * float(((a - b) ** 2 / ((a + b) / 2)).sum())
        dof = len(bins) - 1
        return float(sps.ncx2.sf(sps.chi2.isf(level, dof), dof, lam)) if dof > 0 else 0.0
    n = smallest_n(chance, power)
    return n if math.isinf(n) else int(n)


# ---------------------------------------------------------------- false alarms and power, measured

def pvalues(pipe: Toy, samples: int, runs: int, first_seed: int, progress: Callable | None = None,
            name: str = "run") -> list[float]:
    """The chi-square p-values of check_pipeline on `pipe` for seeds first_seed, first_seed + 1, ...;
    progress(line) after each run if given."""
    out = []
    for i in range(runs):
        out.append(check_pipeline(pipe.generate, pipe.plain, samples=samples, seed=first_seed + i).checks[-1].pvalue)
        if progress:
            progress(f"{name} {i + 1}/{runs} (seed {first_seed + i}): p = {out[-1]:.3g}")
    return out


def failures(pipe: Toy, samples: int, runs: int, first_seed: int) -> int:
    """How many of `runs` runs of check_pipeline on `pipe` (seeds first_seed, first_seed + 1, ...) fail."""
    return sum(not check_pipeline(pipe.generate, pipe.plain, samples=samples, seed=first_seed + i).passed
               for i in range(runs))


def measure(runs_correct: int, runs_bug: int, samples: int = SAMPLES, first_seed: int = 1, power_runs: int = 0,
            largest: int = 100_000) -> dict:
    """Runs check_pipeline with fresh seeds: on TOY (false alarms) and on each PIPELINE_BUGS pipeline (power at
    `samples`).  Also the sizes the noncentral chi-square gives for power 0.5 and 0.95 and, with power_runs, the
    power measured at the size for 0.5 (power_runs fresh seeds; bugs whose size exceeds `largest` are left out)."""
    out = {"samples": samples, "level": FAMILY_LEVEL}
    toy = TOY
    reference = toy.plain_law()
    ps = pvalues(toy, samples, runs_correct, first_seed)
    out["correct"] = {"runs": runs_correct, "failed": int(sum(p <= FAMILY_LEVEL for p in ps)),
                      "below_0.05": float(np.mean(np.array(ps) < 0.05)), "below_0.01": float(np.mean(np.array(ps) < 0.01)),
                      "ks_uniform_p": float(sps.kstest(ps, "uniform").pvalue),
                      "total_variation": total_variation(toy.law(), reference)}
    for name, cls in PIPELINE_BUGS.items():
        bug = cls()
        law = bug.law()
        fails = failures(bug, samples, runs_bug, first_seed)
        half = samples_to_see(law, reference)
        out[name] = {"runs": runs_bug, "failed": int(fails), "total_variation": total_variation(law, reference),
                     "acceptance": bug.acceptance(), "samples_for_power_0.5": half,
                     "samples_for_power_0.95": samples_to_see(law, reference, 0.95)}
        if power_runs and half <= largest:
            caught = failures(bug, half, power_runs, first_seed)
            out[name]["at_power_0.5_size"] = {"runs": power_runs, "failed": int(caught),
                                              "fraction_failed": caught / power_runs}
    return out


def measure_small(runs: int, new_tokens: int = 2, power: float = 0.95, first_seed: int = 1,
                  progress: Callable | None = None) -> dict:
    """The smallest effect, bf16_draft, at the size the noncentral chi-square says gives it `power`.

    At L = 4 and 20 000 sequences its law is 6.6e-4 from the correct one in total variation and
    the check cannot see it; two-token sequences carry nearly the same distance (6.2e-4) in 7
    possible outcomes instead of 84, so they need the fewest sequences (one token: 4.6e-5, the
    first token's law hardly moves).  Runs check_pipeline `runs` times with fresh
    seeds on the correct Toy (false alarms at that size) and on Bf16Draft (power), both with
    L = new_tokens."""
    bug, toy = Bf16Draft(L=new_tokens), Toy(L=new_tokens)
    law, reference = bug.law(), toy.plain_law()
    n = samples_to_see(law, reference, power)
    out = {"new_tokens": new_tokens, "samples": n, "computed_power": power, "level": FAMILY_LEVEL,
           "total_variation": total_variation(law, reference)}
    for name, pipe in (("correct", toy), ("bf16_draft", bug)):
        ps = pvalues(pipe, n, runs, first_seed, progress, f"{name} run")
        out[name] = {"runs": runs, "failed": int(sum(p <= FAMILY_LEVEL for p in ps)), "pvalues": ps}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="false-alarm rate and power of the pipeline check, over fresh seeds")
    ap.add_argument("--correct-runs", type=int, default=1000)
    ap.add_argument("--bug-runs", type=int, default=100)
    ap.add_argument("--samples", type=int, default=SAMPLES)
    ap.add_argument("--first-seed", type=int, default=1)
    ap.add_argument("--json", default=None)
    ap.add_argument("--power-runs", type=int, default=0, metavar="R",
                    help="also check each bug R times at the size computed for power 0.5 (sizes up to 100 000)")
    ap.add_argument("--small-runs", type=int, default=0, metavar="R",
                    help="instead: R runs each of the correct pipeline and bf16_draft at the size computed for 95%% power "
                         "(two-token sequences, about 3.7e7 a sample; a minute or two a run)")
    args = ap.parse_args(argv)
    start = time.time()
    if args.small_runs:
        result = measure_small(args.small_runs, first_seed=args.first_seed,
                               progress=lambda line: print(line, file=sys.stderr, flush=True))
    else:
        result = measure(args.correct_runs, args.bug_runs, args.samples, args.first_seed, args.power_runs)
    result["seconds"] = time.time() - start
    text = json.dumps(result, indent=1)
    print(text)
    if args.json:
        from specref.files import write_text
        write_text(args.json, text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
