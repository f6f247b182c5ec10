"""Products split over a thread team, one chunk per thread: one product by its output columns
(`split_product`), or the feed-forward as a whole by its intermediate units (`ffn_product`).

Holds the chunking (`column_chunks`, `unit_chunks`, CALLER_LEAD) and the two split products.  The
products each chunk runs are kernels.py's, the threads team.py's; where a split pays is measured and
chosen by the planner (planner.py) and applied by the plan (plan.py).
"""

from typing import Callable

import numpy as np

from specref.fast.kernels import PADS, PRODUCTS, ROWS, pad_rows, shape_of, written_rows
from specref.fast.team import Team

CALLER_LEAD = 0.06         # the calling thread's chunk of a split is this much of the columns larger (see `column_chunks`;
                           # on the first machine, a VM whose idle cores take ~30 us to wake, 9 rows scored 7% faster
                           # with the caller's chunk at 0.56 of the columns than at 0.5, measured over 0.5..0.65)


def column_chunks(w, method: str, parts: int) -> list:
    """[(a, b)]: the output units (panels for `panels`, columns otherwise) cut into `parts` ranges, in order."""
    return unit_chunks(w.shape[0] if method == "panels" else w.shape[1], parts)


def unit_chunks(units: int, parts: int) -> list:
    """[(a, b)]: `units` cut into `parts` ranges (fewer if there are fewer units), in order.

    The first range is CALLER_LEAD of the units larger than an equal share, the others share the
    rest equally: the caller takes the first chunk at once, while a worker starts only once it has
    woken up, so equal chunks would leave the caller waiting for the worker at every product.
    """
    parts = min(parts, units)
    if parts == 1:
        return [(0, units)]
    first = min(units - parts + 1, max(1, round(units * (1 / parts + CALLER_LEAD))))
    rest = units - first
    return [(0, first)] + [(first + rest * k // (parts - 1), first + rest * (k + 1) // (parts - 1))
                           for k in range(parts - 1)]



def split_product(x, w, method: str, team: Team, pad=None):  # [n, d_in], matrix in method's layout -> [n, d_out]
    """x @ W with the output columns cut into one chunk per thread of the team (caller included);
    each thread writes its columns of the result in place."""
    product = PRODUCTS[method]
    chunks = column_chunks(w, method, team.workers + 1)
    n = x.shape[0]
    if method in PADS and pad:                                 # pad once here, not once per chunk
        x = pad_rows(x, min(pad, ROWS))
    rows = written_rows(method, x.shape[0], pad)
    out = np.empty((rows, shape_of(w)[1]), np.float32)
    if method == "panels":
        panels = out.reshape(rows, w.shape[0], w.shape[2])     # [rows, P, c], a view

    def task(k):
        a, b = chunks[k]
        if method == "panels":
            product(x, w[a:b], pad, out=panels[:, a:b])
        else:
            product(x, w[:, a:b], pad, out=out[:, a:b])

    team.run(len(chunks), task)
    return out[:n]


def ffn_product(x, w_gate_up, w_down, glu: Callable, method: str, team: Team, pad=None):  # [n, d], gate|up, down -> [n, d]
    """down(glu(x W_gate, x W_up)) with the intermediate units cut into one chunk per thread of the team.

    W_gate_up holds the gate's f columns, then the up projection's f columns ([d, 2f], or its 2f/c
    panels); W_down is [f, d] (or its panels [d/c, f, c]).  A chunk of units (panels of c units,
    or single columns) is gate columns a..b, the same up columns, glu on them, and the product with
    W_down's rows a..b: a partial sum of the output.  The caller adds the partials, in chunk order.
    """
    product = PRODUCTS[method]
    panels = method == "panels"
    units = w_down.shape[1] // w_down.shape[2] if panels else w_down.shape[0]    # panels or columns of f
    if shape_of(w_gate_up)[1] != 2 * shape_of(w_down)[0] or (panels and w_gate_up.shape[2] != w_down.shape[2]):
        raise ValueError(f"W_gate_up {w_gate_up.shape} and W_down {w_down.shape} do not make a gated "
                         f"feed-forward in the {method!r} method's layout")
    n = x.shape[0]
    if method in PADS and pad:                                 # pad once here, not once per product
        x = pad_rows(x, min(pad, ROWS))
    chunks = unit_chunks(units, team.workers + 1)
    partial = [None] * len(chunks)

    def task(k):
        a, b = chunks[k]
        if panels:
            c = w_down.shape[2]
            gate, up = product(x, w_gate_up[a:b], pad), product(x, w_gate_up[units + a:units + b], pad)
            partial[k] = product(glu(gate, up), w_down[:, a * c:b * c], pad)
        else:
            gate, up = product(x, w_gate_up[:, a:b], pad), product(x, w_gate_up[:, units + a:units + b], pad)
            partial[k] = product(glu(gate, up), w_down[a:b], pad)

    team.run(len(chunks), task)
    out = partial[0]
    for more in partial[1:]:
        out += more
    return out[:n]
