"""Where a second core could help the forward pass's products, measured: `python3 -m tools.thread_experiments`.

The planner (`specref.fast.planner`) splits one product at a time over threads, and on the
2-core AMD EPYC it was developed on that split rarely pays.  This tool times, on the model's own
121 weight matrices in forward order and in the panel layout, for a few row counts:

- `1 thread`: each product on the calling thread (the plan's usual choice there);
- `split each product`: each product's columns shared by two threads (the planner's split, one
  chunk per thread: one hand-off and one wait per product, 121 per pass);
- `halves, one hand-off`: each thread multiplies half of the columns of every matrix, with one
  hand-off per pass; not a forward pass (the products depend on each other), but the best any
  split of the products over two threads could do, hand-offs aside (an earlier version gave each
  thread half of the matrices, so one thread had the head, a fifth of the weights, on top of its
  half: a bound that was too high);
- `row blocks`: each thread multiplies its own rows (the first half and the second half) by every
  matrix, as a forward pass that cuts the scored tokens into two blocks on two threads would,
  without the wait at each layer's attention that such a pass needs;
- `read-ahead helper`: the calling thread multiplies as usual while a second thread reads the
  weights up to AHEAD_MB ahead of it, so that they may come from the shared L3 cache.

Every variant does the same arithmetic (or, for the read-ahead, the same plus a read) and runs in
the same interleaved rounds; medians over rounds are printed, in ms per pass over the weights.
Only the ratios within one run mean much on a shared machine.
"""

import argparse
import json
import os
import threading
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")           # as the command line sets it

import numpy as np

from specref.files import write_text
from specref.fast.kernels import PANEL, panel_product, to_panels
from specref.fast.split import split_product
from specref.fast.team import Team
from specref.smollm2.weights import gguf_path, load_weights

AHEAD_MB = 8.0         # how far the read-ahead helper may run ahead of the products


class ReadAhead:
    """A thread that reads the matrices in order, at most AHEAD_MB ahead of `position`, once per `start()`."""

    def __init__(self, mats):
        self.mats, self.position = mats, 0
        self.ends = np.cumsum([m.nbytes for m in mats])
        self._go, self._done = threading.Event(), threading.Event()
        threading.Thread(target=self._loop, daemon=True).start()

    def start(self):
        self.position = 0
        self._done.clear()
        self._go.set()

    def wait(self):
        self._done.wait()

    def _loop(self):
        while True:
            self._go.wait()
            self._go.clear()
            for j, m in enumerate(self.mats):
                while j > self.position and (self.ends[j] - self.ends[self.position]) / 1e6 > AHEAD_MB:
                    time.sleep(2e-5)                          # far enough ahead: let the products catch up
                if j >= self.position:                        # not yet passed by the products
                    np.add.reduce(m.reshape(-1))
            self._done.set()


def variants(mats, team: Team, helper: ReadAhead) -> dict:
    """name -> function(inputs, pad) that multiplies n rows by every matrix once."""
    halves = [[m[:m.shape[0] // 2] for m in mats], [m[m.shape[0] // 2:] for m in mats]]   # column halves

    def one_thread(x, pad):
        for m in mats:
            panel_product(x[m.shape[1]], m, pad)

    def split_each(x, pad):
        for m in mats:
            split_product(x[m.shape[1]], m, "panels", team, pad)

    def halves_once(x, pad):
        team.run(2, lambda k: [panel_product(x[m.shape[1]], m, pad) for m in halves[k]])

    def row_blocks(x, pad):
        n = next(iter(x.values())).shape[0]
        cut = (n + 1) // 2
        blocks = [{d: v[:cut] for d, v in x.items()}, {d: v[cut:] for d, v in x.items()}]
        team.run(2, lambda k: [panel_product(blocks[k][m.shape[1]], m, pad) for m in mats])

    def read_ahead(x, pad):
        helper.start()
        for i, m in enumerate(mats):
            helper.position = i
            panel_product(x[m.shape[1]], m, pad)
        helper.position = len(mats)
        helper.wait()

    return {"1 thread": one_thread, "split each product": split_each, "halves, one hand-off": halves_once,
            "row blocks": row_blocks, "read-ahead helper": read_ahead}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 6, 9, 12], help="row counts (default 1 6 9 12)")
    ap.add_argument("--rounds", type=int, default=7, help="interleaved rounds, >= 1 (median taken; default 7)")
    ap.add_argument("--json", help="write the medians to this JSON file")
    args = ap.parse_args(argv)
    if args.rounds < 1 or any(n < 1 for n in args.rows):
        ap.error("--rounds and every --rows value must be >= 1")
    weights = load_weights(gguf_path())
    mats = [m if m.ndim == 3 else to_panels(m, PANEL) for m in weights.matrices()]
    team = Team(1)
    runs = variants(mats, team, ReadAhead(mats))
    rng = np.random.default_rng(0)
    inputs = {n: {d: rng.standard_normal((n, d)).astype(np.float32) for d in {m.shape[1] for m in mats}}
              for n in args.rows}
    times = {(n, name): [] for n in args.rows for name in runs}
    for r in range(args.rounds):
        print(f"round {r + 1} of {args.rounds}", flush=True)
        for n in args.rows:
            pad = 2 if n == 1 else n                          # 1 row padded to 2, as the plans here do
            for name in rng.permutation(list(runs)):
                t = time.perf_counter()
                runs[name](inputs[n], pad)
                times[(n, name)].append(time.perf_counter() - t)
    ms = {n: {name: 1e3 * float(np.median(times[(n, name)])) for name in runs} for n in args.rows}
    print(f"\nms per pass over the {len(mats)} matrices ({sum(m.nbytes for m in mats) / 1e6:.0f} MB), "
          f"median of {args.rounds} rounds; in brackets, against 1 thread")
    print(f"{'rows':>4}  " + "  ".join(f"{name:>24}" for name in runs))
    for n in args.rows:
        base = ms[n]["1 thread"]
        print(f"{n:>4}  " + "  ".join(f"{f'{v:.1f} ({v / base:.2f})':>24}" for v in ms[n].values()))
    if args.json:
        write_text(args.json, json.dumps({"ms": {str(n): v for n, v in ms.items()}, "rounds": args.rounds,
                                          "ahead_mb": AHEAD_MB}, indent=1))


if __name__ == "__main__":
    main()
