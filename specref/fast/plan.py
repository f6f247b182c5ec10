"""The fast path's plan: how to multiply rows by the weight matrices on this machine, chosen by measuring (in FFTW's spirit).

The model's plain path multiplies x @ W (`specref.smollm2.model.linear`).  The same products can
be much faster in another layout or split over the cores, but what is fastest depends on the CPU,
its caches, its memory and the BLAS build, so no fixed choice carries from one machine to another
(the note above `panel_product` in kernels.py explains the choice measured on the first machine).  The planner times every candidate on the model's own matrices, for one row (a
decode step) and for each row count speculative sampling scores (2..ROWS, and PREFILL for a
prompt), keeps the fastest per row count and matrix shape, and caches the result per machine.

Candidates, each a method on a weight layout, on one thread or split over every core:
- `panels` (layout `panels`, [d_out / 32, d_in, 32]): one small GEMM per 32-column panel, rows
  padded to 2 or at least 6 (the note above `panel_product`, kernels.py);
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

This file holds the Plan: its row counts, its choices and their checks, how it multiplies
(`Plan.linear`, `Plan.feed_forward`), its JSON form, and the weights in its layout (`in_layout`).
The kernels are in kernels.py, the thread team in team.py, the split products in split.py, the
CPU's identity in machine.py, the measuring and choosing in planner.py, the cached plans in cache.py.
"""

import dataclasses
from typing import Callable

from specref.fast.kernels import METHODS, PADS, PANEL, PRODUCTS, ROWS, PanelWeights, from_panels, shape_of, to_panels
from specref.fast.machine import cpu_label
from specref.fast.split import ffn_product, split_product
from specref.fast.team import Team
from specref.smollm2.model import glu as model_glu
from specref.smollm2.weights import Weights

PREFILL = 64               # the row count planned for prompts (more than ROWS rows)
ROW_COUNTS = tuple(range(1, ROWS + 1)) + (PREFILL,)
LAYOUT_METHOD = {"panels": "panels", "plain": "gemm"}              # the method a split feed-forward uses
ANY = "*"                  # the choice for a matrix shape the plan did not measure
FFN = "ffn"                # the name of the split feed-forward's times in a plan's `ms`
PLAN_VERSION = 6           # 2: threads need THREADS_MARGIN; 3: row counts timed interleaved;
                           # 4: one chunk per thread, chosen per matrix shape; 5: gemm pads rows too;
                           # 6: the feed-forward may be split as a whole; older plans are measured again


class PlanError(RuntimeError):
    """A plan that cannot be used: unknown method or layout, or a plan file that does not parse."""


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
