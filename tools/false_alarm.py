"""Measure the false-alarm rate and the power of the suite's distribution tests.

    python3 -m tools.false_alarm [--seeds 20]
    python3 -m tools.false_alarm --block [--seeds 200]   (block verification's tests only)

Re-runs the suite's own chi-square tests (the same cases, the same sample sizes, the same
level specref.proof.stats.LEVEL) with fresh seeds instead of the fixed ones:
- with the correct sampler, the fraction of seeds rejected is the false-alarm rate
  (expected: LEVEL per test); the fraction below 0.05 and a KS test of the p-values'
  uniformity are printed too, since a rate of 1e-3 cannot be resolved with few seeds;
- with each broken sampler, the fraction rejected is the power (should be 1).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from scipy import stats as sps

import tests.core.test_mrs as tm
import tests.core.test_mrs_block as tb
import tests.core.test_sampling as ts
from specref.proof import broken, lossy, stats
from specref import mrs


def verify_pvalue(f, case, seed):
    p, q = tm.CASES[case]
    counts = stats.sample_verify(f, p, q, tm.N_SAMPLES, np.random.default_rng(seed))
    return stats.chi_square_gof(counts, stats.verify_law(p, q))[2]


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=20, help="fresh seeds per test (default 20)")
    ap.add_argument("--block", action="store_true", help="only block verification's tests")
    args = ap.parse_args()
    seeds = range(10_000, 10_000 + args.seeds)
    t0 = time.time()
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
