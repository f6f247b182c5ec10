"""Execute the notebooks top to bottom on a fresh kernel and keep their outputs; tell when saved outputs are stale.

    python -m specref.lessons.execute                      # every notebook in notebooks/, quick mode
    python -m specref.lessons.execute 00_why_fast 02       # the notebooks whose names start so
    python -m specref.lessons.execute --check              # run, compare with the saved outputs, write nothing

The notebooks are committed with their outputs so that a reader on GitHub sees every table and
figure without running anything.  They are executed in quick mode (SPECREF_QUICK=1: the small
sample sizes CI uses; each notebook's first code cell prints which mode it ran in), seeded, from a
fresh python3 kernel started in notebooks/.  The .py of each pair stays the reviewed source: run
`jupytext --update --to ipynb notebooks/*.py` first, then this.

What is saved: every output but the ipywidgets views (their state is not saved, so GitHub could
not draw them; each widget cell has a static figure beside it), with consecutive stream outputs
merged as JupyterLab merges them, and no timing metadata.

What "stale" means: `deterministic_outputs` is the printed text of each code cell (its stdout and
its result's text/plain) that depends only on the code and the fixed seeds: exact fractions,
counts, p-values.  Figures, displays that update in place (progress lines) and stderr are left
out, and so is every cell tagged `machine` (`# %% tags=["machine"]` in the .py), whose numbers are
timings or otherwise depend on the machine.  The suite executes each notebook and fails when these
texts differ from the saved ones (tests/apps/test_notebooks.py).
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
MACHINE_TAG = "machine"  # a cell whose printed numbers depend on the machine (timings): not compared
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def _where(path: Path, nb, index: int) -> str:
    cell = nb.cells[index]
    code = sum(c.cell_type == "code" for c in nb.cells[:index + 1])
    first = next((line for line in cell.source.splitlines() if line.strip()), "")
    return f"{path.name}, cell {index + 1} of {len(nb.cells)} (code cell {code}, starting {first[:70]!r})"


def _plain(text: str) -> str:
    """`text` without the terminal colours of IPython's tracebacks."""
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def execute(path: Path, cell_timeout: float = 600, quick: bool = True):
    """Run the notebook at `path` top to bottom on a fresh python3 kernel started in its directory.

    Returns (the executed notebook, problems): one line per problem, each naming the notebook and
    the cell: the error that stopped the run (an exception, a cell over `cell_timeout` seconds, a
    dead kernel) and every error output.  Nothing is written."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellControlSignal, CellExecutionError, CellTimeoutError, DeadKernelError

    nb = nbformat.read(path, as_version=4)
    # shut down "immediate": a kernel shut down gracefully while a cell still runs (after a timeout)
    # logs a traceback for the reply it can no longer send
    client = NotebookClient(nb, timeout=cell_timeout, kernel_name="python3", shutdown_kernel="immediate",
                            record_timing=False, resources={"metadata": {"path": str(path.parent)}})
    current = {"index": None}
    client.on_cell_execute = lambda cell, cell_index: current.update(index=cell_index)
    env = {**os.environ, "SPECREF_QUICK": "1" if quick else "0", "MPLBACKEND": "module://matplotlib_inline.backend_inline",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    problems = []
    try:
        client.execute(env=env)
    except (CellExecutionError, CellTimeoutError, DeadKernelError, CellControlSignal) as e:
        where = _where(path, nb, current["index"]) if current["index"] is not None else f"{path.name}, kernel start"
        if isinstance(e, CellExecutionError):  # the error, then the end of the cell's source and traceback
            detail = f"{e.ename}: {e.evalue}\n{_plain(e.traceback)[-1500:]}"
        else:
            detail = str(e).strip()[-1500:]
        problems.append(f"{where}: {type(e).__name__}: {detail}")
    for index, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error" and not (problems and index == current["index"]):
                problems.append(f"{_where(path, nb, index)}: error output {out.get('ename')}: {out.get('evalue')}")
    return nb, problems


def tidy(nb):
    """The executed notebook as it is committed: widget views dropped, consecutive streams merged, no
    widget state or timing metadata.  Changes `nb` in place and returns it."""
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        cell.metadata.pop("execution", None)
        merged = []
        for out in cell.outputs:
            if out.output_type in ("display_data", "execute_result") and WIDGET_VIEW in out.get("data", {}):
                continue
            out.pop("transient", None)
            if (out.output_type == "stream" and merged and merged[-1].output_type == "stream"
                    and merged[-1].name == out.name):
                merged[-1].text += out.text
            else:
                merged.append(out)
        cell.outputs = merged
    return nb


def deterministic_outputs(nb) -> list[tuple[int, str]]:
    """(cell number, text) for every code cell not tagged `machine`: its stdout and its result's text/plain."""
    texts = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or MACHINE_TAG in cell.metadata.get("tags", []):
            continue
        parts = []
        for out in cell.get("outputs", []):
            if out.output_type == "stream" and out.name == "stdout":
                parts.append(out.text)
            elif out.output_type == "execute_result":
                parts.append(out.get("data", {}).get("text/plain", "") + "\n")
        texts.append((index, "".join(parts)))
    return texts


def stale_outputs(saved, fresh, name: str = "notebook") -> list[str]:
    """Where the saved notebook's deterministic outputs differ from a fresh run's; [] when they agree."""
    a, b = dict(deterministic_outputs(saved)), dict(deterministic_outputs(fresh))
    tagged = {i for nb in (saved, fresh) for i, c in enumerate(nb.cells) if MACHINE_TAG in c.metadata.get("tags", [])}
    problems = []
    for index in sorted((set(a) | set(b)) - tagged):
        old, new = a.get(index), b.get(index)
        if old == new:
            continue
        if old is None or new is None:
            problems.append(f"{name}: cell {index + 1} is a code cell in only one of the saved and the fresh notebook")
            continue
        diff = list(difflib.unified_diff(old.splitlines(), new.splitlines(), "saved", "fresh run", lineterm="", n=0))
        first = next((line for line in nb_source_lines(fresh, index) if line.strip()), "")
        problems.append(f"{name}: cell {index + 1} (starting {first[:60]!r}) prints something else now:\n  "
                        + "\n  ".join(diff[2:12]))
    return problems


def stale_against_saved(path: Path, fresh) -> list[str]:
    """Where a fresh run of the notebook at `path` (tidied here) prints something other than the saved one; []
    when the saved outputs are current."""
    import nbformat
    return stale_outputs(nbformat.read(path, as_version=4), tidy(fresh), path.name)


def nb_source_lines(nb, index: int) -> list[str]:
    return nb.cells[index].source.splitlines()


def output_bytes(path: Path) -> int:
    """How many bytes the outputs add to the .ipynb at `path` (its size minus its size without them)."""
    import nbformat
    nb = nbformat.read(path, as_version=4)
    with_outputs = len(nbformat.writes(nb).encode())
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    return with_outputs - len(nbformat.writes(nb).encode())


def _chosen(prefixes: list[str]) -> list[Path]:
    paths = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
    if not prefixes:
        return paths
    chosen = [p for p in paths if any(p.stem.startswith(x) for x in prefixes)]
    unknown = [x for x in prefixes if not any(p.stem.startswith(x) for p in paths)]
    if unknown:
        raise SystemExit(f"no notebook in {NOTEBOOKS} starts with {', '.join(map(repr, unknown))}; "
                         f"there are: {', '.join(p.stem for p in paths)}")
    return chosen


def main(argv=None) -> int:
    import nbformat
    parser = argparse.ArgumentParser(prog="python -m specref.lessons.execute", description=__doc__.split("\n")[0])
    parser.add_argument("names", nargs="*", help="notebooks whose names start with these (default: all)")
    parser.add_argument("--check", action="store_true", help="compare a fresh run with the saved outputs; write nothing")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per cell (default 900)")
    args = parser.parse_args(argv)
    failed = False
    for path in _chosen(args.names):
        start = time.perf_counter()
        print(f"{path.name}: running ...", file=sys.stderr, flush=True)
        nb, problems = execute(path, args.timeout)
        took = time.perf_counter() - start
        if problems:
            print("\n".join(problems), file=sys.stderr)
            print(f"{path.name}: not saved (it failed after {took:.0f} s)", file=sys.stderr)
            failed = True
            continue
        tidy(nb)
        if args.check:
            stale = stale_against_saved(path, nb)
            print("\n".join(stale) if stale else f"{path.name}: saved outputs are current ({took:.0f} s)")
            failed |= bool(stale)
            continue
        tmp = path.with_suffix(".ipynb.tmp")  # written whole, then renamed: never a half-written notebook
        nbformat.write(nb, tmp)
        os.replace(tmp, path)
        print(f"{path.name}: saved in {took:.0f} s; outputs add {output_bytes(path) / 1024:.0f} KiB")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
