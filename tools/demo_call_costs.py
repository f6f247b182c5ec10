"""What the demo's SpS target calls cost, in decode steps, timed in alternation with its ArS steps.

    python3 -m tools.demo_call_costs [--rounds 4] [--draft neural+lookup] [--K 8]

The demo prices a call scoring K + 1 tokens by the ratio `scoring_costs` measures at its start (a cached
prefix of 64 tokens), and reports a run's cost per call against the ArS run's step, minutes apart.  This
runs, in each round: the demo's greedy ArS run, its greedy SpS run with `--draft` and K, and the start's
measurement, on the demo's own prompt, each target call timed where the model is called (the warp and the
loop's own work left out).  A call's cost in one round divides by the ArS step of the same round, so the
host's drift between rounds does not enter it.  Printed per round: the ArS step (median ms), the SpS calls
that scored K + 1 tokens (median ms, their count, their ratio to the step), the start's ratio for K + 1
tokens measured in the same round, and the SpS run's time per loop step (the demo's "call ms"), split into
the target's calls (as `timed_generation` counts them, with the warp; and of that, in the model's own
next_probs), the draft's, and the rest (verification, the loop).
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as `python -m specref demo` runs it (specref.__main__)
import numpy as np  # noqa: E402  (after the thread count)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m tools.demo_call_costs", description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--draft", default="neural+lookup")
    parser.add_argument("--K", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=96)
    parser.add_argument("--calls", action="store_true", help="also print every target call of each SpS run: "
                        "tokens it was given / rows it scored: ms")
    args = parser.parse_args(argv)

    from specref.apps import demo
    from specref.fast import load_fast
    model = load_fast(None, measure=True)
    ids = model.tokenizer.chat([{"role": "user", "content": demo.DEFAULT_PROMPT}])
    calls: list[tuple[int, float, int]] = []                 # (rows scored, seconds, tokens given) of every call
    plain = model.next_probs

    def timed(tokens, k=1):
        start = time.perf_counter()
        out = plain(tokens, k)
        calls.append((k, time.perf_counter() - start, len(tokens)))
        return out

    model.next_probs = timed
    eos = model.tokenizer.eos_id
    print(f"prompt: {len(ids)} tokens; {args.tokens} new; greedy; SpS {args.draft}, K = {args.K}")
    print("round  ArS step ms  SpS calls of K+1: n, median ms, / step  |  start's K+1 / 1 (same round)  "
          "|  SpS ms per call (demo's 'call ms') / step  |  of which ms: target (in the model), draft, the rest")
    ratios, starts = [], []
    for r in range(args.rounds):
        calls.clear()
        ars = demo.generate(model, ids, "ArS", "-", 0, 0.0, None, args.tokens, 0, eos=eos)
        steps = [s for k, s, _ in calls[1:] if k == 1]
        calls.clear()
        sps = demo.generate(model, ids, "SpS", args.draft, args.K, 0.0, None, args.tokens, 0, eos=eos)
        full = [s for k, s, _ in calls if k == args.K + 1]
        raw = sum(s for _, s, _ in calls[1:])  # the SpS loop's target calls in the model (the first, the prefill, is not timed)
        if args.calls:
            print("  SpS calls: " + " ".join(f"{n}/{k}:{1e3 * s:.0f}" for k, s, n in calls[1:]))
        model.next_probs = plain
        ms, _ = demo.scoring_and_stream_ms(model, demo.COST_REPEATS, args.K)
        model.next_probs = timed
        step = float(np.median(steps))
        call = float(np.median(full)) if full else float("nan")
        ratios.append(call / step)
        starts.append(ms[args.K + 1] / ms[1])
        per_call = sps.stats.seconds / max(sps.stats.loops, 1)           # the demo's 'call ms': the whole loop step
        per_step = ars.stats.seconds / max(ars.stats.loops, 1)
        loops = max(sps.stats.loops, 1)
        draft, target = sps.stats.draft_seconds / loops, sps.stats.target_seconds / loops
        print(f"{r:5d}  {1e3 * step:11.1f}  {len(full):3d}, {1e3 * call:6.1f}, {ratios[-1]:5.2f}  |  "
              f"{starts[-1]:5.2f} ({ms[1]:.1f} ms a step)  |  {1e3 * per_call:6.1f} ms, {per_call / per_step:5.2f}  |  "
              f"{1e3 * target:5.1f} ({1e3 * raw / loops:5.1f} in the model) {1e3 * draft:5.1f} "
              f"{1e3 * (per_call - target - draft):5.1f}")
    print(f"median over rounds: SpS K+1 call / ArS step {np.median(ratios):.2f}; start's measurement "
          f"{np.median(starts):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
