"""`python -m specref bench --json PATH`: the costs that decide whether speculative sampling pays.

Measured in one run (see `specref.apps.costs` for what each quantity is): decode_ms_per_token,
weights_stream_ms, score_ratio (K -> scoring K + 1 tokens / one decode step), mrs_ms, and the
demo's workloads (`specref.apps.demo`) with their measured speedups, the speedups predicted before each run
(predicted_speedup: from the pilot that chose K, None with --K) and the model check (model_check_speedup:
Theorem 3.8 with the run's own alpha and costs, a check of the model's algebra), and peak memory.
Targets: decode <= 1.25 x the stream floor with every core, score_ratio[4] <= 1.2 and
score_ratio[8] <= 1.5, verify < 2% of a decode step, block verification (block_ms) < 3%, each tree
verifier on a 16-node tree (verify_tree_ms) < 2%.  Beside the chains' scoring costs it reports what
scoring a tree of N nodes costs (tree_score_ratio), next to a chain of N + 1 tokens: the same rows.
It runs the model on its fast path and first prints the path's plan (`specref.fast.plan`): how it multiplies by its weights on
this machine, and what each candidate measured when the plan was made.  Beside each ratio
("rounds") it prints the middle half (25th to 75th percentile) of the same ratio taken within each
of the shuffled rounds: the verdicts are on the ratios of the medians, the rounds show how far the
machine's noise moved them during the run.  `--verify block` runs the workloads' SpS with
block verification; each workload row says which verifier ran and, beside the measured tokens
per target call, both verifiers' expected tokens per call on the run's drafts (see `demo`).  The machine may be shared, so only ratios measured in the same run mean much.

BLAS threads: OPENBLAS_NUM_THREADS as `specref.__main__` sets it before NumPy is imported (1
unless the environment says otherwise); `--blas-threads N` makes it N.  The JSON records it.

BLAS kernels: it prints which core type's kernels OpenBLAS runs (`specref.fast.blas`) and records it.
When OPENBLAS_CORETYPE forces them, it also measures the same costs in a child process with the variable
unset (the kernels OpenBLAS picks for this CPU, with their own plan) and prints the two side by side:
what forcing them costs on this CPU.  `--costs-only` measures the costs and skips the workloads.
"""

import argparse
import json
import os
import pathlib
import resource
import subprocess
import sys
import tempfile

from specref import verifiers
from specref.apps import demo, options
from specref.apps.costs import TARGETS, VERIFY_TREE, measure_costs
from specref.files import write_text
from specref.fast import blas, fast_model, load_fast

def format_table(costs: dict) -> str:
    """The measured costs as a readable table, each ratio beside its target."""
    def row(name, value, target="", ok=None, spread=None):
        mark = "" if ok is None else ("ok" if ok else "MISSED")
        rounds = "" if spread is None else f"{spread[0]:.2f}-{spread[1]:.2f}"
        return f"  {name:<34} {value:>10} {target:>10} {mark:>7} {rounds:>11}".rstrip()

    lines = [f"  {'quantity':<34} {'measured':>10} {'target':>10} {'status':>7} {'rounds':>11}",
             row("decode step (ms/token)", f"{costs['decode_ms_per_token']:.1f}"),
             row(f"weights-stream floor, {costs['cores']} cores (ms)", f"{costs['weights_stream_ms']:.1f}")]
    for name, ms in costs["weights_stream_ms_by_pass"].items():
        lines.append(row(f"  {name} (ms)", f"{ms:.1f}"))
    lines.append(row("decode / floor", f"{costs['decode_over_stream']:.2f}",
                     f"<= {TARGETS['decode_over_stream']}",
                     costs["decode_over_stream"] <= TARGETS["decode_over_stream"], costs["decode_over_stream_rounds"]))
    for K, r in costs["score_ratio"].items():
        limit = TARGETS.get(f"score_ratio_{K}")
        target, ok = (f"<= {limit}", r <= limit) if limit else ("", None)
        lines.append(row(f"score {K + 1} tokens / decode (K={K})", f"{r:.2f}", target, ok, costs["score_ratio_rounds"][K]))
    lines.append(row("verify, K=4, V=49152 (ms)", f"{costs['mrs_ms']:.2f}"))
    lines.append(row("verify / decode", f"{100 * costs['mrs_fraction']:.2f}%",
                     f"< {100 * TARGETS['mrs_fraction']:.0f}%", costs["mrs_fraction"] < TARGETS["mrs_fraction"]))
    lines.append(row("verify_block, K=4, V=49152 (ms)", f"{costs['block_ms']:.2f}"))
    lines.append(row("verify_block / decode", f"{100 * costs['block_fraction']:.2f}%",
                     f"< {100 * TARGETS['block_fraction']:.0f}%", costs["block_fraction"] < TARGETS["block_fraction"]))
    for N, r in costs.get("tree_score_ratio", {}).items():
        chain = costs["score_ratio"].get(N)
        peer = f" (a chain of {N + 1}: {chain:.2f})" if chain is not None else ""
        lines.append(row(f"score a tree of {N} nodes / decode", f"{r:.2f}", spread=costs["tree_score_ratio_rounds"][N])
                     + peer)
    for drawing, ms in costs.get("verify_tree_ms", {}).items():
        name = verifiers.for_drawing(drawing).function.__name__
        fraction = costs["verify_tree_fraction"][drawing]
        lines.append(row(f"{name}, {VERIFY_TREE} = 16 nodes (ms)", f"{ms:.2f}"))
        lines.append(row(f"{name} / decode", f"{100 * fraction:.2f}%", f"< {100 * TARGETS['verify_tree_fraction']:.0f}%",
                         fraction < TARGETS["verify_tree_fraction"]))
    lines.append(f"  (OPENBLAS_NUM_THREADS={costs['openblas_num_threads']}, medians of {costs['repeats']} repeats; the verdicts "
                 "are on the ratios of the medians; rounds: the middle half of the same ratio within each round)")
    return "\n".join(lines)


def native_kernel_costs(args) -> dict:
    """The same costs measured by a child `bench --costs-only` with OPENBLAS_CORETYPE unset: OpenBLAS's own kernels."""
    env = {k: v for k, v in os.environ.items() if k != blas.CORETYPE_VAR}
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "native.json"
        command = [sys.executable, "-m", "specref", "bench", "--costs-only", "--repeats", str(args.repeats),
                   "--json", str(out)] + (["--cache-dir", args.cache_dir] if args.cache_dir else [])
        done = subprocess.run(command, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"measuring under OpenBLAS's own kernels failed ({' '.join(command)}):\n"
                               f"{done.stderr[-2000:]}")
        return json.loads(out.read_text())


def format_kernel_comparison(forced: dict, native: dict) -> str:
    """The costs under the forced kernels beside those under OpenBLAS's own choice, same CPU, same run."""
    a, b = forced["openblas"]["core"] or "forced", native["openblas"]["core"] or "own choice"
    head = f"{a} (forced)"
    rows = [f"  {'quantity':<34} {head:>16} {b + ' (its choice)':>22}",
            f"  {'decode step (ms/token)':<34} {forced['decode_ms_per_token']:>16.1f} {native['decode_ms_per_token']:>22.1f}",
            f"  {'decode / floor':<34} {forced['decode_over_stream']:>16.2f} {native['decode_over_stream']:>22.2f}"]
    theirs = {int(K): r for K, r in native["score_ratio"].items()}  # a JSON round trip makes the keys strings
    for K, r in forced["score_ratio"].items():
        rows.append(f"  {f'score {int(K) + 1} tokens / decode (K={K})':<34} {r:>16.2f} {theirs[int(K)]:>22.2f}")
    return "\n".join([f"OpenBLAS kernels: {blas.CORETYPE_VAR}={forced['openblas']['forced_core']} against the variable "
                      f"unset, on this CPU in one run:"] + rows)


def workload_row(r: demo.Run) -> dict:
    """One demo run as a JSON row."""
    return {"method": r.method, "draft": r.draft, "verify": r.verify, "K": r.K, "temperature": r.temperature,
            "top_p": r.top_p,
            "tokens": len(r.tokens), "ms_per_token": r.stats.ms_per_token, "alpha": r.stats.alpha_hat,
            "tokens_per_target_call": r.stats.tokens_per_target_call,
            "expected_tokens_per_call_token": r.expected_token, "expected_tokens_per_call_block": r.expected_block,
            "target_ms_per_call": r.stats.target_ms_per_call, "draft_ms_per_call": r.stats.draft_ms_per_call,
            "speedup": r.speedup, "predicted_speedup": r.apriori, "model_check_speedup": r.model_check,
            "score_noise": r.score_noise}


def format_workload_checks(costs: dict) -> str:
    """The demo's default workload (greedy, prompt-lookup) against the speedup and model-check targets, and its
    prediction before the run (where a pilot chose K) beside them."""
    main = next(w for w in costs["workloads"] if w["method"] == "SpS" and w["draft"] == "prompt-lookup"
                and w["temperature"] == 0)
    error = abs(main["model_check_speedup"] - main["speedup"]) / main["speedup"]
    before = main.get("predicted_speedup")
    lines = [f"  default workload (greedy, prompt-lookup): speedup {main['speedup']:.2f}x (target >= "
             f"{TARGETS['speedup']}) {'ok' if main['speedup'] >= TARGETS['speedup'] else 'MISSED'}",
             f"  model check (run's alpha, run's costs) {main['model_check_speedup']:.2f}x, {100 * error:.0f}% from "
             f"measured (target <= {100 * TARGETS['prediction_error']:.0f}%) "
             f"{'ok' if error <= TARGETS['prediction_error'] else 'MISSED'}",
             "  " + ("no a-priori prediction (--K given: no pilot)" if before is None else
                     f"predicted before the run (pilot's alpha, costs measured before it) {before:.2f}x, "
                     f"{100 * abs(before - main['speedup']) / main['speedup']:.0f}% from measured"),
             f"  peak memory {costs['peak_rss_mib']:.0f} MiB (target < {TARGETS['peak_rss_mib']}) "
             f"{'ok' if costs['peak_rss_mib'] < TARGETS['peak_rss_mib'] else 'MISSED'}"]
    for w in costs["workloads"]:
        if w["method"] == "SpS" and w["speedup"] < 1.0:
            lines.append(f"  SpS is SLOWER than ArS with the {w['draft']} draft at temperature {w['temperature']}: "
                         f"{w['speedup']:.2f}x")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The benchmark's options, each checked as it is read (`specref.apps.options`), before the model loads."""
    parser.add_argument("--json", metavar="PATH", type=options.output_file(), default=None,
                        help="write the measurements to this JSON file (its directory must exist)")
    parser.add_argument("--repeats", type=options.integer(1), default=9,
                        help="timed repeats per quantity, >= 1 (median taken; default 9)")
    parser.add_argument("--cache-dir", type=options.directory, default=None,
                        help="weights cache (default $SPECREF_CACHE or ~/.cache/specref)")
    parser.add_argument("--K", type=options.K, default=4,
                        help=f"draft tokens per loop in the workloads, 1 to {options.MAX_K} (default 4)")
    parser.add_argument("--max-new-tokens", type=options.MAX_NEW_TOKENS, default=96,
                        help=f"tokens per workload run, 1 to {options.CONTEXT_LENGTH - 1} (default 96)")
    parser.add_argument("--verify", choices=verifiers.CHAINS, default="token",
                        help="the workloads' SpS verifier: token (default) or block (block verification)")
    parser.add_argument("--replan", action="store_true",
                        help="measure this machine's plan for multiplying by the weights again (about half a "
                             "minute; it is otherwise measured once and cached)")
    parser.add_argument("--costs-only", action="store_true",
                        help="measure the costs only, not the demo's workloads")
    parser.add_argument("--one-thread", action="store_true",
                        help="run the machine's plan with every product on one thread (what a split costs "
                             "when another program holds the other cores)")
    # read by specref.__main__ before NumPy is imported: it sets OPENBLAS_NUM_THREADS, the one mechanism
    parser.add_argument("--blas-threads", metavar="N", type=options.integer(0), default=0,
                        help="OpenBLAS threads to measure with (sets OPENBLAS_NUM_THREADS before NumPy is "
                             "imported); 0 keeps the environment's setting, 1 unless set (default 0)")


def run(args) -> int:
    model = load_fast(cache_dir=args.cache_dir, measure=True, remeasure=args.replan)
    if args.one_thread:
        model = fast_model(model, model.fast.on_one_thread())  # same layout, so the weights stay as they are
    kernels = blas.openblas_info()
    print(blas.openblas_description(kernels))
    print(f"measuring ({args.repeats} repeats each) ...", flush=True)
    print(model.fast.describe())
    costs = measure_costs(model, args.repeats)
    costs["openblas"] = kernels
    print(format_table(costs))
    if kernels["forced_core"]:
        print(f"\n{blas.CORETYPE_VAR}={kernels['forced_core']} forces these kernels: measuring the same costs with it "
              f"unset, in a child process (OpenBLAS's own kernels; the first time, their own plan too) ...", flush=True)
        costs["native_kernels"] = native_kernel_costs(args)
        print(format_kernel_comparison(costs, costs["native_kernels"]))
    if not args.costs_only:
        print(f"\nthe demo's workloads ({args.max_new_tokens} new tokens, K={args.K}, default prompt) ...", flush=True)
        prompt_ids = model.tokenizer.chat([{"role": "user", "content": demo.DEFAULT_PROMPT}])
        results = demo.run_workloads(model, prompt_ids, [(0.0, None), (0.8, 0.95)], list(demo.DRAFTS), args.K,
                                     args.max_new_tokens, 0, eos=model.tokenizer.eos_id, log=lambda *a: None,
                                     verify=args.verify)
        costs["workloads"] = [workload_row(r) for r in results]
        costs["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(demo.table(results))
        print(format_workload_checks(costs))
    if args.json:
        write_text(args.json, json.dumps(costs, indent=2))
        print(f"wrote {args.json}")
    return 0
