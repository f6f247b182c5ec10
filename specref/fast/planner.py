"""The planner: time every candidate on the model's own matrices, and choose the fastest plan from the times.

Holds the candidates (`candidates`), the measuring (`measure`, and `time_ffn_split` for the
feed-forward split as a whole) and the choosing (`choose`, `choose_ffn`), with the margins they
use.  What a plan is and how it multiplies is plan.py's (its overview says what is measured and
why); when a plan is measured and where it is kept, cache.py's.
"""

import time
from typing import Callable

import numpy as np

from specref.fast.kernels import METHODS, PADS, PANEL, PRODUCTS, ROWS, from_panels, shape_of, to_panels
from specref.fast.machine import cores, machine_key
from specref.fast.plan import ANY, FFN, ROW_COUNTS, Plan, PlanError, parse_shape, shape_name
from specref.fast.split import split_product
from specref.fast.team import Team
from specref.smollm2.model import glu as model_glu
from specref.smollm2.weights import Weights

ROWS_METHOD_MAX = 4        # `rows` is timed up to this many rows
LAYOUT_TIE = 0.03          # decode times within 3% count as a tie between layouts
THREADS_MARGIN = 0.10      # a split over threads is chosen only if it saves more than 10% (see `choose`)


def candidates(n: int, team_size: int) -> list:
    """(method, threads) pairs worth timing for n rows."""
    out = []
    for method in METHODS:
        if method == "rows" and n > ROWS_METHOD_MAX:
            continue
        out += [(method, 1)] + ([(method, team_size)] if team_size > 1 else [])
    return out


def measure(weights: Weights, counts=ROW_COUNTS, repeats: int = 3, threads: int | None = None,
            progress: Callable = print, glu: Callable | None = None) -> Plan:
    """Time every candidate for every row count on each shape's matrices (min of `repeats` interleaved
    passes), and with more than one thread the feed-forward split as a whole (`ffn_product`, with
    `glu`, the model's gated unit by default); return
    the fastest plan."""
    glu = glu or model_glu
    threads = threads or cores()
    started = time.perf_counter()
    layouts = {"panels": [m if m.ndim == 3 else to_panels(m, PANEL) for m in weights.matrices()],
               "plain": [from_panels(m) for m in weights.matrices()]}    # one of the two is a copy
    groups = {}                                                # shape -> indices of its matrices
    for i, m in enumerate(layouts["panels"]):
        groups.setdefault(shape_of(m), []).append(i)
    team = Team(threads - 1) if threads > 1 else None
    inputs = {n: {d: np.random.default_rng(n).standard_normal((n, d)).astype(np.float32)
                  for d in {shape[0] for shape in groups}} for n in counts}
    times = {n: {shape: {c: [] for c in candidates(n, threads)} for shape in groups} for n in counts}
    for r in range(repeats):                                   # interleaved over row counts and candidates:
        progress(f"  planning: pass {r + 1} of {repeats} over {len(counts)} row counts "
                 f"({time.perf_counter() - started:.0f} s)")
        for n in counts:                                       # load that comes and goes hits them all alike,
            x = inputs[n]                                      # so padding n rows to m compares like with like
            for method, t in candidates(n, threads):
                mats = layouts[METHODS[method]]
                for shape, members in groups.items():
                    t0 = time.perf_counter()
                    for i in members:                          # panels unpadded here: padding is chosen below
                        if t > 1:
                            split_product(x[shape[0]], mats[i], method, team, n)
                        else:
                            PRODUCTS[method](x[shape[0]], mats[i], n)
                    times[n][shape][(method, t)].append(time.perf_counter() - t0)
    ms = {}
    for n in counts:
        ms[n] = {shape_name(shape): {f"{m}/{t}": 1e3 * min(v) for (m, t), v in per.items()}
                 for shape, per in times[n].items()}
        ms[n][ANY] = {name: sum(ms[n][shape_name(shape)][name] for shape in groups)
                      for name in ms[n][shape_name(next(iter(groups)))]}
    layout, choice, why = choose(ms, counts)
    ffn = {}
    if team is not None:
        progress(f"  planning: the feed-forward split as a whole, in passes over every layer "
                 f"({time.perf_counter() - started:.0f} s)")
        for n, t in time_ffn_split(layouts[layout], layout, choice, counts, repeats + 2, threads, glu).items():
            ms[n][FFN] = t
        first = weights.layers[0]
        ffn = choose_ffn(ms, counts, choice, (shape_of(first.w_gate_up), shape_of(first.w_down)))
        if ffn:
            why += f"; the feed-forward split as a whole for {_ranges(sorted(ffn))} rows"
    why += f"; measured in {time.perf_counter() - started:.0f} s"
    return Plan(layout, choice, ms, why, machine_key(weights), ffn)


def _ranges(counts) -> str:
    """'1-3, 6, 9-12' for [1, 2, 3, 6, 9, 10, 11, 12]."""
    runs = []
    for n in counts:
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs)


def time_ffn_split(mats: list, layout: str, choice: dict, counts, repeats: int, threads: int,
                   glu: Callable) -> dict:
    """{n: {"products": ms, "split/T": ms}}: a pass over every matrix in the forward pass's order (per
    layer qkv, o, the feed-forward; then the head) as `choice` multiplies them, with the feed-forward
    as its two products and split as a whole over T threads (min of `repeats` interleaved passes).

    A whole pass, not each product alone, because a split's cost depends on what runs between
    splits: timed back to back, 30 splits of one matrix in a row keep the worker thread awake,
    and on the first machine (a VM whose idle cores take ~30 us to wake) that made the feed-forward
    split look 20% slower than its two products, while in the model it was faster.
    """
    trial = Plan(layout, choice, ffn={n: (threads, None) for n in counts})   # with a team of `threads`
    layers = [mats[i:i + 4] for i in range(0, len(mats) - 1, 4)]             # matrices(): qkv, o, gate_up, down
    name = f"split/{threads}"
    times = {n: {"products": [], name: []} for n in counts}
    for _ in range(repeats):
        for n in counts:
            x = np.random.default_rng(n).standard_normal((n, shape_of(mats[0])[0])).astype(np.float32)
            pad = trial.pick(n, shape_of(layers[0][2]))[2]             # as the gate_up product pads
            for variant in ("products", name):
                trial.ffn = {} if variant == "products" else {trial._count(n): (threads, pad)}
                t0 = time.perf_counter()
                for qkv, o, gate_up, down in layers:
                    trial.linear(x, qkv)
                    trial.linear(x, o)
                    trial.feed_forward(x, gate_up, down, glu)
                trial.linear(x, mats[-1])
                times[n][variant].append(time.perf_counter() - t0)
    return {n: {v: 1e3 * min(ts) for v, ts in per.items()} for n, per in times.items()}


def choose_ffn(ms: dict, counts, choice: dict, shapes: tuple) -> dict:
    """{n: (threads, pad)} for the row counts whose feed-forward is split as a whole.

    ms[n][FFN] holds a pass over every layer with the feed-forward as two products and split over
    T threads ("products", "split/T"; `time_ffn_split`); the split's own time is the two products'
    (ms[.][shape] for gate_up and down = `shapes`, as `choice` multiplies them) less what the pass
    saved.  Both are then costed as in `choose`, a split's time over 1 - THREADS_MARGIN: where
    `choice` already splits both products any saving counts, where it keeps them on one thread the
    split must save more than the margin.  The split pads its rows as the gate_up product does.
    """
    def cost(v, t):
        return v / (1 - THREADS_MARGIN) if t > 1 else v

    out = {}
    for n in counts:
        passes = ms[n].get(FFN)
        if not passes:
            continue
        raw = costed = 0.0
        for shape in shapes:
            m, t, pad = choice[n].get(shape, choice[n][ANY])
            name = shape_name(shape) if shape_name(shape) in ms[n] else ANY
            v = ms[pad if pad and pad > n else n][name][f"{m}/{t}"]
            raw, costed = raw + v, costed + cost(v, t)
        for variant, v in passes.items():
            threads = int(variant.split("/")[1]) if variant.startswith("split/") else 1
            if threads > 1 and cost(raw - (passes["products"] - v), threads) < costed:
                pad = choice[n].get(shapes[0], choice[n][ANY])[2]
                out[n] = (threads, pad if pad and pad > n else None)
    return out


def choose(ms: dict, counts=ROW_COUNTS) -> tuple:
    """(layout, choice, why) from measured times: ms[n][shape name]["method/threads"] = ms at n rows.

    Each shape (and ANY, for shapes not measured) gets its fastest candidate per row count, a
    method in PADS possibly padded with zero rows to a cheaper row count.  A split over threads
    must save more than THREADS_MARGIN of one thread's time to be chosen: it is measured on an idle machine, and when
    another process takes a core a split loses more than it gained, while one thread slows down
    only by what that process takes.  The layout is the one whose choices decode fastest (the sum
    over the shapes at 1 row); of two within LAYOUT_TIE, the one that scores 5 rows faster.
    """
    def cost(v, t):                                            # a split must take < (1 - margin) of one thread's time
        return v / (1 - THREADS_MARGIN) if t > 1 else v

    shapes = [s for s in ms[counts[0]] if s != FFN]
    best = {}                                                  # layout -> shape -> n -> (method, threads, pad, ms)
    for layout in ("panels", "plain"):
        best[layout] = {shape: {} for shape in shapes}
        for shape in shapes:
            for n in counts:
                options = []
                for m in [m for m in counts if m == n or (n < m <= ROWS)]:   # pad n rows to m (PADS only)
                    for name, v in ms[m][shape].items():
                        method, t = name.split("/")
                        if METHODS[method] == layout and (m == n or method in PADS):
                            options.append((cost(v, int(t)), v, method, int(t),
                                            m if method in PADS and n <= ROWS else None))
                if not options:
                    raise PlanError(f"no {layout} candidate was measured for {n} rows (shape {shape})")
                _, v, method, t, pad = min(options)
                best[layout][shape][n] = (method, t, pad, v)

    def total(layout, n):                                      # ms of one pass over every matrix
        named = [s for s in shapes if s != ANY] or [ANY]
        return sum(best[layout][s][n][3] for s in named)

    d = {layout: total(layout, counts[0]) for layout in best}
    five = 5 if 5 in counts else counts[-1]
    if abs(d["panels"] - d["plain"]) <= LAYOUT_TIE * min(d.values()):
        layout = min(best, key=lambda lay: total(lay, five))
        why = (f"decode within {100 * LAYOUT_TIE:.0f}% on both layouts ({d['panels']:.1f} vs {d['plain']:.1f} ms); "
               f"{layout} scores {five} rows faster")
    else:
        layout = min(d, key=d.get)
        other = "plain" if layout == "panels" else "panels"
        why = f"decodes fastest: {d[layout]:.1f} ms per pass over the weights vs {d[other]:.1f} ms on {other}"
    why += f"; threads only where they save more than {100 * THREADS_MARGIN:.0f}%"
    choice = {n: {parse_shape(shape): best[layout][shape][n][:3] for shape in shapes} for n in counts}
    return layout, choice, why
