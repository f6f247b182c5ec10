"""`python -m specref bench --json PATH`: the costs that decide whether speculative sampling pays.

Measured in one run, as medians over repeats, on the real model:
- `decode_ms_per_token`: one incremental step (one new token after a cached prefix), including
  the float64 softmax, i.e. what an autoregressive loop pays per token;
- `weights_stream_ms`: one matrix-vector product over every weight matrix, the memory floor of a
  decode step; the faster of the plain layout ([in, out], `x @ W`) and the model's panel layout;
- `score_ratio`: K -> (time to score K + 1 new tokens in one call) / (one decode step), K = 1..8;
  this is the `score_cost` of `specref.speedup.walltime_improvement_measured`;
- `mrs_ms`: one `specref.mrs.verify` call at K = 4, V = 49152.
Targets (issue 3): decode <= 1.3 x the stream floor, score_ratio[4] <= 1.5, verify < 2% of a
decode step.  The machine may be shared, so only ratios measured in the same run mean much.

OpenBLAS reads OPENBLAS_NUM_THREADS once, when NumPy is imported.  Unless told otherwise
(`--blas-threads 0`), the benchmark reruns itself in a fresh interpreter with
OPENBLAS_NUM_THREADS=1 when that is not already the setting (specref.model explains why 1).
"""

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

from specref.mrs import verify
from specref.model import SmolLM2, load_smollm2
from specref.weights import from_panels

K_MAX = 8              # score_ratio is measured for K = 1..K_MAX
PREFIX = 64            # tokens cached before every timed call
TARGETS = {"decode_over_stream": 1.3, "score_ratio_4": 1.5, "mrs_fraction": 0.02}


def weights_stream_ms(model: SmolLM2, repeats: int) -> dict:
    """Median ms of one matrix-vector product over every weight matrix, plain and panel layouts."""
    panels = model.weights.matrices()
    plain = [from_panels(p) for p in panels]                   # [d_in, d_out] copies, freed on return
    x = {d: np.ones(d, np.float32) for d in {p.shape[1] for p in panels}}

    def plain_pass():
        for w in plain:
            x[w.shape[0]] @ w                                  # [d_in] @ [d_in, d_out]

    def panel_pass():
        for w in panels:
            np.matmul(x[w.shape[1]], w)                        # [d_in] @ [P, d_in, c] -> [P, c]

    times = {"plain": [], "panels": []}
    for _ in range(repeats):
        for name, f in (("plain", plain_pass), ("panels", panel_pass)):
            t = time.perf_counter()
            f()
            times[name].append(time.perf_counter() - t)
    return {name: 1e3 * float(np.median(v)) for name, v in times.items()}


def scoring_ms(model: SmolLM2, repeats: int, k_max: int = K_MAX) -> dict:
    """n -> median ms of next_probs on n new tokens after a cached prefix, n = 1..k_max+1."""
    V = model.config.vocab_size
    prefix = list(range(1000, 1000 + PREFIX))
    model.reset()
    model.next_probs(np.array(prefix), 1)                      # cache the prefix once
    times = {n: [] for n in range(1, k_max + 2)}
    fresh = 5000
    order = np.random.default_rng(0)
    for _ in range(repeats):
        for n in order.permutation(list(times)).tolist():      # interleaved, shuffled: drift hits all n alike
            fresh = (fresh + 1) % V                            # a first new token unlike the cached one
            tokens = np.array(prefix + [fresh] + list(range(2000, 2000 + n - 1)))
            t = time.perf_counter()
            model.next_probs(tokens, n)
            times[n].append(time.perf_counter() - t)
    model.reset()
    return {n: 1e3 * float(np.median(v)) for n, v in times.items()}


def verify_ms(V: int, K: int = 4, repeats: int = 51) -> float:
    """Median ms of one specref.mrs.verify call on random distributions of size V."""
    rng = np.random.default_rng(0)
    times = []
    for _ in range(repeats):
        p = rng.dirichlet(np.full(V, 0.1), size=K)             # [K, V]
        q = rng.dirichlet(np.full(V, 0.1), size=K + 1)         # [K+1, V]
        x_draft = np.array([rng.choice(V, p=p[t]) for t in range(K)])
        t = time.perf_counter()
        verify(x_draft, p, q, rng)
        times.append(time.perf_counter() - t)
    return 1e3 * float(np.median(times))


def measure_costs(model: SmolLM2, repeats: int = 7) -> dict:
    """Decode step, weights-stream floor, scoring cost per K and verify cost, measured now on this machine."""
    stream = weights_stream_ms(model, repeats)
    score = scoring_ms(model, repeats)
    decode = score[1]
    mrs_ms = verify_ms(model.config.vocab_size)
    floor = min(stream.values())
    return {
        "decode_ms_per_token": decode,
        "weights_stream_ms": floor,
        "weights_stream_ms_by_layout": stream,
        "decode_over_stream": decode / floor,
        "score_ms": {n - 1: ms for n, ms in score.items() if n > 1},      # K -> ms for K + 1 tokens
        "score_ratio": {n - 1: ms / decode for n, ms in score.items() if n > 1},
        "mrs_ms": mrs_ms,
        "mrs_fraction": mrs_ms / decode,
        "openblas_num_threads": os.environ.get("OPENBLAS_NUM_THREADS", "unset"),
        "repeats": repeats,
    }


def format_table(costs: dict) -> str:
    """The measured costs as a readable table, each ratio beside its target."""
    def row(name, value, target="", ok=None):
        mark = "" if ok is None else ("ok" if ok else "MISSED")
        return f"  {name:<34} {value:>10} {target:>10} {mark:>7}"

    lines = [f"  {'quantity':<34} {'measured':>10} {'target':>10} {'status':>7}",
             row("decode step (ms/token)", f"{costs['decode_ms_per_token']:.1f}"),
             row("weights-stream floor (ms)", f"{costs['weights_stream_ms']:.1f}")]
    for layout, ms in costs["weights_stream_ms_by_layout"].items():
        lines.append(row(f"  GEMV pass, {layout} layout (ms)", f"{ms:.1f}"))
    lines.append(row("decode / floor", f"{costs['decode_over_stream']:.2f}",
                     f"<= {TARGETS['decode_over_stream']}",
                     costs["decode_over_stream"] <= TARGETS["decode_over_stream"]))
    for K, r in costs["score_ratio"].items():
        target, ok = (f"<= {TARGETS['score_ratio_4']}", r <= TARGETS["score_ratio_4"]) if K == 4 else ("", None)
        lines.append(row(f"score {K + 1} tokens / decode (K={K})", f"{r:.2f}", target, ok))
    lines.append(row("verify, K=4, V=49152 (ms)", f"{costs['mrs_ms']:.2f}"))
    lines.append(row("verify / decode", f"{100 * costs['mrs_fraction']:.2f}%",
                     f"< {100 * TARGETS['mrs_fraction']:.0f}%", costs["mrs_fraction"] < TARGETS["mrs_fraction"]))
    lines.append(f"  (OPENBLAS_NUM_THREADS={costs['openblas_num_threads']}, medians of {costs['repeats']} repeats)")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", metavar="PATH", help="write the measurements to this JSON file")
    parser.add_argument("--repeats", type=int, default=9, help="timed repeats per quantity (median taken)")
    parser.add_argument("--cache-dir", default=None, help="weights cache (default $SPECREF_CACHE or ~/.cache/specref)")
    parser.add_argument("--blas-threads", type=int, default=1,
                        help="OpenBLAS threads to measure with; 0 keeps the current setting (default 1)")


def _rerun_with_threads(args) -> int:
    """Run this benchmark again in a fresh interpreter whose OpenBLAS uses args.blas_threads threads."""
    argv = [sys.executable, "-m", "specref", "bench", "--repeats", str(args.repeats),
            "--blas-threads", str(args.blas_threads)]
    if args.json:
        argv += ["--json", args.json]
    if args.cache_dir:
        argv += ["--cache-dir", args.cache_dir]
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(args.blas_threads))
    print(f"rerunning with OPENBLAS_NUM_THREADS={args.blas_threads} (it must be set before NumPy is imported)",
          flush=True)
    return subprocess.call(argv, env=env)


def run(args) -> int:
    if args.repeats < 1:
        raise ValueError(f"--repeats must be at least 1, got {args.repeats}")
    if args.blas_threads < 0:
        raise ValueError(f"--blas-threads must be 0 (keep) or a positive count, got {args.blas_threads}")
    if args.blas_threads and os.environ.get("OPENBLAS_NUM_THREADS") != str(args.blas_threads):
        return _rerun_with_threads(args)
    model = load_smollm2(cache_dir=args.cache_dir)
    print(f"measuring ({args.repeats} repeats each) ...", flush=True)
    costs = measure_costs(model, args.repeats)
    print(format_table(costs))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(costs, f, indent=2)
        print(f"wrote {args.json}")
    return 0
