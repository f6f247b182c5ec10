"""The fast path's plan: how to multiply rows by the weight matrices on this machine, chosen by measuring (in FFTW's spirit).

The model's plain path multiplies x @ W (`specref.smollm2.model.linear`).  The same products can
be much faster in another layout or split over the cores, but what is fastest depends on the CPU,
its caches, its memory and the BLAS build, so no fixed choice carries from one machine to another
(the note above `panel_product` explains the choice measured on the first machine).  The planner times every candidate on the model's own matrices, for one row (a
decode step) and for each row count speculative sampling scores (2..ROWS, and PREFILL for a
prompt), keeps the fastest per row count and matrix shape, and caches the result per machine.

Candidates, each a method on a weight layout, on one thread or split over every core:
- `panels` (layout `panels`, [d_out / 32, d_in, 32]): one small GEMM per 32-column panel, rows
  padded to 2 or at least 6 (the note above `panel_product`);
- `gemm` (layout `plain`, [d_in, d_out]): one `x @ W`, which is a GEMV for one row, rows padded
  with zeros where that was measured to be cheaper (the note in `gemm_product`);
- `rows` (layout `plain`): one GEMV per row, for up to ROWS_METHOD_MAX rows (with more, each row
  pays for a pass over the matrix).
Split over cores: the output columns are cut into one chunk per thread, and the calling thread
and T - 1 worker threads take chunks until none are left (NumPy releases the GIL inside matmul, so
they run at once).  Chunks are shared, not dealt out, and workers sleep on a queue rather than
spin: if another process holds a core, the caller does the chunk the worker cannot get to, instead
of waiting for it.  Every hand-off wakes a sleeping thread, which costs tens of microseconds (25-30
us one way on the first machine, a VM), so a product is split in as few chunks as there are
threads, and only where the plan measured that it pays: the model's five matrix shapes are planned
separately, because a split saves time on the large ones (the SwiGLU up projection, the head) and
loses it on the small ones, where the hand-offs cost more than half the product.

The feed-forward block (SwiGLU: down(glu(x gate, x up))) may also be split as a whole, once per
layer instead of once per product: each thread takes a range of the intermediate units, computes
its columns of gate and up, the gated unit on them, and its partial product with the matching rows
of W_down; the caller adds the partials (`ffn_product`).  One hand-off instead of two, and the
gated unit is shared out too.  The plan times it against the two products it replaces, per row
count, in whole passes over the layers (`time_ffn_split` says why not product by product), and
uses it where it pays as `choose` costs a split (`choose_ffn`, `Plan.ffn`).

One layout is kept in memory (both would double it): the one whose fastest plan decodes (1 row)
fastest, and of two within LAYOUT_TIE of each other, the one that scores 5 rows faster.

Every candidate computes the same product; they differ in the order of float32 additions, so
results agree to float32 rounding, not bit for bit (tests/smollm2/test_fast.py forces each one against the plain path).
"""

import dataclasses
import datetime
import hashlib
import json
import os
import pathlib
import platform
import queue
import threading
import time
from typing import Callable

import numpy as np

from specref.files import write_text
from specref.smollm2.fetch import cache_root
from specref.smollm2.model import glu as model_glu
from specref.smollm2.weights import Weights

ROWS = 18                  # most rows per small-GEMM call (see the note above `panel_product`)
PREFILL = 64               # the row count planned for prompts (more than ROWS rows)
ROW_COUNTS = tuple(range(1, ROWS + 1)) + (PREFILL,)
ROWS_METHOD_MAX = 4        # `rows` is timed up to this many rows
CALLER_LEAD = 0.06         # the calling thread's chunk of a split is this much of the columns larger (see `column_chunks`;
                           # on the first machine, a VM whose idle cores take ~30 us to wake, 9 rows scored 7% faster
                           # with the caller's chunk at 0.56 of the columns than at 0.5, measured over 0.5..0.65)
LAYOUT_TIE = 0.03          # decode times within 3% count as a tie between layouts
THREADS_MARGIN = 0.10      # a split over threads is chosen only if it saves more than 10% (see `choose`)
METHODS = {"panels": "panels", "gemm": "plain", "rows": "plain"}   # method -> the layout it needs
LAYOUT_METHOD = {"panels": "panels", "plain": "gemm"}              # the method a split feed-forward uses
PADS = ("panels", "gemm")  # methods whose rows may be padded with zeros to a cheaper row count (see `choose`)
ANY = "*"                  # the choice for a matrix shape the plan did not measure
FFN = "ffn"                # the name of the split feed-forward's times in a plan's `ms`
PLAN_VERSION = 6           # 2: threads need THREADS_MARGIN; 3: row counts timed interleaved;
                           # 4: one chunk per thread, chosen per matrix shape; 5: gemm pads rows too;
                           # 6: the feed-forward may be split as a whole; older plans are measured again


class PlanError(RuntimeError):
    """A plan that cannot be used: unknown method or layout, or a plan file that does not parse."""


def cores() -> int:
    """Processors this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


# ---------------------------------------------------------------- the panel layout

PANEL = 32                 # output columns per panel (the note above `panel_product` says why 32)


def to_panels(w: np.ndarray, width: int) -> np.ndarray:  # [d_in, d_out] -> [d_out / width, d_in, width]
    """Split a matrix into contiguous panels of `width` output columns (see `panel_product`)."""
    d_in, d_out = w.shape
    if d_out % width:
        raise ValueError(f"{d_out} output columns do not split into panels of {width}")
    return np.ascontiguousarray(w.reshape(d_in, d_out // width, width).transpose(1, 0, 2))


def from_panels(p: np.ndarray) -> np.ndarray:  # [P, d_in, width] -> [d_in, P * width]
    """The plain matrix that `to_panels` split (a copy); a matrix already plain is returned as it is."""
    if p.ndim == 2:
        return p
    n_panels, d_in, width = p.shape
    return np.ascontiguousarray(p.transpose(1, 0, 2).reshape(d_in, n_panels * width))


@dataclasses.dataclass(frozen=True)
class PanelWeights(Weights):
    """Weights whose matrices are kept as panels [d_out / PANEL, d_in, PANEL] (`in_layout`)."""

    def embed(self, tokens: np.ndarray) -> np.ndarray:  # [n] -> [n, d_model]
        """Column t of the head: panel t // width, its column t % width."""
        width = self.head.shape[2]
        return self.head[tokens // width, :, tokens % width]

    def head_matrix(self) -> np.ndarray:  # -> [d_model, vocab_size], a copy
        return from_panels(self.head)


# ---------------------------------------------------------------- the three ways to multiply

# Why the weight matrices are stacks of narrow panels, and why `panel_product` pads rows to 2 or 6.
#
# Speculative sampling pays off only if scoring K+1 tokens in one call costs about as much as
# generating one token.  A decode step reads all ~540 MB of float32 weights once, so one token
# is bound by memory bandwidth and extra rows should be almost free.  With NumPy + OpenBLAS they
# are not (figures measured on a 2-core AMD EPYC, the first machine, with OPENBLAS_NUM_THREADS=1,
# while it was shared with other jobs, so they are ratios from single runs, +-10%):
#   - plain `X @ W` with 2..9 rows takes OpenBLAS's GEMM path, which first copies ("packs") W
#     into a buffer: 2.4x-3.3x the time of one matrix-vector product (GEMV) with 5 rows;
#   - one GEMV per row: rows after the first read W from L3, ~0.3 GEMV each: 5 rows ~2.2x;
#   - weights in [out, in] or [in, out] order (X @ W.T, W @ X.T, X @ W; Fortran order is one of
#     these), scipy.linalg.blas.sgemm with transpose flags, 1 or 2 threads: 2.4x-9x with 5 rows.
# What works: store each [d_in, d_out] matrix as P = d_out / 32 contiguous panels [P, d_in, 32]
# (`to_panels`) and call `np.matmul(X, panels)` once.  NumPy loops over the panels
# in C and calls sgemm for each small row-major product [n, d_in] @ [d_in, 32].  OpenBLAS hands
# products with m*n*k <= 10^6 to its AVX-512 "small matrix" kernel (`perf` shows the time in
# sgemm_small_kernel_b0_nn_SKYLAKEX), which reads both operands in place: no packing, and no
# threads.  It sweeps each 73 KB panel once per group of 4, 2 or 1 rows of X, and the panel stays
# in L2 between sweeps, so the first sweep pays for memory and the later ones are cheap.
# Over the model's matrices, relative to one plain GEMV each:
#   panel width   16    24    32    48    64
#   1 row        0.77  0.77  0.73  0.81  1.3   (1 row goes to NumPy's GEMV path)
#   5 rows       1.75  1.77  1.16  1.3   1.2
# Width 32 is best for both.  Row counts matter, and not all of it is explained by the sweeps:
# over 32-wide panels 4 rows cost 1.3x and 5 rows (sweeps of 4 and 1) 1.6x one row, but 6 rows
# (sweeps of 4 and 2) 1.0x-1.2x.  So `panel_product` pads 3..5 rows to 6 with zeros (in the whole model,
# scoring 5 tokens went from 1.54x to 1.16x a decode step), and pads 1 row to 2, which costs
# nothing and keeps a decode step on the same single-threaded kernel rather than NumPy's GEMV
# call, which OpenBLAS runs on several threads when it may.  7 or more rows go in one call
# (6 + 2 rows in two calls cost 1.8x one row, 8 rows in one call 1.5x: a second call reads the
# weights from memory again), at most ROWS = 18 per call, so that m*n*k = 18 * 32 * 1536 stays
# under the small kernel's limit for the widest input (the SwiGLU down projection).
# Whole model (same conditions, `python -m specref bench`): decode step 1.07x-1.12x the
# weights-stream floor (a GEMV pass over the panels, which is faster than one over the plain
# matrices); scoring 2..9 tokens in one call: 0.99, 1.07, 1.12, 1.18, 1.10, 1.39, 1.48, 1.72 x a
# decode step.  A 200-token prompt takes 0.5 s.
# Threads: let OpenBLAS use 1 thread (OPENBLAS_NUM_THREADS=1, set before NumPy is imported).  With
# 2 threads on a busy 2-core machine its threaded paths became erratic: a plain GEMV pass over the
# weights took 1.4 s instead of 38 ms, and a 200-token prompt 1.4 s to 1.9 s instead of 0.5 s
# (the panels themselves never use threads, so decode and scoring suffer least).
# On CPUs without AVX-512 OpenBLAS has no such kernel and small products are packed; the results
# are identical, only slower (on an AMD EPYC without AVX-512 the planner keeps the plain layout:
# the panels decoded 5% slower there and scored no faster).
# The planner below generalises the padding: it times the panels at every row count up to ROWS
# and pads n rows to whichever count m >= n was fastest (on the first machine later plans padded
# 7 rows to 8 and 9..11 to 12 as well).


def default_pad(m: int) -> int:
    """The padding measured on the first machine: 1..2 rows -> 2, 3..5 -> 6, more unchanged."""
    return 2 if m <= 2 else max(m, 6)


def pad_rows(x, m: int):  # [n, d] -> [max(n, m), d]
    """x with zero rows appended up to m rows (x itself if it has m rows or more)."""
    n = x.shape[0]
    return x if m <= n else np.concatenate([x, np.zeros((m - n, x.shape[1]), x.dtype)])


def call_rows(m: int, pad: int | None = None) -> int:
    """Rows one small-GEMM call of `panel_product` computes for m <= ROWS rows: m padded to `pad`
    (at most ROWS) if that is more, or by `default_pad`."""
    return max(m, min(pad, ROWS) if pad else default_pad(m))


def panel_rows(n: int, pad: int | None = None) -> int:
    """Rows `panel_product` writes for n rows: its last call's rows padded as it pads them (the rows after n are scratch)."""
    last = (n - 1) // ROWS * ROWS                              # the first row of the last call
    return last + call_rows(n - last, pad)


def written_rows(method: str, n: int, pad: int | None = None) -> int:
    """Rows a product of `method` writes for n rows with padding `pad`: the `out` it needs."""
    return panel_rows(n, pad) if method == "panels" else max(n, pad or 0) if method == "gemm" else n


def panel_product(x, w, pad: int | None = None, out=None):  # [n, d_in], [P, d_in, c] -> [n, P * c]
    """x @ W for W stored as P panels of c columns: one small GEMM per panel, ROWS rows per call.

    Each call's m rows are padded with zero rows to `pad` rows (if more), or by `default_pad`.
    np.matmul writes each panel's [m, c] block of the result in place (BLAS takes a row stride),
    so no [P, m, c] product is made and then transposed.  out: None (a new result, returned), or
    the result to fill, split into panels: [panel_rows(n, pad), P, c], which may be a block of a
    wider result's panels (`split_product`); the rows after n are scratch.
    """
    n = x.shape[0]
    P, _, c = w.shape
    rows = panel_rows(n, pad)
    result = None
    if out is None:
        result = np.empty((rows, P * c), np.float32)
        out = result.reshape(rows, P, c)                       # a view: result is contiguous
    elif out.shape != (rows, P, c):
        raise ValueError(f"out has shape {out.shape}; {n} rows padded as {pad} need {(rows, P, c)}")
    for a in range(0, n, ROWS):
        m = min(ROWS, n - a)
        padded = call_rows(m, pad)                             # cheap row counts, measured
        np.matmul(pad_rows(x[a:a + m], padded), w, out=out[a:a + padded].transpose(1, 0, 2))
    return out if result is None else result[:n]


def gemm_product(x, w, pad=None, out=None):  # [n, d_in], [d_in, d_out] -> [n, d_out]
    """x @ W on the plain layout: BLAS's GEMV for one row, its GEMM for more, rows padded with zeros to `pad` (if more).

    A BLAS GEMM kernel works on blocks of rows, so a row count that leaves a ragged block can cost
    more than a larger one: on an AMD EPYC without AVX-512 (Zen 3), a pass over the weights with 7
    rows took 1.40x, 5 rows 1.10x and 9 rows 1.12x the time with 8, 8 and 12 rows.  `choose` pads
    only where the plan measured that it pays.  out: None, or the result to fill, [max(n, pad), d_out]
    (may be a block of a wider result's columns).
    """
    return np.matmul(pad_rows(x, pad or 0), w, out=out)[:x.shape[0]]


def rows_product(x, w, pad=None, out=None):  # [n, d_in], [d_in, d_out] -> [n, d_out]
    """x @ W as one GEMV per row (into out, [n, d_out], if given)."""
    out = np.empty((x.shape[0], w.shape[1]), np.float32) if out is None else out
    for i, row in enumerate(x):
        np.matmul(row, w, out=out[i])
    return out


PRODUCTS = {"panels": panel_product, "gemm": gemm_product, "rows": rows_product}


# ---------------------------------------------------------------- splitting over cores

class Team:
    """The calling thread plus `workers` sleeping threads that share the chunks of one job at a time."""

    def __init__(self, workers: int):
        self.workers = workers
        self._queues = [queue.SimpleQueue() for _ in range(workers)]
        self._busy = [threading.Lock() for _ in range(workers)]
        self._errors = []
        for i in range(workers):
            threading.Thread(target=self._loop, args=(i,), daemon=True, name=f"specref-team-{i}").start()

    def _loop(self, i: int) -> None:
        while True:
            chunks, task = self._queues[i].get()
            with self._busy[i]:              # held while this worker may take chunks of the job
                try:
                    for k in chunks:         # a shared iterator: each chunk goes to one thread
                        task(k)
                except BaseException as e:   # handed to the caller, which raises it
                    self._errors.append(e)

    def run(self, n_chunks: int, task: Callable[[int], None]) -> None:
        """Call task(k) for k < n_chunks, each once, on this thread and the workers; return when all are done.

        If a chunk raises, the rest of the job is abandoned and the error is raised here, after
        every worker has let go of the job, so no error of this job can surface in a later one.
        """
        chunks = iter(range(n_chunks))       # next() on a range iterator is atomic under the GIL
        for q in self._queues:
            q.put((chunks, task))
        try:
            for k in chunks:
                task(k)
        except BaseException:
            for _ in chunks:                 # leave no chunk for the workers to start
                pass
            raise
        finally:
            for busy in self._busy:          # wait only for chunks a worker has already taken
                busy.acquire()
                busy.release()
            errors, self._errors[:] = list(self._errors), []
        if errors:
            raise errors[0]


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


def shape_of(w) -> tuple:
    """(d_in, d_out) of a weight matrix in either layout."""
    return (w.shape[1], w.shape[0] * w.shape[2]) if w.ndim == 3 else tuple(w.shape)


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


# ---------------------------------------------------------------- the plan

def shape_name(shape) -> str:
    """'576x960' for (576, 960); ANY stays ANY (the JSON keys of a plan)."""
    return shape if shape == ANY else f"{shape[0]}x{shape[1]}"


def parse_shape(name: str):
    """The inverse of `shape_name`."""
    if name == ANY:
        return ANY
    try:
        d_in, d_out = (int(v) for v in name.split("x"))
    except ValueError:
        raise PlanError(f"a plan's matrix shape must be 'd_inxd_out' or {ANY!r}, not {name!r}") from None
    return (d_in, d_out)


@dataclasses.dataclass
class Plan:
    """The layout of the weights and, per row count and matrix shape, the method, thread count and padding that multiply fastest.

    `choice[n][shape] = (method, threads, pad)` for n in ROW_COUNTS and shape (d_in, d_out) of
    each kind of matrix, plus `choice[n][ANY]` for shapes the plan does not name (pad: the rows a
    `panels` or `gemm` call is padded to with zeros; None for the default; always None for `rows`).
    Other row counts use the nearest planned count above them (PREFILL for anything above ROWS).
    `ffn[n] = (threads, pad)` for the row counts whose feed-forward is split as a whole
    (`ffn_product`, with the layout's own method: panels or gemm); the others multiply by its two
    matrices as `choice` says.  `ms[n]` keeps every candidate's time per shape (shape name ->
    "method/threads" -> ms for all the matrices of that shape; ANY: all the matrices; FFN: the
    split feed-forward over every layer), `why` says how it was chosen.
    """
    layout: str
    choice: dict
    ms: dict = dataclasses.field(default_factory=dict)
    why: str = "fixed"
    key: dict = dataclasses.field(default_factory=dict)
    ffn: dict = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        if self.layout not in ("panels", "plain"):
            raise PlanError(f"unknown layout {self.layout!r}; expected 'panels' or 'plain'")
        for n, per_shape in self.choice.items():
            if not isinstance(per_shape, dict) or ANY not in per_shape:
                raise PlanError(f"the choice for {n} rows must map matrix shapes to (method, threads, pad), "
                                f"with an entry for {ANY!r} (any other shape); got {per_shape!r}")
            for shape, (method, threads, pad) in per_shape.items():
                where = f"{n} rows, shape {shape_name(shape)}"
                if pad is not None and not (isinstance(pad, int) and 1 <= pad <= ROWS):
                    raise PlanError(f"pad for {where} must be None or an integer 1..{ROWS}, not {pad!r}")
                if pad is not None and method not in PADS:
                    raise PlanError(f"pad for {where} must be None: {method!r} does not pad (only {PADS} do)")
                if METHODS.get(method) != self.layout:
                    raise PlanError(f"method {method!r} for {where} does not run on the {self.layout!r} layout; "
                                    f"methods: {METHODS}")
                if not (isinstance(threads, int) and threads >= 1):
                    raise PlanError(f"threads for {where} must be an integer >= 1, not {threads!r}")
        for n, split in self.ffn.items():
            threads, pad = split
            if int(n) not in self.choice:
                raise PlanError(f"the feed-forward split for {n} rows names a row count the plan does not choose for")
            if not (isinstance(threads, int) and threads >= 2):
                raise PlanError(f"the feed-forward split for {n} rows needs an integer >= 2 threads, not {threads!r}")
            if pad is not None and not (isinstance(pad, int) and int(n) <= pad <= ROWS):
                raise PlanError(f"the feed-forward split's pad for {n} rows must be None or an integer {n}..{ROWS}, "
                                f"not {pad!r}")
        self.choice = {int(n): {shape: (m, int(t), p) for shape, (m, t, p) in per_shape.items()}
                       for n, per_shape in sorted(self.choice.items())}
        self.ffn = {int(n): (int(t), p) for n, (t, p) in sorted(self.ffn.items())}
        self._counts = sorted(self.choice)
        most = max([t for per_shape in self.choice.values() for _, t, _ in per_shape.values()]
                   + [t for t, _ in self.ffn.values()])
        self._team = Team(most - 1) if most > 1 else None

    @classmethod
    def fixed(cls, method: str, threads: int = 1, split_ffn: bool = False) -> "Plan":
        """The same method and thread count everywhere (tests, and processes that must not spawn
        threads); split_ffn: the feed-forward split as a whole over `threads` (>= 2) at every row count."""
        if method not in METHODS:
            raise PlanError(f"unknown method {method!r}; expected one of {sorted(METHODS)}")
        ffn = {n: (threads, None) for n in ROW_COUNTS} if split_ffn else {}
        return cls(METHODS[method], {n: {ANY: (method, threads, None)} for n in ROW_COUNTS},
                   why=f"fixed: {method}/{threads}" + (", feed-forward split" if split_ffn else ""), ffn=ffn)

    def on_one_thread(self) -> "Plan":
        """The same layout, methods and padding with every split product kept on the calling thread
        (for a machine whose other cores are busy: there a split waits for a worker that shares its core)."""
        choice = {n: {shape: (method, 1, pad) for shape, (method, _, pad) in per_shape.items()}
                  for n, per_shape in self.choice.items()}
        return Plan(self.layout, choice, self.ms, f"{self.why}; every product on one thread", self.key)

    def _count(self, n: int) -> int:
        """The planned row count that n rows use: the nearest one at or above n (the largest for more)."""
        return next((c for c in self._counts if c >= n), self._counts[-1])

    def pick(self, n: int, shape=ANY) -> tuple:
        """(method, threads, pad) for a product of n rows with a matrix of `shape` (d_in, d_out)."""
        per_shape = self.choice[self._count(n)]
        return per_shape.get(shape, per_shape[ANY])

    def feed_forward(self, x, w_gate_up, w_down, glu: Callable = model_glu):  # [n, d], [d, 2f], [f, d] (this layout) -> [n, d]
        """The model's `swiglu`, down(glu(x W_gate, x W_up)): split as a whole where the plan says so,
        else as two planned products."""
        split = self.ffn.get(self._count(x.shape[0]))
        if split is not None and self._team is not None:
            return ffn_product(x, w_gate_up, w_down, glu, LAYOUT_METHOD[self.layout], self._team, split[1])
        gate_up = self.linear(x, w_gate_up)                   # [n, 2f]
        f = gate_up.shape[1] // 2
        return self.linear(glu(gate_up[:, :f], gate_up[:, f:]), w_down)

    def linear(self, x, w):  # [n, d_in], matrix in this plan's layout -> [n, d_out]
        """x @ W the way this plan multiplies n rows by a matrix of W's shape."""
        method, threads, pad = self.pick(x.shape[0], shape_of(w))
        if threads > 1 and self._team is not None:
            return split_product(x, w, method, self._team, pad)
        return PRODUCTS[method](x, w, pad)

    def describe(self) -> str:
        """A few lines: the layout, the machine it was measured on (if known), and per row count the
        time of one pass and each shape's choice."""
        lines = [f"plan: weights in the {self.layout} layout ({self.why})"]
        if self.key:
            k = self.key
            lines.append(f"  measured on: {cpu_label(k)}, {k.get('cores')} cores, NumPy {k.get('numpy')}, "
                         f"{k.get('blas')}" + (f", OPENBLAS_NUM_THREADS={k['openblas_num_threads']}"
                                               if "openblas_num_threads" in k else ""))
        for n in self._counts:
            per_shape = self.choice[n]
            shapes = [s for s in per_shape if s != ANY] or [ANY]
            parts, total = [], 0.0
            for shape in shapes:
                method, threads, pad = per_shape[shape]
                padded = pad if pad and pad > n else n
                chosen = self.ms.get(padded, {}).get(shape_name(shape), {}).get(f"{method}/{threads}")
                total = total + chosen if chosen is not None and total is not None else None
                how = f"{method}/{threads}" + (f" pad {padded}" if padded != n else "")
                parts.append(how if shape == ANY else f"{shape_name(shape)} {how}")
            head = f"{total:.1f} ms" if total is not None else "not timed"
            if n in self.ffn:
                threads, pad = self.ffn[n]
                padded = pad if pad and pad > n else n
                name = f"{LAYOUT_METHOD[self.layout]}/{threads}"
                passes = self.ms.get(n, {}).get(FFN, {})
                split, products = passes.get(f"split/{threads}"), passes.get("products")
                parts.append(f"feed-forward split as a whole, {name}" + (f" pad {padded}" if padded != n else "")
                             + (f" (a pass over every layer {split:.1f} ms, {products:.1f} ms with two products)"
                                if split is not None and products is not None else ""))
            lines.append(f"  {n:>3} rows ({head}): " + ", ".join(parts))
        return "\n".join(lines)

    def to_json(self) -> dict:
        return {"version": PLAN_VERSION, "layout": self.layout, "why": self.why, "key": self.key,
                "choice": {str(n): {shape_name(s): list(c) for s, c in per_shape.items()}
                           for n, per_shape in self.choice.items()},
                "ms": {str(n): t for n, t in self.ms.items()},
                "ffn": {str(n): list(split) for n, split in self.ffn.items()}}

    @classmethod
    def from_json(cls, d: dict) -> "Plan":
        if d.get("version") != PLAN_VERSION:
            raise PlanError(f"plan version {d.get('version')!r}, expected {PLAN_VERSION}")
        return cls(d["layout"], {int(n): {parse_shape(s): tuple(c) for s, c in per_shape.items()}
                                 for n, per_shape in d["choice"].items()},
                   {int(n): t for n, t in d.get("ms", {}).items()}, d.get("why", ""), d.get("key", {}),
                   {int(n): tuple(split) for n, split in d.get("ffn", {}).items()})


def in_layout(weights: Weights, layout: str) -> Weights:
    """The same weights with every matrix in `layout` ('panels': `PanelWeights`, or 'plain'); norms are
    shared, and matrices already in that layout are too."""
    if layout not in ("panels", "plain"):
        raise PlanError(f"unknown layout {layout!r}; expected 'panels' or 'plain'")

    def convert(m):
        if layout == "plain":
            return m if m.ndim == 2 else from_panels(m)
        return m if m.ndim == 3 else to_panels(m, PANEL)

    layers = tuple(dataclasses.replace(layer, w_qkv=convert(layer.w_qkv), w_o=convert(layer.w_o),
                                       w_gate_up=convert(layer.w_gate_up), w_down=convert(layer.w_down))
                   for layer in weights.layers)
    kind = PanelWeights if layout == "panels" else Weights
    return kind(config=weights.config, head=convert(weights.head), layers=layers, output_norm=weights.output_norm)


# ---------------------------------------------------------------- measuring

SIMD_FLAGS = ("sse4", "avx", "fma", "amx", "asimd", "sve", "neon")   # CPU flags that decide which BLAS kernels run


def cpu_identity(cpuinfo: str) -> dict:
    """The first processor of a /proc/cpuinfo text: model name, family/model/stepping, SIMD flags.

    The model name alone does not tell CPUs apart: virtual machines on an AMD EPYC with AVX-512
    (Zen 4) and on one without (Zen 3) both report "AMD EPYC", and OpenBLAS runs different kernels
    on them, so a plan measured on one is wrong for the other.
    """
    fields = {}
    for line in cpuinfo.splitlines():
        if not line.strip():
            if fields:
                break                                          # the first processor is enough
            continue
        name, _, value = line.partition(":")
        fields.setdefault(name.strip(), value.strip())
    flags = fields.get("flags", fields.get("Features", "")).split()
    return {"cpu": fields.get("model name", ""),
            "cpu_id": "/".join(fields.get(k, "?") for k in ("cpu family", "model", "stepping")),
            "simd": sorted(f for f in flags if f.startswith(SIMD_FLAGS))}


def cpu_label(key: dict) -> str:
    """'AMD EPYC (family/model/stepping 25/1/1; SIMD avx avx2 ...)' from a machine key."""
    return (f"{key.get('cpu')} (family/model/stepping {key.get('cpu_id', '?')}; "
            f"SIMD {' '.join(key.get('simd', [])) or 'unknown'})")


def machine_key(weights: Weights) -> dict:
    """What a plan depends on: the CPU (name, family/model/stepping, SIMD flags), cores, NumPy and
    its BLAS, the matrices' shapes.  Not the process's BLAS-thread setting: the fast path's
    products pick their own threads (`Team`), so a notebook and a command share one plan."""
    cpu = {"cpu": "", "cpu_id": "?/?/?", "simd": []}
    try:
        cpu = cpu_identity(pathlib.Path("/proc/cpuinfo").read_text())
    except OSError:                                            # not Linux: the platform's own description
        pass
    cpu["cpu"] = cpu["cpu"] or platform.processor() or platform.machine()
    try:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        blas = f"{blas.get('name')} {blas.get('version')}"
    except Exception:  # older NumPy: no dict mode
        blas = "unknown"
    shapes = [list(m.shape) for m in weights.matrices()[:4]] + [list(weights.head.shape)]
    return {**cpu, "cores": cores(), "numpy": np.__version__, "blas": blas,
            "matrices": len(weights.matrices()), "shapes": shapes}


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


def plan_path(weights: Weights, cache_dir=None) -> pathlib.Path:
    """Where this machine's plan for these weights is cached."""
    digest = hashlib.sha256(json.dumps(machine_key(weights), sort_keys=True).encode()).hexdigest()[:16]
    return cache_root(cache_dir) / "plans" / f"{digest}.json"


BUSY_CORES = 0.25          # other processes using more than this many cores on average while measuring: a busy machine


class LoadWatch:
    """How many cores other processes kept busy, on average, since this watch started (Linux: /proc/stat).

    The machine's busy time (every CPU's user, system, interrupt and stolen time) less this
    process's own CPU time, over the wall time.  `others()` is None where /proc/stat cannot be read,
    and for a watch shorter than MIN_SECONDS (the counters tick every 10 ms: too coarse to tell).
    """
    MIN_SECONDS = 1.0

    def __init__(self):
        self.start = self._sample()

    @staticmethod
    def _sample():
        try:
            fields = pathlib.Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
            user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[:8])
        except (OSError, ValueError):
            return None
        busy = (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")
        mine = os.times()
        return time.perf_counter(), busy, mine.user + mine.system

    def others(self) -> float | None:
        end = self._sample()
        if self.start is None or end is None or end[0] - self.start[0] < self.MIN_SECONDS:
            return None
        (t0, busy0, mine0), (t1, busy1, mine1) = self.start, end
        return max(0.0, (busy1 - busy0) - (mine1 - mine0)) / (t1 - t0)


def plan_for(weights: Weights, cache_dir=None, progress: Callable = print, remeasure: bool = False,
             glu: Callable | None = None) -> Plan:
    """This machine's cached plan, or (none cached, or remeasure) a new one measured now (about half a
    minute on an idle 2-core machine); glu: the model's gated unit (see `measure`).

    A new plan is cached only if the machine was quiet while it was measured (other processes kept
    at most BUSY_CORES busy, `LoadWatch`): a plan measured under load is used for this process
    and measured again next time, rather than kept as if it were the machine's.
    """
    path = plan_path(weights, cache_dir)
    if not remeasure:
        plan, problem = read_plan(path, weights)
        if plan is not None:
            return plan
        if problem:
            progress(f"the plan in {path} {problem}; measuring a new one")
    progress("measuring how to multiply by the weights fastest on this machine "
             "(once per machine, about half a minute on an idle 2-core machine) ...")
    watch, started = LoadWatch(), time.perf_counter()
    plan = measure(weights, progress=progress, glu=glu)
    seconds = time.perf_counter() - started
    plan.why += f", {datetime.date.today().isoformat()}"
    others = watch.others()
    if others is not None and others > BUSY_CORES:
        plan.why += f"; other processes kept {others:.2f} cores busy meanwhile: not cached"
        progress(f"measured in {seconds:.0f} s, but other processes kept {others:.2f} cores busy meanwhile: the plan "
                 f"is used now but not cached, and measured again next time (on a quiet machine)")
        return plan
    write_text(path, json.dumps(plan.to_json(), indent=1))    # never a half-written plan
    progress(f"plan measured in {seconds:.0f} s and cached in {path}")
    return plan


def read_plan(path: pathlib.Path, weights: Weights) -> tuple[Plan | None, str]:
    """(the plan in `path` if it is these weights' plan on this machine, else None; what was wrong
    with it: '' if there is no file, else why it cannot be used)."""
    if not path.exists():
        return None, ""
    try:
        plan = Plan.from_json(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError, PlanError) as e:
        return None, f"cannot be read ({e})"
    if plan.key != machine_key(weights) or set(plan.choice) != set(ROW_COUNTS):
        return None, "is for another machine or version"
    return plan, ""


def cached_plan(weights: Weights, cache_dir=None) -> Plan | None:
    """This machine's cached plan for these weights, or None (none cached, unreadable, or stale)."""
    return read_plan(plan_path(weights, cache_dir), weights)[0]
