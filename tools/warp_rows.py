"""What warping one row costs, on rows over arbitrary token ids and on rows over HumanEval prompts.

    python3 -m tools.warp_rows

Top-p's work depends on how peaked a row is (`specref.warps._top_p_row` looks at the likely tokens first).  This
times the nucleus warp (T 0.8, top-p 0.95) on the model's last 8 rows over 64 arbitrary token ids (what
`costs.warp_ratio` warped until 2026-11-30) and on its last 32 rows over four HumanEval prompts, each row two
ways: from its probabilities (the float64 softmax of the logits, then `Warp.__call__`: a log and an exp for the
temperature, then top-p; how the loop warped a target's rows until 2026-11-30, later that day), and from its
logits (`Warp.from_logits`: one softmax at the temperature, then top-p; how it warps them since).  Then it prints
`costs.warp_ratio` on the first prompt as the commands now measure it (what the warp adds to the softmax).
"""

from __future__ import annotations

import os
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as `python -m specref` runs it
import numpy as np  # noqa: E402  (after the thread count)


def median_ms(f, rows, repeats=3) -> float:
    """Median ms of f(row[None]) over every row, `repeats` times."""
    times = []
    for _ in range(repeats):
        for row in rows:
            start = time.perf_counter()
            f(row[None])
            times.append(time.perf_counter() - start)
    return 1e3 * float(np.median(times))


def main() -> int:
    from specref.apps.costs import PREFIX, warp_ratio
    from specref.apps.humaneval.problems import BODY_INDENT, load_problems
    from specref.fast import load_fast
    from specref.smollm2.model import softmax
    from specref.warps import Warp

    model = load_fast(None, measure=True)
    warp = Warp(0.8, None, 0.95)

    def line(name, logits):
        probs = softmax(logits, np.float64)
        soft = median_ms(lambda x: softmax(x, np.float64), logits)
        old = median_ms(warp, probs)
        new = median_ms(warp.from_logits, logits)
        print(f"{name}: softmax {soft:.3f} ms, warping the probabilities {old:.3f} ms (together {soft + old:.3f}); "
              f"warping the logits {new:.3f} ms a row")

    model.reset()
    line(f"rows over {PREFIX} arbitrary token ids (the last 8)", model.next_logits(np.arange(1000, 1000 + PREFIX), 8))
    problems = load_problems()
    first = None
    for i in (0, 40, 80, 120):
        ids = np.array(model.tokenizer.encode(problems[i].prompt + BODY_INDENT))
        first = ids if first is None else first
        model.reset()
        line(f"rows over the prompt of HumanEval/{i} (the last 32)", model.next_logits(ids, 32))
    model.reset()
    print(f"costs.warp_ratio on HumanEval/0's prompt: {warp_ratio(model, warp, first):.4f} decode steps a row "
          f"(greedy: {warp_ratio(model, Warp(0.0), first):.4f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
