"""The notebooks are all there, and specref.quick, the switch they read (SPECREF_QUICK=1: small sizes).

That every notebook runs top to bottom on a fresh kernel in quick mode, with no error output, is
tests/apps/test_browser.py's job: it runs each one with Run All in JupyterLab in Chromium, as a
learner sees it (an nbclient run of each notebook here as well took another 2-4 minutes of every
CI run and checked nothing more).  tests/apps/test_notebook_pairs.py checks that each
notebooks/NN_name.py and its .ipynb have the same cells.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from specref.quick import quick_mode

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.py"))
EXPECTED = ["01_theorem1", "02_toy_mrs", "03_chi_square", "04_speedup_model", "05_real_model", "06_making_a_draft"]


def test_all_notebooks_present():
    assert [p.stem for p in NOTEBOOKS] == EXPECTED
    assert [p.with_suffix(".ipynb").exists() for p in NOTEBOOKS] == [True] * len(EXPECTED)


def test_the_browser_test_runs_every_notebook():
    from tests.apps import test_browser
    assert test_browser.NOTEBOOKS == EXPECTED


# ---------------------------------------------------------------- specref.quick, the notebooks' switch

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
    code = ("import sys, specref.quick; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('numpy', 'scipy', 'matplotlib', 'specref')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}).stdout
    assert out.strip() == "['specref', 'specref.quick']"
