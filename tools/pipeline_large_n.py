"""The correct toy pipeline at the size that bf16_draft needs: does the check, or the toy, drift at 3.7e7 sequences?

    python3 -m tools.pipeline_large_n fit FIRST LAST [--json out.json]    # one-sample fits, seeds FIRST..LAST-1
    python3 -m tools.pipeline_large_n pairs FIRST LAST [--json out.json]  # two-sample checks, seeds FIRST..LAST-1

Both use two-token sequences (`toy.Toy(L=2)`) and n = the sample size computed for 95% power
against `Bf16Draft(L=2)` (36 962 304).  `fit`: each seed's generate (speculative) and plain samples
against the exact law, Pearson's chi-square over the 7 possible sequences, and the statistics summed
over seeds (a bias too small for one run adds up there).  `pairs`: `check_pipeline` on the correct
pipeline, its p-value per seed (a false alarm is p <= 1e-3).  About a minute a seed on one core.
"""

from __future__ import annotations

import argparse
import json

from scipy import stats as sps

from specref.files import write_text
from specref.proof import pipeline as P
from specref.proof import stats, toy
from specref.proof.bugs import shipped


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["fit", "pairs"])
    ap.add_argument("first", type=int)
    ap.add_argument("last", type=int)
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.last <= args.first:
        ap.error(f"LAST must be above FIRST (seeds FIRST..LAST-1), got {args.first} and {args.last}")
    t = toy.Toy(L=2)
    n = P.samples_to_see(shipped.Bf16Draft(L=2).law(), t.plain_law(), 0.95)
    out = {"n": n, "first_seed": args.first, "last_seed": args.last - 1}
    if args.what == "pairs":
        out["pvalues"] = P.pvalues(t, n, args.last - args.first, args.first, lambda line: print(line, flush=True))
        out["failed"] = sum(p <= P.FAMILY_LEVEL for p in out["pvalues"])
    else:
        law = t.law()
        for what, f in (("generate", t.generate), ("plain", t.plain)):
            out[what] = []
        for seed in range(args.first, args.last):
            for what, f in (("generate", t.generate), ("plain", t.plain)):
                c = P._count(f(n, seed))
                impossible = sum(v for k, v in c.items() if law.get(k, 0) <= 0)
                stat, dof, p = stats.chi_square_gof(c, law)  # 7 outcomes, none pooled at this n
                out[what].append((stat, p, impossible))
                print(seed, what, out[what][-1], flush=True)
        for what in ("generate", "plain"):
            s, d = sum(x[0] for x in out[what]), dof * len(out[what])
            ps = [x[1] for x in out[what]]
            out[what + "_summary"] = {"summed_chi2": s, "dof": d, "p": float(sps.chi2.sf(s, d)),
                                      "ks_uniform_p": float(sps.kstest(ps, "uniform").pvalue),
                                      "impossible": sum(x[2] for x in out[what])}
            print(what, out[what + "_summary"])
    if args.json:
        write_text(args.json, json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
