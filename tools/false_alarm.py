"""Measure the false-alarm rate and the power of the suite's distribution tests.

    python3 -m tools.false_alarm [--seeds 20]
    python3 -m tools.false_alarm --block [--seeds 200]   (block verification's tests only)
    python3 -m tools.false_alarm --pooling [--draws 200000]   (the chi-square's bins alone, a few minutes)

Re-runs the suite's own chi-square tests (the same cases, the same sample sizes, the same
level specref.proof.stats.LEVEL) with fresh seeds instead of the fixed ones:
- with the correct sampler, the fraction of seeds rejected is the false-alarm rate
  (expected: LEVEL per test); the fraction below 0.05 and a KS test of the p-values'
  uniformity are printed too, since a rate of 1e-3 cannot be resolved with few seeds;
- with each broken sampler, the fraction rejected is the power (should be 1).

--pooling resolves the rate itself, for the bins alone: under a correct sampler the counts are a
multinomial draw from the exact law, so Pearson's statistic over `stats.pooled_bins` is computed for
many such draws (no sampler runs) for each law the suite and the conformance checker test against,
and the fraction below LEVEL and below LEVEL / 11 (the checker's Bonferroni level) is printed: each
should be near its level (binomial standard error about 0.07e-3 at LEVEL for 200 000 draws).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from scipy import stats as sps

import tests.core.test_mrs as tm
import tests.core.test_mrs_block as tb
import tests.core.test_sampling as ts
from specref.proof import conform, laws, stats
from specref.proof.bugs import broken, lossy
from specref import mrs, verifiers


def verify_pvalue(f, case, seed):
    p, q = tm.CASES[case]
    counts = stats.sample_verify(f, p, q, tm.N_SAMPLES, np.random.default_rng(seed))
    return stats.chi_square_gof(counts, laws.verify_law(p, q))[2]


def sequence_pvalue(f, K, seed):
    counts = stats.sample_sequences(ts._sps(K, verify=f), ts.RUNS, len(ts.PROMPT), np.random.default_rng(seed))
    return stats.chi_square_gof(counts, ts.LAW)[2]


def report(name, pv):
    pv = np.asarray(pv)
    print(f"  {name:34s} seeds={len(pv):4d}  rejected at {stats.LEVEL:g}: {np.mean(pv < stats.LEVEL):.3f}  "
          f"p<0.05: {np.mean(pv < 0.05):.3f}  KS uniform p={sps.kstest(pv, 'uniform').pvalue:.3f}", flush=True)
    return pv


def block(seeds) -> None:
    """The statistical tests of tests/core/test_mrs_block.py with fresh seeds: false alarms and power."""
    print(f"verify_block output law, n = {tb.N_SAMPLES} per test (tests/core/test_mrs_block.py)")
    correct = [report(f"verify_block / {case}", [tb.verify_block_pvalue(mrs.verify_block, case, s)[2] for s in seeds])
               for case in tb.CASES]
    print(f"whole sequences, {tb.RUNS} runs per test")
    correct += [report(f"verify_block sequences K={K}", [tb.sequence_pvalue(mrs.verify_block, K, s)[2] for s in seeds])
                for K in (1, 2, 3, 4)]
    allp = np.concatenate(correct)
    print(f"  pooled over {len(allp)} correct tests: rejected {np.mean(allp < stats.LEVEL):.4f}, "
          f"p<0.05 {np.mean(allp < 0.05):.3f}, KS p={sps.kstest(allp, 'uniform').pvalue:.3f}")
    print("power: misreadings, one call (case random) and whole sequences (K = 2); typical acceptance (K = 3)")
    for name, f in broken.BROKEN_BLOCK.items():
        report(f"call {name}", [tb.verify_block_pvalue(f, "random", s)[2] for s in seeds])
        report(f"sequences {name}", [tb.sequence_pvalue(f, 2, s)[2] for s in seeds])
    report("sequences lossy.verify_typical", [tb.sequence_pvalue(lossy.verify_typical, 3, s)[2] for s in seeds])


def pooled_tail(law: dict, n: int, draws: int, rng: np.random.Generator) -> tuple[int, np.ndarray]:
    """(dof, p-values of Pearson's statistic over stats.pooled_bins) for `draws` multinomial samples of n from law."""
    bins = stats.pooled_bins(law, n)
    keys = [k for b in bins for k in b]
    rows = np.array([float(law[k]) for k in keys])
    member = np.eye(len(bins))[np.repeat(np.arange(len(bins)), [len(b) for b in bins])]  # [outcomes, bins] 0/1
    expected = n * (rows / rows.sum()) @ member  # [bins]
    out = []
    for start in range(0, draws, 20_000):
        counts = rng.multinomial(n, rows / rows.sum(), size=min(20_000, draws - start))  # [draws, outcomes]
        observed = counts @ member  # [draws, bins]
        out.append(sps.chi2.sf(((observed - expected) ** 2 / expected).sum(axis=1), len(bins) - 1))
    return len(bins) - 1, np.concatenate(out)


def pooling(draws: int) -> None:
    """The null tail of every law the suite's and the checker's chi-square checks use, by multinomial draws."""
    checked = {f"test_mrs {c}": (laws.verify_law(*tm.CASES[c]), tm.N_SAMPLES) for c in tm.CASES}
    checked |= {f"test_mrs_block {c}": (tb.block_law(*tb.CASES[c]), tb.N_SAMPLES) for c in tb.CASES}
    checked["sequences (test_sampling, conform)"] = (ts.LAW, ts.RUNS)
    for algorithm in verifiers.references(verifiers.CHAINS):
        for c in conform.cases(algorithm):
            checked[f"conform {algorithm} {c.name}"] = (laws.rows_call_law(conform.CORRECT[algorithm], c.p, c.q), c.n)
        c = conform.accepted_count_case()
        checked[f"conform {algorithm} accepted count"] = (
            conform._count_marginal(laws.rows_call_law(conform.CORRECT[algorithm], c.p, c.q)), c.n)
    rng = np.random.default_rng(0)
    print(f"{draws} multinomial draws per law, bins of stats.pooled_bins (MIN_EXPECTED = {stats.MIN_EXPECTED:g})")
    rates = []
    for name, (law, n) in checked.items():
        dof, pv = pooled_tail(law, n, draws, rng)
        rates.append((np.mean(pv < stats.LEVEL), np.mean(pv < stats.LEVEL / 11)))
        print(f"  {name:38s} n={n:6d} dof={dof:3d}  below {stats.LEVEL:g}: {rates[-1][0]:.5f}  "
              f"below {stats.LEVEL:g} / 11: {rates[-1][1]:.6f}", flush=True)
    low, high = np.min(rates, axis=0), np.max(rates, axis=0)
    print(f"  range over the laws: {low[0]:.5f} to {high[0]:.5f} below {stats.LEVEL:g}; "
          f"{low[1]:.6f} to {high[1]:.6f} below {stats.LEVEL:g} / 11")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=20, help="fresh seeds per test (default 20)")
    ap.add_argument("--block", action="store_true", help="only block verification's tests")
    ap.add_argument("--pooling", action="store_true", help="only the chi-square's bins, by multinomial draws")
    ap.add_argument("--draws", type=int, default=200_000, help="draws per law with --pooling (default 200000)")
    args = ap.parse_args()
    seeds = range(10_000, 10_000 + args.seeds)
    t0 = time.time()
    if args.pooling:
        pooling(args.draws)
        print(f"\n{time.time() - t0:.0f} s")
        return
    if args.block:
        block(seeds)
        print(f"\n{time.time() - t0:.0f} s")
        return
    print(f"verify output law, n = {tm.N_SAMPLES} per test (tests/core/test_mrs.py)")
    correct = [report(f"verify / {case}", [verify_pvalue(mrs.verify, case, s) for s in seeds]) for case in tm.CASES]
    allp = np.concatenate(correct)
    print(f"  pooled over {len(allp)} correct tests: rejected {np.mean(allp < stats.LEVEL):.4f}, "
          f"p<0.05 {np.mean(allp < 0.05):.3f}, KS p={sps.kstest(allp, 'uniform').pvalue:.3f}")
    for name, f in broken.BROKEN.items():
        report(f"broken {name}", [verify_pvalue(f, "random", s) for s in seeds])
    print(f"\nwhole sequences, {ts.RUNS} runs per test, K = 2 (tests/core/test_sampling.py)")
    report("speculative_sampling", [sequence_pvalue(mrs.verify, 2, s) for s in seeds])
    few = seeds[: max(3, len(seeds) // 4)]
    for name in ["always_accept", "ratio_inverted", "resample_from_q", "bonus_wrong_row",
                 "greedy_draft_softmax_ratio", "one_uniform_reused"]:
        report(f"broken {name}", [sequence_pvalue(broken.BROKEN[name], 2, s) for s in few])
    print(f"\n{time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
