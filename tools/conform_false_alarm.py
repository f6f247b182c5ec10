"""Measure the conformance checker's false-alarm rate and power over fresh seeds.

    python3 -m tools.conform_false_alarm [--seeds 20] [--power-seeds 2] [--algorithms token,block] [--json out.json]

False alarms: `conform.check` on the reference of each of --algorithms (default mrs.verify, "token", and
mrs.verify_block, "block"; the tree references "tree-topk", "tree-mss", "tree-rrs" too) with seeds
10000, 10001, ...: the fraction of runs that fail is the run's false-alarm rate (at most
conform.FAMILY_LEVEL = 1e-3 by Bonferroni); since 1e-3 cannot be resolved with a few dozen runs,
the p-values of every chi-square check are pooled and their uniformity is tested too (fraction
below 0.05 and 0.01, Kolmogorov-Smirnov).  Power: every known bug (conform.KNOWN_BUGS: the bugs
of specref.proof.bugs.broken and lossy.LOSSY, each sampled, checked as each algorithm whose diagnosis knows
them, and each exact verifier checked as the other algorithm) with seeds 20000, ...: the fraction
of runs that fail, and the fraction whose run-level diagnosis names the bug.  The exact tier is deterministic
(no seed reaches it), so it is left out of the false-alarm runs and kept in the power runs.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
from scipy import stats as sps

from specref import verifiers
from specref.files import write_text
from specref.proof import conform


def false_alarms(seeds, algorithms=("token", "block")) -> dict:
    out = {}
    for algorithm in algorithms:
        function = verifiers.REGISTRY[algorithm].function
        runs, pvalues, seconds, checks_failed = [], [], [], 0
        for seed in seeds:
            report = conform.check(function, algorithm=algorithm, seed=seed, vectors_tier=False)
            runs.append(report.passed)
            pvalues += [c.pvalue for c in report.checks if c.pvalue is not None]
            checks_failed += sum(c.passed is False for c in report.checks if c.pvalue is not None)
            seconds.append(report.seconds)
            print(f"  {algorithm} seed {seed}: {'pass' if report.passed else 'FAIL'} in {report.seconds:.0f} s"
                  + ("" if report.passed else f": {[c.name for c in report.failed]}"), flush=True)
        pv = np.array(pvalues)
        out[algorithm] = {"runs": len(runs), "runs_failed": int(len(runs) - sum(runs)), "checks": len(pv),
                          "checks_failed": checks_failed,
                          "below_0.05": float(np.mean(pv < 0.05)), "below_0.01": float(np.mean(pv < 0.01)),
                          "ks_uniform_p": float(sps.kstest(pv, "uniform").pvalue),
                          "seconds_median": float(np.median(seconds)), "seconds_max": float(np.max(seconds))}
        print(f"{algorithm}: {json.dumps(out[algorithm])}", flush=True)
    return out


def power(seeds) -> dict:
    out = {}
    for name, (bug, algorithm) in conform.KNOWN_BUGS.items():
        failed, named = 0, 0
        for seed in seeds:
            report = conform.check(bug, algorithm=algorithm, seed=seed)
            failed += not report.passed
            named += report.diagnosis.startswith(bug.name + ":")
            print(f"  {name} seed {seed}: {'pass' if report.passed else 'FAIL'} "
                  f"({len(report.failed)} checks) diagnosis: {report.diagnosis[:90]}", flush=True)
        out[name] = {"runs": len(seeds), "rejected": failed, "diagnosed": named}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=20, help="fresh seeds per correct verifier (default 20; 0 skips)")
    ap.add_argument("--power-seeds", type=int, default=2, help="fresh seeds per known bug (default 2; 0 skips)")
    ap.add_argument("--algorithms", default="token,block",
                    help="comma-separated references checked for false alarms (default token,block; the tree "
                         "references are tree-topk,tree-mss,tree-rrs)")
    ap.add_argument("--json", help="write the numbers to this file")
    args = ap.parse_args()
    algorithms = tuple(a for a in args.algorithms.split(",") if a)
    references = verifiers.references(verifiers.CHAINS + verifiers.TREES)
    if not algorithms or any(a not in references for a in algorithms):
        ap.error(f"--algorithms must name some of {','.join(references)}, got {args.algorithms!r}")
    if args.seeds < 0 or args.power_seeds < 0:
        ap.error(f"--seeds and --power-seeds must be >= 0, got {args.seeds} and {args.power_seeds}")
    start = time.time()
    result = ({"false_alarms": false_alarms(range(10_000, 10_000 + args.seeds), algorithms)} if args.seeds
              else {})
    if args.power_seeds:
        result["power"] = power(range(20_000, 20_000 + args.power_seeds))
        print(json.dumps(result["power"]))
    result["seconds"] = time.time() - start
    print(f"\n{result['seconds']:.0f} s")
    if args.json:
        write_text(args.json, json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
