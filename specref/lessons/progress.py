"""A progress line for long notebook cells: one line of text that rewrites itself.

    progress = Progress(total=36, label="Chen Figure 1")
    for i in range(36):
        ...
        progress.step(f"K = {K}")        # "Chen Figure 1: 7 of 36 runs (K = 3), 42 s so far, about 174 s left"
    progress.done()

    log = Progress(0, "training")             # no count: each message replaces the line
    run_training(..., log=log.message)

In a notebook the line is an output that is updated in place (an IPython display handle), so it
shows in JupyterLab while the cell runs and stays as the cell's record afterwards; elsewhere
(a terminal, `python -m specref figures`) it is printed to stderr at most every few seconds.
"""

from __future__ import annotations

import sys
import time


def _notebook_display():
    """IPython's display function when running in a Jupyter kernel, else None."""
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:
        return None
    shell = get_ipython()
    return display if shell is not None and "IPKernelApp" in shell.config else None


class Progress:
    """`total` steps of work named `label`; `step()` after each, `done()` at the end."""

    def __init__(self, total: int, label: str, unit: str = "runs", min_interval: float = 0.5):
        self.total, self.label, self.unit = int(total), label, unit
        self.count = 0
        self.start = time.perf_counter()
        self.min_interval = min_interval
        self.last_shown = -float("inf")
        display = _notebook_display()
        self.handle = display({"text/plain": self.text()}, raw=True, display_id=True) if display else None

    def text(self, detail: str = "") -> str:
        elapsed = time.perf_counter() - self.start
        line = f"{self.label}: {self.count} of {self.total} {self.unit}" if self.total else f"{self.label}: started"
        if detail:
            line += f" ({detail})"
        line += f", {elapsed:.0f} s so far"
        if 0 < self.count < self.total:
            line += f", about {elapsed / self.count * (self.total - self.count):.0f} s left"
        return line

    def _show(self, text: str, force: bool = False) -> None:
        now = time.perf_counter()
        if not force and now - self.last_shown < (self.min_interval if self.handle else 5.0):
            return
        self.last_shown = now
        if self.handle is not None:
            self.handle.update({"text/plain": text}, raw=True)
        else:
            print(text, file=sys.stderr, flush=True)

    def step(self, detail: str = "") -> None:
        """One more step done; `detail` says which."""
        self.count += 1
        self._show(self.text(detail), force=self.count == self.total)

    def message(self, text: str) -> None:
        """Replace the line with `text` (for work whose steps are not counted, e.g. a training log)."""
        self._show(f"{self.label}: {text} ({time.perf_counter() - self.start:.0f} s so far)")

    def done(self) -> None:
        """The final line: how many steps and how long they took."""
        seconds = time.perf_counter() - self.start
        self._show(f"{self.label}: {self.count} {self.unit} in {seconds:.0f} s" if self.total
                   else f"{self.label}: done in {seconds:.0f} s", force=True)
