"""What warping one row costs, on rows over arbitrary token ids and on rows over HumanEval prompts.

    python3 -m tools.warp_rows

Top-p's work depends on how peaked a row is (`specref.warps._top_p_row` looks at the likely tokens first).  This
times the nucleus warp (T 0.8, top-p 0.95) on the model's last 8 rows over 64 arbitrary token ids (what
`costs.warp_ratio` warped until 2026-11-30) and on its last 32 rows over four HumanEval prompts, then prints
`costs.warp_ratio` on the first prompt as the commands now measure it.
"""

from __future__ import annotations

import os
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as `python -m specref` runs it
import numpy as np  # noqa: E402  (after the thread count)


def main() -> int:
    from specref.apps.costs import PREFIX, warp_ratio
    from specref.apps.humaneval.problems import BODY_INDENT, load_problems
    from specref.fast import load_fast
    from specref.warps import Warp

    model = load_fast(None, measure=True)
    warp = Warp(0.8, None, 0.95)

    def per_row(rows, repeats=3):
        times = []
        for _ in range(repeats):
            for row in rows:
                start = time.perf_counter()
                warp(row[None])
                times.append(time.perf_counter() - start)
        return 1e3 * float(np.median(times))

    model.reset()
    print(f"rows over {PREFIX} arbitrary token ids (the last 8): {per_row(model.next_probs(np.arange(1000, 1000 + PREFIX), 8)):.3f} ms a row")
    problems = load_problems()
    first = None
    for i in (0, 40, 80, 120):
        ids = np.array(model.tokenizer.encode(problems[i].prompt + BODY_INDENT))
        first = ids if first is None else first
        model.reset()
        print(f"rows over the prompt of HumanEval/{i} (the last 32): {per_row(model.next_probs(ids, 32)):.3f} ms a row")
    model.reset()
    print(f"costs.warp_ratio on HumanEval/0's prompt: {warp_ratio(model, warp, first):.4f} decode steps a row")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
