"""What n rows times a weight matrix cost, with the matrix in cache and from memory: `python3 -m tools.gemm_cost`.

Scoring K + 1 tokens multiplies K + 1 rows by every weight matrix.  A BLAS that multiplies a few
rows straight from the matrix (a small-matrix kernel; GEMV for one row) reads each weight once
however many rows there are, so a few rows from memory cost about what one row costs.  A BLAS
that first copies ("packs") the matrix into a buffer laid out for its kernel, as OpenBLAS's GEMM
does on CPUs where it has no small-matrix kernel, pays for the copy on every call, and then a few
rows cost several times one row *even when the matrix is already in cache*.  This tool tells the
two apart on the machine it runs on.  On MATRICES random float32 matrices of the model's SwiGLU
up-projection shape (576 x 3072, 7 MB each) it times `x @ W` for n rows on one thread:

- hot: one matrix, MATRICES times in a row (after the first product it comes from the cache);
- cold: MATRICES different matrices (212 MB, more than a CPU's last-level cache), as in a forward pass;

and prints, per row count, ms per pass, the ratio to one row, and GFLOP/s.  Row counts and the two
kinds run interleaved, ROUNDS times, and the medians are printed; only ratios within one run mean
much on a shared machine.
"""

import argparse
import json
import os
import statistics
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")           # as the command line sets it

import numpy as np

SHAPE = (576, 3072)     # SwiGLU's up projection in SmolLM2-135M (d_model x intermediate)
MATRICES = 30           # one per layer
KINDS = ("hot", "cold")


def measure(rows, rounds: int = 9, shape=SHAPE, matrices: int = MATRICES, seed: int = 0) -> dict:
    """{"shape", "matrices", "rounds", "rows": {n: {"hot_ms", "cold_ms", "hot_gflops", "cold_gflops"}}}, medians."""
    if not rows or min(rows) < 1:
        raise ValueError(f"row counts must be >= 1, got {list(rows)}")
    if rounds < 1 or matrices < 1 or len(shape) != 2 or min(shape) < 1:
        raise ValueError(f"need rounds >= 1, matrices >= 1 and a shape of two positive sizes; "
                         f"got rounds={rounds}, matrices={matrices}, shape={tuple(shape)}")
    rng = np.random.default_rng(seed)
    mats = [rng.standard_normal(shape, dtype=np.float32) for _ in range(matrices)]
    inputs = {n: rng.standard_normal((n, shape[0]), dtype=np.float32) for n in rows}
    passes = {"hot": [mats[0]] * matrices, "cold": mats}
    times = {n: {kind: [] for kind in KINDS} for n in rows}
    for _ in range(rounds):
        for n in rows:
            x = inputs[n]
            for kind in KINDS:
                if kind == "hot":
                    x @ mats[0]                                # bring the one matrix into the cache
                t0 = time.perf_counter()
                for w in passes[kind]:
                    x @ w
                times[n][kind].append(time.perf_counter() - t0)
    flops = {n: 2.0 * n * shape[0] * shape[1] * matrices for n in rows}
    out = {}
    for n in rows:
        ms = {kind: 1e3 * statistics.median(times[n][kind]) for kind in KINDS}
        out[n] = {**{f"{kind}_ms": ms[kind] for kind in KINDS},
                  **{f"{kind}_gflops": flops[n] / ms[kind] / 1e6 for kind in KINDS}}
    return {"shape": list(shape), "matrices": matrices, "rounds": rounds, "rows": out}


def table(result: dict) -> str:
    """The result as a text table, each time also against the same kind's time for the fewest rows."""
    rows = result["rows"]
    first = min(rows)
    lines = [f"x @ W, W {result['shape'][0]} x {result['shape'][1]} float32, {result['matrices']} products "
             f"per pass, one thread; medians of {result['rounds']} interleaved rounds",
             f"{'rows':>4}  {'hot ms':>8} {'/ ' + str(first) + ' row':>8} {'GFLOP/s':>8}   "
             f"{'cold ms':>8} {'/ ' + str(first) + ' row':>8} {'GFLOP/s':>8}"]
    for n, r in sorted(rows.items()):
        lines.append(f"{n:>4}  {r['hot_ms']:8.2f} {r['hot_ms'] / rows[first]['hot_ms']:8.2f} {r['hot_gflops']:8.1f}   "
                     f"{r['cold_ms']:8.2f} {r['cold_ms'] / rows[first]['cold_ms']:8.2f} {r['cold_gflops']:8.1f}")
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 2, 4, 5, 8, 9, 12, 16],
                    help="row counts (default 1 2 4 5 8 9 12 16)")
    ap.add_argument("--rounds", type=int, default=9, help="interleaved rounds, >= 1 (median taken; default 9)")
    ap.add_argument("--shape", type=int, nargs=2, default=list(SHAPE), metavar=("IN", "OUT"),
                    help=f"matrix shape (default {SHAPE[0]} {SHAPE[1]})")
    ap.add_argument("--matrices", type=int, default=MATRICES, help=f"matrices per pass (default {MATRICES})")
    ap.add_argument("--json", help="write the medians to this JSON file")
    args = ap.parse_args(argv)
    try:
        result = measure(args.rows, args.rounds, tuple(args.shape), args.matrices)
    except ValueError as e:
        ap.error(str(e))
    print(table(result))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
