"""Power of the conformance checker against the bugs that shipped (specref.proof.bugs.shipped): computed and measured.

    python3 -m tools.shipped_power                      # the table: TV, run power, sample size for 95% power
    python3 -m tools.shipped_power --measure 3          # + detection rate at the default sizes, 3 fresh seeds each
    python3 -m tools.shipped_power --compare mixed_precision_draft "one call: p_equals_q" --runs 200
    python3 -m tools.shipped_power --full-runs mixed_precision_draft --seeds 3   # whole `conform.check` runs

Computed (specref.proof.power): the largest total variation from the correct law over the checker's
one-call and accepted-count checks; a run's power at its default sizes (sequence checks left out, so a
lower bound); the factor on every check's default n for 95% run power (`check(..., scale=...)`), and
the single check that needs the fewest calls for 95% power alone.  Measured: the checker's decision
(stats.chi_square_gof at FAMILY_LEVEL / 11 on stats.sample_verify counts of the bug's own sampler,
exactly what `conform.check` decides) over fresh seeds 1000, 1001, ...; edge-case bugs through the
exact tier (deterministic).  --compare runs one check at the n computed for 50% and 95% power.
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from specref.proof import conform, laws, power, stats
from specref.proof.bugs import shipped


def _fmt_n(n: float) -> str:
    return "never" if math.isinf(n) else f"{n:,.0f}"


def table() -> None:
    print("| signature | where it shipped | tier | TV (largest, check) | run power at default n | n per check for "
          "95% run power | best single check, n for 95% |")
    print("|---|---|---|---|---|---|---|")
    for s in shipped.GALLERY:
        r = power.row(s)
        n_run = r["scale_95"] * conform.N_CALLS
        print(f"| `{s.name}` | {s.where} | {s.tier} | {r['tv']:.2g} ({r['tv_check']}) | {r['power_default']:.3f} | "
              f"{_fmt_n(n_run)} | {r['best_check'] or '-'}: {_fmt_n(r['best_n_95'])} |", flush=True)


def _run_fails(bug, algorithm: str, seed: int, scale: float = 1.0) -> tuple[bool, str]:
    level = conform.FAMILY_LEVEL / 11
    rng = np.random.default_rng(seed)
    for name, case, marginal in power._checks(algorithm):
        n = max(1, round(case.n * scale))
        counts = stats.sample_verify(bug, case.p, case.q, n, np.random.default_rng(rng.integers(2**63)))
        law = laws.rows_call_law(conform.CORRECT[algorithm], case.p, case.q)
        if marginal:
            counts, law = conform._count_marginal(counts), conform._count_marginal(law)
        if stats.chi_square_gof(counts, law)[2] <= level:
            return True, name
    return False, ""


def measure(seeds: int) -> None:
    print(f"\ndetection at the default sizes, fresh seeds 1000..{1000 + seeds - 1} (a run fails at its first failing "
          "check; the sequence checks not run):")
    for s in shipped.GALLERY:
        start = time.perf_counter()
        if s.edge_check:
            c = {c.name: c for c in conform.exact_checks(s.bug, s.algorithm)}[s.edge_check]
            ctl = {c.name: c for c in conform.exact_checks(s.control, s.algorithm)}[s.edge_check]
            print(f"  {s.name}: exact tier '{s.edge_check}' {'FAILS' if c.passed is False else 'passes'} "
                  f"(deterministic); control {'passes' if ctl.passed else 'FAILS'}", flush=True)
            continue
        got = [_run_fails(s.bug, s.algorithm, 1000 + i) for i in range(seeds)]
        first = sorted({name for failed, name in got if failed})
        print(f"  {s.name}: {sum(f for f, _ in got)} of {seeds} runs failed (first failing checks: "
              f"{', '.join(first) or '-'}; {time.perf_counter() - start:.0f} s)", flush=True)


def compare(name: str, check: str, runs: int) -> None:
    s = shipped.BY_NAME[name]
    entry = next((e for e in power.bug_laws(s.bug, s.algorithm) if e[0] == check), None)
    if entry is None:
        raise SystemExit(f"no check {check!r}; checks: {[e[0] for e in power.bug_laws(s.bug, s.algorithm)]}")
    _, _, correct, law = entry
    case = next(c for n, c, _ in power._checks(s.algorithm) if n == check)
    level = conform.FAMILY_LEVEL / 11
    for target in (0.5, 0.95):
        n = int(power.smallest_n(lambda m: power.check_power(law, correct, m, level), target=target))
        predicted = power.check_power(law, correct, n, level)
        if runs == 0:
            print(f"{name} on '{check}' at n = {n}: computed power {predicted:.3f} (not measured: --runs 0)", flush=True)
            continue
        start = time.perf_counter()
        rejected = 0
        for i in range(runs):
            counts = stats.sample_verify(s.bug, case.p, case.q, n, np.random.default_rng(2000 + i))
            if check.startswith("accepted count"):
                counts = conform._count_marginal(counts)
            rejected += stats.chi_square_gof(counts, correct)[2] <= level
        rate = rejected / runs
        se = math.sqrt(max(rate * (1 - rate), 1e-12) / runs)
        print(f"{name} on '{check}' at n = {n}: computed power {predicted:.3f}, measured {rejected} of {runs} = "
              f"{rate:.3f} (standard error {se:.3f}; seeds 2000..{2000 + runs - 1}; {time.perf_counter() - start:.0f} s)",
              flush=True)


def full_runs(name: str, seeds: int) -> None:
    s = shipped.BY_NAME[name]
    for i in range(seeds):
        report = conform.check(s.bug, algorithm=s.algorithm, seed=1000 + i)
        failed = [c.name for c in report.failed]
        print(f"{name} seed {1000 + i}: {'FAILED' if failed else 'passed'} {len(failed)} of {len(report.checks)} "
              f"checks ({', '.join(failed)}) in {report.seconds:.0f} s; diagnosis: {report.diagnosis or '-'}", flush=True)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--measure", type=int, default=0, metavar="SEEDS",
                        help="also measure the detection rate at the default sizes over this many fresh seeds")
    parser.add_argument("--compare", nargs=2, metavar=("SIGNATURE", "CHECK"),
                        help="measure one check's rejection rate at the n computed for 50%% and 95%% power")
    parser.add_argument("--runs", type=int, default=200,
                        help="runs for --compare (default 200; 0: only the computed sizes and power)")
    parser.add_argument("--full-runs", metavar="SIGNATURE", help="whole conform.check runs on this signature")
    parser.add_argument("--seeds", type=int, default=3, help="seeds for --full-runs (default 3)")
    args = parser.parse_args(argv)
    if args.runs < 0 or args.seeds < 1 or args.measure < 0:
        parser.error(f"--runs must be >= 0, --seeds >= 1 and --measure >= 0, got {args.runs}, {args.seeds}, {args.measure}")
    if args.compare:
        compare(*args.compare, args.runs)
        return
    if args.full_runs:
        full_runs(args.full_runs, args.seeds)
        return
    table()
    if args.measure:
        measure(args.measure)


if __name__ == "__main__":
    main()
