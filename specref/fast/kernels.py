"""The fast path's kernels: the panel layout, and the three ways to multiply rows by one weight matrix on one thread.

Holds the two layouts of a matrix (plain [d_in, d_out], and panels: `to_panels`, `from_panels`,
`PanelWeights`, `shape_of`), the zero rows a product may be padded with (`default_pad`, `pad_rows`,
`call_rows`, `panel_rows`, `written_rows`), the products themselves (`panel_product`,
`gemm_product`, `rows_product`, by method name in PRODUCTS) and which layout each method needs and
which may pad (METHODS, PADS).  Splitting a product over threads is split.py's; choosing a method
per row count is the plan's (plan.py, planner.py).
"""

import dataclasses

import numpy as np

from specref.smollm2.weights import Weights

ROWS = 18                  # most rows per small-GEMM call (see the note above `panel_product`)
METHODS = {"panels": "panels", "gemm": "plain", "rows": "plain"}   # method -> the layout it needs
PADS = ("panels", "gemm")  # methods whose rows may be padded with zeros to a cheaper row count (see `choose`, planner.py)


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


def shape_of(w) -> tuple:
    """(d_in, d_out) of a weight matrix in either layout."""
    return (w.shape[1], w.shape[0] * w.shape[2]) if w.ndim == 3 else tuple(w.shape)



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
