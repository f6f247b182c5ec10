"""The notebooks as a learner sees them: JupyterLab in headless Chromium, Run All, the sliders moved
with the keyboard.

One JupyterLab server (127.0.0.1, a random free port, a token) serves a temporary copy of the
notebooks; SPECREF_QUICK=1 is in its environment, so its kernels run in quick mode.  For each
notebook: opening it must not mark it modified (its kernel metadata is what JupyterLab writes),
Run All must finish with no error output, and the printed outputs it leaves must be the committed
ones (the staleness check of tests/apps/test_notebooks.py, which skips the notebooks this session
runs here, so that each runs once).  These runs take minutes, so they are marked slow.  Notebook
04: alpha, gamma, c and c_hat are moved with the arrow keys, and the plot and the printed numbers
must change to the model's numbers for the new values; the slider tracks must be equally long,
aligned and long enough for every step.
Notebook 05: the generated code in the side-by-side tables must be left-aligned.

Needs Debian's chromium and chromium-driver, selenium and JupyterLab (`.ci/run` installs them).
Without them every test here is skipped with a one-line reason naming what is missing, unless
SPECREF_REQUIRE_BROWSER=1 (as `.ci/run` sets it), which makes them fail instead.
"""

import contextlib
import io
import os
import subprocess
import sys
import time
from pathlib import Path

import matplotlib.image
import numpy as np
import pytest

from specref.lessons import execute, widgets
from tests.apps import jupyterlab_browser as lab_browser
from tests.apps import test_notebooks

NOTEBOOKS = ["00_why_fast", "01_theorem1", "02_toy_mrs", "03_chi_square", "04_speedup_model", "05_real_model",
            "06_making_a_draft", "07_block_verification", "08_trees"]
ROOT = Path(__file__).resolve().parents[2]
RUN_TIMEOUT = 150  # seconds for Run All of one notebook in quick mode (the slowest takes about 45 s alone)
MODEL_RUN_TIMEOUT = 600  # the notebooks that load the model: 06 took up to 290 s headless on a busy machine
MODEL_NOTEBOOKS = ("00_why_fast", "05_real_model", "06_making_a_draft")
# one JupyterLab and one Chromium (the module's fixtures) for every test here: pytest-xdist keeps them in one worker
pytestmark = pytest.mark.xdist_group("jupyterlab")


@pytest.fixture(scope="module")
def lab():
    reason = lab_browser.missing()
    if reason and lab_browser.required():
        pytest.fail(f"{reason} ({lab_browser.REQUIRE}=1)", pytrace=False)
    if reason:
        pytest.skip(reason)
    server = lab_browser.Lab(env={"SPECREF_QUICK": "1"})
    try:
        yield server.start()
    finally:
        server.stop()


@pytest.fixture(scope="module")
def browser(lab):
    b = lab_browser.Browser()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture
def notebook(lab, browser, request):
    """Open notebooks/NAME.ipynb, check it is not marked modified, Run All; the kernel is shut down after."""
    name = f"{request.param}.ipynb"
    try:
        state = browser.open_notebook(lab, name)
        time.sleep(1.0)  # JupyterLab writes the kernel's metadata into the model once the kernel has answered
        state = browser.state()
        assert not state["dirty"], f"{name} is marked modified as soon as it opens: its kernel metadata differs"
        state = browser.run_all(MODEL_RUN_TIMEOUT if request.param in MODEL_NOTEBOOKS else RUN_TIMEOUT)
        errors = [f"cell {c['index']}: {e}" for c in state["cells"] for e in c["errors"]]
        assert not errors, f"{name}: error output:\n" + "\n".join(errors)
        not_run = [c["index"] for c in state["cells"] if c["count"] is None]
        assert not not_run, f"{name}: cells not run: {not_run}"
        # its printed outputs, as Run All left them, against the committed ones (what the headless run checks
        # on a machine without a browser: tests/apps/test_notebooks.py skips the notebooks run here)
        fresh = execute.tidy(browser.notebook())
        assert any(text for _, text in execute.deterministic_outputs(fresh)), f"{name}: no printed output read back"
        test_notebooks.fail_if_stale(ROOT / "notebooks" / name, fresh)
        yield state
    finally:
        with contextlib.suppress(OSError):  # a server that died has no kernels left; keep the test's own error
            lab.shutdown_kernels()


@pytest.mark.slow
@pytest.mark.parametrize("notebook", [n for n in NOTEBOOKS if n not in ("04_speedup_model", "05_real_model")],
                         indirect=True)
def test_notebook_runs_in_jupyterlab(notebook, browser):
    assert notebook["cells"]
    if notebook["path"].endswith("01_theorem1.ipynb"):  # its first cell prints the mode the kernel sees
        first = browser.js("return document.querySelector('.jp-OutputArea-output').textContent;")
        assert first.strip().startswith("quick mode"), f"SPECREF_QUICK=1 did not reach the kernel: {first!r}"


def _changed_fraction(png_a: bytes, png_b: bytes) -> float:
    a, b = (matplotlib.image.imread(io.BytesIO(x), format="png") for x in (png_a, png_b))
    if a.shape != b.shape:
        return 1.0
    return float(np.mean(np.any(np.abs(a - b) > 1e-3, axis=-1)))


def _panel_text(values: dict) -> str:
    return widgets.format_panel(widgets.speedup_panel(**values))


@pytest.mark.slow
@pytest.mark.parametrize("notebook", ["04_speedup_model"], indirect=True)
def test_speedup_sliders_move_plot_and_numbers(notebook, browser):
    from selenium.webdriver.common.keys import Keys

    values = {"alpha": 0.7, "gamma": 4, "c": 0.05, "c_hat": 0.05, "score_slope": 0.25}  # the notebook's call
    text, png = browser.wait("the panel's first drawing", lambda: (lambda t, p: (t, p) if t and p else None)(
        *browser.widget_output()), timeout=30)
    assert text == _panel_text(values), "the panel's printed numbers are not the model's for its first setting"
    assert png, "the panel shows no plot"

    # the tracks: equally long, aligned, at least 2 px per step of each slider
    tracks = {name: browser.js("const r = arguments[0].querySelector('.noUi-target').getBoundingClientRect();"
                               "return [r.left, r.width];", browser.slider(name)) for name in values}
    lefts, widths = zip(*tracks.values())
    assert max(lefts) - min(lefts) <= 1 and max(widths) - min(widths) <= 1, f"slider tracks differ: {tracks}"
    steps = {"alpha": 99, "gamma": 15, "c": 200, "c_hat": 200, "score_slope": 100}
    for name, n in steps.items():
        assert tracks[name][1] >= 2 * n, f"{name}: {n} steps on a {tracks[name][1]:.0f} px track"

    moves = [  # slider, key, presses, new value, what its readout shows
        ("alpha", Keys.ARROW_RIGHT, 10, 0.8, "0.80"),
        ("gamma", Keys.ARROW_RIGHT, 2, 6, "6"),
        ("c", Keys.ARROW_RIGHT, 10, 0.1, "0.100"),
        ("c_hat", Keys.ARROW_LEFT, 10, 0.0, "0.000"),
    ]
    for name, key, presses, value, readout in moves:
        browser.press_on_slider(name, key, presses)
        values[name] = value
        expected = _panel_text(values)
        text_now, png_now = browser.wait(
            f"the panel to show {name} = {readout}",
            lambda: (lambda t, p: (t, p) if t == expected else None)(*browser.widget_output()), timeout=30)
        assert browser.slider_value(name) == readout
        changed = _changed_fraction(png, png_now)
        assert changed > 0.002, f"moving {name} changed {changed:.2%} of the plot's pixels"
        lines, lines_now = text.splitlines(), text_now.splitlines()
        if name == "c_hat":  # only the operations factor depends on c_hat
            assert [a != b for a, b in zip(lines, lines_now)] == [True, False, False, True] + [False] * 5
        else:
            assert lines_now[2] != lines[2], f"moving {name} left the walltime improvement unchanged"
        text, png = text_now, png_now


@pytest.mark.slow
@pytest.mark.parametrize("notebook", ["05_real_model"], indirect=True)
def test_generated_code_is_left_aligned(notebook, browser):
    cells = browser.js("""
        const out = [];
        for (const td of document.querySelectorAll('.jp-OutputArea-output table td')) {
          const pre = td.querySelector('pre');
          out.push({td: getComputedStyle(td).textAlign, pre: pre ? getComputedStyle(pre).textAlign : null,
                    space: pre ? getComputedStyle(pre).whiteSpace : null});
        }
        return out;""")
    assert len(cells) >= 4, f"expected the two side-by-side tables (4 cells), found {len(cells)}"
    for c in cells:
        assert c["pre"] is not None, "a table cell without its generated text"
        assert c["td"] in ("left", "start") and c["pre"] in ("left", "start"), f"table text is not left-aligned: {c}"
        assert c["space"] == "pre-wrap", f"indentation is not kept: white-space {c['space']}"


# ---------------------------------------------------------------- skipping without a browser, failing in CI

def test_a_missing_browser_is_named_and_the_switch_reads_only_0_or_1(monkeypatch, tmp_path):
    monkeypatch.setattr(lab_browser, "CHROMIUM", str(tmp_path / "chromium"))
    assert lab_browser.missing().startswith(f"{tmp_path / 'chromium'} not found; ")
    assert "chromium-driver" in lab_browser.missing()
    assert [lab_browser.required(e) for e in ({}, {"SPECREF_REQUIRE_BROWSER": "0"}, {"SPECREF_REQUIRE_BROWSER": "1"})] \
        == [False, False, True]
    with pytest.raises(ValueError, match="not recognised"):
        lab_browser.required({"SPECREF_REQUIRE_BROWSER": "yes please"})


@pytest.mark.slow  # two pytest processes, about 6 s
def test_without_a_browser_the_test_skips_unless_required(tmp_path):
    """The `lab` fixture's decision, on a machine where Chromium is missing: skip, or fail under CI's switch."""
    test = tmp_path / "test_needs_lab.py"
    test.write_text("import tests.apps.jupyterlab_browser as lab_browser\n"
                    f"lab_browser.CHROMIUM = {str(tmp_path / 'chromium')!r}\n"
                    "from tests.apps.test_browser import lab  # noqa: F401\n\n"
                    "def test_it(lab):\n    pass\n")
    for value, outcome in (("0", "1 skipped"), ("1", "1 error")):
        result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", str(test)],
                                capture_output=True, text=True, cwd=tmp_path,
                                env={**os.environ, "PYTHONPATH": str(ROOT), "SPECREF_REQUIRE_BROWSER": value})
        assert outcome in result.stdout, result.stdout + result.stderr
        assert "chromium not found" in result.stdout, result.stdout
