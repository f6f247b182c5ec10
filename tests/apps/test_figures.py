"""`python -m specref figures` regenerates the figures the README and notebooks show."""

from pathlib import Path

import pytest

from specref.apps import figures
from tools import notebook_screenshots

COMMITTED = {p.name for p in (Path(__file__).parents[2] / "figures").glob("*.png")}


@pytest.mark.slow  # about 15 s: draws every figure
def test_figures_command_writes_every_committed_figure_but_the_model_one(tmp_path):
    """All but chen_figure1.png (it needs the model) and the notebook screenshots (a browser's:
    `python3 -m tools.notebook_screenshots` writes them)."""
    assert figures.main(["--quick", "--skip-model", "--out", str(tmp_path)]) == 0
    written = {p.name for p in tmp_path.glob("*.png")}
    assert written == COMMITTED - {"chen_figure1.png"} - set(notebook_screenshots.OUTPUTS)
    for p in tmp_path.glob("*.png"):
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 10_000, p.name
