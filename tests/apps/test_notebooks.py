"""Every notebook runs headless, and specref.lessons.quick, the switch they read (SPECREF_QUICK=1: small sizes).

Each notebook is executed once here, top to bottom on a fresh kernel, with nbclient (no browser):
SPECREF_QUICK=1 in the kernel's environment, a time limit per cell, and a failure on any error,
timeout or dead kernel, naming the notebook and the cell.  Then its deterministic outputs (printed
text, machine-dependent cells left out: specref.lessons.execute) are compared with the outputs
committed in the .ipynb, and a difference fails: the saved outputs are stale.  The notebooks that
need no model take 6 to 30 s each on a 2-core machine (docs/notebooks.md has each one's time): by
default only 02 is re-executed, to keep the default run short, and `python3 -m pytest --slow` (CI)
re-executes all of them; 00, 05 and 06 load SmolLM2-135M and take a minute or more.

tests/apps/test_browser.py runs them as a learner sees them (Run All in JupyterLab in Chromium, the
sliders moved), which needs Chromium, and checks the same saved outputs: a notebook that a browser
test of the same session runs is skipped here, so that CI runs each notebook once.
tests/apps/test_notebook_pairs.py checks that each notebooks/NN_name.py and its .ipynb have the same cells.  The notebooks draw with `specref.lessons.plots`,
which must not import the model's code: checked here in a fresh interpreter.
"""

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from specref.lessons import execute
from specref.lessons.quick import quick_mode

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.py"))
EXPECTED = ["00_why_fast", "01_theorem1", "02_toy_mrs", "03_chi_square", "04_speedup_model", "05_real_model",
            "06_making_a_draft", "07_block_verification", "08_trees"]


def test_all_notebooks_present():
    assert [p.stem for p in NOTEBOOKS] == EXPECTED
    assert [p.with_suffix(".ipynb").exists() for p in NOTEBOOKS] == [True] * len(EXPECTED)


def test_the_browser_test_runs_every_notebook():
    from tests.apps import test_browser
    assert test_browser.NOTEBOOKS == EXPECTED


# ---------------------------------------------------------------- every notebook, headless

MODEL_NOTEBOOKS = ["00_why_fast", "05_real_model", "06_making_a_draft"]  # load SmolLM2-135M: slow
QUICK_NOTEBOOKS = [name for name in EXPECTED if name not in MODEL_NOTEBOOKS]  # no model: seconds each
CELL_TIMEOUT = {name: 120 for name in QUICK_NOTEBOOKS} | {name: 600 for name in MODEL_NOTEBOOKS}  # seconds per cell


def execute_notebook(path: Path, cell_timeout: float) -> list[str]:
    """Run `path` top to bottom on a fresh python3 kernel with SPECREF_QUICK=1, from its directory:
    one line per problem, each naming the notebook and the cell (specref.lessons.execute)."""
    return execute.execute(path, cell_timeout)[1]


def _run_in_jupyterlab(session, name: str) -> str | None:
    """The browser test of this session that runs notebook `name` in JupyterLab, if one will: it checks the
    same saved outputs, so the notebook is not run twice (None when there is none, or no browser to run it)."""
    from tests.apps import jupyterlab_browser as lab_browser
    if lab_browser.missing() is not None:
        return None
    ids = ((item, item.nodeid.partition("@")[0]) for item in session.items)  # pytest-xdist appends "@group" to an id
    return next((nodeid for item, nodeid in ids if nodeid.startswith("tests/apps/test_browser.py::")
                 and nodeid.endswith(f"[{name}]") and item.get_closest_marker("skip") is None), None)


def fail_if_stale(path: Path, fresh) -> None:
    """Fail, naming each cell and the command that refreshes them, if a fresh run of the notebook at `path`
    prints something other than its saved outputs (also the browser test's check, on JupyterLab's run)."""
    stale = execute.stale_against_saved(path, fresh)
    if stale:
        pytest.fail("\n".join(stale + ["the saved outputs are stale: python3 -m specref.lessons.execute " + path.stem]),
                    pytrace=False)


def _run(name: str, session) -> None:
    """Run the notebook headless, then compare its deterministic outputs with the saved ones."""
    browser_test = _run_in_jupyterlab(session, name)
    if browser_test:
        pytest.skip(f"{name} runs in JupyterLab in this session ({browser_test}), which checks its saved outputs")
    start = time.perf_counter()
    path = ROOT / "notebooks" / f"{name}.ipynb"
    fresh, problems = execute.execute(path, CELL_TIMEOUT[name])
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)
    print(f"{name}.ipynb ran headless in {time.perf_counter() - start:.1f} s")
    fail_if_stale(path, fresh)


@pytest.mark.default_cases("02_toy_mrs")
@pytest.mark.parametrize("name", QUICK_NOTEBOOKS)
def test_notebook_runs_headless(name, request):
    _run(name, request.session)


@pytest.mark.slow
@pytest.mark.time_limit(1800)  # each cell may take 600 s (CELL_TIMEOUT), a first model load measures its plan
@pytest.mark.parametrize("name", MODEL_NOTEBOOKS)
def test_model_notebook_runs_headless(name, request):
    _run(name, request.session)


def test_a_notebook_the_browser_test_runs_is_found_under_xdist_ids_too(monkeypatch):
    """The headless run is skipped for a notebook that a browser test of the session runs, whether or not
    pytest-xdist has appended the browser tests' "@jupyterlab" group to their ids; never for a skipped one."""
    from types import SimpleNamespace

    from tests.apps import jupyterlab_browser as lab_browser
    monkeypatch.setattr(lab_browser, "missing", lambda: None)

    def item(nodeid, skipped=False):
        return SimpleNamespace(nodeid=nodeid, get_closest_marker=lambda name: object() if skipped else None)

    test = "tests/apps/test_browser.py::test_notebook_runs_in_jupyterlab"
    for suffix in ("", "@jupyterlab"):
        session = SimpleNamespace(items=[item(f"{test}[01_theorem1]{suffix}", skipped=True),
                                         item(f"{test}[02_toy_mrs]{suffix}")])
        assert _run_in_jupyterlab(session, "02_toy_mrs") == f"{test}[02_toy_mrs]"
        assert _run_in_jupyterlab(session, "01_theorem1") is None
        assert _run_in_jupyterlab(session, "03_chi_square") is None


def test_a_failing_cell_is_named(tmp_path):
    """The runner above reports what failed and where: a notebook whose third cell divides by zero."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# title"),
                                         nbformat.v4.new_code_cell("import os\nx = 1"),
                                         nbformat.v4.new_code_cell("y = 2\nx / 0"),
                                         nbformat.v4.new_code_cell("z = 3")])
    nbformat.write(nb, tmp_path / "broken.ipynb")
    problems = execute_notebook(tmp_path / "broken.ipynb", 60)
    assert len(problems) == 1, problems
    assert problems[0].startswith("broken.ipynb, cell 3 of 4 (code cell 2, starting 'y = 2'): CellExecutionError")
    assert "ZeroDivisionError" in problems[0]


def test_a_cell_over_its_time_limit_is_named(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import time\ntime.sleep(60)")])
    nbformat.write(nb, tmp_path / "slow.ipynb")
    problems = execute_notebook(tmp_path / "slow.ipynb", 2)
    assert len(problems) == 1 and problems[0].startswith("slow.ipynb, cell 1 of 1 (code cell 1, starting 'import time')")
    assert "CellTimeoutError" in problems[0]


# ---------------------------------------------------------------- stale outputs: the comparison does catch them

def test_a_stale_output_is_named():
    """A saved notebook whose printed p-value no longer matches a fresh run (here: the saved copy
    edited) is reported, naming the cell; a changed timing in a cell tagged `machine` is not."""
    saved = nbformat.read(ROOT / "notebooks" / "02_toy_mrs.ipynb", as_version=4)
    fresh = nbformat.read(ROOT / "notebooks" / "02_toy_mrs.ipynb", as_version=4)
    assert execute.stale_outputs(saved, fresh, "02") == []
    index, text = next((i, t) for i, t in execute.deterministic_outputs(saved) if "p-value" in t)
    out = next(o for o in saved.cells[index].outputs if o.output_type == "stream")
    out.text = re.sub(r"p-value (\d\.\d+)", "p-value 0.999", out.text)
    stale = execute.stale_outputs(saved, fresh, "02")
    assert len(stale) == 1 and stale[0].startswith(f"02: cell {index + 1} ") and "p-value 0.999" in stale[0], stale
    saved.cells[index].metadata["tags"] = [execute.MACHINE_TAG]
    assert execute.stale_outputs(saved, fresh, "02") == []


def test_the_check_both_runs_use_fails_a_stale_saved_notebook(tmp_path):
    """fail_if_stale (the headless run's and the browser test's check) against a saved copy with one edited p-value."""
    path = ROOT / "notebooks" / "02_toy_mrs.ipynb"
    fresh, saved = nbformat.read(path, as_version=4), nbformat.read(path, as_version=4)
    fail_if_stale(path, fresh)  # the committed outputs against themselves: current
    index = next(i for i, t in execute.deterministic_outputs(saved) if "p-value" in t)
    out = next(o for o in saved.cells[index].outputs if o.output_type == "stream")
    out.text = re.sub(r"p-value (\d\.\d+)", "p-value 0.999", out.text)
    nbformat.write(saved, tmp_path / path.name)
    with pytest.raises(pytest.fail.Exception, match="python3 -m specref.lessons.execute 02_toy_mrs"):
        fail_if_stale(tmp_path / path.name, fresh)


def test_figures_and_progress_lines_are_not_compared():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x")])
    nb.cells[0].outputs = [nbformat.v4.new_output("stream", name="stdout", text="counts 3 4\n"),
                           nbformat.v4.new_output("stream", name="stderr", text="took 3.1 s\n"),
                           nbformat.v4.new_output("display_data", data={"image/png": "AAAA", "text/plain": "<Figure>"})]
    assert execute.deterministic_outputs(nb) == [(0, "counts 3 4\n")]


# ---------------------------------------------------------------- specref.lessons.plots, the notebooks' plots

def imported_by(module: str) -> set[str]:
    """The gguf, specref and matplotlib modules in sys.modules after importing `module` in a fresh interpreter."""
    code = (f"import sys, {module}; "
            "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in ('gguf', 'specref', 'matplotlib'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}).stdout
    return set(out.split())


def test_plots_module_does_not_import_the_model():
    loaded = imported_by("specref.lessons.plots")
    assert "specref.lessons.plots" in loaded
    model_code = sorted(m for m in loaded if m == "gguf" or m.startswith(("gguf.", "specref.smollm2", "specref.apps")))
    assert not model_code, f"importing specref.lessons.plots imported {model_code}"


@pytest.mark.default_cases("02_toy_mrs", "08_trees")
@pytest.mark.parametrize("name", QUICK_NOTEBOOKS)
def test_quick_notebooks_load_no_model_code(name):
    """The first code cell of notebooks 01-04 (their imports), run in a fresh interpreter, imports
    neither specref.smollm2 nor gguf."""
    nb = nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4)
    imports = next(c.source for c in nb.cells if c.cell_type == "code")
    code = (f"exec({imports!r}); import sys; "
            "print('loaded:', *(m for m in sys.modules if m.split('.')[0] == 'gguf' or m.startswith('specref.smollm2')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=ROOT / "notebooks", env={**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg"}).stdout
    loaded = out.splitlines()[-1].split()[1:]  # the cell prints lines of its own before
    assert not loaded, f"{name}'s imports load the model's code: {sorted(loaded)}"


# ---------------------------------------------------------------- specref.lessons.quick, the notebooks' switch

@pytest.mark.parametrize("value, expected", [
    (None, False), ("", False), ("0", False), ("false", False), ("No", False), (" off ", False),
    ("1", True), ("true", True), ("YES", True), ("on", True),
])
def test_quick_mode_values(value, expected):
    assert quick_mode({} if value is None else {"SPECREF_QUICK": value}) is expected


@pytest.mark.parametrize("value", ["2", "quick", "ture", "-1"])
def test_quick_mode_rejects_unknown_values(value):
    with pytest.raises(ValueError, match="SPECREF_QUICK=.* is not recognised"):
        quick_mode({"SPECREF_QUICK": value})


def test_quick_mode_reads_the_environment(monkeypatch):
    monkeypatch.setenv("SPECREF_QUICK", "1")
    assert quick_mode() is True
    monkeypatch.delenv("SPECREF_QUICK")
    assert quick_mode() is False


def test_quick_module_imports_nothing_heavy():
    code = ("import sys, specref.lessons.quick; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('numpy', 'scipy', 'matplotlib', 'specref')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}).stdout
    assert out.strip() == "['specref', 'specref.lessons', 'specref.lessons.quick']"
