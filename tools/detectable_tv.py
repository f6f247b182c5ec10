"""The smallest deviation from the correct law that each chi-square test family of the suite sees with 95% power.

    python3 -m tools.detectable_tv        # the table of docs/tests.md

Each family is computed on the tests' own rows, laws and sample sizes (imported from the test
modules, so the table follows them), at the suite's level stats.LEVEL, with specref.proof.power:
a test of n draws over the bins `stats.pooled_bins(correct, n)` rejects a law with the power of a
non-central chi-square, plus the chance of drawing an outcome the correct law calls impossible
(`power.check_power`; good to a few percent of power, docs/shipped_bugs.md).  A chi-square sees
some directions of deviation far better than others, so two numbers are given, as total variation:

- toward the draft: the law (1 - e) L0 + e B, L0 the correct law and B the output's law when the
  draft is believed without a test: for one `mrs.accept_or_resample` step the draft row p itself; for one call and the
  accepted count `broken.always_accept` (every draft kept, then the bonus token); for whole
  sequences the draft chain's own law.  The smallest e with 95% power (`power.smallest_n` over a
  grid of e) is reported as its total variation e * TV(B, L0), smallest and largest over the
  family's cases (a case where B = L0 has no such direction and is left out);
- any direction: a deviation d over the bins (summing to 0) has noncentrality
  n * sum_b d_b^2 / p_b >= n * (sum_b |d_b|)^2 = 4 n TV_b^2 (Cauchy-Schwarz with sum_b p_b = 1),
  TV_b its total variation counted over the bins; so every deviation with
  TV_b >= sqrt(lambda_95 / (4 n)) is seen with 95% power, lambda_95 the noncentrality at which the
  test's chi-square (its bins' degrees of freedom) reaches 95%.  Moving mass between two halves of
  the bins in proportion to their probabilities attains it.  Outcomes too rare for a bin of their
  own (expected fewer than stats.MIN_EXPECTED times) share one, and mass moved among them is not seen.

The real model's first-token tests need the model for their law; only the bound is given, for
the 8 tokens of their top-8 law (7 degrees of freedom at most, the bound's worst case).
"""

from __future__ import annotations

import argparse
import inspect
import math

import numpy as np
from scipy import stats as sps

from specref.proof import laws, power, stats
from specref.proof.bugs import broken
from specref.proof.stats import total_variation
from specref.warps import Warped

GRID = 2**20  # e = m / GRID: smallest_n searches integers m up to GRID (e = 1)


def mixed(correct: dict, other: dict, e: float) -> dict:
    """(1 - e) correct + e other."""
    return {k: (1 - e) * correct.get(k, 0.0) + e * other.get(k, 0.0) for k in set(correct) | set(other)}


def toward(correct: dict, other: dict, n: int) -> float:
    """The smallest TV from `correct`, along the segment toward `other`, that n draws see with 95% power
    (inf if none; nan if other is correct)."""
    tv = total_variation(other, correct)
    if tv <= 1e-12:
        return math.nan  # no such direction
    m = power.smallest_n(lambda m: power.check_power(mixed(correct, other, m / GRID), correct, n, stats.LEVEL),
                         n_max=GRID)
    return m / GRID * tv


def lambda_95(dof: int) -> float:
    """The noncentrality at which a chi-square test with `dof` degrees of freedom at stats.LEVEL has 95% power."""
    crit = sps.chi2.isf(stats.LEVEL, dof)
    return power.smallest_n(lambda m: sps.ncx2.sf(crit, dof, m / 1000), n_max=1e12) / 1000


def any_direction(dof: int, n: int) -> float:
    """The total variation over the bins above which every deviation is seen with 95% power (module docstring)."""
    return math.sqrt(lambda_95(dof) / (4 * n)) if dof >= 1 else math.nan


def dof_of(correct: dict, n: int) -> int:
    return len(stats.pooled_bins(correct, n)) - 1


def family(cases: dict, n: int) -> dict:
    """cases: name -> (correct law, the law toward the draft).  The ranges over the cases, and each case's numbers."""
    each = {name: {"dof": dof_of(c, n), "outcomes": len(c), "toward": toward(c, b, n),
                   "any": any_direction(dof_of(c, n), n)} for name, (c, b) in cases.items()}
    dofs = [e["dof"] for e in each.values()]
    return {"n": n, "dof": (min(dofs), max(dofs)), "toward": _span({k: e["toward"] for k, e in each.items()}),
            "any": _span({k: e["any"] for k, e in each.items()}), "cases": each}


def _span(values: dict) -> tuple:
    live = {k: v for k, v in values.items() if not math.isnan(v)}
    if not live:
        return ()
    lo, hi = min(live, key=live.get), max(live, key=live.get)
    return (live[lo], lo, live[hi], hi)


def families() -> list[tuple[str, dict]]:
    from tests.core import test_mrs, test_mrs_block, test_sampling  # the tests' own rows and sizes
    from tests.smollm2 import test_draft, test_real_sps

    out = []
    n = test_mrs.N_SAMPLES
    one_step = {}
    for name, (p, q) in test_mrs.CASES.items():
        p0, q0 = p[0], q[0]
        one_step[name] = ({(y,): float(v) for y, v in enumerate(q0) if v > 0},
                          {(y,): float(v) for y, v in enumerate(p0) if v > 0})
    out.append(("one `mrs.accept_or_resample` step against q (V = 4, 7 cases)", family(one_step, n)))

    calls = {name: (laws.verify_law(p, q), laws.rows_call_law(broken.always_accept.law, p, q))
             for name, (p, q) in test_mrs.CASES.items()}
    out.append(("one `verify` call (K = 2, V = 4, 7 cases)", family(calls, n)))

    block = {name: (test_mrs_block.block_law(p, q), laws.rows_call_law(broken.always_accept.law, p, q))
             for name, (p, q) in test_mrs_block.CASES.items()}
    out.append(("one `verify_block` call (K = 3, V = 3, 7 cases)", family(block, test_mrs_block.N_SAMPLES)))

    p, q = test_mrs._rows(np.random.default_rng(13), 4, 5, 1.0)  # test_number_of_accepted_tokens_has_its_closed_form
    count = {(a,): float(w) for a, w in enumerate(laws.accepted_count_law(p, q))}
    out.append(("accepted count (K = 4, V = 5)", family({"random": (count, {(4,): 1.0})}, n)))  # always_accept: all 4

    T, D, x, N = test_sampling.TARGET, test_sampling.DRAFT, test_sampling.PROMPT, test_sampling.N
    seqs = {"unwarped": (test_sampling.LAW, laws.sequence_law(D, x, N))}
    out.append((f"whole sequences ({N} tokens, V = {test_sampling.V})", family(seqs, test_sampling.RUNS)))
    warps, warped = _warps(test_sampling), {}
    for warp in warps:
        args = (warp.temperature, warp.top_k, warp.top_p)
        warped[_warp_name(warp)] = (laws.sequence_law(Warped(T, *args), x, N),
                                    laws.sequence_law(Warped(D, *args), x, N))
    out.append((f"whole sequences under the target's {len(warps)} warps", family(warped, test_sampling.WARP_RUNS)))

    for module, what in ((test_real_sps, "first token of the real model, top 8 (test_real_sps)"),
                         (test_draft, "first token of the real model, top 8, trained draft (test_draft)")):
        m = inspect.signature(module._first_tokens).parameters["n"].default
        out.append((what, {"n": m, "dof": (7, 7), "toward": (), "any": (any_direction(7, m), "", 0, ""), "cases": {}}))
    return out


def rejection_rate(correct: dict, other: dict, n: int, tv: float, runs: int, seed: int = 5) -> float:
    """The share of `runs` chi-square tests (stats.chi_square_gof at stats.LEVEL) of n multinomial draws from
    the law `tv` away from `correct` toward `other` that reject."""
    law = mixed(correct, other, tv / total_variation(other, correct))
    keys = list(law)
    probs = np.array([law[k] for k in keys])
    rng = np.random.default_rng(seed)
    rejected = 0
    for _ in range(runs):
        counts = rng.multinomial(n, probs / probs.sum())
        rejected += stats.chi_square_gof({keys[i]: int(c) for i, c in enumerate(counts) if c}, correct)[2] < stats.LEVEL
    return rejected / runs


def monte_carlo(runs: int) -> list[tuple[str, float, float]]:
    """The `verify` test (random case) and the sequence test (unwarped), simulated at their computed TV."""
    from tests.core import test_mrs, test_sampling
    p, q = test_mrs.CASES["random"]
    out = []
    for what, correct, other, n in (
            ("one verify call, random case", laws.verify_law(p, q),
             laws.rows_call_law(broken.always_accept.law, p, q), test_mrs.N_SAMPLES),
            ("whole sequences, unwarped", test_sampling.LAW,
             laws.sequence_law(test_sampling.DRAFT, test_sampling.PROMPT, test_sampling.N), test_sampling.RUNS)):
        tv = toward(correct, other, n)
        out.append((what, rejection_rate(correct, other, n, tv, runs), tv))
    return out


def _warps(test_sampling) -> list:
    """The warps of test_warps_applied_to_both_models_keep_the_warped_target_law."""
    mark = next(m for m in test_sampling.test_warps_applied_to_both_models_keep_the_warped_target_law.pytestmark
                if m.name == "parametrize")
    return list(mark.args[1])


def _warp_name(warp) -> str:
    return ", ".join([f"T {warp.temperature:g}"] + ([f"top-k {warp.top_k}"] if warp.top_k else [])
                     + ([f"top-p {warp.top_p:g}"] if warp.top_p else []))


def _tv(x: float) -> str:
    return f"{x:#.2g}" if x >= 1e-3 else f"{x:.1e}"


def table(rows: list | None = None) -> str:
    lines = ["| test family | draws n | degrees of freedom | toward the draft: TV seen with 95% power | "
             "any direction: TV over the bins seen with 95% power |", "|---|---|---|---|---|"]
    for name, f in rows if rows is not None else families():
        dof = f"{f['dof'][0]}" if f["dof"][0] == f["dof"][1] else f"{f['dof'][0]}–{f['dof'][1]}"
        if name.startswith("first token"):
            dof = "≤ 7"
        tw = f["toward"]
        toward_text = "— (needs the model)" if not tw else (
            f"{_tv(tw[0])} ({tw[1]})" if tw[0] == tw[2] else f"{_tv(tw[0])} ({tw[1]}) to {_tv(tw[2])} ({tw[3]})")
        a = f["any"]
        any_text = f"≤ {_tv(a[0])}" if name.startswith("first token") else (
            f"{_tv(a[0])}" if a[0] == a[2] else f"{_tv(a[0])} to {_tv(a[2])}")
        n = f"{f['n']:,}".replace(",", " ")
        lines.append(f"| {name} | {n} | {dof} | {toward_text} | {any_text} |")
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", action="store_true", help="also print each case's numbers")
    parser.add_argument("--monte-carlo", type=int, default=0, metavar="RUNS",
                        help="also simulate two rows' tests at the computed TV (RUNS multinomial samples each)")
    args = parser.parse_args(argv)
    rows = families()
    print(f"level {stats.LEVEL:g}; 95% power, non-central chi-square over the tests' pooled bins (specref.proof.power)")
    print(table(rows))
    if args.cases:
        for name, f in rows:
            for case, e in f["cases"].items():
                print(f"{name} / {case}: {e['outcomes']} outcomes, {e['dof']} degrees of freedom, toward the draft "
                      f"{_tv(e['toward']) if not math.isnan(e['toward']) else '-'}, any direction "
                      f"{_tv(e['any']) if not math.isnan(e['any']) else '-'}")
    if args.monte_carlo:
        for what, rejected, tv in monte_carlo(args.monte_carlo):
            print(f"simulated: {what} at TV {_tv(tv)} toward the draft: rejected {rejected:.1%} of {args.monte_carlo}")


if __name__ == "__main__":
    main()
