"""The model's speed at two versions of the code, in one process: `python3 -m tools.ab_model --base REV`.

On a shared machine a whole-process benchmark drifts by 5% or more from one run to the next (the
bench's decode step took 20.1 to 22.3 ms on one machine on two days), so a change worth 2% cannot
be seen by running `python -m specref bench` before and after it.  This tool loads both versions
into one process and times them in the same shuffled rounds, so drift hits both alike:

- the `specref` package as committed at REV is extracted (`git archive`) into a temporary
  directory as the package `specref_base` (its own imports renamed to match);
- both versions' `SmolLM2` are built on the same weights, tokenizer and plan (this machine's
  cached plan, read by each version's `Plan.from_json`; a base whose plan format differs is refused);
- in each round, every (version, rows) pair scores `rows` new tokens after a cached prefix of
  PREFIX tokens (as the bench does), in a shuffled order.

It prints the median ms per call of each, the ratio current / base per row count, each version's
scoring ratios (rows / 1 row), and the largest difference between the two versions' probabilities.
"""

import argparse
import importlib
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")           # as the command line sets it

import numpy as np  # noqa: E402

from specref.apps.costs import PREFIX  # noqa: E402
from specref.fast import load_fast  # noqa: E402
from specref.fast.machine import cpu_label, machine_key  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
BASE = "specref_base"


def extract(rev: str, into: pathlib.Path) -> None:
    """The package `specref` at `rev`, as the package BASE under `into`, its imports renamed."""
    try:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "specref"], check=True,
                                 capture_output=True).stdout
    except subprocess.CalledProcessError as e:
        raise SystemExit(f"git archive {rev} failed: {e.stderr.decode().strip()}; give a commit of this repository")
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    (into / "specref").rename(into / BASE)
    for path in (into / BASE).rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        path.write_text(re.sub(r"\bspecref(?=[.\s])", BASE, text), encoding="utf-8")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", default="HEAD~1", help="the commit to compare with (default HEAD~1)")
    ap.add_argument("--rounds", type=int, default=40, help="shuffled rounds (default 40)")
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 5, 9], help="rows scored per call (default 1 5 9)")
    args = ap.parse_args(argv)
    if args.rounds < 1:
        ap.error(f"--rounds must be at least 1, not {args.rounds}")
    if 1 not in args.rows or any(r < 1 for r in args.rows):
        ap.error(f"--rows must be positive and include 1 (the decode step the ratios divide by), not {args.rows}")
    with tempfile.TemporaryDirectory() as tmp:
        extract(args.base, pathlib.Path(tmp))
        sys.path.insert(0, tmp)
        try:
            base_plan = importlib.import_module(f"{BASE}.fast.plan")
            base_fast = importlib.import_module(f"{BASE}.fast")
        except Exception as e:                                 # a commit from before the model or the planner
            raise SystemExit(f"the base {args.base} has no model with a plan to compare ({e!r})")
        current = load_fast(progress=lambda s: None, measure=True)
        try:
            plan = base_plan.Plan.from_json(current.fast.to_json())
        except Exception as e:                                 # the base's own PlanError, or a format it cannot read
            raise SystemExit(f"the base {args.base} cannot read this plan ({e}); compare commits with the same plan format")
        try:
            models = {"base": base_fast.fast_model(current, plan), "current": current}
        except Exception as e:                                 # an older SmolLM2 with another interface
            raise SystemExit(f"the base {args.base}'s SmolLM2 cannot be built on this weights and plan ({e!r}); "
                             f"compare commits with specref.fast.fast_model(model, plan)")
        print(f"CPU {cpu_label(machine_key(current.weights))}; base {args.base}; "
              f"OPENBLAS_NUM_THREADS={os.environ['OPENBLAS_NUM_THREADS']}; {args.rounds} rounds")
        prefix = list(range(1000, 1000 + PREFIX))
        for m in models.values():
            m.reset()
            m.next_probs(np.array(prefix), 1)
        check = np.array(prefix + [7] + list(range(2000, 2000 + max(args.rows) - 1)))
        gap = float(np.abs(models["base"].next_probs(check, max(args.rows))
                           - models["current"].next_probs(check, max(args.rows))).max())
        jobs = [(v, n) for v in models for n in args.rows]
        times = {job: [] for job in jobs}
        order = np.random.default_rng(0)
        fresh = 5000
        for _ in range(args.rounds):
            for i in order.permutation(len(jobs)).tolist():
                version, n = jobs[i]
                fresh = fresh % 40000 + 1                      # a first new token unlike the cached one
                tokens = np.array(prefix + [fresh] + list(range(2000, 2000 + n - 1)))
                t = time.perf_counter()
                models[version].next_probs(tokens, n)
                times[jobs[i]].append(time.perf_counter() - t)
    ms = {job: 1e3 * float(np.median(v)) for job, v in times.items()}
    print(f"{'rows':>5} {'base ms':>9} {'current ms':>11} {'current/base':>13} {'base /1 row':>12} {'current /1 row':>15}")
    for n in args.rows:
        b, c = ms[("base", n)], ms[("current", n)]
        print(f"{n:>5} {b:>9.2f} {c:>11.2f} {c / b:>13.3f} {b / ms[('base', 1)]:>12.3f} {c / ms[('current', 1)]:>15.3f}")
    print(f"largest difference between the two versions' probabilities: {gap:.3g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
